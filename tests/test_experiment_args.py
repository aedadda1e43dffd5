"""Argument checks of the experiment scripts that have no test file of their own
(experiments/bench_vcontention.py, bench_eventsim.py, profile_vcontention_gpu.py) and the
shared path checks they use (``subgpu_jax.model.checks.out_file``, ``out_dir``).

House rule (README): bad input ends a command with one line ``error: ...`` naming the
argument and what is allowed, exit code 2, no traceback, before any work. Each script is
called through its ``main(argv)``; the arguments that would be accepted are kept small (one
structure, 8 allocations, one repeat) so that a script that let a bad value through fails its
test quickly instead of running its whole benchmark.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from subgpu_jax.model.checks import out_dir, out_file

ROOT = Path(__file__).resolve().parents[1]


def _script(name: str):
    """``experiments/<name>.py`` as a module (scripts are not in a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "experiments" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def bv():
    return _script("bench_vcontention")


@pytest.fixture(scope="module")
def be():
    return _script("bench_eventsim")


@pytest.fixture(scope="module")
def pg():
    return _script("profile_vcontention_gpu")


def _one_error(capsys) -> str:
    """The single stderr line of the call (ignoring JAX's warnings)."""
    lines = [x for x in capsys.readouterr().err.strip().splitlines()
             if "warn" not in x.lower()]
    assert len(lines) == 1, lines
    return lines[0]


# --- the shared checks ------------------------------------------------------------------------

def test_out_file(tmp_path):
    assert out_file(tmp_path / "a.json", "--out") == tmp_path / "a.json"
    with pytest.raises(ValueError, match=r"^--out must be a file path, got an empty string"):
        out_file("", "--out")
    for bad in (None, 3):
        with pytest.raises(ValueError, match=rf"^--out must be a file path, got {bad}"):
            out_file(bad, "--out")
    with pytest.raises(ValueError, match=r"^--out: .* is a directory"):
        out_file(tmp_path, "--out")
    with pytest.raises(ValueError, match=r"^--out: directory .* does not exist"):
        out_file(tmp_path / "missing" / "a.json", "--out")


def test_out_dir(tmp_path):
    assert out_dir(tmp_path, "--out") == tmp_path
    assert out_dir(tmp_path / "new" / "deeper", "--out") == tmp_path / "new" / "deeper"
    assert not (tmp_path / "new").exists()  # checked, never created
    f = tmp_path / "f"
    f.write_text("")
    with pytest.raises(ValueError, match=r"^--out must be a folder path, got an empty string"):
        out_dir("", "--out")
    with pytest.raises(ValueError, match=r"^--out must be a folder path, got None"):
        out_dir(None, "--out")
    with pytest.raises(ValueError, match=r"^--out: .* is a file, give a folder path"):
        out_dir(f, "--out")
    with pytest.raises(ValueError, match=r"^--out: .* cannot be created: .* is a file"):
        out_dir(f / "sub", "--out")


# --- experiments/bench_vcontention.py ---------------------------------------------------------

SMALL = ["--structures", "4x3", "--scans", "window", "--allocs", "8", "--chunks", "8"]


def _bv_args(tmp_path, *over: str) -> list[str]:
    """SMALL with the options in ``over`` replacing theirs, writing to tmp_path."""
    args = dict(zip(SMALL[::2], SMALL[1::2]))
    args.update(zip(over[::2], over[1::2]))
    args.setdefault("--out", str(tmp_path / "b.json"))
    return [x for kv in args.items() for x in kv]


@pytest.mark.parametrize("over, msg", [
    (("--chunks", "16"), "error: --chunks: 16 larger than --allocs 8, the allocations per row: "
                         "give chunks <= 8"),
    (("--chunks", "4,16"), "error: --chunks: 16 larger than --allocs 8"),
    (("--chunks", "4,4"), "error: --chunks: '4,4' repeats a value"),
    (("--allocs", "1", "--chunks", "1,2"), "error: --chunks: 2 larger than --allocs 1"),
])
def test_bench_vcontention_chunks(bv, tmp_path, capsys, over, msg):
    """A chunk larger than the allocations per row (every row of it would be skipped: an empty
    table, exit 0) or a repeated chunk: refused at argument time; nothing written."""
    assert bv.main(_bv_args(tmp_path, *over)) == 2
    assert _one_error(capsys).startswith(msg)
    assert not (tmp_path / "b.json").exists()


def test_bench_vcontention_default_chunks_vs_allocs(bv, tmp_path, capsys):
    """--allocs 1 with the default chunks (64,256 on the CPU) used to write an empty table over
    the committed results (no --out): refused, naming the default."""
    args = ["--structures", "4x3", "--scans", "window", "--allocs", "1",
            "--out", str(tmp_path / "b.json")]
    assert bv.main(args) == 2
    assert _one_error(capsys).startswith("error: --chunks (default): 64,256 larger than "
                                         "--allocs 1")


@pytest.mark.parametrize("structure, reason", [
    ("3x2", "microbatches=3 must divide"), ("2x1", "D = 1 is the temporal baseline"),
    ("2x500", "no way to split 148 SMs into 500 pools")])
def test_bench_vcontention_structures(bv, tmp_path, capsys, structure, reason):
    """A structure the model refuses: one line ``error: --structures: MxD: reason`` before any
    timing (it used to raise the model's ValueError as a traceback)."""
    assert bv.main(_bv_args(tmp_path, "--structures", f"4x3,{structure}")) == 2
    err = _one_error(capsys)
    assert err.startswith(f"error: --structures: {structure}: ") and reason in err
    assert not (tmp_path / "b.json").exists()


@pytest.mark.parametrize("scans", [",", "window,,batched", " "])
def test_bench_vcontention_empty_scans(bv, tmp_path, capsys, scans):
    assert bv.main(_bv_args(tmp_path, "--scans", scans)) == 2
    assert _one_error(capsys) == (f"error: --scans: {scans!r} has empty entries; give a list "
                                  "like window,batched (kernels: window, levels, straight, "
                                  "batched)")


@pytest.mark.parametrize("where, msg", [
    ("dir", "is a directory, give a file path"), ("missing", "does not exist"),
    ("empty", "must be a file path, got an empty string")])
def test_bench_vcontention_out(bv, tmp_path, capsys, where, msg):
    """--out a folder, in a missing folder or empty: refused before the run."""
    out = {"dir": str(tmp_path), "missing": str(tmp_path / "no" / "b.json"), "empty": ""}[where]
    assert bv.main(_bv_args(tmp_path, "--out", out)) == 2
    err = _one_error(capsys)
    assert err.startswith("error: --out") and msg in err


# --- experiments/bench_eventsim.py ------------------------------------------------------------

@pytest.mark.parametrize("where, msg", [
    ("dir", "is a directory, give a file path"), ("missing", "does not exist"),
    ("empty", "must be a file path, got an empty string")])
def test_bench_eventsim_out(be, tmp_path, capsys, where, msg):
    out = {"dir": str(tmp_path), "missing": str(tmp_path / "no" / "e.json"), "empty": ""}[where]
    assert be.main(["--repeats", "1", "--out", out]) == 2
    err = _one_error(capsys)
    assert err.startswith("error: --out") and msg in err


@pytest.mark.parametrize("rev, msg", [
    ("", "error: --baseline must be a git revision or 'none', got an empty string"),
    ("--output=x.tar", "error: --baseline must be a git revision or 'none', got "
                       "'--output=x.tar' (a revision never starts with '-')"),
    ("-h", "error: --baseline must be a git revision or 'none', got '-h'"),
    ("no-such-rev-123", "error: --baseline no-such-rev-123: git archive failed (fatal: ")])
def test_bench_eventsim_bad_baseline(be, tmp_path, capsys, rev, msg):
    """An empty --baseline no longer means none; one starting with '-' never reaches git as
    an option; a revision git does not know: git's own message, one line."""
    assert be.main(["--repeats", "1", f"--baseline={rev}", "--out",
                    str(tmp_path / "e.json")]) == 2
    assert _one_error(capsys).startswith(msg)
    assert not (tmp_path / "e.json").exists() and not (ROOT / "x.tar").exists()


@pytest.mark.parametrize("when", ["at import", "at the first case"])
def test_bench_eventsim_baseline_child_fails(be, tmp_path, capsys, monkeypatch, when):
    """A baseline child that crashes (here: its package lacks a module, at import or when it
    builds the first case) ends the call with one line ``--baseline REV: ...`` naming the
    child's error, exit 2 (it used to print the child's and the parent's tracebacks)."""
    pkg_line = 'print(json.dumps({{"package": subgpu_jax.__file__}}), flush=True)\n'
    boom = "import subgpu_jax.no_such_module\n"
    worker = ("import json, sys\nsys.path.insert(0, {exp!r})\nimport subgpu_jax\n"
              + (boom + pkg_line if when == "at import" else pkg_line + "sys.stdin.readline()\n"
                 + boom))
    monkeypatch.setattr(be, "_WORKER", worker)
    assert be.main(["--repeats", "1", "--baseline", "HEAD", "--out",
                    str(tmp_path / "e.json")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: --baseline HEAD: the baseline child failed: ModuleNotFoundError: No module "
        "named 'subgpu_jax.no_such_module'"]
    assert not (tmp_path / "e.json").exists()


# --- experiments/profile_vcontention_gpu.py ---------------------------------------------------

@pytest.mark.parametrize("where, msg", [
    ("file", "is a file, give a folder path"), ("under_file", "cannot be created"),
    ("empty", "must be a folder path, got an empty string")])
def test_profile_gpu_out(pg, tmp_path, capsys, where, msg):
    """--out must be a folder or creatable as one; checked before torch, JAX and the GPU."""
    f = tmp_path / "f"
    f.write_text("")
    out = {"file": str(f), "under_file": str(f / "sub"), "empty": ""}[where]
    assert pg.main(["--out", out]) == 2
    err = _one_error(capsys)
    assert err.startswith("error: --out") and msg in err


@pytest.mark.parametrize("arg", ["--chunk", "--block", "--level-unroll", "--repeats"])
def test_profile_gpu_counts(pg, tmp_path, capsys, arg):
    assert pg.main(["--out", str(tmp_path / "o"), arg, "0"]) == 2
    assert _one_error(capsys) == f"error: {arg} must be >= 1, got 0"


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed")
def test_profile_gpu_without_torch(pg, tmp_path, capsys):
    """Without torch: one line saying so, exit 2 (not an ImportError traceback after the GPU
    check); --out is not created."""
    assert pg.main(["--out", str(tmp_path / "o")]) == 2
    assert _one_error(capsys).startswith("error: needs torch")
    assert not (tmp_path / "o").exists()


def _records_csv(folder: Path, rows: list[dict]) -> None:
    """A results folder's records.csv of hand-made records."""
    import csv

    folder.mkdir()
    with open(folder / "records.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=sorted(rows[0]))
        w.writeheader()
        w.writerows(rows)


def test_bench_screened_compare_hand_made(tmp_path, capsys):
    """``bench_screened.py --compare`` on hand-made records: three SubGPU points whose screened
    makespans are 0%, +1% and -2% off the event search's (median 0, max +1%, one over 0.5%),
    the screen's own error 3% on one, and a frontier (higher per-user and per-GPU throughput
    wins) that loses its slowest point: hand-derived figures."""
    import json

    bs = _script("bench_screened")

    def rec(key, us, pu, pg, **kw):
        return {"grid_key": key, "mode": "subgpu", "region_makespan_us": us, "cuts": "L1.attn",
                "sms": "64|84", "per_user_tok_s": pu, "per_gpu_tok_s": pg, "exact_calls": 10,
                "confirm_calls": 3, "screen_region_us": kw.get("screen", us)}

    ev = [rec("a", 100.0, 10.0, 1.0), rec("b", 200.0, 5.0, 2.0), rec("c", 300.0, 1.0, 1.5)]
    sc = [rec("a", 100.0, 10.0, 1.0, screen=103.0), rec("b", 202.0, 5.0, 2.0),
          rec("c", 294.0, 1.0, 1.5)]
    sc[2]["sms"] = "32|116"
    _records_csv(tmp_path / "ev", ev)
    _records_csv(tmp_path / "sc", sc)
    out = tmp_path / "cmp.json"
    assert bs.main(["--compare", str(tmp_path / "ev"), str(tmp_path / "sc"),
                    "--out", str(out)]) == 0
    g = json.loads(out.read_text())["agreement"]
    assert g["points"] == 3 and g["makespan_vs_event_median"] == pytest.approx(0.0)
    assert g["makespan_vs_event_max"] == pytest.approx(0.01)
    assert g["makespan_vs_event_min"] == pytest.approx(-0.02)
    assert g["points_over_tol"] == 1 and g["same_choice"] == 2
    assert g["screen_abs_error_max"] == pytest.approx(0.03)
    assert g["event_calls_event_search"] == 30 and g["event_calls_screened"] == 9
    # frontier: a (10, 1) and b (5, 2) are nondominated; c (1, 1.5) is dominated by b
    assert g["frontier_event"] == g["frontier_common"] == 2 and g["frontier_same_points"]
    with pytest.raises(SystemExit):
        bs.main(["--compare", str(tmp_path / "nope"), str(tmp_path / "sc"), "--out", str(out)])
    assert "holds no records.csv" in capsys.readouterr().err


def test_h100_gemm_fit_reproduces_its_digest():
    """experiments/h100_gemm_fit.py: the GEMM samples of the committed H100 calibration (4 GEMMs
    x 7 pools x m = 1, 2 = 56) and the committed fit of ``gemm_scale_loss`` on them (refitted
    here: the same least squares, so the same value to 1e-6), larger than the H200's 0.2424
    (``hardware.ANALYTIC_CONSTANTS["analytic-v3"]``): the H100's GEMMs lose more per SM as the
    pool grows."""
    import json

    from subgpu_jax.model.graph import StaticDurationModel
    from subgpu_jax.model.hardware import get_hardware
    from subgpu_jax.model.kernelcost import fit_analytic

    hf = _script("h100_gemm_fit")
    S = hf.gemm_samples()
    assert len(S) == 56
    hw = get_hardware("H100")
    got = fit_analytic(S, hw, StaticDurationModel, grids=(hw.gemm_grid_ctas,),
                       params=hf.FITS["scale_loss"])["params"]["gemm_scale_loss"]
    with open(ROOT / "experiments" / "results" / "h100_gemm_fit.json") as fh:
        d = json.load(fh)
    assert got == pytest.approx(d["fits"]["scale_loss"]["params"]["gemm_scale_loss"], abs=1e-6)
    assert got > hw.gemm_scale_loss == 0.2424
    assert d["temporal_check"]["reproduced_max_rel"] < 1e-9


@pytest.mark.parametrize("argv, flag", [
    (["--seed", "-1"], "--seed"), (["--random", "-1"], "--random"),
    (["--out", "/dev/null"], "--out"), (["--models", "nope"], "--models")])
def test_vc_mechanisms_refuses_bad_args(argv, flag, capsys):
    with pytest.raises(SystemExit) as e:
        _script("vc_mechanisms").main(argv)
    assert e.value.code == 2 and flag in capsys.readouterr().err


@pytest.mark.parametrize("argv, flag", [
    (["--hardware", "B200"], "--hardware"), (["--digest", ""], "--digest"),
    (["--data", ""], "--data"), (["--digest", "/dev/null"], "--digest"),
    (["--hardware", "h100", "--workloads", "llama8b_1gpu_g256_kv2k"], "--workloads")])
def test_temporal_traces_analyze_refuses_bad_args(argv, flag, capsys):
    """The analyze phase refuses before reading anything (the committed digest is never the
    fallback of an empty --digest)."""
    with pytest.raises(SystemExit) as e:
        _script("temporal_traces_h200").main(["--phase", "analyze", *argv])
    assert e.value.code == 2 and flag in capsys.readouterr().err


def test_temporal_traces_broken_trace_is_one_line(tmp_path, capsys):
    (tmp_path / "trace_llama8b_1gpu_g256_kv2k.json").write_text('{"span_us": 0, "ops": {}}')
    rc = _script("temporal_traces_h200").main(["--phase", "analyze", "--data", str(tmp_path),
                                               "--digest", str(tmp_path / "d.json")])
    err = capsys.readouterr().err
    assert rc == 2 and "trace_llama8b_1gpu_g256_kv2k.json" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "d.json").exists()


@pytest.mark.parametrize("body, needle", [(None, "not a readable"), ("{bad", "not a readable"),
                                          ('{"mode": "subgpu", "model": "llama-3.1-8b"}\n',
                                           "default workload")])
def test_eventsim_order_sharing_refuses_bad_records(tmp_path, capsys, body, needle):
    path = tmp_path / "records.jsonl"
    if body is not None:
        path.write_text(body)
    with pytest.raises(SystemExit) as e:
        _script("eventsim_order_sharing").main(["--records", str(path),
                                                "--out", str(tmp_path / "o.json")])
    assert e.value.code == 2 and needle in capsys.readouterr().err


def test_batched_proto_refuses_malformed_records_and_huge_batches(tmp_path, capsys):
    """A SubGPU record of the default workload missing a field, or with a word for a number,
    is one line naming --records before any work (it was a KeyError traceback); --scale is
    bounded (10**11 rows ran until memory ran out)."""
    import json

    good = {"mode": "subgpu", "model": "gpt-oss-120b", "hardware": "B200", "grid_key": "k"}
    path = tmp_path / "records.jsonl"
    path.write_text(json.dumps(good) + "\n")
    with pytest.raises(SystemExit) as e:
        _script("batched_eventsim_proto").main(["--records", str(path), "--scale", "16",
                                                "--out", str(tmp_path / "o.json")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "--records: SubGPU record 1 of" in err
    with pytest.raises(SystemExit) as e:
        _script("batched_eventsim_proto").main(["--records", str(path), "--scale", "10**11",
                                                "--out", str(tmp_path / "o.json")])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        _script("batched_eventsim_proto").main(["--records", str(path), "--scale",
                                                "100000000000", "--out", str(tmp_path / "o.json")])
    assert e.value.code == 2 and "from 16 to 1,048,576" in capsys.readouterr().err


@pytest.mark.parametrize("args, needle", [
    (["--out", ""], "--out"), (["--per-family", "100"], "from 2 to 20"),
    (["--workers", "0"], "from 1 to 1,024"), (["--compile-cache", " "], "'none' to turn"),
])
def test_frontier_cost_checks_its_flags_before_the_measurement(tmp_path, capsys, args, needle):
    """frontier_cost.py measures for 15+ minutes: every flag, --out and --compile-cache
    included, is checked first (a bad --out was found only at the end)."""
    full = ["--out", str(tmp_path / "o.json"), "--compile-cache", str(tmp_path / "c")] + args
    with pytest.raises(SystemExit) as e:
        _script("frontier_cost").main(full)
    assert e.value.code == 2 and needle in capsys.readouterr().err
