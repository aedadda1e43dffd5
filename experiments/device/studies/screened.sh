# Study `screened` (issue 42, docs/results.md "Speed"): experiments/bench_screened.py on the
# device host's CPU cores (JAX on the CPU; the GPU is not used): the README's main job and a
# sample of POINTS SubGPU grid points of the GPT-OSS 120B B200 frontier study, each searched
# with --exact event and with --exact screened by WORKERS worker processes (one untimed run of
# each first, which fills the compile cache); $OUT/bench_screened_<gpu>host.json (h100host on
# an H100 machine, h200host on an H200).
#   bash experiments/device/run.sh screened [POINTS] [WORKERS]     (defaults 120 and 15)
POINTS=${1:-120}
WORKERS=${2:-15}
[[ $POINTS =~ ^[1-9][0-9]{0,4}$ ]] || { echo "run.sh screened: POINTS must be a positive integer, got '$POINTS'" >&2; exit 2; }
[[ $WORKERS =~ ^[1-9][0-9]{0,2}$ ]] || { echo "run.sh screened: WORKERS must be a positive integer, got '$WORKERS'" >&2; exit 2; }
need_out
export JAX_PLATFORMS=cpu
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
case "$GPU" in *H200*) TAG=h200host;; *H100*) TAG=h100host;; *) TAG=host;; esac
echo "screened: $(nproc) CPUs, $POINTS points, $WORKERS workers; $GPU"
timeout 570 python3 experiments/bench_screened.py --jobs main frontier --points "$POINTS" \
    --workers "$WORKERS" --out "$OUT/bench_screened_$TAG.json" 2>&1 | quiet | tail -20
