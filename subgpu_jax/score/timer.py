"""Timers: the one way to time a configuration of one region graph (docs/method.md §3).

A ``Timer`` maps ``(graph, cfg)`` to a ``Timing`` (µs), and a batch of allocations of one
configuration's structure to their makespans (``time_allocs``). Six exist, registered in
``TIMERS`` (the command line's ``--exact`` and ``--simulator`` choices):

* ``EventTimer`` (``event``): the event simulator (``sim.eventsim.simulate``) with a contention
  model, an L2 policy and an SM mode (green contexts or multistream); the reference. Timings
  without a utilisation series skip the regions of a pass that repeat (``sim.periodic``); its
  makespan batches (``time_allocs``, ``time_many``) run in the simulator's compiled engine
  (``sim.batchednb``: its full simulation bit for bit) where that covers the structure.
* ``FullEventTimer`` (``event-full``): the same with every region simulated (results equal to
  float rounding, up to twice the CPU time).
* ``StaticTimer`` (``static``): the max-plus evaluator on isolated kernel durations (the
  analytical model or a calibrated one), no contention.
* ``ContentionTimer`` (``vcontention``): the vectorised contention scorer
  (``score.vcontention``), batched: one JAX call times every allocation of a batch. It
  does NOT reproduce the event simulator everywhere: on the configurations a search visits its
  error is 2.3% median and 14% max over every preset (``experiments/vc_agreement_presets.py``),
  so a search with it re-scores its best records with the event simulator, reports the
  disagreement and warns above ``ContentionTimer.TOLERANCE``.
* ``ScreenedTimer`` (``screened``): the event simulator's numbers, found with fewer
  simulations: a search ranks and polishes with the ``vcontention`` scorer (its ``screen``),
  then re-simulates each grid point's best few configurations (``confirm_top``) and keeps the
  best by the event simulator (``search.algorithm1``'s ``confirm``). Its records' makespans are
  the event simulator's; the choice may differ from an event-simulator search's
  (``experiments/bench_screened.py``: at the median not at all, at most 1.7-4.1% slower).

* ``BatchedEventTimer`` (``event-batched``): the event simulator's model with the allocations
  of a batch in a batched engine (``score.lockstep``: the compiled one where Numba imports, bit
  for bit; else the lockstep loops, NumPy on a CPU, JAX on an accelerator, within 1e-9 of
  ``event`` but for rare near-ties, 1.4e-3 at most measured), its records without per-category
  times and its best re-simulated by the event simulator.

The event simulator stays the default and the reference.

Each carries its capabilities as attributes, so callers never test its name: ``contention``
(co-running kernels slow each other), ``reference`` (the event simulator itself: traces,
per-category times, the verdict's model), ``batched`` (``time_allocs`` is one vectorised call,
not a loop), ``screen`` (a batched timer a search may rank with before confirming with this
one, or None) and ``describe()`` (what it is, in words a user reads). All also time the head
kernels (``head_us``: final norm, LM head, sampling, embedding, on the whole GPU).
``score.step.time_step`` times a whole decode step with any timer; the search's exact scorer
(``search.problem.TimerExact``) wraps one. ``timer_for(setup, name, ...)`` makes one from its
registry name, once, at the command line's edge.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence, runtime_checkable

import numpy as np

from subgpu_jax.model.checks import pos_int
from subgpu_jax.model.graph import Kernel, OpGraph, StaticDurationModel
from subgpu_jax.model.hardware import Hardware
from subgpu_jax.model.lru import ByteLRU
from subgpu_jax.model.setup import DurationModel, GpuSetup
from subgpu_jax.score.lockstep import LockstepBatches, compiled_available
from subgpu_jax.sim.contention import ContentionModel
from subgpu_jax.sim.eventsim import check_sm_mode, simulate, simulate_streams
from subgpu_jax.sim.l2cache import check_policy
from subgpu_jax.space.config import Config, check_config

__all__ = ["Timing", "Timer", "EventTimer", "FullEventTimer", "StaticTimer", "ContentionTimer",
           "ScreenedTimer", "BatchedEventTimer", "StructureCache",
           "TIMERS",
           "DEFAULT_TIMER", "timer_for", "timer_help"]


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
    """

    name: str
    hw: Hardware
    contention: bool
    reference: bool
    batched: bool
    screen: Any
    compiled: bool

    def describe(self) -> str:
        """What the timer is, in a user's words (printed beside its predictions)."""
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

    def head_us(self, kernels: Sequence[Kernel]) -> float:
        """Time (µs) of ``kernels`` run one after the other on the whole GPU."""
        ...


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


def _rows(cfg: Config, allocs: np.ndarray) -> list[Config]:
    """``cfg`` with each row of ``allocs`` as its allocation.

    Raises:
        ValueError: ``allocs`` not integers (SMs: 64.5 is never read as 64)."""
    A = np.atleast_2d(np.asarray(allocs))
    if A.dtype.kind not in "iu":
        raise ValueError(f"allocs must hold integers (SMs), got dtype {A.dtype}")
    return [dataclasses.replace(cfg, alloc=tuple(int(x) for x in a)) for a in A]


class EventTimer:
    """The event simulator as a timer.

    Args:
        hw: the GPU. model: the ``ContentionModel`` (default ``ContentionModel()``).
        cache: L2 policy (``sim.l2cache.POLICIES``). mode: SM mode (``sim.eventsim.SM_MODES``).
        forward: skip the regions of a pass that repeat (``sim.periodic``: the makespan equal
            to float rounding, at most ``sim.periodic.FORWARD_TOL`` relative by construction,
            1.9e-13 measured on the main job); only in timings without a utilisation series
            (``record=False``). Default True.
        engine: ``ENGINES``: ``compiled`` (default; ``python`` where Numba does not import)
            or ``python``.
        batches: the makespan batches' runner, a ``score.lockstep.LockstepBatches`` made for
            this GPU, model and policy (a subclass's own engine choice); None: the one
            ``engine`` names.

    Raises:
        ValueError: an unknown cache policy, mode or engine, or a model that is not a
            ``ContentionModel``.
    """

    name = "event"
    summary = ("the exact event-driven simulator with the contention model and L2 residency, "
               "the reference")
    reference, batched, screen = True, False, None
    contention = True   # per instance: False with ContentionModel.off()
    compiled = True     # per instance: False with the Python engine (or where Numba is missing)

    #: The engines of ``time_allocs``/``time_many`` (makespans alone): ``compiled`` (the
    #: batched simulator's compiled engine, ``sim.batchednb``, where it covers the structure;
    #: the Python simulator elsewhere) or ``python`` (the simulator below, one call each).
    ENGINES = ("compiled", "python")

    def __init__(self, hw: Hardware, model: ContentionModel | None = None, cache: str = "lru",
                 mode: str = "green", forward: bool = True, engine: str = "compiled",
                 batches: LockstepBatches | None = None) -> None:
        if model is not None and not isinstance(model, ContentionModel):
            raise ValueError(f"model must be a ContentionModel, got {type(model).__name__}")
        if engine not in self.ENGINES:
            raise ValueError(f"engine must be one of {', '.join(self.ENGINES)}, got {engine!r}")
        self.hw, self.cache, self.mode = hw, check_policy(cache), check_sm_mode(mode)
        self.forward = bool(forward)
        self.model = model if model is not None else ContentionModel()
        self.contention = not self.model.isolated
        #: the makespan batches' runner (``score.lockstep``), None with the Python engine (or
        #: where Numba is missing: ``engine`` then says ``python``)
        if batches is None and engine == "compiled" and compiled_available():
            batches = LockstepBatches(hw, self.model, self.cache, self.mode, "compiled")
        self.batches = batches
        self.engine = "compiled" if self.batches is not None else "python"
        self.batched = self.batches is not None
        self.compiled = self.batched and self.batches.engine_name() == "compiled"

    def describe(self) -> str:
        return "event simulator" + ("" if self.contention else " without contention")

    def time_allocs(self, graph: OpGraph, cfg: Config, allocs: np.ndarray) -> np.ndarray:
        return self.time_many([(graph, cfg, allocs)])[0]

    def time_many(self, items: Sequence[tuple[OpGraph, Config, np.ndarray]]
                  ) -> list[np.ndarray]:
        """Makespans (µs) of several structures' allocations (``(graph, cfg, allocs)`` as
        ``time_allocs`` takes them): with the compiled engine every covered structure in one
        call (``score.lockstep.LockstepBatches``), the rest by the Python simulator."""
        if self.batches is None:
            return [self.simulate_allocs(g, c, A) for g, c, A in items]
        return self.batches.run(items, self.simulate_allocs)

    def simulate_allocs(self, graph: OpGraph, cfg: Config, allocs: np.ndarray) -> np.ndarray:
        """Makespans (µs) of ``cfg`` under each row of ``allocs`` by the Python simulator, one
        call each (``time`` without a series)."""
        return np.array([self.time(graph, c, validate=False).makespan_us
                         for c in _rows(cfg, allocs)])

    @classmethod
    def of(cls, setup: GpuSetup, cache: str | None = None, contention: bool = True,
           mode: str = "green") -> "EventTimer":
        """The event timer of ``setup``: its GPU, a contention model carrying its calibration
        (``ContentionModel.off()`` when not ``contention``), its L2 policy unless ``cache``
        is given."""
        model = ContentionModel() if contention else ContentionModel.off()
        if setup.calibration is not None:
            model = model.replace(calibration=setup.calibration)
        return cls(setup.hw, model, setup.cache_policy(cache), mode)

    def time(self, graph: OpGraph, cfg: Config, record: bool = False,
             validate: bool = True) -> Timing:
        r = simulate(graph, cfg, self.hw, self.model, cache=self.cache, record=record,
                     validate=validate, mode=self.mode, forward=self.forward and not record)
        return Timing(float(r.makespan), dict(r.category_time), r)

    def head_us(self, kernels: Sequence[Kernel]) -> float:
        r = simulate_streams([(self.hw.num_sms, list(kernels))], self.hw, self.model,
                             cache=self.cache, record=False)
        return float(r.makespan)


class FullEventTimer(EventTimer):
    """The event simulator with every region of a pass simulated (no periodic fast-forward,
    ``sim.periodic``): ``event`` as it was before the fast-forward, its results equal to float
    rounding (1e-9 relative at most by construction; 1.9e-13 measured on the main job) at up to
    twice the CPU time. The baseline of the fast-forward's measurements
    (``experiments/bench_sweeps.py``), and the strict reference for a user who wants it.

    Args: as ``EventTimer`` but ``forward``.
    """

    name = "event-full"
    summary = ("the event simulator with every region simulated (no periodic fast-forward; "
               "equal to event's results to float rounding)")

    def __init__(self, hw: Hardware, model: ContentionModel | None = None, cache: str = "lru",
                 mode: str = "green") -> None:
        super().__init__(hw, model, cache, mode, forward=False, engine="python")

    def describe(self) -> str:
        return super().describe() + " (every region simulated)"


class StaticTimer:
    """The max-plus evaluator on isolated kernel durations as a timer (no contention; D = 1 is
    the sum of full-GPU times, ``score.evaluator.temporal_makespan``).

    Args:
        hw: the GPU. duration_model: ``table(graph)`` -> (n, N+1) µs (default
            ``StaticDurationModel(hw)``); head kernels always use the analytical model (they are
            not calibrated).
    """

    name = "static"
    summary = "the max-plus evaluator on isolated per-kernel durations (no contention, no cache)"
    contention = reference = compiled = False
    batched, screen = True, None

    def __init__(self, hw: Hardware, duration_model: DurationModel | None = None) -> None:
        self.hw, self.duration_model = hw, duration_model
        self.structures = StructureCache(self._make)

    def _make(self, graph, seg_of, D, w, policy, k, table):
        from subgpu_jax.score.evaluator import Evaluator

        if table is None:
            dm = self.duration_model or StaticDurationModel(self.hw)
            table = np.asarray(dm.table(graph))
        return Evaluator(graph, seg_of, D, w, self.hw, policy=policy, table=table,
                         streams_per_stage=k)

    @classmethod
    def of(cls, setup: GpuSetup, cache: str | None = None, contention: bool = True,
           mode: str = "green") -> "StaticTimer":
        """The static timer of ``setup`` (its GPU and duration model; ``cache`` and
        ``contention`` do not apply to it).

        Raises:
            ValueError: a mode other than green (it has no shared-pool model)."""
        if check_sm_mode(mode) != "green":
            raise ValueError(f"mode {mode!r} needs the event simulator (--simulator event)")
        return cls(setup.hw, setup.duration_model)

    def describe(self) -> str:
        return "static max-plus evaluator"

    def time_allocs(self, graph: OpGraph, cfg: Config, allocs: np.ndarray) -> np.ndarray:
        if cfg.D == 1:
            return np.array([self.time(graph, c).makespan_us for c in _rows(cfg, allocs)])
        ev = self.structures.get(graph, cfg.seg_of, cfg.D, cfg.w, cfg.policy,
                                 cfg.streams_per_stage)
        return np.asarray(ev.makespan(np.atleast_2d(allocs)), dtype=float)

    def time(self, graph: OpGraph, cfg: Config, record: bool = False,
             validate: bool = True) -> Timing:
        if cfg.D == 1:
            from subgpu_jax.score.evaluator import temporal_makespan

            return Timing(temporal_makespan(graph, self.hw, self.duration_model))
        return Timing(float(self.time_allocs(graph, cfg, np.asarray([cfg.alloc]))[0]))

    def head_us(self, kernels: Sequence[Kernel]) -> float:
        sd = StaticDurationModel(self.hw)
        return float(sum(float(np.asarray(sd.kernel_time_us(k, self.hw.num_sms)).ravel()[0])
                         for k in kernels))


def _green_contention_event(setup: GpuSetup, cache: str | None, contention: bool, mode: str,
                            what: str) -> EventTimer:
    """The event timer of ``setup`` whose model and L2 policy a timer built on the vectorised
    contention scorer takes (``ContentionTimer.of``, ``ScreenedTimer.of``), after refusing what
    that scorer cannot model.

    Raises:
        ValueError: a mode other than green (``"mode ... needs the event simulator"``), or
            ``contention`` False (``"{what}; without contention use the event or static
            timer"``).
    """
    if check_sm_mode(mode) != "green":
        raise ValueError(f"mode {mode!r} needs the event simulator (--simulator event)")
    if not contention:
        raise ValueError(f"{what}; without contention use the event or static timer")
    return EventTimer.of(setup, cache)


class ContentionTimer:
    """The vectorised contention scorer as a batched timer (``vcontention``): the event
    simulator's rate model as a fixed-point iteration in JAX (``score.vcontention``), one call
    per batch of allocations of one structure (graph, cut, stages, reuse, policy, streams).

    Each structure's tables (``ContentionEstimator``) are built once and kept in a bounded
    least-recently-used cache (``cache_mib``); a search shares them with its cheap estimator
    (``structures``, a ``StructureCache``). Temporal configurations (D = 1) and the head kernels are timed by the event
    simulator (one kernel at a time on the whole GPU: nothing co-runs, and one call each).

    Args:
        hw: the GPU. model: the ``ContentionModel`` (default ``ContentionModel()``; a
            calibration travels in it). cache: L2 policy of the hit replay
            (``sim.l2cache.POLICIES``). duration_model: static durations of the estimators'
            seeds (default ``StaticDurationModel(hw)``). cache_mib: bound of the tables kept.

    Raises:
        ValueError: an unknown cache policy, a model that is not a ``ContentionModel``, a mode
            other than green (``of``).
    """

    name = "vcontention"
    summary = ("the vectorised contention scorer, batched in JAX; approximate (2.3%% median "
               "error), its best records and verdicts re-simulated by the event simulator; no "
               "--trace/--gantt/--utilization")
    contention, reference, batched, screen, compiled = True, False, True, None, False
    #: Relative disagreement with the event simulator above which a search's reference check
    #: warns: about the median measured on search-visited configurations (2.3%,
    #: results/vc_agreement_presets.json); single configurations reach 14%, so it is a warning
    #: level, not a bound. The tests hold it only where measured (GPT-OSS 20B, three cuts).
    TOLERANCE = 0.02

    def __init__(self, hw: Hardware, model: ContentionModel | None = None, cache: str = "lru",
                 duration_model: DurationModel | None = None, cache_mib: int = 256) -> None:
        self.event = EventTimer(hw, model, cache)
        self.hw, self.model, self.cache = hw, self.event.model, self.event.cache
        self.duration_model = duration_model
        self.structures = StructureCache(self._make, cache_mib)

    @classmethod
    def of(cls, setup: GpuSetup, cache: str | None = None, contention: bool = True,
           mode: str = "green") -> "ContentionTimer":
        """The batched timer of ``setup`` (its GPU, calibration, L2 policy unless ``cache``).

        Raises:
            ValueError: ``contention`` False or a mode other than green (use the event
                simulator for those)."""
        ev = _green_contention_event(setup, cache, contention, mode,
                                     "the vcontention timer is the contention model")
        return cls(setup.hw, ev.model, ev.cache, setup.duration_model)

    def describe(self) -> str:
        return "vectorised contention scorer (batched JAX)"

    def _make(self, graph, seg_of, D, w, policy, k, table):
        from subgpu_jax.score.vcontention import ContentionEstimator

        if table is None:
            dm = self.duration_model or StaticDurationModel(self.hw)
            table = np.asarray(dm.table(graph))
        return ContentionEstimator(graph, seg_of, D, w, self.hw, policy=policy, table=table,
                                   model=self.model, cache=self.cache, streams_per_stage=k)

    def time(self, graph: OpGraph, cfg: Config, record: bool = False,
             validate: bool = True) -> Timing:
        if cfg.D == 1 or record:
            return self.event.time(graph, cfg, record, validate)
        if validate:
            check_config(graph, cfg, self.hw)
        return Timing(float(self.time_allocs(graph, cfg, np.asarray([cfg.alloc]))[0]))

    def time_allocs(self, graph: OpGraph, cfg: Config, allocs: np.ndarray) -> np.ndarray:
        if cfg.D == 1:
            return self.event.time_allocs(graph, cfg, allocs)
        est = self.structures.get(graph, cfg.seg_of, cfg.D, cfg.w, cfg.policy,
                                  cfg.streams_per_stage)
        return np.asarray(est.makespan(np.atleast_2d(allocs), feasible_only=False), dtype=float)

    def head_us(self, kernels: Sequence[Kernel]) -> float:
        return self.event.head_us(kernels)


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
        ev = _green_contention_event(setup, cache, contention, mode,
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
        ev = _green_contention_event(setup, cache, contention, mode,
                                     "the event-batched timer is the contention model")
        return cls(setup.hw, ev.model, ev.cache)

    def describe(self) -> str:
        return "lockstep batched event simulator"

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


#: The timers by name: ``subgpu search --exact`` and ``subgpu simulate --simulator`` take their
#: choices from here; ``timer_for`` makes them.
TIMERS: dict[str, type] = {t.name: t for t in (EventTimer, FullEventTimer, StaticTimer,
                                                ContentionTimer, ScreenedTimer,
                                                BatchedEventTimer)}
#: The default of ``--exact`` and ``--simulator``: the event simulator, the reference.
DEFAULT_TIMER: str = EventTimer.name


def timer_help() -> str:
    """The help text of a flag that names a timer (``--exact``, ``--simulator``), from the
    registry: each name and its ``summary`` (argparse-escaped), the default marked."""
    return "; ".join(f"{n}: {t.summary}" + (" (default)" if n == DEFAULT_TIMER else "")
                     for n, t in TIMERS.items())


def timer_for(setup: GpuSetup, name: str, cache: str | None = None, contention: bool = True,
              mode: str = "green") -> Timer:
    """The timer registered as ``name`` in ``TIMERS``, made for ``setup``
    (``TIMERS[name].of(setup, cache, contention, mode)``).

    Raises:
        ValueError: an unknown name (one line listing the timers), or a mode/contention setting
            the timer cannot model (multistream and no-contention need the event simulator).
    """
    if name not in TIMERS:
        raise ValueError(f"simulator must be one of {', '.join(TIMERS)}, got {name!r}")
    return TIMERS[name].of(setup, cache, contention, mode)
