#!/bin/bash
# Issue 6, device call 2 (nvidia-h200-x2): the full exhaustive grid point sharded over 2 GPUs,
# compared with the 1-GPU result of call 1 (experiments/results/exhaustive_gridpoint_h200.json).
export PYTHONUNBUFFERED=1 PYTHONPATH=. NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv > $OUT/gpu_x2.txt 2>&1
timeout 400 python3 experiments/exhaustive_gridpoint.py --num-regions 18 --devices 2 --no-heuristics \
   --out $OUT/exhaustive_gridpoint_h200x2.json > $OUT/exhaustive_h200x2.log 2>&1; echo "rc=$?" >> $OUT/exhaustive_h200x2.log
python3 - <<'PY' >> $OUT/exhaustive_h200x2.log 2>&1
import json, os
a = json.load(open('experiments/results/exhaustive_gridpoint_h200.json'))
b = json.load(open(os.environ['OUT'] + '/exhaustive_gridpoint_h200x2.json'))
same = all(a['per_w'][w]['top'] == b['per_w'][w]['top'] for w in ('0', '1'))
print('top-k identical 1 GPU vs 2 GPUs:', same, a['optimum'] == b['optimum'],
      'evals/s 1 GPU', a['evals_per_s'], '2 GPUs', b['evals_per_s'])
PY
tail -8 $OUT/exhaustive_h200x2.log
