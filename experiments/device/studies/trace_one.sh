# Study `trace_one` (issue 39: look at the measured timeline of a configuration the model got
# wrong): one `subgpu run` of the RUN_FLAGs given (a workload and a configuration, as `subgpu
# simulate` takes them), its JSON (predicted against measured, the timeline's per-category
# error breakdown) and one profiled replay (`--trace`) under $OUT as NAME.json, NAME.err and
# NAME_trace.json.
need_args 2 "$@"
need_out
NAME=$1; shift
timeout 420 python3 -m subgpu_jax.app.cli run "$@" --json --trace "$OUT/${NAME}_trace.json" \
    > "$OUT/$NAME.json" 2> "$OUT/$NAME.err"
echo "$NAME rc=$?"
tail -3 "$OUT/$NAME.err" | quiet
python3 -c "import json; d=json.load(open('$OUT/$NAME.json')); print(d.get('speedup_measured'), d.get('speedup_predicted'), d.get('temporal'), d.get('run')); print(json.dumps((d.get('timeline') or {}).get('error_breakdown'))[:3000])" 2>&1 | tail -5
