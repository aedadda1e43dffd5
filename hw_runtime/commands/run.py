"""``subgpu run`` of one configuration: the CPU part (``prepare_run``: the workload, the
``Config``, the predicting model, from a ``request.RunRequest`` or the best record of its
``--from-search DIR``), the measurement report against the prediction (``run_report``,
``timeline_report``) and the printed result (``run_one``).

Importable without torch, cuda-bindings or a GPU; ``run_one`` refuses with a one-line error on a
machine without green contexts (``common.gpu_check``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from dataclasses import dataclass
from typing import Any

from subgpu_jax.space.config import Config, config_from_options
from subgpu_jax.sim.contention import uncalibrated_model_id
from hw_runtime.commands.common import gpu_check
from hw_runtime.commands.device import note_preset
from hw_runtime.commands.measure import Measurer
from hw_runtime.commands.records import other_gpu_search, record_request
from hw_runtime.commands.report import RunConfig, RunReport, Timed
from hw_runtime.commands.request import (ConfigOptions, KernelSettings, RunRequest,
                                         check_stage_pools)
from hw_runtime.gpu.kernels import collective_kwargs, link_kwargs
from subgpu_jax.model.collective import DEFAULT_COLLECTIVES, collective_mode

__all__ = ["config_from_search", "check_search_matches", "PreparedRun", "prepare_run",
           "options_config", "record_config", "run_report",
           "calibration_mismatch", "timeline_report", "repredict", "GpuMeasurer", "rank_gpu",
           "run_one",
           "label_run", "slowest_rank", "print_run"]


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
    from subgpu_jax.model.deployment import RECORD_FIELDS

    need = ("D", "w", "microbatch", "sms", "cuts") + RECORD_FIELDS
    miss = [f for f in need if f not in best]
    if miss:
        raise ValueError(f"--from-search: the best record lacks {', '.join(miss)}")
    try:
        dep = {f: int(best[f]) for f in RECORD_FIELDS}
    except (TypeError, ValueError):
        raise ValueError(f"--from-search: {path}: the best record's deployment fields must be "
                         "integers") from None
    return best, dep


def check_search_matches(req: RunRequest, best: dict) -> None:
    """Refuse ``--from-search`` (``req.from_search``) when the search's best record was made
    for another GPU or model than this run's (``--hardware``, default the GPU this runs on;
    ``--model``).

    Raises:
        ValueError: one line naming both and saying how to make a search for this GPU
            (``records.other_gpu_search``, as ``--top`` says it) or naming ``--model``.
    """
    from subgpu_jax.model.hardware import get_hardware
    from subgpu_jax.model.models import resolve_model

    folder, hw = req.from_search, req.workload.hardware
    rec_hw = best.get("hardware")
    if rec_hw and str(rec_hw).upper() != get_hardware(hw).name.upper():
        raise ValueError(other_gpu_search(folder, [str(rec_hw)], hw))
    rec_model = best.get("model")
    name = resolve_model(req.workload.model, req.workload.name).name
    if rec_model and rec_model != name:
        raise ValueError(f"--from-search: {folder} holds a search of {rec_model} and this run "
                         f"is for {name} (--model); pass --model {rec_model} (or its "
                         "config.json)")


def options_config(o: ConfigOptions, wl, pools_hw=None) -> Config:
    """The ``Config`` of ``subgpu run``'s configuration options (``--cuts``, ``--sms``,
    ``--microbatch``, ``--reuse``, ``--policy``, ``--streams-per-stage``) on ``wl``; with
    ``pools_hw`` (the ``Hardware`` of a green-context run) its SMs per stage checked against
    the runtime's minimum (``check_stage_pools``): a given ``--sms`` before the simulator's own
    checks, so the runtime's minimum is the one named.

    Raises:
        ValueError: bad options (one line naming the option)."""
    from subgpu_jax.app.options import int_list, str_list

    cuts = str_list(o.cuts, "cuts") if o.cuts is not None else None
    sms = int_list(o.sms, "sms", unique=False) if o.sms else None
    if pools_hw is not None and sms:
        check_stage_pools(sms, pools_hw)
    cfg = config_from_options(wl, cuts, sms, o.microbatch, o.reuse, o.policy)  # ValueError
    if pools_hw is not None and not sms:   # the even split of many stages
        check_stage_pools(cfg.alloc, pools_hw)
    k = o.streams_per_stage
    if k != 1:
        cfg = dataclasses.replace(cfg, streams_per_stage=k)
    return cfg


def record_config(rec, wl) -> Config:
    """The ``Config`` of a SubGPU search record on ``wl`` (``Config.from_record``), checked.

    Raises:
        ValueError: a record that names no kernel of ``wl``'s region, lacks a field, or is not
            feasible on its GPU and batch (one line)."""
    from subgpu_jax.space.config import Config

    g1 = wl.graph(1)
    try:
        cfg = Config.from_record(rec, g1)
    except KeyError as e:
        raise ValueError(f"--from-search: the record lacks {e}") from None
    except ValueError as e:
        raise ValueError(f"--from-search: the record's configuration: {e}") from None
    cfg.check(g1.n, g1.edges, wl.hw, wl.batch)
    return cfg


@dataclass(frozen=True)
class PreparedRun:
    """The CPU part of one ``subgpu run`` (``prepare_run``).

    Fields:
        request: the request run: the given one, or with ``--from-search`` the one of the
            search's best record (``records.record_request``). wl: the simulator's
            ``Workload`` (bf16 experts on Hopper). cfg: the validated ``Config``. dep: the
            ``Deployment``. model: the ``ContentionModel`` that predicts (calibrated with
            ``--calibration``, the ``--collectives`` link time). hw_sim: the hardware it
            predicts with. m: the microbatch count. cache: the L2 policy the prediction
            simulates (``--cache``, else the setup's default: ``none`` with a calibration,
            ``lru`` without).
    """

    request: RunRequest
    wl: Any
    cfg: Config
    dep: Any
    model: Any
    hw_sim: Any
    m: int
    cache: str

    def timer(self):
        """A new predicting timer of this run: the event simulator (``score.timer.EventTimer``)
        of ``hw_sim``, ``model`` and ``cache`` in green contexts; its other SM modes come from
        it (``in_mode``). Built once by a caller that predicts this run several times
        (``run_report``; ``repredict``'s ``timer=``)."""
        from subgpu_jax.score.timer import EventTimer

        return EventTimer(self.hw_sim, self.model, self.cache)


def prepare_run(req: RunRequest) -> PreparedRun:
    """The CPU part of ``subgpu run``: the workload, the Config, the predicting model.

    Returns:
        a ``PreparedRun``.

    Raises:
        ValueError: bad options (one line naming the option).
    """
    from subgpu_jax.sim.contention import ContentionModel
    from subgpu_jax.model.graph import Deployment
    from subgpu_jax.app.fit import checked_workload
    from subgpu_jax.model.hardware import get_hardware
    from subgpu_jax.app.options import resolve_arch
    from hw_runtime.gpu.workload import hopper_arch

    req.check()
    if req.from_search:  # the search's best record becomes this run's request (one mapping)
        best, _ = config_from_search(req.from_search)
        check_search_matches(req, best)
        req = record_request(req, best)
    w = req.workload
    arch, ep = resolve_arch(req.arch_options())
    dep = Deployment(num_gpus=w.gpus, attn_tp=w.tp, attn_dp=w.dp, moe_ep=ep,
                     global_batch=w.batch, input_len=w.input_len, kv_history=w.kv_history)
    # the memory check sees the experts this run executes (bf16 on Hopper), not the preset's
    wl = checked_workload(hopper_arch(arch), dep, get_hardware(w.hardware), w.given_tp, w.ep,
                          kv_flag=False)
    hw = wl.hw
    rec = req.config.record
    if rec is not None:  # a search record (--from-search): its configuration, one decoding
        cfg = record_config(rec, wl)
    else:
        cfg = options_config(req.config, wl, hw if req.mode == "green" else None)
    if req.mode == "green" and rec is not None:   # plain streams (multistream) use no pool
        check_stage_pools(cfg.alloc, hw, "--from-search: the record")
    m = wl.microbatches_of(cfg.microbatch)
    from subgpu_jax.model.setup import GpuSetup

    setup = GpuSetup.uncalibrated(hw)
    if req.calibration:
        from subgpu_jax.model.calibration import load_calibration
        setup = load_calibration(req.calibration, wl.arch, dep, hw).bind(hw)
    model = ContentionModel(calibration=setup.calibration,
                            **collective_mode(req.collectives).contention_kwargs())
    return PreparedRun(request=req, wl=wl, cfg=cfg, dep=dep, model=model, hw_sim=setup.hw, m=m,
                       cache=setup.cache_policy(req.cache))


def run_report(prep: PreparedRun, ex, make_trace: bool = False) -> RunReport:
    """Measure (through ``ex``, an ``Executor`` or a stand-in with the same methods), predict
    and compare: the report ``subgpu run --json`` prints (``RunReport.to_json``).

    Args:
        prep: from ``prepare_run`` (its request's mode, timing, streams per stage, kernel
            choices, collectives and calibration; its resolved L2 policy).
        ex: executor (``measure``, ``temporal_config``, ``check_output``; the resolved kernel
            choices ``elementwise``, ``attention`` and ``moe_gemm``; ``profile`` and
            ``activity_counts`` when tracing).
        make_trace: profile a replay and add the timeline fields (and write the request's
            ``trace``).

    Returns:
        a ``RunReport`` (times in µs); with a trace its ``timeline``: per-stage busy and idle
        µs (measured, simulated), per-category residence µs (measured, simulated) and the error
        breakdown (``hw_runtime.timeline.error_breakdown``).
    """
    req, wl, cfg, dep, model, hw_sim, m = (prep.request, prep.wl, prep.cfg, prep.dep, prep.model,
                                           prep.hw_sim, prep.m)
    k, t, ks = req.config.streams_per_stage, req.timing, req.kernels
    t_cfg = ex.temporal_config()
    meas_t = ex.measure(t_cfg, "temporal", t.rounds, t.replays, t.warmup)
    meas_c = ex.measure(cfg, req.mode, t.rounds, t.replays, t.warmup, streams_per_stage=k)
    chk = ex.check_output(cfg, req.mode, streams_per_stage=k) if t.check else None
    g = wl.graph(m)
    # predicted whole steps (every run of region instances + the head), as the executor times
    from subgpu_jax.score.step import time_step
    from subgpu_jax.model.graph import build_forward
    timer = prep.timer()   # the predicting simulator, made once; its other modes: in_mode
    pred_t = repredict(wl, cfg, dep, model, hw_sim, m, prep.cache, "temporal", timer=timer)
    step_c = time_step(build_forward(wl.arch, dep, m), cfg,
                       timer.in_mode(req.mode), record=False)
    sim_c, pred_c = step_c.main, step_c.makespan_us
    # the kernels the executor's workload resolved (``Executor.elementwise`` ...)
    elementwise, attention, moe_gemm = ex.elementwise, ex.attention, ex.moe_gemm
    from subgpu_jax.sim.ceiling import overlap_ceiling
    return RunReport(
        workload={"model": wl.arch.name, "hardware": wl.hw.name, **dep.__dict__},
        config=RunConfig(D=cfg.D, w=cfg.w, cuts=cfg.cut_names(wl.graph(1)),
                         sms=list(cfg.alloc), microbatch=cfg.microbatch, microbatches=m,
                         mode=req.mode, streams_per_stage=k, collectives=req.collectives,
                         gemm=ks.gemm, elementwise=elementwise, attention=attention,
                         moe_gemm=moe_gemm,
                         lane_priority=(ex.priority_for(cfg, k) if hasattr(ex, "priority_for")
                                        else False)),
        temporal=Timed(measured_us=meas_t.makespan_us, predicted_us=pred_t,
                       spread=meas_t.spread),
        run=Timed(measured_us=meas_c.makespan_us, predicted_us=pred_c, spread=meas_c.spread),
        speedup_measured=meas_t.makespan_us / meas_c.makespan_us,
        speedup_predicted=pred_t / pred_c, output_check=chk, calibration=req.calibration,
        calibration_mismatch=calibration_mismatch(
            model.calibration, ks.gemm, elementwise, attention, req.collectives,
            moe_gemm if wl.arch.is_moe else None, dep.global_batch),
        step={"runs": step_c.runs, "head_us_predicted": step_c.head_us},
        ceiling=overlap_ceiling(wl.graph(1), wl.hw, meas_t.makespan_us, g),
        timeline=timeline_report(prep, ex, sim_c) if make_trace else None)


def calibration_mismatch(cal, gemm: str, elementwise: str, attention: str = "sdpa",
                         collectives: str = DEFAULT_COLLECTIVES,
                         moe_gemm: str | None = None, batch: int | None = None) -> list[str]:
    """How the kernels a calibration was measured with differ from the run's (its ``meta``:
    ``gemm``, ``elementwise``, ``attention``, ``collectives``, ``moe_gemm`` (compared only for
    MoE models: pass None otherwise; a per-batch ``meta.moe_gemm`` is read at ``batch``); a
    calibration from before a field existed used ``stock``
    GEMMs, the PyTorch ``torch`` chains, SDPA, ``sleep`` and ``bmm`` experts). Each difference also goes to stderr as a warning, since the
    prediction then describes other kernels than the ones measured.

    Returns:
        one line per differing field (empty when they agree or there is no calibration).
    """
    if cal is None:
        return []
    out = []
    from hw_runtime.gpu.policies import LEGACY
    default = dict(LEGACY, collectives=DEFAULT_COLLECTIVES)
    fields = [("gemm", gemm), ("elementwise", elementwise), ("attention", attention)]
    if not collective_mode(collectives).distributed:   # calibrate runs one GPU only
        fields.append(("collectives", collectives))
    if moe_gemm is not None:
        fields.append(("moe_gemm", moe_gemm))
    for field, run in fields:
        was = (cal.meta or {}).get(field) or default[field]
        if isinstance(was, dict):   # per batch (gpu.calibrate.moe_gemm_meta)
            was = was.get(str(batch), default[field]) if batch is not None else \
                "/".join(sorted(set(map(str, was.values()))))
        if was != run:
            out.append(f"calibration measured with {field}={was}, this run uses {run}")
    for line in out:
        print(f"warning: {line}: the prediction describes other kernels (re-run subgpu "
              f"calibrate with the run's options)", file=sys.stderr)
    return out


def timeline_report(prep: PreparedRun, ex, sim) -> dict:
    """Profile one replay (through ``ex``), map it to the plan, write the request's ``trace``
    (measured + simulated) and return the timeline fields of ``run_report``: the main region's
    run only (its ``LaunchPlan`` and ``sim``, its simulated run), without the other region
    kinds and the head."""
    from hw_runtime.timeline import (MappingError, category_residence, error_breakdown,
                                     map_activities, sim_intervals, stage_busy, trace_document)
    from subgpu_jax.app.store import atomic_write

    req, wl, cfg, model, hw_sim, m = (prep.request, prep.wl, prep.cfg, prep.model, prep.hw_sim,
                                      prep.m)
    k, trace = req.config.streams_per_stage, req.trace
    prof = ex.profile(cfg, req.mode, streams_per_stage=k)
    plan = prof["plan_object"]
    g = wl.graph(m)
    counts = ex.activity_counts(m, cfg, req.mode)
    try:
        meas_iv = map_activities(plan, prof["activities"], counts, k)
    except MappingError as e:   # the measurement stands; the raw activities are kept
        path = trace + ".activities.json"
        atomic_write(path, json.dumps({"activities": prof["activities"],
                                       "op_activities": counts}), "--trace")
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
    atomic_write(trace, json.dumps(trace_document([
        ("measured (GPU, one graph replay)", meas_iv, g),
        ("simulated (event simulator)", sim_iv, g)])), "--trace")
    brk = error_breakdown({"makespan_us": M, "busy_us": [b["busy_us"] for b in bm]},
                          {"makespan_us": P, "busy_us": [b["busy_us"] for b in bs]},
                          iso_meas, iso_model) if iso_meas is not None else None
    return {"trace": trace, "profiled_makespan_us": M,
            "stages_measured": bm, "stages_simulated": bs,
            "category_measured_us": category_residence(meas_iv, g),
            "category_simulated_us": {c: float(v) for c, v in sim.category_time.items()},
            "isolated_measured_us": iso_meas, "isolated_model_us": iso_model,
            "error_breakdown": brk,
            "note": None if cal is not None else "no --calibration: the isolated measured "
                    "times are unknown, so the error breakdown needs a calibration file"}


def repredict(wl, cfg, dep, model, hw_sim, m: int, cache: str, mode: str,
              timer=None) -> float:
    """The event simulator's whole-step makespan (µs) of a run as ``subgpu run`` executes it:
    ``mode`` ``"temporal"`` (the temporal baseline, whatever ``cfg`` is), ``"green"`` or
    ``"multistream"`` (``cfg`` at ``m`` microbatches); ``model`` carries the
    ``--collectives`` choice (``ContentionModel.link_time``).

    Args:
        timer: the predicting timer of ``hw_sim``, ``model`` and ``cache`` (an ``EventTimer``,
            ``PreparedRun.timer``), made once by a caller that predicts the same run in several
            modes; ``mode`` is its ``in_mode``. None: one made for this call.

    Raises:
        ValueError: a ``timer`` of another GPU, model or L2 policy than ``hw_sim``, ``model``
            and ``cache``."""
    from subgpu_jax.score.step import time_step
    from subgpu_jax.model.graph import build_forward
    from subgpu_jax.sim.l2cache import check_policy
    from subgpu_jax.space.config import temporal_of

    if timer is None:
        from subgpu_jax.score.timer import EventTimer

        timer = EventTimer(hw_sim, model, cache)
    elif (timer.hw is not hw_sim or timer.model is not model
          or timer.cache != check_policy(cache)):
        raise ValueError("repredict: timer must be the event timer of hw_sim, model and cache "
                         "(PreparedRun.timer)")
    if mode == "temporal" or cfg.D == 1:
        cfg, m, mode = temporal_of(wl), 1, "green"
    return float(time_step(build_forward(wl.arch, dep, m), cfg, timer.in_mode(mode),
                           record=False).makespan_us)


class GpuMeasurer:
    """``measure.Measurer`` on the local GPU: one ``TorchWorkload`` (weights, KV caches) and
    one ``Executor`` at a time, built for a workload and its kernel choices and kept while the
    callers ask for the same key (a global batch: the records of ``run --top`` or the
    candidates of ``subgpu tune`` of one batch share them).

    Args:
        dist: the process group of ``--collectives nccl`` (``distributed.init``), or None.
    """

    def __init__(self, dist=None) -> None:
        self.dist = dist
        self._key = None
        self._ex = None

    def executor(self, key, wl, kernels: KernelSettings, collectives: str):
        """The ``Executor`` of ``wl`` (the simulator's ``Workload``: its region graph, the link
        constants of its GPU) with ``kernels`` and ``collectives``: the one of the last call
        when ``key``, ``kernels`` and ``collectives`` are that call's (``wl`` is not read
        then), else a new one, the last one released first.

        Raises:
            ValueError: the workload does not fit in the GPU's memory (one line).
        """
        from hw_runtime.gpu.executor import Executor
        from hw_runtime.gpu.workload import TorchWorkload, WorkloadMemoryError

        if self._ex is not None and self._key == (key, kernels, collectives):
            return self._ex
        self.release()
        try:
            hwl = TorchWorkload(wl.graph(1), device="cuda", dist=self.dist, kernels=kernels,
                                **collective_kwargs(collectives), **link_kwargs(wl.hw))
        except WorkloadMemoryError as e:
            raise ValueError(str(e)) from None
        ex = Executor(hwl, gemm=kernels.gemm)
        ex.lane_priority = kernels.lane_priority
        self._key, self._ex = (key, kernels, collectives), ex
        return ex

    def report(self, prep: PreparedRun, make_trace: bool = False) -> RunReport:
        """See ``measure.Measurer.report`` (``run_report`` on this GPU; the executor is kept
        per global batch)."""
        from hw_runtime.gpu.partition import GreenContextError

        req = prep.request
        try:
            ex = self.executor(prep.dep.global_batch, prep.wl, req.kernels, req.collectives)
            return run_report(prep, ex, make_trace=make_trace)
        except GreenContextError as e:
            raise ValueError(str(e)) from None

    def release(self) -> None:
        """See ``measure.Measurer.release``."""
        if self._ex is None:
            return
        self._ex = self._key = None
        import gc

        gc.collect()
        try:
            import torch

            torch.cuda.empty_cache()
        except Exception:  # noqa: BLE001 - nothing to free without torch
            pass


def rank_gpu(req: RunRequest) -> tuple[int, int] | None:
    """Under ``--collectives nccl`` (one process per GPU, launched by torchrun): this process's
    ``(rank, world size)``, with its own GPU made device 0 (``CUDA_VISIBLE_DEVICES``, which
    counts only when set before CUDA starts in this process, so before
    ``device.resolve_hardware`` reads the GPU's name); None for a one-GPU run. Call it once
    per process.

    Raises:
        ValueError: not launched by torchrun, or ``--trace`` with nccl (one line).
    """
    if not collective_mode(req.collectives).distributed:
        return None
    from hw_runtime.gpu.distributed import visible_device, world_from_env
    rank, world, local = world_from_env()        # ValueError: how to launch it
    if req.trace:
        raise ValueError("--trace: not with --collectives nccl yet (every rank would have "
                         "to profile the same replays and write its own file)")
    os.environ["CUDA_VISIBLE_DEVICES"] = visible_device(local)
    return rank, world


def run_one(req: RunRequest, measurer: Measurer | None = None,
            ranks: tuple[int, int] | None = None) -> int:
    """``subgpu run`` of one configuration (the request's, or its ``--from-search``'s best):
    measure it and the temporal baseline, print measured against predicted; exit code 0.

    Args:
        req: the request. measurer: what measures it (None: a ``GpuMeasurer`` of this GPU,
            in the process group of ``--collectives nccl``). ranks: ``rank_gpu(req)`` when the
            caller already called it (None: called here).

    Raises:
        ValueError: bad options, or no GPU with green contexts (one line)."""
    prep = prepare_run(req)
    req, cfg, dep = prep.request, prep.cfg, prep.dep
    if req.trace:  # a folder, FIFO, device node or link is refused before any GPU work,
        from subgpu_jax.model.checks import out_file   # at the trace and at its side file
        out_file(req.trace, "--trace")
        out_file(req.trace + ".activities.json", "--trace")
    if ranks is None:
        ranks = rank_gpu(req)
    rank, world = ranks or (None, None)
    dist_ctx = None
    gpu_check()
    note_preset(req.workload.hardware)
    # ---- GPU from here on
    if rank is not None:   # a communicator per stream of the run (distributed.py)
        from hw_runtime.gpu.distributed import init
        dist_ctx = init(dep, rank=rank, world=world,
                        lanes=max(1, cfg.D) * max(1, req.config.streams_per_stage))
    res = (measurer or GpuMeasurer(dist=dist_ctx)).report(prep, make_trace=bool(req.trace))
    if dist_ctx is not None:
        res = slowest_rank(dist_ctx, res)
        dist_ctx.dist.barrier()
        dist_ctx.dist.destroy_process_group()
        if rank != 0:                # rank 0 reports the step of the slowest rank
            return 0
    print_run(prep, label_run(prep, res))
    return 0


def slowest_rank(ctx, res: RunReport) -> RunReport:
    """The deployment's report of one rank's ``res``: each measured step becomes the slowest
    rank's (``distributed.reduce_max``: a collective call, temporal first, on every rank), this
    rank's own kept as ``measured_us_this_rank``, the measured speedup follows, and
    ``collectives_run`` records the process group (``DistContext.record``).

    Returns:
        a new ``RunReport`` (``res`` is left as it was).
    """
    from hw_runtime.gpu.distributed import reduce_max

    t, r = (dataclasses.replace(x, measured_us=reduce_max(ctx, x.measured_us),
                                measured_us_this_rank=x.measured_us)
            for x in (res.temporal, res.run))
    return dataclasses.replace(res, temporal=t, run=r,
                               speedup_measured=t.measured_us / r.measured_us,
                               collectives_run=ctx.record())


def label_run(prep: PreparedRun, res: RunReport) -> RunReport:
    """``res`` (a ``run_report`` of ``prep``) with how it was obtained: ``collectives`` (how
    the measured runs executed them, ``provenance.collectives_label``) and ``prediction``
    (which model predicted it and the measured errors that apply,
    ``provenance.prediction_note``).

    Returns:
        a new ``RunReport``.
    """
    from subgpu_jax.app.provenance import collectives_label, prediction_note

    wl = prep.wl
    return dataclasses.replace(
        res, collectives=collectives_label(prep.request.collectives),
        prediction=prediction_note(wl.hw.name, prep.request.calibration, wl.arch.name,
                                   model_id=uncalibrated_model_id(wl.hw)))


def print_run(prep: PreparedRun, res: RunReport) -> None:
    """Print ``res`` (a ``run_report`` of ``prep``) as JSON (the request's ``json``:
    ``RunReport.to_json``) or as a table."""
    req, wl, cfg, dep, m = prep.request, prep.wl, prep.cfg, prep.dep, prep.m
    if req.json:
        print(res.to_json())
        return
    hw, rc = wl.hw, res.config
    from hw_runtime.gpu.workload import arch_label
    print(f"workload  {arch_label(wl.arch)} G={dep.global_batch} on {hw.name}; config "
          f"D={cfg.D} w={cfg.w} SMs={list(cfg.alloc)} b={cfg.microbatch} (m={m}) "
          f"mode={req.mode} streams/stage={rc.streams_per_stage} GEMMs={rc.gemm} "
          f"elementwise={rc.elementwise} attention={rc.attention}"
          + (f" moe-gemm={rc.moe_gemm}" if wl.arch.is_moe else "")
          + " (temporal too)")
    print(f"{'':10s}{'measured (µs)':>15s}{'predicted (µs)':>16s}{'error':>9s}{'spread':>8s}")
    for name, r in (("temporal", res.temporal), ("config", res.run)):
        print(f"{name:10s}{r.measured_us:15.1f}{r.predicted_us:16.1f}"
              f"{r.predicted_us / r.measured_us - 1:9.1%}{r.spread:8.1%}")
    print(f"speedup   measured {res.speedup_measured:.3f}x, predicted "
          f"{res.speedup_predicted:.3f}x")
    if res.collectives:
        hid = (": a gain may be that link time hidden"
               if collective_mode(req.collectives).link_time else "")
        print(f"measured  with {res.collectives}{hid}")
    if res.prediction:
        print(f"predicted by {res.prediction['made_by']}")
    from subgpu_jax.sim.ceiling import describe
    print(describe(res.ceiling) + " (measured temporal)")
    chk = res.output_check
    if chk is not None:
        print(f"output    pipelined vs sequential: bitwise_equal={chk['bitwise_equal']} "
              f"rel_l2={chk['rel_l2']:.2e}")
    tl = res.timeline
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
