"""Model presets, config.json loading, deployments and the per-GPU operator graph (docs/method.md §5),
including the accounting traps: GQA, head_dim, sliding windows, KV replication, expert hits."""

from __future__ import annotations

import dataclasses
import json
import math

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, strategies as st

from subgpu_jax.model.graph import (CATEGORIES, REFERENCE_DEPLOYMENT, Deployment,
    StaticDurationModel, build_forward, build_graph)
from subgpu_jax.model.hardware import DTYPE_BYTES, HARDWARE
from subgpu_jax.model.models import (MODELS, ModelArch, expected_distinct, get_model,
    load_hf_config, resolve_model)

ONE_GPU = dict(num_gpus=1, attn_tp=1, attn_dp=1, moe_ep=1)


def one_gpu(global_batch: int = 64, **kw) -> Deployment:
    return Deployment(**ONE_GPU, global_batch=global_batch, **kw)


def kernel(g, name):
    return g.kernels[g.index(name)]


#: A valid multi-GPU deployment of every preset (TP 8; MoE models EP 32 on 32 GPUs).
PRESET_DEPLOY = {
    "gpt-oss-120b": REFERENCE_DEPLOYMENT,
    "gpt-oss-20b": REFERENCE_DEPLOYMENT,
    "qwen3-30b-a3b": REFERENCE_DEPLOYMENT,
    "llama-3.1-8b": Deployment(num_gpus=8, attn_tp=8, attn_dp=1, moe_ep=1, global_batch=256),
    "llama-3.1-70b": Deployment(num_gpus=8, attn_tp=8, attn_dp=1, moe_ep=1, global_batch=256),
    "qwen3-8b": Deployment(num_gpus=8, attn_tp=8, attn_dp=1, moe_ep=1, global_batch=256),
    "qwen2.5-7b": Deployment(num_gpus=4, attn_tp=4, attn_dp=1, moe_ep=1, global_batch=256),
    "mixtral-8x7b": Deployment(num_gpus=8, attn_tp=8, attn_dp=1, moe_ep=8, global_batch=256),
    "deepseek-v3": Deployment(num_gpus=32, attn_tp=8, attn_dp=4, moe_ep=32, global_batch=2048),
}


# ============================================================================ parameter counts
#: Published totals (model cards): parameters, and active parameters per token where published
#: in the convention ``param_counts`` follows (GPT-OSS: unembedding counted, embedding not).
PUBLISHED = {
    "gpt-oss-120b": (116.8e9, 5.1e9),
    "gpt-oss-20b": (20.9e9, 3.6e9),
    "llama-3.1-8b": (8.03e9, None),
    "llama-3.1-70b": (70.6e9, None),
    "qwen3-30b-a3b": (30.5e9, None),
    # model cards / release notes; active figures and conventions in tests/model/test_families.py
    "qwen3-8b": (8.2e9, None),
    "qwen2.5-7b": (7.61e9, None),
    "mixtral-8x7b": (46.7e9, None),
    "deepseek-v3": (671e9, 36.6e9),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_param_counts_match_published(name):
    total, active = PUBLISHED[name]
    pc = get_model(name).param_counts()
    assert pc["total"] == pytest.approx(total, rel=0.01)
    if active is not None:
        assert pc["active"] == pytest.approx(active, rel=0.01)
    assert pc["active"] <= pc["total"]


def test_param_counts_exact_gpt_oss_120b():
    # model card: 116.83B total, 5.13B active
    pc = get_model("gpt-oss-120b").param_counts()
    assert pc["total"] == 116_829_156_672
    assert pc["active"] == 5_132_849_472


@pytest.mark.parametrize("name", sorted(MODELS))
def test_graph_weight_objects_reproduce_total_params(name):
    """One GPU holds the whole model: region params x instances over every run of region
    kinds + embeddings + final norm = published total (build_forward's param_count)."""
    arch = get_model(name)
    fp = build_forward(arch, one_gpu(64))
    emb = arch.vocab * arch.hidden * (1 if arch.tie_embeddings else 2)
    total = sum(g.weight_params() * c for g, c in fp.runs) + emb
    assert total == pytest.approx(PUBLISHED[name][0], rel=0.01)
    # exact: the analytical count adds only the final norm (hidden) on top
    assert total + arch.hidden == arch.param_counts()["total"] == fp.param_count()


def _nonexpert_params(g) -> float:
    """Parameters of the non-expert weight objects, from bytes (sinks are fp32)."""
    wb = DTYPE_BYTES[g.arch.weight_dtype]
    return sum(b / (4.0 if nm.endswith("sinks") else wb)
               for k in g.kernels for nm, b in k.weight_objects if "experts_" not in nm)


def _expert_params(arch: ModelArch) -> int:
    h, f = arch.hidden, arch.moe_intermediate
    return 3 * h * f + ((2 * f + h) if arch.mlp_bias else 0)


@pytest.mark.parametrize("name, deploy", [
    ("gpt-oss-120b", Deployment(num_gpus=8, attn_tp=8, attn_dp=1, moe_ep=8, global_batch=64)),
    ("gpt-oss-120b", REFERENCE_DEPLOYMENT),
    ("gpt-oss-20b", Deployment(num_gpus=16, attn_tp=16, attn_dp=1, moe_ep=16, global_batch=64)),
    ("qwen3-30b-a3b", Deployment(num_gpus=8, attn_tp=4, attn_dp=2, moe_ep=8, global_batch=64)),
])
def test_weight_params_per_gpu_match_weight_objects(name, deploy):
    """The params a GPU holds = its non-expert weight objects + E/e hosted experts per layer."""
    arch = get_model(name)
    g = build_graph(arch, deploy)
    per_layer_experts = arch.num_experts // deploy.moe_ep * _expert_params(arch)
    expected = _nonexpert_params(g) + g.layers_per_region * per_layer_experts
    assert g.weight_params() == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("deploy", [
    Deployment(num_gpus=8, attn_tp=8, attn_dp=1, moe_ep=1, global_batch=64),
    Deployment(num_gpus=16, attn_tp=16, attn_dp=1, moe_ep=1, global_batch=64),
])
def test_weight_params_dense_tp_match_weight_objects(deploy):
    g = build_graph(get_model("llama-3.1-8b"), deploy)
    assert g.weight_params() == pytest.approx(_nonexpert_params(g), rel=1e-12)


@pytest.mark.parametrize("name, batch, m", [("gpt-oss-120b", 64, 1), ("gpt-oss-120b", 64, 4),
                                            ("gpt-oss-20b", 8, 2), ("qwen3-30b-a3b", 16, 1)])
def test_expert_weight_bytes_are_expected_distinct_hits(name, batch, m):
    arch = get_model(name)
    g = build_graph(arch, one_gpu(batch), microbatches=m)
    E, k, H, F = arch.num_experts, arch.top_k, arch.hidden, arch.moe_intermediate
    hit = E * (1.0 - (1.0 - k / E) ** (batch / m))
    eb, wb = DTYPE_BYTES[arch.expert_dtype], DTYPE_BYTES[arch.weight_dtype]
    up = H * 2 * F * eb + (2 * F * wb if arch.mlp_bias else 0)
    down = F * H * eb + (H * wb if arch.mlp_bias else 0)
    for j in range(g.layers_per_region):
        assert kernel(g, f"L{j}.expert_up").weight_bytes == pytest.approx(hit * up, rel=1e-12)
        assert kernel(g, f"L{j}.expert_down").weight_bytes == pytest.approx(hit * down, rel=1e-12)
    assert hit < E  # fewer than all experts are touched by a small batch


@pytest.mark.parametrize("ep, batch", [(1, 2048), (8, 2048), (32, 2048), (32, 64), (128, 256)])
def test_experts_per_gpu_and_local_hits(ep, batch):
    """E/e experts per GPU; weight bytes count only the expected distinct LOCAL experts hit."""
    arch = get_model("gpt-oss-120b")
    tp = min(ep, 8)
    d = Deployment(num_gpus=ep, attn_tp=tp, attn_dp=ep // tp, moe_ep=ep, global_batch=batch)
    g = build_graph(arch, d)
    E, k = arch.num_experts, arch.top_k
    local = E // ep
    hit = local * (1.0 - (1.0 - k / E) ** batch)
    assert hit <= local
    per_up = arch.hidden * 2 * arch.moe_intermediate * 0.53125 + 2 * arch.moe_intermediate * 2
    assert kernel(g, "L0.expert_up").weight_bytes == pytest.approx(hit * per_up, rel=1e-12)
    # hosted experts in the held parameters
    held = g.weight_params() - _nonexpert_params(g)
    assert held == pytest.approx(2 * local * _expert_params(arch), rel=1e-9)
    # assignments received per layer: G*k/e
    A = batch * k / ep
    assert kernel(g, "L0.expert_up").flops == pytest.approx(2 * A * arch.hidden * 2 * 2880)


def test_expected_distinct_formula():
    assert expected_distinct(128, 1, 4) == pytest.approx(4.0)
    assert expected_distinct(128, 0, 4) == 0.0
    assert expected_distinct(128, 10_000, 4) == pytest.approx(128.0)
    assert expected_distinct(0, 5) == 0.0
    assert expected_distinct(10, 2, 1) == pytest.approx(10 * (1 - 0.9**2))


# ============================================================================ reference workload
def test_reference_workload_accounting():
    arch = get_model("gpt-oss-120b")
    d = REFERENCE_DEPLOYMENT
    assert (d.num_gpus, d.attn_tp, d.attn_dp, d.moe_ep, d.global_batch) == (32, 8, 4, 32, 2048)
    assert d.requests_per_gpu == 512 and d.tokens_per_gpu == 64.0
    g = build_graph(arch, d)
    assert g.num_regions == 18 and g.layers_per_region == 2 and g.n == 24
    ops = [k.op for k in g.kernels[:12]]
    assert ops == ["rmsnorm", "qkv", "rope_kv", "attn", "o_proj", "allreduce", "router", "topk",
                   "dispatch", "expert_up", "expert_down", "combine"]
    assert kernel(g, "L0.attn").category == "attn_sliding"
    assert kernel(g, "L1.attn").category == "attn_full"
    assert {k.category for k in g.kernels} <= set(CATEGORIES)
    # 512 requests x 32768 tokens x 1 KV head x 64 x (K,V) x bf16 = 4.29 GB (calibration)
    assert kernel(g, "L1.attn").kv_bytes == 512 * 32768 * 1 * 64 * 2 * 2
    assert kernel(g, "L0.attn").kv_bytes == 512 * 128 * 1 * 64 * 2 * 2
    # 256 expert assignments per GPU per layer = 64 per local expert
    A = 2048 * 4 / 32
    assert A == 256
    assert kernel(g, "L0.expert_up").flops == 2 * A * 2880 * 5760
    assert kernel(g, "L0.expert_down").flops == 2 * A * 2880 * 2880
    # TP8 all-reduce of 512 x 2880 bf16: 2 (t-1)/t of the payload
    assert kernel(g, "L0.allreduce").comm_bytes == pytest.approx(2 * 7 / 8 * 512 * 2880 * 2)
    # 64 tokens routed per GPU (each token routed once over the 32 GPUs)
    assert kernel(g, "L0.router").flops == 2 * 64 * 2880 * 128


def test_graph_structure_is_a_dag_in_launch_order():
    g = build_graph(get_model("gpt-oss-120b"), REFERENCE_DEPLOYMENT)
    assert all(u < v for u, v in g.edges)
    nxg = g.to_networkx()
    assert nx.is_directed_acyclic_graph(nxg) and nxg.number_of_nodes() == g.n
    # the launch order is the only topological order; the residual edges skip the MoE block
    assert g.is_chain()
    assert {(5, 8), (5, 11), (11, 12), (11, 17)} <= set(g.edges)
    fp = g.forward_pass()
    assert fp.number_of_nodes() == g.n * g.num_regions
    assert nx.is_directed_acyclic_graph(fp)
    assert fp.has_edge((0, g.n - 1), (1, 0))  # residual stream into the next region
    assert g.index("L1.attn") == 15 and g.index(15) == 15
    dense = build_graph(get_model("llama-3.1-8b"), one_gpu(8))
    assert dense.is_chain() and dense.n == 9 and dense.num_regions == 32


@pytest.mark.parametrize("name", ["gpt-oss-120b", "llama-3.1-8b"])
@pytest.mark.parametrize("m", [2, 4, 8])
def test_microbatches_split_work_evenly(name, m):
    arch = get_model(name)
    d = PRESET_DEPLOY[name]
    t1 = build_graph(arch, d, 1).totals()
    tm = build_graph(arch, d, m).totals()
    for key in ("flops", "act_bytes", "kv_bytes", "comm_bytes"):
        assert tm[key] * m == pytest.approx(t1[key], rel=1e-12), key
    # weights are read per microbatch: never fewer bytes than one m-th of the whole step's
    assert tm["weight_bytes"] * m >= t1["weight_bytes"]


# ============================================================================ traps
@pytest.mark.parametrize("name", ["llama-3.1-8b", "qwen3-30b-a3b", "gpt-oss-120b"])
def test_gqa_kv_bytes_use_kv_heads(name):
    arch = get_model(name)
    d = one_gpu(16, kv_history=1000)
    g = build_graph(arch, d)
    kvb = DTYPE_BYTES[arch.kv_dtype]
    full = next(j for j, t in enumerate(arch.period) if t == "full")
    attn = kernel(g, f"L{full}.attn")
    expect = 16 * 1000 * arch.num_kv_heads * arch.head_dim * 2 * kvb
    assert attn.kv_bytes == expect
    assert attn.kv_bytes < 16 * 1000 * arch.num_heads * arch.head_dim * 2 * kvb
    assert kernel(g, "L0.rope_kv").kv_bytes == 16 * arch.num_kv_heads * arch.head_dim * 2 * kvb


def test_head_dim_comes_from_config_qwen3():
    arch = get_model("qwen3-30b-a3b")
    assert arch.head_dim == 128 != arch.hidden // arch.num_heads == 64
    g = build_graph(arch, one_gpu(8, kv_history=100))
    nq = (32 + 2 * 4) * 128
    assert kernel(g, "L0.qkv").weight_bytes == 2048 * nq * 2
    assert kernel(g, "L0.o_proj").weight_bytes == 32 * 128 * 2048 * 2
    assert kernel(g, "L0.attn").kv_bytes == 8 * 100 * 4 * 128 * 2 * 2
    assert kernel(g, "L0.attn").flops == 4 * 8 * 32 * 100 * 128


def test_sliding_window_reads_min_window_history():
    arch = get_model("gpt-oss-120b")
    assert arch.sliding_window == 128 and arch.period == ("sliding", "full")
    sl, fu = {}, {}
    for h in (127, 128, 129):
        g = build_graph(arch, one_gpu(4, kv_history=h))
        sl[h], fu[h] = kernel(g, "L0.attn").kv_bytes, kernel(g, "L1.attn").kv_bytes
    per_token = 4 * 8 * 64 * 2 * 2
    assert [sl[h] for h in (127, 128, 129)] == [127 * per_token, 128 * per_token, 128 * per_token]
    assert [fu[h] for h in (127, 128, 129)] == [127 * per_token, 128 * per_token, 129 * per_token]


@pytest.mark.parametrize("name, tp", [("llama-3.1-8b", 16), ("llama-3.1-8b", 32),
                                      ("gpt-oss-120b", 16), ("gpt-oss-120b", 64),
                                      ("qwen3-30b-a3b", 8)])
def test_kv_heads_fewer_than_tp_are_replicated(name, tp):
    arch = get_model(name)
    assert arch.num_kv_heads < tp
    ep = 1 if not arch.is_moe else min(tp, arch.num_experts)
    d = Deployment(num_gpus=tp, attn_tp=tp, attn_dp=1, moe_ep=ep, global_batch=64)
    g = build_graph(arch, d)
    hd, kvb = arch.head_dim, DTYPE_BYTES[arch.kv_dtype]
    R = 64
    # exactly one KV head per GPU, never zero
    assert kernel(g, "L0.rope_kv").kv_bytes == R * 1 * hd * 2 * kvb
    full = next(j for j, t in enumerate(arch.period) if t == "full")
    assert kernel(g, f"L{full}.attn").kv_bytes == R * d.kv_history * 1 * hd * 2 * kvb
    qh = arch.num_heads // tp
    bias = (qh + 2) * hd * 2 if arch.attn_bias else 0
    assert kernel(g, "L0.qkv").weight_bytes == arch.hidden * (qh + 2) * hd * 2 + bias


def test_kv_heads_split_when_tp_smaller():
    arch = get_model("llama-3.1-8b")
    d = Deployment(num_gpus=4, attn_tp=4, attn_dp=1, moe_ep=1, global_batch=8)
    g = build_graph(arch, d)
    assert kernel(g, "L0.rope_kv").kv_bytes == 8 * 2 * 128 * 2 * 2  # 8/4 = 2 KV heads


def test_batch_not_divisible_by_dp_raises():
    with pytest.raises(ValueError, match="global_batch"):
        Deployment(num_gpus=32, attn_tp=8, attn_dp=4, moe_ep=32, global_batch=2046)


@pytest.mark.parametrize("m", [3, 5, 1000, 1024])
def test_microbatches_not_dividing_requests_raise(m):
    with pytest.raises(ValueError, match="microbatches"):
        build_graph(get_model("gpt-oss-120b"), REFERENCE_DEPLOYMENT, microbatches=m)


@pytest.mark.parametrize("m", [0, -2, 1.5, True])
def test_microbatches_not_positive_integer_raise(m):
    with pytest.raises(ValueError, match="microbatches"):
        build_graph(get_model("gpt-oss-120b"), REFERENCE_DEPLOYMENT, microbatches=m)


@pytest.mark.parametrize("hw_name", sorted(HARDWARE))
@pytest.mark.parametrize("name", sorted(MODELS))
def test_no_kernel_is_free(name, hw_name):
    hw = HARDWARE[hw_name]
    for m in (1, 4):
        g = build_graph(get_model(name), PRESET_DEPLOY[name], microbatches=m)
        tab = StaticDurationModel(hw).table(g)
        assert tab.shape == (g.n, hw.num_sms + 1)
        assert np.all(np.isfinite(tab))
        assert np.all(tab >= hw.launch_us)
        # every kernel does some work, so it costs strictly more than its launch
        assert np.all(tab > hw.launch_us)
        # more SMs never make a kernel slower in the static model
        assert np.all(np.diff(tab[:, 1:], axis=1) <= 1e-9 * tab[:, 2:])


def test_static_duration_model_values():
    """Hand-computed times of two reference kernels on the H200 (µs)."""
    hw = HARDWARE["H200"]
    g = build_graph(get_model("gpt-oss-120b"), REFERENCE_DEPLOYMENT)
    sdm = StaticDurationModel(hw)
    attn = kernel(g, "L1.attn")
    # memory bound on the whole GPU: 4.29 GB at 4614 GB/s read ~ 931 µs + 2 device kernels x
    # (1.199 µs launch + 2.094 µs minimum kernel time, analytic-v3) (docs/fidelity.md §6)
    t = float(sdm.kernel_time_us(attn, 132))
    assert (hw.launch_us, hw.min_kernel_us) == (1.199, 2.094)
    assert t == pytest.approx(2 * (1.199 + 2.094) + attn.hbm_bytes / 4614e9 * 1e6, rel=1e-9)
    assert 920 < t < 945  # the calibration measured 930.8 µs
    # the all-reduce: 3 µs setup + payload / 450 GB/s
    ar = kernel(g, "L0.allreduce")
    t_ar = float(sdm.kernel_time_us(ar, 132))
    assert t_ar >= 1.199 + 3.0 + ar.comm_bytes / 450e9 * 1e6 - 1e-9


def test_static_duration_table_rejects_negative_work():
    g = build_graph(get_model("llama-3.1-8b"), one_gpu(8))
    bad = dataclasses.replace(g.kernels[0], flops=-1.0)
    g2 = dataclasses.replace(g, kernels=(bad,) + g.kernels[1:], _index={})
    with pytest.raises(ValueError, match="flops"):
        StaticDurationModel(HARDWARE["H200"]).table(g2)


# ============================================================================ deployments
@pytest.mark.parametrize("model, deploy_kw", [
    ("llama-3.1-8b", dict(num_gpus=64, attn_tp=64, attn_dp=1, moe_ep=1)),    # TP > heads
    ("llama-3.1-8b", dict(num_gpus=3, attn_tp=3, attn_dp=1, moe_ep=1)),      # TP does not divide
    ("gpt-oss-120b", dict(num_gpus=128, attn_tp=128, attn_dp=1, moe_ep=128)),  # TP > 64 heads
    ("qwen3-30b-a3b", dict(num_gpus=6, attn_tp=6, attn_dp=1, moe_ep=2)),     # 6 does not divide 32
])
def test_tp_not_dividing_heads_raises(model, deploy_kw):
    with pytest.raises(ValueError, match="attn_tp"):
        build_graph(get_model(model), Deployment(**deploy_kw, global_batch=64))


@pytest.mark.parametrize("deploy_kw", [
    dict(num_gpus=6, attn_tp=2, attn_dp=3, moe_ep=3, global_batch=2046),   # 3 does not divide 128
    dict(num_gpus=32, attn_tp=8, attn_dp=4, moe_ep=64, global_batch=2048),  # e > n
    dict(num_gpus=24, attn_tp=8, attn_dp=3, moe_ep=16, global_batch=2046),  # e does not divide n
])
def test_ep_invalid_raises(deploy_kw):
    with pytest.raises(ValueError, match="moe_ep"):
        build_graph(get_model("gpt-oss-120b"), Deployment(**deploy_kw))


def test_ep_for_dense_model_raises():
    with pytest.raises(ValueError, match="moe_ep"):
        build_graph(get_model("llama-3.1-8b"),
                    Deployment(num_gpus=8, attn_tp=8, attn_dp=1, moe_ep=8, global_batch=8))


def test_dense_mlp_not_divisible_by_tp_raises():
    arch = ModelArch(name="toy", family="llama", num_layers=2, hidden=256, num_heads=16,
                     num_kv_heads=4, head_dim=16, vocab=1000, intermediate=1000)
    with pytest.raises(ValueError, match="attn_tp"):
        build_graph(arch, Deployment(num_gpus=16, attn_tp=16, attn_dp=1, moe_ep=1,
                                     global_batch=16))


@pytest.mark.parametrize("kw, field", [
    (dict(num_gpus=32, attn_tp=8, attn_dp=2), "num_gpus"),
    (dict(global_batch=0), "global_batch"),
    (dict(kv_history=-1), "kv_history"),
    (dict(attn_tp=True), "attn_tp"),
])
def test_deployment_rejects_bad_fields(kw, field):
    with pytest.raises(ValueError, match=field):
        Deployment(**kw)


# ============================================================================ models
def test_unknown_model_name_raises():
    with pytest.raises(ValueError, match="model must be one of"):
        get_model("gpt-5")
    with pytest.raises(ValueError, match="model must be one of"):
        resolve_model("not-a-model")


def test_get_model_case_insensitive():
    assert get_model("GPT-OSS-120B") is MODELS["gpt-oss-120b"]


@pytest.mark.parametrize("kw, field", [
    (dict(num_kv_heads=5), "num_kv_heads"),
    (dict(layer_types=("full",) * 3), "layer_types"),
    (dict(top_k=200), "top_k"),
    (dict(expert_dtype="int4"), "expert_dtype"),
    (dict(hidden=0), "hidden"),
    (dict(sliding_window=0), "sliding_window"),
])
def test_model_arch_rejects_bad_fields(kw, field):
    with pytest.raises(ValueError, match=field):
        dataclasses.replace(get_model("gpt-oss-120b"), **kw)


def test_period_of_alternating_model_is_two_layers():
    assert get_model("gpt-oss-120b").period == ("sliding", "full")
    assert get_model("llama-3.1-8b").period == ("full",)


# ---------------------------------------------------------------------------- config.json
LLAMA_31_8B = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096,
    "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 131072,
    "mlp_bias": False, "model_type": "llama", "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.43.0.dev0", "use_cache": True, "vocab_size": 128256,
}

QWEN3_30B_A3B = {
    "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
    "intermediate_size": 6144, "max_position_embeddings": 40960, "max_window_layers": 48,
    "mlp_only_layers": [], "model_type": "qwen3_moe", "moe_intermediate_size": 768,
    "norm_topk_prob": True, "num_attention_heads": 32, "num_experts": 128,
    "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4,
    "output_router_logits": False, "rms_norm_eps": 1e-06, "rope_scaling": None,
    "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001, "sliding_window": None,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
    "use_cache": True, "use_sliding_window": False, "vocab_size": 151936,
}

GPT_OSS_120B = {
    "architectures": ["GptOssForCausalLM"], "attention_bias": True, "attention_dropout": 0.0,
    "eos_token_id": 200002, "experts_per_token": 4, "head_dim": 64, "hidden_act": "silu",
    "hidden_size": 2880, "initial_context_length": 4096, "initializer_range": 0.02,
    "intermediate_size": 2880,
    "layer_types": ["sliding_attention", "full_attention"] * 18,
    "max_position_embeddings": 131072, "model_type": "gpt_oss", "num_attention_heads": 64,
    "num_experts_per_tok": 4, "num_hidden_layers": 36, "num_key_value_heads": 8,
    "num_local_experts": 128, "output_router_logits": False, "pad_token_id": 199999,
    "quantization_config": {
        "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                   "model.embed_tokens", "lm_head"],
        "quant_method": "mxfp4"},
    "rms_norm_eps": 1e-05,
    "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                     "original_max_position_embeddings": 4096, "rope_type": "yarn",
                     "truncate": False},
    "rope_theta": 150000, "router_aux_loss_coef": 0.9, "sliding_window": 128,
    "swiglu_limit": 7.0, "tie_word_embeddings": False, "transformers_version": "4.55.0.dev0",
    "use_cache": True, "vocab_size": 201088,
}

HF_CONFIGS = {"llama-3.1-8b": LLAMA_31_8B, "qwen3-30b-a3b": QWEN3_30B_A3B,
              "gpt-oss-120b": GPT_OSS_120B}


def _write(tmp_path, folder, cfg, raw=None):
    d = tmp_path / folder
    d.mkdir(parents=True, exist_ok=True)
    p = d / "config.json"
    p.write_text(raw if raw is not None else json.dumps(cfg, indent=2), encoding="utf-8")
    return p


@pytest.mark.parametrize("name", sorted(HF_CONFIGS))
def test_load_hf_config_equals_preset(tmp_path, name):
    p = _write(tmp_path, name, HF_CONFIGS[name])
    arch = load_hf_config(p)
    preset = get_model(name)
    assert arch.name == name  # the folder name
    assert dataclasses.replace(arch, name=preset.name) == preset
    assert arch.param_counts() == preset.param_counts()
    assert resolve_model(str(p)) == arch


def test_load_hf_config_name_override_and_name_or_path(tmp_path):
    cfg = dict(LLAMA_31_8B, _name_or_path="meta-llama/Llama-3.1-8B")
    p = _write(tmp_path, "x", cfg)
    assert load_hf_config(p).name == "meta-llama/Llama-3.1-8B"
    assert load_hf_config(p, name="mine").name == "mine"


def test_load_hf_config_head_dim_default_is_hidden_over_heads(tmp_path):
    cfg = {k: v for k, v in QWEN3_30B_A3B.items() if k != "head_dim"}
    arch = load_hf_config(_write(tmp_path, "q", cfg))
    assert arch.head_dim == 64  # the llama convention, which is WRONG for the real Qwen3
    assert load_hf_config(_write(tmp_path, "q2", QWEN3_30B_A3B)).head_dim == 128


@pytest.mark.parametrize("name, drop", [("llama-3.1-8b", "hidden_size"),
                                        ("llama-3.1-8b", "intermediate_size"),
                                        ("qwen3-30b-a3b", "num_experts"),
                                        ("qwen3-30b-a3b", "moe_intermediate_size"),
                                        ("gpt-oss-120b", "num_local_experts"),
                                        ("gpt-oss-120b", "vocab_size"),
                                        ("gpt-oss-120b", "model_type")])
def test_load_hf_config_missing_field_names_it(tmp_path, name, drop):
    cfg = {k: v for k, v in HF_CONFIGS[name].items() if k != drop}
    with pytest.raises(ValueError, match=f"missing field '{drop}'"):
        load_hf_config(_write(tmp_path, name, cfg))


@pytest.mark.parametrize("field, value", [("num_hidden_layers", -1), ("hidden_size", "4096"),
                                          ("num_attention_heads", 0), ("vocab_size", 1.5)])
def test_load_hf_config_invalid_field_names_it(tmp_path, field, value):
    cfg = dict(LLAMA_31_8B, **{field: value})
    with pytest.raises(ValueError, match=field):
        load_hf_config(_write(tmp_path, "bad", cfg))


def test_load_hf_config_inconsistent_arch_names_field(tmp_path):
    cfg = dict(GPT_OSS_120B, layer_types=["full_attention"] * 3)
    with pytest.raises(ValueError, match="layer_types"):
        load_hf_config(_write(tmp_path, "bad", cfg))
    cfg = dict(LLAMA_31_8B, num_key_value_heads=7)
    with pytest.raises(ValueError, match="num_kv_heads"):
        load_hf_config(_write(tmp_path, "bad2", cfg))


@pytest.mark.parametrize("field, arch_field", [("num_key_value_heads", "num_kv_heads"),
                                                ("head_dim", "head_dim")])
def test_load_hf_config_zero_is_an_error_not_the_default(tmp_path, field, arch_field):
    cfg = dict(QWEN3_30B_A3B, **{field: 0})
    with pytest.raises(ValueError, match=f"model.{arch_field} must be a positive integer"):
        load_hf_config(_write(tmp_path, "z", cfg))


def test_load_hf_config_null_kv_heads_means_mha(tmp_path):
    arch = load_hf_config(_write(tmp_path, "n", dict(LLAMA_31_8B, num_key_value_heads=None)))
    assert arch.num_kv_heads == arch.num_heads == 32


def test_load_hf_config_malformed_json(tmp_path):
    p = _write(tmp_path, "m", None, raw='{"model_type": "llama", "hidden_size": 4096,')
    with pytest.raises(ValueError, match="malformed JSON"):
        load_hf_config(p)


def test_load_hf_config_top_level_not_object(tmp_path):
    with pytest.raises(ValueError, match="JSON object"):
        load_hf_config(_write(tmp_path, "l", None, raw="[1, 2, 3]"))


def test_load_hf_config_unsupported_model_type(tmp_path):
    cfg = dict(LLAMA_31_8B, model_type="phi3")
    with pytest.raises(ValueError, match="model_type must be one of llama, .*mistral, got 'phi3'"):
        load_hf_config(_write(tmp_path, "mi", cfg))


def test_load_hf_config_missing_file(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        load_hf_config(tmp_path / "nope" / "config.json")


# ---------------------------------------------------------------------------- property
@given(tp_exp=st.integers(0, 5), dp=st.sampled_from([1, 2, 4]), m_exp=st.integers(0, 3),
       hist=st.integers(1, 5000))
def test_dense_graph_kv_bytes_formula(tp_exp, dp, m_exp, hist):
    arch = get_model("llama-3.1-8b")
    tp, m = 2**tp_exp, 2**m_exp
    G = 64 * dp
    d = Deployment(num_gpus=tp * dp, attn_tp=tp, attn_dp=dp, moe_ep=1, global_batch=G,
                   kv_history=hist)
    g = build_graph(arch, d, m)
    kvh = max(1, math.ceil(8 / tp))
    Rm = G // dp // m
    assert kernel(g, "L0.attn").kv_bytes == Rm * hist * kvh * 128 * 2 * 2
    assert kernel(g, "L0.attn").flops == 4 * Rm * (32 // tp) * hist * 128
    assert kernel(g, "L0.mlp_up").weight_bytes == 4096 * 2 * (14336 // tp) * 2


@pytest.mark.parametrize("field, value, msg", [
    ("layer_types", ["banana"] * 24, "layer_types"),
    ("layer_types", 5, "layer_types"),
    ("tie_word_embeddings", "false", "tie_word_embeddings"),
    ("attention_bias", "no", "attention_bias"),
    ("sliding_window", 128.9, "sliding_window"),
    ("sliding_window", True, "sliding_window"),
    ("sliding_window", [128], "sliding_window"),
    ("quantization_config", "mxfp4", "quantization_config"),
])
def test_gpt_oss_config_json_bad_types(tmp_path, field, value, msg):
    from subgpu_jax.model.models import load_hf_config

    cfg = {"model_type": "gpt_oss", "num_hidden_layers": 24, "hidden_size": 2880,
           "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
           "vocab_size": 201088, "num_local_experts": 32, "num_experts_per_tok": 4,
           "intermediate_size": 2880, "sliding_window": 128,
           "layer_types": ["sliding_attention", "full_attention"] * 12, field: value}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=msg) as ei:
        load_hf_config(p)
    assert str(ei.value).count("config.json /") == 1
