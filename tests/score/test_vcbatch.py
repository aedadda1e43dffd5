"""The batch-last vectorised-contention kernel (``subgpu_jax.score.vcbatch``): the same makespans
as the vmapped lane kernel (oracle: ``vcontention.vc_makespan`` with its pair masks), in every
layout option, on structures with several segments per lane and several streams per stage; the
cell table against the row table; exact start times make the masks redundant; no
recompilation."""

from __future__ import annotations

import numpy as np
import pytest

from subgpu_jax.model.graph import Deployment, build_graph
from subgpu_jax.model.hardware import get_hardware
from subgpu_jax.model.models import get_model
from subgpu_jax.score import vcbatch as vb
from subgpu_jax.score import vcontention as vc
from subgpu_jax.score.vcoptions import VCOptions
from subgpu_jax.space.config import Config, chain_cut

H200 = get_hardware("H200")
DEP = Deployment(num_gpus=8, attn_tp=8, attn_dp=1, moe_ep=8, global_batch=256)
ALLOCS = np.array([[16, 72, 40], [8, 8, 112], [40, 48, 40], [64, 32, 32], [24, 96, 8]])


@pytest.fixture(scope="module")
def g2():
    return build_graph(get_model("gpt-oss-20b"), DEP, 2)


def _cfg(g, starts, w, alloc, k=1):
    D = len(starts) + 1 - w
    return Config(D=D, w=w, seg_of=chain_cut(g.n, starts), alloc=tuple(alloc),
                  microbatch=DEP.requests_per_gpu // g.microbatches, streams_per_stage=k)


def _fresh_jits(monkeypatch):
    """New compiled entry points of both kernels (a ``jax.jit`` of the same function would
    reuse the executables compiled before a patched constant)."""
    import jax

    for name in ("vcb_batch", "vcb_batch_fast"):     # the reused and the fast-compiled set
        monkeypatch.setattr(vc, name, jax.jit(lambda *a: vb.vcb_batch_impl(*a),
                                              static_argnums=vb.VCB_STATIC_ARGNUMS))
    monkeypatch.setattr(vc, "vc_batch", jax.jit(lambda *a: vc.vc_batch_impl(*a),
                                                 static_argnums=vc.VC_STATIC_ARGNUMS))


@pytest.mark.parametrize("starts,w", [([6, 15], 0), ([3, 10, 21], 1)])
def test_batched_equals_vmapped_kernel(g2, starts, w):
    """Every layout of the batch-last kernel (packed or separate integrals, by slices or by
    gathered partners, blocks of 2 with a padded last block, level scans unrolled 1, 5 or 64
    levels per loop trip: more than the DAG's levels) gives the vmapped kernel's makespans up
    to float32 summation order (1e-5 relative: the fixed point's 4 damped updates of float32
    sums)."""
    cfg = _cfg(g2, starts, w, ALLOCS[0])
    ref = vc.VContentionEvaluator.for_config(g2, cfg, H200, scan="window")
    want = ref.makespan(ALLOCS)
    for opts in ({"packed": True}, {"packed": False}, {"packed": True, "block": 2},
                 {"packed": False, "block": 2}, {"level_unroll": 1}, {"level_unroll": 5},
                 {"level_unroll": 64}, {"integrals": "gather"},
                 {"integrals": "gather", "block": 2}, {"integrals": "slices"}):
        got = vc.VContentionEvaluator.for_config(g2, cfg, H200, scan="batched", hits=ref.hits,
                                                 **opts).makespan(ALLOCS)
        np.testing.assert_allclose(got, want, rtol=1e-5, err_msg=str(opts))


@pytest.mark.parametrize("k", [1, 2])
def test_loop_form_of_integrals(g2, monkeypatch, k):
    """Above ``UNROLL_MAX_TRIPLES`` the integrals of both kernels run as a ``fori_loop`` over
    the triples (forced here by a limit of 0): with 2 streams per stage (414 triples, irregular)
    and with 2 segments per lane, the batch-last kernel (both layouts) still gives the vmapped
    kernel's makespans."""
    from subgpu_jax.score import lanes

    monkeypatch.setattr(vb, "UNROLL_MAX_TRIPLES", 0)
    monkeypatch.setattr(lanes, "UNROLL_MAX_TRIPLES", 0)
    _fresh_jits(monkeypatch)
    cfg = _cfg(g2, [6, 15] if k == 2 else [3, 10, 21], 0 if k == 2 else 1, ALLOCS[0], k)
    ref = vc.VContentionEvaluator.for_config(g2, cfg, H200, scan="window")
    want = ref.makespan(ALLOCS)
    for packed in (True, False):
        got = vc.VContentionEvaluator.for_config(g2, cfg, H200, scan="batched", hits=ref.hits,
                                                 packed=packed).makespan(ALLOCS)
        np.testing.assert_allclose(got, want, rtol=1e-5, err_msg=f"packed={packed}")
    # the gathered form has no loop form: the same partners as the triples, irregular or not
    got = vc.VContentionEvaluator.for_config(g2, cfg, H200, scan="batched", hits=ref.hits,
                                             integrals="gather").makespan(ALLOCS)
    np.testing.assert_allclose(got, want, rtol=1e-5, err_msg="gather")


@pytest.mark.parametrize("k", [1, 2])
def test_partner_table_is_the_incomparable_pairs(g2, k):
    """Oracle: ``lanes.incomparable_pairs`` (ancestor sets of the task DAG). The real
    (non-pad) partners of every task in ``partner_table`` include each of its incomparable
    tasks exactly once; the extra partners are pairs a DAG path orders (overlap 0 with exact
    start times, ``test_exact_starts_make_masks_redundant``) or the zero slot H."""
    from subgpu_jax.score.lanes import incomparable_pairs

    cfg = _cfg(g2, [6, 15] if k == 2 else [3, 10, 21], 0 if k == 2 else 1, ALLOCS[0], k)
    e = vc.VContentionEvaluator.for_config(g2, cfg, H200, scan="batched")
    plan = e.plan
    idx = vb.partner_table(plan)
    H = plan.valid.shape[0]
    slot = np.asarray(plan.slot)[:e.dag.T]
    task = np.asarray(plan.task)
    assert idx.shape[0] == H and idx.min() >= 0 and idx.max() <= H
    ii, jj = incomparable_pairs(e.dag)
    for u, v in list(zip(ii, jj)) + list(zip(jj, ii)):
        row = idx[slot[u]]
        assert np.count_nonzero(row == slot[v]) == 1, (u, v)
    # no partner on the task's own lane
    lanes = np.asarray(e.dag.lanes())
    for h in np.flatnonzero(np.asarray(plan.valid)):
        real = idx[h][idx[h] < H]
        real = real[task[real] < e.dag.T]
        assert np.all(lanes[task[real]] != lanes[task[h]])


def test_exact_starts_make_masks_redundant(g2):
    """With S the recurrence's own start times, every pair inside a triple that the plan's mask
    drops (ordered by a DAG path) has overlap exactly 0; so the unmasked integrals equal the
    masked ones of ``lanes.lane_integrals`` (oracle) computed on the same S and C."""
    import jax
    import jax.numpy as jnp

    from subgpu_jax.score.lanes import lane_integrals

    cfg = _cfg(g2, [3, 10, 21], 1, ALLOCS[0])
    e = vc.VContentionEvaluator.for_config(g2, cfg, H200, scan="batched")
    plan = e.plan
    rng = np.random.default_rng(0)
    H, B = plan.valid.shape[0], 3
    valid = np.asarray(plan.valid)[:, None]
    tau = jnp.asarray(np.where(valid, rng.uniform(1, 50, (H, B)), 0.0), jnp.float32)
    rates = jnp.asarray(np.where(valid[..., None], rng.uniform(0, 1, (H, B, 3)), 0.0),
                        jnp.float32)
    S, C = vb.batched_start_completion(plan.levels, tau)
    got = vb.batched_integrals(plan, S, C, rates, packed=True)
    want = jax.vmap(lambda s, c, r: lane_integrals(plan, s, c, r), in_axes=(1, 1, 2),
                    out_axes=2)(S, C, jnp.moveaxis(rates, -1, 0))           # (3, H, B)
    np.testing.assert_allclose(np.moveaxis(np.asarray(got), -1, 0), np.asarray(want),
                               rtol=1e-6, atol=1e-4)
    # the start times are the max-plus recurrence: C = S + tau, S_i = max C of predecessors
    np.testing.assert_array_equal(np.asarray(C), np.asarray(S + tau))


def test_cell_table_holds_the_four_corners(g2):
    """Cell (k, p, c, q) of ``cell_table`` holds the row table's grid points (c, q), (c+1, q),
    (c, q+1), (c+1, q+1) (oracle: direct indexing of the row table)."""
    e = vc.VContentionEvaluator.for_config(g2, _cfg(g2, [6, 15], 0, ALLOCS[0]), H200,
                                           scan="batched")
    K, N1, NC, NP = e.tabs.tau.shape
    rows = np.asarray(e.tabs.rows).reshape(K, N1, NC, NP, 4)
    cells = np.asarray(e.cells)
    for (k, p, c, q) in ((0, 8, 0, 0), (1, 40, 5, 3), (2, 128, NC - 2, NP - 2)):
        x = ((k * N1 + p) * (NC - 1) + c) * (NP - 1) + q
        for j, (dc, dq) in enumerate(((0, 0), (1, 0), (0, 1), (1, 1))):
            np.testing.assert_array_equal(cells[4 * j:4 * j + 4, x], rows[k, p, c + dc, q + dq])


def test_no_recompilation_same_shape(g2, monkeypatch):
    """Another allocation batch or another cut of the same padded shapes reuses the compiled
    batch-last function (``chex.assert_max_traces``)."""
    import chex
    import jax

    pads = dict(pad_tasks=256, pad_preds=4, pad_window=16, pad_segments=8, pad_positions=48,
                pad_levels=64, pad_width=8)
    once = jax.jit(chex.assert_max_traces(vb.vcb_batch_impl, n=1),
                   static_argnums=vb.VCB_STATIC_ARGNUMS)
    monkeypatch.setattr(vc, "vcb_batch", once)
    monkeypatch.setattr(vc, "vcb_batch_fast", once)   # VCOptions.reuse False takes this set
    e1 = vc.VContentionEvaluator.for_config(g2, _cfg(g2, [6, 15], 0, (40, 56, 32)), H200,
                                            scan="batched", **pads)
    e1.makespan([[40, 56, 32]])
    e1.makespan([[8, 8, 112], [64, 32, 32]])
    e2 = vc.VContentionEvaluator.for_config(g2, _cfg(g2, [3, 12], 0, (48, 48, 32)), H200,
                                            scan="batched", **pads)
    e2.makespan(np.array([[48, 48, 32]] * 5))


def test_inline_tables_same_numbers(g2):
    """The evaluator's own program with the tables as constants gives the shared program's
    makespans (constant folding may reorder float32 operations: 1e-6 relative)."""
    cfg = _cfg(g2, [3, 10, 21], 1, ALLOCS[0])
    a = vc.VContentionEvaluator.for_config(g2, cfg, H200, scan="batched")
    b = vc.VContentionEvaluator.for_config(g2, cfg, H200, scan="batched", hits=a.hits,
                                           inline_tables=True)
    np.testing.assert_allclose(b.makespan(ALLOCS), a.makespan(ALLOCS), rtol=1e-6)


def test_bad_block(g2):
    with pytest.raises(ValueError, match="block"):
        vc.VContentionEvaluator(g2, chain_cut(g2.n, [6]), 2, 0, H200,
                                options=VCOptions(scan="batched", block=0))
    with pytest.raises(ValueError, match="batched"):
        vc.VContentionEvaluator(g2, chain_cut(g2.n, [6]), 2, 0, H200,
                                options=VCOptions(scan="window", packed=True))
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="level_unroll"):
            vc.VContentionEvaluator(g2, chain_cut(g2.n, [6]), 2, 0, H200,
                                    options=VCOptions(scan="batched", level_unroll=bad))
    with pytest.raises(ValueError, match="batched"):
        vc.VContentionEvaluator(g2, chain_cut(g2.n, [6]), 2, 0, H200,
                                options=VCOptions(scan="levels", level_unroll=4))


BAD_COUNTS = (0, -1, 2.5, 2.0, True, False, "2", "a", float("nan"), float("inf"), [2])


@pytest.mark.parametrize("arg", ["chunk", "block", "level_unroll", "workers"])
@pytest.mark.parametrize("bad", BAD_COUNTS, ids=repr)
def test_bad_counts_name_the_argument(g2, arg, bad):
    """chunk, block, level_unroll, workers: integers >= 1 only (``checks.pos_int``): a float
    is not truncated, a bool or a string is not coerced, NaN, inf and a list give a
    ValueError naming the argument (not an OverflowError/TypeError from int())."""
    with pytest.raises(ValueError, match=rf"^{arg} must be an integer >= 1, got "):
        vc.VContentionEvaluator(g2, chain_cut(g2.n, [6]), 2, 0, H200,
                                options=VCOptions(scan="batched", **{arg: bad}))


@pytest.mark.parametrize("bad", ["false", "True", 0, 1, 1.0, [], "", np.int64(1)], ids=repr)
def test_bad_packed(g2, bad):
    """packed: True, False or None only (``bool("false")`` is True: no coercion)."""
    with pytest.raises(ValueError, match=r"^packed must be True, False or None, got "):
        vc.VContentionEvaluator(g2, chain_cut(g2.n, [6]), 2, 0, H200,
                                options=VCOptions(scan="batched", packed=bad))
    with pytest.raises(ValueError, match=r"^inline_tables must be True or False, got "):
        vc.VContentionEvaluator(g2, chain_cut(g2.n, [6]), 2, 0, H200,
                                options=VCOptions(scan="batched", inline_tables=bad))
    with pytest.raises(ValueError, match=r"^integrals must be one of \('slices', 'gather'\)"):
        vc.VContentionEvaluator(g2, chain_cut(g2.n, [6]), 2, 0, H200,
                                options=VCOptions(scan="batched", integrals=bad))


@pytest.mark.parametrize("packed", [True, False])
def test_packed_only_with_slices(g2, monkeypatch, packed):
    """The gathered integrals sum the three rates in one reduction: an explicit ``packed`` with
    them is refused (not silently ignored); with the slices it is taken; given without
    ``integrals`` it selects the slices on every backend (also where the gather is the
    default); ``integrals`` off the batched kernel is refused like its other options."""
    cut = chain_cut(g2.n, [6])
    with pytest.raises(ValueError, match=r"^packed applies to integrals='slices' only"):
        vc.VContentionEvaluator(g2, cut, 2, 0, H200,
                                options=VCOptions(integrals="gather", packed=packed))
    slices = VCOptions(integrals="slices", packed=packed)
    assert vc.VContentionEvaluator(g2, cut, 2, 0, H200, options=slices).packed is packed
    for backend in ("cpu", "gpu"):
        monkeypatch.setattr(vc.jax, "default_backend", lambda b=backend: b)
        e = vc.VContentionEvaluator(g2, cut, 2, 0, H200, options=VCOptions(packed=packed))
        assert (e.integrals, e.packed) == ("slices", packed)
    with pytest.raises(ValueError, match=r"apply to scan='batched' only, got scan='window'"):
        vc.VContentionEvaluator(g2, cut, 2, 0, H200,
                                options=VCOptions(scan="window", integrals="gather"))


@pytest.mark.parametrize("bad", [np.array("gather"), np.array(["gather", "slices"]),
                                 "GATHER", " gather", b"gather"], ids=repr)
def test_bad_integrals_everywhere(g2, bad):
    """A bad ``integrals`` is one ValueError naming it: in the evaluator (numpy arrays included,
    which would otherwise reach ``jax.jit`` as an unhashable static argument) and in the
    kernel's own ``batched_integrals`` (no silent slices for an unknown name)."""
    import jax.numpy as jnp

    msg = r"^integrals must be one of \('slices', 'gather'\), got "
    with pytest.raises(ValueError, match=msg):
        vc.VContentionEvaluator(g2, chain_cut(g2.n, [6]), 2, 0, H200,
                                options=VCOptions(integrals=bad))
    e = vc.VContentionEvaluator(g2, chain_cut(g2.n, [6]), 2, 0, H200)
    H = e.plan.valid.shape[0]
    z = jnp.zeros((H, 2))
    with pytest.raises(ValueError, match=msg):
        vb.batched_integrals(e.plan, z, z, jnp.zeros((H, 2, 3)), integrals=bad)
    # numpy's own string type is a str: taken, stored as a plain str
    ok = vc.VContentionEvaluator(g2, chain_cut(g2.n, [6]), 2, 0, H200,
                                 options=VCOptions(integrals=np.str_("gather")))
    assert type(ok.integrals) is str and ok.integrals == "gather" and ok.packed is None


def test_integrals_default_per_backend(g2, monkeypatch):
    """Default form: the slices on a CPU, the gather on an accelerator (the measured fastest
    of each, bench_vcontention_cpu.json / bench_vcontention_h200.json)."""
    cut = chain_cut(g2.n, [6])
    monkeypatch.setattr(vc.jax, "default_backend", lambda: "cpu")
    assert vc.VContentionEvaluator(g2, cut, 2, 0, H200).integrals == "slices"
    monkeypatch.setattr(vc.jax, "default_backend", lambda: "gpu")
    e = vc.VContentionEvaluator(g2, cut, 2, 0, H200)
    assert (e.integrals, e.block, e.workers) == ("gather", 128, 1)


@pytest.mark.parametrize("bad", [-1, 2.5, True, "4", float("nan")], ids=repr)
def test_bad_iters_damping(g2, bad):
    with pytest.raises(ValueError, match=r"^iters must be an integer >= 0, got "):
        vc.VContentionEvaluator(g2, chain_cut(g2.n, [6]), 2, 0, H200, options=VCOptions(iters=bad))
    with pytest.raises(ValueError, match=r"^damping must be"):  # a finite number in [0, 1)
        vc.VContentionEvaluator(g2, chain_cut(g2.n, [6]), 2, 0, H200,
                                options=VCOptions(damping=bad))


@pytest.mark.parametrize("bad", [0, 2.5, True, "2", float("nan"), float("inf"), [2]], ids=repr)
def test_bad_chunk_static_evaluator(g2, bad):
    """``evaluator.Evaluator(chunk=)``: the same check as the contention evaluator."""
    from subgpu_jax.score.evaluator import Evaluator

    with pytest.raises(ValueError, match=r"^chunk must be an integer >= 1, got "):
        Evaluator(g2, chain_cut(g2.n, [6]), 2, 0, H200, chunk=bad)


def test_pad_small_one_shape_same_numbers(g2, monkeypatch):
    """``pad_small=True`` pads every batch below the chunk to the chunk: batches of 1, 5, 9, 20
    and 50 allocations run in one compiled shape (``chex.assert_max_traces``), with the
    makespans of the bucketed calls (``pad_small=False``: one shape per size bucket); the
    default pads on a CPU for DAGs of at most ``PAD_SMALL_MAX_TASKS`` tasks."""
    import chex
    import jax

    rng = np.random.default_rng(3)
    pool = np.array([a for a in (rng.integers(1, 9, size=(400, 3)) * 8) if a.sum() <= 128])
    cfg = _cfg(g2, [6, 15], 0, ALLOCS[0])
    ref = vc.VContentionEvaluator.for_config(g2, cfg, H200, scan="batched", pad_small=False)
    want = {n: ref.makespan(pool[:n]) for n in (1, 5, 9, 20, 50)}
    once = jax.jit(chex.assert_max_traces(vb.vcb_batch_impl, n=1),
                   static_argnums=vb.VCB_STATIC_ARGNUMS)
    monkeypatch.setattr(vc, "vcb_batch", once)
    monkeypatch.setattr(vc, "vcb_batch_fast", once)   # VCOptions.reuse False takes this set
    ev = vc.VContentionEvaluator.for_config(g2, cfg, H200, scan="batched", hits=ref.hits,
                                            pad_small=True)
    for n, w in want.items():
        np.testing.assert_allclose(ev.makespan(pool[:n]), w, rtol=1e-6)
    default = vc.VContentionEvaluator.for_config(g2, cfg, H200, scan="batched")
    assert default.pad_small == (jax.default_backend() == "cpu"
                                 and default.dag.T <= vc.PAD_SMALL_MAX_TASKS)
    for bad in ("yes", 1):
        with pytest.raises(ValueError, match="pad_small"):
            vc.VContentionEvaluator.for_config(g2, cfg, H200, scan="batched", pad_small=bad)


def test_default_integrals_by_plan_size(g2, monkeypatch):
    """The default form (``integrals`` not given): on a CPU the slices for a lane plan of at most
    ``GATHER_MIN_TRIPLES`` triples and the gather above it (their tracing and compilation grow
    with the triples: ``results/bench_integrals_cpu.json``); on an accelerator always the
    gather. Both forms give the same makespans (float32 summation order: 1e-5 relative)."""
    cut = chain_cut(g2.n, [6, 15])
    monkeypatch.setattr(vc.jax, "default_backend", lambda: "cpu")
    e = vc.VContentionEvaluator(g2, cut, 3, 0, H200)
    n = len(e.plan.triples)
    assert n > 0
    monkeypatch.setattr(vc, "GATHER_MIN_TRIPLES", n)        # at the threshold: slices
    small = vc.VContentionEvaluator(g2, cut, 3, 0, H200)
    monkeypatch.setattr(vc, "GATHER_MIN_TRIPLES", n - 1)    # one over it: gather
    big = vc.VContentionEvaluator(g2, cut, 3, 0, H200)
    assert (small.integrals, big.integrals) == ("slices", "gather")
    assert big.packed is None and small.packed is True
    np.testing.assert_allclose(big.makespan(ALLOCS), small.makespan(ALLOCS), rtol=1e-5)
    monkeypatch.setattr(vc.jax, "default_backend", lambda: "gpu")
    monkeypatch.setattr(vc, "GATHER_MIN_TRIPLES", 10**9)
    assert vc.VContentionEvaluator(g2, cut, 3, 0, H200).integrals == "gather"


def test_reuse_takes_the_reused_threshold(g2, monkeypatch):
    """``VCOptions.reuse`` (a sweep's process scoring many points of one structure family)
    compares the plan's triples with ``GATHER_MIN_TRIPLES_REUSED`` instead of
    ``GATHER_MIN_TRIPLES``: a plan between the two takes the slices with reuse and the gather
    without; an accelerator takes the gather either way; a given ``integrals`` wins; a
    non-bool ``reuse`` is refused by name."""
    cut = chain_cut(g2.n, [6, 15])
    monkeypatch.setattr(vc.jax, "default_backend", lambda: "cpu")
    n = len(vc.VContentionEvaluator(g2, cut, 3, 0, H200).plan.triples)
    monkeypatch.setattr(vc, "GATHER_MIN_TRIPLES", n - 1)
    monkeypatch.setattr(vc, "GATHER_MIN_TRIPLES_REUSED", n)
    assert vc.VContentionEvaluator(g2, cut, 3, 0, H200).integrals == "gather"
    assert vc.VContentionEvaluator.for_config(
        g2, _cfg(g2, [6, 15], 0, (48, 40, 40)), H200, reuse=True).integrals == "slices"
    with_reuse = vc.VContentionEvaluator(g2, cut, 3, 0, H200, options=VCOptions(reuse=True))
    assert with_reuse.integrals == "slices"
    assert vc.VContentionEvaluator(g2, cut, 3, 0, H200, options=VCOptions(
        reuse=True, integrals="gather")).integrals == "gather"
    monkeypatch.setattr(vc, "GATHER_MIN_TRIPLES_REUSED", n - 1)   # one over it: gather
    assert vc.VContentionEvaluator(g2, cut, 3, 0, H200,
                                   options=VCOptions(reuse=True)).integrals == "gather"
    monkeypatch.setattr(vc.jax, "default_backend", lambda: "gpu")
    monkeypatch.setattr(vc, "GATHER_MIN_TRIPLES_REUSED", 10**9)
    assert vc.VContentionEvaluator(g2, cut, 3, 0, H200,
                                   options=VCOptions(reuse=True)).integrals == "gather"
    with pytest.raises(ValueError, match="reuse must be True or False"):
        vc.VContentionEvaluator(g2, cut, 3, 0, H200, options=VCOptions(reuse="yes"))


def test_contention_estimators_carry_reuse(g2, monkeypatch):
    """The search's cheap-estimator factory (``search.problem.ContentionEstimators``, made by
    ``ContentionCheap.for_sweep``) hands ``reuse`` to its evaluator's options: a plan between
    the two thresholds is scored in the slices form with it and the gather without."""
    from subgpu_jax.search.problem import ContentionEstimators
    from subgpu_jax.search.strategies import ContentionCheap

    cut = chain_cut(g2.n, [6, 15])
    monkeypatch.setattr(vc.jax, "default_backend", lambda: "cpu")
    n = len(vc.VContentionEvaluator(g2, cut, 3, 0, H200).plan.triples)
    monkeypatch.setattr(vc, "GATHER_MIN_TRIPLES", n - 1)
    monkeypatch.setattr(vc, "GATHER_MIN_TRIPLES_REUSED", n)
    forms = {}
    for reuse in (False, True):
        est = ContentionEstimators(reuse=ContentionCheap().for_sweep(reuse).reuse)(
            g2, cut, 3, 0, H200, "wavefront", None, 1)
        forms[reuse] = est.contention.integrals
    assert forms == {False: "gather", True: "slices"}


def test_reuse_keeps_xla_optimisations_and_the_rest_compiles_fast(g2):
    """``VCOptions.reuse`` picks the program set: a sweep that reuses its programs calls
    ``vcb_batch`` (XLA's default compile options), any other caller ``vcb_batch_fast``
    (``programs.FAST_COMPILE``, LLVM level 0). Both compute the same float32 sums in the same
    order, but LLVM's code at level 0 rounds differently in places: here 1 of 5 makespans
    differs by one float32 ulp (42,102.539 against 42,102.543 µs, 9.3e-8 relative), so they
    are compared to 2.5e-7 relative (two ulps)."""
    from subgpu_jax.score.programs import FAST_COMPILE

    assert vc.vcb_batch.compiler_options is None
    assert vc.vcb_batch_fast.compiler_options == FAST_COMPILE
    cfg = _cfg(g2, [6, 15], 0, ALLOCS[0])
    pads = dict(pad_tasks=224, pad_preds=4, pad_window=16, pad_segments=8, pad_positions=40,
                pad_levels=56, pad_width=8)           # a structure no other test compiled
    got = {}
    for reuse, prog in ((False, vc.vcb_batch_fast), (True, vc.vcb_batch)):
        n0, other = prog.compiles, (vc.vcb_batch if not reuse else vc.vcb_batch_fast).compiles
        ev = vc.VContentionEvaluator.for_config(g2, cfg, H200, scan="batched", reuse=reuse,
                                                integrals="gather", **pads)
        got[reuse] = ev.makespan(ALLOCS)
        assert prog.compiles == n0 + 1
        assert (vc.vcb_batch if not reuse else vc.vcb_batch_fast).compiles == other
    np.testing.assert_allclose(got[False], got[True], rtol=2.5e-7)
