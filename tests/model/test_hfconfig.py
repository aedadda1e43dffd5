"""subgpu_jax.model.hfconfig: the registry of ``model_type`` parsers behind ``load_hf_config``.

Oracle: the public configs in tests/data/configs/ (each read as its preset's family) and the
registry's own keys (the supported types, their order, the unknown-type message).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from subgpu_jax.model import hfconfig
from subgpu_jax.model.arch import ModelArch
from subgpu_jax.model.models import FAMILIES, MODEL_TYPES, load_hf_config

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "configs"


def test_registry_is_the_supported_types():
    """The registry's keys are ``MODEL_TYPES`` in the order the CLI's help lists them; the
    families are the types modelled as themselves, ``mistral`` is read as ``llama``."""
    assert tuple(hfconfig.MODEL_TYPE_PARSERS) == MODEL_TYPES == (
        "llama", "qwen2", "qwen3", "qwen3_moe", "mixtral", "gpt_oss", "deepseek_v3", "mistral")
    assert FAMILIES == MODEL_TYPES[:-1]
    fam = {mt: e.family for mt, e in hfconfig.MODEL_TYPE_PARSERS.items()}
    assert fam["mistral"] == "llama" and all(fam[f] == f for f in FAMILIES)
    assert [mt for mt, e in hfconfig.MODEL_TYPE_PARSERS.items() if e.head_dim] == ["deepseek_v3"]


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.json")), ids=lambda p: p.stem)
def test_each_shipped_config_goes_through_its_parser(path):
    """Every shipped config is read by the parser registered for its ``model_type``, which
    gives that type's family."""
    mt = json.loads(path.read_text())["model_type"]
    arch = load_hf_config(path)
    assert arch.model_type == mt and arch.family == hfconfig.MODEL_TYPE_PARSERS[mt].family


def test_unknown_type_lists_the_registry(tmp_path):
    """An unknown (or non-string) ``model_type`` is refused in one line listing the registry."""
    p = tmp_path / "config.json"
    for mt in ("phi3", 5, ["llama"]):
        p.write_text(json.dumps({"model_type": mt}))
        with pytest.raises(ValueError) as e:
            load_hf_config(p)
        assert f"model_type must be one of {', '.join(hfconfig.MODEL_TYPE_PARSERS)}, got " \
            f"{mt!r}" in str(e.value)


def test_a_registered_parser_is_dispatched_to(tmp_path, monkeypatch):
    """A parser registered with the decorator reads its type (with the shared fields and the
    family's own head dim); a second registration of a type is refused."""
    monkeypatch.setattr(hfconfig, "MODEL_TYPE_PARSERS", dict(hfconfig.MODEL_TYPE_PARSERS))
    seen = {}

    @hfconfig.model_type_parser("toy", family="llama", head_dim=lambda cfg, p: 16)
    def _toy(cfg, p, common):
        seen.update(common)
        return ModelArch(family="llama", intermediate=64, **common)

    cfg = {"model_type": "toy", "num_hidden_layers": 2, "hidden_size": 64,
           "num_attention_heads": 4, "vocab_size": 10}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    arch = load_hf_config(tmp_path / "config.json", name="toy-1")
    assert (arch.model_type, arch.family, arch.head_dim, arch.num_kv_heads) == \
        ("toy", "llama", 16, 4)
    assert seen == {"name": "toy-1", "num_layers": 2, "hidden": 64, "num_heads": 4,
                    "num_kv_heads": 4, "head_dim": 16, "vocab": 10, "tie_embeddings": False}
    with pytest.raises(ValueError, match="'toy' is already registered"):
        hfconfig.model_type_parser("toy")(_toy)
