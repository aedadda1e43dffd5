"""``pool_sharing="tail"``: ``simstate.share_pool_tail``, ``Lane.remaining_us`` and the
``ContentionModel`` fields (docs/verdicts.md "Two large kernels on one pool";
experiments/corun_lanes_fit.py fits theta).

* Hypothesis invariants: None exactly when the wants fit the pool; otherwise the grants sum to
  the pool, each is at least 1 SM and at most its want; with theta = 0, or with no kernel
  carrying trailing device kernels, the grants are ``share_pool_fifo``'s exactly; the first
  launched kernel's grant never grows with theta; lane order does not matter (only launch order).
* Hand-derived case (the function's docstring): pool 128, wants (128, 128), A launched first
  with 60 µs left and trailing kernels, B with 240 µs, theta 0.5: A 1 + 126 / 3 = 43 SMs, B 85;
  theta 1: A 1 + 126 x 60 / 300 = 26.2, B 101.8; without trailing kernels A keeps 127 (fifo).
* ``Lane.remaining_us`` of a compute-only kernel alone: its active time alone when it becomes
  active, falling linearly to 0 (oracle: the simulator's own lone makespan).
* ``ContentionModel``: "tail" is the default; "tail" and ``tail_weight`` >= 0 are accepted,
  a negative, NaN or non-number theta and unknown rules are refused with one line.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings, strategies as st

from subgpu_jax.model.graph import Kernel
from subgpu_jax.model.hardware import get_hardware
from subgpu_jax.sim.contention import ContentionModel
from subgpu_jax.sim.eventsim import EventSimulator
from subgpu_jax.sim.simstate import ACTIVE, share_pool_fifo, share_pool_tail

H200 = get_hardware("H200")

_case = st.integers(1, 6).flatmap(lambda n: st.tuples(
    st.integers(8, 200),
    st.lists(st.integers(1, 300), min_size=n, max_size=n),
    st.lists(st.floats(0, 100), min_size=n, max_size=n),
    st.lists(st.floats(0, 1e4), min_size=n, max_size=n),
    st.lists(st.booleans(), min_size=n, max_size=n)))


@settings(max_examples=300, deadline=None)
@given(case=_case, theta=st.floats(0, 10))
def test_shares_sum_to_the_pool_within_one_sm_and_the_want(case, theta):
    pool, wants, starts, rem, tails = case
    w = [float(x) for x in wants]
    s = share_pool_tail(pool, w, starts, rem, tails, theta)
    if sum(w) <= pool:
        assert s is None
        return
    assert sum(s) == pytest.approx(pool, rel=1e-12)
    assert all(1.0 - 1e-12 <= x <= y + 1e-9 for x, y in zip(s, w))


@settings(max_examples=300, deadline=None)
@given(case=_case, theta=st.floats(0, 10))
def test_fifo_is_the_limit(case, theta):
    """theta = 0, or no trailing kernels at any theta: exactly ``share_pool_fifo``."""
    pool, wants, starts, rem, tails = case
    w = [float(x) for x in wants]
    fifo = share_pool_fifo(pool, w, starts)
    assert share_pool_tail(pool, w, starts, rem, tails, 0.0) == fifo
    assert share_pool_tail(pool, w, starts, rem, [False] * len(w), theta) == fifo


@settings(max_examples=200, deadline=None)
@given(case=_case, t1=st.floats(0, 5), t2=st.floats(0, 5))
def test_first_kernel_never_gains_from_theta_and_lane_order_is_irrelevant(case, t1, t2):
    pool, wants, starts, rem, tails = case
    w = [float(x) for x in wants]
    lo, hi = sorted((t1, t2))
    a, b = share_pool_tail(pool, w, starts, rem, tails, lo), share_pool_tail(
        pool, w, starts, rem, tails, hi)
    if a is None:
        return
    first = min(range(len(w)), key=lambda i: (starts[i], i))
    assert b[first] <= a[first] + 1e-9
    if len(set(starts)) == len(starts):        # no ties: lane order cannot matter
        rev = share_pool_tail(pool, w[::-1], starts[::-1], rem[::-1], tails[::-1], hi)
        assert rev[::-1] == pytest.approx(b, rel=1e-12, abs=1e-12)


def test_hand_derived_two_kernels():
    wants, starts, rem = [128.0, 128.0], [0.0, 2.0], [60.0, 240.0]
    assert share_pool_tail(128, wants, starts, rem, [True, False], 0.5) == pytest.approx(
        [43.0, 85.0])
    assert share_pool_tail(128, wants, starts, rem, [True, True], 1.0) == pytest.approx(
        [1 + 126 * 60 / 300, 1 + 126 * 240 / 300])
    assert share_pool_tail(128, wants, starts, rem, [False, True], 0.5) == [127.0, 1.0]
    # B launched first (lane 1): the order of launch, not of lanes, decides
    assert share_pool_tail(128, wants, [2.0, 0.0], rem[::-1], [False, True], 0.5) == \
        pytest.approx([85.0, 43.0])
    # a later kernel that wants little leaves the rest to A whatever theta says
    assert share_pool_tail(128, [128.0, 8.0], starts, [1.0, 1e6], [True, True], 1.0) == \
        pytest.approx([120.0, 8.0])


def test_remaining_us_of_a_lone_compute_kernel():
    """Compute-only (no bytes), so progress is linear in time at a fixed SM count."""
    k = Kernel(name="g", op="x", category="mlp", layer=0, flops=4e11, dtype="bf16",
               tensor=True, ctas=512)
    model = ContentionModel(compute_gain=1.0)
    sim = EventSimulator([k], [64], [(0, (), 0, 0, (0,))], H200, model, "none")
    u = sim.lanes[0]
    assert u.remaining_us(H200.launch_us) == 0.0          # not started
    while u.phase != ACTIVE:
        assert sim.step()
    t_on = sim.t
    active = u.work.static_us - H200.launch_us - u.work.fixed_us
    assert u.remaining_us(H200.launch_us) == pytest.approx(active, rel=1e-12)
    end = sim.run().makespan
    assert end - t_on == pytest.approx(active, rel=1e-9)   # the estimate is the lone time
    u.phase, u.F = ACTIVE, 0.25 * u.work.flops * u.work.scale
    assert u.remaining_us(H200.launch_us) == pytest.approx(0.25 * active, rel=1e-12)


def test_contention_model_fields():
    assert ContentionModel().pool_sharing == "tail"   # the default since 2026-12-06
    m = ContentionModel(pool_sharing="tail", tail_weight=0.0)
    assert m.replace(tail_weight=2).tail_weight == 2
    for bad in (-0.1, math.nan, math.inf, None, "0.5", True):
        with pytest.raises(ValueError, match=r"^contention\.tail_weight "):
            ContentionModel(pool_sharing="tail", tail_weight=bad)
    with pytest.raises(ValueError, match=r"pool_sharing must be 'fifo', 'fair' or 'tail'"):
        ContentionModel(pool_sharing="wave")


def _lanes_run(model, tails=None):
    """Two compute-only kernels (512 CTAs, 4e11 FLOP each) on the two lanes of one 64-SM pool,
    started together (lane 0 first in the tie); returns (A end, B end) in µs."""
    a, b = (Kernel(name=n, op="x", category="mlp", layer=0, flops=4e11, dtype="bf16",
                   tensor=True, ctas=512) for n in ("a", "b"))
    sim = EventSimulator([a, b], [64, 64], [(0, (), 0, 0, (0,)), (1, (), 0, 0, (1,))], H200,
                         model, "none", pool_of_stage=[0, 0], record=False)
    if tails is not None:
        sim.tails = tails
    r = sim.run()
    return float(r.task_end[0]), float(r.task_end[1])


def test_event_simulator_dispatches_tail():
    """In the event simulator: "tail" without trailing kernels, or at theta 0, is "fifo" to
    the last bit; with A's op carrying trailing kernels and theta 1 the two equal kernels share
    the pool by remaining time and end together (hand-derived: equal work, equal weights), and
    B ends when it ends under fifo (the pool's work is conserved: compute-only kernels)."""
    fifo = _lanes_run(ContentionModel(compute_gain=1.0))
    assert _lanes_run(ContentionModel(compute_gain=1.0, pool_sharing="tail"),
                      [False, False]) == fifo
    assert _lanes_run(ContentionModel(compute_gain=1.0, pool_sharing="tail", tail_weight=0.0),
                      [True, False]) == fifo
    a, b = _lanes_run(ContentionModel(compute_gain=1.0, pool_sharing="tail", tail_weight=1.0),
                      [True, False])
    assert a > fifo[0] * 1.5
    assert a == pytest.approx(b, rel=0.02) and b == pytest.approx(fifo[1], rel=0.02)
    # the default table: an op kind of one device kernel ("x" is not listed) has no tail
    sim = EventSimulator([Kernel(name="k", op="x", category="mlp", layer=0, flops=1e9,
                                 dtype="bf16", tensor=True, ctas=8)], [8],
                         [(0, (), 0, 0, (0,))], H200,
                         ContentionModel(pool_sharing="tail"), "none", record=False)
    sim.run()
    assert sim.tails is None   # one lane per pool: never needed, never built
