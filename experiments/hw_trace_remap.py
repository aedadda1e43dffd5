"""Map a saved profiled replay onto its launch plan, on the CPU (docs/fidelity.md §4).

``subgpu run --trace`` keeps the raw device activities (``FILE.activities.json[.gz]``) when its
mapping fails; this script maps such a file later (``hw_runtime.timeline.map_activities``) and
writes what ``--trace`` would have: the Perfetto trace with the measured replay (process 1)
above the calibrated simulator's schedule of the same configuration (process 2), and a JSON
summary with per-stage busy and idle time and per-category residence, measured and simulated.

Usage: python experiments/hw_trace_remap.py ACTIVITIES --workload W --config NAME --data DIR
           --out PREFIX
  ACTIVITIES: ``{"activities": [...], "op_activities": [...]}`` (``.gz`` allowed).
  W: a ``hw_fidelity_h200.WORKLOADS`` name; NAME: a ``hw_wins_h200.candidates`` name;
  DIR: the fit data the calibration is built from (``fitdata_<W>.json``; the copy curve of the
  gpt-oss-120b reference fit data, as in the wins study).
Writes PREFIX.json.gz (Perfetto) and PREFIX.summary.json. Units: µs.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

import hw_fidelity_h200 as F  # noqa: E402
import hw_wins_h200 as W  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("activities")
    ap.add_argument("--workload", required=True, choices=list(F.WORKLOADS))
    ap.add_argument("--config", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    from hw_runtime.plan import build_launch_plan
    from hw_runtime.timeline import (category_residence, map_activities, sim_intervals,
                                     stage_busy, trace_document)
    from subgpu_jax.model.hardware import get_hardware
    from subgpu_jax.sim.contention import ContentionModel
    from subgpu_jax.sim.eventsim import simulate

    cands = {d["name"]: d for d in W.candidates(a.workload)}
    if a.config not in cands:
        ap.error(f"--config: {a.config!r} is not a candidate of {a.workload}")
    opener = gzip.open if a.activities.endswith(".gz") else open
    with opener(a.activities, "rt") as fh:
        raw = json.load(fh)
    fits = F.load_fitdata(a.data, [a.workload, "gptoss120b_ref_g2048"])
    if a.workload not in fits or "gptoss120b_ref_g2048" not in fits:
        ap.error(f"--data: {a.data} lacks fitdata_{a.workload}.json or the reference's")
    with open(os.path.join(F.RESULTS, "hw_fidelity_h200.json")) as fh:
        params = json.load(fh)["fit"]["params"]
    cal = F.build_calibration(a.workload, fits[a.workload],
                              fits["gptoss120b_ref_g2048"]["bw_curve"])
    setup = cal.bind(get_hardware("H200"))
    hw = setup.hw
    wl = F.sim_workload(a.workload)
    d = cands[a.config]
    g, cfg, _ = F._cfg_sim(wl, d, hw)
    k = int(d["streams_per_stage"])
    plan = build_launch_plan(g, cfg, wl.batch, k)
    meas = map_activities(plan, raw["activities"], raw["op_activities"], k)
    sim = simulate(g, cfg, hw, ContentionModel(calibration=setup.calibration, **params),
                   cache=setup.cache)
    simv = sim_intervals(sim)
    path = a.out + ".json"
    with open(path, "w") as fh:
        json.dump(trace_document([("measured (GPU, one graph replay)", meas, g),
                                  ("simulated (event simulator)", simv, g)]), fh)
    with open(path, "rb") as src, gzip.open(path + ".gz", "wb") as dst:
        dst.write(src.read())
    os.remove(path)
    out = {"workload": a.workload, "config": a.config, "activities": a.activities,
           "launches_mapped": len(meas),
           "launches": sum(len(t.kernels) for t in plan.tasks),
           "profiled_makespan_us": max(r["end_us"] for r in meas) - min(r["start_us"] for r in meas),
           "simulated_makespan_us": float(sim.makespan),
           "stages_measured": stage_busy(meas, cfg.D), "stages_simulated": stage_busy(simv, cfg.D),
           "category_measured_us": category_residence(meas, g),
           "category_simulated_us": {c: float(v) for c, v in sim.category_time.items()}}
    with open(a.out + ".summary.json", "w") as fh:
        json.dump(out, fh, indent=1)
    for s_m, s_s in zip(out["stages_measured"], out["stages_simulated"]):
        print(f"stage {s_m['stage']}: busy measured {s_m['busy_us']:9.0f} µs of "
              f"{s_m['span_us']:9.0f}, simulated {s_s['busy_us']:9.0f} of {s_s['span_us']:9.0f}")
    print(f"wrote {path}.gz and {a.out}.summary.json ({out['launches_mapped']} of "
          f"{out['launches']} launches mapped)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
