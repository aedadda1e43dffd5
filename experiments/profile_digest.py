"""Kernel-by-kernel digest of profiled validate runs (``hw_fidelity_h200.py --phase validate``
with ``"trace": true`` in the configurations, e.g. the wins study on
``results/hw_wins/attention/trace_configs.json`` under each ``--attention``): per run and
configuration, the measured step, the profiled replay's span, and per (kernel name, stream) the
launches and the median and summed device time.

    python experiments/profile_digest.py --run LABEL=FILE [LABEL=FILE ...] --out OUT.json

``FILE`` is one ``validate_<workload>.json`` with ``profile`` entries (the raw activities stay
out of the tree; this digest is what gets committed). Streams are the profiler's ids: which
stage (pool) a stream served is read from the kernels it ran (the plan's ``alloc`` is kept).
Bad input (a missing file, no profile, a malformed ``--run``): one line naming it, exit 2.
CPU only.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from digest_cli import run_digest, write_digest  # noqa: E402  (the shared --out/error frame)

#: Kernel names kept per configuration (by summed time).
TOP = 12


def digest_profile(prof: dict) -> dict:
    """``{"span_us", "alloc", "streams_per_stage", "kernels": [{"name", "stream",
    "launches", "median_us", "sum_us"}, ...]}`` of one ``profile`` entry (the ``TOP`` largest by
    summed time per replay; launches and sums per replay, launches a float where a kernel did
    not run in every replay; ``stream``: the profiler's id).

    Raises:
        ValueError: the entry has no activities or plan.
    """
    acts = [a for a in prof.get("activities") or () if a.get("kind") == "kernel"]
    plan = prof.get("plan")
    if not acts or not isinstance(plan, dict):
        raise ValueError("a profile without kernel activities or plan")
    reps = prof.get("replays", 1)
    if isinstance(reps, bool) or not isinstance(reps, int) or reps < 1:
        raise ValueError(f"profile replays must be an int >= 1, got {reps!r}")
    for a in acts:
        for f in ("start_us", "dur_us"):
            x = a.get(f)
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
                raise ValueError(f"an activity's {f} must be a finite number, got {x!r}")
        if not isinstance(a.get("name"), str) or not isinstance(a.get("stream"), (int, str)):
            raise ValueError(f"an activity needs a name and a stream id, got {a!r}"[:200])
    groups: dict = {}
    for a in acts:
        groups.setdefault((a["name"], a["stream"]), []).append(float(a["dur_us"]))
    rows = [{"name": n[:120], "stream": s, "launches": len(v) / reps,
             "median_us": statistics.median(v), "sum_us": sum(v) / reps}
            for (n, s), v in groups.items()]
    rows.sort(key=lambda r: -r["sum_us"])
    span = max(a["start_us"] + a["dur_us"] for a in acts) - min(a["start_us"] for a in acts)
    return {"span_us": span / reps, "alloc": plan.get("alloc"),
            "streams_per_stage": plan.get("streams_per_stage"), "kernels": rows[:TOP]}


def digest_file(path: str) -> dict:
    """Per configuration of one validate file: measured step (µs) and ``digest_profile``.

    Raises:
        ValueError: the file is missing or unreadable, or has no profiled configuration.
    """
    if not os.path.isfile(path):
        raise ValueError(f"--run: no file {path!r}")
    try:
        with open(path) as fh:
            d = json.load(fh)
    except (OSError, ValueError) as e:           # (JSON and UTF-8 decode errors included)
        raise ValueError(f"--run: {path!r} is not readable JSON ({e})") from e
    rows = d.get("rows") if isinstance(d, dict) else None
    if not isinstance(rows, list):
        raise ValueError(f"--run: {path!r} is not a validate file (no list of rows)")
    out = {"workload": d.get("workload"), "attention": d.get("attention"),
           "collectives": d.get("collectives"), "configs": {}}
    for r in rows:
        if not (isinstance(r, dict) and isinstance(r.get("profile"), dict) and "measured" in r):
            continue
        name = r.get("name")
        ms = (r.get("measured") or {}).get("makespan_us") if isinstance(r.get("measured"),
                                                                         dict) else None
        if not isinstance(name, str) or name in out["configs"]:
            raise ValueError(f"--run: {path!r}: a profiled row without a name or a repeated "
                             f"name ({name!r})")
        if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not math.isfinite(ms):
            raise ValueError(f"--run: {path!r}: row {name!r} has no finite measured makespan_us")
        try:
            out["configs"][name] = dict(measured_us=ms, **digest_profile(r["profile"]))
        except ValueError as e:
            raise ValueError(f"--run: {path!r}: row {name!r}: {e}") from None
    if not out["configs"]:
        raise ValueError(f"--run: {path!r} has no profiled configuration")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", nargs="+", required=True, metavar="LABEL=FILE")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    def work() -> dict:
        runs = {}
        for item in a.run:
            label, sep, path = item.partition("=")
            if not sep or not label or not path:
                raise ValueError(f"--run: expected LABEL=FILE, got {item!r}")
            if label in runs:
                raise ValueError(f"--run: label {label!r} given twice")
            if os.path.abspath(path) == os.path.abspath(a.out):
                raise ValueError(f"--out: {a.out!r} is also an input (--run {item!r})")
            runs[label] = digest_file(path)
        write_digest(a.out, {"source": "experiments/profile_digest.py", "runs": runs})
        return runs

    rc, runs = run_digest(work, a.out)
    if rc:
        return rc
    for label, r in runs.items():
        for name, c in r["configs"].items():
            print(f"{label:12s} {name:28s} measured {c['measured_us']:9.0f} µs, profiled span "
                  f"{c['span_us']:9.0f} µs")
            for k in c["kernels"][:4]:
                print(f"    {k['name'][:56]:56s} stream {str(k['stream']):<5} x{k['launches']:<5g} "
                      f"median {k['median_us']:7.1f} µs")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
