"""Algorithm 1's confirmation (``search.algorithm1``'s ``confirm``, issue 42): a screening exact
scorer ranks and polishes, a confirming scorer re-scores each grid point's best configurations
and polishes the best of them.

Oracles: the confirming scorer itself (every record's makespan is its value of the record's
configuration, and no configuration it scored at the record's layout is better: its polish ends
at the least value it saw, see ``test_record_is_the_least_confirmed_value``), the search without
confirmation (with a perfect screen, confirming never loses), and a screen that is the
confirming scorer times a known distortion (its ``screen_us`` is that product).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from subgpu_jax import search as S
from subgpu_jax.model.synthetic import coarse_hardware, synthetic_workload
from subgpu_jax.search.algorithm1 import Algorithm1Options, algorithm1

HS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _problem(seed: int, chain: bool = True) -> S.Problem:
    hw = coarse_hardware(quantum=8, minimum=8, budget=64)
    return S.Problem(synthetic_workload(seed, n=6, chain=chain, num_regions=2, batch=4), hw)


class Distorted:
    """A screen: the confirming scorer ``base`` times 1 + ``amp`` sin(a · k), a smooth,
    allocation-dependent error (as the vectorised contention scorer's, 1-10%), so the screen
    ranks some configurations in the other order than ``base``."""

    def __init__(self, base, amp: float, k: np.ndarray) -> None:
        self.base, self.amp, self.k = base, amp, k

    def factor(self, cfg) -> float:
        a = np.asarray(cfg.alloc, dtype=float)
        return 1.0 + self.amp * float(np.sin(a @ self.k[:a.size]))

    def __call__(self, cfg) -> float:
        return self.base(cfg) * self.factor(cfg)


@given(seed=st.integers(0, 50), amp=st.sampled_from([0.02, 0.1]),
       top=st.integers(1, 5), passes=st.integers(0, 2), chain=st.booleans())
@HS
def test_record_is_the_least_confirmed_value(seed, amp, top, passes, chain):
    """Every record's makespan is the confirming scorer's value of its configuration and its
    ``screen_us`` the screen's; no configuration the confirming scorer scored at the record's
    layout (cut, reuse) and grid point is lower (the confirmation keeps the least candidate and
    its polish only accepts improvements); ``confirm_calls`` counts those configurations."""
    pb = _problem(seed, chain)
    conf = S.MemoScorer(S.EvaluatorExact(pb))
    screen = Distorted(conf, amp, np.array([0.37, 0.91, 0.53, 0.29]))
    res = algorithm1(pb, [2, 3], [1, 2], exact=screen, confirm=conf,
                       options=Algorithm1Options(confirm_top=top, confirm_passes=passes))
    subs = [r for r in res.records if r.D > 1]
    assert subs
    for r in subs:
        cfg = r.config()
        assert r.makespan_us == conf.cache[cfg]
        assert r.screen_us == pytest.approx(screen(cfg), rel=1e-12)
        assert pb.space(r.D).contains(np.array(r.alloc))
        same = [v for c, v in conf.cache.items()
                if (c.D, c.microbatch, c.seg_of, c.w) == (r.D, r.microbatch, r.seg_of, r.w)]
        assert min(same) == r.makespan_us
        assert 1 <= r.confirm_calls
        assert 0 <= r.screen_rank


@given(seed=st.integers(0, 50), chain=st.booleans())
@HS
def test_a_perfect_screen_never_loses(seed, chain):
    """With the confirming scorer as its own screen, each record is at most the search's
    without confirmation (the screen's best is that search's choice, and confirming only
    re-scores and polishes it); without ``confirm`` the records carry no confirmation."""
    pb = _problem(seed, chain)
    plain = algorithm1(pb, [2, 3], [1, 2], exact=S.MemoScorer(S.EvaluatorExact(pb)))
    ex = S.MemoScorer(S.EvaluatorExact(pb))
    conf = algorithm1(pb, [2, 3], [1, 2], exact=ex, confirm=ex)
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
