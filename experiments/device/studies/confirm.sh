# Study `confirm` (docs/results.md "Where SubGPU wins"): the measured llama-3.1-70b winners through
# the user-facing command, `subgpu run`, with more replays (3 rounds x 20), tuned and stock
# GEMMs, a trace of the G=2048 winner; bundled into $OUT/confirm.tgz
# (results/hw_wins/confirm/ holds the digests of its first run).
workdir confirm
run_json() { name=$1; shift; timeout 150 python3 -m subgpu_jax.app.cli run "$@" --json --rounds 3 --replays 20 > "$D/$name.json" 2> "$D/$name.err"; echo "$name rc=$?"; tail -2 "$D/$name.err" | quiet; python3 -c "import json,sys; d=json.load(open('$D/$name.json')); print(d['speedup_measured'], d['speedup_predicted'], d['temporal'], d['run'], d.get('output_check'), (d.get('timeline') or {}).get('error_breakdown'))" 2>/dev/null; }
run_json g2048_ls_32_96_m4_k2_tuned $L2048 --cuts L0.o_proj --no-reuse --sms 32,96 --microbatch 512 --streams-per-stage 2 --gemm tuned --calibration $TUNED/calibration_llama70b_tp8_g2048.json --trace "$D/trace_g2048_ls_32_96_m4_k2_tuned.json"
run_json g2048_ls_32_96_m4_k2_stock $L2048 --cuts L0.o_proj --no-reuse --sms 32,96 --microbatch 512 --streams-per-stage 2 --gemm stock --no-check
run_json g1024_ls_48_80_m2_k2_tuned $L1024 --cuts L0.o_proj --no-reuse --sms 48,80 --microbatch 512 --streams-per-stage 2 --gemm tuned --calibration $TUNED/calibration_llama70b_tp8_g1024.json
bundle confirm
