"""Algorithm 1's confirmation (``search.algorithm1``'s ``confirm``, issue 42): a screening exact
scorer ranks and polishes, a confirming scorer re-scores each grid point's best configurations
and polishes the best of them.

The screen and the confirming scorer are separate memos of separate scorers (the screen is the
static evaluator times a known, allocation-dependent distortion), so the confirming memo holds
exactly what the confirmation and the layout ranking asked of it. One grid point per search, so
each memo holds that point's configurations only. Oracles: the confirming scorer's own values
(the record is the least of the candidates it scored, without a polish), the screen's order
(the candidates are its ``confirm_top`` best), monotonicity in ``confirm_top`` (more candidates
never give a worse record), the polish (never worse than no polish), and the search without
confirmation (with a perfect screen, confirming never loses).
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from subgpu_jax import search as S
from subgpu_jax.model.synthetic import coarse_hardware, synthetic_workload
from subgpu_jax.search.algorithm1 import Algorithm1Options, algorithm1

HS = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
K = np.array([0.37, 0.91, 0.53, 0.29])


def static_exact(pb):
    """The exact scorer under the cheap estimator's own model."""
    return S.TimerExact(pb, S.EstimatorTimer(pb))


def _problem(seed: int, chain: bool = True) -> S.Problem:
    hw = coarse_hardware(quantum=8, minimum=8, budget=64)
    return S.Problem(synthetic_workload(seed, n=6, chain=chain, num_regions=2, batch=4), hw)


class Distorted:
    """A screen: the static evaluator times 1 + ``amp`` sin(a · K), a smooth,
    allocation-dependent error (as the vectorised contention scorer's, 1-10%), so it ranks some
    configurations in the other order than the confirming scorer."""

    def __init__(self, pb: S.Problem, amp: float) -> None:
        self.base, self.amp = static_exact(pb), amp

    def __call__(self, cfg) -> float:
        a = np.asarray(cfg.alloc, dtype=float)
        return self.base(cfg) * (1.0 + self.amp * float(np.sin(a @ K[:a.size])))


def _one_point(pb, D, m, amp, top, passes):
    """One grid point searched with a distorted screen and a confirmation: (record, screen
    memo, confirming memo)."""
    screen = S.MemoScorer(Distorted(pb, amp))
    conf = S.MemoScorer(static_exact(pb))
    res = algorithm1(pb, [D], [m], exact=screen, confirm=conf,
                     options=Algorithm1Options(include_temporal=False, confirm_top=top,
                                               confirm_passes=passes))
    (rec,) = res.records
    return rec, screen, conf


@given(seed=st.integers(0, 50), amp=st.sampled_from([0.02, 0.1]), top=st.integers(1, 4),
       D=st.sampled_from([2, 3]), chain=st.booleans())
@HS
def test_the_record_is_the_best_confirmed_candidate(seed, amp, top, D, chain):
    """Without a polish: the confirming scorer scored the screen's ``top`` best configurations
    (the screen scores only the polished layouts: the layout ranking goes to the confirming
    scorer), and the record is the least of everything it scored at the point; ``screen_us`` is
    the screen's value, ``confirm_calls`` the confirming scorer's distinct calls, and
    ``screen_rank`` < ``top`` exactly when the record is one of the screen's ``top`` best."""
    pb = _problem(seed, chain)
    rec, screen, conf = _one_point(pb, D, 2, amp, top, 0)
    cfg = rec.config()
    top_by_screen = [c for c, _ in sorted(screen.cache.items(), key=lambda t: t[1])][:top]
    assert all(c in conf.cache for c in top_by_screen)
    assert rec.makespan_us == conf.cache[cfg] == min(conf.cache.values())
    assert rec.screen_us == screen.cache[cfg]
    assert rec.confirm_calls == conf.calls == len(conf.cache)
    # nothing else: the layout ranking scores at most exact_top layouts of the candidates and
    # exact_top of the ranked proposal (Algorithm1Options' keep-proposal guarantee)
    assert len(conf.cache) <= top + 2 * Algorithm1Options().exact_top
    if cfg in top_by_screen:  # (a layout-ranking configuration may equal one of them)
        assert rec.screen_rank <= top_by_screen.index(cfg)
    else:
        assert rec.screen_rank >= top


@given(seed=st.integers(0, 50), amp=st.sampled_from([0.02, 0.1]), D=st.sampled_from([2, 3]),
       chain=st.booleans())
@HS
def test_more_candidates_and_a_polish_never_lose(seed, amp, D, chain):
    """A larger ``confirm_top`` confirms a superset of candidates (the record is never worse),
    and the confirming scorer's polish never makes it worse either."""
    pb = _problem(seed, chain)
    r1 = _one_point(pb, D, 2, amp, 1, 0)[0]
    r4 = _one_point(pb, D, 2, amp, 4, 0)[0]
    r4p = _one_point(pb, D, 2, amp, 4, 2)[0]
    assert r4.makespan_us <= r1.makespan_us
    assert r4p.makespan_us <= r4.makespan_us
    assert r4p.confirm_calls >= r4.confirm_calls >= r1.confirm_calls


@given(seed=st.integers(0, 50), chain=st.booleans())
@HS
def test_a_perfect_screen_never_loses(seed, chain):
    """With the confirming scorer as its own screen (one memo), each record is at most the
    search's without confirmation (the screen's best is that search's choice, and confirming
    only re-scores and polishes it); without ``confirm`` the records carry no confirmation."""
    pb = _problem(seed, chain)
    plain = algorithm1(pb, [2, 3], [1, 2], exact=S.MemoScorer(static_exact(pb)))
    ex = S.MemoScorer(static_exact(pb))
    conf = algorithm1(pb, [2, 3], [1, 2], exact=ex, confirm=ex)
    assert len(plain.records) == len(conf.records) == 5
    for a, b in zip(plain.records, conf.records):
        assert (a.m, a.D) == (b.m, b.D)
        assert b.makespan_us <= a.makespan_us * (1 + 1e-12)
        assert a.screen_us is None and a.confirm_calls == 0 and a.screen_rank == 0
    assert all(b.screen_us is not None for b in conf.records if b.D > 1)


def test_confirm_options_refused():
    """Bad budgets: one line naming the option."""
    with pytest.raises(ValueError, match="confirm_top must be an integer >= 1, got 0"):
        Algorithm1Options(confirm_top=0)
    with pytest.raises(ValueError, match="confirm_passes must be an integer >= 0, got -1"):
        Algorithm1Options(confirm_passes=-1)


@pytest.mark.parametrize("first", ["package", "module"])
def test_algorithm1_is_the_function_in_any_import_order(first):
    """``subgpu_jax.search.algorithm1`` is the function whether the package's name or the
    submodule is imported first (a fresh interpreter each); the submodule stays reachable."""
    steps = {"package": "import subgpu_jax.search as S; S.algorithm1",
             "module": "import importlib; importlib.import_module('subgpu_jax.search.algorithm1')"}
    code = ("import importlib, subgpu_jax.search as S\n" + steps[first] + "\n"
            "from subgpu_jax.search.algorithm1 import Record\n"
            "from subgpu_jax.search import algorithm1\n"
            "m = importlib.import_module('subgpu_jax.search.algorithm1')\n"
            "assert callable(S.algorithm1) and callable(algorithm1), S.algorithm1\n"
            "assert m.algorithm1 is S.algorithm1 and m.Record is Record\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
