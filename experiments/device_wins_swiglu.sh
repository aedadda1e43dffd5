#!/usr/bin/env bash
# One device call (fused elementwise kernels incl. GPT-OSS's SwiGLU, tuned GEMMs, lane priorities
# auto): the calibrated simulator's top 4 of the three GPT-OSS workloads
# (experiments/results/hw_wins/fused_swiglu/configs.json, chosen before this run) with their
# temporal baselines; bundled into $OUT/wins_swiglu.tgz.
set -uo pipefail
source experiments/device_env.sh   # entry point + PYTHONPATH (no install)
T=experiments/results/hw_wins/fused_swiglu
D=/tmp/wins_swiglu; mkdir -p "$D"
timeout 200 python3 experiments/hw_fidelity_h200.py --phase validate --gemm tuned --elementwise triton --lane-priority-policy auto --configs $T/configs.json --workloads gptoss120b_ref_g2048 gptoss120b_ref_g512 gptoss20b_tp8_g1024 --out "$D" --rounds 2 --replays 10 --time-limit 180 2>&1 | grep -v -i warn | tee "$D/top.log" | grep -v "^ "
tar czf "$OUT/wins_swiglu.tgz" -C "$D" .
