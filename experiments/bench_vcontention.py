"""Benchmark: allocations per second of the vectorised contention scorer, new kernel vs the
previous one, in the same run (docs/method.md §3, the fast scorer).

Workload (the ``--vcontention`` row of ``bench_evaluator.py``): GPT-OSS 120B, reference
deployment, B200, m = 8 microbatches, D = 5 stages, w = 0, evenly spaced chain cut (720 tasks);
plus a smaller structure (m = 4, D = 3). Random allocations of P_H^(D), calibrated
``ContentionModel()``, L2 ``lru`` hit estimate.

Rows:
* ``previous``: the kernel before this change, frozen below (``_previous_makespan``): band
  integrals scattered from one side with a ``fori_loop``, the heuristic band
  bucket((m+1) K, 4), power-of-two task padding, searchsorted interpolation and 16 scalar
  table gathers per task.
* ``loop`` / ``unrolled``: ``score.vcontention.VContentionEvaluator`` with the exact band
  (``incomparable_band``), both-sided integrals without scatter, ``fine_bucket`` padding and
  interpolation by arithmetic with four row gathers per task,
  the band written as a ``fori_loop`` (CPU default) or as one straight-line program of static
  slices (accelerator default).
Columns: allocations/s, ratio to ``previous`` at the same chunk, compile seconds and the largest
relative difference of the makespans from ``previous`` (the kernels compute the same model).

Usage: PYTHONPATH=. python experiments/bench_vcontention.py [--device cpu|gpu] [--out FILE.json]
    [--allocs N]. CPU: about 2 minutes on 2 cores; GPU: under 2 minutes on one H200.
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


def _previous_integrals(mask, S, C, tau, vals):
    """The previous band integrals: offsets 1..W, one side computed, the other scattered."""
    import jax
    import jax.numpy as jnp

    W = mask.shape[0]
    T = S.shape[0]
    rate = vals / jnp.maximum(tau, 1e-9)[None]
    Sp, Cp = jnp.pad(S, (0, W)), jnp.pad(C, (0, W))
    rp = jnp.pad(rate, ((0, 0), (0, W)))

    def step(o, carry):
        acc, back = carry
        Sj = jax.lax.dynamic_slice(Sp, (o,), (T,))
        Cj = jax.lax.dynamic_slice(Cp, (o,), (T,))
        rj = jax.lax.dynamic_slice(rp, (0, o), (3, T))
        mk = jax.lax.dynamic_index_in_dim(mask, o - 1, keepdims=False)
        ov = jnp.maximum(jnp.minimum(C, Cj) - jnp.maximum(S, Sj), 0.0) * mk
        acc = acc + ov[None] * rj
        cur = jax.lax.dynamic_slice(back, (0, o), (3, T))
        back = jax.lax.dynamic_update_slice(back, cur + ov[None] * rate, (0, o))
        return acc, back

    acc, back = jax.lax.fori_loop(1, W + 1, step,
                                  (jnp.zeros_like(rate), jnp.zeros((3, T + W), rate.dtype)))
    return acc + back[:, :T]


def _previous_makespan(tabs, arrs, mask, alloc, iters, damping):
    """The previous ``vc_makespan`` (searchsorted interpolation, 16 scalar gathers per task,
    one-sided scattered band integrals), frozen here as the benchmark's baseline."""
    import jax
    import jax.numpy as jnp

    from subgpu_jax.score.evaluator import completion_times

    def interp(grid, x):
        G = grid.shape[0]
        xc = jnp.clip(x, grid[0], grid[-1])
        i = jnp.clip(jnp.searchsorted(grid, xc, side="right") - 1, 0, G - 2)
        return i, (xc - grid[i]) / (grid[i + 1] - grid[i])

    def bilinear(tab, seg, ic, fc, ip, fp):
        return (tab[seg, ic, ip] * (1 - fc) * (1 - fp) + tab[seg, ic + 1, ip] * fc * (1 - fp)
                + tab[seg, ic, ip + 1] * (1 - fc) * fp + tab[seg, ic + 1, ip + 1] * fc * fp)

    K = tabs.tau.shape[0]
    p_seg = alloc[tabs.seg_stage]
    kk = jnp.arange(K)
    tab_tau = tabs.tau[kk, p_seg]
    valid, seg = arrs.task_valid, arrs.task_seg
    tau_iso = jnp.where(valid, tab_tau[seg, 0, 0], 0.0)
    tab_b, tab_q, tab_p = tabs.busy[kk, p_seg], tabs.conc[kk, p_seg], tabs.power[kk, p_seg]
    iso = jnp.stack([tab_b[seg, 0, 0], tab_q[seg, 0, 0], tab_p[seg, 0, 0]])
    safe_iso = jnp.maximum(tau_iso, 1e-9)

    def body(_, carry):
        tau, vals = carry
        C = completion_times(arrs, tau)
        S = C - tau
        busy_o, conc_o, power_o = _previous_integrals(mask, S, C, tau, vals)
        tsafe = jnp.maximum(tau, 1e-9)
        f = jnp.clip(busy_o / tsafe, 0.0, 1.0)
        fb = jnp.maximum(f * tsafe, 1e-9)
        ic, fc = interp(tabs.conc_grid, conc_o / fb)
        ip, fp = interp(tabs.power_grid, power_o / fb)
        tb = jnp.maximum(bilinear(tab_tau, seg, ic, fc, ip, fp), 1e-9)
        new = jnp.where(valid, 1.0 / ((1.0 - f) / safe_iso + f / tb), 0.0)
        busy_v = jnp.stack([bilinear(t, seg, ic, fc, ip, fp) for t in (tab_b, tab_q, tab_p)])
        new_vals = new[None] * ((1.0 - f)[None] * iso / safe_iso[None]
                                + f[None] * busy_v / tb[None])
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


def _timed(fn, A, chunk):
    """(allocations/s, compile s, makespans) of ``fn`` over ``A`` in chunks."""
    import numpy as np

    from subgpu_jax.score.evaluator import run_in_chunks

    t0 = time.perf_counter()
    run_in_chunks(A[:chunk], chunk, fn)
    comp = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = run_in_chunks(A, chunk, fn)
    return len(A) / (time.perf_counter() - t0), comp, np.asarray(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    ap.add_argument("--out", default=None)
    ap.add_argument("--allocs", type=int, default=None,
                    help="allocations per timed row (default 1024 on CPU, 2**20 on GPU)")
    a = ap.parse_args(argv)
    if a.device == "cpu":
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax
    import jax.numpy as jnp
    import numpy as np

    from subgpu_jax import REFERENCE_DEPLOYMENT, build_graph, get_hardware, get_model
    from subgpu_jax.score.evaluator import DagArrays
    from subgpu_jax.score.vcontention import BandIndex, VContentionEvaluator
    from subgpu_jax.space.config import chain_cut, enumerate_allocations
    from subgpu_jax.space.taskdag import bucket

    backend = jax.default_backend()
    if a.device == "gpu" and backend != "gpu":
        print(f"error: device: --device gpu but JAX's backend is {backend!r}", file=sys.stderr)
        return 2
    cpu = backend == "cpu"
    n_alloc = a.allocs or (1024 if cpu else 2**20)
    chunks = (256,) if cpu else (16384, 65536)
    hw = get_hardware("B200")
    prev = _previous_batch()
    rows = []
    for m, D in ((8, 5), (4, 3)):
        g = build_graph(get_model("gpt-oss-120b"), REFERENCE_DEPLOYMENT, m)
        seg = chain_cut(g.n, [round(g.n * k / D) for k in range(1, D)])
        pool = enumerate_allocations(hw.sm_budget, D, hw.sm_quantum, hw.min_pool_sms)
        A = pool[np.random.default_rng(1).integers(0, len(pool), n_alloc)].astype(np.int32)
        new = VContentionEvaluator(g, seg, D, 0, hw)
        dag = new.dag
        W_old = bucket((m + 1) * new.K, 4)
        arrs_old = DagArrays.from_dag(dag, bucket(dag.T, 8))
        mask_old = BandIndex.from_dag(dag, arrs_old.T_pad, W_old).mask[W_old:]  # offsets 1..W
        for chunk in chunks:
            if chunk > n_alloc:
                continue
            r_prev, c_prev, v_prev = _timed(lambda c: prev(
                new.tabs, arrs_old, mask_old, jnp.asarray(c), new.iters, new.damping), A, chunk)
            base = {"microbatches": m, "D": D, "tasks": dag.T, "chunk": chunk}
            rows.append({**base, "kernel": "previous", "band": W_old, "T_pad": arrs_old.T_pad,
                         "allocs_per_s": r_prev, "ratio": 1.0, "compile_s": c_prev,
                         "max_rel_diff": 0.0})
            for unroll in (False, True):
                ev = VContentionEvaluator(g, seg, D, 0, hw, hits=new.hits, chunk=chunk,
                                          unroll=unroll)
                r, c, v = _timed(lambda x: np.asarray(ev.makespan(x)), A, chunk)
                rows.append({**base, "kernel": "unrolled" if unroll else "loop",
                             "band": ev.band.band, "T_pad": ev.arrs.T_pad, "allocs_per_s": r,
                             "ratio": r / r_prev, "compile_s": c,
                             "max_rel_diff": float(np.max(np.abs(v / v_prev - 1.0)))})
            print(f"m={m} D={D} chunk={chunk} done", flush=True)
    print(f"{'m':>2s} {'D':>2s} {'T':>4s} {'chunk':>6s} {'kernel':9s} {'band':>4s} "
          f"{'T_pad':>5s} {'allocs/s':>11s} {'ratio':>6s} {'compile':>8s} {'max|dv|':>8s}")
    for r in rows:
        print(f"{r['microbatches']:2d} {r['D']:2d} {r['tasks']:4d} {r['chunk']:6d} "
              f"{r['kernel']:9s} {r['band']:4d} {r['T_pad']:5d} {r['allocs_per_s']:11,.0f} "
              f"{r['ratio']:6.2f} {r['compile_s']:8.2f} {r['max_rel_diff']:8.1e}")
    out = {"backend": backend, "device_kind": jax.devices()[0].device_kind,
           "cpu_count": os.cpu_count(), "machine": platform.machine(), "jax": jax.__version__,
           "allocs_per_row": n_alloc, "rows": rows}
    path = a.out or os.path.join(HERE, "results", f"bench_vcontention_{a.device}.json")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as fh:
        json.dump(out, fh, indent=1)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
