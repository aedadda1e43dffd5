"""The configuration space F of docs/method.md §2: cuts, binding, allocations, microbatches, Config."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

from subgpu_jax.model.graph import REFERENCE_DEPLOYMENT, build_graph
from subgpu_jax.model.hardware import get_hardware
from subgpu_jax.model.models import get_model
from subgpu_jax.space.config import (Config, binding, chain_cut, check_allocation, check_cut,
    count_allocations, count_cuts, cut_from_starts, enumerate_allocations, enumerate_cuts,
    microbatch_sizes, space_size, temporal_config)


def chain(n):
    return [(i, i + 1) for i in range(n - 1)]


@st.composite
def dags(draw, max_n=7):
    """A random DAG on nodes 0..n-1 listed in topological order (every edge u < v)."""
    n = draw(st.integers(1, max_n))
    pairs = [(u, v) for u in range(n) for v in range(u + 1, n)]
    edges = sorted(draw(st.sets(st.sampled_from(pairs), max_size=len(pairs)))) if pairs else []
    return n, edges


def brute_force_cuts(n, edges, K):
    """Every assignment of n kernels to K segments that is onto and predecessor-closed."""
    out = set()
    for seg in itertools.product(range(K), repeat=n):
        if set(seg) == set(range(K)) and all(seg[u] <= seg[v] for u, v in edges):
            out.add(seg)
    return out


# ============================================================================ counts
def test_design_space_size_20_chain_5_stages_b200():
    s = space_size(20, chain(20), 5, budget=148, quantum=2, minimum=2)
    assert s["cuts_w0"] == 3876 == math.comb(19, 4)
    assert s["cuts_w1"] == 11628 == math.comb(19, 5)
    assert s["cut_binding_choices"] == 15504
    assert s["allocations"] == 1_088_430 == math.comb(73, 4)
    assert s["total"] == 15504 * 1_088_430
    assert 1.6e10 < s["total"] < 1.8e10  # "about 1.7e10 points"


def test_count_allocations_148_sms_5_stages():
    assert count_allocations(148, 5, 2, 2) == 1_088_430


def test_chain_cut_enumeration_matches_count():
    cuts = list(enumerate_cuts(20, chain(20), 5))
    assert len(cuts) == 3876 == len(set(cuts))
    assert all(list(c) == sorted(c) for c in cuts)


@given(n=st.integers(1, 12), data=st.data())
def test_chain_cuts_are_binomial(n, data):
    K = data.draw(st.integers(1, n))
    cuts = list(enumerate_cuts(n, chain(n), K))
    assert len(cuts) == math.comb(n - 1, K - 1) == count_cuts(n, chain(n), K)
    assert len(set(cuts)) == len(cuts)
    for c in cuts:
        check_cut(c, n, chain(n), K)


@given(dag=dags(6), data=st.data())
def test_enumerate_cuts_equals_brute_force(dag, data):
    n, edges = dag
    K = data.draw(st.integers(1, n))
    got = list(enumerate_cuts(n, edges, K))
    want = brute_force_cuts(n, edges, K)
    assert len(got) == len(set(got))  # no duplicates
    assert set(got) == want
    assert count_cuts(n, edges, K) == len(want)


@given(dag=dags(5), data=st.data())
def test_check_cut_accepts_exactly_legal_cuts(dag, data):
    n, edges = dag
    K = data.draw(st.integers(1, n))
    legal = brute_force_cuts(n, edges, K)
    seg = tuple(data.draw(st.lists(st.integers(0, K - 1), min_size=n, max_size=n)))
    if seg in legal:
        check_cut(seg, n, edges, K)
    else:
        with pytest.raises(ValueError, match="cut"):
            check_cut(seg, n, edges, K)


@given(n=st.integers(2, 10), data=st.data())
def test_cut_from_starts_on_chain(n, data):
    K = data.draw(st.integers(1, n))
    starts = sorted(data.draw(st.sets(st.integers(1, n - 1), min_size=K - 1, max_size=K - 1)))
    seg = cut_from_starts(n, chain(n), starts)
    assert seg == chain_cut(n, starts)
    assert max(seg) + 1 == K and list(seg) == sorted(seg)
    assert [i for i in range(1, n) if seg[i] != seg[i - 1]] == starts


# ---------------------------------------------------------------------------- allocations
@given(D=st.integers(1, 5), quantum=st.sampled_from([1, 2, 4, 8]),
       min_q=st.integers(1, 3), extra=st.integers(0, 10))
def test_enumerate_allocations_agrees_with_count(D, quantum, min_q, extra):
    minimum = min_q * quantum
    budget = D * minimum + extra * quantum
    a = enumerate_allocations(budget, D, quantum, minimum)
    c = count_allocations(budget, D, quantum, minimum)
    assert a.shape == (c, D) and a.dtype == np.int32
    assert c == math.comb(extra + D - 1, D - 1)
    assert np.all(a.sum(axis=1) == budget)
    assert np.all(a >= minimum) and np.all(a % quantum == 0)
    assert len({tuple(r) for r in a}) == c  # no duplicates
    # brute force over all ordered D-tuples
    vals = range(minimum, budget + 1, quantum)
    brute = {t for t in itertools.product(vals, repeat=D) if sum(t) == budget}
    assert {tuple(int(x) for x in r) for r in a} == brute


def test_enumerate_allocations_h200_two_stages():
    hw = get_hardware("H200")
    a = enumerate_allocations(hw.sm_budget, 2, hw.sm_quantum, hw.min_pool_sms)
    assert a.tolist() == [[8 * i, 128 - 8 * i] for i in range(1, 16)]
    for row in a:
        check_allocation(row, hw, 2)


def test_enumerate_allocations_rows_feasible_h200_four_stages():
    hw = get_hardware("H200")
    a = enumerate_allocations(hw.sm_budget, 4, hw.sm_quantum, hw.min_pool_sms)
    assert len(a) == math.comb(12 + 3, 3) == count_allocations(128, 4, 8, 8)
    for row in a:
        check_allocation(row, hw, 4)


@pytest.mark.parametrize("args", [(100, 5, 8, 8), (30, 5, 2, 8), (7, 2, 2, 2), (16, 0, 8, 8)])
def test_count_allocations_zero_when_infeasible(args):
    assert count_allocations(*args) == 0


def test_enumerate_allocations_infeasible_or_too_many_raise():
    with pytest.raises(ValueError, match="allocation"):
        enumerate_allocations(16, 3, 8, 8)
    with pytest.raises(ValueError, match="allocation.*limit"):
        enumerate_allocations(148, 5, 2, 2, limit=1000)


# ---------------------------------------------------------------------------- binding, batches
def test_binding_boundary_reuse():
    assert [binding(k, 3, 0) for k in range(3)] == [0, 1, 2]
    assert [binding(k, 3, 1) for k in range(3)] == [0, 1, 0]
    cfg = Config(D=2, w=1, seg_of=(0, 1, 2), alloc=(64, 64), microbatch=1)
    assert cfg.K == 3 and cfg.stage_of_segment() == (0, 1, 0)


def test_microbatch_sizes():
    assert microbatch_sizes(12) == [1, 2, 3, 4, 6, 12]
    assert microbatch_sizes(512, supported=[64, 100, 256, 512]) == [64, 256, 512]
    with pytest.raises(ValueError, match="batch"):
        microbatch_sizes(0)


# ============================================================================ Config
H200 = get_hardware("H200")
N6 = 6
E6 = chain(N6)


def good(**kw):
    base = dict(D=2, w=0, seg_of=(0, 0, 0, 1, 1, 1), alloc=(64, 64), microbatch=4)
    base.update(kw)
    return Config(**base)


def test_config_check_accepts_feasible():
    good().check(N6, E6, H200, 16)
    good(D=2, w=1, seg_of=(0, 0, 1, 1, 2, 2)).check(N6, E6, H200, 16)
    good(D=3, seg_of=(0, 1, 1, 2, 2, 2), alloc=(32, 32, 64), policy="layer_major").check(
        N6, E6, H200, 16)
    cfg = temporal_config(N6, H200, 16)
    cfg.check(N6, E6, H200, 16)
    assert (cfg.D, cfg.w, cfg.alloc, cfg.microbatch, cfg.microbatches(16)) == (1, 0, (132,), 16, 1)


def test_macro_design_is_expressible():
    """docs/method.md §5's "Macro" design: D = 2, w = 1, S_2 = the full-attention FMHA."""
    g = build_graph(get_model("gpt-oss-120b"), REFERENCE_DEPLOYMENT, microbatches=2)
    fa = g.index("L1.attn")
    seg = cut_from_starts(g.n, g.edges, [fa, fa + 1])
    assert [i for i, s in enumerate(seg) if s == 1] == [fa]
    cfg = Config(D=2, w=1, seg_of=seg, alloc=(64, 64), microbatch=256)
    cfg.check(g.n, g.edges, H200, REFERENCE_DEPLOYMENT.requests_per_gpu)
    assert cfg.microbatches(512) == 2
    assert cfg.stage_of_segment() == (0, 1, 0)
    # the sliding-window FMHA shares stage 0 with everything else
    assert cfg.stage_of_segment()[seg[g.index("L0.attn")]] == 0


@pytest.mark.parametrize("D", [0, 7, -1])
def test_config_D_out_of_range(D):
    K = max(D, 1)
    with pytest.raises(ValueError, match="config.D"):
        good(D=D, seg_of=tuple(min(i, K - 1) for i in range(N6)),
             alloc=(8,) * max(D, 1)).check(N6, E6, H200, 16)


def test_config_D_too_large_for_boundary_reuse():
    # |V| - w = 5 stages at most with w = 1 on six kernels
    with pytest.raises(ValueError, match="config.D"):
        good(D=6, w=1, seg_of=tuple(range(6)), alloc=(8,) * 6).check(N6, E6, H200, 16)


@pytest.mark.parametrize("kw, match", [
    (dict(w=2), "config.w"),
    (dict(policy="random"), "config.policy"),
    (dict(microbatch=3), "config.microbatch"),
    (dict(microbatch=0), "config.microbatch"),
    (dict(alloc=(64, 56)), "allocation: SMs sum to 120"),
    (dict(alloc=(64, 72)), "allocation: SMs sum to 136"),
    (dict(alloc=(128, 0)), "stage 1 has 0 SMs, below the minimum 8"),
    (dict(alloc=(60, 68)), "not a multiple of the H200 SM quantum"),
    (dict(alloc=(64, 32, 32)), "allocation: 3 pools"),
    (dict(seg_of=(0, 1, 0, 1, 1, 1)), "not predecessor-closed"),
    (dict(seg_of=(0, 0, 0, 0, 0, 0)), "nonempty"),
    (dict(seg_of=(0, 0, 0, 1, 1)), "seg_of has 5 entries"),
])
def test_config_check_rejects(kw, match):
    with pytest.raises(ValueError, match=match):
        good(**kw).check(N6, E6, H200, 16)


def test_config_temporal_must_be_whole_gpu_one_microbatch():
    with pytest.raises(ValueError, match="D = 1"):
        Config(D=1, w=0, seg_of=(0,) * N6, alloc=(128,), microbatch=16).check(N6, E6, H200, 16)
    with pytest.raises(ValueError, match="D = 1"):
        Config(D=1, w=0, seg_of=(0,) * N6, alloc=(132,), microbatch=8).check(N6, E6, H200, 16)


@pytest.mark.parametrize("alloc, match", [
    ((64, 56), "sum"), ((0, 128), "minimum"), ((4, 124), "minimum"), ((20, 108), "quantum"),
    ((64.5, 63.5), "integer"), ((128,), "D = 2"), ((float("nan"), 64), "integer"),
    ((float("inf"), 64), "integer"),
])
def test_check_allocation_rejects(alloc, match):
    with pytest.raises(ValueError, match=f"allocation.*{match}"):
        check_allocation(alloc, H200, 2)


def test_check_allocation_b200_quantum_two():
    b = get_hardware("B200")
    check_allocation((2, 146), b, 2)
    check_allocation((30, 30, 30, 30, 28), b, 5)
    with pytest.raises(ValueError, match="quantum 2"):
        check_allocation((3, 145), b, 2)


# ---------------------------------------------------------------------------- bad cuts
def test_check_cut_not_predecessor_closed_names_edge():
    edges = [(0, 2), (1, 3)]
    with pytest.raises(ValueError, match=r"not predecessor-closed: kernel 1 \(segment 1\)"):
        check_cut((0, 1, 1, 0), 4, edges, 2)


def test_cut_from_starts_edge_going_backwards():
    # kernels listed out of topological order: edge 3 -> 1 would go from segment 1 to 0
    with pytest.raises(ValueError, match="not predecessor-closed"):
        cut_from_starts(4, [(0, 1), (3, 1)], [2])


@pytest.mark.parametrize("starts", [[0, 2], [3, 2], [2, 2], [6], [-1]])
def test_cut_from_starts_bad_indices(starts):
    with pytest.raises(ValueError, match="cuts must be strictly increasing"):
        cut_from_starts(6, E6, starts)


def test_enumerate_cuts_bad_K_or_edges():
    with pytest.raises(ValueError, match="K"):
        list(enumerate_cuts(4, chain(4), 5))
    with pytest.raises(ValueError, match="K"):
        list(enumerate_cuts(4, chain(4), 0))
    with pytest.raises(ValueError, match="edges"):
        list(enumerate_cuts(4, [(0, 4)], 2))


def test_record_codec_round_trips_config_and_deployment():
    """``Config.to_record``/``from_record`` and ``Deployment.to_record``/``from_record`` are one
    codec: a configuration with boundary reuse, two streams and a non-default policy comes back
    equal, its record holds the kernel names and the "64|64" form the store and the printed
    commands read, and the deployment's options (routing, output length) survive too.
    Oracle: equality with the originals and the hand-written record strings."""
    import dataclasses

    from subgpu_jax.model.deployment import RECORD_FIELDS, RECORD_OPTIONS, Deployment
    from subgpu_jax.model.workload import Workload
    from subgpu_jax.space.config import workload_config

    dep = dataclasses.replace(REFERENCE_DEPLOYMENT, routing="multinomial", output_len=8)
    wl = Workload.from_model(get_model("gpt-oss-120b"), dep, get_hardware("B200"))
    g1 = wl.graph(1)
    cfg = dataclasses.replace(workload_config(wl, ["L1.attn", "L1.o_proj"], [48, 100], 256, True,
                                              "layer_major"), streams_per_stage=2)
    rec = cfg.to_record(g1, wl.microbatches_of(cfg.microbatch))
    assert (rec["cuts"], rec["sms"], rec["K"], rec["microbatches"]) == (
        "L1.attn|L1.o_proj", "48|100", 3, 2)
    assert Config.from_record(rec, g1) == cfg
    drec = dep.to_record()
    assert list(drec) == list(RECORD_FIELDS + RECORD_OPTIONS)
    assert Deployment.from_record(drec) == dep
    core = Deployment.from_record(drec, options=False)
    assert core.routing == Deployment.routing and core.global_batch == dep.global_batch
    with pytest.raises(ValueError):
        Config.from_record(dict(rec, cuts="L1.nope"), g1)
