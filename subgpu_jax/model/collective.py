"""How a TP/EP collective is charged on one GPU: the ``--collectives`` modes and the collective
proxy (issue 23, docs/collectives.md).

subgpu times one GPU of a multi-GPU deployment. A collective's network time cannot be measured
there, so the runtime stands in for it, and the simulator charges it the same way:

==========  ====================================================================================
mode        what stands in for the collective (runtime) / what the simulator charges
==========  ====================================================================================
``sleep``   the payload copied at full speed, then a one-thread timed wait (``torch.cuda._sleep``)
            to the modelled link time. The wait occupies no SMs and moves no bytes, so whatever
            overlaps it looks free: an upper bound on what hiding communication can give.
``proxy``   what the engine's collective kernel consumes on this GPU: ``ProxyPlan.ctas`` CTAs on
            the issuing pool for the whole link time, moving the payload through HBM paced to the
            link rate (a read of every byte it sends, a write of every byte it receives). The
            simulator gives the collective that many SMs of its pool and adds the bytes.
``none``    the payload copy only, no link time: the control in which communication costs
            nothing to hide (``ContentionModel(link_time=False)``).
==========  ====================================================================================

The proxy's CTA counts follow what serving engines launch on Hopper (sources in
``ProxyPlan.source``): vLLM's custom all-reduce (one-shot below 256 KiB, two-shot up to its 8 MiB
buffer at 8 GPUs; ``defaultBlockLimit`` = 36 CTAs of 512 threads, csrc/custom_all_reduce.cuh), NCCL
above it (NVLink SHARP on NVSwitch Hopper systems, 16 channels = 16 CTAs, ``NCCL_NVLS_NCHANNELS``),
DeepEP's intranode dispatch/combine for the expert all-to-all (``Buffer.num_sms`` = 20,
deep_ep/buffer.py). Their HBM traffic on one GPU is taken as the bytes it sends (read) plus the
bytes it receives (written), 2 x ``Kernel.comm_bytes``: the least any algorithm moving that
payload needs (one-shot reads and NCCL's reduction buffers add more; not modelled).

Units: bytes, µs, CTAs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["COLLECTIVE_MODES", "CollectiveMode", "ProxyPlan", "proxy_plan", "collective_mode",
           "CUSTOM_AR_CTAS", "NCCL_NVLS_CTAS", "A2A_CTAS", "CUSTOM_AR_MAX_BYTES"]

#: vLLM custom all-reduce: ``defaultBlockLimit`` = 36 CTAs (csrc/custom_all_reduce.cuh).
CUSTOM_AR_CTAS = 36
#: vLLM custom all-reduce buffer: ``max_size`` = 8 MiB of the reduced tensor
#: (vllm/distributed/device_communicators/custom_all_reduce.py); larger tensors go to NCCL.
CUSTOM_AR_MAX_BYTES = 8 * 2**20
#: NCCL NVLS (NVLink SHARP) all-reduce on 8-GPU NVSwitch Hopper systems: 16 channels, one CTA
#: each (``NCCL_NVLS_NCHANNELS``; NCCL src/transport/nvls.cc).
NCCL_NVLS_CTAS = 16
#: DeepEP intranode dispatch/combine: ``Buffer.num_sms`` = 20 SMs (deep_ep/buffer.py).
A2A_CTAS = 20


@dataclass(frozen=True)
class CollectiveMode:
    """One ``--collectives`` mode: ``name``; ``link_time`` (the simulator charges the link
    time: ``ContentionModel.link_time``); ``proxy`` (the collective holds the engine kernel's CTAs
    and moves its payload through HBM: ``ContentionModel.proxy_collectives``); ``runtime``: what
    the runtime runs, one line; ``label``: the provenance line a measured run carries."""

    name: str
    link_time: bool
    proxy: bool
    runtime: str
    label: str

    def contention_kwargs(self) -> dict:
        """The ``ContentionModel`` fields of this mode."""
        return {"link_time": self.link_time, "proxy_collectives": self.proxy}


#: The registry behind every ``--collectives`` option (run, calibrate, tune, the validation).
COLLECTIVE_MODES: dict[str, CollectiveMode] = {m.name: m for m in (
    CollectiveMode("sleep", True, False,
                   "payload copy, then a one-thread timed wait to the modelled link time",
                   "collectives emulated: payload copy + a wait to the modelled link time that "
                   "occupies no SMs"),
    CollectiveMode("proxy", True, True,
                   "the engine collective's CTAs on the issuing pool, moving the payload "
                   "through HBM paced to the link time",
                   "collectives proxied: the engine collective's CTAs and HBM traffic, paced to "
                   "the modelled link time"),
    CollectiveMode("none", False, False, "payload copy only (no link time)",
                   "collectives as copies only (no link time): the control without "
                   "communication to hide"),
)}


def collective_mode(name: str) -> CollectiveMode:
    """The ``CollectiveMode`` called ``name``.

    Raises:
        ValueError: an unknown name (one line naming ``--collectives`` and the allowed ones).
    """
    if name not in COLLECTIVE_MODES:
        raise ValueError(f"--collectives must be one of {', '.join(COLLECTIVE_MODES)}, got "
                         f"{name!r}")
    return COLLECTIVE_MODES[name]


@dataclass(frozen=True)
class ProxyPlan:
    """What the collective proxy of one graph collective consumes on the issuing GPU.

    Attributes:
        algorithm: ``"custom_allreduce"``, ``"nccl_nvls"`` or ``"alltoall"``.
        ctas: CTAs it holds on the issuing pool for the whole link time.
        hbm_bytes: bytes it moves through HBM (read + write), 2 x ``comm_bytes``.
        source: where the CTA count and the algorithm choice come from.
    """

    algorithm: str
    ctas: int
    hbm_bytes: float
    source: str


def proxy_plan(kernel: Any) -> ProxyPlan:
    """The proxy of collective ``kernel`` (a ``graph.Kernel`` with ``comm_bytes`` > 0).

    All-reduce (op ``allreduce``): the graph's payload is the ring send volume 2(t-1)/t x the
    tensor; the tensor is taken as ``comm_bytes`` x 8/14 (t = 8, the TP degree of the workloads
    this is validated on) to pick vLLM's custom all-reduce (tensor <= 8 MiB, 36 CTAs) or NCCL
    NVLS (16 CTAs). Any other collective op (MoE dispatch, combine) is an all-to-all: DeepEP's
    20 SMs.

    Example (hand-derived): Llama-3.1-70B TP8, 1,024 tokens per microbatch, hidden 8,192, bf16:
    the tensor is 16 MiB, ``comm_bytes`` = 28 MiB -> NCCL NVLS, 16 CTAs, 56 MiB through HBM; at
    512 tokens the tensor is 8 MiB -> custom all-reduce, 36 CTAs.

    Raises:
        ValueError: ``kernel`` is not a collective.
    """
    c = float(getattr(kernel, "comm_bytes", 0.0) or 0.0)
    if not c > 0:
        raise ValueError(f"proxy_plan: kernel {getattr(kernel, 'name', kernel)!r} is not a "
                         f"collective (comm_bytes {c!r})")
    if kernel.op == "allreduce":
        tensor = c * 8.0 / 14.0
        if tensor <= CUSTOM_AR_MAX_BYTES * (1 + 1e-9):
            return ProxyPlan("custom_allreduce", CUSTOM_AR_CTAS, 2.0 * c,
                             "vLLM custom all-reduce: defaultBlockLimit 36, max_size 8 MiB")
        return ProxyPlan("nccl_nvls", NCCL_NVLS_CTAS, 2.0 * c,
                         "NCCL NVLS all-reduce on NVSwitch Hopper: 16 channels")
    return ProxyPlan("alltoall", A2A_CTAS, 2.0 * c, "DeepEP intranode all-to-all: num_sms 20")
