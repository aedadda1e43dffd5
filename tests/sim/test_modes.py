"""The simulator's three modes and the communication control (issue 22, item 3).

* ``mode="multistream"``: the microbatched schedule on plain streams, every lane on all the
  GPU's SMs. Oracles: temporal (D = 1) is the same in both modes; with contention off every
  kernel takes its isolated time on the whole GPU, so the makespan is the longest path of the
  augmented task DAG with those durations (networkx, independent of the simulator); with
  contention on, kernels of the lanes share the SMs in launch order (two compute-only kernels:
  hand-derived below).
* ``ContentionModel(link_time=False)``: a lone collective with no HBM bytes takes exactly its
  launch and its other device kernels (``test_contention.test_collective_setup_and_sharing``
  without the setup and payload terms); on one GPU (no collectives) nothing changes; a TP8 step
  never gets slower; a calibrated collective drops exactly the runtime's wait formula.
"""

from __future__ import annotations

import dataclasses

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from subgpu_jax.model.graph import Deployment, Kernel, StaticDurationModel
from subgpu_jax.model.hardware import get_hardware
from subgpu_jax.model.kernelcost import op_cost
from subgpu_jax.model.models import get_model
from subgpu_jax.model.synthetic import coarse_hardware, synthetic_workload
from subgpu_jax.model.workload import Workload
from subgpu_jax.sim.contention import ContentionModel
from subgpu_jax.sim.eventsim import SM_MODES, check_sm_mode, simulate, simulate_streams
from subgpu_jax.space.config import (Config, enumerate_allocations, enumerate_cuts,
                                     temporal_config, temporal_of, workload_config)

H200 = get_hardware("H200")
HW = coarse_hardware()


def _instance(seed: int, D: int, m: int, k: int = 1):
    wl = synthetic_workload(seed, n=6, num_regions=3)
    g = wl.graph(m)
    rng = np.random.default_rng(seed)
    cuts = list(enumerate_cuts(g.n, g.edges, D))
    seg = cuts[int(rng.integers(len(cuts)))]
    allocs = enumerate_allocations(HW.sm_budget, D, HW.sm_quantum, HW.min_pool_sms)
    alloc = tuple(int(a) for a in allocs[int(rng.integers(len(allocs)))])
    return wl, g, Config(D=D, w=0, seg_of=seg, alloc=alloc, microbatch=wl.batch // m,
                         streams_per_stage=k)


def test_mode_names_checked():
    assert SM_MODES == ("green", "multistream")
    with pytest.raises(ValueError, match="mode must be one of green, multistream"):
        check_sm_mode("mps")


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 10_000), m=st.sampled_from([1, 2, 4]))
def test_temporal_is_the_same_in_both_modes(seed, m):
    wl, g, _ = _instance(seed, 2, m)
    g1 = wl.graph(1)
    t = temporal_config(g1.n, HW, wl.batch)
    a = simulate(g1, t, HW, record=False).makespan
    b = simulate(g1, t, HW, record=False, mode="multistream").makespan
    assert a == b


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), D=st.sampled_from([2, 3]), m=st.sampled_from([1, 2, 4]),
       k=st.sampled_from([1, 2]))
def test_isolated_multistream_is_longest_path_with_whole_gpu_durations(seed, D, m, k):
    """Contention off: each kernel runs its static time on all SMs; the makespan is the longest
    path of the augmented DAG (data and stage edges) with those task durations."""
    wl, g, cfg = _instance(seed, D, m, k)
    r = simulate(g, cfg, HW, ContentionModel.off(), cache="none", record=False,
                 mode="multistream")
    sd = StaticDurationModel(HW)
    seg = [[i for i in range(g.n) if cfg.seg_of[i] == s] for s in range(cfg.K)]
    dag = r.dag
    tau = [sum(float(np.asarray(sd.kernel_time_us(g.kernels[i], HW.num_sms)).ravel()[0])
               for i in seg[int(dag.seg[t])]) for t in range(dag.T)]
    G = nx.DiGraph()
    G.add_nodes_from(range(dag.T))
    for i in range(dag.T):
        G.add_edges_from((j, i) for j in dag.preds(i))
    best = {}
    for i in nx.topological_sort(G):
        best[i] = max((best[j] for j in G.predecessors(i)), default=0.0) + tau[i]
    assert r.makespan == pytest.approx(max(best.values()), rel=1e-9)
    assert r.stage_sms == tuple([HW.num_sms] * D)


def test_multistream_shares_all_sms_in_launch_order():
    """Two compute-only kernels (CTAs >= all SMs) on two lanes of the one pool: the first runs
    on N - 1 SMs while both are active, the second gets 1 SM, then the whole GPU; total work is
    conserved, so the makespan is the two kernels' full-GPU times back to back (within the
    per-SM gain of partial pools, which is capped at the chip's rate)."""
    wl = Workload.from_model(get_model("llama-3.1-8b"),
                             Deployment(num_gpus=1, attn_tp=1, attn_dp=1, moe_ep=1,
                                        global_batch=256, input_len=1024, kv_history=1024), H200)
    g = wl.graph(2)
    gemms = [k for k in g.kernels if k.tensor and k.flops > 0]
    assert gemms
    cfg = workload_config(wl, [gemms[0].name, g.kernels[g.index(gemms[0].name) + 1].name],
                          [64, 64], 128, True)
    r_ms = simulate(g, cfg, H200, record=False, mode="multistream")
    r_gr = simulate(g, cfg, H200, record=False)
    assert r_ms.stage_sms == (H200.num_sms, H200.num_sms)
    assert r_gr.stage_sms == (64, 64)
    assert r_ms.makespan != r_gr.makespan
    # never faster than the total compute at the chip's full tensor rate
    flops = sum(k.flops for k in g.kernels if k.tensor) * g.num_regions * g.microbatches
    assert r_ms.makespan >= flops / H200.flops_rate("bf16") * 1e6


def test_link_free_collective_is_launch_plus_its_other_kernels():
    c = Kernel(name="ar", op="allreduce", category="out_residual", layer=0, flops=0.0,
               dtype="bf16", tensor=False, comm_bytes=9e6)
    fx = float(op_cost(c, H200, 16.0).fixed_us)
    t_on = simulate_streams([(16, [c])], H200, ContentionModel(), "none").makespan
    t_off = simulate_streams([(16, [c])], H200, ContentionModel(link_time=False),
                             "none").makespan
    assert t_off == pytest.approx(H200.launch_us + fx)
    assert t_on - t_off == pytest.approx(H200.comm_setup_us + 9e6 / H200.nvlink_Bps * 1e6)


def _step(model, gpus):
    from subgpu_jax.model.graph import build_forward
    from subgpu_jax.score.step import time_step
    from subgpu_jax.score.timer import EventTimer

    dep = Deployment(num_gpus=gpus, attn_tp=gpus, attn_dp=1, moe_ep=1, global_batch=256,
                     input_len=1024, kv_history=1024)
    wl = Workload.from_model(get_model("llama-3.1-8b"), dep, H200)
    return time_step(build_forward(wl.arch, dep, 1), temporal_of(wl),
                     EventTimer(H200, model, "lru"), record=False).makespan_us


def test_link_time_off_changes_nothing_without_collectives_and_never_slows():
    assert _step(ContentionModel(link_time=False), 1) == _step(ContentionModel(), 1)
    assert _step(ContentionModel(link_time=False), 8) < _step(ContentionModel(), 8)


def test_link_time_must_be_bool():
    with pytest.raises(ValueError, match="contention.link_time must be a bool"):
        ContentionModel(link_time="no")


def test_step_mode_needs_event_simulator():
    """Only the event timer models shared pools: asking ``timer_for`` for a static timer in
    multistream mode is refused, an event one is made."""
    from subgpu_jax.model.setup import GpuSetup
    from subgpu_jax.score.timer import EventTimer, timer_for

    with pytest.raises(ValueError, match="needs the event simulator"):
        timer_for(GpuSetup.uncalibrated(H200), "static", mode="multistream")
    t = timer_for(GpuSetup.uncalibrated(H200), "event", mode="multistream")
    assert isinstance(t, EventTimer) and t.mode == "multistream"


def test_calibrated_collective_drops_exactly_the_wait():
    """With a calibration, the collective's fixed latency holds the runtime's wait, setup +
    link bytes / NVLink - 2 x payload / copy bandwidth (``_solve_collective``): 3 + 9e6 / 450e9
    s - 2 x 9e6 / 4245e9 s = 3 + 20 - 4.24 = 18.76 µs, below the measured 40 µs minus the copy's
    lone time, so not clamped; link_time=False removes exactly that."""
    from subgpu_jax.model.calibration import DEPLOY_FIELDS, FORMAT, Calibration, kernel_key
    from subgpu_jax.sim.contention import BoundModel
    from subgpu_jax.sim.eventsim import lone_makespan

    c = Kernel(name="ar", op="allreduce", category="out_residual", layer=0, flops=0.0,
               dtype="bf16", tensor=False, comm_bytes=9e6, act_reads=(("x", 9e6),),
               act_writes=(("y", 9e6),), ctas=1024)
    wait = H200.comm_setup_us + 9e6 / H200.nvlink_Bps * 1e6 - 2 * 9e6 / H200.hbm_copy_Bps * 1e6
    cal = Calibration.from_dict({
        "format": FORMAT, "model": "hand", "hardware": "H200", "num_sms": 132,
        "expert_dtype": "bf16", "deployment": {f: 1 for f in DEPLOY_FIELDS},
        "global_batches": [1], "kernels": [{"key": kernel_key(c), "times_us": {"64": 40.0,
                                                                               "132": 35.0}}],
        "bw_curve": {"sms": [8, 132], "copy_GBps": [700.0, 4245.0]}})
    on = BoundModel(ContentionModel(calibration=cal), H200, lone_makespan).work(c, 64)
    off = BoundModel(ContentionModel(calibration=cal, link_time=False), H200,
                     lone_makespan).work(c, 64)
    assert on.fixed_us - off.fixed_us == pytest.approx(wait)
    assert dataclasses.replace(off, fixed_us=on.fixed_us) == on


def test_predict_modes_refuses_what_would_give_wrong_numbers():
    from subgpu_jax.app.modes import predict_modes

    dep = Deployment(num_gpus=1, attn_tp=1, attn_dp=1, moe_ep=1, global_batch=64,
                     input_len=512, kv_history=512)
    wl = Workload.from_model(get_model("llama-3.1-8b"), dep, H200)
    g = wl.graph(1)
    cfg = workload_config(wl, ["L0.attn", "L0.o_proj"], [64, 64], 32, True)
    with pytest.raises(ValueError, match="needs the contention model"):
        predict_modes(wl.arch, dep, cfg, H200, ContentionModel.off())
    with pytest.raises(ValueError, match="model must be a ContentionModel"):
        predict_modes(wl.arch, dep, cfg, H200, "x")
    with pytest.raises(ValueError, match="known may hold"):
        predict_modes(wl.arch, dep, cfg, H200, known={"other_us": 1.0})
    with pytest.raises(ValueError, match="positive finite makespan"):
        predict_modes(wl.arch, dep, cfg, H200, known={"temporal_us": float("nan")})
    with pytest.raises(ValueError, match="pipelined configuration"):
        predict_modes(wl.arch, dep, temporal_of(wl), H200)
    with pytest.raises(ValueError, match="must divide the per-GPU batch"):
        predict_modes(wl.arch, dep, dataclasses.replace(cfg, microbatch=0), H200)
    assert g.n > 0


def test_generation_modes_are_all_generation_means():
    """With an output length every mode is the same weighted mean over the generation's steps,
    so a one-GPU model (no collectives) has equal with- and without-link makespans."""
    from subgpu_jax.app.modes import predict_modes

    dep = Deployment(num_gpus=1, attn_tp=1, attn_dp=1, moe_ep=1, global_batch=64,
                     input_len=256, kv_history=256, output_len=64)
    wl = Workload.from_model(get_model("llama-3.1-8b"), dep, H200)
    cfg = workload_config(wl, ["L0.attn", "L0.o_proj"], [64, 64], 32, True)
    mp = predict_modes(wl.arch, dep, cfg, H200, known={"temporal_us": 1.0, "subgpu_us": 1.0})
    assert mp.temporal_us == mp.temporal_nolink_us > 1.0
    assert mp.subgpu_us == mp.subgpu_nolink_us > 1.0
