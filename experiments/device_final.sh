#!/usr/bin/env bash
# One device call: the output-check diagnosis per SDPA backend (deterministic settings), the
# vectorised-contention GPU benchmark, and a traced run of the G=1,024 winner; bundled into
# $OUT/final.tgz.
set -uo pipefail
source experiments/device_env.sh   # entry point + PYTHONPATH (no install)
T=experiments/results/hw_wins/tuned
D=/tmp/final; mkdir -p "$D"
CUBLAS_WORKSPACE_CONFIG=:4096:8 timeout 150 python3 experiments/hw_fidelity_h200.py --phase determinism --out "$D" 2>&1 | grep -v -i warn | tail -12
${SPEED_CMD:-true}
L1024="--model llama-3.1-70b --gpus 8 --tp 8 --dp 1 --ep 1 --batch 1024 --input-len 2048 --kv-history 2048 --hardware H200"
timeout 120 python3 -m subgpu_jax.app.cli run $L1024 --cuts L0.o_proj --no-reuse --sms 48,80 --microbatch 512 --streams-per-stage 2 --gemm tuned --calibration $T/calibration_llama70b_tp8_g1024.json --trace "$D/trace_g1024_ls_48_80_m2_k2_tuned.json" --json --rounds 2 --replays 10 --no-check > "$D/g1024_trace.json" 2> "$D/g1024_trace.err"; echo "trace rc=$?"; grep -v -i warn "$D/g1024_trace.err" | tail -2
[ -f "$D/trace_g1024_ls_48_80_m2_k2_tuned.json.activities.json" ] && gzip -9 "$D/trace_g1024_ls_48_80_m2_k2_tuned.json.activities.json"
tar czf "$OUT/final.tgz" -C "$D" .
