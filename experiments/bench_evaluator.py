"""Benchmark: SM-allocation evaluations per second of the vmapped max-plus evaluator.

Workload: GPT-OSS 120B forward pass (36 layers = 18 two-layer regions) on the reference deployment
(DESIGN §5) on B200, m in {2, 4, 8} microbatches, D in {2..5} stages. For each row: evaluations/s
of ``Evaluator.makespan`` on random feasible allocations, the same quantity for a per-allocation
networkx longest path on the explicit augmented DAG (the baseline, measured in the same run on a
few allocations), their ratio, and a check that both give the same makespans.

Usage: python experiments/bench_evaluator.py [--allocs N] [--nx-allocs N] [--out PATH]
Writes JSON under experiments/results/ (default bench_evaluator.json) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import jax
import networkx as nx
import numpy as np

from subgpu_jax import REFERENCE_DEPLOYMENT, build_graph, get_hardware, get_model
from subgpu_jax.evaluator import Evaluator
from subgpu_jax.space import cut_from_starts, enumerate_allocations

HERE = os.path.dirname(os.path.abspath(__file__))


def nx_makespan(ev: Evaluator, alloc) -> float:
    """Longest path on the explicit augmented DAG with node weights tau (networkx baseline)."""
    tau = ev.task_durations(alloc)
    g = ev.dag.to_networkx()
    sink = -1
    g.add_node(sink)
    for i in range(ev.dag.T):
        g.add_edge(i, sink)
    for u, v in g.edges:
        g[u][v]["w"] = tau[u]
    return nx.dag_longest_path_length(g, weight="w")


def cut_for(g, D: int):
    """Evenly spaced chain cut with D segments (w = 0), plus the Macro cut for D = 2 (w = 1)."""
    if D == 2:
        i = g.index("L1.attn")
        return cut_from_starts(g.n, g.edges, [i, i + 1]), 1
    starts = [round(g.n * k / D) for k in range(1, D)]
    return cut_from_starts(g.n, g.edges, starts), 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--allocs", type=int, default=32768, help="allocations per row (default 32768)")
    ap.add_argument("--nx-allocs", type=int, default=5, help="allocations for networkx (default 5)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "bench_evaluator.json"))
    a = ap.parse_args()
    hw = get_hardware("B200")
    arch = get_model("gpt-oss-120b")
    rng = np.random.default_rng(0)
    rows = []
    print(f"backend={jax.default_backend()} devices={jax.devices()}")
    print(f"{'m':>3s}{'D':>3s}{'w':>3s}{'tasks':>7s}{'evals/s':>14s}{'nx evals/s':>12s}"
          f"{'ratio':>10s}{'max|diff| µs':>14s}")
    for m in (2, 4, 8):
        g = build_graph(arch, REFERENCE_DEPLOYMENT, m)
        for D in (2, 3, 4, 5):
            seg, w = cut_for(g, D)
            ev = Evaluator(g, seg, D, w, hw)
            pool = enumerate_allocations(hw.sm_budget, D, hw.sm_quantum, hw.min_pool_sms,
                                         limit=2_000_000)
            allocs = pool[rng.integers(0, len(pool), a.allocs)]
            ev.makespan(allocs[: ev.chunk])  # compile
            t0 = time.perf_counter()
            ms = ev.makespan(allocs)
            dt = time.perf_counter() - t0
            t0 = time.perf_counter()
            ref = [nx_makespan(ev, allocs[i]) for i in range(a.nx_allocs)]
            dt_nx = time.perf_counter() - t0
            diff = float(np.max(np.abs(np.asarray(ref) - ms[: a.nx_allocs])))
            r = {"model": arch.name, "hardware": hw.name, "microbatches": m, "D": D, "w": w,
                 "tasks": ev.dag.T, "allocs": a.allocs, "evals_per_s": a.allocs / dt,
                 "nx_evals_per_s": a.nx_allocs / dt_nx,
                 "ratio_vs_networkx": (a.allocs / dt) / (a.nx_allocs / dt_nx),
                 "max_abs_diff_us": diff, "chunk": ev.chunk}
            rows.append(r)
            print(f"{m:3d}{D:3d}{w:3d}{ev.dag.T:7d}{r['evals_per_s']:14,.0f}"
                  f"{r['nx_evals_per_s']:12,.1f}{r['ratio_vs_networkx']:10,.0f}{diff:14.4f}")
    out = {"backend": jax.default_backend(), "machine": platform.machine(),
           "cpu_count": os.cpu_count(), "jax": jax.__version__, "rows": rows,
           "min_evals_per_s": min(r["evals_per_s"] for r in rows),
           "min_ratio_vs_networkx": min(r["ratio_vs_networkx"] for r in rows)}
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as fh:
        json.dump(out, fh, indent=2)
    print(f"min evals/s {out['min_evals_per_s']:,.0f}; min ratio vs networkx "
          f"{out['min_ratio_vs_networkx']:,.0f}x; wrote {a.out}")


if __name__ == "__main__":
    main()
