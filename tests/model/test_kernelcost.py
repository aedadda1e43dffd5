"""The uncalibrated (analytical) kernel-cost terms (subgpu_jax/model/kernelcost.py).

Data: the committed H200 fit data (experiments/results/hw_fidelity/fitdata_*.json, the runtime
with PyTorch elementwise chains and stock GEMMs: kernel profile ``torch``; ``.../fused/`` the
runtime's defaults: profile ``fused``; isolated kernel tables and the device activities each op
issues, counted with torch.profiler) and the event-latency probe (corun_matrix.json). The
validation runs (validate_*.json, hw_verdicts/) are never read here.
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
from subgpu_jax.model.kernelcost import (FIT_PARAMS, KERNEL_PROFILES,
                                         device_kernels, fit_analytic, is_gemm, op_cost)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIDELITY = os.path.join(ROOT, "experiments", "results", "hw_fidelity")
FUSED = os.path.join(FIDELITY, "fused")
#: The fit data folder of each kernel profile.
PROFILE_DATA = {"torch": FIDELITY, "fused": FUSED}

#: The analytic-v2 constants (profile ``torch``, uniform log fit on the torch tables).
V2 = {"min_kernel_us": 1.301, "decode_gemm_efficiency": 0.8899, "vector_inflight_ratio": 0.2549,
      "gemm_wave_us": 1.078}
#: The H200 preset with analytic-v2's constants (profile ``torch``).
H200_V2 = get_hardware("H200:analytic-v2")
#: analytic-v3 (profile ``fused``): the presets' default.
H200_V3 = H200


def _fit_workloads(exp, folder):
    """The workloads of ``folder``'s fit data (fitdata_<workload>.json)."""
    return sorted(f[len("fitdata_"):-len(".json")] for f in os.listdir(folder)
                  if f.startswith("fitdata_") and f.endswith(".json") and f[8:-5] in exp.WORKLOADS)


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


@pytest.mark.parametrize("profile", ["torch", "fused"])
def test_device_kernel_counts_match_the_measured_activity_counts(exp, profile):
    """Every op's ``device_kernels`` under ``profile`` equals the most frequent measured activity
    count of that runtime's fit data over its workloads and m = 1, 2, 4; a cuBLAS GEMM or the
    attention op may differ by one kernel on some shapes (split-K reduction, split-KV combine),
    never more, and the other ops never differ."""
    counts_of = KERNEL_PROFILES[profile].counts
    folder = PROFILE_DATA[profile]
    seen: dict = collections.defaultdict(list)
    for w, f in exp.load_fitdata(folder, _fit_workloads(exp, folder)).items():
        wl = exp.sim_workload(w)
        for m, counts in f["activity_counts"].items():
            g = wl.graph(int(m))
            assert len(counts) == g.n
            for k, c in zip(g.kernels, counts):
                seen[k].append(int(c))
    assert len(seen) >= 10
    by_op: dict = collections.defaultdict(list)
    for k, cs in seen.items():
        key = f"{k.op}/{k.category}" if f"{k.op}/{k.category}" in counts_of else k.op
        by_op[key] += cs
        for c in cs:
            if is_gemm(k) or k.op == "attn":
                assert abs(c - device_kernels(k, profile)) <= 1, (k.name, c)
            else:
                assert c == device_kernels(k, profile), (k.name, c)
    for key, cs in by_op.items():
        assert collections.Counter(cs).most_common(1)[0][0] == counts_of[key], (key, cs)
    assert {"rope_kv", "topk", "expert_up", "allreduce/out_residual"} <= set(by_op)


def test_launch_cost_is_the_committed_probe():
    """``H200.launch_us`` is the per-kernel time of 200 dependent empty kernels in one CUDA graph
    (corun_matrix.json, event_latency.per_kernel_us = 1.19904 µs), rounded to 1 ns."""
    with open(os.path.join(FIDELITY, "corun_matrix.json")) as fh:
        probe = json.load(fh)["event_latency"]["per_kernel_us"]
    assert H200.launch_us == pytest.approx(probe, abs=5e-4)


def test_fit_reproduces_the_h200_preset(exp):
    """Refitting on the committed isolated tables of the runtime's defaults (profile ``fused``,
    7 workloads, weight ``time``) gives the preset's constants (to the 4 digits stored) and the
    grid T = 128; the fit's median |error| is the documented 15.0%."""
    samples = exp.analytic_samples(FUSED, _fit_workloads(exp, FUSED))
    assert len(samples) == 1152
    assert H200_V3.kernel_profile == "fused" and H200_V3.name == "H200"
    fit = fit_analytic(samples, H200_V3, StaticDurationModel)
    assert fit["gemm_grid_ctas"] == H200_V3.gemm_grid_ctas == 128
    assert fit["fitted"] == list(FIT_PARAMS)
    for f in FIT_PARAMS:
        assert fit["params"][f] == pytest.approx(getattr(H200_V3, f), rel=2e-3), f
    assert fit["median_abs_error"] == pytest.approx(0.150, abs=0.002)


def test_fit_reproduces_analytic_v2(exp):
    """analytic-v2 (profile ``torch``, its four constants, uniform weights) refitted on the
    torch tables: its constants, T = 128 and median |error| 15.5%."""
    samples = exp.analytic_samples(FIDELITY, list(exp.WORKLOADS))
    assert len(samples) == 976
    fit = fit_analytic(samples, H200_V2, StaticDurationModel, weight="uniform",
                       params=tuple(V2))
    assert fit["gemm_grid_ctas"] == 128 and fit["fitted"] == list(V2)
    for f, v in V2.items():
        assert fit["params"][f] == pytest.approx(v, rel=2e-3) == getattr(H200_V2, f), f
    assert fit["median_abs_error"] == pytest.approx(0.155, abs=0.002)
    with pytest.raises(ValueError, match="weight must be one of uniform, time"):
        fit_analytic(samples[:3], H200, StaticDurationModel, weight="log")
    with pytest.raises(ValueError, match="params must be among"):
        fit_analytic(samples[:3], H200, StaticDurationModel, params=("launch_us",))


def test_hand_derived_gemm_and_launch_bound_op(exp):
    """The two examples of the kernelcost module docstring (analytic-v2: profile ``torch``).

    llama-3.1-70b MLP up (M=512, N=7168, K=8192) on 64 SMs: 2 waves of T=128, p_u = 64,
    compute 60.13e9 / (989e12 * 801.7/989 * 0.8899 * 64/132) = 173.8 µs (memory-bound time 33 µs
    is smaller) + 3*1.199 + 3*1.301 + 2*1.078 = 183.5 µs; 80 SMs is also 2 waves (same time);
    132 SMs: 1 wave, p_u = 128: 95.5 µs.
    gpt-oss-120b top-k at G=2048: 4*(1.199+1.301) + 34816 B / (4245e9 * y(0.51/132)) with
    y = (645/4245) * (0.51/132) / (8/132) (first knot of the copy curve) = 10.85 µs on every pool.
    """
    hw = H200_V2
    sd = StaticDurationModel(hw)
    up = next(k for k in exp.sim_workload("llama70b_tp8_g512").graph(1).kernels
              if k.op == "mlp_up")
    assert up.flops == 2.0 * 512 * 8192 * 7168
    rate = 989e12 * (801.7 / 989.0) * hw.decode_gemm_efficiency
    fixed = 3 * hw.launch_us + 3 * hw.min_kernel_us
    want64 = up.flops / (rate * 64 / 132) * 1e6 + fixed + 2 * hw.gemm_wave_us
    assert want64 == pytest.approx(183.5, abs=0.1)
    assert float(sd.kernel_time_us(up, 64)) == pytest.approx(want64, rel=1e-9)
    assert float(sd.kernel_time_us(up, 80)) == pytest.approx(want64, rel=1e-9)
    want132 = up.flops / (rate * 128 / 132) * 1e6 + fixed + hw.gemm_wave_us
    assert float(sd.kernel_time_us(up, 132)) == pytest.approx(want132, rel=1e-9)
    topk = next(k for k in exp.sim_workload("gptoss120b_ref_g2048").graph(1).kernels
                if k.op == "topk")
    x = hw.vector_inflight_ratio * topk.ctas / 132
    bw = 4245e9 * (645.0 / 4245.0) * x / (8 / 132)
    want = 4 * (hw.launch_us + hw.min_kernel_us) + topk.hbm_bytes / bw * 1e6
    assert want == pytest.approx(10.85, abs=0.01)
    got = sd.kernel_time_us(topk, np.array([16.0, 64.0, 132.0]))
    assert np.allclose(got, want, rtol=1e-9)


def test_wave_quantisation_is_monotone_and_flat_between_wave_counts():
    """Profile ``torch``: a GEMM's time never rises with more SMs, and is constant between pool
    sizes with the same ceil(T/p) (T = 128: 43..63 SMs take 3 waves, 64..127 take 2)."""
    k = Kernel(name="g", op="mlp_down", category="mlp", layer=0, flops=4e10, dtype="bf16",
               tensor=True, weight_objects=(("w", 5e7),), ctas=4000)
    t = StaticDurationModel(H200_V2).kernel_time_us(k, np.arange(1, 133.0))
    assert np.all(np.diff(t) <= 1e-9)
    assert t[63] == pytest.approx(t[126]) and t[42] == pytest.approx(t[62])
    assert t[62] > t[63]
    c = op_cost(k, H200_V2, np.array([64.0, 96.0, 132.0]))
    assert list(c.waves) == [2, 2, 1] and list(c.sms) == [64, 64, 128]


def test_pool_tuned_gemm_by_hand():
    """Profile ``fused`` (analytic-v3: pool-tuned GEMMs, hand derivation): on p SMs the GEMM takes the
    pool-planned grid where p x e_pool > T / ceil(T/p) (one wave), else the grid of T CTAs; its
    SMs' worth of throughput is then scaled by (1 - loss x p/N). With the preset (T = 128,
    e_pool = 1.3, loss = 0.2424): 64 SMs -> 83.2 > 64, pool plan, p_u = 64 x 1.3 x (1 - 0.2424 x
    64/132) = 73.42; 132 SMs -> 171.6 > 128, pool plan (the library's own plan for the whole
    GPU), p_u = 132 x 1.3 x (1 - 0.2424) = 130.0. The time never rises with more SMs."""
    k = Kernel(name="g", op="mlp_down", category="mlp", layer=0, flops=4e10, dtype="bf16",
               tensor=True, weight_objects=(("w", 5e7),), ctas=4000)
    hw = H200_V3
    assert (hw.gemm_grid_ctas, hw.pool_gemm_efficiency, hw.gemm_scale_loss) == (128, 1.3, 0.2424)
    c = op_cost(k, hw, np.array([64.0, 132.0]))
    assert list(c.waves) == [1, 1]
    assert c.sms[0] == pytest.approx(64 * 1.3 * (1 - 0.2424 * 64 / 132), rel=1e-12)
    assert c.sms[1] == pytest.approx(132 * 1.3 * (1 - 0.2424), rel=1e-12)
    assert c.sms[0] == pytest.approx(73.42, abs=0.01) and c.sms[1] == pytest.approx(130.0, abs=0.1)
    assert c.fixed_us[0] == pytest.approx(hw.min_kernel_us + hw.gemm_wave_us)  # 1 kernel, 1 wave
    t = StaticDurationModel(hw).kernel_time_us(k, np.arange(1, 133.0))
    assert np.all(np.diff(t) <= 1e-9)


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
                 ("gemm_grid_ctas", -1), ("gemm_grid_ctas", 1.5), ("kernel_profile", "fast"),
                 ("pool_gemm_efficiency", 0.0), ("fused_inflight_ratio", 1.6),
                 ("gemm_scale_loss", 0.5)):
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


def test_hardware_spec_selects_the_model_version():
    """``NAME:VERSION`` gives the preset with that version's constants and the same name; the
    default is analytic-v3; an unknown version or preset is one clear error naming both lists."""
    from subgpu_jax.model.kernelcost import analytic_model_of
    from subgpu_jax.sim.contention import uncalibrated_model_id

    assert analytic_model_of(get_hardware("H200")) == "analytic-v3"
    v2 = get_hardware("h200:Analytic-V2")
    assert (v2.name, v2.kernel_profile, v2.min_kernel_us) == ("H200", "torch", 1.301)
    assert get_hardware("H200:analytic-v3") == H200
    assert uncalibrated_model_id(v2) == ("analytic-v2 (co-run memory-latency gain 1.5, GEMMs "
                                         "alone at their static time, lanes of a pool sharing "
                                         "it 'tail' with theta 0.5)")
    assert StaticDurationModel(v2).name == "analytic-v2"
    for bad in ("H200:analytic-v9", "X200:analytic-v3", "H200:", ":analytic-v3"):
        with pytest.raises(ValueError, match="optionally followed by :analytic-v2 or "
                                             ":analytic-v3"):
            get_hardware(bad)
