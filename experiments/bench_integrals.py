"""The overlap integrals' two forms in real searches on the CPU: the vectorised contention
scorer's slices form (one traced slice per lane-plan triple) against its gather form, and the
default that picks by the plan's size (``score.vcontention.GATHER_MIN_TRIPLES``), in one run.

Each row is one ``subgpu search`` in a fresh process with ``--workers 1`` on the built-in
GPT-OSS 120B / 32 B200 deployment (TP8 x DP4, EP32, G = 2,048, 32k-token histories: the
frontier study's reference, ``experiments/frontier_study.py``) at one (D, m) grid point, plus
the README's main job (its 15 grid points). Variants, each with a JAX compile-cache folder of
its own, run cold (an empty folder: a first run) then warm (the same folder again):

* ``slices``: every plan in the slices form (``GATHER_MIN_TRIPLES`` set above any plan);
* ``gather``: every plan in the gather form (``GATHER_MIN_TRIPLES`` = -1);
* ``auto``: the default rule.

The compiled event-simulator engine is compiled once before (its own cache folder), so only
the integrals differ. The records of the three variants must be equal field for field but
timings (the chosen configurations and the event simulator's makespans): the scorer only
ranks, the records come from the event simulator.

Usage: python experiments/bench_integrals.py [--out JSON] [--points D:M ...] [--no-main]
Writes ``experiments/results/bench_integrals_cpu.json`` by default and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from bench_sweeps import timed_search  # noqa: E402  (one timed search process)
from digest_cli import check_out, finish_digest, run_stamp  # noqa: E402  (check --out, atomic JSON)

VARIANTS = {"slices": 10**9, "gather": -1, "auto": None}
POINT = ["--model", "gpt-oss-120b", "--hardware", "B200", "--gpus", "32", "--tp", "8",
         "--dp", "4", "--ep", "32", "--batches", "2048", "--kv-history", "32768"]
DEFAULT_POINTS = ["2:4", "2:16", "4:4", "4:8", "4:16", "6:4", "6:8", "6:16"]
#: The child: sets the threshold (None: the default) and runs the CLI; prints the plans' triple
#: counts it met, for the table.
CHILD = r"""
import sys
import subgpu_jax.score.vcontention as vc
t = sys.argv[1]
if t != "None":
    vc.GATHER_MIN_TRIPLES = int(t)
seen = []
init = vc.VContentionEvaluator.__init__
def spy(self, *a, **k):
    init(self, *a, **k)
    if getattr(self, "plan", None) is not None:
        seen.append((len(self.plan.triples), getattr(self, "integrals", None)))
vc.VContentionEvaluator.__init__ = spy
from subgpu_jax.app.cli import main
rc = main(sys.argv[2:])
tr = [n for n, _ in seen]
print("PLANS", max(tr) if tr else 0, sum(f == "gather" for _, f in seen), len(seen))
sys.exit(rc)
"""
TIMING_FIELDS = {"seconds", "point_seconds", "wall_s", "cpu_s"}


def default_threshold() -> int:
    """The library's ``GATHER_MIN_TRIPLES`` (read in a child: this script imports no JAX)."""
    p = subprocess.run([sys.executable, "-c", "from subgpu_jax.score.vcontention import "
                        "GATHER_MIN_TRIPLES as t; print(t)"], capture_output=True, text=True,
                       cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT), check=True)
    return int(p.stdout.split()[-1])


#: The frontier study's grid (``experiments/frontier_study.py``): the points a row may take.
#: m = 1 has no overlapping tasks (no lane-plan triples): both forms would run the same program.
STAGES, MICROBATCHES = range(2, 7), (2, 4, 8, 16)


def point_arg(s: str) -> tuple[int, int]:
    """``D:M`` -> (D, m): D stages in 2..6 and m microbatches in 2, 4, 8, 16 (the frontier
    study's pipelined grid on the reference deployment)."""
    m = re.fullmatch(r"(\d+):(\d+)", s)
    if not m or int(m.group(1)) not in STAGES or int(m.group(2)) not in MICROBATCHES:
        raise argparse.ArgumentTypeError(
            f"a point is D:M with D stages in 2..6 and M microbatches in 2, 4, 8 or 16 "
            f"(the frontier study's pipelined grid), got {s!r}")
    return int(m.group(1)), int(m.group(2))


def records(folder: str) -> list[str]:
    """The folder's records, timings left out, as sorted JSON strings."""
    with open(os.path.join(folder, "records.jsonl")) as fh:
        rs = [json.loads(x) for x in fh]
    return sorted(json.dumps({k: v for k, v in r.items() if k not in TIMING_FIELDS},
                             sort_keys=True) for r in rs)


def run(variant: str, args: list[str], cache: str, numba: str, out: str) -> dict:
    """One search in a fresh process; its search seconds (the ``evaluated ... (S s)`` line),
    wall and CPU seconds, and the plans it built (most triples, how many took the gather form,
    how many in all)."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               JAX_PLATFORMS="cpu", SUBGPU_JAX_CACHE=cache, NUMBA_CACHE_DIR=numba)
    cmd = [sys.executable, "-c", CHILD, str(VARIANTS[variant]), "search", "--out", out,
           "--no-progress", "--workers", "1", *args]
    stdout, timed = timed_search(f"{variant} {' '.join(args)}", cmd, env, ROOT)
    plans = re.search(r"^PLANS (\d+) (\d+) (\d+)$", stdout, re.M)
    return {**{k: v for k, v in timed.items() if k != "variant"},
            "max_triples": int(plans.group(1)), "gather_plans": int(plans.group(2)),
            "plans": int(plans.group(3))}


def measure(jobs: list[tuple[str, list[str]]], tmp: str) -> list[dict]:
    """Every job under every variant, cold then warm, its files under ``tmp``: the rows of the
    digest (module docstring)."""
    numba = os.path.join(tmp, "numba")
    subprocess.run([sys.executable, "-c", "from subgpu_jax.sim.batchednb import available, "
                    "compile_now\nif available(): compile_now()"], check=True, cwd=ROOT,
                   env=dict(os.environ, NUMBA_CACHE_DIR=numba, PYTHONPATH=ROOT))
    rows = []
    for name, args in jobs:
        recs = {}
        row = {"job": name, "args": args}
        for v in VARIANTS:
            cache = os.path.join(tmp, f"jax_{len(rows)}_{v}")
            for run_kind in ("cold", "warm"):
                out = os.path.join(tmp, f"out_{len(rows)}_{v}_{run_kind}")
                r = run(v, args, cache, numba, out)
                row[f"{v}_{run_kind}"] = r
                recs[(v, run_kind)] = records(out)
                print(f"{name:10s} {v:7s} {run_kind}: search {r['search_s']} s, "
                      f"{r['gather_plans']} of {r['plans']} plans gathered, "
                      f"most triples {r['max_triples']}", flush=True)
        first = next(iter(recs.values()))
        row["records_identical"] = all(x == first for x in recs.values())
        for k in ("cold", "warm"):
            sl, ga = row[f"slices_{k}"]["search_s"], row[f"gather_{k}"]["search_s"]
            au = row[f"auto_{k}"]["search_s"]
            row[f"{k}_slices_over_gather"] = round(sl / ga, 2) if sl and ga else None
            row[f"{k}_slices_over_auto"] = round(sl / au, 2) if sl and au else None
        rows.append(row)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "experiments", "results",
                                                  "bench_integrals_cpu.json"))
    ap.add_argument("--points", nargs="+", type=point_arg,
                    default=[point_arg(p) for p in DEFAULT_POINTS],
                    help="grid points D:M of the frontier study's reference deployment "
                         f"(default {' '.join(DEFAULT_POINTS)})")
    ap.add_argument("--no-main", action="store_true", help="leave out the README's main job")
    a = ap.parse_args(argv)
    try:
        check_out(a.out)
    except ValueError as e:
        ap.error(str(e))
    if len(set(a.points)) != len(a.points):
        ap.error("--points: each point at most once")
    jobs = [(f"D={d} m={m}", POINT + ["--stages", str(d), "--microbatches", str(m)])
            for d, m in a.points]
    if not a.no_main:
        jobs.append(("main job", []))
    with tempfile.TemporaryDirectory(prefix="bench_integrals_") as tmp:  # removed after
        rows = measure(jobs, tmp)
    doc = {"what": "search seconds of the vectorised contention scorer's two integral forms "
                   "and the default rule, one run (experiments/bench_integrals.py)",
           "gather_min_triples": default_threshold(),
           "rows": rows, **run_stamp(ROOT)}
    print(f"\n{'job':10s} {'triples':>7s} {'slices cold':>11s} {'gather':>7s} {'auto':>7s} "
          f"{'slices warm':>11s} {'gather':>7s} {'auto':>7s} same records")
    for r in rows:
        g = r["auto_cold"]
        print(f"{r['job']:10s} {g['max_triples']:7d} "
              + " ".join(f"{r[f'{v}_{k}']['search_s']!s:>{11 if v == 'slices' else 7}s}"
                         for k in ("cold", "warm") for v in VARIANTS)
              + f" {r['records_identical']}")
    return finish_digest(a.out, doc, "bench_integrals.py")


if __name__ == "__main__":
    sys.exit(main())
