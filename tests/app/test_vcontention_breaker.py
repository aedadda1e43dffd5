"""Breaker review of the batched timer (``--simulator vcontention`` / ``--exact vcontention``).

Oracles: ``score.step.time_step`` with ``ContentionTimer`` and ``record=False`` (what the
batched timer itself says a step takes), and the event simulator for the verdict's three modes.
"""

from __future__ import annotations

import json

import pytest

from subgpu_jax.app.cli import main
from subgpu_jax.model.graph import build_forward
from subgpu_jax.model.setup import GpuSetup
from subgpu_jax.score.step import time_step
from subgpu_jax.score.timer import ContentionTimer, EventTimer
from subgpu_jax.sim.periodic import FORWARD_TOL

ARGS = ["--model", "gpt-oss-20b", "--hardware", "H200", "--expert-dtype", "bf16", "--gpus",
        "8", "--tp", "8", "--dp", "1", "--ep", "8", "--batch", "64", "--kv-history", "8192",
        "--cuts", "L1.attn", "--no-reuse", "--sms", "56,72", "--microbatch", "32"]


def test_simulate_vcontention_times_the_config_with_the_batched_timer(capsys):
    """``simulate --simulator vcontention`` prints the batched timer's makespan, not the event
    simulator's under its label (``time_step`` records by default, and ``ContentionTimer.time``
    hands every recording call to the event simulator)."""
    rc = main(["simulate", *ARGS, "--simulator", "vcontention", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    from subgpu_jax.app.cli import build_parser
    from subgpu_jax.app.args import workload_of
    from subgpu_jax.space.config import config_from_options

    wl = workload_of(build_parser().parse_args(["simulate", *ARGS]))
    cfg = config_from_options(wl, ["L1.attn"], [56, 72], 32, False, "wavefront")
    fp, hw = build_forward(wl.arch, wl.deploy, 2), wl.hw
    vc = time_step(fp, cfg, ContentionTimer.of(GpuSetup.uncalibrated(hw)), record=False)
    ev = time_step(fp, cfg, EventTimer.of(GpuSetup.uncalibrated(hw)), record=False)
    assert abs(vc.makespan_us / ev.makespan_us - 1) > 1e-6   # the two timers differ here
    assert out["config"]["makespan_us"] == vc.makespan_us, (out["config"]["makespan_us"],
                                                            ev.makespan_us)


def test_search_vcontention_verdict_uses_the_event_simulator_for_every_mode(tmp_path, capsys):
    """The verdict's bands were measured on the event simulator's predictions, and its other
    five makespans (multistream, temporal, the link-free three) are the event simulator's: the
    SubGPU makespan beside them must be the event simulator's too, not the batched timer's
    record (else "without the collectives' link time" can come out slower than with it)."""
    from subgpu_jax.model.graph import Deployment
    from subgpu_jax.model.hardware import get_hardware
    from subgpu_jax.model.models import get_model
    from subgpu_jax.space.config import Config

    out = tmp_path / "s"
    rc = main(["search", "--model", "gpt-oss-20b", "--gpus", "8", "--tp", "8", "--dp", "1",
               "--exact", "vcontention", "--batches", "64", "--stages", "2",
               "--microbatches", "2", "--no-progress", "--out", str(out)])
    text = capsys.readouterr().out
    assert rc == 0
    summ = json.loads((out / "summary.json").read_text())
    # the check's statistics are the SubGPU rows' (a temporal record is the event simulator's
    # own number: its zero error halved the median), and an error above the timer's tolerance
    # says the table's speedups are the batched timer's
    chk = summ["reference_check"]
    (row,) = [x for x in chk["rows"] if x["mode"] == "subgpu"]
    assert chk["checked"] == 1 and chk["median_abs_error"] == abs(row["error"])
    assert chk["max_abs_error"] > chk["tolerance"] == ContentionTimer.TOLERANCE
    assert "the best SubGPU record at 1 (batch, TPxDP) point differ from it by a median" in text
    assert "above the 2% it is held to" in text
    assert "every mode re-simulated by the event simulator" in text
    assert summ["verdicts"][0]["rescored_by"] == "event simulator"
    # simulate --simulator vcontention refuses --gantt/--trace/--utilization: the hint says so
    assert "add --gantt/--trace/--utilization FILE to see it" not in text
    assert "drop --simulator vcontention and add --gantt/--trace/--utilization FILE" in text
    recs = [r for r in (json.loads(x) for x in (out / "records.jsonl").read_text().splitlines())
            if "grid_key" in r and "mode" in r]
    sub = max((r for r in recs if r["mode"] == "subgpu"), key=lambda r: r["speedup_vs_temporal"])
    dep = Deployment.from_record(sub)
    arch = get_model("gpt-oss-20b")
    cfg = Config.from_record(sub, build_forward(arch, dep, 1).main)
    want = time_step(build_forward(arch, dep, int(sub["microbatches"])), cfg,
                     EventTimer(get_hardware("B200")), record=False).makespan_us
    (v,) = summ["verdicts"]
    assert v["subgpu_us"] == want, (v["subgpu_us"], sub["makespan_us"], want)
    assert v["subgpu"] == v["temporal_us"] / want


def test_simulate_vcontention_says_the_verdict_is_the_event_simulators(capsys):
    """The printed speedup is the batched timer's, the verdict's the event simulator's: the
    modes line says so and quotes the event simulator's SubGPU speedup."""
    rc = main(["simulate", *ARGS, "--simulator", "vcontention"])
    out = capsys.readouterr().out
    assert rc == 0
    rc = main(["simulate", *ARGS, "--json"])
    ev = json.loads(capsys.readouterr().out)
    want = ev["temporal"]["makespan_us"] / ev["config"]["makespan_us"]
    assert (f"modes     by the event simulator (whose predictions the bands were measured "
            f"on): SubGPU {want:.3f}x") in out


def test_gantt_best_of_a_vcontention_search_never_shows_a_region_longer_than_the_step(
        tmp_path, capsys, monkeypatch):
    """gantt_best.png draws the event simulator's run of the best record; under the batched
    timer its caption said "<event region> µs of the <batched timer's step> µs step", a main
    region longer than its whole step (4,705 of 4,517 µs here). It draws the event simulator's
    whole step (every run, then the head) and names the batched timer's step apart."""
    from subgpu_jax.app import searchout

    seen = {}
    monkeypatch.setattr(searchout, "write_search_figures",
                        lambda folder, recs, title, best_run: seen.update(run=best_run))
    rc = main(["search", "--model", "gpt-oss-20b", "--gpus", "8", "--tp", "8", "--dp", "1",
               "--exact", "vcontention", "--batches", "64", "--stages", "2",
               "--microbatches", "2", "--no-progress", "--out", str(tmp_path / "s")])
    capsys.readouterr()
    assert rc == 0
    r, title, caption, head, runs = seen["run"]
    summ = json.loads((tmp_path / "s" / "summary.json").read_text())
    (row,) = [x for x in summ["reference_check"]["rows"] if x["mode"] == "subgpu"]
    # the figure's run keeps its utilisation series, so it simulates every region; the
    # reference check skips the regions that repeat (sim.periodic): equal to float rounding
    assert r.makespan == pytest.approx(row["reference_region_us"], rel=FORWARD_TOL)
    step = summ["best_speedup_record"]["makespan_us"]
    assert f"of the {step:,.0f} µs step" not in caption
    # the whole step in the event simulator, then the batched timer's own step
    assert "then the head (" in caption and head is not None and runs
    assert caption.endswith(f"\nin the event simulator (vcontention: a {step:,.0f} µs step)")


def test_reference_check_without_a_subgpu_record_prints_no_zero_error(tmp_path, capsys):
    """--min-tokens-per-user keeping only temporal records: nothing was checked, so no
    "best SubGPU record at 0 points differ by a median 0.00%" line (temporal records are the
    event simulator's own numbers)."""
    out = tmp_path / "s"
    rc = main(["search", "--model", "gpt-oss-20b", "--gpus", "8", "--tp", "8", "--dp", "1",
               "--exact", "vcontention", "--batches", "64", "--stages", "2",
               "--microbatches", "2", "--min-tokens-per-user", "224", "--no-progress",
               "--out", str(out)])
    text = capsys.readouterr().out
    assert rc == 0
    chk = json.loads((out / "summary.json").read_text())["reference_check"]
    assert {x["mode"] for x in chk["rows"]} == {"temporal"}      # the filter kept only it
    assert chk["checked"] == 0 and chk["median_abs_error"] is None
    assert "checked by the event simulator" not in text


def test_simulate_help_describes_every_simulator(capsys):
    """--simulator offers vcontention: its help says what it is and what it cannot draw."""
    from subgpu_jax.app.cli import build_parser

    import pytest
    with pytest.raises(SystemExit):
        build_parser().parse_args(["simulate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "vcontention: the vectorised contention scorer" in text


def test_headline_names_an_approximate_scorer(tmp_path, capsys):
    """The best configuration's line of a search made with the batched timer says whose number
    it is (a new user read its 1.095x as the prediction while the event simulator's check
    below gave 1.068x); the reference's own line stays as it was."""
    args = ["search", "--model", "gpt-oss-20b", "--gpus", "8", "--tp", "8", "--dp", "1",
            "--batches", "64", "--stages", "2", "--microbatches", "2", "--no-progress"]
    assert main(args + ["--exact", "vcontention", "--out", str(tmp_path / "v")]) == 0
    line = [x for x in capsys.readouterr().out.splitlines() if "SubGPU configuration:" in x]
    assert line and line[0].endswith("the temporal baseline (by the vcontention scorer; the "
                                     "event simulator's check and verdicts follow)")
    assert main(args + ["--out", str(tmp_path / "e")]) == 0
    line = [x for x in capsys.readouterr().out.splitlines() if "SubGPU configuration:" in x]
    assert line and line[0].endswith("x the temporal baseline")
