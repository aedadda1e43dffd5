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

CPU only; copies each tune's report and frontier plot under ``experiments/results/tune/``.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--from", dest="src", required=True, help="folder with the .tgz bundles")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "tune_h200.json"))
    a = ap.parse_args()
    tmp = tempfile.mkdtemp()
    res = {"source": "experiments/device/run.sh tune, experiments/device/run.sh tune_sweep",
           "workloads": {}}
    keep = os.path.join(HERE, "results", "tune")
    for tgz in sorted(glob.glob(os.path.join(a.src, "tune_*.tgz"))):
        name = os.path.basename(tgz)[len("tune_"):-4]
        if name.startswith("sweep_"):
            continue
        d = _extract(tgz, tmp)
        rep = json.load(open(os.path.join(d, "tune_report.json")))
        sw = os.path.join(a.src, f"tune_sweep_{name}.tgz")
        sweep = None
        if os.path.exists(sw):
            sweep = json.load(open(os.path.join(_extract(sw, tmp), "sweep.json")))
        os.makedirs(os.path.join(keep, name), exist_ok=True)
        # the digests only: the log stays in the device bundle (experiments/README.md)
        for f in ("tune_report.json", "tune_measurements.csv", "tune_frontier.png",
                  "calibration_tuned.json"):
            if os.path.exists(os.path.join(d, f)):
                shutil.copy(os.path.join(d, f), os.path.join(keep, name, f))
        if sweep is not None:
            with open(os.path.join(keep, name, "sweep.json"), "w") as fh:
                json.dump(sweep, fh, indent=1)
        res["workloads"][name] = {"targets": check(rep, sweep), "stop": rep["stop"],
                                  "accounting": rep["accounting"],
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
