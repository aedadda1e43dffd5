"""The max-plus kernels of the static evaluator (``score.maxplus``, issue 42 item 4): the Pallas
kernel, run by Pallas' interpreter on the CPU, gives the XLA kernel's float32 makespans bit for
bit (same max and add order) on every candidate of small chain instances with and without
boundary reuse and on a fixed cut of a DAG with cross edges, and the exhaustive search keeps the
same top records; the registry makes each kernel by name and refuses bad names and options."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from subgpu_jax.model.graph import StaticDurationModel
from subgpu_jax.model.synthetic import coarse_hardware, synthetic_workload
from subgpu_jax.score.evaluator import Evaluator
from subgpu_jax.score.massive import MassiveEvaluator
from subgpu_jax.score.maxplus import (DEFAULT_MAXPLUS_KERNEL, MAXPLUS_KERNELS, DagProgram,
                                      PallasMaxPlus, XlaMaxPlus, dag_makespan,
                                      maxplus_kernel)
from subgpu_jax.space.config import chain_cut, enumerate_allocations
from subgpu_jax.space.taskdag import build_task_dag

HW = coarse_hardware("H200", quantum=16, minimum=16, budget=128)


def _instance(n=7, L=3, m=2, chain=True, seed=3):
    g = synthetic_workload(seed, n=n, chain=chain, num_regions=L, batch=4).graph(m)
    return g, np.asarray(StaticDurationModel(HW).table(g))


@pytest.mark.parametrize("D,w", [(3, 0), (3, 1), (2, 1)])
def test_pallas_equals_xla_on_every_chain_candidate(D, w):
    g, table = _instance()
    dag = build_task_dag(g.n, g.edges, g.cross_edges, chain_cut(g.n, range(1, D + w)), D, w,
                         g.num_regions, g.microbatches)

    def run(kernel):
        me = MassiveEvaluator(dag, table, D, w, HW.sm_budget, HW.sm_quantum, HW.min_pool_sms,
                              mode="chain", topk=6, kernel=kernel, cut_block=4, alloc_block=16)
        return me, me.run()

    me_x, rx = run(XlaMaxPlus())
    me_p, rp = run(PallasMaxPlus(block=32, interpret=True))
    assert rx.evaluated == rp.evaluated == me_x.total
    np.testing.assert_array_equal(rp.values, rx.values)
    np.testing.assert_array_equal(rp.cut_ranks, rx.cut_ranks)
    np.testing.assert_array_equal(rp.alloc_ranks, rx.alloc_ranks)
    # every candidate of a few cuts, bit for bit, and the XLA kernel against the evaluator
    A = jnp.asarray(enumerate_allocations(HW.sm_budget, D, HW.sm_quantum, HW.min_pool_sms),
                    jnp.int32)
    flat = me_x.seg_tab.reshape(-1)
    stage = jnp.asarray(me_x.stage, jnp.int32)
    prog = DagProgram.from_dag(dag)
    for rank in (0, me_x.n_cuts // 2, me_x.n_cuts - 1):
        seg = me_x.cut_of_rank(rank)
        b = np.flatnonzero(np.diff(np.r_[-1, seg, -2]))            # segment starts, then n
        sid = jnp.asarray(b[:-1] * (g.n + 1) + b[1:], jnp.int32)[None]
        x = np.asarray(XlaMaxPlus().block_makespans(prog, flat, sid, A, stage, me_x.N1))
        p = np.asarray(PallasMaxPlus(block=64, interpret=True).block_makespans(
            prog, flat, sid, A, stage, me_x.N1))
        np.testing.assert_array_equal(p, x)
        ev = Evaluator(g, seg, D, w, HW, table=table)
        np.testing.assert_array_equal(x[0], ev.makespan(np.asarray(A)))


def test_pallas_fixed_cut_with_cross_edges_and_a_ragged_block():
    g, table = _instance(n=9, L=2, m=2, chain=False, seed=5)
    assert g.cross_edges and g.edges != [(i, i + 1) for i in range(g.n - 1)]
    ev = Evaluator(g, chain_cut(g.n, [3, 6]), 3, 0, HW, table=table)
    kw = dict(mode="fixed", seg_of=ev.seg_of, topk=4)
    x = MassiveEvaluator(ev.dag, table, 3, 0, HW.sm_budget, HW.sm_quantum, HW.min_pool_sms, **kw)
    p = MassiveEvaluator(ev.dag, table, 3, 0, HW.sm_budget, HW.sm_quantum, HW.min_pool_sms,
                         kernel=PallasMaxPlus(block=16, interpret=True), **kw)
    rx, rp = x.run(), p.run()
    np.testing.assert_array_equal(rp.values, rx.values)
    np.testing.assert_array_equal(rp.alloc_ranks, rx.alloc_ranks)


def test_registry_and_bad_options():
    assert DEFAULT_MAXPLUS_KERNEL == "xla" and set(MAXPLUS_KERNELS) == {"xla", "pallas"}
    assert isinstance(maxplus_kernel("pallas", block=128), PallasMaxPlus)
    with pytest.raises(ValueError, match="kernel must be one of xla, pallas"):
        maxplus_kernel("triton")
    for bad in (0, 8, 100, True, 2.5):
        with pytest.raises(ValueError, match="block"):
            PallasMaxPlus(block=bad)
    with pytest.raises(ValueError, match="num_warps"):
        PallasMaxPlus(num_warps=0)


@pytest.mark.parametrize("B,k,row", [(5000, 8, 256), (4096, 8, 1024), (300, 5, 256),
                                     (1000, 300, 256)])
def test_block_topk_equals_one_top_k_with_ties(B, k, row):
    """The two-stage top-k gives ``lax.top_k``'s values and indices (ties to the lowest index)
    on values with many ties and a ragged last row."""
    import jax

    from subgpu_jax.score.massive import block_topk

    rng = np.random.default_rng(B + k)
    ms = jnp.asarray(rng.integers(0, 40, B).astype(np.float32))
    v, i = block_topk(ms, k, row)
    neg, j = jax.lax.top_k(-ms, k)
    np.testing.assert_array_equal(np.asarray(v), -np.asarray(neg))
    np.testing.assert_array_equal(np.asarray(i), np.asarray(j))


def test_blocks_as_before_give_the_same_records():
    """``precompute_allocations=False, two_stage_topk=False`` (each block unranks its own
    allocations and takes one top-k: the blocks before issue 42's change, ``--baseline`` of
    ``exhaustive_gridpoint.py``) keep the same top records as the default blocks."""
    g, table = _instance(n=8)
    D, w = 3, 1
    dag = build_task_dag(g.n, g.edges, g.cross_edges, chain_cut(g.n, range(1, D + w)), D, w,
                         g.num_regions, g.microbatches)

    def run(**kw):
        return MassiveEvaluator(dag, table, D, w, HW.sm_budget, HW.sm_quantum, HW.min_pool_sms,
                                mode="chain", topk=6, cut_block=4, alloc_block=16, **kw).run()

    new, old = run(), run(precompute_allocations=False, two_stage_topk=False)
    np.testing.assert_array_equal(new.values, old.values)
    np.testing.assert_array_equal(new.cut_ranks, old.cut_ranks)
    np.testing.assert_array_equal(new.alloc_ranks, old.alloc_ranks)


from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(max_examples=60, deadline=None)
@given(m=st.sampled_from([2, 4]), D=st.sampled_from([2, 3]), w=st.sampled_from([0, 1]),
       seed=st.integers(0, 2**16), zeros=st.booleans())
def test_transitive_reduction_keeps_the_makespans_bit_for_bit(m, D, w, seed, zeros):
    """``DagProgram.from_dag`` keeps only the transitive reduction's edges (networkx); on random
    float32 durations >= 0 (some exactly 0 when ``zeros``) the reduced program's makespans equal
    the program over every data and stage edge bit for bit, and the reduction is a subset of
    those edges with the same sinks."""
    g, _ = _instance(L=3, m=m)
    dag = build_task_dag(g.n, g.edges, g.cross_edges, chain_cut(g.n, range(1, D + w)), D, w,
                         g.num_regions, g.microbatches)
    red = DagProgram.from_dag(dag)
    full = DagProgram(preds=tuple(dag.preds(i) for i in range(dag.T)), seg=red.seg,
                      sinks=red.sinks, levels=red.levels, K=red.K)
    assert all(set(r) <= set(f) for r, f in zip(red.preds, full.preds))
    rng = np.random.default_rng(seed)
    tau = rng.uniform(0.0, 1e4, size=(64, red.K)).astype(np.float32)
    if zeros:
        tau[rng.random(tau.shape) < 0.3] = 0.0
    t = jnp.asarray(tau)
    np.testing.assert_array_equal(np.asarray(jax.vmap(lambda x: dag_makespan(red, x))(t)),
                                  np.asarray(jax.vmap(lambda x: dag_makespan(full, x))(t)))


def test_transitive_reduction_drops_the_implied_stage_edges():
    """The synthetic chain of 3 regions, m = 4, D = 3, w = 1 (counted with
    ``TaskDAG.preds``: 85 data and stage edges) keeps 81: four edges are implied by longer
    paths. At m = 2 or w = 0 with D = 2 no edge is implied (20 of 20, 42 of 42)."""
    counts = {}
    for m, D, w in ((4, 3, 1), (2, 2, 0), (4, 2, 0)):
        g, _ = _instance(L=3, m=m)
        dag = build_task_dag(g.n, g.edges, g.cross_edges, chain_cut(g.n, range(1, D + w)), D,
                             w, g.num_regions, g.microbatches)
        counts[m, D, w] = (sum(map(len, DagProgram.from_dag(dag).preds)),
                           sum(len(dag.preds(i)) for i in range(dag.T)))
    assert counts == {(4, 3, 1): (81, 85), (2, 2, 0): (20, 20), (4, 2, 0): (42, 42)}
