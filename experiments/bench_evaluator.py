"""Benchmark: SM-allocation evaluations per second, per workload and backend.

Rows (one backend per run: the default JAX backend, CPU or GPU):

* ``chain20``: the 20-operator GPT-OSS-like chain of ``exhaustive_gridpoint.py`` (B200, L = 18,
  m = 2), D = 5, an evenly spaced cut, w = 0.
* ``gptoss-m{2,4,8}``: the GPT-OSS 120B forward pass (36 layers = 18 two-layer regions, reference
  deployment, B200), D = 5, evenly spaced cut, w = 0 (720 tasks at m = 8).

Columns: ``massive_evals_per_s`` (``massive.MassiveEvaluator``: allocations unranked on the device,
the DAG unrolled as compile-time constants, top-k streamed; the best of the tried ``barrier_every``
values), ``scan_evals_per_s`` (the package's ``evaluator.Evaluator.makespan``, host-copied
allocations), ``numpy_evals_per_s`` (``massive.numpy_makespans``: NumPy vectorised over the batch,
same recurrence), ``nx_evals_per_s`` (per-allocation networkx longest path on the explicit DAG),
their ratios, ``max_abs_diff_us`` (massive vs numpy vs networkx on the same allocations), peak
memory (``ru_maxrss`` on CPU; device ``peak_bytes_in_use`` on GPU) and, with ``--vcontention``,
``vc_evals_per_s`` of ``vcontention.VContentionEvaluator`` (calibrated contention model) at m = 8.

Usage: python experiments/bench_evaluator.py [--calls N] [--max-block N] [--barriers 0,8]
    [--memory-budget BYTES] [--vcontention] [--out PATH]
CPU defaults finish in < 2 min on a 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import jax  # noqa: E402
import networkx as nx  # noqa: E402
import numpy as np  # noqa: E402

from subgpu_jax import REFERENCE_DEPLOYMENT, build_graph, get_hardware, get_model  # noqa: E402
from subgpu_jax.score.evaluator import Evaluator  # noqa: E402
from subgpu_jax.score.massive import MassiveEvaluator, numpy_makespans  # noqa: E402
from subgpu_jax.score.maxplus import (DEFAULT_MAXPLUS_KERNEL, MAXPLUS_KERNELS,  # noqa: E402
                                      maxplus_kernel)
from subgpu_jax.space.config import cut_from_starts, enumerate_allocations  # noqa: E402


def nx_makespan(ev: Evaluator, alloc) -> float:
    """Longest path on the explicit augmented DAG with node weights tau (networkx baseline)."""
    tau = ev.task_durations(alloc)
    g = ev.dag.to_networkx()
    sink = -1
    g.add_node(sink)
    for i in range(ev.dag.T):
        g.add_edge(i, sink)
    for u, v in g.edges:
        g[u][v]["w"] = tau[u]
    return nx.dag_longest_path_length(g, weight="w")


def peak_memory() -> dict:
    """Peak host RSS (MiB) and, on an accelerator, the device's peak bytes in use (MiB)."""
    out = {"max_rss_MiB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    if jax.default_backend() != "cpu":
        try:
            st = jax.devices()[0].memory_stats() or {}
            out["device_peak_MiB"] = st.get("peak_bytes_in_use", 0) / 2**20
        except Exception as e:  # noqa: BLE001 - report, don't fail the benchmark
            out["device_peak_MiB"] = f"unavailable: {e}"
    return out


def workloads():
    from experiments.exhaustive_gridpoint import make_instance  # noqa: WPS433
    hw = get_hardware("B200")
    chain, model, _ = make_instance(hw, 2, 18)
    yield "chain20", chain, model.table(chain), hw
    arch = get_model("gpt-oss-120b")
    for m in (2, 4, 8):
        g = build_graph(arch, REFERENCE_DEPLOYMENT, m)
        yield f"gptoss-m{m}", g, None, hw


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=None,
                    help="timed block calls per row (default 4 on CPU, 40 on GPU)")
    ap.add_argument("--max-block", type=int, default=None,
                    help="candidates per call (default 16384 on CPU, 2**21 on GPU)")
    ap.add_argument("--barriers", default="0", help="barrier_every values to try, e.g. 0,8")
    ap.add_argument("--memory-budget", type=int, default=None, help="device bytes per call")
    ap.add_argument("--D", type=int, default=5)
    ap.add_argument("--np-allocs", type=int, default=2048)
    ap.add_argument("--nx-allocs", type=int, default=3)
    ap.add_argument("--scan-allocs", type=int, default=8192)
    ap.add_argument("--vcontention", action="store_true")
    ap.add_argument("--kernel", default=DEFAULT_MAXPLUS_KERNEL, choices=tuple(MAXPLUS_KERNELS),
                    help="the max-plus kernel of the massive rows (score.maxplus)")
    ap.add_argument("--block", type=int, default=None,
                    help="with --kernel pallas: candidates per program (a power of two)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    try:
        kernel = maxplus_kernel(a.kernel, **({"block": a.block} if a.block else {}))
    except (ValueError, TypeError) as e:
        ap.error(f"--kernel {a.kernel}: {e}")
    cpu = jax.default_backend() == "cpu"
    calls = a.calls or (4 if cpu else 40)
    max_block = a.max_block or (16384 if cpu else 2**21)
    barriers = [int(x) for x in a.barriers.split(",")]
    out_path = a.out or os.path.join(HERE, "results",
                                     f"bench_evaluator_{jax.default_backend()}.json")
    rng = np.random.default_rng(0)
    D = a.D
    rows = []
    print(f"backend={jax.default_backend()} devices={jax.devices()}", flush=True)
    hdr = (f"{'workload':>12s}{'tasks':>6s}{'massive/s':>13s}{'scan/s':>11s}{'numpy/s':>11s}"
           f"{'nx/s':>8s}{'x numpy':>9s}{'x nx':>10s}{'diff µs':>9s}{'peak MiB':>10s}")
    for name, g, table, hw in workloads():
        starts = [round(g.n * k / D) for k in range(1, D)]
        seg = cut_from_starts(g.n, g.edges, starts)
        ev = Evaluator(g, seg, D, 0, hw, table=table)
        pool = enumerate_allocations(hw.sm_budget, D, hw.sm_quantum, hw.min_pool_sms,
                                     limit=2_000_000)
        best = None
        tried = {}
        for be in barriers:
            me = MassiveEvaluator(ev.dag, ev.kernel_table, D, 0, hw.sm_budget, hw.sm_quantum,
                                  hw.min_pool_sms, mode="fixed", seg_of=seg, topk=8,
                                  max_block=max_block, memory_budget=a.memory_budget,
                                  barrier_every=be, kernel=kernel)
            t0 = time.perf_counter()
            me.run(limit=1)
            t_comp = time.perf_counter() - t0
            r = me.run(limit=calls)
            tried[be] = {"evals_per_s": r.evals_per_s, "compile_s": t_comp,
                         "block": me.plan.size}
            print(f"  {name} barrier_every={be}: {r.evals_per_s:,.0f}/s (compile {t_comp:.1f} s,"
                  f" block {me.plan.size})", flush=True)
            if best is None or r.evals_per_s > best[1].evals_per_s:
                best = (me, r, be)
        me, r, be = best
        # NumPy baseline (vectorised over the batch), same allocations as the checks
        A = pool[rng.integers(0, len(pool), a.np_allocs)]
        t0 = time.perf_counter()
        ref_np = numpy_makespans(ev.dag, me.seg_tab_np, me.stage, A)
        np_rate = len(A) / (time.perf_counter() - t0)
        got = me.score(A)
        # package scan evaluator (host-copied allocations)
        S = pool[rng.integers(0, len(pool), a.scan_allocs)]
        ev.makespan(S[: ev.chunk])
        t0 = time.perf_counter()
        ev.makespan(S)
        scan_rate = len(S) / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        ref_nx = [nx_makespan(ev, A[i]) for i in range(a.nx_allocs)]
        nx_rate = a.nx_allocs / (time.perf_counter() - t0)
        diff_np = float(np.max(np.abs(got - ref_np)))
        diff = float(max(diff_np, np.max(np.abs(np.asarray(ref_nx) - got[: a.nx_allocs]))))
        row = {"workload": name, "model": "gpt-oss-120b", "hardware": hw.name,
               "microbatches": g.microbatches, "num_regions": g.num_regions, "D": D, "w": 0,
               "tasks": ev.dag.T, "backend": jax.default_backend(), "kernel": kernel.name,
               "massive_evals_per_s": r.evals_per_s, "massive_evaluated": r.evaluated,
               "barrier_every": be, "block": me.plan.size, "tried": tried,
               "scan_evals_per_s": scan_rate, "numpy_evals_per_s": np_rate,
               "nx_evals_per_s": nx_rate, "ratio_vs_numpy": r.evals_per_s / np_rate,
               "ratio_vs_networkx": r.evals_per_s / nx_rate,
               "ratio_vs_scan": r.evals_per_s / scan_rate, "max_abs_diff_us": diff,
               "max_abs_diff_vs_numpy_us": diff_np,
               **peak_memory()}
        rows.append(row)
    if a.vcontention:
        rows_vc = bench_vcontention(a, D)
    else:
        rows_vc = {"status": "not run (pass --vcontention)"}
    print(hdr)
    for row in rows:
        pk = row.get("device_peak_MiB", row["max_rss_MiB"])
        pk = f"{pk:10.0f}" if isinstance(pk, float) else f"{'n/a':>10s}"
        print(f"{row['workload']:>12s}{row['tasks']:6d}{row['massive_evals_per_s']:13,.0f}"
              f"{row['scan_evals_per_s']:11,.0f}{row['numpy_evals_per_s']:11,.0f}"
              f"{row['nx_evals_per_s']:8,.1f}{row['ratio_vs_numpy']:9,.0f}"
              f"{row['ratio_vs_networkx']:10,.0f}{row['max_abs_diff_us']:9.4f}{pk}")
    print("vcontention:", json.dumps(rows_vc))
    out = {"backend": jax.default_backend(), "device_kind": jax.devices()[0].device_kind,
           "machine": platform.machine(), "cpu_count": os.cpu_count(), "jax": jax.__version__,
           "rows": rows, "vcontention": rows_vc}
    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    with open(out_path, "w") as fh:
        json.dump(out, fh, indent=2)
    print(f"wrote {out_path}")


def bench_vcontention(a, D) -> dict:
    """Evaluations/s of the vectorised-contention evaluator (calibrated model) at m = 8."""
    try:
        from subgpu_jax.score.vcontention import VContentionEvaluator
        from subgpu_jax.score.vcoptions import VCOptions
    except Exception as e:  # noqa: BLE001
        return {"status": f"vcontention unavailable: {e!r}"}
    hw = get_hardware("B200")
    g = build_graph(get_model("gpt-oss-120b"), REFERENCE_DEPLOYMENT, 8)
    starts = [round(g.n * k / D) for k in range(1, D)]
    seg = cut_from_starts(g.n, g.edges, starts)
    cpu = jax.default_backend() == "cpu"
    res = {}
    try:
        for chunk in ((1024,) if cpu else (8192, 65536)):
            vc = VContentionEvaluator(g, seg, D, 0, hw, options=VCOptions(chunk=chunk))
            pool = enumerate_allocations(hw.sm_budget, D, hw.sm_quantum, hw.min_pool_sms,
                                         limit=2_000_000)
            A = pool[np.random.default_rng(1).integers(0, len(pool), chunk * (2 if cpu else 8))]
            vc.makespan(A[:chunk])
            t0 = time.perf_counter()
            vc.makespan(A)
            res[f"chunk{chunk}"] = len(A) / (time.perf_counter() - t0)
            print(f"  vcontention chunk {chunk}: {res[f'chunk{chunk}']:,.0f}/s", flush=True)
        res["status"] = "ok"
        res["tasks"] = int(vc.dag.T)
        res["evals_per_s"] = max(v for k, v in res.items() if k.startswith("chunk"))
    except Exception as e:  # noqa: BLE001
        res["status"] = f"failed: {e!r}"
    return res


if __name__ == "__main__":
    main()
