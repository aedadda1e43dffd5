"""hw_runtime.gpu.distributed (issue 25, ``--collectives nccl``): the rank layout and the launch
checks (pure, always run), and the collectives a region issues, on the CPU with PyTorch's fake
process group (needs torch; skipped without it)."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from hw_runtime.gpu import distributed as D
from subgpu_jax.model.graph import Deployment, build_graph
from subgpu_jax.model.models import ModelArch


def test_group_ranks_by_hand():
    assert D.group_ranks(8, 4) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert D.group_ranks(2, 1) == [[0], [1]]
    with pytest.raises(ValueError, match="a group of 3 ranks does not divide 8 ranks"):
        D.group_ranks(8, 3)
    with pytest.raises(ValueError, match="size must be an integer >= 1"):
        D.group_ranks(8, 0)


@given(st.integers(1, 64), st.integers(1, 64))
def test_group_ranks_partition(world, size):
    """Where ``size`` divides ``world``: disjoint groups of consecutive ranks covering them."""
    if world % size:
        with pytest.raises(ValueError):
            D.group_ranks(world, size)
        return
    gs = D.group_ranks(world, size)
    assert sorted(r for g in gs for r in g) == list(range(world))
    assert all(g == list(range(g[0], g[0] + size)) for g in gs)


def test_world_from_env():
    assert D.world_from_env({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "3"}) == (3, 8, 3)
    with pytest.raises(ValueError, match="launch it with torchrun"):
        D.world_from_env({})
    with pytest.raises(ValueError, match="WORLD_SIZE must be >= 2"):
        D.world_from_env({"RANK": "0", "WORLD_SIZE": "1"})
    with pytest.raises(ValueError, match="must be integers, got '1.0'"):
        D.world_from_env({"RANK": "1.0", "WORLD_SIZE": "2"})


def test_run_refuses_nccl_without_torchrun(capsys, monkeypatch, runtime_options):
    """``subgpu run --collectives nccl`` outside torchrun: one line saying how to launch it,
    exit 2, before any GPU is touched; with --top it is refused too; calibrate and tune do not
    offer it (one process, one GPU)."""
    from subgpu_jax.app.cli import main

    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)
    flags = ["--model", "llama-3.1-8b", "--gpus", "2", "--tp", "2", "--batch", "64",
             "--kv-history", "1024"]
    assert main(["run", *flags, "--collectives", "nccl"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "torchrun" in err[0]
    for cmd in ("calibrate", "tune"):
        assert "nccl" not in runtime_options[cmd]["collectives"].choices
    assert "nccl" in runtime_options["run"]["collectives"].choices


TINY = ModelArch(name="tiny-mixtral", family="mixtral", num_layers=2, hidden=128, num_heads=4,
                 num_kv_heads=2, head_dim=32, vocab=300, num_experts=4, top_k=2,
                 moe_intermediate=64)


def test_collective_plan_sends_the_graph_bytes():
    """Hand-derived: an all-reduce of 28 MiB sent at TP8 reduces 28 x 8 / 14 = 16 MiB (8 Mi bf16
    elements); a dispatch of 3 MiB at EP4 exchanges 4 MiB (2 Mi elements, a multiple of 4); the
    combine at EP1 and TP8 runs as an all-reduce of the same bytes sent; TP1 / EP1 alone: none."""
    from types import SimpleNamespace as K
    MiB = 2 ** 20
    assert D.collective_plan(K(op="allreduce", comm_bytes=28 * MiB), 8, 1) == ("all_reduce",
                                                                                8 * MiB)
    assert D.collective_plan(K(op="dispatch", comm_bytes=3 * MiB), 8, 4) == ("all_to_all",
                                                                             2 * MiB)
    kind, n = D.collective_plan(K(op="combine", comm_bytes=7 * MiB), 8, 1)
    assert kind == "all_reduce" and n == 2 * MiB
    assert D.collective_plan(K(op="allreduce", comm_bytes=1e6), 1, 4) == ("none", 0)


@given(st.sampled_from(["allreduce", "dispatch", "combine", "sample"]),
       st.floats(2.0, 1e9), st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4, 8]))
def test_collective_plan_invariants(op, comm, tp, ep):
    """The bytes this rank sends equal the graph's within one element per rank: a ring
    all-reduce sends 2(t-1)/t of its tensor, an all-to-all (e-1)/e of its buffer; all-to-all
    buffers split evenly over the group."""
    from types import SimpleNamespace as K
    kind, n = D.collective_plan(K(op=op, comm_bytes=comm), tp, ep)
    if kind == "all_to_all":
        assert n % ep == 0 and abs(2 * n * (ep - 1) / ep - comm) <= 2 * ep + 2
    elif kind == "all_reduce":
        assert abs(2 * n * 2 * (tp - 1) / tp - comm) <= 4 or n == 1
    else:
        assert tp == 1 and (ep == 1 or op not in ("dispatch", "combine"))


def test_visible_device():
    assert D.visible_device(3, {}) == "3"
    assert D.visible_device(1, {"CUDA_VISIBLE_DEVICES": "4,5,6"}) == "5"
    with pytest.raises(ValueError, match="LOCAL_RANK 3 has no GPU"):
        D.visible_device(3, {"CUDA_VISIBLE_DEVICES": "4,5"})


def test_fake_process_group_region_issues_the_graph_collectives(monkeypatch):
    """A TP4 EP4 MoE region on the CPU with the fake process group (world 4, rank 1): launching
    every kernel once issues, per collective kernel of the graph, the collective of
    ``collective_plan`` (all-reduce over the TP group of 4, all-to-all over the EP group of 4)
    on the groups of the issuing stream; a workload of another microbatch count (other payload
    sizes, the same kernel names) on the same lane gets its own buffers (the temporal baseline
    then a pipelined run); a lane beyond the context's is refused; the slowest-rank reduction
    keeps this rank's value under the fake group; NCCL_ENV is forced."""
    torch = pytest.importorskip("torch")
    fake_pg = pytest.importorskip("torch.testing._internal.distributed.fake_pg")
    import torch.distributed as dist

    from hw_runtime.gpu.executor import derive_workload
    from hw_runtime.gpu.workload import TorchWorkload

    dep = Deployment(num_gpus=4, attn_tp=4, attn_dp=1, moe_ep=4, global_batch=16,
                     input_len=32, kv_history=32)
    if dist.is_initialized():
        dist.destroy_process_group()
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")
    ctx = D.init(dep, backend="fake", rank=1, world=4, store=fake_pg.FakeStore(), lanes=4)
    try:
        import os
        assert os.environ["NCCL_NVLS_ENABLE"] == "0" == ctx.record()["env"]["NCCL_NVLS_ENABLE"]
        calls = []
        real_ar, real_a2a = dist.all_reduce, dist.all_to_all_single

        def ar(t, *a, group=None, **k):
            calls.append(("all_reduce", t.numel(), dist.get_world_size(group)))
            return real_ar(t, *a, group=group, **k)

        def a2a(out, inp, *a, group=None, **k):
            assert out.numel() == inp.numel() and out.data_ptr() != inp.data_ptr()
            calls.append(("all_to_all", inp.numel(), dist.get_world_size(group)))
            return real_a2a(out, inp, *a, group=group, **k)
        monkeypatch.setattr(dist, "all_reduce", ar)
        monkeypatch.setattr(dist, "all_to_all_single", a2a)
        g = build_graph(TINY, dep, 1)
        wl = TorchWorkload(g, device="cpu", spin=False, proxy=False, dist=ctx)
        wl.launch_region(0, 0, lane=3)
        want = [(kind, n, 4) for kind, n in (D.collective_plan(k, 4, 4) for k in g.kernels
                                              if k.is_comm)]
        assert calls == want and {c[0] for c in calls} == {"all_reduce", "all_to_all"}
        w2 = derive_workload(wl, build_graph(TINY, dep, 2))   # m = 2, same lane
        calls.clear()
        w2.launch_region(0, 0, lane=3)
        g2 = w2.graph
        assert calls == [(kind, n, 4) for kind, n in (D.collective_plan(k, 4, 4)
                                                      for k in g2.kernels if k.is_comm)]
        assert {k[2] for k in ctx.recv} == {3}
        with pytest.raises(ValueError, match="stream 4 has no communicator of its own"):
            wl.launch_region(0, 0, lane=4)
        assert D.reduce_max(ctx, 7.5) == 7.5
        rec = ctx.record()
        assert rec["backend"] == "fake" and rec["world_size"] == 4 and rec["lanes"] == 4
        with pytest.raises(ValueError, match="deployment has 4 GPUs"):
            D.init(dep, backend="fake", rank=0, world=8)
        with pytest.raises(ValueError, match="already runs as rank 1 of 4"):
            D.init(dep, backend="fake", rank=3, world=4)
    finally:
        dist.destroy_process_group()


def test_one_gpu_commands_refuse_nccl_outside_the_parser():
    """The one-GPU-only rule holds where the parser is not in the way: ``TuneSpec`` (the tune
    sweep builds it directly) and ``gpu.calibrate.calibrate`` refuse ``nccl`` in one line before
    any GPU work; so do bad kernel policies in the spec."""
    import dataclasses

    from hw_runtime.gpu.calibrate import calibrate
    from hw_runtime.tune.spec import TuneSpec
    from subgpu_jax.model.models import resolve_model

    spec = TuneSpec(arch=resolve_model("llama-3.1-8b"), hardware="H200", num_gpus=2, attn_tp=2,
                    attn_dp=1, moe_ep=1, kv_history=2048, input_len=2048, batches=(64,))
    with pytest.raises(ValueError, match="--collectives nccl runs one process per GPU"):
        dataclasses.replace(spec, collectives="nccl")
    for field, bad, flag in (("elementwise", "bogus", "--elementwise"), ("gemm", "x", "--gemm"),
                             ("lane_priority", "maybe", "--lane-priority")):
        with pytest.raises(ValueError, match=f"{flag} must be one of"):
            dataclasses.replace(spec, **{field: bad})
    dep = Deployment(num_gpus=2, attn_tp=2, attn_dp=1, moe_ep=1, global_batch=64,
                     input_len=2048, kv_history=2048)
    with pytest.raises(ValueError, match="only subgpu run takes it"):
        calibrate(resolve_model("llama-3.1-8b"), dep, collectives="nccl")
