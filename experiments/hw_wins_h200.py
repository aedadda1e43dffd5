"""Wins on the H200: the calibrated simulator chooses, the GPU confirms (docs/fidelity.md).

``--phase plan`` (CPU): for every workload of ``hw_fidelity_h200.WORKLOADS`` the calibrated,
    kernel-aware event simulator (fitted on the kernel tables and the co-run matrix only) scores a
    candidate grid (the Macro cut, the attention stage without reuse, a layer split; every split
    of the 128 partitionable SMs in steps of 16; m = 2 and 4; 1 and 2 streams per stage) and keeps
    its K best predictions, chosen BEFORE any of them runs -> ``--configs`` (the temporal baseline
    first). The overlap ceiling of each workload comes from its measured temporal makespan.
``--phase device`` (GPU): ``hw_fidelity_h200.py --phase validate`` on that file.
``--phase analyze`` (CPU): ``experiments/results/hw_wins_h200.json``: per workload the measured
    temporal time, the configuration the simulator chose (``predicted_best``) and its
    ``measured_speedup``, the best measured of the top K (``best_of_k_measured_speedup``), the
    predicted speedups, and the ceiling; and ``hw_wins_h200.png``.

Units: µs, SMs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

import hw_fidelity_h200 as F  # noqa: E402

OUTDIR = os.path.join(F.FIDELITY, "wins")


def candidates(name: str) -> list[dict]:
    """The candidate grid of one workload (plan entries as ``hw_fidelity_h200`` reads them)."""
    from subgpu_jax.space.config import workload_config

    wl = F.sim_workload(name)
    g = wl.graph(1)
    fa = [k.name for k in g.kernels if k.category == "attn_full"][-1]
    after = g.kernels[g.index(fa) + 1].name
    R = wl.batch
    designs = [("macro", [fa, after], 1, [(a, 128 - a) for a in range(16, 128, 16)]),
               ("attn_stage_w0", [fa, after], 0,
                [(a, b, 128 - a - b) for a in (24, 32, 48) for b in (48, 64, 80)
                 if 128 - a - b >= 16]),
               ("layer_split", [g.kernels[g.n // 2].name], 0,
                [(a, 128 - a) for a in range(32, 112, 16)])]
    out = []
    for dname, starts, w, splits in designs:
        for alloc in splits:
            for m in (2, 4):
                if R % m:
                    continue
                for k in (1, 2):
                    try:
                        cfg = workload_config(wl, starts, list(alloc), R // m, bool(w))
                    except ValueError:
                        continue
                    out.append({"name": f"{dname}_{'_'.join(map(str, alloc))}_m{m}_k{k}",
                                "mode": "green", "D": cfg.D, "w": cfg.w, "starts": starts,
                                "alloc": list(alloc), "microbatch": R // m,
                                "streams_per_stage": k, "policy": "wavefront"})
    return out


def plan_phase(args) -> int:
    from subgpu_jax.model.hardware import get_hardware
    from subgpu_jax.sim.contention import ContentionModel
    from subgpu_jax.sim.eventsim import simulate

    fits = F.load_fitdata(args.data, list(F.WORKLOADS))
    ref = "gptoss120b_ref_g2048"
    copy_curve = fits[ref]["bw_curve"]
    with open(os.path.join(F.RESULTS, "hw_fidelity_h200.json")) as fh:
        params = json.load(fh)["fit"]["params"]
    hw0 = get_hardware("H200")
    plan, preds = {}, {}
    for w in args.workloads:
        cal = F.build_calibration(w, fits[w], copy_curve)
        setup = cal.bind(hw0)  # the patched GPU, the calibration and its L2 policy
        hw, cache = setup.hw, setup.cache
        model = ContentionModel(calibration=setup.calibration, **params)
        wl = F.sim_workload(w)
        rows = []
        for d in candidates(w):
            g, cfg, _ = F._cfg_sim(wl, d, hw)
            t = float(simulate(g, cfg, hw, model, cache=cache, record=False,
                               validate=False).makespan)
            rows.append((t, d))
        from subgpu_jax.space.config import temporal_of
        t0 = float(simulate(wl.graph(1), temporal_of(wl), hw, model, cache=cache,
                            record=False).makespan)
        rows.sort(key=lambda r: r[0])
        top = [dict(d, predicted_us=t, predicted_speedup=t0 / t) for t, d in rows[:args.top]]
        plan[w] = [{"name": "temporal", "mode": "temporal", "D": 1, "predicted_us": t0}] + top
        preds[w] = {"temporal_predicted_us": t0, "candidates": len(rows),
                    "all": [{"name": d["name"], "predicted_us": t} for t, d in rows]}
        print(f"{w}: temporal {t0:.0f} µs predicted; top {args.top}: " + ", ".join(
            f"{d['name']} {d['predicted_speedup']:.3f}x" for d in top), flush=True)
    os.makedirs(args.outdir, exist_ok=True)
    with open(args.configs, "w") as fh:
        json.dump(plan, fh, indent=1)
    with open(os.path.join(args.outdir, "predictions.json"), "w") as fh:
        json.dump(preds, fh, indent=1)
    return 0


def analyze_phase(args) -> int:
    from subgpu_jax.sim.ceiling import overlap_ceiling

    with open(args.configs) as fh:
        plan = json.load(fh)
    corun = _corun_ceiling()
    out = {"protocol": "top-K chosen by the calibrated simulator before measurement; "
                       "K = %d" % args.top, "gemm": args.gemm, "fit_data": args.data,
           "elementwise": args.elementwise, "lane_priority": args.lane_priority,
           "workloads": {}}
    for w, cfgs in plan.items():
        p = os.path.join(args.outdir, f"validate_{w}.json")
        if not os.path.exists(p):
            continue
        with open(p) as fh:
            meas = {r["name"]: r for r in json.load(fh)["rows"] if "measured" in r}
        if "temporal" not in meas:
            continue
        T = meas["temporal"]["measured"]["makespan_us"]
        chosen = cfgs[1]
        ms = [(meas[c["name"]]["measured"]["makespan_us"], c) for c in cfgs[1:]
              if c["name"] in meas]
        wl = F.sim_workload(w)
        m = wl.batch // chosen["microbatch"]
        ceil = overlap_ceiling(wl.graph(1), wl.hw, T, wl.graph(m))
        best = min(ms, key=lambda x: x[0]) if ms else (None, None)
        out["workloads"][w] = {
            "temporal_measured_us": T, "temporal_predicted_us": cfgs[0]["predicted_us"],
            "predicted_best": chosen,
            "measured_us": meas[chosen["name"]]["measured"]["makespan_us"]
            if chosen["name"] in meas else None,
            "measured_speedup": (T / meas[chosen["name"]]["measured"]["makespan_us"])
            if chosen["name"] in meas else None,
            "predicted_speedup": chosen["predicted_speedup"],
            "best_of_k": best[1]["name"] if best[1] else None,
            "best_of_k_measured_speedup": T / best[0] if best[0] else None,
            "top_k": [{"name": c["name"], "predicted_speedup": c["predicted_speedup"],
                       "measured_speedup": T / x} for x, c in ms],
            "ceiling": ceil, "corun_ceiling": corun.get(w)}
        if args.explored:
            p2 = os.path.join(args.explored, f"validate_{w}.json")
            if os.path.exists(p2):
                with open(p2) as fh:
                    ex = {r["name"]: r["measured"]["makespan_us"]
                          for r in json.load(fh)["rows"] if "measured" in r}
                if "temporal" in ex:
                    out["workloads"][w]["explored"] = {
                        "note": "measured outside the simulator's top K, with its own "
                                "temporal run (not predictions)",
                        "temporal_measured_us": ex["temporal"],
                        "measured_speedup": {n: ex["temporal"] / v for n, v in ex.items()
                                             if n != "temporal"}}
        for other in args.also or ():
            label, folder = other.split("=", 1)
            p3 = os.path.join(folder, f"validate_{w}.json")
            if os.path.exists(p3):
                with open(p3) as fh:
                    ov = json.load(fh)
                om = {r["name"]: r["measured"]["makespan_us"] for r in ov["rows"] if "measured" in r}
                if "temporal" in om:
                    out["workloads"][w].setdefault("other_runs", {})[label] = {
                        "lane_priority": ov.get("lane_priority", "off (before the option)"),
                        "collectives": ov.get("collectives", "sleep (before the option)"),
                        "attention": ov.get("attention", "auto (before the option)"),
                        "temporal_measured_us": om["temporal"],
                        "measured_speedup": {c["name"]: om["temporal"] / om[c["name"]]
                                             for c in cfgs[1:] if c["name"] in om}}
        s = out["workloads"][w]
        print(f"{w:22s} temporal {T:9.0f} µs; chose {chosen['name']:30s} predicted "
              f"{s['predicted_speedup']:.3f}x measured {s['measured_speedup'] or 0:.3f}x; best "
              f"of {len(ms)} {s['best_of_k_measured_speedup'] or 0:.3f}x; ceiling "
              f"{ceil['ceiling_speedup_m']:.2f}x (m={m})")
    with open(os.path.join(F.RESULTS, "hw_wins_h200.json"), "w") as fh:
        json.dump(out, fh, indent=1)
    _figure(out)
    return 0


def _corun_ceiling() -> dict:
    """The measured two-stream ceiling of shared/calibration (vendored in tests/data), by
    workload: the best bound_speedup at m = 1 and m = 2."""
    import csv
    path = os.path.join(os.path.dirname(__file__), "..", "tests", "data",
                        "h200_corun_ceiling.csv")
    if not os.path.exists(path):
        return {}
    best: dict = {}
    with open(path) as fh:
        for r in csv.DictReader(fh):
            key = {"ref_g2048_m1": "gptoss120b_ref_g2048", "ref_g2048_m2": "gptoss120b_ref_g2048",
                   "ref_g512_m1": "gptoss120b_ref_g512",
                   "llama70_b512_m1": "llama70b_tp8_g512"}.get(r["workload"])
            if key is None:
                continue
            tag = "m2" if r["workload"].endswith("m2") else "m1"
            v = float(r["bound_speedup"])
            d = best.setdefault(key, {})
            if v > d.get(f"best_{tag}", 0.0):
                d[f"best_{tag}"] = v
                d[f"split_{tag}"] = f"{r['attn_sms']}/{r['rest_sms']}"
    return best


def _figure(out: dict) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ws = list(out["workloads"])
    if not ws:
        return
    fig, ax = plt.subplots(figsize=(9, 4))
    xs = range(len(ws))
    s = [out["workloads"][w] for w in ws]
    ax.bar([x - 0.3 for x in xs], [v["predicted_speedup"] for v in s], 0.2,
           label="simulator's choice, predicted")
    ax.bar([x - 0.1 for x in xs], [v["measured_speedup"] or 0 for v in s], 0.2,
           label="simulator's choice, measured")
    ax.bar([x + 0.1 for x in xs], [v["best_of_k_measured_speedup"] or 0 for v in s], 0.2,
           label="best of top K, measured")
    ax.bar([x + 0.3 for x in xs], [min(2.0, v["ceiling"]["ceiling_speedup_m"]) for v in s], 0.2,
           label="ceiling (HBM floor, m of the choice)")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(list(xs))
    ax.set_xticklabels(ws, rotation=15, fontsize=8)
    ax.set_ylabel("speedup over temporal")
    ax.set_title("H200: SubGPU vs temporal (measured unless stated)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(os.path.join(F.RESULTS, "hw_wins_h200.png"), dpi=110)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--phase", choices=("plan", "analyze"), required=True)
    ap.add_argument("--data", default=F.FIDELITY,
                    help="folder of the fit data (fitdata_*.json) the simulator is calibrated on")
    ap.add_argument("--outdir", default=OUTDIR,
                    help="folder of configs.json, predictions.json and the validate_*.json runs")
    ap.add_argument("--configs", default=None, help="default: OUTDIR/configs.json")
    ap.add_argument("--gemm", default="stock", help="GEMM policy the device runs used (recorded)")
    ap.add_argument("--explored", default=None,
                    help="folder of validate_*.json runs outside the top K (reported apart)")
    ap.add_argument("--elementwise", default="torch",
                    help="elementwise kernels the device runs used (recorded)")
    ap.add_argument("--lane-priority", default="off",
                    help="stream-priority policy the device runs used (recorded)")
    ap.add_argument("--also", nargs="*", default=None, metavar="LABEL=DIR",
                    help="analyze: other runs of the same configurations (validate_<w>.json "
                         "in DIR), reported under other_runs.LABEL")
    ap.add_argument("--workloads", nargs="+", default=list(F.WORKLOADS))
    ap.add_argument("--top", type=int, default=3, help="K configurations per workload (>= 1)")
    a = ap.parse_args()
    a.configs = a.configs or os.path.join(a.outdir, "configs.json")
    if a.top < 1:
        ap.error("--top must be >= 1")
    bad = [w for w in a.workloads if w not in F.WORKLOADS]
    if bad:
        ap.error(f"--workloads: unknown {bad}; allowed: {', '.join(F.WORKLOADS)}")
    return plan_phase(a) if a.phase == "plan" else analyze_phase(a)


if __name__ == "__main__":
    sys.exit(main())
