"""The augmented task DAG and the JAX max-plus evaluator (docs/method.md §2 invariants, §3 fast scorer).

Property tests run on hypothesis-generated DAGs (nodes in topological order, edges u < v), cuts
drawn from ``enumerate_cuts``, both dispatch policies, D/w, region and microbatch counts and random
durations, and check every invariant of docs/method.md §2 plus agreement with two independent longest-path
oracles on the explicit augmented DAG, in float64.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from subgpu_jax.score import evaluator as ev_mod
from subgpu_jax.score.evaluator import (Evaluator, makespan_of_durations,
    temporal_makespan, validate_durations)
from subgpu_jax.model.graph import (REFERENCE_DEPLOYMENT, Deployment, StaticDurationModel,
    build_graph)
from subgpu_jax.model.hardware import get_hardware
from subgpu_jax.model.models import get_model
from subgpu_jax.space.config import (DISPATCH_POLICIES, Config, binding, cut_from_starts,
    enumerate_allocations, enumerate_cuts)
from subgpu_jax.space.taskdag import build_task_dag

H200 = get_hardware("H200")
ROWS = 64  # every makespan_of_durations call uses this many rows: one compiled shape per DAG size


# ============================================================================ strategies
@st.composite
def cases(draw, max_n=6, temporal=False):
    """(n, edges, cross_edges, seg_of, D, w, L, m, policy) of a random cut region."""
    # sampled_from draws near-uniformly (st.integers favours the small end)
    n = draw(st.sampled_from(range(1 if temporal else 2, max_n + 1)))
    pairs = [(u, v) for u in range(n) for v in range(u + 1, n)]
    edges = sorted(draw(st.sets(st.sampled_from(pairs), max_size=len(pairs)))) if pairs else []
    cross = sorted(draw(st.sets(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)),
                                max_size=4)))
    if temporal:
        D, w = 1, 0
    else:  # a pipelined point of F: 2 <= D <= n - w (D = 1 has its own test)
        D = draw(st.sampled_from(range(2, n + 1)))
        w = 0 if D == n else draw(st.sampled_from([0, 1]))
    cuts = list(enumerate_cuts(n, edges, D + w))
    seg_of = draw(st.sampled_from(cuts))
    L = draw(st.sampled_from([1, 2, 3]))
    m = draw(st.sampled_from([1, 2, 3]))
    policy = draw(st.sampled_from(DISPATCH_POLICIES))
    return n, edges, cross, seg_of, D, w, L, m, policy


durations = st.floats(0.0, 100.0, allow_nan=False, allow_infinity=False)


@st.composite
def dag_and_tau(draw, temporal=False):
    n, edges, cross, seg_of, D, w, L, m, policy = draw(cases(temporal=temporal))
    dag = build_task_dag(n, edges, cross, seg_of, D, w, L, m, policy)
    tau = np.array(draw(st.lists(durations, min_size=dag.T, max_size=dag.T)), dtype=np.float64)
    return dag, tau


# ============================================================================ oracles
def ms(dag, rows):
    """Makespans of the given duration rows through the JAX evaluator (padded to ROWS rows)."""
    rows = np.atleast_2d(np.asarray(rows, dtype=np.float64))
    k = rows.shape[0]
    assert k <= ROWS
    full = np.concatenate([rows, np.repeat(rows[:1], ROWS - k, axis=0)])
    out = makespan_of_durations(dag, full)
    assert out.shape == (ROWS,)
    return np.asarray(out, dtype=np.float64)[:k]


def dp_longest(g: nx.DiGraph, tau) -> float:
    """C_i = tau_i + max over predecessors in g (networkx topological order); max_i C_i."""
    C = {}
    for i in nx.topological_sort(g):
        C[i] = tau[i] + max((C[j] for j in g.predecessors(i)), default=0.0)
    return max(C.values(), default=0.0)


def nx_longest_node_weighted(g: nx.DiGraph, tau) -> float:
    """nx.dag_longest_path_length with node weights moved onto edges (node split in/out)."""
    h = nx.DiGraph()
    for i in g.nodes:
        h.add_edge(("in", i), ("out", i), weight=float(tau[i]))
    for j, i in g.edges:
        h.add_edge(("out", j), ("in", i), weight=0.0)
    return float(nx.dag_longest_path_length(h, weight="weight"))


def data_only_longest(dag, tau) -> float:
    C = np.zeros(dag.T)
    for i in range(dag.T):  # dispatch order is topological for data edges
        C[i] = tau[i] + max((C[j] for j in dag.data_preds[i]), default=0.0)
    return float(C.max(initial=0.0))


# ============================================================================ DAG structure
@settings(max_examples=60)
@given(case=cases())
def test_task_dag_structure(case):
    n, edges, cross, seg_of, D, w, L, m, policy = case
    K = D + w
    dag = build_task_dag(n, edges, cross, seg_of, D, w, L, m, policy)
    assert dag.T == L * m * K
    triples = list(zip(dag.region.tolist(), dag.mb.tolist(), dag.seg.tolist()))
    assert sorted(triples) == list(itertools.product(range(L), range(m), range(K)))
    assert dag.stage.tolist() == [binding(k, K, w) for k in dag.seg.tolist()]
    assert set(dag.stage.tolist()) == set(range(D))
    if w == 1:
        assert {int(k) for k, s in zip(dag.seg, dag.stage) if s == 0} == {0, K - 1}
    pos = {t: i for i, t in enumerate(triples)}
    # data edges = the kernel-level forward-pass edges contracted onto segment tasks
    want = set()
    for l, mu in itertools.product(range(L), range(m)):
        for u, v in edges:
            if seg_of[u] != seg_of[v]:
                want.add((pos[(l, mu, seg_of[u])], pos[(l, mu, seg_of[v])]))
        if l:
            for u, v in cross:
                want.add((pos[(l - 1, mu, seg_of[u])], pos[(l, mu, seg_of[v])]))
    got = {(j, i) for i in range(dag.T) for j in dag.data_preds[i]}
    assert got == want
    # stage edges: FIFO chain of each stage in dispatch order
    for s in range(D):
        on = [i for i in range(dag.T) if dag.stage[i] == s]
        assert [int(dag.stage_pred[i]) for i in on] == [-1] + on[:-1]
    # the dispatch order is topological for data AND stage edges; the augmented DAG is acyclic
    assert all(j < i for i in range(dag.T) for j in dag.preds(i))
    g = dag.to_networkx()
    assert nx.is_directed_acyclic_graph(g) and g.number_of_nodes() == dag.T
    assert set(g.edges) == want | {(int(dag.stage_pred[i]), i) for i in range(dag.T)
                                   if dag.stage_pred[i] >= 0}
    # levels = unweighted longest path depth
    lv = dag.levels()
    for i in nx.topological_sort(g):
        assert lv[i] == max((lv[j] + 1 for j in g.predecessors(i)), default=0)
    # the policy's order
    if policy == "layer_major":
        assert [(r, k, u) for r, u, k in triples] == sorted((r, k, u) for r, u, k in triples)
    else:
        keys = [(r * K + k + u, u) for r, u, k in triples]
        assert keys == sorted(keys)


# ============================================================================ invariants
@settings(max_examples=60)
@given(case=dag_and_tau(), delta=st.floats(0.01, 50.0))
def test_makespan_nondecreasing_in_every_tau(x64, case, delta):
    dag, tau = case
    rows = [tau] + [tau + delta * np.eye(dag.T)[i] for i in range(dag.T)]
    out = ms(dag, rows)
    base = out[0]
    assert np.all(out[1:] >= base - 1e-9)
    # and a longest path visits task i once: it grows by at most delta
    assert np.all(out[1:] <= base + delta + 1e-9)


@settings(max_examples=60)
@given(case=dag_and_tau(), alpha=st.floats(1e-3, 1e3))
def test_makespan_positively_homogeneous(x64, case, alpha):
    dag, tau = case
    t, ta = ms(dag, [tau, alpha * tau])
    assert ta == pytest.approx(alpha * t, rel=1e-12, abs=1e-12)


@settings(max_examples=60)
@given(case=dag_and_tau())
def test_makespan_bounds(x64, case):
    dag, tau = case
    (t,) = ms(dag, [tau])
    eps = 1e-9 * max(1.0, tau.sum())
    assert t >= data_only_longest(dag, tau) - eps
    for s in range(dag.D):
        assert t >= tau[dag.stage == s].sum() - eps
    assert t <= tau.sum() + eps
    assert t >= tau.max(initial=0.0) - eps


@given(case=dag_and_tau(temporal=True))
def test_single_stage_makespan_is_sum(x64, case):
    dag, tau = case
    assert dag.D == 1
    (t,) = ms(dag, [tau])
    assert t == pytest.approx(tau.sum(), rel=1e-12, abs=1e-12)


@settings(max_examples=60)
@given(case=dag_and_tau())
def test_evaluator_equals_networkx_longest_path(x64, case):
    dag, tau = case
    (t,) = ms(dag, [tau])
    g = dag.to_networkx(tau)
    assert all(g.nodes[i]["tau"] == tau[i] for i in g.nodes)
    want = nx_longest_node_weighted(g, tau)
    assert t == pytest.approx(want, rel=1e-12, abs=1e-12)
    assert dp_longest(g, tau) == pytest.approx(want, rel=1e-12, abs=1e-12)


@given(case=dag_and_tau())
def test_makespan_of_durations_batch_rows_independent(x64, case):
    dag, tau = case
    rng = np.random.default_rng(dag.T)
    rows = rng.uniform(0, 10, size=(5, dag.T))
    rows[0] = tau
    out = ms(dag, rows)
    g = dag.to_networkx()
    for r, o in zip(rows, out):
        assert o == pytest.approx(dp_longest(g, r), rel=1e-12, abs=1e-12)


# ============================================================================ real workloads
def _llama_graph(m=2):
    d = Deployment(num_gpus=8, attn_tp=8, attn_dp=1, moe_ep=1, global_batch=64)
    return build_graph(get_model("llama-3.1-8b"), d, m)


def _gpt_graph(m=2):
    return build_graph(get_model("gpt-oss-120b"), REFERENCE_DEPLOYMENT, m)


def _macro_cut(g):
    fa = g.index("L1.attn")
    return cut_from_starts(g.n, g.edges, [fa, fa + 1])


EVAL_CASES = {
    "llama-D2w0-wavefront": (_llama_graph, lambda g: cut_from_starts(g.n, g.edges, [3]), 2, 0,
                             "wavefront"),
    "gptoss-macro-D2w1": (_gpt_graph, _macro_cut, 2, 1, "wavefront"),
    "gptoss-D3w0-layer_major": (_gpt_graph, lambda g: cut_from_starts(g.n, g.edges, [9, 15]), 3,
                                0, "layer_major"),
    "gptoss-D3w1-wavefront": (_gpt_graph, lambda g: cut_from_starts(g.n, g.edges, [3, 9, 16]), 3,
                              1, "wavefront"),
}


@pytest.mark.parametrize("case", sorted(EVAL_CASES))
def test_evaluator_equals_python_loop_over_task_durations(x64, case):
    make_graph, make_cut, D, w, policy = EVAL_CASES[case]
    g = make_graph()
    seg_of = make_cut(g)
    ev = Evaluator(g, seg_of, D, w, H200, policy=policy, dtype=jnp.float64)
    allocs = enumerate_allocations(H200.sm_budget, D, H200.sm_quantum, H200.min_pool_sms)
    rng = np.random.default_rng(0)
    odd = rng.integers(1, H200.num_sms // D + 1, size=(7, D))  # off-quantum pools work too
    allocs = np.concatenate([allocs, odd])
    got = ev.makespan(allocs, feasible_only=False)
    assert got.shape == (len(allocs),) and got.dtype == np.float64
    table = StaticDurationModel(H200).table(g)
    K = D + w
    nxg = ev.dag.to_networkx()
    for a, t in zip(allocs, got):
        tau = ev.task_durations(a)
        # independent tau: sum of the segment's kernels on its stage's pool
        seg_p = [a[binding(k, K, w)] for k in range(K)]
        seg_dur = [sum(table[u, seg_p[k]] for u in range(g.n) if seg_of[u] == k)
                   for k in range(K)]
        np.testing.assert_allclose(tau, np.array(seg_dur)[ev.dag.seg], rtol=1e-12)
        assert t == pytest.approx(dp_longest(nxg, tau), rel=1e-12)
    # the float32 default agrees to float32 precision
    ev32 = Evaluator(g, seg_of, D, w, H200, policy=policy)
    np.testing.assert_allclose(ev32.makespan(allocs, feasible_only=False), got, rtol=2e-5)
    # chunking does not change results
    ev_small = Evaluator(g, seg_of, D, w, H200, policy=policy, dtype=jnp.float64, chunk=8)
    np.testing.assert_allclose(ev_small.makespan(allocs, feasible_only=False), got, rtol=1e-12)


def test_evaluator_for_config_scores_config_alloc(x64):
    g = _gpt_graph()
    cfg = Config(D=2, w=1, seg_of=_macro_cut(g), alloc=(64, 64), microbatch=256)
    cfg.check(g.n, g.edges, H200, REFERENCE_DEPLOYMENT.requests_per_gpu)
    ev = Evaluator.for_config(g, cfg, H200, dtype=jnp.float64)
    (t,) = ev.makespan([cfg.alloc])
    assert t == pytest.approx(dp_longest(ev.dag.to_networkx(), ev.task_durations(cfg.alloc)),
                              rel=1e-12)
    # the pipelined step is bounded below by its busiest stage and above by the serial sum
    tau = ev.task_durations(cfg.alloc)
    assert max(tau[ev.dag.stage == s].sum() for s in range(2)) <= t * (1 + 1e-12)
    assert t <= tau.sum() * (1 + 1e-12)


@pytest.mark.parametrize("name", ["llama-3.1-8b", "gpt-oss-120b"])
def test_temporal_is_sum_of_kernel_times(x64, name):
    arch = get_model(name)
    d = REFERENCE_DEPLOYMENT if arch.is_moe else Deployment(num_gpus=8, attn_tp=8, attn_dp=1,
                                                            moe_ep=1, global_batch=64)
    g = build_graph(arch, d, 1)
    table = StaticDurationModel(H200).table(g)
    want = table[:, 132].sum() * g.num_regions
    assert temporal_makespan(g, H200) == pytest.approx(want, rel=1e-12)
    ev = Evaluator(g, (0,) * g.n, 1, 0, H200, dtype=jnp.float64)
    assert ev.makespan([[132]])[0] == pytest.approx(want, rel=1e-12)
    with pytest.raises(ValueError, match="microbatches=1"):
        temporal_makespan(build_graph(arch, d, 2), H200)


def test_smooth_makespan_upper_bounds_and_converges(x64):
    g = _llama_graph()
    ev = Evaluator(g, cut_from_starts(g.n, g.edges, [3]), 2, 0, H200, dtype=jnp.float64)
    allocs = enumerate_allocations(128, 2, 8, 8)
    hard = ev.makespan(allocs)
    P = max(max(len(ev.dag.preds(i)) for i in range(ev.dag.T)), 2)
    for temp in (1.0, 1e-3):
        sm = np.asarray(ev.smooth(jnp.asarray(allocs, jnp.float64), temp))
        assert np.all(sm >= hard - 1e-9)
        # bias <= temp * log(#preds) per max along a path of at most T tasks, plus the final max
        assert np.all(sm - hard <= temp * np.log(P) * (ev.dag.T + 1) + 1e-9)
    sm = np.asarray(ev.smooth(jnp.asarray(allocs, jnp.float64), 1e-4))
    np.testing.assert_allclose(sm, hard, rtol=1e-6)
    grad = jax.grad(lambda a: ev.smooth(a, 1.0).sum())(jnp.asarray(allocs[:3], jnp.float64))
    assert np.all(np.isfinite(np.asarray(grad)))


# ============================================================================ no recompilation
def test_no_retrace_same_shapes_and_other_cut(monkeypatch):
    """Same batch shape, other values, another cut of the same padding bucket: one trace
    (``chex.assert_max_traces`` around the production batch function)."""
    import chex

    from subgpu_jax.score import evaluator as E

    monkeypatch.setattr(E, "hard_batch", jax.jit(chex.assert_max_traces(E.hard_batch_impl,
                                                                           n=1)))
    g = _llama_graph()
    allocs = enumerate_allocations(128, 2, 8, 8)
    ev_a = Evaluator(g, cut_from_starts(g.n, g.edges, [3]), 2, 0, H200)
    ev_b = Evaluator(g, cut_from_starts(g.n, g.edges, [4]), 2, 0, H200)
    assert ev_a.seg_of != ev_b.seg_of
    shapes = lambda e: [x.shape for x in jax.tree_util.tree_leaves(e.arrs)]  # noqa: E731
    assert shapes(ev_a) == shapes(ev_b), "precondition: both cuts fall in one padding bucket"
    first = ev_a.makespan(allocs)
    again = ev_a.makespan(allocs)
    np.testing.assert_array_equal(first, again)
    ev_a.makespan(allocs[::-1].copy())  # other values, same batch shape
    other = ev_b.makespan(allocs)
    assert not np.array_equal(first, other)  # it really scored another cut


def test_no_retrace_makespan_of_durations(monkeypatch):
    import chex

    from subgpu_jax.score import evaluator as E

    monkeypatch.setattr(E, "tau_batch", jax.jit(chex.assert_max_traces(E.tau_batch_impl,
                                                                          n=1)))
    dag = build_task_dag(4, [(0, 1), (1, 2), (2, 3)], [(3, 0)], (0, 0, 1, 1), 2, 0, 2, 2,
                         "wavefront")
    rng = np.random.default_rng(1)
    makespan_of_durations(dag, rng.uniform(0, 1, (3, dag.T)).astype(np.float32))
    makespan_of_durations(dag, rng.uniform(0, 1, (3, dag.T)).astype(np.float32))


# ============================================================================ bad input
def _small_dag():
    return build_task_dag(3, [(0, 1), (1, 2)], [(2, 0)], (0, 1, 1), 2, 0, 2, 2, "wavefront")


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf"), -1e-12])
def test_makespan_of_durations_rejects_bad_durations(bad):
    dag = _small_dag()
    tau = np.ones((2, dag.T))
    tau[1, 3] = bad
    with pytest.raises(ValueError, match=r"durations must be finite and >= 0.*entry"):
        makespan_of_durations(dag, tau)


def test_makespan_of_durations_accepts_integer_durations():
    dag = _small_dag()
    out = makespan_of_durations(dag, np.ones((1, dag.T), dtype=np.int64))
    assert out[0] == pytest.approx(makespan_of_durations(dag, np.ones((1, dag.T)))[0])


def test_makespan_of_durations_wrong_length():
    dag = _small_dag()
    with pytest.raises(ValueError, match=f"durations: {dag.T - 1} per row"):
        makespan_of_durations(dag, np.ones(dag.T - 1))


@pytest.mark.parametrize("bad", [-3.0, float("nan")])
def test_validate_durations_names_field_and_index(bad):
    tau = np.array([1.0, 2.0, bad, 4.0])
    with pytest.raises(ValueError, match=r"tau_us must be finite and >= 0 \(µs\); entry 2"):
        validate_durations(tau, "tau_us")
    validate_durations(np.array([0.0, 1.0]))  # fine


def test_evaluator_rejects_bad_table_cut_and_allocations():
    g = _llama_graph()
    seg = cut_from_starts(g.n, g.edges, [3])
    table = StaticDurationModel(H200).table(g)
    table[2, 5] = np.nan
    with pytest.raises(ValueError, match="duration table"):
        Evaluator(g, seg, 2, 0, H200, table=table)
    with pytest.raises(ValueError, match="not predecessor-closed"):
        Evaluator(g, (0, 0, 1, 0, 1, 1, 1, 1, 1), 2, 0, H200)
    with pytest.raises(ValueError, match="nonempty"):
        Evaluator(g, seg, 3, 0, H200)
    ev = Evaluator(g, seg, 2, 0, H200)
    with pytest.raises(ValueError, match="allocations must have shape"):
        ev.makespan([[64, 32, 32]])
    with pytest.raises(ValueError, match="allocations: SMs per stage"):
        ev.makespan([[0, 128]])
    with pytest.raises(ValueError, match="allocations: SMs per stage"):
        ev.makespan([[100, 133]])


def test_build_task_dag_rejects_bad_structure():
    with pytest.raises(ValueError, match="policy"):
        build_task_dag(3, [(0, 1)], [], (0, 1, 1), 2, 0, 1, 1, "random")
    with pytest.raises(ValueError, match="D \\+ w"):
        build_task_dag(3, [(0, 1)], [], (0, 1, 1), 2, 1, 1, 1)
    with pytest.raises(ValueError, match="num_regions"):
        build_task_dag(3, [(0, 1)], [], (0, 1, 1), 2, 0, 0, 1)
    with pytest.raises(ValueError, match="microbatches"):
        build_task_dag(3, [(0, 1)], [], (0, 1, 1), 2, 0, 1, 0)


def test_task_dag_arrays_padding_too_small():
    dag = _small_dag()
    with pytest.raises(ValueError, match="padding"):
        dag.arrays(pad_tasks=dag.T - 1)
    a = dag.arrays()
    assert a["T"] == dag.T and a["T_pad"] >= dag.T and a["preds"].shape[0] == a["T_pad"]
    assert ev_mod.DagArrays.from_dag(dag).T_pad == a["T_pad"]


def test_evaluator_rejects_fractional_allocation():
    from subgpu_jax import REFERENCE_DEPLOYMENT, build_graph, get_hardware, get_model
    from subgpu_jax.score.evaluator import Evaluator
    from subgpu_jax.space.config import cut_from_starts

    g = build_graph(get_model("gpt-oss-20b"), REFERENCE_DEPLOYMENT.__class__(
        num_gpus=8, attn_tp=8, attn_dp=1, moe_ep=8, global_batch=256), 2)
    i = g.index("L1.attn")
    ev = Evaluator(g, cut_from_starts(g.n, g.edges, [i, i + 1]), 2, 1, get_hardware("H200"))
    with pytest.raises(ValueError, match="integers"):
        ev.makespan(np.array([[64.7, 63.3]]))


def test_evaluator_rejects_infeasible_allocations_by_default():
    from subgpu_jax import Deployment, build_graph, get_hardware, get_model
    from subgpu_jax.score.evaluator import Evaluator
    from subgpu_jax.space.config import cut_from_starts

    g = build_graph(get_model("gpt-oss-20b"), Deployment(num_gpus=8, attn_tp=8, attn_dp=1,
                                                         moe_ep=8, global_batch=256), 2)
    i = g.index("L1.attn")
    ev = Evaluator(g, cut_from_starts(g.n, g.edges, [i, i + 1]), 2, 1, get_hardware("H200"))
    for bad in ([128, 128], [60, 68], [0, 128]):
        with pytest.raises(ValueError, match="allocations"):
            ev.makespan(np.array([bad]))
    assert ev.makespan(np.array([[128, 128]]), feasible_only=False)[0] > 0
