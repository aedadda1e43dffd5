"""The typed result of ``subgpu run``: ``RunReport``, what ``run.run_report`` measures, predicts
and compares for one configuration, and what ``subgpu run --json`` prints (``RunReport.to_json``:
the keys and their order are the JSON's, unchanged since the result was a plain dict).

The report is frozen: the steps after the measurement return a new one
(``run.slowest_rank``: the deployment's slowest rank under ``--collectives nccl``;
``run.label_run``: how it was measured and predicted).

Units: µs for times, SMs for pools, requests for batch and microbatch sizes; speedups and
spreads are dimensionless. Pure Python: importable without torch or a GPU.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from hw_runtime.commands.common import json_safe

__all__ = ["Timed", "RunConfig", "RunReport"]


@dataclass(frozen=True)
class Timed:
    """One whole decode step, measured on the GPU and predicted by the event simulator.

    Fields:
        measured_us: the median step time over every timed replay (µs); with
            ``--collectives nccl`` the slowest rank's (``run.slowest_rank``).
        predicted_us: the simulator's whole step (µs: every run of region instances and the
            head, ``score.step.time_step``).
        spread: (max - min) / median of the round medians (fraction).
        measured_us_this_rank: with ``--collectives nccl``, this rank's own measured step (µs);
            None otherwise, and then left out of the JSON.
    """

    measured_us: float
    predicted_us: float
    spread: float
    measured_us_this_rank: float | None = None

    def as_dict(self) -> dict:
        """The JSON object: ``measured_us``, ``predicted_us``, ``spread`` and, when set,
        ``measured_us_this_rank``."""
        d = dataclasses.asdict(self)
        if self.measured_us_this_rank is None:
            del d["measured_us_this_rank"]
        return d


@dataclass(frozen=True)
class RunConfig:
    """The configuration a run executed and the runtime choices it ran with.

    Fields:
        D: stages. w: boundary reuse (0 or 1). cuts: names of the kernels where segments
        2..K start (K = D + w). sms: SMs per stage. microbatch: b, requests per microbatch.
        microbatches: m = R / b. mode: ``green`` or ``multistream`` (``request.RUN_MODES``).
        streams_per_stage: k (>= 1). collectives: ``--collectives``. gemm, elementwise,
        attention, moe_gemm: the kernels the executor resolved (``moe_gemm`` None for an
        executor without expert GEMMs). lane_priority: whether the streams of a stage ran with
        CUDA priorities (``Executor.priority_for``).
    """

    D: int
    w: int
    cuts: list
    sms: list
    microbatch: int
    microbatches: int
    mode: str
    streams_per_stage: int
    collectives: str
    gemm: str
    elementwise: str
    attention: str
    moe_gemm: str | None
    lane_priority: bool

    def as_dict(self) -> dict:
        """The JSON object, fields in their order."""
        return dataclasses.asdict(self)


#: The ``RunReport`` fields that are left out of the JSON while None (the others are written as
#: ``null``).
OMITTED_WHEN_NONE = ("timeline", "collectives_run", "collectives", "prediction")


@dataclass(frozen=True)
class RunReport:
    """``subgpu run``'s result for one configuration and its temporal baseline.

    Fields:
        workload: ``{"model", "hardware"}`` (the model and the GPU preset predicted) and every
            ``Deployment`` field (GPUs, parallelism, global batch G in requests, lengths in
            tokens).
        config: the configuration run (``RunConfig``).
        temporal, run: the temporal baseline's and the configuration's steps (``Timed``).
        speedup_measured, speedup_predicted: temporal / configuration step time, measured and
            predicted.
        output_check: ``{"bitwise_equal", "rel_l2"}`` of the pipelined output against a
            sequential run, or None (``--no-check``).
        calibration: the calibration file of the prediction, or None (uncalibrated).
        calibration_mismatch: one line per kernel choice the calibration was measured with
            and this run does not use (``run.calibration_mismatch``).
        step: ``{"runs": [{"layers", "instances", "kernels", "makespan_us"}, ...],
            "head_us_predicted"}``: the predicted step's runs of region instances and its head
            (µs).
        ceiling: the perfect-overlap ceiling over the measured temporal step
            (``sim.ceiling.overlap_ceiling``).
        timeline: with ``--trace``, per-stage busy and idle µs (measured, simulated),
            per-category residence µs and the error breakdown (``run.timeline_report``); None
            without a trace.
        collectives_run: with ``--collectives nccl``, the process group
            (``DistContext.record``); else None.
        collectives: how the measured runs executed the collectives
            (``provenance.collectives_label``), and prediction: which model predicted and the
            measured errors that apply (``provenance.prediction_note``); None until
            ``run.label_run``.
    """

    workload: dict
    config: RunConfig
    temporal: Timed
    run: Timed
    speedup_measured: float
    speedup_predicted: float
    output_check: dict | None
    calibration: str | None
    calibration_mismatch: list
    step: dict
    ceiling: dict
    timeline: dict | None = None
    collectives_run: dict | None = None
    collectives: str | None = None
    prediction: dict | None = None

    def as_dict(self) -> dict:
        """The JSON object ``subgpu run --json`` prints: the fields in their order, the nested
        records as objects, ``OMITTED_WHEN_NONE`` left out while None."""
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if v is None and f.name in OMITTED_WHEN_NONE:
                continue
            out[f.name] = v.as_dict() if isinstance(v, (Timed, RunConfig)) else v
        return out

    def to_json(self) -> str:
        """``as_dict`` as strict JSON (indent 2; NaN and infinities written as ``null``,
        ``common.json_safe``)."""
        return json.dumps(json_safe(self.as_dict()), indent=2, allow_nan=False)
