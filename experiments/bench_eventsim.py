"""Benchmark of the exact event simulator (issue item 8).

One full 36-layer GPT-OSS 120B forward pass (reference deployment ``graph.REFERENCE_DEPLOYMENT``
on B200) at m = 8 microbatches with 3 stages: wall time and kernel events per second, contention
on (LRU cache) and off (isolated static durations), plus the temporal baseline. Target: <= 100 ms
per simulation on a 2-core CI machine.

Usage: python experiments/bench_eventsim.py [--repeats N] [--out PATH]
Writes experiments/results/bench_eventsim.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

from subgpu_jax.sim.contention import ContentionModel
from subgpu_jax.sim.eventsim import simulate
from subgpu_jax.model.graph import REFERENCE_DEPLOYMENT, build_graph
from subgpu_jax.model.hardware import get_hardware
from subgpu_jax.model.models import get_model
from subgpu_jax.space.config import Config, cut_from_starts, temporal_config

HERE = Path(__file__).resolve().parent


def bench(repeats: int = 7) -> dict:
    """Time the three cases; returns a JSON-ready dict."""
    hw = get_hardware("B200")
    arch = get_model("gpt-oss-120b")
    R = REFERENCE_DEPLOYMENT.requests_per_gpu
    m = 8
    g = build_graph(arch, REFERENCE_DEPLOYMENT, m)
    g1 = build_graph(arch, REFERENCE_DEPLOYMENT, 1)
    # 3 stages over the two-layer macro-period: L0 attention+routing | L0 experts + L1 qkv | rest
    cfg = Config(D=3, w=0, seg_of=cut_from_starts(g.n, g.edges, [9, 15]), alloc=(48, 52, 48),
                 microbatch=R // m)
    cases = [
        ("subgpu D=3 m=8, contention+LRU", g, cfg, ContentionModel(), "lru", True),
        ("subgpu D=3 m=8, contention+LRU, no util series", g, cfg, ContentionModel(), "lru",
         False),
        ("subgpu D=3 m=8, contention off, cache off", g, cfg, ContentionModel.off(), "none",
         False),
        ("temporal m=1, contention+LRU", g1, temporal_config(g1.n, hw, R), ContentionModel(),
         "lru", True),
    ]
    rows = []
    for name, graph, c, model, cache, rec in cases:
        simulate(graph, c, hw, model, cache, record=rec)  # warm-up
        walls, cpus = [], []
        for _ in range(repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            res = simulate(graph, c, hw, model, cache, record=rec)
            walls.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
        best = min(walls)
        rows.append({
            "case": name, "kernel_instances": int(res.kernel_start.size),
            "events": int(res.events), "steps": int(res.steps),
            "wall_ms_min": 1e3 * best, "wall_ms_median": 1e3 * statistics.median(walls),
            "cpu_ms_min": 1e3 * min(cpus),
            "events_per_s": res.events / best, "kernels_per_s": res.kernel_start.size / best,
            "makespan_us": float(res.makespan), "l2_hit_rate": float(res.l2_hit_rate),
            "mean_hbm_util": float(res.mean_hbm_util), "mean_sm_util": float(res.mean_sm_util),
        })
    return {"hardware": "B200", "model": "gpt-oss-120b", "deployment": "REFERENCE_DEPLOYMENT",
            "config": {"D": cfg.D, "w": cfg.w, "alloc": list(cfg.alloc), "microbatches": m,
                       "cut_starts": [9, 15]},
            "target_ms": 100.0, "repeats": repeats, "cpu_count": os.cpu_count(),
            "python": platform.python_version(), "load_avg": list(os.getloadavg()),
            "rows": rows}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--out", default=str(HERE / "results" / "bench_eventsim.json"))
    a = ap.parse_args(argv)
    if a.repeats < 1:
        raise SystemExit("--repeats must be >= 1")
    out = Path(a.out)
    if not out.parent.is_dir():
        raise SystemExit(f"--out: directory {out.parent} does not exist")
    r = bench(a.repeats)
    print(f"{'case':52s} {'kernels':>8s} {'events':>7s} {'min ms':>8s} {'med ms':>8s} "
          f"{'events/s':>10s} {'makespan µs':>12s}")
    for x in r["rows"]:
        print(f"{x['case']:52s} {x['kernel_instances']:8d} {x['events']:7d} "
              f"{x['wall_ms_min']:8.1f} {x['wall_ms_median']:8.1f} {x['events_per_s']:10.0f} "
              f"{x['makespan_us']:12.1f}")
    out.write_text(json.dumps(r, indent=2))
    print(f"wrote {out} (load average {r['load_avg'][0]:.2f} on {r['cpu_count']} CPUs)")


if __name__ == "__main__":
    main()
