"""hw_runtime.gpu.head: the step's head kernels as torch ops, with the simulator's byte counts
(needs torch; runs on CPU, skipped without torch)."""

from __future__ import annotations

import math

import pytest

from subgpu_jax.model.graph import Deployment, build_graph, head_kernels
from subgpu_jax.model.models import ModelArch

TINY = ModelArch(name="tiny-oss", family="gpt_oss", num_layers=4, hidden=256, num_heads=8,
                 num_kv_heads=2, head_dim=32, vocab=1000, num_experts=8, top_k=2,
                 moe_intermediate=128, layer_types=("sliding", "full") * 2, sliding_window=16,
                 attn_bias=True, mlp_bias=True, attention_sinks=True)
DEP = Deployment(num_gpus=2, attn_tp=2, attn_dp=1, moe_ep=2, global_batch=8, input_len=64,
                 kv_history=64)


def _torch():
    try:
        import torch
        return torch
    except Exception as e:  # noqa: BLE001 - any failure to import means "no torch here"
        pytest.skip(f"torch not importable: {e}")


@pytest.mark.parametrize("m", [1, 2])
def test_head_runs_and_matches_the_simulated_bytes(m):
    """TP2, R = 8, V = 1000: the LM head shard is 256 x 500 bf16 = 256,000 bytes, the logits
    8 x 500 bf16 = 8,000 bytes, as ``head_kernels`` charges; sampled tokens fall in the shard
    and the embedding rows land in each microbatch's residual."""
    torch = _torch()
    from hw_runtime.gpu.head import TorchHead
    from hw_runtime.gpu.workload import TorchWorkload

    wl = TorchWorkload(build_graph(TINY, DEP, m), device="cpu", instances=1, kv_cache="shared")
    head = TorchHead(wl)
    hk = {k.name: k for k in head_kernels(TINY, DEP)}
    assert head.names == ("final_norm", "lm_head", "sample", "embed")
    assert head.weights["lm_head.w"].numel() * 2 == hk["lm_head"].weight_bytes == 256_000
    assert head.acts["logits"].numel() * 2 == dict(hk["lm_head"].act_writes)["logits"] == 8_000
    head.launch()
    tok = head.acts["tokens"]
    assert tok.shape == (8,) and int(tok.min()) >= 0 and int(tok.max()) < 500
    rows = math.ceil(wl.shapes.Rm / 2)
    for mu in range(m):
        got = wl.acts[mu]["resid.0"][:rows]
        ref = head.weights["embed.w"][tok[mu * wl.shapes.Rm:mu * wl.shapes.Rm + rows]]
        torch.testing.assert_close(got, ref)
    with pytest.raises(ValueError, match="head kernel must be one of"):
        head.launch("softmax")


def test_runtime_shapes_use_tokens_per_gpu_whatever_ep():
    """The torch workload allocates what the simulator charges: gpt-oss-120b (bf16 experts),
    G = 2048 on TP8 x DP4 with EP8 (4 EP groups of 8): A = G*k/n = 2048*4/32 = 256 assignments
    per GPU (m = 1), not G*k/e = 1024; its EP group routes G*e/n = 512 tokens, hitting
    16 * (1 - (1 - 4/128)^512) = 16.0 of its 16 local experts."""
    from hw_runtime.gpu.workload import hopper_arch, workload_shapes
    from subgpu_jax.model.models import MODELS

    dep = Deployment(num_gpus=32, attn_tp=8, attn_dp=4, moe_ep=8, global_batch=2048)
    s = workload_shapes(build_graph(hopper_arch(MODELS["gpt-oss-120b"]), dep))
    assert s.A == 256 and s.El == 16 and s.n_hit == 16 and s.cap == 16
