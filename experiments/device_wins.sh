#!/usr/bin/env bash
# One device call of the wins study (docs/fidelity.md): the simulator's top-K configurations of
# every workload measured with the temporal baseline, a traced `subgpu run`, and
# `subgpu run --from-search --top 2` on a search made for the H200; bundled into $OUT/wins_run.tgz.
set -uo pipefail
source experiments/device_env.sh   # entry point + PYTHONPATH (no install)
D=/tmp/wins_run; mkdir -p "$D/wins" "$D/search"
CAL=experiments/results/hw_fidelity/calibration_h200_gptoss120b_ref.json
timeout 330 python3 experiments/hw_fidelity_h200.py --phase validate --configs experiments/results/hw_fidelity/wins/configs.json --out "$D/wins" --time-limit 300 2>&1 | tee "$D/wins.log"
timeout 120 python3 -m subgpu_jax.app.cli run --hardware H200 --batch 2048 --cuts L1.attn,L1.o_proj --reuse --sms 64,64 --microbatch 256 --streams-per-stage 2 --calibration $CAL --trace "$D/trace_ref_g2048_macro_64_64_k2.json" --json --rounds 2 --replays 10 > "$D/run_trace.json" 2> "$D/run_trace.err"; tail -3 "$D/run_trace.err"
cp -r experiments/results/h200_ref_search/. "$D/search/"
timeout 150 python3 -m subgpu_jax.app.cli run --from-search "$D/search" --top 2 --out-dir "$D/search" --rounds 2 --replays 10 2>&1 | tee "$D/from_search.log"
tar czf "$OUT/wins_run.tgz" -C "$D" .
ls -la "$D" "$D/wins" "$D/search"
