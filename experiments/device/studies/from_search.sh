# Study `from_search` (docs/results.md): `subgpu run --from-search SEARCH_DIR --top 2` on a search
# made on the CPU for the H200 (results/h200_*_search: e.g. h200_llama70b_g2048_search with
# `--model llama-3.1-70b --input-len 1024 --gemm tuned --rounds 2 --replays 10`; the fused one
# with `--elementwise triton --rounds 3 --replays 20` too); RUN_FLAGs go to `subgpu run`. The
# measured frontier (measured_frontier.json/.png) lands beside the predicted one; bundled into
# $OUT/from_search.tgz.
need_args 1 "$@"
S=$1
shift
workdir from_search
cp -r "$S"/. "$D/"
timeout 300 python3 -m subgpu_jax.app.cli run --from-search "$D" --top 2 --out-dir "$D" "$@" 2>&1 \
  | quiet | tee "$D/from_search.log" | tail -25
bundle from_search
