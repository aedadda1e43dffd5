# Study `temporal_traces` (issue 22, docs/verdicts.md): one profiled temporal replay of each
# verdict workload (experiments/temporal_traces_h200.py --phase device), the activities mapped
# onto the ops, bundled into $OUT/temporal_traces.tgz. Then on the CPU:
# experiments/temporal_traces_h200.py --phase analyze [--hardware SPEC]
#   -> results/temporal_traces_h200_<version>.json.
workdir temporal_traces
W=${*:+--workloads $*}
timeout 540 python3 experiments/temporal_traces_h200.py --phase device --out "$D" --time-limit 450 $W 2>&1 \
  | quiet | tee "$D/device.log"
bundle temporal_traces
