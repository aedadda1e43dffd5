"""Algorithm 2's line search: the published rule against the earlier bisection rule.

``search.line_search`` (docs/method.md §4) doubles the step after every improving trial, halves
it after every failing one and doubles again after a later success, clipped to the donor's limit.
The rule it replaced (kept here only as ``bisect_line`` for this comparison) doubled z = 1, 2,
4, ... until the first failure or the limit, then bisected the last interval once and never
doubled again, so on a line that improves up to a limit of 6 quanta it stopped at 5.

Two workloads, each allocation search run with both rules from the same start:

* ``rugged``: random separable convex objectives plus pseudo-random noise keyed by the
  allocation (noise amplitude 0.01, 0.1 or 1 µs on a ~100-1000 µs objective), random allocation
  spaces (D = 2..5, quantum 1..8, up to 60 free quanta), random feasible starts;
* ``estimator``: the cheap estimator (``Problem.evaluator(...).makespan``) of random synthetic
  regions (``synthetic_workload``, 5-10 kernels) on the full H200 (8-SM quantum, 128 SMs:
  lines up to 14 quanta), the cut Algorithm 1's cheap ranking keeps (``choose_cut``), D in 2..4,
  m in {1, 2, 4}, from the uniform seed and a random feasible start.

Reported per workload: runs, share of runs where the rules end at different values, share where
each is strictly better, the mean ratio of final values (published / bisection) and the mean
objective evaluations.

Usage: python experiments/line_search_rules.py [--rugged 1500] [--instances 30]
Writes experiments/results/line_search_rules.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from subgpu_jax import get_hardware
from subgpu_jax import search as S
from subgpu_jax.model.synthetic import synthetic_workload
from subgpu_jax.space.config import AllocSpace


def bisect_line(value, z_max: int, f1: float, rtol: float = 1e-6) -> tuple[int, float, int]:
    """The earlier rule (same contract as ``search.line_search``): double z while it improves,
    then bisect the interval up to the first failure (or the limit) once, never doubling again."""
    def better(v, ref):
        return v < ref - rtol * abs(ref)

    z, fz, trials, hi = 1, float(f1), 0, z_max + 1
    while 2 * z <= z_max:
        v = float(value(2 * z))
        trials += 1
        if better(v, fz):
            z, fz = 2 * z, v
        else:
            hi = 2 * z
            break
    step = (hi - z) // 2
    while step >= 1:
        if z + step <= z_max:
            v = float(value(z + step))
            trials += 1
            if better(v, fz):
                z, fz = z + step, v
        step //= 2
    return z, fz, trials


def compare(runs) -> dict:
    """Summary of [(published LineResult, bisection LineResult)]."""
    a = np.array([p.value for p, _ in runs])
    b = np.array([q.value for _, q in runs])
    tol = 1e-9 * np.maximum(np.abs(a), np.abs(b))
    return dict(runs=len(runs), differ=float(np.mean(np.abs(a - b) > tol)),
                published_better=float(np.mean(a < b - tol)),
                bisection_better=float(np.mean(b < a - tol)),
                mean_ratio_published_over_bisection=float(np.mean(a / b)),
                evals_mean_published=float(np.mean([p.evals for p, _ in runs])),
                evals_mean_bisection=float(np.mean([q.evals for _, q in runs])))


def rugged(n: int) -> dict:
    runs = []
    for t in range(n):
        rng = np.random.default_rng(t)
        q = int(rng.choice([1, 2, 4, 8]))
        mn = q * int(rng.integers(1, 3))
        D = int(rng.integers(2, 6))
        sp = AllocSpace(D=D, budget=D * mn + q * int(rng.integers(4, 60)), quantum=q, minimum=mn)
        c = rng.uniform(0.1, 10.0, D)
        table = rng.uniform(0, 1, 997)
        amp = float(rng.choice([0.01, 0.1, 1.0]))

        def f(A, c=c, table=table, amp=amp, D=D):
            A = np.atleast_2d(A)
            return (c / A).sum(1) * 100 + amp * table[(A * np.arange(1, D + 1)).sum(1) % 997]

        p0 = sp.round(rng.uniform(0, sp.budget, D))
        runs.append((S.pairwise_line(f, p0, sp), S.pairwise_line(f, p0, sp, line=bisect_line)))
    return compare(runs)


def estimator(n: int) -> dict:
    hw = get_hardware("H200")
    runs = []
    for i in range(n):
        wl = synthetic_workload(i)
        pb = S.Problem(wl, hw)
        for D in (2, 3, 4):
            for m in (1, 2, 4):
                g = wl.graph(m)
                if D > g.n:
                    continue
                cand, _, _ = S.choose_cut(pb, D, m)
                ev = pb.evaluator(cand.seg_of, D, cand.w, m)
                sp = pb.space(D)
                rng = np.random.default_rng(1000 * i + 10 * D + m)
                for p0 in (sp.uniform(), sp.round(rng.uniform(0, sp.budget, D))):
                    runs.append((S.pairwise_line(ev.makespan, p0, sp, batch_line=True),
                                 S.pairwise_line(ev.makespan, p0, sp, batch_line=True,
                                                 line=bisect_line)))
    return compare(runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rugged", type=int, default=1500, help="random rugged objectives")
    ap.add_argument("--instances", type=int, default=30, help="synthetic regions")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                  "line_search_rules.json"))
    args = ap.parse_args()
    t0 = time.perf_counter()
    res = {"rugged": rugged(args.rugged), "estimator": estimator(args.instances)}
    print(f"{'workload':10s} {'runs':>6s} {'differ':>7s} {'pub<bis':>8s} {'bis<pub':>8s} "
          f"{'pub/bis':>8s} {'evals pub':>9s} {'evals bis':>9s}")
    for k, r in res.items():
        print(f"{k:10s} {r['runs']:6d} {r['differ']:7.3f} {r['published_better']:8.3f} "
              f"{r['bisection_better']:8.3f} {r['mean_ratio_published_over_bisection']:8.5f} "
              f"{r['evals_mean_published']:9.1f} {r['evals_mean_bisection']:9.1f}")
    res["seconds"] = time.perf_counter() - t0
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
