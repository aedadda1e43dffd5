# Study `verdicts` (issue 22, docs/verdicts.md): the device phase of the verdict validation
# protocol (experiments/hw_verdicts_h200.py) for the workloads named as arguments (default: all),
# under a time limit ($VERDICTS_LIMIT s, default 480); the per-workload JSON files bundled into $OUT/verdicts.tgz. A first
# argument --hardware SPEC (H200 or H200:analytic-v3) picks the model version whose plan is
# measured (hw_verdicts/<version>/configs.json); --data DIR another plan's folder (DIR/configs.json).
# Then on the CPU:
# experiments/hw_verdicts_h200.py --phase analyze [--hardware SPEC] -> hw_verdicts/<version>/.
workdir verdicts
H=""
DATA=""
while [ "${1:-}" = "--hardware" ] || [ "${1:-}" = "--data" ]; do
  if [ "$1" = "--hardware" ]; then H="--hardware $2"; else DATA="--data $2"; fi
  shift 2
done
W=${*:+--workloads $*}
timeout $(( ${VERDICTS_LIMIT:-480} + 60 )) python3 experiments/hw_verdicts_h200.py --phase device --out "$D" --time-limit ${VERDICTS_LIMIT:-480} $H $DATA $W \
  2>&1 | quiet | tee "$D/device.log"
bundle verdicts
