#!/usr/bin/env bash
# One device call (issue 9, the H200 target): the vectorised-contention benchmark on the H200
# with the batch-last kernel's GPU variants (blocks of 128 and 256 allocations, level scans
# unrolled 2/4/8 levels per loop trip; experiments/bench_vcontention.py --device gpu), then
# the kernel profile of one chunk of the default (experiments/profile_vcontention_gpu.py);
# files under $OUT.
set -uo pipefail
source experiments/device_env.sh   # entry point + PYTHONPATH (no install)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
timeout 240 python3 experiments/bench_vcontention.py --device gpu --structures 8x5 --scans batched --out "$OUT/bench_vcontention_h200.json" 2>&1 | grep -v -i warn | tail -14
XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 100 python3 experiments/profile_vcontention_gpu.py --out "$OUT" 2>&1 | grep -v -i warn | tail -28
