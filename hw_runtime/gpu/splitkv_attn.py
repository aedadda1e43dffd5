"""Split-KV decode attention in Triton (issue 23, item 2): one query token per request, GQA
without expanding the KV cache (bf16 or fp8, contiguous or paged), and multi-head latent
attention (DeepSeek-V3), the number of KV splits chosen from the batch and the SMs of the pool
the kernel runs on.

For GQA the runtime's default stays ``torch.nn.functional.scaled_dot_product_attention``, which
on the H200 picks a cuDNN kernel named ``sdpa_sm80_flash_fprop_wmma``: it streams the KV cache
at 1.02-1.07 of the copy bandwidth on the whole GPU and at 0.96-1.09 of a pool's on 32-96 SMs.
This kernel measured 1-12% slower on the whole GPU (two leases) and 1.2-1.6x slower on 32-64
SMs, FlashInfer's FA2 decode (``flashinfer_attn``) 1-3% and 1.1-1.2x slower; the pipelined
Llama-3.1-70B winner (1.099x with SDPA) measured 0.939x and 1.049x with them (docs/results.md,
"Kernel choices"). For MLA SDPA has no fused kernel (576-wide keys, 512-wide values) and ``mla_decode_attention`` is 1.9-3.5x
faster, so it is the default there. Serving engines run split-KV ("flash-decoding") kernels instead: the KV history
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
* fp8 KV caches (``FP8_KV``, per-tensor ``k_scale``/``v_scale`` as vLLM's fp8 cache): widened
  to the query's dtype in the kernel, the scales folded into the softmax scale and the output.
  ``paged_decode_attention``: the same over a paged cache (block table, per-request lengths).
* Arithmetic: scores, softmax and the accumulator in float32, probabilities rounded to the
  cache's dtype for the second product (as FlashAttention does), one rounding of the result.

The ``--attention triton`` backend (``decode_attn.TritonAttention``) launches these; the
``@triton.jit`` kernels are in ``decode_attn_kernels``. Needs torch and triton only when a
kernel runs; the split choice is pure Python (tested on the CPU).
"""

from __future__ import annotations

import math

from subgpu_jax.model.checks import bounded_int

from hw_runtime.gpu.kv_split import BLOCK_N, MAX_SPLITS, num_kv_splits

__all__ = ["decode_attention", "paged_decode_attention", "mla_decode_attention", "FP8_KV",
           "num_kv_splits", "BLOCK_N", "MAX_SPLITS", "MLA_MAX_SPLITS", "MLA_HEADS_PER_PROGRAM"]

#: MLA: splits per request at most 16 (the merge holds ``S x 512`` float32 per program).
MLA_MAX_SPLITS = 16
#: MLA: query heads per program (the accumulator is ``16 x 512`` float32; 16 is the smallest
#: MMA tile, and DeepSeek-V3 at TP8 has 128 / 8 = 16 local heads).
MLA_HEADS_PER_PROGRAM = 16


def _kernels():
    """``(partial_k, merge_k)`` (``decode_attn_kernels``, imported on first use)."""
    from hw_runtime.gpu import decode_attn_kernels as k

    return k.partial_k, k.merge_k


#: KV-cache dtypes the GQA kernels read besides the query's (widened to it in the kernel).
FP8_KV = ("float8_e4m3fn", "float8_e5m2")


def _check_common(name, q, k, v, out, splits, block_n, hd, kv_scales):
    """Shared input checks of the GQA entry points (ValueError naming the problem)."""
    import torch

    if hd < 16 or hd > 256 or hd & (hd - 1):
        raise ValueError(f"{name}: head dim must be a power of two in 16-256, got {hd}")
    if any(t.stride(-1) != 1 for t in (q, k, v, out)):
        raise ValueError(f"{name}: the last dimension of q, k, v and out must be contiguous")
    fp8 = str(k.dtype).replace("torch.", "") in FP8_KV
    if k.dtype != v.dtype or not (k.dtype == q.dtype or fp8) or q.dtype not in (
            torch.bfloat16, torch.float16):
        raise ValueError(f"{name}: q must be bf16/fp16 and k, v share q's dtype or one fp8 dtype "
                         f"({', '.join(FP8_KV)}); got {q.dtype}, {k.dtype}, {v.dtype}")
    for nm, x in zip(("k_scale", "v_scale"), kv_scales):
        if not (isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
                and x > 0):
            raise ValueError(f"{name}: {nm} must be a finite number > 0, got {x!r}")
    if len({t.device for t in (q, k, v, out)}) != 1 or q.device.type != "cuda":
        raise ValueError(f"{name}: q, k, v and out must be on one CUDA device")
    if splits is not None:
        bounded_int(splits, f"{name}: splits", 1, MAX_SPLITS)
    if block_n is None:
        block_n = BLOCK_N if hd <= 128 else 64
    if block_n not in (16, 32, 64, 128, 256):
        raise ValueError(f"{name}: block_n must be a power of two in 16-256, got {block_n!r}")
    return block_n


def _launch(q, k, v, out, kvh, L, sms, splits, block_n, waves, warps, stages, k_scale, v_scale,
            paged=None) -> int:
    """Both kernels of a GQA call (``paged``: ``(block_table, seq_lens, page)`` or None)."""
    import torch
    import triton

    R, qh, hd = q.shape
    S = splits if splits is not None else num_kv_splits(R * kvh, L, sms, waves, block_n)
    split_len = triton.cdiv(triton.cdiv(L, S), block_n) * block_n
    S = triton.cdiv(L, split_len)        # no split left without positions
    part = torch.empty((R, qh, S, hd), device=q.device, dtype=torch.float32)
    lse = torch.empty((R, qh, S), device=q.device, dtype=torch.float32)
    partial_k, merge_k = _kernels()
    bt, lens, page = paged if paged is not None else (q, q, 1)
    group = qh // kvh
    partial_k[(R, kvh, S)](
        q, k, v, part, lse, bt, lens,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        part.stride(0), part.stride(1), part.stride(2), lse.stride(0), lse.stride(1),
        bt.stride(0) if paged is not None else 0,
        L, split_len, float(k_scale) / math.sqrt(hd), float(v_scale),
        GROUP=group, GROUP_PAD=max(16, triton.next_power_of_2(group)), HD=hd, BN=block_n,
        PAGED=paged is not None, PAGE=page, HAS_LENS=paged is not None,
        num_warps=warps, num_stages=stages)
    merge_k[(R, qh)](part, lse, out, part.stride(0), part.stride(1), part.stride(2),
                     lse.stride(0), lse.stride(1), out.stride(0), out.stride(1), S,
                     HD=hd, SP=max(2, triton.next_power_of_2(S)))
    return S


def decode_attention(q, k, v, out, sms: int, splits: int | None = None,
                     block_n: int | None = None, waves: float = 2.0, warps: int = 4,
                     stages: int = 3, k_scale: float = 1.0, v_scale: float = 1.0) -> int:
    """Decode attention of one query token per request into ``out`` (module docstring).

    Args:
        q: ``(R, qh, hd)`` bf16/fp16; k, v: ``(R, kvh, L, hd)`` (the last dimension
            contiguous), q's dtype or fp8 (``FP8_KV``: dequantised as ``k * k_scale``, ``v *
            v_scale``, per-tensor scales as vLLM's fp8 KV cache); out: ``(R, qh, hd)``,
            written. All on one CUDA device.
        sms: SMs of the pool the call runs on (``num_kv_splits``).
        splits: force the number of KV splits (tests; 1..``MAX_SPLITS``); default
            ``num_kv_splits``. Splits are whole ``block_n``-position blocks, so fewer may be used.
        block_n, waves, warps, stages: positions per inner step (16-256, a power of two), the
            target waves of ``num_kv_splits``, Triton warps and pipeline stages. Default
            ``block_n``: ``BLOCK_N`` up to head dim 128, 64 above (three stages of 128 x 256
            keys and values need 268 KB of shared memory; the H200 has 227 KB per SM).
        k_scale, v_scale: fp8 dequantisation scales (> 0; 1 for bf16 caches).

    Returns:
        The number of KV splits used.

    Raises:
        ValueError: shapes that do not match, ``qh`` not a multiple of ``kvh``, ``hd`` not a
            power of two in 16-256, a non-contiguous last dimension, dtypes other than the
            above, tensors on different devices, ``splits`` outside 1..``MAX_SPLITS``.
    """
    if q.dim() != 3 or k.dim() != 4 or v.shape != k.shape or out.shape != q.shape:
        raise ValueError(f"decode_attention: q (R, qh, hd), k/v (R, kvh, L, hd), out like q; got "
                         f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}, "
                         f"out {tuple(out.shape)}")
    R, qh, hd = q.shape
    _, kvh, L, _ = k.shape
    if k.shape[0] != R or k.shape[3] != hd or qh % kvh:
        raise ValueError(f"decode_attention: q {tuple(q.shape)} and k {tuple(k.shape)} disagree "
                         f"(requests, head dim, or qh not a multiple of kvh)")
    block_n = _check_common("decode_attention", q, k, v, out, splits, block_n, hd,
                            (k_scale, v_scale))
    return _launch(q, k, v, out, kvh, L, sms, splits, block_n, waves, warps, stages, k_scale,
                   v_scale)


def paged_decode_attention(q, k_pages, v_pages, block_table, seq_lens, out, sms: int,
                           max_len: int | None = None, splits: int | None = None,
                           block_n: int | None = None, waves: float = 2.0, warps: int = 4,
                           stages: int = 3, k_scale: float = 1.0, v_scale: float = 1.0) -> int:
    """``decode_attention`` over a paged KV cache (vLLM's layout, one layer).

    Args:
        q, out: as ``decode_attention``. k_pages, v_pages: ``(pages, kvh, page, hd)``, q's
            dtype or fp8. block_table: int32 ``(R, max_pages)``: request ``r``'s position ``i``
            is slot ``i % page`` of page ``block_table[r, i // page]``. seq_lens: int32 ``(R,)``
            positions per request (1.. ``max_pages x page``).
        max_len: the longest ``seq_lens`` (sizes the splits; default ``max_pages x page``: a
            host value, so the call stays capturable in a CUDA graph).
        sms, splits, block_n, waves, warps, stages, k_scale, v_scale: as ``decode_attention``.

    Returns:
        The number of KV splits used.

    Raises:
        ValueError: as ``decode_attention``, and a block table or lengths of the wrong shape or
            dtype, ``max_len`` beyond the table.
    """
    import torch

    if q.dim() != 3 or k_pages.dim() != 4 or v_pages.shape != k_pages.shape \
            or out.shape != q.shape:
        raise ValueError(f"paged_decode_attention: q (R, qh, hd), k/v pages (P, kvh, page, hd), "
                         f"out like q; got {tuple(q.shape)}, {tuple(k_pages.shape)}, "
                         f"{tuple(v_pages.shape)}, {tuple(out.shape)}")
    R, qh, hd = q.shape
    _, kvh, page, _ = k_pages.shape
    if k_pages.shape[3] != hd or qh % kvh:
        raise ValueError(f"paged_decode_attention: q {tuple(q.shape)} and pages "
                         f"{tuple(k_pages.shape)} disagree (head dim, or qh not a multiple of "
                         f"kvh)")
    if block_table.dim() != 2 or block_table.shape[0] != R or block_table.dtype != torch.int32 \
            or tuple(seq_lens.shape) != (R,) or seq_lens.dtype != torch.int32:
        raise ValueError(f"paged_decode_attention: block_table must be int32 (R={R}, max_pages) "
                         f"and seq_lens int32 ({R},); got {tuple(block_table.shape)} "
                         f"{block_table.dtype}, {tuple(seq_lens.shape)} {seq_lens.dtype}")
    cap = block_table.shape[1] * page
    max_len = cap if max_len is None else max_len
    if isinstance(max_len, bool) or not isinstance(max_len, int) or not 1 <= max_len <= cap:
        raise ValueError(f"paged_decode_attention: max_len must be an integer in 1..{cap}, got "
                         f"{max_len!r}")
    block_n = _check_common("paged_decode_attention", q, k_pages, v_pages, out, splits,
                            block_n, hd, (k_scale, v_scale))
    return _launch(q, k_pages, v_pages, out, kvh, max_len, sms, splits, block_n, waves, warps,
                   stages, k_scale, v_scale, paged=(block_table, seq_lens, page))


def mla_decode_attention(q, cache, out, sms: int, scale: float, latent: int,
                         splits: int | None = None, block_n: int = 64, warps: int = 4,
                         stages: int = 2) -> int:
    """Absorbed multi-head latent attention decode (DeepSeek-V3): every query head of a request
    attends over the request's one compressed cache; split-KV like ``decode_attention``.

    Args:
        q: ``(R, qh, latent + rope)`` (the query already absorbed into latent space, then its
            rope part). cache: ``(R, L, latent + rope)`` (latent, then rope key). out: ``(R, qh,
            latent)``, written (values are the cache's latent part). All bf16 on one CUDA
            device, last dimension contiguous. latent: a power of two (512 for DeepSeek-V3);
            rope: a power of two >= 16 (64).
        sms: SMs of the pool (``num_kv_splits``, at most ``MLA_MAX_SPLITS``). scale: softmax
            scale (DeepSeek-V3: ``1 / sqrt(qk_nope_head_dim + qk_rope_head_dim)``).
        splits: force the splits (1..``MLA_MAX_SPLITS``). block_n, warps, stages: tiles (64, 4,
            2: the fastest of 12 on all four DeepSeek-V3 TP8 shapes of
            docs/results.md, "Kernel choices").

    Returns:
        The number of KV splits used.

    Raises:
        ValueError: shapes that do not match, a latent or rope width not a power of two, a
            non-contiguous last dimension, mixed dtypes or devices, ``splits`` out of range.
    """
    import torch
    import triton

    if q.dim() != 3 or cache.dim() != 3 or out.dim() != 3:
        raise ValueError(f"mla_decode_attention: q (R, qh, c + r), cache (R, L, c + r), out "
                         f"(R, qh, c); got {tuple(q.shape)}, {tuple(cache.shape)}, "
                         f"{tuple(out.shape)}")
    R, qh, W = q.shape
    L = cache.shape[1]
    rope = W - latent
    if (cache.shape[0] != R or cache.shape[2] != W or tuple(out.shape) != (R, qh, latent)
            or rope < 16 or rope & (rope - 1) or latent < 16 or latent & (latent - 1)):
        raise ValueError(f"mla_decode_attention: q {tuple(q.shape)}, cache {tuple(cache.shape)}, "
                         f"out {tuple(out.shape)} with latent {latent}: widths must match and "
                         f"latent and rope be powers of two >= 16")
    if any(t.stride(-1) != 1 for t in (q, cache, out)):
        raise ValueError("mla_decode_attention: the last dimension of q, cache and out must be "
                         "contiguous")
    if q.dtype != cache.dtype or len({t.device for t in (q, cache, out)}) != 1 \
            or q.device.type != "cuda":
        raise ValueError("mla_decode_attention: q and cache must share a dtype, all on one CUDA "
                         "device")
    if splits is not None:
        bounded_int(splits, "mla_decode_attention: splits", 1, MLA_MAX_SPLITS)
    HB = MLA_HEADS_PER_PROGRAM
    hbs = triton.cdiv(qh, HB)
    S = splits if splits is not None else num_kv_splits(R * hbs, L, sms, block_n=block_n,
                                                        max_splits=MLA_MAX_SPLITS)
    split_len = triton.cdiv(triton.cdiv(L, S), block_n) * block_n
    S = triton.cdiv(L, split_len)
    part = torch.empty((R, qh, S, latent), device=q.device, dtype=torch.float32)
    lse = torch.empty((R, qh, S), device=q.device, dtype=torch.float32)
    from hw_runtime.gpu import decode_attn_kernels as k

    k.mla_partial_k[(R, hbs, S)](
        q, cache, part, lse, q.stride(0), q.stride(1), cache.stride(0), cache.stride(1),
        part.stride(0), part.stride(1), part.stride(2), lse.stride(0), lse.stride(1),
        qh, L, split_len, float(scale), HB=HB, C=latent, RD=rope, BN=block_n,
        num_warps=warps, num_stages=stages)
    k.merge_k[(R, qh)](part, lse, out, part.stride(0), part.stride(1), part.stride(2),
                       lse.stride(0), lse.stride(1), out.stride(0), out.stride(1), S,
                       HD=latent, SP=max(2, triton.next_power_of_2(S)))
    return S
