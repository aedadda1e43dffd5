# Study `small_pool_gemm` (issue 39: the 8-SM row): whether and how fast Llama-3.1-8B's GEMMs
# launch on green-context pools of 8-32 SMs under stock cuBLAS, cuBLASLt and cuBLASLt with SM
# targets (experiments/hw_small_pool_gemm.py); small_pool_gemm.json under $OUT. PHASE
# `partitions`: instead, an 8-SM pool in several splits ([8], [8, 120], [120, 8], ...:
# small_pool_gemm_partitions.json); `partitions16`: 16-SM pools in such splits
# (small_pool_gemm_partitions16.json).
need_out
PHASE=${1:-device}
timeout 420 python3 experiments/hw_small_pool_gemm.py --phase "$PHASE" --out "$OUT" --time-limit 340 2>&1 | quiet | tail -30
