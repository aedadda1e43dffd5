"""The runtime's kernel policies in one registry: the ``--gemm``, ``--elementwise``,
``--attention`` and ``--moe-gemm`` options of ``subgpu run``, ``calibrate`` and ``tune``.

Each ``KernelPolicy`` names its flag, its choices (the owning kernel module's tuple;
``--attention``'s and its help come from ``decode_attn.ATTENTION_BACKENDS``), its
default, the value a calibration made before the option existed was measured with (``legacy``,
what ``run.calibration_mismatch`` assumes when ``meta`` lacks the field), and its help. The
parsers take their options from this registry (the workflows' flag helper
``hw_runtime.commands.request.add_kernel_args``); ``check_policies`` refuses a bad value
where no parser stands in the way (``TuneSpec``). How a policy resolves to a kernel stays with
its module (``fused.resolve``, ``decode_attn.resolve``, ``moe_gemm.resolve``,
``blas.GemmPolicy``). ``KernelSettings`` holds one value of each option (and the stream
priorities, ``LANE_PRIORITY``): what a ``TorchWorkload`` and an ``Executor`` are built with; each
default is written once, here. Pure Python.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from subgpu_jax.model.checks import choice

from hw_runtime.gpu.blas import GEMM_POLICIES
from hw_runtime.gpu.decode_attn import ATTENTION, attention_help
from hw_runtime.gpu.fused import ELEMENTWISE
from hw_runtime.gpu.moe_gemm import MOE_GEMM

__all__ = ["KernelPolicy", "KERNEL_POLICIES", "check_policies", "LEGACY",
           "KERNEL_DEFAULTS", "KernelSettings", "LANE_PRIORITY", "DEFAULT_LANE_PRIORITY",
           "LANE_PRIORITY_HELP"]

#: Stream-priority policies of ``Executor.lane_priority`` (``Executor.priority_for``).
LANE_PRIORITY: tuple[str, ...] = ("auto", "on", "off")
#: The default of ``Executor.lane_priority`` and ``--lane-priority``: ``auto``.
DEFAULT_LANE_PRIORITY = LANE_PRIORITY[0]
#: ``--lane-priority``'s help (``subgpu run``, ``calibrate`` and ``tune``).
LANE_PRIORITY_HELP = ("CUDA priorities for the streams of a stage (lane 0 highest): auto (on "
                      "when each lane holds at most one microbatch, m <= K, which keeps both "
                      "microbatches from locking onto one stage), on or off. Default: "
                      f"{DEFAULT_LANE_PRIORITY}")


@dataclass(frozen=True)
class KernelPolicy:
    """One kernel option: ``dest`` (argparse name), ``flag``, ``choices``, ``default``,
    ``legacy`` (see the module docstring), ``what`` (a few words) and ``help`` (the full text
    of ``subgpu run --help``, without its default)."""

    dest: str
    flag: str
    choices: tuple[str, ...]
    default: str
    legacy: str | None
    what: str
    help: str


KERNEL_POLICIES: tuple[KernelPolicy, ...] = (
    KernelPolicy("gemm", "--gemm", GEMM_POLICIES, "tuned", "stock", "GEMM launch policy",
                 "stock (PyTorch's default BLAS), pool (cuBLASLt planned for the SMs of the pool "
                 "each GEMM runs on) or tuned (each GEMM timed on its pool under a few SM "
                 "targets before capture, the fastest kept; the wins and the validation on the "
                 "H200 used it)"),
    KernelPolicy("elementwise", "--elementwise", ELEMENTWISE, "auto", "torch",
                 "elementwise kernels",
                 "torch (PyTorch chains: RoPE + KV append as 9 kernels, RMSNorm as 2), triton "
                 "(one fused kernel per op, hw_runtime/gpu/fused.py) or auto (triton where it "
                 "imports)"),
    KernelPolicy("attention", "--attention", ATTENTION, "auto", "sdpa", "decode attention",
                 attention_help()),
    KernelPolicy("moe_gemm", "--moe-gemm", MOE_GEMM, "auto", "bmm", "MoE expert GEMMs",
                 "bmm (gather into padded expert batches + torch.bmm + activation), triton (one "
                 "grouped launch over the routed tokens with the gather and activation fused: "
                 "hw_runtime/gpu/moe_gemm.py) or auto (triton where it runs and an expert holds "
                 "at most 128 routed tokens, where it measured faster on the H200; bmm above)"),
)

#: ``dest -> legacy``: what a calibration without the field was measured with.
LEGACY: dict[str, str | None] = {p.dest: p.legacy for p in KERNEL_POLICIES}

#: ``dest -> default``: each option's default (``KernelSettings``'s fields).
KERNEL_DEFAULTS: dict[str, str] = {p.dest: p.default for p in KERNEL_POLICIES}


def check_policies(values: dict) -> None:
    """Refuse a kernel policy outside its choices (``values``: ``dest -> value``; missing ones
    are skipped).

    Raises:
        ValueError: one line naming the flag and the allowed values.
    """
    for p in KERNEL_POLICIES:
        if p.dest in values:
            choice(values[p.dest], p.flag, p.choices)


@dataclass(frozen=True)
class KernelSettings:
    """The runtime's kernel choices, the same for the temporal and the pipelined runs: what
    ``TorchWorkload(kernels=...)`` resolves (``elementwise``, ``attention``, ``moe_gemm``) and
    what the ``Executor`` takes (``gemm``, ``lane_priority``). Re-exported by
    ``hw_runtime.commands.request`` (``RunRequest.kernels``).

    Fields:
        gemm, elementwise, attention, moe_gemm: the kernel policies of ``KERNEL_POLICIES``
            (``--gemm``, ``--elementwise``, ``--attention``, ``--moe-gemm``; their choices and
            defaults are the registry's: ``KERNEL_DEFAULTS``).
        lane_priority: CUDA priorities for the streams of a stage (``--lane-priority``, one of
            ``LANE_PRIORITY``).
    """

    gemm: str = KERNEL_DEFAULTS["gemm"]
    elementwise: str = KERNEL_DEFAULTS["elementwise"]
    attention: str = KERNEL_DEFAULTS["attention"]
    moe_gemm: str = KERNEL_DEFAULTS["moe_gemm"]
    lane_priority: str = DEFAULT_LANE_PRIORITY

    @classmethod
    def from_args(cls, a: argparse.Namespace, lanes: bool = True) -> "KernelSettings":
        """The kernel settings of parsed arguments ``a``: every ``KERNEL_POLICIES`` option and,
        with ``lanes``, ``--lane-priority`` (``subgpu calibrate`` has none: the default)."""
        opts = vars(a)
        kw = {p.dest: opts[p.dest] for p in KERNEL_POLICIES}
        if lanes:
            kw["lane_priority"] = opts["lane_priority"]
        return cls(**kw)

    def policies(self) -> dict[str, str]:
        """``{dest: value}`` of the ``KERNEL_POLICIES`` options (``gpu.calibrate.calibrate``'s
        keyword arguments)."""
        return {p.dest: getattr(self, p.dest) for p in KERNEL_POLICIES}
