"""Cut strategies of Algorithm 1 (docs/method.md §4): rank, choose, refine (local search) and
screen (every legal cut scored by the cheap estimator with successive halving)."""

from __future__ import annotations

import itertools
from typing import NamedTuple, Sequence

import jax.numpy as jnp
import numpy as np

from subgpu_jax.model.checks import pos_int
from subgpu_jax.model.graph import OpGraph
from subgpu_jax.score.evaluator import DagArrays, maxplus_rows
from subgpu_jax.search.exhaustive import dag_key
from subgpu_jax.search.features import CutCandidate, kernel_features, Proposal, propose_partition
from subgpu_jax.search.pairwise import pairwise_line, seeds
from subgpu_jax.search.problem import Problem
from subgpu_jax.space.config import (DEFAULT_POLICY, AllocSpace, binding, check_cut,
                                     check_dispatch_policy, enumerate_cuts)

__all__ = ["RankedCut", "rank_cuts", "choose_cut", "cut_neighbours", "refine_cut",
    "screen_cuts", "legal_layouts"]


class RankedCut(NamedTuple):
    """A layout ranked by the cheap estimator.

    Attributes:
        value: its cheap makespan (µs) after ``pairwise_line`` refinement on the estimator.
        cand: the layout (cut, boundary reuse, origin).
        alloc: int64 (D,) the refined allocation that reached ``value`` (SMs per stage).
    """

    value: float
    cand: CutCandidate
    alloc: np.ndarray


def rank_cuts(problem: Problem, D: int, m: int, policy: str = DEFAULT_POLICY,
              rotation_refine: int = 3, proposal: Proposal | None = None,
              max_rotations: int | None = 16
              ) -> tuple[list[RankedCut], Proposal, int]:
    """Algorithm 1 step 3's evaluation: rank the proposed layouts with the cheap estimator.

    The anchored cut and the ``max_rotations`` rotations / alternative anchors of least feature
    cost (None = all) are each scored at the uniform and service-proportional seeds in one batch
    call; the anchored cut and the ``rotation_refine`` best others are refined with
    ``pairwise_line`` on the cheap estimator.

    Returns:
        ``(ranked, proposal, cheap evaluations)``: ranked = [``RankedCut``] by refined cheap
        makespan ascending, the anchored cut first among equals.

    Raises:
        ValueError: as ``propose_partition`` / ``Problem.evaluator``.
    """
    check_dispatch_policy(policy)
    g = problem.workload.graph(m)
    space = problem.space(D)
    if proposal is None:
        phi, wt = kernel_features(g, problem.hw, pool_sms=max(1, space.budget // D))
        proposal = propose_partition(g, D, phi, wt)
    evals = 0
    scored = []
    cands = (proposal.anchored,) + proposal.rotations[:max_rotations]
    for c in cands:
        ev = problem.evaluator(c.seg_of, D, c.w, m, policy)
        sd = np.stack(list(seeds(ev, space).values()))
        v = ev.makespan(sd)
        evals += len(sd)
        scored.append((float(v.min()), c, sd[int(np.argmin(v))]))
    others = sorted(scored[1:], key=lambda t: t[0])[: max(0, rotation_refine)]
    ranked = []
    for i, (_, c, p0) in enumerate([scored[0]] + others):
        ev = problem.evaluator(c.seg_of, D, c.w, m, policy)
        r = pairwise_line(ev.makespan, p0, space, None, batch_line=True)
        evals += r.evals
        ranked.append((r.value * (1 + 1e-9 * (i > 0)), i, RankedCut(r.value, c, r.alloc)))
    ranked.sort(key=lambda t: (t[0], t[1]))
    return [rc for _, _, rc in ranked], proposal, evals


def choose_cut(problem: Problem, D: int, m: int, policy: str = DEFAULT_POLICY,
               rotation_refine: int = 3, proposal: Proposal | None = None,
               max_rotations: int | None = 16) -> tuple[CutCandidate, Proposal, int]:
    """The layout Algorithm 1 keeps: the best of ``rank_cuts``; a rotation replaces the anchored
    cut only if it improves on it (giving the boundary-reuse layout when it wraps).

    Returns:
        ``(chosen candidate, proposal, cheap evaluations)``.
    """
    ranked, proposal, evals = rank_cuts(problem, D, m, policy, rotation_refine, proposal,
                                        max_rotations)
    return ranked[0].cand, proposal, evals


def cut_neighbours(graph: OpGraph, seg_of: Sequence[int], w: int, D: int
                   ) -> list[tuple[tuple[int, ...], int]]:
    """Legal layouts one kernel away from (seg_of, w): every single-kernel move to another
    segment that keeps the cut legal (predecessor-closed, no empty segment), plus the two
    boundary-reuse toggles: with w = 0, the region's last kernel leaves the last segment to form
    the wrap segment on stage 0 (w = 1); with w = 1 and a one-kernel wrap segment, that kernel
    rejoins the segment before it (w = 0).

    Returns:
        list of (seg_of, w), each in C_{D+w}(G).
    """
    n, K = graph.n, D + w
    seg = list(int(s) for s in seg_of)
    preds = [[] for _ in range(n)]
    succs = [[] for _ in range(n)]
    for u, v in graph.edges:
        preds[v].append(u)
        succs[u].append(v)
    out = []
    counts = np.bincount(seg, minlength=K)
    for i in range(n):
        if counts[seg[i]] == 1:
            continue
        lo = max((seg[u] for u in preds[i]), default=0)
        hi = min((seg[v] for v in succs[i]), default=K - 1)
        for k in range(lo, hi + 1):
            if k != seg[i]:
                c = seg.copy()
                c[i] = k
                out.append((tuple(c), w))
    if w == 0 and D + 1 <= n and D >= 2 and counts[seg[n - 1]] > 1 and seg[n - 1] == K - 1:
        c = seg.copy()
        c[n - 1] = K
        out.append((tuple(c), 1))
    if w == 1 and counts[K - 1] == 1:
        i = seg.index(K - 1)
        c = seg.copy()
        c[i] = K - 2
        out.append((tuple(c), 0))
    legal = []
    for c, ww in out:
        try:
            check_cut(c, n, graph.edges, D + ww)
        except ValueError:
            continue
        legal.append((c, ww))
    return legal


def refine_cut(problem: Problem, cand: CutCandidate, D: int, m: int, policy: str = DEFAULT_POLICY,
               top: int = 3, max_iters: int = 50) -> tuple[RankedCut, int]:
    """Extension (not in Algorithm 1 of docs/method.md §4): first-improvement local search over cuts around
    ``cand`` with the cheap estimator. Each iteration scores every ``cut_neighbours`` layout at
    the current allocation and the seeds (one batch call per layout), refines the ``top`` best
    with ``pairwise_line`` on the cheap estimator, and moves if one improves the current refined
    makespan. No exact-scorer calls.

    Returns:
        ``(RankedCut, cheap evaluations)``: the layout reached, its refined cheap makespan (µs)
        and allocation; the candidate's origin gains a ``+ls<k>`` suffix when k moves were
        made.
    """
    g = problem.workload.graph(m)
    space = problem.space(D)
    evals = 0

    def refined(seg, w, starts):
        nonlocal evals
        ev = problem.evaluator(seg, D, w, m, policy)
        v = ev.makespan(starts)
        evals += len(starts)
        r = pairwise_line(ev.makespan, starts[int(np.argmin(v))], space, None, batch_line=True)
        evals += r.evals
        return r

    ev0 = problem.evaluator(cand.seg_of, D, cand.w, m, policy)
    cur = refined(cand.seg_of, cand.w, np.stack(list(seeds(ev0, space).values())))
    seg, w, moves = cand.seg_of, cand.w, 0
    for _ in range(max_iters):
        scored = []
        for c, ww in cut_neighbours(g, seg, w, D):
            ev = problem.evaluator(c, D, ww, m, policy)
            starts = np.stack([cur.alloc] + list(seeds(ev, space).values()))
            v = ev.makespan(starts)
            evals += len(starts)
            scored.append((float(v.min()), c, ww, starts))
        scored.sort(key=lambda t: t[0])
        best = None
        for _, c, ww, starts in scored[:top]:
            r = refined(c, ww, starts)
            if r.value < cur.value * (1 - 1e-9) and (best is None or r.value < best[0].value):
                best = (r, c, ww)
        if best is None:
            break
        cur, seg, w = best
        moves += 1
    if moves:
        cand = CutCandidate(tuple(seg), w, cand.feature_cost, f"{cand.origin}+ls{moves}")
    return RankedCut(cur.value, cand, cur.alloc), evals


def legal_layouts(graph: OpGraph, D: int, limit: int
                  ) -> list[tuple[tuple[int, ...], int]] | None:
    """Every legal layout (seg_of, w): C_D with w = 0 and, when D >= 2 and D + 1 <= n, C_{D+1}
    with w = 1; None when there are more than ``limit`` (the enumeration stops early)."""
    n = graph.n
    gens = [((c, 0) for c in enumerate_cuts(n, graph.edges, D))]
    if D >= 2 and D + 1 <= n:
        gens.append(((c, 1) for c in enumerate_cuts(n, graph.edges, D + 1)))
    out = list(itertools.islice(itertools.chain(*gens), limit + 1))
    return None if len(out) > limit else out


def _layout_groups(problem: Problem, layouts: Sequence[tuple[tuple[int, ...], int]], D: int,
                   m: int, policy: str) -> tuple[list, int, int]:
    """Group layouts whose task DAGs coincide (same w and segment-level edges, as
    ``exhaustive_search``); returns ([(w, layout indices, TaskDAG, segment tables float64
    (C, K, N+1) µs)], T_pad, P_pad) with one padding for all groups."""
    from subgpu_jax.space.taskdag import bucket, build_task_dag

    g = problem.workload.graph(m)
    table = problem.table(m)
    groups: dict[tuple, list[int]] = {}
    for i, (c, w) in enumerate(layouts):
        groups.setdefault((w,) + dag_key(c, g.edges, g.cross_edges), []).append(i)
    work, T_max, P_max = [], 1, 1
    for key, idx in groups.items():
        w = key[0]
        K = D + w
        dag = build_task_dag(g.n, g.edges, g.cross_edges, layouts[idx[0]][0], D, w,
                             g.num_regions, m, policy)
        T_max = max(T_max, dag.T)
        P_max = max(P_max, max((len(dag.preds(i)) for i in range(dag.T)), default=1))
        C = np.asarray([layouts[i][0] for i in idx])                        # (C, n)
        onehot = (C[:, None, :] == np.arange(K)[None, :, None]).astype(float)
        work.append((w, np.asarray(idx), dag, np.einsum("ckn,nj->ckj", onehot, table)))
    return work, bucket(T_max, 8), bucket(P_max, 2)


def _score_group(w: int, dag, segtab: np.ndarray, A: np.ndarray, D: int, T_pad: int,
                 P_pad: int, chunk: int) -> np.ndarray:
    """Cheap hard makespans (C, R) µs of allocations A int (C, R, D) of the C layouts of one
    task-DAG group with segment tables ``segtab`` (C, K, N+1): durations built on the host
    (float32, as ``Evaluator``), scored by the vmapped max-plus kernel in padded chunks."""
    from subgpu_jax.space.taskdag import bucket

    K = D + w
    C, R = A.shape[:2]
    stage = np.array([binding(k, K, w) for k in range(K)])
    st32 = segtab.astype(np.float32)
    sd = np.take_along_axis(st32, A[:, :, stage].transpose(0, 2, 1), 2)    # (C, K, R)
    sd = sd.transpose(0, 2, 1)                                              # (C, R, K)
    taus = np.zeros((C * R, T_pad), dtype=np.float32)
    taus[:, : dag.T] = sd[:, :, np.asarray(dag.seg)].reshape(-1, dag.T)
    arrs = DagArrays.from_dag(dag, pad_tasks=T_pad, pad_preds=P_pad)
    v = np.empty(len(taus))
    rows = min(chunk, bucket(len(taus), 256))
    for s in range(0, len(taus), rows):
        part = taus[s:s + rows]
        pad = np.concatenate([part, np.repeat(part[-1:], rows - len(part), 0)])
        v[s:s + len(part)] = np.asarray(maxplus_rows(arrs, jnp.asarray(pad)))[: len(part)]
    return v.reshape(C, R)


def _group_seeds(segtab: np.ndarray, w: int, space: AllocSpace) -> np.ndarray:
    """The screening seeds of each layout of a group with segment tables ``segtab``
    (C, K, N+1) µs: uniform and service-proportional (as ``pairwise.seeds``), and balanced (each of the
    U free quanta in turn goes to the stage whose segments are slowest on its current
    allocation: the greedy min-max of the stage times, which follows each stage's own
    SM-scaling curve). Returns int64 (C, 3, D)."""
    D = space.D
    C = len(segtab)
    K = D + w
    stage = np.array([binding(k, K, w) for k in range(K)])
    col = min(space.budget, segtab.shape[2] - 1)
    st_time = np.zeros((D, C, segtab.shape[2]))                            # (D, C, N+1)
    np.add.at(st_time, stage, segtab.transpose(1, 0, 2))
    service = st_time[:, :, col].T                                         # (C, D)
    tot = service.sum(1, keepdims=True)
    free = space.budget - D * space.minimum
    prop = space.round(space.minimum + service / np.where(tot > 0, tot, 1.0) * free)
    prop[tot[:, 0] <= 0] = space.uniform()
    bal = np.full((C, D), space.minimum, dtype=np.int64)
    rows = np.arange(C)
    st_time = st_time.transpose(1, 0, 2)                                   # (C, D, N+1)
    for _ in range(space.free_quanta):
        cur = np.take_along_axis(st_time, bal[:, :, None], 2)[:, :, 0]
        bal[rows, np.argmax(cur, 1)] += space.quantum
    return np.stack([np.broadcast_to(space.uniform(), prop.shape), prop, bal], 1)


def _line_moves(A: np.ndarray, space: AllocSpace, max_quanta: int | None = None) -> np.ndarray:
    """The geometric line moves of allocations A (C, D): for every (donor d, receiver r) pair,
    z = 1, 2, 4, ... quanta (powers of two, z <= min(U, max_quanta)) moved from d to r ->
    (C, D(D-1)(floor(log2 min(U, max_quanta)) + 1), D); a move whose
    donor would drop below the minimum is replaced by the allocation itself."""
    D, g = space.D, space.quantum
    top_z = space.free_quanta if max_quanta is None else min(space.free_quanta, max_quanta)
    zs = [1 << e for e in range(max(1, top_z).bit_length())]
    moves = [(d, r, z) for d in range(D) for r in range(D) if d != r for z in zs]
    M = np.repeat(A[:, None, :], len(moves), 1).copy()
    for j, (d, r, z) in enumerate(moves):
        ok = A[:, d] - z * g >= space.minimum
        M[ok, j, d] -= z * g
        M[ok, j, r] += z * g
    return M


def screen_cuts(problem: Problem, D: int, m: int, policy: str = DEFAULT_POLICY,
                max_cuts: int = 20_000, top: int = 8, proposal: Proposal | None = None,
                chunk: int = 8192, eta: int = 4, max_step: int | None = 1
                ) -> tuple[list[RankedCut], int] | None:
    """Extension (not in Algorithm 1 of docs/method.md §4): cheap cut screening by successive halving.

    When the legal layouts (cuts of C_D with w = 0 and, for D >= 2, of C_{D+1} with w = 1)
    number at most ``max_cuts``:

    1. score EVERY layout with the cheap estimator at three seed allocations: the design's
       uniform and service-proportional seeds, and a balanced seed (greedy min-max of the stage
       times, ``_group_seeds``) -- 3 evaluations per layout;
    2. successive halving: keep the best 1/``eta`` of the surviving layouts (at least ``top``),
       give each one steepest-descent step from its current best allocation over the moves of
       Algorithm 2 (every (donor, receiver) pair, z = 1, 2, 4, ... <= ``max_step`` quanta; by
       default one quantum), all scored together, and repeat until ``top`` layouts remain;
    3. refine the ``top`` survivors with ``pairwise_line`` on the cheap estimator (Algorithm 2,
       all moves of a pass in one call) and rank them by the refined makespan.

    Steps 1-2 build task durations on the host and score every layout group sharing one task DAG
    (same w and segment-level edges) in one vmapped max-plus call (``evaluator`` kernel, one
    padding per call of this function, so few compilations). Each layout gets 3 allocations
    plus M = D(D-1)(floor(log2 min(U, max_step)) + 1) per round it survives (U free quanta;
    M = D(D-1) by default), so the cost is about (3 + M/(eta-1)) C cheap evaluations for C
    layouts, independent of |P_H^(D)| = binomial(U+D-1, D-1) (plus the ``top`` refinements):
    a heuristic over cuts and allocations, not the
    exhaustive (cut, allocation) search. No exact-scorer calls.

    Args:
        problem: workload and GPU; D: stages (>= 1); m: microbatches; policy: dispatch order.
        max_cuts: screening budget; more legal layouts than this returns None.
        top: layouts refined (>= 1).
        proposal: used only to label screened layouts that the DP proposal also produced with
            their proposal origin (others get origin ``"screen"``).
        chunk: max rows (allocations) per compiled scoring call.
        eta: halving factor (>= 2): each round keeps 1/eta of the layouts.
        max_step: largest move of a halving descent step, in quanta (>= 1; None = U).

    Returns:
        ``(ranked, cheap evaluations)`` with ranked = [``RankedCut``] by refined cheap makespan
        ascending (feature_cost is NaN for layouts not in ``proposal``), or None
        when the cut space exceeds ``max_cuts``.

    Raises:
        ValueError: unknown policy, D outside 1..n, m not dividing the batch, a nonpositive
            ``max_cuts``/``top``/``chunk``/``max_step``, ``eta`` < 2, an empty allocation
            space.
    """
    check_dispatch_policy(policy)
    max_cuts, top = pos_int(max_cuts, "max_cuts"), pos_int(top, "top")
    chunk, eta = pos_int(chunk, "chunk"), pos_int(eta, "eta", 2)
    if max_step is not None:
        max_step = pos_int(max_step, "max_step")
    g = problem.workload.graph(m)
    D = pos_int(D, "D")
    if D > g.n:
        raise ValueError(f"D must be in 1..{g.n} (the region has {g.n} kernels), got {D}")
    space = problem.space(D)
    layouts = legal_layouts(g, D, max_cuts)
    if layouts is None:
        return None
    work, T_pad, P_pad = _layout_groups(problem, layouts, D, m, policy)
    vals = np.empty(len(layouts))
    cur = np.empty((len(layouts), D), dtype=np.int64)
    evals = 0
    for w, idx, dag, segtab in work:  # round 0: every layout at its three seeds
        A = _group_seeds(segtab, w, space)
        v = _score_group(w, dag, segtab, A, D, T_pad, P_pad, chunk)
        evals += v.size
        j = np.argmin(v, 1)
        vals[idx], cur[idx] = v[np.arange(len(idx)), j], A[np.arange(len(idx)), j]
    alive = np.arange(len(layouts))
    while len(alive) > top and D > 1:  # successive halving with one descent step per round
        alive = alive[np.argsort(vals[alive], kind="stable")[: max(top, -(-len(alive) // eta))]]
        keep = set(alive.tolist())
        for w, idx, dag, segtab in work:
            sel = np.array([t for t, i in enumerate(idx) if i in keep], dtype=np.int64)
            if len(sel) == 0:
                continue
            ii = idx[sel]
            M = _line_moves(cur[ii], space, max_step)
            v = _score_group(w, dag, segtab[sel], M, D, T_pad, P_pad, chunk)
            evals += v.size
            j = np.argmin(v, 1)
            better = v[np.arange(len(ii)), j] < vals[ii]
            vals[ii[better]] = v[np.arange(len(ii)), j][better]
            cur[ii[better]] = M[np.arange(len(ii)), j][better]
    known = {} if proposal is None else {(c.seg_of, c.w): c for c in proposal.candidates}
    ranked = []
    for i in alive[np.argsort(vals[alive], kind="stable")][:top]:
        c, w = layouts[int(i)]
        ev = problem.evaluator(c, D, w, m, policy)
        r = pairwise_line(ev.makespan, cur[int(i)], space, None, batch_line=True)
        evals += r.evals
        cand = known.get((tuple(c), w), CutCandidate(tuple(c), w, float("nan"), "screen"))
        ranked.append(RankedCut(r.value, cand, r.alloc))
    ranked.sort(key=lambda t: t.value)
    return ranked, evals
