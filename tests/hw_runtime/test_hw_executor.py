"""hw_runtime.gpu.executor: the launch plan against the simulator's task DAG with a fake stream
backend (pure CPU, always runs), the workload derivation on CPU (needs torch), and the GPU path
(partition + CUDA-graph capture + pipelined output == sequential output; ``@pytest.mark.gpu``,
skipped without a GPU with green contexts)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, strategies as st

from hw_runtime.plan import FakeStreamBackend, build_launch_plan, check_config_for_graph, issue_plan
from hw_runtime.gpu.workload import hopper_arch
from subgpu_jax.sim.contention import ContentionModel
from subgpu_jax.sim.eventsim import simulate
from subgpu_jax.score.evaluator import Evaluator
from subgpu_jax.model.graph import REFERENCE_DEPLOYMENT, Deployment, StaticDurationModel
from subgpu_jax.model.hardware import get_hardware
from subgpu_jax.model.models import MODELS, ModelArch
from subgpu_jax.space.config import Config, chain_cut
from subgpu_jax.space.taskdag import build_task_dag
from subgpu_jax.model.workload import Workload
from subgpu_jax.space.config import temporal_of, workload_config

H200 = get_hardware("H200")
REF = Workload.from_model(hopper_arch(MODELS["gpt-oss-120b"]), REFERENCE_DEPLOYMENT, H200)
TINY = ModelArch(name="tiny-oss", family="gpt_oss", num_layers=4, hidden=256, num_heads=8,
                 num_kv_heads=2, head_dim=32, vocab=1000, num_experts=8, top_k=2,
                 moe_intermediate=128, layer_types=("sliding", "full") * 2, sliding_window=16,
                 attn_bias=True, mlp_bias=True, attention_sinks=True, expert_dtype="bf16")
TINY_DEP = Deployment(num_gpus=2, attn_tp=2, attn_dp=1, moe_ep=2, global_batch=8, input_len=64,
                      kv_history=64)
TINY_WL = Workload.from_model(TINY, TINY_DEP, H200)


def _configs(wl: Workload) -> list[Config]:
    R = wl.batch
    return [
        temporal_of(wl),
        workload_config(wl, wl.macro_starts(), [64, 64], R // 2, True),
        workload_config(wl, [wl.macro_starts()[0]], [96, 32], R // 2, False),
        workload_config(wl, ["L0.attn", "L1.rmsnorm", "L1.attn"], [32, 32, 64], R // 4, True),
        workload_config(wl, ["L0.router", "L1.qkv"], [40, 48, 40], R, False, policy="layer_major"),
    ]


def _fake(plan, graph, cfg, hw=H200):
    sd = StaticDurationModel(hw)
    fb = FakeStreamBackend(plan.num_streams, lambda t, k: float(
        sd.kernel_time_us(graph.kernels[k], cfg.alloc[t.stage])))
    issue_plan(plan, fb)
    return fb


@pytest.mark.parametrize("i", range(5))
def test_plan_is_the_task_dag(i):
    cfg = _configs(REF)[i]
    m = REF.microbatches_of(cfg.microbatch)
    g = REF.graph(m)
    plan = build_launch_plan(g, cfg)
    dag = build_task_dag(g.n, g.edges, g.cross_edges, cfg.seg_of, cfg.D, cfg.w, g.num_regions,
                         m, cfg.policy)
    assert plan.T == dag.T == g.num_regions * m * cfg.K
    assert plan.num_streams == cfg.D and plan.stage_sms == cfg.alloc
    for t in plan.tasks:
        assert (t.region, t.microbatch, t.segment, t.stage) == (
            dag.region[t.index], dag.mb[t.index], dag.seg[t.index], dag.stage[t.index])
        assert t.data_preds == dag.data_preds[t.index]
        assert t.stage_pred == dag.stage_pred[t.index]
        assert t.kernels == tuple(j for j in range(g.n) if cfg.seg_of[j] == t.segment)
        # waits: exactly the data predecessors on other streams; all recorded, all earlier
        assert t.waits == tuple(sorted(j for j in t.data_preds
                                       if plan.tasks[j].stage != t.stage))
        assert all(plan.tasks[j].record and j < t.index for j in t.waits)
    # each stream's tasks in dispatch order = the stage chain of the DAG
    for s, ids in enumerate(plan.stream_tasks()):
        assert all(dag.stage_pred[b] == a for a, b in zip(ids, ids[1:]))
    assert plan.kernel_launches() == g.num_regions * m * g.n


@pytest.mark.parametrize("i", range(5))
def test_fake_streams_equal_simulator_without_contention(i):
    """Stream FIFO + event waits with isolated kernel times = the event simulator with
    contention off = the max-plus evaluator, task by task."""
    cfg = _configs(REF)[i]
    m = REF.microbatches_of(cfg.microbatch)
    g = REF.graph(m)
    plan = build_launch_plan(g, cfg)
    fb = _fake(plan, g, cfg)
    r = simulate(g, cfg, H200, ContentionModel.off(), record=False)
    ts = np.array([fb.task_start[i] for i in range(plan.T)])
    te = np.array([fb.task_end[i] for i in range(plan.T)])
    np.testing.assert_allclose(ts, r.task_start, rtol=1e-9, atol=1e-6)
    np.testing.assert_allclose(te, r.task_end, rtol=1e-9, atol=1e-6)
    ev = Evaluator.for_config(g, cfg, H200)
    assert fb.makespan == pytest.approx(float(ev.makespan(np.asarray([cfg.alloc]))[0]),
                                        rel=1e-5)


@given(st.data())
def test_fake_streams_equal_simulator_random(data):
    wl = TINY_WL
    n = wl.graph(1).n
    K = data.draw(st.integers(2, 5))
    w = data.draw(st.integers(0, 1)) if K >= 3 else 0
    starts = sorted(data.draw(st.sets(st.integers(1, n - 1), min_size=K - 1, max_size=K - 1)))
    D = K - w
    m = data.draw(st.sampled_from([1, 2, 4, 8]))
    policy = data.draw(st.sampled_from(["wavefront", "layer_major"]))
    units = H200.sm_budget // 8
    cuts = sorted(data.draw(st.sets(st.integers(1, units - 1), min_size=D - 1, max_size=D - 1)))
    b = [0] + cuts + [units]
    alloc = tuple(8 * (b[j + 1] - b[j]) for j in range(D))
    cfg = Config(D=D, w=w, seg_of=chain_cut(n, starts), alloc=alloc, microbatch=wl.batch // m,
                 policy=policy)
    g = wl.graph(m)
    plan = build_launch_plan(g, cfg)
    fb = _fake(plan, g, cfg)
    r = simulate(g, cfg, H200, ContentionModel.off(), record=False)
    assert fb.makespan == pytest.approx(r.makespan, rel=1e-9)
    # the sequential reference (one stream, no events) is the sum of all kernel times
    fb1 = FakeStreamBackend(1, lambda t, k: 1.0)
    issue_plan(plan, fb1, single_stream=True)
    assert fb1.makespan == plan.kernel_launches() and not fb1.events


def test_fake_backend_refuses_unrecorded_wait():
    fb = FakeStreamBackend(2)
    with pytest.raises(ValueError, match="not recorded"):
        fb.wait(1, 5)


def test_plan_bad_inputs():
    g = REF.graph(2)
    llama = Workload.from_names("llama-3.1-8b", "H200", Deployment(
        num_gpus=8, attn_tp=8, attn_dp=1, moe_ep=1, global_batch=128))
    cfg_llama = workload_config(llama, ["L0.attn"], [64, 64], 64, False)
    with pytest.raises(ValueError, match="another model"):
        build_launch_plan(g, cfg_llama)
    cfg = workload_config(REF, REF.macro_starts(), [64, 64], 256, True)
    with pytest.raises(ValueError, match="graph has"):
        build_launch_plan(REF.graph(4), cfg)
    dep512 = dataclasses.replace(REFERENCE_DEPLOYMENT, global_batch=512)
    wl512 = Workload.from_model(REF.arch, dep512, H200)
    with pytest.raises(ValueError, match="another deployment"):
        check_config_for_graph(wl512.graph(1), dataclasses.replace(cfg, microbatch=256))
    with pytest.raises(ValueError, match="must be a subgpu_jax.space.Config"):
        build_launch_plan(g, "macro")


# --------------------------------------------------------------------------- CPU torch

def _torch():
    try:
        import torch
        return torch
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"torch not importable: {e}")


class _CpuBackend:
    """Runs each kernel immediately (issue order is topological): a CPU stand-in for streams."""

    def __init__(self, wl):
        self.wl = wl

    def wait(self, s, t):
        pass

    def record(self, s, t):
        pass

    def launch(self, s, task, k):
        self.wl.launch(k, task.microbatch, task.region)


def test_derived_workload_on_cpu_shares_weights_and_matches_sequential():
    torch = _torch()
    from hw_runtime.gpu.executor import derive_workload
    from hw_runtime.gpu.workload import TorchWorkload as HwWorkload

    base = HwWorkload(TINY_WL.graph(1), device="cpu")
    wl2 = derive_workload(base, TINY_WL.graph(2))
    assert wl2.weights is base.weights and wl2.kv is base.kv
    assert wl2.output(0).shape == (TINY_WL.batch // 2, TINY.hidden)
    assert derive_workload(base, TINY_WL.graph(1)) is base
    with pytest.raises(ValueError, match="differs"):
        derive_workload(base, Workload.from_model(TINY, dataclasses.replace(TINY_DEP, global_batch=4),
                                       H200).graph(1))
    cfg = workload_config(TINY_WL, TINY_WL.macro_starts(), [64, 64], TINY_WL.batch // 2, True)
    plan = build_launch_plan(wl2.graph, cfg)
    x = [wl2.output(mu).clone() for mu in range(2)]
    issue_plan(plan, _CpuBackend(wl2), single_stream=True)
    ref = [wl2.output(mu).clone() for mu in range(2)]
    for mu in range(2):
        wl2.output(mu).copy_(x[mu])
    issue_plan(plan, _CpuBackend(wl2))
    for mu in range(2):
        assert torch.equal(wl2.output(mu), ref[mu])
        assert torch.isfinite(ref[mu].float()).all()
        assert not torch.equal(ref[mu], x[mu])


# --------------------------------------------------------------------------- GPU

def _gpu():
    torch = _torch()
    from hw_runtime.gpu.partition import green_contexts_available
    ok, why = green_contexts_available(0)
    if not ok:
        pytest.skip(f"no GPU with green contexts: {why}")
    return torch


@pytest.mark.gpu
def test_gpu_capture_and_pipelined_output_equals_sequential():
    torch = _gpu()
    from hw_runtime.gpu.executor import Executor
    from hw_runtime.gpu.workload import TorchWorkload as HwWorkload

    ex = Executor(HwWorkload(TINY_WL.graph(1), device="cuda"))
    for cfg, mode in ((workload_config(TINY_WL, TINY_WL.macro_starts(), [64, 64], 4, True), "green"),
                      (workload_config(TINY_WL, ["L0.attn", "L1.router"], [32, 32, 64], 2, False), "green"),
                      (workload_config(TINY_WL, TINY_WL.macro_starts(), [64, 64], 4, True),
                       "multistream")):
        chk = ex.check_output(cfg, mode)
        # Guaranteed: finite, replays of one captured graph identical (no race), and the
        # pipelined result within bf16 rounding of the sequential reference. Bitwise equality
        # (seen on the H200 for all three) is not promised by cuBLAS once several streams are
        # active, so it is reported, not asserted.
        assert chk["finite"] and chk["replays_equal"] and chk["how"] == "graph", chk
        assert chk["rel_l2"] < 1e-2, chk
        meas = ex.measure(cfg, mode, rounds=2, replays=5, warmup=1)
        assert meas.makespan_us > 0 and len(meas.round_medians_us) == 2
        if mode == "green":
            assert tuple(meas.partition["granted"]) == cfg.alloc
    t = ex.measure(ex.temporal_config(), "temporal", rounds=1, replays=3, warmup=1)
    assert t.makespan_us > 0 and t.plan["D"] == 1
    torch.cuda.synchronize()


@pytest.mark.gpu
def test_gpu_graph_captured_on_green_stream_keeps_its_pool():
    """A compute-bound GEMM captured on an 8-SM pool is much slower than on the whole GPU even
    when the graph is replayed from a whole-GPU stream: the capturing stream fixes the SMs."""
    torch = _gpu()
    from hw_runtime.gpu.partition import GreenPartition

    n = 4096
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty_like(a)
    full = torch.cuda.Stream()

    def timed(g, s):
        with torch.cuda.stream(s):
            g.replay()
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record(s)
            for _ in range(3):
                g.replay()
            e1.record(s)
        e1.synchronize()
        return e0.elapsed_time(e1) / 3

    with GreenPartition([8, 120], streams_per_pool=1) as part:
        s8 = part.stream(0, 0)
        with torch.cuda.stream(s8):
            torch.mm(a, b, out=c)
        torch.cuda.synchronize()
        g8 = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g8, stream=s8):
            torch.mm(a, b, out=c)
        with torch.cuda.stream(full):
            torch.mm(a, b, out=c)
        torch.cuda.synchronize()
        gf = torch.cuda.CUDAGraph()
        with torch.cuda.graph(gf, stream=full):
            torch.mm(a, b, out=c)
        t8, t8_on_full, tf = timed(g8, s8), timed(g8, full), timed(gf, full)
        del g8, gf
    assert t8 > 5 * tf and t8_on_full > 5 * tf, (t8, t8_on_full, tf)


@pytest.mark.gpu
def test_gpu_bad_requests_leave_nothing_allocated():
    torch = _gpu()
    from hw_runtime.gpu.executor import Executor
    from hw_runtime.gpu.workload import TorchWorkload as HwWorkload

    ex = Executor(HwWorkload(TINY_WL.graph(1), device="cuda"))
    cfg = workload_config(TINY_WL, TINY_WL.macro_starts(), [64, 64], 4, True)
    before = torch.cuda.memory_allocated()
    for bad in (dataclasses.replace(cfg, alloc=(60, 68)), dataclasses.replace(cfg, alloc=(4, 124)),
                dataclasses.replace(cfg, alloc=(72, 64))):
        with pytest.raises(ValueError):
            ex.measure(bad, "green", rounds=1, replays=1, warmup=0)
    with pytest.raises(ValueError, match="another (model|deployment)"):
        ex.measure(workload_config(REF, REF.macro_starts(), [64, 64], 256, True), "green")
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() <= before + 2 ** 20


def test_lane_priority_policy():
    """``Executor.priority_for``: auto turns stream priorities on exactly when each lane holds at
    most one microbatch (m <= k, k > 1); on/off force it; anything else is refused."""
    import types
    from hw_runtime.gpu.executor import LANE_PRIORITY, Executor
    from subgpu_jax.space.config import Config

    ex = object.__new__(Executor)
    ex.base = types.SimpleNamespace(deployment=types.SimpleNamespace(requests_per_gpu=1024))
    cfg = lambda mb: Config(D=2, w=0, seg_of=(0, 1), alloc=(48, 80), microbatch=mb)  # noqa: E731
    assert LANE_PRIORITY == ("auto", "on", "off")
    ex.lane_priority = "auto"
    assert ex.priority_for(cfg(512), 2) is True        # m = 2 = k
    assert ex.priority_for(cfg(256), 2) is False       # m = 4 > k
    assert ex.priority_for(cfg(1024), 1) is False      # one stream per stage: nothing to order
    assert ex.priority_for(cfg(256), 4) is True        # m = 4 = k
    ex.lane_priority = "on"
    assert ex.priority_for(cfg(256), 2) is True
    ex.lane_priority = "off"
    assert ex.priority_for(cfg(512), 2) is False
    ex.lane_priority = True
    with pytest.raises(ValueError, match="lane_priority must be one of auto, on, off"):
        ex.priority_for(cfg(512), 2)
