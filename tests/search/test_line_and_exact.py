"""Tests of Algorithm 2's published line search (hand-made lines), the explicit exact scorers
(event-simulator adapter, no silent default), the exhaustive optimum under an exact scorer, and
the exact ranking of the top cut candidates in Algorithm 1."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from subgpu_jax.score.timer import EventTimer
from subgpu_jax import search as S
from subgpu_jax.model.synthetic import coarse_hardware, synthetic_workload
from subgpu_jax.sim.contention import ContentionModel
from subgpu_jax.sim.eventsim import simulate
from subgpu_jax.space.config import AllocSpace


def _line(values: dict[int, float]):
    """value(z) from a hand-made table, recording the trial points in order."""
    seen: list[int] = []

    def value(z: int) -> float:
        seen.append(z)
        return values[z]

    return value, seen


# ------------------------------------------------------------------ the line search
def test_line_search_monotone_reaches_the_limit():
    """A line improving at every z must end at the donor's limit. Limit 6 by hand: z = 1
    accepted, step 2 -> trial 3 (better), step 4 clipped to 3 -> trial 6 (better), step 0: stop
    at 6 after 2 trials (the earlier bisection rule stopped at 5)."""
    value, seen = _line({z: -float(z) for z in range(1, 7)})
    assert S.line_search(value, 6, -1.0) == (6, -6.0, 2)
    assert seen == [3, 6]
    for z_max in range(1, 130):
        z, fz, trials = S.line_search(lambda z: -float(z), z_max, -1.0)
        assert (z, fz) == (z_max, -float(z_max))
        assert trials <= math.ceil(math.log2(z_max + 1))


def test_line_search_multimodal_hand_line():
    """Trace by hand (values below, limit 12): z = 1 (10); step 2 -> 3 (8, better, step 4);
    7 (9, worse, step 2); 5 (7, better, step 4); 9 (3, better, step 8 clipped to 3); 12 (12,
    worse, step 1); 10 (11, worse, step 0): stop at z = 9, a local minimum (z = 11 is lower but
    behind the worse z = 10). The step doubled again after the success at 5."""
    vals = {1: 10, 2: 9, 3: 8, 4: 9.5, 5: 7, 6: 6.5, 7: 9, 8: 4, 9: 3, 10: 11, 11: 2, 12: 12}
    value, seen = _line({k: float(v) for k, v in vals.items()})
    assert S.line_search(value, 12, 10.0) == (9, 3.0, 6)
    assert seen == [3, 7, 5, 9, 12, 10]


def test_line_search_flat_line_stays():
    """A flat line never improves: trial 3 fails (step 2 -> 1), trial 2 fails (step 0)."""
    value, seen = _line({z: 5.0 for z in range(1, 9)})
    assert S.line_search(value, 8, 5.0) == (1, 5.0, 2)
    assert seen == [3, 2]
    assert S.line_search(lambda z: 5.0, 1, 5.0) == (1, 5.0, 0)


@given(st.lists(st.integers(0, 20), min_size=1, max_size=40))
def test_line_search_ends_where_one_more_quantum_does_not_help(raw):
    """Invariant on random lines: the result is a visited point, never worse than z = 1, and
    either at the limit or such that z + 1 does not improve."""
    vals = {z + 1: float(v) for z, v in enumerate(raw)}
    z_max = len(raw)
    z, fz, trials = S.line_search(lambda k: vals[k], z_max, vals[1])
    assert 1 <= z <= z_max and fz == vals[z] and fz <= vals[1]
    assert z == z_max or not vals[z + 1] < fz - 1e-6 * abs(fz)
    assert trials <= 2 * z_max


def test_line_search_rejects_bad_limit():
    with pytest.raises(ValueError, match="z_max"):
        S.line_search(lambda z: 0.0, 0, 1.0)


def test_pairwise_line_moves_to_the_donor_limit_in_one_pass():
    """Two stages, objective = SMs of stage 0 (monotone along 0 -> 1): from (56, 72) the donor
    can give 6 quanta of 8 SMs; the published line search gives all 6 in the first pass."""
    sp = AllocSpace(D=2, budget=128, quantum=8, minimum=8)
    r = S.pairwise_line(lambda A: np.atleast_2d(A)[:, 0].astype(float), [56, 72], sp)
    assert r.alloc.tolist() == [8, 120] and r.passes == 1
    assert r.history[0][:3] == (0, 1, 6)


def test_pairwise_line_flat_objective_makes_no_move():
    sp = AllocSpace(D=3, budget=96, quantum=8, minimum=8)
    r = S.pairwise_line(lambda A: np.ones(len(np.atleast_2d(A))), sp.uniform(), sp)
    assert r.passes == 0 and r.alloc.tolist() == sp.uniform().tolist()


def test_pairwise_line_accepts_another_line_rule_and_checks_it():
    sp = AllocSpace(D=2, budget=128, quantum=8, minimum=8)

    def f(A):
        return np.atleast_2d(A)[:, 0].astype(float)

    r = S.pairwise_line(f, [56, 72], sp, line=lambda v, zm, f1, rtol: (1, f1, 0))
    assert r.history[0][2] == 1
    with pytest.raises(ValueError, match="outside"):
        S.pairwise_line(f, [56, 72], sp, line=lambda v, zm, f1, rtol: (zm + 1, f1, 0))


# ------------------------------------------------------------------ exact scorers
@pytest.fixture(scope="module")
def small():
    hw = coarse_hardware(quantum=16, minimum=16, budget=64)
    wl = synthetic_workload(3, n=5, chain=True, num_regions=2, batch=4)
    return S.Problem(wl, hw)


def test_event_sim_exact_is_the_simulator(small):
    cfg = small.config((0, 0, 1, 1, 2), 3, 0, (16, 32, 16), 2)
    g = small.workload.graph(2)
    ref = simulate(g, cfg, small.hw, ContentionModel(), cache="lru", record=False).makespan
    assert S.TimerExact(small, EventTimer(small.hw))(cfg) == pytest.approx(ref, rel=1e-12)
    off = simulate(g, cfg, small.hw, ContentionModel.off(), cache="none", record=False).makespan
    off_timer = EventTimer(small.hw, ContentionModel.off(), "none")
    assert S.TimerExact(small, off_timer)(cfg) == pytest.approx(off)
    # one spelling: both exact scorers are TimerExact over a score.timer.Timer, and the
    # estimator's timer agrees with the static timer (a fresh max-plus evaluator) on a D > 1
    from subgpu_jax.score.timer import StaticTimer, Timer

    ev_ex = S.TimerExact(small, EventTimer(small.hw))
    st_ex = S.TimerExact(small, S.EstimatorTimer(small))
    for x in (ev_ex, st_ex):
        assert isinstance(x, S.TimerExact) and isinstance(x.timer, Timer)
    assert st_ex(cfg) == StaticTimer(small.hw, small.model).time(g, cfg).makespan_us
    assert S.TimerExact(small, StaticTimer(small.hw))(cfg) == st_ex(cfg)
    with pytest.raises(ValueError, match="cache"):
        S.TimerExact(small, EventTimer(small.hw, cache="mru"))
    with pytest.raises(ValueError, match="model"):
        S.TimerExact(small, EventTimer(small.hw, model="contention"))


def test_searches_need_an_explicit_exact_scorer(small):
    with pytest.raises(TypeError, match="exact"):
        S.algorithm1(small, [2], [1])
    with pytest.raises(TypeError, match="exact"):
        S.allocate_pairwise(small, (0, 0, 1, 1, 1), 2, 0, 1)
    with pytest.raises(TypeError, match="exact"):
        S.relax_and_polish(small, (0, 0, 1, 1, 1), 2, 0, 1)
    for bad in (None, 3.0):
        with pytest.raises(ValueError, match="exact"):
            S.algorithm1(small, [2], [1], exact=bad)
    with pytest.raises(ValueError, match="exact_top"):
        S.Algorithm1Options(exact_top=0)


def test_exhaustive_exact_matches_the_vectorised_exhaustive_search(small):
    """Independent oracle: with the estimator's own model as the exact scorer, scoring every
    configuration one by one must find the optimum of ``exhaustive_search``."""
    for D, ms in ((2, (1, 2)), (3, (2,))):
        ex = S.exhaustive_search(small, D, ms)
        ee = S.exhaustive_exact(small, D, ms, S.TimerExact(small, S.EstimatorTimer(small)))
        assert ee.makespan_us == pytest.approx(ex.makespan_us, rel=1e-6)
        assert ee.evaluated == ex.evaluated == S.count_configs(small, D, ms)
    with pytest.raises(ValueError, match="max_configs"):
        S.exhaustive_exact(small, 3, (1, 2), S.TimerExact(small, S.EstimatorTimer(small)),
                           max_configs=10)


def test_algorithm1_with_the_simulator_never_beats_the_simulator_optimum(small):
    memo = S.MemoScorer(S.TimerExact(small, EventTimer(small.hw)))
    ee = S.exhaustive_exact(small, 2, (1, 2), memo)
    calls = memo.calls
    assert calls == ee.evaluated
    res = S.algorithm1(small, [2], [1, 2], exact=memo,
                       options=S.Algorithm1Options(include_temporal=False))
    assert memo.calls == calls  # every configuration was already simulated
    for r in res.records:
        assert r.makespan_us >= ee.per_m[r.m][1] * (1 - 1e-12)
        assert memo.cache[r.config()] == r.makespan_us


# ------------------------------------------------------------------ exact ranking of the cuts
def test_exact_ranking_is_a_no_op_under_the_estimators_model(small):
    """With the estimator's own model as the exact scorer, the exact makespan at a layout's
    cheap-refined allocation IS its cheap ranking value, so scoring the top 3 must keep the
    estimator's choice at every grid point."""
    a = S.algorithm1(small, [2, 3], [1, 2], exact=S.TimerExact(small, S.EstimatorTimer(small)),
                     options=S.Algorithm1Options(exact_top=1))
    b = S.algorithm1(small, [2, 3], [1, 2], exact=S.TimerExact(small, S.EstimatorTimer(small)),
                     options=S.Algorithm1Options(exact_top=3))
    assert b.exact_top == 3 and a.exact_top == 1
    for ra, rb in zip(a.records, b.records):
        assert (ra.seg_of, ra.w, ra.alloc) == (rb.seg_of, rb.w, rb.alloc)
        assert rb.makespan_us == pytest.approx(ra.makespan_us, rel=1e-9)
        assert ra.cheap_rank == rb.cheap_rank == 0


def test_exact_ranking_overrides_the_estimator_when_the_exact_scorer_disagrees(small):
    """A hand-made exact scorer that doubles the makespan of the estimator's favourite layout:
    with ``exact_top`` = 3 Algorithm 1 must pick the layout of least exact makespan among the
    top 3 of the cheap ranking (computed here directly), and record its cheap rank > 0;
    with ``exact_top`` = 1 it keeps the estimator's favourite."""
    D, m = 3, 2
    ranked, _, _ = S.rank_cuts(small, D, m)
    assert len(ranked) >= 2
    fav = (ranked[0].cand.seg_of, ranked[0].cand.w)
    static = S.TimerExact(small, S.EstimatorTimer(small))

    def exact(cfg):
        return static(cfg) * (2.0 if (cfg.seg_of, cfg.w) == fav else 1.0)

    vals = [exact(small.config(rc.cand.seg_of, D, rc.cand.w, rc.alloc, m)) for rc in ranked[:3]]
    want = int(np.argmin(vals))
    assert want > 0
    rec = S.algorithm1(small, [D], [m], exact=exact, options=S.Algorithm1Options(
        exact_top=3, include_temporal=False)).records[0]
    assert (rec.seg_of, rec.w) == (ranked[want].cand.seg_of, ranked[want].cand.w)
    assert rec.cheap_rank == want
    rec1 = S.algorithm1(small, [D], [m], exact=exact, options=S.Algorithm1Options(
        exact_top=1, include_temporal=False)).records[0]
    assert (rec1.seg_of, rec1.w) == fav and rec1.cheap_rank == 0
    assert rec.makespan_us < rec1.makespan_us
