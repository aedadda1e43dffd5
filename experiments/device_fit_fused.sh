#!/usr/bin/env bash
# One device call: fit data (kernel tables on pools, activity counts) with the fused elementwise
# kernels and tuned GEMMs for the workloads not in the first fused run; bundled into
# $OUT/fit_fused.tgz.
set -uo pipefail
source experiments/device_env.sh   # entry point + PYTHONPATH (no install)
D=/tmp/fit_fused; mkdir -p "$D"
timeout 280 python3 experiments/hw_fidelity_h200.py --phase fitdata --gemm tuned --elementwise triton --workloads llama70b_tp8_g512 llama70b_tp8_g256 gptoss120b_ref_g512 gptoss20b_tp8_g1024 --corun-workload none --out "$D" --time-limit 260 2>&1 | grep -v -i warn | tee "$D/fitdata.log" | grep "written\|Error\|error"
tar czf "$OUT/fit_fused.tgz" -C "$D" .
