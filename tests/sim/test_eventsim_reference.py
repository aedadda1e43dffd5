"""The event simulator reproduces the makespans of its earlier implementation exactly.

``tests/data/eventsim_reference.json`` was written by the parallel-list simulator at commit
ef33c42 (before the named-state rewrite; the graphs of that commit) for 25 configurations: temporal and 2-4 stages, w = 0 and
1, both dispatch policies, contention on/off/static-consistent, LRU/FIFO/no cache, collectives
(llama-3.1-70b TP8), 1-3 streams per stage, gpt-oss-20b/120b on H200/B200. The rewrite must give
bit-identical makespans, step and event counts and HBM bytes (an independent implementation as
the oracle). A deliberate change of the graphs (``model/``) or of the rate model changes these
numbers too: regenerate the file with the simulator of the commit before that change, or build
the graphs of that commit (``moe_tp_gather=False`` reproduces them since issue 28). The
reference shared a pool between its k lanes equally, so the cases run with
``pool_sharing="fair"`` (launch-order sharing, the default since, is tested by hand in
``test_streams_per_stage.py``), with ``latency_load_gain=0`` (the reference had no
loaded-latency dilation; ``test_modes.py`` tests it by hand), with ``lone_static=False`` (it had
no lone-GEMM scaling; ``test_lone_static.py``) and on the presets' analytic-v2 constants (its
kernel model; ``NAME:analytic-v2``)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from subgpu_jax.model.graph import Deployment, build_graph
from subgpu_jax.model.hardware import get_hardware
from subgpu_jax.model.models import get_model
from subgpu_jax.sim.contention import ContentionModel
from subgpu_jax.sim.eventsim import simulate
from subgpu_jax.space.config import Config, cut_from_starts, temporal_config

REF = json.loads((Path(__file__).resolve().parents[1] / "data" / "eventsim_reference.json")
                 .read_text())
# the reference shared a pool's SMs equally between its lanes (k > 1): pool_sharing="fair"
# and had no loaded-latency dilation of fixed phases: latency_load_gain=0
MODELS = {"on": ContentionModel(pool_sharing="fair", latency_load_gain=0.0, lone_static=False),
          "off": ContentionModel.off().replace(pool_sharing="fair"),
          "static_consistent": ContentionModel.static_consistent().replace(
              pool_sharing="fair", latency_load_gain=0.0, lone_static=False)}


@pytest.mark.parametrize("case", REF["cases"], ids=lambda c: (
    f"{c['model']}-{c['hardware']}-m{c['microbatches']}-{c['starts']}-k"
    f"{c['streams_per_stage']}-{c['contention']}-{c['cache']}"))
def test_same_results_as_the_reference_simulator(case):
    # the graphs of that commit: no MoE all-gather after the combine (docs/accounting.md item 3)
    dep = Deployment(**REF["deployments"][case["deployment"]], moe_tp_gather=False)
    hw = get_hardware(case["hardware"] + ":analytic-v2")
    if hw.name == "B200":  # the preset of that commit: 8 TB/s peak (issue 41: 7.672, its bus)
        hw = dataclasses.replace(hw, hbm_peak_Bps=8e12, hbm_copy_Bps=8e12 * 4245 / 4800,
                                 hbm_read_Bps=8e12 * 4614 / 4800, l2_Bps=8e12 * 2.5)
    g = build_graph(get_model(case["model"]), dep, case["microbatches"])
    R = dep.requests_per_gpu
    if not case["starts"]:
        cfg = temporal_config(g.n, hw, R)
    else:
        cfg = Config(D=len(case["alloc"]), w=case["w"],
                     seg_of=cut_from_starts(g.n, g.edges, case["starts"]),
                     alloc=tuple(case["alloc"]), microbatch=R // case["microbatches"],
                     policy=case["policy"], streams_per_stage=case["streams_per_stage"])
    r = simulate(g, cfg, hw, MODELS[case["contention"]], case["cache"])
    assert r.makespan == case["makespan_us"]
    assert (r.steps, r.events) == (case["steps"], case["events"])
    assert r.bytes_hbm == case["bytes_hbm"] and r.l2_hit_rate == case["l2_hit_rate"]
    assert r.kernel_start.size == case["kernel_instances"]
