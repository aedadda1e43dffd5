"""Algorithm 2 (docs/method.md §4): the pairwise-line refinement of an SM allocation, and the
allocation search of one (cut, D, w, m, policy) that seeds and polishes it with the exact scorer."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from subgpu_jax.score.evaluator import Evaluator
from subgpu_jax.search.problem import _memo, Problem
from subgpu_jax.space.config import AllocSpace, Config

__all__ = ["LineResult", "pairwise_line", "AllocResult", "allocate_pairwise"]


@dataclass(frozen=True)
class LineResult:
    """Result of ``pairwise_line``.

    Attributes:
        alloc: int64 (D,) final allocation; value: its objective (µs).
        start_value: objective of the start.
        passes: passes that applied a move; evals: objective rows requested (batch rows count
            one each; with a memoised scorer repeated rows are free).
        history: ((donor, receiver, quanta, value), ...) of the applied moves.
    """

    alloc: np.ndarray
    value: float
    start_value: float
    passes: int
    evals: int
    history: tuple[tuple[int, int, int, float], ...] = ()


def pairwise_line(f: Callable[[np.ndarray], np.ndarray], p0: Sequence[int], space: AllocSpace,
                  max_passes: int | None = None, batch_line: bool = False,
                  rtol: float = 1e-6) -> LineResult:
    """Algorithm 2: pairwise-line refinement of an allocation.

    Each pass scores every legal one-quantum move p^{d->r}[1] in ONE call ``f(moves)``, picks
    the best, and stops if it does not improve f (by more than ``rtol`` relative). Otherwise it
    line-searches along that (donor d, receiver r) direction: starting from z = 1 quantum it
    doubles z while f improves; at the first failure (or the donor's limit) it halves the step,
    trying z + step and keeping it when it improves, until the step is below one quantum; the
    move of z quanta in total is applied and the next pass starts.

    Args:
        f: objective, int (B, D) allocations -> (B,) values (µs), lower is better.
        p0: start allocation (D,), feasible.
        space: the allocation space.
        max_passes: pass limit L (None = until no move improves).
        batch_line: score every point of the line (z = 2..z_max) in one extra call and replay the
            doubling/halving on those values (same decisions; use with a vectorised estimator).
            False scores the line points one by one (use with a memoised exact scorer).
        rtol: relative improvement needed to accept a move.

    Returns:
        ``LineResult``; never worse than the start and always in ``space``.

    Raises:
        ValueError: ``p0`` infeasible, ``max_passes`` < 0, or ``f`` returning the wrong shape.
    """
    p = np.asarray(p0, dtype=np.int64).copy()
    if p.shape != (space.D,) or not space.contains(p):
        raise ValueError(f"p0 must be a feasible allocation of {space}, got {p.tolist()}")
    if max_passes is not None and (isinstance(max_passes, bool) or max_passes < 0):
        raise ValueError(f"max_passes must be None or >= 0, got {max_passes!r}")
    evals = 0

    def F(a: np.ndarray) -> np.ndarray:
        nonlocal evals
        a = np.atleast_2d(a)
        v = np.asarray(f(a), dtype=float).reshape(-1)
        if v.shape != (a.shape[0],):
            raise ValueError(f"objective returned shape {v.shape} for {a.shape[0]} allocations")
        evals += a.shape[0]
        return v

    fp = float(F(p)[0])
    start = fp
    passes = 0
    hist = []
    g = space.quantum

    def better(v: float, ref: float) -> bool:
        return v < ref - rtol * abs(ref)

    while max_passes is None or passes < max_passes:
        cand, pairs = space.moves(p)
        if len(cand) == 0:
            break
        vals = F(cand)
        j = int(np.argmin(vals))
        if not better(float(vals[j]), fp):
            break
        d, r = int(pairs[j, 0]), int(pairs[j, 1])
        zmax = (int(p[d]) - space.minimum) // g
        direction = np.zeros(space.D, dtype=np.int64)
        direction[d], direction[r] = -g, g
        table: dict[int, float] = {1: float(vals[j])}
        if batch_line and zmax >= 2:
            zs = np.arange(2, zmax + 1)
            table.update(zip(zs.tolist(), F(p[None] + zs[:, None] * direction[None]).tolist()))

        def val(z: int) -> float:
            if z not in table:
                table[z] = float(F(p + z * direction)[0])
            return table[z]

        z, fz = 1, table[1]
        hi = zmax + 1
        while 2 * z <= zmax:  # doubling
            v = val(2 * z)
            if better(v, fz):
                z, fz = 2 * z, v
            else:
                hi = 2 * z
                break
        step = (hi - z) // 2
        while step >= 1:  # halving
            if z + step <= zmax:
                v = val(z + step)
                if better(v, fz):
                    z, fz = z + step, v
            step //= 2
        p = p + z * direction
        fp = fz
        passes += 1
        hist.append((d, r, z, fz))
    return LineResult(alloc=p, value=fp, start_value=start, passes=passes, evals=evals,
                      history=tuple(hist))


@dataclass(frozen=True)
class AllocResult:
    """An allocation search on one (cut, D, w, m, policy).

    Attributes:
        alloc: int64 (D,) best allocation; makespan_us: its exact makespan (µs).
        exact_calls: distinct exact-scorer calls this search made (memo misses).
        cheap_evals: allocations scored by the cheap estimator.
        seeds: {name: (seed alloc, exact makespan of the polished result)}.
        seconds: wall time.
    """

    alloc: np.ndarray
    makespan_us: float
    exact_calls: int
    cheap_evals: int
    seeds: Mapping[str, Any] = field(default_factory=dict)
    seconds: float = 0.0


def _seeds(ev: Evaluator, space: AllocSpace) -> dict[str, np.ndarray]:
    """Uniform and service-proportional seeds. A stage's service is the time its segments take
    on the whole budget (µs), i.e. proportional to its work."""
    st = np.asarray(ev.seg_stage)[: ev.K]
    service = np.zeros(space.D)
    for k in range(ev.K):
        service[st[k]] += ev.seg_table_np[k, min(space.budget, ev.seg_table_np.shape[1] - 1)]
    return {"uniform": space.uniform(), "proportional": space.proportional(service)}


def allocate_pairwise(problem: Problem, seg_of: Sequence[int], D: int, w: int, m: int,
                      policy: str = "wavefront", exact: Callable[[Config], float] | None = None,
                      L_est: int | None = None, L_sim: int | None = 2) -> AllocResult:
    """Algorithm 1 steps 4-5 for one structure: seeds, cheap refinement, exact polish.

    For each seed p0 (uniform, service-proportional): refine with the cheap estimator by
    ``pairwise_line`` (pass limit ``L_est``, all moves of a pass in one vmapped call, the line
    scored in one more), then polish both p0 and the refined one with the exact scorer (pass limit
    ``L_sim``); keep the best; polish it once more (``L_sim``).

    Args:
        problem: workload and GPU; seg_of, D, w, m, policy: the structure.
        exact: exact scorer ``Config -> µs`` (default ``EvaluatorExact``), memoised.
        L_est: pass limit of the cheap refinement (None = unlimited).
        L_sim: pass limit of each exact polish (None = unlimited).

    Returns:
        ``AllocResult`` (exact calls counted as new memo entries).

    Raises:
        ValueError: unknown policy, empty allocation space, illegal structure.
    """
    t0 = time.perf_counter()
    memo = _memo(problem, exact)
    calls0 = memo.calls
    space = problem.space(D)
    ev = problem.evaluator(seg_of, D, w, m, policy)
    f_exact = problem.exact_batch(memo, seg_of, D, w, m, policy)
    cheap = 0
    best, best_v, seeds = None, np.inf, {}
    for name, p0 in _seeds(ev, space).items():
        ref = pairwise_line(ev.makespan, p0, space, L_est, batch_line=True)
        cheap += ref.evals
        local = None
        for q in (p0, ref.alloc):
            pol = pairwise_line(f_exact, q, space, L_sim)
            if local is None or pol.value < local.value:
                local = pol
        seeds[name] = (p0.tolist(), local.value)
        if local.value < best_v:
            best, best_v = local.alloc, local.value
    final = pairwise_line(f_exact, best, space, L_sim)
    return AllocResult(alloc=final.alloc, makespan_us=final.value,
                       exact_calls=memo.calls - calls0, cheap_evals=cheap, seeds=seeds,
                       seconds=time.perf_counter() - t0)
