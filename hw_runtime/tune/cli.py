"""``subgpu tune``: added to the ``subgpu`` parser through its own ``subgpu.commands`` entry
point (pyproject.toml; ``experiments/device/env.sh`` on the device machine) beside ``run`` and
``calibrate`` (``hw_runtime.commands``, whose helpers it uses).

Bad options end with one line naming the flag and exit code 2 (``ValueError`` through
``subgpu_jax.app.cli.main``); on a machine without an NVIDIA GPU with green contexts it refuses
with one line, after the options are checked and before anything is searched.
"""

from __future__ import annotations

import argparse
import dataclasses
import os

from hw_runtime.commands.device import DEFAULT_HELP
from hw_runtime.commands.request import add_kernel_args
from hw_runtime.gpu.executor import LANE_PRIORITY, LANE_PRIORITY_HELP
from hw_runtime.tune.spec import TuneSpec
from subgpu_jax.model.collective import ONE_GPU_COLLECTIVES

__all__ = ["add_tune_command", "spec_from_args"]


def add_tune_command(sub: argparse._SubParsersAction) -> None:
    """Add ``tune`` to the ``subgpu`` parser's sub-parsers."""
    from subgpu_jax.app.args import add_grid_args, add_scoring_args, add_workload_args

    t = sub.add_parser(
        "tune", help="search, measure the candidates on the local GPU, refit the model from "
        "the measurements, repeat; refine the best on the GPU (docs/tune.md)",
        description="The simulator proposes, the GPU decides: search (calibrated with "
        "--calibration), measure the temporal baseline, multistream and the top K SubGPU "
        "candidates of every batch, refit a calibration from traced runs, search again until "
        "predicted and measured speedups agree within --tolerance or the GPU budget is spent, "
        "then refine the best on the GPU (Algorithm 2 on measured makespans, the SM quantum "
        "as step; neighbouring microbatch counts). Returns per batch the fastest measured "
        "configuration, or temporal where nothing measured faster. Writes tune_report.json, "
        "tune_measurements.csv, tune_frontier.png and calibration_tuned.json into --out; "
        "running it again resumes without re-measuring.")
    add_workload_args(t, hardware=None, hardware_help=DEFAULT_HELP, batch=False)
    t.set_defaults(batch=None)
    add_grid_args(t.add_argument_group("grid (as `subgpu search`)"), "tune")
    x = t.add_argument_group("model")
    x.add_argument("--calibration", metavar="FILE.json", default=None,
                   help="starting calibration (subgpu calibrate); default: the uncalibrated "
                        "model")
    add_scoring_args(x, "tune")
    d = {f.name: f.default for f in dataclasses.fields(TuneSpec)}   # each default written once
    u = t.add_argument_group("tune")
    u.add_argument("--top", type=int, default=d["top"], metavar="K",
                   help=f"SubGPU candidates measured per batch and round. Default: {d['top']}")
    u.add_argument("--budget-s", type=float, default=d["budget_s"], metavar="S",
                   help="GPU seconds per batch (measurements and traces; the searches run on "
                        f"the CPU). Default: {d['budget_s']:g}")
    u.add_argument("--tolerance", type=float, default=d["tolerance"],
                   help="stop when every measured candidate's predicted speedup is within this "
                        f"fraction of its measured one. Default: {d['tolerance']:g}")
    u.add_argument("--max-rounds", type=int, default=d["max_rounds"],
                   help=f"search rounds at most. Default: {d['max_rounds']}")
    u.add_argument("--refine-passes", type=int, default=d["refine_passes"],
                   help=f"pass limit of the on-GPU pairwise line search. Default: "
                        f"{d['refine_passes']}")
    u.add_argument("--no-refine", action="store_true", help="skip the on-GPU refinement")
    u.add_argument("--out", default="runs/tune", help="results folder (resumed when it holds "
                   "this tune). Default: runs/tune")
    e = t.add_argument_group("execution (as `subgpu run`)")
    e.add_argument("--collectives", default=d["collectives"], choices=ONE_GPU_COLLECTIVES,
                   help="sleep (copy + modelled link wait), proxy (the engine collective's "
                        "CTAs and HBM traffic paced to the link time) or none. Default: "
                        f"{d['collectives']}")
    add_kernel_args(e, "tune")
    e.add_argument("--lane-priority", default=d["lane_priority"], choices=LANE_PRIORITY,
                   help=LANE_PRIORITY_HELP)
    e.add_argument("--rounds", type=int, default=d["rounds"],
                   help=f"timing rounds. Default: {d['rounds']}")
    e.add_argument("--replays", type=int, default=d["replays"],
                   help=f"graph replays per round. Default: {d['replays']}")
    e.add_argument("--warmup", type=int, default=d["warmup"],
                   help=f"warm-up replays. Default: {d['warmup']}")
    t.set_defaults(func=_cmd_tune)


def spec_from_args(a, hardware: str | None = None):
    """The ``TuneSpec`` of parsed ``subgpu tune`` options (CPU only), on the GPU preset
    ``hardware`` (default ``a.hardware``; the command passes the local GPU's when
    ``--hardware`` is left out, ``commands.device.resolve_hardware``).

    Raises:
        ValueError: a bad option, one line naming the flag; no GPU preset given.
    """
    from subgpu_jax.app.options import int_list
    from subgpu_jax.app.args import resolve_arch_ep
    from subgpu_jax.model.hardware import get_hardware
    from subgpu_jax.model.setup import GpuSetup
    from subgpu_jax.score.timer import TIMERS, timer_for
    from subgpu_jax.space.config import DISPATCH_POLICIES

    from hw_runtime.gpu.workload import hopper_arch

    if a.batch is not None:
        raise ValueError("--batch: tune takes a list of global batches, --batches")
    if os.path.exists(a.out) and not os.path.isdir(a.out):
        raise ValueError(f"--out: {a.out!r} is a file; --out names the results folder")
    if a.calibration and not os.path.isfile(a.calibration):
        raise ValueError(f"--calibration: no file {a.calibration!r}")
    hardware = hardware if hardware is not None else a.hardware
    if hardware is None:
        raise ValueError("--hardware: no GPU preset (the command reads the local GPU's)")
    preset = get_hardware(hardware)   # a bad spec: one line naming the presets
    arch, ep = resolve_arch_ep(a)
    pols = tuple(p.strip() for p in a.policies.split(",") if p.strip())
    bad = [p for p in pols if p not in DISPATCH_POLICIES]
    if not pols or bad:
        raise ValueError(f"--policies must be among {', '.join(DISPATCH_POLICIES)}, got "
                         f"{a.policies!r}")
    if not preset.runtime:
        raise ValueError(f"--hardware: tune measures on the local GPU, an H200 or H100 "
                         f"preset; got {hardware}")
    # the exact scorer, made once here as `subgpu search` makes its own (a name not registered
    # goes to TuneSpec as it is: its one line)
    exact = timer_for(GpuSetup.uncalibrated(preset), a.exact) if a.exact in TIMERS else a.exact
    return TuneSpec(
        arch=hopper_arch(arch), hardware=hardware, num_gpus=a.gpus, attn_tp=a.tp,
        attn_dp=a.dp, moe_ep=ep, kv_history=a.kv_history, input_len=a.input_len,
        batches=tuple(int_list(a.batches, "batches")),
        stages=tuple(int_list(a.stages, "stages")),
        microbatches=tuple(int_list(a.microbatches, "microbatches")), policies=pols,
        streams=tuple(int_list(a.streams_per_stage, "streams-per-stage")),
        exact=exact,
        cheap=a.cheap, cut_strategy=a.cut_strategy, alloc_strategy=a.alloc_strategy,
        cut_options=a.cut_options or None, alloc_options=a.alloc_options or None,
        l_sim=a.l_sim, cache=a.cache, calibration=a.calibration, top=a.top,
        budget_s=a.budget_s, tolerance=a.tolerance, max_rounds=a.max_rounds,
        refine=not a.no_refine, refine_passes=a.refine_passes, collectives=a.collectives,
        gemm=a.gemm, elementwise=a.elementwise, attention=a.attention,
        moe_gemm=a.moe_gemm, lane_priority=a.lane_priority,
        rounds=a.rounds, replays=a.replays, warmup=a.warmup, model_arg=a.model)


def _cmd_tune(a) -> int:
    from hw_runtime.commands.common import gpu_check
    from hw_runtime.commands.device import note_preset, resolve_hardware
    from hw_runtime.tune.executor import GpuTuneExecutor
    from hw_runtime.tune.loop import Tuner

    # every check that needs no GPU first (on the H200's preset when --hardware is left
    # out), then the GPU, then its preset (device.resolve_hardware) and the checks again
    spec = spec_from_args(a, a.hardware or "H200")
    spec.check_cpu(a.out)
    gpu_check()
    hardware = resolve_hardware(a.hardware)
    note_preset(hardware)
    if hardware != spec.hardware:
        spec = spec_from_args(a, hardware)
        spec.check_cpu(a.out)
    ex = GpuTuneExecutor(spec)
    from hw_runtime.gpu.workload import arch_label
    print(f"tune: {arch_label(spec.arch)} on {spec.hardware}, batches "
          f"{list(spec.batches)}, top {spec.top}, {spec.budget_s:.0f} GPU s per batch; "
          f"results in {a.out}", flush=True)
    from hw_runtime.gpu.fused import resolve

    Tuner(spec, ex, a.out, log=lambda line: print(line, flush=True),
          elementwise=resolve(spec.elementwise, True)).run()
    return 0
