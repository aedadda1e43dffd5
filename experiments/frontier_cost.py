"""Where a frontier study's CPU time goes, per program family (issue 42: the GPT-OSS 120B B200
study in 10 minutes on one H200 host).

A frontier study's SubGPU grid points fall into families of one stage count D and microbatch
count m (``searchrun.structure_key``, whose policy and streams are one value each in these
studies): the points of a family share the vectorised scorer's
compiled programs, so a worker pays the family's tracing and compilation once, at its first
point, and every later point costs only its search. This script samples ``--per-family``
points of every family (``--seed``), scores them one after another in this process with the
default exact timer (the event simulator) and the persistent compile cache (``--compile-cache``;
filled by an earlier run, or the first point of each family fills it), and reports per family:

* ``first_cpu_s``: the first point's process CPU seconds (tracing, compile or cache load, and
  its search);
* ``steady_cpu_s``: the mean of the later points' CPU seconds (the search alone), and of it
  ``event_cpu_s``, the event simulator's share (``EventSimulator.run``, its own CPU clock);
* ``points``: the family's size in the study's grid.

and the study's estimate: ``steady_cpu_s`` times ``points`` summed over families, and that over
``--workers`` (a lower bound of the wall time: perfect balance, no start-up). It is an
estimate from a sample, not a run of the study (``frontier_study.py`` runs it).

Usage: python experiments/frontier_cost.py [--study gptoss120b_b200] [--per-family 3]
       [--seed 1] [--workers 15] [--compile-cache DIR] [--out JSON]
Writes experiments/results/frontier_cost_cpu.json by default (a table on stdout).
Units: seconds (CPU and wall).
"""

from __future__ import annotations

import argparse
import collections
import os
import platform
import random
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from digest_cli import run_digest, write_digest  # noqa: E402


def families(study: str):
    """``(arch, hw, {(D, m): [GridPoint, ...]})``: the SubGPU points of ``study``'s grid
    (``frontier_study.STUDIES`` with the wide grid) by family."""
    import frontier_study as fs
    from subgpu_jax import get_hardware, get_model
    from subgpu_jax.app.sweep import build_grid

    st = {**fs.STUDIES[study], **fs.WIDE}
    arch, hw = get_model(st["model"]), get_hardware(st["hw"])
    pts = build_grid(arch, st["gpus"], st["batches"], st["stages"], st["microbatches"],
                     kv_history=32768, parallelisms=fs.parallelisms(arch, st["gpus"],
                                                                    st["all_ep"]), hw=hw)
    fam = collections.defaultdict(list)
    for p in pts:
        if p.D > 1:
            fam[(p.D, p.microbatches)].append(p)
    return arch, hw, dict(fam)


def measure(a) -> dict:
    """The sample's rows and the estimate (module docstring)."""
    from subgpu_jax.app.platform import enable_compile_cache
    from subgpu_jax.app.searchjob import SearchOptions
    from subgpu_jax.app.searchrun import run_search
    from subgpu_jax.model.setup import GpuSetup
    from subgpu_jax.score.timer import timer_for
    from subgpu_jax.sim import eventsim

    cached = 0
    if a.compile_cache:
        enable_compile_cache(a.compile_cache)
        cached = len(os.listdir(a.compile_cache)) if os.path.isdir(a.compile_cache) else 0
    arch, hw, fam = families(a.study)
    rng = random.Random(a.seed)
    timer = timer_for(GpuSetup.uncalibrated(hw), "event")
    ev = [0.0]
    run = eventsim.EventSimulator.run

    def timed_run(self, forward=False):   # the event simulator's share, on its own clock
        t0 = time.process_time()
        try:
            return run(self, forward=forward)
        finally:
            ev[0] += time.process_time() - t0

    eventsim.EventSimulator.run = timed_run
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            for k in sorted(fam):
                pick = rng.sample(fam[k], min(a.per_family, len(fam[k])))
                cpu, evs = [], []
                for p in pick:
                    ev[0] = 0.0
                    c0 = time.process_time()
                    run_search(arch, hw, [p], os.path.join(tmp, p.key), {"bench": "cost"},
                               SearchOptions(timer=timer, progress=False, overwrite=True,
                                             workers=1))
                    cpu.append(time.process_time() - c0)
                    evs.append(ev[0])
                later = cpu[1:] or cpu
                row = {"D": k[0], "microbatches": k[1], "points": len(fam[k]),
                       "sample": [p.key for p in pick], "cpu_s": [round(x, 2) for x in cpu],
                       "first_cpu_s": round(cpu[0], 2),
                       "steady_cpu_s": round(sum(later) / len(later), 2),
                       "event_cpu_s": round(sum(evs[1:] or evs) / len(later), 2)}
                rows.append(row)
                print(f"D={k[0]} m={k[1]:2d} ({len(fam[k])} points): first {cpu[0]:6.1f} s, "
                      f"then {row['steady_cpu_s']:6.2f} s a point, event simulator "
                      f"{row['event_cpu_s']:6.2f} s", flush=True)
        finally:
            eventsim.EventSimulator.run = run
    total = sum(r["steady_cpu_s"] * r["points"] for r in rows)
    event = sum(r["event_cpu_s"] * r["points"] for r in rows)
    big = [r for r in rows if r["D"] >= 5 and r["microbatches"] >= 4]
    return {"what": __doc__.split("\n\n")[0], "study": a.study, "per_family": a.per_family,
            "seed": a.seed, "compile_cache_entries_at_start": cached, "rows": rows,
            "estimate": {"subgpu_points": sum(r["points"] for r in rows),
                         "steady_cpu_s": round(total), "event_cpu_s": round(event),
                         "event_share": round(event / total, 3) if total else None,
                         "d5plus_m4plus_cpu_s": round(sum(r["steady_cpu_s"] * r["points"]
                                                          for r in big)),
                         "workers": a.workers,
                         "wall_s_lower_bound": round(total / a.workers)},
            "env": {"cpu_count": os.cpu_count(), "machine": platform.machine(),
                    "python": platform.python_version()},
            "date": time.strftime("%Y-%m-%d")}


def main(argv=None) -> int:
    import frontier_study as fs

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--study", default="gptoss120b_b200", choices=tuple(fs.STUDIES))
    ap.add_argument("--per-family", type=int, default=3,
                    help="points sampled per (D, m) family (>= 2: the first pays the family's "
                         "compilation; default 3)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", type=int, default=15,
                    help="workers of the wall-time estimate (default 15: a 16-core host)")
    ap.add_argument("--compile-cache", default=os.path.join(tempfile.gettempdir(),
                                                            "subgpu_jax_compile_cache"),
                    help="JAX's persistent compilation cache folder (created if missing; "
                         "'none': off)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "frontier_cost_cpu.json"))
    a = ap.parse_args(argv)
    for flag, v, lo, hi in (("--per-family", a.per_family, 2, 20),
                            ("--workers", a.workers, 1, 1024), ("--seed", a.seed, 0, 2**32 - 1)):
        if not lo <= v <= hi:
            ap.error(f"{flag} must be an integer from {lo} to {hi:,}, got {v}")
    from digest_cli import check_out
    from subgpu_jax.model.checks import out_dir

    try:    # before the measurement (15+ minutes), not after it
        check_out(a.out)
        if not a.compile_cache.strip():
            raise ValueError("--compile-cache must be a folder, or 'none' to turn the cache off, "
                             "got an empty string")
        if a.compile_cache.strip().lower() == "none":
            a.compile_cache = ""      # enable_compile_cache(""): no persistent cache
        else:
            out_dir(a.compile_cache, "--compile-cache")
    except ValueError as e:
        ap.error(str(e))

    def work():
        d = measure(a)
        write_digest(a.out, d)
        e = d["estimate"]
        print(f"{a.study}: {e['subgpu_points']} SubGPU points, {e['steady_cpu_s']:,} CPU-s "
              f"(event simulator {e['event_share']:.0%}; D >= 5 with m >= 4: "
              f"{e['d5plus_m4plus_cpu_s']:,}); at least {e['wall_s_lower_bound']:,} s on "
              f"{a.workers} workers; wrote {a.out}")
        return d

    rc, _ = run_digest(work, a.out)
    return rc


if __name__ == "__main__":
    sys.exit(main())
