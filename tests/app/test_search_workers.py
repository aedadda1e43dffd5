"""``subgpu search --workers``: grid points scored by local worker processes (issue 42 item 3,
``app.pool.search_workers``, ``searchrun.run_search``).

Oracles: the records of a sweep scored by two worker processes equal, field for field, those of
the same sweep in one process (and the outputs list them in grid order); the worker count rule
by hand; a ``Hardware`` and a ``GpuSetup`` survive pickling (they travel to the workers)."""

from __future__ import annotations

import json
import os
import pickle

import pytest

from subgpu_jax.app.cli import main
from subgpu_jax.app.pool import MAX_AUTO_WORKERS, POINTS_PER_WORKER, search_workers
from subgpu_jax.model.hardware import HARDWARE, get_hardware
from subgpu_jax.model.setup import GpuSetup

SMALL = ["search", "--model", "gpt-oss-20b", "--gpus", "8", "--tp", "8", "--dp", "1",
         "--exact", "static", "--batches", "64,128", "--stages", "2,3", "--microbatches", "2",
         "--no-progress"]


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def test_auto_worker_count(monkeypatch):
    """auto: the usable cores, at most MAX_AUTO_WORKERS and one per POINTS_PER_WORKER SubGPU
    points, never below 1; 1 with --cluster or with an accelerator chosen in JAX_PLATFORMS."""
    monkeypatch.delenv("JAX_PLATFORMS", raising=False)
    cores = _cores()
    assert search_workers("auto") == max(1, min(MAX_AUTO_WORKERS, cores))
    assert search_workers("AUTO", points=0) == 1
    assert search_workers("auto", points=POINTS_PER_WORKER - 1) == 1
    assert search_workers("auto", points=100 * POINTS_PER_WORKER) == min(MAX_AUTO_WORKERS, cores)
    assert search_workers("auto", points=2 * POINTS_PER_WORKER) == max(1, min(2, cores))
    assert search_workers("auto", cluster=True, points=1000) == 1
    monkeypatch.setenv("JAX_PLATFORMS", "cuda")
    assert search_workers("auto", points=1000) == 1
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    assert search_workers("auto") == max(1, min(MAX_AUTO_WORKERS, cores))
    assert search_workers("3") == 3 and search_workers(5) == 5 and search_workers(" 1 ") == 1


@pytest.mark.parametrize("bad", ["0", "-1", "x", "1.5", "", 0, True, 2.0, None, "\u00b2",
                                 "\uff12", "\u0663", "1_0", "1025", 10 ** 20])
def test_bad_worker_counts_are_refused(bad):
    with pytest.raises(ValueError, match=r"^workers must be 'auto' or an integer in 1\.\.1,024"):
        search_workers(bad)


def test_workers_refused_beside_another_jax_platform(monkeypatch):
    """Worker processes run JAX on the CPU: with JAX_PLATFORMS naming another platform (or
    present and empty: JAX's own choice) auto is 1 and an explicit count > 1 is refused."""
    for plat in ("cuda", ""):
        monkeypatch.setenv("JAX_PLATFORMS", plat)
        assert search_workers("auto", points=100) == 1 and search_workers("1") == 1
        with pytest.raises(ValueError, match="^workers: worker processes run JAX on the CPU"):
            search_workers("2")


def test_workers_with_cluster_refused():
    assert search_workers(1, cluster=True) == 1
    with pytest.raises(ValueError, match="^workers: with --cluster"):
        search_workers("2", cluster=True)


def test_cli_names_the_flag(tmp_path, capsys):
    assert main(["search", "--workers", "0", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --workers must be 'auto' or an integer in 1..1,024 (processes), "
                   "got '0'"]


def test_hardware_and_setup_pickle():
    """Every preset, and its uncalibrated setup, comes back equal with a read-only
    ``tensor_flops`` (the workers receive them pickled)."""
    for name in HARDWARE:
        hw = get_hardware(name)
        back = pickle.loads(pickle.dumps(hw))
        assert back == hw and dict(back.tensor_flops) == dict(hw.tensor_flops)
        with pytest.raises(TypeError):
            back.tensor_flops["bf16"] = 1.0
        setup = GpuSetup.uncalibrated(hw)
        assert pickle.loads(pickle.dumps(setup)) == setup


def _records(folder) -> list[dict]:
    with open(os.path.join(folder, "records.jsonl")) as fh:
        rows = [json.loads(line) for line in fh]
    return [r for r in rows if "_done" not in r]  # the store's per-point markers left out


def test_two_workers_give_the_records_of_one_process(tmp_path, capsys):
    """Two worker processes (longest points first) against one process: the same records,
    field for field, and records.csv in the same (grid) order."""
    one, two = tmp_path / "one", tmp_path / "two"
    assert main(SMALL + ["--workers", "1", "--out", str(one)]) == 0
    out1 = capsys.readouterr().out
    assert main(SMALL + ["--workers", "2", "--out", str(two)]) == 0
    out2 = capsys.readouterr().out
    assert "2 worker processes" in out2 and "worker processes" not in out1
    key = lambda r: json.dumps(r, sort_keys=True)  # noqa: E731
    r1, r2 = _records(one), _records(two)
    assert len(r1) == 6 and sorted(map(key, r1)) == sorted(map(key, r2))
    assert (one / "records.csv").read_text() == (two / "records.csv").read_text()
    # the printed tables (everything after the sweep's timing line) are the same
    tail = lambda s, d: s[s.index("\n", s.index("evaluated ")):].replace(str(d), "OUT")  # noqa
    assert tail(out1, one) == tail(out2, two)


def test_ctrl_c_with_workers_keeps_finished_points(tmp_path, sweep_procs):
    """Ctrl-C once the first grid point is stored by a 2-worker sweep: exit 130 with the
    search's stop message, no traceback, no worker left running, the folder verifies (no record
    lost or duplicated); the same command again finishes the sweep with the records of a
    one-process run."""
    import signal
    import subprocess

    from subgpu_jax.app.store import SweepStore

    out, ref = tmp_path / "s", tmp_path / "ref"
    args = SMALL + ["--batches", "64,128,256", "--microbatches", "2,4", "--workers", "2"]
    p = sweep_procs.start(args + ["--out", str(out)], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    sweep_procs.wait_first_point(p, out)
    workers = sweep_procs.children(p.pid)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130, err
    assert "Traceback" not in err and "run the same command again to continue" in err
    # the workers the parent had are gone (terminated or died with it)
    assert sweep_procs.none_left(workers)
    man = json.loads((out / "manifest.json").read_text())
    s = SweepStore(str(out), man["meta"])
    s.close()
    assert not s.report, s.report.lines()
    assert 1 <= len(s.done) < 15
    assert main(args + ["--out", str(out)]) == 0
    assert main(args[:-2] + ["--workers", "1", "--out", str(ref)]) == 0
    key = lambda r: json.dumps(r, sort_keys=True)  # noqa: E731
    assert sorted(map(key, _records(out))) == sorted(map(key, _records(ref)))


def test_worker_input_errors_read_as_in_one_process(tmp_path, capsys):
    """A scorer that refuses its input inside a worker (a calibration without the batch asked
    for) gives the single-process sweep's one line and exit 2, not a worker traceback."""
    cal = os.path.join(os.path.dirname(__file__), "..", "..", "experiments", "results",
                       "calibration_h100_qwen25_7b.json")
    args = ["search", "--model", "qwen2.5-7b", "--hardware", "H100", "--gpus", "1", "--tp", "1",
            "--dp", "1", "--kv-history", "1024", "--input-len", "1024", "--batches", "256,512",
            "--stages", "2", "--microbatches", "2", "--exact", "static", "--no-progress",
            "--calibration", cal]
    assert main(args + ["--workers", "1", "--out", str(tmp_path / "one")]) == 2
    one = capsys.readouterr().err.strip().splitlines()
    assert main(args + ["--workers", "2", "--out", str(tmp_path / "two")]) == 2
    two = capsys.readouterr().err.strip().splitlines()
    assert len(one) == 1 and one[0].startswith("error: ") and "Traceback" not in "".join(two)
    assert two[-1] == one[0]


def test_a_dead_worker_is_one_line(tmp_path, sweep_procs):
    """SIGKILL of a worker mid-sweep: one line naming the worker and the grid point, exit 1
    (not a traceback); the finished points stay stored."""
    import signal
    import subprocess

    out = tmp_path / "s"
    args = SMALL + ["--batches", "64,128,256", "--microbatches", "2,4", "--workers", "2"]
    p = sweep_procs.start(args + ["--out", str(out)], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    sweep_procs.wait_first_point(p, out)
    kids = sweep_procs.children(p.pid)
    workers = [k for k in kids if "multiprocessing.resource_tracker" not in
               open(f"/proc/{k}/cmdline").read().replace("\0", " ")]
    if not workers:
        p.kill()
        pytest.skip("the sweep ended before a worker could be killed")
    os.kill(workers[0], signal.SIGKILL)
    _, err = p.communicate(timeout=120)
    lines = err.strip().splitlines()
    assert p.returncode == 1, err
    assert "Traceback" not in err and lines[-1].startswith("error: sweep worker ")
    assert "died (exit code -9)" in lines[-1]


def test_worker_exits_when_its_parent_is_gone():
    """A worker whose parent PID is not its own parent's (the parent died while it started)
    leaves at once, before building a scorer (PR_SET_PDEATHSIG was armed too late for it)."""
    import multiprocessing as mp

    from subgpu_jax.app.pool import worker_main

    ctx = mp.get_context("spawn")
    tasks, results = ctx.Queue(), ctx.Queue()
    pr = ctx.Process(target=worker_main, args=(0, -12345, _never_called, tasks, results))
    pr.start()
    pr.join(60)
    assert pr.exitcode == 0 and results.empty()


def _never_called():
    raise AssertionError("the worker built a scorer for a parent that is gone")


def test_a_custom_timer_is_refused_for_workers():
    """Workers rebuild the exact scorer by its registry name: a timer made with another
    contention model (here the earlier lanes rule "fifo") is refused, never silently replaced;
    the timer the name makes is accepted."""
    from subgpu_jax.app.searchjob import PointScorer, ScorerSpec
    from subgpu_jax.model.models import get_model
    from subgpu_jax.score.timer import EventTimer
    from subgpu_jax.sim.contention import ContentionModel

    hw = get_hardware("H200")
    setup = GpuSetup.uncalibrated(hw)
    arch = get_model("gpt-oss-20b")
    ok = PointScorer(arch, setup, EventTimer.of(setup))
    assert ScorerSpec.like(ok).timer == "event"
    odd = PointScorer(arch, setup, EventTimer(hw, ContentionModel(pool_sharing="fifo")))
    with pytest.raises(ValueError, match="^workers: the exact scorer 'event' was made with"):
        ScorerSpec.like(odd)
    # a screened timer's confirmation budget is part of what the name makes (4)
    from subgpu_jax.score.timer import ScreenedTimer

    ev = EventTimer.of(setup)
    assert ScorerSpec.like(PointScorer(arch, setup, ScreenedTimer.of(setup))).timer == "screened"
    wide = PointScorer(arch, setup, ScreenedTimer(hw, ev.model, ev.cache, confirm_top=8))
    with pytest.raises(ValueError, match="^workers: the exact scorer 'screened' was made with"):
        ScorerSpec.like(wide)
