"""experiments/bench_sweeps_gpu.py: issue 42's digest from the parts of a `sweeps` device call.

The parts below are written by hand in the shape of the scripts' JSON (``bench_screened.py``,
``bench_sweeps.py``, ``bench_evaluator.py``, ``exhaustive_gridpoint.py``); the expected figures
are derived here:

* frontier: a 24-point sample searched in 85 s (screened) and 148 s (event) projects to
  85 * 2720 / 24 = 9,633.3 s and 148 * 2720 / 24 = 16,773.3 s, ratio 148 / 85 = 1.741; missed
  (over 600 s, and 4 points over 0.5%).
* main job: 14.4 s (workers_warm) against 50.0 s (before): ratio 3.472, met (<= 15 s).
* evaluator: the slowest reference row of the better kernel: xla's worst m is 6.3e8, pallas's
  7.4e8, so pallas at 7.4e8 against its scan rate 3.7e6 (ratio 200.0); missed (< 1e9).
* exhaustive: 12.6 s wall, certified: met; rate 2.94e9 against 1.59e8 (ratio 18.49).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bs():
    spec = importlib.util.spec_from_file_location(
        "bench_sweeps_gpu", ROOT / "experiments" / "bench_sweeps_gpu.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _ev_rows(rates, scan):
    return [{"workload": w, "massive_evals_per_s": r, "scan_evals_per_s": scan,
             "max_abs_diff_us": 0.004} for w, r in zip(("gptoss-m2", "gptoss-m4", "gptoss-m8"),
                                                        rates)]


def _parts(folder: Path, skip=()) -> None:
    parts = {
        "frontier_sample.json": {"workers": 15, "env": {"cores_usable": 16}, "jobs": {"frontier": {
            "event": {"search_s": 148.0}, "screened": {"search_s": 85.0},
            "agreement": {"points": 24, "points_over_tol": 4, "makespan_vs_event_max": 0.038,
                          "frontier_same_points": True}}}},
        "main_job.json": {"records_identical_event_runs": True, "rows": [
            {"variant": "before", "search_s": 50.0}, {"variant": "workers_warm", "search_s": 14.4}]},
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
    assert f["figure"] == pytest.approx(9633.3, abs=0.05)
    assert f["baseline"] == pytest.approx(16773.3, abs=0.05)
    assert f["ratio"] == pytest.approx(1.741, abs=5e-4) and f["met"] is False
    m = rows["main_job"]
    assert (m["figure"], m["baseline"], m["ratio"], m["met"]) == (14.4, 50.0, 3.472, True)
    e = rows["evaluator"]
    assert e["figure"] == 7.4e8 and e["baseline"] == 3.7e6 and e["ratio"] == 200.0
    assert "pallas" in e["what"] and "gptoss-m8" in e["what"] and e["met"] is False
    x = rows["exhaustive"]
    assert (x["figure"], x["met"], x["ratio"]) == (12.6, True, 18.49)
    assert d["device"] == "NVIDIA H200"
    assert d["met"] == ["main_job", "exhaustive"] and d["missed"] == ["frontier", "evaluator"]
    assert d["missing"] == []


def test_frontier_needs_agreement(bs, tmp_path):
    """Fast enough but one point over 0.5%: not met; 0 points and same frontier: met."""
    _parts(tmp_path)
    p = tmp_path / "frontier_sample.json"
    d = json.loads(p.read_text())
    d["jobs"]["frontier"]["screened"]["search_s"] = 5.0   # 5 * 2720 / 24 = 566.7 s
    d["jobs"]["frontier"]["agreement"]["points_over_tol"] = 1
    p.write_text(json.dumps(d))
    assert bs.digest(str(tmp_path))["rows"][0]["met"] is False
    d["jobs"]["frontier"]["agreement"]["points_over_tol"] = 0
    p.write_text(json.dumps(d))
    assert bs.digest(str(tmp_path))["rows"][0]["met"] is True


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
    ("frontier_sample.json", lambda d: d["jobs"]["frontier"]["agreement"].update(points=5000),
     "frontier"),
    ("frontier_sample.json", lambda d: d["jobs"]["frontier"]["agreement"].update(points=0),
     "frontier"),
    ("frontier_sample.json",
     lambda d: d["jobs"]["frontier"]["agreement"].update(frontier_same_points="no"), "frontier"),
    ("frontier_sample.json", lambda d: d["jobs"]["frontier"]["screened"].update(
        search_s=float("nan")), "frontier"),
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
    for f in ("frontier_sample.json", "evaluator_xla.json", "evaluator_pallas.json"):
        (tmp_path / f).write_text("12")
    with pytest.raises(SystemExit) as e:
        bs.main(["--from", str(tmp_path), "--out", str(tmp_path / "d.json")])
    assert e.value.code == 2
    assert "no readable part" in capsys.readouterr().err
