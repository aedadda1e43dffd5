"""Model architectures: presets from the public Hugging Face configs, and ``config.json`` loading.

Each preset copies the fields of the model's public ``config.json`` (sources in ``MODELS``'s
docstrings). ``load_hf_config`` reads such a file from disk (never the network) for the families
in ``FAMILIES``.

Layer-wise kinds: every layer has an attention kind (``layer_types``: full or sliding), an MLP
kind (``mlp_types``: dense or moe) and, where a checkpoint excludes some layers from its
quantisation, the module groups it keeps unquantised (``unquantised_layers``). The forward pass is a sequence of region instances of
possibly different region graphs (``ModelArch.region_runs``): for example DeepSeek-V3 is 3 dense
layers, then 58 MoE layers; GPT-OSS is 18 instances of one (sliding, full) two-layer region.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping

from subgpu_jax.model.hardware import DTYPE_BYTES
from subgpu_jax.model.quant import parse_unquantised, quant_dtypes
from subgpu_jax.model.routing import expected_distinct

__all__ = ["ModelArch", "MODELS", "FAMILIES", "MODEL_TYPES", "get_model", "load_hf_config", "resolve_model",
           "expected_distinct"]

#: Hugging Face ``model_type`` values ``load_hf_config`` reads (README "Your own model" and docs/usage.md list them too).
FAMILIES: tuple[str, ...] = ("llama", "qwen2", "qwen3", "qwen3_moe", "mixtral", "gpt_oss",
                             "deepseek_v3")
#: ``model_type`` values ``load_hf_config`` reads: the families, and ``mistral`` (Hugging Face
#: ``MistralConfig``: the llama architecture with a sliding window on every layer when
#: ``sliding_window`` is set; modelled as family ``llama``).
MODEL_TYPES: tuple[str, ...] = FAMILIES + ("mistral",)


@dataclass(frozen=True)
class ModelArch:
    """A decoder-only transformer, as far as decode cost is concerned.

    Attributes:
        name: identifier (``"gpt-oss-120b"`` ...).
        family: a ``FAMILIES`` entry (``"llama"``, ``"qwen3_moe"``, ``"deepseek_v3"`` ...).
        num_layers: decoder layers.
        hidden: hidden size (elements).
        num_heads: query heads.
        num_kv_heads: key/value heads (GQA; for MLA the query heads, unused by the cost model).
        head_dim: per-head dimension, from the config (NOT hidden / heads: Qwen3 differs); for
            MLA the query/key head dimension ``qk_nope_head_dim + qk_rope_head_dim``.
        vocab: vocabulary size.
        intermediate: dense MLP intermediate size (the dense layers of an MoE model too; 0 when
            the model has no dense layer).
        num_experts: routed experts per MoE layer (0 = dense model).
        top_k: experts per token.
        moe_intermediate: intermediate size of one expert.
        num_shared_experts: experts every token uses besides its top-k (DeepSeek-V3: 1), each
            of ``moe_intermediate`` width.
        n_group, topk_group: grouped routing (DeepSeek-V3: 8 groups, the top 4 groups are
            eligible); 0 = plain top-k. The expected per-expert load is the same k/E.
        layer_types: per-layer attention kind, ``"full"`` or ``"sliding"``; length
            ``num_layers``.
        mlp_types: per-layer MLP kind, ``"dense"`` or ``"moe"``; length ``num_layers``
            (default: every layer ``"moe"`` for an MoE model, ``"dense"`` otherwise).
        sliding_window: window (tokens) of sliding-window layers; 0 if none.
        attn_bias: q/k/v/o projections carry biases (GPT-OSS).
        qkv_bias: q/k/v projections (not o) carry biases (Qwen2).
        mlp_bias: expert/dense MLP projections carry biases (GPT-OSS).
        qk_norm: per-head RMSNorm of q and k (Qwen3).
        attention_sinks: one learned sink logit per head (GPT-OSS).
        tie_embeddings: input embedding and LM head share weights.
        q_lora_rank, kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim, v_head_dim: multi-head
            latent attention (DeepSeek-V3; ``kv_lora_rank`` > 0 turns it on; ``q_lora_rank`` 0
            means a direct query projection).
        weight_dtype: datatype of attention/dense/router weights and activations.
        expert_dtype: datatype of expert weights (``"mxfp4"`` for GPT-OSS).
        expert_act_dtype: datatype of the activations entering the expert GEMMs. The GEMMs run
            at this datatype's tensor rate: weight-only quantised experts (MXFP4 or FP8 weights,
            bf16 activations) compute at the bf16 rate, since no GPU has a native
            low-precision-weight x bf16-activation tensor-core path; DeepSeek-V3's FP8 experts
            quantise activations too (``activation_scheme: dynamic``) and run at the FP8 rate.
        kv_dtype: datatype of the KV cache (``subgpu ... --kv-dtype fp8`` halves its bytes).
        attn_dtype, attn_act_dtype: weight and GEMM datatypes of the attention projections
            (q/k/v/o, the MLA projections); ``""`` = ``weight_dtype``.
        mlp_dtype, mlp_act_dtype: the same for the dense MLP layers; ``""`` = ``weight_dtype``.
        shared_dtype, shared_act_dtype: the same for the shared experts; ``""`` = the routed
            experts' ``expert_dtype`` / ``expert_act_dtype``. ``load_hf_config`` sets all of
            these from the checkpoint's ``quantization_config`` (``model.quant``); the router,
            norms, embedding and LM head are always ``weight_dtype``.
        unquantised_layers: per layer, the ``+``-joined module groups (``"dense_mlp"``,
            ``"attn+dense_mlp"`` ...) that layer keeps in ``weight_dtype`` although the group is
            quantised elsewhere (a checkpoint's ``modules_to_not_convert`` naming some layers);
            ``""`` for none; length ``num_layers``, or empty when no layer differs.

    Raises:
        ValueError: from ``__post_init__`` for inconsistent fields (names the field).
    """

    name: str
    family: str
    num_layers: int
    hidden: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab: int
    intermediate: int = 0
    num_experts: int = 0
    top_k: int = 0
    moe_intermediate: int = 0
    num_shared_experts: int = 0
    n_group: int = 0
    topk_group: int = 0
    layer_types: tuple[str, ...] = ()
    mlp_types: tuple[str, ...] = ()
    sliding_window: int = 0
    attn_bias: bool = False
    qkv_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    attention_sinks: bool = False
    tie_embeddings: bool = False
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    weight_dtype: str = "bf16"
    expert_dtype: str = "bf16"
    expert_act_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    attn_dtype: str = ""
    attn_act_dtype: str = ""
    mlp_dtype: str = ""
    mlp_act_dtype: str = ""
    shared_dtype: str = ""
    shared_act_dtype: str = ""
    unquantised_layers: tuple[str, ...] = ()
    #: the config's ``model_type`` (``"mistral"`` for a Mistral config modelled as family
    #: ``llama``); ``""`` for a preset (then ``family``). What the CLI prints; not part of
    #: equality or ``repr`` (search fingerprints stay as they were).
    model_type: str = dataclasses.field(default="", compare=False, repr=False)

    def __post_init__(self) -> None:
        for f in ("num_layers", "hidden", "num_heads", "num_kv_heads", "head_dim", "vocab"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise ValueError(f"model.{f} must be a positive integer, got {v!r}")
        for f in ("intermediate", "num_experts", "top_k", "moe_intermediate", "sliding_window",
                  "num_shared_experts", "n_group", "topk_group", "q_lora_rank", "kv_lora_rank",
                  "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"model.{f} must be a non-negative integer, got {v!r}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"model.num_kv_heads={self.num_kv_heads} must divide "
                             f"num_heads={self.num_heads}")
        if self.num_experts:
            if not 1 <= self.top_k <= self.num_experts:
                raise ValueError(f"model.top_k must be in 1..{self.num_experts}, got {self.top_k}")
            if self.moe_intermediate <= 0:
                raise ValueError("model.moe_intermediate must be positive for an MoE model")
            if self.n_group:
                if self.num_experts % self.n_group or not 1 <= self.topk_group <= self.n_group:
                    raise ValueError(f"model.n_group={self.n_group} must divide the "
                                     f"{self.num_experts} experts and topk_group must be in "
                                     f"1..n_group, got {self.topk_group}")
        elif self.num_shared_experts:
            raise ValueError("model.num_shared_experts needs routed experts (num_experts > 0)")
        n = self.num_layers
        if not self.layer_types:
            object.__setattr__(self, "layer_types", ("full",) * n)
        if not self.mlp_types:
            object.__setattr__(self, "mlp_types", ("moe" if self.num_experts else "dense",) * n)
        if not isinstance(self.unquantised_layers, tuple):
            object.__setattr__(self, "unquantised_layers", tuple(self.unquantised_layers))
        if self.unquantised_layers:
            if len(self.unquantised_layers) != n:
                raise ValueError(f"model.unquantised_layers has {len(self.unquantised_layers)} "
                                 f"entries, num_layers is {n} (or leave it empty)")
            for tag in self.unquantised_layers:
                parse_unquantised(tag)
        for f in ("layer_types", "mlp_types"):
            v = getattr(self, f)
            if not isinstance(v, tuple):
                object.__setattr__(self, f, tuple(v))
            if len(getattr(self, f)) != n:
                raise ValueError(f"model.{f} has {len(getattr(self, f))} entries, num_layers is "
                                 f"{n}")
        bad = set(self.layer_types) - {"full", "sliding"}
        if bad:
            raise ValueError(f"model.layer_types entries must be 'full' or 'sliding', got {bad}")
        bad = set(self.mlp_types) - {"dense", "moe"}
        if bad:
            raise ValueError(f"model.mlp_types entries must be 'dense' or 'moe', got {bad}")
        if "moe" in self.mlp_types and not self.num_experts:
            raise ValueError("model.mlp_types has 'moe' layers but num_experts is 0")
        if "dense" in self.mlp_types and self.intermediate <= 0:
            raise ValueError("model.intermediate must be positive when a layer is dense "
                             "(mlp_types)")
        if "sliding" in self.layer_types and self.sliding_window <= 0:
            raise ValueError("model.sliding_window must be positive when a layer is 'sliding'")
        if self.kv_lora_rank:
            for f in ("qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"):
                if getattr(self, f) <= 0:
                    raise ValueError(f"model.{f} must be positive for multi-head latent "
                                     "attention (kv_lora_rank > 0)")
            if self.head_dim != self.qk_nope_head_dim + self.qk_rope_head_dim:
                raise ValueError(f"model.head_dim must be qk_nope_head_dim + qk_rope_head_dim = "
                                 f"{self.qk_nope_head_dim + self.qk_rope_head_dim} for multi-head"
                                 f" latent attention, got {self.head_dim}")
        for f in ("weight_dtype", "expert_dtype", "expert_act_dtype", "kv_dtype"):
            if getattr(self, f) not in DTYPE_BYTES:
                raise ValueError(f"model.{f} must be one of {sorted(DTYPE_BYTES)}, "
                                 f"got {getattr(self, f)!r}")
        for f in ("attn_dtype", "attn_act_dtype", "mlp_dtype", "mlp_act_dtype", "shared_dtype",
                  "shared_act_dtype"):
            if getattr(self, f) and getattr(self, f) not in DTYPE_BYTES:
                raise ValueError(f"model.{f} must be '' (the default) or one of "
                                 f"{sorted(DTYPE_BYTES)}, got {getattr(self, f)!r}")

    def dtypes(self, group: str, unquantised: str = "") -> tuple[str, str]:
        """``(weight datatype, GEMM datatype)`` of a module group: ``"attn"`` (attention
        projections), ``"dense_mlp"``, ``"shared_experts"``, ``"experts"`` (routed), or
        ``"other"`` (router, norms, embedding, LM head: ``weight_dtype``). See the fields.

        Args:
            group: the module group.
            unquantised: a layer's ``unquantised_layers`` entry (the third element of its
                ``layer_kinds`` entry): a group it names is ``weight_dtype`` in that layer.

        Raises:
            ValueError: an unknown group or entry.
        """
        w = self.weight_dtype
        if group in parse_unquantised(unquantised):
            return w, w
        if group == "attn":
            return self.attn_dtype or w, self.attn_act_dtype or w
        if group == "dense_mlp":
            return self.mlp_dtype or w, self.mlp_act_dtype or w
        if group == "experts":
            return self.expert_dtype, self.expert_act_dtype
        if group == "shared_experts":
            return self.shared_dtype or self.expert_dtype, \
                self.shared_act_dtype or self.expert_act_dtype
        if group == "other":
            return w, w
        raise ValueError(f"group must be attn, dense_mlp, shared_experts, experts or other, "
                         f"got {group!r}")

    def all_bf16(self) -> "ModelArch":
        """This model with every module group's weights and GEMMs in bf16 (what the GPU
        runtime executes on Hopper: no MXFP4 tensor cores, and DeepSeek-V3's block-wise FP8
        layers run as bf16 GEMMs); ``self`` when it already is."""
        groups = ("attn", "dense_mlp", "shared_experts", "experts")
        if all(self.dtypes(g) == ("bf16", "bf16") for g in groups) \
                and not self.unquantised_layers:
            return self
        from dataclasses import replace
        return replace(self, expert_dtype="bf16", expert_act_dtype="bf16", attn_dtype="",
                       attn_act_dtype="", mlp_dtype="", mlp_act_dtype="", shared_dtype="",
                       shared_act_dtype="", unquantised_layers=())

    # ------------------------------------------------------------------ derived
    @property
    def is_moe(self) -> bool:
        """True for a mixture-of-experts model (some layers may still be dense)."""
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        """True for multi-head latent attention (a compressed, head-shared KV cache)."""
        return self.kv_lora_rank > 0

    @property
    def period(self) -> tuple[str, ...]:
        """The shortest repeating pattern of ``layer_types`` (the main region's attention
        kinds; ``region_kinds`` gives the MLP kinds too)."""
        return _period(self.layer_types)

    def layer_kinds(self) -> tuple[tuple[str, ...], ...]:
        """Per layer ``(attention kind, MLP kind)``, e.g. ``("sliding", "moe")``, and a third
        element, the layer's ``unquantised_layers`` entry (``("full", "dense", "dense_mlp")``),
        for a layer that keeps some quantised group in ``weight_dtype``."""
        tags = self.unquantised_layers or ("",) * self.num_layers
        return tuple((a, mk, u) if u else (a, mk)
                     for a, mk, u in zip(self.layer_types, self.mlp_types, tags))

    def region_runs(self) -> tuple[tuple[tuple[tuple[str, ...], ...], int], ...]:
        """The forward pass as runs of region instances: ``((region kinds, count), ...)`` in
        layer order, a region being a tuple of per-layer ``(attention, MLP)`` kinds.

        When the per-layer kinds repeat with a period p <= 8 (GPT-OSS: sliding, full) there is
        one run of num_layers / p instances of that p-layer region. Otherwise the layers are
        grouped into blocks of the attention period (1 if it is longer than 8) and consecutive
        equal blocks form a run: DeepSeek-V3 gives ``(((full, dense),), 3), (((full, moe),),
        58)``; ``mlp_only_layers=[0]`` gives one dense layer then 47 MoE layers; an FP8 Llama whose
        config keeps layers 0 and 31's MLPs in bf16 gives ``(((full, dense, dense_mlp),), 1),
        (((full, dense),), 30), (((full, dense, dense_mlp),), 1)``.
        """
        kinds = self.layer_kinds()
        p = len(_period(kinds))
        if p <= 8:
            return ((kinds[:p], len(kinds) // p),)
        P = len(self.period)
        if P > 8 or len(kinds) % P:
            P = 1
        runs: list[list] = []
        for i in range(0, len(kinds), P):
            b = kinds[i:i + P]
            if runs and runs[-1][0] == b:
                runs[-1][1] += 1
            else:
                runs.append([b, 1])
        return tuple((b, c) for b, c in runs)

    def main_region(self) -> tuple[tuple[str, ...], ...]:
        """The region kind with the most layers (ties: the first in layer order): the region
        graph searches and pipelines by default."""
        tot: dict = {}
        for b, c in self.region_runs():
            tot[b] = tot.get(b, 0) + c * len(b)
        return max(tot, key=lambda b: tot[b])  # dicts keep insertion order: first on ties

    def _attn_params(self) -> int:
        """Parameters of one attention block (projections, biases, q/k norms, sinks, the
        MLA latent norms)."""
        h, hd, H = self.hidden, self.head_dim, self.num_heads
        if self.is_mla:
            r, c = self.qk_rope_head_dim, self.kv_lora_rank
            if self.q_lora_rank:
                qp = h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * H * hd
            else:
                qp = h * H * hd
            kvp = h * (c + r) + c + c * H * (self.qk_nope_head_dim + self.v_head_dim)
            return qp + kvp + H * self.v_head_dim * h + (h if self.attn_bias else 0)
        q, kv = H * hd, self.num_kv_heads * hd
        attn = h * (q + 2 * kv) + q * h
        if self.attn_bias:
            attn += q + 2 * kv + h
        elif self.qkv_bias:
            attn += q + 2 * kv
        if self.qk_norm:
            attn += 2 * hd
        if self.attention_sinks:
            attn += H
        return attn

    def param_counts(self) -> dict[str, int]:
        """Analytical parameter counts from the architecture (no graph needed).

        Returns:
            ``{"total": N, "active": N, "embedding": N}``: all parameters; those one token
            touches (top-k routed + shared experts, the LM head; the input embedding is a lookup
            and not counted as active, the convention of the GPT-OSS model card and of
            DeepSeek-V3's 36.6B activated parameters; add ``embedding`` for publishers that
            count it, e.g. Mixtral's 12.9B); and the input embedding's V*h.
        """
        h = self.hidden
        attn = self._attn_params()
        norms = 2 * h
        total = active = 0
        for mk in self.mlp_types:
            if mk == "moe":
                f = self.moe_intermediate
                expert = 3 * h * f + ((2 * f + h) if self.mlp_bias else 0)
                router = h * self.num_experts + (self.num_experts if self.mlp_bias else 0)
                if self.n_group:  # DeepSeek-V3's e_score_correction_bias
                    router += self.num_experts
                shared = self.num_shared_experts * 3 * h * f
                total += attn + norms + router + shared + self.num_experts * expert
                active += attn + norms + router + shared + self.top_k * expert
            else:
                mlp = 3 * h * self.intermediate + ((2 * self.intermediate + h)
                                                   if self.mlp_bias else 0)
                total += attn + norms + mlp
                active += attn + norms + mlp
        emb = self.vocab * h
        head = 0 if self.tie_embeddings else self.vocab * h
        total += emb + head + h
        active += (head or emb) + h
        return {"total": int(total), "active": int(active), "embedding": int(emb)}


def _period(seq: tuple) -> tuple:
    """The shortest prefix p of ``seq`` with seq = p * (len(seq) / len(p))."""
    for p in range(1, len(seq) + 1):
        if len(seq) % p == 0 and seq == seq[:p] * (len(seq) // p):
            return seq[:p]
    return seq  # pragma: no cover - p = len(seq) always matches


def _alternating(n: int, first: str, second: str) -> tuple[str, ...]:
    return tuple(first if i % 2 == 0 else second for i in range(n))


#: Presets, copied from the public config.json of each model on the Hugging Face hub:
#: openai/gpt-oss-120b, openai/gpt-oss-20b (36/24 layers, hidden 2880, 64 q heads, 8 KV heads,
#: head_dim 64, 128/32 experts, top-4, intermediate 2880, sliding window 128 on even layers,
#: vocab 201088, MXFP4 experts); meta-llama/Llama-3.1-8B and -70B; Qwen/Qwen3-30B-A3B (head_dim
#: 128 with hidden 2048 and 32 heads, q/k norm, 128 experts top-8, moe_intermediate 768);
#: Qwen/Qwen3-8B; Qwen/Qwen2.5-7B-Instruct (q/k/v biases); mistralai/Mixtral-8x7B-v0.1
#: (sliding_window null: full attention); deepseek-ai/DeepSeek-V3 (MLA, 1 shared expert, first 3
#: layers dense, 8 groups / top-4 groups routing, block-wise FP8 W8A8 for every linear layer:
#: attention projections, dense MLPs, shared and routed experts; the MTP module excluded).
#: The same files are in tests/data/configs/.
MODELS: Mapping[str, ModelArch] = MappingProxyType({
    "gpt-oss-120b": ModelArch(
        name="gpt-oss-120b", family="gpt_oss", num_layers=36, hidden=2880, num_heads=64,
        num_kv_heads=8, head_dim=64, vocab=201088, num_experts=128, top_k=4,
        moe_intermediate=2880, layer_types=_alternating(36, "sliding", "full"),
        sliding_window=128, attn_bias=True, mlp_bias=True, attention_sinks=True,
        expert_dtype="mxfp4"),
    "gpt-oss-20b": ModelArch(
        name="gpt-oss-20b", family="gpt_oss", num_layers=24, hidden=2880, num_heads=64,
        num_kv_heads=8, head_dim=64, vocab=201088, num_experts=32, top_k=4,
        moe_intermediate=2880, layer_types=_alternating(24, "sliding", "full"),
        sliding_window=128, attn_bias=True, mlp_bias=True, attention_sinks=True,
        expert_dtype="mxfp4"),
    "llama-3.1-8b": ModelArch(
        name="llama-3.1-8b", family="llama", num_layers=32, hidden=4096, num_heads=32,
        num_kv_heads=8, head_dim=128, vocab=128256, intermediate=14336),
    "llama-3.1-70b": ModelArch(
        name="llama-3.1-70b", family="llama", num_layers=80, hidden=8192, num_heads=64,
        num_kv_heads=8, head_dim=128, vocab=128256, intermediate=28672),
    "qwen3-30b-a3b": ModelArch(
        name="qwen3-30b-a3b", family="qwen3_moe", num_layers=48, hidden=2048, num_heads=32,
        num_kv_heads=4, head_dim=128, vocab=151936, intermediate=6144, num_experts=128,
        top_k=8, moe_intermediate=768, qk_norm=True),
    "qwen3-8b": ModelArch(
        name="qwen3-8b", family="qwen3", num_layers=36, hidden=4096, num_heads=32,
        num_kv_heads=8, head_dim=128, vocab=151936, intermediate=12288, qk_norm=True),
    "qwen2.5-7b": ModelArch(
        name="qwen2.5-7b", family="qwen2", num_layers=28, hidden=3584, num_heads=28,
        num_kv_heads=4, head_dim=128, vocab=152064, intermediate=18944, qkv_bias=True),
    "mixtral-8x7b": ModelArch(
        name="mixtral-8x7b", family="mixtral", num_layers=32, hidden=4096, num_heads=32,
        num_kv_heads=8, head_dim=128, vocab=32000, num_experts=8, top_k=2,
        moe_intermediate=14336),
    "deepseek-v3": ModelArch(
        name="deepseek-v3", family="deepseek_v3", num_layers=61, hidden=7168, num_heads=128,
        num_kv_heads=128, head_dim=192, vocab=129280, intermediate=18432, num_experts=256,
        top_k=8, moe_intermediate=2048, num_shared_experts=1, n_group=8, topk_group=4,
        mlp_types=("dense",) * 3 + ("moe",) * 58, q_lora_rank=1536, kv_lora_rank=512,
        qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128, expert_dtype="fp8",
        expert_act_dtype="fp8", attn_dtype="fp8", attn_act_dtype="fp8", mlp_dtype="fp8",
        mlp_act_dtype="fp8"),
})


def get_model(name: str) -> ModelArch:
    """Return the preset ``name`` (case-insensitive).

    Raises:
        ValueError: unknown name; the message lists the presets.
    """
    key = str(name).lower()
    if key not in MODELS:
        raise ValueError(f"model must be one of {', '.join(MODELS)} or a path to a config.json, "
                         f"got {name!r}")
    return MODELS[key]


def resolve_model(name_or_path: str, name: str | None = None) -> ModelArch:
    """A preset name, a path to a Hugging Face ``config.json`` (see ``load_hf_config``), or a
    model folder (a Hugging Face snapshot) holding one. ``name`` names a model read from a
    file (default: the file's own name fields, else its folder: ``load_hf_config``).

    Raises:
        ValueError: unknown name, missing file, a bad config (see ``load_hf_config``), or
            ``name`` given for a preset.
    """
    s = str(name_or_path)
    if name is not None and not str(name).strip():
        raise ValueError("name: must be a non-empty name for the model")
    if s.lower() in MODELS:
        if name is not None:
            raise ValueError(f"name: names a model read from a config.json; {s} is a preset "
                             "and keeps its name")
        return get_model(s)
    if os.path.isdir(s):
        cfg = os.path.join(s, "config.json")
        if not os.path.isfile(cfg):
            raise ValueError(f"model: folder {s!r} holds no config.json")
        return load_hf_config(cfg, name)
    if os.path.sep in s or s.endswith(".json") or os.path.isfile(s):
        return load_hf_config(s, name)
    return get_model(s)


def _req(cfg: Mapping[str, Any], key: str, path: str, *alts: str) -> Any:
    for k in (key, *alts):
        if k in cfg and cfg[k] is not None:
            return cfg[k]
    raise ValueError(f"config.json {path}: missing field {key!r}")


def _int(cfg: Mapping[str, Any], key: str, path: str, *alts: str) -> int:
    v = _req(cfg, key, path, *alts)
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise ValueError(f"config.json {path}: field {key!r} must be a positive integer, got {v!r}")
    return v


def _bool(cfg: Mapping[str, Any], key: str, path: str, default: bool) -> bool:
    v = cfg.get(key, default)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise ValueError(f"config.json {path}: field {key!r} must be true or false, got {v!r}")
    return v


def _nonneg(cfg: Mapping[str, Any], key: str, default: int = 0) -> int:
    v = cfg.get(key, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"field {key!r} must be a non-negative integer, got {v!r}")
    return v


def _layer_types(cfg: Mapping[str, Any], path: str, layers: int,
                 default: tuple[str, ...] | None = None) -> tuple[str, ...]:
    raw = cfg.get("layer_types")
    if raw is None:
        return default if default is not None else ("full",) * layers
    if not isinstance(raw, list) or len(raw) != layers:
        raise ValueError(f"config.json {path}: field 'layer_types' must be a list of {layers} "
                         f"entries, got {raw!r}"[:200])
    out = []
    for i, t in enumerate(raw):
        if t in ("sliding_attention", "sliding"):
            out.append("sliding")
        elif t in ("full_attention", "full"):
            out.append("full")
        else:
            raise ValueError(f"config.json {path}: layer_types[{i}] must be 'sliding_attention' "
                             f"or 'full_attention', got {t!r}")
    return tuple(out)


def _window(cfg: Mapping[str, Any], enabled: bool = True) -> int:
    """``sliding_window`` (0 when null/absent or when ``enabled`` is False)."""
    sw = cfg.get("sliding_window")
    if sw is None or not enabled:
        return 0
    if isinstance(sw, bool) or not isinstance(sw, int) or sw < 0:
        raise ValueError(f"field 'sliding_window' must be a non-negative integer, got {sw!r}")
    return sw


def _qwen_layer_types(cfg: Mapping[str, Any], path: str, layers: int) -> tuple[tuple[str, ...], int]:
    """Qwen2/Qwen3 attention kinds: sliding from layer ``max_window_layers`` on when
    ``use_sliding_window`` is true (the Hugging Face rule), else full; an explicit
    ``layer_types`` list wins. Returns (layer_types, window)."""
    use = _bool(cfg, "use_sliding_window", path, False)
    sw = _window(cfg, use)
    mwl = _nonneg(cfg, "max_window_layers", layers)
    default = tuple("sliding" if sw and i >= mwl else "full" for i in range(layers))
    lt = _layer_types(cfg, path, layers, default)
    if "sliding" in lt and not sw:
        sw = _window(cfg)
    return lt, sw


def _moe_layers_qwen(cfg: Mapping[str, Any], layers: int) -> tuple[str, ...]:
    """Qwen3-MoE MLP kinds (Hugging Face rule): layer i is MoE when it is not in
    ``mlp_only_layers`` and (i + 1) % ``decoder_sparse_step`` == 0."""
    only = cfg.get("mlp_only_layers") or []
    if not isinstance(only, list) or any(isinstance(i, bool) or not isinstance(i, int)
                                         or not 0 <= i < layers for i in only):
        raise ValueError(f"field 'mlp_only_layers' must be a list of layer indices in "
                         f"0..{layers - 1}, got {only!r}"[:200])
    step = _nonneg(cfg, "decoder_sparse_step", 1)
    if step < 1:
        raise ValueError(f"field 'decoder_sparse_step' must be >= 1, got {step}")
    return tuple("dense" if (i in only or (i + 1) % step) else "moe" for i in range(layers))


def _quant(cfg: Mapping[str, Any]) -> dict:
    q = cfg.get("quantization_config") or {}
    if not isinstance(q, dict):
        raise ValueError(f"field 'quantization_config' must be an object, got {q!r}")
    return q


def _config_name(cfg: Mapping[str, Any], path: str) -> str:
    """A config's model name: its own ``_name_or_path`` or ``name_or_path`` field (a hub id
    such as ``"Qwen/Qwen2.5-7B"``), else the folder holding ``config.json``, else the file's
    name without ``.json``."""
    for key in ("_name_or_path", "name_or_path"):
        v = cfg.get(key)
        if isinstance(v, str) and v.strip():
            return v.strip()
    if os.path.basename(path) == "config.json":
        return os.path.basename(os.path.dirname(os.path.abspath(path)))
    return os.path.splitext(os.path.basename(path))[0]


def load_hf_config(path: str | os.PathLike, name: str | None = None) -> ModelArch:
    """Build a ``ModelArch`` from a Hugging Face ``config.json`` on disk (no network).

    Supported ``model_type``: ``MODEL_TYPES`` (llama, qwen2, qwen3, qwen3_moe, mixtral, gpt_oss,
    deepseek_v3, and mistral, read as a llama that slides on every layer when
    ``sliding_window`` is set, as Hugging Face's ``MistralConfig``). A llama config with a
    non-null ``sliding_window`` is refused (llama has no sliding attention: the window would be
    dropped and the KV cache costed at full length). ``head_dim`` is read from the file when present (else hidden/heads, the llama
    convention). Defaults follow the Hugging Face configuration classes: GPT-OSS alternates
    sliding and full attention when ``layer_types`` is absent; Qwen2/Qwen3 slide only with
    ``use_sliding_window``; Mixtral slides on every layer when ``sliding_window`` is set;
    Qwen3-MoE and DeepSeek-V3 layers are dense per ``mlp_only_layers`` /
    ``decoder_sparse_step`` / ``first_k_dense_replace`` / ``moe_layer_freq``.

    Quantisation, per module group (``model.quant.quant_dtypes``): ``fp8`` and ``fbgemm_fp8``
    cover every linear layer (attention projections, dense MLPs, shared and routed experts: W8A8,
    the GEMMs at the FP8 rate; DeepSeek-V3's block-wise FP8), ``mxfp4`` the routed experts only
    (GPT-OSS, weight-only); the modules a config excludes (``modules_to_not_convert``,
    ``ignored_layers``, ``ignore``) stay in the checkpoint's datatype; the router, embedding
    and LM head are never quantised; any other method is refused (the model would be costed at
    the wrong bytes).

    Args:
        path: file path of the config.
        name: name to give the model (default: the file's ``_name_or_path`` or
            ``name_or_path``, else its folder's name; ``subgpu --name``).

    Returns:
        The architecture.

    Raises:
        ValueError: unreadable or malformed JSON, an unsupported ``model_type`` or
            ``quant_method``, or a missing or invalid field (the message names it).
    """
    p = str(path)
    try:
        with open(p, encoding="utf-8") as fh:
            text = fh.read()
        cfg = json.loads(text)
    except FileNotFoundError:
        raise ValueError(f"config.json {p}: file does not exist") from None
    except OSError as e:
        raise ValueError(f"config.json {p}: cannot read it ({e.__class__.__name__})") from None
    except UnicodeDecodeError:
        raise ValueError(f"config.json {p}: the file is not JSON (not UTF-8 text); a model is "
                         "a preset name or a Hugging Face config.json") from None
    except json.JSONDecodeError as e:
        head = text.lstrip()[:1]
        if head not in ("{", "["):  # not a JSON document at all (a README, a script ...)
            first = text.strip().splitlines()[0][:40] if text.strip() else ""
            raise ValueError(f"config.json {p}: the file is not JSON (it begins {first!r}); a "
                             "model is a preset name or a Hugging Face config.json") from None
        raise ValueError(f"config.json {p}: malformed JSON ({e.__class__.__name__}: {e})") from None
    if not isinstance(cfg, dict):
        raise ValueError(f"config.json {p}: top level must be a JSON object")
    mt = _req(cfg, "model_type", p)
    if mt not in MODEL_TYPES:
        raise ValueError(f"config.json {p}: model_type must be one of {', '.join(MODEL_TYPES)}, "
                         f"got {mt!r}")
    nm = name or _config_name(cfg, p)
    layers = _int(cfg, "num_hidden_layers", p)
    hidden = _int(cfg, "hidden_size", p)
    heads = _int(cfg, "num_attention_heads", p)
    # absent/null means the default (MHA; hidden/heads); 0 or junk is an error, not the default
    kv = cfg.get("num_key_value_heads")
    kv = heads if kv is None else kv
    hd = cfg.get("head_dim")
    if mt == "deepseek_v3":
        hd = _int(cfg, "qk_nope_head_dim", p) + _int(cfg, "qk_rope_head_dim", p)
    if hd is None:
        if hidden % heads:
            raise ValueError(f"config.json {p}: no 'head_dim' and hidden_size is not a multiple "
                             "of num_attention_heads")
        hd = hidden // heads
    common = dict(name=str(nm), num_layers=layers, hidden=hidden, num_heads=heads,
                  num_kv_heads=kv, head_dim=hd, vocab=_int(cfg, "vocab_size", p),
                  tie_embeddings=_bool(cfg, "tie_word_embeddings", p, False))
    try:
        quant = _quant(cfg)
        arch = None
        if mt == "llama" and cfg.get("sliding_window") is not None:
            raise ValueError(f"'sliding_window' is {cfg['sliding_window']!r}, but model_type "
                             "'llama' has no sliding attention (the window would be ignored and "
                             "the KV cache costed at full length); a Mistral-style model is "
                             "model_type 'mistral'")
        if mt in ("llama", "mistral"):
            sw = _window(cfg) if mt == "mistral" else 0
            arch = ModelArch(family="llama", intermediate=_int(cfg, "intermediate_size", p),
                             attn_bias=_bool(cfg, "attention_bias", p, False),
                             mlp_bias=_bool(cfg, "mlp_bias", p, False),
                             layer_types=("sliding" if sw else "full",) * layers,
                             sliding_window=sw, **common)
        elif mt in ("qwen2", "qwen3"):
            lt, sw = _qwen_layer_types(cfg, p, layers)
            arch = ModelArch(family=mt, intermediate=_int(cfg, "intermediate_size", p),
                             layer_types=lt, sliding_window=sw,
                             qkv_bias=(mt == "qwen2"), qk_norm=(mt == "qwen3"),
                             attn_bias=_bool(cfg, "attention_bias", p, False), **common)
        elif mt == "qwen3_moe":
            lt, sw = _qwen_layer_types(cfg, p, layers)
            mlp = _moe_layers_qwen(cfg, layers)
            inter = cfg.get("intermediate_size") or 0
            if "dense" in mlp:
                inter = _int(cfg, "intermediate_size", p)
            arch = ModelArch(family="qwen3_moe", num_experts=_int(cfg, "num_experts", p),
                             top_k=_int(cfg, "num_experts_per_tok", p),
                             moe_intermediate=_int(cfg, "moe_intermediate_size", p),
                             intermediate=inter, mlp_types=mlp, layer_types=lt,
                             sliding_window=sw, qk_norm=True,
                             attn_bias=_bool(cfg, "attention_bias", p, False), **common)
        elif mt == "mixtral":
            sw = _window(cfg)
            arch = ModelArch(family="mixtral", num_experts=_int(cfg, "num_local_experts", p),
                             top_k=_int(cfg, "num_experts_per_tok", p),
                             moe_intermediate=_int(cfg, "intermediate_size", p),
                             layer_types=("sliding" if sw else "full",) * layers,
                             sliding_window=sw, **common)
        elif mt == "gpt_oss":
            # Hugging Face GptOssConfig default: sliding on even layers, full on odd ones
            lt = _layer_types(cfg, p, layers, _alternating(layers, "sliding", "full"))
            arch = ModelArch(family="gpt_oss",
                             num_experts=_int(cfg, "num_local_experts", p, "num_experts"),
                             top_k=_int(cfg, "num_experts_per_tok", p, "experts_per_token"),
                             moe_intermediate=_int(cfg, "intermediate_size", p),
                             layer_types=lt, sliding_window=_window(cfg),
                             attn_bias=_bool(cfg, "attention_bias", p, True), mlp_bias=True,
                             attention_sinks=True, **common)
        elif mt == "deepseek_v3":
            E = _nonneg(cfg, "n_routed_experts")
            fk = _nonneg(cfg, "first_k_dense_replace")
            freq = _nonneg(cfg, "moe_layer_freq", 1) or 1
            mlp = tuple("moe" if E and i >= fk and i % freq == 0 else "dense"
                        for i in range(layers))
            arch = ModelArch(family="deepseek_v3", num_experts=E,
                             top_k=_int(cfg, "num_experts_per_tok", p) if E else 0,
                             moe_intermediate=_int(cfg, "moe_intermediate_size", p) if E else 0,
                             intermediate=_int(cfg, "intermediate_size", p),
                             num_shared_experts=_nonneg(cfg, "n_shared_experts") if E else 0,
                             n_group=_nonneg(cfg, "n_group") if E else 0,
                             topk_group=_nonneg(cfg, "topk_group") if E else 0,
                             mlp_types=mlp, q_lora_rank=_nonneg(cfg, "q_lora_rank"),
                             kv_lora_rank=_int(cfg, "kv_lora_rank", p),
                             qk_rope_head_dim=_int(cfg, "qk_rope_head_dim", p),
                             qk_nope_head_dim=_int(cfg, "qk_nope_head_dim", p),
                             v_head_dim=_int(cfg, "v_head_dim", p),
                             attn_bias=_bool(cfg, "attention_bias", p, False),
                             **common)
        if arch is None:  # pragma: no cover - MODEL_TYPES checked above
            raise AssertionError(mt)
        return dataclasses.replace(arch, model_type=mt, **quant_dtypes(
            quant, arch.family, arch.mlp_types, mla=arch.is_mla, q_lora=bool(arch.q_lora_rank),
            shared=bool(arch.num_shared_experts)))
    except ValueError as e:
        msg = str(e)
        raise ValueError(msg if msg.startswith("config.json") else f"config.json {p}: {msg}") \
            from None

