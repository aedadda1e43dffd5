#!/usr/bin/env bash
# One device call: the fidelity validation set (experiments/results/hw_fidelity/configs.json,
# 11 configurations x 5 workloads) re-measured with the fused elementwise kernels, tuned GEMMs
# and lane priorities auto; bundled into $OUT/fidelity_fused.tgz.
set -uo pipefail
source experiments/device_env.sh   # entry point + PYTHONPATH (no install)
D=/tmp/fidelity_fused; mkdir -p "$D"
timeout 420 python3 experiments/hw_fidelity_h200.py --phase validate --gemm tuned --elementwise triton --lane-priority-policy auto --configs experiments/results/hw_fidelity/configs.json --out "$D" --rounds 2 --replays 10 --time-limit 400 2>&1 | grep -v -i warn | tee "$D/validate.log" | grep -v "^ " | tail -60
tar czf "$OUT/fidelity_fused.tgz" -C "$D" .
