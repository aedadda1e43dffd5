"""Issue 41's breaker, re-run on the final code: every case of the issue as a fresh `subgpu`
process in a scratch folder, counted as runs, records lost, records duplicated, silently wrong
results and tracebacks (docs/reliability.md, "A breaker's pass").

    python experiments/breaker_issue41.py [--kills 10]

"Silently wrong": a run that exits 0 (or writes) where it must refuse, replaces a special file,
reuses another sweep's records, recomputes this sweep's own, or prints a non-finite number;
a refusal must be one line naming the flag (exit 2). Device nodes (mknod, root only) and the
read-only folder (run as `nobody` through setpriv when root) are made in the scratch folder.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENTRY = [sys.executable, "-c", "import sys; from subgpu_jax.app.entry import main; "
         "sys.exit(main())"]
SIM = ["simulate", "--model", "llama-3.1-8b", "--gpus", "1", "--batch", "64", "--kv-history",
       "1024", "--simulator", "static"]
TINY = ["search", "--model", "gpt-oss-20b", "--gpus", "8", "--tp", "8", "--dp", "1", "--exact",
        "static", "--batches", "64,128", "--stages", "2", "--microbatches", "2", "--no-progress"]
CAL = ROOT / "experiments/results/tune/llama8b_1gpu_g256_kv2k/calibration_tuned.json"
CALIBRATED = ["search", "--hardware", "H200", "--model", "llama-3.1-8b", "--gpus", "1", "--exact",
              "static", "--batches", "256", "--stages", "2", "--microbatches", "2",
              "--input-len", "2048", "--no-progress"]


class Tally:
    def __init__(self):
        self.rows: dict[str, dict] = {}

    def add(self, row, lost=0, dup=0, wrong=False, tb=False, note=""):
        r = self.rows.setdefault(row, {"runs": 0, "lost": 0, "duplicated": 0, "wrong": 0,
                                       "tracebacks": 0, "notes": []})
        r["runs"] += 1
        r["lost"] += lost
        r["duplicated"] += dup
        r["wrong"] += int(bool(wrong))
        r["tracebacks"] += int(bool(tb))
        if note and (wrong or tb or lost or dup):
            r["notes"].append(note)


def run(args, cwd, user=None, timeout=300):
    pre = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"] if user else []
    env = dict(os.environ, MPLCONFIGDIR=str(cwd))
    return subprocess.run(pre + ENTRY + args, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)


def one_line_refusal(p, flag) -> bool:
    lines = p.stderr.strip().splitlines()
    return p.returncode == 2 and len(lines) >= 1 and lines[0].startswith("error:") \
        and flag in lines[0]


def records(folder: Path) -> list[str]:
    f = folder / "records.jsonl"
    if not f.exists():
        return []
    return [ln for ln in f.read_text().splitlines() if '"grid_key"' in ln]


def evaluated(out: str) -> int:
    m = re.search(r"evaluated (\d+) grid points", out)
    return int(m.group(1)) if m else -1


def outputs(t: Tally, d: Path) -> None:
    row = "outputs onto a device node, FIFO, symbolic link or folder"
    nodes = {}
    for ext in (".json", ".png"):
        (d / f"real{ext}").write_text("{}")
        nodes[f"fifo{ext}"] = d / f"fifo{ext}"
        os.mkfifo(nodes[f"fifo{ext}"])
        nodes[f"link{ext}"] = d / f"link{ext}"
        nodes[f"link{ext}"].symlink_to(f"real{ext}")
        nodes[f"dir{ext}"] = d / f"dir{ext}"
        nodes[f"dir{ext}"].mkdir()
        if os.geteuid() == 0:
            nodes[f"null{ext}"] = d / f"null{ext}"
            os.mknod(nodes[f"null{ext}"], 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    for flag, ext in (("--trace", ".json"), ("--gantt", ".png"), ("--utilization", ".png")):
        for name, p in nodes.items():
            if not name.endswith(ext):
                continue
            before = os.lstat(p)
            r = run([a for a in SIM if a not in ("--simulator", "static")] + [flag, str(p)], d)
            after = os.lstat(p)
            changed = (stat.S_IFMT(before.st_mode), before.st_ino) != \
                (stat.S_IFMT(after.st_mode), after.st_ino)
            t.add(row, wrong=changed or not one_line_refusal(r, flag), tb="Traceback" in r.stderr,
                  note=f"{flag} {name}: rc {r.returncode} {r.stderr.strip()[:120]}")
    sw = d / "sweepfifo"
    sw.mkdir()
    os.mkfifo(sw / "manifest.json")
    r = run(TINY + ["--out", str(sw)], d, timeout=60)
    t.add(row, wrong=not one_line_refusal(r, "--out"), tb="Traceback" in r.stderr,
          note=f"search --out with a FIFO manifest: rc {r.returncode}")
    for what in ("dir", "fifo"):
        p = d / f"cal-{what}.json"
        p.mkdir() if what == "dir" else os.mkfifo(p)
        r = run(["calibrate", "--model", "llama-3.1-8b", "--gpus", "1", "--out", str(p)], d)
        t.add("`calibrate --out` an existing folder or FIFO (checked before any GPU work)",
              wrong=not one_line_refusal(r, "--out"), tb="Traceback" in r.stderr,
              note=f"calibrate --out {what}: rc {r.returncode} {r.stderr.strip()[:120]}")


def fingerprints(t: Tally, d: Path) -> None:
    row = "fingerprints: a calibration by two paths, re-calibrated; another --input-len"
    shutil.copy(CAL, d / "cal.json")
    out = d / "fp"
    r = run(CALIBRATED + ["--out", str(out), "--calibration", "cal.json"], d)
    base = records(out)
    t.add(row, wrong=r.returncode != 0 or evaluated(r.stdout) != 2, tb="Traceback" in r.stderr)
    for path in ("./cal.json", str(d / "cal.json")):
        r = run(CALIBRATED + ["--out", str(out), "--calibration", path], d)
        now = records(out)
        t.add(row, wrong=r.returncode != 0 or evaluated(r.stdout) != 0,
              lost=len(set(base) - set(now)), dup=len(now) - len(set(now)),
              tb="Traceback" in r.stderr, note=f"{path}: rc {r.returncode}")
    cal = json.loads((d / "cal.json").read_text())
    for k in cal["kernels"]:
        k["times_us"] = {p: 1.1 * v for p, v in k["times_us"].items()}
    (d / "cal.json").write_text(json.dumps(cal))
    r = run(CALIBRATED + ["--out", str(out), "--calibration", "cal.json"], d)
    t.add(row, wrong=not one_line_refusal(r, "calibration"), tb="Traceback" in r.stderr,
          note=f"re-calibrated: rc {r.returncode}")
    o2 = d / "fp2"
    run(TINY + ["--out", str(o2)], d)
    r = run(TINY + ["--out", str(o2), "--input-len", "4096", "--kv-history", "32768"], d)
    t.add(row, wrong=not one_line_refusal(r, "input_len"), tb="Traceback" in r.stderr,
          note=f"--input-len: rc {r.returncode}")


def repair(t: Tally, d: Path) -> None:
    row = "sweep A, then B with --repair, then A with --repair"
    out = d / "rep"
    r = run(TINY + ["--out", str(out)], d)
    a_recs = set(records(out))
    r = run(TINY + ["--out", str(out), "--kv-history", "16384", "--repair"], d)
    t.add(row, wrong=r.returncode != 0, tb="Traceback" in r.stderr)
    r = run(TINY + ["--out", str(out), "--repair"], d)
    now = records(out)
    t.add(row, lost=len(a_recs - set(now)), dup=len(now) - len(set(now)),
          wrong=r.returncode != 0 or evaluated(r.stdout) != 0, tb="Traceback" in r.stderr,
          note=f"A again: evaluated {evaluated(r.stdout)}")


def read_only(t: Tally, d: Path) -> None:
    row = "a finished sweep in a `chmod a-w` folder (summarised); a partial one (refused)"
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        return
    user = os.geteuid() == 0
    base = Path(tempfile.mkdtemp(prefix="ro-", dir="/tmp"))
    base.chmod(0o777)
    try:
        for extra, want_rc in (([], 0), (["--budget", "1"], 2)):
            sw = base / f"sw{len(extra)}"
            run(TINY + ["--out", str(sw)] + extra, base, user=user)
            before = {p.name: p.read_bytes() for p in sw.iterdir() if p.is_file()}
            sw.chmod(0o555)
            r = run(TINY + ["--out", str(sw)], base, user=user)
            after = {p.name: p.read_bytes() for p in sw.iterdir() if p.is_file()}
            t.add(row, wrong=r.returncode != want_rc or before != after,
                  lost=sum(1 for k in before if k not in after), tb="Traceback" in r.stderr,
                  note=f"rc {r.returncode} {r.stderr.strip()[:120]}")
            sw.chmod(0o755)
    finally:
        shutil.rmtree(base)


EXTREMES = [
    (SIM + ["--scaleout-gbps", "1e-300", "--topology", "hgx8"], "--scaleout-gbps"),
    (["search", "--scaleout-gbps", "1e-300", "--out", "x"], "--scaleout-gbps"),
    (SIM + ["--kv-lengths", "lognormal:inf:1"], "--kv-lengths"),
    (SIM + ["--kv-lengths", "lognormal:5:1e308"], "--kv-lengths"),
    (SIM + ["--kv-lengths", "lognormal:nan:1"], "--kv-lengths"),
    (SIM + ["--kv-lengths", "uniform:1:1e30"], "--kv-lengths"),
    (["search", "--stages", "2,,3", "--out", "x"], "--stages"),
    (SIM + ["--batch", "２"], "--batch"),
    (["search", "--batches", "６４", "--out", "x"], "--batches"),
    (SIM + ["--routing-imbalance", "1e300"], "--routing-imbalance"),
    (SIM + ["--gpu-memory-utilization", "1e-300"], "--gpu-memory-utilization"),
    (SIM + ["--kv-history", "99999999999999999999"], "--kv-history"),
]


def extremes(t: Tally, d: Path) -> None:
    row = "extreme numbers (1e-300, inf, nan, 1e308, 1e30, '2,,3', full-width digits)"
    for args, flag in EXTREMES:
        r = run(args, d)
        nonfinite = re.search(r"\b(nan|inf)\b|e\+?[12]\d\d\b", r.stdout) is not None
        t.add(row, wrong=nonfinite or not one_line_refusal(r, flag), tb="Traceback" in r.stderr,
              note=f"{' '.join(args[-2:])}: rc {r.returncode} {r.stderr.strip()[:100]}")
    r = run(SIM + ["--scaleout-gbps", "0.01", "--topology", "hgx8", "--json"], d)
    finite = r.returncode == 0 and all(
        math.isfinite(v) for k in ("temporal", "config") for v in json.loads(r.stdout)[k].values()
        if isinstance(v, (int, float)) and not isinstance(v, bool))
    t.add(row, wrong=not finite, tb="Traceback" in r.stderr, note="the bound 0.01 itself")


def kills(t: Tally, d: Path, n: int) -> None:
    row = "kill -9 of `subgpu search` at a random moment, then the same command again"
    ref = d / "ref"
    run(TINY + ["--out", str(ref)], d)
    want = set(records(ref))
    rng = random.Random(41)
    for i in range(n):
        out = d / f"k{i}"
        p = subprocess.Popen(ENTRY + TINY + ["--out", str(out)], cwd=d, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
        time.sleep(rng.uniform(1.0, 6.0))
        p.send_signal(signal.SIGKILL)
        p.wait()
        r = run(TINY + ["--out", str(out)], d)
        got = records(out)
        t.add(row, lost=len(want - set(got)), dup=len(got) - len(set(got)),
              wrong=r.returncode != 0 or set(got) != want, tb="Traceback" in r.stderr,
              note=f"kill {i}: rc {r.returncode}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=10)
    a = ap.parse_args()
    t = Tally()
    with tempfile.TemporaryDirectory(prefix="breaker41-") as tmp:
        d = Path(tmp)
        for step in (outputs, fingerprints, repair, read_only, extremes):
            sub = d / step.__name__
            sub.mkdir()
            step(t, sub)
        sub = d / "kills"
        sub.mkdir()
        kills(t, sub, a.kills)
    print("| what was done | runs | records lost | records duplicated | silently wrong | "
          "tracebacks |")
    print("|---|---|---|---|---|---|")
    for row, r in t.rows.items():
        print(f"| {row} | {r['runs']} | {r['lost']} | {r['duplicated']} | {r['wrong']} | "
              f"{r['tracebacks']} |")
    for row, r in t.rows.items():
        for n in r["notes"]:
            print(f"  {row}: {n}", file=sys.stderr)


if __name__ == "__main__":
    main()
