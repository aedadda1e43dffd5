"""A real PyTorch workload for every kernel of a per-GPU ``OpGraph`` (docs/method.md §5-6).

``TorchWorkload(graph)`` allocates, once, random weights (nothing is downloaded), KV caches and per-
microbatch activation buffers at the graph's exact per-GPU shapes, and
``workload.launch(kernel_index, microbatch, region_instance)`` runs that kernel's work on the
current torch stream (wrap it in ``torch.cuda.stream(s)`` to place it on a green-context pool).
Every launch writes into preallocated buffers, so launches can be captured in CUDA graphs.

Kernels (``Kernel.op``) and what runs:

========================  ===================================================================
rmsnorm                   ``F.rms_norm`` of the residual into ``xn``
qkv                       ``addmm`` xn @ W_qkv (+ bias) -> qkv            [Rm, (qh+2kvh)*hd]
rope_kv                   (q/k RMSNorm for Qwen3) RoPE of q and k at position kv_history-1;
                          q -> ``q``, k and v written into slot kv_history-1 of the KV cache
                          (ring slot ``(kv_history-1) % window`` for sliding layers)
attn                      ``F.scaled_dot_product_attention(..., enable_gqa=True)`` (or the
                          ``--attention`` kernel: Triton, FlashInfer) of one query
                          token over the layer's KV (kv_history tokens, or the window for
                          sliding layers). Attention sinks are APPROXIMATED by a per-head scale
                          of the output (the exact rescaling needs the log-sum-exp, which SDPA
                          does not return; the extra work is one tiny elementwise kernel)
o_proj                    ``addmm`` attn_out @ W_o (+ bias) -> o_part
allreduce (attention)     virtual collective (below) + residual add + post-attention RMSNorm
residual_norm             residual add + post-attention RMSNorm (attention TP 1)
router                    hn[:Tr] @ W_router (+ bias) -> fp32 logits
topk                      ``torch.topk`` + softmax over the k selected logits
dispatch                  virtual all-to-all: gather of the routed tokens into the expert input
                          ``x_exp`` [experts hit, tokens per expert, H] + the collective
expert_up                 ``baddbmm`` over the local experts hit (+ bias), clamped SwiGLU of
                          GPT-OSS (alpha 1.702, limit 7; SiLU-GLU for other families)
expert_down               ``baddbmm`` (+ bias) -> y_exp
combine                   virtual all-to-all + top-k weighted sum (``baddbmm``) + residual add
mlp_up / mlp_down         dense SwiGLU MLP (``mm``): dense models, the dense layers of MoE
                          models (a region may mix dense and MoE layers), shared experts
                          (``shared_up`` / ``shared_down``, added in the combine)
allreduce (mlp) /         virtual collective + residual add / residual add
residual
mla_down, mla_q_up,       multi-head latent attention, absorbed (``kernels._mla_*``): latent
rope_kv, attn, mla_v_up   down-projection; q up + W_UK; compressed-cache append; the qh heads
                          as qh queries of one head over the cache; W_UV per head
topk (grouped)            DeepSeek-V3 routing: sigmoid scores, top groups, top-k inside them
========================  ===================================================================

Virtual collectives (docs/method.md §5): the endpoint memory work is a copy of the payload
(``Kernel.comm_bytes``, read + write, from the kernel's source activation into a staging buffer),
then the kernel's local work, then a spin (``torch.cuda._sleep``, calibrated in clock cycles per
µs when the workload is built) so the kernel lasts at least ``comm_floor_us + comm_bytes /
link_Bps`` (3 µs + payload / 450 GB/s for H200 NVLink 4). The copy's expected time at the copy
peak is subtracted from the spin. With ``proxy`` the copy is the paced collective proxy instead
and there is no spin (``hw_runtime.gpu.collectives``, ``--collectives proxy``).

Routing is static: the expected counts of docs/method.md §5 (``G*k/(n*m)`` assignments per microbatch,
spread evenly over the expected number of distinct local experts hit, padded to equal counts per
expert so one ``bmm`` serves them all), not the data-dependent top-k result; this keeps every
launch free of host synchronisation and capturable.

Datatypes: bf16 weights, activations and KV. Expert weights must be bf16 on Hopper (MXFP4 has no
tensor-core support there): build the graph with ``dataclasses.replace(arch, expert_dtype='bf16')``
(``hopper_arch`` does that, and also runs FP8 experts' GEMMs in bf16) so the simulator's byte
counts match what runs; a graph with MXFP4 or FP8 experts is refused.

A model with several region kinds (``build_forward``) gets one workload per kind, each built
from its own region graph and sharing the main one's residual stream (``residual_of`` /
``share_residual``; ``hw_runtime.gpu.step``).

Memory: weights are allocated per region instance (``instances``, default every instance, so a
kernel never finds another instance's weights in L2), activations per microbatch (shared by the
region instances of that microbatch, which run one after the other). KV caches:
``kv_cache="per_instance"`` gives every region instance its own cache (the reference's 18
full-attention layers x 4.29 GB = 77 GB fit on one H200), ``"shared"`` one cache per layer of the
region, reused by all instances (fine for timing: a 4.29 GB cache is far larger than the L2), and
``"auto"`` (default) picks per-instance when it fits. The bytes needed are computed before any
allocation and a workload that does not fit in the GPU's free memory is refused.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any, Sequence

from subgpu_jax.model.checks import pos_int
from subgpu_jax.model.graph import Kernel, OpGraph
from subgpu_jax.model.models import ModelArch
from subgpu_jax.model.routing import busiest_rank_load, rank_count_variance

from hw_runtime.gpu.collectives import VirtualCollectives
from hw_runtime.gpu.decode_attn import ATTENTION_BACKENDS, resolve as resolve_attention
from hw_runtime.gpu.moe_gemm import (deinterleave_gate_up, resolve as resolve_moe_gemm,
                                     routed_tokens, static_routing)
from hw_runtime.gpu.fused import resolve as resolve_elementwise
from hw_runtime.gpu.kernels import KernelContext, kernel_builder

__all__ = [
    "TorchWorkload", "WorkloadShapes", "workload_shapes", "estimate_bytes", "hopper_arch",
    "arch_label", "WorkloadConsts", "WorkloadMemoryError",
]

_GIB = float(2 ** 30)
_ELEM = {"bf16": 2, "fp32": 4, "int64": 8}


class WorkloadMemoryError(MemoryError):
    """The workload needs more device memory than is free."""


def hopper_arch(arch: ModelArch) -> ModelArch:
    """``arch`` with every module group in bf16 (weights and GEMMs; Hopper has no MXFP4 tensor
    cores, and the workload's GEMMs run in bf16, also for DeepSeek-V3's block-wise FP8 layers):
    build the graph for the workload and the simulator from this (``ModelArch.all_bf16``)."""
    return arch.all_bf16()


def arch_label(arch: ModelArch) -> str:
    """The model's name as the runtime's output prints it: ``"mixtral-8x7b (bf16 experts)"``
    for a MoE model (``hopper_arch`` runs its experts in bf16), the plain name otherwise."""
    return f"{arch.name} (bf16 experts)" if arch.num_experts else arch.name


# --------------------------------------------------------------------------- pure shapes/bytes

@dataclass(frozen=True)
class WorkloadShapes:
    """Per-GPU, per-microbatch shapes of a region (derived from the graph; no torch needed).

    Attributes:
        R, m, Rm: attention requests per GPU, microbatches, requests per microbatch.
        H, qh, kvh, hd, nq: hidden, local q heads, local KV heads, head dim, qkv width.
        t: attention TP. kv_history: tokens in each request's cache.
        layer_kinds: ``"full"``/``"sliding"`` per layer of the region.
        kv_len: KV slots of each layer (history, or the window); kv_pos: the appended slot.
        moe: MoE model. E, El, k, F: experts, local experts, top-k, expert intermediate.
        Tr: tokens routed by this GPU per microbatch; A: expert assignments received;
        n_hit: local experts hit; cap: tokens per hit expert (padded); I: dense intermediate/TP.
        mlp_kinds: ``"dense"``/``"moe"`` per layer of the region (a region may mix both);
        dense: some layer of the region is dense. Fs: shared-expert intermediate per GPU
        (num_shared_experts * moe_intermediate / t; 0 without shared experts).
        mla: multi-head latent attention; c, r, nope, v, ql: kv_lora_rank, qk_rope_head_dim,
        qk_nope_head_dim, v_head_dim, q_lora_rank; nd = ql + c + r, the down-projection width.
    """

    R: int
    m: int
    Rm: int
    H: int
    qh: int
    kvh: int
    hd: int
    nq: int
    t: int
    kv_history: int
    layer_kinds: tuple[str, ...]
    kv_len: tuple[int, ...]
    kv_pos: tuple[int, ...]
    moe: bool
    E: int = 0
    El: int = 0
    k: int = 0
    F: int = 0
    Tr: int = 0
    A: int = 0
    n_hit: int = 0
    cap: int = 0
    I: int = 0
    mlp_kinds: tuple[str, ...] = ()
    dense: bool = False
    Fs: int = 0
    mla: bool = False
    c: int = 0
    r: int = 0
    nope: int = 0
    v: int = 0
    ql: int = 0
    nd: int = 0

    @property
    def P(self) -> int:
        """Layers in the region."""
        return len(self.layer_kinds)


@dataclass(frozen=True)
class WorkloadConsts:
    """The constant tensors a workload's kernels read (``TorchWorkload.consts``; None where the
    model has no such part).

    Attributes:
        rope_cos, rope_sin: bf16 ``(hd/2,)`` rotary factors at the decode position (``hd`` the
            head dim); rope_cos_r, rope_sin_r: the same for MLA's rope part
            (``qk_rope_head_dim``). wsel_idx: int64 ``(Rm,)`` token of each request's routing
            weights. comb_idx: int64 ``(Rm x k,)`` expert-output row of each (request, k).
            disp_idx: int64 ``(n_hit x cap,)`` token of each padded expert row (the ``bmm``
            path). routing: the grouped kernels' ``moe_gemm.RoutedTokens`` (``triton``).
        attn_decoders: ``--attention flashinfer``: one ``flashinfer_attn.FlashInferDecode`` per
            distinct KV length of the layers (``WorkloadShapes.kv_len``), keyed by it
            (``decode_attn.FlashInferAttention.workload_consts``).
    """

    rope_cos: Any = None
    rope_sin: Any = None
    rope_cos_r: Any = None
    rope_sin_r: Any = None
    wsel_idx: Any = None
    comb_idx: Any = None
    disp_idx: Any = None
    routing: Any = None
    attn_decoders: Any = None


def _need_graph(graph: OpGraph) -> tuple[ModelArch, Any]:
    if not isinstance(graph, OpGraph):
        raise TypeError(f"TorchWorkload: graph must be an OpGraph from build_graph, got "
                        f"{type(graph).__name__}")
    if graph.arch is None or graph.deployment is None:
        raise ValueError("TorchWorkload: the graph must come from build_graph (it needs its arch and "
                         "deployment); synthetic chain graphs have no shapes")
    return graph.arch, graph.deployment


def workload_shapes(graph: OpGraph) -> WorkloadShapes:
    """The shapes the workload allocates for ``graph`` (see ``WorkloadShapes``).

    Raises:
        ValueError: the graph has no arch/deployment, or datatypes the workload cannot run
            (experts or weights not bf16, KV not bf16).
    """
    arch, dep = _need_graph(graph)
    if arch.expert_dtype != "bf16" and arch.is_moe:
        raise ValueError(f"TorchWorkload: expert_dtype {arch.expert_dtype!r} cannot run on Hopper "
                         "tensor cores; build the graph from hopper_arch(arch) "
                         "(dataclasses.replace(arch, expert_dtype='bf16'))")
    if arch.weight_dtype != "bf16" or arch.kv_dtype != "bf16":
        raise ValueError(f"TorchWorkload: weights and KV must be bf16, got weight_dtype="
                         f"{arch.weight_dtype!r}, kv_dtype={arch.kv_dtype!r}")
    if any(arch.dtypes(g) != ("bf16", "bf16") for g in ("attn", "dense_mlp", "shared_experts")):
        raise ValueError("TorchWorkload: attention, dense MLP or shared-expert layers are "
                         "quantised; build the graph from hopper_arch(arch) (all bf16)")
    kinds2 = graph.region_kinds or tuple((a, "moe" if arch.is_moe else "dense")
                                         for a in arch.period)
    mlp_kinds = tuple(lk[1] for lk in kinds2)
    moe, dense = "moe" in mlp_kinds, "dense" in mlp_kinds
    m = graph.microbatches
    R = dep.requests_per_gpu
    Rm = R // m
    t = dep.attn_tp
    qh = arch.num_heads // t
    kvh = dep.local_kv_heads(arch)
    hd = arch.head_dim
    if qh % kvh:
        raise ValueError(f"TorchWorkload: {qh} local q heads are not a multiple of {kvh} KV heads")
    mla = {}
    if arch.is_mla:
        c, r, ql = arch.kv_lora_rank, arch.qk_rope_head_dim, arch.q_lora_rank
        mla = dict(mla=True, c=c, r=r, nope=arch.qk_nope_head_dim, v=arch.v_head_dim, ql=ql,
                   nd=ql + c + r)
    kinds = tuple(lk[0] for lk in kinds2)
    kv_len, kv_pos = [], []
    for kind in kinds:
        if kind == "sliding":
            L = min(arch.sliding_window, dep.kv_history)
            kv_len.append(L)
            kv_pos.append((dep.kv_history - 1) % L)
        else:
            kv_len.append(dep.kv_history)
            kv_pos.append(dep.kv_history - 1)
    common = dict(R=R, m=m, Rm=Rm, H=arch.hidden, qh=qh, kvh=kvh, hd=hd,
                  nq=0 if mla else (qh + 2 * kvh) * hd,
                  t=t, kv_history=dep.kv_history, layer_kinds=kinds, kv_len=tuple(kv_len),
                  kv_pos=tuple(kv_pos), moe=moe, mlp_kinds=mlp_kinds, dense=dense,
                  I=arch.intermediate // t if dense else 0, **mla)
    if moe:
        E, k, e = arch.num_experts, arch.top_k, dep.moe_ep
        El = E // e
        Tr = max(1, int(round(Rm / t)))
        # G*k/n assignments per GPU whatever e; its EP group routes G*e/(n*m) tokens
        # the busiest EP rank's assignments and distinct experts, as the graph charges them
        load = busiest_rank_load(E, k, e, dep.global_batch, dep.num_gpus, m,
                                 dep.expert_load_factor(k, m, rank_count_variance(
                                     E, k, e, arch.n_group, arch.topk_group)))
        A = max(1, int(round(load.assignments)))
        hit = load.experts_hit
        n_hit = int(min(El, max(1, round(hit))))
        cap = int(math.ceil(A / n_hit))
        return WorkloadShapes(**common, E=E, El=El, k=k, F=arch.moe_intermediate, Tr=Tr, A=A,
                              n_hit=n_hit, cap=cap,
                              Fs=arch.num_shared_experts * arch.moe_intermediate // t)
    return WorkloadShapes(**common)


def _comm_elems(kernel: Kernel) -> int:
    return int(math.ceil(kernel.comm_bytes / 2.0)) if kernel.is_comm else 0


def _weight_specs(s: WorkloadShapes, arch: ModelArch) -> dict[str, tuple[tuple[int, ...], str]]:
    """name -> (shape, dtype) of one region instance's weights."""
    out: dict[str, tuple[tuple[int, ...], str]] = {}
    H = s.H
    for j in range(s.P):
        p = f"L{j}."
        out[p + "attn_norm.w"] = ((H,), "bf16")
        if s.mla:
            _mla_weight_specs(out, p, s)
        else:
            _gqa_weight_specs(out, p, s, arch)
        out[p + "mlp_norm.w"] = ((H,), "bf16")
        if s.mlp_kinds[j] == "moe":
            out[p + "router.w"] = ((H, s.E), "bf16")
            if arch.mlp_bias:
                out[p + "router.b"] = ((s.E,), "bf16")
            if arch.n_group:
                out[p + "router.corr"] = ((s.E,), "fp32")
            out[p + "experts_up.w"] = ((s.El, H, 2 * s.F), "bf16")
            out[p + "experts_down.w"] = ((s.El, s.F, H), "bf16")
            if arch.mlp_bias:
                out[p + "experts_up.b"] = ((s.El, 1, 2 * s.F), "bf16")
                out[p + "experts_down.b"] = ((s.El, 1, H), "bf16")
            if s.Fs:
                out[p + "shared_up.w"] = ((H, 2 * s.Fs), "bf16")
                out[p + "shared_down.w"] = ((s.Fs, H), "bf16")
        else:
            out[p + "mlp_up.w"] = ((H, 2 * s.I), "bf16")
            out[p + "mlp_down.w"] = ((s.I, H), "bf16")
    return out


def _mla_weight_specs(out: dict, p: str, s: WorkloadShapes) -> None:
    """Multi-head latent attention weights of one layer (the graph's ``mla_*`` objects):
    ``mla_down.w`` [h, ql+c+r], the latent norms, ``q_up.w`` [ql or h, qh*(nope+r)], the absorbed
    ``uk.w`` [qh, nope, c] and ``uv.w`` [qh, c, v], ``o.w`` [qh*v, h]."""
    H = s.H
    out[p + "mla_down.w"] = ((H, s.nd), "bf16")
    if s.ql:
        out[p + "q_a_norm.w"] = ((s.ql,), "bf16")
    out[p + "kv_a_norm.w"] = ((s.c,), "bf16")
    out[p + "q_up.w"] = ((s.ql or H, s.qh * (s.nope + s.r)), "bf16")
    out[p + "uk.w"] = ((s.qh, s.nope, s.c), "bf16")
    out[p + "uv.w"] = ((s.qh, s.c, s.v), "bf16")
    out[p + "o.w"] = ((s.qh * s.v, H), "bf16")


def _gqa_weight_specs(out: dict, p: str, s: WorkloadShapes, arch: ModelArch) -> None:
    """Grouped-query attention weights of one layer (qkv, biases, q/k norms, sinks, o)."""
    H = s.H
    out[p + "qkv.w"] = ((H, s.nq), "bf16")
    if arch.attn_bias or arch.qkv_bias:
        out[p + "qkv.b"] = ((s.nq,), "bf16")
    if arch.qk_norm:
        out[p + "q_norm.w"] = ((s.hd,), "bf16")
        out[p + "k_norm.w"] = ((s.hd,), "bf16")
    if arch.attention_sinks:
        out[p + "sink_scale"] = ((1, s.qh, 1, 1), "bf16")
    out[p + "o.w"] = ((s.qh * s.hd, H), "bf16")
    if arch.attn_bias:
        out[p + "o.b"] = ((H,), "bf16")


def _kv_specs(s: WorkloadShapes) -> dict[str, tuple[tuple[int, ...], str]]:
    """name -> (shape, dtype) of one copy of the region's KV caches (all microbatches)."""
    out = {}
    for j in range(s.P):
        if s.mla:  # one compressed (latent + rope key) head shared by all query heads
            out[f"L{j}.ckv_cache"] = ((s.R, 1, s.kv_len[j], s.c + s.r), "bf16")
            continue
        shp = (s.R, s.kvh, s.kv_len[j], s.hd)
        out[f"L{j}.k_cache"] = (shp, "bf16")
        out[f"L{j}.v_cache"] = (shp, "bf16")
    return out


def act_specs(s: WorkloadShapes, graph: OpGraph) -> dict[str, tuple[tuple[int, ...], str]]:
    """name -> (shape, dtype) of one microbatch's activation buffers."""
    Rm, H = s.Rm, s.H
    out: dict[str, tuple[tuple[int, ...], str]] = {}
    for j in range(s.P):
        out[f"resid.{j}"] = ((Rm, H), "bf16")  # resid.P aliases resid.0
        p = f"L{j}."
        out[p + "xn"] = ((Rm, H), "bf16")
        if s.mla:
            cr = s.c + s.r
            out[p + "latent"] = ((Rm, s.nd), "bf16")
            out[p + "q_full"] = ((Rm, s.qh * (s.nope + s.r)), "bf16")
            out[p + "q_nl"] = ((s.qh, Rm, s.c), "bf16")
            out[p + "q_lat"] = ((Rm, s.qh, cr), "bf16")
            out[p + "q"] = ((Rm, s.qh, cr), "bf16")
            out[p + "attn_lat"] = ((Rm, s.qh, s.c), "bf16")
            out[p + "o_heads"] = ((s.qh, Rm, s.v), "bf16")
            out[p + "attn_out"] = ((Rm, s.qh * s.v), "bf16")
        else:
            out[p + "qkv"] = ((Rm, s.nq), "bf16")
            out[p + "q"] = ((Rm, s.qh, s.hd), "bf16")
            out[p + "attn_out"] = ((Rm, s.qh * s.hd), "bf16")
        out[p + "o_part"] = ((Rm, H), "bf16")
        out[p + "h"] = ((Rm, H), "bf16")
        out[p + "hn"] = ((Rm, H), "bf16")
        if s.mlp_kinds[j] == "moe":
            if s.Fs:
                out[p + "shared_gu"] = ((Rm, 2 * s.Fs), "bf16")
                out[p + "shared_act"] = ((Rm, s.Fs), "bf16")
                out[p + "shared_y"] = ((Rm, H), "bf16")
            out[p + "logits"] = ((s.Tr, s.E), "fp32")
            out[p + "topk_w"] = ((s.Tr, s.k), "fp32")
            out[p + "topk_i"] = ((s.Tr, s.k), "int64")
            out[p + "x_exp"] = ((s.n_hit, s.cap, H), "bf16")
            out[p + "gu_exp"] = ((s.n_hit, s.cap, 2 * s.F), "bf16")
            out[p + "act_exp"] = ((s.n_hit, s.cap, s.F), "bf16")
            out[p + "y_exp"] = ((s.n_hit, s.cap, H), "bf16")
        else:
            out[p + "gu"] = ((Rm, 2 * s.I), "bf16")
            out[p + "act"] = ((Rm, s.I), "bf16")
            out[p + "y"] = ((Rm, H), "bf16")
    for i, kern in enumerate(graph.kernels):
        n = _comm_elems(kern)
        if n:
            out[f"stage.{i}"] = ((n,), "bf16")
    return out


def _nbytes(specs: dict) -> int:
    return int(sum(math.prod(shp) * _ELEM[dt] for shp, dt in specs.values()))


def estimate_bytes(graph: OpGraph, instances: int | None = None, kv_cache: str = "per_instance",
                   workspace_bytes: float = 2 * _GIB) -> dict[str, float]:
    """Device memory a ``TorchWorkload`` of ``graph`` needs, computed before allocating anything.

    Args:
        graph: the per-GPU region graph (from ``build_graph`` with bf16 experts).
        instances: region instances with their own weights (default: all ``num_regions``).
        kv_cache: ``"per_instance"`` or ``"shared"`` (see the module docstring).
        workspace_bytes: allowance for cuBLAS workspaces, temporaries and graph pools.

    Returns:
        bytes of ``weights``, ``kv``, ``activations``, ``workspace``, ``total``; and
        ``weights_per_instance``, ``kv_per_copy``, ``activations_per_microbatch``.

    Raises:
        ValueError: bad ``instances``/``kv_cache``, or a graph the workload cannot run.
    """
    s = workload_shapes(graph)
    n = _instances(graph, instances)
    if kv_cache not in ("per_instance", "shared"):
        raise ValueError(f"kv_cache must be 'per_instance' or 'shared' here, got {kv_cache!r}")
    w = _nbytes(_weight_specs(s, graph.arch))
    kv = _nbytes(_kv_specs(s))
    act = _nbytes(act_specs(s, graph))
    consts = 8 * (s.n_hit * s.cap + s.Rm * s.k + s.Rm) if s.moe else 0
    n_kv = n if kv_cache == "per_instance" else 1
    tot = w * n + kv * n_kv + act * s.m + consts + workspace_bytes
    return {"weights": float(w * n), "kv": float(kv * n_kv), "activations": float(act * s.m),
            "workspace": float(workspace_bytes + consts), "total": float(tot),
            "weights_per_instance": float(w), "kv_per_copy": float(kv),
            "activations_per_microbatch": float(act), "instances": n, "kv_copies": n_kv}


def _instances(graph: OpGraph, instances: int | None) -> int:
    if instances is None:
        return graph.num_regions
    if isinstance(instances, bool) or not isinstance(instances, int) or not \
            1 <= instances <= graph.num_regions:
        raise ValueError(f"TorchWorkload: instances must be an integer in 1..{graph.num_regions}, "
                         f"got {instances!r}")
    return instances


# --------------------------------------------------------------------------- the workload

def _torch():
    try:
        import torch  # type: ignore
    except Exception as e:
        raise ImportError(f"TorchWorkload needs torch ({e.__class__.__name__}: {e}); install the "
                          "'gpu' extra") from None
    return torch


class TorchWorkload(VirtualCollectives):
    """Buffers and kernel callables for one per-GPU region graph.

    Args:
        graph: from ``build_graph(hopper_arch(arch), deployment, microbatches)``.
        device: torch device (``"cuda"``, ``"cuda:0"``; ``"cpu"`` runs everything except the
            spins, for tests).
        instances: region instances with their own weights (and KV when per-instance); a launch
            for instance l uses copy ``l % instances``. Default: all ``graph.num_regions``.
        kv_cache: ``"auto"``, ``"per_instance"`` or ``"shared"``.
        seed: RNG seed of the random weights/caches.
        comm_floor_us, link_Bps: the virtual collective's floor and link bandwidth.
        copy_Bps: copy bandwidth used to subtract the payload copy from the spin (H200: 4245e9).
        spin: emulate the link time with ``torch.cuda._sleep`` (CUDA only; ``--collectives
            sleep``). proxy: run each collective as the paced collective proxy instead
            (``hw_runtime.gpu.collectives``, ``--collectives proxy``; CUDA only; not with spin).
            dist: a ``distributed.DistContext``: each collective is a real one over this
            rank's groups (``--collectives nccl``; not with spin or proxy).
        elementwise, attention: the elementwise kernels (``"auto"``, ``"triton"``, ``"torch"``:
            ``fused.resolve``) and the decode attention (``"auto"``, ``"sdpa"``, ``"triton"``,
            ``"flashinfer"``: ``decode_attn.resolve``); ``self.elementwise``/``self.attention``: resolved.
        moe_gemm: the expert GEMMs (``"auto"``, ``"triton"``: one grouped launch over the
            routed tokens with the gather and activation fused, ``"bmm"``: gather + batched
            GEMMs over padded expert batches; ``moe_gemm.resolve``); ``self.moe_gemm``:
            resolved (``"bmm"`` or ``"triton"``; None for a region without MoE layers). With Triton,
            GPT-OSS's interleaved gate/up columns are stored as gate then up halves (once, at
            allocation, as vLLM loads them).
        workspace_bytes: memory kept free for workspaces/temporaries.
        residual_of: another region kind's workload of the same model, deployment and
            microbatch count whose residual stream this one reads and writes
            (``share_residual``): the region kinds of one forward pass (``build_forward``:
            DeepSeek-V3's dense then MoE layers) then run one after the other on the same tokens.

    Raises:
        ValueError: a graph the workload cannot run, bad arguments.
        WorkloadMemoryError: the GPU's free memory is below ``estimate_bytes(...)["total"]``
            (nothing is allocated then).
        ImportError: torch is missing.
    """

    def __init__(self, graph: OpGraph, device: str = "cuda", instances: int | None = None,
                 kv_cache: str = "auto", seed: int = 0, comm_floor_us: float = 3.0,
                 link_Bps: float = 450e9, copy_Bps: float = 4245e9, spin: bool = True,
                 proxy: bool = False, dist: Any = None,
                 workspace_bytes: float = 2 * _GIB, residual_of: "TorchWorkload | None" = None,
                 elementwise: str = "auto", attention: str = "auto",
                 moe_gemm: str = "auto") -> None:
        torch = _torch()
        self.torch = torch
        self.graph = graph
        self.arch, self.deployment = _need_graph(graph)
        self.shapes = s = workload_shapes(graph)
        self.instances = _instances(graph, instances)
        if kv_cache not in ("auto", "per_instance", "shared"):
            raise ValueError(f"TorchWorkload: kv_cache must be 'auto', 'per_instance' or 'shared', "
                             f"got {kv_cache!r}")
        self.device = torch.device(device)
        self.is_cuda = self.device.type == "cuda"
        if self.is_cuda and not torch.cuda.is_available():
            raise ValueError("TorchWorkload: device is CUDA but torch sees no GPU")
        self.comm_floor_us, self.link_Bps, self.copy_Bps = comm_floor_us, link_Bps, copy_Bps
        if spin and proxy:
            raise ValueError("TorchWorkload: spin (--collectives sleep) and proxy (--collectives "
                             "proxy) exclude each other")
        self.spin, self.proxy = bool(spin) and self.is_cuda, bool(proxy) and self.is_cuda
        if dist is not None and (spin or proxy):
            raise ValueError("TorchWorkload: dist (--collectives nccl) runs real collectives; "
                             "it excludes spin and proxy")
        # the index of the stream issuing the next launch (set by the executor where it matters:
        # real collectives keep one communicator per lane, FlashInfer one workspace per lane)
        self.dist, self.lane = dist, 0
        self.elementwise = resolve_elementwise(elementwise, self.is_cuda)
        self.attention = resolve_attention(attention, self.is_cuda, self.arch.is_mla)
        self.moe_gemm_policy = moe_gemm       # as asked: other region kinds resolve it too
        self.moe_gemm = resolve_moe_gemm(moe_gemm, self.is_cuda, s.cap) if s.moe else None
        # the GPU's SMs; the pool of the next launch (set by the executor; None: whole GPU)
        self.device_sms, self.pool_sms = (torch.cuda.get_device_properties(
            self.device).multi_processor_count if self.is_cuda else 1), None
        # ---- memory check before allocating anything
        free = None
        if self.is_cuda:
            free, _total = torch.cuda.mem_get_info(self.device)
        if kv_cache == "auto":
            per = estimate_bytes(graph, self.instances, "per_instance", workspace_bytes)
            kv_cache = "per_instance" if (free is None or per["total"] <= free) else "shared"
        self.kv_cache = kv_cache
        self.memory = estimate_bytes(graph, self.instances, kv_cache, workspace_bytes)
        if free is not None and self.memory["total"] > free:
            mm = self.memory
            raise WorkloadMemoryError(
                f"TorchWorkload needs {mm['total'] / 1e9:.1f} GB (weights {mm['weights'] / 1e9:.1f}, "
                f"KV {mm['kv'] / 1e9:.1f}, activations {mm['activations'] / 1e9:.2f}, workspace "
                f"{mm['workspace'] / 1e9:.1f}) but the GPU has {free / 1e9:.1f} GB free; use "
                f"kv_cache='shared' or fewer instances")
        # ---- allocate
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(int(seed))
        wspec, kvspec, aspec = (_weight_specs(s, self.arch), _kv_specs(s),
                                act_specs(s, graph))
        self.weights = [self._alloc_weights(wspec) for _ in range(self.instances)]
        if self.moe_gemm == "triton" and self.arch.family == "gpt_oss":
            for w in self.weights:
                deinterleave_gate_up(w)
        n_kv = self.instances if kv_cache == "per_instance" else 1
        self.kv = [{nm: self.rand(shp, 1.0) for nm, (shp, _) in kvspec.items()}
                   for _ in range(n_kv)]
        self.acts = []
        for _ in range(s.m):
            a = {nm: self.rand(shp, 1.0, dt) for nm, (shp, dt) in aspec.items()}
            a[f"resid.{s.P}"] = a["resid.0"]  # the region's output is the next instance's input
            self.acts.append(a)
        if residual_of is not None:
            self.share_residual(residual_of)
        self._consts()
        self._cycles_per_us = self._calibrate_spin() if self.spin else 0.0
        self._fns = [self._make(i, kern) for i, kern in enumerate(graph.kernels)]
        if self.is_cuda:
            torch.cuda.synchronize(self.device)

    # ---------------------------------------------------------------- allocation helpers
    def _dtype(self, dt: str):
        t = self.torch
        return {"bf16": t.bfloat16, "fp32": t.float32, "int64": t.int64}[dt]

    def rand(self, shape, std: float, dt: str = "bf16"):
        t = self.torch
        if dt == "int64":
            return t.zeros(shape, dtype=t.int64, device=self.device)
        x = t.empty(shape, dtype=self._dtype(dt), device=self.device)
        x.normal_(0.0, std, generator=self.generator)
        return x

    def _alloc_weights(self, spec) -> dict:
        out = {}
        for nm, (shp, _dt) in spec.items():
            if nm.endswith("norm.w"):
                out[nm] = self.torch.ones(shp, dtype=self.torch.bfloat16, device=self.device)
            elif nm.endswith("sink_scale"):
                x = self.torch.empty(shp, dtype=self.torch.float32, device=self.device)
                x.uniform_(0.6, 1.0, generator=self.generator)
                out[nm] = x.to(self.torch.bfloat16)
            elif nm.endswith(".b"):
                out[nm] = self.rand(shp, 0.02)
            elif nm.endswith(".corr"):  # fp32 routing-score correction bias (DeepSeek-V3)
                out[nm] = self.rand(shp, 0.02, "fp32")
            else:  # fan-in scaled so activations stay O(1)
                fan_in = shp[-2]
                out[nm] = self.rand(shp, 1.0 / math.sqrt(fan_in))
        return out

    def _consts(self) -> None:
        """``self.consts`` (``WorkloadConsts``) of this graph."""
        t, s = self.torch, self.shapes
        pos = s.kv_history - 1
        rope = {}
        for nm, d in (("", s.hd), ("_r", s.r)):
            if not d:
                continue
            inv = 1.0 / (10000.0 ** (t.arange(0, d // 2, dtype=t.float64) * 2.0 / d))
            ang = pos * inv
            rope["rope_cos" + nm] = t.cos(ang).to(t.bfloat16).to(self.device)
            rope["rope_sin" + nm] = t.sin(ang).to(t.bfloat16).to(self.device)
        moe = {}
        if s.moe:
            rows = s.n_hit * s.cap
            moe["wsel_idx"] = (t.arange(s.Rm) % s.Tr).to(self.device)
            if self.moe_gemm == "triton":   # (moe_gemm.static_routing)
                counts, src, slot = static_routing(s.A, s.n_hit, s.cap, s.Tr)
                moe["routing"] = routed_tokens(t.tensor(src, device=self.device), counts, s.cap)
                moe["comb_idx"] = t.tensor([slot[j % s.A] for j in range(s.Rm * s.k)],
                                           device=self.device)
            else:
                moe["disp_idx"] = (t.arange(rows) % s.Tr).to(self.device)
                moe["comb_idx"] = (t.arange(s.Rm * s.k) % rows).to(self.device)
        # the decode attention's own state (FlashInfer: one wrapper per KV length)
        attn = ATTENTION_BACKENDS[self.attention].workload_consts(t, s, self.device)
        self.consts = WorkloadConsts(**rope, **moe, **attn)

    # ---------------------------------------------------------------- kernels
    def _make(self, i: int, kern: Kernel):
        """The callable ``f(mu, l)`` of kernel ``i`` (built by its op's ``kernels.KERNELS`` entry).

        Raises:
            ValueError: an op the workload does not implement.
        """
        return kernel_builder(kern, self.arch)(KernelContext(self, i, kern))

    def share_residual(self, src: "TorchWorkload") -> None:
        """Make every microbatch's region input/output (``resid.0``, aliased by ``resid.P``)
        the buffer of ``src`` (same model, deployment and microbatch count; no copy).

        Raises:
            ValueError: ``src`` has another model, deployment, microbatch count or device.
        """
        if (src.arch != self.arch or src.deployment != self.deployment
                or src.shapes.m != self.shapes.m or src.device != self.device):
            raise ValueError("TorchWorkload.share_residual: the workloads must have the same "
                             "model, deployment, microbatch count and device")
        for a, b in zip(self.acts, src.acts):
            a["resid.0"] = a[f"resid.{self.shapes.P}"] = b["resid.0"]

    @contextlib.contextmanager
    def issuing(self, sms: int | None = None, lane: int = 0):
        """Within the block, launches are issued on a pool of ``sms`` SMs (None: the whole GPU)
        from stream ``lane``: what the pool-sized decode attentions size their KV split by and
        FlashInfer keys its workspace by (``pool_sms``, ``lane``; the executor sets them per
        launch itself). Restores the previous values on exit. For launchers outside the
        executor that capture kernels on a pool (calibration co-runs, ``time_kernels``).

        Raises:
            ValueError: ``sms`` not a positive int or None, ``lane`` not an int >= 0.
        """
        if sms is not None:
            pos_int(sms, "TorchWorkload.issuing: sms")
        if isinstance(lane, bool) or not isinstance(lane, int) or lane < 0:
            raise ValueError(f"TorchWorkload.issuing: lane must be an int >= 0, got {lane!r}")
        old = (self.pool_sms, self.lane)
        self.pool_sms, self.lane = (None if sms is None else int(sms)), lane
        try:
            yield self
        finally:
            self.pool_sms, self.lane = old

    def derive(self, graph: OpGraph) -> "TorchWorkload":
        """A workload for ``graph`` that SHARES this one's weights and KV caches and owns new
        activation buffers (one device copy of the weights and caches serves every microbatch
        count); ``self`` when ``graph`` has the same microbatch count.

        ``graph`` must be the same model and deployment (any microbatch count). KV rows of
        microbatch mu are rows ``mu*R/m .. (mu+1)*R/m`` of the shared caches, as here. Every
        kernel choice and collective setting is this workload's. Activation memory:
        ``estimate_bytes(graph)["activations"]`` (tens of MB).

        Raises:
            ValueError: another model/deployment.
        """
        if graph.arch != self.arch or graph.deployment != self.deployment:
            raise ValueError("derive_workload: the graph's model/deployment differs from the base "
                             "workload's")
        if graph.microbatches == self.graph.microbatches:
            return self
        W = object.__new__(TorchWorkload)
        keep = ("torch", "arch", "deployment", "instances", "device", "is_cuda", "comm_floor_us",
                "link_Bps", "copy_Bps", "spin", "proxy", "dist", "elementwise", "attention",
                "moe_gemm", "moe_gemm_policy", "device_sms", "kv_cache", "weights", "kv",
                "_cycles_per_us")
        for name in keep:
            setattr(W, name, getattr(self, name))
        W.graph, W.lane, W.pool_sms = graph, 0, None
        W.shapes = s = workload_shapes(graph)
        W.memory = estimate_bytes(graph, self.instances, self.kv_cache)
        W.generator = self.torch.Generator(device=self.device)
        W.generator.manual_seed(1 + graph.microbatches)
        W.acts = []
        for _ in range(s.m):
            a = {nm: W.rand(shp, 1.0, dt) for nm, (shp, dt) in act_specs(s, graph).items()}
            a[f"resid.{s.P}"] = a["resid.0"]
            W.acts.append(a)
        W._consts()
        W._fns = [W._make(i, k) for i, k in enumerate(graph.kernels)]
        return W

    # ---------------------------------------------------------------- public API
    def kernel_fn(self, i: int):
        """The callable ``f(mu, l)`` that issues kernel ``i`` (``launch`` without its checks)."""
        return self._fns[i]

    @property
    def n(self) -> int:
        """Kernels in the region."""
        return self.graph.n

    def launch(self, kernel_index: int | str, microbatch: int = 0, region_instance: int = 0
               ) -> None:
        """Run one kernel's work on the current torch stream (asynchronously).

        Args:
            kernel_index: index (or name, e.g. ``"L1.attn"``) of the kernel in the region.
            microbatch: 0..m-1 (selects the activation buffers and the KV rows).
            region_instance: 0..num_regions-1 (selects the weights/KV copy ``l % instances``).

        Raises:
            ValueError: an index out of range (names the valid range).
        """
        i = self.graph.index(kernel_index)
        m, L = self.shapes.m, self.graph.num_regions
        if isinstance(microbatch, bool) or not 0 <= int(microbatch) < m:
            raise ValueError(f"TorchWorkload.launch: microbatch must be in 0..{m - 1}, got "
                             f"{microbatch!r}")
        if isinstance(region_instance, bool) or not 0 <= int(region_instance) < L:
            raise ValueError(f"TorchWorkload.launch: region_instance must be in 0..{L - 1}, got "
                             f"{region_instance!r}")
        self._fns[i](int(microbatch), int(region_instance))

    def launch_region(self, microbatch: int = 0, region_instance: int = 0,
                      kernels: Sequence[int] | None = None) -> None:
        """Launch kernels (default: all, in order) of one region instance for one microbatch."""
        for i in (range(self.n) if kernels is None else kernels):
            self.launch(i, microbatch, region_instance)

    def output(self, microbatch: int = 0):
        """The residual stream of a microbatch (the region's input and output buffer)."""
        return self.acts[microbatch]["resid.0"]

    def kernel_info(self, i: int) -> dict:
        """Analytical work of kernel ``i`` (from the graph) plus the collective's floor."""
        k = self.graph.kernels[i]
        return {"name": k.name, "op": k.op, "category": k.category, "flops": k.flops,
                "hbm_bytes": k.hbm_bytes, "weight_bytes": k.weight_bytes,
                "kv_bytes": k.kv_bytes, "act_bytes": k.act_bytes, "comm_bytes": k.comm_bytes,
                "comm_target_us": self.comm_target_us(k)}

    def summary(self) -> dict:
        """JSON-able description of shapes, memory and settings."""
        s = self.shapes
        return {"shapes": {f: getattr(s, f) for f in s.__dataclass_fields__},
                "memory_bytes": self.memory, "kv_cache": self.kv_cache,
                "instances": self.instances, "spin_cycles_per_us": self._cycles_per_us,
                "comm_floor_us": self.comm_floor_us, "link_Bps": self.link_Bps,
                "expert_dtype": self.arch.expert_dtype, "device": str(self.device)}
