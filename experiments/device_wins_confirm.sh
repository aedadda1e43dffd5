#!/usr/bin/env bash
# One device call: the measured winners through the user-facing command, `subgpu run`, with more
# replays (3 rounds x 20), tuned and stock GEMMs, a trace of the G=2048 winner; bundled into
# $OUT/wins_confirm.tgz.
set -uo pipefail
source experiments/device_env.sh   # entry point + PYTHONPATH (no install)
T=experiments/results/hw_wins/tuned
D=/tmp/wins_confirm; mkdir -p "$D"
L2048="--model llama-3.1-70b --gpus 8 --tp 8 --dp 1 --ep 1 --batch 2048 --input-len 1024 --kv-history 1024 --hardware H200"
L1024="--model llama-3.1-70b --gpus 8 --tp 8 --dp 1 --ep 1 --batch 1024 --input-len 2048 --kv-history 2048 --hardware H200"
run() { name=$1; shift; timeout 150 python3 -m subgpu_jax.app.cli run "$@" --json --rounds 3 --replays 20 > "$D/$name.json" 2> "$D/$name.err"; echo "$name rc=$?"; tail -2 "$D/$name.err" | grep -v -i warn; python3 -c "import json,sys; d=json.load(open('$D/$name.json')); print(d['speedup_measured'], d['speedup_predicted'], d['temporal'], d['run'], d.get('output_check'), (d.get('timeline') or {}).get('error_breakdown'))" 2>/dev/null; }
run g2048_ls_32_96_m4_k2_tuned $L2048 --cuts L0.o_proj --no-reuse --sms 32,96 --microbatch 512 --streams-per-stage 2 --gemm tuned --calibration $T/calibration_llama70b_tp8_g2048.json --trace "$D/trace_g2048_ls_32_96_m4_k2_tuned.json"
run g2048_ls_32_96_m4_k2_stock $L2048 --cuts L0.o_proj --no-reuse --sms 32,96 --microbatch 512 --streams-per-stage 2 --gemm stock --no-check
run g1024_ls_48_80_m2_k2_tuned $L1024 --cuts L0.o_proj --no-reuse --sms 48,80 --microbatch 512 --streams-per-stage 2 --gemm tuned --calibration $T/calibration_llama70b_tp8_g1024.json
tar czf "$OUT/wins_confirm.tgz" -C "$D" .
