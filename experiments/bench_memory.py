"""Peak memory vs candidate count: streaming evaluation keeps memory flat.

For each candidate count N (default 1e5, 1e6, 1e7) a fresh subprocess streams the first N
candidates (cut x allocation, generated on the device) of the 20-operator GPT-OSS-like chain
(B200, quantum 2, D = 5, w = 1, L = ``--num-regions``, m = 2) through ``MassiveEvaluator`` with a
fixed ``--memory-budget``, keeping the top-k on the fly, and reports its peak RSS
(``resource.getrusage(RUSAGE_SELF).ru_maxrss``; on an accelerator also the device's
``peak_bytes_in_use``), the block size, the evaluations/s and the best makespan found.

Usage: python experiments/bench_memory.py [--counts 1e5,1e6,1e7] [--memory-budget BYTES]
    [--num-regions 4] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

CHILD = r"""
import json, math, resource, sys, time
sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[1] + '/experiments')
import jax
from subgpu_jax import get_hardware
from subgpu_jax.score.massive import MassiveEvaluator
from subgpu_jax.space.config import chain_cut
from subgpu_jax.space.taskdag import build_task_dag
from exhaustive_gridpoint import make_instance
N, budget, L = int(float(sys.argv[2])), int(sys.argv[3]), int(sys.argv[4])
hw = get_hardware('B200'); D, w, m = 5, 1, 2
chain, model, _ = make_instance(hw, m, L)
table = model.table(chain)
dag = build_task_dag(chain.n, chain.edges, chain.cross_edges, chain_cut(chain.n, range(1, D + w)),
                     D, w, L, m)
me = MassiveEvaluator(dag, table, D, w, hw.sm_budget, hw.sm_quantum, hw.min_pool_sms,
                      mode='chain', topk=16, memory_budget=budget)
calls = math.ceil(N / (me.plan.size * me.devices))
t0 = time.perf_counter()
r = me.run(limit=calls)
out = {'requested': N, 'evaluated': r.evaluated, 'seconds': time.perf_counter() - t0,
       'evals_per_s': r.evals_per_s, 'block': me.plan.size, 'est_block_bytes': me.plan.est_bytes,
       'best_us': float(r.values[0]), 'backend': jax.default_backend(),
       'max_rss_MiB': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
if jax.default_backend() != 'cpu':
    out['device_peak_MiB'] = (jax.devices()[0].memory_stats() or {}).get('peak_bytes_in_use', 0) / 2**20
print(json.dumps(out))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--counts", default="1e5,1e6,1e7")
    ap.add_argument("--memory-budget", type=int, default=64 * 2**20, help="bytes per call")
    ap.add_argument("--num-regions", type=int, default=4)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "bench_memory.json"))
    a = ap.parse_args()
    rows = []
    for c in a.counts.split(","):
        p = subprocess.run([sys.executable, "-c", CHILD, ROOT, c, str(a.memory_budget),
                            str(a.num_regions)], capture_output=True, text=True, cwd=ROOT)
        if p.returncode:
            raise SystemExit(p.stderr[-3000:])
        row = json.loads(p.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(f"N={row['evaluated']:>12,d}  block={row['block']:>8,d}  "
              f"{row['evals_per_s']:>14,.0f}/s  peak RSS {row['max_rss_MiB']:8.1f} MiB  "
              f"best {row['best_us']:.3f} µs", flush=True)
    rss = [r["max_rss_MiB"] for r in rows]
    out = {"memory_budget": a.memory_budget, "num_regions": a.num_regions, "rows": rows,
           "rss_spread_MiB": max(rss) - min(rss),
           "rss_growth_ratio": max(rss) / min(rss)}
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as fh:
        json.dump(out, fh, indent=2)
    print(f"peak RSS spread {out['rss_spread_MiB']:.1f} MiB over counts {a.counts}; wrote {a.out}")


if __name__ == "__main__":
    main()
