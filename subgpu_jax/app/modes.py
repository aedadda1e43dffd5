"""Temporal, multistream and SubGPU, predicted for one configuration, with and without the
collectives' link time: the three-mode comparison and the decomposition of a predicted gain.

For a SubGPU configuration (cuts, SM split, microbatches) the event simulator predicts the whole
decode step (``app.step.simulate_step``) three ways: the temporal baseline (one kernel at a time
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

from dataclasses import dataclass
from typing import Mapping, Sequence

from subgpu_jax.model.graph import Deployment, build_forward
from subgpu_jax.model.hardware import Hardware
from subgpu_jax.model.models import ModelArch
from subgpu_jax.sim.contention import ContentionModel
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

    Args:
        arch, dep, hw: the workload. model: the contention model (calibrated or not; default
            uncalibrated). cache: the L2 policy. known: makespans already simulated with this
            model (``temporal_us``, ``subgpu_us``), reused instead of simulated again.

    Returns:
        ``ModePrediction``.

    Raises:
        ValueError: ``cfg`` is temporal (D = 1) or infeasible for the workload.
    """
    from subgpu_jax.app.step import simulate_step

    if cfg.D < 2:
        raise ValueError("predict_modes: cfg must be a pipelined configuration (D >= 2)")
    model = ContentionModel() if model is None else model
    known = dict(known or {})
    R = dep.requests_per_gpu
    m = R // cfg.microbatch
    fp1, fpm = build_forward(arch, dep, 1), build_forward(arch, dep, m)
    tcfg = temporal_config(fp1.main.n, hw, R)
    out = {}
    for suffix, md in (("", model), ("_nolink", model.replace(link_time=False))):
        for name, fp, c, mode in (("temporal", fp1, tcfg, "green"), ("subgpu", fpm, cfg, "green"),
                                  ("multistream", fpm, cfg, "multistream")):
            key = f"{name}{suffix}_us"
            if key in known:
                out[key] = float(known[key])
                continue
            out[key] = float(simulate_step(fp, c, hw, "event", md, cache, record=False,
                                           mode=mode).makespan_us)
    return ModePrediction(**out)


def verdict_for(mp: ModePrediction, gpu: str, calibrated: bool, moe: bool,
                bands: Mapping | None = None) -> dict:
    """The verdict of one prediction in the three modes (``app.verdict.decide`` with the bands
    of the ``--collectives sleep`` regime, what ``subgpu run`` measures by default).

    Args:
        mp: the predictions. gpu: the GPU preset. calibrated: the model carries a calibration.
        moe: the model has MoE layers. bands: ``verdict.load_bands(gpu)`` (read when None).

    Returns:
        the six makespans (µs), the four speedups, ``partition``, ``communication``,
        ``recommend``, ``reason``, ``bands`` (``(low, high)`` or None per mode),
        ``band_regimes`` and ``band_text`` (``verdict.format_band`` of the SubGPU speedup).
    """
    from subgpu_jax.app.verdict import band_for, decide, format_band, load_bands

    bands = load_bands(gpu) if bands is None else bands
    sp = mp.speedups
    bd = {md: band_for(bands, gpu, calibrated, moe, mode, "sleep")
          for md, mode in (("subgpu", "green"), ("multistream", "multistream"))}
    v = decide({"subgpu": sp["subgpu"], "multistream": sp["multistream"]}, bd,
               link_free=sp["subgpu_nolink"])
    return {**mp.__dict__, **sp, "partition": v.decomposition.get("partition"),
            "communication": v.decomposition.get("communication"),
            "recommend": v.recommend, "reason": v.reason, "bands": v.bands,
            "band_regimes": v.band_sources, "band_text": format_band(sp["subgpu"],
                                                                      bd["subgpu"], gpu)}


def batch_verdicts(entries: Sequence[tuple[Mapping, Deployment, Config]], arch: ModelArch,
                   hw: Hardware, model: ContentionModel | None, cache: str,
                   calibrated: bool) -> list[dict]:
    """The three modes and the verdict of the best SubGPU record of each batch.

    Args:
        entries: ``(record, deployment, config)`` of each batch's best record (full search
            records: ``temporal_makespan_us`` and ``makespan_us`` are reused).
        arch, hw, model, cache: as the search scored them; calibrated: whether ``model``
            carries a calibration (selects the bands' regime).

    Returns:
        One dict per entry: ``global_batch``, ``attn_tp``, ``attn_dp`` and ``verdict_for``'s
        fields.
    """
    out = []
    for r, dep, cfg in entries:
        mp = predict_modes(arch, dep, cfg, hw, model, cache,
                           known={"temporal_us": r["temporal_makespan_us"],
                                  "subgpu_us": r["makespan_us"]})
        out.append({"global_batch": int(r["global_batch"]), "attn_tp": int(r["attn_tp"]),
                    "attn_dp": int(r["attn_dp"]),
                    **verdict_for(mp, hw.name, calibrated, bool(arch.is_moe))})
    return out


def config_verdict(wl, cfg: Config, hw: Hardware, model: ContentionModel | None, cache: str,
                   calibrated: bool, temporal_us: float, subgpu_us: float) -> dict:
    """``verdict_for`` of one configuration of a ``model.workload.Workload`` (``subgpu
    simulate``), reusing its simulated temporal and SubGPU whole-step makespans (µs)."""
    mp = predict_modes(wl.arch, wl.deploy, cfg, hw, model, cache,
                       known={"temporal_us": temporal_us, "subgpu_us": subgpu_us})
    return verdict_for(mp, hw.name, calibrated, bool(wl.arch.is_moe))


def verdict_lines(v: Mapping) -> list[str]:
    """The ``modes`` and ``verdict`` lines ``subgpu simulate`` prints for ``config_verdict``."""
    return [f"modes     the same schedule on plain streams (multistream, no partition) "
            f"{v['multistream']:.3f}x; without the collectives' link time SubGPU "
            f"{v['subgpu_nolink']:.3f}x, multistream {v['multistream_nolink']:.3f}x",
            f"verdict   {v['band_text']}", f"          {v['reason']}"]
