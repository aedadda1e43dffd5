"""Split-KV decode attention in Triton (issue 23, item 2): one query token per request, GQA
without expanding the KV cache, the number of KV splits chosen from the batch and the SMs of
the pool the kernel runs on.

The runtime's default decode attention is ``torch.nn.functional.scaled_dot_product_attention``,
which on the H200 picks a cuDNN kernel named ``sdpa_sm80_flash_fprop_wmma``; measured, it
streams the KV cache at 1.00-1.06 of the copy bandwidth, and this kernel 0.9-16.6% slower
(docs/results.md, "The temporal step against its limits"), so it stays opt-in. Serving engines run split-KV ("flash-decoding") kernels instead: the KV history
of each (request, KV head) is cut into ``S`` splits, each split is one program that computes a
partial softmax-weighted sum for all query heads of its group, and a second kernel merges the
``S`` partials with their log-sum-exps. ``S`` is chosen so that the grid fills the SMs the
kernel can use (``num_kv_splits``): on a small pool fewer splits are needed, on a small batch
more.

``decode_attention(q, k, v, out, sms)``:

* ``q``: ``(R, qh, hd)`` bfloat16 (one query token per request), ``k``/``v``: ``(R, kvh, L,
  hd)`` bfloat16 caches (``qh`` a multiple of ``kvh``; ``hd`` a power of two, 16-256), ``out``:
  ``(R, qh, hd)``; softmax scale ``1/sqrt(hd)`` (SDPA's default). Every one of the ``L``
  positions is attended to (the runtime's caches hold exactly the history).
* Arithmetic: scores, softmax and the accumulator in float32, probabilities rounded to the
  cache's dtype for the second product (as FlashAttention does), one rounding of the result.

``ATTENTION`` policies (``resolve``): ``"sdpa"`` PyTorch's SDPA (the default until the Triton
kernel is measured on the GPU), ``"triton"`` this kernel (refused where Triton or CUDA is
missing); ``"auto"`` is SDPA for now. Needs torch and triton only when a kernel runs; the
split choice is pure Python (tested on the CPU).
"""

from __future__ import annotations

import math

__all__ = ["ATTENTION", "resolve", "num_kv_splits", "decode_attention", "BLOCK_N",
           "MAX_SPLITS"]

#: The decode-attention policies ``TorchWorkload(attention=...)`` and ``--attention`` take.
ATTENTION = ("auto", "sdpa", "triton")
#: KV positions per inner step of a split (a multiple of 16 for ``tl.dot``).
BLOCK_N = 64
#: Upper bound on the splits of one (request, KV head): the partials are ``S x qh x hd`` float32.
MAX_SPLITS = 64


def resolve(policy: str, is_cuda: bool) -> str:
    """The decode attention a workload uses: ``"sdpa"`` or ``"triton"``.

    Args:
        policy: one of ``ATTENTION``. is_cuda: the workload's device is a CUDA GPU.

    Raises:
        ValueError: an unknown policy, or ``"triton"`` without a CUDA device or without Triton.
    """
    from hw_runtime.gpu.fused import resolve_triton_policy

    # auto is SDPA: on the H200 it streams the KV cache at the copy bandwidth and the Triton
    # kernel measured 1-17% slower (docs/results.md, "The temporal step against its limits")
    return resolve_triton_policy("attention", policy, ATTENTION, is_cuda, "sdpa", False)


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
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"num_kv_splits: {name} must be an integer >= 1, got {v!r}")
    if not (isinstance(waves, (int, float)) and math.isfinite(waves) and waves > 0):
        raise ValueError(f"num_kv_splits: waves must be a finite number > 0, got {waves!r}")
    want = math.ceil(waves * sms / programs)
    return max(1, min(want, math.ceil(kv_len / block_n), max_splits))


def _kernels():
    """``(partial_k, merge_k)`` (``decode_attn_kernels``, imported on first use)."""
    from hw_runtime.gpu import decode_attn_kernels as k

    return k.partial_k, k.merge_k


def decode_attention(q, k, v, out, sms: int, splits: int | None = None) -> int:
    """Decode attention of one query token per request into ``out`` (module docstring).

    Args:
        q: ``(R, qh, hd)``; k, v: ``(R, kvh, L, hd)`` (the last dimension contiguous); out:
            ``(R, qh, hd)``, written. All on one CUDA device, q/k/v of one dtype.
        sms: SMs of the pool the call runs on (``num_kv_splits``).
        splits: force the number of KV splits (tests; 1..``MAX_SPLITS``); default
            ``num_kv_splits``. Splits are whole 64-position blocks, so fewer may be used.

    Returns:
        The number of KV splits used.

    Raises:
        ValueError: shapes that do not match, ``qh`` not a multiple of ``kvh``, ``hd`` not a
            power of two in 16-256, a non-contiguous last dimension, q/k/v of different dtypes
            or tensors on different devices, ``splits`` outside 1..``MAX_SPLITS``.
    """
    import torch
    import triton

    if q.dim() != 3 or k.dim() != 4 or v.shape != k.shape or out.shape != q.shape:
        raise ValueError(f"decode_attention: q (R, qh, hd), k/v (R, kvh, L, hd), out like q; got "
                         f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}, "
                         f"out {tuple(out.shape)}")
    R, qh, hd = q.shape
    _, kvh, L, _ = k.shape
    if k.shape[0] != R or k.shape[3] != hd or qh % kvh:
        raise ValueError(f"decode_attention: q {tuple(q.shape)} and k {tuple(k.shape)} disagree "
                         f"(requests, head dim, or qh not a multiple of kvh)")
    if hd < 16 or hd > 256 or hd & (hd - 1):
        raise ValueError(f"decode_attention: head dim must be a power of two in 16-256, got {hd}")
    if any(t.stride(-1) != 1 for t in (q, k, v, out)):
        raise ValueError("decode_attention: the last dimension of q, k, v and out must be "
                         "contiguous")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"decode_attention: q, k and v must share a dtype, got {q.dtype}, "
                         f"{k.dtype}, {v.dtype}")
    if len({t.device for t in (q, k, v, out)}) != 1 or q.device.type != "cuda":
        raise ValueError("decode_attention: q, k, v and out must be on one CUDA device")
    if splits is not None and (isinstance(splits, bool) or not isinstance(splits, int)
                               or not 1 <= splits <= MAX_SPLITS):
        raise ValueError(f"decode_attention: splits must be an integer in 1..{MAX_SPLITS}, got "
                         f"{splits!r}")
    group = qh // kvh
    S = splits if splits is not None else num_kv_splits(R * kvh, L, sms)
    split_len = triton.cdiv(triton.cdiv(L, S), BLOCK_N) * BLOCK_N
    S = triton.cdiv(L, split_len)        # no split left without positions
    part = torch.empty((R, qh, S, hd), device=q.device, dtype=torch.float32)
    lse = torch.empty((R, qh, S), device=q.device, dtype=torch.float32)
    partial_k, merge_k = _kernels()
    partial_k[(R, kvh, S)](
        q, k, v, part, lse,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        part.stride(0), part.stride(1), part.stride(2), lse.stride(0), lse.stride(1),
        L, split_len, 1.0 / math.sqrt(hd),
        GROUP=group, GROUP_PAD=max(16, triton.next_power_of_2(group)), HD=hd, BN=BLOCK_N)
    merge_k[(R, qh)](part, lse, out, part.stride(0), part.stride(1), part.stride(2),
                     lse.stride(0), lse.stride(1), out.stride(0), out.stride(1), S,
                     HD=hd, SP=max(2, triton.next_power_of_2(S)))
    return S
