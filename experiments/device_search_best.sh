#!/usr/bin/env bash
# One device call: `subgpu run --from-search` (the search's best record, tuned GEMMs, 3 rounds x
# 20 replays, output check) on experiments/results/h200_llama70b_g2048_search; $OUT/search_best.json.
set -uo pipefail
source experiments/device_env.sh   # entry point + PYTHONPATH (no install)
S=experiments/results/h200_llama70b_g2048_search
timeout 200 python3 -m subgpu_jax.app.cli run --from-search $S --model llama-3.1-70b --input-len 1024 --gemm tuned --calibration experiments/results/hw_wins/tuned/calibration_llama70b_tp8_g2048.json --rounds 3 --replays 20 --json > "$OUT/search_best.json" 2> "$OUT/search_best.err"; echo "rc=$?"; grep -v -i warn "$OUT/search_best.err" | tail -3
python3 -c "import json; d=json.load(open('$OUT/search_best.json')); print(d['config'], d['speedup_measured'], d['speedup_predicted'], d['temporal'], d['run'], d.get('output_check'))"
