"""Issue 41 item 7: extreme numbers answer with one line naming the flag and the allowed range
(exit 2), never a traceback, a stalled simulation or a non-finite result.

Before issue 41: ``--scaleout-gbps 1e-300 --topology hgx8`` raised "simulation stalled" on
``simulate`` and gave 9.95e303 µs makespans on ``search`` (exit 0); ``lognormal:inf:1`` and
``lognormal:5:1e308`` raised OverflowError; ``lognormal:nan:1`` and ``uniform:1:1e30`` printed
numpy's words ("cannot convert float NaN to integer", "high is out of bounds for int64");
``--stages 2,,3`` was read as 2,3 and full-width digits ('２') as ASCII ones.

Oracles: the exact error lines; the boundary values themselves are accepted (and give finite
numbers).
"""

from __future__ import annotations

import json
import math

import pytest

from subgpu_jax.app.cli import main
from subgpu_jax.app.options import kv_lengths_from
from subgpu_jax.model.checks import ascii_float, ascii_int

SIM = ["simulate", "--model", "llama-3.1-8b", "--gpus", "1", "--batch", "64",
       "--kv-history", "1024", "--simulator", "static"]
LOGN = ("error: --kv-lengths: lognormal:MEDIAN:SIGMA needs 1 <= MEDIAN <= 16,777,216 tokens and "
        "0 <= SIGMA <= 4, got ")
UNIF = "error: --kv-lengths: uniform:LO:HI needs integers 1 <= LO <= HI <= 16,777,216 (tokens), got "


def _run(args, capsys):
    try:
        rc = main(args)
    except SystemExit as e:  # argparse's own errors (OneLineParser.error): one line, exit 2
        rc = e.code
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("args, line", [
    (["--scaleout-gbps", "1e-300", "--topology", "hgx8"],
     "error: --scaleout-gbps must be >= 0.01, got 1e-300"),
    (["--scaleout-gbps", "1e300"], "error: --scaleout-gbps must be <= 100000.0, got 1e+300"),
    (["--kv-lengths", "lognormal:inf:1"], LOGN + "'lognormal:inf:1'"),
    (["--kv-lengths", "lognormal:5:1e308"], LOGN + "'lognormal:5:1e308'"),
    (["--kv-lengths", "lognormal:nan:1"], LOGN + "'lognormal:nan:1'"),
    (["--kv-lengths", "uniform:1:1e30"], UNIF + "'uniform:1:1e30'"),
    (["--kv-lengths", "uniform:1.5:3"], UNIF + "'uniform:1.5:3'"),
    (["--kv-lengths", "uniform:1:2:3"],
     "error: --kv-lengths: uniform needs two numbers, uniform:LO:HI, got 'uniform:1:2:3'"),
    (["--batch", "２"], "error: subgpu simulate: argument --batch: must be an integer written "
                        "with the digits 0-9, got '２' (see --help)"),
    (["--scaleout-gbps", "５0"], "error: subgpu simulate: argument --scaleout-gbps: must be a "
                                "number written with the digits 0-9, '.', 'e', got '５0' (see "
                                "--help)"),
    # the audit of issue 41: an out-of-range split said "allocation: ...", naming no flag
    (["--sms", "0,148"], "error: --sms 0,148: stage 0 has 0 SMs, below the minimum 2 of B200"),
    (["--sms", "200,200"],
     "error: --sms 200,200: SMs sum to 400, must equal the B200 budget 148"),
])
def test_simulate_extremes_one_line(args, line, capsys):
    rc, out, err = _run(SIM + args, capsys)
    assert rc == 2 and out == ""
    assert err.splitlines() == [line]


@pytest.mark.parametrize("args, line", [
    (["--stages", "2,,3"], "error: --stages must be a comma-separated list of integers "
                           "(digits 0-9), got '2,,3'"),
    (["--batches", "６４"], "error: --batches must be a comma-separated list of integers "
                           "(digits 0-9), got '６４'"),
    (["--scaleout-gbps", "1e-300"], "error: --scaleout-gbps must be >= 0.01, got 1e-300"),
    # a breaker's finds: huge or repeated strategy options ran (10**12 relax steps crashed
    # allocating 7 TiB after the folder was made) or let the last one win silently
    (["--alloc-strategy", "relax", "--alloc-options", "steps=1000000000000"],
     "error: --alloc-options: steps is an integer of at most 1,000,000, got 1000000000000"),
    (["--cut-strategy", "local_search", "--cut-options", "starts=2,starts=5"],
     "error: --cut-options: starts given twice; give each option once"),
])
def test_search_extremes_one_line(args, line, capsys, tmp_path):
    rc, out, err = _run(["search", "--out", str(tmp_path / "o")] + args, capsys)
    assert rc == 2 and err.splitlines() == [line]
    assert not (tmp_path / "o").exists()


def test_lowest_scaleout_gives_finite_numbers(capsys):
    """The bound itself, 0.01 GB/s over an 8-GPU NVLink domain of a 32-GPU GPT-OSS 120B
    deployment (the default model): finite makespans and throughputs."""
    rc, out, err = _run(["simulate", "--simulator", "static", "--topology", "hgx8",
                         "--scaleout-gbps", "0.01", "--json"], capsys)
    assert rc == 0, err
    d = json.loads(out)
    nums = [v for k in ("temporal", "config") for v in d[k].values()
            if isinstance(v, (int, float)) and not isinstance(v, bool)]
    assert nums and all(math.isfinite(v) for v in nums)


def test_lognormal_is_truncated_to_the_token_limit():
    """MEDIAN 16,777,216 and SIGMA 4: half the samples lie above the median, so without the
    truncation they would exceed the token limit; with it every sample is in 1..16,777,216."""
    x = kv_lengths_from("lognormal:16777216:4", 1000)
    assert len(x) == 1000 and min(x) >= 1 and max(x) == 16_777_216
    assert kv_lengths_from("uniform:7:7", 3) == (7, 7, 7)


def test_ascii_parsers():
    assert ascii_int("-12") == -12 and ascii_float("2e3") == 2000.0
    for bad in ("２", "1_000", " 3", "٣", ""):
        with pytest.raises(ValueError, match="digits 0-9"):
            ascii_int(bad)
    for bad in ("５", "1_0", "x"):
        with pytest.raises(ValueError, match="digits 0-9"):
            ascii_float(bad)


@pytest.mark.parametrize("args, line", [
    (["--max-rounds", "99999999999"],
     "error: --max-rounds must be an integer in 1..10,000, got 99999999999"),
    (["--refine-passes", "0"], "error: --refine-passes must be an integer in 1..10,000, got 0"),
    (["--budget-s", "1e308"], "error: --budget-s must be <= 2592000.0, got 1e+308"),
])
def test_tune_bounds_before_the_gpu_check(args, line, capsys, tmp_path):
    """``subgpu tune``'s own counts are bounded at the edge too (they reached the GPU check
    before: on this GPU-less machine the answer was "cannot run configurations on a GPU")."""
    rc, out, err = _run(["tune", "--out", str(tmp_path / "t")] + args, capsys)
    assert rc == 2 and err.splitlines() == [line]


def test_search_refuses_a_blank_out(capsys, tmp_path, monkeypatch):
    """``--out ' '`` made a results folder named by a blank in the working folder (a breaker's
    find); a blank path is refused like an empty one."""
    monkeypatch.chdir(tmp_path)
    rc, out, err = _run(["search", "--out", " "], capsys)
    assert rc == 2 and err.splitlines() == ["error: --out must be a folder path, got only "
                                            "blanks (' ')"]
    assert list(tmp_path.iterdir()) == []
