#!/usr/bin/env bash
# One device call (fused elementwise kernels, tuned GEMMs): the calibrated simulator's top 4 of
# each workload (experiments/results/hw_wins/fused/configs.json, chosen before this run) with
# the temporal baseline, and two traced `subgpu run`s (the G=2048 first choice; the G=1024
# 48/80 m=2 k=2 layout that measured 0.79x with these kernels); bundled into $OUT/wins_fused.tgz.
set -uo pipefail
source experiments/device_env.sh   # entry point + PYTHONPATH (no install)
T=experiments/results/hw_wins/fused
D=/tmp/wins_fused; mkdir -p "$D/top" "$D/runs" "$D/cal"
timeout 300 python3 experiments/hw_fidelity_h200.py --phase validate --gemm tuned --elementwise triton --configs $T/configs.json --workloads llama70b_tp8_g2048 llama70b_tp8_g1024 gptoss120b_ref_g2048 --out "$D/top" --rounds 2 --replays 10 --time-limit 280 2>&1 | grep -v -i warn | tee "$D/top.log" | grep -v "^ "
python3 - "$T" "$D/cal" <<'PY'
import json, os, sys
src, dst = sys.argv[1:]
curve = json.load(open(os.path.join(src, "fitdata_gptoss120b_ref_g2048.json")))["bw_curve"]
for n in ("llama70b_tp8_g2048", "llama70b_tp8_g1024"):
    c = json.load(open(os.path.join(src, f"fitdata_{n}.json"))); c.pop("activity_counts", None); c["bw_curve"] = curve
    json.dump(c, open(os.path.join(dst, f"calibration_{n}.json"), "w"))
PY
L2048="--model llama-3.1-70b --gpus 8 --tp 8 --dp 1 --ep 1 --batch 2048 --input-len 1024 --kv-history 1024 --hardware H200"
L1024="--model llama-3.1-70b --gpus 8 --tp 8 --dp 1 --ep 1 --batch 1024 --input-len 2048 --kv-history 2048 --hardware H200"
run() { name=$1; shift; timeout 150 python3 -m subgpu_jax.app.cli run "$@" --json > "$D/runs/$name.json" 2> "$D/runs/$name.err"; echo "$name rc=$?"; grep -v -i warn "$D/runs/$name.err" | tail -2; python3 -c "import json; d=json.load(open('$D/runs/$name.json')); print(d['speedup_measured'], d['speedup_predicted'], d['temporal'], d['run'], d['config'].get('elementwise'), (d.get('output_check') or {}).get('rel_l2'), (d.get('timeline') or {}).get('error_breakdown'))" 2>/dev/null; }
run g2048_ls_32_96_m4_k2_triton $L2048 --cuts L0.o_proj --no-reuse --sms 32,96 --microbatch 512 --streams-per-stage 2 --gemm tuned --elementwise triton --rounds 3 --replays 20 --calibration $D/cal/calibration_llama70b_tp8_g2048.json --trace "$D/runs/trace_g2048_ls_32_96_m4_k2_triton.json"
run g1024_ls_48_80_m2_k2_triton $L1024 --cuts L0.o_proj --no-reuse --sms 48,80 --microbatch 512 --streams-per-stage 2 --gemm tuned --elementwise triton --rounds 2 --replays 10 --no-check --calibration $D/cal/calibration_llama70b_tp8_g1024.json --trace "$D/runs/trace_g1024_ls_48_80_m2_k2_triton.json"
gzip -f "$D"/runs/*.activities.json 2>/dev/null
tar czf "$OUT/wins_fused.tgz" -C "$D" .
