#!/usr/bin/env bash
# `subgpu run --trace` on the H200: the reference deployment at G=2048, Macro 64/64, m=2, with 1
# and 2 streams per stage, calibrated prediction; bundled into $OUT/trace_run.tgz.
set -uo pipefail
source experiments/device_env.sh   # entry point + PYTHONPATH (no install)
D=/tmp/trace_run; mkdir -p "$D"
CAL=experiments/results/hw_fidelity/calibration_h200_gptoss120b_ref.json
for k in ${KS:-1 2}; do
  timeout 150 python3 -m subgpu_jax.app.cli run --hardware H200 --batch 2048 --cuts L1.attn,L1.o_proj --reuse --sms 64,64 --microbatch 256 --streams-per-stage $k --calibration $CAL --trace "$D/trace_ref_g2048_macro_64_64_m2_k$k.json" --json --rounds 2 --replays 10 > "$D/run_k$k.json" 2> "$D/run_k$k.err"; tail -2 "$D/run_k$k.err"
  timeout 150 python3 -m subgpu_jax.app.cli run --hardware H200 --batch 2048 --cuts L1.attn,L1.o_proj --reuse --sms 64,64 --microbatch 256 --streams-per-stage $k --calibration $CAL --trace "$D/t$k.json" --rounds 1 --replays 5 --no-check 2>&1 | tail -8
done
tar czf "$OUT/trace_run.tgz" -C "$D" .
ls -la "$D"
