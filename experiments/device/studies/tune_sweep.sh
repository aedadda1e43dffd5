# Study `tune_sweep` (issue 24 target: `subgpu tune` within 2% of brute force on 2 workloads;
# docs/tune.md): the uncalibrated search of the tune's grid (CPU), then experiments/tune_sweep.py
# (every cut layout among the search's 10 best, SM splits in steps of 8, m = 2 and 4) for at most
# TIME_S seconds; re-run the same call until sweep.json says complete (the measurements are kept
# in /tmp/tune_sweep_<workload>/ between calls on one machine, and in the bundle
# $OUT/tune_sweep_<workload>.tgz).
need_args 1 "$@"
W=$1
T=${2:-480}
workload_flags "$W"
workdir "tune_sweep_$W"
python3 -m subgpu_jax.app.cli search $F --hardware H200 --stages 2 \
  --microbatches 2,4 --streams-per-stage 1,2 --no-progress --out "$D/search" > "$D/search.log" 2>&1
# tune_sweep.py exits 3 after a CUDA error (recorded as a failed candidate): a fresh process
# goes on with the rest, within the same TIME_S.
END=$((SECONDS + T))
while [ $SECONDS -lt $END ]; do
  timeout $((END - SECONDS + 60)) python3 experiments/tune_sweep.py --workload "$W" \
    --search "$D/search" --out "$D" --time-limit $((END - SECONDS)) 2>&1 | quiet \
    | tee -a "$D/sweep.log" | grep -v "^ " | tail -4
  [ "${PIPESTATUS[0]}" = 3 ] || break
done
bundle "tune_sweep_$W"
