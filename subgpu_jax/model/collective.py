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
            simulator adds the bytes to the collective (uncalibrated kernels only: a calibrated
            one's measured time has them); it does not charge the CTAs separately.
``none``    the payload copy only, no link time: the control in which communication costs
            nothing to hide (``ContentionModel(link_time=False)``).
``nccl``    real collectives across the deployment's GPUs, one process per GPU under
            ``torchrun`` (``hw_runtime.gpu.distributed``; ``subgpu run`` only). The simulator
            charges them as ``proxy`` until multi-GPU measurements refit it (issue 25).
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

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["COLLECTIVE_MODES", "COLLECTIVES", "ONE_GPU_COLLECTIVES", "DEFAULT_COLLECTIVES", "CollectiveMode", "ProxyPlan",
           "proxy_plan", "collective_mode", "one_gpu_mode", "ALLTOALL_OPS", "CUSTOM_AR_CTAS", "NCCL_NVLS_CTAS",
           "A2A_CTAS", "CUSTOM_AR_MAX_BYTES", "allreduce_tensor_bytes", "alltoall_buffer_bytes"]

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
#: Graph ops whose collective is the expert all-to-all; every other collective op (the TP
#: all-reduces of attention, MLP and the head's ``sample``/``embed``) is an all-reduce.
ALLTOALL_OPS = frozenset({"dispatch", "combine"})


@dataclass(frozen=True)
class CollectiveMode:
    """One ``--collectives`` mode: ``name``; ``link_time`` (the simulator charges the link
    time: ``ContentionModel.link_time``); ``proxy`` (the collective moves the proxy's payload
    traffic: ``ContentionModel.proxy_collectives``); ``spin`` (the runtime waits out the link
    time in a one-thread sleep, ``TorchWorkload(spin=True)``); ``runtime``: what the runtime
    runs, in words; ``label``: the provenance line of a run measured in this mode (what
    ``subgpu run`` prints and records, ``app.provenance.collectives_label``); ``distributed``:
    one process per GPU with real collectives (``hw_runtime.gpu.distributed``, ``subgpu run``
    under ``torchrun`` only)."""

    name: str
    link_time: bool
    proxy: bool
    spin: bool
    runtime: str
    label: str
    distributed: bool = False

    def contention_kwargs(self) -> dict:
        """The ``ContentionModel`` fields of this mode."""
        return {"link_time": self.link_time, "proxy_collectives": self.proxy}

    def workload_kwargs(self) -> dict:
        """The ``TorchWorkload`` fields of this mode (``spin``, ``proxy``; a distributed mode
        runs real collectives instead, through ``TorchWorkload(dist=...)``)."""
        return {"spin": self.spin, "proxy": self.proxy and not self.distributed}


#: The registry behind every ``--collectives`` option (run, calibrate, tune, the validation).
COLLECTIVE_MODES: dict[str, CollectiveMode] = {m.name: m for m in (
    CollectiveMode("sleep", True, False, True,
                   "collectives emulated as a wait",
                   "collectives emulated on one GPU as a wait to the modelled link time, "
                   "which the other stage hides (no real NCCL collective was run)"),
    CollectiveMode("proxy", True, True, False,
                   "collectives as the engine kernel's CTAs and HBM traffic",
                   "collectives proxied on one GPU: the engine collective's CTAs on the issuing "
                   "pool, moving the payload through HBM paced to the modelled link time "
                   "(--collectives proxy; no real NCCL collective was run)"),
    CollectiveMode("none", False, False, False,
                   "no collective wait",
                   "collectives as copies only, without the wait to the link time "
                   "(--collectives none: the control in which no collective wait can be "
                   "hidden)"),
    # the simulator charges a real collective as the proxy (its link time and HBM traffic):
    # the model issue 25 refits on multi-GPU measurements
    CollectiveMode("nccl", True, True, False,
                   "real NCCL collectives, one process per GPU",
                   "real NCCL collectives across the deployment's GPUs, one process per GPU "
                   "(--collectives nccl under torchrun; the step is the slowest rank's)",
                   distributed=True),
)}
#: The ``--collectives`` names, in the registry's order (``subgpu run``'s choices).
COLLECTIVES: tuple[str, ...] = tuple(COLLECTIVE_MODES)
#: The modes one process on one GPU can run (``calibrate``, ``tune`` and the verdict protocol).
ONE_GPU_COLLECTIVES: tuple[str, ...] = tuple(n for n, m in COLLECTIVE_MODES.items()
                                             if not m.distributed)
#: The mode of every ``--collectives`` option unless given, and the one searches predict.
DEFAULT_COLLECTIVES = "sleep"


def collective_mode(name: str) -> CollectiveMode:
    """The ``CollectiveMode`` called ``name``.

    Raises:
        ValueError: an unknown name (one line naming ``--collectives`` and the allowed ones).
    """
    if not isinstance(name, str) or name not in COLLECTIVE_MODES:
        raise ValueError(f"--collectives must be one of {', '.join(COLLECTIVE_MODES)}, got "
                         f"{name!r}")
    return COLLECTIVE_MODES[name]


def one_gpu_mode(name: str) -> CollectiveMode:
    """The ``CollectiveMode`` called ``name``, one that a single process on one GPU can run
    (``calibrate``, ``tune`` and the verdict protocol).

    Raises:
        ValueError: an unknown name, or a distributed mode (one line naming ``--collectives``).
    """
    m = collective_mode(name)
    if m.distributed:
        raise ValueError(f"--collectives {name} runs one process per GPU: only subgpu run takes "
                         f"it; here use one of {', '.join(ONE_GPU_COLLECTIVES)}")
    return m


def allreduce_tensor_bytes(comm_bytes: float, tp: int) -> float:
    """The tensor a ring all-reduce over ``tp`` GPUs reduces when each GPU sends ``comm_bytes``
    (the graph's payload): a ring sends 2(t-1)/t of the tensor, so ``comm_bytes x t / (2(t-1))``
    (``tp`` >= 2). Example: 28 MiB sent at TP8 -> a 16 MiB tensor."""
    return comm_bytes * tp / (2.0 * (tp - 1))


def alltoall_buffer_bytes(comm_bytes: float, ep: int) -> float:
    """The buffer an all-to-all over ``ep`` GPUs exchanges when each GPU sends ``comm_bytes`` to
    the others (1/e of it stays local): ``comm_bytes x e / (e-1)`` (``ep`` >= 2). Example: 3 MiB
    sent at EP4 -> a 4 MiB buffer."""
    return comm_bytes * ep / (ep - 1.0)


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


def proxy_plan(kernel: Any, tp: int = 8) -> ProxyPlan:
    """The proxy of collective ``kernel`` (a ``graph.Kernel`` with ``comm_bytes`` > 0) in a
    deployment of attention TP degree ``tp``.

    All-reduce (any collective op but ``ALLTOALL_OPS``): the graph's payload is the ring send
    volume 2(t-1)/t x the tensor, so the tensor is ``comm_bytes`` x t / (2(t-1)); vLLM's custom
    all-reduce up to its 8 MiB buffer (36 CTAs), NCCL NVLS above (16 CTAs). MoE dispatch and
    combine are all-to-alls: DeepEP's 20 SMs. HBM traffic 2 x ``comm_bytes`` in every case.

    Example (hand-derived): Llama-3.1-70B TP8, 1,024 tokens per microbatch, hidden 8,192, bf16:
    the tensor is 16 MiB, ``comm_bytes`` = 28 MiB -> NCCL NVLS, 16 CTAs, 56 MiB through HBM; at
    512 tokens the tensor is 8 MiB -> custom all-reduce, 36 CTAs.

    Raises:
        ValueError: ``kernel`` is not a collective, or ``tp`` < 2 for an all-reduce.
    """
    raw = getattr(kernel, "comm_bytes", 0.0)
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not math.isfinite(raw):
        raise ValueError(f"proxy_plan: comm_bytes of {getattr(kernel, 'name', kernel)!r} must be "
                         f"a finite number of bytes, got {raw!r}")
    c = float(raw)
    if not c > 0:
        raise ValueError(f"proxy_plan: kernel {getattr(kernel, 'name', kernel)!r} is not a "
                         f"collective (comm_bytes {c!r})")
    if kernel.op in ALLTOALL_OPS:
        return ProxyPlan("alltoall", A2A_CTAS, 2.0 * c, "DeepEP intranode all-to-all: num_sms 20")
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 2:
        raise ValueError(f"proxy_plan: an all-reduce needs a TP degree >= 2, got {tp!r}")
    if allreduce_tensor_bytes(c, tp) <= CUSTOM_AR_MAX_BYTES:
        return ProxyPlan("custom_allreduce", CUSTOM_AR_CTAS, 2.0 * c,
                         "vLLM custom all-reduce: defaultBlockLimit 36, max_size 8 MiB")
    return ProxyPlan("nccl_nvls", NCCL_NVLS_CTAS, 2.0 * c,
                     "NCCL NVLS all-reduce on NVSwitch Hopper: 16 channels")
