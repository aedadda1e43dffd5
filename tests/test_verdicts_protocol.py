"""The verdict validation protocol's analyze phase (``experiments/hw_verdicts_h200.py``,
``experiments/verdicts_report.py``) on the committed plan with synthetic measurements whose
answer is known by construction.

Truth: every measured temporal equals its prediction and every measured speedup is the
predicted one times a per-workload factor f_w. Then each row's ratio measured / predicted
speedup is exactly f_w, so the leave-one-workload-out band judging workload w spans
[min f, max f] over the *other* held-out workloads of its regime (same MoE-ness, mode and
collectives when there are two, else dense and MoE pooled; never f_w itself), fit workloads make
no band, the temporal error is 0, and a row's verdict follows from S x (that min, that max).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: The committed plan of the default model (analytic-v3, lanes sharing by "tail": the plan of
#: analytic-v3-kernels predicted again).
PLAN = ROOT / "experiments" / "results" / "hw_verdicts" / "analytic-v3-tail" / "configs.json"


def _script(name: str):
    sys.path.insert(0, str(ROOT / "experiments"))
    spec = importlib.util.spec_from_file_location(name, ROOT / "experiments" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _analyze_argv(data: Path, digest: Path) -> list[str]:
    """The command line of the analyze phase on the committed plan, measured files in ``data``."""
    return ["hw_verdicts_h200.py", "--phase", "analyze", "--configs", str(PLAN),
            "--data", str(data), "--digest", str(digest)]


def _fake_measurements(plan: dict, folder: Path, factor: dict) -> None:
    for w, p in plan.items():
        rows = []
        for coll in (("sleep", "none") if p["has_collectives"] else ("sleep",)):
            t = p["configs"][0]["predicted_us"][coll]
            for d in p["configs"]:
                if d["kind"] == "temporal":
                    rows.append({"name": d["name"], "collectives": coll, "measured_us": t})
                    continue
                s = t / d["predicted_us"][coll] * factor[w]
                rows.append({"name": d["name"], "collectives": coll, "measured_us": t / s,
                             "spread": 0.0})
        (folder / f"measured_{w}.json").write_text(json.dumps({"workload": w, "rows": rows}))


def test_analyze_bands_are_leave_one_workload_out(tmp_path):
    plan = json.loads(PLAN.read_text())
    names = sorted(plan)
    factor = {w: 0.80 + 0.02 * i for i, w in enumerate(names)}
    _fake_measurements(plan, tmp_path, factor)
    hv = _script("hw_verdicts_h200")
    digest = tmp_path / "hw_verdicts_test.json"
    sys.argv = _analyze_argv(tmp_path, digest)
    assert hv.main() == 0
    res = json.loads(digest.read_text())
    held = [w for w in names if plan[w]["fit_status"] != "fit"]
    assert sorted(res["summary"]["held_out_workloads"]) == sorted(held)
    for w, d in res["temporal"].items():
        for v in d.values():
            assert v["error"] == pytest.approx(0.0, abs=1e-12)
    has = {(r["workload"], r["mode"], r["collectives"]) for r in res["rows"]}
    for r in res["rows"]:
        assert r["measured_speedup"] / r["predicted_speedup"] == pytest.approx(factor[r["workload"]])
        # the regime's own held-out workloads (same MoE-ness, mode, collectives) when >= 2,
        # else the pooled dense + MoE ones; never the judged workload
        pool = [x for x in held if x != r["workload"]
                and (x, r["mode"], r["collectives"]) in has]
        own = [x for x in pool if plan[x]["moe"] == r["moe"]]
        others = [factor[x] for x in (own if len(own) >= 2 else pool)]
        assert r["workload"] not in (own if len(own) >= 2 else pool)
        assert r["band"] is not None
        lo, hi = r["band"]
        assert lo == pytest.approx(r["predicted_speedup"] * min(others))
        assert hi == pytest.approx(r["predicted_speedup"] * max(others))
        want = ("win" if lo > 1 else "loss" if hi < 1 else "uncertain")
        assert r["verdict"] == want
    # the product's bands: all held-out rows, none from a fit workload
    for b in res["bands"].values():
        assert set(b["workloads"]) <= set(held)
        assert b["lo"] >= min(factor[w] for w in held) - 1e-12
    assert set(res["summary"]["targets"].values()) <= {"met", "missed", "no data"}
    assert digest.with_suffix(".png").stat().st_size > 1000


def test_analyze_without_held_out_data_says_no_data(tmp_path):
    plan = json.loads(PLAN.read_text())
    fit = {w: p for w, p in plan.items() if p["fit_status"] == "fit"}
    _fake_measurements(fit, tmp_path, {w: 0.9 for w in fit})
    hv = _script("hw_verdicts_h200")
    digest = tmp_path / "d.json"
    sys.argv = _analyze_argv(tmp_path, digest)
    assert hv.main() == 0
    t = json.loads(digest.read_text())["summary"]["targets"]
    assert t == {k: "no data" for k in t}


def test_analyze_refuses_bad_input_in_one_line(tmp_path, capsys):
    hv = _script("hw_verdicts_h200")
    sys.argv = _analyze_argv(tmp_path, tmp_path / "d.json")
    assert hv.main() == 2
    assert "error: --data: no measured rows" in capsys.readouterr().err
    (tmp_path / "measured_llama8b_1gpu_g256_kv2k.json").write_text("{not json")
    assert hv.main() == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --data:") and "unusable measurement file" in err
    assert "\n" not in err


class _FakeExecutor:
    """A stand-in GPU: temporal takes 1,000 µs (+10% with the link wait), a pipelined run
    1,000 x (1 + 0.05 x D) / (1 + 0.02 x microbatches) µs; it records what it was asked."""

    def __init__(self, coll: str, log: list) -> None:
        self.coll, self.log = coll, log

    def temporal_config(self):
        return "temporal"

    def measure(self, cfg, mode, rounds, replays, warmup):
        from types import SimpleNamespace

        self.log.append((self.coll, mode, cfg))
        base = 1100.0 if self.coll == "sleep" else 1000.0
        if cfg == "temporal":
            return SimpleNamespace(makespan_us=base, spread=0.0)
        return SimpleNamespace(makespan_us=base * (1 + 0.05 * cfg.D) / (1 + 0.02 * 2),
                               spread=0.001)


class _FakeMachine:
    def __init__(self) -> None:
        self.log: list = []
        self.released = 0

    def name(self) -> str:
        return "fake"

    def open(self, wl, collectives):
        assert collectives in ("sleep", "proxy", "none")
        return _FakeExecutor(collectives, self.log)

    def release(self) -> None:
        self.released += 1


def test_device_phase_measures_every_planned_row_then_analyzes(tmp_path):
    """The device phase on a fake machine: every planned configuration of each workload is
    measured under sleep and, only where the workload has collectives, proxy and none; the multistream
    twin in multistream mode; the files it writes feed the analyze phase."""
    plan = json.loads(PLAN.read_text())
    names = ["llama8b_1gpu_g256_kv2k", "mixtral_tp8_g1024_kv4k"]
    hv = _script("hw_verdicts_h200")
    m = _FakeMachine()
    args = hv.argparse.Namespace(configs=str(PLAN), out=str(tmp_path), workloads=names,
                                 time_limit=1e9, rounds=1, replays=1, warmup=0)
    assert hv.device_phase(args, machine=m) == 0
    for w in names:
        res = json.loads((tmp_path / f"measured_{w}.json").read_text())
        colls = hv.COLLECTIVES if plan[w]["has_collectives"] else ("sleep",)
        assert [(r["collectives"], r["name"]) for r in res["rows"]] == [
            (c, d["name"]) for c in colls for d in plan[w]["configs"]]
        assert all(r["measured_us"] > 0 for r in res["rows"]) and res["gpu"] == "fake"
    assert plan["llama8b_1gpu_g256_kv2k"]["has_collectives"] is False
    assert plan["mixtral_tp8_g1024_kv4k"]["has_collectives"] is True
    assert m.released == 1 + len(hv.COLLECTIVES)   # one machine per workload and setting
    modes = {mode for _, mode, cfg in m.log if cfg != "temporal"}
    assert modes == {"green", "multistream"}
    # a time limit already spent measures nothing and says so
    args.time_limit, args.out = -1.0, str(tmp_path / "late")
    assert hv.device_phase(args, machine=_FakeMachine()) == 0
    late = json.loads((tmp_path / "late" / f"measured_{names[0]}.json").read_text())
    assert late["rows"] == [] and "time limit" in late["errors"]["time"]
    assert hv.main(["--phase", "analyze", "--configs", str(PLAN), "--data", str(tmp_path),
                    "--digest", str(tmp_path / "d.json")]) == 0


def test_markdown_table_renders_what_the_main_job_says():
    """One workload, two collectives settings: "measure" shows the best measured (multistream
    1.05x), a temporal recommendation shows its best alternative and "**lost**" when flagged;
    the speedup error column is the median (max) of |pred / meas - 1| over its rows: rows with
    pred / meas = 1.10 and 1.00 give median 5.0%, max 10%."""
    vr = _script("verdicts_report")
    rows = [{"workload": "w", "fit_status": "held_out", "config": "search_top1",
             "collectives": "sleep", "predicted_speedup": 1.10, "measured_speedup": 1.00,
             "verdict_wrong": False},
            {"workload": "w", "fit_status": "held_out", "config": "search_top1",
             "collectives": "none", "predicted_speedup": 0.90, "measured_speedup": 0.90,
             "verdict_wrong": False}]
    recs = [{"workload": "w", "collectives": "sleep", "recommend": "measure", "lost": False,
             "measured": {"temporal": 1.0, "subgpu": 1.0, "multistream": 1.05}},
            {"workload": "w", "collectives": "none", "recommend": "temporal", "lost": True,
             "measured": {"temporal": 1.0, "subgpu": 0.9, "multistream": 1.04}}]
    summ = {"speedup_ratio_error_held_out": {"median": 0.05, "max": 0.1}, "rows_held_out": 2,
            "verdicts": {"win": 0, "loss": 1, "uncertain": 1}, "verdict_wrong": 0,
            "verdict_judged": 1, "recommendations": 2, "recommendations_lost": 1,
            "recommendations_by_kind": {"temporal": 1, "measure": 1, "subgpu": 0},
            "targets": {"no_losing_recommendation": "missed"}}
    md = vr.markdown_table({"rows": rows, "recommendations": recs, "summary": summ,
                            "temporal": {"w": {"sleep": {"error": -0.034}}}})
    line = md.splitlines()[2]
    assert line == ("| w | held out | sleep -3.4% | 1.10x / 1.00x | 5.0% (10%) | 0 of 2 | "
                    "sleep: measure (best measured: multistream 1.05x); "
                    "none: temporal (multistream 1.04x) **lost** |")
    assert "the main job says temporal 1, measure 1 on 2" in md and "lost 1" in md


def test_the_committed_h200_digest_reports_its_rows_outside_todays_space():
    """The H200 plan of the default model holds 3 green configurations with an 8-SM stage (5
    rows over the collective settings; ``Hardware.min_stage_sms`` = 16 now keeps them out of
    the search and `subgpu run`). The digest still judges them (its bands and summary are
    those of every measured row) and lists them, with the held-out summary without them."""
    vr = _script("verdicts_report")
    d = json.loads((ROOT / "experiments" / "results" / "hw_verdicts" / "analytic-v3-tail-plan"
                    / "hw_verdicts_h200.json").read_text())
    out = d["outside_space"]
    assert out["stage_min_sms"] == 16 and len(out["rows"]) == 5
    assert all(min(r["alloc"]) == 8 for r in out["rows"])
    inside, outside = vr.split_outside_space(d["rows"], 16)
    assert len(outside) == 5 and len(inside) + 5 == len(d["rows"])
    assert {(r["workload"], r["config"], r["collectives"]) for r in outside} == \
        {(r["workload"], r["config"], r["collectives"]) for r in out["rows"]}
    assert all(r["mode"] == "green" for r in outside)
    # the worst held-out row (predicted 0.912x, measured 0.448x) is one of them
    worst = max((r for r in d["rows"] if r["held_out"]),
                key=lambda r: abs(r["predicted_speedup"] / r["measured_speedup"] - 1))
    assert (worst["workload"], worst["config"]) == ("llama8b_1gpu_g512_kv1k", "search_top2")
    assert worst in outside
    ex = out["if_excluded"]
    assert ex["speedup_ratio_error_held_out"]["n"] + 5 == d["summary"][
        "speedup_ratio_error_held_out"]["n"]
    assert ex["speedup_ratio_error_held_out"]["max"] < 0.5
    assert vr.split_outside_space(d["rows"], 8)[1] == []
