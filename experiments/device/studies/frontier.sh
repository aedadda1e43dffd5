# Study `frontier` (docs/results.md "Reproducing"): the frontier studies on a machine with many
# CPU cores (a CPU job; it runs beside GPU work and never touches the GPU: JAX_PLATFORMS=cpu;
# niced, so a GPU measurement's host threads come first):
#   bash experiments/device/run.sh frontier LIMIT_S WORKERS [STUDY ...]
# (COMPILE_CACHE=DIR: JAX's compilation cache, default .jax_cache/frontier, an ignored folder;
# EXACT=NAME: the search's exact scorer, a name of score.timer.TIMERS, default event)
# runs the studies one after another (default order: gptoss20b_h200 gptoss120b_b200
# llama70b_h200) with `experiments/frontier_study.py --workers WORKERS --overwrite-stale`,
# resuming from the stores in the checkout (a study made with another duration model or grid
# starts afresh; the committed studies keep only their digests, so a run starts afresh unless
# records.jsonl is restored from git history, see experiments/README.md), each with the wall
# time left; it ends within LIMIT_S seconds of its start (RESERVE_S of them kept for the final
# writes and the archive) and writes
#   $OUT/frontier_results.tgz  the study folders (records.jsonl, manifest.json, records.csv,
#                              summary.json, the three figures) and frontier_studies.json
#   $OUT/frontier_log.txt      every study's progress lines
# Unpack on the workstation from the repository root: tar xzf frontier_results.tgz
# Bad arguments (checked before any arithmetic or work): one line on stderr, exit 2. The exit
# status is otherwise the first non-zero exit of a study's run (124: its timeout), 0 if none.
USAGE="$STUDY_USAGE (STUDY: gptoss20b_h200, gptoss120b_b200 or llama70b_h200)"
ALL_STUDIES="gptoss20b_h200 gptoss120b_b200 llama70b_h200"
die() { echo "run.sh frontier: $*" >&2; exit 2; }
if [ $# -lt 2 ]; then echo "$USAGE" >&2; exit 2; fi
# a positive decimal integer of at most 6 digits: never a string that bash arithmetic evaluates
is_count() { [[ $1 =~ ^[1-9][0-9]{0,5}$ ]]; }
is_count "$1" || die "LIMIT_S must be a positive integer of seconds, got '$1'"
is_count "$2" || die "WORKERS must be a positive integer of processes, got '$2'"
LIMIT=$1
WORKERS=$2
shift 2
for s in "$@"; do
  case " $ALL_STUDIES " in
    *" $s "*) ;;
    *) die "STUDY must be one of gptoss20b_h200, gptoss120b_b200, llama70b_h200, got '$s'" ;;
  esac
done
STUDIES=${*:-$ALL_STUDIES}
RESERVE_S=${RESERVE_S:-45}          # final writes of the last study (~10 s) and the archive
EXACT=${EXACT:-event}
[[ $EXACT =~ ^[a-z][a-z-]{0,30}$ ]] || die "EXACT must be a timer name (score.timer.TIMERS), got '$EXACT'"
[[ $RESERVE_S =~ ^(0|[1-9][0-9]{0,5})$ ]] || \
  die "RESERVE_S must be a non-negative integer of seconds, got '$RESERVE_S'"
need_out
export JAX_PLATFORMS=cpu           # this process too: the GPU stays the measurement's
# JAX's persistent compilation cache in an ignored folder of the checkout: the device keeps
# ignored folders between calls while the machine stays warm, so a second call reuses it
CACHE=${COMPILE_CACHE:-.jax_cache/frontier}
mkdir -p "$CACHE"
# The stores survive between calls while the machine stays warm in $KEEP, outside the checkout:
# each call's copy of the checkout brings the committed manifest.json of a study folder, which
# made the previous call's store look stale (2026-12-07: a second call started afresh).
KEEP=${FRONTIER_KEEP:-/tmp/frontier_keep}
R=experiments/results
for s in $STUDIES; do
  if [ -f "$KEEP/frontier_$s/manifest.json" ]; then
    mkdir -p "$R/frontier_$s" && cp -a "$KEEP/frontier_$s/." "$R/frontier_$s/"
    echo "$s: the previous call's store restored from $KEEP (it resumes)"
  fi
done
[ -f "$KEEP/frontier_studies.json" ] && cp "$KEEP/frontier_studies.json" "$R/frontier_studies.json"
START=$(date +%s)
END=$((START + LIMIT - RESERVE_S))
LOG="$OUT/frontier_log.txt"
RC=0                               # the first non-zero exit of a study, the script's exit status
echo "frontier: limit ${LIMIT}s, ${WORKERS} workers, studies: $STUDIES, exact $EXACT, $(nproc) CPUs" | tee "$LOG"
case "$EXACT" in event|event-batched|screened)   # one compilation of the engine before the workers start
  python3 -c "from subgpu_jax.sim.batchednb import available, compile_now
print(f'compiled engine: {compile_now():.1f} s' if available() else 'numba missing: the Python simulator times every configuration')" \
    2>&1 | grep -v -i warn | tee -a "$LOG";;
esac
for s in $STUDIES; do
  left=$((END - $(date +%s)))
  if [ "$left" -lt 20 ]; then echo "$s: not started (${left}s left)" | tee -a "$LOG"; break; fi
  # --wall-budget stops the grid points; timeout (the budget + 40 s for the final writes) is the
  # hard guard; a kill loses only the points in flight (every finished one is stored)
  timeout -k 5 $((left + 40)) nice -n 10 python3 experiments/frontier_study.py --study "$s" \
      --workers "$WORKERS" --wall-budget "$left" --overwrite-stale --chunk 100 --exact "$EXACT" \
      --compile-cache "$CACHE" 2>&1 \
      | grep --line-buffered -v -i warn >> "$LOG"
  rc=${PIPESTATUS[0]}
  echo "$s: exit $rc after $(( $(date +%s) - START ))s" | tee -a "$LOG"
  if [ -f "$R/frontier_$s/manifest.json" ]; then     # kept for the next call (see KEEP)
    mkdir -p "$KEEP" && rm -rf "$KEEP/frontier_$s" && cp -a "$R/frontier_$s" "$KEEP/"
    [ -f "$R/frontier_studies.json" ] && cp "$R/frontier_studies.json" "$KEEP/"
  fi
  if [ "$RC" -eq 0 ] && [ "$rc" -ne 0 ]; then RC=$rc; fi
done
# the GPT-OSS 120B B200 study's parts of issue 42's digest, for a `sweeps` call of the same
# warm machine (experiments/bench_sweeps_gpu.py reads /tmp/sweeps)
mkdir -p /tmp/sweeps
[ -f "$R/frontier_studies.json" ] && cp "$R/frontier_studies.json" /tmp/sweeps/
[ -f "$R/frontier_gptoss120b_b200/summary.json" ] && \
  cp "$R/frontier_gptoss120b_b200/summary.json" /tmp/sweeps/frontier_summary.json
FILES=
[ -f "$R/frontier_studies.json" ] && FILES=$R/frontier_studies.json
for s in $STUDIES; do
  for f in records.jsonl manifest.json records.csv summary.json frontier.png frontier_by_stages.png gantt_best.png; do
    [ -f "$R/frontier_$s/$f" ] && FILES="$FILES $R/frontier_$s/$f"
  done
done
if [ -n "$FILES" ]; then tar czf "$OUT/frontier_results.tgz" $FILES
else echo "frontier: nothing to archive" | tee -a "$LOG"; fi
[ -f "$R/frontier_studies.json" ] && python3 - <<'EOF' | tee -a "$LOG"
import json
d = json.load(open("experiments/results/frontier_studies.json"))
for k, v in d.items():
    r = v.get("runs", [{}])[-1]
    print(f"{k}: {v.get('finished')}/{v.get('grid_points')} points, last run {r.get('evaluated')} "
          f"points in {r.get('wall_seconds')} s with {r.get('workers', 1)} workers "
          f"({r.get('cpu_seconds')} CPU-s)")
EOF
python3 experiments/frontier_study.py --report 2>&1 | grep -v -i warn >> "$LOG"
ls -la "$OUT"
exit "$RC"
