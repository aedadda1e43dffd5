"""Timers: the one way to time a configuration of one region graph (docs/method.md §3).

A ``Timer`` maps ``(graph, cfg)`` to a ``Timing`` (µs). Two exist:

* ``EventTimer``: the event simulator (``sim.eventsim.simulate``) with a contention model, an L2
  policy and an SM mode (green contexts or multistream);
* ``StaticTimer``: the max-plus evaluator on isolated kernel durations (the analytical model or
  a calibrated one), no contention.

Both also time the head kernels (``head_us``: final norm, LM head, sampling, embedding, on the
whole GPU). ``score.step.time_step`` times a whole decode step with any timer; the search's
exact scorer (``search.problem.TimerExact``) wraps one. ``timer_for(setup, kind, ...)`` is the
only place where the command line's ``--simulator``/``--exact`` choice (``TIMER_KINDS``) becomes
a timer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence, runtime_checkable

import numpy as np

from subgpu_jax.model.graph import Kernel, OpGraph, StaticDurationModel
from subgpu_jax.model.hardware import Hardware
from subgpu_jax.model.setup import DurationModel, GpuSetup
from subgpu_jax.score.evaluator import Evaluator, temporal_makespan
from subgpu_jax.sim.contention import ContentionModel
from subgpu_jax.sim.eventsim import check_sm_mode, simulate, simulate_streams
from subgpu_jax.sim.l2cache import check_policy
from subgpu_jax.space.config import Config

__all__ = ["Timing", "Timer", "EventTimer", "StaticTimer", "TIMER_KINDS", "timer_for"]

#: Names of the timers on the command line (``--simulator``, ``--exact``), in ``timer_for``.
TIMER_KINDS: tuple[str, ...] = ("event", "static")


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
        name: ``"event"`` or ``"static"`` (one of ``TIMER_KINDS``; written into records).
        hw: the GPU.
    """

    name: str
    hw: Hardware

    def time(self, graph: OpGraph, cfg: Config, record: bool = False,
             validate: bool = True) -> Timing:
        """Time ``graph`` (built for ``cfg``'s microbatch count) under ``cfg`` (µs); ``record``
        keeps the event simulator's utilisation series; ``validate=False`` skips the
        configuration check a caller already made. Raises ValueError for an infeasible ``cfg``."""
        ...

    def head_us(self, kernels: Sequence[Kernel]) -> float:
        """Time (µs) of ``kernels`` run one after the other on the whole GPU."""
        ...


class EventTimer:
    """The event simulator as a timer.

    Args:
        hw: the GPU. model: the ``ContentionModel`` (default ``ContentionModel()``).
        cache: L2 policy (``sim.l2cache.POLICIES``). mode: SM mode (``sim.eventsim.SM_MODES``).

    Raises:
        ValueError: an unknown cache policy or mode, or a model that is not a
            ``ContentionModel``.
    """

    name = "event"

    def __init__(self, hw: Hardware, model: ContentionModel | None = None, cache: str = "lru",
                 mode: str = "green") -> None:
        if model is not None and not isinstance(model, ContentionModel):
            raise ValueError(f"model must be a ContentionModel, got {type(model).__name__}")
        self.hw, self.cache, self.mode = hw, check_policy(cache), check_sm_mode(mode)
        self.model = model if model is not None else ContentionModel()

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
                     validate=validate, mode=self.mode)
        return Timing(float(r.makespan), dict(r.category_time), r)

    def head_us(self, kernels: Sequence[Kernel]) -> float:
        r = simulate_streams([(self.hw.num_sms, list(kernels))], self.hw, self.model,
                             cache=self.cache, record=False)
        return float(r.makespan)


class StaticTimer:
    """The max-plus evaluator on isolated kernel durations as a timer (no contention; D = 1 is
    the sum of full-GPU times, ``score.evaluator.temporal_makespan``).

    Args:
        hw: the GPU. duration_model: ``table(graph)`` -> (n, N+1) µs (default
            ``StaticDurationModel(hw)``); head kernels always use the analytical model (they are
            not calibrated).
    """

    name = "static"

    def __init__(self, hw: Hardware, duration_model: DurationModel | None = None) -> None:
        self.hw, self.duration_model = hw, duration_model

    @classmethod
    def of(cls, setup: GpuSetup) -> "StaticTimer":
        """The static timer of ``setup`` (its GPU and duration model)."""
        return cls(setup.hw, setup.duration_model)

    def time(self, graph: OpGraph, cfg: Config, record: bool = False,
             validate: bool = True) -> Timing:
        if cfg.D == 1:
            return Timing(temporal_makespan(graph, self.hw, self.duration_model))
        ev = Evaluator.for_config(graph, cfg, self.hw, duration_model=self.duration_model)
        return Timing(float(ev.makespan([cfg.alloc])[0]))

    def head_us(self, kernels: Sequence[Kernel]) -> float:
        sd = StaticDurationModel(self.hw)
        return float(sum(float(np.asarray(sd.kernel_time_us(k, self.hw.num_sms)).ravel()[0])
                         for k in kernels))


def timer_for(setup: GpuSetup, kind: str, cache: str | None = None, contention: bool = True,
              mode: str = "green") -> Timer:
    """The timer named ``kind`` (``TIMER_KINDS``) of ``setup``: ``EventTimer.of(setup, cache,
    contention, mode)`` or ``StaticTimer.of(setup)``.

    Raises:
        ValueError: an unknown kind, or a mode other than green with the static timer (it has
            no shared-pool model).
    """
    if kind not in TIMER_KINDS:
        raise ValueError(f"simulator must be 'event' or 'static', got {kind!r}")
    if kind == "event":
        return EventTimer.of(setup, cache, contention, mode)
    if check_sm_mode(mode) != "green":
        raise ValueError(f"mode {mode!r} needs the event simulator")
    return StaticTimer.of(setup)
