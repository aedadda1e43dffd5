# Study `corun_lanes` (issue 22, docs/verdicts.md "Two large kernels on one pool"): two streams of
# one 128-SM pool running the family's GEMM against itself, attention and RMSNorm
# (experiments/corun_families.py --phase lanes) for the workloads named (default: all);
# lanes_<workload>.json to $OUT, to be copied to experiments/results/corun_families/.
need_out
W=${*:+--workloads $*}
timeout 300 python3 experiments/corun_families.py --phase lanes --out "$OUT" $W 2>&1 \
  | quiet | tail -40
