# Study `sweeps` (issue 42's done means, docs/results.md "Speed"): the four targets, each beside
# its baseline in the same call, then experiments/bench_sweeps_gpu.py assembles
# $OUT/bench_sweeps_<gpu>.json. PART (default both, in this order; each fits one call):
#   gpu: bench_evaluator.py on the GPU (xla and pallas kernels; at most 150 s each: 60-100 s on
#        the H100), the certified exhaustive grid point (process wall timed here; 12.6 s on the
#        H100, at most 100 s) and the blocks as before on the first 200 cut blocks
#        (--baseline --cuts-limit 200: their scan rate; ~50 s of it compilation on the H100);
#        the timeouts add up to 520 s, under one call's 600;
#   cpu: the README's main job on 2 pinned cores (bench_sweeps.py: before, workers_warm; the
#        README's machine has 2) and the 120-point sample of the GPT-OSS 120B B200 frontier
#        study that bench_screened_h200host.json measured (--exact event beside screened, 15
#        workers: one per core of the 16, one left for the parent); at most 530 s.
# A part's files stay under $OUT; a later call's digest reads them all when the machine stayed
# warm (the parts are copied to /tmp/sweeps too).
#   bash experiments/device/run.sh sweeps [PART ...]
for p in "$@"; do
  case "$p" in gpu|cpu) ;; *) echo "run.sh sweeps: PART must be gpu or cpu, got '$p'" >&2; exit 2;; esac
done
PARTS=${*:-gpu cpu}
workdir sweeps
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
echo "sweeps: parts $PARTS; $GPU; $(nproc) CPUs"
for p in $PARTS; do
  if [ "$p" = gpu ]; then
    for k in xla pallas; do
      JAX_PLATFORMS=cuda timeout 150 python3 experiments/bench_evaluator.py --kernel "$k" \
          --out "$D/evaluator_$k.json" 2>&1 | quiet | tail -6
    done
    t0=$(date +%s.%N)
    JAX_PLATFORMS=cuda timeout 100 python3 experiments/exhaustive_gridpoint.py --no-heuristics \
        --out "$D/exhaustive.json" 2>&1 | quiet | tail -3
    rc=${PIPESTATUS[0]}
    t1=$(date +%s.%N)
    [ "$rc" -eq 0 ] && python3 -c "import json,sys; json.dump({'wall_s': float(sys.argv[2]) - float(sys.argv[1])}, open(sys.argv[3], 'w'))" "$t0" "$t1" "$D/exhaustive_wall.json"
    JAX_PLATFORMS=cuda timeout 120 python3 experiments/exhaustive_gridpoint.py --no-heuristics \
        --baseline --cuts-limit 200 --out "$D/exhaustive_baseline.json" 2>&1 | quiet | tail -3
  else
    timeout 200 python3 experiments/bench_sweeps.py --cores 2 --variants before workers_warm \
        --out "$D/main_job.json" 2>&1 | quiet | tail -4
    timeout 330 python3 experiments/bench_screened.py --jobs frontier --points 120 --workers 15 \
        --out "$D/frontier_sample.json" 2>&1 | quiet | tail -4
  fi
done
cp "$D"/*.json "$OUT"/ 2>/dev/null
case "$GPU" in *H200*) TAG=h200;; *H100*) TAG=h100;; *) TAG=gpu;; esac
python3 experiments/bench_sweeps_gpu.py --from "$D" --out "$OUT/bench_sweeps_$TAG.json" 2>&1 | quiet
