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
    with pytest.raises(ValueError, match="WORLD_SIZE >= 2"):
        D.world_from_env({"RANK": "0", "WORLD_SIZE": "1"})


def test_run_refuses_nccl_without_torchrun(capsys, monkeypatch):
    """``subgpu run --collectives nccl`` outside torchrun: one line saying how to launch it,
    exit 2, before any GPU is touched; with --top it is refused too; calibrate and tune do not
    offer it (one process, one GPU)."""
    import argparse

    from hw_runtime.commands import add_commands
    from hw_runtime.tune.cli import add_tune_command
    from subgpu_jax.app.cli import main

    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)
    flags = ["--model", "llama-3.1-8b", "--gpus", "2", "--tp", "2", "--batch", "64",
             "--kv-history", "1024"]
    assert main(["run", *flags, "--collectives", "nccl"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "torchrun" in err[0]
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd")
    add_commands(sub)
    add_tune_command(sub)
    for cmd in ("calibrate", "tune"):
        acts = {x.dest: x for x in sub.choices[cmd]._actions}
        assert "nccl" not in acts["collectives"].choices
    assert "nccl" in {x.dest: x for x in sub.choices["run"]._actions}["collectives"].choices


TINY = ModelArch(name="tiny-mixtral", family="mixtral", num_layers=2, hidden=128, num_heads=4,
                 num_kv_heads=2, head_dim=32, vocab=300, num_experts=4, top_k=2,
                 moe_intermediate=64)


def test_fake_process_group_region_issues_the_graph_collectives(monkeypatch):
    """A TP4 EP4 MoE region on the CPU with the fake process group (world 4, rank 1): launching
    every kernel once issues one all-reduce per all-reduce kernel of the graph (over a TP group
    of 4 ranks: size 4) and one all-to-all per dispatch/combine (EP group of 4), each on a buffer
    of the graph's payload (``Kernel.comm_bytes`` / 2 bf16 elements; the all-to-all a multiple of
    4 of them), on the groups of the stream that issues them; the slowest-rank reduction keeps
    this rank's value under the fake group (it reduces nothing)."""
    torch = pytest.importorskip("torch")
    fake_pg = pytest.importorskip("torch.testing._internal.distributed.fake_pg")
    import torch.distributed as dist

    from hw_runtime.gpu.workload import TorchWorkload

    dep = Deployment(num_gpus=4, attn_tp=4, attn_dp=1, moe_ep=4, global_batch=16,
                     input_len=32, kv_history=32)
    if dist.is_initialized():
        dist.destroy_process_group()
    ctx = D.init(dep, backend="fake", rank=1, world=4, store=fake_pg.FakeStore())
    try:
        calls = []
        real_ar, real_a2a = dist.all_reduce, dist.all_to_all_single

        def ar(t, *a, group=None, **k):
            calls.append(("all_reduce", t.numel(), dist.get_world_size(group)))
            return real_ar(t, *a, group=group, **k)

        def a2a(out, inp, *a, group=None, **k):
            calls.append(("all_to_all", inp.numel(), dist.get_world_size(group)))
            return real_a2a(out, inp, *a, group=group, **k)
        monkeypatch.setattr(dist, "all_reduce", ar)
        monkeypatch.setattr(dist, "all_to_all_single", a2a)
        g = build_graph(TINY, dep, 1)
        wl = TorchWorkload(g, device="cpu", spin=False, proxy=False, dist=ctx)
        wl.comm_lane = 3
        wl.launch_region(0, 0)
        want = []
        for k in g.kernels:
            if not k.is_comm:
                continue
            n = -(-int(k.comm_bytes) // 2)
            if k.op in ("dispatch", "combine"):
                want.append(("all_to_all", n - n % 4, 4))
            else:
                want.append(("all_reduce", n, 4))
        assert calls == want and any(c[0] == "all_to_all" for c in calls)
        assert set(ctx.recv) == {(k.name, 3) for k in g.kernels
                                 if k.is_comm and k.op in ("dispatch", "combine")}
        assert D.reduce_max(ctx, 7.5) == 7.5
        rec = ctx.record()
        assert rec["backend"] == "fake" and rec["world_size"] == 4
        assert rec["env"]["NCCL_NVLS_ENABLE"] in ("0", "1")
        with pytest.raises(ValueError, match="deployment has 4 GPUs"):
            D.init(Deployment(num_gpus=4, attn_tp=4, attn_dp=1, moe_ep=4, global_batch=16,
                              input_len=32, kv_history=32), backend="fake", rank=0, world=8)
    finally:
        dist.destroy_process_group()
