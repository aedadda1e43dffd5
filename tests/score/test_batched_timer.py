"""score.timer.BatchedEventTimer (``event-batched``): the event simulator's model with a batch
of allocations simulated in lockstep (``sim.batched``), the event simulator for what it does
not batch; and a search with it checked by the event simulator (``summary.json``).

Oracle: the event simulator (``EventTimer``, ``forward=False``), within 1e-9 relative.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from subgpu_jax.app.cli import main
from subgpu_jax.model.hardware import get_hardware
from subgpu_jax.model.setup import GpuSetup
from subgpu_jax.score.timer import BatchedEventTimer, EventTimer, timer_for

H200 = get_hardware("H200")


@pytest.fixture(scope="module")
def g2(gptoss20b_m2):
    return gptoss20b_m2


def test_batches_in_lockstep_and_agrees(g2, chain_config):
    cfg = chain_config(g2, [6, 15], 0, (40, 56, 32))
    allocs = np.array([[40, 56, 32], [16, 16, 96], [64, 32, 32], [32, 48, 48]])
    t = BatchedEventTimer(H200, engine="numpy", min_batch=2)
    got = t.time_allocs(g2, cfg, allocs)
    ref = EventTimer(H200, forward=False).time_allocs(g2, cfg, allocs)
    assert np.max(np.abs(got / ref - 1)) < 1e-9
    assert (t.lockstep_rows, t.event_rows) == (4, 0)
    # one row is below min_batch (2): the event simulator times it
    assert t.time_allocs(g2, cfg, allocs[:1])[0] == pytest.approx(ref[0], rel=1e-9)
    assert (t.lockstep_rows, t.event_rows) == (4, 1)
    # the structure is built once and kept
    assert len(t.structures) == 1
    t.time_allocs(g2, cfg, allocs[1:])
    assert len(t.structures) == 1 and t.lockstep_rows == 7


def test_what_it_does_not_batch_goes_to_the_event_simulator(g2, chain_config):
    """Two streams per stage (a shared pool) and D = 1: the event simulator's numbers."""
    cfg = dataclasses.replace(chain_config(g2, [6, 15], 0, (40, 56, 32)), streams_per_stage=2)
    allocs = np.array([[40, 56, 32], [64, 32, 32]])
    t = BatchedEventTimer(H200, engine="numpy", min_batch=2)
    got = t.time_allocs(g2, cfg, allocs)
    ref = EventTimer(H200).time_allocs(g2, cfg, allocs)
    assert np.array_equal(got, ref) and (t.lockstep_rows, t.event_rows) == (0, 2)


def test_engine_and_arguments():
    t = timer_for(GpuSetup.uncalibrated(H200), "event-batched")
    assert isinstance(t, BatchedEventTimer) and t.engine == "auto"
    from subgpu_jax.sim.batchednb import available

    # auto: the compiled engine wherever numba is installed (a dependency), on any platform
    if available():
        assert t.engine_name() == "compiled" and t.min_batch == 1
    assert BatchedEventTimer(H200, engine="jax").engine_name() == "jax"
    assert BatchedEventTimer(H200, engine="numpy").min_batch == 300
    assert BatchedEventTimer(H200, engine="jax").min_batch == 2
    assert BatchedEventTimer(H200, engine="compiled").min_batch == 1
    with pytest.raises(ValueError, match="engine must be one of auto, compiled, numpy, jax"):
        BatchedEventTimer(H200, engine="cuda")
    with pytest.raises(ValueError, match="min_batch must be an integer >= 1"):
        BatchedEventTimer(H200, min_batch=0)
    assert "lockstep" in t.describe()


def test_search_with_it_is_checked_by_the_event_simulator(tmp_path, lockstep_search):
    """A search whose exact steps run in lockstep: the event simulator re-simulates the best
    records and they agree within 1e-9, and the summary says which timer searched."""
    stats, summ, timer = lockstep_search(tmp_path / "s")
    assert timer.lockstep_rows > 0
    chk = summ["reference_check"]
    assert chk["checked"] == 2 and chk["tolerance"] == BatchedEventTimer.TOLERANCE
    assert chk["max_abs_error"] < 1e-9
    assert summ["scorers"]["exact"] == "event-batched"


def test_search_cli_flag(tmp_path, capsys):
    """``subgpu search --exact event-batched`` runs (the compiled engine: every batch in it)
    and prints the check."""
    rc = main(["search", "--model", "gpt-oss-20b", "--gpus", "8", "--tp", "8", "--dp", "1",
               "--exact", "event-batched", "--batches", "64", "--stages", "2",
               "--microbatches", "2", "--no-progress", "--out", str(tmp_path / "s")])
    text = capsys.readouterr().out
    assert rc == 0 and "checked by the event simulator" in text and "above the" not in text
    summ = json.loads((tmp_path / "s" / "summary.json").read_text())
    assert summ["scorers"]["exact"] == "event-batched"


def test_event_search_checks_its_engine_only_where_the_engine_ran(tmp_path, capsys):
    """``--exact event``: the engine check is in summary.json and printed for one stream per
    stage (the engine's structures; the records are the Python simulator's, within 1e-9), and
    absent with two streams per stage, which the Python simulator times alone (it compared the
    simulator with itself before: a breaker's find)."""
    base = ["search", "--model", "gpt-oss-20b", "--gpus", "8", "--tp", "8", "--dp", "1",
            "--batches", "64", "--stages", "2", "--microbatches", "2", "--no-progress"]
    assert main(base + ["--out", str(tmp_path / "one")]) == 0
    assert "ran in its compiled engine" in capsys.readouterr().out
    chk = json.loads((tmp_path / "one" / "summary.json").read_text())["engine_check"]
    assert chk["checked"] >= 1 and chk["max_abs_error"] < 1e-9
    assert main(base + ["--streams-per-stage", "2", "--out", str(tmp_path / "two")]) == 0
    assert "compiled engine" not in capsys.readouterr().out
    assert "engine_check" not in json.loads((tmp_path / "two" / "summary.json").read_text())


def test_every_event_timer_changes_mode():
    """``in_mode`` of every event-simulator timer of ``TIMERS`` (a batch engine's ``auto``
    included) gives a plain ``EventTimer`` of that mode with the same fast-forward, on the
    compiled engine where the timer had it; the table timers refuse multistream in one line."""
    from subgpu_jax.model.calibration import GpuSetup
    from subgpu_jax.score.eventtimers import EventTimer
    from subgpu_jax.score.timer import TIMERS, timer_for

    setup = GpuSetup.uncalibrated(get_hardware("H200"))
    for name in TIMERS:
        t = timer_for(setup, name)
        if not t.reference and t.screen is None and not isinstance(t, EventTimer):
            with pytest.raises(ValueError, match="needs the event simulator"):
                t.in_mode("multistream")
            continue
        m = t.in_mode("multistream")
        assert type(m) is EventTimer and m.mode == "multistream", name
        assert m.forward == t.forward and m.compiled == t.compiled, name
        assert m.in_mode("green").mode == "green"
