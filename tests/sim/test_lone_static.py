"""The lone-kernel invariant of the uncalibrated model (``ContentionModel.lone_static``): a GEMM
alone on a pool, cache off, takes its isolated static time (``StaticDurationModel``) in the event
simulator and in the vectorised scorer's tables, for both model versions (to 0.2%); every other
kernel within 1% or 0.2 µs (the rate model's memory-latency floor, about one memory latency:
``sim/contention.py``);
without it whole-GPU GEMMs are slower and partial-pool GEMMs faster than their static time
(docs/verdicts.md)."""

from __future__ import annotations

import numpy as np
import pytest

from subgpu_jax.model.graph import Deployment, StaticDurationModel, build_graph
from subgpu_jax.model.hardware import get_hardware
from subgpu_jax.model.kernelcost import is_gemm
from subgpu_jax.model.models import get_model
from subgpu_jax.score.vcontention import kernel_profiles
from subgpu_jax.sim.contention import ContentionModel
from subgpu_jax.sim.eventsim import simulate_streams

WORKLOADS = [("llama-3.1-8b", Deployment(num_gpus=1, attn_tp=1, attn_dp=1, moe_ep=1,
                                         global_batch=256, input_len=2048, kv_history=2048)),
             ("gpt-oss-20b", Deployment(num_gpus=8, attn_tp=8, attn_dp=1, moe_ep=8,
                                        global_batch=1024, input_len=8192, kv_history=8192))]
POOLS = (8, 40, 64, 128, 132)


def _lone(k, p, hw, model):
    return float(simulate_streams([(p, [k])], hw, model, "none", record=False).makespan)


@pytest.mark.parametrize("spec", ["H200", "H200:analytic-v2"])
@pytest.mark.parametrize("model_name, dep", WORKLOADS)
def test_every_kernel_alone_takes_its_static_time(spec, model_name, dep):
    hw = get_hardware(spec)
    g = build_graph(get_model(model_name), dep, 1)
    sd = StaticDurationModel(hw)
    cm = ContentionModel()
    assert cm.lone_static
    gemms = 0
    tab = kernel_profiles(g, hw, cm, None, np.array([0.0, 1.0]), np.array([0.0, 1.0]))["tau"]
    for u, k in enumerate(g.kernels):
        gemms += is_gemm(k)
        rel, ab = (2e-3, 0.0) if is_gemm(k) else (1e-2, 0.2)
        for p in POOLS:
            want = float(sd.kernel_time_us(k, p))
            assert _lone(k, p, hw, cm) == pytest.approx(want, rel=rel, abs=ab), (k.name, p)
            if p % hw.sm_quantum == 0 or p == hw.num_sms:   # the pools an allocation holds
                assert tab[u, p, 0, 0] == pytest.approx(want, rel=rel, abs=ab), (k.name, p)
    assert gemms >= 4


def test_without_the_invariant_lone_gemms_drift_in_subgpus_favour():
    """The control: the rate model's own lone terms make the whole-GPU decode GEMM slower and
    the 40-SM one faster than the static time (what lone_static removes)."""
    hw = get_hardware("H200")
    name, dep = WORKLOADS[0]
    g = build_graph(get_model(name), dep, 1)
    k = next(k for k in g.kernels if k.op == "mlp_up")
    sd = StaticDurationModel(hw)
    off = ContentionModel(lone_static=False)
    assert _lone(k, 132, hw, off) > 1.1 * float(sd.kernel_time_us(k, 132))
    assert _lone(k, 40, hw, off) < 0.99 * float(sd.kernel_time_us(k, 40))
    with pytest.raises(ValueError, match="contention.lone_static"):
        ContentionModel(lone_static=1)
