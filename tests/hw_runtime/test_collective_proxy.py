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
        collective_kwargs("mpi")


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
@pytest.mark.parametrize("ctas,mib,target_us", [(16, 1, 20.0), (36, 4, 40.0), (20, 2, 8.0)])
def test_gpu_proxy_keeps_the_buffer_and_lasts_its_target(cuda_torch, ctas, mib, target_us):
    """Payloads whose read + write fit in the target at the CTAs' bandwidth (up to 8 MiB in
    40 µs on 36 CTAs, 0.2 TB/s): the proxy lasts its target within 3 µs, and leaves the
    buffer as it was."""
    torch = cuda_torch
    from hw_runtime.gpu.collectives import proxy_
    buf = torch.randn(mib * 2**19 + 5, device="cuda").to(torch.bfloat16)
    ref = buf.clone()
    from hw_runtime.gpu.corun import capture_graph, time_alone
    st = torch.cuda.Stream()
    g = capture_graph(torch, st, lambda r: proxy_(buf, ctas, target_us), 10)
    t = time_alone(torch, g, st, 5) / 10
    assert bool((buf.view(torch.int16) == ref.view(torch.int16)).all())
    assert 0.97 * target_us <= t <= target_us + 3.0, t


@pytest.mark.gpu
def test_gpu_workload_collectives_under_proxy_last_the_link_time(cuda_torch):
    from hw_runtime.gpu.workload import TorchWorkload
    from hw_runtime.gpu.kerneltime import time_kernels
    g = build_graph(TINY, TINY_DEP, 1)
    wl = TorchWorkload(g, device="cuda", **collective_kwargs("proxy"))
    comm = [i for i, k in enumerate(g.kernels) if k.is_comm]
    assert comm and wl.proxy and not wl.spin
    for r in time_kernels(wl, kernels=comm, reps=10, warmup=2):
        assert r["us"] >= 0.95 * r["comm_target_us"], r
