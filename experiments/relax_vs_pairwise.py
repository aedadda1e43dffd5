"""Compare the optax relaxation with Algorithm 2 (pairwise-line refinement) on the allocation.

For each grid point (model x hardware x D x microbatch count), the cut is Algorithm 1's proposal
(feature DP + circular rotations ranked by the cheap estimator, ``search.choose_cut``). On that
structure:

* ``pairwise``: Algorithm 1 steps 4-5 (``search.allocate_pairwise``): uniform and
  service-proportional seeds, pairwise-line refinement on the cheap estimator, exact polish of
  both (L_sim passes), final polish;
* ``relax``: ``search.relax_and_polish``: softmax-parameterised allocation annealed with optax
  against ``Evaluator.smooth`` (restarts vmapped), largest-remainder rounding, pairwise-line
  polish with the exact scorer until no move improves;
* ``optimum``: every allocation of the structure scored by the same exact scorer (when there
  are at most ``--opt-limit``: 120 with the simulator, i.e. D <= 3 on the H200 and D = 2 on the
  B200; 5,000 with the static model).

The exact scorer (``--exact``) is the event simulator with contention and L2 residency
(``search.TimerExact`` over ``EventTimer``, default: the scorer the main job uses) or the cheap
estimator's own model (over ``search.EstimatorTimer``, ``--exact static``). Each method gets a
fresh ``MemoScorer`` over one shared cache, so "exact calls" are the distinct configurations
each method scored and each configuration is simulated once.

Default grid: 3 models x {B200, H200} x D in {2, 3, 5} x m in {2, 4} = 36 points (about 3 min on
2 CPU cores with the static model, most of it XLA compilation; longer with the simulator);
``--full`` adds D = 4 (48 points).

Usage: python experiments/relax_vs_pairwise.py [--exact event|static] [--quick | --full]
       [--out PATH]
Writes experiments/results/relax_vs_pairwise.json (event) or relax_vs_pairwise_static.json and
prints a table. Times in µs.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from subgpu_jax.score.timer import EventTimer
from subgpu_jax import get_hardware, get_model
from subgpu_jax import search as S
from subgpu_jax.model.workload import Workload
from subgpu_jax.model.graph import REFERENCE_DEPLOYMENT, Deployment

#: Deployments per model (per-GPU graphs): GPT-OSS-120B at the docs/method.md §5 reference point;
#: GPT-OSS-20B on 8 GPUs (attention TP8, MoE EP8, G = 512); Llama-3.1-8B on one GPU (G = 128,
#: KV history 8192).
DEPLOYMENTS = {
    "gpt-oss-120b": REFERENCE_DEPLOYMENT,
    "gpt-oss-20b": Deployment(num_gpus=8, attn_tp=8, attn_dp=1, moe_ep=8, global_batch=512),
    "llama-3.1-8b": Deployment(num_gpus=1, attn_tp=1, attn_dp=1, moe_ep=1, global_batch=128,
                               input_len=8192, kv_history=8192),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a 12-point grid (smoke test)")
    ap.add_argument("--full", action="store_true", help="all 48 points (D = 2..5, m = 2, 4)")
    ap.add_argument("--exact", choices=("event", "static"), default="event")
    ap.add_argument("--out", default=None)
    ap.add_argument("--opt-limit", type=int, default=None,
                    help="largest allocation space solved exhaustively for reference "
                         "(default 120 with the simulator, 5000 static)")
    args = ap.parse_args()
    event = args.exact == "event"
    opt_limit = args.opt_limit if args.opt_limit is not None else (120 if event else 5000)
    out = args.out or os.path.join(os.path.dirname(__file__), "results",
                                   "relax_vs_pairwise.json" if event
                                   else "relax_vs_pairwise_static.json")
    models = list(DEPLOYMENTS)
    hws = ["B200", "H200"]
    Ds = [2, 3, 4, 5] if args.full else [2, 3, 5]
    ms = [2, 4]
    grid = [(mo, h, D, m) for mo in models for h in hws for D in Ds for m in ms]
    if args.quick:
        grid = grid[::4]
    problems = {(mo, h): S.Problem(Workload.from_model(get_model(mo), DEPLOYMENTS[mo]),
                                   get_hardware(h)) for mo in models for h in hws}
    bases = {k: S.MemoScorer(S.TimerExact(p, EventTimer(p.hw) if event else S.EstimatorTimer(p)))
             for k, p in problems.items()}
    rows = []
    t_all = time.perf_counter()
    hdr = (f"{'model':13s} {'hw':4s} {'D':>1s} {'m':>2s} {'w':>1s} {'pairwise_us':>12s} "
           f"{'calls':>5s} {'relax_us':>12s} {'calls':>5s} {'relax/pw':>8s} {'optimum_us':>12s}")
    print(hdr)
    for mo, h, D, m in grid:
        pb, base = problems[(mo, h)], bases[(mo, h)]
        cand, _, _ = S.choose_cut(pb, D, m)
        space = pb.space(D)
        pw = S.allocate_pairwise(pb, cand.seg_of, D, cand.w, m,
                                 exact=S.MemoScorer(base), L_est=None, L_sim=2)
        rx = S.relax_and_polish(pb, cand.seg_of, D, cand.w, m,
                                exact=S.MemoScorer(base), L_sim=None)
        opt = None
        if space.size <= opt_limit and not event:
            _, opt, _ = S.exhaustive_allocations(pb.evaluator(cand.seg_of, D, cand.w, m), space)
        elif space.size <= opt_limit:
            opt = min(base(pb.config(cand.seg_of, D, cand.w, a, m))
                      for a in np.concatenate(list(space.iter_all())))
        row = dict(model=mo, hw=h, D=D, m=m, w=cand.w, seg_of=list(cand.seg_of),
                   cut_origin=cand.origin, alloc_space=space.size,
                   pairwise_us=pw.makespan_us, pairwise_alloc=pw.alloc.tolist(),
                   pairwise_exact_calls=pw.exact_calls, pairwise_seconds=pw.seconds,
                   relax_us=rx.makespan_us, relax_alloc=rx.alloc.tolist(),
                   relax_exact_calls=rx.exact_calls, relax_seconds=rx.seconds,
                   optimum_us=opt)
        rows.append(row)
        print(f"{mo:13s} {h:4s} {D:1d} {m:2d} {cand.w:1d} {pw.makespan_us:12.1f} "
              f"{pw.exact_calls:5d} {rx.makespan_us:12.1f} {rx.exact_calls:5d} "
              f"{rx.makespan_us / pw.makespan_us:8.4f} "
              f"{'' if opt is None else f'{opt:12.1f}'}", flush=True)
        # summary and results file after every point (an interrupted run keeps its rows)
        r = np.array([x["relax_us"] / x["pairwise_us"] for x in rows])
        with_opt = [x for x in rows if x["optimum_us"] is not None]
        summary = dict(
            points=len(rows),
            relax_better=int(np.sum(r < 1 - 1e-6)), tie=int(np.sum(np.abs(r - 1) <= 1e-6)),
            pairwise_better=int(np.sum(r > 1 + 1e-6)),
            ratio_relax_over_pairwise=dict(mean=float(r.mean()), min=float(r.min()),
                                           max=float(r.max())),
            exact_calls_mean=dict(
                pairwise=float(np.mean([x["pairwise_exact_calls"] for x in rows])),
                relax=float(np.mean([x["relax_exact_calls"] for x in rows]))),
            exact_calls_total=dict(pairwise=int(sum(x["pairwise_exact_calls"] for x in rows)),
                                   relax=int(sum(x["relax_exact_calls"] for x in rows))),
            with_optimum=len(with_opt),
            pairwise_at_optimum=int(sum(x["pairwise_us"] <= x["optimum_us"] * (1 + 1e-6)
                                        for x in with_opt)),
            relax_at_optimum=int(sum(x["relax_us"] <= x["optimum_us"] * (1 + 1e-6)
                                     for x in with_opt)),
            max_gap_to_optimum=dict(
                pairwise=float(max((x["pairwise_us"] / x["optimum_us"] - 1 for x in with_opt),
                                   default=float("nan"))),
                relax=float(max((x["relax_us"] / x["optimum_us"] - 1 for x in with_opt),
                                default=float("nan")))),
            seconds=time.perf_counter() - t_all, cpu_seconds=time.process_time(),
        )
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out, "w") as fh:
            json.dump(dict(summary=summary, rows=rows,
                           scorer=("EventTimer (event simulator, contention + LRU L2)"
                                   if event else "EstimatorTimer (static model)"),
                           opt_limit=opt_limit,
                           settings=dict(L_est=None, L_sim_pairwise=2, L_sim_relax=None,
                                         relax=dict(restarts=8, steps=150, lr=0.15,
                                                    temp_start=2e-2, temp_end=2e-4))),
                      fh, indent=1)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
