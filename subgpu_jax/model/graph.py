"""Deployments and the per-GPU operator graph of one repeating region.

Batch accounting (docs/method.md §5; used everywhere in the package):

* A global decode batch of G requests produces G tokens per step.
* Attention TP t x DP d on n = t*d GPUs: each attention group serves R = G/d requests and every GPU
  of the group runs attention for those R requests over its 1/t share of the query heads. KV heads
  are split over t too; when there are fewer KV heads than t they are replicated, so a GPU always
  holds ceil(kv_heads / t) >= 1 of them.
* MoE EP e: each GPU hosts E/e experts and receives on average G*k/e token-expert assignments per
  layer (k = top-k). Each GPU routes (router + top-k + dispatch) its 1/t share of its group's
  tokens, G/n tokens, so every token is routed once.
* Microbatching splits the per-GPU work into m equal parts: R/m requests of attention,
  G*k/(e*m) expert assignments, G/(n*m) routed tokens. All GPUs run microbatch mu together, so
  microbatch mu globally holds G/m tokens; the expected number of distinct local experts its
  assignments hit, under uniform top-k routing, is (E/e) * (1 - (1 - k/E)^(G/m)).
* Per-user throughput = 1 / step time; per-GPU throughput = G / n / step time (tokens/s).

The region is one layer, or the model's repeating pattern of layer kinds (two layers, sliding then
full attention, for GPT-OSS). Kernels are listed in the order an optimised engine launches them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable

import networkx as nx
import numpy as np

from subgpu_jax.model.hardware import DTYPE_BYTES, Hardware
from subgpu_jax.model.models import ModelArch, expected_distinct

__all__ = [
    "Deployment", "Kernel", "OpGraph", "build_graph", "CATEGORIES", "REFERENCE_DEPLOYMENT",
    "StaticDurationModel",
]

#: Reporting categories (docs/method.md §5), in display order.
CATEGORIES: tuple[str, ...] = (
    "norm_qkv", "attn_full", "attn_sliding", "out_residual", "router_dispatch", "mlp", "combine",
)


@dataclass(frozen=True)
class Deployment:
    """How a model is spread over GPUs, and the decode step it serves.

    Attributes:
        num_gpus: n, GPUs serving the model (= attn_tp * attn_dp).
        attn_tp: t, attention tensor parallelism.
        attn_dp: d, attention data parallelism.
        moe_ep: e, MoE expert parallelism (1 for dense models, whose MLP uses ``attn_tp``).
        global_batch: G, decode requests in flight (tokens per step).
        input_len: prompt length (tokens); recorded, the KV cache size is ``kv_history``.
        kv_history: tokens in each request's KV cache at this step.

    Raises:
        ValueError: ``validate`` names the offending field.
    """

    num_gpus: int = 32
    attn_tp: int = 8
    attn_dp: int = 4
    moe_ep: int = 32
    global_batch: int = 2048
    input_len: int = 32768
    kv_history: int = 32768

    def __post_init__(self) -> None:
        for f in ("num_gpus", "attn_tp", "attn_dp", "moe_ep", "global_batch", "input_len",
                  "kv_history"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v <= 0:
                raise ValueError(f"deployment.{f} must be a positive integer, got {v!r}")
        if self.attn_tp * self.attn_dp != self.num_gpus:
            raise ValueError(f"deployment: attn_tp*attn_dp = {self.attn_tp * self.attn_dp} must "
                             f"equal num_gpus = {self.num_gpus}")
        if self.global_batch % self.attn_dp:
            raise ValueError(f"deployment.global_batch={self.global_batch} must be divisible by "
                             f"attn_dp={self.attn_dp} (no request may be dropped)")

    def validate(self, arch: ModelArch) -> None:
        """Check the deployment against a model.

        Raises:
            ValueError: TP larger than or not dividing the query heads; EP not dividing the experts
                or the GPU count; EP != 1 for a dense model; a dense MLP not divisible by TP.
        """
        if self.attn_tp > arch.num_heads or arch.num_heads % self.attn_tp:
            raise ValueError(f"deployment.attn_tp={self.attn_tp} must divide the model's "
                             f"{arch.num_heads} query heads")
        if arch.is_moe:
            if arch.num_experts % self.moe_ep:
                raise ValueError(f"deployment.moe_ep={self.moe_ep} must divide the model's "
                                 f"{arch.num_experts} experts")
            if self.moe_ep > self.num_gpus or self.num_gpus % self.moe_ep:
                raise ValueError(f"deployment.moe_ep={self.moe_ep} must divide num_gpus="
                                 f"{self.num_gpus}")
        else:
            if self.moe_ep != 1:
                raise ValueError(f"deployment.moe_ep must be 1 for the dense model {arch.name}, "
                                 f"got {self.moe_ep}")
            if arch.intermediate % self.attn_tp:
                raise ValueError(f"deployment.attn_tp={self.attn_tp} must divide the MLP "
                                 f"intermediate size {arch.intermediate}")

    def memory_bytes(self, arch: ModelArch) -> dict[str, float]:
        """HBM each GPU needs: its weight shard and the KV cache of its requests (bytes).

        Weights: attention (q/k/v/o, sinks, norms) and dense MLP split over attn_tp (KV
        projections replicated like the KV heads), the router replicated, E/e local experts, and
        the embedding and LM head split over attn_tp. KV: R = G/d requests x kv_history tokens
        (the window for sliding layers) x ceil(kv_heads/t) heads x head_dim x 2 (K and V) x the
        KV dtype, summed over layers. Activations and workspaces are not counted (small).

        Returns:
            ``{"weights": bytes, "kv": bytes, "total": bytes}``.
        """
        t, e = self.attn_tp, self.moe_ep
        H, hd = arch.hidden, arch.head_dim
        wb, kvb, eb = (DTYPE_BYTES[arch.weight_dtype], DTYPE_BYTES[arch.kv_dtype],
                       DTYPE_BYTES[arch.expert_dtype])
        qh, kvh = arch.num_heads // t, max(1, math.ceil(arch.num_kv_heads / t))
        attn = (H * (qh + 2 * kvh) * hd + qh * hd * H) * wb
        if arch.is_moe:
            mlp = (arch.num_experts // e) * 3 * H * arch.moe_intermediate * eb \
                + H * arch.num_experts * wb
        else:
            mlp = 3 * H * (arch.intermediate // t) * wb
        emb = (1 if arch.tie_embeddings else 2) * arch.vocab * H * wb / t
        weights = arch.num_layers * (attn + mlp) + emb
        kv = 0.0
        for kind in arch.layer_types:
            L = min(arch.sliding_window, self.kv_history) if kind == "sliding" else self.kv_history
            kv += self.requests_per_gpu * L * kvh * hd * 2 * kvb
        return {"weights": float(weights), "kv": float(kv), "total": float(weights + kv)}

    def check_memory(self, arch: ModelArch, hw: Hardware) -> None:
        """Raise ValueError when weights + KV cache exceed the GPU's HBM (names the sizes)."""
        mb = self.memory_bytes(arch)
        if mb["total"] > hw.hbm_bytes:
            raise ValueError(
                f"deployment does not fit: each GPU needs {mb['total'] / 1e9:.1f} GB (weights "
                f"{mb['weights'] / 1e9:.1f} GB + KV cache {mb['kv'] / 1e9:.1f} GB for "
                f"{self.requests_per_gpu} requests x {self.kv_history} tokens) but a {hw.name} "
                f"has {hw.hbm_bytes / 1e9:.0f} GB; lower global_batch or kv_history, or raise "
                "attn_dp")

    @property
    def requests_per_gpu(self) -> int:
        """R = G/d: requests whose attention each GPU runs."""
        return self.global_batch // self.attn_dp

    @property
    def tokens_per_gpu(self) -> float:
        """G/n: tokens per step per GPU (the numerator of per-GPU throughput)."""
        return self.global_batch / self.num_gpus


#: docs/method.md §5: GPT-OSS 120B, 32 GPUs, attention TP8 x DP4, MoE EP32, G = 2048, ISL = KV = 32768.
REFERENCE_DEPLOYMENT = Deployment()


@dataclass(frozen=True)
class Kernel:
    """One kernel of the region, with its analytical work for ONE microbatch.

    Attributes:
        name: unique within the region, ``"L{j}.{op}"`` with j the layer inside the region.
        op: operator kind (``rmsnorm``, ``qkv``, ``rope_kv``, ``attn``, ``o_proj``, ``allreduce``,
            ``router``, ``topk``, ``dispatch``, ``expert_up``, ``expert_down``, ``combine``,
            ``mlp_up``, ``mlp_down``, ``residual_norm``).
        category: one of ``CATEGORIES``.
        layer: layer index inside the region (0-based).
        flops: arithmetic work (FLOP).
        dtype: operand datatype of the tensor work (key of ``DTYPE_BYTES``).
        tensor: True when the FLOPs run on tensor cores, False for CUDA-core (vector) work.
        weight_objects: ``((name, bytes), ...)`` weights read (logical objects for the L2 model).
        act_reads: ``((name, bytes), ...)`` activations read.
        act_writes: ``((name, bytes), ...)`` activations written.
        kv_bytes: streaming KV-cache bytes read or appended (never cached in L2).
        comm_bytes: bytes each GPU sends over NVLink for this collective (0 if none).
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
        num_regions: L, region instances in one forward pass.
        layers_per_region: layers in one region (1, or 2 for GPT-OSS).
        microbatches: m, the per-GPU work of a step is split into this many microbatches.
        arch: the model.
        deployment: the deployment.
    """

    kernels: tuple[Kernel, ...]
    edges: tuple[tuple[int, int], ...]
    cross_edges: tuple[tuple[int, int], ...]
    num_regions: int
    layers_per_region: int
    microbatches: int
    arch: ModelArch | None = None
    deployment: Deployment | None = None
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


def build_graph(arch: ModelArch, deploy: Deployment, microbatches: int = 1) -> OpGraph:
    """Build the per-GPU ``OpGraph`` of one region for ONE of ``microbatches`` equal microbatches.

    Args:
        arch: the model.
        deploy: the deployment (validated against ``arch``).
        microbatches: m >= 1; must divide the per-GPU attention batch R = G/d.

    Returns:
        The region graph; ``num_regions`` = num_layers / len(arch.period).

    Raises:
        ValueError: invalid deployment for the model, or m not dividing R (no work is dropped).
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
    t, e = deploy.attn_tp, deploy.moe_ep
    H, hd = arch.hidden, arch.head_dim
    qh = arch.num_heads // t
    kvh = max(1, math.ceil(arch.num_kv_heads / t))  # replicated when fewer KV heads than TP
    ab = DTYPE_BYTES[arch.weight_dtype]  # activations in the weight dtype (bf16)
    wb = ab
    kvb = DTYPE_BYTES[arch.kv_dtype]
    eb = DTYPE_BYTES[arch.expert_dtype]
    Rm = R // m  # attention requests per microbatch
    period = arch.period
    P = len(period)
    kernels: list[Kernel] = []
    edges: list[tuple[int, int]] = []
    params = 0.0

    def add(**kw) -> int:
        kernels.append(Kernel(**kw))
        return len(kernels) - 1

    last_of_prev_layer: int | None = None
    for j, kind in enumerate(period):
        pre = f"L{j}."
        resid_in, resid_out = f"resid.{j}", f"resid.{j + 1}"
        x = Rm * H * ab
        # 1. RMSNorm
        i_norm = add(name=pre + "rmsnorm", op="rmsnorm", category="norm_qkv", layer=j,
                     flops=4.0 * Rm * H, dtype=arch.weight_dtype, tensor=False,
                     weight_objects=((pre + "attn_norm.w", H * wb),),
                     act_reads=((resid_in, x),), act_writes=((pre + "xn", x),),
                     ctas=max(1, Rm))
        params += H
        # 2. QKV projection
        nq = (qh + 2 * kvh) * hd
        wq = H * nq * wb + (nq * wb if arch.attn_bias else 0)
        params += H * nq + (nq if arch.attn_bias else 0)
        i_qkv = add(name=pre + "qkv", op="qkv", category="norm_qkv", layer=j,
                    flops=2.0 * Rm * H * nq, dtype=arch.weight_dtype, tensor=True,
                    weight_objects=((pre + "qkv.w", wq),),
                    act_reads=((pre + "xn", x),), act_writes=((pre + "qkv", Rm * nq * ab),),
                    ctas=_gemm_ctas(Rm, nq, H, wq))
        # 3. RoPE (+ q/k norm) + KV append
        kv_new = Rm * kvh * hd * 2 * kvb
        i_rope = add(name=pre + "rope_kv", op="rope_kv", category="norm_qkv", layer=j,
                     flops=6.0 * Rm * nq, dtype=arch.weight_dtype, tensor=False,
                     weight_objects=((pre + "qk_norm.w", 2 * hd * wb),) if arch.qk_norm else (),
                     act_reads=((pre + "qkv", Rm * nq * ab),),
                     act_writes=((pre + "q", Rm * qh * hd * ab),),
                     kv_bytes=kv_new, ctas=_stream_ctas(Rm * nq * ab * 2))
        if arch.qk_norm:
            params += 2 * hd
        # 4. attention
        sliding = kind == "sliding"
        L_kv = min(arch.sliding_window, deploy.kv_history) if sliding else deploy.kv_history
        kv_read = Rm * L_kv * kvh * hd * 2 * kvb
        splits = max(1, math.ceil(L_kv / 1024))  # flash-decoding KV splits (assumption)
        sinks = ((pre + "sinks", qh * 4.0),) if arch.attention_sinks else ()
        params += qh if arch.attention_sinks else 0  # this GPU's 1/t share of the sinks
        i_attn = add(name=pre + "attn", op="attn",
                     category="attn_sliding" if sliding else "attn_full", layer=j,
                     flops=4.0 * Rm * qh * L_kv * hd, dtype=arch.kv_dtype, tensor=True,
                     weight_objects=sinks,
                     act_reads=((pre + "q", Rm * qh * hd * ab),),
                     act_writes=((pre + "attn_out", Rm * qh * hd * ab),),
                     kv_bytes=kv_read, ctas=max(1, Rm * kvh * splits))
        # 5. output projection
        wo = qh * hd * H * wb
        params += qh * hd * H + (H if arch.attn_bias else 0)
        i_o = add(name=pre + "o_proj", op="o_proj", category="out_residual", layer=j,
                  flops=2.0 * Rm * qh * hd * H, dtype=arch.weight_dtype, tensor=True,
                  weight_objects=((pre + "o.w", wo + (H * wb if arch.attn_bias else 0)),),
                  act_reads=((pre + "attn_out", Rm * qh * hd * ab),),
                  act_writes=((pre + "o_part", x),), ctas=_gemm_ctas(Rm, H, qh * hd, wo))
        # 6. attention all-reduce + residual add + post-attention norm
        params += H
        ar_comm = 2.0 * (t - 1) / t * x
        i_ar = add(name=pre + ("allreduce" if t > 1 else "residual_norm"),
                   op="allreduce" if t > 1 else "residual_norm", category="out_residual",
                   layer=j, flops=6.0 * Rm * H, dtype=arch.weight_dtype, tensor=False,
                   weight_objects=((pre + "mlp_norm.w", H * wb),),
                   act_reads=((pre + "o_part", x), (resid_in, x)),
                   act_writes=((pre + "h", x), (pre + "hn", x)),
                   comm_bytes=ar_comm, ctas=_stream_ctas(4 * x))
        edges += [(i_norm, i_qkv), (i_qkv, i_rope), (i_rope, i_attn), (i_attn, i_o),
                  (i_o, i_ar)]
        if last_of_prev_layer is not None:
            edges += [(last_of_prev_layer, i_norm), (last_of_prev_layer, i_ar)]
        if arch.is_moe:
            E, k = arch.num_experts, arch.top_k
            El = E // e
            F = arch.moe_intermediate
            Tr = Rm / t  # tokens this GPU routes per microbatch
            A = deploy.global_batch * k / (e * m)  # assignments received per microbatch
            hit = expected_distinct(E, deploy.global_batch / m, k) * El / E
            wr = H * E * wb + (E * wb if arch.mlp_bias else 0)
            params += H * E + (E if arch.mlp_bias else 0)
            i_r = add(name=pre + "router", op="router", category="router_dispatch", layer=j,
                      flops=2.0 * Tr * H * E, dtype=arch.weight_dtype, tensor=True,
                      weight_objects=((pre + "router.w", wr),),
                      act_reads=((pre + "hn", Tr * H * ab),),
                      act_writes=((pre + "logits", Tr * E * 4.0),), ctas=_gemm_ctas(Tr, E, H, wr))
            i_tk = add(name=pre + "topk", op="topk", category="router_dispatch", layer=j,
                       flops=Tr * E * math.log2(max(E, 2)), dtype="fp32", tensor=False,
                       act_reads=((pre + "logits", Tr * E * 4.0),),
                       act_writes=((pre + "topk", Tr * k * 8.0),),
                       ctas=max(1, math.ceil(Tr / 32)))
            send = Tr * k * H * ab
            i_d = add(name=pre + "dispatch", op="dispatch", category="router_dispatch", layer=j,
                      flops=0.0, dtype=arch.weight_dtype, tensor=False,
                      act_reads=((pre + "hn", send), (pre + "topk", Tr * k * 8.0)),
                      act_writes=((pre + "x_exp", A * H * ab),),
                      comm_bytes=send * (e - 1) / e, ctas=_stream_ctas(send + A * H * ab))
            w_up = hit * (H * 2 * F * eb + (2 * F * wb if arch.mlp_bias else 0))
            w_dn = hit * (F * H * eb + (H * wb if arch.mlp_bias else 0))
            params += El * (3 * H * F + ((2 * F + H) if arch.mlp_bias else 0))
            i_up = add(name=pre + "expert_up", op="expert_up", category="mlp", layer=j,
                       flops=2.0 * A * H * 2 * F, dtype=arch.expert_dtype, tensor=True,
                       weight_objects=((pre + "experts_up.w", w_up),),
                       act_reads=((pre + "x_exp", A * H * ab),),
                       act_writes=((pre + "act_exp", A * F * ab),),
                       ctas=_gemm_ctas(A, 2 * F * hit, H, w_up))
            i_dn = add(name=pre + "expert_down", op="expert_down", category="mlp", layer=j,
                       flops=2.0 * A * F * H, dtype=arch.expert_dtype, tensor=True,
                       weight_objects=((pre + "experts_down.w", w_dn),),
                       act_reads=((pre + "act_exp", A * F * ab),),
                       act_writes=((pre + "y_exp", A * H * ab),),
                       ctas=_gemm_ctas(A, H * hit, F, w_dn))
            i_c = add(name=pre + "combine", op="combine", category="combine", layer=j,
                      flops=2.0 * Rm * k * H, dtype=arch.weight_dtype, tensor=False,
                      act_reads=((pre + "y_exp", A * H * ab), (pre + "h", x)),
                      act_writes=((resid_out, x),),
                      comm_bytes=A * H * ab * (e - 1) / e, ctas=_stream_ctas(A * H * ab + 2 * x))
            edges += [(i_ar, i_r), (i_r, i_tk), (i_tk, i_d), (i_ar, i_d), (i_d, i_up),
                      (i_up, i_dn), (i_dn, i_c), (i_ar, i_c)]
            last = i_c
        else:
            I = arch.intermediate // t
            w_up = H * 2 * I * wb
            w_dn = I * H * wb
            params += 3 * H * I
            i_up = add(name=pre + "mlp_up", op="mlp_up", category="mlp", layer=j,
                       flops=2.0 * Rm * H * 2 * I, dtype=arch.weight_dtype, tensor=True,
                       weight_objects=((pre + "mlp_up.w", w_up),),
                       act_reads=((pre + "hn", x),), act_writes=((pre + "act", Rm * I * ab),),
                       ctas=_gemm_ctas(Rm, 2 * I, H, w_up))
            i_dn = add(name=pre + "mlp_down", op="mlp_down", category="mlp", layer=j,
                       flops=2.0 * Rm * I * H, dtype=arch.weight_dtype, tensor=True,
                       weight_objects=((pre + "mlp_down.w", w_dn),),
                       act_reads=((pre + "act", Rm * I * ab),), act_writes=((pre + "y", x),),
                       ctas=_gemm_ctas(Rm, H, I, w_dn))
            i_c = add(name=pre + ("mlp_allreduce" if t > 1 else "mlp_residual"),
                      op="allreduce" if t > 1 else "residual", category="combine", layer=j,
                      flops=Rm * H, dtype=arch.weight_dtype, tensor=False,
                      act_reads=((pre + "y", x), (pre + "h", x)), act_writes=((resid_out, x),),
                      comm_bytes=2.0 * (t - 1) / t * x, ctas=_stream_ctas(3 * x))
            edges += [(i_ar, i_up), (i_up, i_dn), (i_dn, i_c), (i_ar, i_c)]
            last = i_c
        last_of_prev_layer = last

    first_norm = 0
    first_ar = next(i for i, k in enumerate(kernels) if k.layer == 0 and k.category ==
                    "out_residual" and k.op in ("allreduce", "residual_norm"))
    cross = ((len(kernels) - 1, first_norm), (len(kernels) - 1, first_ar))
    g = OpGraph(kernels=tuple(kernels), edges=tuple(sorted(set(edges))), cross_edges=cross,
                num_regions=arch.num_layers // P, layers_per_region=P, microbatches=m,
                arch=arch, deployment=deploy)
    object.__setattr__(g, "_params", params)
    return g


class StaticDurationModel:
    """Per-kernel time on a pool of p SMs, with no contention and no L2 (docs/method.md §3):

        t(u, p) = launch + max(FLOPs / (rate_dtype * min(p, ctas)/N_SM),
                               bytes / BW(min(p, ctas)),
                               comm_setup + comm_bytes / NVLink)          [µs]

    BW(p) is the hardware's measured bandwidth-vs-SMs response (``Hardware.mem_bandwidth``), not a
    linear share. CUDA-core (``tensor=False``) FLOPs run at 1/16 of the bf16 tensor rate (the
    H100/H200 ratio of dense bf16 tensor to fp32 CUDA-core throughput, 989/67 ~ 15, rounded).

    Args:
        hw: the GPU.

    Raises:
        ValueError: from ``table`` for a kernel with negative or NaN work.
    """

    def __init__(self, hw: Hardware) -> None:
        self.hw = hw

    def kernel_time_us(self, k: Kernel, sms: np.ndarray | float) -> np.ndarray:
        """Time (µs) of kernel ``k`` alone on ``sms`` SMs (array-like, >= 1); shape of ``sms``."""
        hw = self.hw
        p = np.minimum(np.asarray(sms, dtype=float), float(k.ctas))
        if np.any(p <= 0):
            raise ValueError("sms must be >= 1 for every kernel")
        rate = hw.flops_rate(k.dtype) if k.tensor else hw.tensor_flops["bf16"] / 16.0
        t_comp = k.flops / (rate * p / hw.num_sms) * 1e6
        t_mem = k.hbm_bytes / hw.mem_bandwidth(p, read_only=k.act_bytes < 0.5 * k.hbm_bytes) * 1e6
        t_comm = (hw.comm_setup_us + k.comm_bytes / hw.nvlink_Bps * 1e6) if k.is_comm else 0.0
        return hw.launch_us + np.maximum(np.maximum(t_comp, t_mem), t_comm)

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
