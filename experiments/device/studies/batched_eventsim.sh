# Study `batched_eventsim` (issue 42, docs/method.md §3): the batched event simulator
# prototype's JAX loop (experiments/batched_eventsim_proto.py --scale) on the GPU at large
# batches. First the README's main job on the host's CPUs (its records name the structures),
# then for its first RECORDS SubGPU records (default 4) random allocations of each structure
# in batches of 1,024, 8,192 and 65,536 on the GPU, 16 of each checked against the event
# simulator (the default model, L2 policy lru); $OUT/batched_eventsim_<gpu>.json.
#   bash experiments/device/run.sh batched_eventsim [RECORDS]
RECORDS=${1:-4}
[[ $RECORDS =~ ^[1-9][0-9]?$ ]] || { echo "run.sh batched_eventsim: RECORDS must be an integer 1-99, got '$RECORDS'" >&2; exit 2; }
workdir batched_eventsim
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
case "$GPU" in *H200*) TAG=h200;; *H100*) TAG=h100;; *) TAG=gpu;; esac
echo "batched_eventsim: $GPU; $(nproc) CPUs; $RECORDS records"
JAX_PLATFORMS=cpu timeout 150 python3 -m subgpu_jax.app.cli search --out "$D/search" \
    --no-progress --overwrite 2>&1 | quiet | tail -2
JAX_PLATFORMS=cuda XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 420 \
    python3 experiments/batched_eventsim_proto.py --records "$D/search/records.jsonl" \
    --records-limit "$RECORDS" --cache lru --scale 1024 8192 65536 \
    --out "$OUT/batched_eventsim_$TAG.json" 2>&1 | quiet | tail -16
