"""Fused elementwise kernels of the GPU workload (Triton), for both the pipeline and temporal.

Decode is full of short elementwise chains: PyTorch runs the half-split rotary embedding of q and
k plus the KV-cache append as nine kernels, an RMSNorm as two (the norm, then the copy into its
buffer), the residual add + RMSNorm as three, SiLU gating as two. Each kernel is a few µs, so a
chain costs launches and, beside another stream's kernel on the same pool, waits behind it once
per kernel (docs/fidelity.md §2, docs/results.md "Validation on the H200"). Production decode engines fuse
them (vLLM's ``rotary_embedding`` and ``fused_add_rms_norm``, FlashInfer's ``apply_rope`` and
``fused_add_rmsnorm``); these Triton kernels do the same, one kernel per op:

- ``rmsnorm_(dst, x, w, eps)``: ``dst <- x * rsqrt(mean(x**2) + eps) * w`` per row;
- ``add_rmsnorm_(h, hn, a, b, w, eps)``: ``h <- a + b``; ``hn <- RMSNorm(h) * w``;
- ``rope_kv_(qkv, q, k_slot, v_slot, cos, sin, qh, kvh, hd)``: q and k rotated (half-split
  layout, one decode position) into ``q`` and the K-cache slot, v copied into the V-cache slot;
- ``silu_mul_(out, gu, inter)``: ``out <- silu(gu[:, :I]) * gu[:, I:]``;
- ``swiglu_oss_(out, gu, alpha, limit)``: GPT-OSS's clamped SwiGLU with gate and up interleaved
  (seven PyTorch kernels).

Arithmetic in float32, rounded once to bfloat16 (PyTorch's chains round after every kernel, so
the two differ by bfloat16 rounding: ``tests/hw_runtime`` compares them on the GPU).

``elementwise`` policies (``resolve``): ``"torch"`` the PyTorch chains; ``"triton"`` these
kernels (refused where Triton or CUDA is missing); ``"auto"`` Triton on a CUDA device when it
imports, else PyTorch (the resolved choice is what ``subgpu run`` prints and records).
Needs torch and triton only when a kernel runs.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace

from subgpu_jax.model.checks import choice

__all__ = ["ELEMENTWISE", "resolve", "resolve_triton_policy", "triton_available", "rmsnorm_", "add_rmsnorm_",
           "rope_kv_", "silu_mul_", "swiglu_oss_"]

#: The elementwise-kernel policies ``KernelSettings(elementwise=...)``
#: (``TorchWorkload(kernels=...)``) and ``--elementwise`` take.
ELEMENTWISE = ("auto", "triton", "torch")


@functools.lru_cache(maxsize=1)
def triton_available() -> bool:
    """True when ``import triton`` works (its kernels still need a CUDA device)."""
    try:
        import triton  # noqa: F401
        import triton.language  # noqa: F401
    except Exception:       # ImportError, or a broken install that fails on import
        return False
    return True


def resolve_triton_policy(option: str, policy: str, choices: tuple[str, ...], is_cuda: bool,
                          fallback: str, auto_triton: bool) -> str:
    """A kernel policy of the runtime (``choices``: ``"auto"``, ``"triton"`` and the PyTorch
    ``fallback``) resolved for a device: ``"triton"`` or ``fallback``; ``"auto"`` is Triton
    where it runs when ``auto_triton``, else the fallback.

    Raises:
        ValueError: (naming ``option``) an unknown policy, or ``"triton"`` without a CUDA
            device or without Triton.
    """
    flag = "--" + option.replace("_", "-")
    choice(policy, flag, choices)
    ok = is_cuda and triton_available()
    if policy == "triton" and not ok:
        why = "the device is not a CUDA GPU" if not is_cuda else "triton does not import"
        raise ValueError(f"{flag} triton needs Triton on a CUDA GPU, but {why}; "
                         f"use {fallback} or auto")
    if policy == "triton" or (policy == "auto" and auto_triton and ok):
        return "triton"
    return fallback


def resolve(policy: str, is_cuda: bool) -> str:
    """The elementwise kernels a workload uses: ``"triton"`` or ``"torch"`` (``"auto"``:
    Triton on a CUDA device where it imports).

    Args:
        policy: one of ``ELEMENTWISE``. is_cuda: the workload's device is a CUDA GPU.

    Raises:
        ValueError: an unknown policy, or ``"triton"`` without a CUDA device or without Triton.
    """
    return resolve_triton_policy("elementwise", policy, ELEMENTWISE, is_cuda, "torch", True)


@functools.lru_cache(maxsize=1)
def _kernels():
    """Compile-on-first-use Triton kernels (imported lazily: CPU machines never need them)."""
    import triton
    import triton.language as tl

    @triton.jit
    def _rmsnorm_k(x_ptr, r_ptr, w_ptr, h_ptr, y_ptr, sx, sr, sh, sy, n, eps,
                   ADD: tl.constexpr, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        m = cols < n
        x = tl.load(x_ptr + row * sx + cols, mask=m, other=0.0).to(tl.float32)
        if ADD:
            x += tl.load(r_ptr + row * sr + cols, mask=m, other=0.0).to(tl.float32)
            xb = x.to(tl.bfloat16)
            tl.store(h_ptr + row * sh + cols, xb, mask=m)
            x = xb.to(tl.float32)            # the norm reads the stored (rounded) sum
        var = tl.sum(x * x, axis=0) / n
        w = tl.load(w_ptr + cols, mask=m, other=0.0).to(tl.float32)
        y = x * tl.rsqrt(var + eps) * w
        tl.store(y_ptr + row * sy + cols, y.to(tl.bfloat16), mask=m)

    @triton.jit
    def _rope_kv_k(qkv_ptr, q_ptr, k_ptr, v_ptr, cos_ptr, sin_ptr, qn_ptr, kn_ptr, eps,
                   s_qkv, s_q, s_qh, s_k, s_kh, s_v, s_vh,
                   QH: tl.constexpr, KVH: tl.constexpr, H2: tl.constexpr,
                   BQ: tl.constexpr, BK: tl.constexpr, QKN: tl.constexpr):
        row = tl.program_id(0)
        d = tl.arange(0, H2)
        c = tl.load(cos_ptr + d).to(tl.float32)[None, :]
        s = tl.load(sin_ptr + d).to(tl.float32)[None, :]
        base = qkv_ptr + row * s_qkv
        hq = tl.arange(0, BQ)
        mq = (hq < QH)[:, None]
        src = base + hq[:, None] * (2 * H2) + d[None, :]
        x1 = tl.load(src, mask=mq, other=0.0).to(tl.float32)
        x2 = tl.load(src + H2, mask=mq, other=0.0).to(tl.float32)
        if QKN:  # per-head RMSNorm of the two halves, rounded to bfloat16 once as the chain
            r = tl.rsqrt((tl.sum(x1 * x1, axis=1) + tl.sum(x2 * x2, axis=1)) / (2 * H2) + eps)
            x1 = (x1 * r[:, None] * tl.load(qn_ptr + d).to(tl.float32)[None, :]
                  ).to(tl.bfloat16).to(tl.float32)
            x2 = (x2 * r[:, None] * tl.load(qn_ptr + H2 + d).to(tl.float32)[None, :]
                  ).to(tl.bfloat16).to(tl.float32)
        dst = q_ptr + row * s_q + hq[:, None] * s_qh + d[None, :]
        tl.store(dst, (x1 * c - x2 * s).to(tl.bfloat16), mask=mq)
        tl.store(dst + H2, (x2 * c + x1 * s).to(tl.bfloat16), mask=mq)
        hk = tl.arange(0, BK)
        mk = (hk < KVH)[:, None]
        src = base + (QH + hk[:, None]) * (2 * H2) + d[None, :]
        x1 = tl.load(src, mask=mk, other=0.0).to(tl.float32)
        x2 = tl.load(src + H2, mask=mk, other=0.0).to(tl.float32)
        if QKN:  # per-head RMSNorm of the two halves, rounded to bfloat16 once as the chain
            r = tl.rsqrt((tl.sum(x1 * x1, axis=1) + tl.sum(x2 * x2, axis=1)) / (2 * H2) + eps)
            x1 = (x1 * r[:, None] * tl.load(kn_ptr + d).to(tl.float32)[None, :]
                  ).to(tl.bfloat16).to(tl.float32)
            x2 = (x2 * r[:, None] * tl.load(kn_ptr + H2 + d).to(tl.float32)[None, :]
                  ).to(tl.bfloat16).to(tl.float32)
        dst = k_ptr + row * s_k + hk[:, None] * s_kh + d[None, :]
        tl.store(dst, (x1 * c - x2 * s).to(tl.bfloat16), mask=mk)
        tl.store(dst + H2, (x2 * c + x1 * s).to(tl.bfloat16), mask=mk)
        src = base + (QH + KVH + hk[:, None]) * (2 * H2) + d[None, :]
        dst = v_ptr + row * s_v + hk[:, None] * s_vh + d[None, :]
        tl.store(dst, tl.load(src, mask=mk, other=0.0), mask=mk)
        tl.store(dst + H2, tl.load(src + H2, mask=mk, other=0.0), mask=mk)

    @triton.jit
    def _silu_mul_k(gu_ptr, o_ptr, sg, so, n, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        m = cols < n
        g = tl.load(gu_ptr + row * sg + cols, mask=m, other=0.0).to(tl.float32)
        u = tl.load(gu_ptr + row * sg + n + cols, mask=m, other=0.0).to(tl.float32)
        y = g / (1.0 + tl.exp(-g)) * u
        tl.store(o_ptr + row * so + cols, y.to(tl.bfloat16), mask=m)

    @triton.jit
    def _swiglu_oss_k(gu_ptr, o_ptr, sg, so, n, alpha, limit, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        m = cols < n
        g = tl.load(gu_ptr + row * sg + 2 * cols, mask=m, other=0.0).to(tl.float32)
        u = tl.load(gu_ptr + row * sg + 2 * cols + 1, mask=m, other=0.0).to(tl.float32)
        g = tl.minimum(g, limit)
        u = tl.minimum(tl.maximum(u, -limit), limit)
        y = (u + 1.0) * (g / (1.0 + tl.exp(-alpha * g)))
        tl.store(o_ptr + row * so + cols, y.to(tl.bfloat16), mask=m)

    @triton.jit
    def _moe_combine_k(out_ptr, h_ptr, sh_ptr, y_ptr, ci_ptr, w_ptr, wi_ptr, so, sh, ss, sy, n,
                       K: tl.constexpr, SHARED: tl.constexpr, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        m = cols < n
        acc = tl.load(h_ptr + row * sh + cols, mask=m, other=0.0).to(tl.float32)
        if SHARED:  # h + shared_y, rounded to bfloat16 as the chain's add
            acc = (acc + tl.load(sh_ptr + row * ss + cols, mask=m, other=0.0).to(tl.float32)
                   ).to(tl.bfloat16).to(tl.float32)
        wrow = tl.load(wi_ptr + row)
        for j in tl.static_range(K):
            src = tl.load(ci_ptr + row * K + j)
            wj = tl.load(w_ptr + wrow * K + j).to(tl.bfloat16).to(tl.float32)
            acc += wj * tl.load(y_ptr + src * sy + cols, mask=m, other=0.0).to(tl.float32)
        tl.store(out_ptr + row * so + cols, acc.to(tl.bfloat16), mask=m)

    return SimpleNamespace(triton=triton, rmsnorm=_rmsnorm_k, rope_kv=_rope_kv_k,
                           silu_mul=_silu_mul_k, swiglu_oss=_swiglu_oss_k,
                           moe_combine=_moe_combine_k)


def _rows(x, what: str):
    """(rows, row stride) of a 2-D bfloat16 tensor with a contiguous last axis."""
    if x.dim() != 2 or x.stride(-1) != 1:
        raise ValueError(f"{what} must be 2-D with a contiguous last axis, got shape "
                         f"{tuple(x.shape)} strides {tuple(x.stride())}")
    return x.shape[0], x.stride(0)


def rmsnorm_(dst, x, w, eps: float) -> None:
    """``dst <- x * rsqrt(mean(x**2, -1) + eps) * w`` in one kernel.

    Args:
        dst, x: [rows, n] bfloat16 CUDA tensors (last axis contiguous); w: [n] weights.
        eps: the epsilon (1e-5 in the workload).

    Raises:
        ValueError: shapes that do not match.
    """
    K = _kernels()
    rows, sx = _rows(x, "x")
    _, sy = _rows(dst, "dst")
    n = x.shape[1]
    if tuple(dst.shape) != tuple(x.shape) or w.numel() != n:
        raise ValueError(f"rmsnorm_: dst {tuple(dst.shape)}, x {tuple(x.shape)}, w {w.numel()}")
    K.rmsnorm[(rows,)](x, x, w, dst, dst, sx, sx, sy, sy, n, float(eps), ADD=False,
                       BLOCK=K.triton.next_power_of_2(n))


def add_rmsnorm_(h, hn, a, b, w, eps: float) -> None:
    """``h <- a + b`` and ``hn <- RMSNorm(h) * w`` in one kernel (the norm reads ``h`` as
    stored, in bfloat16, as the PyTorch chain does).

    Args:
        h, hn, a, b: [rows, n] bfloat16 CUDA tensors (last axis contiguous); w: [n].

    Raises:
        ValueError: shapes that do not match.
    """
    K = _kernels()
    rows, sa = _rows(a, "a")
    _, sb = _rows(b, "b")
    _, sh = _rows(h, "h")
    _, sy = _rows(hn, "hn")
    n = a.shape[1]
    if not (tuple(h.shape) == tuple(hn.shape) == tuple(a.shape) == tuple(b.shape)) \
            or w.numel() != n:
        raise ValueError(f"add_rmsnorm_: shapes h {tuple(h.shape)} hn {tuple(hn.shape)} "
                         f"a {tuple(a.shape)} b {tuple(b.shape)} w {w.numel()}")
    K.rmsnorm[(rows,)](a, b, w, h, hn, sa, sb, sh, sy, n, float(eps), ADD=True,
                       BLOCK=K.triton.next_power_of_2(n))


def rope_kv_(qkv, q, k_slot, v_slot, cos, sin, qh: int, kvh: int, hd: int,
             q_norm=None, k_norm=None, eps: float = 1e-6) -> None:
    """Rotary embedding of q and k (half-split layout, one decode position for every row) into
    ``q`` and the K-cache slot, and v into the V-cache slot, in one kernel; with ``q_norm`` and
    ``k_norm`` (Qwen3's per-head RMSNorm weights, [hd] bfloat16) q and k are normalised per
    head first, as ``F.rms_norm(x, (hd,), w, eps)`` before the rotation (the norm's output
    rounded to bfloat16 once, as the PyTorch chain stores it).

    Args:
        qkv: [rows, (qh + 2 kvh) * hd] bfloat16 (q heads, then k, then v; last axis
            contiguous). q: [rows, qh, hd]; k_slot, v_slot: [rows, kvh, hd] (any row and head
            strides, last axis contiguous: a slot of the [rows, kvh, L, hd] caches).
        cos, sin: [hd / 2] the rotation at the decode position. qh, kvh, hd: heads, head dim
            (hd even, hd / 2 a power of two). q_norm, k_norm: both or neither, each [hd].
        eps: the norm's epsilon (the model config's ``rms_norm_eps``).

    Raises:
        ValueError: shapes or strides the kernel does not take.
    """
    K = _kernels()
    rows, s_qkv = _rows(qkv, "qkv")
    h2 = hd // 2
    if hd % 2 or h2 & (h2 - 1) or qkv.shape[1] != (qh + 2 * kvh) * hd:
        raise ValueError(f"rope_kv_: qkv width {qkv.shape[1]} for qh={qh} kvh={kvh} hd={hd} "
                         "(hd/2 must be a power of two)")
    for nm, tns, heads in (("q", q, qh), ("k_slot", k_slot, kvh), ("v_slot", v_slot, kvh)):
        if tuple(tns.shape) != (rows, heads, hd) or tns.stride(-1) != 1:
            raise ValueError(f"rope_kv_: {nm} must be [{rows}, {heads}, {hd}] with a contiguous "
                             f"last axis, got {tuple(tns.shape)} strides {tuple(tns.stride())}")
    if (q_norm is None) != (k_norm is None):
        raise ValueError("rope_kv_: q_norm and k_norm go together (both or neither)")
    qkn = q_norm is not None
    if qkn and (tuple(q_norm.shape) != (hd,) or tuple(k_norm.shape) != (hd,)):
        raise ValueError(f"rope_kv_: q_norm and k_norm must be [{hd}], got "
                         f"{tuple(q_norm.shape)} and {tuple(k_norm.shape)}")
    K.rope_kv[(rows,)](qkv, q, k_slot, v_slot, cos, sin, q_norm if qkn else cos,
                       k_norm if qkn else cos, float(eps), s_qkv, q.stride(0), q.stride(1),
                       k_slot.stride(0), k_slot.stride(1), v_slot.stride(0), v_slot.stride(1),
                       QH=qh, KVH=kvh, H2=h2, BQ=K.triton.next_power_of_2(qh),
                       BK=K.triton.next_power_of_2(kvh), QKN=qkn)


def silu_mul_(out, gu, inter: int) -> None:
    """``out <- silu(gu[:, :inter]) * gu[:, inter:]`` in one kernel.

    Args:
        out: [rows, inter] bfloat16; gu: [rows, 2 inter] bfloat16 (last axes contiguous).

    Raises:
        ValueError: shapes that do not match.
    """
    K = _kernels()
    rows, sg = _rows(gu, "gu")
    _, so = _rows(out, "out")
    if tuple(out.shape) != (rows, inter) or gu.shape[1] != 2 * inter:
        raise ValueError(f"silu_mul_: out {tuple(out.shape)}, gu {tuple(gu.shape)}, "
                         f"inter {inter}")
    block = 1024
    K.silu_mul[(rows, K.triton.cdiv(inter, block))](gu, out, sg, so, inter, BLOCK=block)


def swiglu_oss_(out, gu, alpha: float, limit: float) -> None:
    """GPT-OSS's clamped SwiGLU in one kernel: with ``g = min(gu[:, 0::2], limit)`` and
    ``u = clamp(gu[:, 1::2], -limit, limit)``, ``out <- (u + 1) * g * sigmoid(alpha * g)``
    (``hw_runtime.gpu.kernels.SWIGLU_ALPHA``/``SWIGLU_LIMIT``: 1.702, 7.0).

    Args:
        out: [rows, F] bfloat16; gu: [rows, 2 F] bfloat16, gate and up interleaved (last axes
            contiguous). alpha, limit: the constants.

    Raises:
        ValueError: shapes that do not match.
    """
    K = _kernels()
    rows, sg = _rows(gu, "gu")
    _, so = _rows(out, "out")
    n = out.shape[1]
    if out.shape[0] != rows or gu.shape[1] != 2 * n:
        raise ValueError(f"swiglu_oss_: out {tuple(out.shape)}, gu {tuple(gu.shape)}")
    block = 1024
    K.swiglu_oss[(rows, K.triton.cdiv(n, block))](gu, out, sg, so, n, float(alpha), float(limit),
                                                  BLOCK=block)


def moe_combine_(out, h, y, comb_idx, topk_w, wsel_idx, shared=None) -> None:
    """The MoE combine's weighted sum and residual in one kernel (replacing a gather into
    [rows, k, H] and a ``baddbmm`` with k-long inner products, measured at 3% of the copy
    bandwidth on the H200, docs/results.md "The temporal step against its limits"):
    ``out[r] <- h[r] (+ shared[r]) + sum_j bf16(topk_w[wsel_idx[r], j]) * y[comb_idx[r k + j]]``,
    accumulated in float32, rounded to bfloat16 once.

    Args:
        out, h: [rows, H] bfloat16 (``out`` may be ``h``). y: [n, H] bfloat16, the experts'
            outputs. comb_idx: [rows * k] int64 rows of ``y``. topk_w: [t, k] routing weights
            (float32 or bfloat16, contiguous). wsel_idx: [rows] int64 rows of ``topk_w``.
            shared: [rows, H] bfloat16 shared experts' output, or None.

    Raises:
        ValueError: shapes that do not match.
    """
    K = _kernels()
    rows, so = _rows(out, "out")
    _, sh = _rows(h, "h")
    _, sy = _rows(y, "y")
    n = out.shape[1]
    k = topk_w.shape[-1] if topk_w.dim() == 2 else 0
    if (tuple(h.shape) != (rows, n) or y.shape[1] != n or topk_w.dim() != 2
            or not topk_w.is_contiguous() or tuple(comb_idx.shape) != (rows * k,)
            or tuple(wsel_idx.shape) != (rows,)
            or (shared is not None and tuple(shared.shape) != (rows, n))):
        raise ValueError(f"moe_combine_: out {tuple(out.shape)}, h {tuple(h.shape)}, y "
                         f"{tuple(y.shape)}, comb_idx {tuple(comb_idx.shape)}, topk_w "
                         f"{tuple(topk_w.shape)}, wsel_idx {tuple(wsel_idx.shape)}, shared "
                         f"{None if shared is None else tuple(shared.shape)}")
    ss = _rows(shared, "shared")[1] if shared is not None else 0
    block = 1024
    K.moe_combine[(rows, K.triton.cdiv(n, block))](
        out, h, shared if shared is not None else h, y, comb_idx, topk_w, wsel_idx,
        so, sh, ss, sy, n, K=k, SHARED=shared is not None, BLOCK=block)
