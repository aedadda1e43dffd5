"""Model architectures: presets from the public Hugging Face configs, and model lookup.

Each preset copies the fields of the model's public ``config.json`` (sources in ``MODELS``'s
docstrings). ``resolve_model`` takes a preset name or a ``config.json`` (read by
``hfconfig.load_hf_config`` from disk, never the network, for the families in ``FAMILIES``).
The architecture itself, ``ModelArch``, is in ``arch``; this module re-exports it with
``load_hf_config``, ``FAMILIES`` and ``MODEL_TYPES``, so that callers import models from one
place.
"""

from __future__ import annotations

import os
from types import MappingProxyType
from typing import Mapping

from subgpu_jax.model.arch import ModelArch, alternating
from subgpu_jax.model.hfconfig import FAMILIES, MODEL_TYPES, load_hf_config
from subgpu_jax.model.routing import expected_distinct

__all__ = ["ModelArch", "MODELS", "DEFAULT_MODEL", "FAMILIES", "MODEL_TYPES", "get_model",
           "load_hf_config", "resolve_model", "expected_distinct"]


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
        moe_intermediate=2880, layer_types=alternating(36, "sliding", "full"),
        sliding_window=128, attn_bias=True, mlp_bias=True, attention_sinks=True,
        expert_dtype="mxfp4"),
    "gpt-oss-20b": ModelArch(
        name="gpt-oss-20b", family="gpt_oss", num_layers=24, hidden=2880, num_heads=64,
        num_kv_heads=8, head_dim=64, vocab=201088, num_experts=32, top_k=4,
        moe_intermediate=2880, layer_types=alternating(24, "sliding", "full"),
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
#: The model of the reference workload (docs/method.md §5): the default of ``--model`` and
#: ``Workload.from_names``.
DEFAULT_MODEL: str = "gpt-oss-120b"


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

