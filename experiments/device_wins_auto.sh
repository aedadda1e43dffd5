#!/usr/bin/env bash
# One device call (fused elementwise kernels, tuned GEMMs, lane priorities auto (on where m <= k)): the lane-sharing
# microbenchmark with stream priorities, and the calibrated simulator's top 4 of all seven
# workloads (experiments/results/hw_wins/fused/configs.json, chosen before any fused run) with
# their temporal baselines; bundled into $OUT/wins_auto.tgz.
set -uo pipefail
source experiments/device_env.sh   # entry point + PYTHONPATH (no install)
T=experiments/results/hw_wins/fused
D=/tmp/wins_auto; mkdir -p "$D/top" "$D/lanes"
timeout 300 python3 experiments/hw_fidelity_h200.py --phase validate --gemm tuned --elementwise triton --configs $T/configs.json --out "$D/top" --rounds 2 --replays 10 --time-limit 280 --lane-priority-policy auto 2>&1 | grep -v -i warn | tee "$D/top.log" | grep -v "^ "
tar czf "$OUT/wins_auto.tgz" -C "$D" .
