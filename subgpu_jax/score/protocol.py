"""The one scorer interface of the search (docs/method.md §4).

A scorer maps a batch of integer SM allocations of one structure (cut, D, w, m, policy) to
makespans. Implemented by the max-plus evaluator (``score.evaluator.Evaluator``), the vectorised
contention scorer (``score.vcontention.VContentionEvaluator``), the search's cheap estimator
under the event simulator (``score.vcontention.ContentionEstimator``) and the exhaustive
streaming scorer (``score.massive.MassiveEvaluator.makespan``); inputs are validated on the host
before any jitted call.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

__all__ = ["Scorer"]


@runtime_checkable
class Scorer(Protocol):
    """Scores allocation batches of one (cut, D, w, m, policy).

    ``makespan(allocs)``: ``allocs`` int array (B, D) of SMs per stage, each row a legal
    allocation of the scorer's ``AllocSpace``; returns float array (B,) of makespans in µs.
    Raises ``ValueError`` (one line, naming the field) for a batch of the wrong shape or an
    illegal allocation.
    """

    def makespan(self, allocs: np.ndarray) -> np.ndarray:
        """(B, D) int SMs -> (B,) float µs."""
        ...
