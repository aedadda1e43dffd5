"""Shared helpers of the runtime tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def dense_region_output():
    """``f(kv=32, **workload_kwargs)``: the residual-stream output of one launch of a small
    dense GQA region (Llama-like: hidden 256, 8 query and 2 KV heads of 32, 16 requests, ``kv``
    tokens of history) on the GPU, float32, built from the same seed every call, so that two
    kernel choices can be compared on identical weights and caches."""
    def run(kv: int = 32, **kw):
        import torch

        from hw_runtime.gpu.workload import TorchWorkload
        from subgpu_jax.model.graph import Deployment, build_graph
        from subgpu_jax.model.models import ModelArch
        arch = ModelArch(name="tiny-llama", family="llama", num_layers=2, hidden=256,
                         num_heads=8, num_kv_heads=2, head_dim=32, vocab=500, intermediate=512)
        dep = Deployment(num_gpus=1, attn_tp=1, attn_dp=1, moe_ep=1, global_batch=16,
                         input_len=kv, kv_history=kv)
        wl = TorchWorkload(build_graph(arch, dep, 1), device="cuda", **kw)
        for k, v in kw.items():
            assert getattr(wl, k) == v, (k, getattr(wl, k))
        wl.launch_region(0, 0)
        torch.cuda.synchronize()
        return wl.acts[0][f"resid.{wl.shapes.P}"].float().clone()
    return run


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
