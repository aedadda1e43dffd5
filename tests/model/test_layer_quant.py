"""Quantisation per layer (docs/accounting.md item 1): a checkpoint's ``modules_to_not_convert``
/ ``ignored_layers`` naming some layers' modules keeps those layers' groups in bf16 while the
other layers stay quantised; such layers are a layer kind of their own, so the step has separate
runs. Right values are worked out by hand in the docstrings from the vendored public configs."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from subgpu_jax.score.step import time_step
from subgpu_jax.score.timer import StaticTimer
from subgpu_jax.model.deployment import Deployment
from subgpu_jax.model.graph import build_forward
from subgpu_jax.model.hardware import get_hardware
from subgpu_jax.model.memory import weight_bytes
from subgpu_jax.model.models import ModelArch, get_model, load_hf_config
from subgpu_jax.model.workload import Workload
from subgpu_jax.space.config import temporal_of

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "configs"
H200 = get_hardware("H200")
#: vLLM-style FP8 (dynamic activations) keeping the first and last layers' MLPs in bf16.
FP8_ENDS = {"quant_method": "fp8", "activation_scheme": "dynamic",
            "modules_to_not_convert": ["model.layers.0.mlp", "model.layers.31.mlp", "lm_head"]}
ONE = Deployment(num_gpus=1, attn_tp=1, attn_dp=1, moe_ep=1, global_batch=64, input_len=2000)
TP2 = Deployment(num_gpus=2, attn_tp=2, attn_dp=1, moe_ep=1, global_batch=64, input_len=2000)


def _load(tmp_path, base: str, quant: dict | None, name: str = "config.json") -> ModelArch:
    cfg = json.loads((CONFIGS / base).read_text())
    if quant is None:
        cfg.pop("quantization_config", None)
    else:
        cfg["quantization_config"] = quant
    p = tmp_path / name
    p.write_text(json.dumps(cfg))
    return load_hf_config(p)


def _llama(tmp_path, quant, name="config.json"):
    return _load(tmp_path, "llama-3.1-8b.json", quant, name)


def test_llama_fp8_with_bf16_end_mlps_per_gpu_weights_by_hand(tmp_path):
    """Llama-3.1-8B (h = 4096, 32 heads, 8 KV heads x 128, intermediate 14336, vocab 128256,
    32 layers, untied), ``quant_method: fp8`` excluding ``model.layers.0.mlp`` and
    ``model.layers.31.mlp``, on one GPU (TP1):

    * attention per layer 4096*(32 + 2*8)*128 + 32*128*4096 = 41,943,040 params, FP8 in all 32
      layers: 1,342,177,280 B;
    * MLP per layer 3*4096*14336 = 176,160,768 params: FP8 in layers 1..30, 30 x 176,160,768 =
      5,284,823,040 B; bf16 in layers 0 and 31, 2 x 352,321,536 = 704,643,072 B;
    * embedding + LM head (never quantised) 2*128256*4096*2 = 2,101,346,304 B.

    Total 9,432,989,696 B; all FP8 would be 9,080,668,160 B (352,321,536 less: the two MLPs'
    second byte), all bf16 16,059,990,016 B. At TP2 each GPU holds half of every projection and
    of the vocabulary: 32*20,971,520 + 30*88,080,384 + 2*176,160,768 + 1,050,673,152 =
    4,716,494,848 B."""
    a = _llama(tmp_path, FP8_ENDS)
    assert a.unquantised_layers == ("dense_mlp",) + ("",) * 30 + ("dense_mlp",)
    assert a.dtypes("dense_mlp") == ("fp8", "fp8") and a.dtypes("attn") == ("fp8", "fp8")
    assert a.dtypes("dense_mlp", "dense_mlp") == ("bf16", "bf16")
    assert a.dtypes("attn", "dense_mlp") == ("fp8", "fp8")
    assert weight_bytes(a, ONE) == 9_432_989_696
    assert weight_bytes(_llama(tmp_path, {"quant_method": "fp8"}, "f.json"), ONE) == 9_080_668_160
    assert weight_bytes(_llama(tmp_path, None, "b.json"), ONE) == 16_059_990_016
    assert weight_bytes(a, TP2) == 4_716_494_848


def test_llama_excluded_layers_are_runs_of_their_own(tmp_path):
    """The layer kinds are (full, dense, dense_mlp) for layers 0 and 31 and (full, dense) for the
    30 between, so the step is three runs: 1 + 30 + 1 instances of two region graphs. The
    excluded layers' ``mlp_up`` reads 4096 x 2*14336 x 2 = 234,881,024 B at the bf16 rate,
    the others' 117,440,512 B at the FP8 rate; ``qkv`` reads 4096 x 6144 = 25,165,824 B (FP8)
    in both. Summed over the step the region weight reads exceed the all-FP8 model's by the
    352,321,536 B of the two MLPs, and the FLOPs are the same."""
    a = _llama(tmp_path, FP8_ENDS)
    f8 = _llama(tmp_path, {"quant_method": "fp8"}, "f.json")
    keep, main = (("full", "dense", "dense_mlp"),), (("full", "dense"),)
    assert a.region_runs() == ((keep, 1), (main, 30), (keep, 1))
    assert a.main_region() == main
    fp = build_forward(a, ONE, 1)
    assert [(g.region_kinds, c) for g, c in fp.runs] == [(keep, 1), (main, 30), (keep, 1)]
    assert fp.runs[0][0] is fp.runs[2][0] and fp.main is fp.runs[1][0]
    assert fp.runs[0][0].num_regions == 2 and fp.main.num_regions == 30
    ke = {k.name: k for k in fp.runs[0][0].kernels}
    km = {k.name: k for k in fp.main.kernels}
    assert (ke["L0.mlp_up"].weight_bytes, ke["L0.mlp_up"].dtype) == (234_881_024, "bf16")
    assert (km["L0.mlp_up"].weight_bytes, km["L0.mlp_up"].dtype) == (117_440_512, "fp8")
    assert ke["L0.qkv"].weight_bytes == km["L0.qkv"].weight_bytes == 25_165_824
    assert ke["L0.qkv"].dtype == "fp8"

    def step_sum(fwd, field):
        return sum(sum(getattr(k, field) for k in g.kernels) * c for g, c in fwd.runs)
    ff = build_forward(f8, ONE, 1)
    assert step_sum(fp, "weight_bytes") - step_sum(ff, "weight_bytes") == 352_321_536
    assert step_sum(fp, "flops") == step_sum(ff, "flops")


def test_llama_mixed_step_lies_between_fp8_and_bf16(tmp_path):
    """Temporal step (static evaluator, one H200, G = 64, KV 2,000): the model with two bf16
    MLPs is slower than all-FP8 and faster than all-bf16. More: each layer costs the same
    whatever the others, so the two excluded layers add twice what layer 0 alone adds, and
    each adds less than a whole bf16 layer over an FP8 one (1/32 of the bf16 - FP8 gap, which
    also holds the attention's): T_fp8 < T_mixed < T_fp8 + 2/32 (T_bf16 - T_fp8)."""
    arch = {n: _llama(tmp_path, q, n + ".json") for n, q in (
        ("mixed", FP8_ENDS), ("fp8", {"quant_method": "fp8"}), ("bf16", None),
        ("first", {"quant_method": "fp8", "modules_to_not_convert": ["model.layers.0.mlp"]}))}
    cfg = temporal_of(Workload.from_model(arch["fp8"], ONE, H200))
    t = {n: time_step(build_forward(a, ONE, 1), cfg, StaticTimer(H200)).makespan_us
         for n, a in arch.items()}
    assert t["fp8"] < t["mixed"] < t["bf16"]
    assert t["mixed"] < t["fp8"] + 2 / 32 * (t["bf16"] - t["fp8"])
    assert t["mixed"] - t["fp8"] == pytest.approx(2 * (t["first"] - t["fp8"]), rel=1e-9)


def test_deepseek_one_layers_attention_or_experts_kept_bf16(tmp_path):
    """DeepSeek-V3 (TP1 x DP8, EP8), all FP8 = 100,815,011,840 B per GPU
    (test_accounting.test_deepseek_v3_per_gpu_weights_by_hand):

    * ``model.layers.0.self_attn`` excluded: layer 0's MLA projections, 187,105,280 params, take
      a second byte: 101,002,117,120 B; runs (full, dense, attn) x 1, (full, dense) x 2,
      (full, moe) x 58;
    * ``model.layers.3.mlp.experts`` excluded: layer 3's 32 local experts, 32*3*7168*2048 =
      1,409,286,144 params, take a second byte: 102,224,297,984 B; its shared expert stays FP8
      (the pattern names the routed experts only); runs (full, dense) x 3, (full, moe,
      experts) x 1, (full, moe) x 57."""
    base = json.loads((CONFIGS / "deepseek-v3.json").read_text())["quantization_config"]
    dp8 = Deployment(num_gpus=8, attn_tp=1, attn_dp=8, moe_ep=8, global_batch=512,
                     input_len=4096)
    a = _load(tmp_path, "deepseek-v3.json", {**base, "ignored_layers": ["model.layers.0.self_attn"]})
    assert weight_bytes(a, dp8) == 101_002_117_120
    assert [(b, c) for b, c in a.region_runs()] == [((("full", "dense", "attn"),), 1),
                                                   ((("full", "dense"),), 2),
                                                   ((("full", "moe"),), 58)]
    b = _load(tmp_path, "deepseek-v3.json",
              {**base, "ignored_layers": ["model.layers.3.mlp.experts"]}, "b.json")
    assert weight_bytes(b, dp8) == 102_224_297_984
    assert [c for _, c in b.region_runs()] == [3, 1, 57]
    g = build_forward(b, dp8, 1).runs[1][0]
    k = {x.name: x for x in g.kernels}
    assert g.region_kinds == (("full", "moe", "experts"),)
    assert k["L0.expert_up"].dtype == "bf16" and k["L0.shared_up"].dtype == "fp8"
    assert k["L0.o_proj"].dtype == "fp8"


def test_gpt_oss_one_layers_experts_kept_bf16_in_a_two_layer_region(tmp_path):
    """GPT-OSS-120B (MXFP4 routed experts, 36 layers alternating sliding/full) with layer 0's
    experts also excluded: the (sliding, full) region of layer 0 differs from the other 17, so
    the step is 1 + 17 two-layer regions. On 8 GPUs, EP8 (16 local experts of h = F = 2880),
    layer 0's experts take 2 - 0.53125 more bytes per param: 16*3*2880*2880*1.46875 =
    584,755,200 B more per GPU than the checkpoint as published."""
    q = json.loads((CONFIGS / "gpt-oss-120b.json").read_text())["quantization_config"]
    q = {**q, "modules_to_not_convert": q["modules_to_not_convert"] + ["model.layers.0.mlp.experts"]}
    a = _load(tmp_path, "gpt-oss-120b.json", q)
    pub = load_hf_config(CONFIGS / "gpt-oss-120b.json")
    assert a.region_runs() == (((("sliding", "moe", "experts"), ("full", "moe")), 1),
                               ((("sliding", "moe"), ("full", "moe")), 17))
    d = Deployment(num_gpus=8, attn_tp=1, attn_dp=8, moe_ep=8, global_batch=64, input_len=1024)
    assert weight_bytes(a, d) - weight_bytes(pub, d) == 584_755_200
    k = {x.name: x for x in build_forward(a, d, 1).runs[0][0].kernels}
    assert k["L0.expert_up"].dtype == "bf16" and k["L1.expert_up"].dtype == "bf16"
    assert {x.name: x for x in build_forward(a, d, 1).main.kernels}["L0.expert_down"].weight_bytes \
        < k["L0.expert_down"].weight_bytes


def test_a_group_excluded_in_every_layer_is_no_layer_kind(tmp_path):
    """Excluding every layer's MLP one pattern at a time is the whole group unquantised: no
    per-layer entries, one run, the bf16 MLP bytes of the unquantised model (weights 32 x
    (41,943,040 + 352,321,536) + 2,101,346,304 = 14,717,812,736 B)."""
    q = {"quant_method": "fp8", "ignore": [f"model.layers.{i}.mlp" for i in range(32)]}
    a = _llama(tmp_path, q)
    assert a.unquantised_layers == () and a.dtypes("dense_mlp") == ("bf16", "bf16")
    assert len(a.region_runs()) == 1 and weight_bytes(a, ONE) == 14_717_812_736


@pytest.mark.parametrize("value, match", [(("dense_mlp",), "has 1 entries, num_layers is 32"),
                                          (("mlp",) * 32, "entries must be '\\+'-joined names")])
def test_unquantised_layers_validated_in_one_line(value, match):
    """A list of the wrong length, or a name that is not a module group, is one line naming
    the field."""
    with pytest.raises(ValueError, match=f"model.unquantised_layers {match}") as ei:
        dataclasses.replace(get_model("llama-3.1-8b"), unquantised_layers=value)
    assert "\n" not in str(ei.value)
