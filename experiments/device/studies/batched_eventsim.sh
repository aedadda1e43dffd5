# Study `batched_eventsim` (issue 42, docs/method.md §3): the batched event simulator's JAX
# loop (experiments/batched_eventsim_proto.py --scale) on the GPU at large batches. First the
# README's main job on the host's CPUs (its records name the structures), then for its first
# RECORDS SubGPU records (default 2) random allocations of each structure in batches of 1,024,
# 8,192 and 65,536 on the GPU, 16 of each checked against the event simulator (the default
# model, L2 policy lru): $OUT/batched_eventsim_<gpu>.json. Then, on the first record at 8,192,
# what sets the cost of a step: the same loop with the L2 cache off (no lookups, no eviction
# loops; _nocache.json) and with XLA's WHILE/CONDITIONAL command buffers (the loops as CUDA
# graphs, no host round trip per iteration; _cmdbuf.json). Each row's us_per_step is the run's
# wall time over the sample's largest number of simulated instants.
#   bash experiments/device/run.sh batched_eventsim [RECORDS]
RECORDS=${1:-2}
[[ $RECORDS =~ ^[1-9][0-9]?$ ]] || { echo "run.sh batched_eventsim: RECORDS must be an integer 1-99, got '$RECORDS'" >&2; exit 2; }
workdir batched_eventsim
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
case "$GPU" in *H200*) TAG=h200;; *H100*) TAG=h100;; *) TAG=gpu;; esac
echo "batched_eventsim: $GPU; $(nproc) CPUs; $RECORDS records"
JAX_PLATFORMS=cpu timeout 120 python3 -m subgpu_jax.app.cli search --out "$D/search" \
    --no-progress --overwrite 2>&1 | quiet | tail -2
P="python3 experiments/batched_eventsim_proto.py --records $D/search/records.jsonl"
export XLA_PYTHON_CLIENT_PREALLOCATE=false
JAX_PLATFORMS=cuda timeout 250 $P --records-limit "$RECORDS" --cache lru \
    --scale 1024 8192 65536 --out "$OUT/batched_eventsim_$TAG.json" 2>&1 | quiet | tail -8
JAX_PLATFORMS=cuda timeout 80 $P --records-limit 1 --cache none --scale 8192 \
    --out "$OUT/batched_eventsim_${TAG}_nocache.json" 2>&1 | quiet | tail -2
XLA_FLAGS="--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,CONDITIONAL,WHILE" \
    JAX_PLATFORMS=cuda timeout 100 $P --records-limit 1 --cache lru --scale 8192 \
    --out "$OUT/batched_eventsim_${TAG}_cmdbuf.json" 2>&1 | quiet | tail -2
