"""Issue 42's targets in one digest: the four figures of a ``sweeps`` device call, each beside
the baseline measured in the same call (a ratio), against its target.

The device study ``sweeps`` (``experiments/device/studies/sweeps.sh``) writes five files into
one folder; this script reads them and writes ``bench_sweeps_<gpu>.json`` (``h200``, ``h100``)
with one row per target:

* ``frontier``: the GPT-OSS 120B B200 frontier study on the GPU machine's cores. From
  ``frontier_sample.json`` (``bench_screened.py --jobs frontier``: a sample of the study's SubGPU
  grid points searched with ``--exact event``, the baseline, and ``--exact screened``): the
  screened sample's search seconds projected to the whole study (``STUDY_SUBGPU_POINTS`` /
  sample points; a projection, not a measurement, and said so), against 600 s; and its
  agreement: SubGPU points whose makespan is more than 0.5% above the event search's (target 0)
  and whether the SubGPU frontier holds the same grid points.
* ``main_job``: the README's main job on 2 pinned cores (``main_job.json``,
  ``bench_sweeps.py --cores 2``): ``workers_warm`` (today's default path, a user's second run)
  against ``before`` (the memos and the compile cache off), search seconds, target 15 s.
* ``evaluator``: the static max-plus evaluator's allocations/s on the 36-layer reference
  (``evaluator_<kernel>.json``, ``bench_evaluator.py``: ``gptoss-m{2,4,8}``), the best kernel's
  slowest of the three (the target is for every m) against the package's scan evaluator
  (``scan_evals_per_s``) in the same run, target 1e9/s.
* ``exhaustive``: the certified exhaustive grid point (``exhaustive.json``,
  ``exhaustive_gridpoint.py --no-heuristics``) process wall seconds (``exhaustive_wall.json``,
  timed by the study) against 20 s, and its scan rate against the blocks as before
  (``exhaustive_baseline.json``, ``--baseline --cuts-limit``: the rate of the first cut blocks).

A missing or unreadable part gives its row ``"status": "missing"`` (never a made-up figure).

Usage: python experiments/bench_sweeps_gpu.py --from DIR [--out JSON]
Units: seconds, allocations (candidates) per second.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

#: SubGPU grid points of the GPT-OSS 120B B200 frontier study's grid as
#: ``experiments/frontier_study.py`` counts them when it starts (docs/results.md, "Speed":
#: 2,830 grid points, 2,720 SubGPU).
STUDY_SUBGPU_POINTS = 2720
#: Issue 42's targets (seconds, candidates/s, share of points).
TARGETS = {"frontier_s": 600.0, "frontier_tol": 0.005, "main_job_s": 15.0,
           "evaluator_per_s": 1e9, "exhaustive_s": 20.0}
#: The evaluator rows of the 36-layer reference (``bench_evaluator.py``).
REFERENCE_ROWS = ("gptoss-m2", "gptoss-m4", "gptoss-m8")


def _load(folder: str, name: str):
    """The JSON ``name`` under ``folder``, or None when missing or unreadable."""
    try:
        with open(os.path.join(folder, name)) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def frontier_row(d: dict | None) -> dict:
    """The frontier row from ``bench_screened.py``'s JSON (module docstring)."""
    job = (d or {}).get("jobs", {}).get("frontier")
    if not job:
        return {"target": "frontier", "status": "missing"}
    g = job["agreement"]
    scale = STUDY_SUBGPU_POINTS / g["points"]
    proj, base = job["screened"]["search_s"] * scale, job["event"]["search_s"] * scale
    return {"target": "frontier", "status": "measured",
            "what": f"GPT-OSS 120B B200 frontier study, {g['points']}-point SubGPU sample "
                    f"projected to {STUDY_SUBGPU_POINTS} points (a projection of the sample's "
                    f"search seconds, not a run of the whole study)",
            "figure": round(proj, 1), "unit": "s (projected)", "baseline": round(base, 1),
            "baseline_is": "--exact event on the same sample, same call",
            "ratio": round(base / proj, 3), "target_value": TARGETS["frontier_s"],
            "met": proj <= TARGETS["frontier_s"] and g["points_over_tol"] == 0
            and g["frontier_same_points"],
            "points_over_tol": g["points_over_tol"], "tol": TARGETS["frontier_tol"],
            "makespan_vs_event_max": g["makespan_vs_event_max"],
            "frontier_same_points": g["frontier_same_points"],
            "workers": d.get("workers"), "cores": d.get("env", {}).get("cores_usable")}


def main_job_row(d: dict | None) -> dict:
    """The main-job row from ``bench_sweeps.py``'s JSON (module docstring)."""
    rows = {r["variant"]: r for r in (d or {}).get("rows", [])}
    if "workers_warm" not in rows or "before" not in rows:
        return {"target": "main_job", "status": "missing"}
    new, old = rows["workers_warm"]["search_s"], rows["before"]["search_s"]
    return {"target": "main_job", "status": "measured",
            "what": "the README's main job, search seconds on 2 pinned cores (workers_warm)",
            "figure": new, "unit": "s", "baseline": old,
            "baseline_is": "bench_sweeps.py 'before' (memos and compile cache off), same call",
            "ratio": round(old / new, 3), "target_value": TARGETS["main_job_s"],
            "met": new <= TARGETS["main_job_s"],
            "records_identical": d.get("records_identical_event_runs")}


def evaluator_row(parts: dict) -> dict:
    """The evaluator row from ``bench_evaluator.py``'s JSONs by kernel (module docstring)."""
    best = None
    for kernel, d in parts.items():
        rows = [r for r in (d or {}).get("rows", []) if r["workload"] in REFERENCE_ROWS]
        if len(rows) != len(REFERENCE_ROWS):
            continue
        worst = min(rows, key=lambda r: r["massive_evals_per_s"])
        if best is None or worst["massive_evals_per_s"] > best[1]["massive_evals_per_s"]:
            best = (kernel, worst, d.get("device_kind"))
    if best is None:
        return {"target": "evaluator", "status": "missing"}
    kernel, r, dev = best
    return {"target": "evaluator", "status": "measured",
            "what": f"static max-plus evaluator on the 36-layer reference, the slowest of m = "
                    f"2, 4, 8 ({r['workload']}), kernel {kernel}, {dev}",
            "figure": r["massive_evals_per_s"], "unit": "allocations/s",
            "baseline": r["scan_evals_per_s"],
            "baseline_is": "the package's scan evaluator (evaluator.Evaluator.makespan), same run",
            "ratio": round(r["massive_evals_per_s"] / r["scan_evals_per_s"], 1),
            "target_value": TARGETS["evaluator_per_s"],
            "met": r["massive_evals_per_s"] >= TARGETS["evaluator_per_s"],
            "max_abs_diff_us": r["max_abs_diff_us"]}


def exhaustive_row(new: dict | None, wall: dict | None, old: dict | None) -> dict:
    """The exhaustive row (module docstring)."""
    if not new or not wall:
        return {"target": "exhaustive", "status": "missing"}
    s = float(wall["wall_s"])
    row = {"target": "exhaustive", "status": "measured",
           "what": "the certified exhaustive grid point (experiments/exhaustive_gridpoint.py "
                   "--no-heuristics), process wall seconds",
           "figure": round(s, 2), "unit": "s", "certified": bool(new.get("certified")),
           "evals_per_s": new.get("evals_per_s"), "target_value": TARGETS["exhaustive_s"],
           "met": s <= TARGETS["exhaustive_s"] and bool(new.get("certified"))}
    if old and old.get("evals_per_s"):
        row.update(baseline=old["evals_per_s"],
                   baseline_is="scan rate of the blocks as before (--baseline --cuts-limit), "
                               "same call; the figure's rate beside it",
                   ratio=round(new["evals_per_s"] / old["evals_per_s"], 2))
    return row


def digest(folder: str) -> dict:
    """``bench_sweeps_<gpu>.json``'s content from a ``sweeps`` call's folder."""
    ev = {k: _load(folder, f"evaluator_{k}.json") for k in ("xla", "pallas")}
    dev = next((d.get("device_kind") for d in ev.values() if d), None)
    rows = [frontier_row(_load(folder, "frontier_sample.json")),
            main_job_row(_load(folder, "main_job.json")),
            evaluator_row({k: d for k, d in ev.items() if d}),
            exhaustive_row(_load(folder, "exhaustive.json"),
                           _load(folder, "exhaustive_wall.json"),
                           _load(folder, "exhaustive_baseline.json"))]
    return {"what": "issue 42's targets from one `sweeps` device study "
                    "(experiments/bench_sweeps_gpu.py)", "device": dev, "rows": rows,
            "met": [r["target"] for r in rows if r.get("met")],
            "missed": [r["target"] for r in rows if r.get("status") == "measured"
                       and not r.get("met")],
            "missing": [r["target"] for r in rows if r.get("status") == "missing"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--from", dest="folder", required=True,
                    help="the folder of a `sweeps` device call ($OUT)")
    ap.add_argument("--out", default=None,
                    help="the digest (default experiments/results/bench_sweeps_<gpu>.json)")
    a = ap.parse_args(argv)
    if not os.path.isdir(a.folder):
        ap.error(f"--from must be a folder of a sweeps call, got {a.folder!r}")
    if a.out is not None:
        sys.path.insert(0, os.path.dirname(HERE))
        from subgpu_jax.model.checks import out_file

        try:
            out_file(a.out, "--out")
        except ValueError as e:
            ap.error(str(e))
    d = digest(a.folder)
    if all(r.get("status") == "missing" for r in d["rows"]):
        ap.error(f"--from: {a.folder} holds none of the sweeps study's files")
    gpu = "h200" if "H200" in (d["device"] or "") else "h100" if "H100" in (d["device"] or "") \
        else "gpu"
    out = a.out or os.path.join(HERE, "results", f"bench_sweeps_{gpu}.json")
    with open(out, "w") as fh:
        json.dump(d, fh, indent=1)
    for r in d["rows"]:
        if r["status"] != "measured":
            print(f"{r['target']:11s} missing")
            continue
        base = (f"; baseline {r['baseline']:.4g} ({r['ratio']}x)" if "baseline" in r else "")
        print(f"{r['target']:11s} {r['figure']:.4g} {r['unit']} (target {r['target_value']:.4g}: "
              f"{'met' if r['met'] else 'missed'}){base}")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
