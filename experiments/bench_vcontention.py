"""Benchmark: allocations per second of the vectorised contention scorer, its kernels vs the
previous (dispatch-order band) kernel, in the same run (docs/method.md §3, the fast scorer).

Workload (the ``--vcontention`` row of ``bench_evaluator.py``): GPT-OSS 120B, reference
deployment, B200, m = 8 microbatches, D = 5 stages, w = 0, evenly spaced chain cut (720 tasks);
plus a smaller structure (m = 4, D = 3). Random allocations of P_H^(D), calibrated
``ContentionModel()``, L2 ``lru`` hit estimate.

Rows:
* ``previous``: the kernel before the lane plan, frozen below (``_previous_makespan``): every
  task compared with the tasks at dispatch offsets -W..W (W = the exact incomparable band,
  written as a ``fori_loop``), the completion times by the dispatch-order window scan, in task
  order.
* ``window`` / ``levels`` / ``straight``: ``score.vcontention.VContentionEvaluator`` with the
  vmapped ``vc_makespan``: tasks in the lane-major layout of ``score.lanes.LanePlan``, the
  overlap integrals over the incomparable pairs only, the completion times by the
  dispatch-order window scan, one ``lax.scan`` step per DAG level or the levels as one
  straight-line program.
* ``batched``: the batch-last kernel ``score.vcbatch`` (allocations as the trailing contiguous
  axis, exact start times instead of pair masks, the bilinear lookup from the cell table, the
  level scans unrolled 2 levels per loop trip), with the evaluator's defaults: on the CPU the
  overlap integrals as static slices per triple, the three rates packed on a trailing axis,
  and the whole chunk as one block; on the GPU the integrals as one gather of every task's
  partners and one variadic reduction (``integrals="gather"``), blocks of 128 allocations.
  ``batched/gather`` (CPU) and ``batched/slices`` (GPU): the other backend's form of the
  integrals. On the GPU also ``batched/b32`` (blocks of 32) and ``batched/u4`` (4 levels per
  loop trip: ``level_unroll``). Forms and layouts measured once and dropped (blocks of 256 or
  8 levels per trip with the slices; the gathered integrals packed on a trailing rate axis,
  as three reductions, or with overlaps recomputed per rate; blocks of 16, 64, 512 with the
  gather) are in ``experiments/results/bench_vcontention_h200_forms.json``.
  ``batched/inline`` (CPU only; on the H200 1.02x the shared program in an earlier run): the
  evaluator's own program with its tables as compile-time constants
  (``inline_tables=True``: one compilation per cut instead of per lane structure).
* on the CPU, ``window/1`` and ``batched/1``: one thread (the kernel's own speed-up); the other
  rows use the evaluator's default worker threads (2 on a CPU: chunks run concurrently).
The kernels take turns every 4 chunks (a shared machine's load hits all alike). Columns:
allocations/s (wall) and its ratio to ``previous`` at the same chunk, allocations per CPU second
(``process_time``, all threads) and its ratio, compile seconds and the largest relative difference
of the makespans from ``previous`` (the kernels compute the same model; the float32 sums run in
another order). The JSON records the load average before and after (a shared CPU machine).

Usage: PYTHONPATH=. python experiments/bench_vcontention.py [--device cpu|gpu] [--out FILE.json]
    [--allocs N] [--scans window,levels,straight,batched] [--structures 8x5,4x3]
    [--chunks 64,256].
    Bad arguments end the call before any timing with one line ``error: ...`` and exit code 2:
    an unknown or empty kernel in --scans, a structure the model refuses (``--structures:
    MxD: reason``), a chunk repeated or larger than the allocations per row, an --out that is
    empty, a folder or in a missing folder.
    CPU: chunks of 64 and 256, 1 to 4 minutes on 2 cores (load); GPU: chunks of 131072, about a
    minute on one H200 (``--device gpu --out $OUT/bench_vcontention_h200.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from subgpu_jax.score.vcoptions import VCOptions  # noqa: E402


def _previous_mask(dag, T_pad, W):
    """The previous band mask (2W, T_pad): offsets -W..-1, 1..W, 1 for tasks on other lanes."""
    import numpy as np

    offs = np.concatenate([np.arange(-W, 0), np.arange(1, W + 1)])
    i = np.arange(T_pad)
    j = i[None, :] + offs[:, None]
    ok = (i[None, :] < dag.T) & (j >= 0) & (j < dag.T)
    st = np.full(T_pad, -1)
    st[: dag.T] = dag.lanes()
    sj = np.where(ok, st[np.clip(j, 0, T_pad - 1)], -1)
    return (ok & (sj != st[None, :])).astype(np.float32)


def _previous_integrals(mask, S, C, tau, vals):
    """The previous band integrals: offsets -W..W from both sides, a ``fori_loop``."""
    import jax
    import jax.numpy as jnp

    W2 = mask.shape[0]
    W = W2 // 2
    T = S.shape[0]
    rate = vals / jnp.maximum(tau, 1e-9)[None]
    Sp, Cp = jnp.pad(S, (W, W)), jnp.pad(C, (W, W))
    rp = jnp.pad(rate, ((0, 0), (W, W)))

    def step(k, acc):
        o = jnp.where(k < W, k, k + 1)
        Sj = jax.lax.dynamic_slice(Sp, (o,), (T,))
        Cj = jax.lax.dynamic_slice(Cp, (o,), (T,))
        rj = jax.lax.dynamic_slice(rp, (0, o), (3, T))
        mk = jax.lax.dynamic_index_in_dim(mask, k, keepdims=False)
        ov = jnp.maximum(jnp.minimum(C, Cj) - jnp.maximum(S, Sj), 0.0) * mk
        return acc + ov[None] * rj

    return jax.lax.fori_loop(0, W2, step, jnp.zeros_like(rate))


def _previous_makespan(tabs, arrs, mask, alloc, iters, damping):
    """The previous ``vc_makespan`` (task order, band integrals), frozen as the baseline."""
    import jax
    import jax.numpy as jnp

    from subgpu_jax.score.evaluator import completion_times
    from subgpu_jax.score.vcontention import bilinear_rows, interp_weights

    K = tabs.tau.shape[0]
    p_seg = alloc[tabs.seg_stage]
    tab_tau = tabs.tau[jnp.arange(K), p_seg]
    valid, seg = arrs.task_valid, arrs.task_seg
    tau_iso = jnp.where(valid, tab_tau[seg, 0, 0], 0.0)
    _, N1, NC, NP = tabs.tau.shape
    rows = tabs.rows
    r0 = (seg * N1 + p_seg[seg]) * NC
    iso = rows[r0 * NP, 1:].T
    safe_iso = jnp.maximum(tau_iso, 1e-9)

    def body(_, carry):
        tau, vals = carry
        C = completion_times(arrs, tau)
        S = C - tau
        busy_o, conc_o, power_o = _previous_integrals(mask, S, C, tau, vals)
        tsafe = jnp.maximum(tau, 1e-9)
        f = jnp.clip(busy_o / tsafe, 0.0, 1.0)
        fb = jnp.maximum(f * tsafe, 1e-9)
        ic, fc = interp_weights(tabs.conc_grid, conc_o / fb)
        ip, fp = interp_weights(tabs.power_grid, power_o / fb)
        v4 = bilinear_rows(rows, r0, NP, ic, fc, ip, fp)
        tb = jnp.maximum(v4[0], 1e-9)
        new = jnp.where(valid, 1.0 / ((1.0 - f) / safe_iso + f / tb), 0.0)
        new_vals = new[None] * ((1.0 - f)[None] * iso / safe_iso[None]
                                + f[None] * v4[1:] / tb[None])
        return (damping * tau + (1.0 - damping) * new,
                damping * vals + (1.0 - damping) * jnp.where(valid[None], new_vals, 0.0))

    tau, _ = jax.lax.fori_loop(0, iters, body, (tau_iso, jnp.where(valid[None], iso, 0.0)))
    return jnp.max(completion_times(arrs, tau))


def _previous_batch():
    """The previous jitted batch function (same tables, the frozen previous kernel)."""
    import jax

    def batch(tabs, arrs, mask, allocs, iters, damping):
        return jax.vmap(lambda a: _previous_makespan(tabs, arrs, mask, a, iters, damping))(allocs)

    return jax.jit(batch, static_argnums=(4, 5))


def _timed(fns: dict, A, chunk: int) -> dict:
    """Time the kernels ``fns`` (name -> batch function) over ``A`` in chunks, taking turns
    chunk by chunk so that the load of a shared machine hits all alike. Returns name ->
    (allocations/s by wall time, allocations per CPU second, compile s, makespans)."""
    import numpy as np

    from subgpu_jax.score.evaluator import run_in_chunks

    comp, wall, cpu, outs = {}, {}, {}, {}
    for k, fn in fns.items():
        t0 = time.perf_counter()
        run_in_chunks(A[:chunk], chunk, fn)
        comp[k] = time.perf_counter() - t0
        wall[k] = cpu[k] = 0.0
        outs[k] = []
    step = 4 * chunk  # turns of 4 chunks (room for the evaluator's worker threads)
    for s in range(0, len(A), step):
        part = A[s:s + step]
        for k, fn in fns.items():
            t0, c0 = time.perf_counter(), time.process_time()
            outs[k].append(run_in_chunks(part, chunk, fn))
            wall[k] += time.perf_counter() - t0
            cpu[k] += time.process_time() - c0
    return {k: (len(A) / wall[k], len(A) / cpu[k], comp[k], np.concatenate(outs[k]))
            for k in fns}


def _structure(m: int, D: int, hw, n_alloc: int) -> tuple:
    """The timed workload of one MxD structure: GPT-OSS 120B's region graph for ``m``
    microbatches (reference deployment), its evenly spaced chain cut into ``D`` stages,
    ``n_alloc`` random allocations of ``hw`` (seed 1) and the ``scan="window"`` evaluator whose
    tables and hits every row shares. Returns ``(graph, cut, allocations, evaluator)``.

    Raises:
        ValueError: from the model: ``m`` not dividing the per-GPU batch, D = 1 (the temporal
        baseline), more stages than kernels or than the SMs allow.
    """
    import numpy as np

    from subgpu_jax import REFERENCE_DEPLOYMENT, build_graph, get_model
    from subgpu_jax.score.vcontention import VContentionEvaluator
    from subgpu_jax.space.config import chain_cut, enumerate_allocations

    g = build_graph(get_model("gpt-oss-120b"), REFERENCE_DEPLOYMENT, m)
    seg = chain_cut(g.n, [round(g.n * k / D) for k in range(1, D)])
    pool = enumerate_allocations(hw.sm_budget, D, hw.sm_quantum, hw.min_pool_sms)
    A = pool[np.random.default_rng(1).integers(0, len(pool), n_alloc)].astype(np.int32)
    return g, seg, A, VContentionEvaluator(g, seg, D, 0, hw, options=VCOptions(scan="window"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    ap.add_argument("--out", default=None)
    ap.add_argument("--allocs", type=int, default=None,
                    help="allocations per timed row (default 1024 on CPU, 2**19 on GPU)")
    ap.add_argument("--scans", default=None,
                    help="comma-separated kernels to time beside previous (default: window,"
                         "levels,batched; straight is slow to compile)")
    ap.add_argument("--structures", default="8x5,4x3",
                    help="comma-separated MxD structures (microbatches x stages)")
    ap.add_argument("--chunks", default=None,
                    help="comma-separated allocations per compiled call (default 64,256 on the "
                         "CPU, 131072 on the GPU)")
    a = ap.parse_args(argv)

    from subgpu_jax.app.options import usage_error as fail
    from subgpu_jax.model.checks import out_file

    if a.out is not None:
        try:
            out_file(a.out, "--out")
        except ValueError as e:
            return fail(str(e))
    if a.device == "cpu":
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax
    import jax.numpy as jnp
    import numpy as np

    from subgpu_jax import get_hardware
    from subgpu_jax.score.lanes import incomparable_pairs
    from subgpu_jax.score.vcontention import SCANS, VContentionEvaluator

    scans = (("window", "levels", "batched") if a.scans is None
             else tuple(x.strip() for x in a.scans.split(",")))
    if not all(scans):
        return fail(f"--scans: {a.scans!r} has empty entries; give a list like "
                    f"window,batched (kernels: {', '.join(SCANS)})")
    bad = [x for x in scans if x not in SCANS]
    if bad:
        return fail(f"--scans: {','.join(bad)} not among {', '.join(SCANS)}")
    try:
        structs = [tuple(int(v) for v in x.split("x")) for x in a.structures.split(",")]
        if not structs or any(len(t) != 2 or min(t) < 1 for t in structs):
            raise ValueError
    except ValueError:
        return fail(f"--structures: {a.structures!r} is not a list like 8x5,4x3 (positive "
                    "integers)")
    if a.allocs is not None and a.allocs < 1:
        return fail(f"--allocs must be >= 1, got {a.allocs}")
    try:
        chunk_opt = None if a.chunks is None else tuple(int(x) for x in a.chunks.split(","))
        if chunk_opt is not None and min(chunk_opt) < 1:
            raise ValueError
    except ValueError:
        return fail(f"--chunks: {a.chunks!r} is not a list like 64,256 (positive integers)")
    backend = jax.default_backend()
    if a.device == "gpu" and backend != "gpu":
        return fail(f"device: --device gpu but JAX's backend is {backend!r}")
    cpu = backend == "cpu"
    n_alloc = a.allocs or (1024 if cpu else 2**19)
    chunks = chunk_opt or ((64, 256) if cpu else (131072,))
    if len(set(chunks)) != len(chunks):
        return fail(f"--chunks: {a.chunks!r} repeats a value")
    big = [c for c in chunks if c > n_alloc]
    if big:  # a chunk larger than a row would time nothing: every row of it skipped
        what = f"--allocs {n_alloc}" if a.allocs else f"the default --allocs {n_alloc}"
        return fail(f"--chunks{'' if a.chunks else ' (default)'}: {','.join(map(str, big))} "
                    f"larger than {what}, the allocations per row: give chunks <= {n_alloc}")
    hw = get_hardware("B200")
    prepared = []  # every structure built before any timing: a bad one is refused up front
    for m, D in structs:
        try:
            prepared.append((m, D, *_structure(m, D, hw, n_alloc)))
        except ValueError as e:
            return fail(f"--structures: {m}x{D}: {e}")
    prev = _previous_batch()
    rows = []
    path = a.out or os.path.join(HERE, "results", f"bench_vcontention_{a.device}.json")
    load0 = list(os.getloadavg()) if hasattr(os, "getloadavg") else None

    def write() -> str:
        """Write the rows so far (after every structure: a run cut short keeps its rows)."""
        out = {"backend": backend, "device_kind": jax.devices()[0].device_kind,
               "cpu_count": os.cpu_count(), "machine": platform.machine(),
               "jax": jax.__version__, "allocs_per_row": n_alloc,
               "load_avg_start": load0,
               "load_avg": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
               "rows": rows}
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as fh:
            json.dump(out, fh, indent=1)
        return path

    # kernel rows: name -> (scan, extra evaluator options)
    kinds = {s: (s, {}) for s in scans}
    if "batched" in scans:  # the evaluator's own program, its tables as constants
        kinds["batched/inline"] = ("batched", {"inline_tables": True})
    if cpu:  # the kernels alone, without the evaluator's second thread
        for s in ("window", "batched"):
            if s in scans:
                kinds[f"{s}/1"] = (s, {"workers": 1})
        if "batched" in scans:  # the accelerator's default form, on the CPU
            kinds["batched/gather"] = ("batched", {"integrals": "gather"})
    elif "batched" in scans:
        kinds.pop("batched/inline", None)  # 1.02x the shared program on the H200 (earlier run)
        kinds.update({"batched/slices": ("batched", {"integrals": "slices"}),
                      "batched/b32": ("batched", {"block": 32}),
                      "batched/u4": ("batched", {"level_unroll": 4})})
    for m, D, g, seg, A, new in prepared:
        dag = new.dag
        ii, jj = incomparable_pairs(dag)
        W_old = max(4, -(-int((jj - ii).max(initial=1)) // 4) * 4)   # the previous exact band
        mask_old = jnp.asarray(_previous_mask(dag, new.arrs.T_pad, W_old))
        for chunk in chunks:
            fns = {"previous": lambda c: prev(new.tabs, new.arrs, mask_old, jnp.asarray(c),
                                              new.iters, new.damping)}
            evs = {}
            for k, (scan, kw) in kinds.items():
                evs[k] = VContentionEvaluator(g, seg, D, 0, hw, hits=new.hits,
                                              options=VCOptions(chunk=chunk, scan=scan, **kw))
                fns[k] = evs[k].makespan
            res = _timed(fns, A, chunk)
            r_prev, u_prev, _, v_prev = res["previous"]
            base = {"microbatches": m, "D": D, "tasks": dag.T, "chunk": chunk}
            for k, (r, u, c, v) in res.items():
                rows.append({**base, "kernel": k,
                             "workers": 1 if k == "previous" else evs[k].workers,
                             "pairs": int(mask_old.sum()) if k == "previous"
                             else evs[k].plan.pairs_covered(),
                             "allocs_per_s": r, "ratio": r / r_prev, "allocs_per_cpu_s": u,
                             "cpu_ratio": u / u_prev, "compile_s": c,
                             "max_rel_diff": float(np.max(np.abs(v / v_prev - 1.0)))})
            print(f"m={m} D={D} chunk={chunk} done", flush=True)
            write()
    print(f"{'m':>2s} {'D':>2s} {'T':>4s} {'chunk':>6s} {'kernel':14s} {'pairs':>6s} "
          f"{'allocs/s':>11s} {'ratio':>6s} {'per CPU s':>10s} {'ratio':>6s} {'compile':>8s} "
          f"{'max|dv|':>8s}")
    for r in rows:
        print(f"{r['microbatches']:2d} {r['D']:2d} {r['tasks']:4d} {r['chunk']:6d} "
              f"{r['kernel']:14s} {r['pairs']:6d} {r['allocs_per_s']:11,.0f} "
              f"{r['ratio']:6.2f} {r['allocs_per_cpu_s']:10,.0f} {r['cpu_ratio']:6.2f} "
              f"{r['compile_s']:8.2f} {r['max_rel_diff']:8.1e}")
    path = write()
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
