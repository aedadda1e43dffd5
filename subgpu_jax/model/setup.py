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
from typing import Any

from subgpu_jax.model.hardware import Hardware

__all__ = ["GpuSetup"]


@dataclass(frozen=True)
class GpuSetup:
    """A GPU bound to a calibration, or to none.

    Attributes:
        hw: the GPU (with a calibration: its measured bandwidth curve and copy peak).
        calibration: the ``Calibration`` (carried into the contention model), or None.
        duration_model: the kernel-duration model of the max-plus scorers (``table(graph)`` ->
            (n, N+1) µs; ``kernel_time_us(k, sms)``), or None for the analytical
            ``graph.StaticDurationModel(hw)``.
        cache: the event simulator's default L2 policy (``"none"`` calibrated, else ``"lru"``).
    """

    hw: Hardware
    calibration: Any = None
    duration_model: Any = None
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
