"""The HBM each GPU needs and the memory budget a serving engine gives it (docs/accounting.md,
items 5-7).

A serving engine does not hand all of HBM to the model: vLLM's ``--gpu-memory-utilization``
(default 0.9) is the fraction it may use for the weights, the activations of a forward pass and
the KV cache; the remaining (1 - u) is left to what its profiling does not see (CUDA graphs'
private pools, NCCL buffers, the CUDA context, other processes). So a deployment fits when

    weights + KV cache + activations  <=  u * HBM                                [bytes per GPU]

with

* weights: this GPU's shard, each module group in its own datatype (``ModelArch.dtypes``:
  attention projections and dense MLPs split over attention TP t, the routed experts E/e per
  GPU, the shared experts split over t, the router replicated, embedding and LM head split over
  t);
* KV cache: R = G/d requests x the KV history at its largest (``Deployment.peak_kv_history``:
  input_len + output_len for a whole generation; the window for sliding layers) x the elements
  per token (2 * local KV heads * head_dim, or kv_lora + rope for MLA) x the KV datatype's bytes
  (``--kv-dtype fp8`` halves them);
* activations: the peak live activation bytes of one decode step with the whole per-GPU batch
  (one microbatch): the largest single kernel's activation reads + writes, plus the residual
  stream R*h. This is what a decode step needs; vLLM's profiling run uses a prefill-sized batch
  and reserves more, so the check is a lower bound on what the engine keeps back.
"""

from __future__ import annotations

from dataclasses import dataclass

from subgpu_jax.model.deployment import Deployment
from subgpu_jax.model.graph import build_forward
from subgpu_jax.model.hardware import DTYPE_BYTES, Hardware
from subgpu_jax.model.localshapes import LocalShapes
from subgpu_jax.model.models import ModelArch

__all__ = ["MemoryUse", "weight_bytes", "kv_bytes", "activation_bytes", "memory_use",
           "check_memory"]


def weight_bytes(arch: ModelArch, deploy: Deployment) -> float:
    """This GPU's weight bytes (see the module docstring; biases and norms left out, < 0.1%).

    Returns:
        bytes.
    """
    s = LocalShapes.of(arch, deploy)
    t, H, hd, qh = s.t, s.H, s.hd, s.qh
    wb = DTYPE_BYTES[arch.weight_dtype]
    if s.mla:
        attn = (H * s.nd + (s.ql or H) * qh * hd + qh * s.c * (s.nope + s.v) + qh * s.v * H)
    else:
        attn = H * s.nq + qh * hd * H
    experts = s.El * 3 * H * s.F
    shared = 3 * H * s.Fs
    dense = 3 * H * s.I

    def layer(kind: tuple[str, ...]) -> float:
        """Weight bytes of one layer of ``ModelArch.layer_kinds`` kind ``kind``."""
        unq = kind[2] if len(kind) > 2 else ""

        def b(group: str) -> float:
            return DTYPE_BYTES[arch.dtypes(group, unq)[0]]
        if kind[1] == "moe":
            mlp = experts * b("experts") + H * arch.num_experts * wb + shared * b("shared_experts")
        else:
            mlp = dense * b("dense_mlp")
        return attn * b("attn") + mlp

    emb = (1 if arch.tie_embeddings else 2) * arch.vocab * H * wb / t
    return float(sum(layer(k) for k in arch.layer_kinds()) + emb)


def kv_bytes(arch: ModelArch, deploy: Deployment) -> float:
    """This GPU's KV cache at its largest (bytes): R requests x ``peak_kv_history`` tokens (the
    window for sliding layers; the busiest DP rank's mean with ``kv_lengths``) x elements per
    token x ``arch.kv_dtype`` bytes, summed over the layers."""
    kvb = DTYPE_BYTES[arch.kv_dtype]
    s = LocalShapes.of(arch, deploy)
    kv_tok = (s.c + s.r) * kvb if s.mla else s.kvh * s.hd * 2 * kvb
    peak = deploy.step(deploy.output_len) if deploy.output_len else deploy
    return float(sum(deploy.requests_per_gpu
                     * peak.kv_tokens(arch.sliding_window if kind == "sliding" else None)
                     * kv_tok for kind in arch.layer_types))


def activation_bytes(arch: ModelArch, deploy: Deployment) -> float:
    """Peak live activation bytes of one decode step with the whole per-GPU batch: the largest
    kernel's activation reads + writes (every region kind and the head, one microbatch) plus
    the residual stream R*h in the activation datatype."""
    fp = build_forward(arch, deploy, 1)
    kernels = [k for g, _ in fp.runs for k in g.kernels] + list(fp.head)
    resid = deploy.requests_per_gpu * arch.hidden * DTYPE_BYTES[arch.weight_dtype]
    return float(max(k.act_bytes for k in kernels) + resid)


@dataclass(frozen=True)
class MemoryUse:
    """What one GPU needs against its budget (bytes).

    Attributes:
        weights, kv, activations: see the module functions. hbm: the GPU's HBM.
        utilization: the budget's fraction u (``Deployment.gpu_memory_utilization``).
        kv_tokens: tokens per request in the KV cache at its largest.
        requests: R, requests per GPU.
    """

    weights: float
    kv: float
    activations: float
    hbm: float
    utilization: float
    kv_tokens: int
    requests: int

    @property
    def total(self) -> float:
        """weights + KV cache + activations (bytes)."""
        return self.weights + self.kv + self.activations

    @property
    def budget(self) -> float:
        """u * HBM (bytes)."""
        return self.utilization * self.hbm

    @property
    def fits(self) -> bool:
        """True when ``total`` <= ``budget``."""
        return self.total <= self.budget

    def as_dict(self) -> dict:
        """The fields and ``total``, ``budget`` in GB (1e9 bytes) for outputs."""
        return {"weights_GB": self.weights / 1e9, "kv_GB": self.kv / 1e9,
                "activations_GB": self.activations / 1e9, "total_GB": self.total / 1e9,
                "budget_GB": self.budget / 1e9, "hbm_GB": self.hbm / 1e9,
                "gpu_memory_utilization": self.utilization, "kv_tokens": self.kv_tokens,
                "requests_per_gpu": self.requests}


def memory_use(arch: ModelArch, deploy: Deployment, hw: Hardware) -> MemoryUse:
    """Weights, KV cache and activations of one GPU against ``deploy.gpu_memory_utilization``
    of ``hw``'s HBM.

    Raises:
        ValueError: a deployment invalid for the model.
    """
    deploy.validate(arch)
    return MemoryUse(weights=weight_bytes(arch, deploy), kv=kv_bytes(arch, deploy),
                     activations=activation_bytes(arch, deploy), hbm=float(hw.hbm_bytes),
                     utilization=float(deploy.gpu_memory_utilization),
                     kv_tokens=deploy.peak_kv_history, requests=deploy.requests_per_gpu)


def check_memory(arch: ModelArch, deploy: Deployment, hw: Hardware,
                 batch_flag: str = "--batch") -> MemoryUse:
    """``memory_use``, refusing a deployment over its budget (``batch_flag``: the command's
    batch option, named in the advice: ``--batch``, or ``--batches`` for a grid).

    Raises:
        ValueError: weights + KV cache + activations over u * HBM (one line with the sizes, the
            budget and the flags that change them).
    """
    mu = memory_use(arch, deploy, hw)
    if not mu.fits:
        u = mu.utilization
        raise ValueError(
            f"deployment does not fit: each GPU needs {mu.total / 1e9:.1f} GB (weights "
            f"{mu.weights / 1e9:.1f} GB + KV cache {mu.kv / 1e9:.1f} GB in {arch.kv_dtype} for "
            f"{mu.requests} requests x {mu.kv_tokens} tokens + activations "
            f"{mu.activations / 1e9:.1f} GB) but its budget is {mu.budget / 1e9:.1f} GB "
            f"(--gpu-memory-utilization {u:g} of a {hw.name}'s {hw.hbm_bytes / 1e9:.1f} GB); "
            f"lower {batch_flag} or the KV length (--kv-history, --input-len, --output-len), "
            "raise --dp or --gpus, or use --kv-dtype fp8")
    return mu
