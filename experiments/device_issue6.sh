#!/bin/bash
# Issue 6, device call 1 (nvidia-h200): CLI smoke check, GPU benchmark table, exhaustive grid point.
# Writes everything under $OUT (logs + JSON). Each step has its own time limit.
export PYTHONUNBUFFERED=1 PYTHONPATH=.
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,memory.total,clocks.sm --format=csv > $OUT/gpu.txt 2>&1
python3 -m pip install -q --no-deps --no-index -e . 2>/dev/null
( timeout 100 python3 -m subgpu_jax.app.cli run --model gpt-oss-120b --hardware H200 --sms 64,64 \
    --rounds 3 --replays 20 ) > $OUT/subgpu_run_h200.log 2>&1; echo "cli rc=$?" >> $OUT/subgpu_run_h200.log
timeout ${BENCH_S:-210} python3 experiments/bench_evaluator.py --barriers 0,8 --vcontention \
    --out $OUT/bench_evaluator_gpu.json > $OUT/bench_gpu.log 2>&1; echo "bench rc=$?" >> $OUT/bench_gpu.log
timeout ${EX_S:-260} python3 experiments/exhaustive_gridpoint.py --num-regions auto \
    --time-limit ${EX_LIMIT:-170} --no-heuristics --out $OUT/exhaustive_gridpoint_h200.json \
    > $OUT/exhaustive_h200.log 2>&1; echo "exhaustive rc=$?" >> $OUT/exhaustive_h200.log
tail -5 $OUT/subgpu_run_h200.log; tail -12 $OUT/bench_gpu.log; tail -25 $OUT/exhaustive_h200.log
