"""Lane-major layout of a task DAG for the vectorised contention kernel (docs/method.md §3,
"fast scorer"): the level-synchronous max-plus recurrence and the overlap integrals of
incomparable task pairs grouped by (lane distance, position distance).

Tasks of one lane (a stage, or a stream of a stage) run one after the other in dispatch order.
A task is addressed by (row A, position q on the row) in a (L_pad, Q_pad) grid, the *home*
layout of the kernel, with one row per (lane, segment) pair: every segment has one task per
(region, microbatch), so all rows are equally long. Two tasks can overlap in time only if no path of the augmented DAG orders
them (incomparable) and they run on different lanes. In the pipelined dispatch orders these
pairs are regular: row A's task q meets row B's task q + delta for a few delta, the same for
most q. ``LanePlan`` groups the incomparable pairs, seen from each side, by (A, B, s = q_B -
q_A) and keeps a 0/1 mask over q per triple, so the integrals are static slices of the grid (no
gather, no scatter). The masks select exactly the incomparable pairs: every pair that can
overlap for some durations is counted, no other (about half the pairs of a dispatch-order band
of the same exactness).

The completion times C_i = max(C_j : j in preds(i)) + tau_i are computed level by level
(``LevelProgram``): tasks of one DAG level (longest path from a source) have no edges between
them, so one step of a ``lax.scan`` fills a whole level (NL steps instead of T).

Everything here is host-side numpy building ``chex.dataclass`` pytrees of index arrays; the
triples are a static tuple (a compile-time constant of the kernel).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

import chex
import jax
import jax.numpy as jnp
import numpy as np

from subgpu_jax.score.programs import to_device
from subgpu_jax.space.taskdag import TaskDAG, per_dag

__all__ = ["incomparable_pairs", "LevelProgram", "LanePlan", "level_completion_times",
           "lane_integrals", "UNROLL_MAX_TRIPLES", "PREDS_FLOOR"]

#: Predecessor slots of a level step at least (``LanePlan.from_dag``'s default ``pad_preds``): the
#: pipelined task DAGs of one stage count have 2 or 3 predecessors per task (3 with boundary
#: reuse or a wrap segment), and a third slot reading the zero slot changes no maximum (C >= 0),
#: so one compiled program serves both (the main job compiles 8 programs instead of 10, each
#: 1-1.5 s on a 2-core CPU; runs about 10% longer per call, which its ~130 small calls per
#: grid point do not notice).
PREDS_FLOOR = 3

#: Largest number of (row, partner row, offset) triples written out as straight-line slices;
#: more go through a ``fori_loop`` (compile time grows with the unrolled program).
UNROLL_MAX_TRIPLES = 512


def incomparable_pairs(dag: TaskDAG) -> tuple[np.ndarray, np.ndarray]:
    """Pairs (i < j) of tasks on different lanes that no path of the augmented DAG orders
    (host, numpy, O(T^2) bits): the only pairs that can overlap in time, whatever the
    durations. Returns two int arrays (P,) of task indices, i < j."""
    T = dag.T
    anc = np.zeros((T, T), dtype=bool)            # anc[i, j]: j precedes i on a path
    for i in range(T):
        for p in dag.preds(i):
            anc[i] |= anc[p]
            anc[i, p] = True
    ln = np.asarray(dag.lanes())
    inc = ~(anc | anc.T) & (ln[:, None] != ln[None, :])
    ii, jj = np.nonzero(np.triu(inc, 1))
    return ii, jj


def _lane_positions(dag: TaskDAG) -> tuple[np.ndarray, np.ndarray]:
    """(row, position on the row) of every task, int (T,) each: one row per (lane, segment)
    pair in sorted order, positions in dispatch order. Every segment has one task per (region,
    microbatch), so rows of one structure are equally long and the partner offsets regular
    (a lane holding two segments would otherwise drift against the others)."""
    ln = np.asarray(dag.lanes(), dtype=np.int64)
    sg = np.asarray(dag.seg, dtype=np.int64)
    keys = sorted(set(zip(ln.tolist(), sg.tolist())))
    row_of = {k: r for r, k in enumerate(keys)}
    row = np.array([row_of[k] for k in zip(ln.tolist(), sg.tolist())], dtype=np.int64)
    pos = np.zeros(dag.T, dtype=np.int64)
    seen: dict[int, int] = {}
    for i, a in enumerate(row.tolist()):
        pos[i] = seen.get(a, 0)
        seen[a] = pos[i] + 1
    return row, pos


@chex.dataclass(frozen=True, mappable_dataclass=False)
class LevelProgram:
    """The max-plus recurrence level by level, over the home layout (a ``chex.dataclass``).

    Level slots: NL_pad levels x Lw_pad tasks, flat index l * Lw_pad + r; one extra slot at the
    end (index NL_pad * Lw_pad) always holds 0 (the value of a missing predecessor: C >= 0).

    Attributes:
        src: (NL_pad, Lw_pad) int32 home slot of each level slot (pads: H, the home zero slot).
        preds: (NL_pad, Lw_pad, P_pad) int32 level slots of the predecessors (pads: the zero
            slot).
        home: (H,) int32 level slot of each home slot (pads: the zero slot).
    """

    src: jax.Array
    preds: jax.Array
    home: jax.Array


def level_completion_times(prog: LevelProgram, tau: jax.Array,
                           unrolled: bool = False) -> jax.Array:
    """Completion times (µs) of ONE duration vector ``tau`` (H,) in the home layout (pads 0):
    C_i = max(C_j, j in preds(i)) + tau_i (0 without predecessors). Returns C (H,) in the home
    layout (pads 0). One ``lax.scan`` step per DAG level, or (``unrolled``, static) the levels
    written out as one straight-line program (no loop: on a GPU no per-step host round trip;
    slow to compile on a CPU)."""
    NL, Lw = prog.src.shape
    t_lvl = jnp.pad(tau, (0, 1))[prog.src]                       # (NL, Lw)
    buf0 = jnp.zeros(NL * Lw + 1, dtype=tau.dtype)
    if unrolled:
        buf = buf0
        for l in range(NL):
            c = jnp.max(buf[prog.preds[l]], axis=-1) + t_lvl[l]
            buf = jax.lax.dynamic_update_slice(buf, c, (l * Lw,))
        return buf[prog.home]

    def body(buf, x):
        l, t, pr = x
        c = jnp.max(buf[pr], axis=-1) + t
        return jax.lax.dynamic_update_slice(buf, c, (l * Lw,)), None

    buf, _ = jax.lax.scan(body, buf0, (jnp.arange(NL, dtype=jnp.int32), t_lvl, prog.preds),
                          unroll=4)
    return buf[prog.home]


@partial(jax.tree_util.register_dataclass)
@dataclass(frozen=True)
class LanePlan:
    """A task DAG in the row-major home layout (one row per (lane, segment)) (a pytree registered with
    ``jax.tree_util.register_dataclass``: ``chex.dataclass`` has no static fields, and
    ``triples`` and ``lanes`` must be compile-time constants).

    Home slot of task i: row(i) * Q_pad + position(i); H = L_pad * Q_pad slots.

    Attributes:
        task: (H,) int32 task index (dispatch order) of each home slot (pads: T_pad, a zero slot
            of a task-order array padded by one).
        slot: (T_pad,) int32 home slot of each task (pads: H, a zero slot of a home array
            padded by one).
        seg: (H,) int32 segment of each home slot (pads 0). valid: (H,) bool real tasks.
        levels: the ``LevelProgram``.
        masks: (G, Q_pad) float, mask g at q: 1 where row A_g's task q and row B_g's task
            q + s_g are an incomparable pair (on different lanes).
        tri: (G, 3) int32, the triples as an array (the loop form of ``lane_integrals``).
        triples: static tuple of G triples (A, B, s), A != B, sorted.
        lanes: static L_pad, the number of rows.
    """

    task: jax.Array
    slot: jax.Array
    seg: jax.Array
    valid: jax.Array
    levels: LevelProgram
    masks: jax.Array
    tri: jax.Array
    triples: tuple = field(default=(), metadata=dict(static=True))
    lanes: int = field(default=1, metadata=dict(static=True))

    @property
    def grid(self) -> tuple[int, int]:
        """(L_pad, Q_pad)."""
        return self.lanes, int(self.valid.shape[0]) // self.lanes

    @classmethod
    def from_dag(cls, dag: TaskDAG, T_pad: int | None = None, pad_lanes: int | None = None,
                 pad_positions: int | None = None, pad_levels: int | None = None,
                 pad_width: int | None = None, pad_preds: int | None = None,
                 dtype=jnp.float32) -> "LanePlan":
        """Build from a ``TaskDAG`` (host, O(T^2) bits for the incomparable pairs).

        Args:
            dag: the augmented task DAG. T_pad: task slots of task-order arrays (default T).
            pad_lanes, pad_positions, pad_levels, pad_width, pad_preds: L_pad, Q_pad, NL_pad,
                Lw_pad, P_pad (defaults: L, NL, the level width themselves and the
                predecessor count but at least ``PREDS_FLOOR`` (the triples make the compiled
                kernel specific to one lane structure anyway, and every level step reads
                Lw_pad x P_pad rows: padding them to powers of two cost the batch-last kernel
                about 10% on the CPU), a multiple of 8 of Q).

        Raises:
            ValueError: a padding smaller than the DAG needs.

        Memoised per DAG, paddings and dtype (``space.taskdag.per_dag``; plans are immutable).
        """
        return per_dag(dag, ("LanePlan", T_pad, pad_lanes, pad_positions, pad_levels, pad_width,
                             pad_preds, jnp.dtype(dtype).name),
                       lambda: cls._build(dag, T_pad, pad_lanes, pad_positions, pad_levels,
                                          pad_width, pad_preds, dtype))

    @classmethod
    def _build(cls, dag: TaskDAG, T_pad, pad_lanes, pad_positions, pad_levels, pad_width,
               pad_preds, dtype) -> "LanePlan":
        T = dag.T
        Tp = T if T_pad is None else int(T_pad)
        ln, pos = _lane_positions(dag)
        L, Q = int(ln.max()) + 1, int(pos.max()) + 1
        Lp = pad_lanes or L
        Qp = pad_positions or -(-Q // 8) * 8
        lv = np.asarray(dag.levels(), dtype=np.int64)
        NL = int(lv.max()) + 1
        width = np.bincount(lv)
        npred = max((len(dag.preds(i)) for i in range(T)), default=1)
        NLp = pad_levels or NL
        Lwp = pad_width or int(width.max())
        Pp = pad_preds or max(npred, PREDS_FLOOR)
        if Tp < T or Lp < L or Qp < Q or NLp < NL or Lwp < width.max() or Pp < npred:
            raise ValueError(f"LanePlan: paddings (tasks {Tp}, lanes {Lp}, positions {Qp}, "
                             f"levels {NLp}, width {Lwp}, preds {Pp}) must be >= the DAG's "
                             f"({T}, {L}, {Q}, {NL}, {int(width.max())}, {npred})")
        H = Lp * Qp
        home = ln * Qp + pos                                        # (T,)
        task = np.full(H, Tp, dtype=np.int32)
        task[home] = np.arange(T)
        slot = np.full(Tp, H, dtype=np.int32)
        slot[:T] = home
        seg = np.zeros(H, dtype=np.int32)
        seg[home] = dag.seg
        valid = np.zeros(H, dtype=bool)
        valid[home] = True
        # level slots
        zero = NLp * Lwp
        lslot = np.zeros(T, dtype=np.int64)
        fill = np.zeros(NL, dtype=np.int64)
        for i in range(T):
            lslot[i] = lv[i] * Lwp + fill[lv[i]]
            fill[lv[i]] += 1
        src = np.full(NLp * Lwp, H, dtype=np.int32)
        src[lslot] = home
        preds = np.full((NLp * Lwp, Pp), zero, dtype=np.int32)
        for i in range(T):
            ps = dag.preds(i)
            preds[lslot[i], :len(ps)] = lslot[list(ps)]
        lhome = np.full(H, zero, dtype=np.int32)
        lhome[home] = lslot
        prog = LevelProgram(src=to_device(src.reshape(NLp, Lwp)),
                            preds=to_device(preds.reshape(NLp, Lwp, Pp)),
                            home=to_device(lhome))
        # incomparable pairs, seen from each side: lane A's task q meets lane B's task q + s
        ii, jj = incomparable_pairs(dag)
        trip: dict[tuple[int, int, int], np.ndarray] = {}
        for x, y in ((ii, jj), (jj, ii)):
            for u, v in zip(x.tolist(), y.tolist()):
                key = (int(ln[u]), int(ln[v]), int(pos[v] - pos[u]))
                trip.setdefault(key, np.zeros(Qp))[pos[u]] = 1.0
        keys = tuple(sorted(trip))
        masks = np.stack([trip[k] for k in keys]) if keys else np.zeros((0, Qp))
        return cls(task=to_device(task), slot=to_device(slot), seg=to_device(seg),
                   valid=to_device(valid), levels=prog, masks=to_device(masks, dtype),
                   tri=to_device(np.asarray(keys, dtype=np.int32).reshape(-1, 3)),
                   triples=keys, lanes=Lp)

    def pairs_covered(self) -> int:
        """Number of task pairs whose overlap the integrals compute (the incomparable pairs)."""
        return int(np.asarray(self.masks).sum())


def lane_integrals(plan: LanePlan, S: jax.Array, C: jax.Array, rate: jax.Array) -> jax.Array:
    """Integrals inside [S_i, C_i] of the per-task rates of the tasks of OTHER lanes, for ONE
    schedule in the home layout.

    For every triple (A, B, s) of the plan, row A's task q overlaps row B's task q + s by
    max(0, min(C, C') - max(S, S')) µs (times the triple's mask), and receives that overlap
    times the partner's rates; each row sums its triples in one expression of static slices
    (no gather, no scatter). Above ``UNROLL_MAX_TRIPLES`` triples (irregular structures, e.g.
    several streams per stage) a ``fori_loop`` over the triples keeps the program small.

    Args:
        plan: the lane plan. S, C: (H,) start and completion µs (pads 0). rate: (R, H) per-task
            rates (e.g. busy, concurrency, power per µs; pads 0).

    Returns:
        (R, H) integrals (rate x µs) of the other lanes' tasks inside each task's interval.
    """
    L, Q = plan.grid
    R = rate.shape[0]
    S2, C2, r2 = S.reshape(L, Q), C.reshape(L, Q), rate.reshape(R, L, Q)
    M = max((abs(s) for _, _, s in plan.triples), default=0)
    Sp = jnp.pad(S2, ((0, 0), (M, M)))
    Cp = jnp.pad(C2, ((0, 0), (M, M)))
    rp = jnp.pad(r2, ((0, 0), (0, 0), (M, M)))
    if len(plan.triples) > UNROLL_MAX_TRIPLES:
        def step(g, acc):
            a, b, s = plan.tri[g, 0], plan.tri[g, 1], plan.tri[g, 2]
            Ca = jax.lax.dynamic_index_in_dim(C2, a, keepdims=False)
            Sa = jax.lax.dynamic_index_in_dim(S2, a, keepdims=False)
            Cb = jax.lax.dynamic_slice(Cp, (b, M + s), (1, Q))[0]
            Sb = jax.lax.dynamic_slice(Sp, (b, M + s), (1, Q))[0]
            rb = jax.lax.dynamic_slice(rp, (0, b, M + s), (R, 1, Q))
            ov = jnp.maximum(jnp.minimum(Ca, Cb) - jnp.maximum(Sa, Sb), 0.0) * plan.masks[g]
            cur = jax.lax.dynamic_slice(acc, (0, a, 0), (R, 1, Q))
            return jax.lax.dynamic_update_slice(acc, cur + ov[None, None] * rb, (0, a, 0))

        acc = jax.lax.fori_loop(0, len(plan.triples), step, jnp.zeros_like(r2))
        return acc.reshape(R, L * Q)
    out = []
    for A in range(L):
        acc = jnp.zeros((R, Q), rate.dtype)
        for g, (a, b, s) in enumerate(plan.triples):
            if a != A:
                continue
            o = M + s
            ov = jnp.maximum(jnp.minimum(C2[A], Cp[b, o:o + Q])
                             - jnp.maximum(S2[A], Sp[b, o:o + Q]), 0.0) * plan.masks[g]
            acc = acc + ov[None] * rp[:, b, o:o + Q]
        out.append(acc)
    return jnp.stack(out, 1).reshape(R, L * Q)
