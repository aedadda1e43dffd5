"""What ``subgpu tune`` needs from a GPU (``TuneExecutor``) and the real one
(``GpuTuneExecutor``: a ``hw_runtime.commands.run.GpuMeasurer``, so also the ``Measurer`` of
``subgpu run``, with ``hw_runtime.gpu.executor.Executor`` under the hood).

A tune executor measures a candidate's whole decode step (CUDA-graph replays, several rounds,
the spread of the round medians) and traces one replay of its main region (the per-kernel
durations the refit reads). Tests use a fake machine with the same two methods
(``tests/hw_runtime/test_tune.py``).

Units: µs for times, seconds for GPU time. Importable without torch; ``GpuTuneExecutor`` needs
torch, a CUDA GPU and green contexts when it is first asked to measure.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

from hw_runtime.commands.run import GpuMeasurer
from hw_runtime.tune.spec import Candidate, TuneSpec

__all__ = ["Timing", "TuneExecutor", "GpuTuneExecutor"]


@dataclass
class Timing:
    """One measurement of a candidate.

    Attributes:
        makespan_us: median per-step time over every timed replay (µs).
        spread: (max - min) / median of the round medians (dimensionless).
        round_medians_us: median of each round (µs).
        gpu_s: wall seconds the GPU was busy with it (capture, GEMM planning, warm-up, replays).
        note: anything the executor wants said (e.g. eager launches after a failed capture).
    """

    makespan_us: float
    spread: float
    round_medians_us: list = field(default_factory=list)
    gpu_s: float = 0.0
    note: str = ""


class TuneExecutor(Protocol):
    """The GPU as ``subgpu tune`` sees it."""

    def measure(self, cand: Candidate, cfg, m: int) -> Timing:
        """Time the whole decode step of ``cand`` (``cfg``: its ``Config``, ``m`` its
        microbatch count; the temporal config for a temporal candidate).

        Raises:
            ValueError: a configuration the GPU cannot run (one line).
        """

    def trace(self, cand: Candidate, cfg, m: int) -> tuple[list[dict] | None, float, str]:
        """One traced replay of the main region's run of ``cand`` (green or temporal):
        ``(intervals, gpu_s, error)``; ``intervals`` as ``hw_runtime.timeline.map_activities``
        (``op`` indexes the kernels of the region graph at ``m`` microbatches, ``stage`` the
        pool, ``start_us``/``end_us``), or None with ``error`` saying why it could not be
        mapped."""

    def release(self) -> None:
        """Free the GPU memory held for the current batch."""


class GpuTuneExecutor(GpuMeasurer):
    """``TuneExecutor`` on the local GPU: one ``TorchWorkload`` (weights and KV caches) and one
    ``Executor`` per global batch, rebuilt when the batch changes (``GpuMeasurer.executor``,
    with the tune's kernel choices ``TuneSpec.kernels``). As a ``GpuMeasurer`` it is also a
    ``hw_runtime.commands.measure.Measurer``: ``report`` measures a prepared ``subgpu run``
    with it.

    Args:
        spec: the tune (deployment, kernel choices, timing protocol).

    Raises (from ``measure``/``trace``):
        ValueError: the workload does not fit in the GPU's memory, or a green-context error
            (one line).
    """

    def __init__(self, spec: TuneSpec) -> None:
        super().__init__()
        self.spec = spec

    def _executor(self, G: int):
        from subgpu_jax.model.workload import Workload

        s = self.spec
        return self.executor(G, Workload.checked(s.arch, s.deployment(G), s.hw), s.kernels,
                             s.collectives)

    def measure(self, cand: Candidate, cfg, m: int) -> Timing:
        """See ``TuneExecutor.measure``."""
        from hw_runtime.gpu.partition import GreenContextError

        t0 = time.perf_counter()
        ex = self._executor(cand.G)
        s = self.spec
        try:
            if cand.mode == "temporal":
                r = ex.measure(ex.temporal_config(), "temporal", s.rounds, s.replays, s.warmup)
            else:
                r = ex.measure(cfg, cand.mode, s.rounds, s.replays, s.warmup,
                               streams_per_stage=cand.config.streams_per_stage)
        except GreenContextError as e:
            raise ValueError(str(e)) from None
        return Timing(makespan_us=float(r.makespan_us), spread=float(r.spread),
                      round_medians_us=[float(x) for x in r.round_medians_us],
                      gpu_s=time.perf_counter() - t0, note=r.note)

    def trace(self, cand: Candidate, cfg, m: int) -> tuple[list[dict] | None, float, str]:
        """See ``TuneExecutor.trace`` (``Executor.profile`` mapped onto the launch plan with
        ``hw_runtime.timeline.map_activities``)."""
        from hw_runtime.timeline import MappingError, map_activities

        t0 = time.perf_counter()
        ex = self._executor(cand.G)
        if cand.mode == "temporal":
            cfg, mode, k = ex.temporal_config(), "temporal", 1
        else:
            mode, k = cand.mode, cand.config.streams_per_stage
        prof = ex.profile(cfg, mode, streams_per_stage=k)
        counts = ex.activity_counts(m, cfg, mode)
        try:
            ivs = map_activities(prof["plan_object"], prof["activities"], counts, k)
        except MappingError as e:
            return None, time.perf_counter() - t0, str(e)
        return ivs, time.perf_counter() - t0, ""
