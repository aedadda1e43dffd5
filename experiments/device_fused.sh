#!/usr/bin/env bash
# One device call (docs/fidelity.md): the fused Triton elementwise kernels (hw_runtime/gpu/fused.py)
# checked on the GPU, the fit data (kernel tables on pools, activity counts) re-measured with them
# and tuned GEMMs, and `subgpu run` of the earlier measured winners with them (temporal too);
# bundled into $OUT/fused.tgz.
set -uo pipefail
source experiments/device_env.sh   # entry point + PYTHONPATH (no install)
D=/tmp/fused; mkdir -p "$D/fit" "$D/runs"
python3 -c "import triton, torch; print('triton', triton.__version__, 'torch', torch.__version__)" 2>&1 | tee "$D/versions.txt"
timeout 150 python3 -m pytest tests/hw_runtime/test_fused.py tests/hw_runtime/test_hw_workload.py -q -p no:cacheprovider 2>&1 | tail -15 | tee "$D/pytest.log"
[ -s "$D/fit/fitdata_gptoss120b_ref_g2048.json" ] || timeout 200 python3 experiments/hw_fidelity_h200.py --phase fitdata --gemm tuned --elementwise triton --workloads llama70b_tp8_g2048 llama70b_tp8_g1024 gptoss120b_ref_g2048 --corun-workload none --out "$D/fit" --time-limit 180 2>&1 | grep -v -i warn | tee "$D/fitdata.log" | tail -4
python3 - "$D/fit" <<'PY'
import json, os, sys
d = sys.argv[1]; names = ["llama70b_tp8_g2048", "llama70b_tp8_g1024", "gptoss120b_ref_g2048"]
fits = {n: json.load(open(os.path.join(d, f"fitdata_{n}.json"))) for n in names if os.path.exists(os.path.join(d, f"fitdata_{n}.json"))}
# the copy curve of the committed tuned fit data (one curve for every workload, as in
# hw_fidelity_h200.build_calibration); a single new measurement can be non-monotone from noise
curve = json.load(open("experiments/results/hw_wins/tuned/calibration_llama70b_tp8_g2048.json"))["bw_curve"]
for n, f in fits.items():
    if "error" in f: print(n, f["error"]); continue
    c = {k: v for k, v in f.items() if k != "activity_counts"}; c["bw_curve"] = curve
    json.dump(c, open(os.path.join(d, f"calibration_{n}.json"), "w"), indent=1)
    print("calibration", n)
PY
L2048="--model llama-3.1-70b --gpus 8 --tp 8 --dp 1 --ep 1 --batch 2048 --input-len 1024 --kv-history 1024 --hardware H200"
L1024="--model llama-3.1-70b --gpus 8 --tp 8 --dp 1 --ep 1 --batch 1024 --input-len 2048 --kv-history 2048 --hardware H200"
run() { name=$1; shift; timeout 150 python3 -m subgpu_jax.app.cli run "$@" --json > "$D/runs/$name.json" 2> "$D/runs/$name.err"; echo "$name rc=$?"; grep -v -i warn "$D/runs/$name.err" | tail -2; python3 -c "import json; d=json.load(open('$D/runs/$name.json')); print(d['speedup_measured'], d['speedup_predicted'], d['temporal'], d['run'], d['config'].get('elementwise'), (d.get('output_check') or {}).get('rel_l2'), (d.get('timeline') or {}).get('error_breakdown'))" 2>/dev/null; }
F="$D/fit"
run g2048_ls_32_96_m4_k2_triton $L2048 --cuts L0.o_proj --no-reuse --sms 32,96 --microbatch 512 --streams-per-stage 2 --gemm tuned --elementwise triton --rounds 3 --replays 20 --calibration $F/calibration_llama70b_tp8_g2048.json --trace "$D/runs/trace_g2048_ls_32_96_m4_k2_triton.json"
run g1024_ls_48_80_m2_k2_triton $L1024 --cuts L0.o_proj --no-reuse --sms 48,80 --microbatch 512 --streams-per-stage 2 --gemm tuned --elementwise triton --rounds 3 --replays 20 --calibration $F/calibration_llama70b_tp8_g1024.json --no-check
run ref_g2048_macro_64_64_m2_k2_triton --batch 2048 --cuts L1.attn,L1.o_proj --reuse --sms 64,64 --microbatch 256 --streams-per-stage 2 --gemm tuned --elementwise triton --rounds 2 --replays 10 --calibration $F/calibration_gptoss120b_ref_g2048.json --no-check
tar czf "$OUT/fused.tgz" -C "$D" .
ls -la "$D" "$D/fit" "$D/runs"
