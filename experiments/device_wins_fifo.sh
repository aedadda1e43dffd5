#!/usr/bin/env bash
# One device call (tuned GEMMs): the top 4 of every workload chosen by the simulator with
# launch-order lane sharing (experiments/results/hw_wins/fifo/configs.json, chosen before this
# run); bundled into $OUT/wins_fifo.tgz.
set -uo pipefail
export PYTHONPATH=. PYTHONUNBUFFERED=1
T=experiments/results/hw_wins/fifo
D=/tmp/wins_fifo; mkdir -p "$D"
timeout 280 python3 experiments/hw_fidelity_h200.py --phase validate --gemm tuned --configs $T/configs.json --out "$D" --rounds 2 --replays 10 --time-limit 260 2>&1 | grep -v -i warn | tee "$D/top.log" | grep -v "^ "
${EXTRA:-true}
tar czf "$OUT/wins_fifo.tgz" -C "$D" .
