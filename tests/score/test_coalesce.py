"""score.coalesce.CoalescingTimer and ``subgpu search --in-flight``: the exact steps of grid
points in flight are timed together, and the records do not depend on it.

Oracles: the wrapped timer's own answers (row for row), and the same search with one point in
flight (the same configurations and fields, makespans equal to float rounding).
"""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from subgpu_jax.app.cli import main
from subgpu_jax.model.hardware import get_hardware
from subgpu_jax.score.coalesce import Cancelled, CoalescingTimer
from subgpu_jax.score.timer import StaticTimer

H200 = get_hardware("H200")


class _Counting:
    """A stand-in batched timer: makespan = the sum of the allocation; counts its calls."""

    name = "counting"
    batches_structures = True   # its time_many is its own (score.timing.Timer)

    def __init__(self) -> None:
        self.calls = []

    def time_many(self, items):
        self.calls.append(sum(len(np.atleast_2d(a)) for _, _, a in items))
        return [np.atleast_2d(a).sum(axis=1).astype(float) for _, _, a in items]


def test_requests_of_all_participants_go_in_one_call():
    """Four participants each ask twice; every round is one call of the wrapped timer with all
    four requests, and each gets its own rows."""
    inner = _Counting()
    co = CoalescingTimer(inner)
    got = {}

    def point(i):
        with co.participant(enrolled=True):
            for r in range(2):
                A = np.array([[i, r], [10 * i, 1]])
                got[(i, r)] = co.time_many([(None, None, A)])[0]

    ts = [threading.Thread(target=point, args=(i,)) for i in range(4)]
    for t in ts:        # all counted before any starts, as the sweep does
        co.enroll()
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=30)
    assert inner.calls == [8, 8] and co.flushes == 2 and co.largest == 8 and co.rows == 16
    for (i, r), v in got.items():
        assert v.tolist() == [i + r, 10 * i + 1]
    # outside a participant: straight through
    assert co.time_many([(None, None, np.array([[1, 2]]))])[0].tolist() == [3.0]
    assert co.name == "counting"        # the wrapped timer's attributes


def test_a_participant_that_leaves_releases_the_others():
    """One participant finishes without asking: the other's request is timed when it leaves."""
    inner = _Counting()
    co = CoalescingTimer(inner)
    out = []
    gate = threading.Event()

    def asker():
        with co.participant():
            gate.set()
            out.append(co.time_many([(None, None, np.array([[2, 3]]))])[0].tolist())

    with co.participant():
        t = threading.Thread(target=asker)
        t.start()
        gate.wait(10)
    t.join(10)
    assert out == [[5.0]] and inner.calls == [1]


def test_cancel_and_errors_reach_every_waiter():
    class Failing(_Counting):
        def time_many(self, items):
            raise ValueError("boom")

    co = CoalescingTimer(Failing())
    with co.participant(), pytest.raises(ValueError, match="boom"):
        co.time_many([(None, None, np.array([[1]]))])
    co2 = CoalescingTimer(_Counting())
    errs = []

    def waiter():
        with co2.participant():
            try:
                co2.time_many([(None, None, np.array([[1]]))])
            except Cancelled as e:
                errs.append(e)

    with co2.participant():     # this one never asks: the waiter waits until cancel
        t = threading.Thread(target=waiter)
        t.start()
        while not co2._waiting:
            t.join(0.01)
        co2.cancel()
    t.join(10)
    assert len(errs) == 1
    with co2.participant(), pytest.raises(Cancelled):
        co2.time_many([(None, None, np.array([[1]]))])
    with pytest.raises(ValueError, match="cannot batch several structures"):
        CoalescingTimer(StaticTimer(H200))


def test_an_error_reaches_only_the_request_that_caused_it():
    """A shared call that fails is retried request by request: the bad request's point sees
    the error, the other gets its rows."""
    class Picky(_Counting):
        def time_many(self, items):
            if any(np.atleast_2d(a).min() < 0 for _, _, a in items):
                raise ValueError("negative SMs")
            return super().time_many(items)

    co = CoalescingTimer(Picky())
    out = {}

    def point(i, A):
        with co.participant(enrolled=True):
            try:
                out[i] = co.time_many([(None, None, A)])[0].tolist()
            except ValueError as e:
                out[i] = str(e)

    ts = [threading.Thread(target=point, args=(0, np.array([[1, 2]]))),
          threading.Thread(target=point, args=(1, np.array([[-1, 2]])))]
    for _ in ts:
        co.enroll()
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    assert out == {0: [3.0], 1: "negative SMs"}


ARGS = ["search", "--model", "gpt-oss-20b", "--gpus", "8", "--tp", "8", "--dp", "1",
        "--batches", "64,128", "--stages", "2,3", "--microbatches", "2", "--no-progress",
        "--exact", "event-batched"]


def _records(folder):
    out = {}
    for line in (folder / "records.jsonl").read_text().splitlines():
        r = json.loads(line)
        if "grid_key" in r and "mode" in r:
            out[r["grid_key"]] = {k: v for k, v in r.items() if k not in ("seconds", "_sum")}
    return out


#: Record fields that follow from the makespan (equal to float rounding only).
FLOATS = ("makespan_us", "region_makespan_us", "per_gpu_tok_s", "per_user_tok_s",
          "speedup_vs_temporal", "rest_of_step_us", "temporal_makespan_us", "_sum")


def test_search_in_flight_gives_the_same_records(tmp_path, lockstep_search):
    """Four grid points in flight, their exact steps in shared lockstep batches: the same
    configuration at every grid point and the same fields as one point at a time; the
    makespans equal to float rounding (1e-9 here; 4e-15 seen): a configuration timed alone goes
    to the event simulator (its periodic fast-forward), in a shared batch to the loop."""
    stats4, _, t4 = lockstep_search(tmp_path / "four", in_flight=4)
    lockstep_search(tmp_path / "one", in_flight=1)
    b = stats4["batches"]
    assert b["calls"] > 0 and b["largest"] >= 2 and t4.lockstep_rows >= b["rows"] / 2
    four, one = _records(tmp_path / "four"), _records(tmp_path / "one")
    assert len(four) == 6 and four.keys() == one.keys()
    for k in four:
        x, y = four[k], one[k]
        assert {f: v for f, v in x.items() if f not in FLOATS} == \
            {f: v for f, v in y.items() if f not in FLOATS}
        assert abs(x["makespan_us"] / y["makespan_us"] - 1) < 1e-9


def test_search_in_flight_cli(tmp_path, capsys):
    assert main(ARGS + ["--in-flight", "4", "--out", str(tmp_path / "four")]) == 0
    assert "in flight: 4 grid points at once, their exact steps in" in capsys.readouterr().out


@pytest.mark.parametrize("extra,msg", [
    (["--in-flight", "0"], "--in-flight must be an integer in 1..1,024, got 0"),
    (["--in-flight", "2", "--cluster", "localhost:1", "--num-processes", "2", "--process-id",
      "0"], "(and no --cluster)"),
    (["--in-flight", "x"], "--in-flight must be an integer written with the digits 0-9"),
    (["--in-flight", "2", "--exact", "static"], "--in-flight 1"),
    (["--in-flight", "2", "--workers", "2"], "give --workers 1"),
])
def test_in_flight_flag_errors_are_one_line(tmp_path, capsys, extra, msg):
    rc = main(ARGS + extra + ["--out", str(tmp_path / "x")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and msg in err[0], err


def test_in_flight_takes_workers_01_as_one(tmp_path, capsys):
    """``--workers 01`` is 1 as --workers reads it; the in-flight check compared the text with
    "1" and refused it (a breaker's find)."""
    assert main(ARGS + ["--in-flight", "2", "--workers", "01", "--out", str(tmp_path / "x")]) == 0
    assert "in flight: 2 grid points at once" in capsys.readouterr().out


def test_ctrl_c_in_flight_keeps_the_stored_points_and_resumes(tmp_path):
    """SIGINT once the first of 6 grid points is stored, 4 in flight: exit 130 with one line
    within seconds (the coalescer cancels the other threads), the stored points stay, and the
    same command again stores each grid key exactly once, as a clean run does."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    code = ("import os, signal, sys; from subgpu_jax.app import store\n"
            "add = store.SweepStore.add\n"
            "def first(self, key, recs):\n"
            "    add(self, key, recs); os.kill(os.getpid(), signal.SIGINT)\n"
            "store.SweepStore.add = first\n"
            "from subgpu_jax.app.cli import main; sys.exit(main(sys.argv[1:]))")
    out = tmp_path / "s"
    args = ARGS + ["--in-flight", "4", "--out", str(out)]
    t0 = time.time()
    p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                       timeout=300, cwd=root,
                       preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 130, p.stderr
    assert lines[-1].startswith("interrupted: ") and "Traceback" not in p.stderr
    stored = len(_records(out))
    assert 1 <= stored < 6
    assert time.time() - t0 < 240
    assert main(args) == 0
    keys = [json.loads(x).get("grid_key") for x in (out / "records.jsonl").read_text()
            .splitlines()]
    keys = [k for k in keys if k]
    assert len(keys) == len(set(keys)) == 6


def test_a_point_finished_as_ctrl_c_lands_is_stored(tmp_path):
    """The sweep stores every finished point before it honours Ctrl-C (a breaker found one
    thrown away: ``check`` came before the finished futures were stored)."""
    from subgpu_jax.app import interrupt
    from subgpu_jax.app.sweep import GridPoint, SweepStore, run_sweep
    from subgpu_jax.model.graph import Deployment

    pts = [GridPoint(Deployment(8, 8, 1, 8, 64 * (i + 1)), 2, 2) for i in range(4)]
    gate = threading.Event()

    def score(p):
        if p is pts[0]:
            gate.set()
            return [{"grid_key": p.key, "speedup_vs_temporal": 1.0}]
        gate.wait(10)
        raise Cancelled("cancelled")

    st = SweepStore(str(tmp_path / "s"), {"t": 1})
    orig = interrupt.check

    def check():        # Ctrl-C arrives while the first point finishes
        raise interrupt.Interrupted("interrupted")

    interrupt.check = check
    try:
        with pytest.raises((interrupt.Interrupted, Cancelled)):
            run_sweep(pts, score, st, in_flight=4, coalescer=CoalescingTimer(_Counting()),
                      progress=False)
    finally:
        interrupt.check = orig
        st.close()
    assert pts[0].key in st.done
