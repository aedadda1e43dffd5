"""Hardware presets against the H200 calibration and the datasheet figures of docs/method.md §5."""

from __future__ import annotations

import csv
import dataclasses

import numpy as np
import pytest
from hypothesis import given, strategies as st

from subgpu_jax.model.hardware import (DTYPE_BYTES, H200_COPY_BW_GBPS, HARDWARE, Hardware,
    get_hardware)


def _read_csv(path):
    with open(path, encoding="utf-8") as fh:
        rows = [r for r in fh if r.strip() and not r.lstrip().startswith("#")]
    return list(csv.DictReader(rows))


# ---------------------------------------------------------------------------- calibration
def test_h200_copy_bandwidth_table_equals_calibration_csv(calibration_dir):
    rows = _read_csv(calibration_dir / "h200_copy_bandwidth_vs_pool.csv")
    measured = {int(r["pool_sms"]): float(r["copy_GBps"]) for r in rows}
    assert len(measured) == 17
    assert dict(H200_COPY_BW_GBPS) == measured


def test_h200_whole_gpu_copy_matches_calibration(calibration_dir):
    rows = _read_csv(calibration_dir / "h200_copy_bandwidth_vs_pool.csv")
    whole = [float(r["copy_GBps"]) for r in rows if int(r["pool_sms"]) == 132]
    assert get_hardware("H200").hbm_copy_Bps == pytest.approx(whole[0] * 1e9, rel=0, abs=1.0)


def test_h200_attention_read_bandwidth_matches_calibration(calibration_dir):
    rows = _read_csv(calibration_dir / "h200_decode_kernels.csv")
    gqa = [r for r in rows if r["variant"] == "sdpa_enable_gqa"]
    assert gqa, "the decode-attention row of the calibration is missing"
    assert get_hardware("H200").hbm_read_Bps == pytest.approx(float(gqa[0]["GBps"]) * 1e9)


def test_h200_preset_values():
    hw = get_hardware("H200")
    assert hw.num_sms == 132
    assert hw.sm_quantum == 8
    assert hw.min_pool_sms == 8
    assert hw.sm_budget == 128  # 16 x 8 splittable SMs (calibration README)
    assert hw.hbm_copy_Bps == 4245e9
    assert hw.l2_bytes == 60 * 2**20
    assert hw.nvlink_Bps == 450e9
    assert hw.hbm_peak_Bps == 4.8e12
    assert hw.tensor_flops["bf16"] == 989e12
    # 8192^3 bf16 mm: 1.0995e12 FLOP in 1.3715 ms = 801.7 TFLOP/s (measured)
    assert hw.flops_rate("bf16") == pytest.approx(801.7e12, rel=1e-9)


def test_b200_and_h100_presets_follow_design_table():
    b, h = get_hardware("B200"), get_hardware("H100")
    assert (b.num_sms, b.sm_quantum, b.min_pool_sms, b.sm_budget) == (148, 2, 2, 148)
    assert b.l2_bytes == 126.5e6 and b.nvlink_Bps == 900e9
    assert (b.tensor_flops["bf16"], b.tensor_flops["fp8"], b.tensor_flops["fp4"]) == (
        2.25e15, 4.5e15, 9e15)
    assert (h.num_sms, h.sm_quantum, h.hbm_peak_Bps, h.l2_bytes) == (132, 8, 3.35e12, 50e6)


def test_b200_bandwidth_ceilings_below_its_theoretical_peak():
    """Issue 41: a B200 reports a 7,680-bit bus at 3,996 MHz (pytorch/ao pull 4002), so its
    theoretical peak is 7680 / 8 x 3.996e9 x 2 = 7.672e12 B/s, not the datasheet's 8 TB/s; the
    read ceiling, the H200's 4614/4800 of it, is 7.3747e12 (it was 7.69e12 of the 8 TB/s,
    above what the bus can carry), the copy 4245/4800 of it 6.7849e12."""
    b = get_hardware("B200")
    assert b.hbm_peak_Bps == pytest.approx(7680 / 8 * 3.996e9 * 2, rel=1e-4)
    assert b.hbm_read_Bps == pytest.approx(7.3747e12, rel=1e-4)
    assert b.hbm_read_Bps < b.hbm_peak_Bps
    assert b.hbm_copy_Bps == pytest.approx(6.7849e12, rel=1e-4)
    for name in ("H100", "H200", "B200"):
        h = get_hardware(name)
        assert h.hbm_copy_Bps < h.hbm_read_Bps < h.hbm_peak_Bps


@pytest.mark.parametrize("sms, expected", [(16, 1200 / 4245), (64, 3610 / 4245),
                                           (132, 1.0), (8, 645 / 4245)])
def test_h200_bw_fraction_at_measured_knots(sms, expected):
    assert float(get_hardware("H200").bw_fraction(sms)) == pytest.approx(expected, rel=1e-12)


def test_h200_bw_fraction_is_nonlinear():
    hw = get_hardware("H200")
    f16, f64 = float(hw.bw_fraction(16)), float(hw.bw_fraction(64))
    assert f16 == pytest.approx(0.28, abs=0.01)
    assert f64 == pytest.approx(0.85, abs=0.01)
    # a linear share would give 16/132 = 0.12 and 64/132 = 0.48
    assert f16 > 2 * 16 / 132 and f64 > 1.5 * 64 / 132
    assert float(hw.bw_fraction(0)) == 0.0


def test_h200_mem_bandwidth_values():
    hw = get_hardware("H200")
    assert float(hw.mem_bandwidth(132, read_only=False)) == pytest.approx(4245e9)
    assert float(hw.mem_bandwidth(132, read_only=True)) == pytest.approx(4614e9)
    assert float(hw.mem_bandwidth(64, read_only=False)) == pytest.approx(3610e9)
    arr = hw.mem_bandwidth(np.array([[16, 64], [8, 132]]))
    assert arr.shape == (2, 2)


@pytest.mark.parametrize("name", sorted(HARDWARE))
@given(a=st.floats(0, 200), b=st.floats(0, 200))
def test_mem_bandwidth_monotone_in_sms(name, a, b):
    hw = get_hardware(name)
    lo, hi = min(a, b), max(a, b)
    for ro in (True, False):
        assert float(hw.mem_bandwidth(lo, ro)) <= float(hw.mem_bandwidth(hi, ro))
    assert 0.0 <= float(hw.bw_fraction(hi)) <= 1.0


@pytest.mark.parametrize("name", sorted(HARDWARE))
def test_mem_bandwidth_monotone_on_every_sm_count(name):
    hw = get_hardware(name)
    bw = hw.mem_bandwidth(np.arange(0, hw.num_sms + 1))
    assert np.all(np.diff(bw) >= 0)
    assert bw[-1] == pytest.approx(hw.hbm_read_Bps)


def test_compute_dtype_mapping():
    h200, b200 = get_hardware("H200"), get_hardware("B200")
    assert h200.compute_dtype("mxfp4") == "bf16"  # Hopper has no FP4 tensor cores
    assert b200.compute_dtype("mxfp4") == "fp4"
    assert h200.compute_dtype("fp8") == "fp8"
    assert h200.compute_dtype("fp32") == "bf16"
    assert b200.flops_rate("mxfp4") == pytest.approx(9e15 * 801.7 / 989.0)
    assert DTYPE_BYTES["mxfp4"] == pytest.approx(4.25 / 8)


def test_get_hardware_case_insensitive():
    assert get_hardware("h200") is get_hardware("H200")


# ---------------------------------------------------------------------------- bad input
def test_unknown_hardware_raises_naming_field():
    with pytest.raises(ValueError, match="hardware must be one of"):
        get_hardware("A100")


def test_unknown_dtype_raises():
    with pytest.raises(ValueError, match="dtype"):
        get_hardware("H200").compute_dtype("int4")


@pytest.mark.parametrize("field, value", [("num_sms", 0), ("sm_quantum", -8),
                                          ("hbm_copy_Bps", float("nan")), ("launch_us", 0.0),
                                          ("comm_setup_us", -1.0), ("sm_budget", 136)])
def test_hardware_rejects_bad_fields(field, value):
    with pytest.raises(ValueError, match=f"hardware.{field}"):
        dataclasses.replace(get_hardware("H200"), **{field: value})


def test_hardware_rejects_decreasing_curve():
    with pytest.raises(ValueError, match="bw_curve"):
        dataclasses.replace(get_hardware("H200"), bw_curve_x=(0.0, 0.5, 1.0),
                            bw_curve_y=(0.0, 0.9, 0.8))


def test_hardware_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        get_hardware("H200").num_sms = 1  # type: ignore[misc]
    assert isinstance(get_hardware("H200"), Hardware)


def test_runtime_and_measured_gpus():
    """Which presets the GPU runtime measures on and which were measured are fields, not name
    checks: the two Hopper GPUs (green contexts probed, verdict protocol run on both), not the
    B200 (no B200 measurement exists); a hand-built ``Hardware`` is neither, and the fields
    take only booleans."""
    import dataclasses

    from subgpu_jax.model.hardware import HARDWARE

    assert {n for n, h in HARDWARE.items() if h.runtime} == {"H200", "H100"}
    assert {n for n, h in HARDWARE.items() if h.measured} == {"H200", "H100"}
    assert get_hardware("H200:analytic-v2").runtime   # a model version keeps them
    h = get_hardware("H200")
    base = {f.name: getattr(h, f.name) for f in dataclasses.fields(h)
            if f.name not in ("runtime", "measured")}
    hand = type(h)(**base)
    assert (hand.runtime, hand.measured) == (False, False)
    with pytest.raises(ValueError, match="hardware.runtime must be True or False"):
        dataclasses.replace(h, runtime=1)
