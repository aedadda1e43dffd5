"""Per-layer quantisation from a Hugging Face ``quantization_config`` (docs/accounting.md, item 1).

A checkpoint's quantisation covers every linear layer of the decoder (attention projections,
dense MLPs, shared experts, routed experts) except the modules its config excludes
(``modules_to_not_convert``, ``ignored_layers`` or ``ignore``). ``quant_dtypes`` turns that into
the datatypes of ``ModelArch``'s four module groups:

=================  =========================================================================
group              Hugging Face module names (layer i)
=================  =========================================================================
``attn``           ``model.layers.{i}.self_attn.{q,k,v,o}_proj``; MLA: ``q_a_proj``,
                   ``q_b_proj`` (``q_proj`` without a query LoRA), ``kv_a_proj_with_mqa``,
                   ``kv_b_proj``, ``o_proj``
``dense_mlp``      ``model.layers.{i}.mlp.{gate,up,down}_proj`` (dense layers)
``shared_experts`` ``model.layers.{i}.mlp.shared_experts.{gate,up,down}_proj``
``experts``        ``model.layers.{i}.mlp.experts`` (``block_sparse_moe.experts`` for Mixtral)
=================  =========================================================================

Never quantised, whatever the config: the router (``mlp.gate`` / ``mlp.router``: the engines
build it unquantised, e.g. vLLM's DeepSeek-V2/V3 and Qwen-MoE gates take ``quant_config=None``,
and DeepSeek-V3's checkpoint stores it in bf16), the norms, the input embedding and the LM head
(Hugging Face's quantisers add the output embedding to the modules not converted).

Methods: ``fp8`` (block-wise or per-tensor FP8 E4M3; ``activation_scheme`` dynamic, static or
absent, vLLM's default dynamic, quantises the activations too, so the GEMMs run at the FP8 tensor
rate; DeepSeek-V3, Qwen3-*-FP8), ``fbgemm_fp8`` (FP8 weights, dynamic per-token FP8
activations), ``mxfp4`` (GPT-OSS: the routed experts only, weight-only with bf16 activations,
as vLLM's MXFP4 method applies only to the MoE layers).

An exclusion pattern matches a module when it equals the module's name or a dot-aligned tail of
it, or of one of its parents; ``*`` matches one name component (``model.layers.*.self_attn``);
``re:`` starts a regular expression matched from the start of the name (compressed-tensors).
An exclusion may cover a group in some layers only (``model.layers.0.mlp``, or the first and
last layers' MLPs that some FP8 checkpoints keep in bf16): the group keeps its quantised datatype
and those layers are listed in ``unquantised_layers`` (per layer, the ``+``-joined groups it keeps
in the checkpoint's datatype), which makes them a layer kind of their own
(``ModelArch.layer_kinds``). Within one layer a group is quantised whole or not at all: a pattern
that excludes only some of a layer's projections of a group (``kv_b_proj``, or layer 3's
``o_proj``) is refused with one line naming it, since the region graph fuses them (q/k/v in one
GEMM, MLA's projections absorbed).
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

__all__ = ["QUANT_METHODS", "QUANT_GROUPS", "EXCLUDE_KEYS", "quant_dtypes", "group_modules",
           "parse_unquantised"]

#: ``quant_method`` values read (others are refused: the bytes would be wrong).
QUANT_METHODS = ("fp8", "fbgemm_fp8", "mxfp4")
#: Module groups a quantisation may cover, in ``ModelArch`` field order.
QUANT_GROUPS = ("attn", "dense_mlp", "shared_experts", "experts")
#: Keys of ``quantization_config`` that list modules left in the checkpoint's datatype.
EXCLUDE_KEYS = ("modules_to_not_convert", "ignored_layers", "ignore")

_GROUP_LABEL = {"attn": "attention projections", "dense_mlp": "dense MLP projections",
                "shared_experts": "shared experts", "experts": "routed experts"}
#: ``ModelArch`` (weight, GEMM) datatype fields of each group.
_FIELDS = {"attn": ("attn_dtype", "attn_act_dtype"), "dense_mlp": ("mlp_dtype", "mlp_act_dtype"),
           "shared_experts": ("shared_dtype", "shared_act_dtype"),
           "experts": ("expert_dtype", "expert_act_dtype")}


def group_modules(family: str, layer: int, mlp_kind: str, mla: bool = False,
                  q_lora: bool = True, shared: bool = False) -> dict[str, list[str]]:
    """The Hugging Face names of the linear modules of decoder layer ``layer``, by group.

    Args:
        family: ``ModelArch.family``. layer: the layer index. mlp_kind: ``"dense"`` or
        ``"moe"``. mla: multi-head latent attention. q_lora: MLA with a query LoRA
        (``q_lora_rank`` > 0). shared: the MoE layers have shared experts.

    Returns:
        ``{group: [module name, ...]}`` for the groups present in that layer.
    """
    pre = f"model.layers.{layer}."
    if mla:
        qs = ["q_a_proj", "q_b_proj"] if q_lora else ["q_proj"]
        attn = qs + ["kv_a_proj_with_mqa", "kv_b_proj", "o_proj"]
    else:
        attn = ["q_proj", "k_proj", "v_proj", "o_proj"]
    out = {"attn": [pre + "self_attn." + x for x in attn]}
    block = pre + ("block_sparse_moe" if family == "mixtral" else "mlp")
    if mlp_kind == "dense":
        out["dense_mlp"] = [pre + "mlp." + x for x in ("gate_proj", "up_proj", "down_proj")]
    else:
        out["experts"] = [block + ".experts"]
        if shared:
            out["shared_experts"] = [block + ".shared_experts." + x
                                     for x in ("gate_proj", "up_proj", "down_proj")]
    return out


def _matcher(pattern: str):
    """A predicate name -> bool for one exclusion pattern (module docstring)."""
    if pattern.startswith("re:"):
        rx = re.compile(pattern[3:])
        return lambda name: rx.match(name) is not None
    body = re.escape(pattern).replace(r"\*", r"[^.]+")
    rx = re.compile(rf"(^|\.){body}$")

    def match(name: str) -> bool:
        parts = name.split(".")
        return any(rx.search(".".join(parts[:i])) for i in range(len(parts), 0, -1))
    return match


def _patterns(q: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(key, pattern)`` of every exclusion of the config."""
    out = []
    for key in EXCLUDE_KEYS:
        v = q.get(key)
        if v is None:
            continue
        if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
            raise ValueError(f"field 'quantization_config.{key}' must be a list of module names, "
                             f"got {v!r}"[:200])
        out += [(key, x) for x in v]
    return out


def parse_unquantised(tag: str) -> frozenset[str]:
    """The groups of an ``unquantised_layers`` entry (``""``, ``"dense_mlp"``,
    ``"attn+dense_mlp"`` ...).

    Raises:
        ValueError: a name that is not a ``QUANT_GROUPS`` entry.
    """
    if not isinstance(tag, str):
        raise ValueError(f"model.unquantised_layers entries must be strings, got {tag!r}")
    gs = frozenset(x for x in tag.split("+") if x)
    bad = sorted(gs - set(QUANT_GROUPS))
    if bad:
        raise ValueError(f"model.unquantised_layers entries must be '+'-joined names of "
                         f"{', '.join(QUANT_GROUPS)}, got {tag!r}")
    return gs


def quant_dtypes(q: Mapping[str, Any], family: str, mlp_types: Sequence[str], mla: bool = False,
                 q_lora: bool = True, shared: bool = False) -> dict[str, Any]:
    """``ModelArch`` datatype fields of a ``quantization_config``.

    Args:
        q: the ``quantization_config`` object ({} when absent). family: ``ModelArch.family``.
        mlp_types: per-layer ``"dense"``/``"moe"``. mla, q_lora, shared: as ``group_modules``.

    Returns:
        keyword arguments for ``ModelArch``: for each group quantised in some layer its weight
        datatype and GEMM datatype (``expert_dtype``/``expert_act_dtype``,
        ``attn_dtype``/``attn_act_dtype``, ``mlp_dtype``/``mlp_act_dtype``,
        ``shared_dtype``/``shared_act_dtype``); the routed experts are always given (``"bf16"``
        when unquantised); the other groups only when quantised (their fields' default follows
        the model's ``weight_dtype``, or the routed experts' datatypes for the shared experts);
        ``unquantised_layers`` (per layer, the ``+``-joined groups excluded there) when a group
        is excluded in some of its layers but not all.

    Raises:
        ValueError: an unsupported ``quant_method`` or ``activation_scheme``, a malformed
            exclusion list, or an exclusion that covers only some of one layer's projections of
            a group (one line naming the field).
    """
    qm = q.get("quant_method")
    out: dict[str, Any] = {"expert_dtype": "bf16", "expert_act_dtype": "bf16"}
    if qm is None:
        return out
    method = str(qm).lower()
    if method not in QUANT_METHODS:
        raise ValueError(f"field 'quantization_config.quant_method' must be one of "
                         f"{', '.join(repr(x) for x in QUANT_METHODS)} (or absent for an "
                         f"unquantised checkpoint), got {qm!r}")
    if method == "mxfp4":
        wdt, adt, groups = "mxfp4", "bf16", ("experts",)
    else:
        scheme = q.get("activation_scheme", "dynamic")
        if scheme not in ("dynamic", "static"):
            raise ValueError(f"field 'quantization_config.activation_scheme' must be 'dynamic' or "
                             f"'static' (FP8 activations), got {scheme!r}")
        wdt, adt, groups = "fp8", "fp8", QUANT_GROUPS
    pats = [(key, p, _matcher(p)) for key, p in _patterns(q)]
    quantised = set()
    per_layer: list[set[str]] = [set() for _ in mlp_types]
    layer_mods = [group_modules(family, i, mk, mla, q_lora, shared)
                  for i, mk in enumerate(mlp_types)]
    for g in groups:
        off = []  # layers whose modules of g are all excluded
        present = 0
        for i, mods in enumerate(layer_mods):
            names = mods.get(g, [])
            if not names:
                continue
            present += 1
            hit = [next(((key, p) for key, p, f in pats if f(nm)), None) for nm in names]
            n_ex = sum(h is not None for h in hit)
            if 0 < n_ex < len(names):
                nm, (key, p) = next((nm, h) for nm, h in zip(names, hit) if h is not None)
                raise ValueError(f"field 'quantization_config.{key}': {p!r} leaves only part of "
                                 f"layer {i}'s {_GROUP_LABEL[g]} unquantised ({n_ex} of "
                                 f"{len(names)} modules, e.g. {nm}); exclude all of a layer's "
                                 f"{_GROUP_LABEL[g]} or none (they run as fused GEMMs)")
            if n_ex:
                off.append(i)
        if not present or len(off) == present:
            continue
        quantised.add(g)
        w, a = _FIELDS[g]
        out[w], out[a] = wdt, adt
        for i in off:
            per_layer[i].add(g)
    if any(per_layer):
        out["unquantised_layers"] = tuple("+".join(x for x in QUANT_GROUPS if x in s)
                                          for s in per_layer)
    if shared:  # "" follows the routed experts: set only where the shared experts differ
        sd = (wdt, adt) if "shared_experts" in quantised else ("bf16", "bf16")
        out.pop("shared_dtype", None)
        out.pop("shared_act_dtype", None)
        if sd != (out["expert_dtype"], out["expert_act_dtype"]):
            out["shared_dtype"], out["shared_act_dtype"] = sd
    return out
