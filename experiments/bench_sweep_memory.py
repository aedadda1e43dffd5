"""Resident memory of a search sweep over 100+ grid points of ONE deployment, default scorer.

The default scorer of ``subgpu search`` is the event simulator (exact) with the contention-aware
vectorised cheap estimator (``ContentionEstimator``). Before docs/reliability.md's bounded
caches, every grid point left ~10 MiB per cheap estimator (tens per point) in
``Problem._evs`` and its compiled batch kernels in JAX's caches, so memory grew by 200-300 MiB
per grid point until the sweep left the deployment.

A fresh subprocess runs ``searchrun.run_search`` on the grid below (one deployment: one model,
GPU count, parallelism and global batch; every stage count x microbatch count x dispatch policy
x streams per stage) and records, after each grid point is stored (``SweepStore.add``), its
resident memory (``/proc/self/statm``), its peak so far (``ru_maxrss``) and the seconds so far.

Modes:

* ``bounded``: this checkout (bounded caches: ``model.lru.ByteLRU`` of cheap estimators,
  ``score.programs.ProgramCache`` of compiled programs, each grid point's leftovers freed once
  it is stored);
The grid points run in a fixed random order (``--order shuffled``, seed 0) so that the sizes
of the structures (task DAGs: larger with m, D and k) are a stationary mix along the sweep; in
grid order (``--order grid``) they grow along it, and so does the memory of the bounded caches
(their few entries become larger), which is not growth per point.

* ``before``: the same script against another source tree (``--before-root``, e.g. ``git
  archive`` of the commit before the change), stopped after ``--before-points`` grid points
  (its memory grows without bound: the full grid would need tens of GiB).

Summary per mode: peak RSS, and the growth per grid point after warm-up: the least-squares
slope of the RSS after each point over the points after the first ``--warmup``; and the spread
(max - min) of those RSS values. Writes ``--out`` (JSON) and a PNG of RSS against grid points
beside it.

Usage: python experiments/bench_sweep_memory.py [--model gpt-oss-20b] [--hardware H200]
    [--gpus 1] [--batch 48] [--stages 2,3,4,5,6,7,8] [--microbatches 1,2,3,4]
    [--streams 1,2] [--warmup 20] [--order shuffled] [--modes bounded,before] [--before-root DIR]
    [--before-points 12] [--out PATH]
(the committed result: the defaults, ``--before-root`` an archive of main at 189dee4; runs of
modes not named in ``--modes`` are kept from an existing ``--out`` of the same grid)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from subgpu_jax.app.store import atomic_write  # noqa: E402  (fsync-ed write and rename)
from subgpu_jax.score.programs import JAX_CACHE_CLEAR_EVERY  # noqa: E402  (the release cycle)

CHILD = r"""
import json, os, resource, sys, tempfile, time
sys.path.insert(0, sys.argv[1])
from subgpu_jax.app import searchjob, searchrun, store, sweep
from subgpu_jax import get_hardware, get_model
a = json.loads(sys.argv[2])
arch, hw = get_model(a["model"]), get_hardware(a["hardware"])
pars = [sweep.outer_parallelisms(arch, a["gpus"])[-1]]
pts = sweep.build_grid(arch, a["gpus"], [a["batch"]], a["stages"], a["microbatches"],
                       ("wavefront", "layer_major"), hw=hw, parallelisms=pars,
                       streams=a["streams"])
if a["order"] == "shuffled":  # a stationary mix of structure sizes along the sweep
    import random
    random.Random(0).shuffle(pts)
rows, t0, page = [], time.perf_counter(), os.sysconf("SC_PAGE_SIZE")
def rss():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * page / 2**20
orig = store.SweepStore.add
def add(self, key, recs):
    orig(self, key, recs)
    rows.append({"point": len(rows) + 1, "key": key, "rss_MiB": rss(),
                 "max_rss_MiB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                 "seconds": time.perf_counter() - t0})
    print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
store.SweepStore.add = add
with tempfile.TemporaryDirectory() as d:
    meta = {"bench": "sweep_memory", **a}
    stats, _ = searchrun.run_search(arch, hw, pts, d, meta, searchjob.SearchOptions(
        progress=False, budget=a.get("max_points")))
print(json.dumps({"mode": a["mode"], "grid_points": len(pts), "deployments": 1,
                  "deployment": pts[0].key.rsplit("-D", 1)[0], "rows": rows,
                  "evaluated": stats["evaluated"]}))
"""


def slope(ys: list[float]) -> float:
    """Least-squares slope of ``ys`` over their index (0 for fewer than 2 values)."""
    n = len(ys)
    if n < 2:
        return 0.0
    mx, my = (n - 1) / 2, sum(ys) / n
    return sum((i - mx) * (y - my) for i, y in enumerate(ys)) / sum((i - mx) ** 2
                                                                   for i in range(n))


def floors(rss: list[float], cycle: int) -> list[float]:
    """The lowest RSS of each release cycle: consecutive windows of ``cycle`` grid points (the
    search releases its compiled programs every ``cycle`` points, so the RSS is a sawtooth of
    that period whose height depends on which structures the window compiled; its floor is
    what every cycle keeps). The last, partial window is left out."""
    return [min(rss[i:i + cycle]) for i in range(0, len(rss) - cycle + 1, cycle)]


def summarise(run: dict, warmup: int, cycle: int = 16) -> dict:
    """Peak RSS, growth per point after ``warmup`` points (slope, MiB/point) and spread; the
    floor of each release cycle of ``cycle`` points (``floors``) and its growth per point (the
    slope over the cycles after the warm-up, divided by ``cycle``)."""
    rss = [r["rss_MiB"] for r in run["rows"]]
    after = rss[warmup:]
    fl = floors(rss, cycle)
    skip = -(-warmup // cycle)           # cycles that overlap the warm-up
    fl_after = fl[skip:]
    return {"release_cycle_points": cycle, "floor_rss_MiB_by_cycle": fl,
            "floor_growth_MiB_per_point": (slope(fl_after) / cycle
                                           if len(fl_after) >= 2 else None),
            "peak_rss_MiB": max(r["max_rss_MiB"] for r in run["rows"]),
            "final_rss_MiB": rss[-1],
            "growth_MiB_per_point": slope(after) if len(after) >= 2 else None,
            "growth_MiB_per_point_all": slope(rss),
            "spread_after_warmup_MiB": (max(after) - min(after)) if after else None,
            "points": len(rss), "seconds": run["rows"][-1]["seconds"]}


def plot(runs: list[dict], path: str, warmup: int) -> None:
    """RSS after each grid point (and the peak so far) of every mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from subgpu_jax.app.viz import save_figure

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for r in runs:
        x = [row["point"] for row in r["rows"]]
        ax.plot(x, [row["rss_MiB"] / 1024 for row in r["rows"]], label=f"{r['mode']}: RSS")
        ax.plot(x, [row["max_rss_MiB"] / 1024 for row in r["rows"]], ls=":",
                label=f"{r['mode']}: peak so far")
    ax.axhline(2.0, color="k", lw=0.8, ls="--", label="2 GiB")
    ax.axvline(warmup + 0.5, color="gray", lw=0.8, ls="-.", label="end of warm-up")
    ax.set_xlabel("grid points stored (one deployment)")
    ax.set_ylabel("resident memory (GiB)")
    ax.set_title(f"search sweep, default scorer: {runs[0]['deployment']}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    plt.close(fig)


def _commit(root: str) -> str:
    """`` (commit <hash>)`` of a git checkout at ``root``, else ``""``."""
    p = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    return f" (commit {p.stdout.strip()})" if p.returncode == 0 and p.stdout.strip() else ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gpt-oss-20b")
    ap.add_argument("--hardware", default="H200")
    ap.add_argument("--gpus", type=int, default=1)
    ap.add_argument("--batch", type=int, default=48, help="global batch G of the deployment")
    ap.add_argument("--stages", default="2,3,4,5,6,7,8")
    ap.add_argument("--microbatches", default="1,2,3,4")
    ap.add_argument("--streams", default="1,2", help="streams per stage k")
    ap.add_argument("--warmup", type=int, default=20, help="grid points of warm-up")
    ap.add_argument("--order", default="shuffled", choices=("shuffled", "grid"))
    ap.add_argument("--modes", default="bounded,before")
    ap.add_argument("--before-root", default=None,
                    help="source tree of the 'before' mode (e.g. git archive of main)")
    ap.add_argument("--before-points", type=int, default=12,
                    help="grid points the 'before' mode runs (its memory grows without bound)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "bench_sweep_memory.json"))
    a = ap.parse_args()
    ints = lambda s: [int(x) for x in s.split(",")]  # noqa: E731
    args = {"model": a.model, "hardware": a.hardware, "gpus": a.gpus, "batch": a.batch,
            "stages": ints(a.stages), "microbatches": ints(a.microbatches),
            "streams": ints(a.streams), "order": a.order}
    modes = a.modes.split(",")
    # runs of other modes already in --out for the same grid are kept (with their own source),
    # so that one mode can be measured again without the others
    runs = []
    if os.path.exists(a.out):
        try:
            old = json.load(open(a.out))
        except (OSError, ValueError) as e:
            raise SystemExit(f"error: --out {a.out!r} exists but is not readable JSON ({e})")
        if old.get("args") == args:
            runs = [r for r in old.get("runs", []) if r.get("mode") not in modes]
    for mode in modes:
        root, extra = ROOT, {}
        if mode == "before":
            if not a.before_root:
                raise SystemExit("error: --before-root is needed for the before mode")
            root, extra = os.path.abspath(a.before_root), {"max_points": a.before_points}
        p = subprocess.run([sys.executable, "-c", CHILD, root,
                            json.dumps(dict(args, mode=mode, **extra))],
                           stdout=subprocess.PIPE, text=True, cwd=ROOT)
        if p.returncode:
            raise SystemExit(f"error: the {mode} run failed (exit {p.returncode})")
        run = json.loads(p.stdout.strip().splitlines()[-1])
        # never a path of the machine: which tree ran, and its commit when it is a checkout
        run["source"] = ("this checkout" if mode != "before" else "the --before-root tree") + \
            _commit(root)
        run.update(summarise(run, a.warmup, JAX_CACHE_CLEAR_EVERY))
        runs.append(run)
        runs.sort(key=lambda r: r["mode"] != "bounded")
        os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
        atomic_write(a.out, json.dumps({"args": args, "warmup_points": a.warmup, "runs": runs},
                                    indent=1))  # written as it goes: after each mode
    print(f"{'mode':>8s}{'points':>8s}{'peak RSS MiB':>14s}{'MiB/point':>11s}"
          f"{'floor MiB/pt':>13s}{'spread MiB':>12s}{'seconds':>10s}")
    nan = float("nan")
    for r in runs:
        g, fg = r["growth_MiB_per_point"], r.get("floor_growth_MiB_per_point")
        sp = r["spread_after_warmup_MiB"]
        print(f"{r['mode']:>8s}{r['points']:>8d}{r['peak_rss_MiB']:>14.1f}"
              f"{(g if g is not None else nan):>11.2f}{(fg if fg is not None else nan):>13.2f}"
              f"{(sp if sp is not None else nan):>12.1f}{r['seconds']:>10.1f}")
    plot(runs, os.path.splitext(a.out)[0] + ".png", a.warmup)
    print(f"wrote {a.out} and {os.path.splitext(a.out)[0]}.png")


if __name__ == "__main__":
    main()
