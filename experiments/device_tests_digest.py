"""Digest of the `tests` device study (experiments/device/run.sh tests): the JUnit XML files it
writes under $OUT (``device_tests_hw.xml``: tests/hw_runtime on the GPU; ``device_tests_rest.xml``:
the rest) -> one JSON: per pass the counts (tests, failures, errors, skipped), the seconds, every
failure or error (test id and the first line of its message) and every skip reason.

    python experiments/device_tests_digest.py --from DIR [--commit SHA] [--note TEXT] \
        [--out experiments/results/device_tests_h200.json]

Appends one run to ``--out`` (the earlier runs are kept), so a run with failures and the run
after their fix stand side by side. CPU only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # digest_cli

from digest_cli import check_out  # noqa: E402  (the shared --out check)
from subgpu_jax.app.store import atomic_write  # noqa: E402  (fsync-ed write and rename)

HERE = os.path.dirname(os.path.abspath(__file__))
PASSES = {"hw": "device_tests_hw.xml", "rest": "device_tests_rest.xml"}


def junit_pass(path: str) -> dict:
    """Counts, seconds, failures (``id``, ``message``) and skip reasons of one JUnit XML file;
    ValueError naming the file when it is not JUnit XML."""
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError) as e:
        raise ValueError(f"{path}: not a readable JUnit XML file ({e})") from e
    # the innermost suites only: a <testsuite> may nest others, whose counts it repeats
    suites = [s for s in ([root] if root.tag == "testsuite" else []) + list(root.iter("testsuite"))
              if s.find("testsuite") is None]
    suites = list(dict.fromkeys(suites))
    if not suites:
        raise ValueError(f"{path}: no <testsuite> element")
    out = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0, "seconds": 0.0,
           "failed": [], "skip_reasons": []}
    for s in suites:
        try:
            for k in ("tests", "failures", "errors", "skipped"):
                out[k] += int(s.get(k, 0))
            out["seconds"] += float(s.get("time", 0.0))
        except ValueError as e:
            raise ValueError(f"{path}: a <testsuite> count is not a number ({e})") from None
        for c in s.iter("testcase"):
            tid = f"{c.get('classname')}::{c.get('name')}"
            for tag in ("failure", "error"):
                for f in c.findall(tag):
                    msg = (f.get("message") or f.text or "").strip().splitlines()
                    out["failed"].append({"id": tid, "kind": tag,
                                          "message": msg[0][:300] if msg else ""})
            for sk in c.findall("skipped"):
                out["skip_reasons"].append({"id": tid, "reason": (sk.get("message") or "")[:300]})
    out["passed"] = out["tests"] - out["failures"] - out["errors"] - out["skipped"]
    if min(out[k] for k in ("tests", "failures", "errors", "skipped")) < 0 or out["passed"] < 0:
        raise ValueError(f"{path}: impossible counts (tests {out['tests']}, failures "
                         f"{out['failures']}, errors {out['errors']}, skipped {out['skipped']})")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--from", dest="src", required=True, help="the study's $OUT folder")
    ap.add_argument("--commit", default="", help="the commit the device ran")
    ap.add_argument("--note", default="", help="what this run shows (one line)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "device_tests_h200.json"))
    a = ap.parse_args()
    run = {"commit": a.commit, "note": a.note, "passes": {}}
    for name, f in PASSES.items():
        p = os.path.join(a.src, f)
        if os.path.exists(p):
            try:
                run["passes"][name] = junit_pass(p)
            except ValueError as e:
                print(f"error: --from: {e}", file=sys.stderr)
                return 2
        else:
            run["passes"][name] = {"missing": f"{f} not written (the pass was cut short)"}
    if not any("tests" in v for v in run["passes"].values()):
        print(f"error: --from: no {' or '.join(PASSES.values())} in {a.src}", file=sys.stderr)
        return 2
    doc = {"study": "experiments/device/run.sh tests", "runs": []}
    try:
        check_out(a.out)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if os.path.exists(a.out):
        try:
            doc = json.load(open(a.out, encoding="utf-8"))
        except (OSError, ValueError) as e:
            print(f"error: --out {a.out!r}: not readable JSON ({e})", file=sys.stderr)
            return 2
        if not isinstance(doc, dict) or not isinstance(doc.get("runs"), list):
            print(f"error: --out {a.out!r}: not a digest of this script (an object with a "
                  f"'runs' list)", file=sys.stderr)
            return 2
    doc["runs"].append(run)
    try:
        atomic_write(a.out, json.dumps(doc, indent=1))
    except OSError as e:
        print(f"error: --out {a.out!r}: cannot write ({e.strerror or e})", file=sys.stderr)
        return 2
    for name, v in run["passes"].items():
        print(name, {k: v[k] for k in ("tests", "passed", "failures", "errors", "skipped")}
              if "tests" in v else v["missing"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
