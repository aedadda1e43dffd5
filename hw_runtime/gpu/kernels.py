"""Torch kernels of the GPU workload as a registry: one builder per op (docs/method.md §5-6).

``kernel_builder(kernel)`` returns the builder of a graph kernel's op; a builder takes the
``KernelContext`` (``kernelctx``) of one kernel of a ``TorchWorkload`` (its tensors, shapes and
helpers) and returns the kernel callable ``f(mu, l, sms=None, lane=0)`` (``KernelFn``), which
launches the kernel on the current torch stream for microbatch ``mu`` (0..m-1) on region
instance ``l`` (0..num_regions-1), issued on a pool of ``sms`` SMs (a count; None: the whole
GPU) from the stream of index ``lane`` (0..): the pool-sized decode attentions size their KV
split by ``sms``, the collectives and FlashInfer's workspaces are per ``lane``; every other
kernel ignores both. It writes only into preallocated tensors, so it can be captured in a CUDA
graph. Virtual collectives stand in for a TP/EP collective as ``--collectives`` says
(``hw_runtime.gpu.collectives``).
Needs torch only when a builder runs.
"""

from __future__ import annotations

import math
from typing import Any, Callable

from subgpu_jax.model.collective import COLLECTIVES, collective_mode

from hw_runtime.gpu import fused
from hw_runtime.gpu import moe_gemm
from hw_runtime.gpu.decode_attn import attention_backend
from hw_runtime.gpu.kernelctx import KernelContext, rotate_into

__all__ = ["KernelContext", "KernelFn", "KERNELS", "kernel_builder", "SWIGLU_ALPHA",
           "SWIGLU_LIMIT", "COLLECTIVES", "spin_of", "collective_kwargs", "link_kwargs"]

#: A kernel callable ``f(mu, l, sms=None, lane=0)`` (module docstring).
KernelFn = Callable[..., None]

#: GPT-OSS clamped SwiGLU constants (public reference implementation).
SWIGLU_ALPHA, SWIGLU_LIMIT = 1.702, 7.0


# ``COLLECTIVES`` (re-exported from ``subgpu_jax.model.collective``, whose ``COLLECTIVE_MODES``
# is the registry): how ``subgpu run`` executes a TP/EP collective on one GPU (``--collectives``):
# ``"sleep"`` copies the payload and then waits out the modelled link time in a one-thread timed
# wait (``TorchWorkload(spin=True)``, the default: the wait occupies no SMs, so whatever overlaps
# it looks free); ``"proxy"`` runs the engine collective's CTAs paced to the link time
# (``TorchWorkload(proxy=True)``); ``"none"`` copies the payload only, the control with zero
# link time.


def link_kwargs(hw: Any) -> dict:
    """``TorchWorkload``'s virtual-collective arguments of a GPU preset
    (``subgpu_jax.model.hardware.Hardware``): the floor ``comm_setup_us`` (µs), the link
    ``nvlink_Bps`` and the copy bandwidth ``hbm_copy_Bps`` (bytes/s), the constants the
    simulator charges a collective with, so that the emulated wait on a GPU lasts what the
    simulator assumes for that GPU (H200: 3 µs, 450 GB/s, 4,245 GB/s, ``TorchWorkload``'s
    defaults; a B200 run gets its own 900 GB/s NVLink 5)."""
    return {"comm_floor_us": float(hw.comm_setup_us), "link_Bps": float(hw.nvlink_Bps),
            "copy_Bps": float(hw.hbm_copy_Bps)}


def spin_of(collectives: str) -> bool:
    """``TorchWorkload``'s ``spin`` for a ``COLLECTIVES`` name.

    Raises:
        ValueError: an unknown name (one line naming ``--collectives`` and the allowed ones).
    """
    return collective_mode(collectives).spin


def collective_kwargs(collectives: str) -> dict:
    """``TorchWorkload``'s ``spin`` and ``proxy`` for a ``COLLECTIVES`` name.

    Raises:
        ValueError: an unknown name (one line naming ``--collectives`` and the allowed ones).
    """
    return collective_mode(collectives).workload_kwargs()


def _rmsnorm(c: KernelContext) -> KernelFn:
    """RMSNorm of the residual stream before attention."""
    W, nW, ACT, p, resid_in = c.W, c.nW, c.ACT, c.p, c.resid_in
    norm_into = c.norm_into

    def f(mu, l, sms=None, lane=0):
        a = ACT[mu]
        norm_into(a[p + "xn"], a[resid_in], W[l % nW][p + "attn_norm.w"])
    return f


def _linear(c: KernelContext, src: str, weight: str, dst: str) -> KernelFn:
    """``dst <- src @ W[weight.w] (+ W[weight.b] where the layer has a bias)``: one GEMM (names
    relative to the layer's prefix)."""
    t, W, nW, ACT, p = c.t, c.W, c.nW, c.ACT, c.p
    src, dst, wn, bn = p + src, p + dst, p + weight + ".w", p + weight + ".b"

    def f(mu, l, sms=None, lane=0):
        a, w = ACT[mu], W[l % nW]
        if bn in w:
            t.addmm(w[bn], a[src], w[wn], out=a[dst])
        else:
            t.mm(a[src], w[wn], out=a[dst])
    return f


def _qkv(c: KernelContext) -> KernelFn:
    """QKV projection (GEMM, optional bias)."""
    return _linear(c, "xn", "qkv", "qkv")


def _rope_kv(c: KernelContext) -> KernelFn:
    """RoPE on q and k (optional q/k norm) and the KV-cache append."""
    F_, Rm, hd, qh, kvh = c.F_, c.Rm, c.hd, c.qh, c.kvh
    eps, W, nW, KV, nKV = c.eps, c.W, c.nW, c.KV, c.nKV
    ACT, p, kv_pos, rope_into = c.ACT, c.p, c.kv_pos, c.rope_into
    wl = c.wl
    one_kernel = c.fused   # q/k norm (Qwen3) included: fused.rope_kv_ normalises per head

    def f(mu, l, sms=None, lane=0):
        a, w, kv = ACT[mu], W[l % nW], KV[l % nKV]
        if one_kernel:
            sl = slice(mu * Rm, (mu + 1) * Rm)
            fused.rope_kv_(a[p + "qkv"], a[p + "q"], kv[p + "k_cache"][sl, :, kv_pos, :],
                           kv[p + "v_cache"][sl, :, kv_pos, :], wl.consts.rope_cos,
                           wl.consts.rope_sin, qh, kvh, hd, w.get(p + "q_norm.w"),
                           w.get(p + "k_norm.w"), eps)
            return
        x = a[p + "qkv"].view(Rm, qh + 2 * kvh, hd)
        q, k, v = x[:, :qh], x[:, qh:qh + kvh], x[:, qh + kvh:]
        if p + "q_norm.w" in w:
            q = F_.rms_norm(q, (hd,), w[p + "q_norm.w"], eps)
            k = F_.rms_norm(k, (hd,), w[p + "k_norm.w"], eps)
        sl = slice(mu * Rm, (mu + 1) * Rm)
        rope_into(a[p + "q"], q)
        rope_into(kv[p + "k_cache"][sl, :, kv_pos, :], k)
        kv[p + "v_cache"][sl, :, kv_pos, :].copy_(v)
    return f


def _attn(c: KernelContext) -> KernelFn:
    """Decode attention (FMHA; GQA when fewer KV heads), optional sink scale: the workload's
    ``decode_attn`` backend (``AttentionBackend.gqa``)."""
    Rm, hd, qh = c.Rm, c.hd, c.qh
    W, nW, KV, nKV = c.W, c.nW, c.KV, c.nKV
    ACT, p = c.ACT, c.p

    attend, pool = attention_backend(c.attention).gqa(c), c.pool

    def f(mu, l, sms=None, lane=0):
        a, w, kv = ACT[mu], W[l % nW], KV[l % nKV]
        sl = slice(mu * Rm, (mu + 1) * Rm)
        kk, vv = kv[p + "k_cache"][sl], kv[p + "v_cache"][sl]
        sink = w[p + "sink_scale"] if p + "sink_scale" in w else None
        attend(a[p + "q"].view(Rm, qh, 1, hd), kk, vv, a[p + "attn_out"].view(Rm, qh, 1, hd),
               sink, pool(sms), lane)
    return f


def _o_proj(c: KernelContext) -> KernelFn:
    """Attention output projection (GEMM, optional bias)."""
    return _linear(c, "attn_out", "o", "o_part")


def _out_residual(c: KernelContext) -> KernelFn:
    """Attention all-reduce (virtual: a copy of the payload) + residual add + MLP norm."""
    t, W, nW, ACT, p = c.t, c.W, c.nW, c.ACT, c.p
    resid_in, add_norm_into, comm, spin_end = c.resid_in, c.add_norm_into, c.comm, c.spin_end

    def f(mu, l, sms=None, lane=0):
        a, w = ACT[mu], W[l % nW]
        comm(a, a[p + "o_part"], lane)
        add_norm_into(a[p + "h"], a[p + "hn"], a[p + "o_part"], a[resid_in], w[p + "mlp_norm.w"])
        spin_end()
    return f


def _router(c: KernelContext) -> KernelFn:
    """MoE router GEMM (optional bias)."""
    t, s, W, nW, ACT = c.t, c.s, c.W, c.nW, c.ACT
    p = c.p
    Tr = s.Tr

    def f(mu, l, sms=None, lane=0):
        a, w = ACT[mu], W[l % nW]
        z = t.mm(a[p + "hn"][:Tr], w[p + "router.w"])
        if p + "router.b" in w:
            t.add(z, w[p + "router.b"], out=a[p + "logits"])
        else:
            a[p + "logits"].copy_(z)
    return f


def _topk(c: KernelContext) -> KernelFn:
    """Top-k expert selection and softmax of the selected logits."""
    t, s, ACT, p = c.t, c.s, c.ACT, c.p
    k_ = s.k

    def f(mu, l, sms=None, lane=0):
        a = ACT[mu]
        t.topk(a[p + "logits"], k_, dim=-1, out=(a[p + "topk_w"], a[p + "topk_i"]))
        a[p + "topk_w"].copy_(t.softmax(a[p + "topk_w"], dim=-1))
    return f


def _dispatch(c: KernelContext) -> KernelFn:
    """MoE dispatch all-to-all (virtual) and the gather into expert order."""
    t, s, H, ACT, p = c.t, c.s, c.H, c.ACT, c.p
    comm, spin_end, wl = c.comm, c.spin_end, c.wl
    Tr = s.Tr

    grouped = wl.moe_gemm == "triton"

    def f(mu, l, sms=None, lane=0):
        a = ACT[mu]
        src = a[p + "hn"][:Tr]
        comm(a, src, lane)
        if not grouped:   # the grouped expert GEMM reads the routed rows itself
            t.index_select(src, 0, wl.consts.disp_idx, out=a[p + "x_exp"].view(-1, H))
        spin_end()
    return f


def _first(x, n: int):
    """The first ``n`` experts of a per-expert tensor (None stays None): the experts the
    routing hits, matching the weights' ``[:n_hit]``."""
    return None if x is None else x[:n]


def _expert_up(c: KernelContext) -> KernelFn:
    """Expert up-projection (batched GEMM) with SwiGLU (clamped for GPT-OSS)."""
    t, F_, s, arch, W = c.t, c.F_, c.s, c.arch, c.W
    nW, ACT, p = c.nW, c.ACT, c.p
    nh, F = s.n_hit, s.F
    gptoss = arch.family == "gpt_oss"
    one_kernel = c.fused and all(ACT[mu][p + nm].is_contiguous() for mu in range(len(ACT))
                                 for nm in ("gu_exp", "act_exp"))

    rt = c.wl.consts.routing
    Tr = s.Tr

    def f(mu, l, sms=None, lane=0):
        a, w = ACT[mu], W[l % nW]
        wu = w[p + "experts_up.w"][:nh]
        if rt is not None:   # one grouped launch: gather, gate/up GEMM, bias, activation
            act = a[p + "act_exp"]
            # (GPT-OSS's gate/up halves were de-interleaved at allocation)
            moe_gemm.expert_up_act(a[p + "hn"][:Tr], rt, wu, act.view(-1, act.shape[-1]),
                                   bias=_first(w.get(p + "experts_up.b"), nh), oss=gptoss,
                                   alpha=SWIGLU_ALPHA, limit=SWIGLU_LIMIT)
            return
        gu = a[p + "gu_exp"]
        if p + "experts_up.b" in w:
            t.baddbmm(w[p + "experts_up.b"][:nh], a[p + "x_exp"], wu, out=gu)
        else:
            t.bmm(a[p + "x_exp"], wu, out=gu)
        if one_kernel:
            rows = gu.shape[0] * gu.shape[1]
            out = a[p + "act_exp"].view(rows, -1)
            if gptoss:
                fused.swiglu_oss_(out, gu.view(rows, -1), SWIGLU_ALPHA, SWIGLU_LIMIT)
            else:
                fused.silu_mul_(out, gu.view(rows, -1), F)
            return
        if gptoss:  # clamped SwiGLU, gate/up interleaved
            g = gu[..., ::2].clamp(max=SWIGLU_LIMIT)
            u = gu[..., 1::2].clamp(-SWIGLU_LIMIT, SWIGLU_LIMIT)
            glu = g * t.sigmoid(g * SWIGLU_ALPHA)
            t.mul(u + 1.0, glu, out=a[p + "act_exp"])
        else:
            t.mul(F_.silu(gu[..., :F]), gu[..., F:], out=a[p + "act_exp"])
    return f


def _expert_down(c: KernelContext) -> KernelFn:
    """Expert down-projection (batched GEMM)."""
    t, s, W, nW, ACT = c.t, c.s, c.W, c.nW, c.ACT
    p = c.p
    nh = s.n_hit

    rt = c.wl.consts.routing

    def f(mu, l, sms=None, lane=0):
        a, w = ACT[mu], W[l % nW]
        wd = w[p + "experts_down.w"][:nh]
        if rt is not None:   # one grouped launch over the routed slots
            act, y = a[p + "act_exp"], a[p + "y_exp"]
            moe_gemm.expert_down(act.view(-1, act.shape[-1]), rt, wd, y.view(-1, y.shape[-1]),
                                 bias=_first(w.get(p + "experts_down.b"), nh))
            return
        if p + "experts_down.b" in w:
            t.baddbmm(w[p + "experts_down.b"][:nh], a[p + "act_exp"], wd,
                      out=a[p + "y_exp"])
        else:
            t.bmm(a[p + "act_exp"], wd, out=a[p + "y_exp"])
    return f


def _combine(c: KernelContext, shared: bool = False) -> KernelFn:
    """MoE combine all-to-all (virtual) + weighted sum + residual:
    resid_out = h (+ shared_y with shared experts) + sum_k w_k * y_k."""
    t, s, H, Rm, ACT = c.t, c.s, c.H, c.Rm, c.ACT
    p, resid_out, comm, spin_end, wl = c.p, c.resid_out, c.comm, c.spin_end, c.wl
    k_ = s.k
    one_kernel = c.fused and all(ACT[mu][nm].dim() == 2 and ACT[mu][nm].stride(-1) == 1
                                 for mu in range(len(ACT)) for nm in (p + "h", resid_out))

    def f(mu, l, sms=None, lane=0):
        a = ACT[mu]
        y = a[p + "y_exp"].view(-1, H)
        comm(a, y, lane)
        if one_kernel:   # gather, weights, residual (and shared experts) in one kernel
            fused.moe_combine_(a[resid_out], a[p + "h"], y, wl.consts.comb_idx,
                               a[p + "topk_w"], wl.consts.wsel_idx,
                               a[p + "shared_y"] if shared else None)
            spin_end()
            return
        g = t.index_select(y, 0, wl.consts.comb_idx).view(Rm, k_, H)
        wsel = t.index_select(a[p + "topk_w"], 0, wl.consts.wsel_idx).to(t.bfloat16)
        if shared:
            t.add(a[p + "h"], a[p + "shared_y"], out=a[resid_out])
            a[resid_out].view(Rm, 1, H).baddbmm_(wsel.view(Rm, 1, k_), g)
        else:
            t.baddbmm(a[p + "h"].view(Rm, 1, H), wsel.view(Rm, 1, k_), g,
                      out=a[resid_out].view(Rm, 1, H))
        spin_end()
    return f


def _mlp_up(c: KernelContext) -> KernelFn:
    """Dense MLP up/gate projection with SiLU gating."""
    t, F_, s, W, nW = c.t, c.F_, c.s, c.W, c.nW
    ACT, p = c.ACT, c.p
    I = s.I
    one_kernel = c.fused

    def f(mu, l, sms=None, lane=0):
        a, w = ACT[mu], W[l % nW]
        t.mm(a[p + "hn"], w[p + "mlp_up.w"], out=a[p + "gu"])
        if one_kernel:
            fused.silu_mul_(a[p + "act"], a[p + "gu"], I)
            return
        t.mul(F_.silu(a[p + "gu"][:, :I]), a[p + "gu"][:, I:], out=a[p + "act"])
    return f


def _mlp_down(c: KernelContext) -> KernelFn:
    """Dense MLP down projection."""
    t, W, nW, ACT, p = c.t, c.W, c.nW, c.ACT, c.p

    def f(mu, l, sms=None, lane=0):
        a, w = ACT[mu], W[l % nW]
        t.mm(a[p + "act"], w[p + "mlp_down.w"], out=a[p + "y"])
    return f


def _dense_residual(c: KernelContext) -> KernelFn:
    """Dense MLP's all-reduce (virtual) + residual add."""
    t, ACT, p, resid_out, comm = c.t, c.ACT, c.p, c.resid_out, c.comm
    spin_end = c.spin_end

    def f(mu, l, sms=None, lane=0):
        a = ACT[mu]
        comm(a, a[p + "y"], lane)
        t.add(a[p + "y"], a[p + "h"], out=a[resid_out])
        spin_end()
    return f


def _rope_r_into(c: KernelContext, dst, x) -> None:
    """dst <- rotary embedding (half-split layout) of the last axis of x, of width
    qk_rope_head_dim (multi-head latent attention), at the decode position."""
    rotate_into(c.t, dst, x, c.wl.consts.rope_cos_r, c.wl.consts.rope_sin_r)


def _mla_down(c: KernelContext) -> KernelFn:
    """MLA down-projection: latent [Rm, ql + c + r] = xn @ W_down (the query latent, the KV
    latent and the shared rope key, one GEMM)."""
    t, W, nW, ACT, p = c.t, c.W, c.nW, c.ACT, c.p

    def f(mu, l, sms=None, lane=0):
        a = ACT[mu]
        t.mm(a[p + "xn"], W[l % nW][p + "mla_down.w"], out=a[p + "latent"])
    return f


def _mla_q_up(c: KernelContext) -> KernelFn:
    """MLA query up-projection and absorption: cq = RMSNorm(latent[:, :ql]) (xn when q_lora is
    0), q = cq @ W_UQ [Rm, qh, nope + r], then the nope part absorbed into latent space per head,
    q_nope @ W_UK [qh, nope, c] -> ``q_lat[..., :c]``; ``q_lat[..., c:]`` = the (not yet
    rotated) rope part."""
    t, F_, s, W, nW, ACT, p, eps = c.t, c.F_, c.s, c.W, c.nW, c.ACT, c.p, c.eps
    Rm, qh, ql, nope, r, cl = s.Rm, s.qh, s.ql, s.nope, s.r, s.c

    def f(mu, l, sms=None, lane=0):
        a, w = ACT[mu], W[l % nW]
        cq = F_.rms_norm(a[p + "latent"][:, :ql], (ql,), w[p + "q_a_norm.w"], eps) if ql \
            else a[p + "xn"]
        t.mm(cq, w[p + "q_up.w"], out=a[p + "q_full"])
        q = a[p + "q_full"].view(Rm, qh, nope + r)
        t.bmm(q[:, :, :nope].transpose(0, 1), w[p + "uk.w"], out=a[p + "q_nl"])
        a[p + "q_lat"][:, :, :cl].copy_(a[p + "q_nl"].transpose(0, 1))
        a[p + "q_lat"][:, :, cl:].copy_(q[:, :, nope:])
    return f


def _mla_rope_kv(c: KernelContext) -> KernelFn:
    """MLA RoPE and compressed-KV append: the cache slot of the new token gets
    [RMSNorm(kv latent), RoPE(k_rope)] (c + r elements, one head shared by all query heads);
    q = [q_lat[..., :c], RoPE(q_lat[..., c:])]."""
    F_, s, W, nW, KV, nKV = c.F_, c.s, c.W, c.nW, c.KV, c.nKV
    ACT, p, kv_pos, eps = c.ACT, c.p, c.kv_pos, c.eps
    Rm, ql, cl = s.Rm, s.ql, s.c

    def f(mu, l, sms=None, lane=0):
        a, w, kv = ACT[mu], W[l % nW], KV[l % nKV]
        lat = a[p + "latent"]
        dst = kv[p + "ckv_cache"][mu * Rm:(mu + 1) * Rm, 0, kv_pos, :]
        dst[:, :cl].copy_(F_.rms_norm(lat[:, ql:ql + cl], (cl,), w[p + "kv_a_norm.w"], eps))
        _rope_r_into(c, dst[:, cl:], lat[:, ql + cl:])
        q, qsrc = a[p + "q"], a[p + "q_lat"]
        q[:, :, :cl].copy_(qsrc[:, :, :cl])
        _rope_r_into(c, q[:, :, cl:], qsrc[:, :, cl:])
    return f


def _mla_attn(c: KernelContext) -> KernelFn:
    """Absorbed MLA decode attention: the qh query heads of one request attend as qh queries of
    ONE head over its compressed cache [L, c + r] (keys: latent + rope key; values: the
    latent, the first c elements), softmax scale 1/sqrt(nope + r) (the head's q.k width);
    output ``attn_lat`` [Rm, qh, c] (still in latent space). The workload's ``decode_attn``
    backend (``AttentionBackend.mla``: SDPA, or Triton's ``mla_decode_attention`` sized for
    the pool)."""
    s, KV, nKV, ACT, p = c.s, c.KV, c.nKV, c.ACT, c.p
    Rm = s.Rm
    scale = 1.0 / math.sqrt(s.nope + s.r)

    attend, pool = attention_backend(c.attention, mla=True).mla(c, scale), c.pool

    def f(mu, l, sms=None, lane=0):
        a, kv = ACT[mu], KV[l % nKV]
        cache = kv[p + "ckv_cache"][mu * Rm:(mu + 1) * Rm]  # [Rm, 1, L, c + r]
        attend(a[p + "q"], cache, a[p + "attn_lat"], pool(sms), lane)
    return f


def _mla_v_up(c: KernelContext) -> KernelFn:
    """MLA value up-projection after attention, per head: attn_lat [qh, Rm, c] @ W_UV
    [qh, c, v] -> ``attn_out`` [Rm, qh * v]."""
    t, s, W, nW, ACT, p = c.t, c.s, c.W, c.nW, c.ACT, c.p
    Rm, qh, v = s.Rm, s.qh, s.v

    def f(mu, l, sms=None, lane=0):
        a = ACT[mu]
        t.bmm(a[p + "attn_lat"].transpose(0, 1), W[l % nW][p + "uv.w"], out=a[p + "o_heads"])
        a[p + "attn_out"].view(Rm, qh, v).copy_(a[p + "o_heads"].transpose(0, 1))
    return f


def _topk_grouped(c: KernelContext) -> KernelFn:
    """Group-limited routing (DeepSeek-V3): sigmoid scores, + the correction bias for the
    choice only; groups ranked by the sum of their two best scores, the top ``topk_group``
    groups eligible; top-k experts among them; weights = their sigmoid scores normalised to
    sum 1 (the published ``routed_scaling_factor`` is left out: a constant factor)."""
    t, s, W, nW, ACT, p, arch = c.t, c.s, c.W, c.nW, c.ACT, c.p, c.arch
    Tr, E, k_, ng, kg = s.Tr, s.E, s.k, arch.n_group, arch.topk_group
    per = E // ng

    def f(mu, l, sms=None, lane=0):
        a, w = ACT[mu], W[l % nW]
        sc = t.sigmoid(a[p + "logits"])
        sel = sc + w[p + "router.corr"]
        gs = sel.view(Tr, ng, per).topk(min(2, per), dim=-1)[0].sum(-1)
        keep = t.zeros_like(gs).scatter_(1, gs.topk(kg, dim=-1)[1], 1.0)
        sel = sel.masked_fill(keep.repeat_interleave(per, dim=1) == 0, float("-inf"))
        idx = sel.topk(k_, dim=-1)[1]
        wts = sc.gather(1, idx)
        a[p + "topk_i"].copy_(idx)
        t.div(wts, wts.sum(-1, keepdim=True), out=a[p + "topk_w"])
    return f


def _shared_up(c: KernelContext) -> KernelFn:
    """Shared experts' up/gate projection (this GPU's 1/t share of n_shared * F) with SiLU
    gating: hn @ W [h, 2 Fs] -> ``shared_act`` [Rm, Fs]."""
    t, F_, W, nW, ACT, p, Fs = c.t, c.F_, c.W, c.nW, c.ACT, c.p, c.s.Fs

    def f(mu, l, sms=None, lane=0):
        a = ACT[mu]
        gu = a[p + "shared_gu"]
        t.mm(a[p + "hn"], W[l % nW][p + "shared_up.w"], out=gu)
        t.mul(F_.silu(gu[:, :Fs]), gu[:, Fs:], out=a[p + "shared_act"])
    return f


def _shared_down(c: KernelContext) -> KernelFn:
    """Shared experts' down projection -> ``shared_y`` [Rm, h] (reduced with the combine)."""
    t, W, nW, ACT, p = c.t, c.W, c.nW, c.ACT, c.p

    def f(mu, l, sms=None, lane=0):
        a = ACT[mu]
        t.mm(a[p + "shared_act"], W[l % nW][p + "shared_down.w"], out=a[p + "shared_y"])
    return f


#: op (or ``"out_residual"`` / ``"dense_residual"`` for the collectives) -> builder.
KERNELS: dict[str, Callable[[KernelContext], KernelFn]] = {
    "rmsnorm": _rmsnorm, "qkv": _qkv, "rope_kv": _rope_kv, "attn": _attn, "o_proj": _o_proj,
    "out_residual": _out_residual, "router": _router, "topk": _topk, "dispatch": _dispatch,
    "expert_up": _expert_up, "expert_down": _expert_down, "combine": _combine,
    "mlp_up": _mlp_up, "mlp_down": _mlp_down, "dense_residual": _dense_residual,
    "mla_down": _mla_down, "mla_q_up": _mla_q_up, "mla_rope_kv": _mla_rope_kv,
    "mla_attn": _mla_attn, "mla_v_up": _mla_v_up, "topk_grouped": _topk_grouped,
    "shared_up": _shared_up, "shared_down": _shared_down,
    "combine_shared": lambda c: _combine(c, shared=True),
}


def _key(kern: Any, arch: Any = None) -> str:
    names = {nm for nm, _ in kern.act_reads + kern.act_writes}
    pre = kern.name.rsplit(".", 1)[0] + "." if "." in kern.name else ""
    if kern.op == "rope_kv" and pre + "latent" in names:
        return "mla_rope_kv"
    if kern.op == "attn" and pre + "attn_lat" in names:
        return "mla_attn"
    if kern.name.endswith((".shared_up", ".shared_down")):
        return kern.name.rsplit(".", 1)[1]
    if kern.op == "combine" and pre + "shared_y" in names:
        return "combine_shared"
    if kern.op == "topk" and arch is not None and arch.n_group:
        return "topk_grouped"
    if kern.op in ("allreduce", "residual_norm") and kern.category == "out_residual":
        return "out_residual"
    if kern.op in ("allreduce", "residual"):
        return "dense_residual"
    return kern.op


def kernel_builder(kern: Any, arch: Any = None) -> Callable[[KernelContext], KernelFn]:
    """The builder of a graph kernel's op (``KERNELS``); ``arch`` (the graph's ``ModelArch``)
    picks variants the kernel alone does not name (grouped routing).

    Raises:
        ValueError: an op the workload does not implement.
    """
    builder = None if kern.op in ("out_residual", "dense_residual") else \
        KERNELS.get(_key(kern, arch))
    if builder is None:
        raise ValueError(f"TorchWorkload: kernel {kern.name} has op {kern.op!r}, which the "
                         "workload does not implement")
    return builder
