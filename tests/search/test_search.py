"""Tests of the search layer: Algorithm 2, rounding, the relaxation, Pareto filtering, matched
gains, exhaustive search, the partition proposal and input validation."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from subgpu_jax import get_hardware, get_model
from subgpu_jax import search as S
from subgpu_jax.search.cuts import legal_layouts
from subgpu_jax.model.workload import Workload
from subgpu_jax.space.config import AllocSpace
from subgpu_jax.model.synthetic import coarse_hardware, synthetic_workload
from subgpu_jax.model.accounting import throughputs
from subgpu_jax.model.graph import REFERENCE_DEPLOYMENT, StaticDurationModel
from subgpu_jax.space.config import Config, binding
from subgpu_jax.space.taskdag import build_task_dag

HS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def static_exact(pb):
    """The exact scorer under the cheap estimator's own model."""
    return S.TimerExact(pb, S.EstimatorTimer(pb))


@st.composite
def spaces(draw):
    q = draw(st.sampled_from([1, 2, 4, 8, 16]))
    mn = q * draw(st.integers(1, 3))
    D = draw(st.integers(1, 6))
    extra = draw(st.integers(0, 20))
    return AllocSpace(D=D, budget=D * mn + q * extra, quantum=q, minimum=mn)


# ------------------------------------------------------------------ rounding and Algorithm 2
@HS
@given(spaces(), st.data())
def test_rounding_preserves_budget_minimum_quantum(sp, data):
    x = np.array(data.draw(st.lists(st.floats(-50, 400, allow_nan=False), min_size=sp.D,
                                    max_size=sp.D)))
    for a in (sp.round(x), sp.round(x[None])[0], sp.uniform(),
              sp.proportional(np.abs(x))):
        assert a.sum() == sp.budget
        assert np.all(a >= sp.minimum)
        assert np.all(a % sp.quantum == 0)
        assert sp.contains(a)


@HS
@given(spaces(), st.integers(0, 2**31 - 1), st.sampled_from([None, 0, 1, 3]),
       st.booleans())
def test_pairwise_line_never_worse_and_feasible(sp, seed, passes, batch_line):
    rng = np.random.default_rng(seed)
    c = rng.uniform(0.1, 10.0, sp.D)
    table = rng.uniform(0, 1, 997)

    def f(A):  # a rugged objective: convex part + pseudo-random noise keyed by the allocation
        A = np.atleast_2d(A)
        key = (A * np.arange(1, sp.D + 1)).sum(1) % 997
        return (c / A).sum(1) * 100 + table[key]

    p0 = sp.round(rng.uniform(0, sp.budget, sp.D))
    r = S.pairwise_line(f, p0, sp, max_passes=passes, batch_line=batch_line)
    assert sp.contains(r.alloc)
    assert r.value <= f(p0)[0]
    assert np.isclose(r.value, f(r.alloc)[0])
    assert passes is None or r.passes <= passes


def test_pairwise_line_finds_optimum_of_convex_objective():
    sp = AllocSpace(D=3, budget=128, quantum=8, minimum=8)
    w = np.array([1.0, 4.0, 9.0])

    def f(A):
        return (w / np.atleast_2d(A)).sum(1)

    r = S.pairwise_line(f, sp.uniform(), sp)
    allv = np.concatenate([f(A) for A in sp.iter_all()])
    assert np.isclose(r.value, allv.min())


# ------------------------------------------------------------------ fixtures: tiny instances
@pytest.fixture(scope="module")
def tiny():
    hw = coarse_hardware(quantum=16, minimum=16, budget=64)
    wl = synthetic_workload(3, n=5, chain=True, num_regions=2, batch=4)
    return S.Problem(wl, hw)


@pytest.fixture(scope="module")
def tiny_dag():
    hw = coarse_hardware(quantum=16, minimum=16, budget=64)
    wl = synthetic_workload(11, n=5, chain=False, num_regions=2, batch=4)
    return S.Problem(wl, hw)


# ------------------------------------------------------------------ relaxation
def test_smooth_objective_approaches_hard(tiny):
    ev = tiny.evaluator((0, 0, 1, 1, 2), 3, 0, 2)
    A = np.array([[16, 16, 32], [32, 16, 16], [16, 32, 16]])
    hard = ev.makespan(A)
    gaps = []
    for rel in (1e-1, 1e-2, 1e-3, 1e-4):
        sm = np.asarray(ev.smooth(A.astype(float), rel * hard.mean()))
        assert np.all(sm >= hard * (1 - 1e-5))
        gaps.append(np.max(sm / hard - 1))
    assert all(b <= a + 1e-6 for a, b in zip(gaps, gaps[1:]))
    assert gaps[-1] < 1e-2


def test_relaxation_temperature_is_traced_and_result_feasible(tiny, monkeypatch):
    """New temperatures, learning rate and seed of the same shapes reuse the annealer's one
    compilation (``chex.assert_max_traces`` around the production function raises on a second
    trace), and every result is feasible."""
    import chex

    from subgpu_jax.score.programs import ProgramCache
    from subgpu_jax.search import relax

    monkeypatch.setattr(relax, "ANNEAL", ProgramCache(
        chex.assert_max_traces(relax.anneal_impl, n=1), relax.ANNEAL.static_argnums))
    ev = tiny.evaluator((0, 0, 1, 1, 2), 3, 0, 2)
    sp = tiny.space(3)
    r1 = S.relax_allocation(ev, sp, restarts=4, steps=20, temp_start=5e-2, temp_end=1e-3)
    r2 = S.relax_allocation(ev, sp, restarts=4, steps=20, temp_start=1e-2, temp_end=1e-4,
                            lr=0.05, seed=1)
    for r in (r1, r2):
        assert np.allclose(r.continuous.sum(1), sp.budget)
        assert np.all(r.continuous >= sp.minimum - 1e-6)
        assert np.all(sp.contains(r.rounded))
        assert r.smooth_history.shape == (20, 4)
        assert np.all(np.diff(r.temps) < 0)
    best = S.relax_and_polish(tiny, (0, 0, 1, 1, 2), 3, 0, 2, exact=static_exact(tiny),
                              restarts=4, steps=20)
    assert sp.contains(best.alloc)
    _, opt, _ = S.exhaustive_allocations(ev, sp)
    assert best.makespan_us <= r1.best_us + 1e-6 and best.makespan_us >= opt - 1e-6


# ------------------------------------------------------------------ Pareto and matched gains
@HS
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), min_size=0, max_size=25))
def test_pareto_filter_matches_brute_force(pts):
    P = np.array(pts, dtype=float).reshape(-1, 2)
    oracle = [i for i in range(len(P))
              if not any(np.all(P[j] >= P[i]) and np.any(P[j] > P[i]) for j in range(len(P)))]
    assert sorted(S.pareto_front(P).tolist()) == oracle
    assert S.pareto_mask(P).tolist() == [i in oracle for i in range(len(P))]


def test_matched_gains_hand_made_frontiers():
    # (per_user, per_gpu); base frontier and a candidate 20% better per user at every per-GPU
    base = np.array([[50.0, 100.0], [40.0, 200.0], [20.0, 300.0], [10.0, 150.0]])  # last dominated
    cand = np.array([[60.0, 100.0], [48.0, 200.0], [24.0, 300.0]])
    at, g = S.per_user_gain_at_matched_gpu(base, cand)
    assert at.tolist() == [100.0, 200.0, 300.0]
    assert np.allclose(g, 0.2)
    at, g = S.per_user_gain_at_matched_gpu(base, cand, at=[150.0, 250.0, 400.0])
    # base at 150: 45, cand: 54 -> 0.2; at 250: base 30, cand 36; 400 outside -> NaN
    assert np.allclose(g[:2], 0.2) and np.isnan(g[2])
    # per-GPU gain at matched per-user: cand2 has 1.5x per-GPU at the same per-user
    cand2 = np.array([[50.0, 150.0], [40.0, 300.0], [20.0, 450.0]])
    at, g = S.per_gpu_gain_at_matched_user(base, cand2, at=[45.0, 30.0])
    assert np.allclose(g, 0.5)
    # a hand-interpolated asymmetric case: base (u, g) = (10, 100), (0, 200) and
    # cand (10, 150), (0, 250): at per-user 5, base per-GPU 150, cand 200 -> +1/3
    at, g = S.per_gpu_gain_at_matched_user([[10, 100], [0, 200]], [[10, 150], [0, 250]], at=[5])
    assert np.isclose(g[0], 200 / 150 - 1)
    # at per-GPU 150: base per-user 5, cand per-user 10 (its first point) -> +100%
    at, g = S.per_user_gain_at_matched_gpu([[10, 100], [0, 200]], [[10, 150], [0, 250]],
                                           at=[150])
    assert np.isclose(g[0], 1.0)


def test_throughputs():
    pu, pg = throughputs(np.array([1000.0, 2000.0]), 64.0)
    assert np.allclose(pu, [1000.0, 500.0]) and np.allclose(pg, [64000.0, 32000.0])
    with pytest.raises(ValueError, match="makespan_us"):
        throughputs(0.0, 1.0)


# ------------------------------------------------------------------ exhaustive vs brute force
def _brute_force(problem, D, ms, ws=(0, 1)):
    """Plain-Python loops over itertools: every cut, allocation and m, max-plus by hand."""
    hw, wl = problem.hw, problem.workload
    best = np.inf
    for m in ms:
        g = wl.graph(m)
        table = StaticDurationModel(hw).table(g)
        for w in ws:
            K = D + w
            if K > g.n:
                continue
            for seg in itertools.product(range(K), repeat=g.n):
                if set(seg) != set(range(K)) or any(seg[u] > seg[v] for u, v in g.edges):
                    continue
                dag = build_task_dag(g.n, g.edges, g.cross_edges, seg, D, w, g.num_regions, m)
                for alloc in itertools.product(range(hw.min_pool_sms, hw.sm_budget + 1,
                                                     hw.sm_quantum), repeat=D):
                    if sum(alloc) != hw.sm_budget:
                        continue
                    segdur = [sum(table[i, alloc[binding(k, K, w)]] for i in range(g.n)
                                  if seg[i] == k) for k in range(K)]
                    C = []
                    for i in range(dag.T):
                        C.append(max((C[j] for j in dag.preds(i)), default=0.0)
                                 + segdur[dag.seg[i]])
                    best = min(best, max(C))
    return best


@pytest.mark.parametrize("which,D", [("tiny", 2), ("tiny", 3), ("tiny_dag", 2)])
def test_exhaustive_equals_brute_force(which, D, request):
    pb = request.getfixturevalue(which)
    ex = S.exhaustive_search(pb, D, (1, 2))
    bf = _brute_force(pb, D, (1, 2))
    assert ex.makespan_us == pytest.approx(bf, rel=1e-5)
    assert static_exact(pb)(ex.best) == pytest.approx(ex.makespan_us, rel=1e-6)


# ------------------------------------------------------------------ Algorithm 1 and proposal
def test_algorithm1_records_front_and_memo(tiny):
    memo = S.MemoScorer(static_exact(tiny))
    res = S.algorithm1(tiny, [2, 3], [1, 2], exact=memo)
    assert len(res.records) == 1 + 4  # temporal + grid
    for r in res.records[1:]:
        assert tiny.space(r.D).contains(np.array(r.alloc))
        assert memo.cache[r.config()] == r.makespan_us
        assert r.per_user == pytest.approx(1e6 / r.makespan_us)
    pts = np.array([[r.per_user, r.per_gpu] for r in res.records])
    assert {id(r) for r in res.front} == {id(res.records[i]) for i in S.pareto_front(pts)}
    calls = memo.calls
    for r in res.records[1:]:
        memo(r.config())
    assert memo.calls == calls and memo.requests > calls
    ex = S.exhaustive_search(tiny, 2, [1, 2])
    best2 = min(r.makespan_us for r in res.records if r.D == 2)
    assert best2 >= ex.makespan_us * (1 - 1e-6)


def test_dp_proposal_matches_enumeration_on_chain():
    hw = get_hardware("H200")
    g = synthetic_workload(5, n=8, chain=True).graph(1)
    phi, wt = S.kernel_features(g, hw, 64)
    assert phi.shape == (8, len(S.FEATURE_NAMES)) and np.allclose(phi[:, :4].sum(1), 1)
    from subgpu_jax.space.config import enumerate_cuts
    for D in (2, 3, 4):
        prop = S.propose_partition(g, D, phi, wt)
        best = min(S.partition_cost(phi, wt, c) for c in enumerate_cuts(g.n, g.edges, D))
        assert prop.anchored.feature_cost == pytest.approx(best, rel=1e-9, abs=1e-12)
        assert prop.anchored.w == 0
        assert all(c.seg_of != prop.anchored.seg_of or c.w for c in prop.rotations)


def test_proposal_contains_macro_layout_for_gpt_oss():
    """docs/method.md §5's Macro design (full-attention FMHA alone on stage 1, w = 1) is proposed."""
    hw = get_hardware("H200")
    g = Workload.from_model(get_model("gpt-oss-120b"), REFERENCE_DEPLOYMENT).graph(2)
    fa = g.index("L1.attn")
    macro = tuple(0 if i < fa else (1 if i == fa else 2) for i in range(g.n))
    prop = S.propose_partition(g, 2, hw=hw)
    assert (macro, 1) in {(c.seg_of, c.w) for c in prop.candidates}


def test_cut_neighbours_are_legal(tiny_dag):
    g = tiny_dag.workload.graph(1)
    from subgpu_jax.space.config import check_cut, enumerate_cuts
    for seg in enumerate_cuts(g.n, g.edges, 3):
        for c, w in S.cut_neighbours(g, seg, 0, 3):
            check_cut(c, g.n, g.edges, 3 + w)


def test_screen_never_worse_than_proposal(tiny, tiny_dag):
    """The screening extension polishes the proposal's choice too, so per grid point it is never
    worse than the faithful Algorithm 1."""
    for pb in (tiny, tiny_dag):
        ex = static_exact(pb)
        a = S.algorithm1(pb, [2, 3], [2], exact=ex,
                         options=S.Algorithm1Options(include_temporal=False))
        b = S.algorithm1(pb, [2, 3], [2], exact=ex,
                         options=S.Algorithm1Options(include_temporal=False, cut="screen"))
        assert [(r.m, r.D) for r in a.records] == [(r.m, r.D) for r in b.records]
        for ra, rb in zip(a.records, b.records):
            assert rb.makespan_us <= ra.makespan_us * (1 + 1e-6)
            assert pb.space(rb.D).contains(np.array(rb.alloc))
            assert static_exact(pb)(rb.config()) == pytest.approx(rb.makespan_us, rel=1e-6)


def test_screen_finds_exhaustive_optimum_on_tiny_chains(tiny):
    for D in (2, 3):
        ex = S.exhaustive_search(tiny, D, (1, 2))
        b = S.algorithm1(tiny, [D], [1, 2], exact=static_exact(tiny),
                         options=S.Algorithm1Options(include_temporal=False, cut="screen"))
        assert b.best().makespan_us == pytest.approx(ex.makespan_us, rel=1e-5)


def test_screen_cuts_budget_and_strategy_validation(tiny):
    g = tiny.workload.graph(1)
    n_layouts = len(legal_layouts(g, 2, 10_000))
    assert S.screen_cuts(tiny, 2, 1, max_cuts=n_layouts - 1) is None
    ranked, evals = S.screen_cuts(tiny, 2, 1, max_cuts=n_layouts, top=3)
    assert 1 <= len(ranked) <= 3 and evals >= 2 * n_layouts
    assert [rc.value for rc in ranked] == sorted(rc.value for rc in ranked)
    for v, c, alloc in ranked:
        assert tiny.evaluator(c.seg_of, 2, c.w, 1).makespan(alloc[None])[0] == pytest.approx(v)
        ev = tiny.evaluator(c.seg_of, 2, c.w, 1)
        assert v >= S.exhaustive_allocations(ev, tiny.space(2))[1] * (1 - 1e-6)
    # over budget, "screen" falls back to the local search and stays feasible
    ex = static_exact(tiny)
    r = S.algorithm1(tiny, [2], [1], exact=ex, options=S.Algorithm1Options(
        include_temporal=False, cut=S.ScreenCut(max_cuts=1)))
    assert tiny.space(2).contains(np.array(r.records[0].alloc))
    with pytest.raises(ValueError, match="cut_strategy must be one of proposal, "):
        S.Algorithm1Options(cut="nope")
    with pytest.raises(ValueError, match="alloc_strategy must be one of pairwise, relax"):
        S.Algorithm1Options(allocate="greedy")
    with pytest.raises(ValueError, match="screen_top"):
        S.ScreenCut(top=0)
    with pytest.raises(ValueError, match="eta"):
        S.screen_cuts(tiny, 2, 1, eta=1)


# ------------------------------------------------------------------ bad input
def test_bad_inputs(tiny):
    with pytest.raises(ValueError, match="policy"):
        tiny.evaluator((0, 0, 1, 1, 1), 2, 0, 1, policy="bogus")
    with pytest.raises(ValueError, match="policy"):
        S.algorithm1(tiny, [2], [1], policies=["bogus"], exact=static_exact(tiny))
    with pytest.raises(ValueError, match="budget"):
        AllocSpace(D=2, budget=0, quantum=8, minimum=8)
    with pytest.raises(ValueError, match="sm_budget"):
        coarse_hardware(budget=0)
    with pytest.raises(ValueError, match=r"empty.*minimum.*budget"):
        tiny.space(5)  # 5 pools of 16 SMs > 64
    with pytest.raises(ValueError, match="empty"):
        S.exhaustive_search(tiny, 5, [1])
    with pytest.raises(ValueError, match="optimizer"):
        S.relax_allocation(tiny.evaluator((0, 0, 1, 1, 1), 2, 0, 1), tiny.space(2),
                           optimizer="lbfgs-ish")
    with pytest.raises(ValueError, match="microbatches"):
        tiny.workload.graph(3)
    with pytest.raises(ValueError, match="p0"):
        S.pairwise_line(lambda A: A.sum(1), [8, 8], tiny.space(2))
    for e in (ValueError,):
        with pytest.raises(e) as info:
            AllocSpace(D=9, budget=128, quantum=16, minimum=16)
        assert "\n" not in str(info.value)
