#!/usr/bin/env bash
# One device call of `subgpu tune` (issue 24) on ONE of the four target workloads (two where SubGPU
# wins on the H200, two where it does not), under a GPU-time budget per batch; the tune folder
# (report, measurements, frontier, refitted calibration, round searches) is bundled into
# $OUT/tune_<workload>.tgz with its log. Run it once per workload (each call stays under the
# 10-minute command limit); a killed call resumes when re-run on the same machine.
#   bash experiments/device_tune.sh WORKLOAD [BUDGET_S]
# then, on the CPU: python experiments/tune_collect.py --from DIR_WITH_THE_TGZ_FILES
set -uo pipefail
source experiments/device_env.sh   # entry point + PYTHONPATH (no install)
W=${1:?usage: device_tune.sh WORKLOAD [BUDGET_S]}
B=${2:-240}
case "$W" in   # the workload flags of experiments/hw_verdicts_h200.py
  llama70b_tp8_g2048_kv1k) F="--model llama-3.1-70b --gpus 8 --tp 8 --dp 1 --batches 2048 --kv-history 1024 --input-len 1024";;
  llama70b_tp8_g1536_kv1k) F="--model llama-3.1-70b --gpus 8 --tp 8 --dp 1 --batches 1536 --kv-history 1024 --input-len 1024";;
  llama8b_1gpu_g256_kv2k)  F="--model llama-3.1-8b --gpus 1 --tp 1 --dp 1 --batches 256 --kv-history 2048 --input-len 2048";;
  qwen3_8b_1gpu_g32_kv16k) F="--model qwen3-8b --gpus 1 --tp 1 --dp 1 --batches 32 --kv-history 16384 --input-len 16384";;
  *) echo "unknown workload $W" >&2; exit 2;;
esac
D=/tmp/tune_$W; mkdir -p "$D"
timeout 570 python3 -m subgpu_jax.app.cli tune $F --stages 2 --microbatches 2,4 \
  --streams-per-stage 1,2 --top 3 --budget-s "$B" --max-rounds 3 --rounds 3 --replays 20 \
  --out "$D" 2>&1 | grep -v -i warn | tee "$D/tune.log" | tail -40
tar czf "$OUT/tune_$W.tgz" -C "$D" .
