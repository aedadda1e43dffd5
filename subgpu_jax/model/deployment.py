"""Deployments: how a model is spread over GPUs (attention TP x DP, MoE EP), the decode step it
serves, its NVLink topology, and the HBM it needs per GPU. The batch accounting every graph
follows is in ``model/graph.py``'s module docstring (docs/method.md §5).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from subgpu_jax.model.hardware import DTYPE_BYTES, Hardware
from subgpu_jax.model.models import ModelArch

__all__ = ["Deployment", "REFERENCE_DEPLOYMENT"]


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
    input_len: int = 32768
    kv_history: int = 32768
    nvlink_domain: int = 0
    scaleout_GBps: float = 50.0
    routing: str = "uniform"
    routing_imbalance: float = 1.0
    kv_lengths: tuple = ()

    def __post_init__(self) -> None:
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

    def memory_bytes(self, arch: ModelArch) -> dict[str, float]:
        """HBM each GPU needs: its weight shard and the KV cache of its requests (bytes).

        Weights: attention (q/k/v/o or the MLA projections, sinks, norms) and dense MLPs split
        over attn_tp (KV projections replicated like the KV heads; the MLA down-projection
        whole on every rank), the router replicated, E/e local experts and the shared experts
        split over attn_tp per MoE layer, and the embedding and LM head split over attn_tp. KV:
        R = G/d requests x kv_history tokens (the window for sliding layers) x local KV heads x
        head_dim x 2 (K and V) x the KV dtype per layer; for MLA (kv_lora + rope) elements per
        token, whole on every rank. Activations and workspaces are not counted (small).

        Returns:
            ``{"weights": bytes, "kv": bytes, "total": bytes}``.
        """
        t, e = self.attn_tp, self.moe_ep
        H, hd = arch.hidden, arch.head_dim
        wb, kvb, eb = (DTYPE_BYTES[arch.weight_dtype], DTYPE_BYTES[arch.kv_dtype],
                       DTYPE_BYTES[arch.expert_dtype])
        qh, kvh = arch.num_heads // t, self.local_kv_heads(arch)
        if arch.is_mla:
            c, r, ql = arch.kv_lora_rank, arch.qk_rope_head_dim, arch.q_lora_rank
            attn = (H * (ql + c + r) + (ql or H) * qh * hd
                    + qh * c * (arch.qk_nope_head_dim + arch.v_head_dim)
                    + qh * arch.v_head_dim * H) * wb
            kv_tok = (c + r) * kvb
        else:
            attn = (H * (qh + 2 * kvh) * hd + qh * hd * H) * wb
            kv_tok = kvh * hd * 2 * kvb
        moe = ((arch.num_experts // e) * 3 * H * arch.moe_intermediate * eb
               + H * arch.num_experts * wb
               + 3 * H * arch.num_shared_experts * arch.moe_intermediate // t * eb) \
            if arch.is_moe else 0.0
        dense = 3 * H * (arch.intermediate // t) * wb
        emb = (1 if arch.tie_embeddings else 2) * arch.vocab * H * wb / t
        weights = sum(attn + (moe if mk == "moe" else dense) for mk in arch.mlp_types) + emb
        kv = 0.0
        for kind in arch.layer_types:
            L = self.kv_tokens(arch.sliding_window if kind == "sliding" else None)
            kv += self.requests_per_gpu * L * kv_tok
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

    def expert_load_factor(self, top_k: int, microbatches: int = 1) -> float:
        """Load of the busiest EP rank / the mean G*k/n (>= 1): ``routing_imbalance`` times, for
        ``routing="multinomial"``, (mu + sigma * c_e) / mu with N = G*k*e/(n*m) assignments of
        a microbatch in an EP group, mu = N/e, sigma = sqrt(N (1/e)(1 - 1/e)) and c_e the
        expected maximum of e standard normals (numerical integral); capped at e."""
        f = float(self.routing_imbalance)
        e = int(self.moe_ep)
        if self.routing == "multinomial" and e > 1:
            from scipy.special import ndtr

            N = self.global_batch * top_k * e / (self.num_gpus * microbatches)
            mu, sig = N / e, math.sqrt(N * (1 / e) * (1 - 1 / e))
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
