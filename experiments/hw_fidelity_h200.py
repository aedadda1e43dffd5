"""Hardware fidelity on the H200: fit data, validation runs, measured timelines; then the fit and
the measured-vs-predicted analysis (docs/fidelity.md explains the protocol).

Phases (one script, so that each device call does all its GPU work in one go):

``--phase plan`` (CPU): the validation configurations of every workload (``WORKLOADS``): temporal,
    multi-stream without partition, green with D = 2..4, several splits and microbatch counts, 1
    and 2 streams per stage -> ``--configs`` JSON.
``--phase fitdata`` (GPU): the data the model is fitted on, and only that: for every workload the
    kernel time tables on pools of 16..128 SMs and the whole GPU (``calibrate``), the copy
    bandwidth curve, the co-run matrix of kernel classes on 32/96, 64/64, 96/32 (with NVML
    clocks), and the device activities one launch of each op issues (for trace mapping) ->
    ``$OUT/fitdata_<workload>.json``, ``$OUT/corun_matrix.json``.
``--phase validate`` (GPU): every configuration of ``--configs`` captured as a CUDA graph and
    timed; a profiled replay (torch.profiler) of the configurations flagged ``trace``; the output
    check under deterministic settings for those flagged ``check`` -> ``$OUT/validate_<w>.json``.
``--phase analyze`` (CPU): fit the kernel-aware contention model on the fit data only, predict
    every validation configuration (calibrated and uncalibrated), errors, Kendall tau, best
    configurations, per-class analytical vs measured, error breakdown; writes
    ``experiments/results/hw_fidelity_h200.json`` and the scatter plots.

Units: µs, SMs, bytes.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
FIDELITY = os.path.join(RESULTS, "hw_fidelity")

#: The validation workloads: (model, deployment fields). GPT-OSS experts in bf16 (Hopper).
WORKLOADS: dict[str, tuple[str, dict]] = {
    "gptoss120b_ref_g2048": ("gpt-oss-120b", {"global_batch": 2048}),
    "gptoss120b_ref_g512": ("gpt-oss-120b", {"global_batch": 512}),
    "gptoss20b_tp8_g1024": ("gpt-oss-20b", {"num_gpus": 8, "attn_tp": 8, "attn_dp": 1,
                                            "moe_ep": 8, "global_batch": 1024,
                                            "input_len": 8192, "kv_history": 8192}),
    "llama70b_tp8_g512": ("llama-3.1-70b", {"num_gpus": 8, "attn_tp": 8, "attn_dp": 1,
                                            "moe_ep": 1, "global_batch": 512,
                                            "input_len": 4096, "kv_history": 4096}),
    "llama70b_tp8_g256": ("llama-3.1-70b", {"num_gpus": 8, "attn_tp": 8, "attn_dp": 1,
                                            "moe_ep": 1, "global_batch": 256,
                                            "input_len": 8192, "kv_history": 8192}),
}


def sim_workload(name: str):
    """The simulator's ``Workload`` of a validation workload (H200, bf16 experts)."""
    from subgpu_jax.model.graph import Deployment
    from subgpu_jax.model.hardware import get_hardware
    from subgpu_jax.model.models import MODELS
    from subgpu_jax.model.workload import Workload

    def hopper_arch(arch):  # bf16 experts: Hopper has no MXFP4 tensor cores
        return arch if arch.expert_dtype == "bf16" else dataclasses.replace(arch,
                                                                            expert_dtype="bf16")

    model, fields = WORKLOADS[name]
    dep = dataclasses.replace(Deployment(), **fields)
    return Workload.from_model(hopper_arch(MODELS[model]), dep, get_hardware("H200"))


# ================================================================================ plan (CPU)

def plan_configs(name: str) -> list[dict]:
    """The validation configurations of one workload (at least 8; kernel names as cuts).

    temporal; multistream Macro m=2; green Macro (full attention alone on stage 1, w=1) at
    64/64, 48/80, 80/48, 32/96 with m=2, at 64/64 with m=4 and with 2 streams per stage; the
    attention stage without reuse (D=3, 32/64/32); two attention stages (D=4); a layer split
    (D=2, w=0). Each is validated against the workload (infeasible ones are dropped, printed).
    """
    from subgpu_jax.space.config import workload_config

    wl = sim_workload(name)
    g = wl.graph(1)
    full = [k.name for k in g.kernels if k.category == "attn_full"]
    slide = [k.name for k in g.kernels if k.category == "attn_sliding"]
    fa = full[-1]
    ifa = g.index(fa)
    after = g.kernels[ifa + 1].name
    macro = [fa, after]
    R = wl.batch
    out = [{"name": "temporal", "mode": "temporal", "D": 1}]
    cand = [
        ("macro_multistream_m2", "multistream", macro, 1, [64, 64], 2, 1),
        ("macro_64_64_m2", "green", macro, 1, [64, 64], 2, 1),
        ("macro_48_80_m2", "green", macro, 1, [48, 80], 2, 1),
        ("macro_80_48_m2", "green", macro, 1, [80, 48], 2, 1),
        ("macro_32_96_m2", "green", macro, 1, [32, 96], 2, 1),
        ("macro_64_64_m4", "green", macro, 1, [64, 64], 4, 1),
        ("macro_64_64_m2_k2", "green", macro, 1, [64, 64], 2, 2),
        ("attn_stage_w0_32_64_32_m2", "green", macro, 0, [32, 64, 32], 2, 1),
    ]
    if slide:
        isl = g.index(slide[0])
        cand.append(("two_attn_stages_40_16_24_48_m2", "green",
                     [slide[0], g.kernels[isl + 1].name, fa, after], 1, [40, 16, 24, 48], 2, 1))
    else:
        iq = g.index([k.name for k in g.kernels if k.op == "o_proj"][-1])
        cand.append(("attn_oproj_mlp_D3_32_48_48_m2", "green",
                     [fa, g.kernels[iq + 1].name], 0, [32, 48, 48], 2, 1))
    cand.append(("layer_split_64_64_m2", "green",
                 [g.kernels[g.n // 2].name], 0, [64, 64], 2, 1))
    for nm, mode, starts, w, alloc, m, k in cand:
        if R % m:
            print(f"{name}: {nm} skipped (m={m} does not divide R={R})")
            continue
        try:
            cfg = workload_config(wl, starts, alloc, R // m, bool(w))
        except ValueError as e:
            print(f"{name}: {nm} skipped ({e})")
            continue
        out.append({"name": nm, "mode": mode, "D": cfg.D, "w": cfg.w, "starts": list(starts),
                    "alloc": list(cfg.alloc), "microbatch": cfg.microbatch,
                    "streams_per_stage": k, "policy": cfg.policy,
                    "trace": nm in ("macro_64_64_m2",),
                    "check": name.startswith("llama") and nm in ("macro_64_64_m2",
                                                                  "macro_48_80_m2")})
    out[0]["trace"] = True
    return out


def cfg_from_json(wl, d: dict):
    """The ``Config`` of a plan entry (temporal for D = 1)."""
    from subgpu_jax.space.config import temporal_of, workload_config

    if d["D"] == 1:
        return temporal_of(wl)
    cfg = workload_config(wl, d["starts"], d["alloc"], d["microbatch"], bool(d["w"]),
                          d.get("policy", "wavefront"))
    k = int(d.get("streams_per_stage", 1))
    if k != 1 and hasattr(cfg, "streams_per_stage"):
        cfg = dataclasses.replace(cfg, streams_per_stage=k)
    return cfg


def plan_phase(args) -> int:
    plan = {w: plan_configs(w) for w in args.workloads}
    with open(args.configs, "w") as fh:
        json.dump(plan, fh, indent=1)
    for w, cs in plan.items():
        print(f"{w}: {len(cs)} configurations")
    print(f"wrote {args.configs}")
    return 0


# ============================================================================ device phases

def _torch_workload(wl, m: int = 1):
    from hw_runtime.gpu.workload import TorchWorkload
    return TorchWorkload(wl.graph(m), device="cuda")


def _free():
    import torch
    gc.collect()
    torch.cuda.empty_cache()


def fitdata_phase(args) -> int:
    """Kernel tables (+ copy curve) per workload, the co-run matrix, activity counts."""
    import torch
    from hw_runtime.gpu.calibrate import calibrate
    from hw_runtime.gpu.corun import corun_matrix, event_latency
    from hw_runtime.gpu.profile import op_activity_counts
    from hw_runtime.gpu.executor import derive_workload

    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    log = lambda s: print(f"[{time.time() - t0:6.1f} s] {s}", flush=True)  # noqa: E731
    for name in args.workloads:
        wl = sim_workload(name)
        try:
            cal = calibrate(wl.arch, wl.deploy, batches=(wl.deploy.global_batch,),
                            microbatches=(1, 2, 4), pools=(16, 32, 48, 64, 80, 96, 128),
                            reps=5, coruns=False, copy_curve=(name == args.workloads[0]),
                            log=log)
            base = _torch_workload(wl, 1)
            counts = {1: op_activity_counts(base)}
            for m in (2, 4):
                if wl.batch % m == 0:
                    counts[m] = op_activity_counts(derive_workload(base, wl.graph(m)))
            cal["activity_counts"] = {str(k): v for k, v in counts.items()}
            if name == args.corun_workload:
                wl2 = derive_workload(base, wl.graph(2)) if wl.batch % 2 == 0 else base
                cm = corun_matrix(wl2, log=log)
                cm["event_latency"] = event_latency(torch)
                with open(os.path.join(args.out, "corun_matrix.json"), "w") as fh:
                    json.dump(cm, fh, indent=1)
                del wl2
            del base
        except Exception as e:  # noqa: BLE001 - record, go on with the next workload
            traceback.print_exc()
            cal = {"error": f"{e.__class__.__name__}: {e}"}
        with open(os.path.join(args.out, f"fitdata_{name}.json"), "w") as fh:
            json.dump(cal, fh)
        _free()
        log(f"{name}: fit data written")
        if time.time() - t0 > args.time_limit:
            log("time limit reached")
            break
    return 0


def corun_phase(args) -> int:
    """The co-run matrix (and the event-latency probe) alone, on ``--corun-workload`` at m=2."""
    import torch
    from hw_runtime.gpu.corun import corun_matrix, event_latency
    from hw_runtime.gpu.executor import derive_workload

    os.makedirs(args.out, exist_ok=True)
    wl = sim_workload(args.corun_workload)
    base = _torch_workload(wl, 1)
    wl2 = derive_workload(base, wl.graph(2))
    cm = corun_matrix(wl2, log=print)
    cm["event_latency"] = event_latency(torch)
    cm["workload"] = args.corun_workload
    with open(os.path.join(args.out, "corun_matrix.json"), "w") as fh:
        json.dump(cm, fh, indent=1)
    return 0


def validate_phase(args) -> int:
    """Measure every configuration of ``--configs``; profile and check the flagged ones."""
    from hw_runtime.gpu.executor import Executor
    from hw_runtime.gpu.profile import profile_replays

    os.makedirs(args.out, exist_ok=True)
    with open(args.configs) as fh:
        plan = json.load(fh)
    t0 = time.time()
    for name in args.workloads:
        wl = sim_workload(name)
        res = {"workload": name, "rows": [], "errors": {}}
        path = os.path.join(args.out, f"validate_{name}.json")

        def save():
            with open(path, "w") as fh:
                json.dump(res, fh)
        try:
            base = _torch_workload(wl, 1)
            ex = Executor(base)
            res["memory"] = base.memory
        except Exception as e:  # noqa: BLE001
            res["errors"]["workload"] = f"{e.__class__.__name__}: {e}"
            save()
            continue
        todo = [d for d in plan[name] if d.get("check")] if args.checks_only else plan[name]
        if args.checks_only:
            path = os.path.join(args.out, f"outcheck_{name}.json")
        for d in todo:
            rec = dict(d)
            try:
                cfg = cfg_from_json(wl, d)
                if args.checks_only:
                    k = int(d.get("streams_per_stage", 1))
                    rec["output_check_deterministic"] = ex.check_output(
                        cfg, "green", deterministic=True, streams_per_stage=k, replays=3)
                    rec["output_check_multistream"] = ex.check_output(
                        cfg, "multistream", deterministic=True, streams_per_stage=k, replays=3)
                    res["rows"].append(rec)
                    save()
                    print(f"{name} {d['name']}: {rec['output_check_deterministic']}", flush=True)
                    continue
                mode = "temporal" if cfg.D == 1 else d["mode"]
                k = int(d.get("streams_per_stage", 1))
                m = ex.measure(cfg, mode, rounds=args.rounds, replays=args.replays,
                               warmup=args.warmup, streams_per_stage=k)
                rec["measured"] = m.as_dict()
                if d.get("trace"):
                    rec["profile"] = profile_replays(ex, cfg, mode, replays=1,
                                                     streams_per_stage=k)
                if d.get("check"):
                    rec["output_check"] = ex.check_output(cfg, mode, streams_per_stage=k,
                                                          replays=3)
                print(f"{name:22s} {d['name']:30s} {m.makespan_us:10.1f} µs spread "
                      f"{m.spread:.2%} ({time.time() - t0:.0f} s)", flush=True)
            except Exception as e:  # noqa: BLE001
                traceback.print_exc()
                rec["error"] = f"{e.__class__.__name__}: {e}"
            res["rows"].append(rec)
            save()
        del ex, base
        _free()
        if time.time() - t0 > args.time_limit:
            res["errors"]["time"] = "time limit reached"
            save()
            break
    return 0


# ============================================================================ analyze (CPU)

def kendall_tau(a, b) -> float:
    """Kendall tau-b of two equal-length sequences (scipy.stats.kendalltau)."""
    from scipy.stats import kendalltau
    if len(a) < 2:
        return float("nan")
    return float(kendalltau(a, b).statistic)


def load_fitdata(folder: str, names) -> dict:
    """``{workload: fit data dict}`` of the ``fitdata_<w>.json`` files found in ``folder``."""
    out = {}
    for n in names:
        p = os.path.join(folder, f"fitdata_{n}.json")
        if os.path.exists(p):
            with open(p) as fh:
                d = json.load(fh)
            if "error" not in d:
                out[n] = d
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--phase", choices=("plan", "fitdata", "corun", "validate", "analyze"), required=True)
    ap.add_argument("--out", default=os.environ.get("OUT", FIDELITY))
    ap.add_argument("--configs", default=os.path.join(FIDELITY, "configs.json"))
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS))
    ap.add_argument("--corun-workload", default="gptoss120b_ref_g2048")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--replays", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--time-limit", type=float, default=500.0)
    ap.add_argument("--checks-only", action="store_true",
                    help="validate phase: only the output checks, deterministic settings (run "
                         "with CUBLAS_WORKSPACE_CONFIG=:4096:8 in the environment)")
    ap.add_argument("--data", default=FIDELITY, help="folder of the device phases' JSON files")
    a = ap.parse_args()
    bad = [w for w in a.workloads if w not in WORKLOADS]
    if bad:
        ap.error(f"--workloads: unknown {bad}; allowed: {', '.join(WORKLOADS)}")
    return globals()[f"{a.phase}_phase"](a)


if __name__ == "__main__":
    sys.exit(main())
