"""Model families people deploy (qwen3, qwen2, mixtral, deepseek_v3, layer-wise MLP kinds) and the
deployment accounting faults of docs/method.md's batch accounting, each with its value derived by
hand in the test's docstring. Public config.json files live in tests/data/configs/."""

from __future__ import annotations

import json
import math
import pathlib

import pytest

from subgpu_jax.model.kernelcost import op_cost
from subgpu_jax.model.graph import (Deployment, StaticDurationModel, build_forward, build_graph,
                                    head_kernels)
from subgpu_jax.model.hardware import get_hardware
from subgpu_jax.model.models import MODELS, get_model, load_hf_config

CONFIGS = pathlib.Path(__file__).resolve().parents[1] / "data" / "configs"


def kernel(g, name):
    return g.kernels[g.index(name)]


def write(tmp_path, cfg, name="m"):
    p = tmp_path / f"{name}.json"
    p.write_text(json.dumps(cfg))
    return p


def read(name):
    return json.loads((CONFIGS / f"{name}.json").read_text())


# ============================================================================ config.json files
@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.json")), ids=lambda p: p.stem)
def test_shipped_config_json_equals_preset(path):
    """Each shipped public config.json loads to exactly the preset of the same name."""
    assert load_hf_config(path) == MODELS[path.stem]


#: Published counts: (total, active, convention of the active figure).
#: Qwen3-8B model card: 8.2B total, 6.95B non-embedding. Qwen2.5-7B card: 7.61B, 6.53B
#: non-embedding. Mixtral 8x7B (Mistral AI announcement): 46.7B total, 12.9B used per token,
#: input embedding included. DeepSeek-V3 (README_WEIGHTS.md of the release): main model 671B,
#: 36.6B activated including the 0.9B output head, the input embedding not counted.
PUBLISHED = {
    "qwen3-8b": (8.2e9, None),
    "qwen2.5-7b": (7.61e9, None),
    "mixtral-8x7b": (46.7e9, 12.9e9),
    "deepseek-v3": (671e9, 36.6e9),
}
NON_EMBEDDING = {"qwen3-8b": 6.95e9, "qwen2.5-7b": 6.53e9}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_param_counts_within_1pct_of_published(name):
    total, active = PUBLISHED[name]
    pc = get_model(name).param_counts()
    assert pc["total"] == pytest.approx(total, rel=0.01)
    if name == "mixtral-8x7b":  # Mistral counts the embedding lookup as used
        assert pc["active"] + pc["embedding"] == pytest.approx(active, rel=0.01)
    elif active is not None:
        assert pc["active"] == pytest.approx(active, rel=0.01)
    if name in NON_EMBEDDING:  # untied: minus embedding and LM head
        assert pc["total"] - 2 * pc["embedding"] == pytest.approx(NON_EMBEDDING[name], rel=0.01)


def test_deepseek_v3_param_count_by_hand():
    """DeepSeek-V3, h = 7168, 128 heads, MLA (q_lora 1536, kv_lora 512, rope 64, nope 128, v 128):
    attention = 7168*1536 + 1536 + 1536*128*192 + 7168*576 + 512 + 512*128*256 + 128*128*7168
              = 187,107,328 per layer; dense MLP 3*7168*18432 = 396,361,728; MoE layer: 256
    routed + 1 shared experts of 3*7168*2048 = 44,040,192, router 7168*256 + 256 bias;
    norms 2*7168. Total = 61*(attn+norms) + 3*dense + 58*(257*expert + router) + 2*129280*7168
    + 7168 = 671,026,419,200."""
    attn = 7168 * 1536 + 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 + 512 * 128 * 256 \
        + 128 * 128 * 7168
    assert attn == 187_107_328
    expert = 3 * 7168 * 2048
    total = 61 * (attn + 2 * 7168) + 3 * 3 * 7168 * 18432 \
        + 58 * (257 * expert + 7168 * 256 + 256) + 2 * 129280 * 7168 + 7168
    assert get_model("deepseek-v3").param_counts()["total"] == total == 671_026_419_200


@pytest.mark.parametrize("name", ["qwen3-8b", "qwen2.5-7b", "mixtral-8x7b", "deepseek-v3"])
def test_forward_pass_weight_objects_reproduce_total(name):
    """One GPU holds the whole model: sum over runs of region params x instances + embedding
    + LM head + final norm = the analytical total."""
    arch = get_model(name)
    dep = Deployment(num_gpus=1, attn_tp=1, attn_dp=1, moe_ep=1, global_batch=8)
    fp = build_forward(arch, dep)
    assert fp.param_count() == pytest.approx(arch.param_counts()["total"], rel=1e-12)


# ============================================================================ families
def test_qwen2_biases_and_qwen3_qk_norm():
    """Qwen2.5-7B: q/k/v biases (not o): qkv weight bytes = (3584*(28+2*4)*128 + 36*128)*2 at
    TP1; Qwen3-8B: per-head q/k RMSNorm weights 2*128*2 bytes on rope_kv."""
    dep = Deployment(num_gpus=1, attn_tp=1, attn_dp=1, moe_ep=1, global_batch=8)
    g = build_graph(get_model("qwen2.5-7b"), dep)
    assert kernel(g, "L0.qkv").weight_bytes == (3584 * 36 * 128 + 36 * 128) * 2
    assert kernel(g, "L0.o_proj").weight_bytes == 28 * 128 * 3584 * 2
    g3 = build_graph(get_model("qwen3-8b"), dep)
    assert kernel(g3, "L0.rope_kv").weight_bytes == 2 * 128 * 2


def test_qwen_sliding_window_only_with_use_sliding_window(tmp_path):
    """Qwen2 slides from layer max_window_layers on, only when use_sliding_window is true
    (the shipped Qwen2.5-7B has sliding_window 131072 but use_sliding_window false)."""
    assert set(get_model("qwen2.5-7b").layer_types) == {"full"}
    cfg = dict(read("qwen2.5-7b"), use_sliding_window=True, sliding_window=4096,
               max_window_layers=20)
    a = load_hf_config(write(tmp_path, cfg))
    assert a.layer_types == ("full",) * 20 + ("sliding",) * 8 and a.sliding_window == 4096
    assert [c for _, c in a.region_runs()] == [20, 8]


def test_mixtral_sliding_window_when_set(tmp_path):
    """Mixtral-8x7B-v0.1 has sliding_window null (full attention); set, every layer slides."""
    assert set(get_model("mixtral-8x7b").layer_types) == {"full"}
    a = load_hf_config(write(tmp_path, dict(read("mixtral-8x7b"), sliding_window=4096)))
    assert a.layer_types == ("sliding",) * 32 and a.sliding_window == 4096
    dep = Deployment(num_gpus=8, attn_tp=8, attn_dp=1, moe_ep=8, global_batch=64,
                     kv_history=32768)
    g = build_graph(a, dep)
    # 64 requests x 4096 window x 1 KV head per GPU x 128 x 2 (K,V) x 2 bytes
    assert kernel(g, "L0.attn").kv_bytes == 64 * 4096 * 1 * 128 * 2 * 2
    assert kernel(g, "L0.attn").category == "attn_sliding"


#: mistralai/Mistral-7B-v0.1's public config.json (the fields the import reads).
MISTRAL_7B = {"architectures": ["MistralForCausalLM"], "hidden_act": "silu", "hidden_size": 4096,
              "intermediate_size": 14336, "max_position_embeddings": 32768,
              "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 32,
              "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
              "sliding_window": 4096, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
              "vocab_size": 32000}


def test_mistral_is_a_llama_that_slides(tmp_path):
    """Mistral-7B-v0.1: the llama architecture, every layer sliding over 4,096 tokens. Total
    parameters by hand: embedding and LM head 2 x 32,000 x 4,096 = 262.1 M; per layer q and o
    2 x 4,096^2 = 33.55 M, k and v 2 x 4,096 x 1,024 = 8.39 M, MLP 3 x 4,096 x 14,336 =
    176.16 M, two norms 8,192; 32 layers = 6,979.6 M; final norm 4,096: 7,241.7 M (Mistral AI
    announces "7.3B"). At a 32,768-token history the KV cache of one layer holds the window:
    64 requests x 4,096 x 8 KV heads x 128 x 2 (K, V) x 2 B on one GPU."""
    a = load_hf_config(write(tmp_path, MISTRAL_7B, "mistral-7b"))
    assert a.family == "llama" and a.layer_types == ("sliding",) * 32
    assert a.sliding_window == 4096
    assert a.param_counts()["total"] == 2 * 32000 * 4096 + 32 * (2 * 4096**2 + 2 * 4096 * 1024
                                                         + 3 * 4096 * 14336 + 2 * 4096) + 4096
    dep = Deployment(num_gpus=1, attn_tp=1, attn_dp=1, moe_ep=1, global_batch=64,
                     kv_history=32768)
    k = kernel(build_graph(a, dep), "L0.attn")
    assert k.kv_bytes == 64 * 4096 * 8 * 128 * 2 * 2 and k.category == "attn_sliding"
    # Mistral-7B-v0.2/v0.3: sliding_window null -> full attention
    b = load_hf_config(write(tmp_path, dict(MISTRAL_7B, sliding_window=None), "mistral-7b-v3"))
    assert b.layer_types == ("full",) * 32 and b.sliding_window == 0


def test_a_llama_with_a_sliding_window_is_refused(tmp_path):
    """A Mistral config relabelled llama would silently lose its window (the KV cache costed
    at the full history): refused, pointing at model_type mistral. null stays allowed."""
    with pytest.raises(ValueError, match="'sliding_window' is 4096, but model_type 'llama' has "
                                         "no sliding attention.*model_type 'mistral'"):
        load_hf_config(write(tmp_path, dict(MISTRAL_7B, model_type="llama")))
    a = load_hf_config(write(tmp_path, dict(MISTRAL_7B, model_type="llama", sliding_window=None)))
    assert a.layer_types == ("full",) * 32


def test_deepseek_v3_regions_and_mla_decode():
    """DeepSeek-V3 = 3 dense layers then 58 MoE layers (first_k_dense_replace 3). MLA decode
    at TP8, R = 64 requests, KV 4096: the compressed cache is (512 + 64) elements per token,
    read whole by every TP rank: 64 * 4096 * 576 * 2 bytes; the absorbed attention does
    2 * 64 * 16 heads * 4096 * (2*512 + 64) FLOPs."""
    arch = get_model("deepseek-v3")
    assert [(b, c) for b, c in arch.region_runs()] == [((("full", "dense"),), 3),
                                                       ((("full", "moe"),), 58)]
    dep = Deployment(num_gpus=8, attn_tp=8, attn_dp=1, moe_ep=8, global_batch=64,
                     kv_history=4096)
    fp = build_forward(arch, dep)
    assert [c for _, c in fp.runs] == [3, 58]
    dense, moe = fp.runs[0][0], fp.runs[1][0]
    assert fp.main is moe and moe.num_regions == 58 and dense.num_regions == 3
    assert "L0.mlp_up" in [k.name for k in dense.kernels]
    names = [k.name for k in moe.kernels]
    assert names[:8] == ["L0.rmsnorm", "L0.mla_down", "L0.mla_q_up", "L0.rope_kv", "L0.attn",
                         "L0.mla_v_up", "L0.o_proj", "L0.allreduce"]
    assert {"L0.shared_up", "L0.shared_down"} <= set(names)
    at = kernel(moe, "L0.attn")
    assert at.kv_bytes == 64 * 4096 * 576 * 2
    assert at.flops == 2 * 64 * 16 * 4096 * (2 * 512 + 64)
    # FP8 W8A8 experts compute at the FP8 rate, bf16 elsewhere
    assert kernel(moe, "L0.expert_up").dtype == "fp8"
    assert moe.is_chain() and dense.is_chain()


def test_layerwise_mlp_kinds_change_the_model(tmp_path):
    """Fault: a qwen3_moe config with mlp_only_layers gave the same result as without. With
    layers 0..5 dense, the total drops by 6 * (MoE MLP - dense MLP) = 6 * (128*3*2048*768 +
    2048*128 - 3*2048*6144) = 3,398,959,104 parameters, and the forward pass starts with a run
    of 6 dense layers."""
    base = read("qwen3-30b-a3b")
    a0 = load_hf_config(write(tmp_path, base, "a"))
    a1 = load_hf_config(write(tmp_path, dict(base, mlp_only_layers=list(range(6))), "b"))
    d = a0.param_counts()["total"] - a1.param_counts()["total"]
    assert d == 6 * (128 * 3 * 2048 * 768 + 2048 * 128 - 3 * 2048 * 6144) == 3_398_959_104
    assert [c for _, c in a1.region_runs()] == [6, 42]
    a2 = load_hf_config(write(tmp_path, dict(base, decoder_sparse_step=2), "c"))
    # (i+1) % 2 == 0 is MoE: dense, moe alternate -> one run of 24 two-layer regions
    assert a2.region_runs() == (((("full", "dense"), ("full", "moe")), 24),)
    dep = Deployment(num_gpus=8, attn_tp=4, attn_dp=2, moe_ep=8, global_batch=64)
    g = build_graph(a2, dep)
    ops = [k.name for k in g.kernels]
    assert "L0.mlp_up" in ops and "L1.expert_up" in ops and "L0.router" not in ops


# ============================================================================ accounting faults
def test_moe_tokens_per_gpu_do_not_depend_on_ep():
    """Fault: EP8 on 32 GPUs charged G*k/8 assignments per GPU. gpt-oss-120b, G = 2048 on TP8 x
    DP4 (32 GPUs) with EP8 and G = 512 on TP8 (8 GPUs) with EP8: every GPU receives
    G*k/n = 2048*4/32 = 512*4/8 = 256 assignments, so expert_up = 2 * 256 * 2880 * 5760 FLOPs
    in both, with the same expert bytes (each EP group routes G*e/n = 512 tokens)."""
    arch = get_model("gpt-oss-120b")
    a = build_graph(arch, Deployment(num_gpus=32, attn_tp=8, attn_dp=4, moe_ep=8,
                                     global_batch=2048))
    b = build_graph(arch, Deployment(num_gpus=8, attn_tp=8, attn_dp=1, moe_ep=8,
                                     global_batch=512))
    for nm in ("L0.expert_up", "L0.expert_down", "L0.combine"):
        assert kernel(a, nm).flops == kernel(b, nm).flops
        assert kernel(a, nm).hbm_bytes == pytest.approx(kernel(b, nm).hbm_bytes, rel=1e-12)
    assert kernel(a, "L0.expert_up").flops == 2 * 256 * 2880 * 5760


def test_kv_heads_neither_dividing_nor_divided_by_tp_is_refused():
    """Qwen2.5-7B has 28 query and 4 KV heads. TP7 divides the query heads, but 7 neither
    divides 4 nor is a multiple of it: refused. TP2 splits them (2 per GPU); TP28 replicates
    (28 = 7*4: 1 per GPU)."""
    arch = get_model("qwen2.5-7b")
    with pytest.raises(ValueError, match="attn_tp=7 and the model's 4 KV heads"):
        Deployment(num_gpus=7, attn_tp=7, attn_dp=1, moe_ep=1, global_batch=7).validate(arch)
    assert Deployment(num_gpus=2, attn_tp=2, attn_dp=1, moe_ep=1,
                      global_batch=2).local_kv_heads(arch) == 2
    d28 = Deployment(num_gpus=28, attn_tp=28, attn_dp=1, moe_ep=1, global_batch=28)
    with pytest.raises(ValueError, match="intermediate"):  # 18944 % 28 != 0
        d28.validate(arch)
    assert d28.local_kv_heads(arch) == 1


@pytest.mark.parametrize("hw_name, expert_dtype", [("B200", "mxfp4"), ("H200", "fp8")])
def test_weight_only_quantised_experts_compute_at_activation_rate(hw_name, expert_dtype):
    """Fault: MXFP4 experts on a B200 were timed at the FP4 rate (9 PFLOP/s) and FP8 weights at
    the FP8 rate, though the activations are bf16 (weight-only quantisation has no native
    tensor-core path). A compute-bound expert GEMM (2*A*h*2F FLOPs at m = 1, G = 65536 on one
    GPU) must take FLOPs / (bf16 rate * efficiency * decode GEMM efficiency * 128/N) on the
    whole GPU, plus its launches, minimum kernel times and one GEMM wave (model/kernelcost.py:
    the grid of 128 CTAs runs in one wave on N >= 128 SMs)."""
    import dataclasses

    hw = get_hardware(f"{hw_name}:analytic-v2")   # the v2 GEMM terms (grid of T CTAs)
    arch = dataclasses.replace(get_model("gpt-oss-20b"), expert_dtype=expert_dtype)
    dep = Deployment(num_gpus=1, attn_tp=1, attn_dp=1, moe_ep=1, global_batch=65536,
                     kv_history=128)
    k = kernel(build_graph(arch, dep), "L0.expert_up")
    assert k.dtype == "bf16"
    t = float(StaticDurationModel(hw).kernel_time_us(k, hw.num_sms))
    c = op_cost(k, hw, float(hw.num_sms))
    assert float(c.waves) == 1.0 and float(c.sms) == hw.gemm_grid_ctas
    rate = hw.tensor_flops["bf16"] * hw.gemm_efficiency * hw.decode_gemm_efficiency
    t_bf16 = (k.flops / (rate * hw.gemm_grid_ctas / hw.num_sms) * 1e6 + hw.launch_us
              + float(c.fixed_us))
    assert t == pytest.approx(t_bf16, rel=1e-9)


# ============================================================================ the whole step
def test_head_kernels_by_hand():
    """LM head of Llama-3.1-8B at TP8, R = 64: 2*64*4096*(128256/8) FLOPs, 128256/8*4096*2
    weight bytes (summed over the 8 GPUs: 2*V*h FLOPs per token and V*h weights); all in the
    'head' category, after the last region."""
    arch = get_model("llama-3.1-8b")
    dep = Deployment(num_gpus=8, attn_tp=8, attn_dp=1, moe_ep=1, global_batch=64)
    hk = {k.name: k for k in head_kernels(arch, dep)}
    assert list(hk) == ["final_norm", "lm_head", "sample", "embed"]
    assert hk["lm_head"].flops == 2 * 64 * 4096 * 128256 / 8
    assert hk["lm_head"].weight_bytes == 128256 / 8 * 4096 * 2
    assert {k.category for k in hk.values()} == {"head"}
    assert hk["embed"].comm_bytes == 2 * 7 / 8 * 64 * 4096 * 2


# ============================================================================ gpt_oss defaults
def test_gpt_oss_layer_types_default_alternates(tmp_path):
    """Fault: without layer_types every layer became full attention. The Hugging Face default
    alternates sliding (even layers) and full (odd layers)."""
    cfg = {k: v for k, v in read("gpt-oss-120b").items() if k != "layer_types"}
    a = load_hf_config(write(tmp_path, cfg))
    assert a.layer_types == ("sliding", "full") * 18
    assert a == dict_replace(MODELS["gpt-oss-120b"], name=a.name)


def dict_replace(arch, **kw):
    import dataclasses
    return dataclasses.replace(arch, **kw)


def test_gpt_oss_quant_method_other_than_mxfp4_is_refused(tmp_path):
    """Fault: any quant_method other than mxfp4 silently became bf16 experts."""
    cfg = dict(read("gpt-oss-120b"), quantization_config={"quant_method": "awq"})
    with pytest.raises(ValueError, match="quant_method.*'mxfp4'.*'awq'"):
        load_hf_config(write(tmp_path, cfg))
    cfg = {k: v for k, v in read("gpt-oss-120b").items() if k != "quantization_config"}
    assert load_hf_config(write(tmp_path, cfg, "b")).expert_dtype == "bf16"


# ============================================================================ topology
def test_topology_charges_cross_domain_collectives_at_scale_out():
    """gpt-oss-120b reference deployment (32 GPUs, TP8 x DP4, EP32, G = 2048, m = 1) on HGX
    nodes (NVLink domain 8, 50 GB/s scale-out per GPU). The TP8 all-reduce stays in a node.
    The dispatch of a GPU's Tr = 512/8 = 64 tokens sends P = 64*4*2880*2*31/32 = 1,428,480 bytes,
    24/31 of it (1,105,920 B) to the 24 GPUs of other nodes: it takes launch + setup +
    max(322,560 B / 900 GB/s, 1,105,920 B / 50 GB/s) = launch + setup + 22.1184 µs on a B200,
    plus the fixed phase of its other device kernels (model/kernelcost.py)."""
    hw = get_hardware("B200")
    arch = get_model("gpt-oss-120b")
    one = build_graph(arch, Deployment())
    hgx = build_graph(arch, Deployment(nvlink_domain=8, scaleout_GBps=50.0))
    d = kernel(hgx, "L0.dispatch")
    assert d.comm_bytes == 1_428_480 and d.scaleout_bytes == pytest.approx(1_105_920)
    sd = StaticDurationModel(hw)
    t = float(sd.kernel_time_us(d, hw.num_sms))
    fx = float(op_cost(d, hw, float(hw.num_sms)).fixed_us)
    assert t == pytest.approx(hw.launch_us + fx + hw.comm_setup_us + 22.1184, rel=1e-9)
    assert float(sd.kernel_time_us(kernel(one, "L0.dispatch"), hw.num_sms)) < t
    ar1, ar8 = kernel(one, "L0.allreduce"), kernel(hgx, "L0.allreduce")
    assert ar8.scaleout_bytes == 0 and ar8 == ar1
    with pytest.raises(ValueError, match="nvlink_domain"):
        Deployment(nvlink_domain=-1)


# ============================================================================ routing skew, KV lengths
def test_multinomial_routing_charges_the_busiest_ep_rank():
    """gpt-oss-20b on 2 GPUs (TP2, EP2), G = 64, top-4, m = 1: an EP group routes
    N = G*k*e/n = 256 assignments, mean mu = 128 per rank, sigma = sqrt(256 * 1/2 * 1/2) = 8;
    the expected maximum of 2 standard normals is 1/sqrt(pi), so the busiest rank receives
    128 * (1 + 8/(128 sqrt(pi))) = 132.5135 assignments; a user factor 1.5 multiplies that."""
    arch = get_model("gpt-oss-20b")
    kw = dict(num_gpus=2, attn_tp=2, attn_dp=1, moe_ep=2, global_batch=64)
    base = kernel(build_graph(arch, Deployment(**kw)), "L0.expert_up").flops
    assert base == 2 * 128 * 2880 * 5760
    f = 1 + 8 / (128 * math.sqrt(math.pi))
    multi = Deployment(**kw, routing="multinomial")
    assert multi.expert_load_factor(4, 1) == pytest.approx(f, rel=1e-6)
    assert kernel(build_graph(arch, multi), "L0.expert_up").flops == pytest.approx(base * f,
                                                                                   rel=1e-6)
    both = Deployment(**kw, routing="multinomial", routing_imbalance=1.5)
    assert kernel(build_graph(arch, both), "L0.expert_up").flops == pytest.approx(
        base * f * 1.5, rel=1e-6)
    with pytest.raises(ValueError, match="routing_imbalance"):
        Deployment(**kw, routing_imbalance=0.5)


def test_per_request_kv_lengths_follow_the_busiest_dp_rank():
    """Llama-3.1-8B on TP1 x DP2, G = 8 requests of lengths 100, 900, 100, 900, ... dealt round
    robin: rank 0 holds the 100s, rank 1 the 900s. The step waits for rank 1, so attention reads
    R * 900 tokens: 4 * 900 * 8 KV heads * 128 * 2 (K, V) * 2 bytes = 14,745,600 bytes, not the
    mean's 500. GPT-OSS's sliding layers cap each request at the 128-token window."""
    dep = Deployment(num_gpus=2, attn_tp=1, attn_dp=2, moe_ep=1, global_batch=8,
                     kv_lengths=(100, 900) * 4)
    assert dep.kv_tokens() == 900
    g = build_graph(get_model("llama-3.1-8b"), dep)
    assert kernel(g, "L0.attn").kv_bytes == 14_745_600
    assert dep.kv_tokens(128) == 128
    with pytest.raises(ValueError, match="kv_lengths"):
        Deployment(kv_lengths=(0, 5))


def test_kernel_features_time_collectives_as_the_static_model_does():
    """search.features' per-kernel terms are "exactly the terms of StaticDurationModel": on the
    HGX topology above (the dispatch's scale-out part at 50 GB/s), launch + max(compute, memory,
    communication) equals the static model's time for every kernel of the region, collectives
    included (it once used the payload at NVLink speed: 1.59 µs instead of 22.12 µs)."""
    from subgpu_jax.search import features
    hw = get_hardware("B200")
    g = build_graph(get_model("gpt-oss-120b"), Deployment(nvlink_domain=8, scaleout_GBps=50.0))
    sd = StaticDurationModel(hw)
    for k in g.kernels:
        comp, mem, comm, launch = features._time_components(k, hw, hw.num_sms)
        assert launch + max(comp, mem, comm) == pytest.approx(
            float(sd.kernel_time_us(k, hw.num_sms)), rel=1e-9), k.name


def test_local_shapes_are_the_per_gpu_split():
    """``LocalShapes``: the per-GPU split the builder, the memory accounting and the runtime
    share, by hand for Llama-3.1-70B on TP8 (64 heads, 8 KV heads, head dim 128, intermediate
    28,672), GPT-OSS 120B on TP8 x EP32 (128 experts of 2,880) and DeepSeek-V3's MLA (KV rank
    512, rope dim 64, query rank 1,536)."""
    from subgpu_jax import get_model
    from subgpu_jax.model.deployment import Deployment
    from subgpu_jax.model.localshapes import LocalShapes

    s = LocalShapes.of(get_model("llama-3.1-70b"), Deployment(8, 8, 1, 1, 64, 1024, 1024))
    assert (s.qh, s.kvh, s.hd, s.nq, s.I, s.El, s.mla) == (8, 1, 128, 1280, 3584, 0, False)
    g = LocalShapes.of(get_model("gpt-oss-120b"), Deployment(32, 8, 4, 32, 512, 1024, 1024))
    assert (g.E, g.El, g.F, g.t, g.e) == (128, 4, 2880, 8, 32)
    d = LocalShapes.of(get_model("deepseek-v3"), Deployment(16, 16, 1, 16, 64, 2048, 2048))
    assert d.mla and (d.kvh, d.nq, d.c, d.r, d.ql, d.nd) == (1, 0, 512, 64, 1536, 2112)
