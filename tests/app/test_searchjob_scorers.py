"""The main job's scorers and strategies (``subgpu_jax.app.searchjob``): the contention-aware
cheap estimator under the event simulator, the static one otherwise, the scorer protocol, the
allocation/cut strategy objects, and ``summary.json`` recording the scorers in use."""

from __future__ import annotations

import json

import numpy as np
import pytest

from subgpu_jax.score.timer import StaticTimer
from subgpu_jax.app import searchjob as sj
from subgpu_jax.app import searchout
from subgpu_jax.app.sweep import GridPoint
from subgpu_jax.search.strategies import (ALLOC_STRATEGIES, CHEAP_ESTIMATORS,
                                          CUT_STRATEGY_REGISTRY, RelaxAllocation)
from subgpu_jax.model.graph import Deployment
from subgpu_jax.model.hardware import get_hardware
from subgpu_jax.model.models import get_model
from subgpu_jax.score.evaluator import Evaluator
from subgpu_jax.score.protocol import Scorer, Smooth, StageService
from subgpu_jax.score.vcontention import ContentionEstimator, VContentionEvaluator
from subgpu_jax.sim.contention import ContentionModel

H200 = get_hardware("H200")
ARCH = get_model("gpt-oss-20b")
DEP = Deployment(num_gpus=8, attn_tp=8, attn_dp=1, moe_ep=8, global_batch=256)


def _cut(n: int, D: int) -> tuple[int, ...]:
    return tuple(min(i * D // n, D - 1) for i in range(n))


def test_cheap_estimator_follows_the_exact_scorer():
    """auto: vcontention under the event simulator, static under the static exact scorer."""
    ev = sj.PointScorer(ARCH, H200)
    st = sj.PointScorer(ARCH, H200, timer=StaticTimer(H200))
    assert ev.scorers == {"cheap": "vcontention", "exact": "event"}
    assert st.scorers == {"cheap": "static", "exact": "static"}
    g = ev.problem(DEP).workload.graph(2)
    seg = _cut(g.n, 2)
    c = ev.problem(DEP).evaluator(seg, 2, 0, 2)
    s = st.problem(DEP).evaluator(seg, 2, 0, 2)
    assert isinstance(c, ContentionEstimator) and type(s) is Evaluator
    A = np.array([[64, 64], [16, 112], [104, 24]])
    want = VContentionEvaluator(g, seg, 2, 0, H200).makespan(A)
    np.testing.assert_allclose(c.makespan(A), want, rtol=1e-6)
    # the capabilities it lends (seeds, relaxation) are the static evaluator's, by composition
    assert not isinstance(c, Evaluator) and isinstance(c.static, Evaluator)
    for cap in (Scorer, StageService, Smooth):
        assert isinstance(c, cap) and isinstance(s, cap)
    np.testing.assert_array_equal(c.stage_service(128), s.stage_service(128))
    np.testing.assert_array_equal(c.smooth(A.astype(float), 5.0), s.smooth(A.astype(float), 5.0))
    assert all(x is y for x, y in zip(c.smooth_terms(), c.static.smooth_terms()))
    # forced static cheap estimator under the event simulator
    assert sj.PointScorer(ARCH, H200, cheap="static").scorers["cheap"] == "static"


def test_contention_estimator_off_is_the_evaluator_and_validates():
    """With contention off the contention-aware estimator equals the max-plus evaluator
    exactly (docs/method.md §3); infeasible rows are rejected on the host."""
    pb = sj.PointScorer(ARCH, H200, timer=StaticTimer(H200)).problem(DEP)
    g = pb.workload.graph(2)
    seg = _cut(g.n, 3)
    e = ContentionEstimator(g, seg, 3, 0, H200, model=ContentionModel.off())
    s = Evaluator(g, seg, 3, 0, H200)
    A = np.array([[40, 56, 32], [8, 8, 112]])
    np.testing.assert_array_equal(e.makespan(A), s.makespan(A))
    with pytest.raises(ValueError, match="not feasible"):
        e.makespan([[40, 56, 30]])
    for obj in (e, s, e.contention):
        assert isinstance(obj, Scorer)


def test_strategy_objects_and_errors():
    sc = sj.PointScorer(ARCH, H200, timer=StaticTimer(H200), alloc_strategy="relax",
                        cut_strategy="screen")
    assert sc.alloc is ALLOC_STRATEGIES["relax"]
    assert sc.cut is CUT_STRATEGY_REGISTRY["screen"] and sc.cut_strategy == "screen"
    assert sc.cheap == CHEAP_ESTIMATORS["static"] and sc.cheap_kind == "static"
    custom = RelaxAllocation(restarts=2, steps=10)
    assert sj.PointScorer(ARCH, H200, alloc_strategy=custom).alloc is custom
    with pytest.raises(ValueError, match="alloc_strategy must be one of pairwise, relax"):
        sj.PointScorer(ARCH, H200, alloc_strategy="greedy")
    with pytest.raises(ValueError, match="cut_strategy must be one of"):
        sj.PointScorer(ARCH, H200, cut_strategy="random")
    with pytest.raises(ValueError, match="cheap must be one of"):
        sj.PointScorer(ARCH, H200, cheap="fast")


def test_grid_point_through_search_job_records_scorers(tmp_path):
    """A two-point grid (temporal + one SubGPU point) with the static exact scorer and the
    contention-aware cheap estimator: the SubGPU record used the cheap estimator, its speedup
    is the temporal makespan over its own, and summary.json names the scorers and
    strategies with their options."""
    sc = sj.PointScorer(ARCH, H200, timer=StaticTimer(H200), cheap="vcontention",
                        alloc_strategy=RelaxAllocation(restarts=2, steps=20))
    pts = [GridPoint(DEP, 1, 1, "wavefront"), GridPoint(DEP, 2, 2, "wavefront")]
    recs = [r for p in pts for r in sc(p)]
    assert [r["mode"] for r in recs] == ["temporal", "subgpu"]
    sub = recs[1]
    assert sub["cheap_evals"] > 0 and sub["exact"] == "static"
    assert sub["speedup_vs_temporal"] == pytest.approx(
        recs[0]["makespan_us"] / sub["makespan_us"])
    summ = searchout.write_outputs(recs, str(tmp_path), "t", sc)
    disk = json.loads((tmp_path / "summary.json").read_text())
    assert disk["scorers"] == summ["scorers"] == {"cheap": "vcontention", "exact": "static"}
    assert disk["strategies"] == {"cut": "proposal", "alloc": "relax", "cut_options": {},
                                  "alloc_options": {"restarts": 2, "steps": 20}}


def test_records_carry_the_input_length(tmp_path):
    """A search at a non-default input length records it, so everything rebuilt from a record
    (the best run of write_outputs, ``subgpu run --from-search``) uses the searched deployment:
    a calibration measured at input_len 2,048 was refused on the rebuilt 32,768 before."""
    import dataclasses
    dep = dataclasses.replace(DEP, input_len=2048, kv_history=2048)
    sc = sj.PointScorer(ARCH, H200, timer=StaticTimer(H200), cheap="vcontention",
                        alloc_strategy=RelaxAllocation(restarts=2, steps=20))
    recs = [r for p in (GridPoint(dep, 1, 1, "wavefront"), GridPoint(dep, 2, 2, "wavefront"))
            for r in sc(p)]
    assert {r["input_len"] for r in recs} == {2048}
    assert {r["kv_history"] for r in recs} == {2048}
