"""Shared helpers of the runtime tests."""

from __future__ import annotations

import math

import pytest


def _gqa_reference(torch, q, k, v):
    """float32 ``softmax(q k^T / sqrt(hd)) v`` per request and query head, KV head ``h //
    (qh / kvh)``: the oracle of the decode-attention kernels (q ``(R, qh, hd)``, k/v ``(R, kvh,
    L, hd)``, result ``(R, qh, hd)`` float32)."""
    R, qh, hd = q.shape
    kvh = k.shape[1]
    kk = k.float().repeat_interleave(qh // kvh, dim=1)          # (R, qh, L, hd)
    vv = v.float().repeat_interleave(qh // kvh, dim=1)
    s = torch.einsum("rhd,rhld->rhl", q.float(), kk) / math.sqrt(hd)
    return torch.einsum("rhl,rhld->rhd", torch.softmax(s, dim=-1), vv)


def _graph_replay_is_eager(torch, attend, L: int = 300) -> None:
    """``attend(q, k, v, out)`` (a decode attention on a 64-SM budget) called once eagerly on a
    side stream (compiles / plans outside capture, as the runtime's warm-up does), captured in a
    CUDA graph, replayed on new inputs copied into the captured tensors: asserts the replay's
    output equals an eager call on those inputs (q ``(4, 8, 128)``, k/v ``(4, 2, L, 128)``)."""
    g = torch.Generator(device="cuda").manual_seed(7)
    shape_q, shape_k = (4, 8, 128), (4, 2, L, 128)
    q, k, v = (torch.randn(s, generator=g, device="cuda").to(torch.bfloat16)
               for s in (shape_q, shape_k, shape_k))
    out = torch.empty_like(q)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        attend(q, k, v, out)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=s):
        attend(q, k, v, out)
    for t, shp in ((q, shape_q), (k, shape_k), (v, shape_k)):
        t.copy_(torch.randn(shp, generator=g, device="cuda").to(torch.bfloat16))
    graph.replay()
    torch.cuda.synchronize()
    eager = torch.empty_like(q)
    attend(q, k, v, eager)
    torch.cuda.synchronize()
    assert torch.equal(out, eager)


@pytest.fixture
def graph_replay_is_eager():
    """``f(torch, attend, L=300)``: the CUDA-graph check above."""
    return _graph_replay_is_eager


@pytest.fixture
def gqa_reference():
    """``f(torch, q, k, v)``: the float32 decode-attention oracle above."""
    return _gqa_reference


def region_output(arch, kv: int = 32, batch: int = 16, **kw):
    """The float32 residual-stream output of one launch of ``arch``'s first region on the GPU
    (one GPU, TP1, EP1, ``batch`` requests, ``kv`` tokens of history), from the same seed
    every call; ``kw`` are kernel choices (``KernelSettings`` fields: ``elementwise``,
    ``attention``, ``moe_gemm``) for ``TorchWorkload(kernels=...)``, checked to have taken
    effect (the workload resolved each to the value asked)."""
    import torch

    from hw_runtime.gpu.policies import KernelSettings
    from hw_runtime.gpu.workload import TorchWorkload
    from subgpu_jax.model.graph import Deployment, build_graph
    dep = Deployment(num_gpus=1, attn_tp=1, attn_dp=1, moe_ep=1, global_batch=batch,
                     input_len=kv, kv_history=kv)
    wl = TorchWorkload(build_graph(arch, dep, 1), device="cuda", kernels=KernelSettings(**kw))
    for k, v in kw.items():
        assert getattr(wl, k) == v, (k, getattr(wl, k))
    wl.launch_region(0, 0)
    torch.cuda.synchronize()
    return wl.acts[0][f"resid.{wl.shapes.P}"].float().clone(), wl


@pytest.fixture
def dense_region_output():
    """``f(kv=32, **kernel_choices)``: ``region_output`` of a small dense GQA region
    (Llama-like: hidden 256, 8 query and 2 KV heads of 32, 16 requests, ``kv`` tokens of
    history), so that two kernel choices can be compared on identical weights and caches."""
    def run(kv: int = 32, **kw):
        from subgpu_jax.model.models import ModelArch
        arch = ModelArch(name="tiny-llama", family="llama", num_layers=2, hidden=256,
                         num_heads=8, num_kv_heads=2, head_dim=32, vocab=500, intermediate=512)
        return region_output(arch, kv=kv, **kw)[0]
    return run


@pytest.fixture
def region_run():
    """``region_output`` (above) as a fixture: ``f(arch, kv=32, batch=16, **kernel_choices)
    -> (output, workload)``."""
    return region_output


@pytest.fixture
def mla_region_output():
    """``f(**kernel_choices)``: ``region_output`` of a tiny DeepSeek-V3 MoE region (MLA with
    latent 64 and rope 16, 4 heads, 8 experts top-2, one shared expert), 300 tokens of history."""
    def run(**kw):
        from subgpu_jax.model.models import ModelArch
        arch = ModelArch(name="tiny-ds", family="deepseek_v3", num_layers=2, hidden=128,
                         num_heads=4, num_kv_heads=4, head_dim=48, vocab=500, intermediate=256,
                         num_experts=8, top_k=2, moe_intermediate=64, num_shared_experts=1,
                         n_group=4, topk_group=2, mlp_types=("moe", "moe"), q_lora_rank=64,
                         kv_lora_rank=64, qk_rope_head_dim=16, qk_nope_head_dim=32,
                         v_head_dim=32)
        return region_output(arch, kv=300, **kw)[0]
    return run


@pytest.fixture
def runtime_options():
    """``{command: {dest: argparse action}}`` of ``subgpu run``, ``calibrate`` and ``tune`` (the
    runtime's commands, registered as the entry points register them)."""
    import argparse

    from hw_runtime.commands import add_commands
    from hw_runtime.tune.cli import add_tune_command

    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd")
    add_commands(sub)
    add_tune_command(sub)
    return {cmd: {a.dest: a for a in sub.choices[cmd]._actions}
            for cmd in ("run", "calibrate", "tune")}


@pytest.fixture
def torch_mod():
    """torch, or the test skipped where it does not import."""
    try:
        import torch
        return torch
    except Exception as e:  # noqa: BLE001 - any failure to import means "no torch here"
        pytest.skip(f"torch not importable: {e}")


@pytest.fixture
def cuda_torch(torch_mod):
    """torch with a CUDA GPU, or the test skipped."""
    if not torch_mod.cuda.is_available():
        pytest.skip("no CUDA GPU")
    return torch_mod
