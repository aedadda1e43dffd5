"""Are the event simulator's forward passes periodic in regions? (issue 42: "fewer and smaller
event-simulator calls")

The exact steps of every grid point call the event simulator on the whole forward pass (all L
regions). If, after a few regions, each further region adds the same time, a simulation of R
regions plus the period would give the pass's makespan for about R / L of the cost. This study
measures, without changing the simulator, how often that holds:

For each configuration, T(R) is the makespan of the same configuration on the graph truncated to
R regions (``OpGraph.num_regions = R``: the same kernels, fewer chained regions), and the linear
extrapolation from two consecutive truncations is

    T_est(R) = T(R + 1) + (L - R - 1) * (T(R + 1) - T(R)),

compared with the full simulation T(L): ``rel_err = T_est / T(L) - 1``. A configuration counts as
periodic from R when |rel_err| <= ``--tol`` (default 1e-9: float rounding, far below any
modelling error). Configurations: every SubGPU record of a ``subgpu search`` folder (its best
configuration per grid point) and ``--random`` random feasible allocations of each record's
structure (seeded), in the record's mode and in the other SM mode.

Usage: python experiments/eventsim_periodicity.py --search DIR [--random N] [--max-r R]
           [--tol X] [--seed S] [--out JSON]
Writes experiments/results/eventsim_periodicity.json by default and prints a table. Bad values
(counts, --out, a folder without a search's records) end with one line ``error: ...`` and exit
code 2, before any simulation.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from subgpu_jax.app.fit import checked_workload  # noqa: E402
from subgpu_jax.app.options import record_config_options  # noqa: E402
from subgpu_jax.model.graph import Deployment  # noqa: E402
from subgpu_jax.model.checks import out_file  # noqa: E402
from subgpu_jax.model.hardware import get_hardware  # noqa: E402
from subgpu_jax.model.models import resolve_model  # noqa: E402
from subgpu_jax.sim.contention import ContentionModel  # noqa: E402
from subgpu_jax.sim.eventsim import SM_MODES, simulate  # noqa: E402
from subgpu_jax.space.config import config_from_options  # noqa: E402

OUT = ROOT / "experiments" / "results" / "eventsim_periodicity.json"
#: The record fields the study reads.
RECORD_FIELDS = {"hardware", "model", "num_gpus", "attn_tp", "attn_dp", "moe_ep", "global_batch",
                 "input_len", "kv_history", "cuts", "sms", "microbatch", "w", "grid_key"}


def random_allocs(alloc: tuple[int, ...], quantum: int, minimum: int, n: int,
                  rng: np.random.Generator) -> list[tuple[int, ...]]:
    """``n`` random allocations with the sum of ``alloc``, multiples of ``quantum``, each stage
    at least ``minimum`` SMs (a random composition of the free quanta)."""
    D, total = len(alloc), int(sum(alloc))
    free = (total - D * minimum) // quantum
    out = []
    for _ in range(n):
        cuts = np.sort(rng.integers(0, free + 1, size=D - 1))
        parts = np.diff(np.concatenate([[0], cuts, [free]]))
        a = tuple(int(minimum + quantum * p) for p in parts)
        a = (a[0] + total - sum(a),) + a[1:]   # any remainder on the first stage
        out.append(a)
    return out


def study(rows: list[dict], n_random: int, max_r: int, tol: float, seed: int) -> dict:
    """The truncation errors of every configuration (see the module docstring)."""
    rng = np.random.default_rng(seed)
    cases = []
    model = ContentionModel()
    for rec in rows:
        hw = get_hardware(rec["hardware"])
        arch = resolve_model(rec["model"])
        dep = Deployment(num_gpus=int(rec["num_gpus"]), attn_tp=int(rec["attn_tp"]),
                         attn_dp=int(rec["attn_dp"]), moe_ep=int(rec["moe_ep"]),
                         global_batch=int(rec["global_batch"]), input_len=int(rec["input_len"]),
                         kv_history=int(rec["kv_history"]))
        wl = checked_workload(arch, dep, hw)
        o = record_config_options(rec)
        cfg = config_from_options(wl, o["cuts"].split(",") if o["cuts"] else None,
                                  [int(x) for x in o["sms"].split(",")], o["microbatch"],
                                  o["reuse"], o["policy"])
        g = wl.graph(wl.m_of(cfg))
        allocs = [tuple(cfg.alloc)] + random_allocs(tuple(cfg.alloc), hw.sm_quantum,
                                                    hw.min_pool_sms, n_random, rng)
        for mode in SM_MODES:
            for a in allocs:
                c = dataclasses.replace(cfg, alloc=a)
                L = g.num_regions
                t0 = time.process_time()
                full = simulate(g, c, hw, model, record=False, validate=False,
                                mode=mode).makespan
                cpu_full = time.process_time() - t0
                T = {}
                for R in range(2, min(L, max_r + 2)):
                    T[R] = simulate(dataclasses.replace(g, num_regions=R), c, hw, model,
                                    record=False, validate=False, mode=mode).makespan
                errs = {R: T[R + 1] + (L - R - 1) * (T[R + 1] - T[R]) - full
                        for R in range(2, min(L, max_r + 2) - 1)}
                cases.append({"grid_key": rec["grid_key"], "mode": mode, "D": c.D,
                              "microbatches": g.microbatches, "alloc": list(a), "L": L,
                              "makespan_us": full, "cpu_full_s": round(cpu_full, 4),
                              "rel_err": {str(R): e / full for R, e in errs.items()}})
    by_r = {}
    for R in range(2, max_r + 1):
        e = np.array([abs(c["rel_err"][str(R)]) for c in cases if str(R) in c["rel_err"]])
        if e.size:
            by_r[str(R)] = {"cases": int(e.size), "periodic": int((e <= tol).sum()),
                            "median_abs_rel_err": float(np.median(e)),
                            "max_abs_rel_err": float(e.max())}
    per_d = {}
    for D in sorted({c["D"] for c in cases}):
        sel = [c for c in cases if c["D"] == D and "3" in c["rel_err"]]
        per_d[str(D)] = {"cases": len(sel),
                         "periodic_from_3": sum(abs(c["rel_err"]["3"]) <= tol for c in sel)}
    return {"cases": cases, "by_r": by_r, "by_stages_r3": per_d}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--search", required=True, help="a `subgpu search` folder (records.csv)")
    ap.add_argument("--random", type=int, default=2, help="random allocations per record")
    ap.add_argument("--max-r", type=int, default=6, help="largest truncation R")
    ap.add_argument("--tol", type=float, default=1e-9, help="|rel_err| counted as periodic")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(OUT))
    a = ap.parse_args(argv)
    try:
        if a.random < 0 or a.max_r < 3 or not a.tol > 0:
            raise ValueError("--random must be >= 0, --max-r >= 3, --tol > 0")
        out_file(a.out, "--out")                      # before minutes of work
        path = Path(a.search) / "records.csv"
        try:
            rows = [r for r in csv.DictReader(path.open()) if r.get("mode") == "subgpu"]
        except OSError as e:
            raise ValueError(f"--search: cannot read {path}: {e.strerror or e}") from None
        if not rows:
            raise ValueError(f"--search: {path} holds no SubGPU record")
        missing = sorted(RECORD_FIELDS - set(rows[0]))
        if missing:
            raise ValueError(f"--search: {path} is not a subgpu search's records.csv (no "
                             f"{', '.join(missing)})")
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    res = study(rows, a.random, a.max_r, a.tol, a.seed)
    res.update(what="experiments/eventsim_periodicity.py: truncated-graph extrapolation of the "
               "event simulator's makespan vs the full pass (issue 42)",
               search=str(a.search), tol=a.tol, random=a.random, seed=a.seed,
               machine=platform.machine(), seconds=round(time.perf_counter() - t0, 1))
    print(f"{'R':>3} {'cases':>6} {'periodic':>9} {'median |err|':>13} {'max |err|':>10}")
    for R, v in res["by_r"].items():
        print(f"{R:>3} {v['cases']:>6} {v['periodic']:>9} {v['median_abs_rel_err']:>13.2e} "
              f"{v['max_abs_rel_err']:>10.2e}")
    for D, v in res["by_stages_r3"].items():
        print(f"D={D}: periodic from R=3 in {v['periodic_from_3']} of {v['cases']}")
    Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
