#!/usr/bin/env bash
# One device call of the fidelity study (docs/fidelity.md): fit data, validation runs, output
# checks under deterministic settings; everything is bundled into $OUT/fidelity_run.tgz.
# Usage on the GPU machine, from the repository root: bash experiments/device_fidelity.sh [phases]
set -uo pipefail
export PYTHONPATH=. PYTHONUNBUFFERED=1
D=/tmp/fidelity_run; mkdir -p "$D"
PHASES="${1:-fitdata validate outcheck}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,power.limit --format=csv > "$D/gpu.txt" 2>&1
for ph in $PHASES; do
  case $ph in
    fitdata)  timeout 200 python3 experiments/hw_fidelity_h200.py --phase fitdata --out "$D" --time-limit 170 2>&1 | tee "$D/fitdata.log" ;;
    validate) timeout "${VALIDATE_S:-320}" python3 experiments/hw_fidelity_h200.py --phase validate --out "$D" --time-limit "${VALIDATE_LIMIT:-290}" ${VALIDATE_WL:+--workloads $VALIDATE_WL} 2>&1 | tee "$D/validate.log" ;;
    corun)    timeout 120 python3 experiments/hw_fidelity_h200.py --phase corun --out "$D" 2>&1 | tee "$D/corun.log" ;;
    outcheck) CUBLAS_WORKSPACE_CONFIG=:4096:8 timeout 70 python3 experiments/hw_fidelity_h200.py --phase validate --checks-only --out "$D" --workloads llama70b_tp8_g512 2>&1 | tee "$D/outcheck.log" ;;
  esac
done
tar czf "$OUT/fidelity_run.tgz" -C "$D" .
ls -la "$D"
