#!/usr/bin/env bash
# One device call: `subgpu run --from-search --top 2` (tuned GEMMs, fused elementwise kernels, lane priorities auto) on the calibrated H200 search
# of llama-3.1-70b TP8 G=2,048 (experiments/results/h200_llama70b_g2048_search_fused, made on the CPU
# with `subgpu search ... --calibration experiments/results/hw_wins/fused/calibration_llama70b_tp8_g2048.json`);
# the measured frontier lands beside the predicted one; bundled into $OUT/from_search_fused.tgz.
set -uo pipefail
source experiments/device_env.sh   # entry point + PYTHONPATH (no install)
D=/tmp/from_search_fused; mkdir -p "$D"; cp -r experiments/results/h200_llama70b_g2048_search_fused/. "$D/"
timeout 300 python3 -m subgpu_jax.app.cli run --from-search "$D" --top 2 --out-dir "$D" --model llama-3.1-70b --input-len 1024 --gemm tuned --elementwise triton --rounds 3 --replays 20 2>&1 | grep -v -i warn | tee "$D/from_search_fused.log" | tail -25
tar czf "$OUT/from_search_fused.tgz" -C "$D" .
