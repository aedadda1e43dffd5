"""``hw_runtime.gpu.corun``: which kernels of a region graph stand for each co-run class, for the
GPT-OSS matrix (``workload_class_kernels``) and for any family (``family_class_kernels``, the
co-run matrices of ``experiments/corun_families.py``). Pure: no GPU, no torch."""

from __future__ import annotations

import pytest

from hw_runtime.gpu.corun import family_class_kernels, workload_class_kernels
from subgpu_jax.model.graph import Deployment, build_graph
from subgpu_jax.model.models import get_model

ONE = Deployment(num_gpus=1, attn_tp=1, attn_dp=1, moe_ep=1, global_batch=256)
TP8 = Deployment(num_gpus=8, attn_tp=8, attn_dp=1, moe_ep=8, global_batch=1024)


def _ops(g, idx):
    return {c: (g.kernels[i].op, g.kernels[i].category) for c, i in idx.items()}


def test_dense_family_has_its_own_dense_gemm_and_no_moe_classes():
    g = build_graph(get_model("llama-3.1-8b"), ONE, 2)
    assert _ops(g, family_class_kernels(g)) == {
        "attn": ("attn", "attn_full"), "elementwise": ("rmsnorm", "norm_qkv"),
        "dense_gemm": ("mlp_up", "mlp")}
    with pytest.raises(ValueError, match="no kernel of class 'expert_gemm'"):
        workload_class_kernels(g)


@pytest.mark.parametrize("model", ["qwen3-30b-a3b", "mixtral-8x7b", "deepseek-v3"])
def test_moe_families_have_expert_gemm_and_router(model):
    g = build_graph(get_model(model), TP8, 2)
    ops = _ops(g, family_class_kernels(g))
    assert ops["expert_gemm"] == ("expert_up", "mlp") and ops["gemv"][0] == "router"
    assert ops["attn"] == ("attn", "attn_full")
    # DeepSeek-V3's shared experts are its dense GEMM; the others have none of their own
    assert ("dense_gemm" in ops) == (model == "deepseek-v3")


def test_gpt_oss_classes_agree_between_the_two_rules():
    g = build_graph(get_model("gpt-oss-120b"), TP8, 2)
    w, f = workload_class_kernels(g), family_class_kernels(g)
    assert {c: f[c] for c in w} == w
