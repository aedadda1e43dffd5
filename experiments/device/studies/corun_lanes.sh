# Study `corun_lanes` (issues 22 and 39 item 3, docs/verdicts.md "Two large kernels on one pool"):
# two streams of one green-context pool running the family's GEMM against itself, attention and
# RMSNorm, and attention against itself (experiments/corun_families.py --phase lanes). Arguments
# go to that script (default: all workloads, one 128-SM pool, 2 microbatches), e.g.
#   run.sh corun_lanes --lane-sms 132 64 --microbatches 2 4
# lanes_<workload>[_m<M>].json to $OUT, to be copied to experiments/results/corun_families/.
need_out
timeout 560 python3 experiments/corun_families.py --phase lanes --out "$OUT" --time-limit 420 "$@" 2>&1 \
  | quiet | tail -60
