"""The contention model's prediction of our H200 probe (tests/data/h200_green_context_probe.csv):
bf16 8192^3 GEMM and 2 GiB copy alone on pools of 16..132 SMs, and the GEMM on 64 SMs beside the
copy on 68. Prints a table and writes experiments/results/probe_prediction_h200.json.

Usage: python experiments/probe_prediction.py
"""

from __future__ import annotations

import json
import os

from subgpu_jax import get_hardware
from subgpu_jax.sim.probe import predict_probe

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> None:
    r = predict_probe(get_hardware("H200"))
    print(f"{'SMs':>5s}{'GEMM pred ms':>14s}{'meas':>8s}{'err':>8s}{'copy pred ms':>14s}{'meas':>8s}"
          f"{'err':>8s}")
    for sms, p in r["pools"].items():
        print(f"{sms!s:>5s}{p['mm_ms']:14.3f}{p['mm_meas_ms']:8.3f}{p['mm_err']:+8.1%}"
              f"{p['copy_ms']:14.3f}{p['copy_meas_ms']:8.3f}{p['copy_err']:+8.1%}")
    c = r["corun"]
    print(f"GEMM on 64 SMs beside the copy on 68: slowdown {c['slowdown']:.1%} predicted, "
          f"{c['measured_slowdown']:.1%} measured")
    out = os.path.join(HERE, "results", "probe_prediction_h200.json")
    with open(out, "w") as fh:
        json.dump(r, fh, indent=2, default=float)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
