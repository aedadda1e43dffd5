"""Deployments and the per-GPU operator graph of one repeating region.

Batch accounting (docs/method.md §5; used everywhere in the package):

* A global decode batch of G requests produces G tokens per step.
* Attention TP t x DP d on n = t*d GPUs: each attention group serves R = G/d requests and every GPU
  of the group runs attention for those R requests over its 1/t share of the query heads. KV heads
  are split over t too; when there are fewer KV heads than t they are replicated (t must then be
  a multiple of the KV heads), so a GPU holds max(1, kv_heads / t) of them; KV heads that neither
  divide nor are divided by t are refused. Multi-head latent attention (DeepSeek-V3) keeps one
  compressed cache shared by all heads: every TP rank holds it whole for its R requests.
* MoE EP e: each GPU hosts E/e experts. The n/e EP groups are replicas, each serving the tokens
  of its share of the GPUs, so each GPU receives on average G*k/n token-expert assignments per
  layer (k = top-k) whatever e. Each GPU routes (router + top-k + dispatch) its 1/t share of its
  group's tokens, G/n tokens, so every token is routed once.
* Microbatching splits the per-GPU work into m equal parts: R/m requests of attention,
  G*k/(n*m) expert assignments, G/(n*m) routed tokens. All GPUs run microbatch mu together; an
  EP group routes G*e/(n*m) tokens of it, so the expected number of distinct local experts its
  assignments hit, under uniform top-k routing, is (E/e) * (1 - (1 - k/E)^(G*e/(n*m))).
* Weight-only quantised experts (MXFP4/FP8 weights, bf16 activations) compute at the activation
  datatype's rate (``ModelArch.expert_act_dtype``), reading the narrow weight bytes.
* Per-user throughput = 1 / step time; per-GPU throughput = G / n / step time (tokens/s).

The region is one layer, or the model's repeating pattern of layer kinds (two layers, sliding then
full attention, for GPT-OSS). A model whose layers are not periodic (DeepSeek-V3: 3 dense layers,
then 58 MoE layers) has several region kinds: ``build_forward`` returns each kind's graph with its
run of instances, and the head kernels (final norm, LM head, sampling, embedding lookup) that end
the step. Kernels are listed in the order an optimised engine launches them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable

import networkx as nx
import numpy as np

from subgpu_jax.model.deployment import REFERENCE_DEPLOYMENT, Deployment
from subgpu_jax.model.hardware import DTYPE_BYTES, Hardware
from subgpu_jax.model.kernelcost import ANALYTIC_MODEL, op_cost
from subgpu_jax.model.models import ModelArch, expected_distinct

__all__ = [
    "Deployment", "Kernel", "OpGraph", "build_graph", "CATEGORIES", "REFERENCE_DEPLOYMENT",
    "StaticDurationModel", "ForwardPass", "build_forward", "head_kernels",
]

#: Reporting categories (docs/method.md §5), in display order.
CATEGORIES: tuple[str, ...] = (
    "norm_qkv", "attn_full", "attn_sliding", "out_residual", "router_dispatch", "mlp", "combine",
    "head",
)


@dataclass(frozen=True)
class Kernel:
    """One kernel of the region, with its analytical work for ONE microbatch.

    Attributes:
        name: unique within the region, ``"L{j}.{op}"`` with j the layer inside the region.
        op: operator kind (``rmsnorm``, ``qkv``, ``rope_kv``, ``attn``, ``o_proj``, ``allreduce``,
            ``router``, ``topk``, ``dispatch``, ``expert_up``, ``expert_down``, ``combine``,
            ``mlp_up``, ``mlp_down``, ``residual_norm``; multi-head latent attention:
            ``mla_down``, ``mla_q_up``, ``mla_v_up``; the step's head: ``final_norm``,
            ``lm_head``, ``sample``, ``embed``).
        category: one of ``CATEGORIES``.
        layer: layer index inside the region (0-based).
        flops: arithmetic work (FLOP).
        dtype: operand datatype of the tensor work (key of ``DTYPE_BYTES``).
        tensor: True when the FLOPs run on tensor cores, False for CUDA-core (vector) work.
        weight_objects: ``((name, bytes), ...)`` weights read (logical objects for the L2 model).
        act_reads: ``((name, bytes), ...)`` activations read.
        act_writes: ``((name, bytes), ...)`` activations written.
        kv_bytes: streaming KV-cache bytes read or appended (never cached in L2).
        comm_bytes: bytes each GPU sends for this collective (0 if none).
        scaleout_bytes: the part of ``comm_bytes`` that crosses the scale-out network
            (``Deployment.comm_split``); the rest goes over NVLink.
        scaleout_Bps: scale-out bandwidth per GPU (bytes/s; 0 when ``scaleout_bytes`` is 0).
        ctas: thread blocks launched; a kernel can use at most this many SMs.
    """

    name: str
    op: str
    category: str
    layer: int
    flops: float
    dtype: str
    tensor: bool
    weight_objects: tuple[tuple[str, float], ...] = ()
    act_reads: tuple[tuple[str, float], ...] = ()
    act_writes: tuple[tuple[str, float], ...] = ()
    kv_bytes: float = 0.0
    comm_bytes: float = 0.0
    ctas: int = 1
    scaleout_bytes: float = 0.0
    scaleout_Bps: float = 0.0

    @property
    def weight_bytes(self) -> float:
        """Sum of weight object bytes."""
        return float(sum(b for _, b in self.weight_objects))

    @property
    def act_bytes(self) -> float:
        """Sum of activation bytes read and written."""
        return float(sum(b for _, b in self.act_reads) + sum(b for _, b in self.act_writes))

    @property
    def hbm_bytes(self) -> float:
        """All bytes the kernel moves through the memory system (weights+activations+KV)."""
        return self.weight_bytes + self.act_bytes + self.kv_bytes

    def link_bytes(self, nvlink_Bps: float) -> float:
        """The payload in NVLink-equivalent bytes: the NVLink and scale-out parts move at the
        same time, so the collective takes max(nvlink part / NVLink, scale-out part /
        scale-out) = ``link_bytes / nvlink_Bps``. Equals ``comm_bytes`` inside one domain."""
        if self.scaleout_bytes <= 0:
            return float(self.comm_bytes)
        return float(max(self.comm_bytes - self.scaleout_bytes,
                         self.scaleout_bytes * nvlink_Bps / self.scaleout_Bps))

    @property
    def is_comm(self) -> bool:
        """True for a collective ("virtual kernel") that sends ``comm_bytes`` over NVLink."""
        return self.comm_bytes > 0


@dataclass(frozen=True)
class OpGraph:
    """The per-GPU operator DAG of one region, for one microbatch of work.

    Attributes:
        kernels: nodes in launch order (a topological order).
        edges: ``(u, v)`` data dependencies inside the region (kernel indices).
        cross_edges: ``(u, v)``: kernel v of region instance l consumes kernel u of instance l-1
            (the residual stream; may skip segments).
        num_regions: L, instances of this region in one forward pass (of this region kind, when
            the model has several: see ``build_forward``).
        layers_per_region: layers in one region (1, or 2 for GPT-OSS).
        microbatches: m, the per-GPU work of a step is split into this many microbatches.
        arch: the model.
        deployment: the deployment.
        region_kinds: per-layer ``(attention, MLP)`` kinds of the region (``build_graph``;
            empty for synthetic graphs).
    """

    kernels: tuple[Kernel, ...]
    edges: tuple[tuple[int, int], ...]
    cross_edges: tuple[tuple[int, int], ...]
    num_regions: int
    layers_per_region: int
    microbatches: int
    arch: ModelArch | None = None
    deployment: Deployment | None = None
    region_kinds: tuple = ()
    _index: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        n = len(self.kernels)
        if n == 0:
            raise ValueError("graph.kernels must not be empty")
        for u, v in self.edges:
            if not (0 <= u < n and 0 <= v < n) or u >= v:
                raise ValueError(f"graph.edges: ({u}, {v}) must satisfy 0 <= u < v < {n} "
                                 "(kernels are listed in a topological order)")
        for u, v in self.cross_edges:
            if not (0 <= u < n and 0 <= v < n):
                raise ValueError(f"graph.cross_edges: ({u}, {v}) out of range 0..{n - 1}")
        names = [k.name for k in self.kernels]
        if len(set(names)) != n:
            raise ValueError("graph.kernels: names must be unique")
        self._index.update({nm: i for i, nm in enumerate(names)})

    @property
    def n(self) -> int:
        """Number of kernels in the region."""
        return len(self.kernels)

    def index(self, name_or_idx: str | int) -> int:
        """Kernel index from a name (``"L1.attn"``) or an index (int or digit string).

        Raises:
            ValueError: unknown name or index out of range (lists the valid names).
        """
        if isinstance(name_or_idx, (int, np.integer)) or str(name_or_idx).lstrip("-").isdigit():
            i = int(name_or_idx)
            if not 0 <= i < self.n:
                raise ValueError(f"kernel index must be in 0..{self.n - 1}, got {i}")
            return i
        if name_or_idx not in self._index:
            raise ValueError(f"kernel name must be one of {', '.join(self._index)}, "
                             f"got {name_or_idx!r}")
        return self._index[name_or_idx]

    def is_chain(self) -> bool:
        """True when ``edges`` contain every (i, i+1), i.e. the launch order is the only
        topological order (cuts are then the C(n-1, K-1) prefix splits)."""
        es = set(self.edges)
        return all((i, i + 1) in es for i in range(self.n - 1))

    def to_networkx(self) -> nx.DiGraph:
        """The region DAG as a networkx DiGraph (node attribute ``kernel``)."""
        g = nx.DiGraph()
        for i, k in enumerate(self.kernels):
            g.add_node(i, kernel=k)
        g.add_edges_from(self.edges)
        return g

    def forward_pass(self) -> nx.DiGraph:
        """The kernel-level DAG of one forward pass for one microbatch: ``num_regions`` chained
        instances, nodes ``(l, i)``, with the cross-region edges."""
        g = nx.DiGraph()
        for l in range(self.num_regions):
            for i, k in enumerate(self.kernels):
                g.add_node((l, i), kernel=k)
            g.add_edges_from(((l, u), (l, v)) for u, v in self.edges)
            if l:
                g.add_edges_from(((l - 1, u), (l, v)) for u, v in self.cross_edges)
        return g

    def totals(self) -> dict[str, float]:
        """Work of one region instance for one microbatch: FLOPs, weight/act/KV/comm bytes."""
        ks = self.kernels
        return {
            "flops": float(sum(k.flops for k in ks)),
            "weight_bytes": float(sum(k.weight_bytes for k in ks)),
            "act_bytes": float(sum(k.act_bytes for k in ks)),
            "kv_bytes": float(sum(k.kv_bytes for k in ks)),
            "comm_bytes": float(sum(k.comm_bytes for k in ks)),
        }

    def weight_params(self) -> float:
        """Parameters held by this GPU's weight objects in one region instance, converted back
        from bytes with each object's datatype; see ``build_graph`` for the full-model count."""
        return float(self._params)

    @classmethod
    def chain(cls, kernels: Iterable[Kernel], num_regions: int = 1) -> "OpGraph":
        """A synthetic chain region (edges i -> i+1, cross edge last -> first)."""
        ks = tuple(kernels)
        n = len(ks)
        return cls(kernels=ks, edges=tuple((i, i + 1) for i in range(n - 1)),
                   cross_edges=((n - 1, 0),), num_regions=num_regions, layers_per_region=1,
                   microbatches=1)


def _gemm_ctas(m: float, n: float, k: float, nbytes: float) -> int:
    """CTA count of a GEMM/GEMV: 128x128 output tiles times split-K slices of 512 along K, or one
    CTA per 1 MiB of operands, whichever is larger (assumption modelled on cuBLAS/CUTLASS decode
    GEMMs, which split K to fill the GPU when M is small)."""
    tiles = math.ceil(max(m, 1) / 128) * math.ceil(max(n, 1) / 128) * math.ceil(max(k, 1) / 512)
    return int(max(tiles, math.ceil(nbytes / 2**20), 1))


def _stream_ctas(nbytes: float, per_cta: float = 2**16) -> int:
    """CTA count of a streaming (elementwise/norm/copy) kernel: one CTA per 64 KiB (assumption)."""
    return int(max(1, math.ceil(nbytes / per_cta)))


Region = tuple  # tuple of per-layer (attention kind, MLP kind), see ModelArch.region_runs


def build_graph(arch: ModelArch, deploy: Deployment, microbatches: int = 1,
                region: Region | None = None) -> OpGraph:
    """Build the per-GPU ``OpGraph`` of one region for ONE of ``microbatches`` equal microbatches.

    Args:
        arch: the model.
        deploy: the deployment (validated against ``arch``).
        microbatches: m >= 1; must divide the per-GPU attention batch R = G/d.
        region: the region kind, a tuple of per-layer ``(attention, MLP)`` kinds from
            ``arch.region_runs()``; default ``arch.main_region()`` (the kind with most layers).

    Returns:
        The region graph; ``num_regions`` = the instances of this region kind in the forward
        pass (all of them for a model with one region kind); ``region_kinds`` = ``region``.
        ``build_forward`` gives every region kind and the step's head kernels.

    Raises:
        ValueError: invalid deployment for the model, m not dividing R (no work is dropped), or
            a region kind the model does not have.
    """
    if not isinstance(arch, ModelArch):
        raise ValueError(f"arch must be a ModelArch (models.get_model), got {type(arch).__name__}")
    if not isinstance(deploy, Deployment):
        raise ValueError(f"deploy must be a Deployment, got {type(deploy).__name__}")
    deploy.validate(arch)
    m = microbatches
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 1:
        raise ValueError(f"microbatches must be a positive integer, got {m!r}")
    R = deploy.requests_per_gpu
    if R % m:
        raise ValueError(f"microbatches={m} must divide the per-GPU attention batch "
                         f"R = global_batch/attn_dp = {R}")
    runs = arch.region_runs()
    if region is None:
        region = arch.main_region()
    region = tuple(tuple(x) for x in region)
    count = sum(c for b, c in runs if b == region)
    if not count:
        raise ValueError(f"region must be one of the model's region kinds "
                         f"{[b for b, _ in runs]}, got {region!r}")
    b = _Builder(arch, deploy, m)
    last_of_prev_layer: int | None = None
    first_ar = None
    for j, (kind, mlp) in enumerate(region):
        i_norm, i_ar = b.attention(j, kind)
        if first_ar is None:
            first_ar = i_ar
        if last_of_prev_layer is not None:
            b.edges += [(last_of_prev_layer, i_norm), (last_of_prev_layer, i_ar)]
        last_of_prev_layer = b.moe(j, i_ar) if mlp == "moe" else b.dense(j, i_ar)
    ks = b.kernels
    cross = ((len(ks) - 1, 0), (len(ks) - 1, first_ar))
    g = OpGraph(kernels=tuple(ks), edges=tuple(sorted(set(b.edges))), cross_edges=cross,
                num_regions=count, layers_per_region=len(region), microbatches=m,
                arch=arch, deployment=deploy, region_kinds=region)
    object.__setattr__(g, "_params", b.params)
    return g


class _Builder:
    """Appends the kernels of one region's layers (see ``build_graph``; accounting in the
    module docstring)."""

    def __init__(self, arch: ModelArch, deploy: Deployment, m: int) -> None:
        self.arch, self.deploy, self.m = arch, deploy, m
        self.t, self.e = deploy.attn_tp, deploy.moe_ep
        self.H = arch.hidden
        self.qh = arch.num_heads // self.t
        self.kvh = deploy.local_kv_heads(arch)
        self.ab = self.wb = DTYPE_BYTES[arch.weight_dtype]  # activations in the weight dtype
        self.kvb = DTYPE_BYTES[arch.kv_dtype]
        self.eb = DTYPE_BYTES[arch.expert_dtype]
        self.Rm = deploy.requests_per_gpu // m  # attention requests per microbatch
        self.x = self.Rm * self.H * self.ab
        self.kernels: list[Kernel] = []
        self.edges: list[tuple[int, int]] = []
        self.params = 0.0

    def add(self, **kw) -> int:
        self.kernels.append(Kernel(**kw))
        return len(self.kernels) - 1

    # ------------------------------------------------------------------ attention
    def attention(self, j: int, kind: str) -> tuple[int, int]:
        """Norm .. attention all-reduce of layer j; returns (first, last) kernel indices."""
        arch, H, Rm, x, ab, wb = self.arch, self.H, self.Rm, self.x, self.ab, self.wb
        pre = f"L{j}."
        resid_in = f"resid.{j}"
        i_norm = self.add(name=pre + "rmsnorm", op="rmsnorm", category="norm_qkv", layer=j,
                          flops=4.0 * Rm * H, dtype=arch.weight_dtype, tensor=False,
                          weight_objects=((pre + "attn_norm.w", H * wb),),
                          act_reads=((resid_in, x),), act_writes=((pre + "xn", x),),
                          ctas=max(1, Rm))
        self.params += H
        sliding = kind == "sliding"
        L_kv = self.deploy.kv_tokens(arch.sliding_window if sliding else None)
        chain = [i_norm]
        chain += self._mla(j, L_kv, sliding) if arch.is_mla else self._gqa(j, L_kv, sliding)
        # output residual: attention all-reduce + residual add + post-attention norm
        t = self.t
        self.params += H
        i_ar = self.add(name=pre + ("allreduce" if t > 1 else "residual_norm"),
                        op="allreduce" if t > 1 else "residual_norm", category="out_residual",
                        layer=j, flops=6.0 * Rm * H, dtype=arch.weight_dtype, tensor=False,
                        weight_objects=((pre + "mlp_norm.w", H * wb),),
                        act_reads=((pre + "o_part", x), (resid_in, x)),
                        act_writes=((pre + "h", x), (pre + "hn", x)),
                        **self.deploy.comm_split(2.0 * (t - 1) / t * x, t, "allreduce"),
                        ctas=_stream_ctas(4 * x))
        chain.append(i_ar)
        self.edges += list(zip(chain, chain[1:]))
        return i_norm, i_ar

    def _gqa(self, j: int, L_kv: int, sliding: bool) -> list[int]:
        """QKV, RoPE + KV append, attention, output projection (grouped-query attention)."""
        arch, H, Rm, x, ab, wb = self.arch, self.H, self.Rm, self.x, self.ab, self.wb
        qh, kvh, hd, kvb = self.qh, self.kvh, arch.head_dim, self.kvb
        pre = f"L{j}."
        nq = (qh + 2 * kvh) * hd
        bias = arch.attn_bias or arch.qkv_bias
        wq = H * nq * wb + (nq * wb if bias else 0)
        self.params += H * nq + (nq if bias else 0)
        i_qkv = self.add(name=pre + "qkv", op="qkv", category="norm_qkv", layer=j,
                         flops=2.0 * Rm * H * nq, dtype=arch.weight_dtype, tensor=True,
                         weight_objects=((pre + "qkv.w", wq),),
                         act_reads=((pre + "xn", x),), act_writes=((pre + "qkv", Rm * nq * ab),),
                         ctas=_gemm_ctas(Rm, nq, H, wq))
        kv_new = Rm * kvh * hd * 2 * kvb
        i_rope = self.add(name=pre + "rope_kv", op="rope_kv", category="norm_qkv", layer=j,
                          flops=6.0 * Rm * nq, dtype=arch.weight_dtype, tensor=False,
                          weight_objects=((pre + "qk_norm.w", 2 * hd * wb),) if arch.qk_norm
                          else (),
                          act_reads=((pre + "qkv", Rm * nq * ab),),
                          act_writes=((pre + "q", Rm * qh * hd * ab),),
                          kv_bytes=kv_new, ctas=_stream_ctas(Rm * nq * ab * 2))
        if arch.qk_norm:
            self.params += 2 * hd
        kv_read = Rm * L_kv * kvh * hd * 2 * kvb
        splits = max(1, math.ceil(L_kv / 1024))  # flash-decoding KV splits (assumption)
        sinks = ((pre + "sinks", qh * 4.0),) if arch.attention_sinks else ()
        self.params += qh if arch.attention_sinks else 0  # this GPU's 1/t share of the sinks
        i_attn = self.add(name=pre + "attn", op="attn",
                          category="attn_sliding" if sliding else "attn_full", layer=j,
                          flops=4.0 * Rm * qh * L_kv * hd, dtype=arch.kv_dtype, tensor=True,
                          weight_objects=sinks,
                          act_reads=((pre + "q", Rm * qh * hd * ab),),
                          act_writes=((pre + "attn_out", Rm * qh * hd * ab),),
                          kv_bytes=kv_read, ctas=max(1, Rm * kvh * splits))
        wo = qh * hd * H * wb
        self.params += qh * hd * H + (H if arch.attn_bias else 0)
        i_o = self.add(name=pre + "o_proj", op="o_proj", category="out_residual", layer=j,
                       flops=2.0 * Rm * qh * hd * H, dtype=arch.weight_dtype, tensor=True,
                       weight_objects=((pre + "o.w", wo + (H * wb if arch.attn_bias else 0)),),
                       act_reads=((pre + "attn_out", Rm * qh * hd * ab),),
                       act_writes=((pre + "o_part", x),), ctas=_gemm_ctas(Rm, H, qh * hd, wo))
        return [i_qkv, i_rope, i_attn, i_o]

    def _mla(self, j: int, L_kv: int, sliding: bool) -> list[int]:
        """Multi-head latent attention in decode with absorbed projections (DeepSeek-V3):

        * ``mla_down``: x @ [W_DQ | W_DKV | W_KR] (h -> q_lora + kv_lora + rope), replicated on
          every TP rank (each GPU runs it for its group's Rm requests);
        * ``mla_q_up``: latent norms, q = c_q @ W_UQ (this GPU's qh heads of nope + rope), then
          the nope part absorbed into latent space, q_nope @ W_UK (qh heads x nope -> kv_lora);
        * ``rope_kv``: RoPE of q_rope and k_rope, append (kv_lora + rope) elements per token to
          the compressed KV cache (one head shared by all query heads);
        * ``attn``: MQA over the compressed cache, 2*L*(kv_lora + rope) FLOPs per head for the
          scores + 2*L*kv_lora for the values; the cache is read whole by every TP rank;
        * ``mla_v_up``: W_UV absorbed after attention (qh heads x kv_lora -> v_head_dim);
        * ``o_proj``: qh*v_head_dim -> h.
        """
        a, H, Rm, x, ab, wb, qh, kvb = (self.arch, self.H, self.Rm, self.x, self.ab, self.wb,
                                        self.qh, self.kvb)
        pre = f"L{j}."
        c, r, nope, v = a.kv_lora_rank, a.qk_rope_head_dim, a.qk_nope_head_dim, a.v_head_dim
        ql = a.q_lora_rank
        nd = (ql if ql else 0) + c + r  # down-projection width (query direct when q_lora is 0)
        w_down = H * nd * wb
        self.params += H * nd
        i_dn = self.add(name=pre + "mla_down", op="mla_down", category="norm_qkv", layer=j,
                        flops=2.0 * Rm * H * nd, dtype=a.weight_dtype, tensor=True,
                        weight_objects=((pre + "mla_down.w", w_down),),
                        act_reads=((pre + "xn", x),), act_writes=((pre + "latent", Rm * nd * ab),),
                        ctas=_gemm_ctas(Rm, nd, H, w_down))
        q_in = ql if ql else H
        n_q = q_in * qh * (nope + r)
        n_uk = qh * nope * c
        w_up = (n_q + n_uk + ql + c) * wb
        self.params += n_q + n_uk + ql + c
        i_qu = self.add(name=pre + "mla_q_up", op="mla_q_up", category="norm_qkv", layer=j,
                        flops=2.0 * Rm * (n_q + n_uk), dtype=a.weight_dtype, tensor=True,
                        weight_objects=((pre + "mla_q_up.w", w_up),),
                        act_reads=((pre + "latent", Rm * nd * ab),),
                        act_writes=((pre + "q_lat", Rm * qh * (c + r) * ab),),
                        ctas=_gemm_ctas(Rm, qh * (nope + r), q_in, w_up))
        kv_new = Rm * (c + r) * kvb
        i_rope = self.add(name=pre + "rope_kv", op="rope_kv", category="norm_qkv", layer=j,
                          flops=6.0 * Rm * (qh + 1) * r, dtype=a.weight_dtype, tensor=False,
                          act_reads=((pre + "q_lat", Rm * qh * (c + r) * ab),
                                     (pre + "latent", Rm * (c + r) * ab)),
                          act_writes=((pre + "q", Rm * qh * (c + r) * ab),),
                          kv_bytes=kv_new, ctas=_stream_ctas(Rm * qh * (c + r) * ab * 2))
        kv_read = Rm * L_kv * (c + r) * kvb
        splits = max(1, math.ceil(L_kv / 1024))
        i_attn = self.add(name=pre + "attn", op="attn",
                          category="attn_sliding" if sliding else "attn_full", layer=j,
                          flops=2.0 * Rm * qh * L_kv * (2 * c + r), dtype=a.kv_dtype, tensor=True,
                          act_reads=((pre + "q", Rm * qh * (c + r) * ab),),
                          act_writes=((pre + "attn_lat", Rm * qh * c * ab),),
                          kv_bytes=kv_read, ctas=max(1, Rm * splits * max(1, qh // 64)))
        n_uv = qh * c * v
        self.params += n_uv
        i_vu = self.add(name=pre + "mla_v_up", op="mla_v_up", category="out_residual", layer=j,
                        flops=2.0 * Rm * n_uv, dtype=a.weight_dtype, tensor=True,
                        weight_objects=((pre + "mla_v_up.w", n_uv * wb),),
                        act_reads=((pre + "attn_lat", Rm * qh * c * ab),),
                        act_writes=((pre + "attn_out", Rm * qh * v * ab),),
                        ctas=_gemm_ctas(Rm, qh * v, c, n_uv * wb))
        wo = qh * v * H * wb
        self.params += qh * v * H + (H if a.attn_bias else 0)
        i_o = self.add(name=pre + "o_proj", op="o_proj", category="out_residual", layer=j,
                       flops=2.0 * Rm * qh * v * H, dtype=a.weight_dtype, tensor=True,
                       weight_objects=((pre + "o.w", wo + (H * wb if a.attn_bias else 0)),),
                       act_reads=((pre + "attn_out", Rm * qh * v * ab),),
                       act_writes=((pre + "o_part", x),), ctas=_gemm_ctas(Rm, H, qh * v, wo))
        return [i_dn, i_qu, i_rope, i_attn, i_vu, i_o]

    # ------------------------------------------------------------------ MLPs
    def dense(self, j: int, i_ar: int) -> int:
        """Dense SwiGLU MLP split over attention TP + all-reduce/residual; returns the last."""
        arch, H, Rm, x, ab, wb, t = self.arch, self.H, self.Rm, self.x, self.ab, self.wb, self.t
        pre = f"L{j}."
        I = arch.intermediate // t
        bias = arch.mlp_bias
        w_up = H * 2 * I * wb + (2 * I * wb if bias else 0)
        w_dn = I * H * wb + (H * wb if bias else 0)
        self.params += 3 * H * I + ((2 * I + H) if bias else 0)
        i_up = self.add(name=pre + "mlp_up", op="mlp_up", category="mlp", layer=j,
                        flops=2.0 * Rm * H * 2 * I, dtype=arch.weight_dtype, tensor=True,
                        weight_objects=((pre + "mlp_up.w", w_up),),
                        act_reads=((pre + "hn", x),), act_writes=((pre + "act", Rm * I * ab),),
                        ctas=_gemm_ctas(Rm, 2 * I, H, w_up))
        i_dn = self.add(name=pre + "mlp_down", op="mlp_down", category="mlp", layer=j,
                        flops=2.0 * Rm * I * H, dtype=arch.weight_dtype, tensor=True,
                        weight_objects=((pre + "mlp_down.w", w_dn),),
                        act_reads=((pre + "act", Rm * I * ab),), act_writes=((pre + "y", x),),
                        ctas=_gemm_ctas(Rm, H, I, w_dn))
        i_c = self.add(name=pre + ("mlp_allreduce" if t > 1 else "mlp_residual"),
                       op="allreduce" if t > 1 else "residual", category="combine", layer=j,
                       flops=Rm * H, dtype=arch.weight_dtype, tensor=False,
                       act_reads=((pre + "y", x), (pre + "h", x)),
                       act_writes=((f"resid.{j + 1}", x),),
                       **self.deploy.comm_split(2.0 * (t - 1) / t * x, t, "allreduce"),
                       ctas=_stream_ctas(3 * x))
        self.edges += [(i_ar, i_up), (i_up, i_dn), (i_dn, i_c), (i_ar, i_c)]
        return i_c

    def moe(self, j: int, i_ar: int) -> int:
        """Router, top-k, dispatch, (shared experts), expert GEMMs, combine; returns the last.

        Expert parallelism e on n GPUs: the n/e EP groups are replicas, each serving the tokens
        of its n/e share of the GPUs, so a GPU receives G*k/n assignments per step whatever e
        (G*k/(n*m) per microbatch), and the distinct local experts they hit are those of the
        G*e/(n*m) tokens its EP group routes per microbatch.
        """
        arch, H, Rm, x, ab, wb, t, e = (self.arch, self.H, self.Rm, self.x, self.ab, self.wb,
                                        self.t, self.e)
        dep, m, eb = self.deploy, self.m, self.eb
        pre = f"L{j}."
        E, k = arch.num_experts, arch.top_k
        El = E // e
        F = arch.moe_intermediate
        n = dep.num_gpus
        Tr = Rm / t  # tokens this GPU routes per microbatch
        # assignments received per microbatch (the busiest EP rank's, see Deployment.routing)
        A = dep.global_batch * k / (n * m) * dep.expert_load_factor(k, m)
        group_tokens = dep.global_batch * e / (n * m)  # tokens its EP group routes
        hit = expected_distinct(E, group_tokens, k) * El / E
        xdt = arch.expert_act_dtype  # expert GEMMs run at the activation dtype's rate
        wr = H * E * wb + (E * wb if arch.mlp_bias else 0)
        self.params += H * E + (E if arch.mlp_bias else 0) + (E if arch.n_group else 0)
        i_r = self.add(name=pre + "router", op="router", category="router_dispatch", layer=j,
                       flops=2.0 * Tr * H * E, dtype=arch.weight_dtype, tensor=True,
                       weight_objects=((pre + "router.w", wr),),
                       act_reads=((pre + "hn", Tr * H * ab),),
                       act_writes=((pre + "logits", Tr * E * 4.0),),
                       ctas=_gemm_ctas(Tr, E, H, wr))
        i_tk = self.add(name=pre + "topk", op="topk", category="router_dispatch", layer=j,
                        flops=Tr * E * math.log2(max(E, 2)), dtype="fp32", tensor=False,
                        act_reads=((pre + "logits", Tr * E * 4.0),),
                        act_writes=((pre + "topk", Tr * k * 8.0),),
                        ctas=max(1, math.ceil(Tr / 32)))
        send = Tr * k * H * ab
        i_d = self.add(name=pre + "dispatch", op="dispatch", category="router_dispatch", layer=j,
                       flops=0.0, dtype=arch.weight_dtype, tensor=False,
                       act_reads=((pre + "hn", send), (pre + "topk", Tr * k * 8.0)),
                       act_writes=((pre + "x_exp", A * H * ab),),
                       **dep.comm_split(send * (e - 1) / e, e, "alltoall"),
                       ctas=_stream_ctas(send + A * H * ab))
        chain = [i_r, i_tk, i_d]
        shared_comm = 0.0
        if arch.num_shared_experts:
            # shared experts: a dense SwiGLU MLP of n_shared*F split over attention TP on the
            # group's Rm tokens; its partial sums are reduced with the combine (2(t-1)/t x)
            Fs = arch.num_shared_experts * F // t
            ws_up, ws_dn = H * 2 * Fs * eb, Fs * H * eb
            self.params += 3 * H * Fs
            i_su = self.add(name=pre + "shared_up", op="mlp_up", category="mlp", layer=j,
                            flops=2.0 * Rm * H * 2 * Fs, dtype=xdt, tensor=True,
                            weight_objects=((pre + "shared_up.w", ws_up),),
                            act_reads=((pre + "hn", x),),
                            act_writes=((pre + "shared_act", Rm * Fs * ab),),
                            ctas=_gemm_ctas(Rm, 2 * Fs, H, ws_up))
            i_sd = self.add(name=pre + "shared_down", op="mlp_down", category="mlp", layer=j,
                            flops=2.0 * Rm * Fs * H, dtype=xdt, tensor=True,
                            weight_objects=((pre + "shared_down.w", ws_dn),),
                            act_reads=((pre + "shared_act", Rm * Fs * ab),),
                            act_writes=((pre + "shared_y", x),),
                            ctas=_gemm_ctas(Rm, H, Fs, ws_dn))
            chain += [i_su, i_sd]
            self.edges += [(i_ar, i_su)]
            shared_comm = 2.0 * (t - 1) / t * x
        w_up = hit * (H * 2 * F * eb + (2 * F * wb if arch.mlp_bias else 0))
        w_dn = hit * (F * H * eb + (H * wb if arch.mlp_bias else 0))
        self.params += El * (3 * H * F + ((2 * F + H) if arch.mlp_bias else 0))
        i_up = self.add(name=pre + "expert_up", op="expert_up", category="mlp", layer=j,
                        flops=2.0 * A * H * 2 * F, dtype=xdt, tensor=True,
                        weight_objects=((pre + "experts_up.w", w_up),),
                        act_reads=((pre + "x_exp", A * H * ab),),
                        act_writes=((pre + "act_exp", A * F * ab),),
                        ctas=_gemm_ctas(A, 2 * F * hit, H, w_up))
        i_dn = self.add(name=pre + "expert_down", op="expert_down", category="mlp", layer=j,
                        flops=2.0 * A * F * H, dtype=xdt, tensor=True,
                        weight_objects=((pre + "experts_down.w", w_dn),),
                        act_reads=((pre + "act_exp", A * F * ab),),
                        act_writes=((pre + "y_exp", A * H * ab),),
                        ctas=_gemm_ctas(A, H * hit, F, w_dn))
        reads = ((pre + "y_exp", A * H * ab), (pre + "h", x))
        if arch.num_shared_experts:
            reads += ((pre + "shared_y", x),)
        i_c = self.add(name=pre + "combine", op="combine", category="combine", layer=j,
                       flops=2.0 * Rm * k * H, dtype=arch.weight_dtype, tensor=False,
                       act_reads=reads, act_writes=((f"resid.{j + 1}", x),),
                       **dep.comm_split(A * H * ab * (e - 1) / e + shared_comm, e, "alltoall"),
                       ctas=_stream_ctas(A * H * ab + 2 * x))
        chain += [i_up, i_dn, i_c]
        self.edges += list(zip(chain, chain[1:])) + [(i_ar, i_r), (i_ar, i_d), (i_d, i_up),
                                                      (i_ar, i_c)]
        return i_c


def head_kernels(arch: ModelArch, deploy: Deployment) -> tuple[Kernel, ...]:
    """The kernels of a decode step after the last region, for the whole per-GPU batch R
    (category ``"head"``; run once per step on the whole GPU, after the pipeline drains):

    * ``final_norm``: RMSNorm of the last residual (4*R*h FLOPs, h weights);
    * ``lm_head``: logits of this GPU's V/t vocabulary shard (vocabulary-parallel over attention
      TP): 2*R*h*V/t FLOPs, V*h/t weights (summed over the t GPUs of a group: 2*V*h FLOPs per
      token and the V*h weight bytes every step);
    * ``sample``: Gumbel-max sampling over the shard (argmax of logits + Gumbel noise, which
      draws from the softmax: 2 FLOPs per logit on CUDA cores, reading the bf16 logits and a
      bf16 noise buffer); with t > 1 each GPU exchanges its shard's (value, token) candidate for
      every request, 16 bytes per request to each of t-1 peers;
    * ``embed``: embedding lookup of the sampled token, the next step's input (R rows of h;
      vocabulary-parallel, so t > 1 adds an all-reduce of R*h).

    Raises:
        ValueError: an invalid deployment for the model.
    """
    deploy.validate(arch)
    t = deploy.attn_tp
    R = deploy.requests_per_gpu
    H, V = arch.hidden, arch.vocab
    ab = wb = DTYPE_BYTES[arch.weight_dtype]
    Vl = V / t
    x = R * H * ab
    w_head = Vl * H * wb
    dt = arch.weight_dtype
    return (
        Kernel(name="final_norm", op="final_norm", category="head", layer=0,
               flops=4.0 * R * H, dtype=dt, tensor=False,
               weight_objects=(("final_norm.w", H * wb),), act_reads=(("resid.out", x),),
               act_writes=(("final_xn", x),), ctas=max(1, R)),
        Kernel(name="lm_head", op="lm_head", category="head", layer=0,
               flops=2.0 * R * H * Vl, dtype=dt, tensor=True,
               weight_objects=(("lm_head.w", w_head),), act_reads=(("final_xn", x),),
               act_writes=(("logits", R * Vl * ab),), ctas=_gemm_ctas(R, Vl, H, w_head)),
        Kernel(name="sample", op="sample", category="head", layer=0,
               flops=2.0 * R * Vl, dtype=dt, tensor=False,
               act_reads=(("logits", R * Vl * ab), ("gumbel", R * Vl * ab)),
               act_writes=(("tokens", R * 8.0),),
               **deploy.comm_split(16.0 * R * (t - 1), t, "allreduce"), ctas=max(1, R)),
        Kernel(name="embed", op="embed", category="head", layer=0,
               flops=0.0, dtype=dt, tensor=False,
               weight_objects=(("embed.rows", x / t),), act_reads=(("tokens", R * 8.0),),
               act_writes=(("resid.0", x),),
               **deploy.comm_split(2.0 * (t - 1) / t * x, t, "allreduce"),
               ctas=_stream_ctas(2 * x)),
    )


@dataclass(frozen=True)
class ForwardPass:
    """A whole decode step: region instances of possibly different region graphs, in layer
    order, then the head kernels.

    Attributes:
        runs: ``((graph, count), ...)``: ``count`` consecutive instances of the region
            ``graph`` (its ``num_regions`` counts the kind's instances over ALL runs).
        head: ``head_kernels(arch, deploy)``.
        main: the graph of ``arch.main_region()`` (the one configurations cut).
    """

    runs: tuple[tuple[OpGraph, int], ...]
    head: tuple[Kernel, ...]
    main: OpGraph

    def param_count(self) -> float:
        """Parameters this GPU holds: region weight objects x instances + the head's LM head
        (V*h/t) + the embedding shard (V*h/t unless tied) + the final norm (h)."""
        g = self.main
        arch, t = g.arch, g.deployment.attn_tp
        emb = arch.vocab * arch.hidden / t * (1 if arch.tie_embeddings else 2)
        return float(sum(gr.weight_params() * c for gr, c in self.runs) + emb + arch.hidden)


def build_forward(arch: ModelArch, deploy: Deployment, microbatches: int = 1) -> ForwardPass:
    """Every region kind's graph (``build_graph(..., region=kind)``) in layer order with its
    run length, and the head kernels.

    Raises:
        ValueError: as ``build_graph``.
    """
    graphs: dict = {}
    runs = []
    for b, c in arch.region_runs():
        if b not in graphs:
            graphs[b] = build_graph(arch, deploy, microbatches, region=b)
        runs.append((graphs[b], c))
    return ForwardPass(runs=tuple(runs), head=head_kernels(arch, deploy),
                       main=graphs[arch.main_region()])


class StaticDurationModel:
    """Per-kernel time on a pool of p SMs, with no contention and no L2 (docs/method.md §3 and
    docs/fidelity.md §6; the terms are ``kernelcost.op_cost``):

        t(u, p) = launch + fixed_u(p) + max(FLOPs / (rate_dtype * s_u * p_u/N_SM),
                                            bytes / (eta_u * BW(p_u)),
                                            comm_setup + link_bytes / NVLink)          [µs]

    with p_u the SMs the op reaches (min(p, ctas), wave-quantised for tensor-core GEMMs),
    fixed_u the launches of its other device kernels, their minimum kernel time and the GEMM
    waves' latency, s_u the decode GEMM efficiency and eta_u the vector kernels' bandwidth
    efficiency (``Hardware``; all fitted on isolated H200 kernel times, neutral on a hand-built
    ``Hardware``). ``Kernel.link_bytes``: the payload, or its scale-out part scaled to
    NVLink-equivalent bytes when the collective spans NVLink domains.

    BW(p) is the hardware's measured bandwidth-vs-SMs response (``Hardware.mem_bandwidth``), not a
    linear share. CUDA-core (``tensor=False``) FLOPs run at 1/16 of the bf16 tensor rate (the
    H100/H200 ratio of dense bf16 tensor to fp32 CUDA-core throughput, 989/67 ~ 15, rounded).

    Args:
        hw: the GPU.

    Raises:
        ValueError: from ``table`` for a kernel with negative or NaN work.
    """

    #: The model's name and version (``kernelcost.ANALYTIC_MODEL``).
    name = ANALYTIC_MODEL

    def __init__(self, hw: Hardware) -> None:
        self.hw = hw

    def kernel_time_us(self, k: Kernel, sms: np.ndarray | float) -> np.ndarray:
        """Time (µs) of kernel ``k`` alone on ``sms`` SMs (array-like, >= 1); shape of ``sms``.

        Raises:
            ValueError: a pool smaller than 1 SM.
        """
        hw = self.hw
        s = np.asarray(sms, dtype=float)
        if np.any(s < 1):
            raise ValueError("sms must be >= 1 for every kernel")
        c = op_cost(k, hw, s)
        p = c.sms
        rate = (hw.flops_rate(k.dtype) * c.rate_scale if k.tensor
                else hw.tensor_flops["bf16"] / 16.0)
        t_comp = k.flops / (rate * p / hw.num_sms) * 1e6
        bw = hw.mem_bandwidth(p * c.inflight_scale, read_only=k.act_bytes < 0.5 * k.hbm_bytes)
        t_mem = k.hbm_bytes / bw * 1e6
        t_comm = ((hw.comm_setup_us + k.link_bytes(hw.nvlink_Bps) / hw.nvlink_Bps * 1e6)
                  if k.is_comm else 0.0)
        return hw.launch_us + c.fixed_us + np.maximum(np.maximum(t_comp, t_mem), t_comm)

    def table(self, graph: OpGraph, max_sms: int | None = None) -> np.ndarray:
        """Durations of every kernel on every pool size.

        Returns:
            float64 array (graph.n, max_sms+1), µs; column p = time on p SMs; column 0 holds the
            time on 1 SM (a pool of 0 SMs is never feasible; kept finite on purpose).

        Raises:
            ValueError: a kernel's work is negative or NaN (names the kernel and field).
        """
        for k in graph.kernels:
            for f in ("flops", "kv_bytes", "comm_bytes"):
                v = getattr(k, f)
                if not np.isfinite(v) or v < 0:
                    raise ValueError(f"kernel {k.name}: {f} must be finite and >= 0, got {v!r}")
            for nm, b in k.weight_objects + k.act_reads + k.act_writes:
                if not np.isfinite(b) or b < 0:
                    raise ValueError(f"kernel {k.name}: bytes of {nm} must be finite and >= 0")
        N = self.hw.num_sms if max_sms is None else int(max_sms)
        p = np.arange(N + 1, dtype=float)
        p[0] = 1.0
        return np.stack([self.kernel_time_us(k, p) for k in graph.kernels])
