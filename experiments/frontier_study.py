"""Frontier studies: temporal vs SubGPU per-user / per-GPU throughput frontiers with matched gains.

Presets (``--study``):
  gptoss120b_b200  GPT-OSS 120B on 32 B200 (the reference study, docs/method.md §5), every attention
                   TP x DP split with TP <= 8, KV history 32,768.
  gptoss20b_h200   GPT-OSS 20B on 8 H200 (attention TP x DP), KV history 32,768.
  llama70b_h200    Llama-3.1-70B on 8 H200 (attention TP x DP, dense MLP on TP), KV 32,768.

Grid (the method's study, docs/method.md §4): stages D = 2..6, microbatch counts m = 1, 2, 4, 8
and 16 where m divides the per-GPU batch R = G/d (``build_grid`` drops the others), and for MoE
models every expert-parallel degree e dividing both the GPU count and the expert count (experts
replicated n/e times; ``build_grid`` drops deployments whose weights and KV cache do not fit).
``--narrow`` restores the first published grid (D = 2..4, m = 1, 2, 4, the largest EP only).

Cost with the event simulator (``cpu_per_point`` in the digest: mean CPU-seconds per point of
each microbatch count, compilation included; measured in
experiments/results/frontier_studies.json): a few CPU-s per point at m <= 4, tens at m = 8 and
16 (more stages and microbatches cost more event-simulator calls). The MoE studies (EP axis:
2,060 and 2,882 points) need CPU-hours, so every study is a resumable sweep: kill it, or let a
budget stop it, and run the same command again: finished grid points are kept, never run twice.
The points run in the order of ``order_points`` (temporal; the largest EP at m <= 8; the other
EP degrees at m <= 8; m = 16; by microbatch and stage count within each, the stages descending
in the last), so a partial study covers whole axes first.

Budgets and processes: ``--budget N`` grid points, ``--cpu-budget S`` CPU-seconds (checked
between chunks of ``--chunk`` points), ``--wall-budget S`` seconds from the start of the
command. ``--workers N`` (N > 1) scores the points in N CPU processes
(``subgpu_jax.app.pool.run_sweep_pool``: JAX on the CPU with one thread per process, the
workers sharing JAX's persistent compilation cache in ``--compile-cache``); every finished point
is stored at once, so a kill at any moment loses only the points in flight, and at the wall
budget the points in flight are dropped and the outputs written. The records are the same as
the single-process run's (tests/search/test_frontier_pool.py); the outputs and the digest
(the same ``digest`` for both paths) are rewritten every ``--chunk`` points.
``experiments/device/run.sh frontier LIMIT_S WORKERS`` runs the three studies that way on a
many-core machine within LIMIT_S seconds and archives the results.

``--overwrite`` starts a study afresh (needed when its folder holds another grid, e.g. the
first one). A study whose finished points were made with another duration model (the digest's
``duration_model`` fingerprint) is not resumed unless ``--allow-model-change`` (mixes them) or
``--overwrite-stale`` (starts afresh only then). ``--report`` prints the digests as the
README's Markdown.

Each study is written to ``experiments/results/frontier_<study>/`` (records.csv,
records.jsonl, summary.json, frontier.png, frontier_by_stages.png, gantt_best.png); its entry of
``experiments/results/frontier_studies.json`` (``digest``) holds the grid size, the points
finished and their coverage by m, D and EP, wall and CPU time over all runs, the estimated CPU
time to finish, the command that resumes it, the search settings, the git commit of every run
and the duration model's settings (``duration_settings``: compare them before mixing runs
made with another model), the matched gains, how often each kind of candidate layout wins
(``candidate_stats``), where the SubGPU frontier's points lie (``frontier_distribution``) and
the best record.

Usage: nice -n 10 python experiments/frontier_study.py --study gptoss120b_b200 [--cpu-budget S]
       [--wall-budget S] [--workers N] [--budget N] [--chunk N] [--exact event] [--overwrite]
       [--overwrite-stale] [--allow-model-change] [--compile-cache DIR]
       python experiments/frontier_study.py --report
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

from subgpu_jax import get_hardware, get_model
from subgpu_jax.app.searchjob import SearchOptions
from subgpu_jax.app.searchrun import run_search
from subgpu_jax.app.sweep import build_grid, grid_fingerprint, outer_parallelisms, SweepStore
from subgpu_jax.app.options import usage_error
from subgpu_jax.score.timer import TIMERS

HERE = os.path.dirname(os.path.abspath(__file__))
#: When this call started (``time.monotonic()``): ``--wall-budget`` counts from here.
T_START = time.monotonic()

#: The method's grid of stage and microbatch counts; ``--narrow`` uses the first published one.
WIDE = dict(stages=[2, 3, 4, 5, 6], microbatches=[1, 2, 4, 8, 16], all_ep=True)
NARROW = dict(stages=[2, 3, 4], microbatches=[1, 2, 4], all_ep=False)

STUDIES = {
    "gptoss120b_b200": dict(model="gpt-oss-120b", hw="B200", gpus=32,
                            batches=[256, 512, 1024, 2048, 4096]),
    "gptoss20b_h200": dict(model="gpt-oss-20b", hw="H200", gpus=8,
                           batches=[64, 128, 256, 512, 1024]),
    # KV of a Llama-3.1-70B request at 32k tokens is 10.7 GB over 8 GPUs: G <= ~96 fits.
    "llama70b_h200": dict(model="llama-3.1-70b", hw="H200", gpus=8,
                          batches=[8, 16, 32, 64, 96]),
}

#: Kinds of candidate layouts, by ``CutCandidate.origin`` prefix (``search.features``).
ORIGIN_KINDS = (("anchored", "anchored DP cut (the proposal)"),
                ("anchor@", "DP proposal re-run from another start kernel"),
                ("rotation+", "boundary shift of the anchored cut"),
                ("enumerated", "enumerated cut of a general DAG"),
                ("screen", "cut screening (extension)"))


def parallelisms(arch, gpus: int, all_ep: bool) -> list[tuple[int, int, int]]:
    """(attention TP t, DP d, MoE EP e) of a study: ``outer_parallelisms`` (largest EP), or with
    ``all_ep`` every e dividing both ``gpus`` and the expert count (MoE models; dense: e = 1)."""
    base = outer_parallelisms(arch, gpus)
    if not all_ep or not arch.is_moe:
        return base
    eps = [e for e in range(1, gpus + 1) if gpus % e == 0 and arch.num_experts % e == 0]
    return [(t, d, e) for t, d, _ in base for e in eps]


def origin_kind(origin: str) -> str:
    """The ``ORIGIN_KINDS`` key of a record's cut origin (``+ls<k>`` suffixes ignored)."""
    for key, _ in ORIGIN_KINDS:
        if origin.startswith(key):
            return key
    return origin


def candidate_stats(records: list[dict]) -> dict:
    """How often each kind of candidate layout wins (among all SubGPU records and among those on
    the SubGPU frontier), and how often scoring the top layouts with the exact scorer changed
    Algorithm 1's choice (records with ``cheap_rank`` > 0)."""
    from subgpu_jax.app.report import frontiers

    sub = [r for r in records if r["mode"] == "subgpu"]
    on_front = frontiers(records)["subgpu"]

    def count(rs):
        out = {key: 0 for key, _ in ORIGIN_KINDS}
        for r in rs:
            k = origin_kind(r.get("origin", ""))
            out[k] = out.get(k, 0) + 1
        return out

    ranks = [r["cheap_rank"] for r in sub if r.get("cheap_rank") is not None]
    return {"kinds": dict(ORIGIN_KINDS), "wins_all_points": count(sub),
            "wins_on_frontier": count(on_front),
            "boundary_reuse_w1": int(sum(r["w"] == 1 for r in sub)),
            "exact_ranking_changed_choice": int(sum(k > 0 for k in ranks)),
            "exact_ranking_points": len(ranks)}


def git_state(root: str = os.path.dirname(HERE)) -> dict:
    """``{"commit": HEAD sha or None, "dirty": bool or None}`` of the repository holding
    ``root`` (``git rev-parse HEAD``, ``git status --porcelain -uno``; None where git or the
    repository is absent). The results of a sweep are tied to the code that made them."""
    import subprocess

    def git(*args):
        try:
            return subprocess.run(["git", "-C", root, *args], capture_output=True, text=True,
                                  timeout=30, check=True).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None

    import hashlib
    from pathlib import Path

    sha = git("rev-parse", "HEAD")
    st = git("status", "--porcelain", "-uno", "--", "subgpu_jax")
    # the library's source itself (sha256 over its .py files' paths and bytes): git metadata can
    # lie where a copy of the tree runs (2026-12-07: a device copy reported an older commit, clean)
    h = hashlib.sha256()
    for f in sorted(Path(root, "subgpu_jax").rglob("*.py")):
        h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes())
    return {"commit": sha, "dirty_subgpu_jax": None if st is None else bool(st),
            "subgpu_jax_sha256": h.hexdigest()[:16]}


def duration_settings(arch, hw, dep) -> dict:
    """The uncalibrated duration model the records were made with, for comparing a later rerun:
    the duration model's name and version, the GPU preset's main fields (launch µs, collective setup µs,
    GEMM efficiency, bandwidths in bytes/s, tensor FLOP/s, SMs) and a fingerprint of the
    isolated kernel durations (µs, rounded to 1e-3) of the main region's graph (m = 1) of
    deployment ``dep`` on every pool size, with its kernel count and whole-GPU sum (µs).

    Returns:
        A JSON-serialisable dict.
    """
    import hashlib

    import numpy as np

    from subgpu_jax.model.graph import StaticDurationModel
    from subgpu_jax.model.workload import Workload

    g = Workload.from_model(arch, dep).graph(1)
    tab = StaticDurationModel(hw).table(g)
    fields = ("num_sms", "sm_budget", "sm_quantum", "launch_us", "comm_setup_us",
              "gemm_efficiency", "hbm_copy_Bps", "hbm_read_Bps", "l2_Bps", "l2_bytes",
              "nvlink_Bps")
    return {"model": StaticDurationModel(hw).name, "hardware": hw.name,
            **{f: getattr(hw, f) for f in fields},
            "tensor_flops": dict(hw.tensor_flops),
            "reference_deployment": f"TP{dep.attn_tp}xDP{dep.attn_dp} EP{dep.moe_ep} "
                                    f"G={dep.global_batch}",
            "main_region_kernels": int(g.n),
            "main_region_static_us": float(tab[:, hw.num_sms].sum()),
            "duration_fingerprint": hashlib.sha256(
                np.round(tab, 3).tobytes()).hexdigest()[:16]}


def coverage(points, done: set) -> dict:
    """Finished / total grid points by kind: ``{"temporal": [done, total], "by_microbatches":
    {m: [done, total]}, "by_stages": {D: ...}, "by_ep": {e: ...}}`` (SubGPU points only in the
    three ``by_`` tables; keys are strings, JSON)."""
    out = {"temporal": [0, 0], "by_microbatches": {}, "by_stages": {}, "by_ep": {}}
    for p in sorted(points, key=lambda p: (p.microbatches, p.D, p.deploy.moe_ep)):
        ok = int(p.key in done)
        if p.D == 1:
            out["temporal"][0] += ok
            out["temporal"][1] += 1
            continue
        for tab, v in (("by_microbatches", p.microbatches), ("by_stages", p.D),
                       ("by_ep", p.deploy.moe_ep)):
            c = out[tab].setdefault(str(v), [0, 0])
            c[0] += ok
            c[1] += 1
    return out


def frontier_distribution(records: list[dict]) -> dict:
    """Where the SubGPU frontier's points lie: counts by stage count D, microbatch count m and
    MoE EP degree e (``{"points": n, "D": {D: n}, "microbatches": {m: n}, "moe_ep": {e: n}}``,
    keys strings), and how many SubGPU points lie on the frontier of all records (temporal and
    SubGPU together: ``on_joint_frontier``)."""
    from subgpu_jax.app.report import frontiers

    front = frontiers(records)["subgpu"]
    out: dict = {"points": len(front)}
    for f in ("D", "microbatches", "moe_ep"):
        c: dict = {}
        for r in front:
            c[str(r[f])] = c.get(str(r[f]), 0) + 1
        out[f] = dict(sorted(c.items(), key=lambda kv: int(kv[0])))
    joint = frontiers([{**r, "mode": "subgpu"} for r in records])["subgpu"]
    out["on_joint_frontier"] = int(sum(r["D"] > 1 for r in joint))
    return out


def cpu_per_point(runs: list[dict]) -> dict:
    """Mean CPU-seconds per point of each kind ("temporal" or m) for the digest: of each kind,
    the measurement of the run that timed the most points of it (``cpu_points``; a run logged
    without it counts as ``evaluated`` points), the later run on ties, so that a short resume
    (one point, compilation included) does not replace a long run's mean."""
    best: dict = {}
    for r in runs:
        for k, v in r.get("cpu_per_point", {}).items():
            n = r.get("cpu_points", {}).get(k, r.get("evaluated", 0))
            if k not in best or n >= best[k][0]:
                best[k] = (n, v)
    return {k: v for k, (n, v) in best.items()}


def remaining_estimate(points, done: set, cpu_per_point: dict) -> dict:
    """CPU-seconds to finish the grid, from the measured mean CPU time per point of each
    microbatch count (``cpu_per_point``: {m: s}, temporal under "temporal"): ``{"cpu_seconds":
    s or None, "points_without_measurement": n}`` (0 s when nothing is left; None when no
    remaining point has a measurement for its kind; otherwise the measured kinds only)."""
    total, unknown = 0.0, 0
    for p in points:
        if p.key in done:
            continue
        k = "temporal" if p.D == 1 else str(p.microbatches)
        if k in cpu_per_point:
            total += cpu_per_point[k]
        else:
            unknown += 1
    left = sum(p.key not in done for p in points)
    return {"cpu_seconds": round(total, 1) if left > unknown or not left else None,
            "points_without_measurement": unknown}


def _pct_range(rows: list) -> str:
    """``"+a% .. +b%"`` over the ``gain`` fields of a matched-gain table (fractions), or "-"."""
    g = [r["gain"] for r in rows or [] if r.get("gain") is not None]
    return f"{min(g):+.1%} .. {max(g):+.1%}" if g else "-"


def report(allr: dict) -> str:
    """The studies of ``frontier_studies.json`` (``allr``) as Markdown, for the README: a table
    (points finished of the grid, finished per microbatch count m, wall and CPU time over all
    runs with the largest worker count, best speedup over temporal, the matched-gain ranges),
    then per study how often each candidate kind wins (all SubGPU points / frontier points),
    how often the exact ranking changed the choice, and where the frontier points lie. Every
    number is read from ``allr``; nothing is recomputed."""
    lines = ["| study | points finished | finished by m (done/total) | wall s (CPU-s, workers) "
             "| best speedup | per-GPU gain at matched per-user | per-user gain at matched "
             "per-GPU |", "|---|---|---|---|---|---|---|"]
    notes = []
    for name, d in allr.items():
        cov = d["coverage"]
        by_m = ", ".join(f"m={m}: {a}/{b}" for m, (a, b) in cov["by_microbatches"].items())
        workers = max((r.get("workers", 1) for r in d.get("runs", [])), default=1)
        best = d.get("best") or {}
        sp = f"{best['speedup_vs_temporal']:.3f}x" if best else "-"
        lines.append(f"| {name} | {d['finished']:,} of {d['grid_points']:,} | temporal "
                     f"{cov['temporal'][0]}/{cov['temporal'][1]}, {by_m} | "
                     f"{d['wall_seconds']:,.0f} ({d['cpu_seconds']:,.0f}, {workers}) | {sp} | "
                     f"{_pct_range(d.get('per_gpu_gain_at_matched_per_user'))} | "
                     f"{_pct_range(d.get('per_user_gain_at_matched_per_gpu'))} |")
        c, fp = d["candidates"], d["frontier_points"]
        wins = ", ".join(f"{k} {c['wins_all_points'][k]} ({c['wins_on_frontier'][k]})"
                         for k in c["kinds"] if c["wins_all_points"].get(k))
        where = "; ".join(f"{f} " + ", ".join(f"{k}: {v}" for k, v in fp[f].items())
                          for f in ("D", "microbatches", "moe_ep"))
        notes.append(f"* {name}: wins by candidate kind, all SubGPU points (frontier points): "
                     f"{wins}; boundary reuse w = 1 at {c['boundary_reuse_w1']}; the exact "
                     f"ranking changed the choice at {c['exact_ranking_changed_choice']} of "
                     f"{c['exact_ranking_points']}; {fp['points']} SubGPU frontier points "
                     f"({where}), {fp['on_joint_frontier']} on the frontier of all points; "
                     f"duration model {d['duration_model'].get('model') or 'unnamed'} "
                     f"(fingerprint {d['duration_model']['duration_fingerprint']}).")
    return "\n".join(lines + [""] + notes)


def main(argv=None) -> int:
    """Command line entry point (the module docstring). Returns the exit code: 2 with one
    line ``error: ...`` for a --tp that is no attention TP of the study, an empty
    --compile-cache or one that is a file, a --report without a readable digest file, or a
    study folder that cannot be resumed; argparse's own errors for the other arguments."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study", choices=sorted(STUDIES), default="gptoss120b_b200")
    ap.add_argument("--report", action="store_true",
                    help="print the studies of frontier_studies.json as Markdown and exit")
    ap.add_argument("--budget", type=int, default=None, help="grid points in this call")
    ap.add_argument("--cpu-budget", type=float, default=None,
                    help="CPU-seconds of this call: no new chunk of grid points starts after it")
    ap.add_argument("--chunk", type=int, default=25,
                    help="grid points between writes of the outputs and the digest (>= 1)")
    ap.add_argument("--exact", default="event", choices=tuple(TIMERS),
                    help="the exact scorer (score.timer.TIMERS); vcontention is the batched "
                         "one (its best records are re-checked by the event simulator)")
    ap.add_argument("--kv-history", type=int, default=32768)
    ap.add_argument("--tp", type=int, default=None,
                    help="restrict to this attention TP, one of the study's (default: every "
                         "TP <= 8)")
    ap.add_argument("--narrow", action="store_true",
                    help="the first published grid: D = 2..4, m = 1, 2, 4, largest EP only")
    ap.add_argument("--overwrite", action="store_true",
                    help="delete the study's records (of any grid) and start afresh")
    ap.add_argument("--allow-model-change", action="store_true",
                    help="resume even when the duration model changed since the finished points")
    ap.add_argument("--overwrite-stale", action="store_true",
                    help="start the study afresh when its finished points were made with another "
                         "duration model or grid; resume it otherwise (the device script's mode)")
    ap.add_argument("--workers", type=int, default=1,
                    help="CPU worker processes scoring grid points in parallel (>= 1; 1: this "
                         "process; N > 1: subgpu_jax.app.pool, JAX on the CPU, 1 thread each)")
    ap.add_argument("--schedule", default="groups", choices=SCHEDULES,
                    help="with --workers > 1: groups (default): a worker keeps to the stages "
                         "and microbatches it has compiled, within a tier of the study order "
                         "(app.pool.Scheduler); deployments: the same per deployment (the "
                         "key before 2026-12-07); fifo: the points in study order only")
    ap.add_argument("--compile-cache", default=os.path.join(tempfile.gettempdir(),
                                                            "subgpu_jax_compile_cache"),
                    help="with --workers > 1: folder of JAX's persistent compilation cache, "
                         "shared by the workers and later calls ('none': off); the records do "
                         "not depend on it")
    ap.add_argument("--wall-budget", type=float, default=None,
                    help="wall seconds from the start of this command: with --workers > 1 no "
                         "grid point runs past it (those in flight are dropped), with 1 worker "
                         "it is checked between chunks; the final write of the outputs follows")
    a = ap.parse_args(argv)
    for name, v, lo in (("--budget", a.budget, 1), ("--chunk", a.chunk, 1),
                        ("--workers", a.workers, 1)):
        if v is not None and v < lo:
            ap.error(f"{name} must be >= {lo}, got {v}")
    if a.cpu_budget is not None and not a.cpu_budget > 0:
        ap.error(f"--cpu-budget must be > 0 CPU-seconds, got {a.cpu_budget}")
    if a.wall_budget is not None and not a.wall_budget > 0:
        ap.error(f"--wall-budget must be > 0 seconds, got {a.wall_budget}")
    if a.cpu_budget is not None and a.workers > 1:
        ap.error("--cpu-budget counts one process's CPU time; with --workers > 1 use "
                 "--wall-budget")
    if not a.compile_cache.strip():
        return usage_error("--compile-cache must be a folder, or 'none' to turn the cache off, "
                           "got an empty string")
    a.compile_cache = None if a.compile_cache.lower() == "none" else a.compile_cache
    if a.compile_cache is not None:
        from subgpu_jax.model.checks import out_dir

        try:
            out_dir(a.compile_cache, "--compile-cache")
        except ValueError as e:
            return usage_error(f"{e} ('none' turns the cache off)")
    if a.report:
        path = os.path.join(HERE, "results", "frontier_studies.json")
        try:
            with open(path) as fh:
                text = report(json.load(fh))
        except OSError as e:
            return usage_error(f"--report: cannot read {path}: {e.strerror or e}")
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            return usage_error(f"--report: {path} is not a file of study digests "
                               f"({type(e).__name__}: {str(e)[:200]})")
        print(text)
        return 0
    st = {**STUDIES[a.study], **(NARROW if a.narrow else WIDE)}
    arch, hw = get_model(st["model"]), get_hardware(st["hw"])
    pars = parallelisms(arch, st["gpus"], st["all_ep"])
    if a.tp is not None:
        tps = sorted({p[0] for p in pars})
        if a.tp not in tps:  # an empty list would mean build_grid's default grid
            return usage_error(f"--tp must be one of {', '.join(map(str, tps))} (the attention "
                               f"TPs of {a.study}), got {a.tp}")
        pars = [p for p in pars if p[0] == a.tp]
    skipped: list = []
    pts = build_grid(arch, st["gpus"], st["batches"], st["stages"], st["microbatches"],
                     kv_history=a.kv_history, parallelisms=pars, hw=hw, skipped=skipped)
    pts = order_points(pts)
    if skipped:
        print(f"skipped {len(skipped)} infeasible combinations, e.g. {skipped[0]}")
    out = os.path.join(HERE, "results", f"frontier_{a.study}")
    from subgpu_jax.sim.contention import uncalibrated_model_id
    meta = {"study": a.study, **st, "exact": a.exact, "kv_history": a.kv_history, "tp": a.tp,
            "duration_model": uncalibrated_model_id(hw)}   # as run_search records it
    if study_timer(a.exact, hw).contention:  # as run_search records it (the co-run fit)
        from subgpu_jax.sim.contention import ContentionModel
        meta["latency_load_gain"] = ContentionModel().latency_gain
    print(f"{a.study}: {len(pts)} grid points -> {out}")
    path = os.path.join(HERE, "results", "frontier_studies.json")
    allr = {}
    if os.path.exists(path):
        with open(path) as fh:
            allr = json.load(fh)
    fp = grid_fingerprint(json.loads(json.dumps(meta, sort_keys=True)))
    old = allr.get(a.study, {})
    dm = duration_settings(arch, hw, pts[0].deploy)
    if a.overwrite_stale and (old.get("fingerprint") != fp or old.get(
            "duration_model", {}).get("duration_fingerprint") != dm["duration_fingerprint"]):
        a.overwrite = True
        print(f"{a.study}: finished points (if any) were made with another grid or duration "
              "model: starting afresh (--overwrite-stale)")
    runs = list(old.get("runs", [])) if old.get("fingerprint") == fp and not a.overwrite else []
    was = old.get("duration_model", {}).get("duration_fingerprint") if runs else None
    if was and was != dm["duration_fingerprint"] and not a.allow_model_change:
        print(f"error: the study's {old.get('finished')} finished points were made with another "
              f"duration model (fingerprint {was}, now {dm['duration_fingerprint']}, "
              f"{dm['model']}); --overwrite reruns the study, --allow-model-change mixes them",
              file=sys.stderr)
        return 2
    run = {"started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **git_state(),
           "duration_fingerprint": dm["duration_fingerprint"], "workers": a.workers,
           "shared_compile_cache": a.workers > 1 and a.compile_cache is not None,
           "evaluated": 0, "wall_seconds": 0.0, "cpu_seconds": 0.0, "cpu_per_point": {}}
    runs.append(run)
    t_start = T_START if argv is None else time.monotonic()  # the command, or this main() call
    deadline = None if a.wall_budget is None else t_start + a.wall_budget
    ctx = dict(a=a, st=st, pts=pts, out=out, meta=meta, fp=fp, runs=runs, run=run, arch=arch,
               hw=hw, allr=allr, path=path)
    try:
        rc = (_run_pool if a.workers > 1 else _run_single)(ctx, deadline)
    except ValueError as e:  # another grid in the folder, or the folder in use
        print(f"error: {e} (--overwrite starts the study afresh)", file=sys.stderr)
        return 2
    if rc:
        return rc
    d = allr[a.study]
    print(json.dumps({k: v for k, v in d.items() if k not in ("best", "runs",
                      "per_user_gain_at_matched_per_gpu", "per_gpu_gain_at_matched_per_user")},
                     indent=1)[:4000])
    b = d["best"]
    if b:
        print(f"best: G={b['global_batch']} TP{b['attn_tp']}xDP{b['attn_dp']} D={b['D']} "
              f"w={b['w']} m={b['microbatches']} SMs={b['sms']} -> "
              f"{b['speedup_vs_temporal']:.3f}x temporal")
    return 0


def _kind(p) -> str:
    """The ``cpu_per_point`` key of a grid point: "temporal" or its microbatch count."""
    return "temporal" if p.D == 1 else str(p.microbatches)


def _write_digest(ctx: dict, recs: list, done: set, summ: dict) -> None:
    """Put the study's ``digest`` (records sorted in grid order, so that it does not depend on
    the order in which workers finished) into ``frontier_studies.json`` (atomic replace)."""
    order = {p.key: i for i, p in enumerate(ctx["pts"])}
    recs = sorted(recs, key=lambda r: order.get(r.get("grid_key"), len(order)))
    a = ctx["a"]
    ctx["allr"][a.study] = entry = digest(a, ctx["st"], ctx["pts"], ctx["meta"], ctx["fp"], summ,
                                          ctx["runs"], ctx["arch"], ctx["hw"], recs, done)
    import fcntl

    # the other studies' entries as they are now (another study may run in another process)
    with open(ctx["path"] + ".lock", "w") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        allr = {}
        if os.path.exists(ctx["path"]):
            with open(ctx["path"]) as fh:
                allr = json.load(fh)
        allr[a.study] = entry
        with open(ctx["path"] + ".tmp", "w") as fh:
            json.dump(allr, fh, indent=2)
        os.replace(ctx["path"] + ".tmp", ctx["path"])


def _run_single(ctx: dict, deadline: float | None) -> int:
    """One process: ``run_search`` in chunks of ``--chunk`` points, the digest after each;
    the CPU and wall budgets are checked between chunks. Returns the exit code."""
    a, pts, out, meta, run = ctx["a"], ctx["pts"], ctx["out"], ctx["meta"], ctx["run"]
    t_wall, t_cpu = time.time(), time.process_time()
    per_kind: dict = {}  # m or "temporal" -> [cpu seconds, points]
    overwrite, left = a.overwrite, a.budget
    while True:
        resume = not overwrite and os.path.exists(os.path.join(out, "manifest.json"))
        with SweepStore(out, meta, resume=resume, overwrite=overwrite) as store:
            todo = [p for p in pts if p.key not in store.done]
        n = min(a.chunk, len(todo)) if left is None else min(a.chunk, left, len(todo))
        c0 = time.process_time()
        stats, summ = run_search(ctx["arch"], ctx["hw"], pts, out, meta, SearchOptions(
            timer=study_timer(a.exact, ctx["hw"]), resume=True, budget=max(n, 1), progress=sys.stderr.isatty()))
        overwrite = False
        if stats["evaluated"]:
            kinds = {_kind(p) for p in todo[:n]}
            k = kinds.pop() if len(kinds) == 1 else None  # a chunk of one kind times that kind
            if k is not None:
                acc = per_kind.setdefault(k, [0.0, 0])
                acc[0] += time.process_time() - c0
                acc[1] += stats["evaluated"]
        if left is not None:
            left -= stats["evaluated"]
        run["evaluated"] += stats["evaluated"]
        run["wall_seconds"] = round(time.time() - t_wall, 1)
        run["cpu_seconds"] = round(time.process_time() - t_cpu, 1)
        run["cpu_per_point"] = {k: round(s / max(c, 1), 2) for k, (s, c) in per_kind.items()}
        run["cpu_points"] = {k: c for k, (s, c) in per_kind.items()}
        done = stats["remaining"] == 0 or (left is not None and left <= 0) or (
            a.cpu_budget is not None and run["cpu_seconds"] >= a.cpu_budget) or (
            deadline is not None and time.monotonic() >= deadline)
        with SweepStore(out, meta, resume=True) as store:
            recs, finished = list(store.records), set(store.done)
        _write_digest(ctx, recs, finished, summ)
        print(f"{a.study}: {run['evaluated']} points this call, {stats['remaining']} left, "
              f"{run['cpu_seconds']:.0f} CPU-s", flush=True)
        if done:
            return 0


def _run_pool(ctx: dict, deadline: float | None) -> int:
    """``--workers N`` processes (``subgpu_jax.app.pool.run_sweep_pool``): every finished point
    is stored at once; the outputs (``write_outputs``) and the digest are rewritten every
    ``--chunk`` points and at the end; ``cpu_per_point`` is the workers' mean CPU time per
    point of each kind. Returns the exit code."""
    from subgpu_jax.app.pool import run_sweep_pool
    from subgpu_jax.app.searchjob import PointScorer, ScorerSpec
    from subgpu_jax.app.searchout import write_outputs
    from subgpu_jax.app.searchrun import reuses_programs
    from subgpu_jax.app.sweep import pending_points, record_matches_key

    a, pts, out, meta, run = ctx["a"], ctx["pts"], ctx["out"], ctx["meta"], ctx["run"]
    arch, hw = ctx["arch"], ctx["hw"]
    order = {p.key: i for i, p in enumerate(pts)}
    scorer = PointScorer(arch, hw, study_timer(a.exact, hw))  # this process: the Gantt chart
    title = f"{arch.name} on {pts[0].deploy.num_gpus}x {hw.name} ({a.exact} scorer)"
    t_wall, t_cpu = time.time(), time.process_time()
    per_kind: dict = {}  # m or "temporal" -> [worker CPU seconds, points]
    worker_cpu = [0.0]
    with SweepStore(out, meta, overwrite=a.overwrite, keys=[p.key for p in pts],
                    check_record=record_matches_key) as store:
        def flush() -> None:
            recs = sorted(store.records, key=lambda r: order.get(r["grid_key"], len(order)))
            summ = write_outputs(recs, out, title, scorer)
            run["wall_seconds"] = round(time.time() - t_wall, 1)
            run["cpu_seconds"] = round(time.process_time() - t_cpu + worker_cpu[0], 1)
            run["cpu_per_point"] = {k: round(s / c, 2) for k, (s, c) in per_kind.items()}
            run["cpu_points"] = {k: c for k, (s, c) in per_kind.items()}
            _write_digest(ctx, recs, set(store.done), summ)

        def on_point(p, recs, cpu) -> None:
            acc = per_kind.setdefault(_kind(p), [0.0, 0])
            acc[0] += cpu
            acc[1] += 1
            worker_cpu[0] += cpu
            run["evaluated"] += 1
            if run["evaluated"] % a.chunk == 0:
                flush()
                print(f"{a.study}: {run['evaluated']} points this call, "
                      f"{len(pts) - len(store.done)} left, {run['cpu_seconds']:.0f} CPU-s, "
                      f"{run['wall_seconds']:.0f} s", flush=True)

        # the workers keep to structure families: their cheap estimator reuses its programs
        cheap = scorer.cheap.for_sweep(reuses_programs(pending_points(pts, store,
                                                                      a.budget)[0]))
        stats = run_sweep_pool(pts, ScorerSpec(arch, hw, a.exact, cheap=cheap), store, a.workers,
                               budget=a.budget, deadline=deadline, on_point=on_point,
                               compile_cache=a.compile_cache,
                               group=schedule_groups(a.schedule, pts))
        flush()
    stop = {"deadline": "wall budget reached", "interrupt": "interrupted"}.get(stats["stopped"])
    why = (f" ({stop}: {stats['lost_in_flight']} point(s) in flight dropped)" if stop else "")
    print(f"{a.study}: {run['evaluated']} points this call with {a.workers} workers, "
          f"{stats['remaining']} left, {run['cpu_seconds']:.0f} CPU-s, "
          f"{run['wall_seconds']:.0f} s{why}", flush=True)
    if stats["stopped"] == "interrupt":
        print(f"{a.study}: interrupted; the finished grid points are stored and the outputs "
              "written: run the same command again to continue", file=sys.stderr)
        return 130
    return 0


#: Microbatch counts up to this one run before the larger ones (the method's grid runs m up to 8
#: everywhere, and 16 where the per-GPU batch allows it).
M_FIRST = 8


def tier_of(p, e_max: int) -> int:
    """The tier of point ``p`` in a study's order (``order_points``; ``e_max``: the grid's
    largest EP degree): 0 temporal, 1 the largest EP with m <= ``M_FIRST``, 2 the other EP
    degrees with m <= ``M_FIRST``, 3 the larger microbatch counts."""
    if p.D == 1:
        return 0
    if p.microbatches > M_FIRST:
        return 3
    return 1 if p.deploy.moe_ep == e_max else 2


def order_points(pts):
    """The order in which a study runs its grid points, so that a sweep cut short by its budget
    covers whole axes: the temporal baselines first; then the SubGPU points in three tiers
    (``tier_of``); within a tier by microbatch count m and stage count D (the points of one
    (m, D) share the shapes of the cheap estimator's compiled functions, which are compiled
    once for all of them), ascending, except in the last tier (the larger microbatch counts,
    the dearest points: the study's end), where D descends: the dearest points start first and
    the workers' last points are the cheapest (longest-processing-time order; the D = 6,
    m = 16 points cost 3-5x the D = 2 ones: results/bench_integrals_cpu.json)."""
    e_max = max((p.deploy.moe_ep for p in pts), default=1)

    def key(p):
        t = tier_of(p, e_max)
        return (t, p.microbatches, -p.D if t == 3 else p.D)

    return sorted(pts, key=key)


def schedule_groups(name: str, pts):
    """The worker pool's group key (``app.pool.Scheduler``) of ``--schedule name`` for the
    study's points ``pts``, or None (``fifo``: the study order alone). ``groups``: the tier and
    ``searchrun.structure_key`` (stages, microbatches, policy, streams: one family of compiled
    programs), so a worker keeps to a family within a tier; ``deployments``: the same and the
    deployment's shape (GPUs, attention TP and DP, MoE EP), the key before 2026-12-07, which
    split every family into its deployments (the baseline of ``groups``)."""
    from subgpu_jax.app.searchrun import structure_key

    if name not in SCHEDULES:
        raise ValueError(f"--schedule must be one of {', '.join(SCHEDULES)}, got {name!r}")
    e_max = max((p.deploy.moe_ep for p in pts), default=1)
    if name == "groups":
        return lambda p: (tier_of(p, e_max), *structure_key(p))
    if name == "deployments":
        return lambda p: (tier_of(p, e_max), p.deploy.num_gpus, p.deploy.attn_tp,
                          p.deploy.attn_dp, p.deploy.moe_ep, *structure_key(p))
    return None     # fifo


#: ``--schedule``'s choices (``schedule_groups``).
SCHEDULES = ("groups", "deployments", "fifo")


def study_timer(name: str, hw):
    """The exact scorer ``name`` (``score.timer.TIMERS``) of the uncalibrated ``hw``."""
    from subgpu_jax.model.setup import GpuSetup
    from subgpu_jax.score.timer import timer_for

    return timer_for(GpuSetup.uncalibrated(hw), name)


def search_settings(exact: str, kv_history: int) -> dict:
    """The search settings a study runs with: the exact scorer, the cheap estimator
    (contention-aware with the event simulator), and the defaults of ``run_search`` (L2 policy,
    exact-polish pass limit ``L_sim``, cut and allocation strategies) and of ``algorithm1``
    (``exact_top``: layouts of the cheap ranking scored by the exact scorer), read from their
    options objects' defaults so that the record follows the code."""
    from subgpu_jax.search.algorithm1 import Algorithm1Options

    rs, a1 = SearchOptions(), Algorithm1Options()
    from subgpu_jax.model.hardware import get_hardware
    from subgpu_jax.search.strategies import CHEAP_ESTIMATORS

    cheap = CHEAP_ESTIMATORS[rs.cheap].resolve(study_timer(exact, get_hardware("H200"))).name
    return {"exact": exact, "cheap": cheap,
            **{k: getattr(rs, k) for k in ("cache", "L_sim", "cut_strategy", "alloc_strategy")},
            **{k: getattr(a1, k) for k in ("exact_top", "rotation_refine", "L_est")},
            "kv_history": kv_history}


def digest(a, st: dict, pts, meta: dict, fp: str, summ: dict, runs: list, arch, hw,
           recs: list, done: set) -> dict:
    """The study's entry of ``frontier_studies.json``: grid, coverage, time, settings, matched
    gains, candidate kinds, frontier distribution, best record, and the command that resumes
    it (the keys are described in the README's frontier-study section)."""
    m = summ["matched"]
    per_point = cpu_per_point(runs)
    finished = sum(p.key in done for p in pts)
    cmd = (f"nice -n 10 python experiments/frontier_study.py --study {a.study}"
           + (" --narrow" if a.narrow else "") + (f" --tp {a.tp}" if a.tp else "")
           + " [--workers N] [--wall-budget SECONDS | --cpu-budget SECONDS]")
    return {"study": a.study, "fingerprint": fp, "grid_points": len(pts),
            "finished": finished, "remaining": len(pts) - finished,
            "complete": finished == len(pts),
            "grid": {k: st[k] for k in ("stages", "microbatches", "all_ep", "batches")},
            "coverage": coverage(pts, done),
            "wall_seconds": round(sum(r["wall_seconds"] for r in runs), 1),
            "cpu_seconds": round(sum(r["cpu_seconds"] for r in runs), 1),
            "cpu_per_point": per_point,
            "estimated_cpu_seconds_to_finish": remaining_estimate(pts, done, per_point),
            "resume_command": cmd,
            "settings": search_settings(a.exact, a.kv_history),
            "duration_model": duration_settings(arch, hw, pts[0].deploy),
            "runs": runs,
            "max_per_user_gain_at_matched_per_gpu": m["max_per_user_gain"],
            "max_per_gpu_gain_at_matched_per_user": m["max_per_gpu_gain"],
            "per_user_gain_at_matched_per_gpu": m["per_user_gain_at_matched_per_gpu"],
            "per_gpu_gain_at_matched_per_user": m["per_gpu_gain_at_matched_per_user"],
            "candidates": candidate_stats(recs),
            "frontier_points": frontier_distribution(recs),
            "best": summ["best_speedup_record"]}


if __name__ == "__main__":
    sys.exit(main())
