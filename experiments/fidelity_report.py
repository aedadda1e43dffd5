"""Statistics, table and figure of the measured-vs-predicted analysis of the H200 fidelity
experiments (``hw_fidelity_h200.py --phase analyze`` and ``hw_validate_h200.py``): Kendall tau,
per-workload error statistics, the printed summary and the scatter plots.

Errors are relative: predicted / measured - 1 (makespans in µs).
"""

from __future__ import annotations

import os

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def kendall_tau(a, b) -> float:
    """Kendall tau-b of two equal-length sequences of numbers (``scipy.stats.kendalltau``; ties
    handled by the tau-b correction). Returns a float in [-1, 1]; NaN below 2 elements or when
    a sequence is constant."""
    from scipy.stats import kendalltau
    if len(a) < 2:
        return float("nan")
    return float(kendalltau(a, b).statistic)


def summarize(rows) -> dict:
    """Per-workload statistics: median and max |error| (calibrated, uncalibrated, temporal),
    Kendall tau, and whether the predicted best configuration is the measured best (and how far
    the predicted best is from the measured best, measured)."""
    import numpy as np

    ok = [r for r in rows if r.get("predicted_us")]
    if not ok:
        return {}
    e = [r["predicted_us"] / r["measured_us"] - 1 for r in ok]
    eu = [r["predicted_uncalibrated_us"] / r["measured_us"] - 1 for r in ok]
    for r, a, b in zip(ok, e, eu):
        r["error"], r["error_uncalibrated"] = a, b
    tmp = next((r for r in ok if r["name"] == "temporal"), None)
    best_m = min(ok, key=lambda r: r["measured_us"])
    best_p = min(ok, key=lambda r: r["predicted_us"])
    return {"n": len(ok), "median_abs_error": float(np.median(np.abs(e))),
            "max_abs_error": float(np.max(np.abs(e))),
            "median_abs_error_uncalibrated": float(np.median(np.abs(eu))),
            "max_abs_error_uncalibrated": float(np.max(np.abs(eu))),
            "temporal_error": tmp["error"] if tmp else None,
            "temporal_error_uncalibrated": tmp["error_uncalibrated"] if tmp else None,
            "kendall_tau": kendall_tau([r["measured_us"] for r in ok],
                                       [r["predicted_us"] for r in ok]),
            "kendall_tau_uncalibrated": kendall_tau([r["measured_us"] for r in ok],
                                                    [r["predicted_uncalibrated_us"] for r in ok]),
            "measured_best": best_m["name"], "predicted_best": best_p["name"],
            "predicted_best_is_measured_best": best_m is best_p,
            "predicted_best_vs_measured_best": best_p["measured_us"] / best_m["measured_us"] - 1,
            "best_measured_speedup": (tmp["measured_us"] / best_m["measured_us"]) if tmp else None}


def print_summary(out: dict) -> None:
    """Print one line per workload of ``out["workloads"]`` (the ``summarize`` dicts): n, median
    and max |error|, temporal error, Kendall tau, the uncalibrated median and tau, and the
    measured / predicted best configuration."""
    print(f"\n{'workload':22s} {'n':>3s} {'med|e|':>7s} {'max|e|':>7s} {'temp e':>7s} "
          f"{'tau':>6s} {'unc med':>8s} {'unc tau':>8s}  best meas / pred")
    for w, s in out["workloads"].items():
        if not s:
            continue
        print(f"{w:22s} {s['n']:3d} {s['median_abs_error']:7.1%} {s['max_abs_error']:7.1%} "
              f"{s['temporal_error']:+7.1%} {s['kendall_tau']:6.2f} "
              f"{s['median_abs_error_uncalibrated']:8.1%} {s['kendall_tau_uncalibrated']:8.2f}  "
              f"{s['measured_best']} / {s['predicted_best']}")


def figures(out: dict) -> None:
    """Measured-vs-predicted scatter, one panel per workload (calibrated and uncalibrated),
    written to ``experiments/results/hw_fidelity_h200.png``; ``out`` holds ``rows`` and the
    ``summarize`` dicts under ``workloads``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ws = [w for w, s in out["workloads"].items() if s]
    if not ws:
        return
    fig, axes = plt.subplots(1, len(ws), figsize=(4.2 * len(ws), 4.2), squeeze=False)
    for ax, w in zip(axes[0], ws):
        rows = [r for r in out["rows"] if r["workload"] == w and r.get("predicted_us")]
        xm = [r["measured_us"] / 1e3 for r in rows]
        ax.scatter(xm, [r["predicted_us"] / 1e3 for r in rows], label="calibrated", s=22)
        ax.scatter(xm, [r["predicted_uncalibrated_us"] / 1e3 for r in rows], marker="x",
                   label="uncalibrated", s=22)
        for r in rows:
            if r["name"] == "temporal":
                ax.annotate("temporal", (r["measured_us"] / 1e3, r["predicted_us"] / 1e3),
                            fontsize=7)
        lo = min(xm + [r["predicted_us"] / 1e3 for r in rows]) * 0.85
        hi = max(xm + [r["predicted_us"] / 1e3 for r in rows]) * 1.1
        ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
        ax.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], alpha=0.1,
                        color="gray", label="±10%")
        s = out["workloads"][w]
        ax.set_title(f"{w}\nmed|err| {s['median_abs_error']:.1%}, tau {s['kendall_tau']:.2f}",
                     fontsize=9)
        ax.set_xlabel("measured makespan (ms)")
        ax.set_ylabel("predicted makespan (ms)")
        ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(os.path.join(RESULTS, "hw_fidelity_h200.png"), dpi=110)
    plt.close(fig)
