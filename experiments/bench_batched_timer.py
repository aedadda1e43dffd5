"""The batched event timer on a whole search, beside the event simulator in the same run
(issue 42 items 1-2: the exact steps as batched calls, grid points in batches).

Every variant runs the README's main job (``subgpu search`` on the built-in default workload,
GPT-OSS 120B on 32 B200, 15 grid points; ``--search-args`` replaces its grid) in a fresh
process, with one persistent compile-cache folder shared by the variants (filled by an untimed
run of each variant first unless ``--cold``), and reports the search's own seconds (the line
``evaluated ... (S s)``), the process's wall and CPU seconds, the batches (``in flight: ...``)
and the records:

* ``event``: ``--exact event --workers 1``, the reference and the baseline;
* ``batched``: ``--exact event-batched --in-flight 1 --workers 1`` (each grid point's exact
  steps batched per call: a polish pass, the layouts ranked);
* ``batched_in_flight``: ``--exact event-batched --in-flight N`` (N = ``--in-flight``, default
  every grid point: all their exact steps in shared calls).

``event-batched`` runs the NumPy engine where JAX's platform is the CPU and the JAX engine
elsewhere (``--platform cuda`` on a GPU machine); the ``event`` run keeps JAX on the CPU
(``--event-platform``), as the main job runs fastest there. Against ``event``: whether every record
chose the same configuration (cuts, reuse, stages, microbatches, SMs) and the largest
relative difference of the makespans; the search's own check by the event simulator
(``summary.json``'s ``reference_check``). Ratios are ``event``'s search seconds over each
variant's (above 1: faster).

``--job frontier``: instead of the main job, the sample of the GPT-OSS 120B B200 frontier
study's grid that ``bench_screened.py`` times (every k-th of its SubGPU points, ``--points`` of
them, and their deployments' temporal points), ``--in-flight`` of them at once.

Usage: python experiments/bench_batched_timer.py [--out JSON] [--cores N]
       [--platform cpu|cuda] [--in-flight N] [--variants V ...] [--search-args "..."]
       [--job main|frontier] [--points N]
Writes experiments/results/bench_batched_timer_<platform>.json by default
(bench_batched_timer_frontier_<platform>.json for the frontier sample; a table on stdout).
"""

from __future__ import annotations

import argparse
import json
import os
import platform as pf
import re
import shlex
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

from bench_sweeps import timed_search  # noqa: E402  (one timed search process)
from digest_cli import check_out, write_digest  # noqa: E402  (check --out, atomic JSON)

VARIANTS = ("event", "batched", "batched_in_flight")
#: The record fields that say which configuration a record chose.
CHOICE = ("grid_key", "mode", "cuts", "w", "D", "microbatches", "sms", "policy")


def variant_args(name: str, in_flight: int) -> list[str]:
    """The ``subgpu search`` flags of a variant (module docstring)."""
    if name == "event":
        return ["--exact", "event", "--workers", "1"]
    if name == "batched":
        return ["--exact", "event-batched", "--in-flight", "1", "--workers", "1"]
    return ["--exact", "event-batched", "--in-flight", str(in_flight)]


def child(job: str, points: int, out: str, flags: list[str]) -> int:
    """``--child``: the frontier sample's search (``bench_screened.frontier_points``: every
    k-th SubGPU point of the GPT-OSS 120B B200 study and its temporal points) with the
    variant's ``flags``, printing the CLI's two lines this script reads."""
    import time as _t

    from bench_screened import frontier_points

    from subgpu_jax.app.searchjob import SearchOptions
    from subgpu_jax.app.searchrun import run_search
    from subgpu_jax.model.setup import GpuSetup
    from subgpu_jax.score.timer import timer_for

    f = dict(zip(flags[::2], flags[1::2]))
    arch, hw, pts = frontier_points("gptoss120b_b200", points)
    timer = timer_for(GpuSetup.uncalibrated(hw), f["--exact"])
    t0 = _t.perf_counter()
    stats, _ = run_search(arch, hw, pts, out, {"bench": "batched_timer"},
                          SearchOptions(timer=timer, progress=False, overwrite=True,
                                        workers=int(f.get("--workers", 1)),
                                        in_flight=int(f.get("--in-flight", 1))))
    print(f"evaluated {stats['evaluated']} grid points ({_t.perf_counter() - t0:.2f} s)")
    b = stats.get("batches")
    if b and b["calls"]:
        print(f"in flight: {f['--in-flight']} grid points at once, their exact steps in "
              f"{b['calls']:,} batched calls of {b['rows'] / b['calls']:.1f} allocations on "
              f"average, at most {b['largest']:,}")
    return 0


def run_variant(name: str, out: str, cache: str, cores: int | None, platform: str,
                search_args: list[str], in_flight: int, job: str = "main",
                points: int = 24) -> dict:
    """One search in a fresh process; its timings, batches and reference check."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               JAX_PLATFORMS=platform, SUBGPU_JAX_CACHE=cache)
    if job == "frontier":
        cmd = [sys.executable, os.path.abspath(__file__), "--child", str(points), out,
               *variant_args(name, in_flight)]
    else:
        cmd = [sys.executable, "-m", "subgpu_jax.app.cli", "search", *search_args, "--out",
               out, "--no-progress", "--overwrite", *variant_args(name, in_flight)]
    stdout, row = timed_search(name, cmd, env, ROOT, cores)
    b = re.search(r"in flight: (\d+) grid points at once, their exact steps in ([\d,]+) batched "
                  r"calls of ([\d.]+) allocations on average, at most ([\d,]+)", stdout)
    if b:
        row["batches"] = {"in_flight": int(b.group(1)),
                          "calls": int(b.group(2).replace(",", "")),
                          "mean_rows": float(b.group(3)),
                          "largest": int(b.group(4).replace(",", ""))}
    summ = json.load(open(os.path.join(out, "summary.json")))
    row["points"] = summ["records"]
    if "reference_check" in summ:
        rc = summ["reference_check"]
        row["reference_check"] = {"median_abs_error": rc["median_abs_error"],
                                  "max_abs_error": rc["max_abs_error"],
                                  "checked": rc["checked"]}
    return row


def records(folder: str) -> dict:
    """``{grid_key: record}`` of a search folder."""
    out = {}
    with open(os.path.join(folder, "records.jsonl")) as fh:
        for line in fh:
            r = json.loads(line)
            if "grid_key" in r and "mode" in r:
                out[r["grid_key"]] = r
    return out


def agreement(ref: dict, other: dict) -> dict:
    """Whether ``other`` chose ``ref``'s configuration at every grid point, and the largest
    relative makespan difference."""
    same = sum(all(ref[k].get(f) == other[k].get(f) for f in CHOICE) for k in ref if k in other)
    diff = max(abs(other[k]["makespan_us"] / ref[k]["makespan_us"] - 1)
               for k in ref if k in other)
    return {"points": len(ref), "same_choice": same, "max_rel_makespan_diff": diff}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None,
                    help="the digest (default: results/bench_batched_timer_<platform>.json)")
    ap.add_argument("--cores", type=int, default=None, help="pin every run to N cores")
    ap.add_argument("--platform", default="cpu", choices=("cpu", "cuda"),
                    help="JAX_PLATFORMS of the event-batched runs (NumPy on cpu, JAX on cuda)")
    ap.add_argument("--event-platform", default="cpu", choices=("cpu", "cuda"),
                    help="JAX_PLATFORMS of the event run (default cpu: the main job on a GPU "
                         "machine is 2-3x slower with cuda, issue 42)")
    ap.add_argument("--in-flight", type=int, default=15,
                    help="grid points in flight of batched_in_flight (default 15: the main job)")
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    ap.add_argument("--search-args", default="",
                    help="subgpu search flags replacing the main job's defaults (one string)")
    ap.add_argument("--cold", action="store_true", help="no untimed warm-up runs")
    ap.add_argument("--job", default="main", choices=("main", "frontier"),
                    help="main: the README's main job; frontier: a sample of the GPT-OSS 120B "
                         "B200 frontier study's grid (bench_screened.py's)")
    ap.add_argument("--points", type=int, default=24,
                    help="SubGPU grid points of the frontier sample (default 24)")
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--child":
        return child("frontier", int(sys.argv[2]), sys.argv[3], sys.argv[4:])
    a = ap.parse_args(argv)
    if a.points < 1:
        ap.error(f"--points must be an integer >= 1, got {a.points}")
    if a.job == "frontier" and a.search_args:
        ap.error("--search-args applies to --job main only")
    if a.cores is not None and not 1 <= a.cores <= (os.cpu_count() or 1):
        ap.error(f"--cores must be an integer in 1..{os.cpu_count()}, got {a.cores}")
    if a.in_flight < 2:
        ap.error(f"--in-flight must be an integer >= 2, got {a.in_flight}")
    if "event" not in a.variants:
        ap.error("--variants must include event (the baseline)")
    a.out = a.out or os.path.join(HERE, "results", "bench_batched_timer_"
                                  + ("" if a.job == "main" else "frontier_") + a.platform + ".json")
    try:
        check_out(a.out)
        search_args = shlex.split(a.search_args)
    except ValueError as e:
        ap.error(str(e))
    work = tempfile.mkdtemp(prefix="bench_batched_timer_")
    cache = os.path.join(work, "jax_cache")
    rows, recs = [], {}
    for name in a.variants:
        out = os.path.join(work, name)
        plat = a.event_platform if name == "event" else a.platform
        run = (name, out, cache + "_" + plat, a.cores, plat, search_args, a.in_flight, a.job,
               a.points)
        if not a.cold:
            run_variant(*run)
        row = run_variant(*run)
        recs[name] = records(out)
        rows.append(row)
        print(f"{name:18s} search {row['search_s']:7.2f} s  wall {row['wall_s']:7.2f} s  "
              f"cpu {row['cpu_s']:7.2f} s  {row.get('batches', '')}", flush=True)
    base = next(r for r in rows if r["variant"] == "event")
    for r in rows:
        r["speedup_vs_event"] = round(base["search_s"] / r["search_s"], 3)
        if r["variant"] != "event":
            r["vs_event"] = agreement(recs["event"], recs[r["variant"]])
    try:
        import jax

        device = jax.devices()[0].device_kind if a.platform != "cpu" else pf.processor()
    except Exception:   # noqa: BLE001  (a missing platform: say so, keep the digest)
        device = "unknown"
    out = {"what": __doc__.split("\n\n")[0], "job": a.job, "platform": a.platform,
           "event_platform": a.event_platform,
           "device": device, "cores": a.cores or os.cpu_count(), "warm": not a.cold,
           **({"sample_points": a.points} if a.job == "frontier" else {}),
           "search_args": search_args or "the main job's defaults", "rows": rows}
    write_digest(a.out, out)
    print("\n".join(f"{r['variant']:18s} {r['speedup_vs_event']:6.3f}x event's search speed"
                    + (f"; same choice at {r['vs_event']['same_choice']} of "
                       f"{r['vs_event']['points']} points, makespans within "
                       f"{r['vs_event']['max_rel_makespan_diff']:.1e}" if "vs_event" in r
                       else "") for r in rows))
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
