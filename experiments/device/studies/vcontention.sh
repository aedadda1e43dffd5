# Study `vcontention` (issue 9, docs/results.md "Reproducing"): the vectorised-contention
# benchmark on the H200 (experiments/bench_vcontention.py --device gpu: the default batch-last
# kernel with gathered overlap integrals, the slices form, blocks of 32, 4 levels per loop
# trip), then the kernel profile of one chunk of the default
# (experiments/profile_vcontention_gpu.py); $OUT/bench_vcontention_h200.json and $OUT/profile/.
need_out
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
timeout 300 python3 experiments/bench_vcontention.py --device gpu --scans batched --out "$OUT/bench_vcontention_h200.json" 2>&1 | quiet | tail -14
XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 100 python3 experiments/profile_vcontention_gpu.py --out "$OUT/profile" 2>&1 | quiet | tail -16
