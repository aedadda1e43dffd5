"""A GPU as the simulators see it: the one object that carries everything a calibration changes.

A calibration (``model.calibration.Calibration``) changes four things at once, and they must
agree: the hardware (its measured HBM bandwidth curve and copy peak), the kernel durations of
the max-plus scorers (``CalibratedDurationModel``), the event simulator's contention model (each
measured kernel alone reproduces its time: ``ContentionModel(calibration=...)``) and the default
L2 policy (``"none"``: measured times already hold the L2 behaviour, so the residency model
would count those hits twice; docs/fidelity.md). ``Calibration.bind(hw)`` makes them once, as a
``GpuSetup``; ``GpuSetup.uncalibrated(hw)`` is the analytical model of the same shape. Every
entry point takes its GPU, duration model, calibration and cache default from one of these;
``score.timer`` makes the timers from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from subgpu_jax.model.graph import Kernel, OpGraph
from subgpu_jax.model.hardware import Hardware

__all__ = ["GpuSetup", "DurationModel"]


@runtime_checkable
class DurationModel(Protocol):
    """Kernel durations alone on an SM pool: what the max-plus scorers (``score.evaluator``),
    the search's problems and the static timer read. ``graph.StaticDurationModel`` (analytical)
    and ``calibration.CalibratedDurationModel`` (measured) implement it."""

    def table(self, graph: OpGraph, max_sms: int | None = None) -> np.ndarray:
        """float64 (graph.n, N+1) µs: column p = each kernel's time alone on p SMs (column 0
        holds the time on 1 SM); N = ``max_sms``, default the GPU's SMs.

        Raises:
            ValueError: a kernel the model cannot time (bad work, not measured)."""
        ...

    def kernel_time_us(self, k: Kernel, sms) -> np.ndarray:
        """Time (µs) of ``k`` alone on ``sms`` SMs (array-like >= 1), shaped as ``sms``."""
        ...


@dataclass(frozen=True)
class GpuSetup:
    """A GPU bound to a calibration, or to none.

    Attributes:
        hw: the GPU (with a calibration: its measured bandwidth curve and copy peak).
        calibration: the ``Calibration`` (carried into the contention model), or None.
        duration_model: the ``DurationModel`` of the max-plus scorers, or None for the
            analytical ``graph.StaticDurationModel(hw)``.
        cache: the event simulator's default L2 policy (``"none"`` calibrated, else ``"lru"``).
    """

    hw: Hardware
    calibration: Any = None
    duration_model: DurationModel | None = None
    cache: str = "lru"

    @classmethod
    def uncalibrated(cls, hw: Hardware) -> "GpuSetup":
        """The analytical model of ``hw``: no calibration, analytical durations, LRU L2."""
        return cls(hw=hw)

    @property
    def calibrated(self) -> bool:
        """True when a calibration is bound."""
        return self.calibration is not None

    def cache_policy(self, given: str | None = None) -> str:
        """The L2 policy to simulate with: ``given`` (a ``--cache`` option) when not None, else
        this setup's default (validity is checked by ``sim.l2cache.check_policy``)."""
        return self.cache if given is None else given
