"""subgpu_jax.model.calibration: loading/validating calibration files, interpolation, the calibrated
event simulator reproducing measured isolated times, and the CLI plumbing (``--calibration`` on
``simulate``; ``run`` / ``calibrate`` refusing cleanly without a GPU). Pure CPU."""

from __future__ import annotations

import copy
import dataclasses
import json
import math

import numpy as np
import pytest

from hw_runtime.gpu.workload import hopper_arch
from subgpu_jax.model.calibration import (Calibration, CalibratedDurationModel, FORMAT, kernel_key,
    load_calibration)
from subgpu_jax.sim.contention import ContentionModel
from subgpu_jax.sim.eventsim import simulate, simulate_streams
from subgpu_jax.model.graph import REFERENCE_DEPLOYMENT, StaticDurationModel
from subgpu_jax.model.hardware import get_hardware
from subgpu_jax.model.models import MODELS
from subgpu_jax.model.workload import Workload
from subgpu_jax.space.config import temporal_of, workload_config

H200 = get_hardware("H200")
POOLS = (8, 16, 32, 64, 96, 128, 132)


def _wl(G=2048):
    return Workload.from_model(hopper_arch(MODELS["gpt-oss-120b"]),
                    dataclasses.replace(REFERENCE_DEPLOYMENT, global_batch=G), H200)


def synthetic_calibration(batches=(2048, 512), ms=(1, 2, 4), extra_us=8.0, fast=()) -> dict:
    """A calibration dict: static model time x 1.3 + ``extra_us`` (launch-bound ops), or x 0.5
    for kernels whose op is in ``fast`` (faster than the analytical model)."""
    sd = StaticDurationModel(H200)
    ks = {}
    for G in batches:
        wl = _wl(G)
        for m in ms:
            if wl.batch % m:
                continue
            for k in wl.graph(m).kernels:
                key = kernel_key(k)
                if key in ks:
                    continue
                f = (lambda t: 2.5 + 0.5 * (t - 2.0)) if k.op in fast else (lambda t: 1.3 * t + extra_us)
                ks[key] = {"key": key, "name": k.name,
                           "times_us": {str(p): float(f(sd.kernel_time_us(k, p)))
                                        for p in POOLS}}
    bw = {"sms": [8, 16, 32, 64, 96, 128, 132],
          "copy_GBps": [645.0, 1200.0, 2222.0, 3610.0, 3917.0, 4230.0, 4245.0]}
    return {"format": FORMAT, "model": "gpt-oss-120b", "hardware": "H200", "num_sms": 132,
            "expert_dtype": "bf16",
            "deployment": {f: getattr(REFERENCE_DEPLOYMENT, f) for f in
                           ("num_gpus", "attn_tp", "attn_dp", "moe_ep", "input_len",
                            "kv_history")},
            "global_batches": list(batches), "kernels": list(ks.values()), "bw_curve": bw,
            "coruns": [], "meta": {"synthetic": True}}


@pytest.fixture(scope="module")
def cal_dict():
    return synthetic_calibration()


@pytest.fixture(scope="module")
def cal(cal_dict):
    return Calibration.from_dict(cal_dict)


def test_roundtrip_and_lookup(cal, cal_dict, tmp_path):
    p = tmp_path / "c.json"
    p.write_text(json.dumps(cal.to_dict()))
    c2 = load_calibration(str(p), _wl().arch, _wl().deploy, H200)
    assert set(c2.tables) == set(cal.tables) and c2.bw_Bps == cal.bw_Bps
    k = _wl().graph(2).kernels[3]
    e = next(x for x in cal_dict["kernels"] if x["key"] == kernel_key(k))
    for p_ in POOLS:  # exact at the knots
        assert cal.kernel_time_us(k, p_) == pytest.approx(e["times_us"][str(p_)], rel=1e-12)
    # interpolation is linear in 1/SMs: exact for c/p, between the knots
    t8, t16 = e["times_us"]["8"], e["times_us"]["16"]
    assert cal.kernel_time_us(k, 12) == pytest.approx(t16 + (t8 - t16) * (1 / 12 - 1 / 16) /
                                                      (1 / 8 - 1 / 16))
    with pytest.warns(UserWarning, match="extrapolated"):  # not clamped: see test_calibration_edges
        assert cal.kernel_time_us(k, 4) > t8
    tab = CalibratedDurationModel(cal, H200).table(_wl().graph(2))
    assert tab.shape == (24, 133) and np.all(tab > 0)
    assert tab[3, 64] == pytest.approx(e["times_us"]["64"])


def test_bandwidth_curve_applied(cal):
    hw = cal.apply_to_hardware(H200)
    assert hw.hbm_copy_Bps == pytest.approx(4245e9)
    assert float(hw.bw_fraction(64)) == pytest.approx(3610 / 4245, rel=1e-9)
    assert hw.hbm_read_Bps / hw.hbm_copy_Bps == pytest.approx(H200.hbm_read_Bps /
                                                              H200.hbm_copy_Bps)
    with pytest.raises(ValueError, match="calibration is for H200"):
        cal.apply_to_hardware(get_hardware("B200"))


def _mutate(d, path, value=None, delete=False):
    d = copy.deepcopy(d)
    cur = d
    for k in path[:-1]:
        cur = cur[k]
    if delete:
        del cur[path[-1]]
    else:
        cur[path[-1]] = value
    return d


@pytest.mark.parametrize("path,value,delete,match", [
    (("format",), None, True, "missing field format"),
    (("format",), "v0", False, "format must be"),
    (("model",), None, True, "missing field model"),
    (("deployment", "attn_tp"), None, True, "missing field deployment.attn_tp"),
    (("kernels",), [], False, "kernels must be a non-empty list"),
    (("kernels", 0, "times_us", "64"), -3.0, False, "must be > 0"),
    (("kernels", 0, "times_us", "64"), 0.0, False, "must be > 0"),
    (("kernels", 0, "times_us", "64"), float("nan"), False, "must be finite"),
    (("kernels", 0, "times_us", "64"), "fast", False, "must be a number"),
    (("kernels", 0, "times_us", "400"), 5.0, False, "pool of 400 SMs"),
    (("kernels", 0, "key"), "x", False, "not a kernel key"),
    (("bw_curve", "copy_GBps"), [1.0], False, "same length"),
    (("bw_curve",), None, True, "missing field bw_curve"),
    (("num_sms",), 0, False, "num_sms must be > 0"),
])
def test_bad_files_one_line(cal_dict, tmp_path, path, value, delete, match):
    d = _mutate(cal_dict, path, value, delete)
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(d))
    with pytest.raises(ValueError, match=match) as ei:
        Calibration.load(str(p))
    assert "\n" not in str(ei.value)


def test_unreadable_and_invalid_json(tmp_path):
    with pytest.raises(ValueError, match="cannot read"):
        Calibration.load(str(tmp_path / "nope.json"))
    p = tmp_path / "x.json"
    p.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        Calibration.load(str(p))
    p.write_text("[1, 2]")
    with pytest.raises(ValueError, match="JSON object"):
        Calibration.load(str(p))


def test_wrong_workload_refused(cal):
    wl = _wl()
    with pytest.raises(ValueError, match="model 'gpt-oss-120b'"):
        cal.check_workload(MODELS["llama-3.1-8b"], wl.deploy, H200)
    with pytest.raises(ValueError, match="mxfp4 experts|bf16 experts"):
        cal.check_workload(MODELS["gpt-oss-120b"], wl.deploy, H200)
    with pytest.raises(ValueError, match="kv_history"):
        cal.check_workload(wl.arch, dataclasses.replace(wl.deploy, kv_history=8192), H200)
    with pytest.raises(ValueError, match="is for H200"):
        cal.check_workload(wl.arch, wl.deploy, get_hardware("B200"))
    with pytest.raises(ValueError, match="no measurement of kernel L0.rmsnorm at global batch "
                                         "4096"):
        cal.check_graph(_wl(4096).graph(1))


@pytest.mark.parametrize("op", ["rope_kv", "attn", "expert_up", "allreduce"])
@pytest.mark.parametrize("pool", [16, 64, 132])
def test_calibrated_lone_kernel_reproduces_measurement(op, pool):
    """Launch-bound (slower than the model: fixed latency) and fast (scaled work) kernels alone
    take their measured time in the calibrated contention simulator."""
    for fast in ((), (op,)):
        c = Calibration.from_dict(synthetic_calibration(batches=(2048,), ms=(2,), fast=fast))
        hw = c.apply_to_hardware(H200)
        k = next(k for k in _wl().graph(2).kernels if k.op == op)
        r = simulate_streams([(pool, [k])], hw, ContentionModel(calibration=c), cache="none",
                             record=False)
        assert r.makespan == pytest.approx(c.kernel_time_us(k, pool), rel=2e-3), fast
        r0 = simulate_streams([(pool, [k])], hw, ContentionModel.off().replace(calibration=c),
                              record=False)
        assert r0.makespan == pytest.approx(c.kernel_time_us(k, pool), rel=1e-9)


def test_calibrated_simulation_isolated_equals_table_sum(cal):
    wl = _wl()
    hw = cal.apply_to_hardware(H200)
    g1 = wl.graph(1)
    r = simulate(g1, temporal_of(wl), hw, ContentionModel.off().replace(calibration=cal),
                 record=False)
    tab = CalibratedDurationModel(cal, hw).table(g1)
    assert r.makespan == pytest.approx(tab[:, 132].sum() * g1.num_regions, rel=1e-9)
    cfg = workload_config(wl, wl.macro_starts(), [64, 64], 256, True)
    rc = simulate(wl.graph(2), cfg, hw, ContentionModel(calibration=cal), record=False)
    ru = simulate(wl.graph(2), cfg, H200, ContentionModel(), record=False)
    assert rc.makespan > ru.makespan  # synthetic tables are slower than the analytical model
    with pytest.raises(ValueError, match="contention.calibration must be"):
        ContentionModel(calibration={"x": 1})


# --------------------------------------------------------------------------- CLI

def _cli(argv, capsys):
    from subgpu_jax.app.cli import main
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_cli_simulate_with_calibration(cal, tmp_path, capsys):
    p = tmp_path / "c.json"
    p.write_text(json.dumps(cal.to_dict()))
    rc, out, err = _cli(["simulate", "--hardware", "H200", "--calibration", str(p), "--json"],
                        capsys)
    assert rc == 2 and "mxfp4" in err and err.count("\n") == 1  # the preset has MXFP4 experts
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    rc, out, err = _cli(["simulate", "--hardware", "H200", "--calibration", str(bad)], capsys)
    assert rc == 2 and err.startswith(f"error: calibration {bad}: missing field format")


def test_cli_run_and_calibrate_refuse_without_gpu(tmp_path, capsys):
    from hw_runtime.gpu.partition import green_contexts_available
    if green_contexts_available(0)[0]:
        pytest.skip("this machine has a GPU with green contexts")
    rc, out, err = _cli(["run", "--replays", "1"], capsys)
    assert rc == 2 and err.startswith("error: ") and "this machine cannot run" in err and err.count("\n") == 1
    # with the GPU named (--hardware: no GPU to read it from), the CPU checks come first
    h200 = ["--hardware", "H200"]
    rc, out, err = _cli(["run", *h200, "--replays", "1"], capsys)
    assert rc == 2 and err.startswith("error: ") and "this machine cannot run" in err and err.count("\n") == 1
    rc, out, err = _cli(["run", *h200, "--sms", "60,68"], capsys)
    assert rc == 2 and "multiple" in err and err.count("\n") == 1
    rc, out, err = _cli(["run", *h200, "--sms", "64,72"], capsys)
    assert rc == 2 and "budget" in err
    rc, out, err = _cli(["run", *h200, "--microbatch", "7"], capsys)
    assert rc == 2 and "microbatch" in err
    rc, out, err = _cli(["calibrate", "--out", str(tmp_path / "c.json")], capsys)
    assert rc == 2 and err.startswith("error: ") and "this machine cannot run" in err
    rc, out, err = _cli(["calibrate", *h200, "--out", str(tmp_path / "c.json"), "--pools",
                         "12"], capsys)
    assert rc == 2 and "not a valid H200 pool" in err
    rc, out, err = _cli(["run", *h200, "--from-search", str(tmp_path)], capsys)
    assert rc == 2 and "summary.json" in err


def test_from_search_record(tmp_path, capsys):
    from hw_runtime.commands.run import config_from_search
    rec = {"D": 2, "w": 1, "microbatch": 256, "sms": "64|64", "cuts": "L1.attn|L1.o_proj",
           "num_gpus": 32, "attn_tp": 8, "attn_dp": 4, "moe_ep": 32, "global_batch": 2048,
           "kv_history": 32768, "hardware": "H200", "policy": "wavefront"}
    (tmp_path / "summary.json").write_text(json.dumps({"best_speedup_record": rec}))
    best, dep = config_from_search(str(tmp_path))
    assert dep["global_batch"] == 2048 and best["sms"] == "64|64"
    (tmp_path / "summary.json").write_text(json.dumps({"best_speedup_record": None}))
    with pytest.raises(ValueError, match="no best_speedup_record"):
        config_from_search(str(tmp_path))


def test_calibrated_collective_waits_without_holding_the_pool():
    """A calibrated (virtual) collective is its HBM work plus a fixed wait (the runtime copies
    the payload, then waits out the link time in a one-thread timed wait): the solved work has
    no network payload, a positive fixed phase, and alone still takes its measured time. Beside
    it on a 2-lane pool, a GEMM is not slowed by the wait: both lanes together take at most the
    longer of the two alone plus the collective's HBM phase (the wait holds no SMs)."""
    from subgpu_jax.sim.contention import BoundModel
    from subgpu_jax.sim.eventsim import EventSimulator, lone_makespan

    c = Calibration.from_dict(synthetic_calibration(batches=(2048,), ms=(2,), extra_us=40.0))
    hw = c.apply_to_hardware(H200)
    g = _wl().graph(2)
    ar = next(k for k in g.kernels if k.op == "allreduce")
    model = ContentionModel(calibration=c)
    w = BoundModel(model, hw, lone_makespan).work(ar, 64)
    t_meas = c.kernel_time_us(ar, 64)
    assert w.comm_bytes == 0.0 and not w.comm
    assert 0.0 < w.fixed_us < t_meas
    r = simulate_streams([(64, [ar])], hw, model, cache="none", record=False)
    assert r.makespan == pytest.approx(t_meas, rel=2e-3)
    up = next(k for k in g.kernels if k.op == "expert_up")
    t_up = c.kernel_time_us(up, 64)
    # one pool of 64 SMs, two lanes: lane 0 the collective, lane 1 the GEMM
    sim = EventSimulator([ar, up], [64, 64], [(0, (), 0, 0, (0,)), (1, (), 0, 0, (1,))], hw,
                         model, "none", record=False, pool_of_stage=[0, 0])
    both = float(sim.run().makespan)
    assert both <= max(t_meas, t_up) + (t_meas - w.fixed_us) + 1.0


def test_missing_expert_dtype_names_the_way_out():
    """A calibration without ``expert_dtype`` checked against a workload whose experts differ
    from the ones it measured: the error names the missing field and --expert-dtype (it only
    said that the expert kernel had no measurement)."""
    d = synthetic_calibration(batches=(2048,), ms=(1,))
    d.pop("expert_dtype")
    c = Calibration.from_dict(d)
    wl = Workload.from_model(MODELS["gpt-oss-120b"], REFERENCE_DEPLOYMENT, H200)  # mxfp4 experts
    with pytest.raises(ValueError, match="names no expert_dtype.*--expert-dtype"):
        c.check_graph(wl.graph(1))


@pytest.mark.parametrize("fast", [(), ("rope_kv", "attn", "expert_up", "allreduce")])
def test_cheap_estimator_tables_reproduce_measurement(fast):
    """The cheap estimator's tables (``vcontention.kernel_profiles``) under a calibration: every
    measured kernel alone (no external load, cache off) takes the calibrated event simulator's
    lone time on every pool an allocation can hold (multiples of the 8-SM quantum inside the
    measured 8..132 SMs), for launch-bound kernels (slower than the model: a fixed phase) and
    fast ones (a work scale); the isolated table is the measured time; building the tables
    asks for no pool outside the measured ones (no extrapolation warning)."""
    import warnings

    from subgpu_jax.model.calibration import CalibrationExtrapolationWarning
    from subgpu_jax.score.vcontention import kernel_profiles

    c = Calibration.from_dict(synthetic_calibration(batches=(2048,), ms=(2,), fast=fast))
    hw = c.apply_to_hardware(H200)
    g = _wl().graph(2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CalibrationExtrapolationWarning)
        prof = kernel_profiles(g, hw, ContentionModel(calibration=c))
        iso = kernel_profiles(g, hw, ContentionModel.off().replace(calibration=c))
    seen = set()
    for u, k in enumerate(g.kernels):
        if k.op in seen:
            continue
        seen.add(k.op)
        for p in (8, 16, 40, 64, 96, 128, 132):
            lone = simulate_streams([(p, [k])], hw, ContentionModel(calibration=c), cache="none",
                                    record=False).makespan
            assert prof["tau"][u, p, 0, 0] == pytest.approx(lone, rel=1e-6), (k.name, p)
            assert lone == pytest.approx(c.kernel_time_us(k, p), rel=2e-3), (k.name, p)
            assert iso["tau"][u, p, 0, 0] == pytest.approx(c.kernel_time_us(k, p), rel=1e-9)


def test_bind_carries_everything_a_calibration_changes(cal):
    """``Calibration.bind(hw)`` is the four coordinated values at once: the patched GPU (as
    ``apply_to_hardware``), the calibrated duration table on it, the calibration itself (for the
    contention model) and the L2 policy ``none``; the timers made from it use each of them.
    Oracle: the hand-made values the entry points assembled before."""
    from subgpu_jax.model.graph import StaticDurationModel
    from subgpu_jax.model.setup import DurationModel, GpuSetup
    from subgpu_jax.score.timer import EventTimer, StaticTimer, timer_for

    s = cal.bind(H200)
    assert isinstance(s.duration_model, DurationModel)
    assert isinstance(StaticDurationModel(H200), DurationModel)
    assert s.hw == cal.apply_to_hardware(H200) and s.calibration is cal and s.calibrated
    assert s.cache == "none" and s.cache_policy() == "none" and s.cache_policy("lru") == "lru"
    g = _wl().graph(2)
    np.testing.assert_array_equal(s.duration_model.table(g),
                                  CalibratedDurationModel(cal, s.hw).table(g))
    ev = timer_for(s, "event")
    assert isinstance(ev, EventTimer) and ev.hw == s.hw and ev.cache == "none"
    assert ev.model.calibration is cal and not ev.model.isolated
    assert timer_for(s, "event", contention=False).model.isolated
    st = timer_for(s, "static")
    assert isinstance(st, StaticTimer) and st.duration_model is s.duration_model
    u = GpuSetup.uncalibrated(H200)
    assert (u.hw, u.calibration, u.duration_model, u.cache) == (H200, None, None, "lru")
    with pytest.raises(ValueError, match="calibration is for H200"):
        cal.bind(get_hardware("B200"))
    with pytest.raises(ValueError, match="simulator must be"):
        timer_for(s, "exact")
