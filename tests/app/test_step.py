"""The whole decode step (score/step.py): every region kind of the forward pass, then the head
kernels; cuts carried from the main region to the other kinds."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from subgpu_jax.score.timer import StaticTimer
from subgpu_jax.score.step import time_step
from subgpu_jax.score.timer import EventTimer, StaticTimer
from subgpu_jax.space.mapcut import map_cut
from subgpu_jax.model.graph import Deployment, StaticDurationModel, build_forward
from subgpu_jax.model.hardware import get_hardware
from subgpu_jax.model.models import get_model
from subgpu_jax.score.evaluator import Evaluator, temporal_makespan
from subgpu_jax.space.config import Config, chain_cut, temporal_config

H200 = get_hardware("H200")


def _head_static(fp, hw):
    sd = StaticDurationModel(hw)
    return sum(float(np.ravel(sd.kernel_time_us(k, hw.num_sms))[0]) for k in fp.head)


def test_temporal_step_is_regions_plus_head_static():
    """Llama-3.1-8B on TP8, G = 64, KV 1024: one region kind of 32 layers, so the temporal step =
    temporal_makespan(region x 32) + the four head kernels on all SMs, and the head is a few
    percent of the step at this small batch: the LM head alone reads 128256*4096*2/8 = 131 MB,
    ~31 µs at the H200's 4.25 TB/s, beside 32 layers of 436 MB / 8 of weights each."""
    arch = get_model("llama-3.1-8b")
    dep = Deployment(num_gpus=8, attn_tp=8, attn_dp=1, moe_ep=1, global_batch=64,
                     kv_history=1024)
    fp = build_forward(arch, dep, 1)
    assert len(fp.runs) == 1 and fp.runs[0][1] == 32
    cfg = temporal_config(fp.main.n, H200, 64)
    r = time_step(fp, cfg, StaticTimer(H200))
    region = temporal_makespan(fp.main, H200)
    assert r.makespan_us == pytest.approx(region + _head_static(fp, H200), rel=1e-12)
    assert 0.01 < r.head_us / r.makespan_us < 0.05  # analytic-v2: regions cost more (launches)


def test_deepseek_step_sums_runs_with_the_cut_carried_over():
    """DeepSeek-V3 at TP8 x EP8, G = 64, m = 2: the step = 3 dense layers + 58 MoE layers + head.
    A 2-stage cut starting segment 1 at the MoE layer's ``router`` starts the dense layer's at
    ``mlp_up`` (the same place in the layer), with the same pools and microbatch."""
    arch = get_model("deepseek-v3")
    dep = Deployment(num_gpus=8, attn_tp=8, attn_dp=1, moe_ep=8, global_batch=64,
                     kv_history=4096)
    fp = build_forward(arch, dep, 2)
    dense, moe = fp.runs[0][0], fp.main
    i = moe.index("L0.router")
    cfg = Config(D=2, w=0, seg_of=chain_cut(moe.n, [i]), alloc=(64, 64), microbatch=32)
    cd = map_cut(cfg, moe, dense)
    assert cd.seg_of.index(1) == dense.index("L0.mlp_up")
    assert (cd.D, cd.alloc, cd.microbatch) == (2, (64, 64), 32)
    r = time_step(fp, cfg, StaticTimer(H200))
    parts = [float(Evaluator.for_config(dataclasses.replace(g, num_regions=c),
                                        map_cut(cfg, moe, g), H200).makespan([cfg.alloc])[0])
             for g, c in fp.runs]
    assert [x["instances"] for x in r.runs] == [3, 58]
    assert r.makespan_us == pytest.approx(sum(parts) + _head_static(fp, H200), rel=1e-9)


def test_map_cut_keeps_every_segment_nonempty():
    """A 3-segment cut at the MoE layer's router and topk: both map to the dense layer's mlp_up;
    the second start is pushed one kernel on (mlp_down), so no segment is empty."""
    arch = get_model("deepseek-v3")
    dep = Deployment(num_gpus=8, attn_tp=8, attn_dp=1, moe_ep=8, global_batch=64)
    fp = build_forward(arch, dep, 1)
    dense, moe = fp.runs[0][0], fp.main
    cfg = Config(D=3, w=0, seg_of=chain_cut(moe.n, [moe.index("L0.router"),
                                                     moe.index("L0.topk")]),
                 alloc=(48, 40, 40), microbatch=64)
    seg = map_cut(cfg, moe, dense).seg_of
    assert seg.index(1) == dense.index("L0.mlp_up") and seg.index(2) == dense.index("L0.mlp_down")


def test_event_step_adds_the_head_category():
    """Event simulator: the step's categories include 'head', whose time equals the head's
    time on the whole GPU, and the step is the region run plus that."""
    arch = get_model("llama-3.1-8b")
    dep = Deployment(num_gpus=8, attn_tp=8, attn_dp=1, moe_ep=1, global_batch=16,
                     kv_history=1024)
    fp = build_forward(arch, dep, 1)
    cfg = temporal_config(fp.main.n, H200, 16)
    r = time_step(fp, cfg, EventTimer(H200))
    assert r.category_time_us["head"] == pytest.approx(r.head_us, rel=1e-6)
    assert r.makespan_us == pytest.approx(r.runs[0]["makespan_us"] + r.head_us, rel=1e-12)
    assert r.head_us > 0


def test_search_records_time_the_whole_step():
    """A search record's makespan = the searched main region + the rest of the step (the other
    region kinds under the carried-over cut, and the head). Llama-3.1-8B has one region kind, so
    the rest is the head alone: the four head kernels' static times on all SMs."""
    from subgpu_jax.app.searchjob import PointScorer
    from subgpu_jax.app.sweep import GridPoint

    arch = get_model("llama-3.1-8b")
    dep = Deployment(num_gpus=8, attn_tp=8, attn_dp=1, moe_ep=1, global_batch=64,
                     kv_history=1024)
    sc = PointScorer(arch, H200, timer=StaticTimer(H200))
    rec = sc(GridPoint(dep, 1, 1))[0]
    fp = build_forward(arch, dep, 1)
    assert rec["rest_of_step_us"] == pytest.approx(_head_static(fp, H200), rel=1e-12)
    assert rec["makespan_us"] == pytest.approx(
        rec["region_makespan_us"] + rec["rest_of_step_us"], rel=1e-12)
    # the exact static scorer is the float32 JAX evaluator
    assert rec["region_makespan_us"] == pytest.approx(temporal_makespan(fp.main, H200), rel=1e-5)
    ds = get_model("deepseek-v3")
    dd = Deployment(num_gpus=8, attn_tp=8, attn_dp=1, moe_ep=8, global_batch=64,
                    kv_history=1024)
    fd = build_forward(ds, dd, 1)
    cfg = temporal_config(fd.main.n, H200, 64)
    dense = fd.runs[0][0]
    assert PointScorer(ds, H200, timer=StaticTimer(H200)).rest_of_step(dd, cfg) == pytest.approx(
        temporal_makespan(dataclasses.replace(dense, num_regions=3), H200)
        + _head_static(fd, H200), rel=1e-9)
