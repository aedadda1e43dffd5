"""``subgpu simulate``: the temporal baseline against one SubGPU configuration (makespan,
per-user and per-GPU throughput), its SM split searched, given or even, with the three modes and
the verdict, as text or ``--json``; the event simulator also draws the step (``--trace``,
``--gantt``, ``--utilization``)."""

from __future__ import annotations

import argparse
import dataclasses
import json

from subgpu_jax.model.checks import out_file, pos_int
from subgpu_jax.model.setup import GpuSetup
from subgpu_jax.sim.contention import uncalibrated_model_id
from subgpu_jax.score.timer import DEFAULT_TIMER, TIMERS, timer_help
from subgpu_jax.space.config import DEFAULT_POLICY, Config, config_from_options, temporal_of
from subgpu_jax.app.args import add_topology_args, add_workload_args, workload_of
from subgpu_jax.app.wholestep import head_run, recorded_runs, whole_step_text
from subgpu_jax.app.options import choose_split, int_list, str_list

__all__ = ["add_simulate_parser", "cmd_simulate"]


def add_simulate_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``simulate`` sub-command's parser to ``sub``."""
    s = sub.add_parser("simulate", help="temporal baseline vs one configuration: makespan (µs), "
                       "per-user and per-GPU throughput (tokens/s)",
                       description="Evaluate the temporal baseline and one SubGPU configuration. "
                       "Default configuration: the 'Macro' design (the region's full-attention "
                       "FMHA alone on stage 1, the rest of the region on stage 0 with boundary "
                       "reuse, two microbatches) with the SM split found by a quick search.")
    add_workload_args(s, serving=True)
    add_topology_args(s)
    _add_config_args(s)
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


def _add_config_args(s: argparse.ArgumentParser) -> None:
    c = s.add_argument_group("configuration")
    c.add_argument("--cuts", default=None,
                   help="comma-separated kernels (names like L1.attn, or indices) where segments "
                        "1..K-1 start (numbered from 0, as the output prints them: segment 0 "
                        "starts at the first kernel). Default: the Macro cut around the "
                        "full-attention FMHA")
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
    c.add_argument("--policy", default=DEFAULT_POLICY,
                   help="global dispatch order: wavefront (default) or layer_major")
    c.add_argument("--streams-per-stage", type=int, default=1, metavar="K",
                   help="streams per stage: a stage runs up to K tasks at once, sharing its SMs "
                        "(docs/method.md, 'Streams per stage'). Default: 1")


@dataclasses.dataclass
class _Timed:
    """The two steps of ``simulate`` under one timer: the configuration with its chosen SM
    split, what ``choose_split`` said of the split, the temporal and the configuration's
    ``score.step.StepResult``, the duration model's label, the event simulator's extras of each
    (utilisation means and category times; empty under another timer) and what the figures and
    the trace draw of the step (None where they do not)."""

    cfg: Config
    split: dict
    temporal: object
    config: object
    label: str
    extra_t: dict = dataclasses.field(default_factory=dict)
    extra_c: dict = dataclasses.field(default_factory=dict)
    figures_show: str | None = None
    trace_shows: str | None = None


def cmd_simulate(a) -> int:
    """Run ``subgpu simulate``: the temporal baseline and the configuration of the options
    (``--list-kernels``: the region's kernels instead), printed as text or ``--json``."""
    from subgpu_jax.model.graph import build_forward
    from subgpu_jax.score.timer import timer_for
    from subgpu_jax.sim.l2cache import check_policy

    wl, full, mem = _middle_step(a)
    g1 = wl.graph(1)
    if a.list_kernels:
        _print_kernels(wl, g1)
        return 0
    setup = _gpu_setup(a, wl)
    sms_mode, cfg = _given_config(a, wl)
    m = wl.microbatches_of(cfg.microbatch)
    a.cache = check_policy(setup.cache_policy(a.cache))
    fp1, fpm = build_forward(wl.arch, wl.deploy, 1), build_forward(wl.arch, wl.deploy, m)
    timer = timer_for(setup, a.simulator, a.cache, contention=not a.no_contention)
    t = _time_steps(a, wl, setup, timer, cfg, m, sms_mode, fp1, fpm)
    gen = None
    if full.output_len:  # the mean step over the generation (docs/accounting.md item 6)
        from subgpu_jax.score.step import time_generation

        gen = {n: time_generation(wl.arch, full, c, mm, timer)
               for n, c, mm in (("temporal", temporal_of(wl), 1), ("config", t.cfg, m))}
    res = _result(a, wl, full, mem, fp1, setup, timer, t, m, gen)
    if a.json:
        print(json.dumps(res, indent=2))
        return 0
    from subgpu_jax.app.simprint import print_simulation
    from subgpu_jax.app.simtext import serving_lines

    print_simulation(a, res, wl, t.cfg, m, fp1, setup.hw, full,
                     serving_lines(wl.arch, full, m, mem, gen))
    return 0


def _middle_step(a):
    """``(wl, full, mem)``: the workload whose graphs, split and figures ``simulate`` takes (a
    generation's middle step when ``--output-len`` > 0, else the one step), the deployment of
    the whole generation (or the step) and its memory use."""
    from subgpu_jax.model.generation import search_step
    from subgpu_jax.model.memory import memory_use
    from subgpu_jax.model.workload import Workload

    wl = workload_of(a)
    full = wl.deploy  # a whole generation's (output_len > 0), or the one step's
    mem = memory_use(wl.arch, full, wl.hw)
    if full.output_len:  # graphs, split and figures at the generation's middle step
        wl = Workload.from_model(wl.arch, search_step(full), wl.hw)
    return wl, full, mem


def _print_kernels(wl, g1) -> None:
    """``--list-kernels``: the region's kernels (index, name, category), after a line naming
    the main region when the model has several."""
    runs = wl.arch.region_runs()
    if len(runs) > 1:  # name the main region, the one --cuts refers to
        print("# main region (the one --cuts names): "
              + ", ".join("/".join(lk) for lk in g1.region_kinds)
              + f", {g1.num_regions} instances; other runs: "
              + "; ".join(f"{c} x " + ", ".join("/".join(lk) for lk in b)
                          for b, c in runs if b != g1.region_kinds))
    for i, k in enumerate(g1.kernels):
        print(f"{i:3d}  {k.name:18s} {k.category}")


def _gpu_setup(a, wl) -> GpuSetup:
    """The uncalibrated GPU, or the one bound to ``--calibration`` after checking it against the
    workload and the graphs the command times."""
    setup = GpuSetup.uncalibrated(wl.hw)
    if getattr(a, "calibration", None):
        from subgpu_jax.model.calibration import load_calibration
        cal = load_calibration(a.calibration, wl.arch, wl.deploy, wl.hw)
        setup = cal.bind(wl.hw)
        for mm in sorted({1, max(1, wl.batch // (a.microbatch or max(1, wl.batch // 2)))}):
            if wl.batch % mm == 0:
                cal.check_graph(wl.graph(mm))
    return setup


def _given_config(a, wl) -> tuple[str, Config]:
    """``(sms_mode, cfg)``: how the SM split is chosen (``search``, ``even``, or anything else:
    the given ``--sms``) and the configuration of ``--cuts``, ``--sms``, ``--microbatch``,
    ``--reuse``, ``--policy`` and ``--streams-per-stage``."""
    sms_mode = (a.sms or "search").strip().lower()
    sms = None
    if sms_mode not in ("even", "search"):
        try:
            sms = int_list(a.sms, "sms", unique=False)
        except ValueError:
            raise ValueError(f"sms must be comma-separated SMs per stage, 'even' or 'search', "
                             f"got {a.sms!r}") from None
    cuts = str_list(a.cuts, "cuts") if a.cuts is not None else None
    cfg = config_from_options(wl, cuts, sms, a.microbatch, a.reuse, a.policy)
    cfg = dataclasses.replace(cfg, streams_per_stage=pos_int(a.streams_per_stage,
                                                             "--streams-per-stage"))
    return sms_mode, cfg


#: The options that draw the step (event simulator only).
_FIGURES = ("trace", "gantt", "utilization")


def _time_steps(a, wl, setup, timer, cfg, m, sms_mode, fp1, fpm) -> _Timed:
    """Choose the SM split and time both steps with ``timer``; the event simulator (the
    reference) also records the runs, their extras and draws the figures asked for.

    Raises:
        ValueError: ``--trace``/``--gantt``/``--utilization`` with another timer, or a path
            they cannot write (checked before any simulation)."""
    from subgpu_jax.score.step import time_step

    if not timer.reference:
        for f in _FIGURES:
            if getattr(a, f):
                raise ValueError(f"--{f} needs --simulator event")
    else:
        from subgpu_jax.app import viz

        for f in _FIGURES:  # before any simulation
            v = getattr(a, f)
            if v is not None:
                (out_file if f == "trace" else viz.check_image_path)(v, f"--{f}")

    def makespan(c):  # the whole step's makespan (µs), as reported (record=True would hand
        # the main run of a timer that is not the reference to the event simulator:
        # ContentionTimer.time)
        return time_step(fpm, c, timer, record=False).makespan_us

    cfg, split = choose_split(wl, setup.hw, cfg, m, sms_mode, makespan, setup.duration_model,
                              makespan)
    rec = timer.reference  # the event simulator's utilisation means are part of the output
    s_temp = time_step(fp1, temporal_of(wl), timer, record=rec)
    s_cfg = time_step(fpm, cfg, timer, record=rec)
    if not timer.reference:
        return _Timed(cfg, split, s_temp, s_cfg, timer.describe())
    from subgpu_jax.app.report import sim_extra

    extra_t, extra_c = sim_extra(s_temp.main), sim_extra(s_cfg.main)
    extra_t["category_time_us"] = s_temp.category_time_us
    extra_c["category_time_us"] = s_cfg.category_time_us
    label = ("event simulator, " + ("no contention" if a.no_contention else "contention")
             + f", L2 cache {a.cache}")
    # what the figures and the trace draw: every run in layer order, then the head
    t = _Timed(cfg, split, s_temp, s_cfg, label, extra_t, extra_c,
               figures_show=whole_step_text(s_cfg, with_head=True))
    if a.trace or a.gantt or a.utilization:  # the whole step (issue 41 item 8)
        t.trace_shows = _draw(a, wl, setup.hw, timer, t, m, fp1, fpm)
    return t


def _draw(a, wl, hw, timer, t: _Timed, m, fp1, fpm) -> str:
    """Write ``--trace``, ``--gantt`` and ``--utilization`` of the whole step (every run in
    layer order, then the head); returns what they show."""
    from subgpu_jax.app import viz

    cfg, s_temp, s_cfg = t.cfg, t.temporal, t.config
    head = head_run(fpm, timer)
    trace_shows = whole_step_text(s_cfg, with_head=head is not None)
    runs_c = recorded_runs(fpm, cfg, s_cfg, timer)
    if a.trace:
        viz.write_trace(s_cfg.main, a.trace, scope=trace_shows, head=head, runs=runs_c)
    if a.gantt:
        viz.plot_gantt(s_cfg.main, a.gantt, title=f"{wl.arch.name} on {hw.name}: D={cfg.D} "
                       f"w={cfg.w} SMs={list(cfg.alloc)} m={m}", scope=trace_shows,
                       head=head, runs=runs_c)
    if a.utilization:
        # the head is the same kernels on the whole GPU in both steps
        viz.plot_utilisation(s_temp.main, s_cfg.main, a.utilization, heads=(head, head),
                             scopes=(whole_step_text(s_temp, head is not None), trace_shows),
                             runs=(recorded_runs(fp1, temporal_of(wl), s_temp, timer), runs_c))
    return trace_shows


def _workload_json(wl, hw, full, fp1) -> dict:
    """The ``workload`` entry of ``--json``: model, GPU, deployment, KV lengths, topology,
    parameters and the regions of the forward pass."""
    pc = wl.arch.param_counts()
    kv = wl.deploy.kv_lengths
    return {"model": wl.arch.name, "family": wl.arch.family, "hardware": hw.name,
            **{k: v for k, v in full.__dict__.items() if k != "kv_lengths"},
            "kv_lengths": ({"count": len(kv), "mean": float(sum(kv) / len(kv)), "max": max(kv),
                            "busiest_rank_tokens": wl.deploy.kv_tokens()} if kv else None),
            "topology": wl.deploy.topology_label(),
            "expert_dtype": wl.arch.expert_dtype if wl.arch.is_moe else None,
            "parameters": {"total": pc["total"], "active": pc["active"]},
            "regions": [{"layers": [list(x) for x in gr.region_kinds],
                         "instances": c, "kernels": gr.n} for gr, c in fp1.runs]}


def _result(a, wl, full, mem, fp1, setup, timer, t: _Timed, m, gen) -> dict:
    """What ``simulate`` reports (``--json`` prints it as it is): the workload, both steps'
    throughput (the generation's mean step when ``gen``), the speedup, serving, the overlap
    ceiling, the modes and verdict, the SM split's choice and how the prediction was made."""
    from subgpu_jax.model.accounting import throughput_record
    from subgpu_jax.app.provenance import prediction_note
    from subgpu_jax.app.simtext import serving_json
    from subgpu_jax.sim.ceiling import overlap_ceiling

    hw, cal, cfg, g1 = setup.hw, setup.calibration, t.cfg, wl.graph(1)
    t_temp, t_cfg = t.temporal.makespan_us, t.config.makespan_us
    if gen is not None:
        t_temp, t_cfg = gen["temporal"].makespan_us, gen["config"].makespan_us
    tok = wl.deploy.tokens_per_gpu
    res = {
        "workload": _workload_json(wl, hw, full, fp1),
        "duration_model": t.label + (f", calibrated ({a.calibration})" if cal is not None
                                     else ""),
        "temporal": {**throughput_record(t_temp, tok), **t.extra_t,
                     "step": {"runs": t.temporal.runs, "head_us": t.temporal.head_us}},
        "config": {"D": cfg.D, "w": cfg.w, "K": cfg.K,
                   "segments": [[k.name for k, s in zip(g1.kernels, cfg.seg_of) if s == j]
                                for j in range(cfg.K)],
                   "stage_of_segment": list(cfg.stage_of_segment()), "sms": list(cfg.alloc),
                   "microbatch": cfg.microbatch, "microbatches": m, "policy": cfg.policy,
                   "streams_per_stage": cfg.streams_per_stage,
                   **throughput_record(t_cfg, tok), **t.extra_c,
                   "step": {"runs": t.config.runs, "head_us": t.config.head_us}},
    }
    res["speedup"] = t_temp / t_cfg
    res.update(serving_json(wl.arch, full, m, mem, gen))
    res["ceiling"] = overlap_ceiling(g1, hw, t_temp, wl.graph(m))
    if cfg.D > 1:  # the three modes and the verdict (app.modes)
        from subgpu_jax.app.modes import config_verdict
        res["modes"] = config_verdict(wl.arch, full, cfg, hw, timer.model if timer.contention
                                      else None, a.cache, cal is not None, t_temp,
                                      t_cfg if timer.reference else None)
    split = t.split
    res["sms_choice"] = {k: v for k, v in split.items() if k != "even_makespan_us"}
    if "even_makespan_us" in split:
        res["sms_choice"]["even_speedup"] = t_temp / split["even_makespan_us"]
    # the runtime's smallest stage (Hardware.min_stage_sms; the text's note says the same)
    res["sms_choice"]["runtime_min_stage_sms"] = hw.stage_min_sms
    res["sms_choice"]["stages_run_refuses"] = hw.stages_below_minimum(cfg.alloc)
    if timer.reference:  # what --gantt/--utilization/--trace draw of the step
        res["figures_show"] = t.figures_show
    if t.trace_shows is not None:
        res["trace_shows"] = t.trace_shows
    res["prediction"] = prediction_note(hw.name, a.calibration, wl.arch.name, timer,
                                        model_id=uncalibrated_model_id(
                                            hw, timer.model))
    return res
