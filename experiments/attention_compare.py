"""Decode attention on the H200, PyTorch SDPA against the Triton split-KV kernel (issue 23,
item 2): per workload, the profiled temporal step and its attention ops under both kernels,
from the traces of ``experiments/temporal_traces_h200.py --phase device --attention sdpa|triton``
(``experiments/device/run.sh attention``).

    python experiments/attention_compare.py --from DIR [--out experiments/results/attention_h200.json]

``DIR`` holds ``trace_<workload>_sdpa.json`` and ``trace_<workload>_triton.json``. Per workload
the result gives both runs' measured step (µs, CUDA-graph replays), the summed spans of the
attention ops (``attn`` launches: decode attention plus its sink scale where the model has one)
and their device kernels by name, and the ratios triton / sdpa. A workload with only one of
the two traces, or one with an error, is listed with what is missing. Bad input: one line
naming the flag or file, exit code 2. CPU only.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # digest_cli

from digest_cli import run_digest, write_digest  # noqa: E402  (the shared --out/error frame)

HERE = os.path.dirname(os.path.abspath(__file__))
KINDS = ("sdpa", "triton")
#: The op kinds of the temporal traces that are decode attention.
ATTN_OPS = ("attn",)


def summarize(trace: dict) -> dict:
    """``{"step_us", "attn_us", "attn_kernels"}`` of one trace (ValueError naming what is
    missing)."""
    if "error" in trace:
        raise ValueError(f"the device run failed: {trace['error']}")
    try:
        ops = trace["ops"]
        attn = [ops[o] for o in ATTN_OPS if o in ops]
        return {"step_us": float(trace["measured_step_us"]),
                "attn_us": sum(float(o["us"]) for o in attn),
                "attn_kernels": [n for o in attn for n, _ in o.get("top", [])][:5]}
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"not a temporal trace ({type(e).__name__}: {e})") from None


def compare(src: str) -> dict:
    """Per workload: both kernels' summaries and the ratios (module docstring)."""
    if not os.path.isdir(src):
        raise ValueError(f"--from: {src!r} is not a folder")
    found: dict[str, dict] = {}
    for path in glob.glob(os.path.join(src, "trace_*_*.json")):
        m = re.fullmatch(r"trace_(.+)_(sdpa|triton)\.json", os.path.basename(path))
        if not m:
            continue
        try:
            with open(path, encoding="utf-8") as fh:
                found.setdefault(m[1], {})[m[2]] = summarize(json.load(fh))
        except (OSError, ValueError) as e:
            found.setdefault(m[1], {})[m[2]] = {"error": f"{os.path.basename(path)}: {e}"}
    if not found:
        raise ValueError(f"--from: no trace_<workload>_sdpa.json / _triton.json in {src!r}")
    out = {}
    for w, d in sorted(found.items()):
        row = dict(d)
        missing = [k for k in KINDS if k not in d or "error" in d[k]]
        if missing:
            row["missing"] = missing
        else:
            s, t = d["sdpa"], d["triton"]
            row["step_triton_over_sdpa"] = t["step_us"] / s["step_us"]
            row["attn_triton_over_sdpa"] = (t["attn_us"] / s["attn_us"]) if s["attn_us"] else None
        out[w] = row
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--from", dest="src", required=True, help="folder of the traces")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "attention_h200.json"))
    a = ap.parse_args()
    def work() -> dict:
        res = compare(a.src)
        write_digest(a.out, {"source": "experiments/device/run.sh attention", "workloads": res})
        return res
    rc, res = run_digest(work, a.out)
    if rc:
        return rc
    print(f"{'workload':26s}{'step sdpa':>11s}{'step triton':>12s}{'attn sdpa':>11s}"
          f"{'attn triton':>12s}{'attn ratio':>11s}")
    for w, r in res.items():
        if "missing" in r:
            print(f"{w:26s} missing: {', '.join(r['missing'])}")
            continue
        s, t = r["sdpa"], r["triton"]
        ratio = r["attn_triton_over_sdpa"]
        print(f"{w:26s}{s['step_us']:11.0f}{t['step_us']:12.0f}{s['attn_us']:11.0f}"
              f"{t['attn_us']:12.0f}{(ratio if ratio is not None else float('nan')):11.3f}")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
