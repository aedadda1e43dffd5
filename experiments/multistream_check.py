"""Check the simulator's multistream mode against committed H200 measurements (issue 22, item 3).

The multistream mode (``eventsim.simulate(mode="multistream")``: the microbatched schedule on
plain streams, every lane drawing CTAs from all SMs in launch order) has no fitted parameter, so
every committed measurement of a multi-stream run is a held-out check of it. The measurements:
``experiments/results/hw_fidelity/fused/validate_<workload>.json`` (the fidelity study's
validation runs with the runtime's defaults: tuned GEMMs, fused elementwise kernels, lane
priorities auto; region graphs timed as CUDA-graph replays, ``Executor.measure(step=False)``;
raw per-run data, in git history at commit 31b8bfb: ``git checkout 31b8bfb --
experiments/results/hw_fidelity/fused`` before a re-run).
Each multi-stream row is compared with its green-context twin of the same cut, split and
microbatch count (``macro_64_64_m2``), under the uncalibrated event simulator (contention, L2
lru), region graphs as measured.

Writes ``experiments/results/multistream_check_h200.json``: per workload the measured and
predicted speedups over temporal of the multi-stream run and its green twin, their ratios, and
the partition effect (green / multistream speedup) measured and predicted.

    python experiments/multistream_check.py
"""

from __future__ import annotations

import json
import os
import statistics
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from hw_fidelity_h200 import cfg_from_json, sim_workload  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
DATA = os.path.join(RESULTS, "hw_fidelity", "fused")
WORKLOADS = ("gptoss120b_ref_g2048", "gptoss120b_ref_g512", "gptoss20b_tp8_g1024",
             "llama70b_tp8_g256", "llama70b_tp8_g512")
PAIR = ("macro_multistream_m2", "macro_64_64_m2")


def check(name: str) -> dict:
    """Measured and predicted speedups of the multi-stream row and its green twin."""
    from subgpu_jax.sim.eventsim import simulate
    from subgpu_jax.space.config import temporal_of

    path = os.path.join(DATA, f"validate_{name}.json")
    if not os.path.exists(path):  # raw per-run data, out of the tree (experiments/README.md)
        raise SystemExit(f"{path} missing: restore the raw runs with `git checkout 31b8bfb -- "
                         "experiments/results/hw_fidelity/fused`")
    with open(path) as fh:
        d = json.load(fh)
    rows = {r["name"]: r for r in d["rows"] if "measured" in r}
    wl = sim_workload(name)
    T = rows["temporal"]["measured"]["makespan_us"]
    pt = simulate(wl.graph(1), temporal_of(wl), wl.hw, record=False).makespan
    out = {"workload": name, "gemm": d.get("gemm"), "elementwise": d.get("elementwise"),
           "temporal_measured_us": T, "temporal_predicted_us": pt}
    for nm in PAIR:
        r = rows[nm]
        cfg = cfg_from_json(wl, r)
        m = wl.batch // cfg.microbatch
        p = simulate(wl.graph(m), cfg, wl.hw, record=False, mode=r["mode"]).makespan
        key = "multistream" if r["mode"] == "multistream" else "green"
        out[key] = {"name": nm, "alloc": list(cfg.alloc), "microbatches": m,
                    "measured_speedup": T / r["measured"]["makespan_us"],
                    "predicted_speedup": pt / p}
        out[key]["predicted_over_measured"] = (out[key]["predicted_speedup"]
                                               / out[key]["measured_speedup"])
    out["partition_measured"] = (out["green"]["measured_speedup"]
                                 / out["multistream"]["measured_speedup"])
    out["partition_predicted"] = (out["green"]["predicted_speedup"]
                                  / out["multistream"]["predicted_speedup"])
    return out


def main(argv=None) -> int:
    import argparse
    ap = argparse.ArgumentParser(description="Check the multistream mode against committed H200 runs (see the module docstring).")
    ap.add_argument("--out", default=os.path.join(RESULTS, "multistream_check_h200.json"),
                    help="digest to write (default: experiments/results/multistream_check_h200.json)")
    args = ap.parse_args(argv)
    rows = [check(w) for w in WORKLOADS]
    ratio = {k: [r[k]["predicted_over_measured"] for r in rows] for k in ("multistream", "green")}
    from subgpu_jax.sim.contention import ContentionModel
    res = {"gpu": "H200", "model": "uncalibrated event simulator (contention, L2 lru)",
           "latency_load_gain": ContentionModel().latency_gain,
           "measurements": "experiments/results/hw_fidelity/fused/validate_*.json",
           "fitted_parameters_of_the_multistream_mode": 0, "rows": rows,
           "summary": {k: {"median": statistics.median(v), "min": min(v), "max": max(v)}
                       for k, v in ratio.items()}}
    path = args.out
    from subgpu_jax.app.store import atomic_write
    atomic_write(path, json.dumps(res, indent=1))
    print(f"{'workload':22s} {'mode':12s} {'measured':>9s} {'predicted':>10s} {'pred/meas':>10s}")
    for r in rows:
        for k in ("multistream", "green"):
            x = r[k]
            print(f"{r['workload']:22s} {k:12s} {x['measured_speedup']:8.3f}x "
                  f"{x['predicted_speedup']:9.3f}x {x['predicted_over_measured']:10.3f}")
        print(f"{'':22s} {'partition':12s} {r['partition_measured']:8.3f}x "
              f"{r['partition_predicted']:9.3f}x")
    print(json.dumps(res["summary"]))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
