"""Deployments: how a model is spread over GPUs (attention TP x DP, MoE EP), the decode step (or
whole generation) it serves, its NVLink topology, its MoE dispatch and its memory budget. The
batch accounting every graph follows is in ``model/graph.py``'s module docstring (docs/method.md
§5); the HBM each GPU needs and the fit check are in ``model/memory.py``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from subgpu_jax.model.models import ModelArch
from subgpu_jax.model.routing import DISPATCH_MODES

__all__ = ["Deployment", "REFERENCE_DEPLOYMENT", "DEFAULT_CONTEXT", "RECORD_FIELDS", "RECORD_OPTIONS"]

#: Prompt length and KV history (tokens) when neither is given: the reference workload's 32,768
#: (docs/method.md §5).
DEFAULT_CONTEXT = 32768
#: Deployment fields every search record carries (``Deployment.to_record``), in order.
RECORD_FIELDS = ("num_gpus", "attn_tp", "attn_dp", "moe_ep", "global_batch", "kv_history")
#: Further deployment fields (topology, routing, serving) a record carries after those.
RECORD_OPTIONS = ("input_len", "nvlink_domain", "scaleout_GBps", "routing", "routing_imbalance",
                  "output_len", "dispatch", "gpu_memory_utilization")


@dataclass(frozen=True)
class Deployment:
    """How a model is spread over GPUs, and the decode step it serves.

    Attributes:
        num_gpus: n, GPUs serving the model (= attn_tp * attn_dp).
        attn_tp: t, attention tensor parallelism.
        attn_dp: d, attention data parallelism.
        moe_ep: e, MoE expert parallelism (1 for dense models, whose MLP uses ``attn_tp``).
        global_batch: G, decode requests in flight (tokens per step).
        input_len: prompt length (tokens); None (default) = ``kv_history``, or 32,768 when
            neither is given.
        kv_history: tokens in each request's KV cache at this step; None (default) =
            ``input_len`` (the first decode step after the prompt). Must be >= ``input_len``
            (the prompt is in the cache at every decode step).
        output_len: tokens generated per request, 0 (default) = one decode step at
            ``kv_history``. With N > 0 the deployment serves a whole generation: steps
            s = 0..N-1 read ``input_len + s`` tokens (``step``), ``kv_history`` must equal
            ``input_len``, and the KV cache grows to ``input_len + N`` (``peak_kv_history``).
        dispatch: MoE dispatch payload, ``"per-expert"`` (default: one copy of a token per
            selected expert on another rank) or ``"per-rank"`` (one copy per destination rank,
            deduplicated; ``routing.DISPATCH_MODES``).
        gpu_memory_utilization: fraction of each GPU's HBM for weights, KV cache and
            activations (vLLM's ``--gpu-memory-utilization``, default 0.9); the rest is left to
            CUDA graphs, NCCL buffers and the CUDA context (``model.memory``).
        moe_tp_gather: with attention TP t > 1 and an MoE, the combine ends with the all-gather
            of the MoE output over the t attention ranks (default True; docs/accounting.md item
            3). False prices the step as before that fix (no gather, the shared experts'
            partial sums all-reduced, the combine's sum over all Rm tokens): the step the
            committed H200 measurements (docs/results.md, taken before the fix) emulated.
        nvlink_domain: GPUs per NVLink domain (8 for a DGX/HGX node, 72 for a GB200 NVL72
            rack); 0 (default) = all ``num_gpus`` in one NVLink domain. TP groups are packed
            into domains; a collective spanning domains sends over the scale-out network.
        scaleout_GBps: scale-out (InfiniBand/Ethernet) bandwidth per GPU and direction, GB/s
            (default 50: one 400 Gb/s ConnectX-7 NIC per GPU, as in DGX H100/H200/B200 and
            GB200 NVL72 systems).
        routing: ``"uniform"`` (default: every EP rank receives the mean G*k/n assignments) or
            ``"multinomial"`` (the busiest EP rank's expected load when a microbatch's
            assignments are routed independently and uniformly: mean + sigma * E[max of e
            standard normals], the normal approximation of the binomial loads).
        routing_imbalance: a user-given factor >= 1 on the busiest EP rank's load (measured
            load of the busiest rank / mean), applied on top of ``routing``.
        kv_lengths: per-request KV lengths (tokens) of the G requests, in order (empty: every
            request has ``kv_history``); requests are dealt to the d attention-DP ranks round
            robin (request i to rank i mod d; a list shorter than G is repeated), and decode
            attention is charged for the busiest rank (``kv_tokens``), since the step waits for
            the slowest rank.

    Raises:
        ValueError: ``validate`` names the offending field.
    """

    num_gpus: int = 32
    attn_tp: int = 8
    attn_dp: int = 4
    moe_ep: int = 32
    global_batch: int = 2048
    input_len: int | None = None
    kv_history: int | None = None
    nvlink_domain: int = 0
    scaleout_GBps: float = 50.0
    routing: str = "uniform"
    routing_imbalance: float = 1.0
    kv_lengths: tuple = ()
    output_len: int = 0
    dispatch: str = "per-expert"
    gpu_memory_utilization: float = 0.9
    moe_tp_gather: bool = True

    def __post_init__(self) -> None:
        for f in ("kv_history", "input_len"):  # the one given is checked before it fills in
            v = getattr(self, f)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer))
                                  or v <= 0):
                raise ValueError(f"deployment.{f} must be a positive integer (tokens), got {v!r}")
        if self.input_len is None and self.kv_history is None:
            object.__setattr__(self, "input_len", DEFAULT_CONTEXT)
        if self.input_len is None:
            object.__setattr__(self, "input_len", self.kv_history)
        if self.kv_history is None:
            object.__setattr__(self, "kv_history", self.input_len)
        if self.dispatch not in DISPATCH_MODES:
            raise ValueError(f"deployment.dispatch must be one of {', '.join(DISPATCH_MODES)}, "
                             f"got {self.dispatch!r}")
        v = self.gpu_memory_utilization
        if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)) \
                or not math.isfinite(v) or not 0 < v <= 1:
            raise ValueError(f"deployment.gpu_memory_utilization must be a fraction in (0, 1] "
                             f"of the GPU's HBM, got {v!r}")
        if not isinstance(self.moe_tp_gather, (bool, np.bool_)):
            raise ValueError(f"deployment.moe_tp_gather must be True or False, got "
                             f"{self.moe_tp_gather!r}")
        v = self.output_len
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            raise ValueError(f"deployment.output_len must be a non-negative integer (tokens; 0 = "
                             f"one step), got {v!r}")
        if self.routing not in ("uniform", "multinomial"):
            raise ValueError(f"deployment.routing must be 'uniform' or 'multinomial', got "
                             f"{self.routing!r}")
        v = self.routing_imbalance
        if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)) \
                or not math.isfinite(v) or v < 1:
            raise ValueError(f"deployment.routing_imbalance must be a number >= 1 (busiest rank "
                             f"load / mean), got {v!r}")
        kl = tuple(self.kv_lengths)
        if any(isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < 1 for x in kl):
            raise ValueError("deployment.kv_lengths must be positive integers (tokens)")
        object.__setattr__(self, "kv_lengths", tuple(int(x) for x in kl))
        v = self.nvlink_domain
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            raise ValueError(f"deployment.nvlink_domain must be a non-negative integer (0 = one "
                             f"domain), got {v!r}")
        v = self.scaleout_GBps
        if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)) \
                or not math.isfinite(v) or v <= 0:
            raise ValueError(f"deployment.scaleout_GBps must be a positive number, got {v!r}")
        for f in ("num_gpus", "attn_tp", "attn_dp", "moe_ep", "global_batch", "input_len",
                  "kv_history"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v <= 0:
                raise ValueError(f"deployment.{f} must be a positive integer, got {v!r}")
        if self.kv_history < self.input_len:
            raise ValueError(f"deployment.kv_history={self.kv_history} must be >= input_len="
                             f"{self.input_len}: the prompt is in the KV cache at every decode "
                             "step")
        if self.output_len and self.kv_history != self.input_len:
            raise ValueError(f"deployment.kv_history={self.kv_history} must equal input_len="
                             f"{self.input_len} with output_len={self.output_len}: a generation "
                             "starts right after the prompt")
        if self.attn_tp * self.attn_dp != self.num_gpus:
            raise ValueError(f"deployment: attn_tp*attn_dp = {self.attn_tp * self.attn_dp} must "
                             f"equal num_gpus = {self.num_gpus}")
        if self.global_batch % self.attn_dp:
            raise ValueError(f"deployment.global_batch={self.global_batch} must be divisible by "
                             f"attn_dp={self.attn_dp} (no request may be dropped)")

    def validate(self, arch: ModelArch) -> None:
        """Check the deployment against a model.

        Raises:
            ValueError: TP larger than or not dividing the query heads; KV heads that neither
                divide nor are divided by TP; EP not dividing the experts or the GPU count;
                EP != 1 for a dense model; a dense MLP or the shared experts not divisible by TP.
        """
        t = self.attn_tp
        if t > arch.num_heads or arch.num_heads % t:
            raise ValueError(f"deployment.attn_tp={t} must divide the model's "
                             f"{arch.num_heads} query heads")
        kv = arch.num_kv_heads
        if not arch.is_mla and kv % t and t % kv:
            raise ValueError(f"deployment.attn_tp={t} and the model's {kv} KV heads: one must "
                             f"divide the other (split the KV heads over TP, or replicate them "
                             f"t/kv times); use a TP that divides {kv} or is a multiple of it")
        if "dense" in arch.mlp_types and arch.intermediate % t:
            raise ValueError(f"deployment.attn_tp={t} must divide the dense MLP "
                             f"intermediate size {arch.intermediate}")
        if arch.num_shared_experts and (arch.num_shared_experts * arch.moe_intermediate) % t:
            raise ValueError(f"deployment.attn_tp={t} must divide the shared experts' "
                             f"intermediate size {arch.num_shared_experts * arch.moe_intermediate}")
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

    def local_kv_heads(self, arch: ModelArch) -> int:
        """KV heads each GPU holds: kv/t when t divides them, 1 (replicated) when kv divides t
        (``validate`` refuses the rest); 1 for multi-head latent attention (one shared latent
        head)."""
        if arch.is_mla:
            return 1
        return max(1, arch.num_kv_heads // self.attn_tp)

    def to_record(self) -> dict:
        """The deployment's fields of a search record (the one codec with ``from_record``):
        ``RECORD_FIELDS`` then ``RECORD_OPTIONS``, in that order."""
        return {f: getattr(self, f) for f in RECORD_FIELDS + RECORD_OPTIONS}

    @classmethod
    def from_record(cls, rec, options: bool = True) -> "Deployment":
        """The ``Deployment`` of a search record: its ``RECORD_FIELDS`` (integers) and, with
        ``options``, the ``RECORD_OPTIONS`` it holds (a record of an older version may lack
        some; the defaults apply).

        Raises:
            KeyError: a missing ``RECORD_FIELDS`` field. ValueError: a field that is not an
                integer, or an infeasible deployment (``__post_init__``).
        """
        core = {f: int(rec[f]) for f in RECORD_FIELDS}
        extra = {f: rec[f] for f in RECORD_OPTIONS if f in rec} if options else {}
        return cls(**core, **extra)

    def step(self, s: int) -> "Deployment":
        """The single decode step s (0-based) of this deployment's generation: every request's
        KV history (and each of ``kv_lengths``) advanced by s tokens, ``output_len`` 0.

        Raises:
            ValueError: s < 0.
        """
        if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 0:
            raise ValueError(f"step must be a non-negative integer, got {s!r}")
        return dataclasses.replace(self, kv_history=int(self.kv_history) + int(s),
                                   kv_lengths=tuple(x + int(s) for x in self.kv_lengths),
                                   output_len=0)

    @property
    def peak_kv_history(self) -> int:
        """Tokens in each request's KV cache at its largest: ``kv_history + output_len`` (the
        whole generation's last token appended), ``kv_history`` for one step."""
        return int(self.kv_history) + int(self.output_len)

    def kv_tokens(self, window: int | None = None) -> float:
        """KV tokens per request that the busiest attention-DP rank reads per layer (tokens):
        ``min(kv_history, window)`` without ``kv_lengths``; otherwise the largest, over the d
        ranks, of the mean of min(length, window) over the rank's requests."""
        w = window if window else None
        if not self.kv_lengths:
            return min(self.kv_history, w) if w else self.kv_history
        G, d = self.global_batch, self.attn_dp
        L = np.asarray([self.kv_lengths[i % len(self.kv_lengths)] for i in range(G)], float)
        if w:
            L = np.minimum(L, w)
        return float(L.reshape(G // d, d).mean(axis=0).max())

    def expert_load_factor(self, top_k: int, microbatches: int = 1,
                           token_var: float | None = None) -> float:
        """Load of the busiest EP rank / the mean G*k/n (>= 1): ``routing_imbalance`` times, for
        ``routing="multinomial"``, (mu + sigma * c_e) / mu with N = G*k*e/(n*m) assignments of
        a microbatch in an EP group (T = N/k tokens), mu = N/e, sigma = sqrt(T v) and c_e the
        expected maximum of e standard normals (numerical integral); capped at e. v, the
        variance of one token's experts on a rank, is k (1/e)(1 - 1/e) (multinomial), or
        ``token_var`` (group-limited routing: ``routing.rank_count_variance``)."""
        f = float(self.routing_imbalance)
        e = int(self.moe_ep)
        if self.routing == "multinomial" and e > 1:
            from scipy.special import ndtr

            N = self.global_batch * top_k * e / (self.num_gpus * microbatches)
            v = top_k * (1 / e) * (1 - 1 / e) if token_var is None else float(token_var)
            mu, sig = N / e, math.sqrt(N / top_k * v)
            x = np.linspace(-12.0, 12.0, 24001)
            pdf = np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
            c = float(np.trapezoid(x * e * pdf * ndtr(x) ** (e - 1), x))
            f *= min(float(e), (mu + sig * c) / mu)
        return f

    @property
    def domain(self) -> int:
        """GPUs per NVLink domain (``nvlink_domain``, or ``num_gpus`` when 0)."""
        return int(self.nvlink_domain) or int(self.num_gpus)

    def topology_label(self) -> str:
        """One line describing the topology, for outputs."""
        if self.num_gpus == 1:
            return "one GPU"
        if self.domain >= self.num_gpus:
            return f"one NVLink domain of {self.num_gpus} GPUs"
        return (f"NVLink domains of {self.domain} GPUs, scale-out {self.scaleout_GBps:g} GB/s per "
                "GPU between them")

    def comm_split(self, payload: float, span: int, collective: str) -> dict:
        """Kernel fields of a collective over ``span`` GPUs sending ``payload`` bytes per GPU.

        An all-to-all (``"alltoall"``) sends (span - domain)/(span - 1) of its payload to GPUs
        in other domains; a ring all-reduce (``"allreduce"``) spanning domains is paced by its
        inter-domain hops, so all of it counts at the scale-out rate.

        Returns:
            ``{"comm_bytes", "scaleout_bytes", "scaleout_Bps"}``.
        """
        dom = self.domain
        if span <= dom or payload <= 0:
            out = 0.0
        elif collective == "alltoall":
            out = payload * (span - dom) / (span - 1)
        else:
            out = payload
        return {"comm_bytes": float(payload), "scaleout_bytes": float(out),
                "scaleout_Bps": float(self.scaleout_GBps) * 1e9 if out else 0.0}

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
