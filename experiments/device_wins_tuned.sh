#!/usr/bin/env bash
# One device call (docs/fidelity.md): the fit data (kernel tables on pools, activity counts, the
# co-run matrix) re-measured with the `tuned` GEMM policy, and a traced `subgpu run` of
# llama-3.1-70b TP8 G=512, Macro 96/32, m=2, 2 streams per stage, tuned GEMMs; bundled into
# $OUT/wins_tuned.tgz.
set -uo pipefail
source experiments/device_env.sh   # entry point + PYTHONPATH (no install)
D=/tmp/wins_tuned; mkdir -p "$D/fit"
timeout 240 python3 experiments/hw_fidelity_h200.py --phase fitdata --gemm tuned --out "$D/fit" --time-limit 220 2>&1 | grep -v -i warn | tee "$D/fitdata.log" | tail -8
LL="--model llama-3.1-70b --gpus 8 --tp 8 --dp 1 --ep 1 --batch 512 --input-len 4096 --kv-history 4096 --hardware H200"
timeout 150 python3 -m subgpu_jax.app.cli run $LL --cuts L0.attn,L0.o_proj --reuse --sms 96,32 --microbatch 256 --streams-per-stage 2 --gemm tuned --calibration "$D/fit/fitdata_llama70b_tp8_g512.json" --trace "$D/trace_llama_g512_macro_96_32_m2_k2.json" --json --rounds 2 --replays 10 > "$D/run_llama.json" 2> "$D/run_llama.err"; tail -3 "$D/run_llama.err"
tar czf "$OUT/wins_tuned.tgz" -C "$D" .
ls -la "$D" "$D/fit"
