# Study `wins` (docs/results.md "Where SubGPU wins on the H200"): the calibrated simulator's top
# configurations of each workload (CONFIGS: a configs.json chosen before the run, e.g.
# results/hw_wins/fused/configs.json or results/hw_wins/fused_swiglu/configs.json) measured with
# their temporal baselines, with the runtime's defaults (fused elementwise kernels, tuned GEMMs,
# lane priorities auto), on the workloads named (default: all of CONFIGS); bundled into
# $OUT/wins.tgz. Then on the CPU: experiments/hw_wins_h200.py --phase analyze ->
# results/hw_wins_h200.json (the sources of its rows: results/hw_wins/current/sources.json).
# `--collectives MODE` after CONFIGS measures under that one-GPU collective mode (sleep, proxy,
# none; default sleep), `--attention A` with that decode attention (subgpu run --attention;
# default auto), into $OUT/wins[_MODE][_A].tgz; analyze with hw_wins_h200.py --also LABEL=DIR.
need_args 1 "$@"
C=$1
shift
case "$C" in -*) echo "run.sh wins: CONFIGS comes first, got '$C'; $STUDY_USAGE" >&2; exit 2;; esac
COLL=sleep
ATTN=auto
# the allowed values come from the registries behind `subgpu run`'s options
MODES=$(python3 -c "from subgpu_jax.model.collective import ONE_GPU_COLLECTIVES as c; print(*c)")
ATTNS=$(python3 -c "from hw_runtime.gpu.decode_attn import ATTENTION as a; print(*a)")
while [ "${1:-}" = --collectives ] || [ "${1:-}" = --attention ]; do
  [ $# -ge 2 ] || { echo "$STUDY_USAGE" >&2; exit 2; }
  if [ "$1" = --collectives ]; then COLL=$2; ok=$MODES; else ATTN=$2; ok=$ATTNS; fi
  case " $ok " in *" $2 "*) ;; *) echo "run.sh wins: $1 must be one of: $ok; got '$2'" >&2; exit 2;; esac
  shift 2
done
for w in "$@"; do
  case "$w" in -*) echo "run.sh wins: options go before the workloads, got '$w' after them" >&2; exit 2;; esac
done
NAME=wins
[ "$COLL" = sleep ] || NAME=${NAME}_$COLL
[ "$ATTN" = auto ] || NAME=${NAME}_$ATTN
workdir "$NAME"
W=${*:+--workloads $*}
timeout 300 python3 experiments/hw_fidelity_h200.py --phase validate --gemm tuned --elementwise triton \
  --lane-priority-policy auto --collectives "$COLL" --attention "$ATTN" --configs "$C" $W --out "$D" --rounds 2 \
  --replays 10 --time-limit 280 2>&1 \
  | quiet | tee "$D/top.log" | grep -v "^ "
rc=${PIPESTATUS[0]}
bundle "$NAME"
exit "$rc"
