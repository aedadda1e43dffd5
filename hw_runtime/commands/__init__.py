"""The GPU runtime's commands, ``subgpu run`` and ``subgpu calibrate``: sub-commands registered by
``subgpu_jax.app.cli`` through the ``subgpu.commands`` entry point (``subgpu tune``, which uses
these modules, has its own: ``hw_runtime.tune.cli``). One module per concern: ``request`` (the
typed ``RunRequest``, built once here from the parsed options), ``device`` (the ``--hardware``
default: the preset of the GPU the command runs on, resolved once here), ``report`` (the typed
``RunReport``), ``measure`` (the ``Measurer`` protocol), ``run`` (one configuration),
``records`` and ``top`` (``--from-search``), ``calibrate``, ``common``.

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
from dataclasses import replace

from hw_runtime.commands.calibrate import cmd_calibrate
from hw_runtime.commands.common import gpu_check, json_safe
from hw_runtime.commands.device import DEFAULT_HELP, resolve_hardware
from hw_runtime.commands.request import (RUN_MODES, ConfigOptions, RunRequest, Timing,
                                         add_kernel_args)
from hw_runtime.commands.run import config_from_search, rank_gpu, run_one
from hw_runtime.commands.top import run_top
from hw_runtime.gpu.executor import DEFAULT_LANE_PRIORITY, LANE_PRIORITY, LANE_PRIORITY_HELP
from subgpu_jax.model.collective import COLLECTIVES, DEFAULT_COLLECTIVES, ONE_GPU_COLLECTIVES
from subgpu_jax.space.config import DISPATCH_POLICIES

__all__ = ["add_commands", "cmd_run", "cmd_calibrate", "gpu_check", "config_from_search",
           "json_safe", "RunRequest"]


def cmd_run(a: argparse.Namespace) -> int:
    """``subgpu run``: the parsed options ``a`` become one ``RunRequest`` (the only place that
    reads them), on the GPU preset ``device.resolve_hardware`` gives (``--hardware``, by
    default this GPU's; under ``--collectives nccl`` read once the rank's GPU is device 0,
    ``run.rank_gpu``); ``--from-search DIR --top K`` measures the K best records of every batch
    (``top.run_top``), anything else one configuration (``run.run_one``).

    Raises:
        ValueError: ``--top`` without ``--from-search``, no ``--hardware`` and no GPU of a
            preset here, or as the command it runs."""
    req = RunRequest.from_args(a)
    if req.top is not None:
        if not req.from_search:
            raise ValueError("--top needs --from-search DIR")
        if req.collectives == "nccl":
            raise ValueError("--collectives nccl measures one configuration per launch; drop "
                             "--top (run --from-search DIR takes the best record)")
    ranks = rank_gpu(req)
    req = replace(req, workload=replace(req.workload, hardware=resolve_hardware(a.hardware)))
    if req.top is not None:
        return run_top(req)
    return run_one(req, ranks=ranks)


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``run`` and ``calibrate`` on the ``subgpu`` parser's sub-parsers."""
    from subgpu_jax.app.args import add_workload_args

    r = sub.add_parser("run", help="execute a configuration on the local GPU (green contexts) "
                       "and compare with the simulator",
                       description="Capture one forward pass of the temporal baseline and of a "
                       "configuration as CUDA graphs (each stage on its own green-context SM "
                       "pool), time graph replays, check the pipelined output against a "
                       "sequential run, and print measured vs predicted makespans. Hopper GPUs "
                       "run the experts in bf16 (no MXFP4 tensor cores).")
    add_workload_args(r, hardware=None, hardware_help=DEFAULT_HELP)
    c = r.add_argument_group("configuration (as `subgpu simulate`)")
    c.add_argument("--cuts", default=None, help="kernels where segments 1..K-1 start, numbered "
                   "from 0 (default: "
                   "the Macro cut around the full-attention FMHA)")
    c.add_argument("--sms", default=None, help="SMs per stage (multiples of the quantum, "
                   "summing to the budget, 128 on an H200). Default: even split")
    c.add_argument("--microbatch", type=int, default=None,
                   help="microbatch size b (divides R = G/d). Default: R/2")
    c.add_argument("--reuse", dest="reuse", action="store_true", default=None,
                   help="boundary reuse w=1 (default for the Macro cut)")
    c.add_argument("--no-reuse", dest="reuse", action="store_false", help="w=0")
    c.add_argument("--policy", default=ConfigOptions.policy, help=" or ".join(
        f"{p} (default)" if p == ConfigOptions.policy else p for p in DISPATCH_POLICIES))
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
    x.add_argument("--mode", default=RUN_MODES[0], choices=RUN_MODES,
                   help="green: one green-context SM pool per stage (default); multistream: the "
                        "same schedule on plain streams without SM partitioning")
    x.add_argument("--collectives", default=DEFAULT_COLLECTIVES, choices=COLLECTIVES,
                   help="how a TP/EP collective runs on this one GPU, in the temporal baseline "
                        "and the pipelined run alike, and in the prediction: sleep (copy the "
                        "payload, then wait out the modelled link time in a wait that occupies "
                        "no SMs: whatever overlaps it looks free), proxy (the engine "
                        "collective's 16-36 CTAs on the issuing pool moving the payload "
                        "through HBM, paced to the link time) or none (the copy only: the "
                        "control with zero link time, so a gain left is overlap of compute and "
                        "memory work), or nccl (real NCCL collectives, one process per GPU: "
                        "launch with torchrun --nproc-per-node N, N = --gpus; the step is the "
                        f"slowest rank's). Default: {DEFAULT_COLLECTIVES}")
    x.add_argument("--rounds", type=int, default=Timing.rounds,
                   help=f"timing rounds (>= 1). Default: {Timing.rounds}")
    x.add_argument("--replays", type=int, default=Timing.replays,
                   help=f"graph replays per round (>= 1). Default: {Timing.replays}")
    x.add_argument("--warmup", type=int, default=Timing.warmup,
                   help=f"warm-up replays. Default: {Timing.warmup}")
    x.add_argument("--no-check", action="store_true",
                   help="skip the pipelined-vs-sequential output check")
    x.add_argument("--calibration", metavar="FILE.json", default=None,
                   help="calibration for the prediction (default: the analytical model)")
    x.add_argument("--cache", default=None, help="L2 policy of the predicting simulator: lru, "
                   "fifo or none. Default: none with --calibration (measured kernel times already "
                   "hold the L2 behaviour of the real run), else lru")
    x.add_argument("--streams-per-stage", type=int, default=ConfigOptions.streams_per_stage,
                   metavar="K",
                   help="streams per stage (green context): a stage runs up to K tasks at once "
                        "(the published prototype used 2). Default: "
                        f"{ConfigOptions.streams_per_stage}")
    x.add_argument("--trace", metavar="FILE.json", default=None,
                   help="profile one graph replay (torch.profiler) and write a Perfetto trace: "
                        "the measured kernels per stage (process 1) above the simulated "
                        "schedule of the same configuration (process 2)")
    add_kernel_args(x, "run")
    x.add_argument("--lane-priority", default=DEFAULT_LANE_PRIORITY, choices=LANE_PRIORITY,
                   help=LANE_PRIORITY_HELP)
    x.add_argument("--json", action="store_true", help="print machine-readable JSON")
    r.set_defaults(func=cmd_run)

    k = sub.add_parser("calibrate", help="measure per-kernel times on SM pools, the copy "
                       "bandwidth curve and co-running pairs on the local GPU",
                       description="Time every distinct kernel of the workload alone on "
                       "green-context pools and the whole GPU, the copy bandwidth on each pool, "
                       "and a few co-running pairs; write a calibration file for "
                       "`subgpu simulate/search --calibration`.")
    add_workload_args(k, hardware=None, hardware_help=DEFAULT_HELP)
    k.add_argument("--out", required=True, metavar="FILE.json", help="calibration file to write")
    k.add_argument("--batches", default=None,
                   help="comma-separated global batches (default: --batch)")
    k.add_argument("--microbatches", default="1,2,4",
                   help="comma-separated microbatch counts m. Default: 1,2,4")
    k.add_argument("--pools", default="8,16,32,64,96,128",
                   help="comma-separated pool sizes (SMs); the whole GPU is added")
    k.add_argument("--reps", type=int, default=7, help="replays per measurement (median)")
    k.add_argument("--no-coruns", action="store_true", help="skip the co-running pairs")
    add_kernel_args(k, "calibrate")
    k.add_argument("--collectives", default=DEFAULT_COLLECTIVES, choices=ONE_GPU_COLLECTIVES,
                   help="how the collectives run while they are timed (use the same with "
                        "`subgpu run`): sleep, proxy or none (see `subgpu run --help`). "
                        f"Default: {DEFAULT_COLLECTIVES}")
    k.set_defaults(func=cmd_calibrate)
