"""`subgpu search` reliability at the command line: Ctrl-C exits 130 every time (a SIGINT loop
on real processes), Ctrl-C on `subgpu simulate` says nothing about --resume, the same sweep re-run
into its own folder reuses its finished grid points, another sweep there is refused (naming only
what differs) unless --overwrite, a second writer is refused naming the PID, a full disk and a
read-only folder give one line and keep every finished grid point.

The grid is tiny (gpt-oss-20b on 8 GPUs, static scorer, 4 grid points) and computed once per
test worker (``finished``); each test works on a copy, so JAX compiles its shapes once.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from subgpu_jax.app import safeio
from subgpu_jax.app import store as S
from subgpu_jax.app.cli import main
from subgpu_jax.app.store import SweepStore

TINY = ["search", "--model", "gpt-oss-20b", "--gpus", "8", "--tp", "8", "--dp", "1",
        "--exact", "static", "--batches", "64,128", "--stages", "2", "--microbatches", "2",
        "--no-progress"]
N_POINTS = 4  # 2 batches x (temporal + D = 2 at m = 2)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished TINY sweep (its folder) and what the search printed."""
    out = tmp_path_factory.mktemp("finished") / "s"
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(TINY + ["--out", str(out)]) == 0
    return out, buf.getvalue()


def _copy(finished, tmp_path, drop_last_points: int = 0) -> Path:
    """A copy of the finished sweep's folder, without the blocks of its last
    ``drop_last_points`` grid points (the file is cut after a ``_done`` marker)."""
    out = tmp_path / "s"
    shutil.copytree(finished[0], out)
    if drop_last_points:
        lines = (out / "records.jsonl").read_text().splitlines(keepends=True)
        ends = [i for i, x in enumerate(lines) if '"_done"' in x]
        keep = ends[-1 - drop_last_points] + 1
        (out / "records.jsonl").write_text("".join(lines[:keep]))
    return out


def _best(text: str) -> list[str]:
    return [x for x in text.splitlines() if "SubGPU configuration" in x]


def _cmd() -> list[str]:
    exe = Path(sys.executable).with_name("subgpu")
    if exe.exists():
        return [str(exe)]
    return [sys.executable, "-c", "import sys; from subgpu_jax.app.cli import main; "
            "sys.exit(main())"]


def _records(folder: Path) -> list[dict]:
    return [json.loads(x) for x in (folder / "records.jsonl").read_text().splitlines()]


def test_same_sweep_rerun_reuses_other_refused_overwrite(finished, tmp_path, capsys):
    out = _copy(finished, tmp_path)
    assert main(TINY + ["--out", str(out)]) == 0  # the README's command, a second time
    second = capsys.readouterr().out
    assert f"evaluated 0 grid points, skipped {N_POINTS} already done, 0 remaining" in second
    assert _best(finished[1]) and _best(second) == _best(finished[1])
    assert sum("_done" in r for r in _records(out)) == N_POINTS

    other = [x if x != "64,128" else "64" for x in TINY]
    assert main(other + ["--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "holds another sweep" in err
    assert "differs in batches)" in err and "parallelisms" not in err
    assert f"{N_POINTS} finished grid point(s) of another sweep" in err
    assert "none of this sweep" in err and "--overwrite" in err

    assert main(other + ["--out", str(out), "--overwrite"]) == 0
    o = capsys.readouterr().out
    assert f"deleted records.jsonl ({N_POINTS} finished grid point(s)" in o
    assert sum("_done" in r for r in _records(out)) == 2


def test_manifest_deleted_then_resume_keeps_records(finished, tmp_path, capsys):
    out = _copy(finished, tmp_path, drop_last_points=1)
    (out / "manifest.json").unlink()
    assert main(TINY + ["--out", str(out), "--resume"]) == 0
    o = capsys.readouterr().out
    assert "manifest.json was missing: rebuilt" in o
    assert f"evaluated 1 grid points, skipped {N_POINTS - 1} already done" in o
    assert main(TINY + ["--out", str(tmp_path / "none"), "--resume"]) == 2
    assert "nothing to resume" in capsys.readouterr().err


def test_second_writer_refused_naming_pid(tmp_path, capsys):
    out = tmp_path / "s"
    holder = SweepStore(str(out), {"model": "whatever"})
    try:
        assert main(TINY + ["--out", str(out)]) == 2
    finally:
        holder.close()
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"in use by another run (PID {os.getpid()} " in err


def test_disk_full_one_line_then_resume(finished, tmp_path, capsys, monkeypatch):
    out = _copy(finished, tmp_path, drop_last_points=2)

    def disk_full(op, path, args):
        if op == "write" and path.endswith("records.jsonl"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(safeio, "_FAULT_HOOK", disk_full)
    assert main(TINY + ["--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"'{out / 'records.jsonl'}': No space left on device" in err
    assert f"{N_POINTS - 2} finished grid point(s) are kept" in err
    monkeypatch.setattr(safeio, "_FAULT_HOOK", None)
    assert not [f for f in os.listdir(out) if f.endswith(".tmp")]
    assert main(TINY + ["--out", str(out)]) == 0
    o = capsys.readouterr().out
    assert f"evaluated 2 grid points, skipped {N_POINTS - 2}" in o
    assert _best(o) == _best(finished[1])


def test_read_only_finished_sweep_is_summarised(finished, tmp_path, capsys, monkeypatch):
    out = _copy(finished, tmp_path)
    before = {f: (out / f).read_bytes() for f in os.listdir(out)}

    def read_only(op, path, args):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(safeio, "_FAULT_HOOK", read_only)
    assert main(TINY + ["--out", str(out)]) == 0
    o = capsys.readouterr().out
    assert "is read-only: its finished sweep is summarised, no file is rewritten" in o
    assert _best(o) == _best(finished[1])
    assert {f: (out / f).read_bytes() for f in os.listdir(out)} == before


def _interrupt(args: list[str], delay: float, ready: str,
               twice: bool = False) -> subprocess.CompletedProcess:
    """Start ``subgpu args``; wait for a stdout line starting with ``ready``, then ``delay`` s;
    send SIGINT (``twice``: again 0.2 s later); returns the finished process."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    p = subprocess.Popen(_cmd() + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env)
    lines = []
    for line in p.stdout:
        lines.append(line)
        if line.startswith(ready):
            break
    time.sleep(delay)
    p.send_signal(signal.SIGINT)
    if twice:
        time.sleep(0.2)
        p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    return subprocess.CompletedProcess(args, p.returncode, "".join(lines) + out, err)


def test_ctrl_c_on_search_exits_130_every_time(tmp_path):
    """A SIGINT loop: interrupts at different moments (before the first grid point, while JAX
    compiles, between grid points), the last one doubled (the second Ctrl-C stops at once); each
    run continues the last one's folder. Exit 130 every time, no traceback or crash, and the
    folder verifies afterwards (no record lost, none duplicated)."""
    out = tmp_path / "s"
    args = TINY + ["--batches", "64,128,256", "--microbatches", "1,2,4", "--stages", "2,3",
                   "--workers", "1", "--out", str(out)]  # (worker processes: test_search_workers)
    codes = []
    for delay, twice in ((0.0, False), (0.4, False), (1.2, False), (0.8, True)):
        p = _interrupt(args, delay, "search:", twice=twice)
        codes.append(p.returncode)
        assert "Traceback" not in p.stderr and "Segmentation" not in p.stderr, p.stderr
        assert "run the same command again to continue" in p.stderr
    assert codes == [130] * 4
    man = json.loads((out / "manifest.json").read_text())
    s = SweepStore(str(out), man["meta"])
    s.close()
    assert not s.report, s.report.lines()
    # a run stopped at once leaves its PID in the lock (taken over now); one that reached a safe
    # point in the 0.2 s before the second Ctrl-C released it
    assert all(n.startswith("took over the lock of PID") for n in s.notes), s.notes
    assert len(s.done) == sum("_done" in r for r in _records(out))


def test_ctrl_c_on_simulate_exits_130_without_resume_advice(tmp_path):
    """``--calibration`` names a FIFO: once ``subgpu simulate`` opens it (inside ``main``, its
    SIGINT handler installed) it waits in ``read``; Ctrl-C there exits with 130 at once, saying
    nothing about ``--resume`` or grid points."""
    fifo = tmp_path / "calibration.json"
    os.mkfifo(fifo)
    p = subprocess.Popen(_cmd() + ["simulate", "--model", "gpt-oss-20b", "--gpus", "8", "--tp",
                                   "8", "--dp", "1", "--batch", "64", "--calibration", str(fifo)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    fd, t0 = None, time.time()
    while fd is None and p.poll() is None and time.time() < t0 + 120:
        try:  # succeeds once the command has opened the FIFO for reading
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as e:
            assert e.errno == errno.ENXIO, e
            time.sleep(0.02)
    assert fd is not None, p.communicate()
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    os.close(fd)
    assert p.returncode == 130, (out, err)
    assert err.strip().splitlines() == ["interrupted"]


def test_calibration_missing_a_grid_points_kernels_refused_before_any_point(tmp_path, capsys):
    """A calibration that lacks a kernel of some grid point's graph (here the combine of the
    GPT-OSS 120B H200 calibration, measured before the combine's all-gather was priced) is
    refused before any point is scored: exit 2, one line naming --calibration and the flags
    that select what it measured, and no record stored (issue 41 item 4: a point timed partly
    by the analytical model was stored first)."""
    cal = Path(__file__).resolve().parents[2] / "experiments" / "results" / \
        "calibration_h200_gptoss120b.json"
    out = tmp_path / "s"
    rc = main(["search", "--hardware", "H200", "--expert-dtype", "bf16", "--model",
               "gpt-oss-120b", "--calibration", str(cal), "--gpus", "32", "--tp", "8",
               "--dp", "4", "--ep", "32", "--batches", "2048", "--stages", "2",
               "--microbatches", "2", "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert "no measurement of kernel L0.combine" in err[0]
    assert "--calibration" in err[0] and "--microbatches" in err[0]
    assert not (out / "records.jsonl").exists() or not (out / "records.jsonl").read_text()


def test_ctrl_c_message_counts_the_stored_points(tmp_path, capsys, monkeypatch):
    """A search stopped by Ctrl-C says how many of its grid points are stored (it said "the
    finished grid points are kept" when none had finished; a new user's report)."""
    from subgpu_jax.app import searchrun
    from subgpu_jax.app.interrupt import Interrupted

    def stop(*a, **k):
        raise Interrupted("interrupted")

    monkeypatch.setattr(searchrun, "run_sweep", stop)
    out = tmp_path / "s"
    rc = main(TINY + ["--batches", "64", "--stages", "2", "--microbatches", "2", "--workers",
                      "1", "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 130
    assert err[-1] == (f"interrupted: 0 of 2 grid points are stored in {out}; run the same "
                       "command again to continue")
