"""Back-to-back replays vs one replay, with and without lane priorities (H200; docs/fidelity.md).

With the fused elementwise kernels, layouts with as many microbatches as streams per stage
(m = k = 2: each lane of a stage holds one microbatch) measured far slower in timed, back-to-back
graph replays than in one profiled replay (llama-3.1-70b G=1,024, layer split 48/80: 76.2 vs
54.8 ms, ``experiments/results/hw_wins/fused/runs``). This script measures, per configuration
and with ``GreenPartition(lane_priority=False/True)``:

- ``timed_us``: ``Executor.measure`` (rounds x replays back to back, spin-gated start);
- ``single_us``: the same with one replay per round (each round starts from an idle GPU);
- ``profiled_span_us``: the span of 1 and of 4 profiled replays (per replay).

Usage (GPU): PYTHONPATH=. python experiments/hw_lockstep_h200.py --out DIR
Writes DIR/lockstep.json. Units: µs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

import hw_fidelity_h200 as F  # noqa: E402
import hw_wins_h200 as W  # noqa: E402

DEFAULT = {"llama70b_tp8_g1024": ["layer_split_48_80_m2_k2", "layer_split_32_96_m4_k2",
                                  "layer_split_48_80_m2_k1"]}


def _span(acts) -> float:
    return max(a["start_us"] + a["dur_us"] for a in acts) - min(a["start_us"] for a in acts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--workload", default="llama70b_tp8_g1024", choices=list(F.WORKLOADS))
    ap.add_argument("--configs", nargs="+", default=None,
                    help="candidate names of hw_wins_h200.candidates (default: three layer splits)")
    ap.add_argument("--gemm", default="tuned", choices=("stock", "pool", "tuned"))
    ap.add_argument("--elementwise", default="triton", choices=("auto", "triton", "torch"))
    a = ap.parse_args()
    from hw_runtime.gpu.executor import Executor
    from hw_runtime.gpu.profile import profile_replays

    F.ELEMENTWISE = a.elementwise
    os.makedirs(a.out, exist_ok=True)
    names = a.configs or DEFAULT.get(a.workload)
    if not names:
        ap.error(f"--configs: no default for {a.workload}; name candidates")
    wl = F.sim_workload(a.workload)
    cands = {d["name"]: d for d in W.candidates(a.workload)}
    bad = [n for n in names if n not in cands]
    if bad:
        ap.error(f"--configs: unknown {bad}")
    base = F._torch_workload(wl, 1)
    ex = Executor(base, gemm=a.gemm)
    t0 = time.time()
    out = {"workload": a.workload, "gemm": a.gemm, "elementwise": base.elementwise, "rows": []}
    tcfg = ex.temporal_config()
    out["temporal_timed_us"] = ex.measure(tcfg, "temporal", 2, 10, step=False).makespan_us
    for n in names:
        d = cands[n]
        cfg = F.cfg_from_json(wl, d)
        k = int(d["streams_per_stage"])
        for prio in (False, True):
            ex.lane_priority = "on" if prio else "off"
            timed = ex.measure(cfg, "green", 2, 10, step=False, streams_per_stage=k)
            single = ex.measure(cfg, "green", 6, 1, step=False, streams_per_stage=k)
            p1 = profile_replays(ex, cfg, "green", replays=1, streams_per_stage=k)
            p4 = profile_replays(ex, cfg, "green", replays=4, streams_per_stage=k)
            row = {"name": n, "lane_priority": prio, "timed_us": timed.makespan_us,
                   "timed_spread": timed.spread, "single_us": single.makespan_us,
                   "single_rounds_us": single.round_medians_us,
                   "profiled_span_1_us": _span(p1["activities"]),
                   "profiled_span_4_per_replay_us": _span(p4["activities"]) / 4}
            out["rows"].append(row)
            print(f"{n:28s} priority={prio!s:5s} timed {row['timed_us']:9.0f} single "
                  f"{row['single_us']:9.0f} profiled 1: {row['profiled_span_1_us']:9.0f} "
                  f"4: {row['profiled_span_4_per_replay_us']:9.0f} µs ({time.time() - t0:.0f} s)",
                  flush=True)
            with open(os.path.join(a.out, "lockstep.json"), "w") as fh:
                json.dump(out, fh, indent=1)
    ex.lane_priority = "auto"
    return 0


if __name__ == "__main__":
    sys.exit(main())
