# Study `attention` (issue 23, docs/usage.md "The runtime's kernels"): the GPU tests of the Triton
# split-KV decode attention (tests/hw_runtime/test_decode_attn.py), then one profiled temporal
# replay of each named verdict workload (default four: dense TP8 at G = 2,048, two one-GPU
# dense, one MoE TP8) under --attention sdpa and triton (experiments/temporal_traces_h200.py),
# written straight into $OUT (small JSON files, so a cut call keeps what finished). Then on
# the CPU: python experiments/attention_compare.py --from DIR -> results/attention_h200.json.
need_out
W=${*:-llama70b_tp8_g2048_kv1k llama8b_1gpu_g256_kv2k qwen3_8b_1gpu_g32_kv16k qwen3moe_tp8_g1024_kv2k}
timeout 150 python3 -m pytest tests/hw_runtime/test_decode_attn.py -q -rs 2>&1 | tail -15
for A in sdpa triton; do
  timeout 200 python3 experiments/temporal_traces_h200.py --phase device --out "$OUT" \
    --time-limit 170 --attention "$A" --workloads $W 2>&1 | quiet | tail -6
done
