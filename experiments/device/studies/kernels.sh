# Study `kernels` (issue 23, items 2-3; docs/results.md "Kernel choices"): the GPU tests of the
# grouped Triton expert GEMMs, the MLA and GQA decode kernels and the region tests that use them
# (tests/hw_runtime/test_moe_gemm.py, test_decode_attn.py, test_flashinfer_attn.py,
# test_hw_families.py; the FlashInfer ones skip unless its wheel travels in .whl/), then
# experiments/kernel_choice_h200.py (expert GEMMs: bmm against grouped Triton on the verdict
# protocol's MoE shapes, bf16 and fp8; MLA and GQA decode against SDPA) into
# $OUT/kernel_choice.json. Arguments: the parts (moe mla gqa gqa_pool; default all).
need_out
export XLA_PYTHON_CLIENT_PREALLOCATE=false
timeout 300 python3 -m pytest -q -rs -x tests/hw_runtime/test_moe_gemm.py \
    tests/hw_runtime/test_decode_attn.py tests/hw_runtime/test_flashinfer_attn.py \
    tests/hw_runtime/test_hw_families.py \
    --junitxml="$OUT/kernels_tests.xml" 2>&1 | tail -25
timeout 200 python3 experiments/kernel_choice_h200.py --out "$OUT" --time-limit 170 \
    ${*:+--parts $*} 2>&1 | quiet | cut -c1-400 | tail -120
