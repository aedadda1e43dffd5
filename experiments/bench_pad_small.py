"""Benchmark: grid points of the frontier studies with the cheap estimator's small batches padded
to its chunk (``VContentionEvaluator(pad_small=True)``, the CPU default) vs bucketed batch sizes
(``pad_small=False``, the earlier behaviour), in the same run.

A search scores a handful of allocations per call of the cheap estimator (the pairwise line,
the seeds), so with bucketed sizes every lane structure is compiled once per size bucket (8,
16, 32, 64 allocations); padded to the chunk of 64 (about 2 ms of scoring on the CPU) it is
compiled once. Each point runs in a fresh process (cold JAX caches, no persistent compilation
cache: what a worker of ``frontier_study.py`` pays for its first point of a structure), the two
modes taking turns; the records of both must be identical (same makespans, same choices).

Usage: PYTHONPATH=. python experiments/bench_pad_small.py [--out PATH] [--repeats N]
Writes experiments/results/bench_pad_small.json and prints a table (a few minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

#: (study, microbatches, stages, EP degree or None for the study's largest): points of the
#: frontier studies (experiments/frontier_study.py).
POINTS = (("gptoss120b_b200", 4, 3, 32), ("gptoss120b_b200", 8, 4, 32),
          ("gptoss20b_h200", 8, 2, 8), ("llama70b_h200", 4, 3, 1))

_CHILD = r"""
import json, sys, time
sys.path.insert(0, {root!r}); sys.path.insert(0, {exp!r})
import subgpu_jax.score.vcontention as vc
_init = vc.VContentionEvaluator.__init__
def init(self, *a, **k):
    k.setdefault("pad_small", {pad!r})
    _init(self, *a, **k)
vc.VContentionEvaluator.__init__ = init
from subgpu_jax import get_hardware, get_model
from subgpu_jax.app.sweep import build_grid
from subgpu_jax.app.searchjob import PointScorer
import frontier_study as fs
st = {{**fs.STUDIES[{study!r}], **fs.WIDE}}
arch, hw = get_model(st["model"]), get_hardware(st["hw"])
pts = build_grid(arch, st["gpus"], st["batches"], st["stages"], st["microbatches"],
                 kv_history=32768, parallelisms=fs.parallelisms(arch, st["gpus"], st["all_ep"]),
                 hw=hw)
cand = [p for p in fs.order_points(pts) if p.microbatches == {m} and p.D == {D}
        and p.deploy.moe_ep == {ep}]
p = cand[len(cand) // 2]
sc = PointScorer(arch, hw)
c0, t0 = time.process_time(), time.perf_counter()
recs = sc(p)
print(json.dumps({{"key": p.key, "cpu_s": time.process_time() - c0,
                   "wall_s": time.perf_counter() - t0,
                   "records": [[r.get("makespan_us"), r.get("sms"), r.get("cuts"),
                                r.get("microbatches"), r.get("cheap_evals"),
                                r.get("exact_calls")] for r in recs]}}))
"""


def one(study: str, m: int, D: int, ep: int, pad: bool) -> dict:
    """Score one grid point in a fresh process; returns its key, CPU and wall seconds, records.

    Raises:
        RuntimeError: the child failed (its last stderr line).
    """
    code = _CHILD.format(root=str(ROOT), exp=str(HERE), pad=pad, study=study, m=m, D=D, ep=ep)
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=1800)
    if r.returncode != 0:
        raise RuntimeError((r.stderr.strip().splitlines() or ["no output"])[-1])
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(HERE / "results" / "bench_pad_small.json"))
    ap.add_argument("--repeats", type=int, default=1, help="runs of each point and mode (>= 1)")
    a = ap.parse_args(argv)
    if a.repeats < 1:
        ap.error(f"--repeats must be >= 1, got {a.repeats}")
    out = Path(a.out)
    if out.is_dir() or not out.parent.is_dir():
        ap.error(f"--out: {a.out!r} must be a file path in an existing folder")
    rows = []
    for study, m, D, ep in POINTS:
        runs = {True: [], False: []}
        for _ in range(a.repeats):
            for pad in (False, True):   # turns: a shared machine's load hits both alike
                try:
                    runs[pad].append(one(study, m, D, ep, pad))
                except RuntimeError as e:
                    print(f"error: {study} m={m} D={D}: {e}", file=sys.stderr)
                    return 1
        b, p = runs[False], runs[True]
        row = {"study": study, "microbatches": m, "D": D, "ep": ep, "key": b[0]["key"],
               "bucketed_cpu_s": statistics.median(x["cpu_s"] for x in b),
               "padded_cpu_s": statistics.median(x["cpu_s"] for x in p),
               "bucketed_wall_s": statistics.median(x["wall_s"] for x in b),
               "padded_wall_s": statistics.median(x["wall_s"] for x in p),
               "same_records": all(x["records"] == b[0]["records"] for x in b + p)}
        row["cpu_ratio"] = row["bucketed_cpu_s"] / row["padded_cpu_s"]
        rows.append(row)
        print(f"{study:16s} m={m:2d} D={D} EP{ep:<3d} bucketed {row['bucketed_cpu_s']:6.1f} "
              f"CPU-s, padded {row['padded_cpu_s']:6.1f} CPU-s: {row['cpu_ratio']:.2f}x, same "
              f"records: {row['same_records']}", flush=True)
    res = {"repeats": a.repeats, "cpu_count": os.cpu_count(),
           "load_avg": list(os.getloadavg()), "rows": rows,
           "cpu_ratio_median": statistics.median(r["cpu_ratio"] for r in rows)}
    out.write_text(json.dumps(res, indent=1))
    print(f"median {res['cpu_ratio_median']:.2f}x less CPU per point; wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
