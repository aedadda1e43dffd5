"""Lane-major layout of the contention kernel (``subgpu_jax.score.lanes``): the level-by-level
completion times and the overlap integrals against O(T^2) numpy oracles on random durations."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from subgpu_jax.model.graph import Deployment, build_graph
from subgpu_jax.model.models import get_model
from subgpu_jax.score.lanes import LanePlan, lane_integrals, level_completion_times
from subgpu_jax.space.config import chain_cut
from subgpu_jax.space.taskdag import build_task_dag

DEP = Deployment(num_gpus=8, attn_tp=8, attn_dp=1, moe_ep=8, global_batch=256)


@pytest.fixture(scope="module")
def plans():
    """(dag, plan) of three structures of gpt-oss-20b at m = 2: D = 3, D = 3 with w = 1, and
    D = 2 with 2 streams per stage."""
    g = build_graph(get_model("gpt-oss-20b"), DEP, 2)
    out = []
    for starts, D, w, k in (([6, 15], 3, 0, 1), ([3, 10, 21], 3, 1, 1), ([9], 2, 0, 2)):
        dag = build_task_dag(g.n, g.edges, g.cross_edges, chain_cut(g.n, starts), D, w,
                             g.num_regions, g.microbatches, "wavefront", streams_per_stage=k)
        out.append((dag, LanePlan.from_dag(dag)))
    return out


def _oracle(dag, tau):
    """C by the recurrence in dispatch order; overlap integrals of all pairs on other lanes."""
    T = dag.T
    C = np.zeros(T)
    for i in range(T):
        C[i] = max((C[j] for j in dag.preds(i)), default=0.0) + tau[i]
    S = C - tau
    ln = dag.lanes()
    ov = np.maximum(np.minimum(C[:, None], C[None]) - np.maximum(S[:, None], S[None]), 0.0)
    ov[ln[:, None] == ln[None]] = 0.0
    return C, S, ov


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), which=st.integers(0, 2))
def test_levels_and_integrals_match_oracle(plans, seed, which):
    """Random durations (some zero): the level program gives the recurrence's completion times
    exactly (same max and add per task), and the lane integrals equal sum_j overlap(i, j) *
    rate_j over all tasks j on other lanes (the plan's pairs are the only ones that can
    overlap)."""
    dag, plan = plans[which]
    rng = np.random.default_rng(seed)
    tau = rng.uniform(0.0, 50.0, dag.T) * (rng.random(dag.T) > 0.1)
    rate = rng.uniform(0.0, 2.0, (3, dag.T))
    C, S, ov = _oracle(dag, tau)
    slot = np.asarray(plan.slot)[:dag.T]
    H = plan.valid.shape[0]
    th = np.zeros(H)
    th[slot] = tau
    got_C = np.asarray(level_completion_times(plan.levels, jnp.asarray(th, jnp.float32)))
    np.testing.assert_allclose(got_C[slot], C, rtol=1e-5, atol=1e-3)
    for unrolled in (False, True):
        again = level_completion_times(plan.levels, jnp.asarray(th, jnp.float32), unrolled)
        np.testing.assert_array_equal(np.asarray(again), got_C)
    rh = np.zeros((3, H))
    rh[:, slot] = rate
    Sh, Ch = np.zeros(H), np.zeros(H)
    Sh[slot], Ch[slot] = S, C
    got = np.asarray(lane_integrals(plan, jnp.asarray(Sh), jnp.asarray(Ch), jnp.asarray(rh)))
    np.testing.assert_allclose(got[:, slot], rate @ ov.T, rtol=1e-4, atol=1e-3)
    assert np.all(got[:, ~np.asarray(plan.valid)] == 0.0)


def test_padding_errors(plans):
    dag, _ = plans[0]
    with pytest.raises(ValueError, match="paddings"):
        LanePlan.from_dag(dag, pad_positions=2)


def test_loop_form_equals_unrolled(plans, monkeypatch):
    """Above ``UNROLL_MAX_TRIPLES`` the integrals run as a ``fori_loop`` over the triples: the
    same sums in the same order per row, so the same numbers."""
    import subgpu_jax.score.lanes as lanes

    rng = np.random.default_rng(3)
    for dag, plan in plans:
        H = plan.valid.shape[0]
        v = np.asarray(plan.valid)
        C = jnp.asarray(rng.uniform(10, 100, H) * v, jnp.float32)
        S = jnp.asarray(np.asarray(C) - rng.uniform(0, 10, H) * v, jnp.float32)
        r = jnp.asarray(rng.uniform(0, 1, (3, H)) * v, jnp.float32)
        want = np.asarray(lane_integrals(plan, S, C, r))
        monkeypatch.setattr(lanes, "UNROLL_MAX_TRIPLES", 0)
        got = np.asarray(lanes.lane_integrals(plan, S, C, r))
        monkeypatch.setattr(lanes, "UNROLL_MAX_TRIPLES", 512)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-5)
