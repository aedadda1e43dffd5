"""The pure side of ``workload.TorchWorkload``: the per-GPU, per-microbatch shapes of a region
(``workload_shapes``), the names, shapes and datatypes of its weight, KV-cache and activation
buffers (``weight_specs``, ``kv_specs``, ``act_specs``) and the device memory they need
(``estimate_bytes``), all from the graph, before anything is allocated. No torch needed
(tested on the CPU); what each kernel does with the buffers is in ``workload``'s docstring.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from subgpu_jax.model.graph import Kernel, OpGraph
from subgpu_jax.model.localshapes import LocalShapes
from subgpu_jax.model.models import ModelArch
from subgpu_jax.model.routing import busiest_rank_load, rank_count_variance

__all__ = [
    "WorkloadShapes", "WorkloadConsts", "workload_shapes", "weight_specs", "kv_specs",
    "act_specs", "estimate_bytes", "need_graph", "region_instances", "GIB",
]

#: One GiB in bytes (the workspace allowance's unit).
GIB = float(2 ** 30)
_ELEM = {"bf16": 2, "fp32": 4, "int64": 8}


@dataclass(frozen=True, kw_only=True)
class WorkloadShapes(LocalShapes):
    """Per-GPU, per-microbatch shapes of a region (derived from the graph; no torch needed): the
    model's per-GPU shapes (``LocalShapes``: H, qh, kvh, hd, nq, t, e, the MLP and expert sizes,
    the MLA dims) for the region's layers (I is 0 where the region has no dense layer; E, El, F,
    Fs are 0 where it has no MoE layer), and what the region's batch and KV caches add.

    Attributes (besides ``LocalShapes``'s):
        R, m, Rm: attention requests per GPU, microbatches, requests per microbatch.
        kv_history: tokens in each request's cache.
        layer_kinds: ``"full"``/``"sliding"`` per layer of the region.
        kv_len: KV slots of each layer (history, or the window); kv_pos: the appended slot.
        moe: some layer of the region is MoE. k: top-k. Tr: tokens routed by this GPU per
        microbatch; A: expert assignments received; n_hit: local experts hit; cap: tokens per
        hit expert (padded).
        mlp_kinds: ``"dense"``/``"moe"`` per layer of the region (a region may mix both);
        dense: some layer of the region is dense.
    """

    R: int
    m: int
    Rm: int
    kv_history: int
    layer_kinds: tuple[str, ...]
    kv_len: tuple[int, ...]
    kv_pos: tuple[int, ...]
    moe: bool
    k: int = 0
    Tr: int = 0
    A: int = 0
    n_hit: int = 0
    cap: int = 0
    mlp_kinds: tuple[str, ...] = ()
    dense: bool = False

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


def need_graph(graph: OpGraph) -> tuple[ModelArch, Any]:
    """``(arch, deployment)`` of a graph a workload can run.

    Raises:
        TypeError: not an ``OpGraph``. ValueError: a graph without arch or deployment (a
            synthetic chain).
    """
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
    arch, dep = need_graph(graph)
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
    ls = LocalShapes.of(arch, dep)      # the per-GPU shapes the graph builder uses too
    if ls.qh % ls.kvh:
        raise ValueError(f"TorchWorkload: {ls.qh} local q heads are not a multiple of {ls.kvh} "
                         "KV heads")
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
    # the region's own sizes: none of the dense MLP without a dense layer, none of the
    # experts without an MoE layer
    local = dict(dataclasses.asdict(ls), I=ls.I if dense else 0, E=0, El=0, F=0, Fs=0)
    common = dict(local, R=R, m=m, Rm=Rm, kv_history=dep.kv_history, layer_kinds=kinds,
                  kv_len=tuple(kv_len), kv_pos=tuple(kv_pos), moe=moe, mlp_kinds=mlp_kinds,
                  dense=dense)
    if moe:
        E, k, e, El = ls.E, arch.top_k, ls.e, ls.El
        Tr = max(1, int(round(Rm / ls.t)))
        # G*k/n assignments per GPU whatever e; its EP group routes G*e/(n*m) tokens
        # the busiest EP rank's assignments and distinct experts, as the graph charges them
        load = busiest_rank_load(E, k, e, dep.global_batch, dep.num_gpus, m,
                                 dep.expert_load_factor(k, m, rank_count_variance(
                                     E, k, e, arch.n_group, arch.topk_group)))
        A = max(1, int(round(load.assignments)))
        hit = load.experts_hit
        n_hit = int(min(El, max(1, round(hit))))
        cap = int(math.ceil(A / n_hit))
        return WorkloadShapes(**dict(common, E=E, El=El, F=ls.F, Fs=ls.Fs), k=k, Tr=Tr, A=A,
                              n_hit=n_hit, cap=cap)
    return WorkloadShapes(**common)


def _comm_elems(kernel: Kernel) -> int:
    return int(math.ceil(kernel.comm_bytes / 2.0)) if kernel.is_comm else 0


def weight_specs(s: WorkloadShapes, arch: ModelArch) -> dict[str, tuple[tuple[int, ...], str]]:
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


def kv_specs(s: WorkloadShapes) -> dict[str, tuple[tuple[int, ...], str]]:
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
                   workspace_bytes: float = 2 * GIB) -> dict[str, float]:
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
    n = region_instances(graph, instances)
    if kv_cache not in ("per_instance", "shared"):
        raise ValueError(f"kv_cache must be 'per_instance' or 'shared' here, got {kv_cache!r}")
    w = _nbytes(weight_specs(s, graph.arch))
    kv = _nbytes(kv_specs(s))
    act = _nbytes(act_specs(s, graph))
    consts = 8 * (s.n_hit * s.cap + s.Rm * s.k + s.Rm) if s.moe else 0
    n_kv = n if kv_cache == "per_instance" else 1
    tot = w * n + kv * n_kv + act * s.m + consts + workspace_bytes
    return {"weights": float(w * n), "kv": float(kv * n_kv), "activations": float(act * s.m),
            "workspace": float(workspace_bytes + consts), "total": float(tot),
            "weights_per_instance": float(w), "kv_per_copy": float(kv),
            "activations_per_microbatch": float(act), "instances": n, "kv_copies": n_kv}


def region_instances(graph: OpGraph, instances: int | None) -> int:
    """Region instances with their own weights: ``instances``, or all ``graph.num_regions``
    when None.

    Raises:
        ValueError: not an integer in 1..``graph.num_regions``.
    """
    if instances is None:
        return graph.num_regions
    if isinstance(instances, bool) or not isinstance(instances, int) or not \
            1 <= instances <= graph.num_regions:
        raise ValueError(f"TorchWorkload: instances must be an integer in 1..{graph.num_regions}, "
                         f"got {instances!r}")
    return instances
