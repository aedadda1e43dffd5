"""Reading a Hugging Face ``config.json`` into a ``ModelArch`` (``load_hf_config``), one parser
per ``model_type`` in one registry.

``MODEL_TYPE_PARSERS`` maps a ``model_type`` to its ``ModelTypeParser``: the family it is
modelled as and the function that reads the family's fields, registered where it is defined
(``@model_type_parser``). ``load_hf_config`` reads the file, the fields every family shares
(layers, hidden size, heads, head dim, vocabulary, tied embeddings) and the quantisation, and
dispatches on ``model_type`` through the registry; ``FAMILIES`` and ``MODEL_TYPES`` are views
of it. The file is read from disk, never the network.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from subgpu_jax.model.arch import ModelArch, alternating
from subgpu_jax.model.quant import quant_dtypes

__all__ = ["ModelTypeParser", "MODEL_TYPE_PARSERS", "model_type_parser", "FAMILIES",
           "MODEL_TYPES", "load_hf_config"]


@dataclass(frozen=True)
class ModelTypeParser:
    """How one ``model_type`` is read.

    Attributes:
        model_type: the config's ``model_type``.
        family: the ``ModelArch.family`` it is modelled as (``"llama"`` for ``"mistral"``).
        parse: ``parse(cfg, path, common) -> ModelArch``: the family's own fields from the
            config dict ``cfg`` (``path`` for messages) plus ``common``, the keyword arguments
            every family shares (``name``, ``num_layers``, ``hidden``, ``num_heads``,
            ``num_kv_heads``, ``head_dim``, ``vocab``, ``tie_embeddings``); raises ValueError
            naming a missing or invalid field.
        head_dim: ``head_dim(cfg, path) -> int`` where the family derives its head dim from
            other fields (DeepSeek-V3's MLA: ``qk_nope_head_dim + qk_rope_head_dim``); None:
            the config's ``head_dim``, else hidden / heads.
    """

    model_type: str
    family: str
    parse: Callable[[Mapping[str, Any], str, dict], ModelArch]
    head_dim: Callable[[Mapping[str, Any], str], int] | None = None


#: ``model_type`` -> its parser, in registration order (``model_type_parser``).
MODEL_TYPE_PARSERS: dict[str, ModelTypeParser] = {}


def model_type_parser(model_type: str, family: str | None = None,
                      head_dim: Callable[[Mapping[str, Any], str], int] | None = None):
    """Decorator: register the decorated ``parse(cfg, path, common)`` for ``model_type``,
    modelled as ``family`` (default: ``model_type`` itself); ``head_dim`` as
    ``ModelTypeParser.head_dim``. Returns the function unchanged.

    Raises:
        ValueError: ``model_type`` already registered.
    """
    def register(parse):
        if model_type in MODEL_TYPE_PARSERS:
            raise ValueError(f"model_type_parser: {model_type!r} is already registered")
        MODEL_TYPE_PARSERS[model_type] = ModelTypeParser(model_type, family or model_type, parse,
                                                         head_dim)
        return parse
    return register


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



# --------------------------------------------------------------------------- the families
# (registered in the order ``MODEL_TYPES`` and the unknown-type message list them)

def _llama_arch(cfg: Mapping[str, Any], p: str, common: dict, sw: int) -> ModelArch:
    """Llama's fields, every layer sliding with window ``sw`` when it is nonzero."""
    layers = common["num_layers"]
    return ModelArch(family="llama", intermediate=_int(cfg, "intermediate_size", p),
                     attn_bias=_bool(cfg, "attention_bias", p, False),
                     mlp_bias=_bool(cfg, "mlp_bias", p, False),
                     layer_types=("sliding" if sw else "full",) * layers,
                     sliding_window=sw, **common)


@model_type_parser("llama")
def _llama(cfg: Mapping[str, Any], p: str, common: dict) -> ModelArch:
    """Llama: full attention; a non-null ``sliding_window`` is refused (llama has no sliding
    attention: the window would be dropped and the KV cache costed at full length)."""
    if cfg.get("sliding_window") is not None:
        raise ValueError(f"'sliding_window' is {cfg['sliding_window']!r}, but model_type "
                         "'llama' has no sliding attention (the window would be ignored and "
                         "the KV cache costed at full length); a Mistral-style model is "
                         "model_type 'mistral'")
    return _llama_arch(cfg, p, common, 0)


def _qwen_dense(cfg: Mapping[str, Any], p: str, common: dict, family: str) -> ModelArch:
    """Qwen2/Qwen3 dense: q/k/v biases (Qwen2) or q/k norms (Qwen3); sliding per
    ``_qwen_layer_types``."""
    lt, sw = _qwen_layer_types(cfg, p, common["num_layers"])
    return ModelArch(family=family, intermediate=_int(cfg, "intermediate_size", p),
                     layer_types=lt, sliding_window=sw,
                     qkv_bias=(family == "qwen2"), qk_norm=(family == "qwen3"),
                     attn_bias=_bool(cfg, "attention_bias", p, False), **common)


@model_type_parser("qwen2")
def _qwen2(cfg: Mapping[str, Any], p: str, common: dict) -> ModelArch:
    """Qwen2 (q/k/v biases)."""
    return _qwen_dense(cfg, p, common, "qwen2")


@model_type_parser("qwen3")
def _qwen3(cfg: Mapping[str, Any], p: str, common: dict) -> ModelArch:
    """Qwen3 (per-head q/k RMSNorm)."""
    return _qwen_dense(cfg, p, common, "qwen3")


@model_type_parser("qwen3_moe")
def _qwen3_moe(cfg: Mapping[str, Any], p: str, common: dict) -> ModelArch:
    """Qwen3-MoE: dense layers per ``mlp_only_layers``/``decoder_sparse_step``
    (``_moe_layers_qwen``); ``intermediate_size`` needed only when a layer is dense."""
    layers = common["num_layers"]
    lt, sw = _qwen_layer_types(cfg, p, layers)
    mlp = _moe_layers_qwen(cfg, layers)
    inter = cfg.get("intermediate_size") or 0
    if "dense" in mlp:
        inter = _int(cfg, "intermediate_size", p)
    return ModelArch(family="qwen3_moe", num_experts=_int(cfg, "num_experts", p),
                     top_k=_int(cfg, "num_experts_per_tok", p),
                     moe_intermediate=_int(cfg, "moe_intermediate_size", p),
                     intermediate=inter, mlp_types=mlp, layer_types=lt,
                     sliding_window=sw, qk_norm=True,
                     attn_bias=_bool(cfg, "attention_bias", p, False), **common)


@model_type_parser("mixtral")
def _mixtral(cfg: Mapping[str, Any], p: str, common: dict) -> ModelArch:
    """Mixtral: every layer slides when ``sliding_window`` is set."""
    sw = _window(cfg)
    return ModelArch(family="mixtral", num_experts=_int(cfg, "num_local_experts", p),
                     top_k=_int(cfg, "num_experts_per_tok", p),
                     moe_intermediate=_int(cfg, "intermediate_size", p),
                     layer_types=("sliding" if sw else "full",) * common["num_layers"],
                     sliding_window=sw, **common)


@model_type_parser("gpt_oss")
def _gpt_oss(cfg: Mapping[str, Any], p: str, common: dict) -> ModelArch:
    """GPT-OSS: attention sinks, biases; without ``layer_types`` sliding on even layers and
    full on odd ones (Hugging Face ``GptOssConfig``'s default)."""
    layers = common["num_layers"]
    lt = _layer_types(cfg, p, layers, alternating(layers, "sliding", "full"))
    return ModelArch(family="gpt_oss",
                     num_experts=_int(cfg, "num_local_experts", p, "num_experts"),
                     top_k=_int(cfg, "num_experts_per_tok", p, "experts_per_token"),
                     moe_intermediate=_int(cfg, "intermediate_size", p),
                     layer_types=lt, sliding_window=_window(cfg),
                     attn_bias=_bool(cfg, "attention_bias", p, True), mlp_bias=True,
                     attention_sinks=True, **common)


def _mla_head_dim(cfg: Mapping[str, Any], p: str) -> int:
    """Multi-head latent attention's query/key head dim: ``qk_nope_head_dim +
    qk_rope_head_dim``."""
    return _int(cfg, "qk_nope_head_dim", p) + _int(cfg, "qk_rope_head_dim", p)


@model_type_parser("deepseek_v3", head_dim=_mla_head_dim)
def _deepseek_v3(cfg: Mapping[str, Any], p: str, common: dict) -> ModelArch:
    """DeepSeek-V3: MLA, shared experts, grouped routing; layer i is MoE when there are routed
    experts, ``i >= first_k_dense_replace`` and ``i % moe_layer_freq == 0``."""
    E = _nonneg(cfg, "n_routed_experts")
    fk = _nonneg(cfg, "first_k_dense_replace")
    freq = _nonneg(cfg, "moe_layer_freq", 1) or 1
    mlp = tuple("moe" if E and i >= fk and i % freq == 0 else "dense"
                for i in range(common["num_layers"]))
    return ModelArch(family="deepseek_v3", num_experts=E,
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


@model_type_parser("mistral", family="llama")
def _mistral(cfg: Mapping[str, Any], p: str, common: dict) -> ModelArch:
    """Mistral (Hugging Face ``MistralConfig``): the llama architecture, every layer sliding
    when ``sliding_window`` is set."""
    return _llama_arch(cfg, p, common, _window(cfg))


#: The families ``load_hf_config`` reads (README "Your own model" and docs/usage.md list them
#: too): the registered ``model_type`` values that are their own family.
FAMILIES: tuple[str, ...] = tuple(mt for mt, e in MODEL_TYPE_PARSERS.items() if e.family == mt)
#: Every ``model_type`` ``load_hf_config`` reads: the families, then the types read as one of
#: them (``mistral``, modelled as ``llama``).
MODEL_TYPES: tuple[str, ...] = FAMILIES + tuple(mt for mt in MODEL_TYPE_PARSERS
                                                if mt not in FAMILIES)


def load_hf_config(path: str | os.PathLike, name: str | None = None) -> ModelArch:
    """Build a ``ModelArch`` from a Hugging Face ``config.json`` on disk (no network).

    Supported ``model_type``: the keys of ``MODEL_TYPE_PARSERS`` (llama, qwen2, qwen3,
    qwen3_moe, mixtral, gpt_oss, deepseek_v3, and mistral, read as a llama that slides on every
    layer when ``sliding_window`` is set, as Hugging Face's ``MistralConfig``); each is read by
    its family's parser. A llama config with a
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
    entry = MODEL_TYPE_PARSERS.get(mt) if isinstance(mt, str) else None
    if entry is None:
        raise ValueError(f"config.json {p}: model_type must be one of "
                         f"{', '.join(MODEL_TYPE_PARSERS)}, got {mt!r}")
    nm = name or _config_name(cfg, p)
    layers = _int(cfg, "num_hidden_layers", p)
    hidden = _int(cfg, "hidden_size", p)
    heads = _int(cfg, "num_attention_heads", p)
    # absent/null means the default (MHA; hidden/heads); 0 or junk is an error, not the default
    kv = cfg.get("num_key_value_heads")
    kv = heads if kv is None else kv
    hd = cfg.get("head_dim") if entry.head_dim is None else entry.head_dim(cfg, p)
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
        arch = entry.parse(cfg, p, common)
        return dataclasses.replace(arch, model_type=mt, **quant_dtypes(
            quant, arch.family, arch.mlp_types, mla=arch.is_mla, q_lora=bool(arch.q_lora_rank),
            shared=bool(arch.num_shared_experts)))
    except ValueError as e:
        msg = str(e)
        raise ValueError(msg if msg.startswith("config.json") else f"config.json {p}: {msg}") \
            from None
