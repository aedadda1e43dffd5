"""Algorithm 2 (docs/method.md §4): the pairwise-line refinement of an SM allocation, and the
allocation search of one (cut, D, w, m, policy) that seeds and polishes it with the exact scorer."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from subgpu_jax.score.protocol import StageService
from subgpu_jax.search.problem import memoised, Problem
from subgpu_jax.space.config import DEFAULT_POLICY, AllocSpace, Config

__all__ = ["LineResult", "line_search", "pairwise_line", "AllocResult", "allocate_pairwise",
           "seeds", "TIE_RTOL", "improves", "first_least"]

#: Objective values within this relative distance of each other are ties, kept in the order
#: they were found: the exact scorer's engines agree to float rounding (the event simulator
#: with and without its periodic fast-forward, 1.9e-13; its compiled engine, below 3e-11 in the
#: tests), and a tie broken by that rounding sent an allocation search down another path (one
#: of 25 GPT-OSS 120B frontier points ended 0.59% apart, issue 42). 1e-9 is far below any
#: difference the model resolves.
TIE_RTOL = 1e-9


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


def improves(v: float, ref: float, rtol: float = TIE_RTOL) -> bool:
    """True when v improves on ref by more than ``rtol`` relative (lower is better; any finite
    v improves on an infinite ref)."""
    if ref == np.inf:
        return v < ref
    return v < ref - rtol * abs(ref)


def first_least(vals, rtol: float = TIE_RTOL) -> int:
    """The index of the first value within ``rtol`` relative of the least (ties kept in order:
    ``TIE_RTOL``; with a NaN or -inf among them, ``np.argmin``'s).

    Raises:
        ValueError: no values."""
    v = np.asarray(vals, dtype=float)
    m = float(np.min(v))
    if not np.isfinite(m):      # NaN or -inf: np.argmin's choice (no tolerance applies)
        return int(np.argmin(v))
    return int(np.flatnonzero(v <= m + rtol * abs(m))[0])


def line_search(value: Callable[[int], float], z_max: int, f1: float, rtol: float = 1e-6
                ) -> tuple[int, float, int]:
    """The line search of Algorithm 2 (docs/method.md §4) along one (donor, receiver) direction.

    The caller has accepted the one-quantum move (z = 1, objective ``f1``). Then, with a step of
    2 quanta: try z + step (clipped to the donor's limit ``z_max``); if it improves f (by more
    than ``rtol`` relative) move there and double the step, else halve it; stop when the step
    reaches 0, i.e. after a failed one-quantum step or at the limit. So the step doubles while f
    improves, halves after a failure and doubles again after each later success; on a line that
    improves monotonically the search reaches ``z_max`` (trial points 3, 7, 15, ... then the
    limit) in at most ceil(log2(z_max + 1)) trials.

    At return either z = ``z_max`` or value(z + 1) does not improve on value(z).

    This replaced a rule that bisected after the first failure and never doubled again (on a
    monotone line with a 6-quantum limit it stopped at 5). That rule measured no better
    (experiments/line_search_rules.py, results/line_search_rules.json: on 1,500 rugged random
    objectives the two end differently in 8.4% of runs, this rule lower in 4.4% and the old one
    in 4.0%; on 540 cheap-estimator allocation searches 0.7% vs 0.4%), so it is not kept.

    Args:
        value: z -> objective (µs) of moving z quanta, for 1 <= z <= z_max (called only for
            z >= 2; memoise it when calls are expensive).
        z_max: the donor's limit in quanta (>= 1).
        f1: value(1).
        rtol: relative improvement needed to accept a trial.

    Returns:
        ``(z, value(z), trials)``: quanta moved (1 <= z <= z_max), its objective, and the number
        of ``value`` calls.

    Raises:
        ValueError: ``z_max`` < 1.
    """
    if isinstance(z_max, bool) or int(z_max) != z_max or z_max < 1:
        raise ValueError(f"z_max must be an integer >= 1, got {z_max!r}")
    z, fz, step, trials = 1, float(f1), 2, 0
    while True:
        step = min(step, int(z_max) - z)
        if step < 1:
            return z, fz, trials
        v = float(value(z + step))
        trials += 1
        if improves(v, fz, rtol):
            z, fz, step = z + step, v, 2 * step
        else:
            step //= 2


def pairwise_line(f: Callable[[np.ndarray], np.ndarray], p0: Sequence[int], space: AllocSpace,
                  max_passes: int | None = None, batch_line: bool = False,
                  rtol: float = 1e-6, line: Callable[..., tuple[int, float, int]] | None = None
                  ) -> LineResult:
    """Algorithm 2: pairwise-line refinement of an allocation.

    Each pass scores every legal one-quantum move p^{d->r}[1] in ONE call ``f(moves)``, picks
    the best, and stops if it does not improve f (by more than ``rtol`` relative). Otherwise it
    line-searches along that (donor d, receiver r) direction with ``line_search`` (the step
    doubles after every improving trial and halves after every failing one, clipped to the
    donor's limit; docs/method.md §4), applies the move of z quanta in total and starts the next
    pass.

    Args:
        f: objective, int (B, D) allocations -> (B,) values (µs), lower is better.
        p0: start allocation (D,), feasible.
        space: the allocation space.
        max_passes: pass limit L (None = until no move improves).
        batch_line: score every point of the line (z = 2..z_max) in one extra call and replay
            ``line_search`` on those values (same decisions; use with a vectorised estimator).
            False scores the line points one by one (use with a memoised exact scorer).
        rtol: relative improvement needed to accept a move.
        line: the line search, with ``line_search``'s signature and contract (default
            ``line_search``, the published rule; experiments/line_search_rules.py passes the
            earlier bisection rule to compare the two).

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

    while max_passes is None or passes < max_passes:
        cand, pairs = space.moves(p)
        if len(cand) == 0:
            break
        vals = F(cand)
        j = first_least(vals)
        if not improves(float(vals[j]), fp, rtol):
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

        z, fz, _ = (line or line_search)(val, zmax, table[1], rtol)
        if not 1 <= z <= zmax:
            raise ValueError(f"line search returned z={z} outside 1..{zmax}")
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


def seeds(ev: StageService, space: AllocSpace) -> dict[str, np.ndarray]:
    """Algorithm 1's seeds (step 4): ``{"uniform", "proportional"}`` int64 (D,) allocations of
    ``space``. A stage's service is the time its segments take on the whole budget (µs, the
    ``score.protocol.StageService`` capability of ``ev``), i.e. proportional to its work."""
    return {"uniform": space.uniform(),
            "proportional": space.proportional(ev.stage_service(space.budget))}


def allocate_pairwise(problem: Problem, seg_of: Sequence[int], D: int, w: int, m: int,
                      policy: str = DEFAULT_POLICY, *, exact: Callable[[Config], float],
                      L_est: int | None = None, L_sim: int | None = 2) -> AllocResult:
    """Algorithm 1 steps 4-5 for one structure: seeds, cheap refinement, exact polish.

    For each seed p0 (uniform, service-proportional): refine with the cheap estimator by
    ``pairwise_line`` (pass limit ``L_est``, all moves of a pass in one vmapped call, the line
    scored in one more), then polish both p0 and the refined one with the exact scorer (pass limit
    ``L_sim``); keep the best; polish it once more (``L_sim``).

    Args:
        problem: workload and GPU; seg_of, D, w, m, policy: the structure.
        exact: the exact scorer f, ``Config -> makespan µs`` (required, keyword-only; e.g.
            ``TimerExact(problem, EventTimer(problem.hw))``, the event simulator, or
            ``TimerExact(problem, EstimatorTimer(problem))``, the cheap estimator's own
            model), memoised with ``MemoScorer`` unless it is one.
        L_est: pass limit of the cheap refinement (None = unlimited).
        L_sim: pass limit of each exact polish (None = unlimited).

    Returns:
        ``AllocResult`` (exact calls counted as new memo entries).

    Raises:
        ValueError: ``exact`` missing or not callable, unknown policy, empty allocation space,
            illegal structure.
    """
    t0 = time.perf_counter()
    memo = memoised(exact)
    calls0 = memo.calls
    space = problem.space(D)
    ev = problem.evaluator(seg_of, D, w, m, policy)
    f_exact = problem.exact_batch(memo, seg_of, D, w, m, policy)
    cheap = 0
    best, best_v, seeded = None, np.inf, {}
    for name, p0 in seeds(ev, space).items():
        ref = pairwise_line(ev.makespan, p0, space, L_est, batch_line=True)
        cheap += ref.evals
        local = None
        for q in (p0, ref.alloc):
            pol = pairwise_line(f_exact, q, space, L_sim)
            if local is None or improves(pol.value, local.value):
                local = pol
        seeded[name] = (p0.tolist(), local.value)
        if improves(local.value, best_v):
            best, best_v = local.alloc, local.value
    final = pairwise_line(f_exact, best, space, L_sim)
    return AllocResult(alloc=final.alloc, makespan_us=final.value,
                       exact_calls=memo.calls - calls0, cheap_evals=cheap, seeds=seeded,
                       seconds=time.perf_counter() - t0)
