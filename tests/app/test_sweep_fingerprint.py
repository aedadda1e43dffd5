"""Issue 41 item 2: a sweep's fingerprint holds the content of its input files, not their paths,
and every option that changes a record.

Before issue 41 ``meta["calibration"]`` was the path: re-calibrating into the same file reused
the old records ("evaluated 0, skipped 2"), ``./cal.json`` was refused as another sweep, and
``--input-len`` (kept in every record as ``input_len``) was not in the fingerprint at all.

Oracles: the "evaluated N grid points, skipped M already done" line (N + M = 2 grid points:
the temporal one and one SubGPU one), the refusal's "differs in ..." words, and the records'
``input_len``.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from subgpu_jax.app.cli import main
from subgpu_jax.app.fingerprint import file_digest, grid_fingerprint

ROOT = Path(__file__).resolve().parents[2]
CAL = ROOT / "experiments" / "results" / "tune" / "llama8b_1gpu_g256_kv2k" / "calibration_tuned.json"
CALIBRATED = ["search", "--hardware", "H200", "--model", "llama-3.1-8b", "--gpus", "1",
              "--exact", "static", "--batches", "256", "--stages", "2", "--microbatches", "2",
              "--input-len", "2048", "--no-progress"]
TINY = ["search", "--model", "gpt-oss-20b", "--gpus", "8", "--tp", "8", "--dp", "1",
        "--exact", "static", "--batches", "64", "--stages", "2", "--microbatches", "2",
        "--no-progress"]


def _run(args, capsys):
    rc = main(args)
    out, err = capsys.readouterr()
    return rc, out, err


def _evaluated(out: str) -> str:
    return next(line for line in out.splitlines() if line.startswith("evaluated ")).split(" (")[0]


def test_about_is_outside_the_fingerprint_and_content_inside(tmp_path):
    p = tmp_path / "a.json"
    p.write_text("{}")
    d = file_digest(str(p))
    assert d == "sha256:44136fa355b3678a"  # sha256(b"{}")[:16]
    assert grid_fingerprint({"x": 1, "about": {"calibration": "a"}}) == \
        grid_fingerprint({"x": 1, "about": {"calibration": "./a"}}) == grid_fingerprint({"x": 1})
    p.write_text("{ }")
    assert file_digest(str(p)) != d


def test_calibration_by_content_not_path(tmp_path, capsys, monkeypatch):
    """One calibration reached as ``cal.json`` and ``./cal.json`` and by its absolute path is one
    sweep (the second and third runs compute nothing); the same file re-calibrated (every
    kernel 10% slower) is another sweep: refused, naming ``calibration``."""
    monkeypatch.chdir(tmp_path)
    shutil.copy(CAL, "cal.json")
    out_dir = str(tmp_path / "sweep")
    rc, out, err = _run(CALIBRATED + ["--out", out_dir, "--calibration", "cal.json"], capsys)
    assert rc == 0, err
    assert _evaluated(out) == "evaluated 2 grid points, skipped 0 already done, 0 remaining"
    for path in ("./cal.json", str(tmp_path / "cal.json")):
        rc, out, err = _run(CALIBRATED + ["--out", out_dir, "--calibration", path], capsys)
        assert rc == 0, err
        assert _evaluated(out) == "evaluated 0 grid points, skipped 2 already done, 0 remaining"
        assert f"calibrated with {path}," in out  # the note names the path given this time
    d = json.loads(Path("cal.json").read_text())
    for k in d["kernels"]:
        k["times_us"] = {p: 1.1 * t for p, t in k["times_us"].items()}
    Path("cal.json").write_text(json.dumps(d))
    rc, out, err = _run(CALIBRATED + ["--out", out_dir, "--calibration", "cal.json"], capsys)
    assert rc == 2
    assert "differs in calibration)" in err and "\n" == err[-1] and err.count("\n") == 1


def test_input_len_is_part_of_the_sweep(tmp_path, capsys):
    """``--input-len 4096 --kv-history 32768`` against a folder of the default (both 32,768):
    refused, naming ``input_len`` (it reused the records with input_len 32768 before)."""
    out_dir = str(tmp_path / "sweep")
    rc, out, err = _run(TINY + ["--out", out_dir], capsys)
    assert rc == 0, err
    rc, out, err = _run(TINY + ["--out", out_dir, "--input-len", "4096", "--kv-history",
                                "32768"], capsys)
    assert rc == 2 and "differs in input_len)" in err
    out2 = str(tmp_path / "sweep2")
    rc, out, err = _run(TINY + ["--out", out2, "--input-len", "4096", "--kv-history",
                                "32768"], capsys)
    assert rc == 0, err
    recs = [json.loads(x) for x in (Path(out2) / "records.jsonl").read_text().splitlines()
            if '"grid_key"' in x]
    assert recs and {r["input_len"] for r in recs} == {4096}


def test_model_config_by_content(tmp_path, capsys, monkeypatch):
    """A config.json reached by two paths is one sweep; the same file with another
    ``intermediate_size`` is another (``model_config`` and ``arch`` differ)."""
    monkeypatch.chdir(tmp_path)
    os.mkdir("m")
    cfg = json.loads((ROOT / "tests" / "data" / "configs" / "llama-3.1-8b.json").read_text())
    Path("m/config.json").write_text(json.dumps(cfg))
    args = ["search", "--gpus", "1", "--exact", "static", "--batches", "64", "--stages", "2",
            "--microbatches", "2", "--kv-history", "1024", "--no-progress", "--out", "sweep"]
    rc, out, err = _run(args + ["--model", "m/config.json"], capsys)
    assert rc == 0, err
    rc, out, err = _run(args + ["--model", "./m"], capsys)
    assert rc == 0, err
    assert _evaluated(out) == "evaluated 0 grid points, skipped 2 already done, 0 remaining"
    cfg["intermediate_size"] = 14336 + 128
    Path("m/config.json").write_text(json.dumps(cfg))
    rc, out, err = _run(args + ["--model", "m/config.json"], capsys)
    assert rc == 2 and "model_config" in err
