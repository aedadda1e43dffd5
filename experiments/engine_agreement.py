"""Does a search with the event simulator's compiled engine choose what the Python simulator
chooses? (issue 42: the frontier study at machine speed, every point's makespan within 0.5% of
the event-simulator polish and the same frontier points.)

Grid points of the GPT-OSS 120B B200 frontier study (``frontier_study.py``'s wide grid): one
drawn (``--seed``) from every (D, m) family with m <= ``--max-m``, plus ``--keys`` named
explicitly (by default the two points where the engine's first version, which compiled the
lockstep loop's rules, chose otherwise: 0.03% and 0.59% apart). Each is searched twice in this
process with the default exact scorer ``EventTimer`` (uncalibrated B200, ``lru``), once with
``engine="python"`` (the Python simulator for every configuration, as before the engine) and
once with ``engine="compiled"`` (the default), and the SubGPU records compared: the chosen
configuration (cuts, SMs, stages, reuse, microbatches) and the record's makespan (which both
take from the Python simulator's re-simulation of the chosen configuration).

Usage: python experiments/engine_agreement.py [--max-m 8] [--seed 3] [--keys KEY ...]
       [--out JSON] (default experiments/results/engine_agreement_cpu.json). Units: µs, seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from digest_cli import check_seed_and_out, run_digest, write_digest  # noqa: E402

#: the points where the lockstep-rule engine chose otherwise (docs/method.md, "The compiled engine")
FIRST_VERSION_MISSES = ("n32-tp1-dp32-ep4-G2048-D5-m8-wavefront",
                        "n32-tp2-dp16-ep1-G2048-D6-m8-wavefront")
CHOICE = ("cuts", "sms", "D", "w", "microbatches", "policy")


def search_once(arch, hw, pt, engine: str) -> tuple[dict, float]:
    """The SubGPU record of grid point ``pt`` searched with the event timer's ``engine``, and
    the process CPU seconds it took."""
    from subgpu_jax.app.searchjob import SearchOptions
    from subgpu_jax.app.searchrun import run_search
    from subgpu_jax.model.setup import GpuSetup
    from subgpu_jax.score.timer import EventTimer

    ev = EventTimer.of(GpuSetup.uncalibrated(hw))
    timer = EventTimer(ev.hw, ev.model, ev.cache, engine=engine)
    with tempfile.TemporaryDirectory() as tmp:
        c0 = time.process_time()
        run_search(arch, hw, [pt], tmp, {"bench": "engine_agreement"},
                   SearchOptions(timer=timer, progress=False, overwrite=True, workers=1))
        cpu = time.process_time() - c0
        with open(os.path.join(tmp, "records.jsonl")) as fh:
            recs = [json.loads(line) for line in fh]
    return next(r for r in recs if r.get("mode") == "subgpu"), cpu


def measure(a) -> dict:
    from frontier_cost import families

    arch, hw, fam = families("gptoss120b_b200")
    pts = {p.key: p for ps in fam.values() for p in ps}
    rng = random.Random(a.seed)
    keys = list(a.keys) + [rng.choice(ps).key for (D, m), ps in sorted(fam.items())
                           if m <= a.max_m]
    keys = [k for k in dict.fromkeys(keys)]
    rows = []
    for k in keys:
        py, cpu_py = search_once(arch, hw, pts[k], "python")
        cp, cpu_cp = search_once(arch, hw, pts[k], "compiled")
        same = all(str(py[f]) == str(cp[f]) for f in CHOICE)
        row = {"grid_key": k, "same_choice": same,
               "python_makespan_us": py["makespan_us"], "compiled_makespan_us": cp["makespan_us"],
               "rel_diff": cp["makespan_us"] / py["makespan_us"] - 1,
               "python_cpu_s": round(cpu_py, 2), "compiled_cpu_s": round(cpu_cp, 2)}
        if not same:
            row["choices"] = {"python": [py["cuts"], py["sms"]],
                              "compiled": [cp["cuts"], cp["sms"]]}
        rows.append(row)
        print(f"{k}: same {same}, makespans {row['rel_diff']:+.1e} apart, CPU "
              f"{cpu_py:.1f} -> {cpu_cp:.1f} s", flush=True)
    diffs = [abs(r["rel_diff"]) for r in rows]
    return {"what": __doc__.split("\n\n")[0], "seed": a.seed, "max_m": a.max_m, "rows": rows,
            "points": len(rows), "same_choice": sum(r["same_choice"] for r in rows),
            "max_abs_rel_diff": max(diffs) if diffs else None,
            "cpu_s": {"python": round(sum(r["python_cpu_s"] for r in rows), 1),
                      "compiled": round(sum(r["compiled_cpu_s"] for r in rows), 1)},
            "env": {"cpu_count": os.cpu_count(), "machine": platform.machine(),
                    "python": platform.python_version()},
            "date": time.strftime("%Y-%m-%d")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-m", type=int, default=8, choices=(1, 2, 4, 8, 16),
                    help="largest microbatch count sampled (default 8)")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--keys", nargs="*", default=list(FIRST_VERSION_MISSES),
                    help="grid keys searched besides the sample (default: the first version's "
                         "two misses)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "engine_agreement_cpu.json"))
    a = ap.parse_args(argv)
    check_seed_and_out(ap, a)
    from frontier_cost import families

    known = {p.key for ps in families("gptoss120b_b200")[2].values() for p in ps}
    bad = [k for k in a.keys if k not in known]
    if bad:
        ap.error(f"--keys: {bad[0]!r} is not a grid point of the GPT-OSS 120B B200 study")

    def work():
        d = measure(a)
        write_digest(a.out, d)
        print(f"{d['same_choice']} of {d['points']} points chose the same configuration; "
              f"makespans at most {d['max_abs_rel_diff']:.1e} apart; wrote {a.out}")
        return d

    rc, _ = run_digest(work, a.out)
    return rc


if __name__ == "__main__":
    sys.exit(main())
