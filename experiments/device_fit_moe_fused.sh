#!/usr/bin/env bash
# One device call: GPU tests of the fused kernels (with GPT-OSS's clamped SwiGLU), and the fit
# data of the three GPT-OSS workloads re-measured with it (tuned GEMMs); bundled into
# $OUT/fit_moe_fused.tgz.
set -uo pipefail
source experiments/device_env.sh   # entry point + PYTHONPATH (no install)
D=/tmp/fit_moe_fused; mkdir -p "$D"
timeout 150 python3 -m pytest tests/hw_runtime/test_fused.py tests/hw_runtime/test_hw_workload.py -q -p no:cacheprovider 2>&1 | tail -4 | tee "$D/pytest.log"
timeout 200 python3 experiments/hw_fidelity_h200.py --phase fitdata --gemm tuned --elementwise triton --workloads gptoss120b_ref_g2048 gptoss120b_ref_g512 gptoss20b_tp8_g1024 --corun-workload none --out "$D" --time-limit 180 2>&1 | grep -v -i warn | tee "$D/fitdata.log" | grep "written\|rror"
tar czf "$OUT/fit_moe_fused.tgz" -C "$D" .
