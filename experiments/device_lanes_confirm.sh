#!/usr/bin/env bash
# One device call: how two streams of one green context share its SMs (lanes.json), the runtime
# smoke test of the families with several region kinds, and the G=2048 winner through
# `subgpu run` (tuned GEMMs, whole steps); bundled into $OUT/lanes_confirm.tgz.
set -uo pipefail
source experiments/device_env.sh   # entry point + PYTHONPATH (no install)
T=experiments/results/hw_wins/tuned
D=/tmp/lanes_confirm; mkdir -p "$D"
timeout 120 python3 experiments/hw_fidelity_h200.py --phase lanes --out "$D" 2>&1 | grep -v -i warn | tail -20
L2048="--model llama-3.1-70b --gpus 8 --tp 8 --dp 1 --ep 1 --batch 2048 --input-len 1024 --kv-history 1024 --hardware H200"
timeout 150 python3 -m subgpu_jax.app.cli run $L2048 --cuts L0.o_proj --no-reuse --sms 32,96 --microbatch 512 --streams-per-stage 2 --gemm tuned --calibration $T/calibration_llama70b_tp8_g2048.json --json --rounds 3 --replays 20 > "$D/g2048_ls_32_96_m4_k2_tuned.json" 2> "$D/g2048_ls_32_96_m4_k2_tuned.err"; echo "rc=$?"; grep -v -i warn "$D/g2048_ls_32_96_m4_k2_tuned.err" | tail -3
python3 -c "import json; d=json.load(open('$D/g2048_ls_32_96_m4_k2_tuned.json')); print(d['speedup_measured'], d['speedup_predicted'], d['temporal'], d['run'], d.get('output_check'), d.get('step'))"

timeout 150 python3 experiments/hw_families_smoke.py --out "$D" 2>&1 | grep -v -i warn | tail -15
tar czf "$OUT/lanes_confirm.tgz" -C "$D" .
