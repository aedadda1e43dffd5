"""Model architectures: presets from the public Hugging Face configs, and ``config.json`` loading.

Each preset copies the fields of the model's public ``config.json`` (sources in ``MODELS``'s
docstrings). ``load_hf_config`` reads such a file from disk (never the network) for the llama,
qwen3_moe and gpt_oss families.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping

from subgpu_jax.model.hardware import DTYPE_BYTES

__all__ = ["ModelArch", "MODELS", "get_model", "load_hf_config", "resolve_model"]


@dataclass(frozen=True)
class ModelArch:
    """A decoder-only transformer, as far as decode cost is concerned.

    Attributes:
        name: identifier (``"gpt-oss-120b"`` ...).
        family: ``"llama"``, ``"qwen3_moe"`` or ``"gpt_oss"``.
        num_layers: decoder layers.
        hidden: hidden size (elements).
        num_heads: query heads.
        num_kv_heads: key/value heads (GQA).
        head_dim: per-head dimension, from the config (NOT hidden / heads: Qwen3 differs).
        vocab: vocabulary size.
        intermediate: dense MLP intermediate size (0 for MoE models).
        num_experts: routed experts per MoE layer (0 = dense model).
        top_k: experts per token.
        moe_intermediate: intermediate size of one expert.
        layer_types: per-layer attention kind, ``"full"`` or ``"sliding"``; its length is
            ``num_layers``.
        sliding_window: window (tokens) of sliding-window layers; 0 if none.
        attn_bias: q/k/v/o projections carry biases (GPT-OSS).
        mlp_bias: expert/dense MLP projections carry biases (GPT-OSS).
        qk_norm: per-head RMSNorm of q and k (Qwen3).
        attention_sinks: one learned sink logit per head (GPT-OSS).
        tie_embeddings: input embedding and LM head share weights.
        weight_dtype: datatype of attention/dense/router weights and activations.
        expert_dtype: datatype of expert weights (``"mxfp4"`` for GPT-OSS).
        kv_dtype: datatype of the KV cache.

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
    layer_types: tuple[str, ...] = ()
    sliding_window: int = 0
    attn_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    attention_sinks: bool = False
    tie_embeddings: bool = False
    weight_dtype: str = "bf16"
    expert_dtype: str = "bf16"
    kv_dtype: str = "bf16"

    def __post_init__(self) -> None:
        for f in ("num_layers", "hidden", "num_heads", "num_kv_heads", "head_dim", "vocab"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise ValueError(f"model.{f} must be a positive integer, got {v!r}")
        for f in ("intermediate", "num_experts", "top_k", "moe_intermediate", "sliding_window"):
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
        elif self.intermediate <= 0:
            raise ValueError("model.intermediate must be positive for a dense model")
        if not self.layer_types:
            object.__setattr__(self, "layer_types", ("full",) * self.num_layers)
        if len(self.layer_types) != self.num_layers:
            raise ValueError(f"model.layer_types has {len(self.layer_types)} entries, "
                             f"num_layers is {self.num_layers}")
        bad = set(self.layer_types) - {"full", "sliding"}
        if bad:
            raise ValueError(f"model.layer_types entries must be 'full' or 'sliding', got {bad}")
        if "sliding" in self.layer_types and self.sliding_window <= 0:
            raise ValueError("model.sliding_window must be positive when a layer is 'sliding'")
        for f in ("weight_dtype", "expert_dtype", "kv_dtype"):
            if getattr(self, f) not in DTYPE_BYTES:
                raise ValueError(f"model.{f} must be one of {sorted(DTYPE_BYTES)}, "
                                 f"got {getattr(self, f)!r}")

    # ------------------------------------------------------------------ derived
    @property
    def is_moe(self) -> bool:
        """True for a mixture-of-experts model."""
        return self.num_experts > 0

    @property
    def period(self) -> tuple[str, ...]:
        """The shortest repeating pattern of ``layer_types`` (the region's layer kinds)."""
        lt = self.layer_types
        for p in range(1, len(lt) + 1):
            if len(lt) % p == 0 and lt == lt[:p] * (len(lt) // p):
                return lt[:p]
        return lt  # pragma: no cover - p = len(lt) always matches

    def param_counts(self) -> dict[str, int]:
        """Analytical parameter counts from the architecture (no graph needed).

        Returns:
            ``{"total": N, "active": N}``: all parameters, and those one token touches (top-k
            experts, LM head; the input embedding is a lookup and not counted as active,
            matching the published GPT-OSS figures).
        """
        h, hd = self.hidden, self.head_dim
        q, kv = self.num_heads * hd, self.num_kv_heads * hd
        attn = h * (q + 2 * kv) + q * h
        if self.attn_bias:
            attn += q + 2 * kv + h
        if self.qk_norm:
            attn += 2 * hd
        if self.attention_sinks:
            attn += self.num_heads
        norms = 2 * h
        if self.is_moe:
            f = self.moe_intermediate
            expert = 3 * h * f + ((2 * f + h) if self.mlp_bias else 0)
            router = h * self.num_experts + (self.num_experts if self.mlp_bias else 0)
            layer_total = attn + norms + router + self.num_experts * expert
            layer_active = attn + norms + router + self.top_k * expert
        else:
            mlp = 3 * h * self.intermediate
            layer_total = layer_active = attn + norms + mlp
        emb = self.vocab * h
        head = 0 if self.tie_embeddings else self.vocab * h
        total = self.num_layers * layer_total + emb + head + h
        active = self.num_layers * layer_active + (head or emb) + h
        return {"total": int(total), "active": int(active)}


def _alternating(n: int, first: str, second: str) -> tuple[str, ...]:
    return tuple(first if i % 2 == 0 else second for i in range(n))


#: Presets, copied from the public config.json of each model on the Hugging Face hub:
#: openai/gpt-oss-120b, openai/gpt-oss-20b (36/24 layers, hidden 2880, 64 q heads, 8 KV heads,
#: head_dim 64, 128/32 experts, top-4, intermediate 2880, sliding window 128 on even layers,
#: vocab 201088, MXFP4 experts); meta-llama/Llama-3.1-8B and -70B; Qwen/Qwen3-30B-A3B (head_dim
#: 128 with hidden 2048 and 32 heads, q/k norm, 128 experts top-8, moe_intermediate 768).
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
        num_kv_heads=4, head_dim=128, vocab=151936, num_experts=128, top_k=8,
        moe_intermediate=768, qk_norm=True),
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


def resolve_model(name_or_path: str) -> ModelArch:
    """A preset name, a path to a Hugging Face ``config.json`` (see ``load_hf_config``), or a
    model folder (a Hugging Face snapshot) holding one.

    Raises:
        ValueError: unknown name, missing file, or a bad config (see ``load_hf_config``).
    """
    s = str(name_or_path)
    if s.lower() in MODELS:
        return get_model(s)
    if os.path.isdir(s):
        cfg = os.path.join(s, "config.json")
        if not os.path.isfile(cfg):
            raise ValueError(f"model: folder {s!r} holds no config.json")
        return load_hf_config(cfg)
    if os.path.sep in s or s.endswith(".json"):
        return load_hf_config(s)
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


def _layer_types(cfg: Mapping[str, Any], path: str, layers: int) -> tuple[str, ...]:
    raw = cfg.get("layer_types")
    if raw is None:
        return ("full",) * layers
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


def load_hf_config(path: str | os.PathLike, name: str | None = None) -> ModelArch:
    """Build a ``ModelArch`` from a Hugging Face ``config.json`` on disk (no network).

    Supported ``model_type``: ``llama``, ``qwen3_moe``, ``gpt_oss``. ``head_dim`` is read from the
    file when present (else hidden/heads, the llama convention); ``layer_types`` likewise.

    Args:
        path: file path of the config.
        name: name to give the model (default: the file's ``_name_or_path`` or its folder name).

    Returns:
        The architecture.

    Raises:
        ValueError: unreadable or malformed JSON, an unsupported ``model_type``, or a missing or
            invalid field (the message names it).
    """
    p = str(path)
    try:
        with open(p, encoding="utf-8") as fh:
            cfg = json.load(fh)
    except FileNotFoundError:
        raise ValueError(f"config.json {p}: file does not exist") from None
    except OSError as e:
        raise ValueError(f"config.json {p}: cannot read it ({e.__class__.__name__})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"config.json {p}: malformed JSON ({e.__class__.__name__}: {e})") from None
    if not isinstance(cfg, dict):
        raise ValueError(f"config.json {p}: top level must be a JSON object")
    mt = _req(cfg, "model_type", p)
    nm = name or cfg.get("_name_or_path") or (
        os.path.basename(os.path.dirname(os.path.abspath(p))) if os.path.basename(p) == "config.json"
        else os.path.splitext(os.path.basename(p))[0])
    layers = _int(cfg, "num_hidden_layers", p)
    hidden = _int(cfg, "hidden_size", p)
    heads = _int(cfg, "num_attention_heads", p)
    # absent/null means the default (MHA; hidden/heads); 0 or junk is an error, not the default
    kv = cfg.get("num_key_value_heads")
    kv = heads if kv is None else kv
    hd = cfg.get("head_dim")
    if hd is None:
        if hidden % heads:
            raise ValueError(f"config.json {p}: no 'head_dim' and hidden_size is not a multiple "
                             "of num_attention_heads")
        hd = hidden // heads
    common = dict(name=str(nm), num_layers=layers, hidden=hidden, num_heads=heads,
                  num_kv_heads=kv, head_dim=hd, vocab=_int(cfg, "vocab_size", p),
                  tie_embeddings=_bool(cfg, "tie_word_embeddings", p, False))
    try:
        if mt == "llama":
            return ModelArch(family="llama", intermediate=_int(cfg, "intermediate_size", p),
                             attn_bias=_bool(cfg, "attention_bias", p, False), **common)
        if mt == "qwen3_moe":
            return ModelArch(family="qwen3_moe", num_experts=_int(cfg, "num_experts", p),
                             top_k=_int(cfg, "num_experts_per_tok", p),
                             moe_intermediate=_int(cfg, "moe_intermediate_size", p),
                             qk_norm=True, **common)
        if mt == "gpt_oss":
            lt = _layer_types(cfg, p, layers)
            quant = cfg.get("quantization_config") or {}
            if not isinstance(quant, dict):
                raise ValueError(f"field 'quantization_config' must be an object, got {quant!r}")
            exp_dtype = "mxfp4" if str(quant.get("quant_method", "")).lower() == "mxfp4" else "bf16"
            sw = cfg.get("sliding_window")
            if sw is None:
                sw = 0
            if isinstance(sw, bool) or not isinstance(sw, int) or sw < 0:
                raise ValueError(f"field 'sliding_window' must be a non-negative integer, "
                                 f"got {sw!r}")
            return ModelArch(family="gpt_oss",
                             num_experts=_int(cfg, "num_local_experts", p, "num_experts"),
                             top_k=_int(cfg, "num_experts_per_tok", p, "experts_per_token"),
                             moe_intermediate=_int(cfg, "intermediate_size", p),
                             layer_types=lt,
                             sliding_window=sw,
                             attn_bias=_bool(cfg, "attention_bias", p, True), mlp_bias=True,
                             attention_sinks=True, expert_dtype=exp_dtype, **common)
    except ValueError as e:
        msg = str(e)
        raise ValueError(msg if msg.startswith("config.json") else f"config.json {p}: {msg}") \
            from None
    raise ValueError(f"config.json {p}: model_type must be one of llama, qwen3_moe, gpt_oss, "
                     f"got {mt!r}")


def expected_distinct(n_items: int, draws: float, picks_per_draw: int = 1) -> float:
    """Expected number of distinct items hit when ``draws`` draws each pick ``picks_per_draw``
    distinct items uniformly from ``n_items``: n * (1 - (1 - k/n)^draws).

    Used for the distinct experts a microbatch's tokens touch under uniform routing.
    """
    if n_items <= 0:
        return 0.0
    return n_items * (1.0 - (1.0 - picks_per_draw / n_items) ** draws)


__all__.append("expected_distinct")
