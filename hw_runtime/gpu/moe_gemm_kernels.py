"""The Triton kernels of ``hw_runtime.gpu.moe_gemm`` (imported only when a kernel runs: CPU
machines never need Triton). ``triton.language`` is imported at module level, where every Triton
version's JIT resolves the names a kernel uses.

Both kernels run one program per (row block, output-column tile). A row block belongs to one
expert: ``blk_e[b]`` its expert, ``blk_r0[b]`` its first slot row, ``blk_n[b]`` its valid rows
(at most ``BM``); rows past ``blk_n[b]`` are masked (never loaded, never stored).

``up_act_k``: gathers the block's token rows of ``x`` through ``src`` (the slot -> token map:
the dispatch's gather is fused into the A loads), multiplies them by the expert's gate and up
columns (two accumulators, float32), applies the bias, the fp8 per-column scale and the
activation, and stores ``act`` rows in slot order. Gate column ``j`` is column ``j * G_STEP``
of the packed weight and up column ``j * G_STEP + u_off`` (``G_STEP = 1, u_off = F``: gate then
up halves; ``G_STEP = 2, u_off = 1``: GPT-OSS's interleaved layout).

With fp8 weights the weight tiles are widened to bf16 before the MMA, or, with a static
activation scale (``A_FP8``, ``a_inv = 1 / a_scale``), the activation tiles are quantised to the
weights' fp8 on load and the MMA runs in fp8 (float32 accumulation), both scales applied in the
epilogue (vLLM's static fp8 scheme).

``down_k``: the expert's down projection of the block's ``act`` rows (contiguous slot rows),
bias and fp8 scale, stored as ``y`` rows in slot order.
"""

import triton
import triton.language as tl

__all__ = ["up_act_k", "down_k"]


@triton.jit
def up_act_k(x_ptr, src_ptr, w_ptr, b_ptr, sc_ptr, out_ptr, blk_e, blk_r0, blk_n,
             K, F, sx, sw_e, sw_k, sb_e, ssc_e, so, u_off, alpha, limit, a_inv,
             G_STEP: tl.constexpr, OSS: tl.constexpr, HAS_BIAS: tl.constexpr,
             FP8: tl.constexpr, A_FP8: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
             BK: tl.constexpr):
    b = tl.program_id(0)
    pn = tl.program_id(1)
    e = tl.load(blk_e + b).to(tl.int64)
    r0 = tl.load(blk_r0 + b).to(tl.int64)
    nr = tl.load(blk_n + b)
    rows = tl.arange(0, BM)
    rmask = rows < nr
    src = tl.load(src_ptr + r0 + rows, mask=rmask, other=0).to(tl.int64)
    cols = pn * BN + tl.arange(0, BN)
    cmask = cols < F
    gcol = cols * G_STEP
    ucol = cols * G_STEP + u_off
    kk = tl.arange(0, BK)
    a_ptrs = x_ptr + src[:, None] * sx + kk[None, :]
    wb = w_ptr + e * sw_e
    g_ptrs = wb + kk[:, None] * sw_k + gcol[None, :]
    u_ptrs = wb + kk[:, None] * sw_k + ucol[None, :]
    accg = tl.zeros([BM, BN], dtype=tl.float32)
    accu = tl.zeros([BM, BN], dtype=tl.float32)
    for k0 in range(0, K, BK):
        kmask = (k0 + kk) < K
        a = tl.load(a_ptrs, mask=rmask[:, None] & kmask[None, :], other=0.0)
        g = tl.load(g_ptrs, mask=kmask[:, None] & cmask[None, :], other=0.0)
        u = tl.load(u_ptrs, mask=kmask[:, None] & cmask[None, :], other=0.0)
        if A_FP8:    # static activation scale: fp8 x fp8 MMA
            a = tl.minimum(tl.maximum(a.to(tl.float32) * a_inv, -448.0), 448.0).to(g.dtype)
        elif FP8:    # weights widened to the activations' bf16
            g = g.to(tl.bfloat16)
            u = u.to(tl.bfloat16)
        accg = tl.dot(a, g, accg)
        accu = tl.dot(a, u, accu)
        a_ptrs += BK
        g_ptrs += BK * sw_k
        u_ptrs += BK * sw_k
    if FP8:
        accg = accg * tl.load(sc_ptr + e * ssc_e + gcol, mask=cmask, other=0.0)[None, :]
        accu = accu * tl.load(sc_ptr + e * ssc_e + ucol, mask=cmask, other=0.0)[None, :]
    if A_FP8:
        accg = accg / a_inv
        accu = accu / a_inv
    if HAS_BIAS:
        accg += tl.load(b_ptr + e * sb_e + gcol, mask=cmask, other=0.0).to(tl.float32)[None, :]
        accu += tl.load(b_ptr + e * sb_e + ucol, mask=cmask, other=0.0).to(tl.float32)[None, :]
    if OSS:   # GPT-OSS: clamped gate and up, glu = g * sigmoid(alpha * g), (u + 1) * glu
        g = tl.minimum(accg, limit)
        u = tl.minimum(tl.maximum(accu, -limit), limit)
        out = (u + 1.0) * (g * tl.sigmoid(g * alpha))
    else:     # SwiGLU: silu(g) * u
        out = accg * tl.sigmoid(accg) * accu
    optr = out_ptr + (r0 + rows)[:, None] * so + cols[None, :]
    tl.store(optr, out.to(out_ptr.dtype.element_ty), mask=rmask[:, None] & cmask[None, :])


@triton.jit
def down_k(a_ptr, w_ptr, b_ptr, sc_ptr, out_ptr, blk_e, blk_r0, blk_n,
           K, N, sa, sw_e, sw_k, sb_e, ssc_e, so, a_inv,
           HAS_BIAS: tl.constexpr, FP8: tl.constexpr, A_FP8: tl.constexpr,
           BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    b = tl.program_id(0)
    pn = tl.program_id(1)
    e = tl.load(blk_e + b).to(tl.int64)
    r0 = tl.load(blk_r0 + b).to(tl.int64)
    nr = tl.load(blk_n + b)
    rows = tl.arange(0, BM)
    rmask = rows < nr
    cols = pn * BN + tl.arange(0, BN)
    cmask = cols < N
    kk = tl.arange(0, BK)
    a_ptrs = a_ptr + (r0 + rows)[:, None] * sa + kk[None, :]
    w_ptrs = w_ptr + e * sw_e + kk[:, None] * sw_k + cols[None, :]
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    for k0 in range(0, K, BK):
        kmask = (k0 + kk) < K
        a = tl.load(a_ptrs, mask=rmask[:, None] & kmask[None, :], other=0.0)
        w = tl.load(w_ptrs, mask=kmask[:, None] & cmask[None, :], other=0.0)
        if A_FP8:
            a = tl.minimum(tl.maximum(a.to(tl.float32) * a_inv, -448.0), 448.0).to(w.dtype)
        elif FP8:
            w = w.to(tl.bfloat16)
        acc = tl.dot(a, w, acc)
        a_ptrs += BK
        w_ptrs += BK * sw_k
    if FP8:
        acc = acc * tl.load(sc_ptr + e * ssc_e + cols, mask=cmask, other=0.0)[None, :]
    if A_FP8:
        acc = acc / a_inv
    if HAS_BIAS:
        acc += tl.load(b_ptr + e * sb_e + cols, mask=cmask, other=0.0).to(tl.float32)[None, :]
    optr = out_ptr + (r0 + rows)[:, None] * so + cols[None, :]
    tl.store(optr, acc.to(out_ptr.dtype.element_ty), mask=rmask[:, None] & cmask[None, :])
