"""Timers that search with a batched engine and keep the event simulator's numbers
(``score.timer`` registers them): ``ScreenedTimer`` (``screened``: ranked and polished by the
vectorised contention scorer, confirmed by the event simulator) and ``BatchedEventTimer``
(``event-batched``: the event simulator's model on batches of allocations)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from subgpu_jax.model.checks import pos_int
from subgpu_jax.model.graph import OpGraph
from subgpu_jax.model.hardware import Hardware
from subgpu_jax.model.setup import DurationModel, GpuSetup
from subgpu_jax.score.eventtimers import EventTimer, green_contention_event
from subgpu_jax.score.lockstep import LockstepBatches
from subgpu_jax.score.tabletimers import ContentionTimer
from subgpu_jax.sim.contention import ContentionModel
from subgpu_jax.sim.l2cache import check_policy
from subgpu_jax.space.config import Config

__all__ = ["ScreenedTimer", "BatchedEventTimer"]


class ScreenedTimer(EventTimer):
    """The event simulator, with a batched screen for searches (``screened``): as a timer it is
    ``EventTimer`` (its numbers, traces and per-category times are the event simulator's); a
    search ranks layouts and polishes allocations with ``screen`` (the vectorised contention
    scorer, ``ContentionTimer``: one JAX call per batch of allocations), then re-simulates the
    ``confirm_top`` best distinct configurations of each grid point by the screen and keeps the
    best by the event simulator (``search.algorithm1``, ``confirm``). So a record's makespan is
    the event simulator's; only the choice can differ from an ``event`` search's, where the
    screen ranks two configurations in the other order than the simulator.

    Args:
        hw, model, cache: as ``EventTimer`` (green contexts only). duration_model: the screen's
            static durations (``ContentionTimer``). confirm_top: configurations re-simulated per
            grid point (>= 1; default ``CONFIRM_TOP``).

    Raises:
        ValueError: ``confirm_top`` < 1, or as ``EventTimer`` and ``ContentionTimer``.
    """

    name = "screened"
    summary = ("the event simulator's numbers from a quarter to 40%% of its simulations: a "
               "search polishes the allocations with the vectorised contention scorer (batched "
               "JAX), then re-simulates each grid point's best few and polishes the best with "
               "the event simulator; the choice can be a few %% slower than event's")
    #: Configurations re-simulated per grid point. With 4 (and the 2 passes of
    #: ``search.algorithm1.Algorithm1Options.confirm_passes``) the chosen makespans equal an
    #: event search's at the median and are at most 1.7% (main job) and 3.8-4.1% (GPT-OSS
    #: 120B B200 frontier samples of 24 and 120 points) slower, with 39% (main job) and 24-25%
    #: (the samples) of its simulations (docs/results.md, "Speed", the screened search).
    CONFIRM_TOP = 4

    def __init__(self, hw: Hardware, model: ContentionModel | None = None, cache: str = "lru",
                 duration_model: DurationModel | None = None,
                 confirm_top: int = CONFIRM_TOP) -> None:
        super().__init__(hw, model, cache, "green")
        self.confirm_top = pos_int(confirm_top, "confirm_top")
        self.screen = ContentionTimer(hw, self.model, self.cache, duration_model)

    @classmethod
    def of(cls, setup: GpuSetup, cache: str | None = None, contention: bool = True,
           mode: str = "green") -> "ScreenedTimer":
        """The screened timer of ``setup`` (its GPU, calibration, L2 policy unless ``cache``).

        Raises:
            ValueError: ``contention`` False or a mode other than green (the screen models
                neither; use the event simulator)."""
        ev = green_contention_event(setup, cache, contention, mode,
                                     "the screened timer screens with the contention model")
        return cls(setup.hw, ev.model, ev.cache, setup.duration_model, cls.CONFIRM_TOP)

    def describe(self) -> str:
        return (f"event simulator (searches screened by the vectorised contention scorer, "
                f"best {self.confirm_top} per grid point re-simulated)")


class BatchedEventTimer(EventTimer):
    """The event simulator's rules with the allocations of one structure simulated together in
    lockstep (``event-batched``, ``sim.batched``): each allocation advances its own events, so
    it is the event simulator's model, not an approximation of it. ``time`` (one
    configuration, traces, per-category times) is the event simulator itself; ``time_allocs``
    runs a batch of allocations as one batched simulation (``score.lockstep``: the compiled
    engine where Numba imports, else NumPy on a CPU and JAX, ``sim.batchedjax``, on an
    accelerator). Unlike ``event`` (whose batches run in the compiled engine too), it is not
    the reference: its records carry no per-category times and a search with it ends with the
    reference check below.

    Agreement with the event simulator (``tests/sim/test_batched.py``,
    ``experiments/batched_eventsim_proto.py``): the compiled engine bit for bit; the lockstep
    loops within 1e-9 relative on the main job's polish passes and on 11 of 12 batches of random
    allocations, near-tied event instants ordering differently after float drift (up to 1.4e-3
    on 3 of 12,060 random allocations, cache off). So a search with it is checked like any other non-reference timer: its best records
    are re-simulated by the event simulator (``summary.json``'s ``reference_check``), with a
    warning above ``TOLERANCE``.

    Speed: the NumPy and JAX loops pay per instant, not per allocation, so they win only on
    large batches (on two CPU cores NumPy is 0.05-0.13x the event simulator per allocation on a
    polish pass of 3-7 allocations and 0.45-0.98x on about 105, lru); the compiled engine wins
    from one allocation (``experiments/bench_compiled_sim.py``).

    Batches below ``min_batch`` rows, temporal configurations (D = 1) and the structures the
    batched loop does not cover (``sim.batched.Unbatchable``: shared pools, the isolated
    model; the JAX engine also tasks without kernels) are timed by the event simulator (the
    same numbers, one call each).

    Args:
        hw, model, cache: as ``EventTimer`` (green contexts). engine: ``BATCH_ENGINES``
            (``auto``: compiled where Numba imports, else JAX on an accelerator, NumPy on a
            CPU). min_batch: the smallest batch
            run in lockstep (>= 1; None: ``MIN_BATCH`` of the engine). cache_mib: bound of the
            structures kept (MiB).

    Raises:
        ValueError: an unknown engine, ``min_batch`` < 1, or as ``EventTimer``.
    """

    name = "event-batched"
    summary = ("the event simulator's model in a batched engine (compiled where Numba imports, "
               "else NumPy lockstep on a CPU, JAX on an accelerator; within 1e-9 of event but "
               "for rare near-ties), its best records re-simulated by the event simulator")
    reference, batched, screen = False, True, None
    #: Relative disagreement with the event simulator above which a search's reference check
    #: warns: the issue's 0.5% bound; measured disagreements are 1e-9 and, at near-ties,
    #: up to 1.4e-3 (class docstring).
    TOLERANCE = 0.005
    #: Engines of ``time_allocs`` (``score.lockstep.LockstepBatches.ENGINES``).
    BATCH_ENGINES = LockstepBatches.ENGINES
    #: The smallest batch run by each engine by default (``LockstepBatches.MIN_BATCH``).
    MIN_BATCH = LockstepBatches.MIN_BATCH

    def __init__(self, hw: Hardware, model: ContentionModel | None = None, cache: str = "lru",
                 engine: str = "auto", min_batch: int | None = None,
                 cache_mib: int = 256) -> None:
        model = model if model is not None else ContentionModel()
        super().__init__(hw, model, cache, "green", batches=LockstepBatches(
            hw, model, check_policy(cache), "green", engine, min_batch, cache_mib))
        self.engine, self.min_batch = engine, self.batches.min_batch
        self.structures = self.batches.structures

    @property
    def lockstep_rows(self) -> int:
        """Allocations timed by the batched engine."""
        return self.batches.lockstep_rows

    @property
    def event_rows(self) -> int:
        """Allocations timed by the event simulator instead (uncovered, or small batches)."""
        return self.batches.event_rows

    @classmethod
    def of(cls, setup: GpuSetup, cache: str | None = None, contention: bool = True,
           mode: str = "green") -> "BatchedEventTimer":
        """The batched event timer of ``setup`` (its GPU, calibration, L2 policy unless
        ``cache``).

        Raises:
            ValueError: ``contention`` False or a mode other than green (the batched loop
                covers neither; use the event simulator)."""
        ev = green_contention_event(setup, cache, contention, mode,
                                     "the event-batched timer is the contention model")
        return cls(setup.hw, ev.model, ev.cache)

    def describe(self) -> str:
        return "lockstep batched event simulator"

    def without_engine(self) -> "BatchedEventTimer":
        """Itself: its batched engine is what this timer is (``engine`` chooses which one)."""
        return self

    def engine_name(self) -> str:
        """The engine ``time_allocs`` runs: ``compiled``, ``numpy`` or ``jax``."""
        return self.batches.engine_name()

    def time_many(self, items: Sequence[tuple[OpGraph, Config, np.ndarray]]
                  ) -> list[np.ndarray]:
        """Makespans (µs) of several structures' allocations in ONE batched call: ``items``
        are ``(graph, cfg, allocs)`` as ``time_allocs`` takes them (any graphs, cuts, stage
        and microbatch counts of this timer's GPU); returns one float64 (B_i,) array each.
        Rows the batched loop does not cover go to the event simulator (class docstring);
        the batch runs in the engine when it holds at least ``min_batch`` rows."""
        return self.batches.run(items, self.simulate_allocs)
