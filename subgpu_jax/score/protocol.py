"""The scorer interface of the search and its named capabilities (docs/method.md §4).

A scorer maps a batch of integer SM allocations of one structure (cut, D, w, m, policy) to
makespans. Implemented by the max-plus evaluator (``score.evaluator.Evaluator``), the vectorised
contention scorer (``score.vcontention.VContentionEvaluator``), the search's cheap estimator
under the event simulator (``score.vcontention.ContentionEstimator``) and the exhaustive
streaming scorer (``score.massive.MassiveEvaluator.makespan``); inputs are validated on the host
before any jitted call.

What the search needs beyond hard makespans is asked for by name, not read from a scorer's
internals:

* ``StageService``: each stage's service time on the whole budget (Algorithm 1's
  service-proportional seed, ``search.pairwise.seeds``);
* ``Smooth``: the smooth makespan and the jit-traceable terms it is computed from (the optax
  relaxation, ``search.relax``; ``score.evaluator.smooth_batch`` evaluates them).

``Evaluator`` has both; ``ContentionEstimator`` says whose it lends (the static model's: the
contention model has neither).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np

__all__ = ["Scorer", "StageService", "Smooth", "SmoothTerms"]


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


@runtime_checkable
class StageService(Protocol):
    """Each stage's service time: how long its segments take on a given pool.

    Attributes:
        D: stages.
    """

    D: int

    def stage_service(self, sms: int) -> np.ndarray:
        """float64 (D,) µs: the summed time of each stage's segments (one instance each) on
        ``sms`` SMs (clipped to the table's largest column), proportional to its work."""
        ...


class SmoothTerms(NamedTuple):
    """What the smooth makespan of one structure is computed from (a pytree of device arrays,
    traced by ``jax.jit``): ``seg_table`` (K_pad, N+1) µs per segment and pool size,
    ``seg_stage`` (K_pad,) int32 stage of each segment, ``arrs`` the padded task DAG
    (``score.evaluator.DagArrays``)."""

    seg_table: Any
    seg_stage: Any
    arrs: Any


@runtime_checkable
class Smooth(Protocol):
    """A differentiable (smooth-max) makespan of real-valued allocations.

    Attributes:
        D: stages. dtype: the float dtype of the terms.
    """

    D: int
    dtype: Any

    def smooth(self, allocs, temp):
        """(B, D) float SMs, temperature ``temp`` (µs) -> jax array (B,) µs."""
        ...

    def smooth_terms(self) -> SmoothTerms:
        """The terms ``score.evaluator.smooth_batch`` evaluates (for use inside a jit)."""
        ...
