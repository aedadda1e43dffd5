"""The main job's driver: ``run_search`` scores every grid point of a sweep (one process, worker
processes, grid points in flight, or a cluster) into the results folder's store and writes its
outputs (``app.searchjob``: the options and the grid point's scorer; ``app.searchout``: the
outputs)."""

from __future__ import annotations

import os
from collections import Counter
from typing import Callable, Sequence

from subgpu_jax.model.hardware import Hardware
from subgpu_jax.model.models import ModelArch
from subgpu_jax.model.setup import GpuSetup
from subgpu_jax.sim.batchednb import compile_ahead, compile_later, engine_ready
from subgpu_jax.sim.contention import uncalibrated_model_id
from subgpu_jax.app.interrupt import Interrupted
from subgpu_jax.app.provenance import prediction_note
from subgpu_jax.app.searchjob import PointScorer, ScorerSpec, SearchOptions
from subgpu_jax.app.searchout import write_outputs
from subgpu_jax.app.store import SweepStore
from subgpu_jax.app.sweep import GridPoint, pending_points, record_matches_key, run_sweep

__all__ = ["run_search", "structure_key", "ENGINE_MIN_POINTS", "engine_plan",
           "REUSE_MIN_POINTS", "reuses_programs"]

#: The fewest SubGPU grid points left to score for which a sweep that finds no compiled
#: event-simulator engine compiles it before its exact steps (``sim.batchednb.compile_ahead``);
#: a smaller sweep times with the Python simulator (the same makespans) and leaves the
#: compilation to a detached process for the next run
#: (``sim.batchednb.compile_later``). The compilation costs 6.7-6.8 s of a core
#: (``compile_now`` on the 2-core box, 2026-12-07); on the main job's 12 SubGPU grid points the
#: engine saved 3.2 s of CPU against the Python simulator (user CPU 34.3 s with a cold engine
#: cache against 31.0 s with the Python simulator, the compilation included; search 16.7 s
#: against 15.2 s), about 0.27 s a point: the compilation pays from about 25 such points.
ENGINE_MIN_POINTS = 24


def structure_key(p: GridPoint) -> tuple:
    """The group of a grid point for the worker pool's scheduler (``app.pool.Scheduler``):
    stages, microbatches, policy and streams. The vectorised scorer's compiled programs take
    the kernel tables as arguments, so their shapes depend on the task DAG's (padded) size, not
    on the batch or the deployment: in one process, the GPT-OSS 120B B200 frontier grid's 9
    deployments of D = 4, m = 2 (attention TP 1, 2, 4, 8; MoE EP 1-32) traced their 2 programs
    once, at the first point (2026-12-07; at D = 5, m = 16, 8 programs, 4.5 s of tracing and
    1-17 s of compilation, none again for EP 1 -> 4). A worker keeping to one such family
    traces and compiles it once."""
    return (p.D, p.microbatches, p.policy, p.streams)


def _run_pool(points: Sequence[GridPoint], scorer: "PointScorer", store, o: SearchOptions,
              say: Callable[[str], None]) -> dict:
    """The sweep on ``o.workers`` local processes (``app.pool.run_sweep_pool``), with the same
    progress bar as ``run_sweep`` and one ``say`` line (how many processes); JAX's persistent
    compilation cache folder (``SUBGPU_JAX_CACHE`` or its default,
    ``app.platform.compile_cache_dir``) is shared by the workers where it exists; workers
    started ahead (``o.pool``, ``app.pool.WorkerPool``) are used where given. Ctrl-C stops
    it (the finished points are stored) and raises ``Interrupted`` as ``run_sweep`` does."""
    from tqdm import tqdm

    from subgpu_jax.app.platform import compile_cache_dir
    from subgpu_jax.app.pool import run_sweep_pool

    todo, skipped, _ = pending_points(points, store, o.budget)
    # longest first (stages x microbatches: the search's cost grows with both; a stable sort,
    # so the points of one deployment stay together within a size): the last point to start
    # is a short one and the workers end together (``run_search`` writes the outputs in grid
    # order, so they do not depend on the schedule)
    todo = sorted(todo, key=lambda p: -p.D * p.microbatches)
    n = min(o.workers, len(todo))
    if n > 1:
        say(f"{n} worker processes score {len(todo)} grid points")
    cache = compile_cache_dir()   # shared only where this process could keep it
    cache = cache if cache and os.path.isdir(cache) else None
    best = max((r.get("speedup_vs_temporal") or 0.0 for r in store.records), default=0.0)
    bar = tqdm(total=len(todo), disable=not o.progress, unit="pt",
               desc=f"grid points ({max(1, n)} workers)")

    def on_point(p, recs, cpu) -> None:
        nonlocal best
        best = max([best] + [r.get("speedup_vs_temporal") or 0.0 for r in recs])
        bar.update(1)
        bar.set_postfix_str(f"best speedup {best:.3f}x")

    try:
        stats = run_sweep_pool(todo, ScorerSpec.like(scorer), store, o.workers, budget=None,
                               on_point=on_point, compile_cache=cache,
                               own_sigint=False, group=structure_key, pool=o.pool)
    finally:
        bar.close()
    if stats["stopped"] == "interrupt":
        raise Interrupted("interrupted")
    stats["skipped"] = skipped
    stats["remaining"] = sum(p.key not in store.done for p in points)
    return stats


def _check_in_flight(o: SearchOptions, cluster) -> None:
    """Refuse ``o.in_flight > 1`` where grid points in flight cannot share one timer's batches
    (no timer given, a timer whose ``time_many`` is not its own: ``batches_structures``,
    worker processes or a cluster); ValueError naming ``--in-flight``."""
    if o.in_flight <= 1:
        return
    if o.timer is None or not o.timer.batches_structures:
        raise ValueError(f"in-flight: grid points in flight batch their exact steps "
                         f"together, which the {'event' if o.timer is None else o.timer.name!r}"
                         " timer cannot; use --exact event-batched or --in-flight 1")
    if o.workers > 1 or (cluster is not None and cluster.num_processes > 1):
        raise ValueError("in-flight: grid points in flight share this process's timer; "
                         "give --workers 1 (and no --cluster) with --in-flight > 1")


def _run_local(points: Sequence[GridPoint], scorer: "PointScorer", store, o: SearchOptions,
               say: Callable[[str], None], folder: str) -> dict:
    """The sweep on this machine: ``o.workers`` processes (``_run_pool``), ``o.in_flight``
    grid points in flight sharing one ``CoalescingTimer`` (``stats["batches"]``: its calls,
    rows and largest batch), or one point at a time (``run_sweep``). Ctrl-C: how many points
    are stored goes into the interrupt message, and ``Interrupted`` is raised again."""
    try:
        if o.workers > 1:
            return _run_pool(points, scorer, store, o, say)
        if o.in_flight <= 1:
            return run_sweep(points, scorer, store, budget=o.budget, progress=o.progress,
                             on_new_deployment=scorer.release)
        from subgpu_jax.score.coalesce import CoalescingTimer

        scorer.coalescer = CoalescingTimer(scorer.timer)
        try:
            stats = run_sweep(points, scorer, store, budget=o.budget, progress=o.progress,
                              on_new_deployment=scorer.release, in_flight=o.in_flight,
                              coalescer=scorer.coalescer)
            stats["batches"] = {"calls": scorer.coalescer.flushes,
                                "rows": scorer.coalescer.rows,
                                "largest": scorer.coalescer.largest}
            return stats
        finally:
            scorer.coalescer = None
    except Interrupted:   # say how many are stored, not "the finished ones"
        from subgpu_jax.app.interrupt import set_message

        set_message(f"interrupted: {sum(p.key in store.done for p in points)} of "
                    f"{len(points)} grid points are stored in {folder}; run the same "
                    "command again to continue")
        raise


def _summarise(arch: ModelArch, points: Sequence[GridPoint], folder: str, meta: dict,
               scorer: "PointScorer", store, o: SearchOptions) -> dict:
    """``write_outputs`` of the store's records in grid order (whatever the schedule), titled
    with the model, GPU, kind of model (calibrated or not) and timer, and the prediction note
    (``prediction_note``); nothing is written for a read-only store."""
    hw, timer = scorer.hw, scorer.timer
    kind = "calibrated" if (meta or {}).get("calibration") else "uncalibrated"
    title = (f"{arch.name} on {points[0].deploy.num_gpus}x {hw.name}: predicted "
             f"({kind} model, {timer.name} scorer)") if points else arch.name
    cal_file = ((meta or {}).get("about") or {}).get("calibration")  # its path (cli.py)
    note = prediction_note(hw.name, cal_file or (meta or {}).get("calibration"), arch.name,
                           timer, model_id=uncalibrated_model_id(hw))
    order = {p.key: i for i, p in enumerate(points)}
    recs = sorted(store.records, key=lambda r: order.get(r.get("grid_key"), len(order)))
    return write_outputs(recs, folder, title, scorer, min_tokens_per_user=o.min_tokens_per_user,
                         write=not store.read_only, prediction=note)


def _report_store(store: SweepStore, points: Sequence[GridPoint],
                  say: Callable[[str], None]) -> None:
    """Pass what opening the store found to ``say`` (its notes and dropped records); of a
    read-only folder, say that its finished sweep will be summarised (``_summarise`` does it,
    writing nothing), or refuse it (ValueError naming ``--out``) before any grid point is
    computed when its sweep is not finished."""
    for line in store.notes + store.report.lines():
        say(line)
    left = sum(p.key not in store.done for p in points)
    if store.read_only:
        if left:
            raise ValueError(f"{store.read_only_why} and {left} of {len(points)} grid points "
                             "are not done; make it writable or choose another --out")
        say(f"{store.read_only_why}: its finished sweep is summarised, no file is rewritten")


def _sweep_meta(meta: dict, scorer: "PointScorer") -> dict:
    """``meta`` with what defines the sweep beside it: the uncalibrated model version (it times
    every kernel a calibration lacks: a folder made with another version is refused, never
    reused under this one's name) and, with a contention timer, the contention model's co-run
    fit."""
    meta = {"duration_model": uncalibrated_model_id(scorer.hw), **meta}
    if scorer.timer.contention:
        meta = {"latency_load_gain": scorer.model.latency_gain, **meta}
    return meta


def _sweep_and_summarise(arch: ModelArch, points: Sequence[GridPoint], folder: str, meta: dict,
                         scorer: "PointScorer", store, o: SearchOptions, cluster,
                         distributed: bool, say: Callable[[str], None]
                         ) -> tuple[dict, dict | None]:
    """``run_search``'s work once its store is open: report the store, score the grid points
    (over the cluster or in this process), add ``again``, ``dropped`` and ``read_only`` to the
    sweep's stats and summarise it; a cluster's other processes (no store) return their stats
    with summary None."""
    if store is not None:
        _report_store(store, points, say)
    if distributed:
        from subgpu_jax.app.distributed import run_sweep_distributed

        stats = run_sweep_distributed(points, scorer, store, cluster, o.budget)
        if store is None:
            stats["dropped"], stats["again"] = [], 0
            return stats, None
    else:
        stats = _run_local(points, scorer, store, o, say, folder)
    if stats["remaining"] == 0:  # a Ctrl-C from here on leaves nothing to continue
        from subgpu_jax.app.interrupt import set_message

        set_message(f"interrupted after the last grid point: all {len(points)} are stored "
                    f"in {folder}; the same command again computes none and writes the "
                    "summary and figures")
    stats["again"] = sum(k in store.done for k in store.report.again)
    stats["dropped"] = store.report.lines()
    stats["read_only"] = store.read_only
    summary = _summarise(arch, points, folder, meta, scorer, store, o)
    return stats, summary


def engine_plan(timer, points_left: int) -> str:
    """How a sweep's exact steps get the compiled event-simulator engine: ``"ready"`` (the timer
    has none, it is compiled already, ``sim.batchednb.engine_ready``, or no point is left to
    score), ``"compile"`` (compiled once ahead of the points: ``points_left`` >=
    ``ENGINE_MIN_POINTS`` SubGPU grid points to score, or a timer whose engine is what it is,
    ``without_engine()`` keeping it: ``event-batched``) or ``"python"`` (fewer: the sweep times
    with ``timer.without_engine()`` and compiles the engine for the next run once its points
    are scored).

    Args:
        timer: the sweep's exact timer (``score.timing.Timer``).
        points_left: SubGPU grid points (D > 1) this run scores (finished ones and those past
            ``--budget`` excluded)."""
    if not timer.compiled or points_left <= 0 or engine_ready():
        return "ready"
    if points_left >= ENGINE_MIN_POINTS or timer.without_engine() is timer:
        return "compile"
    return "python"


#: The fewest SubGPU grid points of one structure family (``structure_key``) that make a sweep
#: reuse its compiled programs (``reuses_programs``): its worker processes keep to a family
#: (``app.pool.Scheduler``), so one process scores a family's points with one set of programs.
#: Where the slices form is taken for that (``score.vcontention.GATHER_MIN_TRIPLES_REUSED``),
#: on a warm JAX cache its first point cost up to 1.1 s more than the gather form's and each
#: later one 0.55-0.7 s less at D = 4-6, m = 4-8 (repaid from the third point; 4 keeps a
#: margin), but D = 3, m = 8 lost 2.4 s on its first point and gained 0.07 s on the others, and
#: cold caches cost more (docs/results.md "Speed", the reuse rule's table). The rule is a whole
#: sweep's, not a family's: once one family has the points, every family takes the reused
#: threshold. The main job (3 batches per family) stays below it.
REUSE_MIN_POINTS = 4


def reuses_programs(points: Sequence[GridPoint]) -> bool:
    """Whether a sweep of ``points`` (those it scores: finished ones and those past
    ``--budget`` excluded) scores at least ``REUSE_MIN_POINTS`` SubGPU grid points of one
    structure family, so that its processes reuse their compiled programs
    (``search.strategies.CheapEstimator.for_sweep``, ``score.vcoptions.VCOptions.reuse``).
    A frontier study does; a search of one grid point per (stages, microbatches) does not."""
    counts = Counter(structure_key(p) for p in points if p.D > 1)
    return max(counts.values(), default=0) >= REUSE_MIN_POINTS


def run_search(arch: ModelArch, hw: GpuSetup | Hardware, points: Sequence[GridPoint], folder: str,
               meta: dict, options: SearchOptions | None = None, cluster=None,
               log: Callable[[str], None] | None = None) -> tuple[dict, dict]:
    """Run (or continue) a sweep and write its outputs (``min_tokens_per_user``: see
    ``write_outputs``).

    The results folder's store (:class:`subgpu_jax.app.store.SweepStore`, on process 0) is
    locked for the whole call; its finished grid points are reused (the same sweep re-run, or
    ``resume``), damaged records are dropped and recomputed, and what it found is passed to
    ``log`` before the sweep starts. A read-only folder holding a finished sweep is summarised
    without writing.

    Args:
        arch, points, folder, meta: the sweep (``app.sweep``).
        hw: the GPU, a ``GpuSetup`` or a ``Hardware`` (as ``PointScorer``'s ``setup``).
        options: ``SearchOptions`` (None: the defaults).
        cluster: an ``app.distributed.Cluster`` (already initialised with ``init_cluster``):
            the grid points are spread over its processes and their local devices; process 0
            writes the folder, the other processes write nothing and return summary None.
        log: receives one-line notes (lock taken over, manifest rebuilt, dropped records).

    Returns:
        ``(sweep_stats, summary)``; ``sweep_stats`` as ``run_sweep`` plus ``dropped`` (the load
        report's lines), ``again`` and ``read_only`` (on a cluster's other processes only
        ``dropped`` and ``again``, and summary None).

    Raises:
        ValueError: bad scorer options, a folder in use by another run (names its PID), holding
            another sweep, or read-only with grid points left; a budget < 1; a calibration for
            another model/deployment/GPU; ``in_flight`` > 1 with a timer without ``time_many``,
            worker processes or a cluster (``_check_in_flight``).
        OSError: the folder cannot be written (disk full; names the file).
        Interrupted: Ctrl-C (:mod:`subgpu_jax.app.interrupt`); finished grid points are kept.
    """
    o = SearchOptions() if options is None else options
    _check_in_flight(o, cluster)
    say = log or (lambda line: None)
    scorer = PointScorer(arch, hw, o.timer, o.cache, o.L_sim, cut_strategy=o.cut_strategy,
                         cheap=o.cheap, alloc_strategy=o.alloc_strategy)
    distributed = cluster is not None and cluster.num_processes > 1
    meta = _sweep_meta(meta, scorer)
    store = None
    if not distributed or cluster.is_main:
        store = SweepStore(folder, meta, resume=o.resume, overwrite=o.overwrite,
                           keys=[p.key for p in points], check_record=record_matches_key,
                           repair=o.repair)
    # the compiled engine, compiled once in the background while this process and its workers
    # build their tables (every process needing it waits for that compilation, then loads it);
    # the one place a sweep starts it (subgpu search, the frontier studies, the benchmarks);
    # a small sweep times with the Python simulator instead (engine_plan)
    ahead = None
    try:
        todo = points if store is None else pending_points(points, store, o.budget)[0]
        plan = engine_plan(scorer.timer, sum(p.D > 1 for p in todo))
        # a cluster's processes take points round robin (no family per process) and only
        # process 0 knows the finished ones: no reuse there, the same form on every process
        cheap = scorer.cheap.for_sweep(not distributed and reuses_programs(todo))
        if plan == "python" or cheap != scorer.cheap:
            timer = scorer.timer.without_engine() if plan == "python" else scorer.timer
            scorer = PointScorer(arch, hw, timer, o.cache, o.L_sim, cut_strategy=o.cut_strategy,
                                 cheap=cheap, alloc_strategy=o.alloc_strategy)
        ahead = compile_ahead() if plan == "compile" else None
        out = _sweep_and_summarise(arch, points, folder, meta, scorer, store, o, cluster,
                                   distributed, say)
    except BaseException:   # a refused folder or Ctrl-C: no waiting for the compilation
        if ahead is not None:
            ahead.terminate()
        raise
    else:
        from subgpu_jax.app.interrupt import requested

        if plan == "python" and not requested():   # a Ctrl-C while it wrote: nothing started
            compile_later()
        return out
    finally:
        if store is not None:
            store.close()
        if ahead is not None:
            ahead.wait()
