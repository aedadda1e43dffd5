"""Which mechanism keeps the vectorised contention scorer from reproducing the event simulator
(issue 42 item 1: "where the vectorised contention scorer reproduces the event simulator, state
the tolerance").

Configurations made as ``vc_agreement_presets.py`` makes them (the cheap ranking's top 3 layouts
of (D, m) in {2, 3} x {2, 4} at their cheap-refined allocations with every one-quantum move from
there, and random ones; H200), for five of its presets by default (``DEFAULT_MODELS``: the
reference MoE, two more MoE/dense TP8 ranks and two one-GPU dense models, a third of its time)
and link time on only (its study found both link settings alike), are scored by the event simulator and by the
vectorised contention scorer (``ContentionEstimator``, today's tables) with one mechanism
switched off in BOTH scorers at a time:

* ``default``: the model as it is;
* ``no_l2_hits``: the L2 cache policy ``none`` (no kernel finds its data in L2: the event
  simulator's LRU replay and the scorer's hit fractions both off);
* ``no_latency``: the loaded memory latency off (``ContentionModel.latency_load_gain`` 0);
* ``no_l2_port``: the shared L2 port off (``Hardware.l2_Bps`` 1e30 B/s: the L2 bandwidth never
  binds; operand re-reads and miss fills cost nothing);
* ``none_of_them``: the three off together;
* ``also_no_demand_cap``: and no demand cap (``ContentionModel.demand_cap`` False: a kernel's
  bytes in flight no longer shrink with the bytes it has left, a dynamic effect);
* ``also_no_power_cap``: and a per-SM compute rate of the whole GPU's (``compute_gain`` 1: the
  pools' compute powers never sum above the chip's, so the power cap never binds); what is
  left is HBM bandwidth shared through the response curve;
* ``isolated``: no contention at all (``ContentionModel(isolated=True)``: each kernel its static
  time; the two scorers are then one max-plus recurrence, the control).

A variant whose error is near 0 says the scorer reproduces the simulator when those mechanisms
are off; the variants between say which mechanism's treatment (the scorer takes each kernel
under a constant external load, the simulator recomputes the rates at every event) makes the
difference. Nothing is fitted.

Units: makespans in µs; errors dimensionless (scorer / simulator - 1).

Usage: python experiments/vc_mechanisms.py [--models M ...] [--random N] [--out JSON]
Writes experiments/results/vc_mechanisms.json (errors: scorer / simulator - 1) and a table.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import vc_agreement_presets as A  # noqa: E402  (the configurations and deployments)
from digest_cli import check_out, write_digest  # noqa: E402

#: Variant -> (cache policy, ContentionModel overrides, Hardware overrides).
VARIANTS = {
    "default": ("lru", {}, {}),
    "no_l2_hits": ("none", {}, {}),
    "no_latency": ("lru", {"latency_load_gain": 0.0}, {}),
    "no_l2_port": ("lru", {}, {"l2_Bps": 1e30}),
    "none_of_them": ("none", {"latency_load_gain": 0.0}, {"l2_Bps": 1e30}),
    "also_no_demand_cap": ("none", {"latency_load_gain": 0.0, "demand_cap": False},
                           {"l2_Bps": 1e30}),
    "also_no_power_cap": ("none", {"latency_load_gain": 0.0, "demand_cap": False,
                                   "compute_gain": 1.0}, {"l2_Bps": 1e30}),
    "isolated": ("none", {"isolated": True}, {}),
}
DEFAULT_MODELS = ("gpt-oss-120b", "llama-3.1-70b", "mixtral-8x7b", "llama-3.1-8b", "qwen3-8b")


def main(argv=None) -> int:
    from subgpu_jax.model.models import MODELS, get_model
    from subgpu_jax.model.workload import Workload
    from subgpu_jax.score.vcontention import ContentionEstimator
    from subgpu_jax.search.problem import Problem
    from subgpu_jax.sim.contention import ContentionModel
    from subgpu_jax.sim.eventsim import simulate

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS), choices=list(MODELS))
    ap.add_argument("--random", type=int, default=4, help="random configurations per preset")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "vc_mechanisms.json"))
    a = ap.parse_args(argv)
    if a.random < 0:
        ap.error(f"--random must be an integer >= 0, got {a.random}")
    if a.seed < 0:
        ap.error(f"--seed must be an integer >= 0, got {a.seed}")
    try:
        check_out(a.out)
    except ValueError as e:
        ap.error(str(e))
    rng = np.random.default_rng(a.seed)
    rows, t0 = [], time.time()
    for name in a.models:
        wl = Workload.from_model(get_model(name), A.DEPLOYMENTS[name])
        cfgs = [("search", c) for c in A.search_configs(Problem(wl, A.HW))]
        n = tries = 0
        while n < a.random and tries < 100 * max(a.random, 1):
            tries += 1
            try:
                cfgs.append(("random", A.random_config(rng, wl, int(rng.choice([2, 4])))))
                n += 1
            except ValueError:   # an infeasible draw (a pool too small for its segment)
                continue
        for kind, cfg in cfgs:
            g = wl.graph(wl.m_of(cfg))
            row = {"model": name, "kind": kind, "D": cfg.D, "w": cfg.w,
                   "microbatches": g.microbatches, "alloc": list(cfg.alloc)}
            for v, (cache, mo, ho) in VARIANTS.items():
                model, hw = ContentionModel(**mo), dataclasses.replace(A.HW, **ho)
                ev = float(simulate(g, cfg, hw, model, cache, record=False).makespan)
                est = ContentionEstimator(g, cfg.seg_of, cfg.D, cfg.w, hw, policy=cfg.policy,
                                          model=model, cache=cache)
                vc = float(est.makespan(np.asarray([cfg.alloc]))[0])
                row[v] = {"eventsim_us": ev, "vc_us": vc, "error": vc / ev - 1}
            rows.append(row)
        print(f"{name}: {len(cfgs)} configurations ({time.time() - t0:.0f} s)", flush=True)
    out = {"hardware": A.HW.name, "link_time": True, "variants": {k: {"cache": c, "model": m,
           "hardware": h} for k, (c, m, h) in VARIANTS.items()}, "rows": rows, "summary": {},
           "seconds": round(time.time() - t0)}
    print(f"\n{'preset':15s} {'kind':7s} {'n':>4s} " + " ".join(f"{v[:18]:>18s}" for v in VARIANTS))
    for name in [*a.models, "all"]:
        for kind in ("search", "random"):
            sel = [r for r in rows if (name == "all" or r["model"] == name) and r["kind"] == kind]
            if not sel:
                continue
            s = {v: A.summary([r[v]["error"] for r in sel]) for v in VARIANTS}
            out["summary"][f"{name}|{kind}"] = s
            print(f"{name:15s} {kind:7s} {len(sel):4d} " + " ".join(
                f"{s[v]['median_abs_error']:8.2%}/{s[v]['max_abs_error']:8.2%}" for v in VARIANTS))
    write_digest(a.out, out)
    print(f"(median / max |scorer / simulator - 1|) wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
