"""The overlap integrals' two forms when one process scores many grid points of one structure,
as a sweep's worker does (the frontier studies: ``app.pool.Scheduler`` keeps a worker to a
family of stages and microbatches): CPU seconds per grid point of the slices form against the
gather form, the first point (tracing and compilation) apart from the rest (calls).

``bench_integrals.py`` times single grid points in fresh processes (where the gather form's
cheaper tracing decides, ``score.vcontention.GATHER_MIN_TRIPLES``); a frontier study's worker
traces each program once and calls it for dozens of points, where the slices form's faster
calls can pay its tracing back (``GATHER_MIN_TRIPLES_REUSED``, ``VCOptions.reuse``). Each row
is one family (D stages, m microbatches) of the GPT-OSS 120B / 32 B200 frontier study's grid
(``experiments/frontier_study.py``, its study order): its first ``--points`` grid points scored
in one fresh process (JAX on the CPU, one thread, as a pool worker) per form, first with an
empty JAX compile cache (cold) then with the cache that run left (warm). The compiled
event-simulator engine is compiled before, once. The forms must choose the same configurations
(the records' makespans are the event simulator's; ``same_records`` compares them).

Usage: python experiments/bench_integrals_reuse.py [--families D:M ...] [--points N] [--out JSON]
Writes ``experiments/results/bench_integrals_reuse_cpu.json`` by default and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_integrals import point_arg  # noqa: E402  (D:M of the frontier grid)
from digest_cli import check_out, finish_digest, run_stamp  # noqa: E402  (check --out, atomic JSON)

#: Both thresholds forced: every plan in one form.
FORMS = {"slices": 10**9, "gather": -1}
DEFAULT_FAMILIES = ["2:16", "4:4", "6:4", "3:8", "4:8", "5:8", "6:8", "4:16"]
#: The child: forces the form, scores the family's first N points of the study with the
#: study's scorer (``frontier_study.study_timer``), prints one JSON line.
CHILD = r"""
import json, sys, time
import subgpu_jax.score.vcontention as vc
t, D, m, n = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
vc.GATHER_MIN_TRIPLES = vc.GATHER_MIN_TRIPLES_REUSED = t
seen = []
init = vc.VContentionEvaluator.__init__
def spy(self, *a, **k):
    init(self, *a, **k)
    seen.append(len(self.plan.triples))
vc.VContentionEvaluator.__init__ = spy
import frontier_study as fs
from subgpu_jax import get_hardware, get_model
from subgpu_jax.app.searchjob import PointScorer
from subgpu_jax.app.sweep import build_grid
st = {**fs.STUDIES["gptoss120b_b200"], **fs.WIDE}
arch, hw = get_model(st["model"]), get_hardware(st["hw"])
pars = fs.parallelisms(arch, st["gpus"], st["all_ep"])
pts = build_grid(arch, st["gpus"], st["batches"], [D], [m], kv_history=32768,
                 parallelisms=pars, hw=hw)
pts = [p for p in fs.order_points(pts) if p.D == D and p.microbatches == m][:n]
scorer = PointScorer(arch, hw, fs.study_timer("event", hw))
cpu, best = [], []
for p in pts:
    c0 = time.process_time()
    recs = scorer(p)
    cpu.append(round(time.process_time() - c0, 3))
    best.append([p.key, min(r["makespan_us"] for r in recs)])
print("ROW " + json.dumps({"cpu": cpu, "best": best, "max_triples": max(seen, default=0)}))
"""


def run_family(form: str, D: int, m: int, n: int, cache: str, numba: str) -> dict:
    """One fresh process scoring the family's first ``n`` points in ``form``: its per-point CPU
    seconds, best makespans and the largest plan's triples.

    Raises:
        RuntimeError: the child failed (the end of its stderr)."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", SUBGPU_JAX_CACHE=cache, NUMBA_CACHE_DIR=numba,
               PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "experiments")]),
               XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
               OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-c", CHILD, str(FORMS[form]), str(D), str(m), str(n)],
                       env=env, capture_output=True, text=True, cwd=ROOT)
    line = next((x for x in p.stdout.splitlines() if x.startswith("ROW ")), None)
    if p.returncode != 0 or line is None:
        raise RuntimeError(f"{form} D={D} m={m}: exit {p.returncode}: {p.stderr[-2000:]}")
    return json.loads(line[4:])


def summarise(r: dict) -> dict:
    """First point, mean of the others, and the total, CPU seconds."""
    c = r["cpu"]
    rest = c[1:]
    return {"first_s": c[0], "rest_mean_s": round(sum(rest) / len(rest), 3) if rest else None,
            "total_s": round(sum(c), 2), "per_point": c}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "experiments", "results",
                                                  "bench_integrals_reuse_cpu.json"))
    ap.add_argument("--families", nargs="+", type=point_arg,
                    default=[point_arg(p) for p in DEFAULT_FAMILIES],
                    help=f"families D:M (default {' '.join(DEFAULT_FAMILIES)})")
    ap.add_argument("--points", type=int, default=6, help="grid points per family (>= 2)")
    a = ap.parse_args(argv)
    if a.points < 2:
        ap.error(f"--points must be >= 2 (the first point and the rest), got {a.points}")
    try:
        check_out(a.out)
    except ValueError as e:
        ap.error(str(e))
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_integrals_reuse_") as tmp:
        numba = os.path.join(tmp, "numba")
        subprocess.run([sys.executable, "-c", "from subgpu_jax.sim.batchednb import "
                        "available, compile_now\nif available(): compile_now()"], check=True,
                       cwd=ROOT, env=dict(os.environ, NUMBA_CACHE_DIR=numba, PYTHONPATH=ROOT))
        for D, m in a.families:
            row = {"family": f"D={D} m={m}", "D": D, "m": m}
            bests = []
            for form in FORMS:
                cache = os.path.join(tmp, f"jax_{D}_{m}_{form}")
                for kind in ("cold", "warm"):
                    r = run_family(form, D, m, a.points, cache, numba)
                    row[f"{form}_{kind}"] = summarise(r)
                    row["max_triples"] = r["max_triples"]
                    bests.append(r["best"])
                    print(f"D={D} m={m} {form:6s} {kind}: first {r['cpu'][0]:.2f} s, "
                          f"rest {row[f'{form}_{kind}']['rest_mean_s']} s/point, "
                          f"triples {r['max_triples']}", flush=True)
            row["same_records"] = all(
                all(abs(x[1] - y[1]) <= 1e-9 * abs(y[1]) and x[0] == y[0] for x, y in zip(b, bests[0]))
                for b in bests)
            for kind in ("cold", "warm"):
                s, g = row[f"slices_{kind}"], row[f"gather_{kind}"]
                row[f"{kind}_total_slices_over_gather"] = round(s["total_s"] / g["total_s"], 3)
            row["rest_slices_over_gather"] = round(row["slices_warm"]["rest_mean_s"]
                                                   / row["gather_warm"]["rest_mean_s"], 3)
            rows.append(row)
    doc = {"what": "CPU seconds per grid point of the overlap integrals' two forms when one "
                   "process scores several points of one structure family "
                   "(experiments/bench_integrals_reuse.py)",
           "points_per_family": a.points, "rows": rows, **run_stamp(ROOT)}
    print(f"\n{'family':12s} {'triples':>7s} {'first s/g warm':>15s} {'rest s/g':>12s} "
          f"{'total ratio cold':>16s} {'warm':>6s} same")
    for r in rows:
        sw, gw = r["slices_warm"], r["gather_warm"]
        print(f"{r['family']:12s} {r['max_triples']:7d} {sw['first_s']:7.2f}/{gw['first_s']:<7.2f}"
              f" {sw['rest_mean_s']:5.2f}/{gw['rest_mean_s']:<6.2f}"
              f" {r['cold_total_slices_over_gather']:16.3f} {r['warm_total_slices_over_gather']:6.3f}"
              f" {r['same_records']}")
    return finish_digest(a.out, doc, "bench_integrals_reuse.py")


if __name__ == "__main__":
    sys.exit(main())
