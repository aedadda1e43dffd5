"""device-side unranking, unrolled static evaluator, chunked/streamed/sharded exhaustive
search, memory budgets, and a two-process jax.distributed cluster on loopback."""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from subgpu_jax.score.evaluator import Evaluator
from subgpu_jax.model.graph import StaticDurationModel
from subgpu_jax.score.massive import (MassiveEvaluator, StreamingPareto, TopK,
    exhaustive_chain, numpy_makespans, unrank_allocation, unrank_chain_bounds, unrank_combination)
from subgpu_jax.model.synthetic import coarse_hardware, synthetic_workload
from subgpu_jax.space.config import chain_cut, enumerate_allocations, enumerate_cuts
from subgpu_jax.space.taskdag import build_task_dag

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
HW = coarse_hardware("H200", quantum=16, minimum=16, budget=128)



def _instance(seed=3, n=7, L=3, m=2):
    wl = synthetic_workload(seed, n=n, chain=True, num_regions=L, batch=4)
    g = wl.graph(m)
    return g, np.asarray(StaticDurationModel(HW).table(g))


@pytest.mark.parametrize("n,r", [(7, 3), (10, 4), (6, 6), (9, 1), (12, 2)])
def test_unrank_combination_matches_itertools(n, r):
    ref = np.array(list(itertools.combinations(range(n), r)), dtype=np.int32)
    got = np.asarray(jax.jit(jax.vmap(lambda x: unrank_combination(x, n, r)))(
        jnp.arange(len(ref))))
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("D,budget,q,mn", [(3, 40, 4, 4), (4, 128, 16, 16), (2, 148, 2, 2),
                                           (1, 64, 8, 8)])
def test_unrank_allocation_matches_enumerate(D, budget, q, mn):
    ref = enumerate_allocations(budget, D, q, mn)
    got = np.asarray(jax.vmap(lambda x: unrank_allocation(x, D, budget, q, mn))(
        jnp.arange(len(ref))))
    np.testing.assert_array_equal(got, ref)


def test_unrank_chain_bounds_matches_enumerate_cuts():
    n, K = 8, 4
    edges = [(i, i + 1) for i in range(n - 1)]
    ref = list(enumerate_cuts(n, edges, K))
    b = np.asarray(jax.vmap(lambda x: unrank_chain_bounds(x, n, K))(jnp.arange(len(ref))))
    got = [chain_cut(n, list(row[1:-1])) for row in b]
    assert got == ref


def test_fixed_mode_equals_evaluator_and_numpy():
    g, table = _instance()
    seg = chain_cut(g.n, [2, 5])
    ev = Evaluator(g, seg, 3, 0, HW, table=table)
    me = MassiveEvaluator(ev.dag, table, 3, 0, HW.sm_budget, HW.sm_quantum, HW.min_pool_sms,
                          mode="fixed", seg_of=seg, topk=5)
    A = enumerate_allocations(HW.sm_budget, 3, HW.sm_quantum, HW.min_pool_sms)
    ref = ev.makespan(A)
    np.testing.assert_array_equal(me.score(A), ref)           # bit-identical float32
    np.testing.assert_array_equal(numpy_makespans(ev.dag, me.seg_tab_np, me.stage, A), ref)
    r = me.run()
    order = np.lexsort((np.arange(len(ref)), ref))[:5]
    np.testing.assert_array_equal(r.alloc_ranks, order)
    np.testing.assert_allclose(r.values, ref[order])
    assert r.evaluated == len(A)


def _chain_me(table, g, D, w, **kw):
    n = g.n
    dag = build_task_dag(n, g.edges, g.cross_edges, chain_cut(n, range(1, D + w)), D, w,
                         g.num_regions, g.microbatches)
    return MassiveEvaluator(dag, table, D, w, HW.sm_budget, HW.sm_quantum, HW.min_pool_sms,
                            mode="chain", **kw)


def test_chunked_equals_unchunked_and_no_recompilation(monkeypatch):
    import chex

    from subgpu_jax.score import massive as M

    g, table = _instance(n=8)
    big = _chain_me(table, g, 3, 1, topk=6)
    r_big = big.run()
    # one trace for every chunk of the small-block evaluator
    monkeypatch.setattr(M, "_block_impl", chex.assert_max_traces(M._block_impl, n=1))
    small = _chain_me(table, g, 3, 1, topk=6, cut_block=2, alloc_block=8)
    r_small = small.run()
    calls = -(-small.n_cuts // 2) * -(-small.n_allocs // 8)
    assert calls >= 5
    assert r_small.evaluated == r_big.evaluated == big.total
    np.testing.assert_array_equal(r_small.values, r_big.values)
    np.testing.assert_array_equal(r_small.cut_ranks, r_big.cut_ranks)
    np.testing.assert_array_equal(r_small.alloc_ranks, r_big.alloc_ranks)


def _longest_path(dag, tau_seg):
    C = [0.0] * dag.T
    for i in range(dag.T):
        p = dag.preds(i)
        C[i] = (max(C[j] for j in p) if p else 0.0) + tau_seg[dag.seg[i]]
    return max(C)


def test_exhaustive_optimum_equals_python_brute_force():
    g, table = _instance(seed=5, n=6, L=2, m=2)
    D = 2
    res = exhaustive_chain(table, g.num_regions, g.microbatches, D, HW.sm_budget,
                           HW.sm_quantum, HW.min_pool_sms, topk=3)
    best = (np.inf, None)
    count = 0
    edges = [(i, i + 1) for i in range(g.n - 1)]
    allocs = enumerate_allocations(HW.sm_budget, D, HW.sm_quantum, HW.min_pool_sms)
    for w in (0, 1):
        K = D + w
        for seg in enumerate_cuts(g.n, edges, K):
            dag = build_task_dag(g.n, edges, [(g.n - 1, 0)], seg, D, w, g.num_regions,
                                 g.microbatches)
            stage = [0 if (w and k == K - 1) else k for k in range(K)]
            for a in allocs:
                tau = [sum(table[i, a[stage[seg[i]]]] for i in range(g.n) if seg[i] == k)
                       for k in range(K)]
                v = _longest_path(dag, tau)
                count += 1
                if v < best[0] - 1e-9:
                    best = (v, (w, seg, tuple(int(x) for x in a)))
    assert res["evaluated"] == count
    assert res["best"]["makespan_us"] == pytest.approx(best[0], rel=1e-5)
    b = res["best"]
    dag = build_task_dag(g.n, edges, [(g.n - 1, 0)], b["seg_of"], D, b["w"], g.num_regions,
                         g.microbatches)
    K = D + b["w"]
    stage = [0 if (b["w"] and k == K - 1) else k for k in range(K)]
    tau = [sum(table[i, b["alloc"][stage[b["seg_of"][i]]]] for i in range(g.n)
               if b["seg_of"][i] == k) for k in range(K)]
    assert _longest_path(dag, tau) == pytest.approx(best[0], rel=1e-5)


def test_memory_budget_sizes_chunks_and_rejects_too_small():
    g, table = _instance(n=8)
    small = _chain_me(table, g, 3, 0, memory_budget=200_000)
    large = _chain_me(table, g, 3, 0, memory_budget=50_000_000)
    assert small.plan.size < large.plan.size
    assert small.plan.est_bytes <= 200_000
    with pytest.raises(ValueError, match="at least"):
        _chain_me(table, g, 3, 0, memory_budget=1000)
    with pytest.raises(ValueError, match="devices=99"):
        _chain_me(table, g, 3, 0, devices=99)


def test_topk_and_pareto_streaming():
    t = TopK(3)
    t.add(np.array([5.0, 1.0, np.inf]), np.array([[0, 0], [0, 1], [0, 2]]))
    t.add(np.array([1.0, 0.5]), np.array([[0, 0], [1, 1]]))
    np.testing.assert_array_equal(t.values, [0.5, 1.0, 1.0])
    np.testing.assert_array_equal(t.keys, [[1, 1], [0, 0], [0, 1]])
    p = StreamingPareto()
    assert p.add({"makespan_us": 10.0, "tokens_per_gpu": 4})
    assert p.add({"makespan_us": 5.0, "tokens_per_gpu": 1})
    assert not p.add({"makespan_us": 12.0, "tokens_per_gpu": 4})
    assert p.add({"makespan_us": 10.0, "tokens_per_gpu": 8})   # dominates the first
    assert sorted(r["tokens_per_gpu"] for r in p.records) == [1, 8]


_SHARD_SCRIPT = r"""
import json, sys, numpy as np, jax
sys.path.insert(0, sys.argv[1])
from test_massive import _instance, _chain_me
assert len(jax.devices()) == 2, jax.devices()
g, table = _instance(n=8)
out = {}
for d in (1, 2):
    r = _chain_me(table, g, 3, 1, topk=5, cut_block=4, alloc_block=16, devices=d).run()
    out[d] = [r.values.tolist(), r.cut_ranks.tolist(), r.alloc_ranks.tolist(), r.evaluated]
try:
    _chain_me(table, g, 3, 1, devices=3)
    out["err"] = None
except ValueError as e:
    out["err"] = str(e)
print(json.dumps(out))
"""


def test_sharded_equals_unsharded_two_cpu_devices(child_pythonpath):
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2",
               JAX_PLATFORMS="cpu", PYTHONPATH=child_pythonpath)
    p = subprocess.run([sys.executable, "-c", _SHARD_SCRIPT, HERE], env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["1"] == out["2"]
    assert "devices=3" in out["err"] and "2 local device" in out["err"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_process_cluster_equals_single_process(tmp_path, child_pythonpath):
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=child_pythonpath)
    cmd = [sys.executable, "-m", "subgpu_jax.app.distributed"]
    subprocess.run(cmd + ["--out", str(tmp_path / "single.json")], env=env, cwd=ROOT,
                   check=True, timeout=120)
    addr = f"127.0.0.1:{_free_port()}"
    procs = [subprocess.Popen(cmd + ["--address", addr, "--num-processes", "2", "--process-id",
                                     str(i), "--out", str(tmp_path / f"p{i}.json")],
                              env=env, cwd=ROOT, stderr=subprocess.PIPE, text=True)
             for i in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-2000:]
    single = json.loads((tmp_path / "single.json").read_text())
    assert len(single) == 4
    for i in range(2):
        assert json.loads((tmp_path / f"p{i}.json").read_text()) == single


def test_unreachable_cluster_fails_fast(tmp_path, child_pythonpath):
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=child_pythonpath)
    addr = f"127.0.0.1:{_free_port()}"
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "subgpu_jax.app.distributed", "--address", addr,
                        "--num-processes", "2", "--process-id", "1", "--timeout", "2",
                        "--out", str(tmp_path / "x.json")], env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert addr in p.stderr and "unreachable" in p.stderr
    assert time.monotonic() - t0 < 30


def test_exhaustive_search_of_a_chain_streams_through_massive(monkeypatch):
    """``search.exhaustive_search`` of a plain chain goes through ``massive.exhaustive_chain``
    and finds the same optimum (value and configuration) as its general grouped max-plus path
    (forced by declaring the graph not a plain chain)."""
    from subgpu_jax.model.synthetic import coarse_hardware, synthetic_workload
    from subgpu_jax.search import exhaustive as ex
    from subgpu_jax.search.problem import Problem

    hw = coarse_hardware("H200", quantum=16, minimum=16, budget=128)
    pb = Problem(synthetic_workload(3, n=8, chain=True, num_regions=3, batch=4), hw)
    calls = []
    real = ex._exhaustive_chain
    monkeypatch.setattr(ex, "_exhaustive_chain", lambda *a: calls.append(1) or real(*a))
    fast = ex.exhaustive_search(pb, 3, (1, 2))
    assert calls == [1]
    monkeypatch.setattr(ex, "_is_plain_chain", lambda g: False)
    slow = ex.exhaustive_search(pb, 3, (1, 2))
    assert fast.evaluated == slow.evaluated
    assert fast.makespan_us == pytest.approx(slow.makespan_us, rel=1e-6)
    assert fast.best == slow.best


def test_massive_makespan_is_a_validated_scorer():
    """``MassiveEvaluator.makespan`` (the ``Scorer`` protocol) equals ``score`` and rejects rows
    outside the allocation space on the host."""
    from subgpu_jax.score.protocol import Scorer

    g, table = _instance(n=8)
    me = _chain_me(table, g, 3, 0, topk=2)
    assert isinstance(me, Scorer)
    A = np.array([[64, 32, 32], [16, 16, 96]])
    np.testing.assert_array_equal(me.makespan(A, cut_rank=3), me.score(A, 3))
    with pytest.raises(ValueError, match="outside the space"):
        me.makespan([[60, 36, 32]])
    with pytest.raises(ValueError, match="shape"):
        me.makespan([[64, 64]])
    with pytest.raises(ValueError, match="cut_rank"):
        me.makespan(A, cut_rank=me.n_cuts)


def test_plan_blocks_fits_the_allocation_axis_to_the_space():
    """The exhaustive instance's 1,088,430 allocations (D = 5 on 148 SMs) take one block of
    1,088,512 (= 1,063 x 1,024), not 2**21 with 48% masked padding; on a 2**16 CPU cap they
    split evenly into 17 blocks of 64,512 (17 x 64,512 = 1,096,704 >= 1,088,430 > 16 x 65,536)."""
    from subgpu_jax.score.massive import ALLOC_ALIGN, plan_blocks

    gpu = plan_blocks(1, 1_088_430, 100, 0, max_block=2**22)
    assert (gpu.cut_block, gpu.alloc_block) == (1, 1_088_512)
    chain = plan_blocks(50_000, 1_088_430, 100, 0, max_block=2**22)
    assert (chain.cut_block, chain.alloc_block) == (3, 1_088_512)     # 4,194,304 // 1,088,512
    cpu = plan_blocks(1, 1_088_430, 100, 0, max_block=2**16)
    assert cpu.alloc_block == 64_512 and cpu.alloc_block % ALLOC_ALIGN == 0


from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(max_examples=200, deadline=None)
@given(n_cuts=st.integers(1, 10**6), n_allocs=st.integers(1, 3 * 10**6),
       log_cap=st.integers(7, 23), topk=st.integers(1, 64))
def test_plan_blocks_invariants(n_cuts, n_allocs, log_cap, topk):
    """Any space and cap: the block holds the minimum (``MIN_BLOCK``, ``topk``), stays within
    the cap when the cap allows the minimum, takes at most the cuts' power of two, and its
    allocation blocks cover the space with less than one ``ALLOC_ALIGN`` of padding per block
    (or the space's power of two)."""
    from subgpu_jax.score.massive import ALLOC_ALIGN, MIN_BLOCK, plan_blocks

    cap = 2**log_cap
    p = plan_blocks(n_cuts, n_allocs, 100, 0, max_block=cap, topk=topk)
    assert p.size >= max(MIN_BLOCK, topk)
    if cap >= max(MIN_BLOCK, topk):
        assert p.size <= cap or p.cut_block == 1 and p.alloc_block <= 2 * max(MIN_BLOCK, topk)
    assert p.cut_block <= 1 << (n_cuts - 1).bit_length()
    blocks = -(-n_allocs // p.alloc_block)
    waste = blocks * p.alloc_block - n_allocs
    if cap >= ALLOC_ALIGN and p.size > max(MIN_BLOCK, topk):
        # the fitted rule: less than one ALLOC_ALIGN of padding per block, or a space smaller
        # than ALLOC_ALIGN in one block of its power of two
        assert waste < blocks * ALLOC_ALIGN or (
            blocks == 1 and n_allocs < ALLOC_ALIGN
            and p.alloc_block == 1 << (n_allocs - 1).bit_length())
