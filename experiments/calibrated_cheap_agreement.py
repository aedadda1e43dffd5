"""Agreement of the cheap estimator with the event simulator under a measured calibration.

``subgpu search --calibration`` ranks cuts and allocations with the contention-aware cheap
estimator (``score.vcontention.VContentionEvaluator``) and polishes with the calibrated event
simulator. This measures how well the two agree on the H200 workloads whose calibrations are
committed (Llama-3.1-70B TP8 at G = 1,024 and 2,048 with the fused kernels; GPT-OSS 120B on
the reference deployment at G = 2,048 with tuned GEMMs): for each, random configurations (D =
2 or 3, w = 0 or 1, a uniformly random legal chain cut, m in {1, 2, 4} where it divides the
per-GPU batch, 1 or 2 streams per stage, a uniformly random allocation of multiples of 8 SMs
with every pool inside the calibration's measured pools, >= 16 SMs) scored by both
(``ContentionModel(calibration=...)``, L2 cache policy ``none`` as the calibrated search uses),
reported also by streams per stage (the cheap estimator does not model two streams of one
stage sharing its SMs: ``VContentionEvaluator``'s docstring), plus a within-structure test (12 allocations of each of 6 fixed structures: Spearman rank
correlation, what the allocation search needs).

Usage: python experiments/calibrated_cheap_agreement.py [--n 60] [--seed 0] [--label NAME]
    [--out PATH]
Adds the run under ``--label`` (default "current") to
experiments/results/calibrated_cheap_agreement.json (other labels in the file are kept, so a
run of an earlier revision of the package can sit beside the current one) and prints a table.
About 2-4 minutes on a 2-core CPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

#: name -> (calibration file under experiments/results/, model preset)
WORKLOADS = {
    "llama70b_tp8_g2048_fused": ("hw_wins/fused/calibration_llama70b_tp8_g2048.json",
                                 "llama-3.1-70b"),
    "llama70b_tp8_g1024_fused": ("hw_wins/fused/calibration_llama70b_tp8_g1024.json",
                                 "llama-3.1-70b"),
    "gptoss120b_ref_g2048_tuned": ("hw_wins/tuned/calibration_gptoss120b_ref_g2048.json",
                                   "gpt-oss-120b"),
}


def _workload(name: str):
    """(graph builder m -> OpGraph, the ``GpuSetup`` of ``Calibration.bind``, ContentionModel,
    per-GPU batch R, calibrated pool range (lo, hi) SMs) of a ``WORKLOADS`` entry."""
    import numpy as np

    from subgpu_jax import get_hardware, get_model
    from subgpu_jax.model.calibration import load_calibration
    from subgpu_jax.model.deployment import Deployment
    from subgpu_jax.model.workload import Workload
    from subgpu_jax.sim.contention import ContentionModel

    path, model = WORKLOADS[name]
    cal = load_calibration(str(HERE / "results" / path))
    # measured before the MoE all-gather of attention TP was priced (docs/accounting.md item 3)
    dep = Deployment(**cal.deployment, global_batch=int(cal.global_batches[-1]),
                     moe_tp_gather=False)
    arch = get_model(model)
    if arch.is_moe:   # the experts' datatype the calibration was measured with (bf16 on Hopper)
        arch = dataclasses.replace(arch, expert_dtype=cal.expert_dtype)
    setup = cal.bind(get_hardware("H200"))
    wl = Workload.from_model(arch, dep)
    pools = np.concatenate([np.asarray(t[0], float) for t in cal.tables.values()])
    return wl.graph, setup, ContentionModel(calibration=setup.calibration), \
        dep.requests_per_gpu, (max(16, int(pools.min())), int(pools.max()))


def run(n: int, seed: int) -> dict:
    """Score ``n`` random configurations per workload and the within-structure test; returns
    the JSON entry of one run (per workload: errors, Spearman, timing)."""
    import numpy as np
    from scipy.stats import spearmanr

    from subgpu_jax.sim.eventsim import simulate
    from subgpu_jax.score.vcontention import VContentionEvaluator
    from subgpu_jax.space.config import Config, chain_cut, enumerate_allocations

    rng = np.random.default_rng(seed)
    out = {}
    for name in WORKLOADS:
        graph_of, setup, model, R, (lo, hi) = _workload(name)
        hw, cache = setup.hw, setup.cache  # the calibrated GPU and L2 policy ("none")
        graphs, rows = {}, []

        def draw():
            D = int(rng.choice([2, 3]))
            w = int(rng.integers(0, 2))
            m = int(rng.choice([x for x in (1, 2, 4) if R % x == 0]))
            k = int(rng.integers(1, 3))
            g = graphs.setdefault(m, graph_of(m))
            K = D + w
            starts = sorted(rng.choice(np.arange(1, g.n), size=K - 1, replace=False).tolist())
            pool = enumerate_allocations(hw.sm_budget, D, 8, 16)
            pool = pool[(pool >= lo).all(1) & (pool <= hi).all(1)]
            return g, D, w, m, k, chain_cut(g.n, starts), pool

        def both(g, D, w, m, k, seg, allocs):
            cfg0 = Config(D=D, w=w, seg_of=tuple(seg), alloc=tuple(int(a) for a in allocs[0]),
                          microbatch=R // m, streams_per_stage=k)
            ev = VContentionEvaluator.for_config(g, cfg0, hw, model=model, cache=cache)
            vc = ev.makespan(np.asarray(allocs))
            es = [float(simulate(g, Config(D=D, w=w, seg_of=tuple(seg),
                                           alloc=tuple(int(x) for x in a), microbatch=R // m,
                                           streams_per_stage=k), hw, model, cache).makespan)
                  for a in allocs]
            return np.asarray(vc, float), np.asarray(es)

        t0 = time.process_time()
        for _ in range(n):
            g, D, w, m, k, seg, pool = draw()
            a = pool[rng.integers(0, len(pool))][None]
            vc, es = both(g, D, w, m, k, seg, a)
            rows.append((float(vc[0]), float(es[0]), k))
        vc, es, ks = np.asarray(rows).T
        err = vc / es - 1.0
        by_k = {str(int(x)): {"configurations": int((ks == x).sum()),
                              "median_abs_rel_error": float(np.median(np.abs(err[ks == x]))),
                              "p90_abs_rel_error": float(np.quantile(np.abs(err[ks == x]), 0.9))}
                for x in (1, 2) if (ks == x).any()}
        within = []
        for _ in range(6):
            g, D, w, m, k, seg, pool = draw()
            a = pool[rng.choice(len(pool), size=min(12, len(pool)), replace=False)]
            v, e = both(g, D, w, m, k, seg, a)
            within.append(float(spearmanr(v, e)[0]) if len(a) > 2 else float("nan"))
        out[name] = {"configurations": n, "median_abs_rel_error": float(np.median(np.abs(err))),
                     "p90_abs_rel_error": float(np.quantile(np.abs(err), 0.9)),
                     "mean_rel_error": float(err.mean()), "by_streams_per_stage": by_k,
                     "spearman_all": float(spearmanr(vc, es)[0]),
                     "within_structure_spearman": within,
                     "within_structure_spearman_median": float(np.nanmedian(within)),
                     "pools_sms": [lo, hi], "cpu_seconds": time.process_time() - t0}
        print(f"{name}: median |err| {out[name]['median_abs_rel_error']:.1%}, p90 "
              f"{out[name]['p90_abs_rel_error']:.1%}, mean {out[name]['mean_rel_error']:+.1%}, "
              f"Spearman {out[name]['spearman_all']:.3f}, within-structure median "
              f"{out[name]['within_structure_spearman_median']:.3f}; by streams/stage "
              + ", ".join(f"k={x}: {v['median_abs_rel_error']:.1%} (p90 {v['p90_abs_rel_error']:.1%})"
                          for x, v in by_k.items()), flush=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=60, help="random configurations per workload (>= 10)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--label", default="current", help="name of this run in the JSON")
    ap.add_argument("--out", default=str(HERE / "results" / "calibrated_cheap_agreement.json"))
    a = ap.parse_args(argv)
    if a.n < 10:
        ap.error(f"--n must be >= 10 configurations, got {a.n}")
    if not a.label.strip():
        ap.error("--label must not be empty")
    out = Path(a.out)
    if out.is_dir() or not out.parent.is_dir():
        ap.error(f"--out: {a.out!r} must be a file path in an existing folder")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    warnings.simplefilter("ignore")   # extrapolation warnings: pools are kept in range
    res = run(a.n, a.seed)
    try:
        rev = subprocess.run(["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        rev = None
    allr = json.loads(out.read_text()) if out.exists() else {}
    allr[a.label] = {"git": rev, "seed": a.seed, "workloads": res}
    out.write_text(json.dumps(allr, indent=1))
    print(f"wrote {out} ({a.label})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
