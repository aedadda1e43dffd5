"""Calibration edges: times outside the measured pools are extrapolated with the analytical
model scaled to the nearest measurement (with one warning), and ``coruns`` may be absent."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from subgpu_jax.model.calibration import (FORMAT, Calibration, CalibrationExtrapolationWarning,
                                          kernel_key)
from subgpu_jax.model.graph import Deployment, StaticDurationModel, build_graph
from subgpu_jax.model.hardware import get_hardware
from subgpu_jax.model.models import get_model

H200 = get_hardware("H200")
DEP = Deployment(num_gpus=8, attn_tp=8, attn_dp=1, moe_ep=8, global_batch=64,
                 kv_history=4096)


def _graph():
    import dataclasses
    return build_graph(dataclasses.replace(get_model("gpt-oss-20b"), expert_dtype="bf16"), DEP)


def _cal_dict(with_coruns: bool = True) -> dict:
    """Every kernel of the region measured at 16, 64 and 132 SMs as 2x the analytical time."""
    g = _graph()
    sd = StaticDurationModel(H200)
    ks = {}
    for k in g.kernels:
        ks[kernel_key(k)] = {"key": kernel_key(k), "name": k.name,
                             "times_us": {str(p): 2.0 * float(np.ravel(sd.kernel_time_us(k, p))[0])
                                          for p in (16, 64, 132)}}
    d = {"format": FORMAT, "model": "gpt-oss-20b", "hardware": "H200", "num_sms": 132,
         "expert_dtype": "bf16",
         "deployment": {f: getattr(DEP, f) for f in ("num_gpus", "attn_tp", "attn_dp", "moe_ep",
                                                     "input_len", "kv_history")},
         "global_batches": [64], "kernels": list(ks.values()),
         "bw_curve": {"sms": [8, 16, 32, 64, 96, 128, 132],
                      "copy_GBps": [645.0, 1200.0, 2222.0, 3610.0, 3917.0, 4230.0, 4245.0]}}
    if with_coruns:
        d["coruns"] = []
    return d


def test_coruns_key_may_be_absent():
    """The format says ``coruns`` may be absent: such a file loads, with no co-runs."""
    cal = Calibration.from_dict(_cal_dict(with_coruns=False))
    assert cal.coruns == ()
    with pytest.raises(ValueError, match="coruns must be a list"):
        Calibration.from_dict(dict(_cal_dict(), coruns="x"))


def test_small_pool_is_extrapolated_not_clamped_and_warns_once():
    """Fault: a stage smaller than the smallest calibrated pool got that pool's time (clamped).
    Now t(8) = t_meas(16) * t_model(8) / t_model(16), t_model the analytical model on the
    calibrated hardware; for a memory-bound kernel on fewer SMs this is slower than t_meas(16).
    One CalibrationExtrapolationWarning per calibration; inside the grid, no warning."""
    cal = Calibration.from_dict(_cal_dict())
    k = _graph().kernels[_graph().index("L0.rmsnorm")]
    model = StaticDurationModel(cal.apply_to_hardware(H200))
    t16 = cal.tables[kernel_key(k)][1][0]
    expect = t16 * float(np.ravel(model.kernel_time_us(k, 8))[0]) / \
        float(np.ravel(model.kernel_time_us(k, 16))[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cal.kernel_time_us(k, 64) == pytest.approx(cal.tables[kernel_key(k)][1][1])
    with pytest.warns(CalibrationExtrapolationWarning, match="outside the measured pools"):
        t8 = cal.kernel_time_us(k, 8)
    assert t8 == pytest.approx(expect, rel=1e-12)
    assert t8 != pytest.approx(t16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once: no second warning
        assert cal.kernel_time_us(k, 4) > 0
