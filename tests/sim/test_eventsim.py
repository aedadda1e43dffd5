"""The exact event-driven simulator (docs/method.md §3) and the L2 residency table.

* With contention and the cache off it equals the max-plus evaluator (several configs incl. w = 1
  and both dispatch policies on gpt-oss-20b / H200, and a synthetic chain).
* One stage: the makespan is the sum of the kernel durations.
* Bytes are conserved, HBM bandwidth never exceeds the response curve, the L2 table never exceeds
  its capacity nor holds KV, runs are deterministic, weight reuse emerges from the schedule.
* Bad input raises one-line ValueErrors naming the field.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from subgpu_jax.sim.contention import ContentionModel
from subgpu_jax.score.evaluator import Evaluator
from subgpu_jax.sim.eventsim import EventSimulator, SimResult, simulate, simulate_streams
from subgpu_jax.model.graph import CATEGORIES, REFERENCE_DEPLOYMENT, Kernel, OpGraph, build_graph
from subgpu_jax.model.hardware import get_hardware
from subgpu_jax.sim.l2cache import L2_POLICIES, L2Cache
from subgpu_jax.model.models import get_model
from subgpu_jax.space.config import Config, cut_from_starts, temporal_config
from subgpu_jax.app import viz

H200 = get_hardware("H200")
B200 = get_hardware("B200")
R = REFERENCE_DEPLOYMENT.requests_per_gpu
ARCH = get_model("gpt-oss-20b")


@pytest.fixture(scope="module")
def g20_4():
    return build_graph(ARCH, REFERENCE_DEPLOYMENT, 4)


@pytest.fixture(scope="module")
def g20_1():
    return build_graph(ARCH, REFERENCE_DEPLOYMENT, 1)


def _cfg(g, starts, w, alloc, m, policy="wavefront"):
    seg = cut_from_starts(g.n, g.edges, starts)
    return Config(D=len(alloc), w=w, seg_of=seg, alloc=tuple(alloc), microbatch=R // m,
                  policy=policy)


# ============================================================================ exactness
@pytest.mark.parametrize("starts,w,alloc,policy", [
    ([15, 16], 1, (64, 64), "wavefront"),          # the "Macro" design: FMHA alone, w = 1
    ([15, 16], 1, (96, 32), "layer_major"),
    ([6, 12, 18], 0, (32, 32, 32, 32), "wavefront"),
    ([9, 15], 0, (48, 40, 40), "layer_major"),
])
def test_off_equals_maxplus_evaluator(g20_4, starts, w, alloc, policy):
    cfg = _cfg(g20_4, starts, w, alloc, 4, policy)
    res = simulate(g20_4, cfg, H200, ContentionModel.off(), cache="none")
    ev = Evaluator.for_config(g20_4, cfg, H200)
    want = float(ev.makespan([cfg.alloc])[0])
    assert res.makespan == pytest.approx(want, rel=2e-6)
    # per-task durations are the static segment durations
    np.testing.assert_allclose(res.tau, ev.task_durations(cfg.alloc), rtol=1e-9)
    np.testing.assert_allclose(res.tau, res.task_end - res.task_start)


def test_off_equals_evaluator_on_synthetic_chain():
    ks = [Kernel(name=f"k{i}", op="x", category=CATEGORIES[i % len(CATEGORIES)], layer=0,
                 flops=1e9 * (i + 1), dtype="bf16", tensor=bool(i % 2),
                 act_reads=((f"a{i}", 1e6 * (i + 1)),), act_writes=((f"a{i + 1}", 1e6),),
                 comm_bytes=1e5 if i == 3 else 0.0, ctas=4 + 17 * i) for i in range(6)]
    g = OpGraph.chain(ks, num_regions=3)
    for w, alloc, starts in ((0, (40, 88), [3]), (1, (64, 64), [2, 4]), (0, (32, 32, 64), [1, 4])):
        cfg = Config(D=len(alloc), w=w, seg_of=cut_from_starts(g.n, g.edges, starts),
                     alloc=alloc, microbatch=1)
        res = simulate(g, cfg, H200, ContentionModel.off(), cache="none")
        want = float(Evaluator.for_config(g, cfg, H200).makespan([alloc])[0])
        assert res.makespan == pytest.approx(want, rel=2e-6)


def test_one_stage_makespan_is_sum_of_durations(g20_1):
    cfg = temporal_config(g20_1.n, H200, R)
    for model in (ContentionModel.off(), ContentionModel()):
        res = simulate(g20_1, cfg, H200, model, cache="lru")
        assert res.makespan == pytest.approx(res.kernel_durations().sum(), rel=1e-9)
        assert res.makespan == pytest.approx(res.tau.sum(), rel=1e-9)
    static = simulate(g20_1, cfg, H200, ContentionModel.off(), cache="none")
    from subgpu_jax.score.evaluator import temporal_makespan
    assert static.makespan == pytest.approx(temporal_makespan(g20_1, H200), rel=1e-9)
    # a lone kernel sees the static model when the contention model is the static-consistent one
    sc = simulate(g20_1, cfg, H200, ContentionModel.static_consistent(), cache="none")
    assert sc.makespan == pytest.approx(static.makespan, rel=1e-9)


# ============================================================================ conservation
@pytest.fixture(scope="module")
def runs(g20_4):
    cfg = _cfg(g20_4, [15, 16], 1, (64, 64), 4)
    return {c: simulate(g20_4, cfg, H200, ContentionModel(), cache=c) for c in L2_POLICIES}


def test_bytes_conserved(runs, g20_4):
    per_inst = sum(k.hbm_bytes for k in g20_4.kernels) * g20_4.num_regions * g20_4.microbatches
    for c, r in runs.items():
        assert r.bytes_objects == pytest.approx(per_inst, rel=1e-9)
        assert r.bytes_hbm + r.bytes_l2_hit == pytest.approx(per_inst, rel=1e-9)
    assert runs["none"].bytes_l2_hit == 0.0 and runs["none"].l2_hit_rate == 0.0


def test_hbm_never_exceeds_curve(runs):
    for r in runs.values():
        used = r.util_hbm * H200.hbm_peak_Bps
        assert np.all(used <= r.hbm_cap_Bps * (1 + 1e-9) + 1e-3)
        # and the curve value itself never exceeds the curve at the busy SMs' full window
        sm = r.util_sm * H200.num_sms
        ceiling = H200.bw_fraction(sm) * max(H200.hbm_read_Bps, H200.hbm_copy_Bps)
        assert np.all(r.hbm_cap_Bps <= ceiling * (1 + 1e-9) + 1e-3)
        assert 0 <= r.mean_hbm_util <= 1 and 0 <= r.mean_sm_util <= 1


def test_l2_capacity_and_weight_reuse(runs):
    for c, r in runs.items():
        assert r.l2_max_occupancy <= H200.l2_bytes
    assert runs["lru"].l2_hit_rate > 0.1
    assert runs["none"].l2_max_occupancy == 0.0


def test_deterministic(g20_4):
    cfg = _cfg(g20_4, [9, 15], 0, (48, 40, 40), 4)
    a = simulate(g20_4, cfg, H200, cache="lru")
    b = simulate(g20_4, cfg, H200, cache="lru")
    assert a.makespan == b.makespan
    np.testing.assert_array_equal(a.kernel_start, b.kernel_start)
    np.testing.assert_array_equal(a.kernel_end, b.kernel_end)
    np.testing.assert_array_equal(a.util_hbm, b.util_hbm)


def test_result_fields(runs, g20_4):
    r = runs["lru"]
    assert isinstance(r, SimResult)
    n_inst = g20_4.n * g20_4.num_regions * g20_4.microbatches
    assert r.kernel_start.shape == r.kernel_end.shape == (n_inst,)
    assert np.all(r.kernel_end >= r.kernel_start)
    assert set(r.category_time) == set(CATEGORIES)
    assert sum(r.category_time.values()) == pytest.approx(r.kernel_durations().sum())
    assert np.all(r.tau >= 0) and r.makespan == pytest.approx(r.task_end.max())
    # stage FIFO: kernels on one stage never overlap
    for s in range(2):
        idx = np.flatnonzero(r.kernel_stage == s)
        st_, en = r.kernel_start[idx], r.kernel_end[idx]
        o = np.argsort(st_, kind="stable")
        assert np.all(st_[o][1:] >= en[o][:-1] - 1e-9)
    # data dependencies respected
    for i in range(r.dag.T):
        for j in r.dag.data_preds[i]:
            assert r.task_start[i] >= r.task_end[j] - 1e-9
    json.dumps(r.summary())


def test_contention_slows_corunning_kernels(runs, g20_4):
    cfg = _cfg(g20_4, [15, 16], 1, (64, 64), 4)
    off = simulate(g20_4, cfg, H200, ContentionModel.off(), cache="none")
    # sharing HBM between stages costs time relative to isolated static durations
    assert runs["none"].makespan > off.makespan


# ============================================================================ monotonicity
@settings(max_examples=25)
@given(nbytes=st.floats(1e5, 5e9), p1=st.integers(1, 131), dp=st.integers(1, 131),
       write=st.booleans())
def test_more_sms_never_slower_for_memory_bound(nbytes, p1, dp, write):
    p2 = min(132, p1 + dp)
    k = Kernel(name="stream", op="copy", category="mlp", layer=0, flops=0.0, dtype="bf16",
               tensor=False, act_reads=(("x", nbytes),),
               act_writes=(("y", nbytes),) if write else (), ctas=100000)
    t1 = simulate_streams([(p1, [k])], H200, ContentionModel(), "none", record=False).makespan
    t2 = simulate_streams([(p2, [k])], H200, ContentionModel(), "none", record=False).makespan
    assert t2 <= t1 * (1 + 1e-12)


# ============================================================================ L2 table
@settings(max_examples=40)
@given(ops=st.lists(st.tuples(st.booleans(), st.integers(0, 12), st.integers(1, 40)),
                    max_size=80),
       policy=st.sampled_from(L2_POLICIES))
def test_l2_table_bounded(ops, policy):
    c = L2Cache(100, policy)
    sizes = {}
    for is_write, key, b in ops:
        b = sizes.setdefault(key, b)
        if is_write:
            c.write(key, b)
        else:
            hit = c.read(key, b)
            assert hit == (key in sizes and policy != "none" and hit)
        assert c.occupancy <= c.capacity + 1e-9
        assert c.occupancy == pytest.approx(sum(sizes[k] for k in c.keys()))
    if policy == "none":
        assert len(c) == 0


def test_l2_policies_behaviour():
    lru, fifo = L2Cache(30, "lru"), L2Cache(30, "fifo")
    for c in (lru, fifo):
        c.read("a", 10), c.read("b", 10), c.read("c", 10)
        assert c.read("a", 10)             # hit
        c.read("d", 10)                    # evicts one
    assert "a" in lru and "b" not in lru   # LRU refreshed a
    assert "a" not in fifo and "b" in fifo  # FIFO evicts in admission order
    big = L2Cache(30, "lru")
    assert not big.read("huge", 31) and "huge" not in big  # larger than capacity: streams


def test_kv_never_admitted(g20_4):
    cfg = _cfg(g20_4, [15, 16], 1, (64, 64), 4)
    from subgpu_jax.sim.eventsim import EventSimulator  # noqa: F401
    res = simulate(g20_4, cfg, H200, cache="lru")
    kv = sum(k.kv_bytes for k in g20_4.kernels) * g20_4.num_regions * g20_4.microbatches
    assert res.bytes_hbm >= kv  # KV always goes to HBM
    # the table only ever holds named weight/activation objects ("w", ...) / ("a", ...)
    sim = EventSimulator(g20_4.kernels, cfg.alloc,
                         [(0, (), 0, 0, tuple(range(g20_4.n)))], H200, cache="lru",
                         layers_per_region=2)
    sim.run()
    assert all(k[0] in ("w", "a") for k in sim.cache.keys())
    assert sim.cache.occupancy <= H200.l2_bytes


def test_residual_alias_gives_cross_region_hit():
    k0 = Kernel(name="w0", op="x", category="mlp", layer=0, flops=0.0, dtype="bf16",
                tensor=False, act_reads=(("resid.0", 1e5),), act_writes=(("resid.1", 1e5),))
    g = OpGraph(kernels=(k0,), edges=(), cross_edges=((0, 0),), num_regions=3,
                layers_per_region=1, microbatches=1)
    cfg = Config(D=1, w=0, seg_of=(0,), alloc=(132,), microbatch=1)
    r = simulate(g, cfg, H200, cache="lru")
    # region 0 misses resid.0; regions 1 and 2 read what the previous region wrote
    assert r.bytes_l2_hit == pytest.approx(2e5)


# ============================================================================ bad input
def test_bad_inputs(g20_4):
    cfg = _cfg(g20_4, [15, 16], 1, (64, 64), 4)
    with pytest.raises(ValueError, match="cache policy must be one of lru, fifo, none"):
        simulate(g20_4, cfg, H200, cache="random")
    with pytest.raises(ValueError, match="alloc"):
        simulate(g20_4, Config(D=2, w=1, seg_of=cfg.seg_of, alloc=(64,), microbatch=R // 4),
                 H200)
    with pytest.raises(ValueError, match="microbatch"):
        simulate(g20_4, Config(D=2, w=1, seg_of=cfg.seg_of, alloc=(64, 64), microbatch=R // 2),
                 H200)
    with pytest.raises(ValueError, match="model must be a ContentionModel"):
        simulate(g20_4, cfg, H200, model="fast")
    with pytest.raises(ValueError, match="stage_sms"):
        simulate_streams([(0, [g20_4.kernels[0]])], H200)
    with pytest.raises(ValueError, match="stage_sms sum"):
        simulate_streams([(100, [g20_4.kernels[0]]), (100, [g20_4.kernels[0]])], H200)
    bad = Kernel(name="bad", op="x", category="mlp", layer=0, flops=float("nan"), dtype="bf16",
                 tensor=False)
    with pytest.raises(ValueError, match="kernel bad: flops"):
        simulate_streams([(8, [bad])], H200)
    neg = Kernel(name="neg", op="x", category="mlp", layer=0, flops=1.0, dtype="bf16",
                 tensor=False, act_reads=(("a", -5.0),))
    with pytest.raises(ValueError, match="kernel neg: bytes of object a"):
        simulate_streams([(8, [neg])], H200)


# ============================================================================ viz
def test_viz_outputs(tmp_path, runs, g20_1):
    r = runs["lru"]
    p = viz.write_trace(r, tmp_path / "t.json")
    data = json.loads(p.read_text())
    xs = [e for e in data["traceEvents"] if e["ph"] == "X"]
    assert len(xs) == r.kernel_start.size
    assert set(xs[0]["args"]) >= {"layer", "microbatch", "segment", "stage", "category"}
    assert {e["tid"] for e in xs} == {0, 1}
    with pytest.raises(ValueError, match="does not exist"):
        viz.write_trace(r, tmp_path / "nope" / "t.json")
    viz.plot_gantt(r, tmp_path / "g.png")
    temporal = simulate(g20_1, temporal_config(g20_1.n, H200, R), H200, cache="lru")
    viz.plot_utilisation(temporal, r, tmp_path / "u.png")
    assert (tmp_path / "g.png").stat().st_size > 1000
    assert (tmp_path / "u.png").stat().st_size > 1000
    with pytest.raises(ValueError, match="does not exist"):
        viz.plot_gantt(r, tmp_path / "nope" / "g.png")


def test_lookup_observer_sees_every_l2_lookup_and_changes_nothing(g20_4):
    """An observer on the simulator (``LookupObserver``: what ``score.vcontention.estimate_hits``
    counts with, instead of subclassing the simulator's lookups) is told of every lookup: its
    per-kernel hit and read bytes sum to the result's L2 totals, and the makespan is the one
    without an observer. Oracle: the simulator's own byte counters."""
    from subgpu_jax.score.vcontention import HitCounter
    from subgpu_jax.sim.eventsim import LookupObserver

    cfg = _cfg(g20_4, [15, 16], 1, (64, 64), 4)
    obs = HitCounter(g20_4.n)
    assert isinstance(obs, LookupObserver)
    sim = EventSimulator.from_config(g20_4, cfg, H200, ContentionModel(), "lru", record=False,
                                     observer=obs)
    r = sim.run()
    assert obs.read.sum() == pytest.approx(sim.bytes_obj_read, rel=1e-12)
    assert obs.hit.sum() == pytest.approx(sim.bytes_hit, rel=1e-12) and obs.hit.sum() > 0
    assert np.all(obs.hit <= obs.read + 1e-9)
    plain = simulate(g20_4, cfg, H200, ContentionModel(), cache="lru", record=False)
    assert r.makespan == plain.makespan
    rates = obs.hit_rates()
    assert rates.shape == (g20_4.n,) and np.all((rates >= 0) & (rates <= 1))
