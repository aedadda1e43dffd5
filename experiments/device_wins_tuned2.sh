#!/usr/bin/env bash
# One device call (tuned GEMMs): the simulator's top 4 of every workload
# (experiments/results/hw_wins/tuned/configs.json, chosen before this run), a layer-split grid
# of the llama-3.1-70b workloads (grid_layer_split.json), and a traced `subgpu run` of
# llama-3.1-70b G=1024 layer split 32/96 m=2; bundled into $OUT/wins_tuned2.tgz.
set -uo pipefail
source experiments/device_env.sh   # entry point + PYTHONPATH (no install)
T=experiments/results/hw_wins/tuned
D=/tmp/wins_tuned2; mkdir -p "$D/top" "$D/ls"
timeout 260 python3 experiments/hw_fidelity_h200.py --phase validate --gemm tuned --configs $T/configs.json --out "$D/top" --rounds 2 --replays 10 --time-limit 240 2>&1 | grep -v -i warn | tee "$D/top.log" | grep -v "^ "
timeout 150 python3 experiments/hw_fidelity_h200.py --phase validate --gemm tuned --workloads llama70b_tp8_g512 llama70b_tp8_g1024 llama70b_tp8_g2048 llama70b_tp8_g256 --configs $T/grid_layer_split.json --out "$D/ls" --rounds 2 --replays 10 --time-limit 130 2>&1 | grep -v -i warn | tee "$D/ls.log" | grep -v "^ "
LL="--model llama-3.1-70b --gpus 8 --tp 8 --dp 1 --ep 1 --batch 1024 --input-len 2048 --kv-history 2048 --hardware H200"
timeout 100 python3 -m subgpu_jax.app.cli run $LL --cuts L0.o_proj --no-reuse --sms 32,96 --microbatch 512 --gemm tuned --calibration $T/calibration_llama70b_tp8_g1024.json --trace "$D/trace_llama_g1024_layer_split_32_96_m2.json" --json --rounds 2 --replays 10 > "$D/run_trace.json" 2> "$D/run_trace.err"; tail -3 "$D/run_trace.err"
tar czf "$OUT/wins_tuned2.tgz" -C "$D" .
