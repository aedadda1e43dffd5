"""The periodic fast-forward (``sim.periodic.RegionForward``) gives the full simulation's
results to float rounding.

Oracle: the same simulation without the fast-forward (``run(forward=False)``, the simulator as
it was before). Bound: ``FORWARD_TOL`` (1e-9 relative), the tolerance of the state comparison
that licenses a jump; measured differences are near 1e-13 (the main job: 1.9e-13). Cases: every
model preset (temporal, 2 and 3 stages; green and multistream; the link time on and off), random
synthetic chains (hypothesis: 1-3 stages, 1-3 streams per stage, three L2 policies), and the
isolated hit replay of ``score.vcontention``.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from subgpu_jax.model.graph import CATEGORIES, Deployment, Kernel, OpGraph, build_graph
from subgpu_jax.model.hardware import get_hardware
from subgpu_jax.model.models import MODELS, get_model
from subgpu_jax.score.vcontention import HitCounter
from subgpu_jax.sim.contention import ContentionModel
from subgpu_jax.sim.eventsim import SM_MODES, EventSimulator
from subgpu_jax.sim.periodic import FORWARD_TOL, RegionForward
from subgpu_jax.space.config import Config, cut_from_starts, even_allocation, temporal_config

H200 = get_hardware("H200")
TOL = FORWARD_TOL


def _pair(g, cfg, model, mode="green", cache="lru", observer_pair=None):
    """(full, forwarded) results of one configuration."""
    out = []
    for fw, obs in zip((False, True), observer_pair or (None, None)):
        sim = EventSimulator.from_config(g, cfg, H200, model, cache, record=False, mode=mode,
                                         observer=obs)
        out.append(sim.run(forward=fw))
    return out


def _same(a, b) -> None:
    T = a.makespan
    assert b.makespan == pytest.approx(T, rel=TOL)
    np.testing.assert_allclose(b.task_end, a.task_end, rtol=0, atol=TOL * T)
    np.testing.assert_allclose(b.task_start, a.task_start, rtol=0, atol=TOL * T)
    np.testing.assert_allclose(b.kernel_end, a.kernel_end, rtol=0, atol=TOL * T)
    assert b.bytes_hbm == pytest.approx(a.bytes_hbm, rel=TOL)
    assert b.bytes_l2_hit == pytest.approx(a.bytes_l2_hit, rel=TOL, abs=1.0)
    for c in CATEGORIES:
        assert b.category_time[c] == pytest.approx(a.category_time[c], rel=TOL, abs=TOL * T)


def _configs(g, R):
    """Temporal, and cuts into 2 and 3 stages at evenly spaced kernels (even SM splits)."""
    n = g.n
    cfgs = [temporal_config(n, H200, R)]
    for D in (2, 3):
        starts = [round(n * d / D) for d in range(1, D)]
        alloc = even_allocation(H200.sm_budget, D, H200.sm_quantum, H200.min_pool_sms)
        cfgs.append(Config(D=D, w=0, seg_of=cut_from_starts(n, g.edges, starts),
                           alloc=tuple(int(a) for a in alloc), microbatch=R // g.microbatches))
    return cfgs


JUMPS = []


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_preset_both_modes_both_link_settings(name):
    arch = get_model(name)
    moe = bool(getattr(arch, "num_experts", 0))
    tp = max(t for t in (8, 4, 2, 1) if arch.num_heads % t == 0)
    dep = Deployment(num_gpus=tp, attn_tp=tp, attn_dp=1, moe_ep=tp if moe else 1,
                     global_batch=256, input_len=2048, kv_history=2048)
    g = build_graph(arch, dep, 2)
    R = dep.requests_per_gpu
    for link in (True, False):
        model = ContentionModel(link_time=link)
        for cfg in _configs(g, R):
            for mode in SM_MODES:
                a, b = _pair(g, cfg, model, mode)
                assert a.forwarded is None
                _same(a, b)
                JUMPS.append(b.forwarded is not None)


def test_the_presets_did_jump():
    """Not vacuous: most preset cases skip regions (the temporal ones at least)."""
    if not JUMPS:
        pytest.skip("run with the preset cases")
    assert sum(JUMPS) >= len(JUMPS) // 3


def _chain(draw_flops, draw_bytes, n, L):
    ks = [Kernel(name=f"k{i}", op="x", category=CATEGORIES[i % len(CATEGORIES)], layer=0,
                 flops=float(draw_flops[i]), dtype="bf16", tensor=bool(i % 2),
                 weight_objects=((f"w{i}", float(draw_bytes[i])),),
                 act_reads=((f"a{i}", 1e6 * (i + 1)),), act_writes=((f"a{i + 1}", 1e6),),
                 ctas=8 + 13 * i) for i in range(n)]
    return OpGraph.chain(ks, num_regions=L)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(3, 7), L=st.integers(6, 12), m=st.sampled_from([1, 2, 4]),
       D=st.integers(1, 3), policy=st.sampled_from(["wavefront", "layer_major"]),
       mode=st.sampled_from(SM_MODES), cache=st.sampled_from(["lru", "fifo", "none"]),
       k=st.integers(1, 3), seed=st.integers(0, 2**16))
def test_random_chains(n, L, m, D, policy, mode, cache, k, seed):
    rng = np.random.default_rng(seed)
    g = _chain(rng.uniform(1e8, 5e10, n), rng.uniform(1e5, 6e7, n), n, L)
    g = dataclasses.replace(g, microbatches=m)
    D = min(D, n)
    starts = sorted(rng.choice(np.arange(1, n), size=D - 1, replace=False).tolist())
    alloc = even_allocation(H200.sm_budget, D, H200.sm_quantum, H200.min_pool_sms)
    cfg = Config(D=D, w=0, seg_of=cut_from_starts(n, g.edges, starts),
                 alloc=tuple(int(a) for a in alloc), microbatch=8, policy=policy,
                 streams_per_stage=k)
    a, b = _pair(g, cfg, ContentionModel(), mode, cache)
    _same(a, b)


def test_hit_replay_counts_move_on_with_the_jump():
    """The isolated replay of ``estimate_hits``: the observer's counts after a jump equal the
    full replay's (the hit fractions to 1e-12)."""
    dep = Deployment(num_gpus=8, attn_tp=8, attn_dp=1, moe_ep=1, global_batch=512,
                     input_len=2048, kv_history=2048)
    g = build_graph(get_model("llama-3.1-70b"), dep, 2)
    cfg = _configs(g, dep.requests_per_gpu)[2]
    obs = (HitCounter(g.n), HitCounter(g.n))
    a, b = _pair(g, cfg, ContentionModel.off(), observer_pair=obs)
    assert b.forwarded is not None
    np.testing.assert_allclose(obs[1].hit_rates(), obs[0].hit_rates(), rtol=0, atol=1e-12)
    np.testing.assert_allclose(obs[1].read, obs[0].read, rtol=1e-12)


def test_no_jump_with_a_utilisation_series_or_few_regions():
    dep = Deployment(num_gpus=8, attn_tp=8, attn_dp=1, moe_ep=8, global_batch=512,
                     input_len=2048, kv_history=2048)
    g = build_graph(get_model("gpt-oss-20b"), dep, 2)
    cfg = _configs(g, dep.requests_per_gpu)[1]
    sim = EventSimulator.from_config(g, cfg, H200, ContentionModel(), "lru", record=True)
    assert sim.run(forward=True).forwarded is None       # the series would miss the regions
    short = dataclasses.replace(g, num_regions=5)
    sim = EventSimulator.from_config(short, cfg, H200, ContentionModel(), "lru", record=False)
    assert not RegionForward(sim).active                 # fewer than 6 regions: nothing to skip
    assert sim.run(forward=True).forwarded is None


def test_ties_are_never_repeated_with_static_durations():
    """Found by the breaker (issue 42): with contention off, two lanes' kernels that tie in
    exact arithmetic start 1e-13 µs apart in some regions and exactly together (the other order)
    in later ones, and their L2 lookups swap. A jump repeated the early order: L2 hit bytes +5%
    (llama-3.1-70b, a fifth of the H200's L2), hit fractions off by 2.7e-5 (qwen3-8b, H100, two
    streams per stage). Periods with such ties are never skipped now: the byte counters and the
    hit fractions equal the full simulation's."""
    dep = Deployment(num_gpus=8, attn_tp=8, attn_dp=1, moe_ep=1, global_batch=256,
                     input_len=2048, kv_history=2048)
    g = dataclasses.replace(build_graph(get_model("llama-3.1-70b"), dep, 2), num_regions=20)
    hw = dataclasses.replace(H200, l2_bytes=H200.l2_bytes * 0.2)
    cfg = Config(D=4, w=0, seg_of=(0, 0, 0, 0, 1, 2, 2, 2, 3), alloc=(24, 40, 32, 32),
                 microbatch=dep.requests_per_gpu // 2, policy="layer_major")
    a, b = (EventSimulator.from_config(g, cfg, hw, ContentionModel.off(), "lru",
                                       record=False).run(forward=fw) for fw in (False, True))
    assert b.makespan == pytest.approx(a.makespan, rel=TOL)
    assert b.bytes_l2_hit == a.bytes_l2_hit and b.bytes_hbm == a.bytes_hbm
    h100 = get_hardware("H100")
    dep = Deployment(num_gpus=8, attn_tp=8, attn_dp=1, moe_ep=1, global_batch=64,
                     input_len=2048, kv_history=2048)
    g = build_graph(get_model("qwen3-8b"), dep, 4)
    cfg = Config(D=3, w=0, seg_of=(0, 0, 1, 1, 2, 2, 2, 2, 2), alloc=(32, 40, 56),
                 microbatch=dep.requests_per_gpu // 4, policy="wavefront", streams_per_stage=2)
    obs = (HitCounter(g.n), HitCounter(g.n))
    for fw, o in zip((False, True), obs):
        EventSimulator.from_config(g, cfg, h100, ContentionModel.off(), "lru", record=False,
                                   observer=o).run(forward=fw)
    np.testing.assert_allclose(obs[1].hit_rates(), obs[0].hit_rates(), rtol=0, atol=1e-12)
