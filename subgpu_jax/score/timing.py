"""The timer protocol and what every timer shares (``score.timer`` registers the timers):
``Timing`` (one configuration's time), ``Timer`` (the protocol, its capabilities as
attributes), ``TimerBase`` (the defaults of the optional capabilities, so callers read them as
plain attributes), ``StructureCache`` (a vectorised timer's estimators, built once per
structure) and ``config_rows`` (a configuration under each row of an allocation batch)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence, runtime_checkable

import numpy as np

from subgpu_jax.model.graph import Kernel, OpGraph
from subgpu_jax.model.hardware import Hardware
from subgpu_jax.model.lru import ByteLRU
from subgpu_jax.space.config import Config

__all__ = ["Timing", "Timer", "TimerBase", "StructureCache", "config_rows"]


@dataclass(frozen=True)
class Timing:
    """The time of one region graph under one configuration.

    Attributes:
        makespan_us: the forward-pass makespan (µs).
        category_time_us: kernel residence per category (µs; event timer only, else empty).
        result: the event simulator's ``SimResult`` (traces, plots), or None.
    """

    makespan_us: float
    category_time_us: dict = field(default_factory=dict)
    result: Any = None


@runtime_checkable
class Timer(Protocol):
    """Times configurations of region graphs on one GPU.

    Attributes:
        name: its key in ``TIMERS`` (written into records as ``exact``).
        hw: the GPU.
        contention: True when co-running kernels slow each other in its model.
        reference: True for the event simulator itself (traces, per-category times, verdicts).
        batched: True when ``time_allocs`` is one vectorised call (else a loop of ``time``).
        screen: a batched timer a search ranks and polishes with, confirming each grid point's
            best configurations with this timer (``ScreenedTimer``, which then also has
            ``confirm_top``: how many), or None.
        compiled: True when its batches run in the event simulator's compiled engine
            (``sim.batchednb``), which a sweep then compiles once, ahead of its processes
            (``sim.batchednb.compile_ahead``); on the class (``TIMERS``): whether its
            instances do by default, where Numba imports.

    The optional capabilities (defaults in ``TimerBase``, so a caller reads them as plain
    attributes instead of probing with ``getattr``/``hasattr``):

    Attributes:
        model: the ``sim.contention.ContentionModel`` it simulates with, or None (the static
            evaluators).
        mode: the SM mode it models (``sim.eventsim.SM_MODES``; ``green`` but for an event
            timer made for multistream).
        cache: the L2 policy it simulates (``sim.l2cache.POLICIES``), or None (no L2 model).
        batches_structures: True when ``time_many`` is its own, handing several structures'
            allocations over in one call (the event timers: their batched engine; an observer
            or coalescer of one), so grid points in flight can share its batches
            (``score.coalesce``); False when ``time_many`` is ``TimerBase``'s loop over
            ``time_allocs``. On the class too (``TIMERS``: the ``--in-flight`` check).
        coalesces: True for a ``score.coalesce.CoalescingTimer``: single configurations go
            through ``time_many`` as one row of a shared batch.
        lockstep_rows: allocations its lockstep engine timed (``BatchedEventTimer``), or None
            for a timer without one (then ``event_rows`` and ``min_batch`` are absent too).
        confirm_top: configurations a search re-simulates per grid point (``ScreenedTimer``,
            with ``screen``), or None.
        cheap_tables: the name of the cheap estimator (``search.strategies.CHEAP_ESTIMATORS``)
            whose tables its ``structures`` (a ``StructureCache``) holds, which a search's cheap
            estimator of that name and model shares (``static``: ``StaticTimer``,
            ``vcontention``: ``ContentionTimer``), or None.
        TOLERANCE: the relative disagreement with the event simulator above which a search's
            reference check warns (the batched and vectorised timers), or None.
    """

    name: str
    hw: Hardware
    contention: bool
    reference: bool
    batched: bool
    screen: Any
    compiled: bool
    model: Any
    mode: str
    cache: str | None
    batches_structures: bool
    coalesces: bool
    lockstep_rows: int | None
    confirm_top: int | None
    cheap_tables: str | None
    TOLERANCE: float | None

    def describe(self) -> str:
        """What the timer is, in a user's words (printed beside its predictions)."""
        ...

    def without_engine(self) -> "Timer":
        """The same timer with its batches run by the Python event simulator instead of the
        compiled engine (the same makespans, no compilation: a small sweep's choice,
        ``app.searchrun``); itself when it has no compiled engine to drop."""
        ...

    def time(self, graph: OpGraph, cfg: Config, record: bool = False,
             validate: bool = True) -> Timing:
        """Time ``graph`` (built for ``cfg``'s microbatch count) under ``cfg`` (µs); ``record``
        keeps the event simulator's utilisation series; ``validate=False`` skips the
        configuration check a caller already made. Raises ValueError for an infeasible ``cfg``."""
        ...

    def time_allocs(self, graph: OpGraph, cfg: Config, allocs: np.ndarray) -> np.ndarray:
        """Makespans (µs) float64 (B,) of ``cfg``'s structure under each row of ``allocs``
        (int (B, D) SMs per stage; the caller checked them); ``cfg.alloc`` is ignored."""
        ...

    def time_many(self, items: Sequence[tuple[OpGraph, Config, np.ndarray]]
                  ) -> list[np.ndarray]:
        """Makespans (µs) of several structures' allocations (``(graph, cfg, allocs)`` as
        ``time_allocs`` takes them), one float64 (B_i,) array each: one call where
        ``batches_structures``, else ``time_allocs`` per item (``TimerBase``)."""
        ...

    def in_mode(self, mode: str) -> "Timer":
        """This timer in SM mode ``mode``: itself in its own mode; an event timer's copy in
        another (``EventTimer.in_mode``).

        Raises:
            ValueError: a mode it cannot model (the shared pools of multistream need the event
                simulator)."""
        ...

    def head_us(self, kernels: Sequence[Kernel]) -> float:
        """Time (µs) of ``kernels`` run one after the other on the whole GPU."""
        ...


class TimerBase:
    """The defaults of ``Timer``'s optional capabilities, for a timer to inherit: no contention
    model, green contexts, no L2 model, ``time_many`` a loop over ``time_allocs`` (not shared
    with other grid points: ``batches_structures`` False), no coalescing, no lockstep engine,
    no screen's confirmation budget, no tables shared with a cheap estimator, no tolerance, and
    ``without_engine`` itself (no compiled engine to drop), ``in_mode`` green contexts alone. A
    timer sets what it has."""

    model: Any = None
    mode: str = "green"
    cache: str | None = None
    batches_structures: bool = False
    coalesces: bool = False
    lockstep_rows: int | None = None
    confirm_top: int | None = None
    cheap_tables: str | None = None
    TOLERANCE: float | None = None

    def time_many(self, items: Sequence[tuple[OpGraph, Config, np.ndarray]]
                  ) -> list[np.ndarray]:
        """``time_allocs`` of each ``(graph, cfg, allocs)`` item (µs), one after the other."""
        return [self.time_allocs(g, c, A) for g, c, A in items]

    def without_engine(self) -> "Timer":
        """Itself: it has no compiled event-simulator engine to drop
        (``Timer.without_engine``)."""
        return self

    def in_mode(self, mode: str) -> "Timer":
        """Itself for green contexts (``Timer.in_mode``).

        Raises:
            ValueError: another mode (``"mode ... needs the event simulator"``)."""
        if mode != "green":
            raise ValueError(f"mode {mode!r} needs the event simulator (--simulator event)")
        return self


class StructureCache:
    """Estimators of the structures (graph, cut, stages, reuse, policy, streams) a vectorised
    timer has timed, built once each and kept in a bounded least-recently-used cache while their
    graph lives; a search's cheap estimator borrows them (``search.problem.Problem``'s
    ``source``), so the ranking and the exact polish build each structure's tables once.

    Args:
        make: ``(graph, seg_of, D, w, policy, streams_per_stage, table) -> estimator``.
        cache_mib: the bound (MiB).
    """

    def __init__(self, make, cache_mib: int = 256) -> None:
        self.make, self.lru = make, ByteLRU(int(cache_mib) * 2**20)

    def get(self, graph: OpGraph, seg_of: Sequence[int], D: int, w: int, policy: str,
            streams_per_stage: int = 1, table: np.ndarray | None = None):
        """The estimator of one structure of ``graph`` (``table``: its static durations
        (n, N+1) µs, default the timer's duration model's)."""
        key = (id(graph), tuple(int(x) for x in seg_of), int(D), int(w), policy,
               int(streams_per_stage))
        hit = self.lru.get_or_make(key, lambda: (graph, self.make(
            graph, key[1], int(D), int(w), policy, int(streams_per_stage), table)))
        if hit[0] is not graph:  # an id reused by a new graph after the old one was freed
            self.lru.clear()
            return self.get(graph, seg_of, D, w, policy, streams_per_stage, table)
        return hit[1]


def config_rows(cfg: Config, allocs: np.ndarray) -> list[Config]:
    """``cfg`` with each row of ``allocs`` as its allocation.

    Raises:
        ValueError: ``allocs`` not integers (SMs: 64.5 is never read as 64)."""
    A = np.atleast_2d(np.asarray(allocs))
    if A.dtype.kind not in "iu":
        raise ValueError(f"allocs must hold integers (SMs), got dtype {A.dtype}")
    return [dataclasses.replace(cfg, alloc=tuple(int(x) for x in a)) for a in A]
