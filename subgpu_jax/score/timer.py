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
The optional capabilities (``time_many``, ``batches_structures``, ``coalesces``,
``lockstep_rows``, ``model``, ``confirm_top``, ``cheap_tables``, ``TOLERANCE``, ``in_mode``) have
their defaults in ``score.timing.TimerBase``, which every timer inherits, so callers read them
as attributes. The event and static timers also answer per-kernel questions of the model
(``kernel_times``, ``alone_us``: µs, pools in SMs), which ``subgpu tune`` refits from.
``score.step.time_step`` times a whole decode step with any timer; the search's exact scorer
(``search.problem.TimerExact``) wraps one. ``timer_for(setup, name, ...)`` makes one from its
registry name, once, at the command line's edge; ``predicting_timer`` is the timer that predicts
runs on the GPU for searches made with a given one.
"""

from __future__ import annotations

from subgpu_jax.model.setup import GpuSetup
from subgpu_jax.score.batchtimers import BatchedEventTimer, ScreenedTimer
from subgpu_jax.score.eventtimers import EventTimer, FullEventTimer
from subgpu_jax.score.tabletimers import ContentionTimer, StaticTimer
from subgpu_jax.score.timing import StructureCache, Timer, TimerBase, Timing
from subgpu_jax.sim.contention import ContentionModel

__all__ = ["Timing", "Timer", "TimerBase", "EventTimer", "FullEventTimer", "StaticTimer",
           "ContentionTimer", "ScreenedTimer", "BatchedEventTimer", "StructureCache",
           "TIMERS",
           "DEFAULT_TIMER", "timer_for", "timer_help", "predicting_timer"]


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


def predicting_timer(exact: Timer, setup: GpuSetup, model: ContentionModel,
                     cache: str) -> Timer:
    """The timer that predicts runs on the GPU for searches made with ``exact`` (``subgpu
    tune``'s ``Predictor``), made for ``setup``: the event simulator (the reference) with
    ``model`` (its calibration and the ``--collectives`` link time) and L2 policy ``cache``
    when ``exact`` models contention; else ``exact``'s own registry kind made for ``setup``
    (the static evaluator: green contexts only, ``Timer.in_mode``).

    Raises:
        ValueError: as ``timer_for``."""
    if exact.contention:
        return EventTimer(setup.hw, model, cache)
    return timer_for(setup, exact.name, cache, contention=False)
