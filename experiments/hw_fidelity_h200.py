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
``--phase analytic`` (CPU): the uncalibrated model alone: refit its constants on the isolated
    kernel tables and predict every validation row as ``subgpu simulate`` does without a
    calibration -> ``hw_fidelity/analytic_h200.json``.
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
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from fidelity_report import figures, kendall_tau, print_summary, summarize  # noqa: E402,F401
from hw_runtime.gpu.decode_attn import ATTENTION  # noqa: E402
from subgpu_jax.model.collective import ONE_GPU_COLLECTIVES  # noqa: E402

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
    # the large-batch end (the wins study): GEMMs at M = 512 / 1024 per microbatch of m = 2
    "llama70b_tp8_g1024": ("llama-3.1-70b", {"num_gpus": 8, "attn_tp": 8, "attn_dp": 1,
                                             "moe_ep": 1, "global_batch": 1024,
                                             "input_len": 2048, "kv_history": 2048}),
    "llama70b_tp8_g2048": ("llama-3.1-70b", {"num_gpus": 8, "attn_tp": 8, "attn_dp": 1,
                                             "moe_ep": 1, "global_batch": 2048,
                                             "input_len": 1024, "kv_history": 1024}),
}


def sim_workload(name: str):
    """The simulator's ``Workload`` of a validation workload (H200, bf16 experts)."""
    from subgpu_jax.model.graph import Deployment
    from subgpu_jax.model.hardware import get_hardware
    from subgpu_jax.model.models import MODELS
    from subgpu_jax.model.workload import Workload
    from hw_runtime.gpu.workload import hopper_arch  # bf16 experts (importable without torch)

    model, fields = WORKLOADS[name]
    # the committed measurements emulated the step without the MoE all-gather of attention TP
    # (docs/accounting.md item 3, added after them): price the step they ran
    dep = dataclasses.replace(Deployment(), moe_tp_gather=False, **fields)
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

#: Elementwise kernels of the device phases (``--elementwise``; hw_runtime/gpu/fused.py).
ELEMENTWISE = "torch"


#: One-GPU collectives of the validate phase (``--collectives``; sleep: the workload's default,
#: the mode of every run committed before the option).
COLLECTIVES = "sleep"
#: Decode attention of the device phases (``--attention``; auto: the workload's default, that
#: of every run committed before the option).
ATTENTION_POLICY = "auto"


def _torch_workload(wl, m: int = 1):
    from hw_runtime.gpu.kernels import collective_kwargs
    from hw_runtime.gpu.policies import KernelSettings
    from hw_runtime.gpu.workload import TorchWorkload
    return TorchWorkload(wl.graph(m), device="cuda",
                         kernels=KernelSettings(elementwise=ELEMENTWISE,
                                                attention=ATTENTION_POLICY),
                         **collective_kwargs(COLLECTIVES))


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
                            log=log, gemm=args.gemm, elementwise=ELEMENTWISE)
            base = _torch_workload(wl, 1)
            counts = {1: op_activity_counts(base)}
            for m in (2, 4):
                if wl.batch % m == 0:
                    counts[m] = op_activity_counts(derive_workload(base, wl.graph(m)))
            cal["activity_counts"] = {str(k): v for k, v in counts.items()}
            if name == args.corun_workload:
                wl2 = derive_workload(base, wl.graph(2)) if wl.batch % 2 == 0 else base
                from hw_runtime.gpu.blas import GemmPolicy
                cm = corun_matrix(wl2, log=log, gemm=GemmPolicy(torch, args.gemm))
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


def lanes_phase(args) -> int:
    """How two streams of one green-context pool share its SMs (``corun.lane_sharing``), on
    ``--corun-workload`` at m=2, pools of 32 and 64 SMs -> ``lanes.json``."""
    from hw_runtime.gpu.corun import lane_sharing
    from hw_runtime.gpu.executor import derive_workload

    os.makedirs(args.out, exist_ok=True)
    wl = sim_workload(args.corun_workload)
    base = _torch_workload(wl, 1)
    wl2 = derive_workload(base, wl.graph(2))
    res = {"workload": args.corun_workload,
           "pools": [lane_sharing(wl2, p, log=print, lane_priority=args.lane_priority)
                     for p in (32, 64)]}
    name = "lanes_priority.json" if args.lane_priority else "lanes.json"
    with open(os.path.join(args.out, name), "w") as fh:
        json.dump(res, fh, indent=1)
    return 0


def determinism_phase(args) -> int:
    """Why two replays of one graph differ (the output check): for each SDPA backend, two
    replays of the temporal graph and of a green Macro 64/64 m = 2 graph of
    ``llama70b_tp8_g256`` under deterministic settings -> ``determinism.json``. If the
    replays differ in temporal mode (one stream, no partition) with one backend only, the
    difference is that attention kernel's own nondeterminism, not a race in the plan."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from hw_runtime.gpu.executor import Executor

    os.makedirs(args.out, exist_ok=True)
    name = "llama70b_tp8_g256"
    wl = sim_workload(name)
    ex = Executor(_torch_workload(wl, 1))
    plan = [d for d in plan_configs(name) if d["name"] in ("temporal", "macro_64_64_m2")]
    res = {"workload": name, "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
           "rows": []}
    for be in (None, "FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH"):
        for d in plan:
            rec = {"sdpa_backend": be or "default", "config": d["name"]}
            try:
                cfg = cfg_from_json(wl, d)
                mode = "temporal" if cfg.D == 1 else "green"
                if be is None:
                    chk = ex.check_output(cfg, mode, replays=3, deterministic=True, step=False)
                else:
                    with sdpa_kernel(getattr(SDPBackend, be)):
                        chk = ex.check_output(cfg, mode, replays=3, deterministic=True,
                                              step=False)
                rec.update({k: chk.get(k) for k in ("replays_equal", "bitwise_equal",
                                                    "pool_sequential_equal", "rel_l2",
                                                    "max_abs_diff", "how")})
            except Exception as e:  # noqa: BLE001 - a backend that cannot run this shape
                rec["error"] = f"{e.__class__.__name__}: {str(e)[:200]}"
            res["rows"].append(rec)
            print(rec, flush=True)
            with open(os.path.join(args.out, "determinism.json"), "w") as fh:
                json.dump(res, fh, indent=1)
    return 0


def validate_phase(args) -> int:
    """Measure every configuration of ``--configs``; profile and check the flagged ones."""
    from hw_runtime.gpu.executor import Executor
    from hw_runtime.gpu.profile import profile_replays

    os.makedirs(args.out, exist_ok=True)
    with open(args.configs) as fh:
        plan = json.load(fh)
    t0 = time.time()
    missing = [w for w in args.workloads if w not in plan]
    if missing:   # before any workload is allocated on the GPU
        print(f"validate: {args.configs} has no configurations for {', '.join(missing)}; "
              "skipped", flush=True)
    for name in [w for w in args.workloads if w in plan]:
        wl = sim_workload(name)
        res = {"workload": name, "rows": [], "errors": {}}
        path = os.path.join(args.out, f"validate_{name}.json")

        def save():
            with open(path, "w") as fh:
                json.dump(res, fh)
        try:
            base = _torch_workload(wl, 1)
            ex = Executor(base, gemm=args.gemm)
            ex.lane_priority = args.lane_priority_policy
            res["lane_priority"] = ex.lane_priority
            res["memory"] = base.memory
            res["gemm"] = args.gemm
            res["elementwise"] = base.elementwise
            res["collectives"] = COLLECTIVES
            res["attention"] = base.attention
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
                m = ex.measure(cfg, mode, rounds=args.rounds, replays=args.replays, step=False,
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

def _load(folder: str, fname: str):
    p = os.path.join(folder, fname)
    if not os.path.exists(p):
        return None
    with open(p) as fh:
        return json.load(fh)


def build_calibration(name: str, fit: dict, copy_curve: dict, matrix: dict | None = None):
    """The ``Calibration`` of one workload from its fit data: kernel tables, the copy curve of
    the reference run, measured activity counts per kernel key, and (for the co-run workload)
    the synthetic classes' tables from the co-run matrix's alone runs (per launch)."""
    from subgpu_jax.model.calibration import Calibration, kernel_key
    from hw_runtime.gpu.corun import synthetic_kernels

    wl = sim_workload(name)
    d = dict(fit)
    d["bw_curve"] = copy_curve
    acts = {}
    for m, counts in (fit.get("activity_counts") or {}).items():
        g = wl.graph(int(m))
        for k, c in zip(g.kernels, counts):
            acts[kernel_key(k)] = int(c)
    kernels = []
    for e in d["kernels"]:
        e = dict(e)
        if e["key"] in acts:
            e["activities"] = acts[e["key"]]
        kernels.append(e)
    if matrix is not None:
        syn = synthetic_kernels()
        for c, k in syn.items():
            times = {}
            for a in matrix["alone"]:
                if a["class"] == c:
                    times.setdefault(str(a["sms"]), []).append(a["us"] / a["launches"])
            kernels.append({"key": kernel_key(k), "name": k.name, "activities": 1,
                            "times_us": {p: sorted(v)[len(v) // 2] for p, v in times.items()}})
    d["kernels"] = kernels
    d["coruns"] = []
    return Calibration.from_dict(d)


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


def classes_phase(args) -> int:
    """Per kernel category and pool size: the analytical (uncalibrated) isolated time over the
    measured one (median over the workloads' kernels), added to hw_fidelity_h200.json."""
    import numpy as np

    from subgpu_jax.model.calibration import kernel_key, stored_key
    from subgpu_jax.model.graph import StaticDurationModel
    from subgpu_jax.model.hardware import get_hardware

    hw = get_hardware("H200")
    sd = StaticDurationModel(hw)
    fits = load_fitdata(args.data, args.workloads)
    ratios: dict = {}
    for w, f in fits.items():
        wl = sim_workload(w)
        tab = {stored_key(e["key"]): e["times_us"] for e in f["kernels"]}
        for m in (1, 2, 4):
            if wl.batch % m:
                continue
            for k in wl.graph(m).kernels:
                t = tab.get(kernel_key(k))
                if not t:
                    continue
                for p, us in t.items():
                    a = float(sd.kernel_time_us(k, int(p)))
                    ratios.setdefault(k.category, {}).setdefault(p, []).append(a / us)
    table = {c: {p: {"median_analytical_over_measured": float(np.median(v)), "n": len(v)}
                 for p, v in sorted(d.items(), key=lambda x: int(x[0]))}
             for c, d in ratios.items()}
    path = os.path.join(RESULTS, "hw_fidelity_h200.json")
    with open(path) as fh:
        out = json.load(fh)
    out["analytical_vs_measured"] = table
    with open(path, "w") as fh:
        json.dump(out, fh, indent=1)
    pools = sorted({p for d in table.values() for p in d}, key=int)
    print(f"{'category':16s}" + "".join(f"{p:>7s}" for p in pools))
    for c, d in table.items():
        print(f"{c:16s}" + "".join(f"{d[p]['median_analytical_over_measured']:7.2f}"
                                   if p in d else "       " for p in pools))
    return 0


def _cfg_sim(wl, d, hw):
    """(graph, Config to simulate, note) of a validation row; multi-stream (no partition) is
    modelled as an even split of all the GPU's SMs (the hardware schedules both streams' CTAs
    dynamically)."""
    cfg = cfg_from_json(wl, d)
    m = wl.batch // cfg.microbatch
    g = wl.graph(m)
    note = ""
    if d["mode"] == "multistream":
        D = cfg.D
        even = tuple(hw.num_sms // D + (1 if i < hw.num_sms % D else 0) for i in range(D))
        cfg = dataclasses.replace(cfg, alloc=even)
        note = f"no SM partition: modelled as an even split {list(even)} of all SMs"
    k = int(d.get("streams_per_stage", 1))
    if k != 1 and getattr(cfg, "streams_per_stage", 1) != k:
        return g, None, "the simulator has no streams-per-stage support in this build"
    return g, cfg, note


def analyze_phase(args) -> int:
    """Fit on the fit data (kernel tables + co-run matrix) only; predict every validation row."""

    from subgpu_jax.model.hardware import get_hardware
    from subgpu_jax.sim.contention import ContentionModel
    from subgpu_jax.sim.eventsim import simulate
    from subgpu_jax.sim.fit import fit_corun, pair_kernels
    from hw_runtime.gpu.corun import synthetic_kernels

    data = args.data
    matrix = _load(data, "corun_matrix.json")
    fits = load_fitdata(data, args.workloads)
    ref = args.corun_workload
    copy_curve = fits[ref]["bw_curve"]
    cals = {w: build_calibration(w, f, copy_curve, matrix if w == ref else None)
            for w, f in fits.items()}
    hw0 = get_hardware("H200")
    out: dict = {"protocol": "fitted on kernel tables + co-run matrix only; validation rows "
                             "never used in the fit", "workloads": {}, "rows": []}
    # ---- fit sigma, delta on the co-run matrix
    wl_ref = sim_workload(ref)
    hw_ref = cals[ref].bind(hw0).hw
    kern = pair_kernels(matrix, wl_ref.graph(2), synthetic_kernels())
    fit = fit_corun(matrix, kern, hw_ref,
                    lambda **p: ContentionModel(calibration=cals[ref], **p), log=print)
    legacy = fit_corun(matrix, kern, hw_ref,
                       lambda **p: ContentionModel(calibration=cals[ref], kernel_aware=False),
                       grids={})
    unc = fit_corun(matrix, kern, hw0, lambda **p: ContentionModel(), grids={})
    params = fit["params"]
    out["fit"] = {"params": params, "score": fit["score"], "grid": fit["grid"],
                  "pairs": fit["pairs"], "score_legacy_calibrated": legacy["score"],
                  "pairs_legacy_calibrated": legacy["pairs"], "score_uncalibrated": unc["score"],
                  "pairs_uncalibrated": unc["pairs"]}
    print(f"fit: {params} mean|log| {fit['score']:.3f} (legacy calibrated "
          f"{legacy['score']:.3f}, uncalibrated {unc['score']:.3f})")
    # ---- predict the validation rows
    for w in args.workloads:
        val = _load(data, f"validate_{w}.json")
        if val is None or w not in cals:
            continue
        wl = sim_workload(w)
        cal = cals[w]
        setup = cal.bind(hw0)
        hw_c = setup.hw
        mcal = ContentionModel(calibration=setup.calibration, **params)
        rows = []
        for d in val["rows"]:
            if "measured" not in d:
                continue
            r = {"workload": w, "name": d["name"], "mode": d["mode"],
                 "config": {k: d.get(k) for k in ("D", "w", "starts", "alloc", "microbatch",
                                                  "streams_per_stage")},
                 "measured_us": d["measured"]["makespan_us"],
                 "spread": d["measured"]["spread"]}
            g, cfg, note = _cfg_sim(wl, d, hw_c)
            if cfg is None:
                r.update(predicted_us=None, predicted_uncalibrated_us=None, note=note)
            else:
                # the measured kernel times embed the L2 behaviour of the real run (activation
                # buffers reused, weights cold), so the calibrated model runs with the L2
                # residency model off (adding it would count those hits twice)
                pc = simulate(g, cfg, hw_c, mcal, cache=setup.cache, record=False,
                              validate=False)
                pu = simulate(g, cfg, hw0, ContentionModel(), record=False, validate=False)
                r.update(predicted_us=float(pc.makespan),
                         predicted_uncalibrated_us=float(pu.makespan), note=note,
                         category_sim_us={k: float(v) for k, v in pc.category_time.items()})
            rows.append(r)
            print(f"{w:22s} {d['name']:32s} meas {r['measured_us']:9.0f} pred "
                  f"{r['predicted_us'] or float('nan'):9.0f} unc "
                  f"{r['predicted_uncalibrated_us'] or float('nan'):9.0f}", flush=True)
        out["rows"] += rows
        out["workloads"][w] = summarize(rows)
        out["workloads"][w]["runtime"] = {k: val.get(k, d0) for k, d0 in (
            ("gemm", "stock"), ("elementwise", "torch"), ("lane_priority", "off"))}
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "hw_fidelity_h200.json"), "w") as fh:
        json.dump(out, fh, indent=1)
    figures(out)
    print_summary(out)
    return 0


# ======================================================== analytic: the uncalibrated model (CPU)

def analytic_samples(folder: str, names) -> list:
    """``(kernel, pool_sms, measured_us)`` of every distinct op (by ``kernel_key``) of the fit
    data's isolated tables, over the workloads ``names`` and m = 1, 2, 4: the data
    ``kernelcost.fit_analytic`` fits on (never the validation runs)."""
    from subgpu_jax.model.calibration import kernel_key, stored_key

    out, seen = [], set()
    for w, f in load_fitdata(folder, names).items():
        wl = sim_workload(w)
        tab = {stored_key(e["key"]): e["times_us"] for e in f["kernels"]}
        for m in sorted(int(x) for x in (f.get("activity_counts") or {"1": 0})):
            if wl.batch % m:
                continue
            for k in wl.graph(m).kernels:
                key = kernel_key(k)
                if key in seen or key not in tab:
                    continue
                seen.add(key)
                out += [(k, int(p), float(us)) for p, us in sorted(tab[key].items(),
                                                                  key=lambda x: int(x[0]))]
    return out


def analytic_phase(args) -> int:
    """The uncalibrated (analytical) model: refit its constants on the isolated kernel tables
    (``kernelcost.fit_analytic``; the H200 preset must carry the result), then predict every
    validation row with the uncalibrated simulator exactly as ``subgpu simulate`` does without a
    calibration (contention on, L2 model ``lru``) -> ``hw_fidelity/analytic_h200.json``: per
    workload median |error|, temporal error, Kendall tau, predicted vs measured best; per op
    class and pool the analytical/measured isolated-time ratio."""
    import numpy as np

    from subgpu_jax.model.hardware import get_hardware
    from subgpu_jax.model.kernelcost import ANALYTIC_MODEL, FIT_PARAMS, fit_analytic
    from subgpu_jax.model.graph import StaticDurationModel
    from subgpu_jax.sim.contention import ContentionModel
    from subgpu_jax.sim.eventsim import simulate

    hw = get_hardware("H200")
    samples = analytic_samples(args.data, args.workloads)
    fit = fit_analytic(samples, hw, StaticDurationModel)
    preset = {f: getattr(hw, f) for f in FIT_PARAMS}
    print(f"fit on {fit['n']} isolated times: {fit['params']} T={fit['gemm_grid_ctas']} "
          f"median |error| {fit['median_abs_error']:.1%} (preset {preset})")
    sd = StaticDurationModel(hw)
    ratios: dict = {}
    for k, p, us in samples:
        c = k.op if k.op != "allreduce" else f"allreduce/{k.category}"
        ratios.setdefault(c, {}).setdefault(str(p), []).append(
            float(sd.kernel_time_us(k, p)) / us)
    classes = {c: {p: float(np.median(v)) for p, v in d.items()} for c, d in ratios.items()}
    out = {"model": ANALYTIC_MODEL, "hardware": hw.name,
           "protocol": "constants fitted on the isolated kernel tables (fitdata_*.json) only; "
                       "validation rows never used; simulated as `subgpu simulate` without a "
                       "calibration (contention on, L2 lru)",
           "fit": fit, "preset": {**preset, "launch_us": hw.launch_us,
                                  "gemm_grid_ctas": hw.gemm_grid_ctas},
           "analytical_over_measured_isolated": classes, "workloads": {}, "rows": []}
    for w in args.workloads:
        val = _load(args.data, f"validate_{w}.json")
        if val is None:
            continue
        wl = sim_workload(w)
        rows = []
        for d in val["rows"]:
            if "measured" not in d:
                continue
            g, cfg, note = _cfg_sim(wl, d, hw)
            if cfg is None:
                continue
            pu = simulate(g, cfg, hw, ContentionModel(), cache="lru", record=False,
                          validate=False)
            r = {"workload": w, "name": d["name"], "mode": d["mode"],
                 "measured_us": d["measured"]["makespan_us"], "predicted_us": float(pu.makespan),
                 "note": note}
            r["error"] = r["predicted_us"] / r["measured_us"] - 1
            rows.append(r)
            print(f"{w:22s} {d['name']:32s} meas {r['measured_us']:9.0f} analytic "
                  f"{r['predicted_us']:9.0f} {r['error']:+7.1%}", flush=True)
        if not rows:
            continue
        e = np.array([r["error"] for r in rows])
        tmp = next((r for r in rows if r["name"] == "temporal"), None)
        bm = min(rows, key=lambda r: r["measured_us"])
        bp = min(rows, key=lambda r: r["predicted_us"])
        out["workloads"][w] = {
            "n": len(rows), "median_abs_error": float(np.median(np.abs(e))),
            "max_abs_error": float(np.max(np.abs(e))),
            "temporal_error": tmp["error"] if tmp else None,
            "kendall_tau": kendall_tau([r["measured_us"] for r in rows],
                                       [r["predicted_us"] for r in rows]),
            "measured_best": bm["name"], "predicted_best": bp["name"],
            "predicted_best_vs_measured_best": bp["measured_us"] / bm["measured_us"] - 1}
        out["rows"] += rows
    os.makedirs(FIDELITY, exist_ok=True)
    path = os.path.join(FIDELITY, "analytic_h200.json")
    with open(path, "w") as fh:
        json.dump(out, fh, indent=1)
    print(f"\n{'workload':22s} {'n':>3s} {'med|e|':>7s} {'max|e|':>7s} {'temp e':>7s} {'tau':>6s}"
          f"  best meas / pred ({ANALYTIC_MODEL})")
    for w, s in out["workloads"].items():
        print(f"{w:22s} {s['n']:3d} {s['median_abs_error']:7.1%} {s['max_abs_error']:7.1%} "
              f"{s['temporal_error']:+7.1%} {s['kendall_tau']:6.2f}  {s['measured_best']} / "
              f"{s['predicted_best']}")
    print(f"wrote {path}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--phase", choices=("plan", "fitdata", "corun", "lanes", "determinism",
                                         "validate", "analyze", "classes", "analytic"),
                    required=True)
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
    ap.add_argument("--gemm", default="stock", choices=("stock", "pool", "tuned"),
                    help="GEMM launch policy of the device phases (hw_runtime.gpu.blas)")
    ap.add_argument("--elementwise", default="torch", choices=("auto", "triton", "torch"),
                    help="elementwise kernels of the device phases (hw_runtime/gpu/fused.py); "
                         "default torch, the kernels of the runs committed before they existed")
    ap.add_argument("--lane-priority-policy", default="auto", choices=("auto", "on", "off"),
                    help="validate phase: Executor.lane_priority (runs before it existed: off)")
    ap.add_argument("--lane-priority", action="store_true",
                    help="lanes phase: streams with CUDA priorities, A on the low one")
    ap.add_argument("--collectives", default="sleep", choices=ONE_GPU_COLLECTIVES,
                    help="device phases: the one-GPU collectives (docs/collectives.md; default "
                         "sleep, the mode of every run committed before the option)")
    ap.add_argument("--attention", default="auto", choices=ATTENTION,
                    help="device phases: the runtime's decode attention (subgpu run "
                         "--attention; default auto, that of every run committed before it)")
    a = ap.parse_args()
    global ELEMENTWISE, COLLECTIVES, ATTENTION_POLICY
    ELEMENTWISE, COLLECTIVES, ATTENTION_POLICY = a.elementwise, a.collectives, a.attention
    bad = [w for w in a.workloads if w not in WORKLOADS]
    if bad:
        ap.error(f"--workloads: unknown {bad}; allowed: {', '.join(WORKLOADS)}")
    return globals()[f"{a.phase}_phase"](a)


if __name__ == "__main__":
    sys.exit(main())
