"""Collect the device runs of ``subgpu tune`` (``experiments/device/run.sh tune``, one
``tune_<workload>.tgz`` per workload) and of the brute-force sweep
(``experiments/device/run.sh tune_sweep``, ``tune_sweep_<workload>.tgz``) into
``experiments/results/tune_h200.json`` with the issue 24 targets checked per workload and batch:

* the tune's result measured at least as fast as the best of the uncalibrated search's top 3
  (its first round's candidates, measured in the same tune);
* never slower than temporal;
* GPU time at most 300 s per workload and batch;
* where a complete sweep exists: the tune's result within 2% of the sweep's best.

    python experiments/tune_collect.py --from DIR [--out experiments/results/tune_h200.json]

``DIR`` holds, per workload, the study's bundle ``tune_<workload>.tgz``, or the tune folder
``tune_<workload>/`` itself, or, where the report did not come back from the device, only the
tune's printed log ``tune_<workload>.log`` (then the targets are read from its measurement
lines and its result table, and the entry says so: ``"from": "log"``). Workloads already in
``--out`` and not in ``DIR`` are kept (each entry names its device call in ``"from"``).

CPU only; copies each tune's report and frontier plot (or its log) under
``experiments/results/tune/``.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import sys
import tarfile
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def _extract(path: str, into: str) -> str:
    d = os.path.join(into, os.path.basename(path)[:-4])
    os.makedirs(d, exist_ok=True)
    with tarfile.open(path) as t:
        t.extractall(d, filter="data")
    return d


def check(rep: dict, sweep: dict | None, max_gpu_s: float = 300.0) -> dict:
    """The targets of one workload (module docstring) from its ``tune_report.json`` and its
    ``sweep.json`` (or None): per batch ``{"speedup", "first_top3_best", "at_least_top3",
    "not_slower_than_temporal", "gpu_s", "within_budget", "sweep_best", "within_2pct_of_sweep"}``.
    """
    out = {}
    for G, b in rep["batches"].items():
        r = {"gpu_s": b["gpu_s"], "within_budget": b["gpu_s"] <= max_gpu_s}
        if b.get("winner") is None:
            r["note"] = b.get("note")
            out[G] = r
            continue
        sp, top3 = b["measured_speedup"], b.get("first_search_top3_best_speedup")
        r.update({"speedup": sp, "winner": b["winner"], "first_top3_best": top3,
                  "at_least_top3": top3 is None or sp >= top3 - 1e-12,
                  "not_slower_than_temporal": sp >= 1.0})
        if sweep is not None and sweep.get("best_speedup"):
            r["sweep_best"] = sweep["best_speedup"]
            r["sweep_complete"] = sweep["complete"]
            r["within_2pct_of_sweep"] = sp >= 0.98 * sweep["best_speedup"]
        out[G] = r
    return out


_MEASURED = re.compile(r"^G=\s*(\d+) (temporal|multistream|green)\b(.*?)\s+measured\s+([\d.]+) µs "
                       r"\(spread ([\d.]+)%, ([\d.]+) GPU s\)")
_ROUND = re.compile(r"^round (\d+):")
_BEST = re.compile(r"^\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)x\s+(.+)$")
_TOTAL = re.compile(r"^(\d+) candidates measured \((\d+) measurements, (\d+) traces\), "
                    r"([\d.]+) GPU s \((.*)\), searches ([\d.]+) CPU s; stopped: (.*)$")


def log_report(path: str) -> dict:
    """A ``tune_report.json``-shaped digest (``batches``, ``stop``, ``accounting``,
    ``prediction_error``, ``measurements``) read from a tune's printed log (docs/tune.md, "What
    it prints"): every measurement line (batch, mode, configuration, µs, spread, GPU s, the round
    it belongs to: 0 before the first ``round`` line), the result table (temporal, best,
    speedup, configuration) and the accounting line. The best of the first search's top 3 is the
    fastest green measurement of round 1 (as the report's). Raises ValueError naming the file
    when the log has no result table."""
    meas, rnd, batches, acc = [], 1, {}, None
    in_table = False
    for line in open(path, encoding="utf-8", errors="replace"):
        line = line.rstrip("\n")
        if (m := _MEASURED.match(line)):
            meas.append({"G": int(m[1]), "mode": m[2], "config": m[3].strip(),
                         "measured_us": float(m[4]), "spread": float(m[5]) / 100,
                         "gpu_s": float(m[6]), "round": rnd})
        elif (m := _ROUND.match(line)):
            rnd = int(m[1]) + 1
        elif line.startswith("measured best per batch"):
            in_table = True
        elif in_table and (m := _BEST.match(line)):
            batches[m[1]] = {"temporal_us": float(m[2]), "best_us": float(m[3]),
                             "measured_speedup": float(m[2]) / float(m[3]),
                             "winner": {"configuration": m[5].strip(),
                                        "measured_us": float(m[3])}}
        elif (m := _TOTAL.match(line)):
            in_table = False
            acc = {"candidates_measured": int(m[1]), "measurements": int(m[2]),
                   "traces": int(m[3]), "gpu_s_total": float(m[4]),
                   "gpu_s_by_phase": {k: float(v) for k, v in
                                      (x.rsplit(" ", 1) for x in m[5].split(", "))},
                   "search_cpu_s": float(m[6])}
            stop = m[7]
    if not batches or acc is None:
        raise ValueError(f"{path}: no result table or accounting line (not a finished tune log)")
    for G, b in batches.items():
        first = [x["measured_us"] for x in meas if x["G"] == int(G) and x["mode"] == "green"
                 and x["round"] == 1]
        b["first_search_top3_best_speedup"] = b["temporal_us"] / min(first) if first else None
        b["gpu_s"] = sum(x["gpu_s"] for x in meas if x["G"] == int(G)) if len(batches) > 1 \
            else acc["gpu_s_total"]
    return {"batches": batches, "stop": stop, "accounting": acc,
            "prediction_error": None, "measurements": meas}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--from", dest="src", required=True,
                    help="folder with tune_<workload>.tgz bundles, tune folders or logs")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "tune_h200.json"))
    a = ap.parse_args()
    tmp = tempfile.mkdtemp()
    res = {"source": "experiments/device/run.sh tune, experiments/device/run.sh tune_sweep",
           "workloads": {}}
    if os.path.exists(a.out):  # keep the workloads of earlier device calls
        res["workloads"] = json.load(open(a.out)).get("workloads", {})
        for w in res["workloads"].values():
            w.setdefault("from", "bundle")
    keep = os.path.join(HERE, "results", "tune")
    found = {}
    for path in sorted(glob.glob(os.path.join(a.src, "tune_*"))):
        base = os.path.basename(path)
        if base.startswith("tune_sweep_"):
            continue
        for suffix, kind in ((".tgz", "bundle"), (".log", "log"), ("", "folder")):
            if base.endswith(suffix) and (kind != "folder" or os.path.isdir(path)):
                name = base[len("tune_"):len(base) - len(suffix)]
                if kind == "log" or os.path.exists(os.path.join(path, "tune_report.json")) \
                        or kind == "bundle":
                    found.setdefault(name, (kind, path))  # a bundle or folder before a log
                break
    for name, (kind, path) in sorted(found.items()):
        d = _extract(path, tmp) if kind == "bundle" else path
        os.makedirs(os.path.join(keep, name), exist_ok=True)
        if kind == "log":
            rep = log_report(path)
            shutil.copy(path, os.path.join(keep, name, "tune.log"))
        else:
            rep = json.load(open(os.path.join(d, "tune_report.json")))
            # the digests only: the log stays in the device bundle (experiments/README.md)
            for f in ("tune_report.json", "tune_measurements.csv", "tune_frontier.png",
                      "calibration_tuned.json"):
                if os.path.exists(os.path.join(d, f)):
                    shutil.copy(os.path.join(d, f), os.path.join(keep, name, f))
        sw = os.path.join(a.src, f"tune_sweep_{name}.tgz")
        sweep = None
        if os.path.exists(sw):
            sweep = json.load(open(os.path.join(_extract(sw, tmp), "sweep.json")))
            with open(os.path.join(keep, name, "sweep.json"), "w") as fh:
                json.dump(sweep, fh, indent=1)
        res["workloads"][name] = {"from": kind, "targets": check(rep, sweep),
                                  "stop": rep["stop"], "accounting": rep["accounting"],
                                  "prediction_error": rep["prediction_error"]}
    if not res["workloads"]:
        print(f"no tune_<workload>.tgz in {a.src}", file=sys.stderr)
        return 2
    with open(a.out, "w") as fh:
        json.dump(res, fh, indent=1)
    print(f"wrote {a.out} ({len(res['workloads'])} workloads)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
