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
  group's tokens, G/n tokens, so every token is routed once; with t > 1 the combine ends with an
  all-gather of the MoE output over the t attention ranks (docs/accounting.md item 3).
* Microbatching splits the per-GPU work into m equal parts: R/m requests of attention,
  G*k/(n*m) expert assignments, G/(n*m) routed tokens. All GPUs run microbatch mu together; an
  EP group routes T = G*e/(n*m) tokens of it, so the expected number of distinct local experts
  its assignments hit, under uniform top-k routing, is (E/e) * (1 - (1 - k/E)^T). The busiest
  EP rank (``Deployment.routing``) receives f times the mean assignments and hits
  (E/e) * (1 - (1 - k/E)^(f*T)) experts (``routing.busiest_rank_load``).
* Each module group has its weight and GEMM datatype (``ModelArch.dtypes``, from the checkpoint's
  ``quantization_config``): weight-only quantised experts (MXFP4 weights, bf16 activations)
  compute at the activation datatype's rate, W8A8 FP8 layers at the FP8 rate, each reading its
  narrow weight bytes.
* Per-user throughput = 1 / step time; per-GPU throughput = G / n / step time (tokens/s).

The region is one layer, or the model's repeating pattern of layer kinds (two layers, sliding then
full attention, for GPT-OSS). A model whose layers are not periodic (DeepSeek-V3: 3 dense layers,
then 58 MoE layers) has several region kinds: ``build_forward`` returns each kind's graph with its
run of instances, and the head kernels (final norm, LM head, sampling, embedding lookup) that end
the step. Kernels are listed in the order an optimised engine launches them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Iterable

import networkx as nx
import numpy as np

from subgpu_jax.model.builder import RegionBuilder
from subgpu_jax.model.deployment import REFERENCE_DEPLOYMENT, Deployment
from subgpu_jax.model.hardware import DTYPE_BYTES, Hardware
from subgpu_jax.model.kernel import Kernel, gemm_ctas, stream_ctas
from subgpu_jax.model.kernelcost import analytic_model_of, op_cost
from subgpu_jax.model.models import ModelArch

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
        region_kinds: per-layer ``(attention, MLP)`` kinds of the region, with a third element
            for a layer that keeps some quantised group unquantised (``ModelArch.layer_kinds``;
            ``build_graph``; empty for synthetic graphs).
    """

    #: not counted in the size of a cached value that references it (``model.lru.nbytes_of``)
    SHARED_BY_CACHED_VALUES: ClassVar[bool] = True

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


Region = tuple  # per-layer (attention kind, MLP kind[, unquantised groups]): ModelArch.region_runs



def build_graph(arch: ModelArch, deploy: Deployment, microbatches: int = 1,
                region: Region | None = None) -> OpGraph:
    """Build the per-GPU ``OpGraph`` of one region for ONE of ``microbatches`` equal microbatches.

    Args:
        arch: the model.
        deploy: the deployment (validated against ``arch``).
        microbatches: m >= 1; must divide the per-GPU attention batch R = G/d.
        region: the region kind, a tuple of per-layer ``(attention, MLP[, unquantised])`` kinds
            from ``arch.region_runs()``; default ``arch.main_region()`` (the kind with most
            layers).

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
    b = RegionBuilder(arch, deploy, m)
    last_of_prev_layer: int | None = None
    first_ar = None
    for j, lk in enumerate(region):
        kind, mlp, unq = lk[0], lk[1], (lk[2] if len(lk) > 2 else "")
        i_norm, i_ar = b.attention(j, kind, unq)
        if first_ar is None:
            first_ar = i_ar
        if last_of_prev_layer is not None:
            b.edges += [(last_of_prev_layer, i_norm), (last_of_prev_layer, i_ar)]
        last_of_prev_layer = b.moe(j, i_ar, unq) if mlp == "moe" else b.dense(j, i_ar, unq)
    ks = b.kernels
    cross = ((len(ks) - 1, 0), (len(ks) - 1, first_ar))
    g = OpGraph(kernels=tuple(ks), edges=tuple(sorted(set(b.edges))), cross_edges=cross,
                num_regions=count, layers_per_region=len(region), microbatches=m,
                arch=arch, deployment=deploy, region_kinds=region)
    object.__setattr__(g, "_params", b.params)
    return g


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
               act_writes=(("logits", R * Vl * ab),), ctas=gemm_ctas(R, Vl, H, w_head)),
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
               ctas=stream_ctas(2 * x)),
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


    def __init__(self, hw: Hardware) -> None:
        self.hw = hw

    @property
    def name(self) -> str:
        """The model's name and version (``kernelcost.analytic_model_of(hw)``)."""
        return analytic_model_of(self.hw)

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
        t_comm = k.link_us(hw.comm_setup_us, hw.nvlink_Bps)
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
