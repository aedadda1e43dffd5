# Study `collectives` (issue 25, docs/collectives.md "Real collectives on several GPUs"): on a
# machine with 2 or more GPUs (nvidia-h200-x2/-x4/-x8), every study workload that fits its GPU
# count (experiments/hw_collectives.py WORKLOADS: TP2 ones on 2, all on 8) measured with real
# NCCL collectives (torchrun) and the one-GPU emulations (sleep, proxy), written straight into
# $OUT as measured_<workload>.json. Then on the CPU:
# python experiments/hw_collectives.py --phase analyze --data DIR --gpus N
#   -> results/hw_collectives_h200x<N>.json.
need_out
W=${*:+--workloads $*}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
timeout 560 python3 experiments/hw_collectives.py --phase device --out "$OUT" --time-limit 520 $W \
  2>&1 | quiet | tail -60
