"""Exhaustive search for small instances: every allocation of every legal cut, scored by the
vectorised evaluator (``exhaustive_search``, the optimum of the estimator's model) or by any
exact scorer such as the event simulator (``exhaustive_exact``, the optimum under that scorer);
the oracles of the heuristic-gap experiment."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import jax.numpy as jnp
import numpy as np

from subgpu_jax.model.checks import pos_int
from subgpu_jax.score.evaluator import DagArrays, maxplus_rows
from subgpu_jax.score.evaluator import Evaluator
from subgpu_jax.search.problem import Problem
from subgpu_jax.space.config import (DEFAULT_POLICY, AllocSpace, binding, check_dispatch_policy,
                                     Config, enumerate_cuts)

__all__ = ["ExhaustiveResult", "exhaustive_allocations", "exhaustive_search",
           "count_configs", "exhaustive_exact", "dag_key"]


@dataclass(frozen=True)
class ExhaustiveResult:
    """Output of ``exhaustive_search``.

    Attributes:
        best: the optimal ``Config``; makespan_us: its makespan (µs).
        per_m: {m: (best Config for that m, makespan µs)}.
        evaluated: configurations scored.
    """

    best: Config
    makespan_us: float
    per_m: Mapping[int, tuple[Config, float]]
    evaluated: int


def exhaustive_allocations(ev: Evaluator, space: AllocSpace, chunk: int = 65536
                           ) -> tuple[np.ndarray, float, int]:
    """Best allocation of one structure by scoring all of P_H^(D) with the cheap estimator,
    chunk by chunk (memory bounded by ``chunk`` rows; ``Evaluator.makespan`` further chunks).

    Returns:
        ``(alloc int64 (D,), makespan µs, count scored)``; ties go to the first in enumeration.
    """
    best, best_v, cnt = None, np.inf, 0
    for A in space.iter_all(chunk):
        v = ev.makespan(A)
        cnt += len(A)
        j = int(np.argmin(v))
        if v[j] < best_v:
            best, best_v = A[j].copy(), float(v[j])
    return best, best_v, cnt


#: Hard makespans of explicit task durations (B, T_pad) on one padded DAG (the evaluator's
#: public single-example max-plus kernel, vmapped here).


def dag_key(seg_of: Sequence[int], edges, cross_edges) -> tuple:
    """What the task DAG of a cut depends on besides (D, w, L, m, policy): the segment-level
    edges inside a region and across regions, ``(frozenset, frozenset)`` of segment pairs (cuts
    with equal keys share one task DAG)."""
    se = frozenset((seg_of[u], seg_of[v]) for u, v in edges if seg_of[u] != seg_of[v])
    ce = frozenset((seg_of[u], seg_of[v]) for u, v in cross_edges)
    return se, ce


def _is_plain_chain(g) -> bool:
    """Edges exactly i -> i+1 and the one cross edge n-1 -> 0: every contiguous cut has the
    same task DAG (the chain mode of ``score.massive``)."""
    return (set(map(tuple, g.edges)) == {(i, i + 1) for i in range(g.n - 1)}
            and [tuple(e) for e in g.cross_edges] == [(g.n - 1, 0)])


def _exhaustive_chain(problem: Problem, D: int, ms: Sequence[int], policy: str,
                      ws: Sequence[int], space: AllocSpace) -> ExhaustiveResult:
    """``exhaustive_search`` of a plain chain through the streaming scorer
    (``score.massive.exhaustive_chain``: candidates unranked on the device, top-1 kept; ties go
    to the lowest w, cut rank and allocation rank, i.e. the first in enumeration order)."""
    from subgpu_jax.score.massive import exhaustive_chain

    per_m: dict[int, tuple[Config, float]] = {}
    cnt = 0
    for m in ms:
        g = problem.workload.graph(m)
        r = exhaustive_chain(problem.table(m), g.num_regions, m, D, space.budget, space.quantum,
                             space.minimum, ws=ws, policy=policy, topk=1)
        cnt += r["evaluated"]
        b = r["best"]
        v = float(b["makespan_us"])
        if m not in per_m or v < per_m[m][1]:
            per_m[m] = (problem.config(b["seg_of"], D, b["w"], b["alloc"], m, policy), v)
    m_best = min(per_m, key=lambda k: per_m[k][1])
    return ExhaustiveResult(best=per_m[m_best][0], makespan_us=per_m[m_best][1], per_m=per_m,
                            evaluated=cnt)


def exhaustive_search(problem: Problem, D: int, microbatch_counts: Sequence[int],
                      policy: str = DEFAULT_POLICY, ws: Sequence[int] = (0, 1),
                      max_configs: int = 50_000_000, chunk: int = 8192) -> ExhaustiveResult:
    """The exact optimum of the cheap estimator's model for one D: every legal cut of C_{D+w}
    for each w in ``ws``, every allocation of P_H^(D), every microbatch count.

    A plain chain (edges i -> i+1, cross edge n-1 -> 0) goes through the exhaustive streaming
    scorer (``score.massive.exhaustive_chain``). Otherwise, cuts whose augmented task DAGs
    coincide (same segment-level edges) are scored together: the task durations of every (cut, allocation) pair of a group are
    built on the host from the segment duration tables, exactly as ``Evaluator`` builds them
    (float32), and scored by the evaluator's vmapped max-plus kernel
    (``evaluator.makespan_of_durations``) in chunks of ``chunk`` rows, so memory stays bounded
    by chunk x tasks (plus one allocation chunk per group).

    Args:
        problem: workload and GPU; D: stages (>= 1; D = 1 means w = 0 only).
        microbatch_counts: m values (each must divide the batch).
        policy: dispatch order; ws: boundary-reuse values to include.
        max_configs: refuse larger spaces (ValueError) instead of running for hours.
        chunk: rows (configurations) per compiled call.

    Returns:
        ``ExhaustiveResult`` (makespans of the cheap estimator's static model, µs; ties go to the
        first configuration in enumeration order).

    Raises:
        ValueError: unknown policy, empty allocation space, m not dividing the batch, w not in
            {0, 1}, no legal cut, or more than ``max_configs`` configurations.
    """
    from subgpu_jax.space.taskdag import bucket, build_task_dag

    check_dispatch_policy(policy)
    space = problem.space(D)
    chunk = pos_int(chunk, "chunk")
    for w in ws:
        if w not in (0, 1):
            raise ValueError(f"ws entries must be 0 or 1, got {w!r}")
    total = 0
    plan = []
    for m in microbatch_counts:
        g = problem.workload.graph(m)
        for w in ws:
            if D + w > g.n or (D == 1 and w == 1):
                continue
            cuts = list(enumerate_cuts(g.n, g.edges, D + w))
            plan.append((m, w, cuts))
            total += len(cuts) * space.size
    if total == 0:
        raise ValueError(f"exhaustive_search: no legal cut for D={D}")
    if total > max_configs:
        raise ValueError(f"exhaustive_search: {total} configurations exceed max_configs="
                         f"{max_configs}")
    if all(_is_plain_chain(problem.workload.graph(m)) for m, _, _ in plan):
        return _exhaustive_chain(problem, D, [m for m in microbatch_counts
                                              if any(p[0] == m for p in plan)],
                                 policy, sorted({w for _, w, _ in plan}), space)
    # one padding for every group of this search, so the scoring kernel compiles once per row
    # bucket (tasks padded to the largest DAG, predecessors to the largest in-degree)
    work = []
    T_max, P_max = 1, 1
    for m, w, cuts in plan:
        g = problem.workload.graph(m)
        groups: dict[tuple, list[tuple[int, ...]]] = {}
        for c in cuts:
            groups.setdefault(dag_key(c, g.edges, g.cross_edges), []).append(c)
        for cs in groups.values():
            dag = build_task_dag(g.n, g.edges, g.cross_edges, cs[0], D, w, g.num_regions, m,
                                 policy)
            T_max = max(T_max, dag.T)
            P_max = max(P_max, max((len(dag.preds(i)) for i in range(dag.T)), default=1))
            work.append((m, w, cs, dag))
    T_pad, P_pad = bucket(T_max, 8), bucket(P_max, 2)
    per_m: dict[int, tuple[Config, float]] = {}
    cnt = 0
    for m, w, cs, dag in work:
        K = D + w
        table = problem.table(m)
        stage = np.array([binding(k, K, w) for k in range(K)])
        arrs = DagArrays.from_dag(dag, pad_tasks=T_pad, pad_preds=P_pad)
        C = np.asarray(cs)                                           # (C, n)
        onehot = (C[:, None, :] == np.arange(K)[None, :, None]).astype(float)
        segtab = np.einsum("ckn,nj->ckj", onehot, table).astype(np.float32)   # (C, K, N+1)
        task_seg = np.asarray(dag.seg)
        for A in space.iter_all(max(1, chunk // len(cs))):
            sd = segtab[:, np.arange(K)[None, :], A[:, stage]]       # (C, a, K) µs
            taus = np.zeros((len(cs) * len(A), T_pad), dtype=np.float32)
            taus[:, : dag.T] = sd[:, :, task_seg].reshape(-1, dag.T)
            vals = np.empty(len(taus))
            rows = min(chunk, bucket(len(taus), 256))
            for s in range(0, len(taus), rows):
                part = taus[s:s + rows]
                pad = np.concatenate([part, np.repeat(part[-1:], rows - len(part), 0)])
                vals[s:s + len(part)] = np.asarray(maxplus_rows(arrs, jnp.asarray(pad)))[
                    : len(part)]
            cnt += len(vals)
            j = int(np.argmin(vals))
            v = float(vals[j])
            if m not in per_m or v < per_m[m][1]:
                ci, ai = divmod(j, len(A))
                per_m[m] = (problem.config(cs[ci], D, w, A[ai], m, policy), v)
    m_best = min(per_m, key=lambda k: per_m[k][1])
    return ExhaustiveResult(best=per_m[m_best][0], makespan_us=per_m[m_best][1], per_m=per_m,
                            evaluated=cnt)


def _exact_plan(problem: Problem, D: int, microbatch_counts: Sequence[int], ws: Sequence[int]
                ) -> list[tuple[int, int, list[tuple[int, ...]]]]:
    """[(m, w, legal cuts of C_{D+w})] of an exhaustive search (w = 1 needs D >= 2 and
    D + 1 <= n)."""
    plan = []
    for m in microbatch_counts:
        g = problem.workload.graph(m)
        for w in ws:
            if w not in (0, 1):
                raise ValueError(f"ws entries must be 0 or 1, got {w!r}")
            if D + w > g.n or (D == 1 and w == 1):
                continue
            plan.append((int(m), int(w), list(enumerate_cuts(g.n, g.edges, D + w))))
    return plan


def count_configs(problem: Problem, D: int, microbatch_counts: Sequence[int],
                  ws: Sequence[int] = (0, 1)) -> int:
    """Configurations an exhaustive search of one D enumerates: legal cuts of C_{D+w} for each
    w in ``ws`` and m, times |P_H^(D)| allocations.

    Raises:
        ValueError: empty allocation space, m not dividing the batch, w not in {0, 1}.
    """
    space = problem.space(D)
    return sum(len(cuts) for _, _, cuts in _exact_plan(problem, D, microbatch_counts, ws)) \
        * space.size


def exhaustive_exact(problem: Problem, D: int, microbatch_counts: Sequence[int],
                     exact: Callable[[Config], float], policy: str = DEFAULT_POLICY,
                     ws: Sequence[int] = (0, 1), max_configs: int = 20_000
                     ) -> ExhaustiveResult:
    """The optimum of one D under an exact scorer (e.g. ``TimerExact`` over the event
    simulator's ``EventTimer``): every legal cut of C_{D+w} for each w in ``ws``, every
    allocation of P_H^(D), every microbatch count, each scored by one ``exact`` call (memoise ``exact`` with
    ``MemoScorer`` to share the calls with later searches). The same enumeration as
    ``exhaustive_search``, one configuration at a time, so it suits small instances only.

    Args:
        problem: workload and GPU; D: stages (>= 1).
        microbatch_counts: m values (each must divide the batch).
        exact: ``Config -> makespan µs``.
        policy: dispatch order; ws: boundary-reuse values to include.
        max_configs: refuse larger spaces (ValueError) instead of running for hours.

    Returns:
        ``ExhaustiveResult`` (makespans of ``exact``, µs; ties go to the first configuration
        in enumeration order).

    Raises:
        ValueError: unknown policy, empty allocation space, m not dividing the batch, w not in
            {0, 1}, no legal cut, more than ``max_configs`` configurations, or ``exact`` not
            callable.
    """
    check_dispatch_policy(policy)
    if not callable(exact):
        raise ValueError(f"exact must be a callable Config -> makespan µs, got {exact!r}")
    max_configs = pos_int(max_configs, "max_configs")
    space = problem.space(D)
    plan = _exact_plan(problem, D, microbatch_counts, ws)
    total = sum(len(cuts) for _, _, cuts in plan) * space.size
    if total == 0:
        raise ValueError(f"exhaustive_exact: no legal cut for D={D}")
    if total > max_configs:
        raise ValueError(f"exhaustive_exact: {total} configurations exceed max_configs="
                         f"{max_configs}")
    allocs = np.concatenate(list(space.iter_all()))
    per_m: dict[int, tuple[Config, float]] = {}
    for m, w, cuts in plan:
        for c in cuts:
            for a in allocs:
                cfg = problem.config(c, D, w, a, m, policy)
                v = float(exact(cfg))
                if m not in per_m or v < per_m[m][1]:
                    per_m[m] = (cfg, v)
    m_best = min(per_m, key=lambda k: per_m[k][1])
    return ExhaustiveResult(best=per_m[m_best][0], makespan_us=per_m[m_best][1], per_m=per_m,
                            evaluated=total)
