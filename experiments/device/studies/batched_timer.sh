# Study `batched_timer` (issue 42 items 1-2, docs/results.md "Speed"): experiments/
# bench_batched_timer.py on the GPU machine. The main job with --exact event (JAX on the
# host's CPU, one process) beside --exact event-batched with the JAX engine on the GPU, one grid
# point and every point (15) in flight, each after an untimed warm-up run (the compile cache);
# then the POINTS-point sample of the GPT-OSS 120B B200 frontier study (default 24, all in
# flight) the same way but cold (no warm-up runs), in the time left. Digests:
# $OUT/bench_batched_timer_<gpu>.json and bench_batched_timer_frontier_<gpu>.json.
#   bash experiments/device/run.sh batched_timer [POINTS]
POINTS=${1:-24}
[[ $POINTS =~ ^[1-9][0-9]{0,2}$ ]] || { echo "run.sh batched_timer: POINTS must be an integer 1-999, got '$POINTS'" >&2; exit 2; }
workdir batched_timer
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
case "$GPU" in *H200*) TAG=h200;; *H100*) TAG=h100;; *) TAG=gpu;; esac
echo "batched_timer: $GPU; $(nproc) CPUs; frontier sample $POINTS points"
XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 330 python3 experiments/bench_batched_timer.py \
    --platform cuda --in-flight 15 --out "$OUT/bench_batched_timer_$TAG.json" 2>&1 | quiet | tail -8
XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 240 python3 experiments/bench_batched_timer.py \
    --platform cuda --job frontier --points "$POINTS" --in-flight "$POINTS" --cold \
    --variants event batched_in_flight --out "$OUT/bench_batched_timer_frontier_$TAG.json" \
    2>&1 | quiet | tail -6
