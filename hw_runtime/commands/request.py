"""The typed request of ``subgpu run``: ``RunRequest``, built once at the command-line edge from
the parsed options (``RunRequest.from_args``, in ``commands.cmd_run``) or, for
``--from-search``, from a search record (``records.record_request``). Everything below the edge
(``run.prepare_run``, ``run.run_report``, ``run.run_one``, ``top.run_top``) reads the request,
never the ``argparse.Namespace``; the request is frozen, so what ``prepare_run`` resolves (the
record's options, the L2 policy) comes back in its result (``run.PreparedRun``).

Each default is written once. The kernel choices (``KernelSettings``, defined with the registry
that owns their defaults, ``hw_runtime.gpu.policies``, and re-exported here: the runtime core
builds its workloads from it and never imports this module) take theirs from
``hw_runtime.gpu.policies.KERNEL_DEFAULTS`` and ``DEFAULT_LANE_PRIORITY``, the collectives from
``subgpu_jax.model.collective.DEFAULT_COLLECTIVES``, the dispatch policy and the streams per
stage from ``subgpu_jax.space.config.Config``; the run's own options
(``RUN_MODES``, ``Timing``) are owned here and the ``run`` parser (``commands.add_commands``)
reads its defaults from here. The kernel options' flags are added by ``add_kernel_args`` (the
``run``, ``calibrate`` and ``tune`` parsers) from the registry ``KERNEL_POLICIES``. The workload
options have no defaults here: the parser (``subgpu_jax.app.args.add_workload_args``) and the
CLI's resolution of ``--tp/--dp`` and ``--input-len/--kv-history`` own them.

Pure Python: importable without torch or a GPU.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass, field

from hw_runtime.gpu.executor import MODES
from hw_runtime.gpu.policies import KERNEL_POLICIES, KernelSettings
from subgpu_jax.model.collective import DEFAULT_COLLECTIVES
from subgpu_jax.space.config import Config

__all__ = ["RUN_MODES", "WorkloadOptions", "ConfigOptions", "KernelSettings", "Timing",
           "RunRequest", "check_stage_pools", "add_kernel_args"]

#: ``subgpu run --mode``: the executor's pipelined modes (``hw_runtime.gpu.executor.MODES``
#: without the temporal baseline, which every run measures too): ``green`` (one green-context
#: SM pool per stage, the default) or ``multistream`` (the same schedule on plain streams
#: without SM partitioning).
RUN_MODES: tuple[str, ...] = tuple(m for m in MODES if m != "temporal")


@dataclass(frozen=True)
class WorkloadOptions:
    """The workload options of a run as parsed (``app.args.add_workload_args``), after the CLI
    derived the ones left out (``resolve_parallelism``, ``resolve_context``; None where nothing
    derived them).

    Fields:
        model: a model preset or a config.json path (``--model``). hardware: the GPU preset
            spec (``--hardware``, ``NAME[:VERSION]``; left out, ``commands.cmd_run`` puts the
            local GPU's preset here, ``device.resolve_hardware``). gpus: GPUs n serving the model
            (``--gpus``). tp, dp: attention TP and DP degrees (``--tp``, ``--dp``). batch: the
            global decode batch G (requests, ``--batch``). input_len, kv_history: prompt length
            and KV history per request (tokens). ep: MoE EP degree (``--ep``; None: the model's
            default, ``app.args.resolve_arch_ep``). name: the name of a model read from a
            config.json (``--name``; None: from the file). expert_dtype: ``--expert-dtype``
            (None: the model's). tp_typed: whether the user typed ``--tp`` (a memory error then
            suggests other flags than ``--tp``: ``app.fit.checked_workload``).
    """

    model: str
    hardware: str
    gpus: int
    tp: int | None
    dp: int | None
    batch: int
    input_len: int | None
    kv_history: int | None
    ep: int | None = None
    name: str | None = None
    expert_dtype: str | None = None
    tp_typed: bool = False

    @classmethod
    def from_args(cls, a: argparse.Namespace) -> "WorkloadOptions":
        """The workload options of parsed arguments ``a`` (every option
        ``add_workload_args`` adds; ``a.parallelism_given``, where the CLI set it, says which
        of ``--tp/--dp`` were typed: ``app.args.given_tp_ep``)."""
        from subgpu_jax.app.args import given_tp_ep

        return cls(model=a.model, hardware=a.hardware, gpus=a.gpus, tp=a.tp, dp=a.dp,
                   batch=a.batch, input_len=a.input_len, kv_history=a.kv_history, ep=a.ep,
                   name=a.name, expert_dtype=a.expert_dtype,
                   tp_typed=given_tp_ep(a)[0] is not None)

    @property
    def given_tp(self) -> int | None:
        """``--tp`` when the user typed it, else None (``app.fit.checked_workload``'s ``tp``)."""
        return self.tp if self.tp_typed else None


@dataclass(frozen=True)
class ConfigOptions:
    """The configuration a run executes: the options of ``subgpu simulate`` or a search
    record.

    Fields:
        cuts: ``--cuts``, comma-separated kernel names or indices where segments 2..K start
            (None: the Macro cut). sms: ``--sms``, comma-separated SMs per stage (None: even
            split). microbatch: ``--microbatch`` b, requests per microbatch (None: R/2).
            reuse: ``--reuse`` / ``--no-reuse`` (None: on for the Macro cut). policy: the
            dispatch-order policy (``space.config.DISPATCH_POLICIES``). streams_per_stage: k
            streams per stage (>= 1). record: a SubGPU search record (a ``records.csv`` row)
            whose configuration replaces the options above (``Config.from_record``: the four
            options are None then), or None.
    """

    cuts: str | None = None
    sms: str | None = None
    microbatch: int | None = None
    reuse: bool | None = None
    policy: str = Config.policy
    streams_per_stage: int = Config.streams_per_stage
    record: Mapping | None = None


@dataclass(frozen=True)
class Timing:
    """How a run is measured.

    Fields:
        rounds: timing rounds (>= 1; the median of each is reported). replays: CUDA-graph
            replays per round (>= 1). warmup: warm-up replays before the rounds (>= 0).
        check: compare the pipelined output with a sequential run (``--no-check``: False).
    """

    rounds: int = 3
    replays: int = 100
    warmup: int = 3
    check: bool = True


@dataclass(frozen=True)
class RunRequest:
    """One ``subgpu run``: what to run, how to execute and measure it, how to predict it.

    Fields:
        workload: the model, GPU and deployment (``WorkloadOptions``). config: the
            configuration (``ConfigOptions``). kernels: the kernel choices
            (``KernelSettings``). mode: one of ``RUN_MODES``. collectives: how a TP/EP
            collective runs (``subgpu_jax.model.collective.COLLECTIVES``). timing: rounds,
            replays, warm-up, output check (``Timing``). calibration: the calibration file of
            the prediction (None: the analytical model). cache: the predicting simulator's L2
            policy (``lru``, ``fifo``, ``none``; None: the setup's default, resolved by
            ``run.prepare_run``). trace: a Perfetto trace file to write (None: no profile).
            json: print JSON instead of a table. from_search: a ``subgpu search`` folder whose
            best record (or, with ``top``, K best records per batch) replaces the workload and
            configuration. top: K (None: the best record only). out_dir: the folder of the
            measured frontier with ``top`` (None: the search folder).
    """

    workload: WorkloadOptions
    config: ConfigOptions = field(default_factory=ConfigOptions)
    kernels: KernelSettings = field(default_factory=KernelSettings)
    mode: str = RUN_MODES[0]
    collectives: str = DEFAULT_COLLECTIVES
    timing: Timing = field(default_factory=Timing)
    calibration: str | None = None
    cache: str | None = None
    trace: str | None = None
    json: bool = False
    from_search: str | None = None
    top: int | None = None
    out_dir: str | None = None

    @classmethod
    def from_args(cls, a: argparse.Namespace) -> "RunRequest":
        """The request of parsed ``subgpu run`` arguments ``a`` (every option of the ``run``
        parser, ``commands.add_commands``): the one place that reads them."""
        return cls(workload=WorkloadOptions.from_args(a),
                   config=ConfigOptions(cuts=a.cuts, sms=a.sms, microbatch=a.microbatch,
                                        reuse=a.reuse, policy=a.policy,
                                        streams_per_stage=int(a.streams_per_stage)),
                   kernels=KernelSettings.from_args(a), mode=a.mode, collectives=a.collectives,
                   timing=Timing(rounds=a.rounds, replays=a.replays, warmup=a.warmup,
                                 check=not a.no_check),
                   calibration=a.calibration, cache=a.cache, trace=a.trace, json=a.json,
                   from_search=a.from_search, top=a.top, out_dir=a.out_dir)

    def check(self) -> None:
        """Refuse counts below their minimum: ``--rounds``, ``--replays`` and
        ``--streams-per-stage`` >= 1, ``--warmup`` >= 0.

        Raises:
            ValueError: one line naming the flag.
        """
        t = self.timing
        for flag, v, lo in (("rounds", t.rounds, 1), ("replays", t.replays, 1),
                            ("warmup", t.warmup, 0),
                            ("streams-per-stage", self.config.streams_per_stage, 1)):
            if v < lo:
                raise ValueError(f"--{flag} must be >= {lo}, got {v}")

    def arch_options(self):
        """The typed options of ``subgpu_jax.app.options.resolve_arch`` (``ArchOptions``):
        ``--model``, ``--name``, ``--expert-dtype``, ``--calibration`` (a calibration
        measured in bf16 builds the model so), ``--moe-gemm`` (refused for a dense model),
        ``--ep`` and ``--gpus`` (the EP default)."""
        from subgpu_jax.app.options import ArchOptions

        w = self.workload
        return ArchOptions(model=w.model, name=w.name, expert_dtype=w.expert_dtype,
                           calibration=self.calibration, moe_gemm=self.kernels.moe_gemm,
                           ep=w.ep, gpus=w.gpus)


def check_stage_pools(alloc, hw, flag: str = "--sms") -> None:
    """Refuse a stage the runtime cannot run: a pool of fewer than ``hw.stage_min_sms`` SMs
    (16 on the H100 and H200: no cuBLAS or cuBLASLt GEMM launched on the 8-SM pool of an
    [8, 120] split of an H100, ``Hardware.min_stage_sms``), which would stop the run with
    ``CUBLAS_STATUS_EXECUTION_FAILED`` after minutes of setup.

    Args:
        alloc: SMs per stage. hw: the ``Hardware`` of ``--hardware``. flag: what the message names.

    Raises:
        ValueError: one line naming ``flag``, the stage and the minimum.
    """
    small = hw.stages_below_minimum(alloc)
    if small:
        d = small[0]
        raise ValueError(f"{flag}: stage {d} has {alloc[d]} SMs; on the {hw.name} the runtime "
                         f"needs at least {hw.stage_min_sms} per stage (cuBLAS failed on the "
                         f"smallest pools of an H100: docs/verdicts.md); a search made today "
                         f"never proposes fewer")


def add_kernel_args(group, command: str) -> None:
    """Add every ``KERNEL_POLICIES`` option (``hw_runtime.gpu.policies``: flags, choices,
    defaults and help are the registry's) to an argparse group of ``command`` (``"run"``: the
    full help; ``"calibrate"``/``"tune"``: a pointer to it)."""
    for p in KERNEL_POLICIES:
        if command == "run":
            text = f"{p.what}, the same for temporal and pipelined runs: {p.help}"
        elif command == "calibrate":
            text = (f"{p.what} to calibrate (use the same with `subgpu run`): "
                    f"{', '.join(p.choices)} (see `subgpu run --help`)")
        else:
            text = f"{p.what} (see `subgpu run --help`)"
        group.add_argument(p.flag, default=p.default, choices=p.choices,
                           help=f"{text}. Default: {p.default}")
