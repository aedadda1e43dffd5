"""Split-KV decode attention in Triton (issue 23, item 2): one query token per request, GQA
without expanding the KV cache, the number of KV splits chosen from the batch and the SMs of
the pool the kernel runs on.

The runtime's default decode attention is ``torch.nn.functional.scaled_dot_product_attention``,
which on the H200 picks an Ampere-era flash kernel (``sdpa_sm80_flash_fprop_wmma``) sized for
the whole GPU. Serving engines run split-KV ("flash-decoding") kernels instead: the KV history
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

import functools
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

    # auto stays SDPA until the Triton kernel is measured on a GPU (issue 23)
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


@functools.lru_cache(maxsize=1)
def _kernels():
    """Compile-on-first-use Triton kernels (imported lazily: CPU machines never need them)."""
    import triton
    import triton.language as tl

    @triton.jit
    def _partial_k(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr,
                   sq_r, sq_h, sk_r, sk_h, sk_l, sv_r, sv_h, sv_l,
                   so_r, so_h, so_s, sl_r, sl_h,
                   L, split_len, scale,
                   GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HD: tl.constexpr,
                   BN: tl.constexpr):
        r = tl.program_id(0).to(tl.int64)   # request offsets can pass 2**31 elements
        g = tl.program_id(1)
        s = tl.program_id(2)
        rows = tl.arange(0, GROUP_PAD)
        hmask = rows < GROUP
        heads = g * GROUP + rows
        d = tl.arange(0, HD)
        q = tl.load(q_ptr + r * sq_r + heads[:, None] * sq_h + d[None, :],
                    mask=hmask[:, None], other=0.0)
        start = s * split_len
        end = tl.minimum(start + split_len, L)
        m_i = tl.full([GROUP_PAD], float("-inf"), tl.float32)
        l_i = tl.zeros([GROUP_PAD], tl.float32)
        acc = tl.zeros([GROUP_PAD, HD], tl.float32)
        kb = k_ptr + r * sk_r + g * sk_h
        vb = v_ptr + r * sv_r + g * sv_h
        for n0 in range(start, end, BN):
            offs = n0 + tl.arange(0, BN)
            nmask = offs < end
            kt = tl.load(kb + offs[None, :] * sk_l + d[:, None], mask=nmask[None, :], other=0.0)
            qk = tl.dot(q, kt) * scale                        # (GROUP_PAD, BN) float32
            qk = tl.where(nmask[None, :], qk, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(qk, 1))
            alpha = tl.exp(m_i - m_new)
            p = tl.exp(qk - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            vv = tl.load(vb + offs[:, None] * sv_l + d[None, :], mask=nmask[:, None], other=0.0)
            acc = acc * alpha[:, None] + tl.dot(p.to(vv.dtype), vv)
            m_i = m_new
        # an empty split (start >= L) leaves l_i = 0 and m_i = -inf: weight 0 in the merge
        safe = tl.where(l_i > 0, l_i, 1.0)
        o = acc / safe[:, None]
        lse = tl.where(l_i > 0, m_i + tl.log(safe), float("-inf"))
        tl.store(o_ptr + r * so_r + heads[:, None] * so_h + s * so_s + d[None, :], o,
                 mask=hmask[:, None])
        tl.store(lse_ptr + r * sl_r + heads * sl_h + s, lse, mask=hmask)

    @triton.jit
    def _merge_k(o_ptr, lse_ptr, out_ptr, so_r, so_h, so_s, sl_r, sl_h, su_r, su_h, S,
                 HD: tl.constexpr, SP: tl.constexpr):
        r = tl.program_id(0).to(tl.int64)
        h = tl.program_id(1)
        sp = tl.arange(0, SP)
        smask = sp < S
        lse = tl.load(lse_ptr + r * sl_r + h * sl_h + sp, mask=smask, other=float("-inf"))
        mx = tl.max(lse, 0)
        w = tl.exp(lse - mx)
        w = tl.where(smask, w, 0.0)
        d = tl.arange(0, HD)
        o = tl.load(o_ptr + r * so_r + h * so_h + sp[:, None] * so_s + d[None, :],
                    mask=smask[:, None], other=0.0)
        res = tl.sum(o * w[:, None], 0) / tl.sum(w, 0)
        tl.store(out_ptr + r * su_r + h * su_h + d, res.to(out_ptr.dtype.element_ty))

    return _partial_k, _merge_k


def decode_attention(q, k, v, out, sms: int, splits: int | None = None) -> int:
    """Decode attention of one query token per request into ``out`` (module docstring).

    Args:
        q: ``(R, qh, hd)``; k, v: ``(R, kvh, L, hd)`` (the last dimension contiguous); out:
            ``(R, qh, hd)``, written. All on one CUDA device, q/k/v of one dtype.
        sms: SMs of the pool the call runs on (``num_kv_splits``).
        splits: force the number of KV splits (tests); default ``num_kv_splits``.

    Returns:
        The number of KV splits used.

    Raises:
        ValueError: shapes that do not match, ``qh`` not a multiple of ``kvh``, ``hd`` not a
            power of two in 16-256, a non-contiguous last dimension.
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
