"""``subgpu run`` and ``subgpu calibrate``: sub-commands registered by ``subgpu_jax.app.cli``
(``subgpu tune``, which uses this module, has its own entry point: ``hw_runtime.tune.cli``).

Importable without torch, cuda-bindings or a GPU; the commands themselves refuse with a one-line
error (exit code 2, through ``subgpu_jax.app.cli.main``'s ``ValueError`` handling) on a machine
without a GPU or without green-context support.

``subgpu run``: the configuration options of ``subgpu simulate`` (``--cuts/--sms/--microbatch/
--reuse``) or ``--from-search DIR`` (the best record of ``DIR/summary.json``); executes the
temporal baseline and the configuration on the local GPU (``hw_runtime.gpu.executor``) and prints
measured vs predicted makespans (the event simulator, calibrated with ``--calibration``).

``subgpu calibrate --out FILE``: ``hw_runtime.gpu.calibrate.calibrate`` for the workload options.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from subgpu_jax.space.config import config_from_options
from hw_runtime.gpu.blas import GEMM_POLICIES
from hw_runtime.gpu.fused import ELEMENTWISE
from hw_runtime.gpu.kernels import COLLECTIVES, spin_of

__all__ = ["add_commands", "gpu_check", "config_from_search", "json_safe"]


def gpu_check() -> None:
    """Raise ``ValueError`` (one line) unless torch, a CUDA GPU, cuda-bindings and green
    contexts are all available here."""
    from hw_runtime.gpu.partition import green_contexts_available

    ok, why = green_contexts_available(0)
    if not ok:
        raise ValueError(f"this machine cannot run configurations on a GPU ({why}): `subgpu "
                         "run`, `calibrate` and `tune` need pip install -e \".[gpu]\" (torch, "
                         "cuda-bindings) and an NVIDIA GPU with green contexts (CUDA 12.4+ "
                         "driver)")


def json_safe(obj):
    """``obj`` with every non-finite float (NaN, inf) replaced by None, so that ``json.dumps``
    writes strict JSON (``null``) that every JSON reader accepts."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def _ep(a) -> int:
    """``--ep`` or its default for the model (see ``subgpu_jax.app.cli.resolve_arch_ep``)."""
    from subgpu_jax.app.options import resolve_arch_ep

    return resolve_arch_ep(a)[1]


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``run`` and ``calibrate`` on the ``subgpu`` parser's sub-parsers."""
    from subgpu_jax.app.options import add_workload_args

    r = sub.add_parser("run", help="execute a configuration on the local GPU (green contexts) "
                       "and compare with the simulator",
                       description="Capture one forward pass of the temporal baseline and of a "
                       "configuration as CUDA graphs (each stage on its own green-context SM "
                       "pool), time graph replays, check the pipelined output against a "
                       "sequential run, and print measured vs predicted makespans. Hopper GPUs "
                       "run the experts in bf16 (no MXFP4 tensor cores).")
    add_workload_args(r, hardware="H200")
    c = r.add_argument_group("configuration (as `subgpu simulate`)")
    c.add_argument("--cuts", default=None, help="kernels where segments 2..K start (default: "
                   "the Macro cut around the full-attention FMHA)")
    c.add_argument("--sms", default=None, help="SMs per stage (multiples of the quantum, "
                   "summing to the budget, 128 on an H200). Default: even split")
    c.add_argument("--microbatch", type=int, default=None,
                   help="microbatch size b (divides R = G/d). Default: R/2")
    c.add_argument("--reuse", dest="reuse", action="store_true", default=None,
                   help="boundary reuse w=1 (default for the Macro cut)")
    c.add_argument("--no-reuse", dest="reuse", action="store_false", help="w=0")
    c.add_argument("--policy", default="wavefront", help="wavefront (default) or layer_major")
    c.add_argument("--from-search", metavar="DIR", default=None,
                   help="run the best record of DIR/summary.json (a `subgpu search` folder); "
                        "its deployment replaces the workload options")
    c.add_argument("--top", type=int, default=None, metavar="K",
                   help="with --from-search: run the K best predicted SubGPU records of every "
                        "global batch of the search and the temporal baseline of each, and write "
                        "the measured frontier beside the predicted one (--out-dir)")
    c.add_argument("--out-dir", default=None, metavar="DIR",
                   help="with --top: folder for measured_frontier.json and .png "
                        "(default: the search folder)")
    x = r.add_argument_group("execution")
    x.add_argument("--mode", default="green", choices=("green", "multistream"),
                   help="green: one green-context SM pool per stage (default); multistream: the "
                        "same schedule on plain streams without SM partitioning")
    x.add_argument("--collectives", default="sleep", choices=COLLECTIVES,
                   help="how a TP/EP collective runs on this one GPU, in the temporal baseline "
                        "and the pipelined run alike, and in the prediction: sleep (copy the "
                        "payload, then wait out the modelled link time in a wait that occupies "
                        "no SMs: whatever overlaps it looks free) or none (the copy only: the "
                        "control with zero link time, so a gain left is overlap of compute and "
                        "memory work). Default: sleep")
    x.add_argument("--rounds", type=int, default=3, help="timing rounds (>= 1). Default: 3")
    x.add_argument("--replays", type=int, default=100,
                   help="graph replays per round (>= 1). Default: 100")
    x.add_argument("--warmup", type=int, default=3, help="warm-up replays. Default: 3")
    x.add_argument("--no-check", action="store_true",
                   help="skip the pipelined-vs-sequential output check")
    x.add_argument("--calibration", metavar="FILE.json", default=None,
                   help="calibration for the prediction (default: the analytical model)")
    x.add_argument("--cache", default=None, help="L2 policy of the predicting simulator: lru, "
                   "fifo or none. Default: none with --calibration (measured kernel times already "
                   "hold the L2 behaviour of the real run), else lru")
    x.add_argument("--streams-per-stage", type=int, default=1, metavar="K",
                   help="streams per stage (green context): a stage runs up to K tasks at once "
                        "(the published prototype used 2). Default: 1")
    x.add_argument("--trace", metavar="FILE.json", default=None,
                   help="profile one graph replay (torch.profiler) and write a Perfetto trace: "
                        "the measured kernels per stage (process 1) above the simulated "
                        "schedule of the same configuration (process 2)")
    x.add_argument("--gemm", default="tuned", choices=GEMM_POLICIES,
                   help="GEMM launch policy, the same for temporal and pipelined runs: stock "
                        "(PyTorch's default BLAS), pool (cuBLASLt planned for the SMs of the "
                        "pool each GEMM runs on) or tuned (each GEMM timed on its pool under a "
                        "few SM targets before capture, the fastest kept; the wins and the "
                        "validation on the H200 used it). Default: tuned")
    x.add_argument("--elementwise", default="auto", choices=ELEMENTWISE,
                   help="elementwise kernels, the same for temporal and pipelined runs: torch "
                        "(PyTorch chains: RoPE + KV append as 9 kernels, RMSNorm as 2), triton "
                        "(one fused kernel per op, hw_runtime/gpu/fused.py) or auto (triton "
                        "where it imports). Default: auto")
    x.add_argument("--lane-priority", default="auto", choices=("auto", "on", "off"),
                   help="CUDA priorities for the streams of a stage (lane 0 highest): auto "
                        "(on when each lane holds at most one microbatch, m <= K, which keeps "
                        "both microbatches from locking onto one stage), on or off. "
                        "Default: auto")
    x.add_argument("--json", action="store_true", help="print machine-readable JSON")
    r.set_defaults(func=_cmd_run)

    k = sub.add_parser("calibrate", help="measure per-kernel times on SM pools, the copy "
                       "bandwidth curve and co-running pairs on the local GPU",
                       description="Time every distinct kernel of the workload alone on "
                       "green-context pools and the whole GPU, the copy bandwidth on each pool, "
                       "and a few co-running pairs; write a calibration file for "
                       "`subgpu simulate/search --calibration`.")
    add_workload_args(k, hardware="H200")
    k.add_argument("--out", required=True, metavar="FILE.json", help="calibration file to write")
    k.add_argument("--batches", default=None,
                   help="comma-separated global batches (default: --batch)")
    k.add_argument("--microbatches", default="1,2,4",
                   help="comma-separated microbatch counts m. Default: 1,2,4")
    k.add_argument("--pools", default="8,16,32,64,96,128",
                   help="comma-separated pool sizes (SMs); the whole GPU is added")
    k.add_argument("--reps", type=int, default=7, help="replays per measurement (median)")
    k.add_argument("--no-coruns", action="store_true", help="skip the co-running pairs")
    k.add_argument("--gemm", default="tuned", choices=GEMM_POLICIES,
                   help="GEMM launch policy to calibrate (use the same with `subgpu run`): "
                        "stock, pool or tuned (see `subgpu run --help`). Default: tuned")
    k.add_argument("--elementwise", default="auto", choices=ELEMENTWISE,
                   help="elementwise kernels to calibrate (use the same with `subgpu run`): "
                        "auto, triton or torch (see `subgpu run --help`). Default: auto")
    k.set_defaults(func=_cmd_calibrate)


def config_from_search(folder: str) -> tuple[dict, dict]:
    """The best record of a search folder: ``(record, deployment kwargs)``.

    Raises:
        ValueError: no summary.json, no best record, or missing fields (one line).
    """
    path = os.path.join(folder, "summary.json")
    try:
        with open(path) as fh:
            summ = json.load(fh)
    except OSError as e:
        raise ValueError(f"--from-search: cannot read {path}: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"--from-search: {path} is not valid JSON ({e.msg})") from None
    best = summ.get("best_speedup_record") if isinstance(summ, dict) else None
    if not best:
        raise ValueError(f"--from-search: {path} has no best_speedup_record (no SubGPU record)")
    if not isinstance(best, dict):
        raise ValueError(f"--from-search: {path}: best_speedup_record must be an object")
    need = ("D", "w", "microbatch", "sms", "cuts", "num_gpus", "attn_tp", "attn_dp", "moe_ep",
            "global_batch", "kv_history")
    miss = [f for f in need if f not in best]
    if miss:
        raise ValueError(f"--from-search: the best record lacks {', '.join(miss)}")
    try:
        dep = {f: int(best[f]) for f in ("num_gpus", "attn_tp", "attn_dp", "moe_ep",
                                         "global_batch", "kv_history")}
    except (TypeError, ValueError):
        raise ValueError(f"--from-search: {path}: the best record's deployment fields must be "
                         "integers") from None
    return best, dep


def _check_search_matches(a, best: dict) -> None:
    """Refuse ``--from-search`` when the search's best record was made for another GPU or
    model than this run's (``--hardware``, default H200; ``--model``).

    Raises:
        ValueError: one line naming both and saying how to make a search for this GPU.
    """
    from subgpu_jax.model.models import resolve_model

    folder = a.from_search
    rec_hw = best.get("hardware")
    if rec_hw and str(rec_hw).upper() != str(a.hardware).upper():
        raise ValueError(
            f"--from-search: {folder} holds a search for the {rec_hw} and this run is for the "
            f"{a.hardware} (--hardware, default H200); make a search for the {a.hardware} with "
            f"`subgpu search --hardware {a.hardware}"
            f"{' --expert-dtype bf16' if a.hardware in ('H200', 'H100') else ''} --out DIR` and "
            f"run `subgpu run --from-search DIR`, or run this one on a {rec_hw} GPU with "
            f"--hardware {rec_hw}")
    rec_model = best.get("model")
    name = resolve_model(a.model).name
    if rec_model and rec_model != name:
        raise ValueError(f"--from-search: {folder} holds a search of {rec_model} and this run "
                         f"is for {name} (--model); pass --model {rec_model} (or its "
                         "config.json)")


def prepare_run(a):
    """The CPU part of ``subgpu run``: the workload, the Config, the predicting model.

    Returns:
        ``(wl, cfg, dep, model, hw_sim, m)``: the simulator's ``Workload`` (bf16 experts), the
        validated Config, the Deployment, the ``ContentionModel`` (calibrated with
        ``--calibration``), the hardware it predicts with and the microbatch count.

    Raises:
        ValueError: bad options (one line naming the option).
    """
    from subgpu_jax.sim.contention import ContentionModel
    from subgpu_jax.model.graph import Deployment
    from subgpu_jax.app.options import checked_workload, given_tp_ep
    from subgpu_jax.model.hardware import get_hardware
    from subgpu_jax.app.options import resolve_arch_ep
    from hw_runtime.gpu.workload import hopper_arch

    for f, lo in (("rounds", 1), ("replays", 1), ("warmup", 0), ("streams_per_stage", 1)):
        if getattr(a, f) < lo:
            raise ValueError(f"--{f.replace('_', '-')} must be >= {lo}, got {getattr(a, f)}")
    if a.from_search:  # the search's best record becomes this run's options (one mapping)
        best, _ = config_from_search(a.from_search)
        _check_search_matches(a, best)
        vars(a).update({k: v for k, v in vars(record_options(a, best)).items()
                        if k not in ("from_search", "top")})
    dep = Deployment(num_gpus=a.gpus, attn_tp=a.tp, attn_dp=a.dp, moe_ep=_ep(a),
                     global_batch=a.batch, input_len=a.input_len, kv_history=a.kv_history)
    # the memory check sees the experts this run executes (bf16 on Hopper), not the preset's
    wl = checked_workload(hopper_arch(resolve_arch_ep(a)[0]), dep, get_hardware(a.hardware),
                          *given_tp_ep(a))
    hw = wl.hw
    from subgpu_jax.app.options import int_list as _int_list, str_list as _str_list
    cuts = _str_list(a.cuts, "cuts") if a.cuts is not None else None
    sms = _int_list(a.sms, "sms", unique=False) if a.sms else None
    cfg = config_from_options(wl, cuts, sms, a.microbatch, a.reuse, a.policy)  # ValueError
    k = int(a.streams_per_stage)
    if k != 1:
        import dataclasses
        if not hasattr(cfg, "streams_per_stage"):
            raise ValueError("--streams-per-stage: this build's simulator has no streams per "
                             "stage; use 1")
        cfg = dataclasses.replace(cfg, streams_per_stage=k)
    m = wl.microbatches_of(cfg.microbatch)
    from subgpu_jax.app.options import GpuSetup

    setup = GpuSetup.uncalibrated(hw)
    if a.calibration:
        from subgpu_jax.model.calibration import load_calibration
        setup = load_calibration(a.calibration, wl.arch, dep, hw).bind(hw)
    a.cache = setup.cache_policy(getattr(a, "cache", None))
    model = ContentionModel(link_time=spin_of(getattr(a, "collectives", "sleep")),
                            calibration=setup.calibration)
    return wl, cfg, dep, model, setup.hw, m


def _cut_names(graph, cfg) -> list[str]:
    """Kernel names where segments 2..K of ``cfg`` start."""
    return [graph.kernels[i].name for i in range(1, graph.n)
            if cfg.seg_of[i] != cfg.seg_of[i - 1]]


def run_report(a, wl, cfg, dep, model, hw_sim, m, ex, make_trace: bool = False) -> dict:
    """Measure (through ``ex``, an ``Executor`` or a stand-in with the same methods), predict
    and compare: the JSON object ``subgpu run --json`` prints.

    Args:
        a: the parsed options (mode, rounds, replays, warmup, no_check, cache, trace,
            streams_per_stage). wl, cfg, dep, model, hw_sim, m: from ``prepare_run``.
        ex: executor (``measure``, ``temporal_config``, ``check_output``; ``profile`` and
            ``activity_counts`` when tracing).
        make_trace: profile a replay and add the timeline fields (and write ``a.trace``).

    Returns:
        ``{"workload", "config", "temporal", "run", "speedup_measured", "speedup_predicted",
        "output_check", "calibration"}`` and, with a trace, ``"timeline"``: per-stage busy and
        idle µs (measured, simulated), per-category residence µs (measured, simulated) and the
        error breakdown (``hw_runtime.timeline.error_breakdown``).
    """
    from subgpu_jax.space.config import temporal_of

    k = int(getattr(a, "streams_per_stage", 1))
    t_cfg = ex.temporal_config()
    meas_t = ex.measure(t_cfg, "temporal", a.rounds, a.replays, a.warmup)
    meas_c = ex.measure(cfg, a.mode, a.rounds, a.replays, a.warmup, streams_per_stage=k)
    chk = None if a.no_check else ex.check_output(cfg, a.mode, streams_per_stage=k)
    g = wl.graph(m)
    # predicted whole steps (every run of region instances + the head), as the executor times
    from subgpu_jax.app.options import EventTimer, time_step
    from subgpu_jax.model.graph import build_forward
    pred_t = time_step(build_forward(wl.arch, dep, 1), temporal_of(wl),
                       EventTimer(hw_sim, model, a.cache), record=False).makespan_us
    step_c = time_step(build_forward(wl.arch, dep, m), cfg,
                       EventTimer(hw_sim, model, a.cache, a.mode), record=False)
    sim_c, pred_c = step_c.main, step_c.makespan_us
    res = {"workload": {"model": wl.arch.name, "hardware": wl.hw.name, **dep.__dict__},
           "config": {"D": cfg.D, "w": cfg.w, "cuts": _cut_names(wl.graph(1), cfg),
                      "sms": list(cfg.alloc), "microbatch": cfg.microbatch, "microbatches": m,
                      "mode": a.mode, "streams_per_stage": k,
                      "collectives": getattr(a, "collectives", "sleep"),
                      "gemm": getattr(a, "gemm", "stock"),
                      "elementwise": getattr(ex, "elementwise", "torch"),
                      "lane_priority": (ex.priority_for(cfg, k) if hasattr(ex, "priority_for")
                                        else False)},
           "temporal": {"measured_us": meas_t.makespan_us, "predicted_us": pred_t,
                        "spread": meas_t.spread},
           "run": {"measured_us": meas_c.makespan_us, "predicted_us": pred_c,
                   "spread": meas_c.spread},
           "speedup_measured": meas_t.makespan_us / meas_c.makespan_us,
           "speedup_predicted": pred_t / pred_c, "output_check": chk,
           "calibration": a.calibration,
           "calibration_mismatch": calibration_mismatch(model.calibration, getattr(a, "gemm", "stock"),
                                                        getattr(ex, "elementwise", "torch")),
           "step": {"runs": step_c.runs, "head_us_predicted": step_c.head_us}}
    from subgpu_jax.sim.ceiling import overlap_ceiling
    res["ceiling"] = overlap_ceiling(wl.graph(1), wl.hw, meas_t.makespan_us, g)
    if make_trace:
        res["timeline"] = timeline_report(a, wl, cfg, model, hw_sim, m, ex, sim_c)
    return res


def calibration_mismatch(cal, gemm: str, elementwise: str) -> list[str]:
    """How the kernels a calibration was measured with differ from the run's (its ``meta``:
    ``gemm``, ``elementwise``; a calibration from before a field existed used ``stock`` GEMMs and
    the PyTorch ``torch`` chains). Each difference also goes to stderr as a warning, since the
    prediction then describes other kernels than the ones measured.

    Returns:
        one line per differing field (empty when they agree or there is no calibration).
    """
    if cal is None:
        return []
    out = []
    for field, run in (("gemm", gemm), ("elementwise", elementwise)):
        was = (cal.meta or {}).get(field) or ("stock" if field == "gemm" else "torch")
        if was != run:
            out.append(f"calibration measured with {field}={was}, this run uses {run}")
    for line in out:
        print(f"warning: {line}: the prediction describes other kernels (re-run subgpu "
              f"calibrate with the run's options)", file=sys.stderr)
    return out


def timeline_report(a, wl, cfg, model, hw_sim, m, ex, sim) -> dict:
    """Profile one replay, map it to the plan, write ``a.trace`` (measured + simulated) and
    return the timeline fields of ``run_report``: the main region's run only (its
    ``LaunchPlan`` and its simulated run), without the other region kinds and the head."""
    from hw_runtime.timeline import (MappingError, category_residence, error_breakdown,
                                     map_activities, sim_intervals, stage_busy, write_trace)

    k = int(getattr(a, "streams_per_stage", 1))
    prof = ex.profile(cfg, a.mode, streams_per_stage=k)
    plan = prof["plan_object"]
    g = wl.graph(m)
    counts = ex.activity_counts(m, cfg, a.mode)
    try:
        meas_iv = map_activities(plan, prof["activities"], counts, k)
    except MappingError as e:   # the measurement stands; the raw activities are kept
        path = a.trace + ".activities.json"
        with open(path, "w") as fh:
            json.dump({"activities": prof["activities"], "op_activities": counts}, fh)
        acts = prof["activities"]
        span = (max(x["start_us"] + x["dur_us"] for x in acts) - min(x["start_us"] for x in acts)
                if acts else float("nan"))
        print(f"warning: {e}; the timeline fields are left out, the profiled activities are in "
              f"{path}", file=sys.stderr)
        return {"error": str(e), "activities_file": path, "profiled_makespan_us": span,
                "activities": len(acts)}
    sim_iv = sim_intervals(sim)
    D = cfg.D
    bm, bs = stage_busy(meas_iv, D), stage_busy(sim_iv, D)
    M = max(r["end_us"] for r in meas_iv) - min(r["start_us"] for r in meas_iv)
    P = float(sim.makespan)
    cal = model.calibration
    iso_meas, iso_model = [0.0] * D, [0.0] * D
    unknown = False
    sms = list(cfg.alloc)
    from subgpu_jax.sim.eventsim import simulate_streams
    lone: dict = {}
    for r in meas_iv:
        kern = g.kernels[r["op"]]
        d, p = r["stage"], sms[r["stage"]]
        key = (r["op"], p)
        if key not in lone:
            tm = cal.kernel_time_us(kern, p) if cal is not None else None
            tmod = float(simulate_streams([(p, [kern])], hw_sim, model.replace(calibration=None),
                                          "none", record=False).makespan)
            lone[key] = (tm, tmod)
        tm, tmod = lone[key]
        if tm is None:  # alone times are known only where the calibration measured them
            unknown = True
        else:
            iso_meas[d] += tm
        iso_model[d] += tmod if tm is None else tm
    if unknown:
        iso_meas = None  # JSON null: never NaN
    write_trace(a.trace, [("measured (GPU, one graph replay)", meas_iv, g),
                          ("simulated (event simulator)", sim_iv, g)])
    brk = error_breakdown({"makespan_us": M, "busy_us": [b["busy_us"] for b in bm]},
                          {"makespan_us": P, "busy_us": [b["busy_us"] for b in bs]},
                          iso_meas, iso_model) if iso_meas is not None else None
    return {"trace": a.trace, "profiled_makespan_us": M,
            "stages_measured": bm, "stages_simulated": bs,
            "category_measured_us": category_residence(meas_iv, g),
            "category_simulated_us": {c: float(v) for c, v in sim.category_time.items()},
            "isolated_measured_us": iso_meas, "isolated_model_us": iso_model,
            "error_breakdown": brk,
            "note": None if cal is not None else "no --calibration: the isolated measured "
                    "times are unknown, so the error breakdown needs a calibration file"}


def search_records(folder: str) -> list[dict]:
    """The evaluated records of a ``subgpu search`` folder, read from ``records.csv``: the
    search job writes it from the records its store verified (checksums, duplicates and torn
    lines already handled there), so they are not parsed again from ``records.jsonl``.

    Returns:
        one dict per record, numbers as int or float.

    Raises:
        ValueError: no readable records.csv, or no record in it (one line).
    """
    import csv

    def num(v: str):
        for conv in (int, float):
            try:
                return conv(v)
            except ValueError:
                pass
        return v

    path = os.path.join(folder, "records.csv")
    try:
        with open(path, newline="") as fh:
            out = [{k: num(v) for k, v in r.items()} for r in csv.DictReader(fh)]
    except OSError as e:
        raise ValueError(f"--from-search: cannot read {path}: {e.strerror or e}") from None
    out = [r for r in out if "makespan_us" in r and "mode" in r]
    if not out:
        raise ValueError(f"--from-search: {path} holds no evaluated record")
    return out


def top_records(records: list[dict], k: int, hardware: str) -> dict[int, list[dict]]:
    """Per global batch: the temporal record, then the ``k`` SubGPU records with the shortest
    predicted makespan.

    Raises:
        ValueError: ``k`` < 1, or records made for another GPU (one line saying how to make a
            search for this one).
    """
    if k < 1:
        raise ValueError(f"--top must be >= 1, got {k}")
    other = sorted({str(r.get("hardware")) for r in records if r.get("hardware") != hardware})
    if other:
        raise ValueError(f"--from-search: the search was made for {', '.join(other)}, this run "
                         f"is on {hardware}; make one for this GPU with `subgpu search "
                         f"--hardware {hardware} --expert-dtype bf16 ...`")
    by: dict[int, list[dict]] = {}
    for r in records:
        by.setdefault(int(r["global_batch"]), []).append(r)
    out = {}
    for G, rs in sorted(by.items()):
        tmp = [r for r in rs if r["mode"] == "temporal"]
        sub = sorted((r for r in rs if r["mode"] != "temporal"), key=lambda r: r["makespan_us"])
        out[G] = tmp[:1] + sub[:k]
    return out


def record_options(a, r: dict):
    """The ``subgpu run`` options of one search record ``r`` (a ``records.csv`` row): ``a``'s
    options with the record's deployment (GPUs, TP/DP/EP, batch, KV history, input length) and
    configuration (cuts, SMs, microbatch, reuse, policy, streams per stage) in place.

    Returns:
        an ``argparse.Namespace`` for ``prepare_run``.
    """
    import argparse as _ap

    sub = _ap.Namespace(**vars(a))
    sub.from_search, sub.top = None, None
    sub.gpus, sub.tp, sub.dp, sub.ep = (int(r["num_gpus"]), int(r["attn_tp"]),
                                        int(r["attn_dp"]), int(r["moe_ep"]))
    sub.batch, sub.kv_history = int(r["global_batch"]), int(r["kv_history"])
    if r.get("input_len") not in (None, ""):
        sub.input_len = int(r["input_len"])
    sub.cuts = ",".join(r["cuts"].split("|")) if r["cuts"] else None
    sub.sms = ",".join(str(r["sms"]).split("|"))
    sub.microbatch, sub.reuse = int(r["microbatch"]), bool(int(r["w"]))
    sub.policy = r.get("policy", a.policy)
    sub.streams_per_stage = int(r.get("streams_per_stage") or 1)
    if r["mode"] == "temporal":
        sub.cuts, sub.sms, sub.reuse, sub.streams_per_stage = None, None, None, 1
    return sub


def _cmd_run_top(a) -> int:
    """``subgpu run --from-search DIR --top K``: measure the K best predicted records of every
    batch and the temporal baseline, write the measured frontier beside the predicted one."""
    from hw_runtime.gpu.executor import Executor
    from hw_runtime.gpu.workload import TorchWorkload, WorkloadMemoryError

    if a.top < 1:
        raise ValueError(f"--top must be >= 1, got {a.top}")
    groups = top_records(search_records(a.from_search), a.top, a.hardware)
    gpu_check()
    rows = []
    for G, recs in groups.items():
        hwl = ex = None
        for r in recs:
            sub = record_options(a, r)
            wl, cfg, dep, model, hw_sim, m = prepare_run(sub)
            if hwl is None:
                try:
                    hwl = TorchWorkload(wl.graph(1), device="cuda", elementwise=a.elementwise,
                                        spin=spin_of(a.collectives))
                except WorkloadMemoryError as e:
                    raise ValueError(str(e)) from None
                ex = Executor(hwl, gemm=a.gemm)
                ex.lane_priority = getattr(a, "lane_priority", "auto")
            if r["mode"] == "temporal":
                meas = ex.measure(ex.temporal_config(), "temporal", a.rounds, a.replays, a.warmup)
            else:
                meas = ex.measure(cfg, a.mode, a.rounds, a.replays, a.warmup)
            T = meas.makespan_us
            pred = r["makespan_us"]
            if a.collectives != "sleep" or (a.mode != "green" and r["mode"] != "temporal"):
                # the search predicted green pools with the link time: predict this run as run
                pred = repredict(wl, cfg, dep, model, hw_sim, m, a.cache,
                                 "temporal" if r["mode"] == "temporal" else a.mode)
            rows.append({"global_batch": G, "mode": r["mode"], "cuts": r["cuts"],
                         "sms": r["sms"], "microbatch": r["microbatch"], "D": r["D"],
                         "run_mode": a.mode, "collectives": a.collectives,
                         "predicted_us": pred, "measured_us": T,
                         "predicted_per_user_tok_s": 1e6 / pred,
                         "predicted_per_gpu_tok_s": r["per_gpu_tok_s"] * r["makespan_us"] / pred,
                         "measured_per_user_tok_s": 1e6 / T,
                         "measured_per_gpu_tok_s": r["per_gpu_tok_s"] * r["makespan_us"] / T})
            print(f"G={G:5d} {r['mode']:8s} {r['cuts'] or '-':24s} {str(r['sms']):8s} "
                  f"predicted {pred:9.1f} µs measured {T:9.1f} µs", flush=True)
        del ex, hwl
    out_dir = a.out_dir or a.from_search
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "measured_frontier.json"), "w") as fh:
        json.dump(json_safe({"search": a.from_search, "top": a.top, "rows": rows}), fh,
                  indent=1, allow_nan=False)
    plot_measured_frontier(rows, os.path.join(out_dir, "measured_frontier.png"))
    print(f"wrote {os.path.join(out_dir, 'measured_frontier.json')} and measured_frontier.png")
    return 0


def repredict(wl, cfg, dep, model, hw_sim, m: int, cache: str, mode: str) -> float:
    """The event simulator's whole-step makespan (µs) of a run as ``subgpu run`` executes it:
    ``mode`` ``"temporal"`` (the temporal baseline, whatever ``cfg`` is), ``"green"`` or
    ``"multistream"`` (``cfg`` at ``m`` microbatches); ``model`` carries the
    ``--collectives`` choice (``ContentionModel.link_time``)."""
    from subgpu_jax.app.options import EventTimer, time_step
    from subgpu_jax.model.graph import build_forward
    from subgpu_jax.space.config import temporal_of

    if mode == "temporal" or cfg.D == 1:
        cfg, m, mode = temporal_of(wl), 1, "green"
    return float(time_step(build_forward(wl.arch, dep, m), cfg,
                           EventTimer(hw_sim, model, cache, mode), record=False).makespan_us)


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
    from subgpu_jax.app.options import save_figure

    save_figure(fig, path, dpi=110)
    plt.close(fig)


def _cmd_run(a) -> int:
    if a.top is not None:
        if not a.from_search:
            raise ValueError("--top needs --from-search DIR")
        return _cmd_run_top(a)
    wl, cfg, dep, model, hw_sim, m = prepare_run(a)
    gpu_check()
    # ---- GPU from here on
    from hw_runtime.gpu.executor import Executor
    from hw_runtime.gpu.partition import GreenContextError
    from hw_runtime.gpu.workload import TorchWorkload as HwWorkload, WorkloadMemoryError

    try:
        hwl = HwWorkload(wl.graph(1), device="cuda", elementwise=a.elementwise,
                         spin=spin_of(a.collectives))
    except WorkloadMemoryError as e:
        raise ValueError(str(e)) from None
    try:
        ex = Executor(hwl, gemm=a.gemm)
        ex.lane_priority = getattr(a, "lane_priority", "auto")
        res = run_report(a, wl, cfg, dep, model, hw_sim, m, ex, make_trace=bool(a.trace))
    except GreenContextError as e:
        raise ValueError(str(e)) from None
    label_run(a, res, wl)
    print_run(a, res, wl, cfg, dep, m)
    return 0


def label_run(a, res: dict, wl) -> None:
    """Add to a ``run_report`` result how it was obtained: ``collectives`` (how the measured
    runs executed them, ``provenance.EMULATED_COLLECTIVES`` or, with ``--collectives none``,
    ``COPY_ONLY_COLLECTIVES``) and ``prediction`` (which model predicted it and the measured
    errors that apply, ``provenance.prediction_note``)."""
    from subgpu_jax.app.options import (COPY_ONLY_COLLECTIVES, EMULATED_COLLECTIVES,
                                           prediction_note)

    res["collectives"] = (COPY_ONLY_COLLECTIVES if getattr(a, "collectives", "sleep") == "none"
                          else EMULATED_COLLECTIVES)
    res["prediction"] = prediction_note(wl.hw.name, a.calibration, wl.arch.name)


def print_run(a, res: dict, wl, cfg, dep, m) -> None:
    """Print ``run_report``'s result as JSON (``--json``) or as a table."""
    if a.json:
        print(json.dumps(json_safe(res), indent=2, allow_nan=False))
        return
    hw = wl.hw
    print(f"workload  {wl.arch.name} (bf16 experts) G={dep.global_batch} on {hw.name}; config "
          f"D={cfg.D} w={cfg.w} SMs={list(cfg.alloc)} b={cfg.microbatch} (m={m}) "
          f"mode={a.mode} streams/stage={res['config']['streams_per_stage']} "
          f"GEMMs={res['config'].get('gemm', 'stock')} elementwise="
          f"{res['config'].get('elementwise', 'torch')} (temporal too)")
    print(f"{'':10s}{'measured (µs)':>15s}{'predicted (µs)':>16s}{'error':>9s}{'spread':>8s}")
    for name, r in (("temporal", res["temporal"]), ("config", res["run"])):
        print(f"{name:10s}{r['measured_us']:15.1f}{r['predicted_us']:16.1f}"
              f"{r['predicted_us'] / r['measured_us'] - 1:9.1%}{r['spread']:8.1%}")
    print(f"speedup   measured {res['speedup_measured']:.3f}x, predicted "
          f"{res['speedup_predicted']:.3f}x")
    if res.get("collectives"):
        hid = "" if "copies only" in res["collectives"] else ": a gain may be that wait hidden"
        print(f"measured  with {res['collectives']}{hid}")
    if res.get("prediction"):
        print(f"predicted by {res['prediction']['made_by']}")
    from subgpu_jax.sim.ceiling import describe
    print(describe(res["ceiling"]) + " (measured temporal)")
    chk = res["output_check"]
    if chk is not None:
        print(f"output    pipelined vs sequential: bitwise_equal={chk['bitwise_equal']} "
              f"rel_l2={chk['rel_l2']:.2e}")
    tl = res.get("timeline")
    if tl and "error" in tl:
        print(f"trace     not mapped ({tl['error']}); activities in {tl['activities_file']}")
    elif tl:
        for mb, sb in zip(tl["stages_measured"], tl["stages_simulated"]):
            print(f"stage {mb['stage']}   busy measured {mb['busy_us']:10.1f} µs (idle "
                  f"{mb['idle_us']:.1f}), simulated {sb['busy_us']:10.1f} µs (idle "
                  f"{sb['idle_us']:.1f})")
        b = tl["error_breakdown"]
        if b:
            print(f"error     {b['total_frac']:+.1%} = isolated {b['isolated_frac']:+.1%} + "
                  f"co-run {b['corun_frac']:+.1%} + gaps {b['gaps_frac']:+.1%} (stage "
                  f"{b['stage']})")
        print(f"trace     {tl['trace']} (Perfetto: measured above simulated)")


def _cmd_calibrate(a) -> int:
    from subgpu_jax.app.options import int_list as _int_list, resolve_arch_ep
    from subgpu_jax.model.graph import Deployment
    from subgpu_jax.model.hardware import get_hardware
    from subgpu_jax.app.options import checked_workload, given_tp_ep
    from hw_runtime.gpu.workload import hopper_arch

    batches = _int_list(a.batches, "batches") if a.batches else [a.batch]
    mbs = _int_list(a.microbatches, "microbatches")
    pools = _int_list(a.pools, "pools")
    if a.reps < 1:
        raise ValueError(f"--reps must be >= 1, got {a.reps}")
    for f, v in (("batches", batches), ("microbatches", mbs), ("pools", pools)):
        if not v or any(x < 1 for x in v):
            raise ValueError(f"--{f} must be positive integers, got {v}")
    dep = Deployment(num_gpus=a.gpus, attn_tp=a.tp, attn_dp=a.dp, moe_ep=_ep(a),
                     global_batch=batches[0], input_len=a.input_len, kv_history=a.kv_history)
    # memory checked with the experts the calibration runs (bf16 on Hopper)
    wl = checked_workload(hopper_arch(resolve_arch_ep(a)[0]), dep, get_hardware(a.hardware),
                          *given_tp_ep(a))
    for G in batches:
        import dataclasses
        dataclasses.replace(dep, global_batch=G).validate(wl.arch)
    hw = wl.hw
    for p in pools:
        if p % hw.sm_quantum or p < hw.min_pool_sms or p > hw.sm_budget:
            raise ValueError(f"--pools: {p} SMs is not a valid {hw.name} pool (multiples of "
                             f"{hw.sm_quantum}, {hw.min_pool_sms}..{hw.sm_budget})")
    d = os.path.dirname(os.path.abspath(a.out))
    if not os.path.isdir(d):
        raise ValueError(f"--out: folder {d} does not exist")
    gpu_check()
    from hw_runtime.gpu.calibrate import calibrate
    from hw_runtime.gpu.partition import GreenContextError
    from hw_runtime.gpu.workload import WorkloadMemoryError

    try:
        res = calibrate(hopper_arch(wl.arch), dep, batches, mbs, pools, reps=a.reps,
                        coruns=not a.no_coruns, hardware=hw.name, gemm=a.gemm,
                        elementwise=a.elementwise)
    except (WorkloadMemoryError, GreenContextError) as e:
        raise ValueError(str(e)) from None
    with open(a.out, "w") as fh:
        json.dump(res, fh, indent=1)
    print(f"wrote {a.out}: {len(res['kernels'])} kernel tables, {len(res['coruns'])} co-runs")
    return 0
