# Study `corun_families` (issue 22 item 2, docs/verdicts.md): the co-run matrix of each model
# family of experiments/corun_families.py (default: all; or the workloads named) on the GPU, under
# a time limit; the corun_<workload>.json files written to $OUT as each finishes. Then on the CPU:
# copy them to experiments/results/corun_families/ and run
# experiments/corun_families.py --phase analyze -> results/corun_families_h200.json.
need_out
W=${*:+--workloads $*}
timeout 560 python3 experiments/corun_families.py --phase device --out "$OUT" --time-limit 420 $W 2>&1 \
  | quiet | grep -v "^ " | tail -40
