"""Refine a configuration on the hardware: Algorithm 2 (``subgpu_jax.search.pairwise.
pairwise_line``) with the measured makespan as its objective and the GPU's SM quantum as its
step, then the neighbouring microbatch counts (m/2 and 2m, at least 2, dividing the per-GPU
batch R), each refined the same way when it measured faster.

The objective is a callable ``Candidate -> measured µs`` (the tune's, which reads earlier
measurements from its state and returns ``inf`` once the budget is spent, so the line search
stops there without accepting a move it could not measure).
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from subgpu_jax.model.hardware import Hardware
from subgpu_jax.search.pairwise import pairwise_line
from subgpu_jax.space.config import AllocSpace

from hw_runtime.tune.spec import Candidate

__all__ = ["refine_on_gpu", "microbatch_neighbours"]


def microbatch_neighbours(c: Candidate, R: int) -> list[Candidate]:
    """``c`` at m/2 and 2m microbatches (m = R / b), those with m >= 2 that divide ``R``."""
    m = R // c.config.microbatch
    out = []
    for m2 in (m // 2, 2 * m):
        if m2 >= 2 and m2 != m and R % m2 == 0:
            out.append(c.replace(microbatch=R // m2))
    return out


def refine_on_gpu(start: Candidate, measure: Callable[[Candidate], float], hw: Hardware,
                  R: int, passes: int = 2) -> dict:
    """Pairwise line search over the SM split of ``start`` with measured makespans, then its
    neighbouring microbatch counts. A multistream ``start`` has no pools to balance (its
    streams share every SM): only its neighbouring microbatch counts are measured.

    Args:
        start: a green or multistream candidate (D >= 2). measure: candidate -> measured
            makespan (µs; inf
            when it cannot be measured). hw: the GPU (budget, quantum and minimum pool of
            ``AllocSpace.from_hw``). R: requests per GPU (the batch the microbatch divides).
        passes: pass limit of each line search (>= 1).

    Returns:
        ``{"start": Candidate, "start_us", "best": Candidate, "best_us", "measured": distinct
        candidates asked for, "moves": [(donor, receiver, quanta, µs), ...]}``.

    Raises:
        ValueError: ``start`` is temporal or its split is not in the allocation space.
    """
    if start.mode == "temporal" or start.config.D < 2:
        raise ValueError("refine_on_gpu: the start must be a pipelined candidate (D >= 2)")
    space = AllocSpace.from_hw(hw, start.config.D)
    asked: dict[str, float] = {}    # key -> measured µs: each candidate measured once

    def value(c: Candidate) -> float:
        if c.key not in asked:
            asked[c.key] = float(measure(c))
        return asked[c.key]

    def line(c: Candidate) -> tuple[Candidate, float, list]:
        if c.mode == "multistream":      # no SM split to move
            return c, value(c), []

        def f(allocs: np.ndarray) -> np.ndarray:
            return np.array([value(c.replace(alloc=a)) for a in np.atleast_2d(allocs)])

        r = pairwise_line(f, c.config.alloc, space, max_passes=passes)
        return (c.replace(alloc=r.alloc), float(r.value),
                [list(map(float, h)) for h in r.history])

    v0 = value(start)
    best, best_v, moves = line(start)
    for nb in microbatch_neighbours(best, R):
        v = value(nb)
        if v < best_v and math.isfinite(v):
            c2, v2, mv = line(nb)
            if v2 < best_v:
                best, best_v, moves = c2, v2, moves + mv
    return {"start": start, "start_us": v0, "best": best, "best_us": best_v,
            "measured": len(asked), "moves": moves}
