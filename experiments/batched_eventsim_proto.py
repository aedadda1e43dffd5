"""The batched event simulator (``sim.batched``, ``sim.batchedjax``; issue 42 item 1) checked
against the event simulator and timed beside it: many SM allocations of one structure simulated
together in lockstep, each with its own events. This began as the prototype of that module;
the library now holds the loops (in NumPy and in JAX) and this script measures them.

``vc_mechanisms.py`` found that the vectorised contention scorer cannot reproduce the event
simulator (its residual is HBM sharing itself) and ``eventsim_order_sharing.py`` that the
allocations of a batch do not share one order of events; so the batched loop advances every
allocation's own events (``sim.batched``'s docstring says how, and what it refuses). The
reference is ``eventsim.simulate(..., cache, forward=False)`` on the same configurations.

Measured (a table and ``results/batched_eventsim_proto.json``): per SubGPU record of a search of
the default workload (``--records``), its configuration and every one-quantum move (one polish
pass, 2-6 allocations) plus ``--extra`` random allocations of the same structure, scored (a) by
the event simulator one at a time (full simulation, ``--cache``), (b) by the NumPy loop and
(c) by the JAX loop in one batch each; the largest relative makespan difference and the wall
seconds of each (JAX: its compilation and one run apart), at the batch sizes given.

Usage: python experiments/batched_eventsim_proto.py --records DIR/records.jsonl
       [--extra N ...] [--out JSON]
Units: µs (makespans), seconds (wall), FLOP, bytes, bytes/s inside.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from digest_cli import write_digest  # noqa: E402
from eventsim_order_sharing import checked_records  # noqa: E402  (shared)

from subgpu_jax.sim.batched import BatchStructure, simulate_allocs  # noqa: E402
from subgpu_jax.sim.batchedjax import simulate_allocs_jax  # noqa: E402


def scale_study(a, recs, hw, model, rng) -> int:
    """``--scale``: the JAX loop alone at large batches (module docstring)."""
    import jax

    from subgpu_jax.sim.eventsim import simulate

    rows = []
    for rec, (cfg, g, space) in recs:
        st = BatchStructure(g, cfg, hw, model)
        for B in a.scale:
            A = np.asarray(random_allocs(space, B, rng), dtype=np.int64)
            tm: dict = {}
            got = simulate_allocs_jax(st, A, a.cache, tm)
            pick = rng.choice(B, size=16, replace=False)
            t0 = time.perf_counter()
            res = [simulate(g, dataclasses.replace(cfg, alloc=tuple(int(x) for x in A[i])),
                            hw, model, a.cache, record=False, validate=False, forward=False)
                   for i in pick]
            per_event = (time.perf_counter() - t0) / len(pick)
            ref = np.array([r.makespan for r in res])
            err = float(np.max(np.abs(got[pick] / ref - 1)))
            # the lockstep loop runs until its slowest row is done: about the largest number
            # of instants one simulation processes (the sample's; ``SimResult.steps``)
            steps = max(r.steps for r in res)
            rows.append({"grid_key": rec["grid_key"], "D": cfg.D, "microbatches": g.microbatches,
                         "batch": B, "jax_compile_s": round(tm["compile_s"], 3),
                         "jax_run_s": round(tm["run_s"], 4), "sample_max_steps": steps,
                         "us_per_step": round(tm["run_s"] / steps * 1e6, 2),
                         "allocs_per_s": round(B / tm["run_s"], 1),
                         "eventsim_s_per_alloc": round(per_event, 5),
                         "speedup_per_alloc": round(per_event * B / tm["run_s"], 2),
                         "sample_max_rel_diff": err})
            print(f"{rec['grid_key']:42s} B={B:6d} jax {tm['run_s']:7.3f} s ({B / tm['run_s']:9.0f}"
                  f" allocations/s, {per_event * B / tm['run_s']:6.1f}x the event simulator; "
                  f"compile {tm['compile_s']:.1f} s; {tm['run_s'] / steps * 1e6:.0f} µs a step); "
                  f"sample |rel diff| {err:.1e}", flush=True)
    out = {"what": __doc__.split("\n\n")[0] + " (--scale: the JAX loop alone)",
           "cache": a.cache, "backend": jax.default_backend(),
           "xla_flags": os.environ.get("XLA_FLAGS", ""),
           "device": jax.devices()[0].device_kind, "cpu_count": os.cpu_count(), "rows": rows,
           "sample_max_rel_diff": max(r["sample_max_rel_diff"] for r in rows)}
    write_digest(a.out, out)
    print(f"wrote {a.out}")
    return 0


def random_allocs(space, n: int, rng) -> list[np.ndarray]:
    """``n`` allocations drawn uniformly from ``space`` (``space.config.AllocSpace``: D stages,
    multiples of the quantum, each at least the minimum, summing to the budget): stars and bars
    over the quanta left after the minimums."""
    q, D = space.quantum, space.D
    U = (space.budget - D * space.minimum) // q
    out = []
    for _ in range(n):
        bars = np.sort(rng.choice(U + D - 1, size=D - 1, replace=False))
        parts = np.diff(np.concatenate([[-1], bars, [U + D - 1]])) - 1
        out.append(parts * q + space.minimum)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", required=True,
                    help="records.jsonl of `subgpu search` on the default workload")
    ap.add_argument("--extra", type=int, nargs="+", default=[0, 1000],
                    help="random allocations added to each record's polish pass (batch sizes)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache", default="none", choices=("none", "lru"),
                    help="the L2 policy of the simulator and both loops (lru: the default "
                         "model's)")
    ap.add_argument("--scale", type=int, nargs="+", default=None, metavar="B",
                    help="instead: the JAX loop alone at these batch sizes (random allocations "
                         "of each record's structure, on JAX's default device), 16 of each "
                         "batch checked against the event simulator")
    ap.add_argument("--records-limit", type=int, default=None,
                    help="the first N SubGPU records only")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "batched_eventsim_proto.json"))
    a = ap.parse_args(argv)
    if any(x < 0 for x in a.extra) or a.seed < 0:
        ap.error("--extra and --seed must be integers >= 0")
    if a.scale is not None and any(not 16 <= x <= 2**20 for x in a.scale):
        ap.error("--scale batch sizes must be integers from 16 to 1,048,576")
    if a.records_limit is not None and a.records_limit < 1:
        ap.error("--records-limit must be an integer >= 1")
    recs = checked_records(ap, a)
    from subgpu_jax import get_hardware
    from subgpu_jax.sim.contention import ContentionModel
    from subgpu_jax.sim.eventsim import simulate

    hw, model = get_hardware("B200"), ContentionModel()
    rng = np.random.default_rng(a.seed)
    recs = recs[:a.records_limit]
    if a.scale is not None:
        return scale_study(a, recs, hw, model, rng)
    rows = []
    for rec, (cfg, g, space) in recs:
        moves, _ = space.moves(np.asarray(cfg.alloc))
        st = BatchStructure(g, cfg, hw, model)
        for extra in a.extra:
            allocs = [np.asarray(cfg.alloc), *moves]
            if extra:
                allocs += random_allocs(space, extra, rng)
            A = np.asarray(allocs, dtype=np.int64)
            t0 = time.perf_counter()
            ref = np.array([simulate(g, dataclasses.replace(cfg, alloc=tuple(int(x) for x in r)),
                                     hw, model, a.cache, record=False, validate=False,
                                     forward=False).makespan for r in A])
            t_ref = time.perf_counter() - t0
            t0 = time.perf_counter()
            got = simulate_allocs(st, A, a.cache)
            t_batch = time.perf_counter() - t0
            err = float(np.max(np.abs(got / ref - 1)))
            row = {"grid_key": rec["grid_key"], "D": cfg.D, "microbatches": g.microbatches,
                   "batch": len(A), "extra": extra, "max_rel_diff": err,
                   "eventsim_s": round(t_ref, 4), "batched_s": round(t_batch, 4),
                   "speedup": round(t_ref / t_batch, 2)}
            line = (f"{rec['grid_key']:42s} B={len(A):4d} |rel diff| {err:.1e}  event "
                    f"{t_ref:6.2f} s  numpy {t_batch:6.2f} s ({t_ref / t_batch:5.2f}x)")
            tm: dict = {}
            got_j = simulate_allocs_jax(st, A, a.cache, tm)
            row.update(jax_max_rel_diff=float(np.max(np.abs(got_j / ref - 1))),
                       jax_compile_s=round(tm["compile_s"], 3),
                       jax_run_s=round(tm["run_s"], 4),
                       jax_speedup=round(t_ref / tm["run_s"], 2))
            line += (f"  jax {tm['run_s']:6.3f} s ({t_ref / tm['run_s']:5.2f}x; compile "
                     f"{tm['compile_s']:.1f} s; |rel diff| {row['jax_max_rel_diff']:.1e})")
            rows.append(row)
            print(line, flush=True)
    keys = ("speedup", "jax_speedup", "jax_compile_s")
    med = {str(e): {k: statistics.median(r[k] for r in rows if r["extra"] == e) for k in keys}
           for e in a.extra}
    out = {"what": __doc__.split("\n\n")[0], "cache": a.cache, "backend": "cpu",
           "cpu_count": os.cpu_count(), "rows": rows,
           "max_rel_diff": max(r["max_rel_diff"] for r in rows),
           "median_by_extra": med,
           "jax_max_rel_diff": max(r["jax_max_rel_diff"] for r in rows)}
    write_digest(a.out, out)
    print(f"max |rel diff| {out['max_rel_diff']:.2e}; medians by added random allocations "
          f"{med}; wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
