#!/usr/bin/env bash
# One device call: the GPU tests of the fused kernels; the vectorised-contention benchmark on the
# H200 (experiments/bench_vcontention.py --device gpu) and on two otherwise idle CPU cores of the
# GPU machine (taskset 0,1; JAX on the CPU), the 2-core CI target measured without other jobs;
# files under $OUT.
set -uo pipefail
source experiments/device_env.sh   # entry point + PYTHONPATH (no install)
timeout 120 python3 -m pytest tests/hw_runtime/test_fused.py tests/hw_runtime/test_hw_workload.py -q -p no:cacheprovider 2>&1 | tail -3 | tee "$OUT/pytest_fused.log"
timeout 150 python3 experiments/bench_vcontention.py --device gpu --structures 8x5 --scans levels,batched --out "$OUT/bench_vcontention_h200.json" 2>&1 | grep -v -i warn | tail -14
nproc; lscpu | grep "Model name"
JAX_PLATFORMS=cpu timeout 150 taskset -c 0,1 python3 experiments/bench_vcontention.py --device cpu --structures 8x5 --scans window,batched --out "$OUT/bench_vcontention_cpu_2cores_gpu_host.json" 2>&1 | grep -v -i warn | tail -10
