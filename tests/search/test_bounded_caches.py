"""Bounded memory by construction (issue 29, docs/reliability.md "Memory"): the cheap
estimators of a problem in a least-recently-used cache bounded by bytes, compiled programs per
structure in a bounded cache that frees what it evicts, host arrays moved to the device without
compiling, and a grid point's leftovers freed once it is stored. Results stay identical.

Oracles: the bound itself (bytes, entries), eviction counters, weak references (an evicted
program is garbage), JAX's compile events, and makespans/records equal to an unbounded run.
The 100-point resident-memory measurement is experiments/bench_sweep_memory.py.
"""

from __future__ import annotations

import gc
import weakref

import jax
import numpy as np
import pytest

from subgpu_jax import get_hardware, get_model
from subgpu_jax.model.graph import Deployment
from subgpu_jax.model.lru import ByteLRU, nbytes_of
from subgpu_jax.sim.contention import ContentionModel
from subgpu_jax.score.timer import StaticTimer
from subgpu_jax.model.workload import Workload
from subgpu_jax.score.programs import ProgramCache, release_compiled, to_device
from subgpu_jax.search.problem import ContentionEstimators, Problem


@pytest.fixture(scope="module")
def workload():
    arch = get_model("gpt-oss-20b")
    dep = Deployment(num_gpus=8, attn_tp=8, attn_dp=1, moe_ep=8, global_batch=64)
    return Workload.from_model(arch, dep), get_hardware("H200")


def _cuts(n: int, D: int, count: int) -> list[tuple[int, ...]]:
    """``count`` distinct chain cuts of n kernels into D segments."""
    out = []
    for s in range(1, n - D + 1):
        starts = [s] + list(range(n - D + 2, n))[: D - 2]
        seg = [sum(i >= x for x in starts) for i in range(n)]
        out.append(tuple(seg))
        if len(out) == count:
            break
    return out


def test_byte_lru_bound_order_and_oversize():
    c = ByteLRU(100)
    for k in range(5):
        assert c.get_or_make(k, lambda: np.zeros(5)).nbytes == 40  # 40 bytes each
    assert c.keys() == [3, 4] and c.nbytes == 80 and c.evictions == 3
    c.get_or_make(3, lambda: pytest.fail("cached"))  # a hit refreshes 3
    c.get_or_make(5, lambda: np.zeros(5))
    assert c.keys() == [3, 5] and c.hits == 1
    big = c.get_or_make("big", lambda: np.zeros(50))  # larger than the bound: not stored
    assert big.shape == (50,) and "big" not in c and c.nbytes <= 100
    c.clear()
    assert len(c) == 0 and c.evictions == 4  # clear is not an eviction
    assert ByteLRU(0).get_or_make(1, lambda: 7) == 7 and len(ByteLRU(0)) == 0
    with pytest.raises(ValueError, match="max_bytes must be an integer >= 0"):
        ByteLRU(-1)


def test_byte_lru_get_and_put():
    """``get`` counts a hit or a miss and marks the key recently used; ``put`` stores what fits
    and evicts the least recently used first."""
    c = ByteLRU(160)
    assert c.get("a") is None and c.get("a", 5) == 5 and c.misses == 2
    c.put("a", np.zeros(10))
    c.put("b", np.zeros(10))
    assert c.get("a").shape == (10,) and c.hits == 1     # "a" now the most recent
    c.put("c", np.zeros(10))                              # evicts "b"
    assert c.keys() == ["a", "c"] and c.evictions == 1
    c.put("big", np.zeros(30))                            # over the bound: not stored
    assert "big" not in c and c.nbytes == 160


def test_nbytes_of_counts_reachable_arrays_once():
    a = np.zeros(10)
    obj = {"x": a, "y": [a, jax.numpy.ones(4)], "z": ("s", 3)}
    assert nbytes_of(obj) == 80 + 16


def test_nbytes_of_leaves_out_shared_descriptions(workload):
    """The region graph, the GPU and the contention model are referenced by every cached
    estimator and owned by none: a value's size leaves them out (arrays they hold included),
    while the value's own arrays, however nested, count once."""

    class Shared:
        SHARED_BY_CACHED_VALUES = True

        def __init__(self):
            self.big = np.zeros(1000)

    own = np.zeros(7)
    value = {"graph": Shared(), "mine": [own, (own, 3, "x", 2.5)], "n": 4}
    assert nbytes_of(Shared()) == 0 and nbytes_of(value) == 56
    wl, hw = workload
    g = wl.graph(2)
    assert nbytes_of({"g": g, "hw": hw, "m": ContentionModel(), "a": own}) == 56


@pytest.mark.parametrize("kind", ["static", "contention"])
def test_evaluator_cache_bounded_and_rebuilt_identically(workload, kind):
    """More cuts than fit in a 1-MiB (static) / 8-MiB (contention) cache: it never holds more
    than its bound, evicts the least recently used, and an evicted estimator rebuilt scores the
    same allocations to the same makespans."""
    wl, hw = workload
    mib = 1 if kind == "static" else 8
    p = Problem(wl, hw, evaluator_cache_mib=mib,
                estimator=ContentionEstimators() if kind == "contention" else None)
    n = wl.graph(2).n
    cuts = _cuts(n, 2, 5)
    A = np.array([[64, 64], [32, 96], [96, 32]])
    first = {c: p.evaluator(c, 2, 0, 2).makespan(A) for c in cuts}
    assert p.evaluators.nbytes <= mib * 2**20
    assert p.evaluators.misses == len(cuts)
    size = nbytes_of(p.evaluator(cuts[-1], 2, 0, 2))  # every cut of one D: the same size
    kept = min(len(cuts), (mib << 20) // size)
    assert len(p.evaluators) == kept and p.evaluators.evictions == len(cuts) - kept
    if kind == "contention":  # several MiB of tables each: some were evicted
        assert kept < len(cuts)
    again = {c: p.evaluator(c, 2, 0, 2).makespan(A) for c in cuts}
    assert all(np.array_equal(first[c], again[c]) for c in cuts)
    p.clear_evaluators()
    assert len(p.evaluators) == 0 and p.evaluators.nbytes == 0
    unbounded = Problem(wl, hw, evaluator_cache_mib=4096, estimator=p.estimator)
    assert all(np.array_equal(unbounded.evaluator(c, 2, 0, 2).makespan(A), first[c])
               for c in cuts)


def test_program_cache_bounded_and_frees_evicted_programs():
    def f(x, k):
        return (x * k).sum()

    pc = ProgramCache(f, static_argnums=(1,), maxsize=2)
    ref = jax.jit(f, static_argnums=(1,))
    xs = [to_device(np.arange(n, dtype=np.float32)) for n in (3, 4, 5)]
    for x in xs:
        assert float(pc(x, 2)) == float(ref(x, 2))
    assert len(pc) == 2 and pc.compiles == 3 and pc.evictions == 1
    pc(xs[2], 2)  # a hit: nothing compiled
    assert pc.compiles == 3
    wrapper = pc._program((xs[1], 3))  # a new structure (static 3)
    gone = weakref.ref(wrapper)
    del wrapper
    pc(xs[0], 5)  # ... evicted by the next one
    pc(xs[2], 7)
    gc.collect()
    assert gone() is None  # nothing of this cache keeps an evicted program alive
    with pytest.raises(ValueError, match="maxsize must be an integer >= 1"):
        ProgramCache(f, maxsize=0)


def test_release_compiled_drops_every_program_and_keeps_values():
    """``release_compiled`` empties every live ProgramCache and JAX's caches; the next call
    compiles the structure again and returns the same value."""
    def f(x):
        return (x * x).sum()

    pc = ProgramCache(f)
    x = to_device(np.arange(6, dtype=np.float32))
    before = float(pc(x))
    assert len(pc) == 1 and pc.compiles == 1
    assert release_compiled() >= 1
    assert len(pc) == 0
    assert float(pc(x)) == before == 55.0  # 0 + 1 + 4 + 9 + 16 + 25
    assert pc.compiles == 2


def test_search_releases_compiled_programs_every_n_points(tmp_path, monkeypatch):
    """With ``JAX_CACHE_CLEAR_EVERY`` = 1 the search releases the compiled programs after each
    grid point it frees (the 2 pipelined ones), and writes the records of a search that never
    releases them."""
    import json

    from subgpu_jax.app import searchjob, searchrun, sweep

    arch, hw = get_model("gpt-oss-20b"), get_hardware("H200")
    pts = sweep.build_grid(arch, 8, [64], [2, 3], [2], hw=hw, parallelisms=[(8, 1, 8)])
    calls = []

    def run(folder, every):
        monkeypatch.setattr(searchjob, "JAX_CACHE_CLEAR_EVERY", every)
        monkeypatch.setattr(searchjob, "release_compiled",
                            lambda: calls.append(folder.name) or release_compiled())
        searchrun.run_search(arch, hw, pts, str(folder), {"t": 1}, searchjob.SearchOptions(
            timer=StaticTimer(hw), cheap="vcontention", progress=False))
        return [json.loads(x) for x in (folder / "records.jsonl").read_text().splitlines()]

    forgotten = []
    forget = searchjob.PointScorer.forget_point
    monkeypatch.setattr(searchjob.PointScorer, "forget_point",
                        lambda self, pt: forgotten.append(pt) or forget(self, pt))
    released = run(tmp_path / "a", 1)
    assert len(forgotten) == 2 and calls == ["a", "a"]
    kept = run(tmp_path / "b", 10**9)
    assert len(forgotten) == 4 and calls == ["a", "a"]
    assert released == kept


def test_to_device_compiles_nothing():
    seen = []

    def listen(name, _dur, **_kw):
        if "backend_compile" in name:
            seen.append(name)
    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        for n in (17, 18, 19):  # shapes never used before in this process
            a = to_device(np.arange(n))
            b = to_device(np.ones(n) > 0)
            c = to_device(np.linspace(0, 1, n), np.float32)
            assert a.dtype == np.int32 and b.dtype == bool and c.dtype == np.float32
            assert np.array_equal(np.asarray(a), np.arange(n))
    finally:
        jax.monitoring.clear_event_listeners()
    assert seen == []


def test_search_forgets_each_grid_point_and_records_stay_identical(tmp_path):
    """A sweep with the contention-aware cheap estimator: after every grid point its problem
    holds no estimator and no simulation summary; records equal a run with caches that keep
    everything (no eviction, nothing forgotten)."""
    from subgpu_jax.app import searchjob, searchrun, sweep

    arch, hw = get_model("gpt-oss-20b"), get_hardware("H200")
    pts = sweep.build_grid(arch, 8, [64], [2, 3], [2], hw=hw, parallelisms=[(8, 1, 8)])
    seen = []
    orig = searchjob.PointScorer.__call__
    forget = searchjob.PointScorer.forget_point

    def spy(self, pt):
        out = orig(self, pt)
        seen.append((sum(len(p.evaluators) for p in self._problems.values()),
                     len(self._sim_summary)))
        return out

    def records(folder, keep: bool):
        searchjob.PointScorer.__call__ = spy
        if keep:
            searchjob.PointScorer.forget_point = lambda self, pt: None
        try:
            searchrun.run_search(arch, hw, pts, str(folder), {"t": 1}, searchjob.SearchOptions(
                timer=StaticTimer(hw), cheap="vcontention", progress=False))
        finally:
            searchjob.PointScorer.__call__ = orig
            searchjob.PointScorer.forget_point = forget
        import json
        return [json.loads(x) for x in (folder / "records.jsonl").read_text().splitlines()]

    bounded = records(tmp_path / "a", keep=False)
    assert seen and all(s == (0, 0) for s in seen), seen
    seen.clear()
    kept = records(tmp_path / "b", keep=True)
    assert any(s[0] > 0 for s in seen)  # the control kept its estimators
    assert bounded == kept


def test_lone_solve_cache_is_bounded():
    """The memoised lone-kernel solves (sim.solvecache) are a least-recently-used cache of at
    most LONE_SOLVE_CACHE_SIZE entries: 2x that many insertions leave it at the bound, the most
    recent key present and the oldest gone; the work solves (sim.worksolve) use that one cache."""
    from subgpu_jax.sim import worksolve
    from subgpu_jax.sim.solvecache import LONE_SOLVE_CACHE_SIZE, SolveCache

    assert worksolve.LONE_SOLVES.entries.maxsize == LONE_SOLVE_CACHE_SIZE
    c = SolveCache(100)
    for i in range(200):
        c.put(("probe", i), i)
    assert len(c) == 100 and c.entries.evicted == 100
    assert c.get(("probe", 199)) == 199 and c.get(("probe", 0)) is None
