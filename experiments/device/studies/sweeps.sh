# Study `sweeps` (issue 42's done means, docs/results.md "Speed"): the targets, each beside its
# baseline in the same call, then experiments/bench_sweeps_gpu.py assembles
# $OUT/bench_sweeps_<gpu>.json (with the frontier study's parts, when a `frontier` call of the
# same warm machine left them in /tmp/sweeps). PART (default gpu python, in this order; each
# fits one call):
#   gpu: bench_evaluator.py on the GPU (xla and pallas kernels; at most 150 s each: 60-100 s on
#        the H100), the certified exhaustive grid point (process wall timed here; 12.6 s on the
#        H100, at most 100 s) and the blocks as before on the first 200 cut blocks
#        (--baseline --cuts-limit 200: their scan rate; ~50 s of it compilation on the H100);
#        the timeouts add up to 520 s, under one call's 600;
#   python: the frontier study's baseline: a 30-point sample of the GPT-OSS 120B B200 study
#        searched with --exact event (the compiled engine) and on the Python simulator
#        (NUMBA_DISABLE_JIT=1, the path before it), 15 workers, each once untimed and once
#        timed (bench_screened.py --variants event python); at most 400 s;
#   main: the README's main job on 2 pinned cores (bench_sweeps.py: before, workers_cold,
#        workers_warm; the README's machine has 2); at most 300 s.
# A part's files stay under $OUT; a later call's digest reads them all when the machine stayed
# warm (the parts are copied to /tmp/sweeps too).
#   bash experiments/device/run.sh sweeps [PART ...]
for p in "$@"; do
  case "$p" in gpu|python|main) ;; *) echo "run.sh sweeps: PART must be gpu, python or main, got '$p'" >&2; exit 2;; esac
done
PARTS=${*:-gpu python}
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
  elif [ "$p" = python ]; then
    timeout 400 python3 experiments/bench_screened.py --jobs frontier --variants event python \
        --points 30 --workers 15 --out "$D/frontier_python.json" 2>&1 | quiet | tail -4
  else
    timeout 300 python3 experiments/bench_sweeps.py --cores 2 --variants before workers_cold \
        workers_warm --out "$D/main_job.json" 2>&1 | quiet | tail -5
  fi
done
cp "$D"/*.json "$OUT"/ 2>/dev/null
case "$GPU" in *H200*) TAG=h200;; *H100*) TAG=h100;; *) TAG=gpu;; esac
python3 experiments/bench_sweeps_gpu.py --from "$D" --out "$OUT/bench_sweeps_$TAG.json" 2>&1 | quiet
