"""validate the calibrated simulator against executed configurations on one H200.

Workload: GPT-OSS 120B (bf16 experts, ``hw_runtime.gpu.workload.hopper_arch``), one rank of the
reference 32-GPU deployment (``graph.REFERENCE_DEPLOYMENT``: attention TP8 x DP4, MoE EP32,
input 32,768, KV history 32,768, all 36 layers) at global batch 2,048 and 512.

Three phases (one script, so that one device call does all the GPU work):

``--phase device`` (on the H200; writes under ``--out``):
    1. ``--calibrate``: ``hw_runtime.gpu.calibrate.calibrate`` (kernel tables on 8..128-SM pools and
       the whole GPU, copy curve, co-run pairs) -> ``calibration_raw.json``.
    2. every configuration of ``--configs`` (JSON written by ``--phase plan``): temporal,
       multi-stream without partitioning, Macro and the others, each captured as one CUDA graph
       per forward pass and timed (``--rounds`` x ``--replays`` replays), plus the pipelined vs
       sequential output check for the configurations flagged ``check`` ->
       ``hw_validate_h200_measured.json`` (rewritten after every configuration).
``--phase plan`` (CPU): choose the configurations with the calibrated simulator (searches
    allocations of the Macro cut and a few other cuts / D) -> ``--configs`` JSON.
``--phase analyze`` (CPU): predictions of the calibrated simulator for every measured
    configuration, errors, speedups, Kendall tau, per-category residence, HBM bandwidth
    fractions; ``experiments/results/hw_validate_h200.json`` and figures.

Units: µs, bytes, SMs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from fidelity_report import kendall_tau  # noqa: E402  (scipy's tau-b)
from subgpu_jax.space.config import temporal_of, workload_config  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
CAL_FILE = os.path.join(RESULTS, "calibration_h200_gptoss120b.json")
BATCHES = (2048, 512)


def _sim_workload(G: int):
    from hw_runtime.gpu.workload import hopper_arch
    from subgpu_jax.model.graph import REFERENCE_DEPLOYMENT
    from subgpu_jax.model.models import MODELS
    from subgpu_jax.model.workload import Workload
    from subgpu_jax.model.hardware import get_hardware

    # measured before the MoE all-gather of attention TP was priced (docs/accounting.md item 3)
    dep = dataclasses.replace(REFERENCE_DEPLOYMENT, global_batch=G, moe_tp_gather=False)
    return Workload.from_model(hopper_arch(MODELS["gpt-oss-120b"]), dep, get_hardware("H200"))


def cfg_to_json(wl, cfg, name: str, mode: str = "green", check: bool = False, **extra) -> dict:
    """A configuration as the device phase reads it (kernel names where segments start)."""
    g = wl.graph(1)
    starts = [g.kernels[i].name for i in range(1, g.n) if cfg.seg_of[i] != cfg.seg_of[i - 1]]
    return {"name": name, "mode": mode, "check": check, "D": cfg.D, "w": cfg.w,
            "starts": starts, "alloc": list(cfg.alloc), "microbatch": cfg.microbatch,
            "policy": cfg.policy, **extra}


def cfg_from_json(wl, d: dict):
    """Inverse of ``cfg_to_json`` (validated by ``Workload.config``; temporal for D = 1)."""
    if d["D"] == 1:
        return temporal_of(wl)
    return workload_config(wl, d["starts"], d["alloc"], d["microbatch"], bool(d["w"]), d["policy"])


# =============================================================================== device phase

def device_phase(args) -> int:
    import torch

    from hw_runtime.gpu.executor import Executor
    from hw_runtime.gpu.workload import TorchWorkload as HwWorkload

    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    res: dict = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "errors": {}, "batches": {}}
    path = os.path.join(args.out, "hw_validate_h200_measured.json")

    def save():
        res["elapsed_s"] = time.time() - t0
        with open(path, "w") as fh:
            json.dump(res, fh, indent=1, default=str)

    res["env"] = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0),
                  "mem": list(torch.cuda.mem_get_info())}
    if args.calibrate:
        from hw_runtime.gpu.calibrate import calibrate
        from hw_runtime.gpu.workload import hopper_arch
        from subgpu_jax.model.graph import REFERENCE_DEPLOYMENT
        from subgpu_jax.model.models import MODELS
        try:
            cal = calibrate(hopper_arch(MODELS["gpt-oss-120b"]),
                            dataclasses.replace(REFERENCE_DEPLOYMENT, moe_tp_gather=False),
                            batches=BATCHES, microbatches=tuple(args.microbatches),
                            reps=args.cal_reps, log=lambda s: print(s, flush=True))
            with open(os.path.join(args.out, "calibration_raw.json"), "w") as fh:
                json.dump(cal, fh, indent=1)
        except Exception as e:  # noqa: BLE001 - record and go on to the validation
            res["errors"]["calibrate"] = f"{e.__class__.__name__}: {e}"
            traceback.print_exc()
        save()
    if not args.configs:
        return 0
    with open(args.configs) as fh:
        plan = json.load(fh)
    for G in BATCHES:
        todo = plan.get(str(G), [])
        if not todo:
            continue
        wl = _sim_workload(G)
        out = res["batches"].setdefault(str(G), {"configs": []})
        try:
            hwl = HwWorkload(wl.graph(1), device="cuda")
            ex = Executor(hwl)
            out["memory"] = hwl.memory
        except Exception as e:  # noqa: BLE001
            res["errors"][f"workload_{G}"] = f"{e.__class__.__name__}: {e}"
            traceback.print_exc()
            save()
            continue
        for d in todo:
            rec = dict(d)
            try:
                cfg = cfg_from_json(wl, d)
                mode = "temporal" if cfg.D == 1 else d["mode"]
                reps = d.get("replays", args.replays)
                m = ex.measure(cfg, mode, rounds=args.rounds, replays=reps, warmup=args.warmup)
                rec["measured"] = m.as_dict()
                if d.get("check"):
                    rec["output_check"] = ex.check_output(cfg, mode)
                print(f"G={G} {d['name']:28s} {m.makespan_us:10.1f} µs  spread "
                      f"{m.spread:.2%}  ({time.time() - t0:.0f} s)", flush=True)
            except Exception as e:  # noqa: BLE001
                rec["error"] = f"{e.__class__.__name__}: {e}"
                traceback.print_exc()
            out["configs"].append(rec)
            save()
            if time.time() - t0 > args.time_limit:
                res["errors"]["time"] = f"stopped after {time.time() - t0:.0f} s"
                break
        del ex, hwl
        import gc
        gc.collect()
        torch.cuda.empty_cache()
    res["finished"] = True
    save()
    return 0


# =============================================================================== plan phase

def plan_phase(args) -> int:
    """Choose the configurations with the calibrated simulator (CPU)."""
    import numpy as np

    from subgpu_jax.model.calibration import load_calibration
    from subgpu_jax.model.setup import GpuSetup
    from subgpu_jax.sim.contention import ContentionModel
    from subgpu_jax.sim.eventsim import simulate
    from subgpu_jax.space.config import AllocSpace
    from subgpu_jax.search.problem import MemoScorer, Problem
    from subgpu_jax.model.workload import Workload as SWorkload
    from subgpu_jax.search.pairwise import allocate_pairwise

    out: dict = {}
    cal = load_calibration(args.calibration) if args.calibration else None
    for G in BATCHES:
        wl = _sim_workload(G)
        setup = cal.bind(wl.hw) if cal else GpuSetup.uncalibrated(wl.hw)
        hw = setup.hw
        model = ContentionModel(calibration=setup.calibration)
        R = wl.batch
        sw = SWorkload.from_model(wl.arch, wl.deploy)
        pb = Problem(sw, hw, setup.duration_model)

        def exact(cfg):
            m = R // cfg.microbatch
            return float(simulate(wl.graph(m), cfg, hw, model, record=False,
                                  validate=False).makespan)

        memo = MemoScorer(exact)
        cfgs = [cfg_to_json(wl, temporal_of(wl), "temporal", check=False)]
        macro = wl.macro_starts()
        g1 = wl.graph(1)
        cands = []  # (name, starts, w, m)
        cands.append(("macro", macro, 1, 2))
        cands.append(("macro_m4", macro, 1, 4))
        ia_s = g1.index("L0.attn")
        ia_f = g1.index("L1.attn")
        cands.append(("attn_full_stage_w0", [ia_f, ia_f + 1], 0, 2))        # D=3, w=0
        cands.append(("two_attn_stages", [ia_s, ia_s + 1, ia_f, ia_f + 1], 1, 2))  # D=4 w=1
        cands.append(("layer_split", [g1.index("L1.rmsnorm")], 0, 2))        # D=2 per layer
        cands.append(("attn_moe", [ia_f, g1.index("L1.router")], 1, 2))  # D=2: attn+oproj
        rows = []
        for name, starts, w, m in cands:
            seg = workload_config(wl, starts, _even(hw, len(starts) + 1 - w), R // m, bool(w)).seg_of
            D = len(starts) + 1 - w
            try:
                if cal:
                    cal.check_graph(wl.graph(m))
                res = allocate_pairwise(pb, seg, D, w, m, exact=memo)
            except ValueError as ex:
                print(f"G={G} {name}: skipped ({ex})", flush=True)
                continue
            cfg = pb.config(seg, D, w, res.alloc, m)
            rows.append((res.makespan_us, name, cfg))
            print(f"G={G} {name:22s} D={D} w={w} m={m} best {list(res.alloc)} "
                  f"{res.makespan_us:10.1f} µs", flush=True)
        t_temp = exact(temporal_of(wl))
        best = min(rows, key=lambda r: r[0])
        print(f"G={G} temporal {t_temp:.1f} µs, best {best[1]} {best[0]:.1f} µs "
              f"({t_temp / best[0]:.3f}x)")
        # measured set: temporal, multistream Macro, Macro at the paper split and the search's
        # allocation, every candidate at its best allocation
        cm = workload_config(wl, macro, [64, 64], R // 2, True)
        cfgs.append(cfg_to_json(wl, cm, "macro_multistream", mode="multistream"))
        cfgs.append(cfg_to_json(wl, cm, "macro_64_64", check=True))
        for t, name, cfg in rows:
            cfgs.append(cfg_to_json(wl, cfg, f"{name}_sim_best", check=(cfg == best[2]),
                                    predicted_us=t))
        out[str(G)] = cfgs
    with open(args.configs, "w") as fh:
        json.dump(out, fh, indent=1)
    print(f"wrote {args.configs}")
    return 0


def _even(hw, D: int) -> list[int]:
    q = hw.sm_quantum
    units = hw.sm_budget // q
    return [q * (units // D + (1 if d < units % D else 0)) for d in range(D)]


# =============================================================================== analyze phase

def analyze_phase(args) -> int:
    import numpy as np

    from subgpu_jax.model.calibration import load_calibration
    from subgpu_jax.sim.contention import ContentionModel
    from subgpu_jax.sim.eventsim import simulate, simulate_streams
    from subgpu_jax.model.graph import CATEGORIES

    with open(args.measured) as fh:
        meas = json.load(fh)
    cal = load_calibration(args.calibration)
    model = ContentionModel(calibration=cal)
    out: dict = {"calibration": os.path.relpath(args.calibration, os.path.dirname(RESULTS)),
                 "measured_file": os.path.basename(args.measured), "batches": {},
                 "errors": meas.get("errors", {})}
    copy_peak = cal.bw_Bps[-1]
    for G, blk in meas["batches"].items():
        wl = _sim_workload(int(G))
        hw = cal.bind(wl.hw).hw
        rows = []
        for d in blk["configs"]:
            if "measured" not in d:
                rows.append({"name": d["name"], "error": d.get("error")})
                continue
            cfg = cfg_from_json(wl, d)
            m = wl.batch // cfg.microbatch
            g = wl.graph(m)
            mode = d["measured"]["mode"]
            if mode == "multistream":
                # no partition: the simulator has no shared-SM mode; model the streams as an
                # even split of all 132 SMs (the hardware schedules CTAs of both dynamically)
                D = cfg.D
                even = tuple(hw.num_sms // D + (1 if d < hw.num_sms % D else 0) for d in range(D))
                cfg_sim = dataclasses.replace(cfg, alloc=even)
                r = simulate(g, cfg_sim, hw, model, record=False, validate=False)
                note = f"no SM partition: modelled as an even split {list(even)} of all SMs"
            else:
                r = simulate(g, cfg, hw, model, record=False)
                note = ""
            r0 = simulate(g, cfg if mode != "multistream" else cfg_sim, wl.hw, ContentionModel(),
                          record=False, validate=False)
            T = d["measured"]["makespan_us"]
            P = float(r.makespan)
            hbm = float(r.bytes_objects)
            rows.append({"name": d["name"], "mode": mode, "D": cfg.D, "w": cfg.w,
                         "starts": d["starts"], "alloc": list(cfg.alloc), "microbatches": m,
                         "measured_us": T, "spread": d["measured"]["spread"],
                         "round_medians_us": d["measured"]["round_medians_us"],
                         "replays": d["measured"]["replays"], "rounds": d["measured"]["rounds"],
                         "predicted_us": P, "error": P / T - 1.0,
                         "predicted_uncalibrated_us": float(r0.makespan),
                         "error_uncalibrated": float(r0.makespan) / T - 1.0,
                         "category_time_sim_us": {k: float(v) for k, v in
                                                  r.category_time.items()},
                         "hbm_bytes_model": hbm,
                         "hbm_frac_of_copy_peak_measured": hbm / (T * 1e-6) / copy_peak,
                         "hbm_frac_of_copy_peak_sim": hbm / (P * 1e-6) / copy_peak,
                         "output_check": d.get("output_check"), "note": note,
                         "graph_nodes": d["measured"].get("graph_nodes")})
        ok = [x for x in rows if "measured_us" in x]
        tmp = next((x for x in ok if x["name"] == "temporal"), None)
        for x in ok:
            if tmp:
                x["speedup_measured"] = tmp["measured_us"] / x["measured_us"]
                x["speedup_predicted"] = tmp["predicted_us"] / x["predicted_us"]
        # measured per-category residence of the temporal pass: isolated whole-GPU kernel times
        # from the calibration x instances (sum over the region's kernels)
        g1 = wl.graph(1)
        cat_meas = {c: 0.0 for c in CATEGORIES}
        for k in g1.kernels:
            t = cal.kernel_time_us(k, hw.num_sms)
            if t is not None:
                cat_meas[k.category] += t * g1.num_regions
        sub = [x for x in ok if x["name"] != "temporal"]
        best = min(sub, key=lambda x: x["measured_us"]) if sub else None
        tau = kendall_tau([x["measured_us"] for x in ok], [x["predicted_us"] for x in ok])
        tau_u = kendall_tau([x["measured_us"] for x in ok],
                            [x["predicted_uncalibrated_us"] for x in ok])
        out["batches"][G] = {
            "rows": rows, "kendall_tau": tau, "kendall_tau_uncalibrated": tau_u,
            "max_abs_error": max(abs(x["error"]) for x in ok) if ok else None,
            "mean_abs_error": float(np.mean([abs(x["error"]) for x in ok])) if ok else None,
            "best_measured": best["name"] if best else None,
            "best_speedup_measured": best.get("speedup_measured") if best else None,
            "temporal_category_measured_isolated_us": cat_meas,
            "memory": blk.get("memory")}
    coruns = []
    for c in cal.coruns:
        try:
            wl = _sim_workload(int(c["global_batch"]))
            hw = cal.bind(wl.hw).hw
            g = wl.graph(int(c["microbatches"]))
            byk = {}
            from subgpu_jax.model.calibration import kernel_key, stored_key
            from subgpu_jax.sim.probe import probe_kernels
            for k in list(g.kernels) + [probe_kernels()[0]]:
                byk.setdefault(kernel_key(k), k)
            ka, kb = byk[stored_key(c["a"]["key"])], byk[stored_key(c["b"]["key"])]
            pa, pb = c["pools"]
            na, nb = c["a"]["launches"], c["b"]["launches"] * c["b_replays"]
            ra = simulate_streams([(pa, [ka] * na)], hw, model, record=False)
            rr = simulate_streams([(pa, [ka] * na), (pb, [kb] * nb)], hw, model, record=False)
            pred_alone = float(ra.makespan)
            pred_co = float(rr.task_end[0])
            coruns.append({**{k: v for k, v in c.items()}, "pred_a_alone_us": pred_alone,
                           "pred_a_corun_us": pred_co,
                           "pred_a_slowdown": pred_co / pred_alone - 1.0,
                           "error_a_corun": pred_co / c["a_corun_us"] - 1.0})
        except Exception as e:  # noqa: BLE001
            coruns.append({"pair": c.get("pair"), "error": f"{e.__class__.__name__}: {e}"})
    out["coruns"] = coruns
    dst = os.path.join(RESULTS, "hw_validate_h200.json")
    with open(dst, "w") as fh:
        json.dump(out, fh, indent=1)
    _figures(out)
    _print_tables(out)
    print(f"wrote {dst}")
    return 0


def _print_tables(out: dict) -> None:
    for G, b in out["batches"].items():
        print(f"\nG={G}: Kendall tau {b['kendall_tau']:.3f} (uncalibrated "
              f"{b['kendall_tau_uncalibrated']:.3f}), max |err| {b['max_abs_error']:.1%}")
        print(f"{'config':28s}{'mode':>12s}{'SMs':>14s}{'m':>3s}{'meas µs':>10s}{'pred µs':>10s}"
              f"{'err':>8s}{'speedup':>9s}{'pred sp':>8s}{'HBM%':>6s}{'spread':>7s}")
        for x in b["rows"]:
            if "measured_us" not in x:
                print(f"{x['name']:28s} ERROR {x.get('error')}")
                continue
            print(f"{x['name']:28s}{x['mode']:>12s}{str(x['alloc']):>14s}{x['microbatches']:3d}"
                  f"{x['measured_us']:10.1f}{x['predicted_us']:10.1f}{x['error']:8.1%}"
                  f"{x.get('speedup_measured', 0):9.3f}{x.get('speedup_predicted', 0):8.3f}"
                  f"{x['hbm_frac_of_copy_peak_measured']:6.0%}{x['spread']:7.1%}")
    for c in out.get("coruns", []):
        if "error" in c:
            print(f"corun {c.get('pair')}: {c['error']}")
        else:
            print(f"corun {c['pair']:24s} A slowdown measured {c['a_slowdown']:+.1%}, predicted "
                  f"{c['pred_a_slowdown']:+.1%}; A co-run err {c['error_a_corun']:+.1%}")


def _figures(out: dict) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bs = list(out["batches"].items())
    fig, axes = plt.subplots(1, len(bs), figsize=(6.5 * len(bs), 5), squeeze=False)
    for ax, (G, b) in zip(axes[0], bs):
        ok = [x for x in b["rows"] if "measured_us" in x]
        xs = [x["measured_us"] / 1e3 for x in ok]
        ys = [x["predicted_us"] / 1e3 for x in ok]
        ax.scatter(xs, ys)
        for x, y, r in zip(xs, ys, ok):
            ax.annotate(r["name"], (x, y), fontsize=7)
        lo, hi = min(xs + ys) * 0.9, max(xs + ys) * 1.1
        ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
        ax.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], alpha=0.1)
        ax.set_xlabel("measured makespan (ms)")
        ax.set_ylabel("calibrated simulator (ms)")
        ax.set_title(f"G={G}: tau={b['kendall_tau']:.2f}, max|err|={b['max_abs_error']:.1%}")
    fig.tight_layout()
    fig.savefig(os.path.join(RESULTS, "hw_validate_h200.png"), dpi=120)
    plt.close(fig)
    fig, axes = plt.subplots(1, len(bs), figsize=(6.5 * len(bs), 4.5), squeeze=False)
    for ax, (G, b) in zip(axes[0], bs):
        ok = [x for x in b["rows"] if "measured_us" in x]
        names = [x["name"] for x in ok]
        ax.barh(names, [x.get("speedup_measured", 0) for x in ok], label="measured", alpha=0.7)
        ax.barh(names, [x.get("speedup_predicted", 0) for x in ok], label="predicted",
                alpha=0.4)
        ax.axvline(1.0, color="k", lw=0.8)
        ax.set_xlabel("speedup over temporal")
        ax.set_title(f"G={G}")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(RESULTS, "hw_validate_h200_speedup.png"), dpi=120)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--phase", choices=("device", "plan", "analyze"), required=True)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--calibrate", action="store_true")
    ap.add_argument("--configs", default=None)
    ap.add_argument("--calibration", default=CAL_FILE)
    ap.add_argument("--measured", default=os.path.join(RESULTS,
                                                       "hw_validate_h200_measured.json"))
    ap.add_argument("--microbatches", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--cal-reps", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--replays", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--time-limit", type=float, default=480.0)
    a = ap.parse_args()
    if a.phase == "device":
        return device_phase(a)
    if a.phase == "plan":
        return plan_phase(a)
    return analyze_phase(a)


if __name__ == "__main__":
    sys.exit(main())
