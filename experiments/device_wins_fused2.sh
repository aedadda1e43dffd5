#!/usr/bin/env bash
# One device call (fused elementwise kernels, tuned GEMMs): the calibrated simulator's top 4 of
# the four other workloads (experiments/results/hw_wins/fused/configs.json, chosen before this
# run) with their temporal baselines, and the back-to-back-replay probe with and without lane
# priorities (experiments/hw_lockstep_h200.py); bundled into $OUT/wins_fused2.tgz.
set -uo pipefail
source experiments/device_env.sh   # entry point + PYTHONPATH (no install)
T=experiments/results/hw_wins/fused
D=/tmp/wins_fused2; mkdir -p "$D/top" "$D/lockstep"
timeout 200 python3 experiments/hw_lockstep_h200.py --out "$D/lockstep" 2>&1 | grep -v -i warn | tee "$D/lockstep.log"
timeout 260 python3 experiments/hw_fidelity_h200.py --phase validate --gemm tuned --elementwise triton --configs $T/configs.json --workloads llama70b_tp8_g512 llama70b_tp8_g256 gptoss120b_ref_g512 gptoss20b_tp8_g1024 --out "$D/top" --rounds 2 --replays 10 --time-limit 240 2>&1 | grep -v -i warn | tee "$D/top.log" | grep -v "^ "
tar czf "$OUT/wins_fused2.tgz" -C "$D" .
