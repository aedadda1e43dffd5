# Study `fidelity` (docs/fidelity.md): the fidelity study's phases of
# experiments/hw_fidelity_h200.py (default: fitdata validate outcheck; also corun): isolated
# kernel tables and activity counts, validation runs of the 11 configurations x 5 workloads,
# output checks under deterministic settings; bundled into $OUT/fidelity_run.tgz. Then on the
# CPU: hw_fidelity_h200.py --phase analyze -> results/hw_fidelity/, results/hw_fidelity_h200.json.
# VALIDATE_S, VALIDATE_LIMIT, VALIDATE_WL: the validate phase's timeout, time limit, workloads.
workdir fidelity_run
PHASES="${*:-fitdata validate outcheck}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,power.limit --format=csv > "$D/gpu.txt" 2>&1
for ph in $PHASES; do
  case $ph in
    fitdata)  timeout 200 python3 experiments/hw_fidelity_h200.py --phase fitdata --out "$D" --time-limit 170 2>&1 | tee "$D/fitdata.log" ;;
    validate) timeout "${VALIDATE_S:-320}" python3 experiments/hw_fidelity_h200.py --phase validate --out "$D" --time-limit "${VALIDATE_LIMIT:-290}" ${VALIDATE_WL:+--workloads $VALIDATE_WL} 2>&1 | tee "$D/validate.log" ;;
    corun)    timeout 120 python3 experiments/hw_fidelity_h200.py --phase corun --out "$D" 2>&1 | tee "$D/corun.log" ;;
    outcheck) CUBLAS_WORKSPACE_CONFIG=:4096:8 timeout 70 python3 experiments/hw_fidelity_h200.py --phase validate --checks-only --out "$D" --workloads llama70b_tp8_g512 2>&1 | tee "$D/outcheck.log" ;;
    *) echo "run.sh fidelity: unknown phase '$ph' (fitdata, validate, corun, outcheck)" >&2; exit 2 ;;
  esac
done
bundle fidelity_run
ls -la "$D"
