"""The model architecture: ``ModelArch``, a decoder-only transformer as far as decode cost is
concerned, with its derived quantities (layer kinds, region runs, parameter counts).

Layer-wise kinds: every layer has an attention kind (``layer_types``: full or sliding), an MLP
kind (``mlp_types``: dense or moe) and, where a checkpoint excludes some layers from its
quantisation, the module groups it keeps unquantised (``unquantised_layers``). The forward pass
is a sequence of region instances of possibly different region graphs
(``ModelArch.region_runs``): for example DeepSeek-V3 is 3 dense layers, then 58 MoE layers;
GPT-OSS is 18 instances of one (sliding, full) two-layer region. The presets are in
``models``, the ``config.json`` reader in ``hfconfig``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from subgpu_jax.model.hardware import DTYPE_BYTES
from subgpu_jax.model.quant import parse_unquantised

__all__ = ["ModelArch", "alternating"]


@dataclass(frozen=True)
class ModelArch:
    """A decoder-only transformer, as far as decode cost is concerned.

    Attributes:
        name: identifier (``"gpt-oss-120b"`` ...).
        family: a ``models.FAMILIES`` entry (``"llama"``, ``"qwen3_moe"``, ``"deepseek_v3"``
            ...).
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


def alternating(n: int, first: str, second: str) -> tuple[str, ...]:
    """``n`` layer kinds alternating ``first``, ``second``, ... (GPT-OSS: sliding on even
    layers, full on odd ones): ``alternating(4, "sliding", "full")`` is ``("sliding", "full",
    "sliding", "full")``."""
    return tuple(first if i % 2 == 0 else second for i in range(n))
