# Study `efficiency` (issue 23, items 1 and 5; docs/results.md "The temporal step against its
# limits"): one profiled temporal replay of each named verdict workload with the runtime's
# default kernels (default five: dense TP8, one GPU, three MoE), then the MoE ones whose
# default is the grouped Triton expert GEMM once more with --moe-gemm bmm (the old kernels, in
# the same lease), written straight into $OUT. Then on the CPU:
# python experiments/kernel_efficiency.py --from DIR -> results/kernel_efficiency_h200.json.
need_out
W=${*:-llama70b_tp8_g2048_kv1k llama8b_1gpu_g256_kv2k qwen3moe_tp8_g1024_kv2k mixtral_tp8_g1024_kv4k gptoss20b_tp8_g1024_kv8k}
timeout 260 python3 experiments/temporal_traces_h200.py --phase device --out "$OUT" \
  --time-limit 230 --workloads $W 2>&1 | quiet | tail -8
MOE=$(for w in $W; do case $w in qwen3moe*|gptoss*) echo -n "$w ";; esac; done)
[ -n "$MOE" ] && timeout 150 python3 experiments/temporal_traces_h200.py --phase device \
  --out "$OUT" --time-limit 120 --moe-gemm bmm --workloads $MOE 2>&1 | quiet | tail -4
true
