"""The screened timer beside the event simulator, in one run (issue 42: the exact steps as
batched calls, the event simulator the reference).

``--exact screened`` (``score.timer.ScreenedTimer``) searches with the vectorised contention
scorer (batched JAX) and re-simulates each grid point's best few configurations with the event
simulator (``search.algorithm1``'s ``confirm``): its records' makespans are the event
simulator's, only the choice can differ. This benchmark runs the same grid points with
``--exact event`` (the baseline, the default) and with ``--exact screened``, each in a fresh
process (first one untimed run of each, which fills JAX's persistent compile cache as a user's
first run does; then ``--repeat`` timed runs in turn, medians reported), and reports:

* the search's wall seconds (``run_search``'s own time) and the process's CPU seconds, and the
  ratios event / screened;
* the agreement of the choice, per SubGPU grid point: the screened record's makespan over the
  event search's (both event-simulator numbers; > 1: the screen's choice is slower), its
  median and maximum, the points above ``TOL`` (0.5%, issue 42's target), and whether each
  SubGPU frontier (per-GPU vs per-user throughput) holds the same grid points;
* the event-simulator calls of each (``exact_calls`` of the event search, ``confirm_calls`` of
  the screened one) and the screen's error on the chosen configurations (``screen_region_us``
  over the event simulator's).

Jobs (``--jobs``): ``main``, the README's main job (``subgpu search`` on its defaults, 15 grid
points); ``frontier``, a deterministic sample of a frontier study's grid
(``experiments/frontier_study.py``, ``--study``; every ``len // --points``-th SubGPU point of the
study order, with the temporal points of their deployments).

``--compare EVENT_DIR SCREENED_DIR`` compares two finished results folders instead (e.g. a whole
frontier study run by ``frontier_study.py --exact event`` and ``--exact screened``): the
agreement above, no timing.

Usage: python experiments/bench_screened.py [--jobs main frontier] [--study S] [--points N]
       [--workers W] [--repeat N] [--out JSON]
       python experiments/bench_screened.py --compare EVENT_DIR SCREENED_DIR --out JSON
Writes experiments/results/bench_screened_cpu.json by default (a table on stdout).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
#: Issue 42's agreement target: a point's makespan within 0.5% of the event-simulator search's.
TOL = 0.005
TIMERS_RUN = ("event", "screened")
#: The variants ``--variants`` can run: the two timers, and ``python``: ``--exact event`` with
#: ``NUMBA_DISABLE_JIT=1``, where the event timer times every configuration in the Python
#: simulator (``EventTimer``'s ``python`` engine): the path before the compiled engine.
VARIANTS = TIMERS_RUN + ("python",)


def frontier_points(study: str, n: int):
    """The sample of ``study``'s grid (``frontier_study.STUDIES``, the wide grid): every
    ``len // n``-th SubGPU point of the study order (at most ``n``) and the temporal points of
    their deployments, in study order. Returns (arch, hw, points)."""
    sys.path.insert(0, HERE)
    import frontier_study as fs
    from subgpu_jax import get_hardware, get_model
    from subgpu_jax.app.sweep import build_grid

    st = {**fs.STUDIES[study], **fs.WIDE}
    arch, hw = get_model(st["model"]), get_hardware(st["hw"])
    pts = fs.order_points(build_grid(arch, st["gpus"], st["batches"], st["stages"],
                                     st["microbatches"], kv_history=32768,
                                     parallelisms=fs.parallelisms(arch, st["gpus"], st["all_ep"]),
                                     hw=hw))
    sub = [p for p in pts if p.D > 1]
    step = max(1, len(sub) // n)
    pick = sub[::step][:n]
    deps = {p.deploy for p in pick}
    keys = {p.key for p in pick} | {p.key for p in pts if p.D == 1 and p.deploy in deps}
    return arch, hw, [p for p in pts if p.key in keys]


def child(a) -> int:
    """One variant in this process: the job's search with ``a.timer`` into ``a.folder``; prints
    one JSON line ``{"search_s": ...}``."""
    if a.job == "main":
        from subgpu_jax.app.cli import main

        t0 = time.perf_counter()
        rc = main(["search", "--out", a.folder, "--exact", a.timer, "--workers", str(a.workers),
                   "--no-progress", "--overwrite"])
        print(json.dumps({"search_s": time.perf_counter() - t0, "rc": rc}))
        return rc
    from subgpu_jax.app.searchjob import SearchOptions
    from subgpu_jax.app.searchrun import run_search
    from subgpu_jax.model.setup import GpuSetup
    from subgpu_jax.score.timer import timer_for

    arch, hw, pts = frontier_points(a.study, a.points)
    timer = timer_for(GpuSetup.uncalibrated(hw), a.timer)
    t0 = time.perf_counter()
    run_search(arch, hw, pts, a.folder, {"bench": "screened", "study": a.study},
               SearchOptions(timer=timer, progress=False, overwrite=True, workers=a.workers))
    print(json.dumps({"search_s": time.perf_counter() - t0, "rc": 0, "points": len(pts)}))
    return 0


def run_variant(job: str, timer: str, folder: str, a) -> dict:
    """Run one variant in a fresh process; its wall, CPU and search seconds."""
    env = dict(os.environ)
    if timer == "python":   # the event timer on the Python simulator (VARIANTS)
        timer, env["NUMBA_DISABLE_JIT"] = "event", "1"
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--job", job, "--timer", timer,
           "--folder", folder, "--workers", str(a.workers), "--study", a.study,
           "--points", str(a.points), "--repeat", "1"]
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise SystemExit(f"{job}/{timer} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    out = json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("{")][-1])
    return {"search_s": round(out["search_s"], 2), "wall_s": round(wall, 2),
            "cpu_s": round((r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime), 2)}


def load(folder: str) -> dict:
    """SubGPU and temporal records of a results folder by grid key."""
    with open(os.path.join(folder, "records.csv")) as fh:
        return {r["grid_key"]: r for r in csv.DictReader(fh)}


def front_keys(recs: dict) -> set:
    """Grid keys of the SubGPU frontier (``search.pareto``: max per-user and per-GPU)."""
    import numpy as np
    from subgpu_jax.search.pareto import pareto_front

    sub = [r for r in recs.values() if r["mode"] == "subgpu"]
    pts = np.array([[float(r["per_user_tok_s"]), float(r["per_gpu_tok_s"])] for r in sub])
    return {sub[i]["grid_key"] for i in pareto_front(pts)} if sub else set()


def agreement(ev: dict, sc: dict) -> dict:
    """The records of a search (``sc``: the screened one, or the compiled engine's) against a
    reference search's (``ev``: the event search, or the Python simulator's), see the module
    docstring; the screen's own fields (``screen_region_us``, ``confirm_calls``) only where
    ``sc``'s records have them."""
    keys = sorted(k for k, r in ev.items() if r["mode"] == "subgpu" and k in sc)
    missing = sorted(k for k, r in ev.items() if r["mode"] == "subgpu" and k not in sc)
    ratio = [float(sc[k]["region_makespan_us"]) / float(ev[k]["region_makespan_us"]) - 1
             for k in keys]
    fe, fs_ = front_keys(ev), front_keys(sc)
    out = {"points": len(keys), "missing_in_screened": missing,
           "makespan_vs_event_median": statistics.median(ratio),
           "makespan_vs_event_max": max(ratio), "makespan_vs_event_min": min(ratio),
           "points_over_tol": sum(x > TOL for x in ratio), "tol": TOL,
           "same_choice": sum(ev[k]["cuts"] == sc[k]["cuts"] and ev[k]["sms"] == sc[k]["sms"]
                              for k in keys),
           "frontier_same_points": fe == fs_, "frontier_event": len(fe),
           "frontier_screened": len(fs_), "frontier_common": len(fe & fs_),
           "event_calls_event_search": sum(int(ev[k]["exact_calls"]) for k in keys)}
    if keys and sc[keys[0]].get("screen_region_us") not in (None, ""):
        screen_err = [abs(float(sc[k]["screen_region_us"])
                          / float(sc[k]["region_makespan_us"]) - 1) for k in keys]
        out.update({"event_calls_screened": sum(int(sc[k]["confirm_calls"]) for k in keys),
                    "screen_abs_error_median": statistics.median(screen_err),
                    "screen_abs_error_max": max(screen_err)})
    out["rows"] = [{"grid_key": k, "ratio": round(x, 6), "event": [ev[k]["cuts"], ev[k]["sms"]],
                    "screened": [sc[k]["cuts"], sc[k]["sms"]]} for k, x in zip(keys, ratio)]
    return out


def _pair(row: dict, tmp: str, job: str, slow: str, fast: str, key: str) -> dict:
    """``row``'s ratios ``slow`` / ``fast`` of search and CPU seconds, and under ``key`` the
    agreement of ``fast``'s records with ``slow``'s (the reference: the event search against
    the screened one, the Python simulator's against the compiled engine's); returns it."""
    for what in ("search", "cpu"):
        row[f"{what}_ratio_{slow}_over_{fast}"] = round(
            row[slow][f"{what}_s"] / row[fast][f"{what}_s"], 3)
    row[key] = agreement(load(os.path.join(tmp, f"{job}_{slow}")),
                         load(os.path.join(tmp, f"{job}_{fast}")))
    return row[key]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", nargs="+", choices=("main", "frontier"), default=["main"])
    ap.add_argument("--study", default="gptoss120b_b200",
                    choices=("gptoss120b_b200", "gptoss20b_h200", "llama70b_h200"))
    ap.add_argument("--points", type=int, default=24,
                    help="SubGPU grid points of the frontier sample (default 24)")
    ap.add_argument("--workers", type=int, default=1, help="worker processes of every search")
    ap.add_argument("--repeat", type=int, default=1,
                    help="timed runs of each variant, in turn, after one untimed run of each "
                         "that fills the compile cache (medians reported; default 1)")
    ap.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(TIMERS_RUN),
                    help="what runs: event (the baseline and the reference, always run), "
                         "screened, python (event on the Python simulator: the path before "
                         "the compiled engine); default event screened")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "bench_screened_cpu.json"))
    ap.add_argument("--compare", nargs=2, metavar=("EVENT_DIR", "SCREENED_DIR"), default=None,
                    help="compare two finished results folders (records.csv) instead")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--job", default="main", help=argparse.SUPPRESS)
    ap.add_argument("--timer", default="event", help=argparse.SUPPRESS)
    ap.add_argument("--folder", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    for name, v in (("--points", a.points), ("--workers", a.workers), ("--repeat", a.repeat)):
        if v < 1:
            ap.error(f"{name} must be an integer >= 1, got {v}")
    if a.child:
        return child(a)
    from subgpu_jax.model.checks import out_file

    try:
        out_file(a.out, "--out")
    except ValueError as e:
        ap.error(str(e))
    if a.compare:
        for d in a.compare:
            if not os.path.isfile(os.path.join(d, "records.csv")):
                ap.error(f"--compare: {d} holds no records.csv")
        g = agreement(load(a.compare[0]), load(a.compare[1]))
        with open(a.out, "w") as fh:
            json.dump({"what": "bench_screened --compare: the records of a screened search "
                               "against an event search's (issue 42)",
                       "event": a.compare[0], "screened": a.compare[1],
                       "date": time.strftime("%Y-%m-%d"), "agreement": g}, fh, indent=1)
        print(f"makespan screened/event - 1: median {g['makespan_vs_event_median']:+.3%}, max "
              f"{g['makespan_vs_event_max']:+.3%}, min {g['makespan_vs_event_min']:+.3%} "
              f"({g['points_over_tol']} of {g['points']} over {TOL:.1%}); frontier same points: "
              f"{g['frontier_same_points']} ({g['frontier_common']} of {g['frontier_event']}); "
              f"event calls {g['event_calls_event_search']} -> {g['event_calls_screened']}; "
              f"wrote {a.out}")
        return 0
    import jax

    res = {"what": "bench_screened: --exact event beside --exact screened, each in a fresh "
                   "process, the same grid points (issue 42)",
           "date": time.strftime("%Y-%m-%d"), "workers": a.workers,
           "env": {"cpu_count": os.cpu_count(), "cores_usable": len(os.sched_getaffinity(0)),
                   "machine": platform.machine(), "python": platform.python_version(),
                   "jax_platform": os.environ.get("JAX_PLATFORMS") or jax.default_backend()},
           "jobs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for job in a.jobs:
            row = {"study": a.study, "sample_points": a.points} if job == "frontier" else {}
            runs = ["event"] + [v for v in a.variants if v != "event"]
            samples: dict = {t: [] for t in runs}
            for rep in range(a.repeat + 1):  # run 0 fills the compile cache, untimed
                for t in runs:
                    r = run_variant(job, t, os.path.join(tmp, f"{job}_{t}"), a)
                    print(f"{job:9s} {t:9s} {'warm-up' if rep == 0 else f'run {rep}':8s} "
                          f"search {r['search_s']:8.1f} s  CPU {r['cpu_s']:8.1f} s", flush=True)
                    if rep:
                        samples[t].append(r)
            for t in runs:
                row[t] = {k: statistics.median(x[k] for x in samples[t])
                          for k in ("search_s", "wall_s", "cpu_s")}
                row[t]["samples"] = samples[t]
            if "python" in runs:    # the compiled engine against the path before it
                g = _pair(row, tmp, job, "python", "event", "agreement_python")
                print(f"{job:9s} ratio python/event: search "
                      f"{row['search_ratio_python_over_event']}x, CPU "
                      f"{row['cpu_ratio_python_over_event']}x; makespan event/python - 1: max "
                      f"{g['makespan_vs_event_max']:+.2e}, min {g['makespan_vs_event_min']:+.2e}, "
                      f"same choice at {g['same_choice']} of {g['points']}; frontier same "
                      f"points: {g['frontier_same_points']}", flush=True)
            if "screened" in runs:
                g = _pair(row, tmp, job, "event", "screened", "agreement")
                print(f"{job:9s} ratio event/screened: search "
                      f"{row['search_ratio_event_over_screened']}x, CPU "
                      f"{row['cpu_ratio_event_over_screened']}x; makespan screened/event - 1: "
                      f"median {g['makespan_vs_event_median']:+.3%}, max "
                      f"{g['makespan_vs_event_max']:+.3%} ({g['points_over_tol']} of "
                      f"{g['points']} over {TOL:.1%}); frontier same points: "
                      f"{g['frontier_same_points']}; event calls "
                      f"{g['event_calls_event_search']} -> {g['event_calls_screened']}",
                      flush=True)
            res["jobs"][job] = row
            with open(a.out, "w") as fh:  # written as it goes
                json.dump(res, fh, indent=1)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
