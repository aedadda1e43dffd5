"""How well the static scorers predict k streams per stage (docs/method.md, "Streams per stage").

For gpt-oss-20b (reference deployment, H200, m = 4 microbatches), three cuts (the Macro cut with
w = 1, a 3-stage and a 4-stage chain cut) x four allocations x k = 1, 2, 3 streams per stage:
the makespan of the exact event simulator (contention model, LRU L2) against the two static
scorers that take k through the task DAG: the max-plus ``Evaluator`` (isolated durations on the
whole pool: the simulator with contention off) and the ``VContentionEvaluator`` (contention of
overlapping tasks of other lanes, but no SM sharing between the streams of a stage). Reports the
relative error per k (median and max |error|) and whether the scorer picks the simulator's best
allocation of each cut.

Usage: python experiments/streams_per_stage.py [--out PATH]
Writes experiments/results/streams_per_stage.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np

from subgpu_jax.model.graph import REFERENCE_DEPLOYMENT, build_graph
from subgpu_jax.model.hardware import get_hardware
from subgpu_jax.model.models import get_model
from subgpu_jax.score.evaluator import Evaluator
from subgpu_jax.score.vcontention import VContentionEvaluator
from subgpu_jax.sim.contention import ContentionModel
from subgpu_jax.sim.eventsim import simulate
from subgpu_jax.space.config import Config, cut_from_starts

HERE = Path(__file__).resolve().parent
CUTS = {"macro w=1": ([15, 16], 1, [(64, 64), (96, 32), (32, 96), (80, 48)]),
        "D=3 chain": ([9, 15], 0, [(48, 40, 40), (64, 32, 32), (32, 48, 48), (40, 48, 40)]),
        "D=4 chain": ([6, 12, 18], 0, [(32, 32, 32, 32), (48, 32, 24, 24), (24, 24, 40, 40),
                                       (40, 24, 32, 32)])}


def run(ks=(1, 2, 3), m: int = 4) -> dict:
    """All cases; returns a JSON-ready dict."""
    hw = get_hardware("H200")
    g = build_graph(get_model("gpt-oss-20b"), REFERENCE_DEPLOYMENT, m)
    R = REFERENCE_DEPLOYMENT.requests_per_gpu
    rows = []
    for name, (starts, w, allocs) in CUTS.items():
        seg = cut_from_starts(g.n, g.edges, starts)
        for k in ks:
            base = Config(D=len(allocs[0]), w=w, seg_of=seg, alloc=allocs[0],
                          microbatch=R // m, streams_per_stage=k)
            ev = Evaluator.for_config(g, base, hw)
            vc = VContentionEvaluator.for_config(g, base, hw, model=ContentionModel())
            A = np.array(allocs)
            t_ev, t_vc = ev.makespan(A), vc.makespan(A)
            for a, te, tv in zip(allocs, t_ev, t_vc):
                cfg = Config(D=len(a), w=w, seg_of=seg, alloc=a, microbatch=R // m,
                             streams_per_stage=k)
                ts = simulate(g, cfg, hw, ContentionModel(), "lru", record=False).makespan
                rows.append({"cut": name, "streams_per_stage": k, "alloc": list(a),
                             "sim_us": ts, "static_us": float(te), "vcontention_us": float(tv),
                             "static_err": float(te) / ts - 1, "vcontention_err": float(tv) / ts - 1})
    summary = {}
    for k in ks:
        rk = [r for r in rows if r["streams_per_stage"] == k]
        s = {}
        for sc in ("static", "vcontention"):
            e = [abs(r[f"{sc}_err"]) for r in rk]
            picks = 0
            for name in CUTS:
                rc = [r for r in rk if r["cut"] == name]
                best = min(rc, key=lambda r: r["sim_us"])
                pick = min(rc, key=lambda r: r[f"{sc}_us"])
                picks += pick is best
            s[sc] = {"median_abs_err": statistics.median(e), "max_abs_err": max(e),
                     "mean_signed_err": statistics.mean(r[f"{sc}_err"] for r in rk),
                     "best_allocation_found": f"{picks}/{len(CUTS)}"}
        summary[str(k)] = s
    return {"workload": "gpt-oss-20b, REFERENCE_DEPLOYMENT, H200", "microbatches": m,
            "exact": "event simulator, ContentionModel(), LRU", "rows": rows, "summary": summary}


def main(argv=None) -> None:
    """Command line entry point (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(HERE / "results" / "streams_per_stage.json"))
    a = ap.parse_args(argv)
    out = Path(a.out)
    if not out.parent.is_dir():
        ap.error(f"--out: directory {out.parent} does not exist")
    r = run()
    print(f"{'k':>2s} {'scorer':12s} {'median |err|':>12s} {'max |err|':>10s} {'mean err':>9s} "
          f"{'best alloc':>10s}")
    for k, s in r["summary"].items():
        for sc, x in s.items():
            print(f"{k:>2s} {sc:12s} {x['median_abs_err']:12.1%} {x['max_abs_err']:10.1%} "
                  f"{x['mean_signed_err']:+9.1%} {x['best_allocation_found']:>10s}")
    out.write_text(json.dumps(r, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
