"""The uncalibrated (analytical) kernel-cost terms (subgpu_jax/model/kernelcost.py).

Data: the committed H200 fit data (experiments/results/hw_fidelity/fitdata_*.json: isolated
kernel tables and the device activities each op issues, counted with torch.profiler) and the
event-latency probe (corun_matrix.json). The validation runs (validate_*.json) are never read here.
"""

from __future__ import annotations

import collections
import importlib.util
import json
import math
import os

import numpy as np
import pytest

from subgpu_jax.model.graph import Kernel, StaticDurationModel
from subgpu_jax.model.hardware import H200, Hardware, get_hardware
from subgpu_jax.model.kernelcost import (DEVICE_KERNELS, FIT_PARAMS, device_kernels, fit_analytic,
                                         is_gemm, op_cost)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIDELITY = os.path.join(ROOT, "experiments", "results", "hw_fidelity")


def _experiment():
    """The fidelity experiment module (its workload definitions and fit-data reader)."""
    spec = importlib.util.spec_from_file_location(
        "hw_fidelity_h200", os.path.join(ROOT, "experiments", "hw_fidelity_h200.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def exp():
    return _experiment()


def test_device_kernel_counts_match_the_measured_activity_counts(exp):
    """Every op's ``device_kernels`` equals the most frequent measured activity count over the
    5 workloads and m = 1, 2, 4; a cuBLAS GEMM or the attention op may differ by one kernel on
    some shapes (split-K reduction, split-KV combine), never more, and the other ops never differ."""
    seen: dict = collections.defaultdict(list)
    for w, f in exp.load_fitdata(FIDELITY, list(exp.WORKLOADS)).items():
        wl = exp.sim_workload(w)
        for m, counts in f["activity_counts"].items():
            g = wl.graph(int(m))
            assert len(counts) == g.n
            for k, c in zip(g.kernels, counts):
                seen[k].append(int(c))
    assert len(seen) >= 10
    by_op: dict = collections.defaultdict(list)
    for k, cs in seen.items():
        key = f"{k.op}/{k.category}" if f"{k.op}/{k.category}" in DEVICE_KERNELS else k.op
        by_op[key] += cs
        for c in cs:
            if is_gemm(k) or k.op == "attn":
                assert abs(c - device_kernels(k)) <= 1, (k.name, c)
            else:
                assert c == device_kernels(k), (k.name, c)
    for key, cs in by_op.items():
        assert collections.Counter(cs).most_common(1)[0][0] == DEVICE_KERNELS[key], (key, cs)
    assert {"rope_kv", "topk", "expert_up", "allreduce/out_residual"} <= set(by_op)


def test_launch_cost_is_the_committed_probe():
    """``H200.launch_us`` is the per-kernel time of 200 dependent empty kernels in one CUDA graph
    (corun_matrix.json, event_latency.per_kernel_us = 1.19904 µs), rounded to 1 ns."""
    with open(os.path.join(FIDELITY, "corun_matrix.json")) as fh:
        probe = json.load(fh)["event_latency"]["per_kernel_us"]
    assert H200.launch_us == pytest.approx(probe, abs=5e-4)


def test_fit_reproduces_the_h200_preset(exp):
    """Refitting on the committed isolated tables gives the preset's constants (to the 4 digits
    stored) and the grid T = 128; the fit's median |error| is the documented 15.5%."""
    samples = exp.analytic_samples(FIDELITY, list(exp.WORKLOADS))
    assert len(samples) == 976
    fit = fit_analytic(samples, H200, StaticDurationModel)
    assert fit["gemm_grid_ctas"] == H200.gemm_grid_ctas == 128
    for f in FIT_PARAMS:
        assert fit["params"][f] == pytest.approx(getattr(H200, f), rel=2e-3), f
    assert fit["median_abs_error"] == pytest.approx(0.155, abs=0.002)


def test_hand_derived_gemm_and_launch_bound_op(exp):
    """The two examples of the kernelcost module docstring.

    llama-3.1-70b MLP up (M=512, N=7168, K=8192) on 64 SMs: 2 waves of T=128, p_u = 64,
    compute 60.13e9 / (989e12 * 801.7/989 * 0.8899 * 64/132) = 173.8 µs (memory-bound time 33 µs
    is smaller) + 3*1.199 + 3*1.301 + 2*1.078 = 183.5 µs; 80 SMs is also 2 waves (same time);
    132 SMs: 1 wave, p_u = 128: 95.5 µs.
    gpt-oss-120b top-k at G=2048: 4*(1.199+1.301) + 34816 B / (4245e9 * y(0.51/132)) with
    y = (645/4245) * (0.51/132) / (8/132) (first knot of the copy curve) = 10.85 µs on every pool.
    """
    sd = StaticDurationModel(H200)
    up = next(k for k in exp.sim_workload("llama70b_tp8_g512").graph(1).kernels
              if k.op == "mlp_up")
    assert up.flops == 2.0 * 512 * 8192 * 7168
    rate = 989e12 * (801.7 / 989.0) * H200.decode_gemm_efficiency
    fixed = 3 * H200.launch_us + 3 * H200.min_kernel_us
    want64 = up.flops / (rate * 64 / 132) * 1e6 + fixed + 2 * H200.gemm_wave_us
    assert want64 == pytest.approx(183.5, abs=0.1)
    assert float(sd.kernel_time_us(up, 64)) == pytest.approx(want64, rel=1e-9)
    assert float(sd.kernel_time_us(up, 80)) == pytest.approx(want64, rel=1e-9)
    want132 = up.flops / (rate * 128 / 132) * 1e6 + fixed + H200.gemm_wave_us
    assert float(sd.kernel_time_us(up, 132)) == pytest.approx(want132, rel=1e-9)
    topk = next(k for k in exp.sim_workload("gptoss120b_ref_g2048").graph(1).kernels
                if k.op == "topk")
    x = H200.vector_inflight_ratio * topk.ctas / 132
    bw = 4245e9 * (645.0 / 4245.0) * x / (8 / 132)
    want = 4 * (H200.launch_us + H200.min_kernel_us) + topk.hbm_bytes / bw * 1e6
    assert want == pytest.approx(10.85, abs=0.01)
    got = sd.kernel_time_us(topk, np.array([16.0, 64.0, 132.0]))
    assert np.allclose(got, want, rtol=1e-9)


def test_wave_quantisation_is_monotone_and_flat_between_wave_counts():
    """A GEMM's time never rises with more SMs, and is constant between pool sizes with the
    same ceil(T/p) (T = 128 on the H200: 43..63 SMs take 3 waves, 64..127 take 2)."""
    k = Kernel(name="g", op="mlp_down", category="mlp", layer=0, flops=4e10, dtype="bf16",
               tensor=True, weight_objects=(("w", 5e7),), ctas=4000)
    t = StaticDurationModel(H200).kernel_time_us(k, np.arange(1, 133.0))
    assert np.all(np.diff(t) <= 1e-9)
    assert t[63] == pytest.approx(t[126]) and t[42] == pytest.approx(t[62])
    assert t[62] > t[63]
    c = op_cost(k, H200, np.array([64.0, 96.0, 132.0]))
    assert list(c.waves) == [2, 2, 1] and list(c.sms) == [64, 64, 128]


def test_neutral_hardware_reproduces_the_plain_roofline():
    """With the defaults of a hand-built Hardware (no minimum kernel time, no waves, ratios 1)
    a single-kernel op costs launch + max(compute, memory) with p = min(pool, ctas)."""
    hw = Hardware(name="X", num_sms=100, sm_quantum=4, min_pool_sms=4, sm_budget=100,
                  hbm_bytes=1e11, hbm_peak_Bps=2e12, hbm_copy_Bps=1e12, hbm_read_Bps=1e12,
                  l2_bytes=5e7, l2_Bps=5e12, tensor_flops={"bf16": 1e15}, gemm_efficiency=0.5,
                  nvlink_Bps=1e11, comm_setup_us=3.0, launch_us=2.0)
    k = Kernel(name="q", op="o_proj", category="out_residual", layer=0, flops=1e9, dtype="bf16",
               tensor=True, weight_objects=(("w", 1e6),), ctas=40)
    t = float(StaticDurationModel(hw).kernel_time_us(k, 80))
    assert t == pytest.approx(2.0 + 1e9 / (0.5e15 * 40 / 100) * 1e6)


def test_bad_hardware_constants_are_refused():
    import dataclasses
    for f, v in (("min_kernel_us", -1.0), ("gemm_wave_us", float("nan")),
                 ("decode_gemm_efficiency", 0.0), ("vector_inflight_ratio", 2.0),
                 ("gemm_grid_ctas", -1), ("gemm_grid_ctas", 1.5)):
        with pytest.raises(ValueError, match=f"hardware.{f}"):
            dataclasses.replace(H200, **{f: v})
    with pytest.raises(ValueError, match="sms"):
        op_cost(Kernel(name="a", op="topk", category="router_dispatch", layer=0, flops=1.0,
                       dtype="fp32", tensor=False), H200, 0.0)
    with pytest.raises(ValueError, match="samples"):
        fit_analytic([], H200, StaticDurationModel)


@pytest.mark.parametrize("name", ["B200", "H100"])
def test_other_presets_state_their_sources(name):
    """B200 and H100 carry the H200-measured per-launch and fitted constants as stated
    carry-overs, and every bandwidth/efficiency figure names its source."""
    hw = get_hardware(name)
    assert hw.launch_us == H200.launch_us and hw.min_kernel_us == H200.min_kernel_us
    assert "Carried over from the H200 measurements" in hw.source
    assert math.isfinite(hw.hbm_read_Bps) and hw.hbm_read_Bps <= hw.hbm_peak_Bps
