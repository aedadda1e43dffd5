"""``subgpu_jax.model.collective``: the ``--collectives`` registry and the collective proxy's
plan (hand derivations), and what the contention model charges for it (``BoundModel.work``,
the event simulator)."""

from __future__ import annotations

import pytest

from subgpu_jax.model.collective import (A2A_CTAS, COLLECTIVE_MODES, CUSTOM_AR_CTAS,
                                         NCCL_NVLS_CTAS, collective_mode, proxy_plan)
from subgpu_jax.model.graph import Deployment, build_graph
from subgpu_jax.model.hardware import get_hardware
from subgpu_jax.model.models import get_model
from subgpu_jax.sim.contention import BoundModel, ContentionModel
from subgpu_jax.sim.eventsim import lone_makespan, simulate
from subgpu_jax.space.config import Config

H200 = get_hardware("H200")
L70 = get_model("llama-3.1-70b")


def _dep(G: int) -> Deployment:
    return Deployment(num_gpus=8, attn_tp=8, attn_dp=1, moe_ep=1, global_batch=G,
                      input_len=1024, kv_history=1024)


def _comm(g, op="allreduce"):
    return [k for k in g.kernels if k.is_comm and k.op == op]


def test_registry_and_contention_fields():
    assert tuple(COLLECTIVE_MODES) == ("sleep", "proxy", "none", "nccl")
    # real collectives are charged as the proxy, run in one process per GPU (issue 25)
    nccl = collective_mode("nccl")
    assert nccl.distributed and nccl.contention_kwargs() == {"link_time": True,
                                                             "proxy_collectives": True}
    assert nccl.workload_kwargs() == {"spin": False, "proxy": False}
    from subgpu_jax.model.collective import ONE_GPU_COLLECTIVES
    assert ONE_GPU_COLLECTIVES == ("sleep", "proxy", "none")
    assert collective_mode("sleep").contention_kwargs() == {"link_time": True,
                                                            "proxy_collectives": False}
    assert collective_mode("proxy").contention_kwargs() == {"link_time": True,
                                                            "proxy_collectives": True}
    assert collective_mode("none").contention_kwargs() == {"link_time": False,
                                                           "proxy_collectives": False}
    with pytest.raises(ValueError, match=r"^--collectives must be one of sleep, proxy, none, "
                                         r"nccl, got 'mpi'$"):
        collective_mode("mpi")
    with pytest.raises(ValueError, match="contention.proxy_collectives must be a bool"):
        ContentionModel(proxy_collectives="yes")


def test_proxy_plan_hand_derived():
    """Llama-3.1-70B TP8, G = 2,048: one microbatch of 1,024 tokens x 8,192 x 2 B = 16 MiB;
    the graph's payload is the ring send volume 2 x 7/8 of it, 28 MiB; the tensor (16 MiB) is
    above vLLM's 8 MiB custom all-reduce buffer -> NCCL NVLS, 16 CTAs, 2 x 28 MiB through HBM.
    Four microbatches of 512 tokens: 8 MiB -> the custom all-reduce's 36 CTAs."""
    k2 = _comm(build_graph(L70, _dep(2048), 2))[0]
    assert k2.comm_bytes == pytest.approx(28 * 2**20)
    p = proxy_plan(k2)
    assert (p.algorithm, p.ctas, p.hbm_bytes) == ("nccl_nvls", NCCL_NVLS_CTAS, 56 * 2**20)
    k4 = _comm(build_graph(L70, _dep(2048), 4))[0]
    p4 = proxy_plan(k4)
    assert (p4.algorithm, p4.ctas, p4.hbm_bytes) == ("custom_allreduce", CUSTOM_AR_CTAS,
                                                     2 * k4.comm_bytes)
    moe = build_graph(get_model("qwen3-30b-a3b"),
                      Deployment(num_gpus=8, attn_tp=8, attn_dp=1, moe_ep=8, global_batch=1024),
                      2)
    c = _comm(moe, "combine")[0]
    assert proxy_plan(c).ctas == A2A_CTAS and proxy_plan(c).algorithm == "alltoall"
    with pytest.raises(ValueError, match="is not a collective"):
        proxy_plan(next(k for k in moe.kernels if not k.is_comm))


def test_proxy_adds_payload_bytes_only_to_collectives():
    g = build_graph(L70, _dep(2048), 2)
    bp = BoundModel(ContentionModel(proxy_collectives=True), H200, lone_makespan)
    b0 = BoundModel(ContentionModel(), H200, lone_makespan)
    for k in g.kernels:
        wp, w0 = bp.work(k, 64), b0.work(k, 64)
        assert wp.extra_hbm_bytes == (2.0 * k.comm_bytes if k.is_comm else 0.0)
        assert (wp.sms, wp.flops, wp.comm_bytes) == (w0.sms, w0.flops, w0.comm_bytes)


def test_temporal_proxy_costs_at_most_its_bytes():
    """One lane: a collective under the proxy lasts max(link time, local + proxy bytes at the
    HBM rate), so the temporal step is never faster than with the plain wait and at most the
    proxy's bytes at half the copy bandwidth slower (a loose bound: the link time hides most of
    them). Pipelined on two pools the proxy's traffic lands on the other pool's kernels."""
    g1, g = build_graph(L70, _dep(2048), 1), build_graph(L70, _dep(2048), 2)
    cfg_t = Config(D=1, w=0, seg_of=(0,) * g1.n, alloc=(132,), microbatch=2048)
    sims = {c: simulate(g1, cfg_t, H200, model=ContentionModel(**collective_mode(c)
                                                            .contention_kwargs()),
                        record=False).makespan for c in COLLECTIVE_MODES}
    extra = sum(2.0 * k.comm_bytes for k in g1.kernels if k.is_comm) * g1.num_regions
    assert sims["none"] < sims["sleep"] <= sims["proxy"]
    assert sims["proxy"] - sims["sleep"] <= extra / (0.5 * H200.hbm_copy_Bps) * 1e6
    attn = next(i for i, k in enumerate(g.kernels) if k.op == "attn")
    seg = tuple(0 if i < attn else 1 for i in range(g.n))
    cfg = Config(D=2, w=0, seg_of=seg, alloc=(64, 64), microbatch=1024)
    ps = {c: simulate(g, cfg, H200, model=ContentionModel(**collective_mode(c)
                                                          .contention_kwargs()),
                      record=False).makespan for c in ("sleep", "proxy")}
    assert ps["proxy"] > ps["sleep"]


def test_every_collective_but_dispatch_and_combine_is_an_all_reduce():
    """The head's ``sample`` and ``embed`` collectives are all-reduces (``graph.head_kernels``),
    not all-to-alls; the TP degree sets the tensor: at TP2 a 14 MiB payload is a 14 MiB tensor
    (2(t-1)/t = 1), above the custom all-reduce's 8 MiB, where at TP8 it is 8 MiB, below."""
    from subgpu_jax.model.kernel import Kernel
    for op in ("sample", "embed", "allreduce"):
        k = Kernel(name=f"h.{op}", op=op, category="head", layer=0, flops=0.0, dtype="bf16",
                   tensor=False, comm_bytes=14 * 2**20)
        assert proxy_plan(k, 8).algorithm == "custom_allreduce"
        assert proxy_plan(k, 2).algorithm == "nccl_nvls"
    for bad in (float("inf"), True, "abc"):
        k = Kernel(name="h.x", op="allreduce", category="head", layer=0, flops=0.0,
                   dtype="bf16", tensor=False, comm_bytes=bad)
        with pytest.raises(ValueError, match="comm_bytes .* must be a finite number of bytes"):
            proxy_plan(k)
    with pytest.raises(ValueError, match="TP degree >= 2"):
        proxy_plan(Kernel(name="h.a", op="allreduce", category="head", layer=0, flops=0.0,
                          dtype="bf16", tensor=False, comm_bytes=1e6), 1)


def test_proxy_needs_the_link_time_and_names_are_strings():
    with pytest.raises(ValueError, match="proxy_collectives needs link_time=True"):
        ContentionModel(proxy_collectives=True, link_time=False)
    with pytest.raises(ValueError, match="^--collectives must be one of"):
        collective_mode(["sleep"])
    assert [m.spin for m in COLLECTIVE_MODES.values()] == [True, False, False, False]
