#!/usr/bin/env bash
# One device call: the fidelity validation set (experiments/results/hw_fidelity/configs.json,
# 11 configurations x the 3 GPT-OSS workloads) re-measured with the fused elementwise kernels incl. the GPT-OSS SwiGLU, tuned GEMMs
# and lane priorities auto; bundled into $OUT/fidelity_swiglu.tgz.
set -uo pipefail
source experiments/device_env.sh   # entry point + PYTHONPATH (no install)
D=/tmp/fidelity_swiglu; mkdir -p "$D"
timeout 420 python3 experiments/hw_fidelity_h200.py --phase validate --gemm tuned --elementwise triton --lane-priority-policy auto --configs experiments/results/hw_fidelity/configs.json --workloads gptoss120b_ref_g2048 gptoss120b_ref_g512 gptoss20b_tp8_g1024 --out "$D" --rounds 2 --replays 10 --time-limit 400 2>&1 | grep -v -i warn | tee "$D/validate.log" | grep -v "^ " | tail -60
tar czf "$OUT/fidelity_swiglu.tgz" -C "$D" .
