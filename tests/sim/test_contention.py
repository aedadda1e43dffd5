"""The rate model (docs/method.md §3): parameters, consistency with the static model, sharing rules."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from subgpu_jax.model.kernelcost import op_cost
from subgpu_jax.sim.contention import BoundModel, ContentionModel
from subgpu_jax.sim.probe import probe_kernels
from subgpu_jax.sim.eventsim import simulate_streams
from subgpu_jax.model.graph import REFERENCE_DEPLOYMENT, Kernel, StaticDurationModel, build_graph
from subgpu_jax.model.hardware import get_hardware
from subgpu_jax.model.models import get_model

H200 = get_hardware("H200")
B200 = get_hardware("B200")


def test_every_parameter_documented():
    doc = ContentionModel.__doc__
    for f in ("isolated", "inflight_per_sm_B", "inflight_max_B", "demand_cap", "issue_ratio",
              "miss_l2_cost", "tile_edge", "compute_gain"):
        assert f + ":" in doc


@pytest.mark.parametrize("field,value,msg", [
    ("issue_ratio", -1.0, "contention.issue_ratio must be > 0"),
    ("issue_ratio", 0.0, "contention.issue_ratio must be > 0"),
    ("inflight_per_sm_B", float("nan"), "contention.inflight_per_sm_B must be finite"),
    ("compute_gain", None, "contention.compute_gain is missing"),
    ("miss_l2_cost", 0.5, "contention.miss_l2_cost must be >= 1"),
    ("tile_edge", -3.0, "contention.tile_edge must be >= 0"),
    ("inflight_max_B", 0.0, "contention.inflight_max_B must be > 0"),
    ("isolated", "yes", "contention.isolated must be a bool"),
])
def test_bad_parameters(field, value, msg):
    with pytest.raises(ValueError, match=msg):
        ContentionModel(**{field: value})
    with pytest.raises(ValueError, match="unknown field"):
        ContentionModel().replace(bogus=1)


@pytest.mark.parametrize("hw,model", [(H200, "gpt-oss-20b"), (B200, "gpt-oss-120b")])
def test_static_consistent_alone_equals_static(hw, model):
    g = build_graph(get_model(model), REFERENCE_DEPLOYMENT, 2)
    st_ = StaticDurationModel(hw)
    for k in g.kernels:
        for p in (hw.min_pool_sms, 40, hw.num_sms):
            t = simulate_streams([(p, [k])], hw, ContentionModel.static_consistent(), "none",
                                 record=False).makespan
            assert t == pytest.approx(float(st_.kernel_time_us(k, p)), rel=1e-9), (k.name, p)


def test_default_alone_close_to_static_for_memory_bound():
    """Same curve: a lone memory-bound (non-tensor) kernel matches the static model, up to the
    demand cap (at most ~one memory latency for kernels smaller than their in-flight window)."""
    g = build_graph(get_model("gpt-oss-20b"), REFERENCE_DEPLOYMENT, 1)
    st_ = StaticDurationModel(H200)
    for k in g.kernels:
        if k.tensor or k.is_comm:
            continue
        for p in (8, 64, 132):
            t = simulate_streams([(p, [k])], H200, ContentionModel(), "none",
                                 record=False).makespan
            ts = float(st_.kernel_time_us(k, p))
            assert ts * (1 - 1e-9) <= t <= ts + 0.5, (k.name, p, t, ts)
    # a large copy: exactly the curve
    _, copy = probe_kernels()
    for p in (16, 64, 128):
        t = simulate_streams([(p, [copy])], H200, ContentionModel(), "none").makespan
        assert t == pytest.approx(float(StaticDurationModel(H200).kernel_time_us(copy, p)),
                                  rel=1e-9)


def test_off_is_static_duration():
    gemm, copy = probe_kernels()
    for k in (gemm, copy):
        t = simulate_streams([(64, [k])], H200, ContentionModel.off(), "none").makespan
        assert t == pytest.approx(float(StaticDurationModel(H200).kernel_time_us(k, 64)))


def test_collective_setup_and_sharing():
    c = Kernel(name="ar", op="allreduce", category="out_residual", layer=0, flops=0.0,
               dtype="bf16", tensor=False, comm_bytes=9e6)
    t1 = simulate_streams([(16, [c])], H200, ContentionModel(), "none").makespan
    fx = float(op_cost(c, H200, 16.0).fixed_us)  # its other device kernels (model/kernelcost.py)
    assert t1 == pytest.approx(H200.launch_us + fx + H200.comm_setup_us
                               + 9e6 / H200.nvlink_Bps * 1e6)
    r = simulate_streams([(16, [c]), (16, [c])], H200, ContentionModel(), "none")
    # two collectives share NVLink: the payload phase takes twice as long
    assert r.makespan == pytest.approx(H200.launch_us + fx + H200.comm_setup_us
                                       + 2 * 9e6 / H200.nvlink_Bps * 1e6)


def _rates(bm, ks):
    """Rates of kernels ``ks`` = [(Kernel, sms)] all freshly active, cache off."""
    ws = [bm.work(k, p) for k, p in ks]
    return bm.rates([w.sms for w in ws], [w.rate_full for w in ws], [w.power for w in ws],
                    [w.flops for w in ws], [w.obj_bytes for w in ws],
                    [1.0 if w.obj_bytes > 0 else 0.0 for w in ws], [w.peak_Bps for w in ws],
                    [w.reread_per_flop for w in ws], [False] * len(ws))


@settings(max_examples=40)
@given(sms=st.lists(st.integers(1, 60), min_size=1, max_size=4),
       sizes=st.lists(st.floats(1e4, 1e10), min_size=4, max_size=4))
def test_hbm_shares_bounded_by_curve(sms, sizes):
    bm = BoundModel(ContentionModel(), H200)
    ks = [(Kernel(name=f"s{i}", op="copy", category="mlp", layer=0, flops=0.0, dtype="bf16",
                  tensor=False, act_reads=(("x", sizes[i]),), ctas=10**6), p)
          for i, p in enumerate(sms)]
    rc, rd, rh, rn = _rates(bm, ks)
    total_sms = sum(sms)
    assert sum(rh) <= H200.hbm_read_Bps * float(H200.bw_fraction(min(total_sms, 132))) * (1 + 1e-9)
    for (k, p), h in zip(ks, rh):
        assert h <= p * bm.issue * (1 + 1e-12)  # issue cap of the kernel's own SMs
        assert h > 0


def test_compute_power_cap_and_gain():
    gemm, _ = probe_kernels()
    bm = BoundModel(ContentionModel(tile_edge=0.0, lone_static=False), H200)
    rc, *_ = _rates(bm, [(gemm, 16)])
    assert rc[0] == pytest.approx(H200.flops_rate("bf16") * bm.gain * 16 / 132)
    rc, *_ = _rates(bm, [(gemm, 132)])
    assert rc[0] == pytest.approx(H200.flops_rate("bf16"))  # chip cap
    rc, *_ = _rates(bm, [(gemm, 66), (gemm, 66)])
    assert sum(rc) == pytest.approx(H200.flops_rate("bf16"))  # shared cap
