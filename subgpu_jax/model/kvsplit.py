"""The KV-split rule of the split-KV ("flash-decoding") decode kernels, shared by the GPU
runtime's Triton kernels (``hw_runtime.gpu.decode_attn``) and FlashInfer's
(``hw_runtime.gpu.flashinfer_attn``), and by the model's decode-attention kernels
(``model.builder``: their CTA count): how many splits each (request, KV head) gets so that the
grid fills the SMs of the pool the kernel runs on. Pure Python (tested on the CPU).
"""

from __future__ import annotations

import math

from subgpu_jax.model.checks import pos_int

__all__ = ["BLOCK_N", "MAX_SPLITS", "SPLIT_SMS", "num_kv_splits"]

#: KV positions per inner step of a split (a multiple of 16 for ``tl.dot``): 128, with 4 warps,
#: 3 stages and 2 waves, the best of 24 launch settings over three workloads' shapes
#: (docs/results.md, "Kernel choices"; 64 measured 1-15% slower).
BLOCK_N = 128
#: Upper bound on the splits of one (request, KV head): the partials are ``S x qh x hd`` float32.
MAX_SPLITS = 64
#: The pool size the model's attention kernels are split for (``model.builder``): the largest
#: preset's SMs (B200, 148). The graph does not know the pool a kernel will run on; it needs
#: no more: a kernel uses min(pool, CTAs) SMs, and with the runtime's own split for a pool of
#: p <= SPLIT_SMS SMs that is p unless the split is capped (by ``kv_len / BLOCK_N`` or
#: ``MAX_SPLITS``), where both give the same capped count. So min(p, CTAs) is the runtime's.
SPLIT_SMS = 148


def num_kv_splits(programs: int, kv_len: int, sms: int, waves: float = 2.0,
                  block_n: int = BLOCK_N, max_splits: int = MAX_SPLITS) -> int:
    """KV splits per (request, KV head) so that ``programs x splits`` fills ``waves`` waves of
    the pool's SMs, at most one split per ``block_n`` positions and at most ``max_splits``.

    Args:
        programs: (requests x KV heads) of the call (> 0). kv_len: KV positions (> 0).
        sms: SMs of the pool the kernel runs on (> 0; the whole GPU when it has no pool).
        waves: target programs per SM (2: one program per SM leaves the memory system idle
            between its blocks; FlashDecoding's choice of several waves).

    Returns:
        ``S >= 1``.

    Raises:
        ValueError: a non-positive argument.

    Example: 1,024 requests x 1 KV head on 132 SMs need no split (1,024 programs > 264); 8
    requests x 8 KV heads on 64 SMs with 2,048 positions get ``ceil(128 / 64) = 2``.
    """
    for name, v in (("programs", programs), ("kv_len", kv_len), ("sms", sms),
                    ("block_n", block_n), ("max_splits", max_splits)):
        pos_int(v, f"num_kv_splits: {name}")
    if isinstance(waves, bool) or not (isinstance(waves, (int, float)) and math.isfinite(waves)
                                       and 0 < waves <= 1024):
        raise ValueError(f"num_kv_splits: waves must be a number in (0, 1024], got {waves!r}")
    want = math.ceil(waves * sms / programs)
    return max(1, min(want, math.ceil(kv_len / block_n), max_splits))
