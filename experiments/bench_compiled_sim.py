"""The event simulator's compiled engine (``sim.batchednb``) beside the Python simulator in the
same run (issue 42: the exact steps at machine speed): per configuration, the CPU time of one
simulation and whether the makespans agree.

Structures: the GPT-OSS 120B B200 frontier study's costliest families (D = 5 and 6 stages at
m = 8 and 16 microbatches, the first grid point of each in ``frontier_study.py``'s order) and
the README main job's reference deployment (TP8 x DP4, G = 2,048, D = 2 and 3 at m = 4). For
each structure, ``--allocs`` random allocations of its space (stars and bars, ``--seed``) are
timed three ways, each in this process on one core:

* ``python_forward``: ``EventTimer(engine="python")``, the Python simulator as the searches ran
  it before (the periodic fast-forward on);
* ``python_full``: the same with every region simulated (``simulate(forward=False)``, the
  reference the compiled engine reproduces bit for bit);
* ``compiled``: ``EventTimer``'s compiled engine, one call for the structure's allocations
  (the first call of the process, which compiles or loads the engine, is made before timing).

Reported per structure: seconds per allocation of each, the ratios python / compiled, and the
largest relative makespan difference of compiled against python_full (expected 0) and
python_forward. Usage: python experiments/bench_compiled_sim.py [--allocs 8] [--seed 0]
[--out JSON] (default experiments/results/bench_compiled_sim_cpu.json). Units: seconds, µs.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from digest_cli import check_seed_and_out, run_digest, write_digest  # noqa: E402


def structures():
    """``[(name, graph, cfg, hw)]``: the structures of the module docstring, each at the
    allocation the search's uniform seed gives."""
    from frontier_cost import families

    from subgpu_jax.model.generation import search_step
    from subgpu_jax.model.workload import Workload
    from subgpu_jax.search.problem import Problem
    from subgpu_jax.space.config import Config, chain_cut

    arch, hw, fam = families("gptoss120b_b200")
    picks = [fam[(D, m)][0] for D in (5, 6) for m in (8, 16)]
    main = [p for (D, m), ps in fam.items() if m == 4 and D in (2, 3) for p in ps
            if p.deploy.attn_tp == 8 and p.deploy.global_batch == 2048]
    out = []
    for p in picks + sorted(main, key=lambda p: p.D):
        wl = Workload.from_model(arch, search_step(p.deploy), hw)
        g = wl.graph(p.microbatches)
        space = Problem(wl, hw).space(p.D)
        n = wl.graph(1).n
        cut = chain_cut(n, [max(1, (i + 1) * n // p.D) for i in range(p.D - 1)])
        cfg = Config(D=p.D, w=0, seg_of=cut, alloc=tuple(int(x) for x in space.uniform()),
                     microbatch=wl.microbatch_size(p.microbatches), policy=p.policy)
        cfg.check(g.n, g.edges, hw, wl.batch)
        out.append((p.key, g, cfg, hw, space))
    return out


def random_allocs(space, cfg, n: int, rng) -> np.ndarray:
    """``cfg``'s allocation and ``n - 1`` random ones of ``space`` (stars and bars)."""
    q, D = space.quantum, space.D
    U = (space.budget - D * space.minimum) // q
    rows = [np.asarray(cfg.alloc)]
    for _ in range(n - 1):
        bars = np.sort(rng.choice(U + D - 1, size=D - 1, replace=False))
        parts = np.diff(np.concatenate([[-1], bars, [U + D - 1]])) - 1
        rows.append(parts * q + space.minimum)
    return np.asarray(rows, dtype=np.int64)


def measure(a) -> dict:
    from subgpu_jax.model.setup import GpuSetup
    from subgpu_jax.score.timer import EventTimer
    from subgpu_jax.sim.batchednb import compile_now
    from subgpu_jax.sim.eventsim import simulate

    compile_s = compile_now()
    rng = np.random.default_rng(a.seed)
    rows = []
    for name, g, cfg, hw, space in structures():
        ev = EventTimer.of(GpuSetup.uncalibrated(hw))
        py = EventTimer(hw, ev.model, ev.cache, engine="python")
        A = random_allocs(space, cfg, a.allocs, rng)
        cfgs = [dataclasses.replace(cfg, alloc=tuple(int(x) for x in r)) for r in A]
        c0 = time.process_time()
        fw = np.array([py.time(g, c, validate=False).makespan_us for c in cfgs])
        c1 = time.process_time()
        full = np.array([simulate(g, c, hw, ev.model, ev.cache, record=False,
                                  validate=False, forward=False).makespan for c in cfgs])
        c2 = time.process_time()
        comp = ev.time_allocs(g, cfg, A)
        c3 = time.process_time()
        n = len(A)
        r = {"structure": name, "D": cfg.D, "allocs": n,
             "python_forward_s": round((c1 - c0) / n, 5), "python_full_s": round((c2 - c1) / n, 5),
             "compiled_s": round((c3 - c2) / n, 6),
             "ratio_forward": round((c1 - c0) / max(c3 - c2, 1e-9), 1),
             "ratio_full": round((c2 - c1) / max(c3 - c2, 1e-9), 1),
             "max_rel_diff_full": float(np.max(np.abs(comp / full - 1))),
             "max_rel_diff_forward": float(np.max(np.abs(comp / fw - 1)))}
        rows.append(r)
        print(f"{name}: python {r['python_forward_s'] * 1e3:7.1f} ms (full "
              f"{r['python_full_s'] * 1e3:7.1f}), compiled {r['compiled_s'] * 1e3:6.2f} ms an "
              f"allocation: {r['ratio_forward']:5.1f}x ({r['ratio_full']:5.1f}x); differences "
              f"{r['max_rel_diff_full']:.1e} full, {r['max_rel_diff_forward']:.1e} forward",
              flush=True)
    return {"what": __doc__.split("\n\n")[0], "allocs": a.allocs, "seed": a.seed,
            "compile_or_load_s": round(compile_s, 2), "rows": rows,
            "env": {"cpu_count": os.cpu_count(), "machine": platform.machine(),
                    "python": platform.python_version()},
            "date": time.strftime("%Y-%m-%d")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--allocs", type=int, default=8,
                    help="allocations per structure (2-1,000; default 8)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "bench_compiled_sim_cpu.json"))
    a = ap.parse_args(argv)
    if not 2 <= a.allocs <= 1000:
        ap.error(f"--allocs must be an integer from 2 to 1,000, got {a.allocs}")
    check_seed_and_out(ap, a)

    def work():
        d = measure(a)
        write_digest(a.out, d)
        print(f"wrote {a.out}")
        return d

    rc, _ = run_digest(work, a.out)
    return rc


if __name__ == "__main__":
    sys.exit(main())
