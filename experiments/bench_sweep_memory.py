"""Peak memory of a search sweep vs the number of deployments: caches freed between deployments.

A sweep visits its grid deployment by deployment (outer parallelism x global batch). Every
deployment used to leave its ``Problem`` (graphs, evaluators), simulation summaries and JAX's
compiled executables behind, about 20-50 MiB each. ``PointScorer.release`` now frees them when
the sweep moves to the next deployment (``run_sweep(on_new_deployment=...)``).

For each mode a fresh subprocess runs ``run_search`` (event scorer, gpt-oss-120b on 32x B200,
``--all-parallelisms``-like grid over ``--tps`` x ``--batches``, stages ``--stages``, microbatches
``--microbatches``) and reports, after each deployment, its peak RSS
(``resource.getrusage(RUSAGE_SELF).ru_maxrss``), its current RSS (``/proc/self/statm``) and the
seconds so far:

* ``keep``: nothing freed (the behaviour before this change),
* ``release``: ``PointScorer.release`` with ``--budget-mib`` as ``JAX_CACHE_BUDGET_MIB`` (JAX's
  compile caches are cleared when the resident memory grew by more than that since the last
  clear; the default run uses a budget below the class default so that a short benchmark shows
  several clears),
* ``every``: ``release`` with a budget of 0 (JAX caches cleared at every deployment).

The table gives the RSS growth per deployment (least-squares slope of current RSS over the
deployments after the first two), the peak RSS and the wall time of each mode as a ratio to
``keep`` (all modes in one run, on one machine).

Usage: python experiments/bench_sweep_memory.py [--tps 4,8] [--batches 256,512,1024,2048]
    [--stages 2,3,4] [--microbatches 1,2,4] [--budget-mib 64] [--modes keep,release,every]
    [--exact event] [--out PATH]
(the committed result: the defaults with ``--modes keep,release``; ``every`` costs 2.3x the time
of ``keep`` on such a grid)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

CHILD = r"""
import json, os, resource, sys, tempfile, time
sys.path.insert(0, sys.argv[1])
from subgpu_jax.app import searchjob, sweep
from subgpu_jax import get_hardware, get_model
a = json.loads(sys.argv[2])
arch, hw = get_model("gpt-oss-120b"), get_hardware("B200")
pars = [(t, 32 // t, 32) for t in a["tps"]]
pts = sweep.build_grid(arch, 32, a["batches"], a["stages"], a["microbatches"], hw=hw,
                       parallelisms=pars)
rows, t0, page = [], time.perf_counter(), os.sysconf("SC_PAGE_SIZE")
def rss():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * page / 2**20
orig = searchjob.PointScorer.release
searchjob.PointScorer.JAX_CACHE_BUDGET_MIB = 0.0 if a["mode"] == "every" else a["budget_mib"]
clears = [0]
def release(self, dep):
    rows.append({"deployment": len(rows) + 1, "key": f"tp{dep.attn_tp}-G{dep.global_batch}",
                 "rss_MiB": rss(), "seconds": time.perf_counter() - t0,
                 "max_rss_MiB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                 "jax_cache_clears": clears[0]})
    if a["mode"] != "keep":
        orig(self, dep)
        clears[0] = self.cache_clears
searchjob.PointScorer.release = release
with tempfile.TemporaryDirectory() as d:
    meta = {"bench": "sweep_memory", **a}
    stats, _ = searchjob.run_search(arch, hw, pts, d, meta, exact=a["exact"], progress=False)
rows.append({"deployment": len(rows) + 1, "key": "end", "rss_MiB": rss(),
             "seconds": time.perf_counter() - t0,
             "max_rss_MiB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
             "jax_cache_clears": clears[0]})
print(json.dumps({"mode": a["mode"], "points": len(pts), "rows": rows,
                  "evaluated": stats["evaluated"]}))
"""


def _slope(ys: list[float]) -> float:
    n = len(ys)
    if n < 2:
        return 0.0
    mx, my = (n - 1) / 2, sum(ys) / n
    return sum((i - mx) * (y - my) for i, y in enumerate(ys)) / sum((i - mx) ** 2
                                                                   for i in range(n))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tps", default="4,8", help="attention TP degrees (DP = 32 / TP)")
    ap.add_argument("--batches", default="256,512,1024,2048")
    ap.add_argument("--stages", default="2,3,4")
    ap.add_argument("--microbatches", default="1,2,4")
    ap.add_argument("--budget-mib", type=float, default=64.0,
                    help="JAX_CACHE_BUDGET_MIB of the release mode (MiB)")
    ap.add_argument("--exact", default="event", choices=("event", "static"))
    ap.add_argument("--modes", default="keep,release,every")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "bench_sweep_memory.json"))
    a = ap.parse_args()
    ints = lambda s: [int(x) for x in s.split(",")]  # noqa: E731
    args = {"tps": ints(a.tps), "batches": ints(a.batches), "stages": ints(a.stages),
            "microbatches": ints(a.microbatches), "exact": a.exact,
            "budget_mib": a.budget_mib}
    runs = []
    for mode in a.modes.split(","):
        p = subprocess.run([sys.executable, "-c", CHILD, ROOT, json.dumps(dict(args, mode=mode))],
                           capture_output=True, text=True, cwd=ROOT)
        if p.returncode:
            raise SystemExit(p.stderr[-3000:])
        run = json.loads(p.stdout.strip().splitlines()[-1])
        rss = [r["rss_MiB"] for r in run["rows"]]
        run["growth_MiB_per_deployment"] = _slope(rss[2:])
        run["peak_rss_MiB"] = max(r["max_rss_MiB"] for r in run["rows"])
        run["seconds"] = run["rows"][-1]["seconds"]
        runs.append(run)
    base = runs[0]["seconds"]
    print(f"{'mode':>8s}{'points':>8s}{'deploys':>9s}{'clears':>8s}{'peak RSS MiB':>14s}"
          f"{'MiB/deploy':>12s}{'seconds':>10s}{'time ratio':>12s}")
    for r in runs:
        r["time_ratio_vs_keep"] = r["seconds"] / base
        print(f"{r['mode']:>8s}{r['points']:>8d}{len(r['rows']) - 1:>9d}"
              f"{r['rows'][-1]['jax_cache_clears']:>8d}"
              f"{r['peak_rss_MiB']:>14.1f}{r['growth_MiB_per_deployment']:>12.2f}"
              f"{r['seconds']:>10.1f}{r['time_ratio_vs_keep']:>12.2f}")
    for r in runs:
        print(f"{r['mode']}: RSS MiB after each deployment: "
              + " ".join(f"{x['rss_MiB']:.0f}" for x in r["rows"]))
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as fh:
        json.dump({"args": args, "runs": runs}, fh, indent=2)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
