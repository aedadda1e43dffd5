#!/usr/bin/env bash
# One device call of the brute-force measured sweep that `subgpu tune` is compared with (issue 24
# target: within 2% on 2 workloads): the uncalibrated search of the tune's grid (CPU), then
# experiments/tune_sweep.py (every cut layout among the search's 10 best, SM splits in steps of 8,
# m = 2 and 4) for at most TIME_S seconds; re-run the same call until sweep.json says complete
# (the measurements are kept in /tmp/tune_sweep_<workload>/ between calls on one machine, and
# in the bundle $OUT/tune_sweep_<workload>.tgz).
#   bash experiments/device_tune_sweep.sh WORKLOAD [TIME_S]
set -uo pipefail
source experiments/device_env.sh   # entry point + PYTHONPATH (no install)
W=${1:?usage: device_tune_sweep.sh WORKLOAD [TIME_S]}
T=${2:-480}
case "$W" in   # as experiments/device_tune.sh
  llama70b_tp8_g2048_kv1k) F="--model llama-3.1-70b --gpus 8 --tp 8 --dp 1 --batches 2048 --kv-history 1024 --input-len 1024";;
  llama70b_tp8_g1536_kv1k) F="--model llama-3.1-70b --gpus 8 --tp 8 --dp 1 --batches 1536 --kv-history 1024 --input-len 1024";;
  llama8b_1gpu_g256_kv2k)  F="--model llama-3.1-8b --gpus 1 --tp 1 --dp 1 --batches 256 --kv-history 2048 --input-len 2048";;
  qwen3_8b_1gpu_g32_kv16k) F="--model qwen3-8b --gpus 1 --tp 1 --dp 1 --batches 32 --kv-history 16384 --input-len 16384";;
  *) echo "unknown workload $W" >&2; exit 2;;
esac
D=/tmp/tune_sweep_$W; mkdir -p "$D"
python3 -m subgpu_jax.app.cli search $F --hardware H200 --expert-dtype bf16 --stages 2 \
  --microbatches 2,4 --streams-per-stage 1,2 --no-progress --out "$D/search" > "$D/search.log" 2>&1
timeout $((T + 60)) python3 experiments/tune_sweep.py --workload "$W" --search "$D/search" \
  --out "$D" --time-limit "$T" 2>&1 | grep -v -i warn | tee -a "$D/sweep.log" | tail -5
tar czf "$OUT/tune_sweep_$W.tgz" -C "$D" .
