# Study `verdicts` (issue 22, docs/verdicts.md): the device phase of the verdict validation
# protocol (experiments/hw_verdicts_h200.py) for the workloads named as arguments (default: all),
# under a time limit; the per-workload JSON files bundled into $OUT/verdicts.tgz. Then on the CPU:
# experiments/hw_verdicts_h200.py --phase analyze -> results/hw_verdicts_h200.json.
workdir verdicts
W=${*:+--workloads $*}
timeout 540 python3 experiments/hw_verdicts_h200.py --phase device --out "$D" --time-limit 480 $W 2>&1 \
  | quiet | tee "$D/device.log"
bundle verdicts
