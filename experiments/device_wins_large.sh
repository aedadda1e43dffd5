#!/usr/bin/env bash
# One device call: fit data (tuned GEMMs) of the large-batch llama-3.1-70b workloads, and a
# measured grid of them (experiments/results/hw_wins/tuned/grid_large_batch.json) with tuned
# GEMMs; bundled into $OUT/wins_large.tgz.
set -uo pipefail
export PYTHONPATH=. PYTHONUNBUFFERED=1
D=/tmp/wins_large; mkdir -p "$D/fit" "$D/grid"
timeout 150 python3 experiments/hw_fidelity_h200.py --phase fitdata --gemm tuned --workloads llama70b_tp8_g1024 llama70b_tp8_g2048 --corun-workload none --out "$D/fit" --time-limit 120 2>&1 | grep -v -i warn | tee "$D/fitdata.log" | tail -3
timeout 300 python3 experiments/hw_fidelity_h200.py --phase validate --gemm tuned --workloads llama70b_tp8_g1024 llama70b_tp8_g2048 --configs experiments/results/hw_wins/tuned/grid_large_batch.json --out "$D/grid" --rounds 2 --replays 10 --time-limit 270 2>&1 | grep -v -i warn | tee "$D/grid.log"
tar czf "$OUT/wins_large.tgz" -C "$D" .
