"""``subgpu`` command line: ``simulate``, ``search``, ``space`` here; ``run`` and ``calibrate``
from the ``subgpu.commands`` entry point (``hw_runtime/commands/``).

Every bad input ends with a one-line ``error: ...`` on stderr and exit code 2, no traceback; a
closed stdout (``subgpu ... | head``) ends quietly with exit code 141.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
from importlib.metadata import entry_points
from typing import Sequence

from subgpu_jax.model.checks import out_dir, out_file, pos_int
from subgpu_jax.model.graph import Deployment
from subgpu_jax.model.setup import GpuSetup
from subgpu_jax.model.models import MODELS
from subgpu_jax.sim.contention import uncalibrated_model_id
from subgpu_jax.score.timer import DEFAULT_TIMER, TIMERS, timer_help
from subgpu_jax.app.args import add_strategy_args, add_workload_args, strategies_from_args
from subgpu_jax.app.wholestep import head_run, recorded_runs, whole_step_text
from subgpu_jax.app.pool import MAX_AUTO_WORKERS, POINTS_PER_WORKER
from subgpu_jax.search.strategies import (ALLOC_STRATEGIES, CHEAP_ESTIMATORS,
                                          CUT_STRATEGY_REGISTRY, DEFAULT_ALLOC_STRATEGY,
                                          DEFAULT_CUT_STRATEGY, strategy_meta)
from subgpu_jax.space.config import config_from_options, temporal_of
from subgpu_jax.app.options import (OneLineParser, check_bounds,
                                    check_grid_size, choose_split,
                                    int_list as _int_list, kv_lengths_from, resolve_arch_ep,
                                    resolve_cache, resolve_context, resolve_parallelism,
                                    serving_options,
                                    str_list as _str_list)

__all__ = ["main", "build_parser"]


#: NVLink domain presets (GPUs per domain; 0 = all GPUs in one domain): DGX/HGX 8-GPU nodes,
#: GB200 NVL72 racks.
TOPOLOGIES = {"one-domain": 0, "hgx8": 8, "nvl72": 72}


def _add_topology_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("topology (default: all GPUs in one NVLink domain)")
    g.add_argument("--topology", default="one-domain", choices=tuple(TOPOLOGIES),
                   help="NVLink domain preset: one-domain (default), hgx8 (DGX/HGX 8-GPU nodes), "
                        "nvl72 (GB200 NVL72 racks); collectives spanning domains are charged at "
                        "--scaleout-gbps")
    g.add_argument("--nvlink-domain", type=int, default=None,
                   help="GPUs per NVLink domain (overrides --topology; 0 = one domain)")
    g.add_argument("--scaleout-gbps", type=float, default=50.0,
                   help="scale-out bandwidth per GPU and direction between domains, GB/s, "
                        "0.01..100000. Default: 50 (one 400 Gb/s NIC per GPU)")
    r = p.add_argument_group("traffic (default: uniform routing, every request at --kv-history)")
    r.add_argument("--routing", default="uniform", choices=("uniform", "multinomial"),
                   help="expert load of the busiest EP rank: uniform (the mean G*k/n, default) "
                        "or multinomial (expected maximum under random routing of a microbatch)")
    r.add_argument("--routing-imbalance", type=float, default=1.0,
                   help="extra factor >= 1 on the busiest EP rank's load (busiest / mean)")
    r.add_argument("--kv-lengths", default=None, metavar="FILE|DIST",
                   help="per-request KV lengths (tokens): a file of integers (whitespace, comma "
                        "or JSON list), or uniform:LO:HI or lognormal:MEDIAN:SIGMA (SIGMA <= 4) "
                        "sampled for the G requests (seed 0), all in 1..16777216 tokens; "
                        "attention is charged for the busiest DP rank")


def _workload(a):
    from subgpu_jax.app.fit import checked_workload, given_tp_ep
    from subgpu_jax.model.hardware import get_hardware

    arch, ep = resolve_arch_ep(a)
    topo = {}
    if hasattr(a, "topology"):
        dom = a.nvlink_domain if a.nvlink_domain is not None else TOPOLOGIES[a.topology]
        topo = dict(nvlink_domain=dom, scaleout_GBps=a.scaleout_gbps, routing=a.routing,
                    routing_imbalance=a.routing_imbalance)
        if a.kv_lengths:
            topo["kv_lengths"] = kv_lengths_from(a.kv_lengths, a.batch)
    dep = Deployment(num_gpus=a.gpus, attn_tp=a.tp, attn_dp=a.dp, moe_ep=ep,
                     global_batch=a.batch, **serving_options(a), **topo)
    return checked_workload(arch, dep, get_hardware(a.hardware), *given_tp_ep(a))


#: Entry-point group through which other packages add ``subgpu`` sub-commands (``hw_runtime``
#: adds ``run`` and ``calibrate``: pyproject ``[project.entry-points."subgpu.commands"]``).
COMMANDS_GROUP = "subgpu.commands"


def add_plugin_commands(sub: argparse._SubParsersAction) -> None:
    """Call every ``subgpu.commands`` entry point (``add_commands(sub)``) to add its sub-commands.

    Plugins are discovered with ``importlib.metadata.entry_points``; this package never imports
    them by name. A plugin that fails to load is reported on stderr and skipped.
    """
    seen = set()
    for ep in sorted(entry_points(group=COMMANDS_GROUP), key=lambda e: e.name):
        if ep.value in seen:  # the same plugin declared by two distributions on the path
            continue
        seen.add(ep.value)
        try:
            add = ep.load()
        except ImportError as e:  # pragma: no cover - a broken optional plugin
            print(f"subgpu: commands plugin {ep.name!r} not loaded: {e}", file=sys.stderr)
            continue
        add(sub)


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of the ``subgpu`` command (all sub-commands)."""
    p = OneLineParser(
        prog="subgpu",
        description="SubGPU pipelining of LLM decode: simulate and search configurations "
                    "(cuts, SM pools, microbatches) against the temporal baseline.")
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("simulate", help="temporal baseline vs one configuration: makespan (µs), "
                       "per-user and per-GPU throughput (tokens/s)",
                       description="Evaluate the temporal baseline and one SubGPU configuration. "
                       "Default configuration: the 'Macro' design (the region's full-attention "
                       "FMHA alone on stage 1, the rest of the region on stage 0 with boundary "
                       "reuse, two microbatches) with the SM split found by a quick search.")
    add_workload_args(s, serving=True)
    _add_topology_args(s)
    c = s.add_argument_group("configuration")
    c.add_argument("--cuts", default=None,
                   help="comma-separated kernels (names like L1.attn, or indices) where segments "
                        "2..K start. Default: the Macro cut around the full-attention FMHA")
    c.add_argument("--sms", default=None,
                   help="comma-separated SMs per stage (multiples of the GPU's quantum, >= its "
                        "minimum, summing to its budget: B200 148, H200/H100 128), 'even' (the "
                        "budget split evenly) or 'search'. Default: search (a quick Algorithm 2 "
                        "search over the splits of the cut with the chosen simulator, a few "
                        "seconds: the split decides whether SubGPU wins)")
    c.add_argument("--microbatch", type=int, default=None,
                   help="microbatch size b in requests of the per-GPU attention batch R = G/d; "
                        "must divide R. Default: R/2 (two microbatches)")
    c.add_argument("--reuse", dest="reuse", action="store_true", default=None,
                   help="boundary reuse w=1: the last segment shares stage 0 with the next "
                        "region's first (default for the Macro cut)")
    c.add_argument("--no-reuse", dest="reuse", action="store_false",
                   help="no boundary reuse, w=0: K = D segments")
    c.add_argument("--policy", default="wavefront",
                   help="global dispatch order: wavefront (default) or layer_major")
    c.add_argument("--streams-per-stage", type=int, default=1, metavar="K",
                   help="streams per stage: a stage runs up to K tasks at once, sharing its SMs "
                        "(docs/method.md, 'Streams per stage'). Default: 1")
    sm = s.add_argument_group("simulator")
    sm.add_argument("--simulator", default=DEFAULT_TIMER, choices=tuple(TIMERS),
                    help="the timer of the step: " + timer_help())
    sm.add_argument("--no-contention", action="store_true",
                    help="event simulator with every kernel at its isolated static rate")
    sm.add_argument("--cache", default=None, help="L2 residency policy of the event simulator: "
                    "lru, fifo, none. Default: none with --calibration, else lru")
    sm.add_argument("--calibration", metavar="FILE.json", default=None,
                    help="measured calibration (subgpu calibrate): per-kernel time tables over "
                         "SM pools and the HBM bandwidth curve replace the analytical kernel "
                         "times (must match the model, deployment and --hardware)")
    o = s.add_argument_group("outputs")
    o.add_argument("--json", action="store_true", help="print machine-readable JSON")
    o.add_argument("--trace", metavar="FILE.json", default=None,
                   help="write the configuration's schedule as a Chrome/Perfetto trace-event file "
                        "(open in ui.perfetto.dev); event simulator only")
    o.add_argument("--gantt", metavar="FILE.png", default=None,
                   help="draw the stage timeline (kernels coloured by category); event only")
    o.add_argument("--utilization", metavar="FILE.png", default=None,
                   help="plot HBM and SM utilisation over time, temporal above the configuration; "
                        "event simulator only")
    s.add_argument("--list-kernels", action="store_true",
                   help="print the region's kernels (index, name, category) and exit")

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
    _add_topology_args(se)
    se.set_defaults(batch=None)
    g = se.add_argument_group("grid")
    g.add_argument("--batches", default="512,1024,2048",
                   help="comma-separated global batches G (requests). Default: 512,1024,2048")
    g.add_argument("--stages", default="2,3",
                   help="comma-separated stage counts D (>= 2). Default: 2,3 (use 2,3,4,5,6 "
                        "for the full grid)")
    g.add_argument("--microbatches", default="2,4",
                   help="comma-separated microbatch counts m (each must divide R = G/d). "
                        "Default: 2,4")
    g.add_argument("--policies", default="wavefront",
                   help="comma-separated dispatch policies (wavefront, layer_major)")
    g.add_argument("--streams-per-stage", default="1", metavar="K[,K...]",
                   help="comma-separated streams per stage k (docs/method.md, 'Streams per "
                        "stage'); every pipelined grid point is searched for each. Default: 1")
    g.add_argument("--all-parallelisms", action="store_true",
                   help="enumerate every attention TP x DP split of --gpus (TP <= 8) instead of "
                        "only --tp/--dp")
    x = se.add_argument_group("scoring")
    x.add_argument("--exact", default=DEFAULT_TIMER, choices=tuple(TIMERS),
                   help="the exact scorer of the search (vcontention scores every move of a "
                        "polish pass in one call): " + timer_help())
    x.add_argument("--cache", default=None, help="L2 policy (default none if calibrated, else lru)")
    x.add_argument("--cheap", default="auto", choices=tuple(CHEAP_ESTIMATORS),
                   help="cheap estimator of the allocation search: auto (default: the "
                        "contention-aware vcontention scorer with --exact event, else static), "
                        "vcontention, or static (isolated kernel durations)")
    add_strategy_args(x)
    x.add_argument("--calibration", metavar="FILE.json", default=None,
                   help="measured calibration (subgpu calibrate) for both scorers; must match "
                        "the model, deployment and --hardware")
    x.add_argument("--l-sim", type=int, default=2,
                   help="pass limit of the exact polish (Algorithm 2 with the simulator)")
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
                        "another platform or with --cluster")
    c = se.add_argument_group("cluster (jax.distributed: grid points spread over processes and "
                              "their local devices; process 0 writes --out)")
    c.add_argument("--cluster", metavar="HOST:PORT", default=None,
                   help="coordinator address (process 0 listens there)")
    c.add_argument("--num-processes", type=int, default=1, help="processes in the cluster")
    c.add_argument("--process-id", type=int, default=0, help="this process, 0..N-1")
    c.add_argument("--cluster-timeout", type=float, default=600.0,
                   help="seconds to wait for the coordinator and for the other processes")

    add_plugin_commands(sub)

    sp = sub.add_parser("space", help="size of the design space (cuts x bindings x allocations)",
                        description="Print the number of legal cuts (w=0 and w=1), SM allocations "
                        "and their product for each stage count, for a workload's region graph or "
                        "a synthetic chain.")
    add_workload_args(sp)
    sp.add_argument("--chain", type=int, default=None,
                    help="use a synthetic chain of this many operators instead of the model")
    sp.add_argument("--stages", default="2,3,4,5,6",
                    help="comma-separated stage counts D. Default: 2,3,4,5,6")
    sp.add_argument("--sms", type=int, default=None,
                    help="SM budget to split (SMs). Default: the hardware's budget")
    sp.add_argument("--quantum", type=int, default=None,
                    help="SM quantum g (SMs). Default: the hardware's")
    sp.add_argument("--min-pool", type=int, default=None,
                    help="minimum SMs per stage. Default: the hardware's")
    sp.add_argument("--json", action="store_true", help="print machine-readable JSON")
    return p


def _cmd_simulate(a) -> int:
    from subgpu_jax.model.accounting import throughput_record
    from subgpu_jax.model.generation import search_step
    from subgpu_jax.model.memory import memory_use
    from subgpu_jax.model.workload import Workload

    wl = _workload(a)
    full = wl.deploy  # a whole generation's (output_len > 0), or the one step's
    mem = memory_use(wl.arch, full, wl.hw)
    if full.output_len:  # graphs, split and figures at the generation's middle step
        wl = Workload.from_model(wl.arch, search_step(full), wl.hw)
    g1 = wl.graph(1)
    if a.list_kernels:
        runs = wl.arch.region_runs()
        if len(runs) > 1:  # name the main region, the one --cuts refers to
            print("# main region (the one --cuts names): "
                  + ", ".join("/".join(lk) for lk in g1.region_kinds)
                  + f", {g1.num_regions} instances; other runs: "
                  + "; ".join(f"{c} x " + ", ".join("/".join(lk) for lk in b)
                              for b, c in runs if b != g1.region_kinds))
        for i, k in enumerate(g1.kernels):
            print(f"{i:3d}  {k.name:18s} {k.category}")
        return 0
    setup = GpuSetup.uncalibrated(wl.hw)
    if getattr(a, "calibration", None):
        from subgpu_jax.model.calibration import load_calibration
        cal = load_calibration(a.calibration, wl.arch, wl.deploy, wl.hw)
        setup = cal.bind(wl.hw)
        for mm in sorted({1, max(1, wl.batch // (a.microbatch or max(1, wl.batch // 2)))}):
            if wl.batch % mm == 0:
                cal.check_graph(wl.graph(mm))
    hw, cal = setup.hw, setup.calibration
    sms_mode = (a.sms or "search").strip().lower()
    sms = None
    if sms_mode not in ("even", "search"):
        try:
            sms = _int_list(a.sms, "sms", unique=False)
        except ValueError:
            raise ValueError(f"sms must be comma-separated SMs per stage, 'even' or 'search', "
                             f"got {a.sms!r}") from None
    cuts = _str_list(a.cuts, "cuts") if a.cuts is not None else None
    cfg = config_from_options(wl, cuts, sms, a.microbatch, a.reuse, a.policy)
    cfg = dataclasses.replace(cfg, streams_per_stage=pos_int(a.streams_per_stage,
                                                             "--streams-per-stage"))
    m = wl.microbatches_of(cfg.microbatch)
    tok = wl.deploy.tokens_per_gpu
    extra_t: dict = {}
    extra_c: dict = {}
    trace_shows = None  # what --trace and --gantt draw: the main run and the head
    from subgpu_jax.sim.l2cache import check_policy as _check_cache

    a.cache = _check_cache(setup.cache_policy(a.cache))
    from subgpu_jax.app.provenance import prediction_note
    from subgpu_jax.app.simprint import print_simulation
    from subgpu_jax.model.graph import build_forward
    from subgpu_jax.score.step import time_step
    from subgpu_jax.score.timer import timer_for

    fp1, fpm = build_forward(wl.arch, wl.deploy, 1), build_forward(wl.arch, wl.deploy, m)
    timer = timer_for(setup, a.simulator, a.cache, contention=not a.no_contention)
    dm = setup.duration_model
    if not timer.reference:
        for f in ("trace", "gantt", "utilization"):
            if getattr(a, f):
                raise ValueError(f"--{f} needs --simulator event")

        def score(c):  # the whole step's makespan (µs) under this timer (record=True would
            # hand the main run to the event simulator: ContentionTimer.time)
            return time_step(fpm, c, timer, record=False).makespan_us

        cfg, split = choose_split(wl, hw, cfg, m, sms_mode, score, dm, score)
        s_temp = time_step(fp1, temporal_of(wl), timer, record=False)
        s_cfg = time_step(fpm, cfg, timer, record=False)
        label = timer.describe()
    else:
        from subgpu_jax.app import viz

        for f in ("trace", "gantt", "utilization"):  # before any simulation
            v = getattr(a, f)
            if v is not None:
                (out_file if f == "trace" else viz.check_image_path)(v, f"--{f}")
        rec = True  # utilisation means are part of the output

        def sim_exact(c):  # the whole step's makespan (µs), as reported below
            return time_step(fpm, c, timer, record=False).makespan_us

        cfg, split = choose_split(wl, hw, cfg, m, sms_mode, sim_exact, dm, sim_exact)
        s_temp = time_step(fp1, temporal_of(wl), timer, record=rec)
        s_cfg = time_step(fpm, cfg, timer, record=rec)
        r_temp, r_cfg = s_temp.main, s_cfg.main
        from subgpu_jax.app.report import sim_extra
        extra_t, extra_c = sim_extra(r_temp), sim_extra(r_cfg)
        extra_t["category_time_us"] = s_temp.category_time_us
        extra_c["category_time_us"] = s_cfg.category_time_us
        label = ("event simulator, " + ("no contention" if a.no_contention else "contention")
                 + f", L2 cache {a.cache}")
        # what the figures and the trace draw: every run in layer order, then the head
        sc_c = {"text": whole_step_text(s_cfg, with_head=True)}
        if a.trace or a.gantt or a.utilization:  # the whole step (issue 41 item 8)
            head = head_run(fpm, timer)
            trace_shows = whole_step_text(s_cfg, with_head=head is not None)
            runs_c = recorded_runs(fpm, cfg, s_cfg, timer)
        if a.trace:
            viz.write_trace(r_cfg, a.trace, scope=trace_shows, head=head, runs=runs_c)
        if a.gantt:
            viz.plot_gantt(r_cfg, a.gantt, title=f"{wl.arch.name} on {hw.name}: D={cfg.D} "
                           f"w={cfg.w} SMs={list(cfg.alloc)} m={m}", scope=trace_shows,
                           head=head, runs=runs_c)
        if a.utilization:
            # the head is the same kernels on the whole GPU in both steps
            viz.plot_utilisation(r_temp, r_cfg, a.utilization, heads=(head, head),
                                 scopes=(whole_step_text(s_temp, head is not None),
                                         trace_shows),
                                 runs=(recorded_runs(fp1, temporal_of(wl), s_temp, timer),
                                       runs_c))
    t_temp, t_cfg = s_temp.makespan_us, s_cfg.makespan_us
    gen = None
    if full.output_len:  # the mean step over the generation (docs/accounting.md item 6)
        from subgpu_jax.score.step import time_generation

        gen = {n: time_generation(wl.arch, full, c, mm, timer)
               for n, c, mm in (("temporal", temporal_of(wl), 1), ("config", cfg, m))}
        t_temp, t_cfg = gen["temporal"].makespan_us, gen["config"].makespan_us
    if cal is not None:
        label += f", calibrated ({a.calibration})"
    pc = wl.arch.param_counts()
    res = {
        "workload": {"model": wl.arch.name, "family": wl.arch.family, "hardware": hw.name,
                     **{k: v for k, v in full.__dict__.items() if k != "kv_lengths"},
                     "kv_lengths": ({"count": len(wl.deploy.kv_lengths),
                                     "mean": float(sum(wl.deploy.kv_lengths)
                                                   / len(wl.deploy.kv_lengths)),
                                     "max": max(wl.deploy.kv_lengths),
                                     "busiest_rank_tokens": wl.deploy.kv_tokens()}
                                    if wl.deploy.kv_lengths else None),
                     "topology": wl.deploy.topology_label(),
                     "expert_dtype": wl.arch.expert_dtype if wl.arch.is_moe else None,
                     "parameters": {"total": pc["total"], "active": pc["active"]},
                     "regions": [{"layers": [list(x) for x in gr.region_kinds],
                                  "instances": c, "kernels": gr.n} for gr, c in fp1.runs]},
        "duration_model": label,
        "temporal": {**throughput_record(t_temp, tok), **extra_t,
                     "step": {"runs": s_temp.runs, "head_us": s_temp.head_us}},
        "config": {"D": cfg.D, "w": cfg.w, "K": cfg.K,
                   "segments": [[k.name for k, s in zip(g1.kernels, cfg.seg_of) if s == j]
                                for j in range(cfg.K)],
                   "stage_of_segment": list(cfg.stage_of_segment()), "sms": list(cfg.alloc),
                   "microbatch": cfg.microbatch, "microbatches": m, "policy": cfg.policy,
                   "streams_per_stage": cfg.streams_per_stage,
                   **throughput_record(t_cfg, tok), **extra_c,
                   "step": {"runs": s_cfg.runs, "head_us": s_cfg.head_us}},
    }
    res["speedup"] = t_temp / t_cfg
    from subgpu_jax.app.simtext import serving_json, serving_lines
    res.update(serving_json(wl.arch, full, m, mem, gen))
    from subgpu_jax.sim.ceiling import overlap_ceiling
    res["ceiling"] = overlap_ceiling(g1, hw, t_temp, wl.graph(m))
    if cfg.D > 1:  # the three modes and the verdict (app.modes)
        from subgpu_jax.app.modes import config_verdict
        res["modes"] = config_verdict(wl.arch, full, cfg, hw, timer.model if timer.contention
                                      else None, a.cache, cal is not None, t_temp,
                                      t_cfg if timer.reference else None)
    res["sms_choice"] = {k: v for k, v in split.items() if k != "even_makespan_us"}
    if "even_makespan_us" in split:
        res["sms_choice"]["even_speedup"] = t_temp / split["even_makespan_us"]
    if timer.reference:  # what --gantt/--utilization/--trace draw of the step
        res["figures_show"] = sc_c["text"]
    if trace_shows is not None:
        res["trace_shows"] = trace_shows
    res["prediction"] = prediction_note(hw.name, a.calibration, wl.arch.name, timer,
                                        model_id=uncalibrated_model_id(
                                            hw, getattr(timer, "model", None)))
    if a.json:
        print(json.dumps(res, indent=2))
        return 0
    print_simulation(a, res, wl, cfg, m, fp1, hw, full,
                     serving_lines(wl.arch, full, m, mem, gen))
    return 0


def _cmd_space(a) -> int:
    from subgpu_jax.space.config import space_size

    stages = _int_list(a.stages, "stages")
    if a.chain is not None:
        if not 1 <= a.chain <= 100_000:
            raise ValueError(f"chain must be 1..100000 operators, got {a.chain}")
        n, edges, label = a.chain, [(i, i + 1) for i in range(a.chain - 1)], f"{a.chain}-operator chain"
        from subgpu_jax.model.hardware import get_hardware
        hw = get_hardware(a.hardware)
    else:
        from subgpu_jax.model.graph import build_graph
        from subgpu_jax.model.hardware import get_hardware

        arch, ep = resolve_arch_ep(a)  # counts do not depend on batch or KV: no memory check
        dep = Deployment(num_gpus=a.gpus, attn_tp=a.tp, attn_dp=a.dp, moe_ep=ep,
                         global_batch=a.batch, input_len=a.input_len, kv_history=a.kv_history)
        g = build_graph(arch, dep, 1)
        hw = get_hardware(a.hardware)
        n, edges = g.n, list(g.edges)
        label = f"{arch.name} region ({g.n} kernels, {g.layers_per_region} layer(s))"
    budget = a.sms if a.sms is not None else hw.sm_budget
    q = a.quantum if a.quantum is not None else hw.sm_quantum
    mn = a.min_pool if a.min_pool is not None else max(q, hw.min_pool_sms if a.quantum is None else q)
    for f, v in (("sms", budget), ("quantum", q), ("min-pool", mn)):
        if v <= 0:
            raise ValueError(f"{f} must be a positive integer, got {v}")
    if budget % q or mn % q:
        raise ValueError(f"sms ({budget}) and min-pool ({mn}) must be multiples of quantum ({q})")
    if mn > budget:
        raise ValueError(f"min-pool ({mn}) must not exceed the SM budget ({budget})")
    rows = []
    for D in stages:
        if not 2 <= D <= n:
            raise ValueError(f"stages must be in 2..{n} for {n} operators, got {D}")
        rows.append({"D": D, **space_size(n, edges, D, budget, q, mn)})
    if a.json:
        print(json.dumps({"graph": label, "sm_budget": budget, "quantum": q, "min_pool": mn,
                          "rows": rows}, indent=2))
        return 0
    print(f"{label}; {budget} SMs in quanta of {q}, >= {mn} per stage")
    cols = (("D", "D"), ("cuts w=0", "cuts_w0"), ("cuts w=1", "cuts_w1"),
            ("cut+binding", "cut_binding_choices"), ("allocations", "allocations"),
            ("total", "total"))
    cells = [[f"{r[k]:,d}" for _, k in cols] for r in rows]
    # each column as wide as its widest entry: counts of long chains have dozens of digits
    width = [max(len(h), *(len(c[j]) for c in cells)) for j, (h, _) in enumerate(cols)]
    print("  ".join(h.rjust(w) for (h, _), w in zip(cols, width)))
    for c in cells:
        print("  ".join(x.rjust(w) for x, w in zip(c, width)))
    return 0


def _search_meta(a, arch, hw, pars, batches, stages, mbs, pols, ks, opts, serving, cut,
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
    if a.cheap != "auto":
        meta["cheap"] = a.cheap
    if a.input_len != a.kv_history:  # records keep input_len (equal to kv_history by default)
        meta["input_len"] = a.input_len
    from subgpu_jax.app.fingerprint import file_digest

    if str(a.model).lower() not in MODELS:  # a config.json: its content defines the sweep
        cfg = os.path.join(a.model, "config.json") if os.path.isdir(a.model) else a.model
        meta["model_config"] = file_digest(cfg)
        meta["about"] = {"model": a.model}
    return meta


def _search_setup(a, arch, hw, shape, pts, meta) -> GpuSetup:
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


def _search_cluster(a):
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


def _cmd_search(a) -> int:
    from subgpu_jax.model.hardware import get_hardware
    from subgpu_jax.app.searchjob import run_search, SearchOptions
    from subgpu_jax.app.sweep import build_grid, outer_parallelisms

    if a.batch is not None:
        raise ValueError("batch: search takes a list of global batches, --batches; --batch is "
                         "for simulate and run")
    if os.path.exists(a.out) and not os.path.isdir(a.out):
        raise ValueError(f"out: {a.out!r} is a file; --out names the results folder (created "
                         "when missing)")
    out_dir(a.out, "--out", read_only_ok=True)  # a finished sweep is read where it is
    arch, ep = resolve_arch_ep(a)
    a.ep = ep
    hw = get_hardware(a.hardware)
    batches = _int_list(a.batches, "batches")
    stages = _int_list(a.stages, "stages")
    mbs = _int_list(a.microbatches, "microbatches")
    pols = [p.strip() for p in a.policies.split(",") if p.strip()]
    if not pols:
        raise ValueError("policies must not be empty (wavefront, layer_major)")
    if len(set(pols)) != len(pols):
        raise ValueError(f"policies has duplicated values: {pols}")
    if a.l_sim < 1:
        raise ValueError(f"l-sim must be >= 1 passes, got {a.l_sim}")
    if a.min_tokens_per_user is not None and not (a.min_tokens_per_user > 0 and
                                                  math.isfinite(a.min_tokens_per_user)):
        raise ValueError(f"min-tokens-per-user must be a positive number of tokens/s, got "
                         f"{a.min_tokens_per_user}")
    if a.budget is not None and a.budget < 1:
        raise ValueError(f"budget must be >= 1 grid points, got {a.budget}")
    for f, v in (("batches", batches), ("microbatches", mbs)):
        if any(x < 1 for x in v):
            raise ValueError(f"{f} must be positive integers, got {v}")
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
    from subgpu_jax.model.graph import build_graph as _bg
    n_region = min(_bg(arch, Deployment(num_gpus=a.gpus, attn_tp=t, attn_dp=d, moe_ep=e,
                                        global_batch=d, kv_history=a.kv_history), 1).n
                   for t, d, e in shapes)
    bad = [D for D in stages if not 2 <= D <= n_region]
    if bad:
        raise ValueError(f"stages must be in 2..{n_region} (the region has {n_region} kernels), "
                         f"got {bad}")
    if a.kv_lengths:
        raise ValueError("kv-lengths: per-request KV lengths are a subgpu simulate option; "
                         "search with --kv-history")
    opts = dict(nvlink_domain=(a.nvlink_domain if a.nvlink_domain is not None
                               else TOPOLOGIES[a.topology]),
                scaleout_GBps=a.scaleout_gbps, routing=a.routing,
                routing_imbalance=a.routing_imbalance)
    serving = {k: v for k, v in serving_options(a).items() if k not in ("input_len", "kv_history")}
    Deployment(**opts, **serving)  # validates the options (one-line errors)
    if pars:  # no batch fits: the model's parameters and the flags that would make it fit
        from subgpu_jax.app.fit import check_grid_fits
        check_grid_fits(arch, hw, [Deployment(num_gpus=a.gpus, attn_tp=a.tp, attn_dp=a.dp,
                                              moe_ep=a.ep, global_batch=G, input_len=a.input_len,
                                              kv_history=a.kv_history, **opts, **serving)
                                   for G in batches if G % a.dp == 0],
                        a.tp if "tp" in given else None, None)
    skipped: list = []
    ks = _int_list(a.streams_per_stage, "streams-per-stage")
    check_grid_size(len(shapes), len(batches), len(mbs) * len(stages) * len(pols) * len(ks))
    pts = build_grid(arch, a.gpus, batches, stages, mbs, pols, kv_history=a.kv_history,
                     input_len=a.input_len, parallelisms=pars, hw=hw, skipped=skipped,
                     deploy_options={**opts, **serving}, streams=ks)
    for note in skipped[:5]:
        print(f"skipped: {note}")
    if len(skipped) > 5:
        print(f"skipped: ... {len(skipped) - 5} more infeasible combinations")
    cut, alloc = strategies_from_args(a)
    meta = _search_meta(a, arch, hw, pars, batches, stages, mbs, pols, ks, opts, serving,
                        cut, alloc)
    from subgpu_jax.app.pool import search_workers

    try:
        workers = search_workers(a.workers, a.cluster is not None, sum(p.D > 1 for p in pts))
    except ValueError as e:  # the library names its argument, the CLI user typed the flag
        raise ValueError(f"--{e}") from None
    print(f"search: {arch.name} on {a.gpus}x {hw.name}, {len(pts)} grid points "
          f"({sum(p.D == 1 for p in pts)} temporal), exact scorer: {a.exact}; results in {a.out}")
    setup = _search_setup(a, arch, hw, shapes[0], pts, meta)
    cluster = _search_cluster(a)
    hw = setup.hw
    from subgpu_jax.score.timer import timer_for

    timer = timer_for(setup, a.exact, meta["cache"])  # the exact scorer, made once here
    opts = SearchOptions(timer=timer, cache=meta["cache"], L_sim=a.l_sim,
                         cut_strategy=cut, cheap=a.cheap,
                         alloc_strategy=alloc, resume=a.resume, budget=a.budget,
                         progress=not a.no_progress, min_tokens_per_user=a.min_tokens_per_user,
                         overwrite=a.overwrite, repair=a.repair, workers=workers)
    stats, summ = run_search(arch, setup, pts, a.out, meta, opts, cluster=cluster, log=print)
    if summ is None:
        print(f"process {a.process_id}: scored its share of {stats['evaluated']} grid points; "
              f"process 0 writes {a.out}")
        return 0
    again = f" ({stats['again']} again after dropped records)" if stats["again"] else ""
    print(f"evaluated {stats['evaluated']} grid points{again}, skipped {stats['skipped']} already "
          f"done, {stats['remaining']} remaining ({stats['seconds']:.1f} s)")
    from subgpu_jax.app.searchtext import print_next_steps, print_search_summary

    print_search_summary(summ, hw.name, timer)
    print_next_steps(a, summ, hw.name)
    return 0


def _broken_pipe() -> int:
    """The reader of stdout went away (``subgpu ... | head``): stop quietly, as the shell's own
    tools do. Points stdout at /dev/null so the interpreter's final flush cannot fail again.

    Returns:
        141 (128 + SIGPIPE, the status a shell reports for a tool stopped by a closed pipe).
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # pragma: no cover - stdout without a file descriptor
        pass
    return 141


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``subgpu`` console script; returns the exit code (2 on bad input, 130
    on Ctrl-C: ``search`` stops at its next safe point, other commands at once; see
    :func:`subgpu_jax.app.interrupt.run_cli`)."""
    from subgpu_jax.app.interrupt import run_cli

    def parse_and_run() -> int:
        parser = build_parser()
        return _dispatch(parser, parser.parse_args(argv))

    return run_cli(parse_and_run, console=argv is None)


def _dispatch(parser: argparse.ArgumentParser, a) -> int:
    """Run the parsed command; bad input -> one line and 2, Ctrl-C -> one line and 130."""
    import warnings

    from subgpu_jax.app.interrupt import (EXIT_CODE, Interrupted, configure_command, requested,
                                          stop_message)
    from subgpu_jax.app.flagterms import derived_terms, in_flag_terms
    from subgpu_jax.app.platform import enable_compile_cache, pin_jax_to_cpu
    from subgpu_jax.app.pool import WorkerError

    configure_command(a.cmd, getattr(a, "out", ""))
    commands = {"simulate": _cmd_simulate, "space": _cmd_space, "search": _cmd_search}
    run = commands.get(a.cmd) or getattr(a, "func", None)
    if run is None:  # pragma: no cover - every sub-parser has a command
        parser.error(f"unknown command {a.cmd}")

    def _one_line(message, category, filename, lineno, file=None, line=None):
        print(f"warning: {message}", file=sys.stderr)

    shown = warnings.showwarning
    warnings.showwarning = _one_line  # e.g. calibration extrapolation: one line, no source
    try:
        pin_jax_to_cpu()  # the scorers on the CPU, never beside the measured workload on a GPU
        check_bounds(a)  # every count bounded before any work (checks.LIMITS)
        if getattr(a, "chain", None) is None:
            resolve_parallelism(a)
        resolve_context(a)
        enable_compile_cache()  # compiled scorers kept between runs ($SUBGPU_JAX_CACHE)
        rc = run(a)
        if requested():  # Ctrl-C after the last safe point: still 130
            raise Interrupted
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        return rc
    except ValueError as e:  # the model layer's field names told as the flags that set them
        print(f"error: {in_flag_terms(str(e), a.cmd, derived_terms(a))}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return _broken_pipe()
    except OSError as e:  # unwritable or unreadable paths given on the command line
        where = f" {e.filename!r}" if getattr(e, "filename", None) else ""
        print(f"error: cannot access{where}: {e.strerror or e}", file=sys.stderr)
        return 2
    except WorkerError as e:   # a worker process failed or died: one line, not its traceback
        print(f"error: {e}", file=sys.stderr)
        return 1
    except (Interrupted, KeyboardInterrupt):
        print(stop_message(), file=sys.stderr)  # the search's own once its grid is done
        return EXIT_CODE
    finally:
        warnings.showwarning = shown


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
