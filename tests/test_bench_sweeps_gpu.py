"""experiments/bench_sweeps_gpu.py: issue 42's digest from the parts of a `sweeps` device call.

The parts below are written by hand in the shape of the scripts' JSON (``bench_screened.py``,
``bench_sweeps.py``, ``bench_evaluator.py``, ``exhaustive_gridpoint.py``); the expected figures
are derived here:

* frontier: the whole study in 640 s (2,830 points, complete), engine check 8e-15; the Python
  path's CPU 5.2 times the engine's on a 24-point sample projects to 640 * 5.2 = 3,328.0 s;
  missed (over 600 s; the sample's 0 points over 0.5% and its same frontier would pass).
* main job: 14.4 s (workers_cold) against 50.0 s (before): ratio 3.472, met (<= 15 s); warm
  6.9 s beside it.
* evaluator: the slowest reference row of the better kernel: xla's worst m is 6.3e8, pallas's
  7.4e8, so pallas at 7.4e8 against its scan rate 3.7e6 (ratio 200.0); missed (< 1e9).
* exhaustive: 12.6 s wall, certified: met; rate 2.94e9 against 1.59e8 (ratio 18.49).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest



@pytest.fixture(scope="module")
def bs(experiment_script):
    return experiment_script("bench_sweeps_gpu")


def _ev_rows(rates, scan):
    return [{"workload": w, "massive_evals_per_s": r, "scan_evals_per_s": scan,
             "max_abs_diff_us": 0.004} for w, r in zip(("gptoss-m2", "gptoss-m4", "gptoss-m8"),
                                                        rates)]


def _parts(folder: Path, skip=()) -> None:
    parts = {
        "frontier_studies.json": {"gptoss120b_b200": {
            "wall_seconds": 640.0, "cpu_seconds": 8100.0, "grid_points": 2830, "finished": 2830,
            "complete": True, "runs": [{"workers": 15}], "settings": {"exact": "event"}}},
        "frontier_summary.json": {"engine_check": {"checked": 20, "max_abs_error": 8e-15}},
        "frontier_python.json": {"jobs": {"frontier": {
            "cpu_ratio_python_over_event": 5.2,
            "agreement_python": {"points": 24, "points_over_tol": 0, "same_choice": 24,
                                 "makespan_vs_event_max": 0.0, "makespan_vs_event_min": 0.0,
                                 "missing_in_screened": [], "frontier_same_points": True}}}},
        "main_job.json": {"records_identical_event_runs": True,
                          "env": {"cores_used": 2, "jax_platform": "cpu"}, "rows": [
            {"variant": "before", "search_s": 50.0}, {"variant": "workers_cold", "search_s": 14.4},
            {"variant": "workers_warm", "search_s": 6.9}]},
        "evaluator_xla.json": {"device_kind": "NVIDIA H200",
                               "rows": _ev_rows((9.0e8, 8.0e8, 6.3e8), 3.0e6)},
        "evaluator_pallas.json": {"device_kind": "NVIDIA H200",
                                  "rows": _ev_rows((9.3e8, 8.7e8, 7.4e8), 3.7e6)},
        "exhaustive.json": {"certified": True, "evals_per_s": 2.94e9},
        "exhaustive_wall.json": {"wall_s": 12.6},
        "exhaustive_baseline.json": {"certified": False, "evals_per_s": 1.59e8},
    }
    for name, d in parts.items():
        if name not in skip:
            (folder / name).write_text(json.dumps(d))


def test_digest_figures(bs, tmp_path):
    _parts(tmp_path)
    d = bs.digest(str(tmp_path))
    rows = {r["target"]: r for r in d["rows"]}
    f = rows["frontier"]
    assert (f["figure"], f["baseline"], f["ratio"], f["met"]) == (640.0, 3328.0, 5.2, False)
    assert f["engine_check"] == {"checked": 20, "max_abs_error": 8e-15}
    assert f["complete"] is True and f["sample_max_abs_makespan_diff"] == 0.0
    assert "all 2,830 grid points" in f["what"], f["what"]
    assert f["sample_same_choice"] == 24 and f["sample_missing"] == 0
    m = rows["main_job"]
    assert (m["figure"], m["baseline"], m["ratio"], m["met"]) == (14.4, 50.0, 3.472, True)
    assert m["warm_s"] == 6.9
    e = rows["evaluator"]
    assert e["figure"] == 7.4e8 and e["baseline"] == 3.7e6 and e["ratio"] == 200.0
    assert "pallas" in e["what"] and "gptoss-m8" in e["what"] and e["met"] is False
    x = rows["exhaustive"]
    assert (x["figure"], x["met"], x["ratio"]) == (12.6, True, 18.49)
    assert d["device"] == "NVIDIA H200"
    assert d["met"] == ["main_job", "exhaustive"] and d["missed"] == ["frontier", "evaluator"]
    assert d["missing"] == []


def test_frontier_needs_agreement(bs, tmp_path):
    """Fast enough (540 s) but one sample point 0.6% above the Python search, an engine check
    over 0.5% or an incomplete study: not met; all three right: met."""
    _parts(tmp_path)
    st, py, sm = (tmp_path / f for f in ("frontier_studies.json", "frontier_python.json",
                                         "frontier_summary.json"))
    d = json.loads(st.read_text())
    d["gptoss120b_b200"]["wall_seconds"] = 540.0
    st.write_text(json.dumps(d))
    assert bs.digest(str(tmp_path))["rows"][0]["met"] is True
    g = json.loads(py.read_text())
    g["jobs"]["frontier"]["agreement_python"]["makespan_vs_event_max"] = 0.006
    py.write_text(json.dumps(g))
    assert bs.digest(str(tmp_path))["rows"][0]["met"] is False
    g["jobs"]["frontier"]["agreement_python"]["makespan_vs_event_max"] = 0.0
    py.write_text(json.dumps(g))
    c = json.loads(sm.read_text())
    c["engine_check"]["max_abs_error"] = 0.006
    sm.write_text(json.dumps(c))
    assert bs.digest(str(tmp_path))["rows"][0]["met"] is False
    c["engine_check"]["max_abs_error"] = 1e-14
    sm.write_text(json.dumps(c))
    d["gptoss120b_b200"].update(finished=2000, complete=False)
    st.write_text(json.dumps(d))
    row = bs.digest(str(tmp_path))["rows"][0]
    assert row["met"] is False and row["complete"] is False
    assert "2,000 of 2,830 grid points" in row["what"], row["what"]


def test_missing_parts_are_missing_not_guessed(bs, tmp_path):
    _parts(tmp_path, skip=("main_job.json", "exhaustive_wall.json", "evaluator_pallas.json"))
    d = bs.digest(str(tmp_path))
    rows = {r["target"]: r for r in d["rows"]}
    assert rows["main_job"] == {"target": "main_job", "status": "missing"}
    assert rows["exhaustive"]["status"] == "missing"
    assert rows["evaluator"]["figure"] == 6.3e8      # only the xla run is there
    assert d["missing"] == ["main_job", "exhaustive"]


def test_cli_writes_and_refuses(bs, tmp_path, capsys):
    _parts(tmp_path)
    out = tmp_path / "digest.json"
    assert bs.main(["--from", str(tmp_path), "--out", str(out)]) == 0
    assert json.loads(out.read_text())["met"] == ["main_job", "exhaustive"]
    empty = tmp_path / "empty"
    empty.mkdir()
    for argv in (["--from", str(empty)], ["--from", str(tmp_path / "nope")],
                 ["--from", str(tmp_path), "--out", str(tmp_path / "no" / "d.json")]):
        with pytest.raises(SystemExit) as e:
            bs.main(argv)
        assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--from" in err and "--out" in err


@pytest.mark.parametrize("name, edit, target", [
    ("main_job.json", lambda d: d["rows"][1].update(search_s=-1), "main_job"),
    ("main_job.json", lambda d: d["rows"][1].update(search_s="14.4"), "main_job"),
    ("exhaustive_wall.json", lambda d: d.update(wall_s=0), "exhaustive"),
    ("exhaustive_wall.json", lambda d: d.update(wall_s=True), "exhaustive"),
    ("exhaustive.json", lambda d: d.update(certified="false"), "exhaustive"),
    ("exhaustive_baseline.json", lambda d: d.update(evals_per_s=0.0), "exhaustive"),
    ("frontier_python.json",
     lambda d: d["jobs"]["frontier"]["agreement_python"].update(points=5000), "frontier"),
    ("frontier_python.json",
     lambda d: d["jobs"]["frontier"]["agreement_python"].update(points=0), "frontier"),
    ("frontier_python.json", lambda d: d["jobs"]["frontier"]["agreement_python"].update(
        frontier_same_points="no"), "frontier"),
    ("frontier_python.json", lambda d: d["jobs"]["frontier"].update(
        cpu_ratio_python_over_event=float("nan")), "frontier"),
    ("frontier_studies.json", lambda d: d["gptoss120b_b200"].update(finished=3000), "frontier"),
    ("frontier_studies.json", lambda d: d["gptoss120b_b200"].update(runs=[]), "frontier"),
    ("frontier_summary.json", lambda d: d["engine_check"].update(max_abs_error="0"),
     "frontier"),
    ("frontier_summary.json", lambda d: d["engine_check"].update(max_abs_error=-1.0),
     "frontier"),
    ("frontier_summary.json", lambda d: d["engine_check"].update(checked=0), "frontier"),
    ("frontier_studies.json", lambda d: d["gptoss120b_b200"].update(grid_points=0, finished=0),
     "frontier"),
    ("frontier_studies.json", lambda d: d["gptoss120b_b200"].update(
        settings={"exact": "static"}), "frontier"),
    ("frontier_python.json", lambda d: d["jobs"]["frontier"]["agreement_python"].update(
        makespan_vs_event_min=float("nan")), "frontier"),
    ("main_job.json", lambda d: d["rows"].append({"variant": "workers_cold", "search_s": 9.0}),
     "main_job"),
    ("main_job.json", lambda d: d["rows"].pop(1), "main_job"),
    ("evaluator_pallas.json", lambda d: d["rows"][2].update(massive_evals_per_s=float("inf")),
     "evaluator"),
    ("evaluator_xla.json", lambda d: d["rows"][2].update(workload="gptoss-m2"), "evaluator"),
    ("evaluator_xla.json", lambda d: d["rows"][0].update(scan_evals_per_s=0), "evaluator"),
])
def test_bad_part_is_unreadable_never_met(bs, tmp_path, name, edit, target):
    """A part that is not what its script writes: its row is unreadable (with the reason), has
    no figure and is never met; the other rows are unchanged."""
    _parts(tmp_path)
    p = tmp_path / name
    d = json.loads(p.read_text())
    edit(d)
    p.write_text(json.dumps(d))
    rows = {r["target"]: r for r in bs.digest(str(tmp_path))["rows"]}
    assert rows[target]["status"] == "unreadable" and "figure" not in rows[target]
    assert name in rows[target]["reason"] and not rows[target].get("met")
    assert all(r["status"] == "measured" for t, r in rows.items() if t != target)


def test_parts_of_the_wrong_type(bs, tmp_path, capsys):
    """Files holding a list or no JSON: unreadable rows; all parts broken: exit 2 naming them."""
    _parts(tmp_path)
    (tmp_path / "main_job.json").write_text("[1, 2]")
    (tmp_path / "exhaustive.json").write_text("{not json")
    rows = {r["target"]: r for r in bs.digest(str(tmp_path))["rows"]}
    assert rows["main_job"]["status"] == rows["exhaustive"]["status"] == "unreadable"
    for f in ("frontier_studies.json", "evaluator_xla.json", "evaluator_pallas.json"):
        (tmp_path / f).write_text("12")
    with pytest.raises(SystemExit) as e:
        bs.main(["--from", str(tmp_path), "--out", str(tmp_path / "d.json")])
    assert e.value.code == 2
    assert "no readable part" in capsys.readouterr().err


@pytest.mark.parametrize("edit", [
    lambda p: (p / "frontier_summary.json").unlink(),
    lambda p: (p / "frontier_python.json").unlink(),
    lambda p: _edit(p / "frontier_python.json", lambda d: d["jobs"]["frontier"][
        "agreement_python"].update(makespan_vs_event_min=-0.006)),
    lambda p: _edit(p / "frontier_python.json", lambda d: d["jobs"]["frontier"][
        "agreement_python"].update(same_choice=23)),
    lambda p: _edit(p / "frontier_python.json", lambda d: d["jobs"]["frontier"][
        "agreement_python"].update(missing_in_screened=["k"])),
])
def test_frontier_met_only_with_all_its_evidence(bs, tmp_path, edit):
    """A study fast enough (540 s) is not met without its engine check or its sample, nor with
    a sample point 0.6% below the Python search, another choice or a point missing."""
    _parts(tmp_path)
    _edit(tmp_path / "frontier_studies.json",
          lambda d: d["gptoss120b_b200"].update(wall_seconds=540.0))
    assert bs.digest(str(tmp_path))["rows"][0]["met"] is True
    edit(tmp_path)
    row = bs.digest(str(tmp_path))["rows"][0]
    assert row["status"] == "measured" and row["met"] is False


def test_main_job_needs_identical_records(bs, tmp_path):
    _parts(tmp_path)
    _edit(tmp_path / "main_job.json", lambda d: d.update(records_identical_event_runs=False))
    rows = {r["target"]: r for r in bs.digest(str(tmp_path))["rows"]}
    assert rows["main_job"]["figure"] == 14.4 and rows["main_job"]["met"] is False


def _edit(path, change) -> None:
    d = json.loads(path.read_text())
    change(d)
    path.write_text(json.dumps(d))


@pytest.mark.parametrize("name,edit,target", [
    # an integer too large for a float (JSON allows it): unreadable, never an OverflowError
    ("frontier_studies.json", lambda d: d["gptoss120b_b200"].update(wall_seconds=10**400),
     "frontier"),
    ("frontier_python.json", lambda d: d["jobs"]["frontier"]["agreement_python"].update(
        makespan_vs_event_max=10**400), "frontier"),
    ("evaluator_xla.json", lambda d: d["rows"][0].update(massive_evals_per_s=10**400),
     "evaluator"),
    ("frontier_python.json", lambda d: d["jobs"]["frontier"]["agreement_python"].update(
        missing_in_screened=True), "frontier"),
    ("frontier_python.json", lambda d: d["jobs"]["frontier"]["agreement_python"].update(
        missing_in_screened=5), "frontier"),
    ("main_job.json", lambda d: d["rows"][0].update(variant=["before"]), "main_job"),
    ("frontier_studies.json", lambda d: d["gptoss120b_b200"].pop("settings"), "frontier"),
])
def test_odd_values_are_unreadable_not_a_traceback(bs, tmp_path, name, edit, target):
    """Found by a breaker (2026-12-07): each of these used to end in a traceback (OverflowError,
    TypeError) or, for a study without its settings, to be taken for an --exact event search."""
    _parts(tmp_path)
    _edit(tmp_path / name, edit)
    rows = {r["target"]: r for r in bs.digest(str(tmp_path))["rows"]}
    assert rows[target]["status"] == "unreadable", rows[target]


def test_deeply_nested_part_is_unreadable(bs, tmp_path):
    _parts(tmp_path)
    (tmp_path / "exhaustive.json").write_text("[" * 100000 + "]" * 100000)
    rows = {r["target"]: r for r in bs.digest(str(tmp_path))["rows"]}
    assert rows["exhaustive"]["status"] == "unreadable"


def test_evaluator_met_only_where_it_agrees_with_the_scan(bs, tmp_path):
    """A rate above the target is met only when every reference row's makespans are within
    ``evaluator_max_abs_diff_us`` of the scan evaluator's (a fast wrong kernel is not met), and
    only when every row says how far they are."""
    _parts(tmp_path)
    fast = lambda d: [r.update(massive_evals_per_s=2e9) for r in d["rows"]]  # noqa: E731
    _edit(tmp_path / "evaluator_pallas.json", fast)
    ev = lambda: {r["target"]: r for r in bs.digest(str(tmp_path))["rows"]}["evaluator"]  # noqa
    assert ev()["met"] is True and ev()["max_abs_diff_us"] == 0.004
    _edit(tmp_path / "evaluator_pallas.json", lambda d: d["rows"][2].update(max_abs_diff_us=5e5))
    assert ev()["met"] is False and ev()["max_abs_diff_us"] == 5e5
    _edit(tmp_path / "evaluator_pallas.json", lambda d: d["rows"][2].pop("max_abs_diff_us"))
    assert ev()["met"] is False and ev()["max_abs_diff_us"] is None


@pytest.mark.parametrize("env", [None, {"cores_used": 16, "jax_platform": "cpu"},
                                 {"cores_used": 2, "jax_platform": "cuda"}])
def test_main_job_met_only_on_two_cores_on_the_cpu(bs, tmp_path, env):
    """The target is the README's machine: a main job timed on 16 cores or with JAX on a GPU (or
    without saying where) is reported, never met."""
    _parts(tmp_path)
    _edit(tmp_path / "main_job.json",
          lambda d: d.pop("env") if env is None else d.update(env=env))
    m = {r["target"]: r for r in bs.digest(str(tmp_path))["rows"]}["main_job"]
    assert m["status"] == "measured" and m["met"] is False
    assert m["on_the_target_machine"] is False
