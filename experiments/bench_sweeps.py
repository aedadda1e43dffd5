"""The main job's search time, the path before this benchmark's changes beside today's, in one run
(issue 42: massive sweeps at accelerator speed).

Every variant runs the README's main job (``subgpu search`` on the built-in default workload,
GPT-OSS 120B on 32 B200, 15 grid points) in a fresh process, with the same CPU pinning
(``taskset`` to ``--cores`` cores when given), and reports the search's own seconds (the line
``evaluated ... (S s)``), the process's wall and CPU seconds and the records:

* ``before``: the lone-pool and kernel-profile memos off (``score.poolwork.LONE_POOLS``,
  ``score.vctables.PROFILE_MEMO`` and ``POOL_ROWS`` replaced by stores that keep nothing, as
  before they existed), the tables whole from their first use and no task DAG shared (as
  ``whole_*`` below), and no persistent compile cache (``SUBGPU_JAX_CACHE=""``): the path as it
  was before those memos (its other changes stay);
* ``memo_cold``: today's path, with empty compile caches (JAX's persistent cache and the
  compiled event-simulator engine's ``NUMBA_CACHE_DIR``), fresh for every repetition: a user's
  first run (``before`` also compiles the engine afresh every run);
* ``memo_warm``: today's path again, reading that folder (a user's second run);
* ``workers_cold``, ``workers_warm``: today's path with ``--workers auto`` (the default: one
  process per usable core, ``app.pool.search_workers``; grid points longest first), first
  filling the cache with the workers' programs (JAX on one thread: other compile options, so
  other entries), then reading it;
* ``fifo_cold``, ``fifo_warm``: as the two worker runs, but the pool hands out the points in the
  given order only (``searchrun.structure_key`` replaced by one group per point, as the one
  shared task queue did before ``app.pool.Scheduler``), with a cache folder of their own: the
  baseline of the structure groups;
* ``vcontention_warm``: ``--exact vcontention`` (the batched contention timer) with the warm
  cache, and its disagreement with the event simulator on the best records
  (``summary.json``'s ``reference_check``).

* ``whole_warm``, ``whole_workers_warm``: today's path with the contention estimators' tables
  whole from their first use (every pool, as before ``score.vctables.PoolTables`` filled them
  per pool on demand) and no task DAG shared between cuts (``space.taskdag``'s memos off),
  warm cache, one process and the pool: the baseline of those two (``speedup_vs_whole_tables``
  and ``cpu_ratio_vs_whole_tables`` of ``memo_warm`` and ``workers_warm``).
* ``tree_warm``, ``tree_workers_warm``, ``tree_workers_cold``: the main job run from another
  checkout
  (``--baseline-tree DIR``, e.g. ``git worktree add DIR REV`` of the previous commit) with a
  compile cache of its own, warm, one process and the pool: the commit before a change as the
  baseline of the same run (``speedup_vs_baseline_tree``, ``cpu_ratio_vs_baseline_tree``;
  ``tree_workers_cold`` with empty caches, the baseline of ``workers_cold``).
* ``full_cold``, ``full_warm``, ``full_workers_warm``: ``--exact event-full`` (the event simulator
  with every region simulated: the periodic fast-forward off, ``sim.periodic``), an empty cache
  folder of their own then warm, one process and the worker pool: the baseline of the
  fast-forward. ``speedup_vs_event_full`` and ``cpu_ratio_vs_event_full`` of ``memo_cold``,
  ``memo_warm`` and ``workers_warm`` are against them; ``forward_vs_event_full`` says whether
  the same configurations were chosen and how far the makespans differ (float rounding).

Every variant but the pool ones (``workers_*``, ``fifo_*``, ``*_workers_warm``) runs with
``--workers 1`` (one process, as before). The
records of ``before``, ``memo_cold``, ``memo_warm``, the two worker runs and the ``whole_*`` runs
must be identical (every field but timings): the memos, the compile cache and the per-pool
fills change no number. Ratios are against ``before``.

A ``*_warm`` variant is preceded by one untimed run that fills its cache folder when no run
of the same folder and process mode came before it. With ``--repeat N`` the variants run N
times in turn (on a shared machine the runs of one variant spread by 20% or more); each row
holds the median and the samples.

Usage: python experiments/bench_sweeps.py [--out JSON] [--cores N] [--variants V ...]
       [--repeat N] [--baseline-tree DIR]
Writes experiments/results/bench_sweeps_cpu.json by default (a table on stdout).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

from digest_cli import check_out, write_digest  # noqa: E402  (check --out, atomic JSON)

#: The child's code: optionally disable the lone-pool memo, then run the CLI.
CHILD = """
import sys
if sys.argv[1] == "nomemo":
    import subgpu_jax.score.poolwork as pw
    class _Keep(dict):  # a store that keeps nothing: every lookup misses, as before the memo
        def __setitem__(self, k, v):
            pass
    pw.LONE_POOLS = _Keep()
    import subgpu_jax.score.vctables as vc
    from subgpu_jax.model.lru import ByteLRU
    vc.PROFILE_MEMO = ByteLRU(0)   # stores nothing: the per-kernel tables built every time
    vc.POOL_ROWS = ByteLRU(0)
if sys.argv[1] in ("whole", "nomemo"):
    # the contention estimators' tables whole from their first use (every pool, as before
    # vctables.PoolTables filled them per pool) and no task DAG shared between cuts
    import numpy as np
    import subgpu_jax.score.vctables as vt
    import subgpu_jax.space.taskdag as td
    import subgpu_jax.score.evaluator as ev
    import subgpu_jax.score.lanes as ln
    _fill = vt.PoolTables.fill
    vt.PoolTables.fill = lambda self, pools: _fill(self, np.arange(self.shape[1]))
    td._unroll = td._unroll.__wrapped__
    ev.per_dag = ln.per_dag = lambda dag, key, make: make()
if sys.argv[1] == "fifo":
    # the worker pool without structure groups: every point its own group, so the workers
    # take the points in the given order (as the one shared queue did before)
    import subgpu_jax.app.searchrun as sr
    sr.structure_key = lambda p: ("point", p.key)
from subgpu_jax.app.cli import main
sys.exit(main(sys.argv[2:]))
"""

VARIANTS = ("before", "memo_cold", "memo_warm", "fifo_cold", "fifo_warm", "workers_cold",
            "workers_warm", "vcontention_warm", "full_cold", "full_warm", "full_workers_warm",
            "whole_warm", "whole_workers_warm", "tree_warm", "tree_workers_warm",
            "tree_workers_cold")
#: Record fields that name the scorer, left out when comparing event with event-full records
#: (besides every float: makespans and what derives from them differ by float rounding).
SCORER_FIELDS = {"exact"}
#: Record fields that hold timings (they differ run to run).
TIMING_FIELDS = {"seconds", "point_seconds", "wall_s", "cpu_s"}


def timed_search(name: str, cmd: list[str], env: dict, cwd: str,
                 cores: int | None = None) -> tuple[str, dict]:
    """Run one search command in a fresh process (pinned to ``cores`` cores with ``taskset``
    when given): ``(stdout, {"variant", "search_s", "wall_s", "cpu_s"})``, the search's own
    seconds read from its ``evaluated ... (S s)`` line (None when absent).

    Raises:
        RuntimeError: a non-zero exit (names the variant, with the end of its stderr)."""
    if cores:
        cmd = ["taskset", "-c", f"0-{cores - 1}", *cmd]
    t0, c0 = time.time(), os.times()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=cwd)
    c1 = os.times()
    if p.returncode != 0:
        raise RuntimeError(f"{name}: exit {p.returncode}: {p.stderr[-2000:]}")
    m = re.search(r"evaluated \d+ grid points.*\(([\d.]+) s\)", p.stdout)
    return p.stdout, {"variant": name, "search_s": float(m.group(1)) if m else None,
                      "wall_s": round(time.time() - t0, 2),
                      "cpu_s": round((c1.children_user - c0.children_user)
                                     + (c1.children_system - c0.children_system), 2)}


def cache_folder(name: str, cache: str) -> str:
    """The persistent compile-cache folder of a variant ("" for ``before``: none)."""
    return ("" if name == "before" else cache + "_fifo" if name.startswith("fifo") else
            cache + "_full" if name.startswith("full") else
            cache + "_tree" if name.startswith("tree") else cache)


def pooled(name: str) -> bool:
    """Whether a variant runs the worker pool (``--workers auto``) rather than one process."""
    return name.startswith(("workers", "fifo", "full_workers", "whole_workers", "tree_workers"))


def run_variant(name: str, out: str, cache: str, cores: int | None,
                platform: str = "cpu", tree: str | None = None, numba_cache: str = "") -> dict:
    """One main job in a fresh process (from ``tree``, a checkout of another commit, for the
    ``tree_*`` variants), with JAX's compile cache in ``cache`` ("": none) and the compiled
    engine's in ``numba_cache`` (``NUMBA_CACHE_DIR``; "": the user's default folder); returns
    its timings and where its records are."""
    root = tree if name.startswith("tree") else ROOT
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""),
               JAX_PLATFORMS=platform)
    env["SUBGPU_JAX_CACHE"] = cache
    if numba_cache:
        env["NUMBA_CACHE_DIR"] = numba_cache
    pool = pooled(name)
    args = ["search", "--out", out, "--no-progress", "--workers", "auto" if pool else "1"]
    if name.startswith("vcontention"):
        args += ["--exact", "vcontention"]
    if name.startswith("full"):   # every region simulated: the fast-forward's baseline
        args += ["--exact", "event-full"]
    mode = ("nomemo" if name == "before" else "fifo" if name.startswith("fifo") else
            "whole" if name.startswith("whole") else "memo")
    stdout, timed = timed_search(name, [sys.executable, "-c", CHILD, mode, *args], env, root,
                                 cores)
    w = re.search(r"^(\d+) worker processes score", stdout, re.M)
    row = {"variant": name, "workers": int(w.group(1)) if w else 1,
           **{k: v for k, v in timed.items() if k != "variant"}}
    summ = json.load(open(os.path.join(out, "summary.json")))
    if "reference_check" in summ:
        rc = summ["reference_check"]
        row["reference_check"] = {"median_abs_error": rc["median_abs_error"],
                                  "max_abs_error": rc["max_abs_error"],
                                  "rows": len(rc["rows"])}
    best = summ.get("best_speedup_record") or {}
    row["best_speedup"] = best.get("speedup_vs_temporal")
    # the compiled engine's use, and the wait for a compilation the run left for the next one
    row["engine_check"] = "engine_check" in summ and summ["engine_check"] is not None
    if numba_cache:
        row["engine_compile_after_s"] = wait_engine_idle(numba_cache)
    return row


def wait_engine_idle(numba_cache: str, limit_s: float = 300.0) -> float:
    """Wait until no process holds a compile lock of the engine folders under ``numba_cache``
    (``sim.batchednb.compile_later``: a small sweep on a cold engine cache leaves a detached
    compilation for the next run), so that the next run starts on an idle machine, as a user's
    next run some seconds later would. Returns the seconds waited (0.0 without a lock; at most
    ``limit_s``)."""
    import fcntl
    import glob

    t0 = time.time()
    for f in glob.glob(os.path.join(numba_cache, "**", "compile.lock"), recursive=True):
        with open(f, "a") as fh:
            while True:
                try:
                    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    fcntl.flock(fh, fcntl.LOCK_UN)
                    break
                except OSError:
                    if time.time() - t0 > limit_s:
                        return round(time.time() - t0, 2)
                    time.sleep(0.2)
    return round(time.time() - t0, 2)


def records(folder: str, leave_out: set = frozenset()) -> list[str]:
    """The folder's records as sorted JSON strings, timing fields (and ``leave_out``) left
    out."""
    out = []
    with open(os.path.join(folder, "records.jsonl")) as fh:
        for line in fh:
            r = json.loads(line)
            out.append(json.dumps({k: v for k, v in r.items()
                                   if k not in TIMING_FIELDS and k not in leave_out},
                                  sort_keys=True))
    return sorted(out)


def forward_agreement(fast: str, full: str) -> dict:
    """The records of a search with the fast-forward (``event``) against one without
    (``event-full``): whether every field but the makespans and what derives from them is
    equal (the same configurations chosen), and the largest relative makespan difference."""
    def spans(folder):
        """{the record's fields but numbers and its checksum: its makespan}."""
        with open(os.path.join(folder, "records.jsonl")) as fh:
            rs = [json.loads(x) for x in fh]
        return {json.dumps({k: v for k, v in r.items() if k not in TIMING_FIELDS
                            and k not in SCORER_FIELDS and k != "_sum"
                            and not isinstance(v, float)}, sort_keys=True): r["makespan_us"]
                for r in rs if "makespan_us" in r}
    a, b = spans(fast), spans(full)
    rel = [abs(a[k] / b[k] - 1) for k in a if k in b]
    return {"same_configurations": set(a) == set(b),
            "max_rel_makespan_diff": max(rel) if rel else None}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(HERE, "results", "bench_sweeps_cpu.json"))
    ap.add_argument("--cores", type=int, default=None,
                    help="pin every run to the first N cores (taskset); default: all")
    ap.add_argument("--variants", nargs="+", choices=VARIANTS,
                    default=[v for v in VARIANTS if not v.startswith("tree")],
                    help="default: all but the tree_* ones (those need --baseline-tree)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run the variants this many times, in turn (each row then holds the "
                         "median and every sample); default 1")
    ap.add_argument("--baseline-tree", default=None, metavar="DIR",
                    help="a checkout of an earlier commit (git worktree add DIR REV): the "
                         "tree_warm and tree_workers_warm variants run the main job from it, "
                         "with a compile cache of their own, as the baseline of memo_warm and "
                         "workers_warm")
    ap.add_argument("--platform", default="cpu", choices=("cpu", "cuda"),
                    help="JAX_PLATFORMS of the runs (the scorers' device; default cpu, as "
                         "subgpu runs them)")
    a = ap.parse_args(argv)
    if a.cores is not None and a.cores < 1:
        ap.error(f"--cores must be >= 1, got {a.cores}")
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
        os.cpu_count() or 1)
    if a.cores is not None and a.cores > usable:
        ap.error(f"--cores must be at most the {usable} cores this process may use, got "
                 f"{a.cores}")
    if a.repeat < 1:
        ap.error(f"--repeat must be >= 1, got {a.repeat}")
    if (any(v.startswith("tree") for v in a.variants) or a.baseline_tree is not None) and not (
            a.baseline_tree and os.path.isdir(os.path.join(a.baseline_tree, "subgpu_jax"))):
        ap.error("--variants tree_* need --baseline-tree DIR, a checkout "
                 f"holding subgpu_jax/, got {a.baseline_tree!r}")
    try:
        check_out(a.out)   # before minutes of work
    except ValueError as e:
        ap.error(str(e))
    tmp = tempfile.mkdtemp(prefix="bench_sweeps_")
    cache = os.path.join(tmp, "jax_cache")
    rows, folders = [], {}
    try:
        warmed = set()
        samples: dict[str, list[dict]] = {}
        for i in range(a.repeat):
            for v in a.variants:
                folders[v] = os.path.join(tmp, f"{v}_{i}")
                key = (cache_folder(v, cache), pooled(v))
                # a cold run (and ``before``) starts from empty compile caches, JAX's and the
                # engine's, every repetition; the warm ones share their variant's folders
                fresh = v.endswith("_cold") or v == "before"
                jc = (os.path.join(tmp, f"{v}_{i}_jax") if v.endswith("_cold") else
                      cache_folder(v, cache))
                nc = (os.path.join(tmp, f"{v}_{i}_numba") if fresh else
                      cache_folder(v, cache) + "_numba")
                if v.endswith("_warm") and key not in warmed:   # fill the caches untimed
                    run_variant(v, os.path.join(tmp, f"{v}_warmup"), jc, a.cores,
                                a.platform, a.baseline_tree, nc)
                if not fresh:   # a run of the shared folders filled them
                    warmed.add(key)
                samples.setdefault(v, []).append(run_variant(
                    v, folders[v], jc, a.cores, a.platform, a.baseline_tree, nc))
                print(f"{v:18s} search {samples[v][-1]['search_s']} s, wall "
                      f"{samples[v][-1]['wall_s']} s", flush=True)
        for v, runs in samples.items():
            row = dict(runs[len(runs) // 2])
            for f in ("search_s", "wall_s", "cpu_s"):
                vals = sorted(r[f] for r in runs if r[f] is not None)
                row[f] = round(float(np.median(vals)), 2) if vals else None
                if len(runs) > 1:
                    row[f + "_samples"] = [r[f] for r in runs]
            rows.append(row)
        same = None
        exact_runs = [v for v in ("before", "memo_cold", "memo_warm", "fifo_cold", "fifo_warm",
                                  "workers_cold", "workers_warm", "whole_warm",
                                  "whole_workers_warm", "tree_warm", "tree_workers_warm",
                                  "tree_workers_cold")
                      if v in folders]
        if len(exact_runs) > 1:
            ref = records(folders[exact_runs[0]])
            same = all(records(folders[v]) == ref for v in exact_runs[1:])
        forward = {f"{fast} vs {full}": forward_agreement(folders[fast], folders[full])
                   for fast, full in (("memo_warm", "full_warm"),
                                      ("workers_warm", "full_workers_warm"))
                   if fast in folders and full in folders}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    base = next((r for r in rows if r["variant"] == "before"), None)
    by = {r["variant"]: r for r in rows}
    for r in rows:
        if base and r["search_s"] and base["search_s"]:
            r["speedup_vs_before"] = round(base["search_s"] / r["search_s"], 2)
    for fast, base, tag in (("memo_warm", "whole_warm", "whole_tables"),
                            ("workers_warm", "whole_workers_warm", "whole_tables"),
                            ("memo_warm", "tree_warm", "baseline_tree"),
                            ("workers_warm", "tree_workers_warm", "baseline_tree"),
                            ("workers_cold", "tree_workers_cold", "baseline_tree")):
        if fast in by and base in by and by[fast]["search_s"]:
            by[fast][f"speedup_vs_{tag}"] = round(by[base]["search_s"] / by[fast]["search_s"], 2)
            by[fast][f"cpu_ratio_vs_{tag}"] = round(by[base]["cpu_s"] / by[fast]["cpu_s"], 2)
    for fast, full in (("memo_cold", "full_cold"), ("memo_warm", "full_warm"),
                       ("workers_warm", "full_workers_warm")):
        if fast in by and full in by and by[fast]["search_s"]:
            by[fast]["speedup_vs_event_full"] = round(by[full]["search_s"]
                                                      / by[fast]["search_s"], 2)
            by[fast]["cpu_ratio_vs_event_full"] = round(by[full]["cpu_s"] / by[fast]["cpu_s"],
                                                        2)
    res = {"job": "subgpu search (the README's main job: gpt-oss-120b, 32x B200, 15 grid "
                  "points)", "rows": rows, "records_identical_event_runs": same,
           "forward_vs_event_full": forward,
           "repeat": a.repeat, "commit": subprocess.run(
               ["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True,
               text=True).stdout.strip() or None,
           "baseline_tree": (subprocess.run(
               ["git", "-C", a.baseline_tree, "rev-parse", "--short", "HEAD"],
               capture_output=True, text=True).stdout.strip() or a.baseline_tree)
           if a.baseline_tree else None,
           "env": {"cpu_count": os.cpu_count(), "cores_used": a.cores, "jax_platform": a.platform,
                   "machine": platform.machine(), "python": platform.python_version()},
           "date": time.strftime("%Y-%m-%d")}
    print(f"\n{'variant':18s} {'search s':>9s} {'wall s':>7s} {'cpu s':>7s} {'x before':>9s}")
    for r in rows:
        print(f"{r['variant']:18s} {r['search_s']!s:>9s} {r['wall_s']:7.1f} {r['cpu_s']:7.1f} "
              f"{r.get('speedup_vs_before', '-')!s:>9s}"
              + (f"   vs event simulator: median {r['reference_check']['median_abs_error']:.1%}"
                 f", max {r['reference_check']['max_abs_error']:.1%}"
                 if "reference_check" in r else ""))
    for r in rows:
        for tag, what in (("baseline_tree", f"the baseline tree ({res['baseline_tree']})"),
                          ("whole_tables", "whole tables")):
            if f"speedup_vs_{tag}" in r:
                print(f"{r['variant']}: {r[f'speedup_vs_{tag}']}x the search time of {what}, "
                      f"CPU ratio {r[f'cpu_ratio_vs_{tag}']}")
    print(f"records identical across the event-simulator runs: {same}")
    for k, v in forward.items():
        print(f"fast-forward {k}: same configurations {v['same_configurations']}, makespans "
              f"within {v['max_rel_makespan_diff']:.1e}")
    write_digest(a.out, res)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
