"""Where the vectorised contention scorer reproduces the event simulator (issue 42): every model
preset, both link settings, random configurations and the configurations a search visits.

For each preset (one deployment that fits one H200: one GPU for the dense models up to 8B, TP8
for the others, ``DEPLOYMENTS``) and each link setting (``link_time`` True: ``--collectives
sleep``; False: ``none``), it scores with the event simulator (the reference, ``ContentionModel``
defaults, L2 ``lru``) and with the vectorised contention scorer (``score.timer.ContentionTimer``):

* ``random``: ``--random`` configurations (D 2-4, w 0/1, a random legal chain cut, a random
  allocation of the SM budget, m 2 or 4);
* ``search``: the configurations Algorithm 1 polishes: the cheap ranking's top 3 layouts of
  (D, m) in {2, 3} x {2, 4} at their cheap-refined allocations and every one-quantum move from
  there (what a polish pass scores), where the optimiser's curse shows: a search keeps the
  configurations its scorer is most optimistic about.

Each row is scored twice by the vectorised scorer: ``vc`` (today's tables) and ``vc_before``
(``kernel_profiles(shared_l2=False)``: the tables before they charged the shared L2 port and the
loaded memory latency). The multistream mode is not covered: the vectorised scorer has no shared
pools (``ContentionTimer.of`` refuses it), so multistream stays with the event simulator.

Usage: python experiments/vc_agreement_presets.py [--random 6] [--seed 0] [--out JSON]
Writes experiments/results/vc_agreement_presets.json and prints a table.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

from subgpu_jax.model.graph import Deployment  # noqa: E402
from subgpu_jax.model.hardware import get_hardware  # noqa: E402
from subgpu_jax.model.models import MODELS, get_model  # noqa: E402
from subgpu_jax.model.workload import Workload  # noqa: E402
from subgpu_jax.score import vcontention  # noqa: E402
from subgpu_jax.score.vcontention import ContentionEstimator  # noqa: E402
from subgpu_jax.search.cuts import rank_cuts  # noqa: E402
from subgpu_jax.search.problem import Problem  # noqa: E402
from subgpu_jax.sim.contention import ContentionModel  # noqa: E402
from subgpu_jax.sim.eventsim import simulate  # noqa: E402
from subgpu_jax.space.config import Config, chain_cut  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from digest_cli import check_out, write_digest  # noqa: E402  (check --out, atomic JSON)
HW = get_hardware("H200")

#: One deployment per preset that fits one H200's budget (weights + KV).
DEPLOYMENTS = {
    "gpt-oss-120b": Deployment(),  # the reference rank: TP8 x DP4, EP32, G = 2,048
    "gpt-oss-20b": Deployment(8, 8, 1, 8, 512, 2048, 2048),
    "llama-3.1-8b": Deployment(1, 1, 1, 1, 128, 2048, 2048),
    "llama-3.1-70b": Deployment(8, 8, 1, 1, 1024, 1024, 1024),
    "qwen3-30b-a3b": Deployment(8, 8, 1, 8, 1024, 2048, 2048),
    "qwen3-8b": Deployment(1, 1, 1, 1, 64, 4096, 4096),
    "qwen2.5-7b": Deployment(1, 1, 1, 1, 256, 2048, 2048),
    "mixtral-8x7b": Deployment(8, 8, 1, 8, 1024, 2048, 2048),
    "deepseek-v3": Deployment(8, 8, 1, 8, 256, 2048, 2048),
}


def random_config(rng, wl, m: int) -> Config:
    g = wl.graph(m)
    D = int(rng.integers(2, 5))
    w = int(rng.integers(0, 2))
    starts = sorted(rng.choice(np.arange(1, g.n), size=D + w - 1, replace=False).tolist())
    q, lo = HW.sm_quantum, HW.min_pool_sms
    U = HW.sm_budget // q - D * (lo // q)
    bars = np.sort(rng.choice(U + D - 1, size=D - 1, replace=False))
    parts = np.diff(np.concatenate([[-1], bars, [U + D - 1]])) - 1
    cfg = Config(D=D, w=w, seg_of=chain_cut(g.n, starts),
                 alloc=tuple(int(x) for x in parts * q + lo), microbatch=wl.microbatch_size(m))
    cfg.check(g.n, g.edges, HW, wl.batch)
    return cfg


def search_configs(p: Problem) -> list[Config]:
    out = []
    for D in (2, 3):
        for m in (2, 4):
            try:
                ranked, _, _ = rank_cuts(p, D, m, "wavefront", 1)
            except ValueError:
                continue
            sp = p.space(D)
            for rc in ranked[:3]:
                a0 = np.asarray(rc.alloc)
                moves, _ = sp.moves(a0)
                for a in [a0, *moves]:
                    out.append(p.config(rc.cand.seg_of, D, rc.cand.w, a, m))
    return list(dict.fromkeys(out))


def vc_value(g, cfg, model, shared: bool) -> float:
    old = vcontention.kernel_profiles.__defaults__
    d = list(old)
    d[-1] = shared
    vcontention.kernel_profiles.__defaults__ = tuple(d)
    try:
        est = ContentionEstimator(g, cfg.seg_of, cfg.D, cfg.w, HW, policy=cfg.policy,
                                  model=model, cache="lru")
        return float(est.makespan(np.asarray([cfg.alloc]))[0])
    finally:
        vcontention.kernel_profiles.__defaults__ = old


def summary(errs) -> dict:
    a = np.abs(np.asarray(errs))
    return {"n": int(a.size), "median_abs_error": float(np.median(a)),
            "p90_abs_error": float(np.quantile(a, 0.9)), "max_abs_error": float(a.max())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--random", type=int, default=6, help="random configurations per preset")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--models", nargs="+", default=list(DEPLOYMENTS), choices=list(MODELS))
    ap.add_argument("--out", default=os.path.join(HERE, "results", "vc_agreement_presets.json"))
    a = ap.parse_args(argv)
    try:
        check_out(a.out)   # before minutes of work
    except ValueError as e:
        ap.error(str(e))
    rng = np.random.default_rng(a.seed)
    rows, t0 = [], time.time()
    for name in a.models:
        wl = Workload.from_model(get_model(name), DEPLOYMENTS[name])
        p = Problem(wl, HW)
        sets = {"search": search_configs(p)}
        rnd = []
        while len(rnd) < a.random:
            try:
                rnd.append(random_config(rng, wl, int(rng.choice([2, 4]))))
            except ValueError:
                continue
        sets["random"] = rnd
        for link in (True, False):
            model = ContentionModel(link_time=link)
            for kind, cfgs in sets.items():
                for cfg in cfgs:
                    g = wl.graph(wl.m_of(cfg))
                    ev = simulate(g, cfg, HW, model, "lru", record=False).makespan
                    rows.append({"model": name, "link_time": link, "kind": kind, "D": cfg.D,
                                 "w": cfg.w, "microbatches": g.microbatches,
                                 "alloc": list(cfg.alloc), "eventsim_us": float(ev),
                                 "vc_error": vc_value(g, cfg, model, True) / ev - 1,
                                 "vc_before_error": vc_value(g, cfg, model, False) / ev - 1})
        print(f"{name}: {sum(r['model'] == name for r in rows)} rows ({time.time() - t0:.0f} s)",
              flush=True)
    out = {"hardware": "H200", "rows": rows, "summary": {}, "seconds": round(time.time() - t0)}
    print(f"\n{'preset':15s} {'kind':7s} {'link':5s} {'n':>4s} {'vc median':>10s} {'vc max':>8s} "
          f"{'before median':>14s} {'before max':>11s}")
    for name in a.models + ["all"]:
        for kind in ("search", "random"):
            for link in (True, False):
                sel = [r for r in rows if (name == "all" or r["model"] == name)
                       and r["kind"] == kind and r["link_time"] == link]
                if not sel:
                    continue
                s_new = summary([r["vc_error"] for r in sel])
                s_old = summary([r["vc_before_error"] for r in sel])
                out["summary"][f"{name}|{kind}|link={link}"] = {"vc": s_new, "vc_before": s_old}
                print(f"{name:15s} {kind:7s} {str(link):5s} {s_new['n']:4d} "
                      f"{s_new['median_abs_error']:10.2%} {s_new['max_abs_error']:8.2%} "
                      f"{s_old['median_abs_error']:14.2%} {s_old['max_abs_error']:11.2%}")
    write_digest(a.out, out)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
