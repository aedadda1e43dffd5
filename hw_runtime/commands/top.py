"""``subgpu run --from-search DIR --top K``: measure the K best predicted records of every batch
and the temporal baseline, and write the measured frontier beside the predicted one."""

from __future__ import annotations

import json
import os

from hw_runtime.commands.common import gpu_check, json_safe
from hw_runtime.commands.device import note_preset
from hw_runtime.commands.records import record_request, search_records, top_records
from hw_runtime.commands.request import RunRequest
from hw_runtime.commands.run import GpuMeasurer, prepare_run, repredict

__all__ = ["run_top", "plot_measured_frontier"]


def run_top(req: RunRequest) -> int:
    """``subgpu run --from-search DIR --top K`` (``req.from_search``, ``req.top``): measure the
    K best predicted records of every batch and the temporal baseline, write the measured
    frontier beside the predicted one; exit code 0.

    Raises:
        ValueError: K < 1, a search for another GPU, or no GPU with green contexts."""
    if req.top < 1:
        raise ValueError(f"--top must be >= 1, got {req.top}")
    groups = top_records(search_records(req.from_search), req.top, req.workload.hardware,
                         req.from_search, green=req.mode == "green")
    from subgpu_jax.model.checks import out_dir as _out_dir, replaceable_file

    out_dir = str(_out_dir(req.out_dir or req.from_search, "--out-dir"))  # before any GPU work
    for name in ("measured_frontier.json", "measured_frontier.png"):
        replaceable_file(os.path.join(out_dir, name), "--out-dir")
    gpu_check()
    note_preset(req.workload.hardware)
    ks, t, mode, coll = req.kernels, req.timing, req.mode, req.collectives
    rows = []
    gpu = GpuMeasurer()   # one workload and executor per batch, built for its first record
    for G, recs in groups.items():
        for r in recs:
            prep = prepare_run(record_request(req, r))
            wl, cfg = prep.wl, prep.cfg
            ex = gpu.executor(G, wl, ks, coll)
            if r["mode"] == "temporal":
                meas = ex.measure(ex.temporal_config(), "temporal", t.rounds, t.replays,
                                  t.warmup)
            else:
                meas = ex.measure(cfg, mode, t.rounds, t.replays, t.warmup)
            T = meas.makespan_us
            pred = r["makespan_us"]
            if coll != "sleep" or (mode != "green" and r["mode"] != "temporal"):
                # the search predicted green pools with the link time: predict this run as run
                pred = repredict(wl, cfg, prep.dep, prep.model, prep.hw_sim, prep.m, prep.cache,
                                 "temporal" if r["mode"] == "temporal" else mode)
            rows.append({"global_batch": G, "mode": r["mode"], "cuts": r["cuts"],
                         "sms": r["sms"], "microbatch": r["microbatch"], "D": r["D"],
                         "run_mode": mode, "collectives": coll,
                         "predicted_us": pred, "measured_us": T,
                         "predicted_per_user_tok_s": 1e6 / pred,
                         "predicted_per_gpu_tok_s": r["per_gpu_tok_s"] * r["makespan_us"] / pred,
                         "measured_per_user_tok_s": 1e6 / T,
                         "measured_per_gpu_tok_s": r["per_gpu_tok_s"] * r["makespan_us"] / T})
            print(f"G={G:5d} {r['mode']:8s} {r['cuts'] or '-':24s} {str(r['sms']):8s} "
                  f"predicted {pred:9.1f} µs measured {T:9.1f} µs", flush=True)
    gpu.release()
    os.makedirs(out_dir, exist_ok=True)
    from subgpu_jax.app.store import atomic_write

    atomic_write(os.path.join(out_dir, "measured_frontier.json"),
                 json.dumps(json_safe({"search": req.from_search, "top": req.top,
                                       "rows": rows}), indent=1, allow_nan=False), "--out-dir")
    plot_measured_frontier(rows, os.path.join(out_dir, "measured_frontier.png"))
    print(f"wrote {os.path.join(out_dir, 'measured_frontier.json')} and measured_frontier.png")
    return 0


def plot_measured_frontier(rows: list[dict], path: str) -> None:
    """Per-user vs per-GPU throughput: temporal and SubGPU Pareto frontiers, predicted dashed,
    measured solid (one figure, PNG at ``path``)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from subgpu_jax.search.pareto import pareto_front

    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for mode, color in (("temporal", "tab:gray"), ("subgpu", "tab:blue")):
        rs = [r for r in rows if (r["mode"] == "temporal") == (mode == "temporal")]
        for kind, ls in (("predicted", "--"), ("measured", "-")):
            pts = [(r[f"{kind}_per_gpu_tok_s"], r[f"{kind}_per_user_tok_s"]) for r in rs]
            if not pts:
                continue
            idx = pareto_front([(u, g) for g, u in pts])
            fr = sorted(pts[int(i)] for i in idx)
            ax.plot([p[0] for p in fr], [p[1] for p in fr], ls, color=color, marker="o",
                    label=f"{mode} {kind}")
    ax.set_xlabel("per-GPU throughput (tokens/s/GPU)")
    ax.set_ylabel("per-user throughput (tokens/s/user)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    from subgpu_jax.app.viz import save_figure

    save_figure(fig, path, dpi=110)
    plt.close(fig)
