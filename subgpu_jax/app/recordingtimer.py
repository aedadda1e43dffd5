"""The search job's observer of its event timer (``app.searchjob.PointScorer``): every
configuration the event simulator times for a deployment keeps its per-category times and L2
hit rate for the records, and makespan batches go to the timer's compiled engine.

Units: µs.
"""

from __future__ import annotations

import numpy as np

from subgpu_jax.model.graph import Deployment
from subgpu_jax.score.timing import TimerBase, Timing, config_rows
from subgpu_jax.space.config import Config

__all__ = ["RecordingTimer"]


class RecordingTimer(TimerBase):
    """An observer of the search job's event timer (a ``score.timer.Timer``): a configuration
    timed alone goes to ``PointScorer.simulate``, which keeps the run's per-category times and L2
    hit rate for its record and honours Ctrl-C around each simulation; batches of allocations
    go to the observed timer's compiled engine where it has one (makespans alone: a record then
    re-simulates its configuration). Its capabilities are the observed timer's; its
    ``time_many`` is its own (``batches_structures``), and it has no screen.

    Args:
        scorer: the ``PointScorer`` (its ``timer`` is the observed event timer). dep: the
            deployment whose graphs are timed.
    """

    def __init__(self, scorer, dep: Deployment) -> None:
        self.scorer, self.dep, self.observed = scorer, dep, scorer.timer
        self.name, self.hw = self.observed.name, scorer.hw
        self.contention, self.reference = self.observed.contention, self.observed.reference
        self.batched, self.screen = self.observed.batched, None
        self.compiled = self.observed.compiled
        self.model, self.mode, self.cache = (self.observed.model, self.observed.mode,
                                             self.observed.cache)
        self.batches_structures = True   # time_many below: the engine's, or simulations

    def describe(self) -> str:
        return self.observed.describe()

    def time(self, graph, cfg: Config, record: bool = False, validate: bool = True) -> Timing:
        r = self.scorer.simulate(self.dep, cfg)
        return Timing(float(r.makespan), dict(r.category_time), r)

    def time_allocs(self, graph, cfg: Config, allocs) -> np.ndarray:
        return self.time_many([(graph, cfg, allocs)])[0]

    def time_many(self, items) -> list[np.ndarray]:
        """Makespans (µs) of ``(graph, cfg, allocs)`` requests: the observed timer's compiled
        engine where it has one (``EventTimer.batches``: makespans alone; a record re-simulates
        its configuration for its categories), else this observer's simulations one by one."""
        if self.batched:
            return self.observed.time_many(items)
        return [np.array([self.time(graph, c).makespan_us for c in config_rows(cfg, allocs)])
                for graph, cfg, allocs in items]

    def head_us(self, kernels) -> float:
        return self.observed.head_us(kernels)
