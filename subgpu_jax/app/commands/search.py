"""``subgpu search``: Algorithm 1 over the outer grid, its records, Pareto frontiers, matched
gains and figures in a results folder (the job's driver: ``app.searchrun``; its options and
grid point scorer: ``app.searchjob``; its outputs: ``app.searchout``)."""

from __future__ import annotations

import argparse
import math
import os

from subgpu_jax.model.checks import ascii_int, bounded_int, out_dir
from subgpu_jax.model.graph import Deployment
from subgpu_jax.model.setup import GpuSetup
from subgpu_jax.model.models import MODELS
from subgpu_jax.search.strategies import (ALLOC_STRATEGIES, CUT_STRATEGY_REGISTRY, DEFAULT_CHEAP,
                                          DEFAULT_ALLOC_STRATEGY, DEFAULT_CUT_STRATEGY,
                                          strategy_meta)
from subgpu_jax.app.args import (add_grid_args, add_scoring_args, add_topology_args,
                                 add_workload_args, resolve_arch_ep, serving_options,
                                 strategies_from_args, topology_options)
from subgpu_jax.app.pool import MAX_AUTO_WORKERS, POINTS_PER_WORKER
from subgpu_jax.app.options import check_grid_size, int_list, resolve_cache, str_list

__all__ = ["add_search_parser", "cmd_search", "search_meta", "search_setup", "search_cluster",
           "start_search_workers", "prepare_worker"]


def add_search_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``search`` sub-command's parser to ``sub``."""
    se = sub.add_parser("search", help="Algorithm 1 over the outer grid: records, Pareto "
                        "frontiers, matched gains, figures (the main job)",
                        description="Search cuts, SM splits and microbatches at every grid "
                        "point (attention TP x DP and MoE EP for the GPU count, global batch, "
                        "microbatch count, stage count, dispatch policy), with the temporal "
                        "baseline at every (parallelism, batch). Writes records.csv, "
                        "records.jsonl, summary.json, frontier.png, frontier_by_stages.png and "
                        "gantt_best.png into --out. Running the same command again continues an "
                        "interrupted sweep; Ctrl-C exits with 130.")
    add_workload_args(se, serving=True, batch=False)
    add_topology_args(se)
    se.set_defaults(batch=None)
    _add_grid_args(se)
    _add_scoring_args(se)
    _add_run_args(se)
    c = se.add_argument_group("cluster (jax.distributed: grid points spread over processes and "
                              "their local devices; process 0 writes --out)")
    c.add_argument("--cluster", metavar="HOST:PORT", default=None,
                   help="coordinator address (process 0 listens there)")
    c.add_argument("--num-processes", type=int, default=1, help="processes in the cluster")
    c.add_argument("--process-id", type=int, default=0, help="this process, 0..N-1")
    c.add_argument("--cluster-timeout", type=float, default=600.0,
                   help="seconds to wait for the coordinator and for the other processes")


def _add_grid_args(se: argparse.ArgumentParser) -> None:
    g = se.add_argument_group("grid")
    add_grid_args(g)
    g.add_argument("--all-parallelisms", action="store_true",
                   help="enumerate every attention TP x DP split of --gpus (TP <= 8) instead of "
                        "only --tp/--dp")


#: Most grid points in flight: each keeps its deployment's tables until the deployment is done
#: (on the 2-core box 36 in flight took 3.5 GB at the peak, a breaker's measurement).
MAX_IN_FLIGHT = 1024


def _add_scoring_args(se: argparse.ArgumentParser) -> None:
    x = se.add_argument_group("scoring")
    add_scoring_args(x)
    x.add_argument("--calibration", metavar="FILE.json", default=None,
                   help="measured calibration (subgpu calibrate) for both scorers; must match "
                        "the model, deployment and --hardware")


def _add_run_args(se: argparse.ArgumentParser) -> None:
    r = se.add_argument_group("run")
    r.add_argument("--out", default="runs/search",
                   help="results folder. Default: runs/search")
    r.add_argument("--resume", action="store_true", help="continue the sweep in --out (must exist)")
    r.add_argument("--overwrite", action="store_true", help="delete the records in --out and "
                   "start afresh")
    r.add_argument("--repair", action="store_true", help="--out also holds another sweep's "
                   "manifest or records: keep this sweep's finished grid points, set the "
                   "others aside in records.<fingerprint>.jsonl, rebuild manifest.json")
    r.add_argument("--min-tokens-per-user", type=float, default=None, metavar="X",
                   help="service-level filter: frontiers and matched gains use only points "
                        "with at least X tokens/s per user (a per-token latency of at most "
                        "1e6/X µs); records.csv keeps every point")
    r.add_argument("--budget", type=int, default=None,
                   help="evaluate at most this many grid points in this call (>= 1)")
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    r.add_argument("--workers", default="auto", metavar="N|auto",
                   help="local CPU processes scoring grid points at once (JAX on the CPU, one "
                        "thread each; the records do not depend on it). Default: auto, the "
                        f"cores this process may use, at most {MAX_AUTO_WORKERS} and one per "
                        f"{POINTS_PER_WORKER} SubGPU grid points; 1 when JAX_PLATFORMS names "
                        "another platform or with --cluster, or with --in-flight > 1")
    r.add_argument("--in-flight", default=1, type=str, metavar="N",
                   help="grid points scored at once in this process (at most "
                        f"{MAX_IN_FLIGHT}), their exact steps timed together in one batched call "
                        "(needs --exact event-batched; the same configurations, makespans equal "
                        "to float rounding; each point in flight keeps its tables: about 0.1 GB "
                        "each). Default: 1")


def _in_flight(text) -> int:
    """``--in-flight N`` as an int in 1..``MAX_IN_FLIGHT``.

    Raises:
        ValueError: anything else (one line naming the flag)."""
    try:
        return bounded_int(ascii_int(text), "--in-flight", 1, MAX_IN_FLIGHT)
    except ValueError as e:
        msg = str(e)
        raise ValueError(msg if msg.startswith("--in-flight") else f"--in-flight {msg}") from None


def search_meta(a, arch, hw, pars, batches, stages, mbs, pols, ks, opts, serving, cut,
                alloc) -> dict:
    """The sweep's fingerprint (``store.grid_fingerprint``) of a parsed ``subgpu search``: the
    workload, the grid, the scorers and strategies, and every option away from its default
    (a default sweep keeps the fingerprint it had before an option existed); input files by
    content."""
    meta = {"model": arch.name, "arch": repr(arch), "hardware": hw.name, "gpus": a.gpus,
            "parallelisms": pars or "all", "batches": batches, "stages": stages,
            "microbatches": mbs, "policies": pols, "kv_history": a.kv_history,
            **({"streams_per_stage": ks} if ks != [1] else {}),
            "exact": a.exact, "cache": resolve_cache(a.cache, a.calibration), "l_sim": a.l_sim}
    if opts != dict(nvlink_domain=0, scaleout_GBps=50.0, routing="uniform",
                    routing_imbalance=1.0):
        meta["deployment_options"] = opts
    changed = {k: v for k, v in serving.items() if getattr(Deployment, k) != v}
    if changed:  # only when set: a default sweep keeps its fingerprint
        meta["serving_options"] = changed
    for key, st, reg, default in (
            ("cut_strategy", cut, CUT_STRATEGY_REGISTRY, DEFAULT_CUT_STRATEGY),
            ("alloc_strategy", alloc, ALLOC_STRATEGIES, DEFAULT_ALLOC_STRATEGY)):
        if strategy_meta(st, reg) != default:  # defaults: fingerprints unchanged
            meta[key] = strategy_meta(st, reg)
    if a.cheap != DEFAULT_CHEAP:
        meta["cheap"] = a.cheap
    if a.input_len != a.kv_history:  # records keep input_len (equal to kv_history by default)
        meta["input_len"] = a.input_len
    from subgpu_jax.app.fingerprint import file_digest

    if str(a.model).lower() not in MODELS:  # a config.json: its content defines the sweep
        cfg = os.path.join(a.model, "config.json") if os.path.isdir(a.model) else a.model
        meta["model_config"] = file_digest(cfg)
        meta["about"] = {"model": a.model}
    return meta


def search_setup(a, arch, hw, shape, pts, meta) -> GpuSetup:
    """The GPU setup of a search: uncalibrated, or bound to ``--calibration`` after checking it
    against the workload (``shape``: the first (TP, DP, EP)) and every grid point's graph, its
    content and path added to ``meta``.

    Raises:
        ValueError: a calibration for another workload, or missing a grid point's kernel (one
            line naming --calibration and the flags that select what it measured)."""
    from subgpu_jax.app.fingerprint import file_digest

    setup = GpuSetup.uncalibrated(hw)
    if a.calibration:
        from subgpu_jax.model.calibration import load_calibration
        cal = load_calibration(a.calibration)
        t0, d0, e0 = shape
        cal.check_workload(arch, Deployment(num_gpus=a.gpus, attn_tp=t0, attn_dp=d0,
                                            moe_ep=e0, global_batch=d0,
                                            input_len=a.input_len, kv_history=a.kv_history), hw)
        setup = cal.bind(hw)
        try:  # every grid point's graph measured, before any point is scored
            cal.check_grid(arch, ((p.deploy, p.microbatches) for p in pts))
        except ValueError as e:
            raise ValueError(f"{e} (--calibration {a.calibration}); or search only the batches "
                             "and microbatch counts it measured (--batches, --microbatches)"
                             ) from None
        meta["calibration"] = file_digest(a.calibration)  # content (store.grid_fingerprint)
        meta["about"] = {**meta.get("about", {}), "calibration": a.calibration}
    return setup


def search_cluster(a):
    """The ``app.distributed.Cluster`` of ``--cluster`` (joined when it has several
    processes), or None.

    Raises:
        ValueError: --num-processes/--process-id without --cluster."""
    cluster = None
    if a.cluster is not None or a.num_processes != 1 or a.process_id != 0:
        from subgpu_jax.app.distributed import Cluster, init_cluster
        if a.cluster is None:
            raise ValueError("cluster: --num-processes/--process-id need --cluster HOST:PORT")
        cluster = Cluster(a.cluster, a.num_processes, a.process_id, a.cluster_timeout)
        if cluster.num_processes > 1:
            init_cluster(cluster.address, cluster.num_processes, cluster.process_id,
                         min(cluster.timeout_s, 60.0))
    return cluster


def _grid_lists(a) -> tuple[list[int], list[int], list[int], list[str]]:
    """The grid's batches, stage counts, microbatch counts and policies, after the checks of
    the options that need no model (``--l-sim``, ``--min-tokens-per-user``, ``--budget``)."""
    from subgpu_jax.model.checks import choice
    from subgpu_jax.sim.l2cache import L2_POLICIES
    from subgpu_jax.space.config import DISPATCH_POLICIES

    batches = int_list(a.batches, "--batches")
    stages = int_list(a.stages, "--stages")
    mbs = int_list(a.microbatches, "--microbatches")
    pols = str_list(a.policies, "--policies")
    for p in pols:
        choice(p, "--policies", DISPATCH_POLICIES)
    if len(set(pols)) != len(pols):
        raise ValueError(f"--policies has duplicated values: {pols}")
    if a.cache is not None:   # as typed: a results folder records it verbatim
        choice(a.cache, "--cache", L2_POLICIES)
    if a.l_sim < 1:
        raise ValueError(f"--l-sim must be >= 1 passes, got {a.l_sim}")
    if a.min_tokens_per_user is not None and not (a.min_tokens_per_user > 0 and
                                                  math.isfinite(a.min_tokens_per_user)):
        raise ValueError(f"--min-tokens-per-user must be a positive number of tokens/s, got "
                         f"{a.min_tokens_per_user}")
    if a.budget is not None and a.budget < 1:
        raise ValueError(f"--budget must be >= 1 grid points, got {a.budget}")
    for f, v in (("--batches", batches), ("--stages", stages), ("--microbatches", mbs)):
        if any(x < 1 for x in v):
            raise ValueError(f"{f} must be positive integers, got {v}")
    return batches, stages, mbs, pols


def _parallelisms(a, arch, stages: list[int]) -> tuple[list | None, list]:
    """``(pars, shapes)``: the parallelisms the grid takes (None: every attention TP x DP of
    ``--gpus``, ``sweep.outer_parallelisms``) and the (TP, DP, EP) shapes they give, after
    checking the stage counts against the smallest region's kernels."""
    from subgpu_jax.app.sweep import outer_parallelisms

    given = getattr(a, "parallelism_given", [])
    if a.all_parallelisms and given:
        raise ValueError(f"{given[0]}: --all-parallelisms enumerates every attention TP x DP of "
                         f"--gpus; leave out --{' and --'.join(given)}")
    if a.all_parallelisms:
        pars = None  # every attention TP x DP of --gpus (sweep.outer_parallelisms)
        shapes = [(t, d, a.ep) for t, d, _ in outer_parallelisms(arch, a.gpus)]
    else:
        Deployment(num_gpus=a.gpus, attn_tp=a.tp, attn_dp=a.dp, moe_ep=a.ep,
                   global_batch=a.dp, kv_history=a.kv_history).validate(arch)
        pars = [(a.tp, a.dp, a.ep)]
        shapes = pars
    from subgpu_jax.model.graph import build_graph
    n_region = min(build_graph(arch, Deployment(num_gpus=a.gpus, attn_tp=t, attn_dp=d, moe_ep=e,
                                                global_batch=d, kv_history=a.kv_history),
                               1).n
                   for t, d, e in shapes)
    bad = [D for D in stages if not 2 <= D <= n_region]
    if bad:
        raise ValueError(f"--stages must be in 2..{n_region} (the region has {n_region} "
                         f"kernels), got {bad}")
    return pars, shapes


def _deployment_options(a, arch, hw, pars, batches) -> tuple[dict, dict]:
    """``(opts, serving)``: the topology and the serving options of every grid point's
    deployment, checked; with the given parallelism, a grid of which no batch fits the GPU's
    memory is refused naming the model's parameters and the flags that would make it fit."""
    if a.kv_lengths:
        raise ValueError("kv-lengths: per-request KV lengths are a subgpu simulate option; "
                         "search with --kv-history")
    opts = topology_options(a)
    serving = {k: v for k, v in serving_options(a).items() if k not in ("input_len", "kv_history")}
    Deployment(**opts, **serving)  # validates the options (one-line errors)
    if pars:  # no batch fits: the model's parameters and the flags that would make it fit
        from subgpu_jax.app.fit import check_grid_fits
        given = getattr(a, "parallelism_given", [])
        check_grid_fits(arch, hw, [Deployment(num_gpus=a.gpus, attn_tp=a.tp, attn_dp=a.dp,
                                              moe_ep=a.ep, global_batch=G, input_len=a.input_len,
                                              kv_history=a.kv_history, **opts, **serving)
                                   for G in batches if G % a.dp == 0],
                        a.tp if "tp" in given else None, None)
    return opts, serving


def _check_batch_and_out(a) -> None:
    """Refuse ``--batch`` and an ``--out`` that is a file or cannot hold a results folder (a
    read-only folder is accepted: a finished sweep is read where it is)."""
    if a.batch is not None:
        raise ValueError("batch: search takes a list of global batches, --batches; --batch is "
                         "for simulate and run")
    if os.path.exists(a.out) and not os.path.isdir(a.out):
        raise ValueError(f"out: {a.out!r} is a file; --out names the results folder (created "
                         "when missing)")
    out_dir(a.out, "--out", read_only_ok=True)  # a finished sweep is read where it is


def _workers(a, in_flight: int, pts) -> int:
    """The worker processes of ``--workers`` for the grid ``pts`` (1 for ``auto`` with
    ``--in-flight`` > 1), after checking that ``--in-flight`` > 1 has a timer that batches
    steps (``batches_structures``: its own ``time_many``), one worker and no cluster.

    Raises:
        ValueError: one line naming the flag at fault."""
    from subgpu_jax.app.pool import search_workers

    if in_flight > 1:
        from subgpu_jax.score.timer import TIMERS

        if not TIMERS[a.exact].batches_structures:    # the timer's capability
            batching = ", ".join(n for n, t in TIMERS.items() if t.batches_structures)
            raise ValueError(f"--in-flight {in_flight}: grid points in flight batch their exact "
                             f"steps together, which --exact {a.exact} cannot; use --exact "
                             f"{batching} or --in-flight 1")
    try:
        workers = (1 if in_flight > 1 and str(a.workers).strip().lower() == "auto" else
                   search_workers(a.workers, a.cluster is not None, sum(p.D > 1 for p in pts)))
    except ValueError as e:  # the library names its argument, the CLI user typed the flag
        raise ValueError(f"--{e}") from None
    if in_flight > 1 and (a.cluster is not None or workers > 1):   # --workers as it reads it
        raise ValueError(f"--in-flight {in_flight}: grid points in flight share this "
                         "process's timer; give --workers 1 (and no --cluster)")
    return workers


def _print_header(a, arch, hw, pts, skipped: list) -> None:
    """The search's first lines: the model, GPUs, grid size, exact scorer and results folder,
    then the first five combinations the grid left out and how many more."""
    print(f"search: {arch.name} on {a.gpus}x {hw.name}, {len(pts)} grid points "
          f"({sum(p.D == 1 for p in pts)} temporal), exact scorer: {a.exact}; results in {a.out}")
    for note in skipped[:5]:   # under the header: what the grid left out
        print(f"skipped: {note}")
    if len(skipped) > 5:
        print(f"skipped: ... {len(skipped) - 5} more infeasible combinations")


def _print_sweep_stats(stats: dict, in_flight: int, timer, workers: int) -> None:
    """What the sweep did: grid points evaluated, skipped and remaining, the batched calls of
    the grid points in flight, and the lockstep engine's share of the exact steps (one
    worker)."""
    again = f" ({stats['again']} again after dropped records)" if stats["again"] else ""
    print(f"evaluated {stats['evaluated']} grid points{again}, skipped {stats['skipped']} already "
          f"done, {stats['remaining']} remaining ({stats['seconds']:.1f} s)")
    b = stats.get("batches")
    if b and b["calls"]:
        print(f"in flight: {min(in_flight, stats['evaluated'])} grid points at once, their exact "
              f"steps in {b['calls']:,} batched calls of {b['rows'] / b['calls']:.1f} "
              f"allocations on average, at most {b['largest']:,}")
    if timer.lockstep_rows is not None and workers == 1:
        print(f"{timer.name}: {timer.lockstep_rows:,} allocations simulated in lockstep, "
              f"{timer.event_rows:,} by the event simulator (batches under {timer.min_batch} "
              f"allocations, D = 1, or structures the loop does not cover)")


def prepare_worker() -> None:
    """What a search worker started ahead (``start_search_workers``) does while it waits for its
    scorer: import the scorer's modules (JAX with them) and start JAX's CPU client (the
    workers run JAX on the CPU, ``app.pool.WORKER_ENV``)."""
    import jax

    from subgpu_jax.app import searchjob

    jax.devices()
    del searchjob   # imported for its modules: the scorer's spec unpickles into them


def start_search_workers(workers: int):
    """The worker processes of a search (``workers`` > 1), started before this process imports
    JAX (``cmd_search`` starts them once its grid gives their number, then enables JAX's
    compile cache): each imports JAX and the scorers (``prepare_worker``, 2-3 s of a core)
    while this process imports and sets up, instead of after. They share JAX's persistent
    compile cache folder (``app.platform.compile_cache_dir``, created here) as the sweep's own
    workers do.

    Returns:
        an ``app.pool.WorkerPool`` of ``workers`` processes (the caller closes it), or None for
        ``workers`` <= 1."""
    from subgpu_jax.app.platform import made_cache_folder
    from subgpu_jax.app.pool import WorkerPool

    if workers <= 1:
        return None
    return WorkerPool(workers, made_cache_folder(), prepare_worker)


def cmd_search(a) -> int:
    """Run ``subgpu search``: check the options, build the grid, start its worker processes
    (``start_search_workers``), enable JAX's compile cache, run the search job
    (``app.searchrun.run_search``) and print its summary and next steps (process 0 of a
    cluster; the others print the share they scored)."""
    from subgpu_jax.model.hardware import get_hardware
    from subgpu_jax.app.sweep import build_grid

    _check_batch_and_out(a)
    arch, ep = resolve_arch_ep(a)
    a.ep = ep
    hw = get_hardware(a.hardware)
    batches, stages, mbs, pols = _grid_lists(a)
    pars, shapes = _parallelisms(a, arch, stages)
    most = hw.sm_budget // hw.stage_min_sms
    if max(stages) > most:
        raise ValueError(f"--stages: at most {most} on the {hw.name} ({hw.stage_min_sms} SMs per "
                         f"stage of its {hw.sm_budget}), got {max(stages)}")
    opts, serving = _deployment_options(a, arch, hw, pars, batches)
    skipped: list = []
    ks = int_list(a.streams_per_stage, "streams-per-stage")
    check_grid_size(len(shapes), len(batches), len(mbs) * len(stages) * len(pols) * len(ks))
    pts = build_grid(arch, a.gpus, batches, stages, mbs, pols, kv_history=a.kv_history,
                     input_len=a.input_len, parallelisms=pars, hw=hw, skipped=skipped,
                     deploy_options={**opts, **serving}, streams=ks)
    cut, alloc = strategies_from_args(a)
    meta = search_meta(a, arch, hw, pars, batches, stages, mbs, pols, ks, opts, serving,
                       cut, alloc)
    in_flight = _in_flight(a.in_flight)
    workers = _workers(a, in_flight, pts)
    pool = start_search_workers(_ahead_count(a, workers, pts))
    try:
        return _search_with(a, arch, hw, pts, skipped, shapes, meta, cut, alloc, in_flight,
                            workers, pool)
    finally:
        if pool is not None:
            pool.close()


def _ahead_count(a, workers: int, pts) -> int:
    """Worker processes ``cmd_search`` starts before it imports JAX: as many as the sweep runs
    on a folder without records (one per grid point to score, at most ``--budget`` points);
    none for a folder that may hold finished points (the sweep then starts as many as the
    points left, as without this) or with one worker."""
    if workers <= 1 or not (a.overwrite or not os.path.exists(
            os.path.join(a.out, "records.jsonl"))):
        return 0
    return min(workers, len(pts) if a.budget is None else min(len(pts), a.budget))


def _search_with(a, arch, hw, pts, skipped, shapes, meta, cut, alloc, in_flight: int,
                 workers: int, pool) -> int:
    """``cmd_search`` once its grid and workers are set: enable JAX's compile cache, make the
    timer, run the search and print it (``pool``: workers started ahead, or None)."""
    from subgpu_jax.app.platform import enable_compile_cache
    from subgpu_jax.app.searchrun import run_search
    from subgpu_jax.app.searchjob import SearchOptions

    enable_compile_cache()  # compiled scorers kept between runs ($SUBGPU_JAX_CACHE)
    _print_header(a, arch, hw, pts, skipped)
    setup = search_setup(a, arch, hw, shapes[0], pts, meta)
    cluster = search_cluster(a)
    hw = setup.hw
    from subgpu_jax.score.timer import timer_for

    timer = timer_for(setup, a.exact, meta["cache"])  # the exact scorer, made once here
    opts = SearchOptions(timer=timer, cache=meta["cache"], L_sim=a.l_sim,
                         cut_strategy=cut, cheap=a.cheap,
                         alloc_strategy=alloc, resume=a.resume, budget=a.budget,
                         progress=not a.no_progress, min_tokens_per_user=a.min_tokens_per_user,
                         overwrite=a.overwrite, repair=a.repair, workers=workers,
                         in_flight=in_flight, pool=pool)
    stats, summ = run_search(arch, setup, pts, a.out, meta, opts, cluster=cluster, log=print)
    if summ is None:
        print(f"process {a.process_id}: scored its share of {stats['evaluated']} grid points; "
              f"process 0 writes {a.out}")
        return 0
    _print_sweep_stats(stats, in_flight, timer, workers)
    from subgpu_jax.app.searchtext import print_next_steps, print_search_summary

    print_search_summary(summ, hw.name, timer)
    print_next_steps(a, summ, hw.name, arch)
    return 0
