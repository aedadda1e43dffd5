"""Worker processes started before their sweep (``app.pool.WorkerPool``, ``subgpu search``'s
``start_search_workers``; issue 42 item 3: the main job's first run).

Oracles: the pool's records equal those of workers started by the sweep itself and of one
process (field for field); the worker count rule by hand; every process of a pool ends (used,
partly used, unused, refused input)."""

from __future__ import annotations

import argparse
import json
import os

import pytest

from subgpu_jax.app.commands.search import prepare_worker, start_search_workers
from subgpu_jax.app.pool import WorkerPool, run_sweep_pool
from subgpu_jax.app.searchjob import PointScorer, ScorerSpec
from subgpu_jax.app.store import SweepStore
from subgpu_jax.app.sweep import build_grid, run_sweep
from subgpu_jax.model.hardware import get_hardware
from subgpu_jax.model.models import get_model
from subgpu_jax.model.setup import GpuSetup
from subgpu_jax.score.timer import StaticTimer

H200 = get_hardware("H200")


def _grid():
    arch = get_model("gpt-oss-20b")
    pts = build_grid(arch, 8, [64, 128], [2, 3], [2], ["wavefront"],
                     parallelisms=[(8, 1, 8)], hw=H200)
    return arch, pts


def _records(store) -> list[str]:
    return sorted(json.dumps(r, sort_keys=True) for r in store.records)


def test_a_pool_gives_the_records_of_one_process(tmp_path):
    """Three workers started ahead, two taken (the third ends), against one process and
    against workers the sweep starts itself: the same records; every process ended."""
    arch, pts = _grid()
    setup = GpuSetup.uncalibrated(H200)
    scorer = PointScorer(arch, setup, StaticTimer(H200))
    meta = {"test": "prestart"}
    keys = [p.key for p in pts]
    with SweepStore(str(tmp_path / "one"), meta, keys=keys) as one:
        run_sweep(pts, scorer, one)
        ref = _records(one)
    pool = WorkerPool(3, None, prepare_worker)
    assert len(pool) == 3
    try:
        with SweepStore(str(tmp_path / "pool"), meta, keys=keys) as st:
            out = run_sweep_pool(pts, ScorerSpec.like(scorer), st, 2, pool=pool)
            assert out["evaluated"] == len(pts) and out["remaining"] == 0
            assert _records(st) == ref
    finally:
        pool.close()
    assert not any(pr.is_alive() for pr in pool.procs)
    with SweepStore(str(tmp_path / "own"), meta, keys=keys) as st:
        run_sweep_pool(pts, ScorerSpec.like(scorer), st, 2)
        assert _records(st) == ref
    with pytest.raises(ValueError, match="each pool serves one sweep"):
        pool.take(1, ScorerSpec.like(scorer))


def test_unused_pool_ends_and_bad_sizes_are_refused():
    pool = WorkerPool(2)
    pool.close()
    assert not any(pr.is_alive() for pr in pool.procs)
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="workers must be an integer >= 1"):
            WorkerPool(bad)


def _args(tmp_path, **kw) -> argparse.Namespace:
    base = {"overwrite": False, "out": str(tmp_path / "fresh"), "budget": None}
    return argparse.Namespace(**{**base, **kw})


def test_how_many_start_ahead(tmp_path):
    """As many as the sweep runs on a folder without records (its workers, at most one per grid
    point and --budget); none with one worker or where finished points may be reused (the
    sweep then starts as many as the points left); --overwrite counts as a fresh folder."""
    from subgpu_jax.app.commands.search import _ahead_count

    pts = list(range(15))
    assert _ahead_count(_args(tmp_path), 2, pts) == 2
    assert _ahead_count(_args(tmp_path), 64, pts) == 15
    assert _ahead_count(_args(tmp_path, budget=2), 64, pts) == 2
    assert _ahead_count(_args(tmp_path), 1, pts) == 0
    old = tmp_path / "old"
    old.mkdir()
    (old / "records.jsonl").write_text("")
    assert _ahead_count(_args(tmp_path, out=str(old)), 2, pts) == 0
    assert _ahead_count(_args(tmp_path, out=str(old), overwrite=True), 2, pts) == 2
    assert start_search_workers(1) is None and start_search_workers(0) is None
    pool = start_search_workers(2)
    try:
        assert len(pool) == 2 and pool.compile_cache is not None
    finally:
        pool.close()
    assert not any(pr.is_alive() for pr in pool.procs)


def test_refused_search_leaves_no_worker(tmp_path, capsys):
    """A flag refused after the workers started (a calibration file that does not exist, read
    once the grid is built): exit 2 with one line, and no process of the pool left running."""
    import multiprocessing as mp

    from subgpu_jax.app.cli import main

    before = set(p.pid for p in mp.active_children())
    import subgpu_jax.app.commands.search as cs

    started = []
    real = cs.start_search_workers

    def spy(n):
        started.append(real(n))
        return started[-1]

    cs.start_search_workers = spy
    try:
        rc = main(["search", "--workers", "2", "--calibration", str(tmp_path / "none.json"),
                   "--out", str(tmp_path / "o")])
    finally:
        cs.start_search_workers = real
    assert rc == 2 and started and started[0] is not None and len(started[0]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: calibration: cannot read")
    assert not any(pr.is_alive() for pr in started[0].procs)
    assert not [p for p in mp.active_children() if p.pid not in before]
    assert os.path.isdir(tmp_path) and not (tmp_path / "o").exists()
