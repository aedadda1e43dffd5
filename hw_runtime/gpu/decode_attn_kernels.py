"""The Triton kernels of ``hw_runtime.gpu.splitkv_attn`` (imported only when a kernel runs: CPU
machines never need Triton). They live in their own module with ``triton.language`` imported at
module level, where every Triton version's JIT resolves the names a kernel uses.

``partial_k``: grid (requests, KV heads, splits); one program computes, for every query head
of its KV head's group, the softmax-weighted sum of its split's positions (online softmax over
``BN``-position blocks, float32) and the split's log-sum-exp. The KV cache is contiguous per
request or paged (``PAGED``: positions through the request's block table, ``PAGE`` slots per
page; ``HAS_LENS``: each request's own history length), bf16 or fp8 (widened to the query's
dtype; the key scale is folded into ``scale``, the value scale multiplies the output). ``merge_k``: grid (requests,
query heads); the splits' partial sums weighted by ``exp(lse - max lse)``, normalised, rounded
once to the output's dtype. ``mla_partial_k``: the same split for multi-head latent attention
(DeepSeek-V3, absorbed): one latent cache per request shared by all query heads, keys = latent +
rope part, values = the latent part; its partials merge with ``merge_k``.
"""

import triton
import triton.language as tl

__all__ = ["partial_k", "merge_k", "mla_partial_k"]


@triton.jit
def partial_k(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, bt_ptr, len_ptr,
               sq_r, sq_h, sk_r, sk_h, sk_l, sv_r, sv_h, sv_l,
               so_r, so_h, so_s, sl_r, sl_h, sbt,
               L, split_len, scale, v_scale,
               GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HD: tl.constexpr,
               BN: tl.constexpr, PAGED: tl.constexpr, PAGE: tl.constexpr,
               HAS_LENS: tl.constexpr):
    r = tl.program_id(0).to(tl.int64)   # request and head offsets can pass 2**31
    g = tl.program_id(1).to(tl.int64)
    s = tl.program_id(2)
    rows = tl.arange(0, GROUP_PAD)
    hmask = rows < GROUP
    heads = g * GROUP + rows
    d = tl.arange(0, HD)
    q = tl.load(q_ptr + r * sq_r + heads[:, None] * sq_h + d[None, :],
                mask=hmask[:, None], other=0.0)
    Lr = L
    if HAS_LENS:                         # per-request history (paged caches)
        Lr = tl.load(len_ptr + r)
    start = s * split_len
    end = tl.minimum(start + split_len, Lr)
    m_i = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, HD], tl.float32)
    kb = k_ptr + g * sk_h
    vb = v_ptr + g * sv_h
    if not PAGED:
        kb += r * sk_r
        vb += r * sv_r
    for n0 in range(start, end, BN):
        offs = n0 + tl.arange(0, BN)
        nmask = offs < end
        if PAGED:    # position -> (page of the request's block table, slot in the page)
            page = tl.load(bt_ptr + r * sbt + offs // PAGE, mask=nmask, other=0).to(tl.int64)
            krow = page * sk_r + (offs % PAGE) * sk_l
            vrow = page * sv_r + (offs % PAGE) * sv_l
        else:
            krow = offs * sk_l
            vrow = offs * sv_l
        kt = tl.load(kb + krow[None, :] + d[:, None], mask=nmask[None, :], other=0.0)
        qk = tl.dot(q, kt.to(q.dtype)) * scale            # (GROUP_PAD, BN) float32
        qk = tl.where(nmask[None, :], qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(qk - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        vv = tl.load(vb + vrow[:, None] + d[None, :], mask=nmask[:, None], other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(q.dtype), vv.to(q.dtype))
        m_i = m_new
    # an empty split (start >= L) leaves l_i = 0 and m_i = -inf: weight 0 in the merge
    safe = tl.where(l_i > 0, l_i, 1.0)
    o = acc / safe[:, None] * v_scale
    lse = tl.where(l_i > 0, m_i + tl.log(safe), float("-inf"))
    tl.store(o_ptr + r * so_r + heads[:, None] * so_h + s * so_s + d[None, :], o,
             mask=hmask[:, None])
    tl.store(lse_ptr + r * sl_r + heads * sl_h + s, lse, mask=hmask)

@triton.jit
def merge_k(o_ptr, lse_ptr, out_ptr, so_r, so_h, so_s, sl_r, sl_h, su_r, su_h, S,
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


@triton.jit
def mla_partial_k(q_ptr, c_ptr, o_ptr, lse_ptr,
                  sq_r, sq_h, sc_r, sc_l, so_r, so_h, so_s, sl_r, sl_h,
                  QH, L, split_len, scale,
                  HB: tl.constexpr, C: tl.constexpr, RD: tl.constexpr, BN: tl.constexpr):
    """MLA (absorbed) split: grid (requests, head blocks, splits); ``HB`` query heads of one
    request over positions of its single latent cache ``[L, C + RD]``: scores from the latent
    (``C``) and rope (``RD``) parts, values = the latent part, loaded once per block."""
    r = tl.program_id(0).to(tl.int64)
    hb = tl.program_id(1)
    s = tl.program_id(2)
    heads = hb * HB + tl.arange(0, HB)
    hmask = heads < QH
    dc = tl.arange(0, C)
    dr = tl.arange(0, RD)
    qb = q_ptr + r * sq_r + heads[:, None] * sq_h
    qc = tl.load(qb + dc[None, :], mask=hmask[:, None], other=0.0)
    qr = tl.load(qb + C + dr[None, :], mask=hmask[:, None], other=0.0)
    start = s * split_len
    end = tl.minimum(start + split_len, L)
    m_i = tl.full([HB], float("-inf"), tl.float32)
    l_i = tl.zeros([HB], tl.float32)
    acc = tl.zeros([HB, C], tl.float32)
    cb = c_ptr + r * sc_r
    for n0 in range(start, end, BN):
        offs = n0 + tl.arange(0, BN)
        nmask = offs < end
        kc = tl.load(cb + offs[:, None] * sc_l + dc[None, :], mask=nmask[:, None], other=0.0)
        kr = tl.load(cb + offs[:, None] * sc_l + C + dr[None, :], mask=nmask[:, None],
                     other=0.0)
        qk = (tl.dot(qc, tl.trans(kc)) + tl.dot(qr, tl.trans(kr))) * scale
        qk = tl.where(nmask[None, :], qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(qk - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(kc.dtype), kc)
        m_i = m_new
    safe = tl.where(l_i > 0, l_i, 1.0)
    o = acc / safe[:, None]
    lse = tl.where(l_i > 0, m_i + tl.log(safe), float("-inf"))
    tl.store(o_ptr + r * so_r + heads[:, None] * so_h + s * so_s + dc[None, :], o,
             mask=hmask[:, None])
    tl.store(lse_ptr + r * sl_r + heads * sl_h + s, lse, mask=hmask)
