#!/usr/bin/env bash
# The frontier studies on a machine with many CPU cores (a CPU job; it runs beside GPU work and
# never touches the GPU: JAX_PLATFORMS=cpu; niced, so a GPU measurement's host threads come first):
#   bash experiments/device_frontier.sh LIMIT_S WORKERS [STUDY ...]
# (COMPILE_CACHE=DIR: JAX's compilation cache, default .jax_cache/frontier, an ignored folder)
# runs the studies one after another (default order: gptoss20b_h200 gptoss120b_b200
# llama70b_h200) with `experiments/frontier_study.py --workers WORKERS --overwrite-stale`,
# resuming from the stores in the checkout (a study made with another duration model or grid
# starts afresh), each with the wall time left; it ends within LIMIT_S seconds of its start
# (RESERVE_S of them kept for the final writes and the archive) and writes
#   $OUT/frontier_results.tgz  the study folders (records.jsonl, manifest.json, records.csv,
#                              summary.json, the three figures) and frontier_studies.json
#   $OUT/frontier_log.txt      every study's progress lines
# Unpack on the workstation from the repository root: tar xzf frontier_results.tgz
set -uo pipefail
LIMIT=${1:?usage: device_frontier.sh LIMIT_S WORKERS [STUDY ...]}
WORKERS=${2:?usage: device_frontier.sh LIMIT_S WORKERS [STUDY ...]}
shift 2
STUDIES=${*:-gptoss20b_h200 gptoss120b_b200 llama70b_h200}
OUT=${OUT:-/tmp/frontier_out}
mkdir -p "$OUT"
source experiments/device_env.sh   # PYTHONPATH (no install)
export JAX_PLATFORMS=cpu           # this process too: the GPU stays the measurement's
RESERVE_S=${RESERVE_S:-45}          # final writes of the last study (~10 s) and the archive
# JAX's persistent compilation cache in an ignored folder of the checkout: the device keeps
# ignored folders between calls while the machine stays warm, so a second call reuses it
CACHE=${COMPILE_CACHE:-.jax_cache/frontier}
mkdir -p "$CACHE"
START=$(date +%s)
END=$((START + LIMIT - RESERVE_S))
LOG="$OUT/frontier_log.txt"
echo "device_frontier: limit ${LIMIT}s, ${WORKERS} workers, studies: $STUDIES, $(nproc) CPUs" | tee "$LOG"
for s in $STUDIES; do
  left=$((END - $(date +%s)))
  if [ "$left" -lt 20 ]; then echo "$s: not started (${left}s left)" | tee -a "$LOG"; break; fi
  # --wall-budget stops the grid points; timeout (the budget + 40 s for the final writes) is the
  # hard guard; a kill loses only the points in flight (every finished one is stored)
  timeout -k 5 $((left + 40)) nice -n 10 python3 experiments/frontier_study.py --study "$s" \
      --workers "$WORKERS" --wall-budget "$left" --overwrite-stale --chunk 100 \
      --compile-cache "$CACHE" 2>&1 \
      | grep --line-buffered -v -i warn >> "$LOG"
  echo "$s: exit ${PIPESTATUS[0]} after $(( $(date +%s) - START ))s" | tee -a "$LOG"
done
R=experiments/results
FILES=$R/frontier_studies.json
for s in $STUDIES; do
  for f in records.jsonl manifest.json records.csv summary.json frontier.png frontier_by_stages.png gantt_best.png; do
    [ -f "$R/frontier_$s/$f" ] && FILES="$FILES $R/frontier_$s/$f"
  done
done
tar czf "$OUT/frontier_results.tgz" $FILES
python3 - <<'EOF' | tee -a "$LOG"
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
