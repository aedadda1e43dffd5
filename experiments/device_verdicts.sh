#!/usr/bin/env bash
# One device call of the verdict validation protocol (experiments/hw_verdicts_h200.py, issue 22):
# the device phase for the workloads named as arguments (default: all), under a time limit, the
# per-workload JSON files bundled into $OUT/verdicts.tgz.
#   bash experiments/device_verdicts.sh [WORKLOAD ...]
set -uo pipefail
source experiments/device_env.sh   # entry point + PYTHONPATH (no install)
D=/tmp/verdicts; mkdir -p "$D"
W=${*:+--workloads $*}
timeout 540 python3 experiments/hw_verdicts_h200.py --phase device --out "$D" --time-limit 480 $W 2>&1 \
  | grep -v -i warn | tee "$D/device.log"
tar czf "$OUT/verdicts.tgz" -C "$D" .
