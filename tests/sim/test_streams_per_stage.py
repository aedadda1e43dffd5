"""k streams per stage in the task DAG and the event simulator.

Oracles: with k = 1 nothing changes; with contention off (isolated durations), when k' divides k the
stage edges of k (task j after task j-k) are implied by those of k' (j after j-k' after j-2k' ...),
so T(k) <= T(k'): T(2) <= T(1), T(4) <= T(2), T(3) <= T(1) (k = 2 and k = 3 are not comparable:
hypothesis found a case where k = 3 is slower than k = 2); with k at least the number of tasks of
every stage no stage edge is left and the makespan is the longest data-only path, computed
independently with networkx; the task DAG's stage predecessor is the task k positions earlier."""

from __future__ import annotations

import dataclasses

import networkx as nx
import pytest
from hypothesis import given, settings, strategies as st

from subgpu_jax.model.hardware import get_hardware
from subgpu_jax.model.synthetic import synthetic_workload
from subgpu_jax.sim.contention import ContentionModel
from subgpu_jax.sim.eventsim import EventSimulator, simulate
from subgpu_jax.space.config import Config, chain_cut, even_allocation
from subgpu_jax.space.taskdag import build_task_dag

H200 = get_hardware("H200")


def _cfg(g, D, m, k=1):
    starts = [max(1, g.n * (d + 1) // (D + 1)) for d in range(D - 1)]
    starts = sorted(set(starts))
    seg = chain_cut(g.n, starts)
    D = max(seg) + 1
    alloc = tuple(int(a) for a in even_allocation(H200.sm_budget, D, H200.sm_quantum,
                                                  H200.min_pool_sms))
    return Config(D=D, w=0, seg_of=seg, alloc=alloc, microbatch=1, policy="wavefront",
                  streams_per_stage=k)


def _graph(seed, m=2):
    wl = synthetic_workload(seed, chain=True)
    return wl, wl.graph(m)


def test_stage_pred_is_k_positions_back():
    dag = build_task_dag(4, [(0, 1), (1, 2), (2, 3)], [(3, 0)], (0, 0, 1, 1), 2, 0, 3, 2,
                         streams_per_stage=2)
    for s in range(2):
        idx = [i for i in range(dag.T) if dag.stage[i] == s]
        for j, i in enumerate(idx):
            assert dag.stage_pred[i] == (idx[j - 2] if j >= 2 else -1)
    with pytest.raises(ValueError, match="streams_per_stage"):
        build_task_dag(4, [(0, 1)], [], (0, 0, 1, 1), 2, 0, 1, 1, streams_per_stage=0)


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10_000), st.integers(2, 3), st.sampled_from([1, 2, 4]))
def test_isolated_makespan_nonincreasing_in_k(seed, D, m):
    wl, g = _graph(seed, m)
    if g.n < D + 1:
        return
    cfg = _cfg(g, D, m)
    cfg = dataclasses.replace(cfg, microbatch=wl.batch // g.microbatches)
    off = ContentionModel.off()
    ts = {k: simulate(g, dataclasses.replace(cfg, streams_per_stage=k), H200, off, cache="none",
                      record=False, validate=False).makespan for k in (1, 2, 3, 4)}
    assert ts[2] <= ts[1] + 1e-6 and ts[4] <= ts[2] + 1e-6 and ts[3] <= ts[1] + 1e-6


def test_k1_unchanged_and_large_k_is_data_only_path():
    wl, g = _graph(3)
    cfg = dataclasses.replace(_cfg(g, 2, 1), microbatch=wl.batch // g.microbatches)
    off = ContentionModel.off()
    base = simulate(g, cfg, H200, off, cache="none", record=False, validate=False)
    same = simulate(g, dataclasses.replace(cfg, streams_per_stage=1), H200, off, cache="none",
                    record=False, validate=False)
    assert base.makespan == same.makespan
    big = dataclasses.replace(cfg, streams_per_stage=10_000)
    r = simulate(g, big, H200, off, cache="none", record=False, validate=False)
    dag = r.dag
    G = nx.DiGraph()
    for i in range(dag.T):
        G.add_node(i, w=float(r.tau[i]))
        for j in dag.data_preds[i]:
            G.add_edge(j, i)
    best = {}
    for i in nx.topological_sort(G):
        best[i] = G.nodes[i]["w"] + max((best[j] for j in G.predecessors(i)), default=0.0)
    assert r.makespan == pytest.approx(max(best.values()), rel=1e-9)


def test_pool_water_filling():
    """Two lanes of one 64-SM pool: kernels wanting 8 and 64 SMs get 8 and 56; two wanting 64
    get 32 each (hand derivation of the water-filling rule)."""
    from subgpu_jax.model.graph import Kernel

    def k(ctas):
        return Kernel(name=f"k{ctas}", op="copy", category="mlp", layer=0, flops=0.0,
                      dtype="bf16", tensor=False, act_reads=(("a", 1e8),),
                      act_writes=(("b", 1e8),), ctas=ctas)

    for wants, got in (((8, 64), (8.0, 56.0)), ((64, 64), (32.0, 32.0))):
        kern = [k(wants[0]), k(wants[1])]
        sim = EventSimulator(kern, [64, 64], [(0, (), 0, 0, (0,)), (1, (), 0, 0, (1,))], H200,
                             ContentionModel(), "none", record=False, pool_of_stage=[0, 0])
        sim.k_sms = [float(wants[0]), float(wants[1])]
        sim.k_pow = [0.1, 0.1]
        sms, _ = sim._share_pools([0, 1])
        assert tuple(sms) == got
    with pytest.raises(ValueError, match="pool_of_stage"):
        EventSimulator([k(8)], [64, 32], [(0, (), 0, 0, (0,))], H200, pool_of_stage=[0, 0])
