"""``subgpu search --workers`` from an adversarial user's side (``app.pool.search_workers``,
``app.pool.run_sweep_pool``, ``searchrun._run_pool``): behaviour that is right today, kept.

Oracles: the project's rules for the command line, not the code's own output. Bad input is one
line on stderr naming ``--workers`` and what it takes, exit code 2, before any grid point is
scored; ``--workers N`` never starts more processes than there are grid points to score (none
for a finished folder) and gives the records and printed tables of ``--workers 1``; a parent
killed with SIGKILL in the middle of a sweep leaves no worker running and every stored point
intact."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from subgpu_jax.app.cli import main

SMALL = ["search", "--model", "gpt-oss-20b", "--gpus", "8", "--tp", "8", "--dp", "1",
         "--exact", "static", "--batches", "64,128", "--stages", "2,3", "--microbatches", "2",
         "--no-progress"]
REFUSED = "error: --workers must be 'auto' or an integer in 1..1,024 (processes), got "


@pytest.fixture
def spawned(monkeypatch):
    """Count the worker processes started (``run_sweep_pool`` uses the ``spawn`` context)."""
    from multiprocessing.context import SpawnProcess

    starts: list[str] = []
    real = SpawnProcess.start

    def start(self):
        starts.append(self.name)
        return real(self)

    monkeypatch.setattr(SpawnProcess, "start", start)
    return starts


@pytest.mark.parametrize("bad", ["0", "-1", "1e3", "2.0", "", "+2", "0x2", "1_0", "two",
                                 "auto2"])
def test_odd_worker_values_are_one_line(bad, tmp_path, capsys, spawned):
    out = tmp_path / "o"
    assert main(SMALL + ["--workers", bad, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [REFUSED + repr(bad)]
    assert not spawned and not (out / "records.jsonl").exists()


def test_workers_without_a_value(capsys):
    with pytest.raises(SystemExit) as e:
        main(SMALL + ["--workers"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--workers" in err[0] and "expected one argument" in err[0]


def test_two_workers_with_cluster_refused(tmp_path, capsys, spawned):
    out = tmp_path / "o"
    assert main(SMALL + ["--workers", "2", "--cluster", "127.0.0.1:1", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --workers: with --cluster")
    assert not spawned and not (out / "records.jsonl").exists()


def _tail(text: str, folder) -> str:
    """The printed tables: everything after the sweep's timing line, the folder named OUT."""
    return text[text.index("\n", text.index("evaluated ")):].replace(str(folder), "OUT")


def test_many_workers_budget_and_resume(tmp_path, capsys, spawned):
    """--workers 64 with --budget 2 starts at most 2 processes and stores the same grid points
    and records as --workers 1; resuming the finished folder with --workers 2 starts none and
    prints the tables of the one-process run."""
    one, many = tmp_path / "one", tmp_path / "many"
    assert main(SMALL + ["--workers", "1", "--budget", "2", "--out", str(one)]) == 0
    capsys.readouterr()
    assert not spawned
    assert main(SMALL + ["--workers", "64", "--budget", "2", "--out", str(many)]) == 0
    assert "evaluated 2 grid points" in capsys.readouterr().out
    assert 1 <= len(spawned) <= 2
    assert (one / "records.csv").read_text() == (many / "records.csv").read_text()
    # finish the one-process sweep, then resume it (finished) with workers
    assert main(SMALL + ["--workers", "1", "--resume", "--out", str(one)]) == 0
    out1 = capsys.readouterr().out
    csv1 = (one / "records.csv").read_text()
    n = len(spawned)
    assert main(SMALL + ["--workers", "2", "--resume", "--out", str(one)]) == 0
    out2 = capsys.readouterr().out
    assert len(spawned) == n  # nothing left to score: no process
    assert "evaluated 0 grid points, skipped 6 already done, 0 remaining" in out2
    assert _tail(out1, one) == _tail(out2, one)
    assert (one / "records.csv").read_text() == csv1


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_parent_killed_mid_sweep_leaves_no_worker(tmp_path, sweep_procs):
    """SIGKILL of the parent once a grid point is stored (a ``kill -9``, an OOM kill): its
    worker processes end within seconds (PR_SET_PDEATHSIG) and the stored points verify."""
    from subgpu_jax.app.store import SweepStore

    out = tmp_path / "s"
    args = [("2,4" if a == "2" and SMALL[i - 1] == "--microbatches" else a)
            for i, a in enumerate(SMALL)]
    p = sweep_procs.start(args + ["--workers", "2", "--out", str(out)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sweep_procs.wait_first_point(p, out)
    workers = sweep_procs.children(p.pid)
    if p.poll() is not None:
        pytest.skip("the sweep ended before it could be killed")
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=30)
    assert workers, "no worker process was running"
    assert sweep_procs.none_left(workers)
    man = json.loads((out / "manifest.json").read_text())
    s = SweepStore(str(out), man["meta"])
    s.close()
    assert not s.report, s.report.lines()
    assert len(s.done) >= 1
