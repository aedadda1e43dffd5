"""One kernel of a region's operator graph (``Kernel``) with its analytical work, and the CTA
counts the graph builders give GEMMs and streaming kernels (``gemm_ctas``, ``stream_ctas``).
``model.graph`` re-exports ``Kernel``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Kernel", "gemm_ctas", "stream_ctas", "work_signature"]


@dataclass(frozen=True)
class Kernel:
    """One kernel of the region, with its analytical work for ONE microbatch.

    Attributes:
        name: unique within the region, ``"L{j}.{op}"`` with j the layer inside the region.
        op: operator kind (``rmsnorm``, ``qkv``, ``rope_kv``, ``attn``, ``o_proj``, ``allreduce``,
            ``router``, ``topk``, ``dispatch``, ``expert_up``, ``expert_down``, ``combine``,
            ``mlp_up``, ``mlp_down``, ``residual_norm``; multi-head latent attention:
            ``mla_down``, ``mla_q_up``, ``mla_v_up``; the step's head: ``final_norm``,
            ``lm_head``, ``sample``, ``embed``).
        category: one of ``CATEGORIES``.
        layer: layer index inside the region (0-based).
        flops: arithmetic work (FLOP).
        dtype: operand datatype of the tensor work (key of ``DTYPE_BYTES``).
        tensor: True when the FLOPs run on tensor cores, False for CUDA-core (vector) work.
        weight_objects: ``((name, bytes), ...)`` weights read (logical objects for the L2 model).
        act_reads: ``((name, bytes), ...)`` activations read.
        act_writes: ``((name, bytes), ...)`` activations written.
        kv_bytes: streaming KV-cache bytes read or appended (never cached in L2).
        comm_bytes: bytes each GPU sends for this collective (0 if none).
        scaleout_bytes: the part of ``comm_bytes`` that crosses the scale-out network
            (``Deployment.comm_split``); the rest goes over NVLink.
        scaleout_Bps: scale-out bandwidth per GPU (bytes/s; 0 when ``scaleout_bytes`` is 0).
        ctas: thread blocks launched; a kernel can use at most this many SMs.
    """

    name: str
    op: str
    category: str
    layer: int
    flops: float
    dtype: str
    tensor: bool
    weight_objects: tuple[tuple[str, float], ...] = ()
    act_reads: tuple[tuple[str, float], ...] = ()
    act_writes: tuple[tuple[str, float], ...] = ()
    kv_bytes: float = 0.0
    comm_bytes: float = 0.0
    ctas: int = 1
    scaleout_bytes: float = 0.0
    scaleout_Bps: float = 0.0

    @property
    def weight_bytes(self) -> float:
        """Sum of weight object bytes."""
        return float(sum(b for _, b in self.weight_objects))

    @property
    def act_bytes(self) -> float:
        """Sum of activation bytes read and written."""
        return float(sum(b for _, b in self.act_reads) + sum(b for _, b in self.act_writes))

    @property
    def hbm_bytes(self) -> float:
        """All bytes the kernel moves through the memory system (weights+activations+KV)."""
        return self.weight_bytes + self.act_bytes + self.kv_bytes

    def link_bytes(self, nvlink_Bps: float) -> float:
        """The payload in NVLink-equivalent bytes: the NVLink and scale-out parts move at the
        same time, so the collective takes max(nvlink part / NVLink, scale-out part /
        scale-out) = ``link_bytes / nvlink_Bps``. Equals ``comm_bytes`` inside one domain."""
        if self.scaleout_bytes <= 0:
            return float(self.comm_bytes)
        return float(max(self.comm_bytes - self.scaleout_bytes,
                         self.scaleout_bytes * nvlink_Bps / self.scaleout_Bps))

    def link_us(self, setup_us: float, nvlink_Bps: float) -> float:
        """The collective's modelled link time (µs): ``setup_us`` + ``link_bytes`` / NVLink
        (the static model's network term, and the wait a calibration solves for); 0 for a
        kernel that is not a collective. ``setup_us``, ``nvlink_Bps``: the GPU preset's
        ``comm_setup_us`` and ``nvlink_Bps``."""
        if not self.is_comm:
            return 0.0
        return float(setup_us) + self.link_bytes(nvlink_Bps) / nvlink_Bps * 1e6

    @property
    def is_comm(self) -> bool:
        """True for a collective ("virtual kernel") that sends ``comm_bytes`` over NVLink."""
        return self.comm_bytes > 0


def gemm_ctas(m: float, n: float, k: float, nbytes: float) -> int:
    """CTA count of a GEMM/GEMV: 128x128 output tiles times split-K slices of 512 along K, or one
    CTA per 1 MiB of operands, whichever is larger (assumption modelled on cuBLAS/CUTLASS decode
    GEMMs, which split K to fill the GPU when M is small)."""
    tiles = math.ceil(max(m, 1) / 128) * math.ceil(max(n, 1) / 128) * math.ceil(max(k, 1) / 512)
    return int(max(tiles, math.ceil(nbytes / 2**20), 1))


def stream_ctas(nbytes: float, per_cta: float = 2**16) -> int:
    """CTA count of a streaming (elementwise/norm/copy) kernel: one CTA per 64 KiB (assumption)."""
    return int(max(1, math.ceil(nbytes / per_cta)))


def work_signature(k: Kernel) -> tuple:
    """What of kernel ``k`` its rate-model work depends on: every field but its name, layer and
    the names of its objects (the L2 model's identities, which a lone kernel with the cache off
    does not use). Kernels of different layers with equal shapes share one signature. The key of
    every memo of work solved for a kernel (``sim.worksolve``, ``score.poolwork``,
    ``score.vctables``): ``model.calibration.kernel_key`` names a measurement, not the work
    (GPT-OSS 120B's o_proj at TP8 and at TP4, G = 4,096, share one key with other weight and
    write bytes)."""
    return (k.op, k.category, float(k.flops), k.dtype, bool(k.tensor),
            tuple(float(b) for _, b in k.weight_objects),
            tuple(float(b) for _, b in k.act_reads), tuple(float(b) for _, b in k.act_writes),
            float(k.kv_bytes), float(k.comm_bytes), int(k.ctas), float(k.scaleout_bytes),
            float(k.scaleout_Bps))
