"""The batch-last kernel of vectorised contention (docs/method.md §3, "fast scorer"): the same
fixed-point model as ``vcontention.vc_makespan``, with the allocation batch as the trailing,
contiguous axis of every array.

``vcontention.vc_makespan`` is written for ONE allocation and ``jax.vmap``-ed, which puts the
batch first: every per-task vector is a short row (the tasks of a lane) and the level scan
gathers and updates strided columns. Here every per-task quantity is an (H, B) array in the
lane-major home layout of ``lanes.LanePlan`` (H slots, B allocations), so every elementwise
step runs over contiguous batch vectors and every level step reads and writes whole rows.
The per-allocation work is the same; the numbers equal the vmapped kernel's up to float32
summation order (``experiments/bench_vcontention.py`` reports the largest difference).

Changes of form (not of the model) make it cheaper:

* Start times are the max-plus recurrence's own A_i = max(C_j : j in preds(i)) (not C_i - tau_i,
  which rounds). Then for every pair that a DAG path orders, C_j <= S_i exactly, so its overlap
  max(0, min(C_i, C_j) - max(S_i, S_j)) is exactly 0, and the lane plan's 0/1 masks (which drop
  exactly those pairs inside a (row, partner row, offset) triple) are not needed. Partners past
  a row's end read padding with S = C = 0: overlap max(0, -S_i) = 0.
* The overlap integrals come in two forms (``INTEGRALS``, ``batched_integrals``): static slices
  per triple, the three rates (data-active, bytes in flight, compute power) packed on a
  trailing axis or as separate arrays (the CPU default); or one gather of every task's partners
  (``partner_table``) with the three sums in one variadic reduction (the accelerator default:
  there XLA writes the slices form's overlaps out once per triple).
* The bilinear table lookup reads the 4 corners x 4 quantities of a grid cell from ``cell_table``
  (16 arrays indexed by one cell number, computed once per update) instead of 4 row gathers of 4
  values of the row table (XLA's CPU gather of short rows is slower than 4 scalar gathers).

Everything is a host-validated pytree argument; the static arguments (``VCB_STATIC_ARGNUMS``)
are the iteration count, the damping, the contention switch and the layout options (packed,
block, grids, level unroll, integrals), and the lane plan's triples are static fields of its
pytree, so one compiled function serves every allocation batch of one padded structure (tests
wrap ``vcb_batch_impl`` in ``chex.assert_max_traces``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from subgpu_jax.score.lanes import UNROLL_MAX_TRIPLES, LanePlan, LevelProgram
from subgpu_jax.score.programs import FAST_COMPILE, ProgramCache, to_device
from subgpu_jax.score.vctables import fill_cells

__all__ = ["cell_table", "grid_spec", "batched_start_completion", "partner_table",
           "batched_integrals", "vcb_makespans", "INTEGRALS", "check_integrals",
           "VCB_STATIC_ARGNUMS", "interp_weights", "vcb_batch", "vcb_batch_fast", "vcb_batch_impl"]

#: Forms of the overlap integrals (``batched_integrals``): static slices per (row, partner
#: row, offset) triple, or one gather of every task's partners reduced over the partner axis.
INTEGRALS = ("slices", "gather")


def check_integrals(v) -> str:
    """``v`` as a plain ``str`` when it is one of ``INTEGRALS`` (a ``str``; numpy arrays and
    bytes refused before any comparison).

    Raises:
        ValueError: ``"integrals must be one of ('slices', 'gather'), got {v!r}"``.
    """
    if not (isinstance(v, str) and v in INTEGRALS):
        raise ValueError(f"integrals must be one of {INTEGRALS}, got {v!r}")
    return str(v)


def grid_spec(grid) -> tuple[float, float, int]:
    """(first point, spacing, number of points) of a uniformly spaced grid (host): the static
    form of a grid for ``interp_weights`` (compile-time constants: about 8% faster on the CPU
    than the grid as an array argument; the grids are the module constants ``CONC_GRID`` and
    ``POWER_GRID`` of ``vcontention``, so every structure shares the same values)."""
    g = np.asarray(grid, dtype=float)
    return float(g[0]), float(g[1] - g[0]), int(g.size)


def interp_weights(grid, x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Lower index and fraction of ``x`` on the increasing, uniformly spaced ``grid`` (an array,
    or its static ``grid_spec``), clipped to its range; arithmetic instead of a search (the grids
    are ``CONC_GRID``/``POWER_GRID``, checked uniform by ``vctables.segment_tables``). Any
    shape of ``x``; returns (int32, float) arrays of that shape."""
    if isinstance(grid, tuple):
        g0, dg, G = grid
        hi = g0 + dg * (G - 1)
    else:
        G = grid.shape[0]
        g0, dg, hi = grid[0], grid[1] - grid[0], grid[-1]
    u = (jnp.clip(x, g0, hi) - g0) / dg
    i = jnp.clip(jnp.floor(u), 0, G - 2)
    return i.astype(jnp.int32), u - i


def cell_table(rows: np.ndarray, shape: tuple[int, int, int, int], dtype=jnp.float32) -> jax.Array:
    """The row table of ``vctables.SegTables`` as one entry per grid *cell* (host, numpy).

    Args:
        rows: (K_pad * (N+1) * NC * NP, 4) the segment tables as rows (tau, busy, conc, power).
        shape: (K_pad, N+1, NC, NP) of the tables.

    Returns:
        (16, K_pad * (N+1) * (NC-1) * (NP-1)) array: column x of cell ((k * (N+1) + p) *
        (NC-1) + c) * (NP-1) + q holds, for corner j = 0..3 = (c, q), (c+1, q), (c, q+1),
        (c+1, q+1), the quantity k = 0..3 at row 4 j + k.
    """
    K, N1, NC, NP = shape
    t = np.asarray(rows, dtype=np.dtype(dtype)).reshape(K, N1, NC, NP, 4)
    cells = np.empty((16, K, N1, NC - 1, NP - 1), dtype=t.dtype)
    fill_cells(cells, t)
    return to_device(cells.reshape(16, -1))


def batched_start_completion(prog: LevelProgram, tau: jax.Array,
                             unroll: int = 2) -> tuple[jax.Array, jax.Array]:
    """Start and completion times (µs) of a batch of duration arrays ``tau`` (H, B) in the home
    layout (pads 0): A_i = max(C_j, j in preds(i)) (0 without predecessors), C_i = A_i + tau_i,
    one ``lax.scan`` step per DAG level, each step reading and writing whole batch rows;
    ``unroll`` (static, >= 1) levels per loop iteration (``lax.scan``'s ``unroll``: fewer loop
    trips on an accelerator, a longer program to compile). Returns (A, C), each (H, B) in the
    home layout (pads 0)."""
    NL, Lw = prog.src.shape
    B = tau.shape[1]
    zero = jnp.zeros((1, B), tau.dtype)
    t_lvl = jnp.concatenate([tau, zero])[prog.src]                      # (NL, Lw, B)

    def body(buf, x):
        l, t, pr = x
        a = jnp.max(buf[pr], axis=1)                                    # (Lw, B)
        return jax.lax.dynamic_update_slice(buf, a + t, (l * Lw, 0)), a

    buf, starts = jax.lax.scan(body, jnp.zeros((NL * Lw + 1, B), tau.dtype),
                               (jnp.arange(NL, dtype=jnp.int32), t_lvl, prog.preds), unroll=unroll)
    starts = jnp.concatenate([starts.reshape(NL * Lw, B), zero])
    return starts[prog.home], buf[prog.home]


def partner_table(plan: LanePlan) -> np.ndarray:
    """Home slots of every task's overlap partners (host, numpy): the triples of ``plan`` as
    one row of partner slots per task.

    Row A's task q meets row B's task q + s for each triple (A, B, s) of row A, in the order
    of ``plan.triples``; a partner past the row's ends, and the padding of rows with fewer
    triples than the most, is the zero slot H (S = C = 0: overlap 0). The partners are exactly
    the ones ``batched_integrals`` reads by slices.

    Returns:
        (H, P) int32, P = the largest number of triples of one row (at least 1).
    """
    L, Q = plan.grid
    H = L * Q
    by_row: list[list[tuple[int, int]]] = [[] for _ in range(L)]
    for a, b, s in plan.triples:
        by_row[a].append((b, s))
    P = max([len(r) for r in by_row] + [1])
    idx = np.full((L, Q, P), H, dtype=np.int32)
    q = np.arange(Q)
    for a, row in enumerate(by_row):
        for p, (b, s) in enumerate(row):
            ok = (q + s >= 0) & (q + s < Q)
            idx[a, ok, p] = b * Q + q[ok] + s
    return idx.reshape(H, P)


def _gathered_integrals(plan: LanePlan, S: jax.Array, C: jax.Array,
                        rates: jax.Array) -> jax.Array:
    """``batched_integrals`` as one gather of each task's partners (``partner_table``, a
    compile-time constant) and ONE variadic reduction over the partner axis that sums the R
    products overlap x partner rate together. Shapes as ``batched_integrals``.

    On the H200 (m = 8, D = 5; measurements in docs/results.md "Speed") this form runs
    1.7x the slices form: XLA writes the overlaps once, (H, P, B), and reads them in one
    fusion, where the slices form writes one overlap array per triple and concatenates the
    rows, and compiles in about 1 s instead of 8. A packed product over a trailing rate axis
    (one sum of ``ov[..., None] * rates``) measured 1.13e6/s against 1.49e6/s, three separate
    sums 1.03e6/s, and overlaps recomputed per rate (which XLA then fuses into the reduction,
    nothing written) 1.26e6/s. On the
    2-core CPU this form is 2.3x and 5.1x slower than the slices in chunks of 64 and 256 at
    m = 8, D = 5 and as fast at m = 4, D = 3.
    """
    idx = partner_table(plan)                                           # (H, P)
    R = rates.shape[-1]

    def take(x):
        return jnp.concatenate([x, jnp.zeros((1,) + x.shape[1:], x.dtype)]).at[idx].get(
            mode="promise_in_bounds")                                   # (H, P, B)

    ov = jnp.maximum(jnp.minimum(C[:, None], take(C)) - jnp.maximum(S[:, None], take(S)), 0.0)
    prods = tuple(ov * take(rates[..., k]) for k in range(R))
    sums = jax.lax.reduce(prods, tuple(jnp.zeros((), S.dtype) for _ in range(R)),
                          lambda x, y: tuple(a + b for a, b in zip(x, y)), (1,))
    return jnp.stack(sums, -1)


def batched_integrals(plan: LanePlan, S: jax.Array, C: jax.Array, rates: jax.Array,
                      packed: bool = True, integrals: str = "slices") -> jax.Array:
    """Integrals inside [S_i, C_i] of the per-task rates of the tasks of OTHER lanes, for a batch
    of schedules (the batch-last ``lanes.lane_integrals``, without masks: see the module
    docstring; ``S`` must be the exact start times of ``batched_start_completion``).

    Args:
        plan: the lane plan (its static triples). S, C: (H, B) start and completion µs (pads 0).
        rates: (H, B, R) per-task rates (per µs; pads 0).
        packed: static, the slices form only. True: one product per triple over the trailing
            rate axis (each overlap computed once for the R rates: on the CPU about 1.5x faster
            than separate arrays, whose fusions each recompute the overlap); False: R separate
            arrays (on an accelerator XLA shares the overlap between sibling fusions).
        integrals: static, ``INTEGRALS``: ``"slices"`` (one static slice of each partner row
            per triple: no gather, the fastest on the CPU) or ``"gather"``
            (``_gathered_integrals``: every task's partners gathered, the R rates summed in
            one variadic reduction; the fastest on the H200; ignores ``packed``).

    Returns:
        (H, B, R): rate x µs of the other lanes' tasks inside each task's interval.

    Raises:
        ValueError: ``integrals`` not in ``INTEGRALS`` (at trace time: it is static).
    """
    if check_integrals(integrals) == "gather":
        return _gathered_integrals(plan, S, C, rates)
    L, Q = plan.grid
    B, R = S.shape[-1], rates.shape[-1]
    M = max((abs(s) for _, _, s in plan.triples), default=0)
    pad = ((0, 0), (M, M), (0, 0))
    S2, C2 = S.reshape(L, Q, B), C.reshape(L, Q, B)
    Sp, Cp = jnp.pad(S2, pad), jnp.pad(C2, pad)
    rps = ([jnp.pad(rates.reshape(L, Q, B, R), pad + ((0, 0),))] if packed else
           [jnp.pad(rates[..., k].reshape(L, Q, B), pad) for k in range(R)])

    def term(ov, rp):
        return ov[..., None] * rp if packed else ov * rp

    if len(plan.triples) > UNROLL_MAX_TRIPLES:
        def step(g, accs):
            a, b, s = plan.tri[g, 0], plan.tri[g, 1], plan.tri[g, 2]

            def part(x):
                return jax.lax.dynamic_slice(x, (b, M + s) + (0,) * (x.ndim - 2),
                                             (1, Q) + x.shape[2:])[0]

            Ca = jax.lax.dynamic_index_in_dim(C2, a, keepdims=False)
            Sa = jax.lax.dynamic_index_in_dim(S2, a, keepdims=False)
            ov = jnp.maximum(jnp.minimum(Ca, part(Cp)) - jnp.maximum(Sa, part(Sp)), 0.0)
            out = []
            for acc, rp in zip(accs, rps):
                cur = jax.lax.dynamic_index_in_dim(acc, a, keepdims=False)
                out.append(jax.lax.dynamic_update_index_in_dim(acc, cur + term(ov, part(rp)),
                                                               a, 0))
            return tuple(out)

        accs = jax.lax.fori_loop(0, len(plan.triples), step,
                                 tuple(jnp.zeros((L, Q) + rp.shape[2:], S.dtype) for rp in rps))
        flat = [a.reshape((L * Q,) + a.shape[2:]) for a in accs]
    else:
        outs: list[list[jax.Array]] = [[] for _ in rps]
        for A in range(L):
            accs = [jnp.zeros((Q,) + rp.shape[2:], S.dtype) for rp in rps]
            for a, b, s in plan.triples:
                if a != A:
                    continue
                o = M + s
                ov = jnp.maximum(jnp.minimum(C2[A], Cp[b, o:o + Q])
                                 - jnp.maximum(S2[A], Sp[b, o:o + Q]), 0.0)
                accs = [acc + term(ov, rp[b, o:o + Q]) for acc, rp in zip(accs, rps)]
            for out, acc in zip(outs, accs):
                out.append(acc)
        flat = [jnp.concatenate(o) for o in outs]
    return flat[0].reshape(L * Q, B, R) if packed else jnp.stack(flat, -1).reshape(L * Q, B, R)


def vcb_makespans(tabs, cells: jax.Array, plan: LanePlan, allocs: jax.Array, iters: int = 4,
                  damping: float = 0.5, isolated: bool = False, packed: bool = True,
                  grids: tuple | None = None, unroll: int = 2,
                  integrals: str = "slices") -> jax.Array:
    """Makespans (µs) of a batch of integer allocations with vectorised contention.

    The model of ``vcontention.vc_makespan`` (tau <- isolated durations; ``iters`` damped
    updates from the overlap integrals and the bilinear table lookup; the makespan of the final
    durations), over (H, B) arrays.

    Args:
        tabs: ``vctables.SegTables`` or ``vctables.CellIndex`` (its ``seg_stage`` and grids
            are used).
        cells: ``cell_table(tabs.rows, tabs.tau.shape)`` or ``vctables.PoolTables.cells()``
            (16, K_pad * (N+1) * (NC-1) * (NP-1)).
        plan: the DAG's ``lanes.LanePlan``.
        allocs: (B, D) int32 SMs per stage (validated on the host).
        iters: fixed-point iterations (static). damping: weight of the previous durations in
            each update (static, 0..1). isolated: skip the iteration (contention off).
        packed: static, the layout of the three rate integrals (``batched_integrals``).
        grids: static (``grid_spec`` of the conc grid, of the power grid), or None: the grid
            arrays of ``tabs``.
        unroll: static, DAG levels per loop iteration of the level scans
            (``batched_start_completion``).
        integrals: static, the form of the overlap integrals (``INTEGRALS``,
            ``batched_integrals``).

    Returns:
        (B,) makespans T = max_i C_i in µs.
    """
    cg, pg = (tabs.conc_grid, tabs.power_grid) if grids is None else grids
    p_seg = allocs.T[tabs.seg_stage]                                    # (K_pad, B)
    valid = plan.valid[:, None]
    seg = plan.seg
    NC, NP = (cg[2], pg[2]) if grids is not None else (cg.shape[0], pg.shape[0])
    N1 = cells.shape[1] // (tabs.seg_stage.shape[0] * (NC - 1) * (NP - 1))
    nc, npw = NC - 1, NP - 1
    r0 = (seg[:, None] * N1 + p_seg[seg]) * nc                          # (H, B) first cell row
    i0 = r0 * npw                                                       # cell (c, q) = (0, 0)
    tau_iso = jnp.where(valid, cells[0][i0], 0.0)
    if isolated or iters == 0:
        return jnp.max(batched_start_completion(plan.levels, tau_iso, unroll)[1], axis=0)
    iso = tuple(jnp.where(valid, cells[k][i0], 0.0) for k in (1, 2, 3))
    inv_iso = 1.0 / jnp.maximum(tau_iso, 1e-9)

    def update(carry, last: bool):
        """One damped update of (tau, busy, conc, power); ``last`` (static): tau only (the
        rates of the final durations are not used: their 12 table reads are skipped)."""
        tau, *vals = carry                                              # 4 x (H, B)
        S, C = batched_start_completion(plan.levels, tau, unroll)
        tsafe = jnp.maximum(tau, 1e-9)
        inv = 1.0 / tsafe
        # materialised once (the barrier keeps XLA from fusing the integrals into each of
        # their consumers, i.e. computing them several times)
        ints = jax.lax.optimization_barrier(
            batched_integrals(plan, S, C, jnp.stack([v * inv for v in vals], -1), packed,
                              integrals))
        busy_o, conc_o, power_o = (ints[..., k] for k in range(3))
        f = jnp.clip(busy_o * inv, 0.0, 1.0)      # union bound of the other stages' busy share
        fb = jnp.maximum(f * tsafe, 1e-9)
        ic, fc = interp_weights(cg, conc_o / fb)
        ip, fp = interp_weights(pg, power_o / fb)
        # the cell number and the corner weights materialised once (XLA would recompute the
        # index arithmetic inside each of the 16 gathers); indices are in range by construction
        r, *w = jax.lax.optimization_barrier(
            ((r0 + ic) * npw + ip, (1 - fc) * (1 - fp), fc * (1 - fp), (1 - fc) * fp, fc * fp))
        v4 = [sum(cells[4 * j + k].at[r].get(mode="promise_in_bounds") * w[j] for j in range(4))
              for k in range(1 if last else 4)]
        tb = jnp.maximum(v4[0], 1e-9)
        new = jnp.where(valid, 1.0 / ((1.0 - f) * inv_iso + f / tb), 0.0)
        out = [damping * tau + (1.0 - damping) * new]
        for k in range(0 if last else 3):
            nv = new * ((1.0 - f) * iso[k] * inv_iso + f * v4[k + 1] / tb)
            out.append(damping * vals[k] + (1.0 - damping) * jnp.where(valid, nv, 0.0))
        return tuple(out)

    carry = jax.lax.fori_loop(0, iters - 1, lambda _, c: update(c, False), (tau_iso,) + iso)
    tau = update(carry, True)[0]
    return jnp.max(batched_start_completion(plan.levels, tau, unroll)[1], axis=0)


def vcb_batch_impl(tabs, cells, plan, allocs, iters, damping, isolated, packed, block,
                    grids=None, unroll=2, integrals="slices"):
    """``vcb_makespans`` as the compiled entry point (B, D) -> (B,) µs. With ``block`` (static)
    below B, the batch is cut into blocks of ``block`` allocations (the last padded by its last
    row) and the kernel ``jax.vmap``-ed over the blocks: every array is then (blocks, H, block),
    so the few neighbouring tasks an integral reads lie close in memory (on an accelerator the
    whole batch as one trailing axis puts them a full batch row apart)."""
    B, D = allocs.shape

    def run(a):
        return vcb_makespans(tabs, cells, plan, a, iters, damping, isolated, packed, grids,
                             unroll, integrals)

    if block is None or block >= B:
        return run(allocs)
    nb = -(-B // block)
    a = jnp.concatenate([allocs, jnp.broadcast_to(allocs[-1:], (nb * block - B, D))])
    return jax.vmap(run)(a.reshape(nb, block, D)).reshape(nb * block)[:B]


#: Static arguments of the compiled entry point (iters, damping, isolated, packed, block, grids,
#: unroll, integrals).
VCB_STATIC_ARGNUMS = (4, 5, 6, 7, 8, 9, 10, 11)
vcb_batch = ProgramCache(vcb_batch_impl, VCB_STATIC_ARGNUMS)  # bounded (programs.py)
#: The same programs compiled for a caller that does not reuse them (``VCOptions.reuse``
#: False: a search of few grid points per structure), where compiling is most of their cost:
#: ``programs.FAST_COMPILE``.
vcb_batch_fast = ProgramCache(vcb_batch_impl, VCB_STATIC_ARGNUMS, compiler_options=FAST_COMPILE)
