"""Segment tables filled pool by pool (``vctables.PoolTables``): the cells of the pools a
first fill names equal, bit for bit, those of the whole table (``segment_tables`` through
``vcbatch.cell_table``, the construction it replaces), with the kernels' whole tables in
``PROFILE_MEMO`` or not, with and without contention; the lazy estimator scores every
allocation as the one built on the whole table; the task DAG is shared between cuts with the
same segment-level edges and read-only."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from subgpu_jax.model.graph import Deployment, build_graph
from subgpu_jax.model.hardware import get_hardware
from subgpu_jax.model.models import get_model
from subgpu_jax.score import vctables as vt
from subgpu_jax.score.vcbatch import cell_table
from subgpu_jax.score.vcontention import VContentionEvaluator, reference_hits
from subgpu_jax.sim.contention import ContentionModel
from subgpu_jax.space.config import chain_cut
from subgpu_jax.space.taskdag import build_task_dag

H200 = get_hardware("H200")
DEP = Deployment(num_gpus=8, attn_tp=8, attn_dp=1, moe_ep=8, global_batch=256)


@pytest.fixture(scope="module")
def g2():
    return build_graph(get_model("gpt-oss-20b"), DEP, 2)


def _whole_cells(g, seg, K, w, model, hits) -> np.ndarray:
    """The oracle: the cells of the whole table, (16, K_pad, N+1, NC-1, NP-1)."""
    t = vt.segment_tables(g, seg, K, w, H200, model, hits)
    return np.asarray(cell_table(np.asarray(t.rows), t.tau.shape)).reshape(
        (16,) + t.tau.shape[:2] + (t.tau.shape[2] - 1, t.tau.shape[3] - 1))


@settings(max_examples=12, deadline=None)
@given(start=st.integers(3, 20), w=st.sampled_from([0, 1]),
       pools=st.lists(st.integers(1, 132), min_size=1, max_size=6),
       cold=st.booleans(), contention=st.booleans())
def test_first_fill_equals_the_whole_table_on_its_pools(g2, start, w, pools, cold, contention):
    K = 2 + w
    starts = [start, g2.n - 1] if w else [start]
    seg = chain_cut(g2.n, starts)
    model = ContentionModel() if contention else ContentionModel.off()
    hits = reference_hits(g2, seg, 2, w, H200, "wavefront", 1, "lru")
    if cold:   # the kernels' rows computed on the pools only, not sliced from the memos
        vt.PROFILE_MEMO.clear()
        vt.POOL_ROWS.clear()
    pt = vt.PoolTables(g2, seg, K, w, H200, model, hits)
    pt.fill(pools)
    p = np.unique(pools)
    assert pt.filled[p].all() and pt.filled.sum() == (p.size if contention else H200.num_sms + 1)
    got = np.asarray(pt.cells()).reshape((16,) + pt.shape[:2] + (pt.shape[2] - 1,
                                                                pt.shape[3] - 1))
    want = _whole_cells(g2, seg, K, w, model, hits)
    assert np.array_equal(got[:, :, p], want[:, :, p])
    if cold:   # the same pools again: every row from POOL_ROWS, the same cells
        vt.PROFILE_MEMO.clear()
        again = vt.PoolTables(g2, seg, K, w, H200, model, hits)
        again.fill(pools)
        assert np.array_equal(np.asarray(again.cells()), np.asarray(pt.cells()))
    pt.fill([int(x) % 132 + 1 for x in p + 7])   # a second fill: every pool
    assert pt.filled.all()
    assert np.array_equal(np.asarray(pt.cells()).reshape(want.shape), want)
    full = pt.full()
    t = vt.segment_tables(g2, seg, K, w, H200, model, hits)
    assert all(np.array_equal(np.asarray(getattr(full, x)), np.asarray(getattr(t, x)))
               for x in ("tau", "busy", "conc", "power", "rows", "seg_stage"))


def test_fill_refuses_pools_outside_the_gpu(g2):
    pt = vt.PoolTables(g2, chain_cut(g2.n, [5]), 2, 0, H200)
    with pytest.raises(ValueError, match="pools must be in 0..132"):
        pt.fill([0, 133])
    for bad in ([1.5], [True], ["40"]):
        with pytest.raises(ValueError, match="pools must be integers"):
            pt.fill(bad)
    assert not pt.filled.any()
    with pytest.raises(ValueError, match="without cells"):
        vt.PoolTables(g2, chain_cut(g2.n, [5]), 2, 0, H200, cells=False).fill([40])


def test_pool_rows_keep_their_gpu_alive(g2):
    """A ``POOL_ROWS`` entry is keyed by the GPU's id and holds the GPU, so a new GPU made
    at a freed one's address can never read its rows."""
    import gc
    import weakref

    from subgpu_jax.model.hardware import Hardware

    vt.PROFILE_MEMO.clear()
    vt.POOL_ROWS.clear()
    hw = Hardware(**{f.name: getattr(H200, f.name) for f in __import__("dataclasses").fields(H200)})
    ref = weakref.ref(hw)
    vt.PoolTables(g2, chain_cut(g2.n, [5]), 2, 0, hw).fill([40])
    assert len(vt.POOL_ROWS) > 0
    del hw
    gc.collect()
    assert ref() is not None   # held by the rows keyed by its id
    vt.POOL_ROWS.clear()


def test_lazy_estimator_scores_as_the_whole_table(g2):
    """The estimator filling its tables on demand (first its seeds' pools, then all) gives
    the makespans of one whose tables were whole from the start, bit for bit."""
    seg = chain_cut(g2.n, [7, 15])
    lazy = VContentionEvaluator(g2, seg, 3, 0, H200)
    whole = VContentionEvaluator(g2, seg, 3, 0, H200)
    whole.cells                                                      # every pool filled
    A = np.array([[40, 48, 40], [16, 72, 40]])
    B = np.array([[8, 8, 112], [64, 32, 32], [24, 96, 8], [40, 48, 40]])
    assert np.array_equal(lazy.makespan(A), whole.makespan(A))
    assert not lazy.pool_tables.filled.all()
    assert np.array_equal(lazy.makespan(B), whole.makespan(B))
    assert lazy.pool_tables.filled.all()


def test_task_dag_shared_between_cuts_with_equal_segment_edges(g2):
    """Chain cuts with the same segment-level edges (inside a region and across regions) get
    one DAG, others their own; the shared arrays cannot be written."""
    args = (g2.n, g2.edges, g2.cross_edges)

    def key(s):
        return ({(s[u], s[v]) for u, v in g2.edges if s[u] != s[v]},
                {(s[u], s[v]) for u, v in g2.cross_edges})

    cuts = [chain_cut(g2.n, [x]) for x in range(2, g2.n)]
    dags = [build_task_dag(*args, c, 2, 0, g2.num_regions, 2) for c in cuts]
    pairs = [(i, j) for i in range(len(cuts)) for j in range(i)]
    assert any(key(cuts[i]) == key(cuts[j]) for i, j in pairs)
    assert all((dags[i] is dags[j]) == (key(cuts[i]) == key(cuts[j])) for i, j in pairs)
    with pytest.raises(ValueError):
        dags[0].stage[0] = 1
