"""k streams per stage (docs/method.md, "Streams per stage"): the task DAG's stage edge, the event
simulator running up to k tasks of a stage at once, its SM-sharing rule, and the static scorers.

* The stage edge of task i is the task k positions earlier on its stage (brute force over the
  dispatch order); k = 1 is the previous task on the stage and changes nothing; k >= the tasks of
  a stage leaves no stage edge, and then the isolated simulator's makespan is the longest data
  path (networkx).
* Hypothesis invariants on random small instances: with contention off the makespan is the
  longest path of the augmented DAG for every k (networkx oracle) and never grows from k to a
  multiple of k. It may grow from k to a larger k that is not a multiple (round-robin streams
  are nested only along multiples): a counterexample is kept as a test. With contention on, a
  task starts only after its data predecessors and the task k positions earlier on its stage
  ended, no stage runs more than k tasks at once, and T >= the longest data path of the
  simulated task durations.
* ``share_pool`` is max-min fair water-filling (hypothesis), and the simulator applies it under
  ``pool_sharing="fair"``: two compute-only kernels on the two lanes of one pool each run exactly
  as fast as alone on their hand-derived share. ``share_pool_fifo`` serves kernels in launch
  order with at least one SM each (hypothesis), and the simulator applies it by default: the
  first kernel runs as fast as alone on all but one SM, the second finishes on the whole pool.
* ``Config.streams_per_stage`` is validated for every graph.
"""

from __future__ import annotations

import dataclasses
import json

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from subgpu_jax.model.graph import REFERENCE_DEPLOYMENT, Kernel, build_graph
from subgpu_jax.model.hardware import get_hardware
from subgpu_jax.model.models import get_model
from subgpu_jax.model.synthetic import coarse_hardware, synthetic_workload
from subgpu_jax.score.evaluator import Evaluator
from subgpu_jax.sim.contention import ContentionModel
from subgpu_jax.sim.eventsim import EventSimulator, share_pool, simulate, simulate_streams
from subgpu_jax.sim.simstate import share_pool_fifo
from subgpu_jax.space.config import (Config, cut_from_starts, enumerate_allocations,
                                     enumerate_cuts)
from subgpu_jax.space.taskdag import build_task_dag

H200 = get_hardware("H200")
HW = coarse_hardware()
OFF = ContentionModel.off()


def _instance(seed: int, D: int, m: int, k: int = 1):
    """A random small instance: synthetic region (6 kernels, 3 regions), a random legal cut with
    D stages (w = 0), a random allocation of the coarse preset, k streams per stage."""
    wl = synthetic_workload(seed, n=6, num_regions=3)
    g = wl.graph(m)
    rng = np.random.default_rng(seed)
    cuts = list(enumerate_cuts(g.n, g.edges, D))
    seg = cuts[int(rng.integers(len(cuts)))]
    allocs = enumerate_allocations(HW.sm_budget, D, HW.sm_quantum, HW.min_pool_sms)
    alloc = tuple(int(a) for a in allocs[int(rng.integers(len(allocs)))])
    cfg = Config(D=D, w=0, seg_of=seg, alloc=alloc, microbatch=wl.batch // m,
                 streams_per_stage=k)
    return g, cfg


def _longest_path(dag, tau, stage_edges: bool) -> float:
    """Longest path through the task DAG with task weights ``tau`` (networkx topological order;
    data edges, plus the stage edges when ``stage_edges``)."""
    G = nx.DiGraph()
    G.add_nodes_from(range(dag.T))
    for i in range(dag.T):
        G.add_edges_from((j, i) for j in (dag.preds(i) if stage_edges else dag.data_preds[i]))
    best = {}
    for i in nx.topological_sort(G):
        best[i] = max((best[j] for j in G.predecessors(i)), default=0.0) + float(tau[i])
    return max(best.values())


def _k(cfg, k):
    return dataclasses.replace(cfg, streams_per_stage=k)


# ============================================================================ task DAG
@pytest.mark.parametrize("k", [1, 2, 3, 7])
def test_stage_edge_is_k_positions_earlier(k):
    dag = build_task_dag(4, [(0, 1), (1, 2), (2, 3)], [(3, 0)], (0, 0, 1, 2), 3, 0, 3, 4,
                         "wavefront", streams_per_stage=k)
    for s in range(3):
        on = [i for i in range(dag.T) if dag.stage[i] == s]
        for q, i in enumerate(on):
            assert dag.stage_pred[i] == (on[q - k] if q >= k else -1)
    assert (dag.stage_pred >= 0).sum() == sum(max(0, int((dag.stage == s).sum()) - k)
                                              for s in range(3))
    with pytest.raises(ValueError, match="streams_per_stage"):
        build_task_dag(4, [(0, 1)], [], (0, 0, 1, 1), 2, 0, 1, 1, streams_per_stage=0)


def test_one_stream_unchanged_and_enough_streams_give_the_data_path():
    g, cfg = _instance(3, 2, 2)
    base = simulate(g, cfg, HW, OFF, cache="none")
    assert simulate(g, _k(cfg, 1), HW, OFF, cache="none").makespan == base.makespan
    wide = simulate(g, _k(cfg, g.num_regions * g.microbatches), HW, OFF, cache="none")
    assert (wide.dag.stage_pred == -1).all()
    assert wide.makespan == pytest.approx(_longest_path(wide.dag, wide.tau, False), rel=1e-12)
    assert wide.makespan <= base.makespan


# ============================================================================ invariants
@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), D=st.integers(2, 3), m=st.sampled_from([1, 2, 4]))
def test_isolated_makespan_is_maxplus_and_nonincreasing_along_multiples(seed, D, m):
    """With contention off T is the longest path of the augmented DAG for every k, and
    T(k') <= T(k) whenever k divides k': the streams of k' refine those of k (task i's stream
    is its position mod k), so the edge to i - k' is implied by a chain of edges of k."""
    g, cfg = _instance(seed, D, m)
    T = {}
    for k in (1, 2, 3, 4, 6):
        r = simulate(g, _k(cfg, k), HW, OFF, cache="none")
        T[k] = r.makespan
        assert T[k] == pytest.approx(_longest_path(r.dag, r.tau, True), rel=1e-12)
    for k, k2 in ((1, 2), (2, 4), (1, 3), (3, 6), (2, 6), (1, 4), (1, 6)):
        assert T[k2] <= T[k] * (1 + 1e-12)


def test_more_streams_that_are_not_a_multiple_can_be_slower():
    """k = 3 is slower than k = 2 here (contention off): the task 3 positions earlier ends after
    the task 2 positions earlier, so T is not monotone in k across non-multiples."""
    g, cfg = _instance(1, 2, 4)
    T = {k: simulate(g, _k(cfg, k), HW, OFF, cache="none").makespan for k in (1, 2, 3)}
    assert T[3] > T[2] * 1.05 and T[1] > T[3]


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), D=st.integers(2, 3), m=st.sampled_from([1, 2, 4]),
       k=st.integers(1, 4), cache=st.sampled_from(["lru", "none"]))
def test_contention_respects_data_and_stream_order(seed, D, m, k, cache):
    g, cfg = _instance(seed, D, m, k)
    r = simulate(g, cfg, HW, ContentionModel(), cache=cache)
    dag = r.dag
    assert r.makespan >= _longest_path(dag, r.tau, False) * (1 - 1e-12)
    for i in range(dag.T):
        for j in dag.data_preds[i]:
            assert r.task_start[i] >= r.task_end[j]
        if dag.stage_pred[i] >= 0:
            assert r.task_start[i] >= r.task_end[dag.stage_pred[i]]
    for s in range(D):  # never more than k tasks of a stage at once
        on = np.flatnonzero(dag.stage == s)
        ev = sorted([(r.task_start[i], 1) for i in on] + [(r.task_end[i], -1) for i in on])
        assert max(np.cumsum([e[1] for e in ev])) <= k


def test_evaluator_takes_streams_through_the_dag():
    """The max-plus evaluator with k streams equals the isolated simulator (gpt-oss-20b)."""
    g = build_graph(get_model("gpt-oss-20b"), REFERENCE_DEPLOYMENT, 4)
    R = REFERENCE_DEPLOYMENT.requests_per_gpu
    cfg = Config(D=2, w=1, seg_of=cut_from_starts(g.n, g.edges, [15, 16]), alloc=(64, 64),
                 microbatch=R // 4, streams_per_stage=2)
    r = simulate(g, cfg, H200, OFF, cache="none")
    ev = Evaluator.for_config(g, cfg, H200)
    assert (ev.dag.stage_pred == r.dag.stage_pred).all()
    assert r.makespan == pytest.approx(float(ev.makespan(np.array([cfg.alloc]))[0]), rel=2e-6)
    assert r.makespan < simulate(g, _k(cfg, 1), H200, OFF, cache="none").makespan


# ============================================================================ sharing rule
@settings(max_examples=200, deadline=None)
@given(pool=st.integers(1, 200), wants=st.lists(st.integers(1, 300), min_size=1, max_size=6))
def test_share_pool_is_max_min_fair(pool, wants):
    s = share_pool(pool, [float(w) for w in wants])
    if sum(wants) <= pool:
        assert s is None
        return
    assert sum(s) == pytest.approx(pool)
    for x, w in zip(s, wants):
        assert 0 < x <= w
    free = [x for x, w in zip(s, wants) if x < w]  # not capped by their want: equal, largest
    assert free and max(free) - min(free) <= 1e-9 * pool
    assert all(x <= max(free) * (1 + 1e-12) for x in s)


def _compute_kernel(name: str, ctas: int) -> Kernel:
    return Kernel(name=name, op="x", category="mlp", layer=0, flops=4e11, dtype="bf16",
                  tensor=True, ctas=ctas)


@pytest.mark.parametrize("ctas,want", [((512, 512), (32, 32)), ((8, 512), (8, 56)),
                                       ((8, 16), (8, 16))])
def test_lanes_of_one_pool_share_its_sms(ctas, want):
    """Two compute-only kernels (no bytes: no HBM or L2 interplay; power below the chip cap)
    started together on the two lanes of one 64-SM pool each run exactly as fast as alone on
    the hand-derived share: halves; or its 8 CTAs and the other 56; or both their CTAs. When
    one ends first the other keeps its share (it is capped by its CTAs)."""
    model = ContentionModel(compute_gain=1.0, pool_sharing="fair")
    a, b = _compute_kernel("a", ctas[0]), _compute_kernel("b", ctas[1])
    jobs = [(0, (), 0, 0, (0,)), (1, (), 0, 0, (1,))]
    r = EventSimulator([a, b], [64, 64], jobs, H200, model, "none",
                       pool_of_stage=[0, 0]).run()
    assert list(r.task_start) == [0.0, 0.0]
    for i, (kern, p) in enumerate(zip((a, b), want)):
        alone = simulate_streams([(p, [kern])], H200, model, "none").makespan
        assert r.task_end[i] == pytest.approx(alone, rel=1e-12)
    with pytest.raises(ValueError, match="pool_of_stage"):
        EventSimulator([a], [64, 32], [(0, (), 0, 0, (0,))], H200, pool_of_stage=[0, 0])


@settings(max_examples=200, deadline=None)
@given(pool=st.integers(8, 200), wants=st.lists(st.integers(1, 300), min_size=1, max_size=6),
       starts=st.lists(st.floats(0, 100), min_size=6, max_size=6))
def test_share_pool_fifo_serves_launch_order(pool, wants, starts):
    w = [float(x) for x in wants]
    t = starts[:len(w)]
    s = share_pool_fifo(pool, w, t)
    if sum(wants) <= pool:
        assert s is None
        return
    n = len(w)
    assert sum(s) == pytest.approx(pool)
    assert all(1.0 <= x <= max(1.0, y) + 1e-9 for x, y in zip(s, w))
    order = sorted(range(n), key=lambda i: (t[i], i))
    first = order[0]
    assert s[first] == pytest.approx(min(w[first], pool - (n - 1)))
    # a kernel gets more than its one SM only if every earlier one got all it wanted
    for j, i in enumerate(order):
        if s[i] > 1.0 + 1e-9:
            assert all(s[e] == pytest.approx(max(1.0, w[e])) for e in order[:j])


def test_lanes_of_one_pool_fifo_by_hand():
    """Default (fifo): two compute-only kernels of 512 CTAs started together on the two lanes of
    one 64-SM pool. Lane 0 (first in a tie) gets 63 SMs and ends at its alone time on 63; lane 1
    runs on 1 SM until then, having done t_a / alone(1) of its work, and the rest on 64 SMs:
    t_b = t_a + (1 - t_a / alone(1)) x (alone(64) - launch) (compute-only: progress is linear in
    time at a fixed SM count; ``launch`` = the launch overhead every kernel pays once)."""
    model = ContentionModel(compute_gain=1.0)
    a, b = _compute_kernel("a", 512), _compute_kernel("b", 512)
    jobs = [(0, (), 0, 0, (0,)), (1, (), 0, 0, (1,))]
    r = EventSimulator([a, b], [64, 64], jobs, H200, model, "none",
                       pool_of_stage=[0, 0]).run()
    alone = {p: simulate_streams([(p, [a])], H200, model, "none").makespan for p in (1, 63, 64)}
    t_a = alone[63]
    launch = H200.launch_us
    assert r.task_end[0] == pytest.approx(t_a, rel=1e-9)
    done = (t_a - launch) / (alone[1] - launch)
    assert r.task_end[1] == pytest.approx(t_a + (1 - done) * (alone[64] - launch), rel=1e-6)


# ============================================================================ config
def test_streams_per_stage_is_validated():
    g, cfg = _instance(1, 2, 2)
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="streams_per_stage"):
            simulate(g, _k(cfg, bad), HW)
    deployed = build_graph(get_model("gpt-oss-20b"), REFERENCE_DEPLOYMENT, 4)
    R = REFERENCE_DEPLOYMENT.requests_per_gpu
    c = Config(D=2, w=1, seg_of=cut_from_starts(deployed.n, deployed.edges, [15, 16]),
               alloc=(64, 64), microbatch=R // 4, streams_per_stage=0)
    with pytest.raises(ValueError, match="config.streams_per_stage"):
        simulate(deployed, c, H200)


def test_cli_simulate_streams_per_stage(capsys):
    from subgpu_jax.app.cli import main

    args = ["simulate", "--model", "gpt-oss-20b", "--hardware", "H200", "--no-contention",
            "--cache", "none", "--json"]
    assert main(args + ["--streams-per-stage", "2"]) == 0
    two = json.loads(capsys.readouterr().out)
    assert main(args) == 0
    one = json.loads(capsys.readouterr().out)
    assert two["config"]["streams_per_stage"] == 2 and one["config"]["streams_per_stage"] == 1
    assert two["config"]["makespan_us"] < one["config"]["makespan_us"]
    assert main(args + ["--streams-per-stage", "0"]) == 2
    assert "--streams-per-stage must be an integer in 1..64, got 0" in capsys.readouterr().err
