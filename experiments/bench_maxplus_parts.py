"""Where one block of the exhaustive grid point spends its time (issue 42 item 4), per max-plus
kernel: the allocations unranked on the device, the segment durations gathered, the recurrence
(``score.maxplus``: ``xla`` vmapped and fused by XLA, ``pallas`` one Pallas/Triton kernel at
several block sizes) and the block's top-k (one ``lax.top_k``, or ``massive.block_topk``'s
two stages), each timed alone on the same block of the
exhaustive instance of ``exhaustive_gridpoint.py`` (GPT-OSS 120B 20-operator chain on B200,
L = 18, m = 2, D = 5, w = 0; 2 cuts x 2,097,152 allocations), median of 5 runs after a
warm-up, with the makespans of the two kernels compared bit for bit.

Usage: python experiments/bench_maxplus_parts.py [--out JSON] [--blocks 128,256,512]
(on a GPU; on a CPU the Pallas rows run in Pallas' interpreter and are skipped).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from exhaustive_gridpoint import make_instance  # noqa: E402
from subgpu_jax import get_hardware  # noqa: E402
from subgpu_jax.score.massive import (DagProgram, block_topk,  # noqa: E402
                                      chain_segment_table, unrank_allocation,
                                      unrank_chain_bounds)
from subgpu_jax.score.maxplus import PallasMaxPlus, XlaMaxPlus  # noqa: E402
from subgpu_jax.space.config import binding, chain_cut, count_allocations  # noqa: E402
from subgpu_jax.space.taskdag import build_task_dag  # noqa: E402


def timed(fn, *args, reps: int = 5) -> tuple[float, object]:
    """Median seconds of ``fn(*args)`` (blocked until ready) after one warm-up call."""
    out = jax.block_until_ready(fn(*args))
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts)), out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--blocks", default="128,256,512")
    ap.add_argument("--alloc-block", type=int, default=2097152)
    a = ap.parse_args(argv)
    hw = get_hardware("B200")
    D, w, m, L, q, mn, budget = 5, 0, 2, 18, 2, 2, 148
    chain, model, _ = make_instance(hw, m, L)
    table = model.table(chain)
    n, K = chain.n, D + w
    dag = build_task_dag(n, chain.edges, chain.cross_edges, chain_cut(n, range(1, K)), D, w, L, m)
    prog = DagProgram.from_dag(dag)
    flat = jnp.asarray(chain_segment_table(table), jnp.float32).reshape(-1)
    N1 = table.shape[1]
    stage = jnp.asarray([binding(k, K, w) for k in range(K)], jnp.int32)
    AB = min(a.alloc_block, count_allocations(budget, D, q, mn))
    ranks = jnp.arange(AB, dtype=jnp.int32)
    unrank = jax.jit(jax.vmap(lambda r: unrank_allocation(r, D, budget, q, mn)))
    t_unrank, allocs = timed(unrank, ranks)
    bounds = jax.vmap(lambda r: unrank_chain_bounds(r, n, K))(jnp.arange(2, dtype=jnp.int32))
    segids = bounds[:, :-1] * (n + 1) + bounds[:, 1:]
    rows = {"unrank_allocations_s": t_unrank, "candidates": 2 * AB, "tasks": prog.T,
            "backend": jax.default_backend(), "device_kind": jax.devices()[0].device_kind}
    gather = jax.jit(lambda f, s, al: f[(s[:, None, :] * N1 + al[None, :, :][:, :, stage])
                                        .reshape(-1, K).T])
    rows["gather_durations_s"], _ = timed(gather, flat, segids, allocs)
    xla = jax.jit(lambda f, s, al: XlaMaxPlus().block_makespans(prog, f, s, al, stage, N1))
    rows["xla_gather_and_recurrence_s"], ref = timed(xla, flat, segids, allocs)
    topk = jax.jit(lambda v: jax.lax.top_k(-v.reshape(-1), 8))
    rows["top_k_s"], _ = timed(topk, ref)
    two = jax.jit(lambda v: block_topk(v.reshape(-1), 8))
    rows["block_topk_s"], _ = timed(two, ref)
    argmin = jax.jit(lambda v: (jnp.min(v), jnp.argmin(v.reshape(-1))))
    rows["min_argmin_s"], _ = timed(argmin, ref)
    rows["pallas"] = {}
    if jax.default_backend() == "gpu":
        for b in [int(x) for x in a.blocks.split(",")]:
            k = PallasMaxPlus(block=b)
            f = jax.jit(lambda fl, s, al, k=k: k.block_makespans(prog, fl, s, al, stage, N1))
            t, got = timed(f, flat, segids, allocs)
            rows["pallas"][str(b)] = {"gather_and_recurrence_s": t,
                                      "bit_identical_to_xla": bool(np.array_equal(
                                          np.asarray(got), np.asarray(ref)))}
    c = rows["candidates"]
    rows["rates_per_s"] = {"xla_recurrence": c / rows["xla_gather_and_recurrence_s"],
                           **{f"pallas_{b}": c / r["gather_and_recurrence_s"]
                              for b, r in rows["pallas"].items()}}
    print(json.dumps(rows, indent=1))
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
