"""``hw_runtime.gpu.collectives``: the ``--collectives`` choice of the runtime (CPU, needs
torch) and the collective proxy kernel on a GPU (skipped without CUDA): it copies the payload
exactly, lasts the link time it is paced to, and a workload's collectives under the proxy last
at least their modelled link time."""

from __future__ import annotations

import pytest

from hw_runtime.gpu.kernels import collective_kwargs
from subgpu_jax.model.graph import Deployment, build_graph
from subgpu_jax.model.models import ModelArch

TINY = ModelArch(name="tiny-llama", family="llama", num_layers=2, hidden=256, num_heads=8,
                 num_kv_heads=2, head_dim=32, vocab=1000, intermediate=512)
TINY_DEP = Deployment(num_gpus=2, attn_tp=2, attn_dp=1, moe_ep=1, global_batch=8, input_len=64,
                      kv_history=64)


def test_collective_kwargs():
    assert collective_kwargs("sleep") == {"spin": True, "proxy": False}
    assert collective_kwargs("proxy") == {"spin": False, "proxy": True}
    assert collective_kwargs("none") == {"spin": False, "proxy": False}
    with pytest.raises(ValueError, match="--collectives must be one of sleep, proxy, none"):
        collective_kwargs("nccl")


def test_cpu_workload_refuses_spin_and_proxy_and_copies_without_proxy(torch_mod):
    from hw_runtime.gpu.workload import TorchWorkload
    g = build_graph(TINY, TINY_DEP, 1)
    with pytest.raises(ValueError, match="exclude each other"):
        TorchWorkload(g, device="cpu", spin=True, proxy=True)
    outs = []
    for kw in (collective_kwargs("proxy"), collective_kwargs("none")):
        wl = TorchWorkload(g, device="cpu", seed=3, **kw)
        assert wl.proxy is False          # the proxy runs on CUDA only; the CPU copies
        wl.launch_region(0, 0)
        outs.append(wl.output(0).clone())
    assert bool((outs[0] == outs[1]).all())


@pytest.mark.gpu
@pytest.mark.parametrize("ctas,n,target_us", [(16, 2**21, 60.0), (36, 3 * 2**18 + 5, 25.0)])
def test_gpu_proxy_copies_and_lasts_its_target(cuda_torch, ctas, n, target_us):
    torch = cuda_torch
    from hw_runtime.gpu.collectives import proxy_
    src = torch.randn(n // 3 + 7, device="cuda").to(torch.bfloat16)
    dst = torch.zeros(n, device="cuda", dtype=torch.bfloat16)
    proxy_(dst, src, ctas, target_us)                     # compile + warm up
    torch.cuda.synchronize()
    idx = torch.arange(n, device="cuda") % src.numel()
    assert bool((dst == src[idx]).all())
    ts = []
    for _ in range(5):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        proxy_(dst, src, ctas, target_us)
        e1.record()
        e1.synchronize()
        ts.append(e0.elapsed_time(e1) * 1000.0)
    t = sorted(ts)[2]
    assert 0.97 * target_us <= t <= target_us + 20.0, ts


@pytest.mark.gpu
def test_gpu_workload_collectives_under_proxy_last_the_link_time(cuda_torch):
    from hw_runtime.gpu.workload import TorchWorkload, time_kernels
    g = build_graph(TINY, TINY_DEP, 1)
    wl = TorchWorkload(g, device="cuda", **collective_kwargs("proxy"))
    comm = [i for i, k in enumerate(g.kernels) if k.is_comm]
    assert comm and wl.proxy and not wl.spin
    for r in time_kernels(wl, kernels=comm, reps=10, warmup=2):
        assert r["us"] >= 0.95 * r["comm_target_us"], r
