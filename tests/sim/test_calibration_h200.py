"""The contention model reproduces the H200 green-context probe (tests/data):

* bf16 GEMM 8192^3 and a 2 GiB copy alone on pools of 16..132 SMs: within 10%;
* the GEMM on 64 SMs beside a copy on the other 68: slowdown within 10 percentage points of the
  measured ~25% (3.22 ms vs 2.57 ms).

The numbers are embedded (``sim.probe.H200_PROBE_MS``) and cross-checked against the CSV files
vendored in ``tests/data`` (provenance: ``tests/data/CALIBRATION.md``).
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from subgpu_jax.sim.probe import H200_CORUN_MS, H200_PROBE_MS, predict_probe
from subgpu_jax.sim.contention import ContentionModel
from subgpu_jax.model.hardware import get_hardware

H200 = get_hardware("H200")
CAL = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(scope="module")
def pred():
    return predict_probe(H200, ContentionModel(lone_static=False), cache="lru")


def test_embedded_numbers_match_csv():
    f = CAL / "h200_green_context_probe.csv"
    rows = [r for r in csv.reader(l for l in f.read_text().splitlines()
                                  if l and not l.startswith("#"))]
    hdr, body = rows[0], rows[1:]
    assert hdr[:4] == ["requested_sms", "granted_sms", "mm_ms", "copy_ms"]
    got = {int(r[1]): (float(r[2]), float(r[3])) for r in body}
    assert got == H200_PROBE_MS
    readme = (CAL / "CALIBRATION.md").read_text()
    assert "3.22 ms" in readme and "2.57 ms" in readme
    assert H200_CORUN_MS == (3.22, 2.57)


@pytest.mark.parametrize("sms", sorted(H200_PROBE_MS))
def test_alone_within_10_percent(pred, sms):
    row = pred["pools"][sms]
    assert abs(row["mm_err"]) <= 0.10, row
    assert abs(row["copy_err"]) <= 0.10, row


def test_corun_slowdown_within_10pp(pred):
    c = pred["corun"]
    assert abs(c["slowdown"] - c["measured_slowdown"]) <= 0.10, c
    assert c["slowdown"] > 0.05  # the effect exists in the model


def test_isolated_model_misses_the_corun_effect():
    """Scoring co-scheduled kernels by isolated times (the static model) shows no slowdown at
    all: the error the README warns about."""
    c = predict_probe(H200, ContentionModel.off(), cache="none")["corun"]
    assert abs(c["slowdown"]) < 1e-9
