"""CPU cost per grid point with and without a warm JAX persistent compilation cache.

The frontier study's workers (``experiments/frontier_study.py --workers N``) share JAX's
persistent compilation cache (``subgpu_jax.app.pool.compile_cache_env``), so that a shape
compiled by one worker is loaded, not recompiled, by the others. This benchmark scores the same
GPT-OSS 20B grid points (8 H200, event simulator exact scorer, the frontier study's search
settings) in two fresh processes: ``cold`` with an empty cache folder (it fills it), then
``warm`` reading that folder. It reports each point's CPU-seconds (``time.process_time``, less
sensitive to other load on a shared machine than wall time), the ratio cold / warm, and whether
every makespan is identical (it must be: a cached executable is the same compiled code).

Usage: nice -n 15 python experiments/bench_compile_cache.py [--out JSON]
Writes experiments/results/bench_compile_cache_cpu.json by default.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

#: (attention TP, DP, EP, global batch, stages D, microbatches m) of GPT-OSS 20B on 8 H200,
#: spread over deployments, stage counts and microbatch counts of the frontier study's grid.
POINTS = [(8, 1, 8, 256, 3, 4), (4, 2, 4, 512, 4, 2), (2, 4, 8, 512, 6, 4),
          (8, 1, 2, 1024, 2, 8), (4, 2, 8, 128, 5, 1)]


def child() -> None:
    """Score ``POINTS`` in this process and print one JSON list of {point, cpu_s, makespan}."""
    from subgpu_jax import get_hardware, get_model
    from subgpu_jax.app.searchjob import PointScorer
    from subgpu_jax.app.sweep import GridPoint
    from subgpu_jax.model.graph import Deployment

    sc = PointScorer(get_model("gpt-oss-20b"), get_hardware("H200"))
    out = []
    for t, d, e, G, D, m in POINTS:
        dep = Deployment(num_gpus=8, attn_tp=t, attn_dp=d, moe_ep=e, global_batch=G,
                         input_len=32768, kv_history=32768)
        c = time.process_time()
        r = sc(GridPoint(dep, D, m))[0]
        out.append({"point": [t, d, e, G, D, m], "cpu_s": round(time.process_time() - c, 3),
                    "makespan_us": r["makespan_us"]})
    print("RESULT " + json.dumps(out))


def run(cache: str) -> list[dict]:
    """``child()`` in a fresh process with JAX's cache in ``cache`` (one thread, CPU)."""
    from subgpu_jax.app.pool import WORKER_ENV, compile_cache_env

    env = {**os.environ, **WORKER_ENV, **compile_cache_env(cache)}
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child"], env=env,
                       capture_output=True, text=True, check=True)
    line = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=os.path.join(HERE, "results",
                                                  "bench_compile_cache_cpu.json"))
    a = ap.parse_args(argv)
    if a.child:
        child()
        return 0
    with tempfile.TemporaryDirectory() as cache:
        cold = run(cache)
        warm = run(cache)
    rows = []
    print(f"{'point (tp, dp, ep, G, D, m)':32s} {'cold CPU-s':>10s} {'warm CPU-s':>10s} "
          f"{'ratio':>6s} same")
    for c, w in zip(cold, warm):
        same = c["makespan_us"] == w["makespan_us"]
        rows.append({"point": c["point"], "cold_cpu_s": c["cpu_s"], "warm_cpu_s": w["cpu_s"],
                     "ratio": round(c["cpu_s"] / w["cpu_s"], 2), "same_makespan": same})
        print(f"{str(tuple(c['point'])):32s} {c['cpu_s']:10.2f} {w['cpu_s']:10.2f} "
              f"{rows[-1]['ratio']:6.2f} {same}")
    tot_c, tot_w = sum(r["cold_cpu_s"] for r in rows), sum(r["warm_cpu_s"] for r in rows)
    res = {"model": "gpt-oss-20b", "hardware": "H200", "exact": "event",
           "point_fields": ["attn_tp", "attn_dp", "moe_ep", "global_batch", "D", "microbatches"],
           "rows": rows, "cold_cpu_s": round(tot_c, 2), "warm_cpu_s": round(tot_w, 2),
           "ratio": round(tot_c / tot_w, 2), "all_same": all(r["same_makespan"] for r in rows),
           "cpu": os.cpu_count(), "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    print(f"total: cold {tot_c:.1f} CPU-s, warm {tot_w:.1f} CPU-s, {res['ratio']:.2f}x; "
          f"makespans identical: {res['all_same']}")
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as fh:
        json.dump(res, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
