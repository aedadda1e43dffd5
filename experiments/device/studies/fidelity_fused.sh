# Study `fidelity_fused` (docs/fidelity.md, docs/results.md "Validation on the H200"): the
# fidelity validation set (results/hw_fidelity/configs.json, 11 configurations) re-measured with
# the runtime's defaults (fused elementwise kernels, tuned GEMMs, lane priorities auto) on the
# workloads named (default: all 5; the 3 GPT-OSS ones after the fused SwiGLU); bundled into
# $OUT/fidelity_fused.tgz. Its validate_*.json went to results/hw_fidelity/fused/ (read by
# experiments/latency_dilation_fit.py and multistream_check.py).
workdir fidelity_fused
W=${*:+--workloads $*}
timeout 420 python3 experiments/hw_fidelity_h200.py --phase validate --gemm tuned --elementwise triton \
  --lane-priority-policy auto --configs experiments/results/hw_fidelity/configs.json $W --out "$D" \
  --rounds 2 --replays 10 --time-limit 400 2>&1 | quiet | tee "$D/validate.log" | grep -v "^ " | tail -60
bundle fidelity_fused
