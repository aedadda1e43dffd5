# Study `tune` (issue 24, docs/tune.md): `subgpu tune` on ONE of the four target workloads (see
# workload_flags in run.sh) under a GPU-time budget per batch; the tune folder (report,
# measurements, frontier, refitted calibration, round searches) and its log are bundled into
# $OUT/tune_<workload>.tgz. One call per workload (each under the 10-minute command limit); a
# killed call resumes when re-run on the same machine. Then on the CPU:
# python experiments/tune_collect.py --from DIR_WITH_THE_TGZ_FILES -> results/tune_h200.json.
need_args 1 "$@"
W=$1
B=${2:-240}
workload_flags "$W"
workdir "tune_$W"
timeout 570 python3 -m subgpu_jax.app.cli tune $F --stages 2 --microbatches 2,4 \
  --streams-per-stage 1,2 --top 3 --budget-s "$B" --max-rounds 3 --rounds 3 --replays 20 \
  --out "$D" 2>&1 | quiet | tee "$D/tune.log" | tail -40
bundle "tune_$W"
