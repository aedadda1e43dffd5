"""Where the GPU time of the vectorised contention scorer goes: kernel times of one compiled call.

Workload: the ``bench_vcontention.py`` structure (GPT-OSS 120B, reference deployment, B200, m =
8, D = 5, evenly spaced chain cut, random allocations of P_H^(D)), one chunk of ``--chunk``
allocations through ``VContentionEvaluator`` (``VCOptions(scan="batched")``) with the options given. The call
is timed (median of ``--repeats`` calls, after a compiling one) and profiled once with
``torch.profiler`` (CUPTI records every kernel of the process, XLA's included); the kernels are
grouped by name (XLA's fusion names) and written with their launch counts and summed µs, beside
the optimised HLO text of the compiled program (``Compiled.as_text()``) to map the fusion names
to their operations.

Usage (the GPU machine; torch and JAX with a GPU):
    XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=. python experiments/profile_vcontention_gpu.py \
        --out $OUT [--chunk 131072] [--block 128] [--level-unroll 2] [--repeats 5] \
        [--integrals slices|gather]
Writes OUT/profile_vcontention_gpu.json (call times, kernels by total µs) and
OUT/vcb_hlo.txt; prints the 25 kernels with the most time. Checked in this order before any GPU
work, each failure one line ``error: ...`` and exit code 2: the counts (>= 1), --out (a folder
or one that can be created: not empty, not an existing file), torch importable, JAX on a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from subgpu_jax.score.vcbatch import INTEGRALS  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for the JSON and the HLO text")
    ap.add_argument("--chunk", type=int, default=131072, help="allocations per call (>= 1)")
    ap.add_argument("--block", type=int, default=128, help="allocations per block (>= 1)")
    ap.add_argument("--level-unroll", type=int, default=2, help="levels per loop trip (>= 1)")
    ap.add_argument("--repeats", type=int, default=5, help="timed calls (>= 1)")
    ap.add_argument("--integrals", choices=INTEGRALS, default=None,
                    help="form of the overlap integrals (vcbatch.INTEGRALS; default: the "
                         "evaluator's, gather on a GPU)")
    a = ap.parse_args(argv)

    from subgpu_jax.app.options import usage_error as fail
    from subgpu_jax.model.checks import out_dir

    for name in ("chunk", "block", "level_unroll", "repeats"):
        if getattr(a, name) < 1:
            return fail(f"--{name.replace('_', '-')} must be >= 1, got {getattr(a, name)}")
    try:
        out_dir(a.out, "--out")
    except ValueError as e:
        return fail(str(e))
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile
    except ImportError as e:
        return fail(f"needs torch (its profiler records the kernels): {e}")
    import jax
    import jax.numpy as jnp
    import numpy as np

    if jax.default_backend() != "gpu":
        return fail(f"needs JAX on a GPU, got backend {jax.default_backend()!r}")
    from subgpu_jax import REFERENCE_DEPLOYMENT, build_graph, get_hardware, get_model
    from subgpu_jax.score import vcontention as vc
    from subgpu_jax.space.config import chain_cut, enumerate_allocations

    hw = get_hardware("B200")
    m, D = 8, 5
    g = build_graph(get_model("gpt-oss-120b"), REFERENCE_DEPLOYMENT, m)
    seg = chain_cut(g.n, [round(g.n * k / D) for k in range(1, D)])
    from subgpu_jax.score.vcoptions import VCOptions
    ev = vc.VContentionEvaluator(g, seg, D, 0, hw, options=VCOptions(
        chunk=a.chunk, block=a.block, level_unroll=a.level_unroll, integrals=a.integrals))
    pool = enumerate_allocations(hw.sm_budget, D, hw.sm_quantum, hw.min_pool_sms)
    A = pool[np.random.default_rng(1).integers(0, len(pool), a.chunk)].astype(np.int32)
    t0 = time.perf_counter()
    ev.makespan(A)
    compile_s = time.perf_counter() - t0
    times = []
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        ev.makespan(A)
        times.append(time.perf_counter() - t0)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        ev.makespan(A)
        torch.cuda.synchronize()
    kern: dict[str, list] = {}
    for e in prof.events():
        if e.device_type.name != "CUDA":
            continue
        k = kern.setdefault(e.name, [0, 0.0])
        k[0] += 1
        k[1] += e.time_range.elapsed_us()
    rows = sorted(({"kernel": n, "launches": c, "total_us": t} for n, (c, t) in kern.items()),
                  key=lambda r: -r["total_us"])
    total = sum(r["total_us"] for r in rows)
    static = ev.batched_static
    hlo = vc.vcb_batch.lower(ev.tabs, ev.cells, ev.plan, jnp.asarray(A), *static).compile()
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "vcb_hlo.txt"), "w") as fh:
        fh.write(hlo.as_text())
    med = statistics.median(times)
    out = {"device": jax.devices()[0].device_kind, "jax": jax.__version__,
           "torch": torch.__version__, "microbatches": m, "D": D, "tasks": ev.dag.T,
           "chunk": a.chunk, "block": a.block, "level_unroll": a.level_unroll,
           "integrals": ev.integrals, "compile_s": compile_s, "call_s": times, "call_s_median": med,
           "allocs_per_s": a.chunk / med, "kernel_us_total": total,
           "kernel_launches": sum(r["launches"] for r in rows), "kernels": rows}
    with open(os.path.join(a.out, "profile_vcontention_gpu.json"), "w") as fh:
        json.dump(out, fh, indent=1)
    print(f"chunk {a.chunk}, block {a.block}, unroll {a.level_unroll}, {ev.integrals}: "
          f"{a.chunk / med:,.0f} "
          f"allocs/s (median call {1e3 * med:.1f} ms); kernels {total / 1e3:.1f} ms in "
          f"{out['kernel_launches']} launches")
    for r in rows[:25]:
        print(f"{r['total_us']:10.0f} us {r['launches']:6d}  {r['kernel'][:90]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
