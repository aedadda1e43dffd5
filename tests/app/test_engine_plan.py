"""A sweep compiles the event simulator's engine only where it pays (``app.searchrun.engine_plan``,
``score.eventtimers.EventTimer.without_engine``, ``sim.batchednb.compile_later``; issue 42
item 3: the main job's first run).

Oracles: the rule by hand (``ENGINE_MIN_POINTS``); the timer without its engine gives the
compiled engine's makespans (the engine equals the full simulation bit for bit, the fast-forward
is within ``FORWARD_TOL`` of it); a small search in a fresh engine cache folder stores the same
records as the same search with the engine compiled, and leaves the engine compiled for the next
run (the detached compilation's cache index appears)."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from subgpu_jax.app import searchrun
from subgpu_jax.app.searchjob import PointScorer, ScorerSpec
from subgpu_jax.app.searchrun import ENGINE_MIN_POINTS, engine_plan
from subgpu_jax.model.graph import Deployment, build_graph
from subgpu_jax.model.hardware import get_hardware
from subgpu_jax.model.models import get_model
from subgpu_jax.model.setup import GpuSetup
from subgpu_jax.score.timer import (BatchedEventTimer, ContentionTimer, EventTimer,
                                    ScreenedTimer, StaticTimer)
from subgpu_jax.sim.periodic import FORWARD_TOL
from subgpu_jax.space.config import Config, chain_cut

ROOT = Path(__file__).resolve().parents[2]
H200 = get_hardware("H200")


def test_the_rule(monkeypatch):
    """No engine, one compiled already or no point left: "ready"; else compiled ahead from
    ENGINE_MIN_POINTS SubGPU points left, or for a timer whose engine is what it is
    (``without_engine`` keeps it: event-batched); the Python simulator below."""
    plain = SimpleNamespace(compiled=False)
    compiled = SimpleNamespace(compiled=True)
    compiled.without_engine = lambda: plain
    own = SimpleNamespace(compiled=True)
    own.without_engine = lambda: own
    monkeypatch.setattr(searchrun, "engine_ready", lambda: False)
    assert engine_plan(plain, 10**6) == "ready"
    assert engine_plan(compiled, ENGINE_MIN_POINTS) == "compile"
    assert engine_plan(compiled, ENGINE_MIN_POINTS - 1) == "python"
    assert engine_plan(compiled, 1) == "python"
    assert engine_plan(compiled, 0) == "ready"          # nothing to time: nothing compiled
    assert engine_plan(own, 1) == "compile"
    assert engine_plan(BatchedEventTimer(H200), 1) == (
        "compile" if BatchedEventTimer(H200).compiled else "ready")
    monkeypatch.setattr(searchrun, "engine_ready", lambda: True)
    assert engine_plan(compiled, 1) == "ready" and engine_plan(compiled, 10**6) == "ready"


def test_starting_a_compilation_is_best_effort(monkeypatch, tmp_path):
    """The background compilation runs this process's copy of the package (its import path as
    the child's PYTHONPATH); a process that cannot be started (a process limit) starts nothing
    and raises nothing."""
    import subprocess

    from subgpu_jax.sim import batchednb

    monkeypatch.setattr(batchednb, "engine_ready", lambda: False)
    monkeypatch.setattr(batchednb, "numba_available", lambda: True)
    monkeypatch.setattr(batchednb, "_lock_file", lambda d: open(tmp_path / "compile.lock", "a"))
    seen = {}

    def fake(cmd, **kw):
        seen.update(kw)
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(subprocess, "Popen", fake)
    assert batchednb.compile_later() is None and batchednb.compile_ahead() is None
    assert seen["start_new_session"] is False         # compile_ahead's, the last call
    assert seen["env"]["PYTHONPATH"].split(os.pathsep)[:3] == [p for p in sys.path if p][:3]


def test_a_truncated_cache_is_compiled_again(tmp_path):
    """Numba's cache files of the engine emptied (a crash before the rename reached the disk):
    the next run says so on stderr, deletes them and compiles, instead of failing with
    EOFError in every run."""
    pytest.importorskip("numba")
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path), PYTHONPATH=str(ROOT))
    env.pop("NUMBA_DISABLE_JIT", None)
    code = "from subgpu_jax.sim.batchednb import compile_now; print(compile_now())"
    run = lambda: subprocess.run([sys.executable, "-c", code], env=env,  # noqa: E731
                                 capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert run().returncode == 0
    files = glob.glob(str(tmp_path / "**" / "*_simulate_rows*"), recursive=True)
    assert files
    for f in files:
        open(f, "w").close()
    p = run()
    assert p.returncode == 0, p.stderr[-2000:]
    assert "was unreadable (EOFError" in p.stderr and "compiled again" in p.stderr
    assert all(os.path.getsize(f) > 0 for f in glob.glob(
        str(tmp_path / "**" / "*_simulate_rows*"), recursive=True))


def test_timers_without_engine():
    """Timers with no compiled engine return themselves; the event timer returns a copy on the
    Python simulator with the same physics; a screened timer keeps its screen."""
    for t in (StaticTimer(H200), ContentionTimer(H200)):
        assert t.without_engine() is t
    b = BatchedEventTimer(H200, engine="numpy")
    assert b.without_engine() is b
    ev = EventTimer(H200)
    py = ev.without_engine()
    assert py is not ev and py.engine == "python" and not py.compiled and not py.batched
    assert py.batches is None and py.without_engine() is py
    assert (py.model, py.cache, py.mode, py.forward, py.name) == (ev.model, ev.cache, ev.mode,
                                                                  ev.forward, ev.name)
    sc = ScreenedTimer(H200)
    sp = sc.without_engine()
    assert isinstance(sp, ScreenedTimer) and sp.screen is sc.screen and not sp.compiled
    assert sp.confirm_top == sc.confirm_top


def test_same_makespans_without_engine():
    """Two stages, m = 2, three allocations: the Python simulator's makespans equal the
    engine's within FORWARD_TOL (where Numba is missing both are the Python simulator)."""
    dep = Deployment(num_gpus=8, attn_tp=8, attn_dp=1, moe_ep=8, global_batch=256)
    g = build_graph(get_model("gpt-oss-20b"), dep, 2)
    cfg = Config(D=2, w=0, seg_of=chain_cut(g.n, [g.n // 2]), alloc=(64, 64),
                 microbatch=dep.requests_per_gpu // 2)
    allocs = np.array([[64, 64], [32, 96], [96, 32]])
    ev = EventTimer(H200)
    a, b = ev.time_allocs(g, cfg, allocs), ev.without_engine().time_allocs(g, cfg, allocs)
    np.testing.assert_allclose(a, b, rtol=FORWARD_TOL, atol=0)


def test_workers_rebuild_the_choice():
    """A scorer on the timer without its engine travels to worker processes as such
    (``ScorerSpec.compiled``), and the rebuilt scorer's timer has no engine either."""
    setup = GpuSetup.uncalibrated(H200)
    arch = get_model("gpt-oss-20b")
    spec = ScorerSpec.like(PointScorer(arch, setup, EventTimer.of(setup).without_engine()))
    assert spec.compiled is False
    again = spec()
    assert not again.timer.compiled and again.timer.batches is None
    assert ScorerSpec.like(PointScorer(arch, setup, EventTimer.of(setup))).compiled == \
        EventTimer.of(setup).compiled


SEARCH = ["search", "--model", "gpt-oss-20b", "--gpus", "8", "--tp", "8", "--dp", "1",
          "--batches", "64", "--stages", "2", "--microbatches", "2", "--no-progress",
          "--workers", "1"]
CHILD = ("import sys; from subgpu_jax.app.entry import main; sys.exit(main())")


def _search(out, cache) -> subprocess.CompletedProcess:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT),
               JAX_PLATFORMS="cpu")
    env.pop("NUMBA_DISABLE_JIT", None)
    return subprocess.run([sys.executable, "-c", CHILD, *SEARCH, "--out", str(out)], env=env,
                          capture_output=True, text=True, cwd=ROOT, timeout=600)


def _records(folder) -> list[dict]:
    recs = [json.loads(x) for x in (folder / "records.jsonl").read_text().splitlines()
            if x.strip()]
    return sorted((r for r in recs if "_done" not in r), key=lambda r: r["grid_key"])


def test_small_search_in_a_fresh_cache(tmp_path):
    """A one-point search in an empty engine cache runs on the Python simulator (no engine
    check in its summary), then leaves the engine compiled; the same search again runs on the
    engine and stores the same records."""
    pytest.importorskip("numba")
    cache = tmp_path / "numba"
    p = _search(tmp_path / "a", cache)
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads((tmp_path / "a" / "summary.json").read_text()).get("engine_check") is None
    t0 = time.monotonic()     # the detached compilation writes the engine's index
    while not glob.glob(str(cache / "**" / "*_simulate_rows*.nbi"), recursive=True):
        assert time.monotonic() < t0 + 300, "the engine was not compiled for the next run"
        time.sleep(0.5)
    while glob.glob(str(cache / "**" / "compile.lock"), recursive=True) and _lock_held(cache):
        assert time.monotonic() < t0 + 300
        time.sleep(0.2)
    q = _search(tmp_path / "b", cache)
    assert q.returncode == 0, q.stderr[-3000:]
    chk = json.loads((tmp_path / "b" / "summary.json").read_text())["engine_check"]
    assert chk["checked"] >= 1 and chk["max_abs_error"] <= chk["tolerance"]
    assert _records(tmp_path / "a") == _records(tmp_path / "b")


def _lock_held(cache) -> bool:
    """Whether a process holds the engine folder's compile lock (the compilation runs)."""
    import fcntl

    for f in glob.glob(str(cache / "**" / "compile.lock"), recursive=True):
        with open(f, "a") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(fh, fcntl.LOCK_UN)
            except OSError:
                return True
    return False
