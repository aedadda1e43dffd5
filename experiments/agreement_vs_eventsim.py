"""Agreement of the vectorised-contention evaluator with the exact event simulator (item 4).

Draws random valid configurations on the H200 preset of
* gpt-oss-120b, ``graph.REFERENCE_DEPLOYMENT`` (TP8 x DP4, EP32, G = 2048: R = 512 requests/GPU),
* gpt-oss-20b, Deployment(num_gpus=8, attn_tp=8, attn_dp=1, moe_ep=8, global_batch=256 or 512),
with D in 2..5, w in {0, 1}, a uniformly random legal chain cut, a uniformly random allocation
(multiples of 8, >= 8, summing to 128) and m in {1, 2, 4, 8} microbatches, and scores each with
``eventsim.simulate(graph, cfg, H200)`` (default ``ContentionModel()``, cache ``"lru"``) and with
``vcontention.VContentionEvaluator`` (default settings). Reports the Spearman rank correlation of
the makespans, the distribution of the relative error (vc / eventsim - 1), the same for the static
``evaluator.Evaluator`` (no contention, for reference), a within-structure ranking test (several
allocations of one fixed cut: what the allocation search needs) and the evaluation speed.

Usage: python experiments/agreement_vs_eventsim.py [--n 240] [--seed 0] [--out PATH]
Writes experiments/results/agreement_vs_eventsim.json and prints a table. A few minutes on a
2-core CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import jax
import numpy as np
from scipy.stats import spearmanr

from subgpu_jax.sim.contention import ContentionModel
from subgpu_jax.score.evaluator import Evaluator
from subgpu_jax.sim.eventsim import simulate
from subgpu_jax.model.graph import REFERENCE_DEPLOYMENT, Deployment, build_graph
from subgpu_jax.model.hardware import get_hardware
from subgpu_jax.model.models import get_model
from subgpu_jax.space.config import Config, chain_cut, enumerate_allocations
from subgpu_jax.score.vcontention import VContentionEvaluator

HERE = Path(__file__).resolve().parent
HW = get_hardware("H200")
WORKLOADS = {
    "gpt-oss-120b": [REFERENCE_DEPLOYMENT],
    "gpt-oss-20b": [Deployment(num_gpus=8, attn_tp=8, attn_dp=1, moe_ep=8, global_batch=256),
                    Deployment(num_gpus=8, attn_tp=8, attn_dp=1, moe_ep=8, global_batch=512)],
}
#: One padding for every structure of the experiment, so the evaluator compiles once.
PADS = dict(pad_tasks=1024, pad_preds=4, pad_window=32, pad_segments=8)
_GRAPHS: dict = {}


def get_graph(model: str, dep: Deployment, m: int):
    """Memoised ``build_graph``."""
    key = (model, dep, m)
    if key not in _GRAPHS:
        _GRAPHS[key] = build_graph(get_model(model), dep, m)
    return _GRAPHS[key]


def random_alloc(rng: np.random.Generator, D: int) -> tuple[int, ...]:
    """Uniform random allocation of ``HW.sm_budget`` SMs into D pools (quantum and min 8)."""
    q = HW.sm_budget // HW.sm_quantum
    U = q - D * (HW.min_pool_sms // HW.sm_quantum)
    bars = np.sort(rng.choice(U + D - 1, size=D - 1, replace=False))
    parts = np.diff(np.concatenate([[-1], bars, [U + D - 1]])) - 1
    return tuple(int(x) for x in (parts * HW.sm_quantum + HW.min_pool_sms))


def draw(rng: np.random.Generator, model: str):
    """One random valid (graph, Config) of ``model``; raises if the config is infeasible."""
    deps = WORKLOADS[model]
    dep = deps[int(rng.integers(len(deps)))]
    R = dep.requests_per_gpu
    m = int(rng.choice([m for m in (1, 2, 4, 8) if R % m == 0]))
    g = get_graph(model, dep, m)
    D = int(rng.integers(2, 6))
    w = int(rng.integers(0, 2))
    starts = sorted(rng.choice(np.arange(1, g.n), size=D + w - 1, replace=False).tolist())
    cfg = Config(D=D, w=w, seg_of=chain_cut(g.n, starts), alloc=random_alloc(rng, D),
                 microbatch=R // m)
    cfg.check(g.n, g.edges, HW, R)
    return g, cfg


def vc_eval(g, cfg) -> VContentionEvaluator:
    """The evaluator of ``cfg``'s structure with the shared padding (default buckets if a DAG
    needs more)."""
    try:
        return VContentionEvaluator.for_config(g, cfg, HW, **PADS)
    except ValueError:
        return VContentionEvaluator.for_config(g, cfg, HW)


def stats(ev: np.ndarray, est: np.ndarray) -> dict:
    """Spearman rho and |relative error| quantiles of ``est`` against ``ev``."""
    e = est / ev - 1.0
    a = np.abs(e)
    rho = float(spearmanr(est, ev)[0]) if len(ev) > 2 else float("nan")
    return {"n": int(len(ev)), "spearman_rho": rho, "median_abs_err": float(np.median(a)),
            "p90_abs_err": float(np.quantile(a, 0.9)), "max_abs_err": float(a.max()),
            "median_signed_err": float(np.median(e)), "mean_signed_err": float(e.mean())}


def run(n: int = 240, seed: int = 0, n_struct: int = 8, per_struct: int = 24) -> dict:
    """Run the experiment; returns the JSON-ready result."""
    rng = np.random.default_rng(seed)
    rows = []
    t_ev = t_vc = 0.0
    for i in range(n):
        model = ("gpt-oss-120b", "gpt-oss-20b")[i % 2]
        g, cfg = draw(rng, model)
        t0 = time.perf_counter()
        ev = simulate(g, cfg, HW, ContentionModel(), "lru", record=False).makespan
        t1 = time.perf_counter()
        vc = float(vc_eval(g, cfg).makespan([cfg.alloc])[0])
        t2 = time.perf_counter()
        st = float(Evaluator.for_config(g, cfg, HW).makespan([cfg.alloc])[0])
        t_ev += t1 - t0
        t_vc += t2 - t1
        rows.append({"model": model, "global_batch": g.deployment.global_batch,
                     "microbatches": g.microbatches, "D": cfg.D, "w": cfg.w,
                     "seg_of": list(cfg.seg_of), "alloc": list(cfg.alloc),
                     "eventsim_us": float(ev), "vc_us": vc, "static_us": st,
                     "vc_err": vc / ev - 1.0, "static_err": st / ev - 1.0})
    out: dict = {"n_configs": n, "seed": seed, "rows": rows, "summary": {}}
    for name in ("gpt-oss-120b", "gpt-oss-20b", "pooled"):
        sel = [r for r in rows if name == "pooled" or r["model"] == name]
        ev = np.array([r["eventsim_us"] for r in sel])
        out["summary"][name] = {
            "vc": stats(ev, np.array([r["vc_us"] for r in sel])),
            "static": stats(ev, np.array([r["static_us"] for r in sel]))}
    out["time_s"] = {"eventsim_total": t_ev, "vc_total_incl_setup_and_compile": t_vc}
    # within-structure ranking: several allocations of one cut (what the search sees)
    within = []
    for s in range(n_struct):
        model = ("gpt-oss-120b", "gpt-oss-20b")[s % 2]
        g, cfg = draw(rng, model)
        while cfg.D < 3 or g.microbatches < 2:  # structures where the allocation matters
            g, cfg = draw(rng, model)
        allocs = np.array(sorted({random_alloc(rng, cfg.D) for _ in range(per_struct)}))
        evs = np.array([simulate(g, Config(cfg.D, cfg.w, cfg.seg_of, tuple(int(x) for x in a),
                                           cfg.microbatch), HW, record=False).makespan
                        for a in allocs])
        e = vc_eval(g, cfg)
        vcs = e.makespan(allocs)
        sts = Evaluator.for_config(g, cfg, HW).makespan(allocs)
        within.append({"model": model, "microbatches": g.microbatches, "D": cfg.D, "w": cfg.w,
                       "seg_of": list(cfg.seg_of), "n_allocs": int(len(allocs)),
                       "vc": stats(evs, vcs), "static": stats(evs, sts),
                       "best_alloc_eventsim": allocs[int(np.argmin(evs))].tolist(),
                       "best_alloc_vc": allocs[int(np.argmin(vcs))].tolist(),
                       "vc_pick_regret": float(evs[int(np.argmin(vcs))] / evs.min() - 1.0),
                       "static_pick_regret": float(evs[int(np.argmin(sts))] / evs.min() - 1.0)})
    out["within_structure"] = within
    # speed: allocations per second of the evaluator (compiled, batch of 2048)
    speed = []
    for model, dep, m, D, w, starts in (
            ("gpt-oss-120b", REFERENCE_DEPLOYMENT, 2, 2, 1, [3, 4]),
            ("gpt-oss-120b", REFERENCE_DEPLOYMENT, 4, 3, 0, [9, 15]),
            ("gpt-oss-120b", REFERENCE_DEPLOYMENT, 8, 5, 1, [3, 6, 9, 15, 20])):
        g = get_graph(model, dep, m)
        A = enumerate_allocations(HW.sm_budget, D, HW.sm_quantum, HW.min_pool_sms)
        A = A[np.random.default_rng(1).integers(0, len(A), 2048)]
        e = VContentionEvaluator(g, chain_cut(g.n, starts), D, w, HW)
        e.makespan(A[:256])
        t0 = time.perf_counter()
        e.makespan(A)
        dt = time.perf_counter() - t0
        speed.append({"model": model, "microbatches": m, "D": D, "w": w, "tasks": e.dag.T,
                      "lane_triples": len(e.plan.triples), "allocs_per_s": len(A) / dt, "chunk": e.chunk})
    out["speed"] = speed
    out["env"] = {"backend": jax.default_backend(), "cpu_count": os.cpu_count(),
                  "machine": platform.machine(), "jax": jax.__version__}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=240, help="random configurations (>= 200)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(HERE / "results" / "agreement_vs_eventsim.json"))
    args = ap.parse_args()
    t0 = time.perf_counter()
    res = run(args.n, args.seed)
    res["wall_s"] = time.perf_counter() - t0
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=1))
    print(f"{'set':14s} {'scorer':7s} {'n':>4s} {'rho':>7s} {'med|e|':>8s} {'p90|e|':>8s} "
          f"{'max|e|':>8s} {'bias':>8s}")
    for name, d in res["summary"].items():
        for sc in ("vc", "static"):
            s = d[sc]
            print(f"{name:14s} {sc:7s} {s['n']:4d} {s['spearman_rho']:7.4f} "
                  f"{s['median_abs_err']:8.4f} {s['p90_abs_err']:8.4f} {s['max_abs_err']:8.4f} "
                  f"{s['median_signed_err']:8.4f}")
    print("within-structure (allocations of one cut):")
    for r in res["within_structure"]:
        print(f"  {r['model']:13s} m={r['microbatches']} D={r['D']} w={r['w']} "
              f"n={r['n_allocs']:2d} rho vc {r['vc']['spearman_rho']:.3f} static "
              f"{r['static']['spearman_rho']:.3f}  med|e| vc {r['vc']['median_abs_err']:.4f} "
              f"regret vc {r['vc_pick_regret']:.4f} static {r['static_pick_regret']:.4f}")
    for s in res["speed"]:
        print(f"speed m={s['microbatches']} D={s['D']} T={s['tasks']} triples={s['lane_triples']}: "
              f"{s['allocs_per_s']:.0f} allocations/s")
    print(f"wall {res['wall_s']:.1f} s -> {args.out}")


if __name__ == "__main__":
    main()
