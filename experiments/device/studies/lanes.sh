# Study `lanes` (docs/results.md, docs/fidelity.md): how two streams of one green context share
# its SMs (lanes.json, the measurement behind the simulator's lane-sharing rule), the runtime
# smoke test of the families with several region kinds (experiments/hw_families_smoke.py), and
# the G=2048 winner through `subgpu run` (tuned GEMMs, whole steps); bundled into $OUT/lanes.tgz
# (results/hw_wins/lanes/ holds the digests of its first run).
workdir lanes
timeout 120 python3 experiments/hw_fidelity_h200.py --phase lanes --out "$D" 2>&1 | quiet | tail -20
timeout 150 python3 -m subgpu_jax.app.cli run $L2048 --cuts L0.o_proj --no-reuse --sms 32,96 --microbatch 512 --streams-per-stage 2 --gemm tuned --calibration $TUNED/calibration_llama70b_tp8_g2048.json --json --rounds 3 --replays 20 > "$D/g2048_ls_32_96_m4_k2_tuned.json" 2> "$D/g2048_ls_32_96_m4_k2_tuned.err"; echo "rc=$?"; quiet < "$D/g2048_ls_32_96_m4_k2_tuned.err" | tail -3
python3 -c "import json; d=json.load(open('$D/g2048_ls_32_96_m4_k2_tuned.json')); print(d['speedup_measured'], d['speedup_predicted'], d['temporal'], d['run'], d.get('output_check'), d.get('step'))"
timeout 150 python3 experiments/hw_families_smoke.py --out "$D" 2>&1 | quiet | tail -15
bundle lanes
