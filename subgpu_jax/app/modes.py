"""Temporal, multistream and SubGPU, predicted for one configuration, with and without the
collectives' link time: the three-mode comparison and the decomposition of a predicted gain.

For a SubGPU configuration (cuts, SM split, microbatches) the event simulator predicts the whole
decode step (``score.step.time_step``) three ways: the temporal baseline (one kernel at a time
on all SMs), the same microbatched schedule on plain CUDA streams (``mode="multistream"``: every
lane draws CTAs from all SMs in launch order, no partition), and on green contexts (each stage on
its own SM pool). Each is predicted again with ``ContentionModel(link_time=False)``, the control
in which the TP/EP collectives cost only their endpoint copy (``subgpu run --collectives
none`` measures the same). Then:

* ``partition`` = SubGPU speedup / multistream speedup: what the SM partition itself adds over
  microbatch overlap on shared SMs (< 1: the partition costs);
* ``communication`` = SubGPU speedup / its link-free speedup: the part of the gain that is the
  hiding of collective waits; the link-free speedup is what overlapping compute and memory work
  alone gives.

Units: µs; speedups are dimensionless (temporal / mode, both from the same model).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from subgpu_jax.model.collective import DEFAULT_COLLECTIVES
from subgpu_jax.model.graph import Deployment, build_forward
from subgpu_jax.model.hardware import Hardware
from subgpu_jax.model.models import ModelArch
from subgpu_jax.sim.contention import ContentionModel, uncalibrated_model_id
from subgpu_jax.space.config import Config, temporal_config

__all__ = ["ModePrediction", "predict_modes", "verdict_for", "batch_verdicts", "config_verdict",
           "verdict_lines"]


@dataclass(frozen=True)
class ModePrediction:
    """Whole-step makespans (µs) of one configuration in the three modes, with the link time
    (``*_us``) and without it (``*_nolink_us``)."""

    temporal_us: float
    subgpu_us: float
    multistream_us: float
    temporal_nolink_us: float
    subgpu_nolink_us: float
    multistream_nolink_us: float

    @property
    def speedups(self) -> dict[str, float]:
        """Speedups over temporal of the same link setting: ``subgpu``, ``multistream``,
        ``subgpu_nolink``, ``multistream_nolink``."""
        return {"subgpu": self.temporal_us / self.subgpu_us,
                "multistream": self.temporal_us / self.multistream_us,
                "subgpu_nolink": self.temporal_nolink_us / self.subgpu_nolink_us,
                "multistream_nolink": self.temporal_nolink_us / self.multistream_nolink_us}


def predict_modes(arch: ModelArch, dep: Deployment, cfg: Config, hw: Hardware,
                  model: ContentionModel | None = None, cache: str = "lru",
                  known: Mapping[str, float] | None = None) -> ModePrediction:
    """Predict ``cfg`` (a SubGPU configuration of ``build_forward(arch, dep, 1).main``) in the
    three modes, with and without the collectives' link time.

    A deployment with an output length (a whole generation, ``model.generation``) gives every
    makespan as the same weighted mean over the generation's simulated steps; ``known`` is then
    ignored (the six must come from the same steps).

    Args:
        arch, dep, hw: the workload. model: the contention model (calibrated or not; default
            uncalibrated; not ``ContentionModel.off()``: with contention off every lane of the
            multistream mode would run at its isolated whole-GPU rate). cache: the L2 policy.
            known: makespans (µs, > 0) already simulated with this model for this one step,
            ``temporal_us`` and/or ``subgpu_us``, reused instead of simulated again.

    Returns:
        ``ModePrediction``.

    Raises:
        ValueError: ``cfg`` is temporal (D = 1), its microbatch does not divide the per-GPU
            batch, ``model`` is not a contention-on ``ContentionModel``, or ``known`` holds
            another key or a value that is not a positive finite number.
    """
    import math

    from subgpu_jax.model.generation import generation_steps
    from subgpu_jax.score.step import time_step
    from subgpu_jax.score.timer import EventTimer

    if cfg.D < 2:
        raise ValueError("predict_modes: cfg must be a pipelined configuration (D >= 2)")
    model = ContentionModel() if model is None else model
    if not isinstance(model, ContentionModel):
        raise ValueError(f"predict_modes: model must be a ContentionModel, got "
                         f"{type(model).__name__}")
    if model.isolated:
        raise ValueError("predict_modes: the multistream mode needs the contention model "
                         "(contention off would run every lane on all SMs at once)")
    known = dict(known or {})
    for k, v in known.items():
        if k not in ("temporal_us", "subgpu_us"):
            raise ValueError(f"predict_modes: known may hold temporal_us and subgpu_us, got {k!r}")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                or v <= 0:
            raise ValueError(f"predict_modes: known[{k!r}] must be a positive finite makespan "
                             f"(µs), got {v!r}")
    R = dep.requests_per_gpu
    if cfg.microbatch < 1 or R % cfg.microbatch:
        raise ValueError(f"predict_modes: microbatch {cfg.microbatch} must divide the per-GPU "
                         f"batch {R}")
    steps = generation_steps(dep)
    if dep.output_len:
        known = {}
    m = R // cfg.microbatch
    out = {}
    for suffix, md in (("", model), ("_nolink", model.replace(link_time=False))):
        timer = EventTimer(hw, md, cache)   # once per model; its multistream copy: in_mode
        for name, c, mode in (("temporal", None, "green"), ("subgpu", cfg, "green"),
                              ("multistream", cfg, "multistream")):
            key = f"{name}{suffix}_us"
            if key in known:
                out[key] = float(known[key])
                continue
            t, tm = 0.0, timer.in_mode(mode)
            for d, w in steps:
                fp = build_forward(arch, d, 1 if c is None else m)
                cc = temporal_config(fp.main.n, hw, R) if c is None else c
                t += w * float(time_step(fp, cc, tm, record=False).makespan_us)
            out[key] = t
    return ModePrediction(**out)


def verdict_for(mp: ModePrediction, gpu: str, calibrated: bool, moe: bool,
                bands: Mapping | None = None, model_id: str | None = None,
                validated: Mapping | None = None) -> dict:
    """The verdict of one prediction in the three modes (``app.verdict.decide`` with the bands
    of the ``--collectives sleep`` regime, what ``subgpu run`` measures by default).

    Args:
        mp: the predictions. gpu: the GPU preset. calibrated: the model carries a calibration.
        moe: the model has MoE layers. bands: ``verdict.load_bands(gpu)`` (read when None).
        model_id: the uncalibrated model that predicted (selects the digests' bands). A GPU
        without bands of its own (never validated) is judged with the validated GPUs' bands
        widened by ``verdict.CROSS_GPU_WIDENING`` (``verdict.transfer_band``): "temporal" when
        SubGPU is predicted to lose even at their high end, else "measure"; ``validated``: those
        GPUs' bands (``verdict.validated_bands``; read when None and needed).

    Returns:
        the six makespans (µs), the four speedups, ``partition``, ``communication``,
        ``recommend``, ``reason``, ``bands`` (``(low, high)`` or None per mode),
        ``band_regimes``, ``bands_transferred`` (the GPU was never validated: the bands are
        other GPUs', widened) and ``band_text`` (``verdict.format_band`` of the SubGPU speedup).
    """
    from subgpu_jax.app.verdict import (band_for, decide, format_band, load_bands,
                                        transfer_band, validated_bands)

    bands = load_bands(gpu) if bands is None else bands
    sp = mp.speedups
    modes = (("subgpu", "green"), ("multistream", "multistream"))
    bd = {md: band_for(bands, gpu, calibrated, moe, mode, DEFAULT_COLLECTIVES)
          for md, mode in modes}
    if not bands:   # a GPU the protocol never validated: the other GPUs' bands, widened
        other = (validated_bands(exclude=gpu, model_id=model_id) if validated is None
                 else validated)
        bd = {md: transfer_band(other, calibrated, moe, mode, DEFAULT_COLLECTIVES)
              for md, mode in modes}
    # no link time to remove (one GPU, no collectives): nothing to decompose
    has_link = not math.isclose(mp.temporal_us, mp.temporal_nolink_us, rel_tol=1e-12)
    v = decide({"subgpu": sp["subgpu"], "multistream": sp["multistream"]}, bd,
               link_free=sp["subgpu_nolink"] if has_link else None)
    return {**mp.__dict__, **sp, "partition": v.decomposition.get("partition"),
            "communication": v.decomposition.get("communication"),
            "recommend": v.recommend, "reason": v.reason, "bands": v.bands,
            "band_regimes": v.band_sources,
            "bands_transferred": any(b is not None and b.transferred for b in bd.values()),
            "band_text": format_band(sp["subgpu"],
                                                                      bd["subgpu"], gpu)}


def batch_verdicts(entries: Sequence[tuple[Mapping, Deployment, Config]], arch: ModelArch,
                   hw: Hardware, model: ContentionModel | None, cache: str,
                   calibrated: bool, reuse_subgpu: bool = True) -> list[dict]:
    """The three modes and the verdict of the best SubGPU record of each batch.

    Args:
        entries: ``(record, deployment, config)`` of each batch's best record (full search
            records: ``temporal_makespan_us`` and ``makespan_us`` are reused).
        arch, hw, model, cache: as the search scored them; calibrated: whether ``model``
            carries a calibration (selects the bands' regime). reuse_subgpu: reuse the record's
            ``makespan_us`` as the SubGPU makespan; False when another timer than the event
            simulator scored it (the bands, and the other modes, are the event simulator's).

    Returns:
        One dict per entry: ``global_batch``, ``attn_tp``, ``attn_dp`` and ``verdict_for``'s
        fields.
    """
    from subgpu_jax.app.verdict import load_bands

    from subgpu_jax.app.verdict import validated_bands

    me = uncalibrated_model_id(hw)
    bands = load_bands(hw.name, model_id=me)   # once for every batch, as the other GPUs'
    validated = None if bands else validated_bands(exclude=hw.name, model_id=me)
    out = []
    for r, dep, cfg in entries:
        mp = predict_modes(arch, dep, cfg, hw, model, cache,
                           known={"temporal_us": r["temporal_makespan_us"],
                                  **({"subgpu_us": r["makespan_us"]} if reuse_subgpu else {})})
        v = verdict_for(mp, hw.name, calibrated, bool(arch.is_moe), bands, me, validated)
        tag = f"G={int(r['global_batch'])} TP{int(r['attn_tp'])}xDP{int(r['attn_dp'])}"
        out.append({"global_batch": int(r["global_batch"]), "attn_tp": int(r["attn_tp"]),
                    "attn_dp": int(r["attn_dp"]), "label": tag, **v,
                    **({} if reuse_subgpu else {"rescored_by": "event simulator"})})
    return out


def config_verdict(arch: ModelArch, dep: Deployment, cfg: Config, hw: Hardware,
                   model: ContentionModel | None, cache: str, calibrated: bool,
                   temporal_us: float, subgpu_us: float | None) -> dict:
    """``verdict_for`` of one configuration (``subgpu simulate``), reusing its simulated
    temporal and SubGPU makespans (µs; for a generation, ``dep.output_len`` > 0, all six are
    recomputed as generation means; ``subgpu_us`` None: simulated here by the event
    simulator, as when another timer made the caller's).

    ``model`` None (the static evaluator) or with contention off gives ``{"skipped": reason}``:
    the multistream mode needs the event simulator's shared-SM contention model.
    """
    if model is None:
        return {"skipped": "the three modes need the event simulator (--simulator event)"}
    if model.isolated:
        return {"skipped": "the three modes need contention on (not --no-contention): with "
                           "it off every multistream lane would run on all SMs at once"}
    mp = predict_modes(arch, dep, cfg, hw, model, cache,
                       known={"temporal_us": temporal_us,
                              **({"subgpu_us": subgpu_us} if subgpu_us is not None else {})})
    from subgpu_jax.app.verdict import load_bands
    me = uncalibrated_model_id(hw)
    v = verdict_for(mp, hw.name, calibrated, bool(arch.is_moe),
                    load_bands(hw.name, model_id=me), me)
    return v if subgpu_us is not None else {**v, "rescored_by": "event simulator"}


def verdict_lines(v: Mapping) -> list[str]:
    """The ``modes`` and ``verdict`` lines ``subgpu simulate`` prints for ``config_verdict``."""
    if "skipped" in v:
        return [f"modes     not predicted: {v['skipped']}"]
    by = (f"by the {v['rescored_by']} (whose predictions the bands were measured on): "
          f"SubGPU {v['subgpu']:.3f}x, " if v.get("rescored_by") else "")
    return [f"modes     {by}the same schedule on plain streams (multistream, no partition) "
            f"{v['multistream']:.3f}x; without the collectives' link time SubGPU "
            f"{v['subgpu_nolink']:.3f}x, multistream {v['multistream_nolink']:.3f}x",
            f"verdict   {v['band_text']}", f"          {v['reason']}"]
