"""The frontier study's parallel path (experiments/frontier_study.py --workers N, which runs
subgpu_jax.app.pool.run_sweep_pool): the same records as the single-process sweep for the same
grid points (with the workers sharing JAX's persistent compilation cache), a wall-clock deadline
that stops cleanly, and a kill -9 of the study at any moment that loses no stored point and
leaves no worker running.

Grid: GPT-OSS 20B on 8 H200, the first published grid restricted to TP8 (50 points), event
simulator as the exact scorer; its first 10 points in the study's order are the 5 temporal
baselines (one per global batch), then D = 2 at m = 1 for the 5 batches, so the two workers
score points of several deployments.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STUDY = "gptoss20b_h200"
ARGS = ["--study", STUDY, "--narrow", "--tp", "8", "--exact", "event", "--chunk", "4"]
N = 10  # grid points compared




def _run(fs, monkeypatch, here: Path, *extra: str) -> int:
    monkeypatch.setattr(fs, "HERE", str(here))
    return fs.main(ARGS + list(extra))


def _records(here: Path) -> dict:
    """grid key -> its records (without the store's checksums), from the store itself."""
    out: dict = {}
    for line in (here / "results" / f"frontier_{STUDY}" / "records.jsonl").read_text().splitlines():
        r = json.loads(line)
        if "grid_key" in r and "_done" not in r:
            out.setdefault(r["grid_key"], []).append({k: v for k, v in r.items() if k != "_sum"})
    return out


def _children(pid: int) -> list[int]:
    """PIDs of ``pid``'s children (Linux ``/proc/PID/task/TID/children``)."""
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        out += [int(x) for x in (task / "children").read_text().split()]
    return out


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (``/proc/PID/stat`` state)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def _study_process(here: Path, argv: list, **popen) -> subprocess.Popen:
    """``frontier_study.main(argv)`` in a child process whose results go under ``here`` (JAX on
    the CPU, stdout discarded; ``popen``: further ``subprocess.Popen`` arguments)."""
    code = ("import importlib.util, sys; spec = importlib.util.spec_from_file_location("
            f"'fs', {str(ROOT / 'experiments' / 'frontier_study.py')!r}); "
            "fs = importlib.util.module_from_spec(spec); spec.loader.exec_module(fs); "
            f"fs.HERE = {str(here)!r}; sys.exit(fs.main({argv!r}))")
    return subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.DEVNULL,
                            env={**os.environ, "JAX_PLATFORMS": "cpu"}, **popen)


def _wait_for_points(proc: subprocess.Popen, store: Path, n: int, ended: str) -> None:
    """Wait (at most 240 s) until the study's store holds ``n`` finished grid points, asserting
    with the message ``ended`` that the study process is still running meanwhile."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < 240:
        if store.exists() and store.read_text().count('"_done"') >= n:
            return
        assert proc.poll() is None, ended
        time.sleep(0.05)


def _digest(here: Path) -> dict:
    return json.loads((here / "results" / "frontier_studies.json").read_text())[STUDY]


#: Digest keys that describe the runs (times, worker counts), not the results.
RUN_KEYS = {"runs", "wall_seconds", "cpu_seconds", "cpu_per_point",
            "estimated_cpu_seconds_to_finish"}


@pytest.fixture(scope="module")
def single(fs, tmp_path_factory):
    """The first N points scored by one process (the reference)."""
    here = tmp_path_factory.mktemp("single")
    mp = pytest.MonkeyPatch()
    try:
        assert _run(fs, mp, here, "--budget", str(N)) == 0
    finally:
        mp.undo()
    return here


def test_two_workers_equal_one(fs, single, tmp_path, monkeypatch):
    """2 workers produce the same records, point by point, as 1 process, and the same digest
    apart from the run times; the run log says 2 workers scored N points."""
    assert _run(fs, monkeypatch, tmp_path, "--budget", str(N), "--workers", "2",
                "--compile-cache", str(tmp_path / "jax_cache")) == 0
    assert any((tmp_path / "jax_cache").iterdir())  # the workers shared compiled functions
    ref, got = _records(single), _records(tmp_path)
    assert len(ref) == N and got == ref
    d1, d2 = _digest(single), _digest(tmp_path)
    assert {k: v for k, v in d1.items() if k not in RUN_KEYS} == \
        {k: v for k, v in d2.items() if k not in RUN_KEYS}
    assert d2["runs"][-1]["workers"] == 2 and d2["runs"][-1]["evaluated"] == N
    assert d2["runs"][-1]["shared_compile_cache"] and not d1["runs"][-1]["shared_compile_cache"]
    assert set(d2["runs"][-1]["cpu_per_point"]) == {"temporal", "1"}
    assert d2["finished"] == N and d2["coverage"]["temporal"] == [5, 5]


def test_bad_options_exit_2(fs, tmp_path, monkeypatch, capsys):
    """--workers 0, --wall-budget 0 and --cpu-budget with several workers are refused with
    exit code 2 and a line naming the option."""
    for extra, word in ((["--workers", "0"], "--workers"), (["--wall-budget", "0"],
                        "--wall-budget"), (["--workers", "2", "--cpu-budget", "5"],
                                           "--cpu-budget")):
        with pytest.raises(SystemExit) as e:
            _run(fs, monkeypatch, tmp_path, *extra)
        assert e.value.code == 2 and word in capsys.readouterr().err


def test_deadline_passed_scores_nothing(fs, tmp_path):
    """A deadline already passed: nothing starts, the call says it stopped on the deadline."""
    from subgpu_jax import get_hardware, get_model
    from subgpu_jax.app.pool import run_sweep_pool
    from subgpu_jax.app.searchjob import ScorerSpec
    from subgpu_jax.app.sweep import SweepStore, build_grid

    arch = get_model("gpt-oss-20b")
    pts = build_grid(arch, 8, [64], [2], [1], hw=get_hardware("H200"))
    spec = ScorerSpec(arch, get_hardware("H200"), "static")
    with SweepStore(str(tmp_path), {"t": 1}) as store:
        st = run_sweep_pool(pts, spec, store, 2, deadline=time.monotonic() - 1.0)
        assert st["evaluated"] == 0 and st["stopped"] == "deadline"
        assert st["remaining"] == len(pts) and not store.done
        for bad in ({"workers": 0}, {"workers": 2, "budget": 0}):
            with pytest.raises(ValueError, match="workers|budget"):
                run_sweep_pool(pts, spec, store, **bad)
        with pytest.raises(TypeError, match="make_scorer must be callable"):
            run_sweep_pool(pts, "gpt-oss-20b", store, 2)


def test_kill_then_resume(fs, tmp_path, monkeypatch):
    """kill -9 of a 2-worker study once 5 points (the temporal ones) are stored: the store
    keeps every stored point (none damaged), no worker outlives the study, and a resumed call
    (2 workers) finishes the first N points with the records of the single-process run (the
    static exact scorer here, to keep the test short; the event simulator's records are
    compared above)."""
    args = [x if x != "event" else "static" for x in ARGS]
    ref_dir = tmp_path / "single"
    monkeypatch.setattr(fs, "HERE", str(ref_dir))
    assert fs.main(args + ["--budget", str(N)]) == 0
    ref = _records(ref_dir)
    tmp_path = tmp_path / "pool"
    if not os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children"):
        pytest.skip("needs Linux /proc/PID/task/TID/children to find the workers")
    cache = str(tmp_path / "jax_cache")  # a kill may truncate an entry: JAX recompiles it
    argv = args + ["--workers", "2", "--budget", str(N), "--compile-cache", cache]
    proc = _study_process(tmp_path, argv, stderr=subprocess.DEVNULL)
    store = tmp_path / "results" / f"frontier_{STUDY}" / "records.jsonl"
    try:
        _wait_for_points(proc, store, 5, "the study ended before it was killed")
        kids = _children(proc.pid)
        assert len(kids) >= 2  # the two workers (and multiprocessing's resource tracker)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    t0 = time.monotonic()
    while time.monotonic() - t0 < 20 and any(_alive(k) for k in kids):
        time.sleep(0.1)
    alive = [k for k in kids if _alive(k)]
    assert not alive, f"workers outlived the killed study: {alive}"
    stored = _records(tmp_path)
    assert 5 <= len(stored) < N
    assert all(stored[k] == ref[k] for k in stored)
    from subgpu_jax.app.sweep import SweepStore
    meta = json.loads((store.parent / "manifest.json").read_text())["meta"]
    with SweepStore(str(store.parent), meta, resume=True) as s:
        assert not s.report.lines() and s.done == set(stored)
    left = N - len(stored)
    monkeypatch.setattr(fs, "HERE", str(tmp_path))
    assert fs.main(args + ["--budget", str(left), "--workers", "2",
                           "--compile-cache", cache]) == 0
    assert _records(tmp_path) == ref


def test_ctrl_c_stops_the_pool_cleanly(fs, tmp_path):
    """Ctrl-C (SIGINT to the study's process group, as a terminal sends it) while 2 workers
    score: the study stops within seconds (the workers ignore SIGINT, the parent stops at its
    next check), writes its outputs, exits with 130, keeps every stored point and leaves no
    worker running (static exact scorer, to keep the test short)."""
    args = [x if x != "event" else "static" for x in ARGS]
    if not os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children"):
        pytest.skip("needs Linux /proc/PID/task/TID/children to find the workers")
    argv = args + ["--workers", "2", "--compile-cache", "none"]
    proc = _study_process(tmp_path, argv, stderr=subprocess.PIPE, text=True,
                          start_new_session=True)
    store = tmp_path / "results" / f"frontier_{STUDY}" / "records.jsonl"
    try:
        _wait_for_points(proc, store, 3, "the study ended before Ctrl-C")
        kids = _children(proc.pid)
        os.killpg(proc.pid, signal.SIGINT)
        t1 = time.monotonic()
        rc = proc.wait(timeout=60)
        waited = time.monotonic() - t1
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert rc == 130, err[-2000:]
    assert waited < 30 and "interrupted" in err
    t0 = time.monotonic()
    while time.monotonic() - t0 < 20 and any(_alive(k) for k in kids):
        time.sleep(0.1)
    assert not [k for k in kids if _alive(k)]
    stored = _records(tmp_path)
    assert len(stored) >= 3
    assert (store.parent / "records.csv").exists()
    assert _digest(tmp_path)["finished"] == len(stored)


def test_device_script_parses_and_needs_its_arguments():
    """The frontier study (experiments/device/studies/frontier.sh) is valid bash (``bash -n``)
    and ``experiments/device/run.sh frontier`` refuses to run without LIMIT_S and WORKERS
    (non-zero exit, the usage line), before it touches any study."""
    script = ROOT / "experiments" / "device" / "studies" / "frontier.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    r = subprocess.run(["bash", "experiments/device/run.sh", "frontier"], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode != 0 and "usage: run.sh frontier LIMIT_S WORKERS" in r.stderr


FAKE_STUDY = ("import os, sys\n"
              "a = sys.argv[1:]\n"
              "if '--report' in a: sys.exit(0)\n"
              "s = a[a.index('--study') + 1]\n"
              "d = os.path.join('experiments', 'results', 'frontier_' + s)\n"
              "os.makedirs(d, exist_ok=True)\n"
              "open(os.path.join(d, 'records.jsonl'), 'w').write('{}\\n')\n"
              "sys.exit({'gptoss120b_b200': 3, 'llama70b_h200': 4}.get(s, 0))\n")


def _device_script(args, tmp_path: Path, **env):
    """``bash experiments/device/run.sh frontier ARGS`` with OUT in ``tmp_path``, run in a copy
    of experiments/device/ beside a frontier_study.py that is a stand-in (``FAKE_STUDY``:
    writes a record file; exits 3 for gptoss120b_b200, 4 for llama70b_h200, 0 otherwise), so
    that a script that let bad arguments through would never run a real study."""
    exp = tmp_path / "repo" / "experiments"
    (exp / "device" / "studies").mkdir(parents=True, exist_ok=True)
    for f in ("run.sh", "env.sh", "STUDIES", "studies/frontier.sh"):
        (exp / "device" / f).write_text((ROOT / "experiments" / "device" / f).read_text())
    (exp / "frontier_study.py").write_text(FAKE_STUDY)
    return subprocess.run(["bash", "experiments/device/run.sh", "frontier", *args],
                          cwd=tmp_path / "repo", capture_output=True, text=True, timeout=120,
                          env={**os.environ, "OUT": str(tmp_path / "out"), **env})


@pytest.mark.parametrize("limit, workers, field", [
    ("START[$(touch {flag})0]", "2", "LIMIT_S"), ("abc", "2", "LIMIT_S"),
    ("1.5", "2", "LIMIT_S"), ("1e3", "2", "LIMIT_S"), ("0", "2", "LIMIT_S"),
    ("-5", "2", "LIMIT_S"), ("12345678901234567890", "2", "LIMIT_S"), ("", "2", "LIMIT_S"),
    ("100", "0", "WORKERS"), ("100", "x[$(touch {flag})0]", "WORKERS"),
    ("100", "2.0", "WORKERS"), ("100", "-1", "WORKERS")])
def test_device_script_rejects_bad_numbers(tmp_path, limit, workers, field):
    """LIMIT_S and WORKERS are checked by a regex (positive decimal integer, at most 6 digits)
    before any arithmetic: one line on stderr naming the field, exit 2, and a crafted value never
    runs a command through bash arithmetic."""
    flag = tmp_path / "pwned"
    limit, workers = limit.format(flag=flag), workers.format(flag=flag)
    r = _device_script([limit, workers], tmp_path)
    bad = limit if field == "LIMIT_S" else workers
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        f"run.sh frontier: {field} must be a positive integer "
        f"of {'seconds' if field == 'LIMIT_S' else 'processes'}, got '{bad}'"]
    assert not flag.exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize("args", [[], ["100"]])
def test_device_script_missing_arguments_exit_2(tmp_path, args):
    r = _device_script(args, tmp_path)
    assert r.returncode == 2 and r.stderr.startswith("usage: run.sh frontier LIMIT_S WORKERS")
    assert len(r.stderr.strip().splitlines()) == 1


def test_device_script_rejects_unknown_study(tmp_path):
    """Every STUDY is checked against the three studies before the first one runs."""
    r = _device_script(["100", "2", "llama70b_h200", "nope"], tmp_path)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "run.sh frontier: STUDY must be one of gptoss20b_h200, gptoss120b_b200, "
        "llama70b_h200, got 'nope'"]


def test_device_script_exit_status_is_the_first_failing_study(tmp_path):
    """A study whose python exits non-zero makes the script exit with that status (the first
    one), after the other studies ran and what exists was archived."""
    r = _device_script(["200", "1"], tmp_path, RESERVE_S="0")
    assert r.returncode == 3, r.stdout + r.stderr
    log = (tmp_path / "out" / "frontier_log.txt").read_text()
    assert "gptoss120b_b200: exit 3" in log and "llama70b_h200: exit 4" in log
    names = subprocess.run(["tar", "tzf", str(tmp_path / "out" / "frontier_results.tgz")],
                           capture_output=True, text=True, check=True).stdout.split()
    assert sorted(names) == sorted(f"experiments/results/frontier_{s}/records.jsonl" for s in
                                   ("gptoss20b_h200", "gptoss120b_b200", "llama70b_h200"))
