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

CPU only; copies each tune's report and frontier plot (or its log) under ``tune/<workload>/``
beside ``--out``, with the tune's folder on the device written as ``<tune folder>`` (``experiments/results/tune/`` for the default). Bad input: one line naming
the flag or file, exit code 2, nothing written.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import re
import shutil
import sys
import tarfile
import zlib
import tempfile

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # digest_cli

from digest_cli import check_out, run_digest  # noqa: E402  (the shared --out/error frame)
from subgpu_jax.app.store import atomic_write  # noqa: E402  (fsync-ed write and rename)

HERE = os.path.dirname(os.path.abspath(__file__))


def _extract(path: str, into: str) -> str:
    d = os.path.join(into, os.path.basename(path)[:-4])
    os.makedirs(d, exist_ok=True)
    with tarfile.open(path) as t:
        t.extractall(d, filter="data")
    return d


def _num(v, what: str, positive: bool = True) -> float:
    """``v`` as a finite number (> 0, or >= 0 when not ``positive``); ValueError naming
    ``what``."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
            or v < 0 or (positive and v == 0):
        raise ValueError(f"{what} must be a finite number {'> 0' if positive else '>= 0'}, "
                         f"got {v!r}")
    return float(v)


def check(rep: dict, sweep: dict | None, max_gpu_s: float = 300.0) -> dict:
    """The targets of one workload (module docstring) from its ``tune_report.json`` and its
    ``sweep.json`` (or None): per batch ``{"speedup", "first_top3_best", "at_least_top3",
    "not_slower_than_temporal", "gpu_s", "within_budget", "sweep_best", "sweep_complete",
    "within_2pct_of_sweep"}``; a target that cannot be checked (no top-3 measurement, an
    incomplete sweep) is None, never True.

    Raises:
        ValueError: no batch, or a field that is not what a tune writes (names it): GPU
            seconds a finite number >= 0, speedups finite and > 0, ``complete`` a boolean."""
    if not rep["batches"]:
        raise ValueError("its report has no batch")
    if sweep is not None:
        if sweep.get("best_speedup") is not None:
            _num(sweep["best_speedup"], "sweep.json best_speedup")
        if not isinstance(sweep.get("complete", False), bool):
            raise ValueError(f"sweep.json complete must be true or false, got "
                             f"{sweep.get('complete')!r}")
    out = {}
    for G, b in rep["batches"].items():
        gpu_s = _num(b["gpu_s"], f"batch {G}: gpu_s", positive=False)
        r = {"gpu_s": gpu_s, "within_budget": gpu_s <= max_gpu_s}
        if b.get("winner") is None:
            r["note"] = b.get("note")
            out[G] = r
            continue
        sp = _num(b["measured_speedup"], f"batch {G}: measured_speedup")
        top3 = b.get("first_search_top3_best_speedup")
        if top3 is not None:
            top3 = _num(top3, f"batch {G}: first_search_top3_best_speedup")
        r.update({"speedup": sp, "winner": b["winner"], "first_top3_best": top3,
                  # None: the first search's top 3 were not measured, so the target is unchecked
                  "at_least_top3": None if top3 is None else bool(sp >= top3 - 1e-12),
                  "not_slower_than_temporal": sp >= 1.0})
        if sweep is not None and sweep.get("best_speedup"):
            r["sweep_best"] = sweep["best_speedup"]
            r["sweep_complete"] = bool(sweep.get("complete"))
            # the target is defined against a complete sweep only
            r["within_2pct_of_sweep"] = (bool(sp >= 0.98 * sweep["best_speedup"])
                                         if r["sweep_complete"] else None)
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
    it prints") of ONE batch: every measurement line (batch, mode, configuration, µs, spread,
    GPU s, the round it belongs to: 1 until the ``round 1:`` line, r + 1 after ``round r:``),
    the result table (temporal, best, speedup, configuration) and the accounting line. Where a
    tune was restarted into the same log, the last run is read. The best of the first search's
    top 3 is the fastest green measurement of round 1 (as the report's); None when the log has
    none (e.g. its lines are not UTF-8).

    Raises:
        ValueError naming the file: no result table or accounting line, a makespan <= 0, an
        accounting line without per-phase seconds, or more than one batch (per-batch GPU time
        is only in the report)."""
    meas, rnd, batches, acc = [], 1, {}, None
    in_table = False
    for line in open(path, encoding="utf-8", errors="replace"):
        line = line.rstrip("\n")
        if line.startswith("tune: "):  # a (re)started tune appended to the log: read the last
            meas, rnd, batches, acc, in_table = [], 1, {}, None, False
        elif (m := _MEASURED.match(line)):
            meas.append({"G": int(m[1]), "mode": m[2], "config": m[3].strip(),
                         "measured_us": float(m[4]), "spread": float(m[5]) / 100,
                         "gpu_s": float(m[6]), "round": rnd})
        elif (m := _ROUND.match(line)):
            rnd = int(m[1]) + 1
        elif line.startswith("measured best per batch"):
            in_table = True
        elif in_table and (m := _BEST.match(line)):
            if float(m[2]) <= 0 or float(m[3]) <= 0:
                raise ValueError(f"{path}: result table row with a makespan <= 0: {line!r}")
            batches[m[1]] = {"temporal_us": float(m[2]), "best_us": float(m[3]),
                             "measured_speedup": float(m[2]) / float(m[3]),
                             "winner": {"configuration": m[5].strip(),
                                        "measured_us": float(m[3])}}
        elif (m := _TOTAL.match(line)):
            in_table = False
            phases = [x.rsplit(" ", 1) for x in m[5].split(", ")]
            if any(len(x) != 2 for x in phases):
                raise ValueError(f"{path}: accounting line without GPU seconds per phase: "
                                 f"{line!r}")
            acc = {"candidates_measured": int(m[1]), "measurements": int(m[2]),
                   "traces": int(m[3]), "gpu_s_total": float(m[4]),
                   "gpu_s_by_phase": {k: float(v) for k, v in phases},
                   "search_cpu_s": float(m[6])}
            stop = m[7]
    if not batches or acc is None:
        raise ValueError(f"{path}: no result table or accounting line (not a finished tune log)")
    if len(batches) > 1:
        raise ValueError(f"{path}: {len(batches)} batches; a log gives GPU seconds only in "
                         f"total, so per-batch budgets need the tune's tune_report.json")
    for G, b in batches.items():
        first = [x["measured_us"] for x in meas if x["G"] == int(G) and x["mode"] == "green"
                 and x["round"] == 1]
        b["first_search_top3_best_speedup"] = b["temporal_us"] / min(first) if first else None
        b["gpu_s"] = acc["gpu_s_total"]
    return {"batches": batches, "stop": stop, "accounting": acc,
            "prediction_error": None, "measurements": meas}


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_]*")


def _read_json(path: str, what: str, shown: str | None = None):
    """The JSON of ``path``; ValueError naming ``shown`` (default ``path``: a file extracted
    from a bundle is named as ``bundle.tgz:file``, never by its temporary path). NaN and
    infinities are refused as the not-JSON they are."""
    def no_constant(c):
        raise ValueError(f"{c} is not a JSON number")
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh, parse_constant=no_constant)
    except (OSError, ValueError) as e:
        raise ValueError(f"{what} {shown or path!r}: not readable JSON "
                         f"({str(e).splitlines()[0]})") from None


def _load(name: str, kind: str, path: str, src: str, tmp: str) -> tuple[dict, dict | None, str]:
    """(report, sweep or None, folder of the report's files) of one workload; ValueError naming
    the file on anything unreadable."""
    try:
        d = _extract(path, tmp) if kind == "bundle" else path
    except (OSError, EOFError, zlib.error, tarfile.TarError) as e:
        raise ValueError(f"--from: {path!r}: not a readable .tgz bundle "
                         f"({str(e).splitlines()[0] if str(e) else type(e).__name__})") from None
    if kind == "log":
        rep = log_report(path)
    else:
        rp = os.path.join(d, "tune_report.json")
        if not os.path.exists(rp):
            raise ValueError(f"--from: {path!r} holds no tune_report.json (an unfinished tune?)")
        shown = f"{path}:tune_report.json" if kind == "bundle" else rp
        rep = _read_json(rp, "--from: report", shown)
        if not isinstance(rep, dict) or not isinstance(rep.get("batches"), dict):
            raise ValueError(f"--from: {shown!r}: a tune report has a 'batches' object")
    sweep = None
    sw = os.path.join(src, f"tune_sweep_{name}.tgz")
    if os.path.exists(sw):
        try:
            sd = _extract(sw, tmp)
        except (OSError, EOFError, zlib.error, tarfile.TarError) as e:
            raise ValueError(f"--from: {sw!r}: not a readable .tgz bundle "
                             f"({str(e).splitlines()[0] if str(e) else type(e).__name__})") \
                from None
        sweep = _read_json(os.path.join(sd, "sweep.json"), "--from: sweep",
                           f"{sw}:sweep.json")
        if not isinstance(sweep, dict):
            raise ValueError(f"--from: {sw!r}: sweep.json is not an object")
    return rep, sweep, d


def collect(src: str, out: str) -> int:
    """Collect the tunes under ``src`` into ``out`` (module docstring); the digests go to the
    folder ``tune/`` beside ``out``. Everything is read and checked before anything is written.
    Returns the number of workloads collected; ValueError (one line naming the flag or file)
    on bad input."""
    if not os.path.isdir(src):
        raise ValueError(f"--from: {src!r} is not a folder")
    check_out(out)
    res = {"source": "experiments/device/run.sh tune, experiments/device/run.sh tune_sweep",
           "workloads": {}}
    if os.path.exists(out):  # keep the workloads of earlier device calls
        old = _read_json(out, "--out")
        if not isinstance(old, dict) or not isinstance(old.get("workloads", {}), dict) or \
                not all(isinstance(v, dict) for v in old.get("workloads", {}).values()):
            raise ValueError(f"--out {out!r}: not a tune digest (an object with 'workloads')")
        res["workloads"] = old.get("workloads", {})
        for w in res["workloads"].values():
            w.setdefault("from", "bundle")
    found = {}
    for path in sorted(glob.glob(os.path.join(src, "tune_*"))):
        base = os.path.basename(path)
        if base.startswith("tune_sweep_"):
            continue
        for suffix, kind in ((".tgz", "bundle"), (".log", "log"), ("", "folder")):
            if base.endswith(suffix) and (kind != "folder" or os.path.isdir(path)):
                name = base[len("tune_"):len(base) - len(suffix)]
                if not _NAME.fullmatch(name):
                    raise ValueError(f"--from: {path!r}: the workload name {name!r} must be "
                                     f"letters, digits and underscores")
                found.setdefault(name, (kind, path))  # a bundle or folder before a log
                break
    if not found:
        raise ValueError(f"--from: no tune_<workload>.tgz, tune_<workload>/ or "
                         f"tune_<workload>.log in {src!r}")
    with tempfile.TemporaryDirectory() as tmp:   # the extracted bundles, removed at the end
        return _collect_found(found, src, tmp, out, res)


#: What a device folder of a tune is written as in the committed copies (``_device_root``).
TUNE_FOLDER = "<tune folder>"
_RESULTS_IN = re.compile(r"results in (\S+)")


def _device_root(rep: dict, log: str | None) -> str | None:
    """The tune's folder on the device machine (an absolute path of that machine), from its
    printed log's first line (``results in DIR``) or its report (the folder of its
    ``calibration``, else of round 1's ``search``); None when neither names one."""
    if log is not None:
        m = _RESULTS_IN.search(log.splitlines()[0] if log else "")
        if m:
            return m[1].rstrip("/")
    if isinstance(rep.get("calibration"), str) and os.path.isabs(rep["calibration"]):
        return os.path.dirname(rep["calibration"])
    rounds = rep.get("rounds") or []
    if rounds and isinstance(rounds[0].get("search"), str):
        return os.path.dirname(os.path.dirname(rounds[0]["search"]))
    return None


def _copy_machine_free(src: str, dst: str, root: str | None) -> None:
    """Copy ``src`` to ``dst``; in a text file the device folder ``root`` becomes
    ``TUNE_FOLDER`` (the committed results never name a path of the machine that ran them)."""
    if root is None or not src.endswith((".json", ".csv", ".log")):
        shutil.copy(src, dst)
        return
    with open(src, encoding="utf-8", errors="replace") as fh:
        atomic_write(dst, fh.read().replace(root, TUNE_FOLDER))


def _collect_found(found: dict, src: str, tmp: str, out: str, res: dict) -> int:
    """``collect``'s second half: load, check and write the workloads ``found``."""
    loaded = {name: _load(name, kind, path, src, tmp) for name, (kind, path) in found.items()}
    entries = {}
    for name, (rep, sweep, _) in loaded.items():
        try:
            entries[name] = {"from": found[name][0], "targets": check(rep, sweep),
                             "stop": rep.get("stop"), "accounting": rep.get("accounting"),
                             "prediction_error": rep.get("prediction_error")}
        except KeyError as e:
            raise ValueError(f"--from: {found[name][1]!r}: a batch of its report lacks "
                             f"{e}") from None
        except (TypeError, AttributeError, ValueError) as e:
            raise ValueError(f"--from: {found[name][1]!r}: "
                             f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") \
                from None
    keep = os.path.join(os.path.dirname(os.path.abspath(out)), "tune")
    for name, (rep, sweep, d) in loaded.items():
        kind, path = found[name]
        os.makedirs(os.path.join(keep, name), exist_ok=True)
        if kind == "log":
            with open(path, encoding="utf-8", errors="replace") as fh:
                root = _device_root(rep, fh.read())
            _copy_machine_free(path, os.path.join(keep, name, "tune.log"), root)
        else:  # the digests only: the log stays in the device bundle (experiments/README.md)
            root = _device_root(rep, None)
            for f in ("tune_report.json", "tune_measurements.csv", "tune_frontier.png",
                      "calibration_tuned.json"):
                if os.path.exists(os.path.join(d, f)):
                    _copy_machine_free(os.path.join(d, f), os.path.join(keep, name, f), root)
        if sweep is not None:
            atomic_write(os.path.join(keep, name, "sweep.json"), json.dumps(sweep, indent=1))
    res["workloads"].update(entries)
    atomic_write(out, json.dumps(res, indent=1))
    return len(entries)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--from", dest="src", required=True,
                    help="folder with tune_<workload>.tgz bundles, tune folders or logs")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "tune_h200.json"))
    a = ap.parse_args()
    rc, n = run_digest(lambda: collect(a.src, a.out), a.out)
    if rc:
        return rc
    print(f"wrote {a.out} ({n} workloads collected)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
