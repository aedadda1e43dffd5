"""MoE experts as one grouped GEMM over routed tokens (issue 23, item 3), in Triton.

The runtime's old expert path (``--moe-gemm bmm``) gathers the routed tokens into an
expert-ordered, padded ``[experts, cap, H]`` batch (one copy kernel), runs ``torch.bmm`` for the
gate/up projection, a separate activation kernel, and ``bmm`` again for the down projection.
Serving engines run grouped ("fused MoE") kernels instead (vLLM's and SGLang's Triton
``fused_moe``, DeepGEMM's grouped GEMMs): tokens sorted by expert, one launch for all local
experts, the gather folded into the GEMM's loads and the activation into its epilogue. These
kernels do the same (our own code):

* ``expert_up_act(x, rt, w, out, ...)``: for every routed slot, the expert's gate and up
  projections of its token (read from ``x`` through the slot -> token map: no gather kernel),
  bias, fp8 scale and activation (SwiGLU, or GPT-OSS's clamped SwiGLU with interleaved gate/up)
  fused; ``out`` ``[slots, F]``.
* ``expert_down(a, rt, w, out, ...)``: the expert's down projection of every slot; ``out``
  ``[slots, H]``.

Layout (``RoutedTokens``): expert ``e``'s routed tokens occupy slot rows ``e * seg ..
e * seg + counts[e] - 1`` (``seg >= max(counts)``); each expert's rows are cut into blocks of
``BM`` rows and one program computes one (block, column tile). Empty slots are never read or
written. Weights: ``w_up`` ``[experts, H, 2F]`` and ``w_down`` ``[experts, F, H]`` (the
``x @ w`` orientation of the workload), bfloat16, or float8 e4m3 with a float32 scale per
(expert, output column) (``quantize_fp8``: ``w ~= w_fp8 * scale``); biases ``[experts, 1, N]``
bfloat16. Arithmetic: float32 accumulation, fp8 weights widened to bf16 before the MMA (or,
with a static activation scale ``a_scale``, activations quantised to fp8 and fp8 MMAs; measured
slower on the H200: docs/results.md, "Kernel choices"), one rounding of the result (the ``bmm`` path rounds ``gu`` before its activation; the GPU tests
compare both to float32).

``MOE_GEMM`` policies (``resolve``): ``"bmm"`` the old path, ``"triton"`` these kernels
(refused where Triton or CUDA is missing), ``"auto"`` Triton where it runs and an expert holds
at most ``AUTO_MAX_ROWS`` routed slots (the tokens routed to it on the busiest rank, from the
workload's batch and microbatch count: so the choice depends on the batch, not the family),
else ``bmm``. Measured on the H200
(docs/results.md, "Kernel choices"): at 16-64 slots per expert (Qwen3-30B-A3B
TP8 EP8) the grouped gate/up launch streams its weights at 0.90 of the copy bandwidth against
0.73-0.79 for ``bmm`` and the down projections tie; at 256-512 slots of one expert (Mixtral
EP8 at G = 1,024-2,048, compute-bound) the Triton kernels take 10-43% longer than cuBLAS. The block/tile choice
(``moe_config``) and the layout are pure Python (tested on the CPU).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from subgpu_jax.model.checks import pos_int

__all__ = ["MOE_GEMM", "AUTO_TRITON", "AUTO_MAX_ROWS", "FP8_MAX", "MoeConfig", "RoutedTokens", "resolve", "auto_choice",
           "moe_config", "balanced_counts", "static_routing", "block_table", "routed_tokens", "expert_up_act",
           "expert_down", "deinterleave_gate_up", "quantize_fp8"]

#: The expert-GEMM policies ``KernelSettings(moe_gemm=...)`` (``TorchWorkload(kernels=...)``)
#: and ``--moe-gemm`` take.
MOE_GEMM = ("auto", "triton", "bmm")
#: ``"auto"`` may resolve to Triton (docs/results.md, "Kernel choices") ...
AUTO_TRITON = True
#: ... where an expert holds at most this many routed slots (the same measurement: Triton
#: ahead at 16-128 slots, cuBLAS's bmm ahead at 256 and 512).
AUTO_MAX_ROWS = 128
#: The largest finite float8 e4m3fn value (OCP FP8 spec; ``torch.finfo(torch.float8_e4m3fn)``).
FP8_MAX = 448.0


@dataclass(frozen=True)
class MoeConfig:
    """Tile sizes of one grouped-GEMM launch: ``bm`` slot rows per block, ``bn`` output columns
    and ``bk`` reduction elements per step (powers of two, >= 16), Triton ``warps`` and
    pipeline ``stages``."""

    bm: int
    bn: int
    bk: int
    warps: int
    stages: int


def resolve(policy: str, is_cuda: bool, rows: int | None = None) -> str:
    """The expert GEMMs a workload uses: ``"triton"`` or ``"bmm"``.

    Args:
        policy: one of ``MOE_GEMM``. is_cuda: the workload's device is a CUDA GPU.
        rows: routed slots per expert of the workload (``WorkloadShapes.cap``); ``"auto"``
            picks Triton only at most ``AUTO_MAX_ROWS`` (None: no limit).

    Raises:
        ValueError: an unknown policy, or ``"triton"`` without a CUDA device or without Triton.
    """
    from hw_runtime.gpu.fused import resolve_triton_policy

    return resolve_triton_policy("moe_gemm", policy, MOE_GEMM, is_cuda, "bmm",
                                 auto_choice(rows) == "triton")


def auto_choice(rows: int | None = None) -> str:
    """What ``"auto"`` picks where Triton runs: ``"triton"`` up to ``AUTO_MAX_ROWS`` routed
    slots per expert (None: no limit), else ``"bmm"``.

    Raises:
        ValueError: ``rows`` not an integer >= 1.
    """
    if rows is not None:
        pos_int(rows, "moe_gemm.resolve: rows")
    return "triton" if AUTO_TRITON and (rows is None or rows <= AUTO_MAX_ROWS) else "bmm"


def moe_config(rows: int) -> MoeConfig:
    """Tiles for a launch whose experts have at most ``rows`` routed slots each.

    ``bm`` is the next power of two of ``rows`` in 16..64 (16 is the smallest MMA tile; above 64
    rows an expert takes several blocks); ``bn`` 128, ``bk`` 64, 4 warps, 4 stages for both
    kernels: the fastest or within 5% of it on all twelve expert shapes of the sweep in
    docs/results.md, "Kernel choices" (16-512 slots, 1-16 experts, whole GPU),
    also where the grid is below one wave of the SMs (the weights stream faster through fewer,
    deeper-pipelined programs), so the tiles do not depend on the pool.

    Args:
        rows: the largest routed slot count of one expert (>= 1).

    Raises:
        ValueError: a non-positive or non-integer ``rows``.

    Example: 64 slots -> bm 64; 20 -> 32; 3 -> 16; 300 -> 64 (five blocks).
    """
    pos_int(rows, "moe_config: rows")
    bm = min(64, max(16, 1 << (rows - 1).bit_length()))
    return MoeConfig(bm=bm, bn=128, bk=64, warps=4, stages=4)


def balanced_counts(assignments: int, experts: int) -> list[int]:
    """Routed slots per expert when ``assignments`` (token, expert) pairs spread as evenly as
    they can over ``experts``: the first ``assignments % experts`` get one more.

    Raises:
        ValueError: a non-positive argument.

    Example: 10 over 4 -> [3, 3, 2, 2].
    """
    pos_int(assignments, "balanced_counts: assignments")
    pos_int(experts, "balanced_counts: experts")
    q, r = divmod(assignments, experts)
    return [q + (e < r) for e in range(experts)]


def static_routing(assignments: int, experts: int, seg: int, tokens: int
                   ) -> tuple[list[int], list[int], list[int]]:
    """The runtime's fixed routing of one microbatch: ``assignments`` (token, expert) pairs
    spread evenly over ``experts`` (``balanced_counts``); assignment ``j`` reads token ``j %
    tokens`` and sits in slot row ``e * seg + i`` (the ``i``-th of its expert ``e``).

    Returns:
        ``(counts, src, slot)``: slots per expert; the token row of every one of the ``experts
        x seg`` slot rows (0 where empty); the slot row of every assignment.

    Raises:
        ValueError: non-positive arguments, or ``seg`` below the largest count.

    Example: 5 assignments, 2 experts, seg 3, 4 tokens -> counts [3, 2], src [0, 1, 2, 3, 0,
    0], slot [0, 1, 2, 3, 4].
    """
    counts = balanced_counts(assignments, experts)
    pos_int(tokens, "static_routing: tokens")
    if pos_int(seg, "static_routing: seg") < counts[0]:
        raise ValueError(f"static_routing: seg must be >= {counts[0]} slots, got {seg}")
    src, slot = [0] * (experts * seg), []
    for e, c in enumerate(counts):
        for i in range(c):
            src[e * seg + i] = len(slot) % tokens
            slot.append(e * seg + i)
    return counts, src, slot


def block_table(counts: list[int], seg: int, bm: int) -> tuple[list[int], list[int], list[int]]:
    """The row blocks of the grouped launch: ``(expert, first slot row, valid rows)`` per block,
    as three lists; expert ``e``'s rows start at ``e * seg``; experts with no slots get none.

    Raises:
        ValueError: ``seg`` below a count, a negative count, non-positive ``seg``/``bm``.

    Example: counts [3, 0, 5], seg 5, bm 4 -> experts [0, 2, 2], rows [0, 10, 14], valid
    [3, 4, 1].
    """
    pos_int(seg, "block_table: seg")
    pos_int(bm, "block_table: bm")
    be, br, bv = [], [], []
    for e, c in enumerate(counts):
        if isinstance(c, bool) or not isinstance(c, int) or c < 0 or c > seg:
            raise ValueError(f"block_table: counts must be integers in 0..seg={seg}, got {c!r} "
                             f"for expert {e}")
        for r in range(0, c, bm):
            be.append(e)
            br.append(e * seg + r)
            bv.append(min(bm, c - r))
    return be, br, bv


@dataclass(frozen=True)
class RoutedTokens:
    """Device-side routing of one grouped launch pair (``routed_tokens``).

    Attributes:
        counts: routed slots per expert. seg: slot rows reserved per expert. bm: rows per block.
        rows: ``max(counts)``. src: int32 ``[experts x seg]`` token row of ``x`` per slot (0 for
        empty slots, never read). blk_e, blk_r0, blk_n: int32 ``[blocks]`` (``block_table``).
    """

    counts: tuple[int, ...]
    seg: int
    bm: int
    rows: int
    src: object
    blk_e: object
    blk_r0: object
    blk_n: object

    @property
    def blocks(self) -> int:
        """Row blocks of a launch (the grid's first dimension)."""
        return int(self.blk_e.shape[0])


def routed_tokens(src, counts: list[int], seg: int, bm: int | None = None) -> RoutedTokens:
    """Build the routing of a grouped launch pair on ``src``'s device.

    Args:
        src: integer tensor ``[len(counts) x seg]``: the token row of ``x`` each slot reads
            (values of empty slots are ignored).
        counts: routed slots per expert (0..seg each, at least one > 0). seg: rows per expert.
        bm: rows per block (default ``moe_config``'s choice for ``max(counts)``).

    Raises:
        ValueError: shapes or counts that do not match (one line).
    """
    import torch

    if not counts or max(counts) < 1:
        raise ValueError(f"routed_tokens: some expert must have a routed token, got {counts!r}")
    if tuple(src.shape) != (len(counts) * seg,):
        raise ValueError(f"routed_tokens: src must have {len(counts)} x {seg} entries, got "
                         f"{tuple(src.shape)}")
    rows = max(counts)
    if bm is None:
        bm = moe_config(rows).bm
    be, br, bv = block_table(list(counts), seg, bm)
    dev = src.device

    def i32(v):
        return torch.tensor(v, dtype=torch.int32, device=dev)

    return RoutedTokens(counts=tuple(counts), seg=seg, bm=bm, rows=rows,
                        src=src.to(torch.int32).contiguous(), blk_e=i32(be), blk_r0=i32(br),
                        blk_n=i32(bv))


def _check(name: str, rt: RoutedTokens, a, w, out, bias, scale, k_in: int, n_w: int) -> None:
    import torch

    E = len(rt.counts)
    if w.dim() != 3 or w.shape[0] < E or w.shape[1] != k_in or w.shape[2] != n_w:
        raise ValueError(f"{name}: w must be [>= {E} experts, {k_in}, {n_w}], got "
                         f"{tuple(w.shape)}")
    if w.stride(-1) != 1 or a.stride(-1) != 1 or out.stride(-1) != 1:
        raise ValueError(f"{name}: the last dimension of the input, w and out must be contiguous")
    fp8 = w.dtype == torch.float8_e4m3fn
    if not fp8 and w.dtype != a.dtype:
        raise ValueError(f"{name}: w must be {a.dtype} or float8_e4m3fn, got {w.dtype}")
    if fp8 and (scale is None or tuple(scale.shape[:1]) != (w.shape[0],)
                or scale.shape[-1] != n_w or scale.dtype != torch.float32):
        raise ValueError(f"{name}: fp8 weights need a float32 scale [experts, (1,) {n_w}]")
    if bias is not None and (bias.shape[0] != w.shape[0] or bias.shape[-1] != n_w):
        raise ValueError(f"{name}: bias must be [experts, 1, {n_w}], got {tuple(bias.shape)}")
    if out.shape[0] < E * rt.seg:
        raise ValueError(f"{name}: out needs {E} x {rt.seg} rows, got {out.shape[0]}")
    if len({t.device for t in (a, w, out, rt.src)}) != 1 or a.device.type != "cuda":
        raise ValueError(f"{name}: tensors must be on one CUDA device")


def _tiles(name: str, rt: RoutedTokens, config: MoeConfig | None) -> MoeConfig:
    """``config`` (default ``moe_config(rt.rows)``) when its ``bm`` is the routing's."""
    cfg = config or moe_config(rt.rows)
    if cfg.bm != rt.bm:
        raise ValueError(f"{name}: config.bm {cfg.bm} differs from the routing's {rt.bm}")
    return cfg


def _a_inv(a_scale, fp8: bool, name: str) -> float:
    """``1 / a_scale`` for the kernels (1.0 without one); ValueError on a bad scale."""
    if a_scale is None:
        return 1.0
    if not fp8:
        raise ValueError(f"{name}: a_scale needs fp8 weights (float8_e4m3fn with a scale)")
    try:
        v = float(a_scale)
    except (TypeError, ValueError, OverflowError):
        v = float("nan")
    if isinstance(a_scale, bool) or not (math.isfinite(v) and v > 0
                                         and math.isfinite(1.0 / v)):
        raise ValueError(f"{name}: a_scale must be a finite number > 0 with a finite "
                         f"reciprocal, got {a_scale!r}")
    return 1.0 / v


def expert_up_act(x, rt: RoutedTokens, w, out, bias=None, scale=None, oss: bool = False,
                  interleaved: bool = False, alpha: float = 1.702, limit: float = 7.0,
                  config: MoeConfig | None = None, a_scale: float | None = None) -> MoeConfig:
    """Gate/up projection + activation of every routed slot, one launch for all experts.

    Args:
        x: ``(T, H)`` bf16 token rows (``rt.src`` indexes them). w: ``(>= E, H, 2F)`` bf16 or
            fp8: gate columns ``[:F]`` then up ``[F:]``, or with ``interleaved`` gate ``0::2``
            and up ``1::2`` (GPT-OSS's checkpoint layout; measured 8-15x slower through the
            strided loads, so the runtime de-interleaves once at load time, as vLLM does).
            out: ``(>= E x seg, F)``, written at the routed slots. bias: ``(E, 1, 2F)`` or
            None (the weight's column layout).
        scale: float32 ``(E, 1, 2F)`` (or ``(E, 2F)``) with fp8 weights. oss, alpha, limit:
            GPT-OSS's clamped SwiGLU (``(clamp(u, -l, l) + 1) * g * sigmoid(alpha * g)``, ``g =
            min(gate, l)``; alpha 1.702, limit 7.0 from its public config); else ``silu(g) * u``.
        config: tiles (default ``moe_config``; ``bm`` must equal ``rt.bm``).
        a_scale: with fp8 weights, a static activation scale (> 0): ``x`` is quantised to
            fp8 as ``x / a_scale`` on load and the MMA runs in fp8; None: the weights are
            widened to bf16.

    Returns:
        The ``MoeConfig`` launched.

    Raises:
        ValueError: shapes, dtypes or devices that do not match, ``a_scale`` without fp8
            weights or not a finite number > 0.
    """
    F2 = w.shape[-1] if w.dim() == 3 else -1
    if F2 % 2 or x.dim() != 2:
        raise ValueError(f"expert_up_act: x (T, H) and w (E, H, 2F); got x {tuple(x.shape)}, w "
                         f"{tuple(w.shape)}")
    F = F2 // 2
    _check("expert_up_act", rt, x, w, out, bias, scale, x.shape[1], F2)
    if out.dim() != 2 or out.shape[1] != F:
        raise ValueError(f"expert_up_act: out must be (rows, {F}), got {tuple(out.shape)}")
    cfg = _tiles("expert_up_act", rt, config)
    from hw_runtime.gpu import moe_gemm_kernels as K

    fp8 = scale is not None
    K.up_act_k[(rt.blocks, math.ceil(F / cfg.bn))](
        x, rt.src, w, bias if bias is not None else w, scale if fp8 else x, out,
        rt.blk_e, rt.blk_r0, rt.blk_n, x.shape[1], F, x.stride(0), w.stride(0), w.stride(1),
        bias.stride(0) if bias is not None else 0, scale.stride(0) if fp8 else 0,
        out.stride(0), 1 if interleaved else F, float(alpha), float(limit),
        _a_inv(a_scale, fp8, "expert_up_act"),
        G_STEP=2 if interleaved else 1, OSS=bool(oss), HAS_BIAS=bias is not None, FP8=fp8,
        A_FP8=a_scale is not None,
        BM=cfg.bm, BN=cfg.bn, BK=cfg.bk, num_warps=cfg.warps, num_stages=cfg.stages)
    return cfg


def expert_down(a, rt: RoutedTokens, w, out, bias=None, scale=None,
                config: MoeConfig | None = None, a_scale: float | None = None) -> MoeConfig:
    """Down projection of every routed slot, one launch for all experts.

    Args:
        a: ``(>= E x seg, F)`` bf16 activations in slot order (``expert_up_act``'s ``out``).
        w: ``(>= E, F, H)`` bf16 or fp8. out: ``(>= E x seg, H)``, written at the routed slots.
        bias ``(E, 1, H)``, scale ``(E, 1, H)`` float32 with fp8, config, a_scale: as
        ``expert_up_act``.

    Returns:
        The ``MoeConfig`` launched.

    Raises:
        ValueError: shapes, dtypes or devices that do not match.
    """
    if a.dim() != 2 or w.dim() != 3:
        raise ValueError(f"expert_down: a (rows, F) and w (E, F, H); got a {tuple(a.shape)}, w "
                         f"{tuple(w.shape)}")
    N = w.shape[2]
    _check("expert_down", rt, a, w, out, bias, scale, a.shape[1], N)
    if out.dim() != 2 or out.shape[1] != N:
        raise ValueError(f"expert_down: out must be (rows, {N}), got {tuple(out.shape)}")
    cfg = _tiles("expert_down", rt, config)
    from hw_runtime.gpu import moe_gemm_kernels as K

    fp8 = scale is not None
    K.down_k[(rt.blocks, math.ceil(N / cfg.bn))](
        a, w, bias if bias is not None else w, scale if fp8 else a, out,
        rt.blk_e, rt.blk_r0, rt.blk_n, a.shape[1], N, a.stride(0), w.stride(0), w.stride(1),
        bias.stride(0) if bias is not None else 0, scale.stride(0) if fp8 else 0,
        out.stride(0), _a_inv(a_scale, fp8, "expert_down"), HAS_BIAS=bias is not None, FP8=fp8,
        A_FP8=a_scale is not None,
        BM=cfg.bm, BN=cfg.bn, BK=cfg.bk, num_warps=cfg.warps, num_stages=cfg.stages)
    return cfg


def deinterleave_gate_up(weights: dict) -> None:
    """In place: every ``*experts_up.w`` / ``*experts_up.b`` tensor of the weight dict from
    interleaved gate/up columns (gate ``0::2``, up ``1::2``: GPT-OSS's checkpoint layout) to
    halves (gate ``[:F]``, up ``[F:]``), the layout ``expert_up_act`` streams fastest."""
    import torch

    for nm in [n for n in weights if n.endswith(("experts_up.w", "experts_up.b"))]:
        x = weights[nm]
        weights[nm] = torch.cat([x[..., 0::2], x[..., 1::2]], dim=-1).contiguous()
        del x


def quantize_fp8(w):
    """Per-(expert, output column) float8 e4m3 quantisation of ``w`` ``(E, K, N)``.

    Returns:
        ``(w_fp8, scale)``: ``w_fp8`` float8_e4m3fn ``(E, K, N)`` and ``scale`` float32
        ``(E, 1, N)`` with ``w ~= w_fp8 * scale``; ``scale = amax over K / 448`` (``FP8_MAX``;
        a zero column gets scale 1).
    """
    import torch

    amax = w.float().abs().amax(dim=1, keepdim=True)
    scale = torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax))
    q = (w.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q, scale.contiguous()
