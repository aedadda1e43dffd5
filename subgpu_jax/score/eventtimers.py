"""The event simulator as timers (``score.timer`` registers them): ``EventTimer`` (``event``,
the reference; its makespan batches in the compiled engine, ``score.lockstep``) and
``FullEventTimer`` (``event-full``: every region simulated, the Python simulator alone), and
``green_contention_event``, the event timer that the timers built on the vectorised contention
scorer take their model from."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from subgpu_jax.model.graph import Kernel, OpGraph
from subgpu_jax.model.hardware import Hardware
from subgpu_jax.model.setup import GpuSetup
from subgpu_jax.score.lockstep import LockstepBatches, compiled_available
from subgpu_jax.score.timing import TimerBase, Timing, config_rows
from subgpu_jax.sim.contention import ContentionModel
from subgpu_jax.sim.eventsim import check_sm_mode, simulate, simulate_streams
from subgpu_jax.sim.l2cache import check_policy
from subgpu_jax.space.config import Config

__all__ = ["EventTimer", "FullEventTimer", "green_contention_event"]


class EventTimer(TimerBase):
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
    batches_structures = True   # its time_many: one engine call (a Python loop without one)

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

    def without_engine(self) -> "EventTimer":
        """This timer with its makespan batches run by the Python simulator (``engine``
        ``python``): the same model, L2 policy, mode and fast-forward, so the same makespans
        (the engine equals the full simulation bit for bit, the fast-forward is within
        ``sim.periodic.FORWARD_TOL`` of it), without the engine's one compilation. ``self``
        when it has no engine. A copy: a subclass keeps its own fields (a screened timer its
        screen)."""
        if self.batches is None:
            return self
        import copy

        t = copy.copy(self)
        t.batches, t.engine, t.batched, t.compiled = None, "python", False, False
        return t

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
                         for c in config_rows(cfg, allocs)])

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

    def in_mode(self, mode: str) -> "EventTimer":
        """This timer in SM mode ``mode`` (``sim.eventsim.SM_MODES``): itself when that is its
        mode, else an ``EventTimer`` of the same GPU, model, L2 policy, fast-forward and
        engine.

        Raises:
            ValueError: an unknown mode."""
        if check_sm_mode(mode) == self.mode:
            return self
        # a subclass's engine may be a batch engine (``event-batched``: "auto"): the copy
        # takes the compiled engine where this timer has it, else the Python simulator
        return EventTimer(self.hw, self.model, self.cache, mode, self.forward,
                          "compiled" if self.compiled else "python")

    def kernel_times(self, graph: OpGraph, cfg: Config) -> dict[tuple[str, int], float]:
        """The mean duration (µs) of each kernel of one simulated pass of ``graph`` under
        ``cfg`` (green contexts), in context (co-running kernels slow each other), per (kernel
        key, ``model.calibration.kernel_key``; its pool's SMs): the whole GPU for a temporal
        configuration (D = 1). Every region is simulated (no fast-forward); ``cfg`` is taken
        as checked.

        Raises:
            ValueError: a timer in another mode than green (the kernels have no pool of
                their own)."""
        from subgpu_jax.model.calibration import kernel_key

        if self.mode != "green":
            raise ValueError("kernel_times: multistream runs have no pools")
        pools = [self.hw.num_sms] if cfg.D == 1 else list(cfg.alloc)
        r = simulate(graph, cfg, self.hw, self.model, cache=self.cache, record=False,
                     validate=False)
        acc: dict[tuple[str, int], list[float]] = {}
        for i in range(len(r.kernel_start)):
            op, st = int(r.kernel_index[i]), int(r.kernel_stage[i])
            acc.setdefault((kernel_key(graph.kernels[op]), pools[st]), []).append(
                float(r.kernel_end[i] - r.kernel_start[i]))
        return {k: float(np.mean(v)) for k, v in acc.items()}

    def alone_us(self, kernel: Kernel, sms: int) -> float:
        """The time (µs) of ``kernel`` alone on a pool of ``sms`` SMs: the model's calibration
        table when it measured the kernel (``Calibration.kernel_time_us``), else the event
        simulator's lone run of it (the model without its calibration, no L2 model)."""
        cal = self.model.calibration
        if cal is not None and cal.has(kernel):
            return float(cal.kernel_time_us(kernel, sms))
        return float(simulate_streams([(int(sms), [kernel])], self.hw,
                                      self.model.replace(calibration=None), "none",
                                      record=False).makespan)


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



def green_contention_event(setup: GpuSetup, cache: str | None, contention: bool, mode: str,
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
