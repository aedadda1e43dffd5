"""The sweep's reuse rule (``app.searchrun.reuses_programs``) and the cheap estimators'
``for_sweep``: a sweep with ``REUSE_MIN_POINTS`` SubGPU grid points of one structure family
reuses its compiled programs, temporal points never count; the contention estimator carries the
flag to its evaluators' options, the static one ignores it, ``auto`` must be resolved first."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from subgpu_jax.app.searchrun import REUSE_MIN_POINTS, reuses_programs, structure_key
from subgpu_jax.search.problem import ContentionEstimators
from subgpu_jax.search.strategies import AutoCheap, ContentionCheap, StaticCheap


def _pt(D, m, policy="wavefront", streams=1):
    return SimpleNamespace(D=D, microbatches=m, policy=policy, streams=streams)


def test_reuse_needs_enough_points_of_one_family():
    n = REUSE_MIN_POINTS
    assert not reuses_programs([])
    assert not reuses_programs([_pt(4, 8)] * (n - 1))
    assert reuses_programs([_pt(4, 8)] * n)
    # as many points, spread over families (each below the minimum): no reuse
    spread = [_pt(2 + i % 4, 8) for i in range(4 * (n - 1))]
    assert max(sum(structure_key(p) == structure_key(q) for q in spread) for p in spread) == n - 1
    assert not reuses_programs(spread)
    # temporal points (D = 1) are not scored by the cheap estimator
    assert not reuses_programs([_pt(1, 1)] * (10 * n))
    # the family is stages, microbatches, policy and streams
    assert not reuses_programs([_pt(4, 8, streams=1 + i % 2) for i in range(2 * (n - 1))])


def test_for_sweep():
    c = ContentionCheap()
    assert c.reuse is False and c.for_sweep(True).reuse is True
    assert c.for_sweep(True).for_sweep(False) == c
    assert c.for_sweep(True) != c        # PointScorer is rebuilt only when it changes
    s = StaticCheap()
    assert s.for_sweep(True) is s
    with pytest.raises(ValueError, match="resolve it first"):
        AutoCheap().for_sweep(True)
    with pytest.raises(ValueError, match="reuse must be True or False"):
        c.for_sweep("yes")
    assert ContentionEstimators(reuse=True).reuse is True
