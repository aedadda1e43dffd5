"""Accounting that matches real checkpoints and real serving (docs/accounting.md, issue 28): one
fault per test, each right value worked out by hand in its docstring from the public configs
vendored in tests/data/configs/ (DeepSeek-V3's ``quantization_config``: block-wise FP8,
``activation_scheme: dynamic``; GPT-OSS 120B's: MXFP4 with ``modules_to_not_convert``), plus
hypothesis invariants of the routing arithmetic and the generation rule."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from subgpu_jax.model.deployment import Deployment
from subgpu_jax.model.generation import generation_nodes, generation_steps, search_step
from subgpu_jax.model.graph import StaticDurationModel, build_forward, build_graph
from subgpu_jax.model.hardware import get_hardware
from subgpu_jax.model.memory import (activation_bytes, check_memory, kv_bytes, memory_use,
                                     weight_bytes)
from subgpu_jax.model.models import get_model, load_hf_config
from subgpu_jax.model.routing import (busiest_rank_load, dispatch_bytes, expected_distinct,
                                      remote_ranks_per_token)

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "configs"
H200 = get_hardware("H200")


def _ds():
    return load_hf_config(CONFIGS / "deepseek-v3.json")


def _write(tmp_path, cfg, name="config.json"):
    p = tmp_path / name
    p.write_text(json.dumps(cfg))
    return p


def _kernels(arch, dep, m=1):
    return {k.name: k for k in build_graph(arch, dep, m).kernels}


#: DeepSeek-V3 on 8 H200, attention DP8 (TP1), MoE EP8, G = 512 (R = 64), prompt 4,096.
DS_DP8 = Deployment(num_gpus=8, attn_tp=1, attn_dp=8, moe_ep=8, global_batch=512, input_len=4096)


# ============================================================ item 1: per-layer quantisation
def test_deepseek_v3_fp8_covers_every_linear_layer():
    """The vendored config's ``quant_method: fp8`` (block-wise, dynamic activations) covers the
    attention projections, the dense MLPs, the shared and the routed experts (W8A8: GEMMs at the
    FP8 rate); the router, embedding and LM head stay bf16."""
    a = _ds()
    for g in ("attn", "dense_mlp", "shared_experts", "experts"):
        assert a.dtypes(g) == ("fp8", "fp8"), g
    assert a.dtypes("other") == ("bf16", "bf16")
    assert a == dataclasses.replace(get_model("deepseek-v3"), name=a.name)  # preset agrees


def test_deepseek_v3_per_gpu_weights_by_hand():
    """DeepSeek-V3, TP1 x DP8, EP8 (h = 7168, 61 layers, 3 dense, 58 MoE, El = 256/8 = 32):

    * MLA per layer: h(q_lora + kv_lora + rope) = 7168*2112 = 15,138,816; q_lora*128*192 =
      37,748,736; 128*512*(128+128) = 16,777,216; 128*128*7168 = 117,440,512; sum
      187,105,280 parameters at 1 byte (FP8) x 61 = 11,413,422,080 B (was 2 bytes: 22.83 GB);
    * dense MLP: 3*7168*18432 = 396,361,728 B x 3 layers = 1,189,085,184 B (was 2.38 GB);
    * MoE layer: 32*3*7168*2048 (FP8) = 1,409,286,144 + router 7168*256*2 (bf16) = 3,670,016
      + shared 3*7168*2048 (FP8) = 44,040,192 = 1,456,996,352 B x 58 = 84,505,788,416 B;
    * embedding + LM head: 2*129280*7168*2 = 3,706,716,160 B.

    Total 100,815,011,840 B = 100.8 GB per GPU (113,417,519,104 B = 113.4 GB with attention
    and dense MLPs priced in bf16, 12.5% more, before this fix)."""
    assert weight_bytes(_ds(), DS_DP8) == 100_815_011_840
    bf16_attn = dataclasses.replace(_ds(), attn_dtype="", attn_act_dtype="", mlp_dtype="",
                                    mlp_act_dtype="")
    assert weight_bytes(bf16_attn, DS_DP8) == 113_417_519_104


def test_deepseek_v3_attention_kernels_read_fp8_weights_at_the_fp8_rate():
    """``mla_down`` reads h x (q_lora + kv_lora + rope) = 7168 x 2112 = 15,138,816 weight bytes
    (FP8, was 30,277,632 in bf16) and runs at the FP8 tensor rate; ``o_proj`` reads
    128*128*7168 = 117,440,512 bytes."""
    k = _kernels(_ds(), DS_DP8)
    assert k["L0.mla_down"].weight_bytes == 15_138_816 and k["L0.mla_down"].dtype == "fp8"
    assert k["L0.o_proj"].weight_bytes == 117_440_512 and k["L0.o_proj"].dtype == "fp8"
    assert k["L0.router"].dtype == "bf16"


def test_gpt_oss_excluded_modules_stay_bf16():
    """GPT-OSS's ``modules_to_not_convert`` lists ``model.layers.*.self_attn`` and the router:
    MXFP4 covers only the routed experts (weight-only, bf16 GEMMs); attention stays bf16."""
    a = load_hf_config(CONFIGS / "gpt-oss-120b.json")
    assert a.dtypes("experts") == ("mxfp4", "bf16")
    assert a.dtypes("attn") == ("bf16", "bf16")
    assert a == dataclasses.replace(get_model("gpt-oss-120b"), name=a.name)


def test_excluding_a_whole_group_keeps_it_bf16(tmp_path):
    """DeepSeek-V3's config with ``modules_to_not_convert: ["model.layers.*.self_attn"]``: the
    attention projections stay bf16, so per-GPU weights grow by the 11,413,422,080 B of FP8
    attention (61 x 187,105,280 parameters x 1 more byte): 100,815,011,840 + 11,413,422,080 =
    112,228,433,920 B; the MLPs stay FP8. Excluding ``mlp.shared_experts`` keeps only them
    bf16."""
    cfg = json.loads((CONFIGS / "deepseek-v3.json").read_text())
    cfg["quantization_config"]["modules_to_not_convert"] = ["model.layers.*.self_attn", "lm_head"]
    a = load_hf_config(_write(tmp_path, cfg))
    assert a.dtypes("attn") == ("bf16", "bf16") and a.dtypes("dense_mlp") == ("fp8", "fp8")
    assert weight_bytes(a, DS_DP8) == 112_228_433_920
    cfg["quantization_config"]["modules_to_not_convert"] = ["mlp.shared_experts"]
    a = load_hf_config(_write(tmp_path, cfg, "b.json"))
    assert a.dtypes("shared_experts") == ("bf16", "bf16") and a.dtypes("experts") == ("fp8", "fp8")


@pytest.mark.parametrize("pattern, what", [("kv_b_proj", "layer 0's attention"),
                                           ("model.layers.3.self_attn.o_proj", "layer 3's attention"),
                                           ("model.layers.0.mlp.down_proj", "layer 0's dense MLP")])
def test_an_exclusion_covering_part_of_a_layers_group_is_refused(tmp_path, pattern, what):
    """The ``kv_b_proj`` of every layer (1 of 5 MLA projections), layer 3's ``o_proj`` or layer 0's
    ``down_proj`` alone: the region graph fuses a layer's projections of a group (MLA absorbed,
    the MLP's gate/up GEMM), so a datatype changing inside one layer's group is refused in one
    line naming the field. Whole layers' groups are priced (tests/model/test_layer_quant.py)."""
    cfg = json.loads((CONFIGS / "deepseek-v3.json").read_text())
    cfg["quantization_config"]["ignored_layers"] = [pattern]
    with pytest.raises(ValueError, match=f"quantization_config.ignored_layers.*{what}") as ei:
        load_hf_config(_write(tmp_path, cfg))
    assert "\n" not in str(ei.value)


def test_fp8_checkpoint_of_a_dense_family_is_read(tmp_path):
    """An FP8 (block-wise, dynamic) Qwen3-8B, the vendored config with DeepSeek-V3's
    ``quantization_config``: every linear layer FP8, so the 36 layers' attention (4096 x
    (32+2*8) x 128 + 32*128*4096 = 41,943,040 params) and MLP (3*4096*12288 = 150,994,944)
    weights take 1 byte each; embedding + LM head 2*151936*4096*2 = 2,489,319,424 bytes (TP1):
    36 x 192,937,984 + 2,489,319,424 = 9,435,086,848 B."""
    cfg = json.loads((CONFIGS / "qwen3-8b.json").read_text())
    cfg["quantization_config"] = json.loads(
        (CONFIGS / "deepseek-v3.json").read_text())["quantization_config"]
    a = load_hf_config(_write(tmp_path, cfg))
    d = Deployment(num_gpus=1, attn_tp=1, attn_dp=1, moe_ep=1, global_batch=8, input_len=1024)
    assert weight_bytes(a, d) == 9_435_086_848


# ================================================= item 2: the busiest EP rank's experts
def test_busiest_rank_reads_the_experts_its_load_hits():
    """GPT-OSS 120B, TP8 x DP4, EP32, G = 32, m = 1, ``routing="multinomial"``: the EP group
    routes T = G*e/n = 32 tokens; N = G*k*e/n = 128 assignments over 32 ranks, mean 4, sigma =
    sqrt(128 * 1/32 * 31/32) = 1.9685; the expected maximum of 32 standard normals is 2.0697,
    so f = (4 + 1.9685*2.0697)/4 = 2.0185 and the busiest rank receives A = 8.074 assignments.
    They hit El*(1 - (1 - k/E)^(f*T)) = 4*(1 - (124/128)^64.59) = 4*(1 - 0.1286) = 3.4855 of its
    4 experts (the mean rank's 4*(1 - (124/128)^32) = 2.5518 before: 1.37x too few), so
    expert_up reads 3.4855 x (2880*5760*0.53125 + 5760*2) = 3.4855 x 8,824,320 = 30.757 MB."""
    d = Deployment(global_batch=32, routing="multinomial")
    assert d.expert_load_factor(4, 1) == pytest.approx(2.0185, rel=2e-4)
    k = _kernels(get_model("gpt-oss-120b"), d)
    assert k["L0.expert_up"].weight_bytes == pytest.approx(3.4855 * 8_824_320, rel=2e-4)
    assert k["L0.expert_up"].flops == pytest.approx(2 * 8.074 * 2880 * 5760, rel=2e-4)
    uni = _kernels(get_model("gpt-oss-120b"), dataclasses.replace(d, routing="uniform"))
    assert uni["L0.expert_up"].weight_bytes == pytest.approx(2.5518 * 8_824_320, rel=2e-4)


@settings(max_examples=60, deadline=None)
@given(E_log=st.integers(1, 8), k=st.integers(1, 8), e_log=st.integers(0, 6),
       G=st.integers(1, 4096), f=st.floats(1.0, 8.0))
def test_busiest_rank_experts_invariants(E_log, k, e_log, G, f):
    """For any E, k, e, G and load factor f >= 1: the busiest rank hits at least the mean rank's
    experts, never more than its E/e experts nor more than its A assignments, and f = 1 is the
    mean rank (``expected_distinct``, capped at its G*k/n assignments for fractional tokens)."""
    E = 2 ** E_log
    e = 2 ** min(e_log, E_log)
    k = min(k, E)
    busy = busiest_rank_load(E, k, e, G, 32, 1, f)
    mean = busiest_rank_load(E, k, e, G, 32, 1, 1.0)
    assert mean.experts_hit == pytest.approx(min(expected_distinct(E, G * e / 32, k) * (E // e)
                                                 / E, G * k / 32))
    assert busy.experts_hit >= mean.experts_hit - 1e-12
    assert busy.experts_hit <= min(E // e, busy.assignments) + 1e-9


# ================================================= item 3: the MoE output gathered back
def test_tp_attention_gathers_the_moe_output():
    """Reference deployment (GPT-OSS, TP8 x DP4, EP32, G = 2048, m = 1): Rm = 512 requests,
    x = 512*2880*2 = 2,949,120 B. The combine returns A*h*2*(e-1)/e = 256*5760*31/32 =
    1,428,480 B and then all-gathers the MoE output of each rank's Tr = 64 tokens to the 8
    attention ranks: (t-1)/t * x = 2,580,480 B more, 4,008,960 B in all (1,428,480 without the
    gather). The combine's sum runs on Tr tokens: 2*64*4*2880 + 512*2880 = 2,949,120 FLOPs."""
    arch = get_model("gpt-oss-120b")
    k = _kernels(arch, Deployment())
    assert k["L0.combine"].comm_bytes == 4_008_960
    assert k["L0.combine"].flops == 2_949_120
    old = _kernels(arch, Deployment(moe_tp_gather=False))
    assert old["L0.combine"].comm_bytes == 1_428_480
    tp1 = _kernels(arch, Deployment(attn_tp=1, attn_dp=32, global_batch=2048))
    assert tp1["L0.combine"].comm_bytes == pytest.approx(256 * 5760 * 31 / 32)  # no gather


def test_gather_makes_the_reference_step_longer():
    """The gather adds a collective's payload per MoE layer and microbatch: the reference step
    (static evaluator, temporal) is longer with it, by the 36 x 2,580,480 B at B200 NVLink
    (900 GB/s) = 103 µs at most plus its share of the setup (folded into the combine)."""
    hw = get_hardware("B200")
    sd = StaticDurationModel(hw)

    def step(dep):
        fp = build_forward(get_model("gpt-oss-120b"), dep, 1)
        return sum(float(sd.kernel_time_us(k, hw.num_sms)) * c
                   for g, c in fp.runs for k in g.kernels)
    new, old = step(Deployment()), step(Deployment(moe_tp_gather=False))
    assert 0 < new - old <= 36 * 2_580_480 / 900e9 * 1e6 + 1e-6


def test_shared_experts_reduce_scatter_then_gather():
    """DeepSeek-V3, TP8 x DP1, EP8, G = 64 (Rm = 64, x = 64*7168*2 = 917,504 B): the shared
    experts' partial sums are reduce-scattered ((t-1)/t x) and the MoE output all-gathered
    ((t-1)/t x): 2*(7/8)*917,504 = 1,605,632 B, as much as the all-reduce priced before, so the
    combine's payload is unchanged: A*h*2*(e-1)/e = 64*8/8*14336*7/8 = 802,816 + 1,605,632."""
    d = Deployment(num_gpus=8, attn_tp=8, attn_dp=1, moe_ep=8, global_batch=64, input_len=4096)
    new = _kernels(_ds(), d)["L0.combine"]  # the main (MoE) region's layer
    assert new.comm_bytes == 802_816 + 1_605_632
    assert _kernels(_ds(), dataclasses.replace(d, moe_tp_gather=False))["L0.combine"].comm_bytes \
        == new.comm_bytes


# ================================================= item 4: per-rank deduplicated dispatch
def test_per_rank_dispatch_by_hand():
    """GPT-OSS (E = 128, k = 4, EP32, El = 4): a rank holds none of a token's 4 experts with
    probability C(124,4)/C(128,4) = (124*123*122*121)/(128*127*126*125) = 0.879382, so a token
    goes to 31*(1 - 0.879382) = 3.7391 other ranks (3.875 copies per expert before). At the
    reference (Tr = 64 tokens, 5760 B each) the dispatch sends 64*3.7391*5760 = 1,378,436 B
    instead of 1,428,480; the combine returns as much. DeepSeek-V3 (E = 256, k = 8, EP8, El = 32):
    prod_{i<8} (224-i)/(256-i) = 0.33817, 7*(1 - 0.33817) = 4.6328 ranks instead of 7 copies."""
    assert remote_ranks_per_token(128, 4, 32) == pytest.approx(3.7391, abs=1e-4)
    assert remote_ranks_per_token(256, 8, 8) == pytest.approx(4.6328, abs=1e-4)
    k = _kernels(get_model("gpt-oss-120b"), Deployment(dispatch="per-rank", moe_tp_gather=False))
    assert k["L0.dispatch"].comm_bytes == pytest.approx(64 * 3.739147 * 5760, rel=1e-6)
    assert k["L0.combine"].comm_bytes == pytest.approx(64 * 3.739147 * 5760, rel=1e-6)
    with pytest.raises(ValueError, match="dispatch must be one of per-expert, per-rank"):
        Deployment(dispatch="per-token")


def test_group_limited_routing_by_hand():
    """Issue 41: DeepSeek-V3 routes each token to k = 8 experts within its 4 best of 8 groups
    (n_group 8, topk_group 4, 32 experts a group). On EP8 a rank holds one group: it is picked
    with 4/8 and then misses all 8 experts (drawn from the 4 x 32 = 128 of the picked groups)
    with prod_{i<8} (96-i)/(128-i) = 0.092747, so P(none) = 1/2 + 1/2 x 0.092747 = 0.546374 and
    a token goes to 7 x 0.453626 = 3.1754 other ranks, not the 4.6328 of plain top-8 (46% more).
    EP4 (two groups a rank): s of its 2 groups picked with C(2,s)C(6,4-s)/C(8,4) = 15/70, 40/70,
    15/70 for s = 0, 1, 2; none with 1, prod (96-i)/(128-i) = 0.092747, prod (64-i)/(128-i) =
    0.0030959: P(none) = (15 + 40 x 0.092747 + 15 x 0.0030959)/70 = 0.26795, 3 x 0.73205 = 2.1962.
    The DP8 deployment's dispatch (Tr = 64 tokens of 7,168 bf16 B) sends 64 x 3.1754 x 14,336."""
    assert remote_ranks_per_token(256, 8, 8, 8, 4) == pytest.approx(3.1754, abs=1e-4)
    assert remote_ranks_per_token(256, 8, 4, 8, 4) == pytest.approx(2.1962, abs=1e-4)
    assert remote_ranks_per_token(256, 8, 8, 8, 8) == pytest.approx(4.6328, abs=1e-4)  # = plain
    a = _ds()
    assert (a.n_group, a.topk_group) == (8, 4)
    k = _kernels(a, dataclasses.replace(DS_DP8, dispatch="per-rank"))
    assert k["L0.dispatch"].comm_bytes == pytest.approx(64 * 3.175385 * 7168 * 2, rel=1e-6)
    with pytest.raises(ValueError, match="n_group"):
        remote_ranks_per_token(256, 8, 8, 7, 4)


def test_group_limited_busiest_rank_by_hand():
    """Issue 41: the busiest EP rank under group-limited routing. On EP8 (a group per rank) a
    token puts X of its 8 experts on a rank: 0 unless the rank's group is picked (1/2), then X
    hypergeometric, 8 draws from 128 with 32 the rank's: mean 2, variance 8 x 1/4 x 3/4 x
    120/127 = 1.41732; E[X^2] = 1/2 (1.41732 + 4) = 2.70866, Var X = 2.70866 - 1 = 1.70866, about
    twice the multinomial 8 x 1/8 x 7/8 = 0.875. DP8 at G = 64, m = 1: N = 64 x 8 x 8 / 8 = 512
    assignments per EP group, mu = 64 per rank; sigma = sqrt(64 x 1.70866) = 10.4571 (was
    sqrt(512 x 1/8 x 7/8) = 7.4833); with c_8 = 1.42360, the expected maximum of 8 standard
    normals, the busiest rank carries (64 + 10.4571 x 1.42360) / 64 = 1.23261 x the mean (was
    1.16646)."""
    from subgpu_jax.model.routing import rank_count_variance

    v = rank_count_variance(256, 8, 8, 8, 4)
    assert v == pytest.approx(1.70866, abs=1e-5)
    assert rank_count_variance(256, 8, 8) is None
    d = dataclasses.replace(DS_DP8, global_batch=64, routing="multinomial")
    assert d.expert_load_factor(8, 1, v) == pytest.approx(1.23261, rel=1e-4)
    assert d.expert_load_factor(8, 1) == pytest.approx(1.16646, rel=1e-4)
    a = _ds()
    k = _kernels(a, d)
    A = 64 * 8 / 8 * 1.23261  # G k / n assignments x the factor, on the busiest rank
    assert k["L0.expert_up"].flops == pytest.approx(
        2 * A * 2 * a.moe_intermediate * a.hidden, rel=1e-4)


@settings(max_examples=60, deadline=None)
@given(E_log=st.integers(1, 8), k=st.integers(1, 8), e_log=st.integers(0, 8))
def test_per_rank_never_sends_more_than_per_expert(E_log, k, e_log):
    """Deduplicating can only remove copies: per-rank <= per-expert, equal with one expert per
    rank (El = 1), and at most e - 1 destinations."""
    E = 2 ** E_log
    e = 2 ** min(e_log, E_log)
    k = min(k, E)
    per_rank = dispatch_bytes(10, 1, E, k, e, "per-rank")
    per_expert = dispatch_bytes(10, 1, E, k, e, "per-expert")
    assert per_rank <= per_expert + 1e-9 and per_rank <= 10 * (e - 1) + 1e-9
    if E == e:
        assert per_rank == pytest.approx(per_expert)


# ================================================= item 5: the memory budget
def test_memory_budget_by_hand():
    """DeepSeek-V3 DP8 at G = 512 (R = 64), KV 4,096: weights 100,815,011,840 B (item 1); KV
    cache 64 requests x 4096 tokens x 61 layers x (512 + 64) x 2 B = 18,421,383,168 B;
    activations = the largest kernel's (sampling: bf16 logits 64*129280*2 + Gumbel noise as
    much read, 64*8 B of tokens written) + the residual 64*7168*2 = 34,013,696 B. Total
    119,270,408,704 B = 119.3 GB: over 0.79 x 150.1 = 118.6 GB, within 0.9 x 150.1 = 135.1 GB
    (150.1e9 B: what an H200 reports, model/hardware.py)."""
    a = _ds()
    assert kv_bytes(a, DS_DP8) == 18_421_383_168
    assert activation_bytes(a, DS_DP8) == 2 * 64 * 129280 * 2 + 64 * 8 + 64 * 7168 * 2
    mu = memory_use(a, DS_DP8, H200)
    assert mu.total == 119_270_408_704 and mu.budget == pytest.approx(0.9 * 150.1e9) and mu.fits
    with pytest.raises(ValueError, match=r"119\.3 GB.*budget is 118\.6 GB.*"
                                         r"--gpu-memory-utilization 0\.79 of a H200"):
        check_memory(a, dataclasses.replace(DS_DP8, gpu_memory_utilization=0.79), H200)


def test_largest_batch_uses_the_capacity_the_device_reports():
    """Issue 41: DeepSeek-V3 on 8 H200, DP8, KV 4,096. Per request: KV 4096 x 61 x 576 x 2 =
    287,834,112 B and activations 2 x 129280 x 2 + 8 + 7168 x 2 = 531,464 B, so 288,365,576 B.
    Budget 0.9 x 150.1e9 = 135.09e9 B minus the weights 100,815,011,840 B leaves
    34,274,988,160 B: R = floor(34,274,988,160 / 288,365,576) = 118 requests per rank, G = 944
    (with the datasheet's 141 GB: floor(26,084,988,160 / 288,365,576) = 90, G = 720, 24% less,
    what a serving engine would not stop at)."""
    a = _ds()

    def fits(R):
        return memory_use(a, dataclasses.replace(DS_DP8, global_batch=8 * R), H200).fits

    assert fits(118) and not fits(119)
    assert H200.hbm_bytes == 150.1e9
    # H100: cuDeviceTotalMem measured on an H100 80GB HBM3 (model/hardware.py)
    assert (get_hardware("H100").hbm_bytes, get_hardware("B200").hbm_bytes) == (
        85_017_493_504, 191.5e9)


@pytest.mark.parametrize("G", [512, 1024, 2048])
def test_reference_workload_fits_the_default_budget(G):
    """The built-in main job (GPT-OSS 120B, 32 B200, TP8 x DP4, KV 32,768): at G = 2,048 (R =
    512) the KV cache is 18 full layers x 512 x 32768 x (1 KV head x 64 x 2 x 2 B) + 18 sliding
    x 512 x 128 x 256 B = 77,611,401,216 B, the weights 2.46 GB: about 80 GB, well within
    0.9 x 191.5 GB = 172.4 GB; G = 512 and 1,024 need less. The default budget keeps the grid."""
    mu = check_memory(get_model("gpt-oss-120b"), Deployment(global_batch=G), get_hardware("B200"))
    assert mu.kv == pytest.approx(77_611_401_216 * G / 2048)
    assert mu.total < 0.9 * 191.5e9


# ================================================= item 6: a whole generation
def test_generation_nodes_by_hand():
    """N = 1..3: every step with weight 1/N. N = 1024: steps 0, M = round(1023/2) = 512, 1023;
    w_M = 2/3, w_end = (511.5 - 2/3*512)/1023 = 0.166341, w_0 = 1/3 - w_end = 0.166992: the
    weighted mean of s is 511.5, the mean of 0..1023."""
    assert generation_nodes(1) == [(0, 1.0)]
    assert generation_nodes(3) == [(0, 1 / 3), (1, 1 / 3), (2, 1 / 3)]
    (s0, w0), (sm, wm), (s1, w1) = generation_nodes(1024)
    assert (s0, sm, s1) == (0, 512, 1023) and wm == pytest.approx(2 / 3)
    assert w1 == pytest.approx(0.166341, abs=1e-6) and w0 == pytest.approx(0.166992, abs=1e-6)
    with pytest.raises(ValueError, match="output_len"):
        generation_nodes(0)


@settings(max_examples=80, deadline=None)
@given(N=st.integers(1, 100_000), a=st.floats(0, 1e4), b=st.floats(-1.0, 1.0))
def test_generation_rule_exact_for_linear_steps(N, a, b):
    """For T(s) = a + b*s the rule's weighted mean equals (1/N) sum_{s<N} T(s) = a + b(N-1)/2;
    weights are positive and sum to 1."""
    nodes = generation_nodes(N)
    assert all(w > 0 for _, w in nodes) and sum(w for _, w in nodes) == pytest.approx(1.0)
    got = sum(w * (a + b * s) for s, w in nodes)
    assert got == pytest.approx(a + b * (N - 1) / 2, rel=1e-9, abs=1e-6)


def test_generation_mean_matches_every_step_simulated():
    """Llama-3.1-8B on 1 H200 (G = 64), prompt 2,000, 9 output tokens (KV 2,000..2,008, inside
    one 1,024-token flash-decoding split count): the temporal static step time is linear in the
    KV history, so the 3-step rule equals the mean of all 9 simulated steps."""
    from subgpu_jax.score.step import time_generation, time_step
    from subgpu_jax.score.timer import StaticTimer
    from subgpu_jax.model.workload import Workload
    from subgpu_jax.space.config import temporal_of

    arch = get_model("llama-3.1-8b")
    d = Deployment(num_gpus=1, attn_tp=1, attn_dp=1, moe_ep=1, global_batch=64,
                   input_len=2000, output_len=9)
    wl = Workload.from_model(arch, search_step(d), H200)
    assert wl.deploy.kv_history == 2004 and d.peak_kv_history == 2009
    cfg = temporal_of(wl)
    gen = time_generation(arch, d, cfg, 1, StaticTimer(H200))
    assert [s["kv_history"] for s in gen.steps] == [2000, 2004, 2008]
    every = [time_step(build_forward(arch, d.step(s), 1), cfg, StaticTimer(H200)).makespan_us
             for s in range(9)]
    assert gen.makespan_us == pytest.approx(sum(every) / 9, rel=1e-9)
    assert every[-1] > every[0]  # the KV grows


def test_deployment_context_defaults():
    """Fault: ``input_len`` alone kept the 32,768-token KV history. Now the one given sets the
    other; a KV history shorter than the prompt, or a generation not starting at the prompt, is
    refused."""
    assert Deployment(input_len=1024).kv_history == 1024
    assert Deployment(kv_history=4096).input_len == 4096
    assert (Deployment().input_len, Deployment().kv_history) == (32768, 32768)
    with pytest.raises(ValueError, match="kv_history=1000 must be >= input_len=2000"):
        Deployment(input_len=2000, kv_history=1000)
    with pytest.raises(ValueError, match="must equal input_len"):
        Deployment(input_len=1000, kv_history=2000, output_len=10)
    steps = generation_steps(Deployment(input_len=100, output_len=2, kv_lengths=(50, 150)))
    assert [(d.kv_history, d.kv_lengths, w) for d, w in steps] == [
        (100, (50, 150), 0.5), (101, (51, 151), 0.5)]


def test_generation_fit_uses_the_last_step():
    """The KV cache is largest at the end: input 4,096 + output 1,024 = 5,120 tokens, i.e.
    18,421,383,168 x 5120/4096 = 23,026,728,960 B for DeepSeek-V3 DP8 at G = 512."""
    d = dataclasses.replace(DS_DP8, output_len=1024)
    assert kv_bytes(_ds(), d) == 23_026_728_960


# ================================================= item 7: FP8 KV cache
def test_fp8_kv_halves_the_kv_bytes():
    """Reference GPT-OSS KV cache 77,611,401,216 B in bf16 (item 5) -> 38,805,700,608 B in FP8;
    the full-attention kernel reads 512 requests x 32768 x 64 x 2 x 1 B = 2,147,483,648 B
    (4,294,967,296 in bf16)."""
    a = get_model("gpt-oss-120b")
    f8 = dataclasses.replace(a, kv_dtype="fp8")
    assert kv_bytes(f8, Deployment()) == 38_805_700_608
    assert _kernels(f8, Deployment())["L1.attn"].kv_bytes == 2_147_483_648
    assert _kernels(a, Deployment())["L1.attn"].kv_bytes == 4_294_967_296


def test_fp8_kv_lets_a_refused_batch_fit():
    """DeepSeek-V3 DP8, KV 8,192, G = 512: bf16 KV 64 x 8192 x 70,272 B = 36,842,766,336 B +
    weights 100.8 GB = 137.7 GB > 126.9 GB budget; FP8 halves the KV to 18.4 GB: 119.3 GB fits."""
    d = dataclasses.replace(DS_DP8, input_len=8192, kv_history=8192)
    with pytest.raises(ValueError, match="does not fit"):
        check_memory(_ds(), d, H200)
    mu = check_memory(dataclasses.replace(_ds(), kv_dtype="fp8"), d, H200)
    assert mu.kv == 36_842_766_336 / 2 and mu.fits
    assert math.isclose(mu.total / 1e9, 119.27, abs_tol=0.01)
