"""Verdicts with their measured uncertainty: does SubGPU pay here, and how sure are we?

A predicted speedup S (temporal makespan / configuration makespan, both predicted by the same
model) is only as good as the model was on workloads it never saw. The validation protocol
(``experiments/hw_verdicts_h200.py``) measures, per *regime*, the ratio

    r = measured speedup / predicted speedup

over held-out workloads (never used in any fit). The band of a new prediction S in that regime
is ``[S * r_min, S * r_max]``. A regime is (GPU, model: ``uncalibrated`` or ``calibrated``,
``dense`` or ``moe``, run mode ``green`` or ``multistream``, ``--collectives`` ``sleep``,
``proxy`` or ``none``); where a regime has fewer than ``MIN_WORKLOADS`` held-out workloads, the band pools
the dense and MoE rows of the same GPU, model, mode and collectives (and says so).

The decision rule (``decide``): recommend the mode (SubGPU on green contexts, or the same
microbatched schedule on plain streams) whose band's low end is highest, and only if that low
end is above 1. Otherwise, where a mode is *predicted* to gain more than ``NEUTRAL[1]`` but
its band's low end does not clear 1, the prediction cannot decide: "measure" (``subgpu tune``
measures the candidates against temporal and keeps the fastest; temporal until then). Where no
mode is predicted to gain more than 2%: temporal, with the reason in numbers. The guard is
one-sided on purpose: on the held-out workloads most errors overstate the gain (r below 1), so
a predicted loss is rarely a measured win, while a predicted gain often is not one. Without
validation data for the GPU and regime, no band is printed and nothing is recommended beyond
"measure it".

Sources: the committed digest ``hw_verdicts_<gpu>.json`` of the results folder (its ``bands``
field, written by the protocol's analyze phase from the held-out rows only; docs/verdicts.md).
"""

from __future__ import annotations

import json
import math
import os
import statistics

import numpy as np

from subgpu_jax.model.collective import COLLECTIVE_MODES, COLLECTIVES
from subgpu_jax.sim.eventsim import SM_MODES
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

__all__ = ["Band", "Verdict", "MIN_WORKLOADS", "NEUTRAL", "regime_key", "describe_regime",
           "fit_bands", "classify", "decide", "load_bands", "band_for", "format_band",
           "bands_to_json", "verdict_digest", "COLLECTIVES", "MODES", "CROSS_GPU_WIDENING",
           "transfer_band", "validated_bands", "validated_gpus"]

#: The run modes and collective settings a regime can name (``sim.eventsim.SM_MODES``,
#: ``subgpu run --collectives``).
MODES = SM_MODES
#: The modes ``decide`` compares with temporal.
DECIDE_KEYS = ("subgpu", "multistream")


def _pos(v, what: str) -> float:
    """``v`` as a float if it is a real, finite number > 0 (numpy scalars included, bools
    not); else ValueError naming ``what``."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer,
                                                             np.floating)):
        raise ValueError(f"{what} must be a finite number > 0, got {v!r}")
    x = float(v)
    if not (math.isfinite(x) and x > 0):
        raise ValueError(f"{what} must be a finite number > 0, got {v!r}")
    return x


#: Held-out workloads a regime needs for a band of its own (else the pooled band).
MIN_WORKLOADS = 2
#: Measured speedups inside this interval are "no change" (timing spread and run-to-run drift
#: of whole-step replays on the H200 reach 1-2%: docs/results.md "Wins on the H200").
NEUTRAL = (0.98, 1.02)
#: How much wider a band must be on a GPU the protocol never validated: the largest factor by
#: which a held-out ratio (measured / predicted speedup) of one validated GPU fell outside the
#: other validated GPU's band of its regime. Measured once, H200 bands on the H100's 160
#: held-out configurations (2026-12-06; ``hw_verdicts/analytic-v3/hw_verdicts_h100.json``,
#: ``cross_gpu.widening``: Llama-3.1-70B TP8 G 1,024, a green-context configuration under
#: ``--collectives proxy``, ratio 1.360 against the H200 band's 1.208); the reverse (H100 bands
#: on the H200's rows) needed none. One pair of GPUs: a lower bound for a third GPU.
CROSS_GPU_WIDENING = 1.126


@dataclass(frozen=True)
class Band:
    """The measured/predicted speedup ratio of one regime on held-out workloads.

    Attributes:
        lo, hi: smallest and largest ratio r = measured / predicted speedup (> 0).
        median: median ratio. n: configurations behind it. workloads: their workload names.
        regime: the regime key (``regime_key``), or the pooled key it fell back to.
        source: the file the band was read from (or "fit" when made in memory).
        transferred: made for a GPU without its own validation from other GPUs' bands
            (``transfer_band``): it can say "loses" or "cannot decide", never "wins".
        widening: the factor ``transfer_band`` widened it by (1 for a GPU's own band).
        gpus: the validated GPUs whose held-out rows it comes from (preset names; a
            transferred band's several, in ``transfer_band``'s order; () when not known, e.g. a
            band made in memory).
    """

    lo: float
    hi: float
    median: float
    n: int
    workloads: tuple[str, ...]
    regime: str
    source: str = "fit"
    transferred: bool = False
    widening: float = 1.0
    gpus: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        lo = _pos(self.lo, "band.lo")
        hi = _pos(self.hi, "band.hi")
        med = _pos(self.median, "band.median")
        if not lo <= med <= hi:
            raise ValueError(f"band {self.regime!r}: needs lo <= median <= hi, got {lo}, "
                             f"{med}, {hi}")
        if isinstance(self.n, bool) or not isinstance(self.n, (int, np.integer)) or self.n < 1:
            raise ValueError(f"band {self.regime!r}: n must be an integer >= 1, got {self.n!r}")
        if not isinstance(self.workloads, tuple) or not self.workloads or \
                not all(isinstance(w, str) and w for w in self.workloads):
            raise ValueError(f"band {self.regime!r}: workloads must be a non-empty tuple of "
                             f"names, got {self.workloads!r}")
        if not isinstance(self.gpus, tuple) or not all(isinstance(g, str) and g
                                                        for g in self.gpus):
            raise ValueError(f"band {self.regime!r}: gpus must be a tuple of GPU names, got "
                             f"{self.gpus!r}")

    def apply(self, speedup: float) -> tuple[float, float]:
        """The band ``(low, high)`` of a predicted ``speedup`` (dimensionless)."""
        return speedup * self.lo, speedup * self.hi


def regime_key(gpu: str, calibrated: bool, moe: bool | None, mode: str,
               collectives: str) -> str:
    """``"H200/uncalibrated/dense/green/sleep"``; ``moe=None`` gives the pooled key
    (``.../any/...``)."""
    fam = "any" if moe is None else ("moe" if moe else "dense")
    return (f"{gpu.upper()}/{'calibrated' if calibrated else 'uncalibrated'}/{fam}/{mode}/"
            f"{collectives}")


def describe_regime(key: str) -> str:
    """``regime_key`` in words for a user: ``"H200/uncalibrated/dense/green/sleep"`` ->
    ``"uncalibrated model, dense models, green contexts, collectives emulated as a wait
    (--collectives sleep)"``; a key of another form is returned as it is."""
    parts = key.split("/")
    if len(parts) != 5:
        return key
    _, cal, fam, mode, coll = parts
    fams = {"dense": "dense models", "moe": "MoE models", "any": "dense and MoE models pooled"}
    modes = {"green": "green contexts", "multistream": "plain streams (multistream)"}
    colls = {m.name: f"{m.runtime} (--collectives {m.name})" for m in COLLECTIVE_MODES.values()}
    return (f"{cal} model, {fams.get(fam, fam)}, {modes.get(mode, mode)}, "
            f"{colls.get(coll, coll)}")


def fit_bands(rows: Iterable[Mapping], exclude: str | None = None) -> dict[str, Band]:
    """Bands from validation rows.

    Args:
        rows: dicts with ``workload``, ``gpu``, ``calibrated`` (bool), ``moe`` (bool),
            ``mode``, ``collectives``, ``predicted_speedup``, ``measured_speedup`` (> 0) and
            ``held_out`` (bool). Only held-out rows make bands.
        exclude: a workload left out (leave-one-workload-out validation).

    Returns:
        ``{regime key: Band}`` for every regime and pooled key with at least one row.

    Raises:
        ValueError: a non-positive or non-finite speedup (names the row's workload).
    """
    groups: dict[str, list[tuple[float, str]]] = {}
    for i, r in enumerate(rows):
        if not isinstance(r, Mapping):
            raise ValueError(f"rows[{i}] must be a mapping, got {type(r).__name__}")
        miss = [k for k in ("workload", "gpu", "calibrated", "moe", "mode", "collectives",
                            "predicted_speedup", "measured_speedup", "held_out") if k not in r]
        if miss:
            raise ValueError(f"rows[{i}] lacks {', '.join(miss)}")
        for k in ("calibrated", "moe", "held_out"):
            if not isinstance(r[k], (bool, np.bool_)):
                raise ValueError(f"rows[{i}].{k} must be a bool, got {r[k]!r}")
        if r["mode"] not in MODES or r["collectives"] not in COLLECTIVES \
                or not isinstance(r["gpu"], str):
            raise ValueError(f"rows[{i}]: mode must be one of {MODES}, collectives one of "
                             f"{COLLECTIVES} and gpu a name, got {r['mode']!r}, "
                             f"{r['collectives']!r}, {r['gpu']!r}")
        if not r["held_out"] or r["workload"] == exclude:
            continue
        try:
            p = _pos(r["predicted_speedup"], "predicted")
            m = _pos(r["measured_speedup"], "measured")
        except ValueError:
            raise ValueError(f"{r['workload']}: speedups must be finite and > 0, got predicted "
                             f"{r['predicted_speedup']!r}, measured "
                             f"{r['measured_speedup']!r}") from None
        for moe in (bool(r["moe"]), None):
            k = regime_key(r["gpu"], bool(r["calibrated"]), moe, r["mode"], r["collectives"])
            groups.setdefault(k, []).append((m / p, r["workload"]))
    out = {}
    for k, v in groups.items():
        rs = [x for x, _ in v]
        out[k] = Band(lo=min(rs), hi=max(rs), median=statistics.median(rs), n=len(rs),
                      workloads=tuple(sorted({w for _, w in v})), regime=k,
                      gpus=(k.split("/")[0],))
    return out


def band_for(bands: Mapping[str, Band], gpu: str, calibrated: bool, moe: bool, mode: str,
             collectives: str) -> Band | None:
    """The band of a regime: its own when it has ``MIN_WORKLOADS`` held-out workloads, else the
    pooled one (dense and MoE together) when that has them, else None (no validation)."""
    own = bands.get(regime_key(gpu, calibrated, moe, mode, collectives))
    if own is not None and len(own.workloads) >= MIN_WORKLOADS:
        return own
    pooled = bands.get(regime_key(gpu, calibrated, None, mode, collectives))
    if pooled is not None and len(pooled.workloads) >= MIN_WORKLOADS:
        return pooled
    return None


def transfer_band(validated: Mapping[str, Mapping[str, Band]], calibrated: bool,
                  moe: bool, mode: str, collectives: str,
                  widening: float = CROSS_GPU_WIDENING) -> Band | None:
    """The band of a regime on a GPU without its own validation, from the GPUs with one:
    the lowest low and the highest high of their bands of the regime (``band_for``: own or
    pooled), divided and multiplied by ``widening`` (``CROSS_GPU_WIDENING``, measured).

    Args:
        validated: ``{gpu: its bands}`` (``validated_bands``). calibrated, moe, mode,
            collectives: the regime. widening: >= 1.

    Returns:
        a ``Band`` with ``transferred`` set (regime ``"transferred from H200+H100: ..."``),
        or None when no validated GPU has the regime.

    Raises:
        ValueError: ``widening`` < 1.
    """
    if not _pos(widening, "widening") >= 1.0:
        raise ValueError(f"widening must be >= 1, got {widening!r}")
    got = [(g, band_for(b, g, calibrated, moe, mode, collectives))
           for g, b in sorted(validated.items())]
    got = [(g, b) for g, b in got if b is not None]
    if not got:
        return None
    lo = min(b.lo for _, b in got) / widening
    hi = max(b.hi for _, b in got) * widening
    med = min(max(statistics.median(b.median for _, b in got), lo), hi)
    ws = tuple(sorted({f"{g}:{w}" for g, b in got for w in b.workloads}))
    src = "+".join(g for g, _ in got)
    return Band(lo=lo, hi=hi, median=med, n=sum(b.n for _, b in got), workloads=ws,
                regime=f"transferred from {src}: "
                       + regime_key("any", calibrated, moe, mode, collectives).split("/", 1)[1],
                source=", ".join(sorted({b.source for _, b in got})), transferred=True,
                widening=float(widening), gpus=tuple(g for g, _ in got))


def validated_bands(exclude: str | None = None, model_id: str | None = None,
                    folder: str | os.PathLike | None = None) -> dict[str, dict[str, Band]]:
    """``{gpu: load_bands(gpu)}`` of every GPU preset with committed bands (the GPUs the
    held-out protocol validated), ``exclude`` left out.

    Raises:
        ValueError: a digest that exists but is unreadable (as ``load_bands``)."""
    from subgpu_jax.model.hardware import HARDWARE

    out = {}
    for g in HARDWARE:
        if g == exclude:
            continue
        b = load_bands(g, folder, model_id)
        if b:
            out[g] = b
    return out


def classify(speedup: float, band: Band | None) -> str:
    """``"win"`` (the band's low end > 1), ``"loss"`` (its high end < 1), ``"uncertain"``
    (the band straddles 1, or a transferred band above 1: a win is never decided on a GPU
    without its own validation) or ``"unvalidated"`` (no band)."""
    speedup = _pos(speedup, "speedup")
    if band is None:
        return "unvalidated"
    if not isinstance(band, Band):
        raise ValueError(f"band must be a Band or None, got {type(band).__name__}")
    lo, hi = band.apply(speedup)
    if lo > 1.0 and not band.transferred:
        return "win"
    if hi < 1.0:
        return "loss"
    return "uncertain"


@dataclass
class Verdict:
    """What to run, with the numbers behind it.

    Attributes:
        recommend: ``"subgpu"``, ``"multistream"``, ``"temporal"`` or ``"measure"`` (no
            validation data, or a predicted gain above ``NEUTRAL[1]`` whose band's low end
            does not clear 1: nothing can be recommended from the prediction alone).
        predicted: predicted speedup over temporal per mode (``subgpu``, ``multistream``).
        bands: ``(low, high)`` of each mode's prediction, None where unvalidated.
        classes: ``classify`` of each mode.
        reason: one sentence in numbers.
        decomposition: the predicted gain split (``partition``: SubGPU over multistream;
            ``communication``: SubGPU with over without the collectives' link time), when given.
    """

    recommend: str
    predicted: dict[str, float]
    bands: dict[str, tuple[float, float] | None]
    classes: dict[str, str]
    reason: str
    decomposition: dict[str, float] = field(default_factory=dict)
    band_sources: dict[str, str] = field(default_factory=dict)


def decide(predicted: Mapping[str, float], bands: Mapping[str, Band | None],
           ceiling: float | None = None, link_free: float | None = None) -> Verdict:
    """The recommendation for one workload and batch.

    Args:
        predicted: predicted speedup over temporal of the best configuration of each mode
            (keys ``"subgpu"`` and optionally ``"multistream"``; > 0).
        bands: the ``Band`` of each mode's regime (None: unvalidated).
        ceiling: the overlap ceiling (``sim.ceiling``: the most any overlap can gain, x), when
            known, quoted in the reason.
        link_free: the SubGPU configuration's predicted speedup with the collectives' link time
            set to zero (``ContentionModel(link_time=False)``), for the decomposition; None for
            a deployment without collectives (nothing to decompose).

    Returns:
        ``Verdict``.

    Raises:
        ValueError: no ``"subgpu"`` prediction, or a speedup that is not finite and > 0.
    """
    if not isinstance(predicted, Mapping) or "subgpu" not in predicted:
        raise ValueError("decide: predicted needs a 'subgpu' speedup")
    if not isinstance(bands, Mapping):
        raise ValueError(f"decide: bands must map modes to Band or None, got "
                         f"{type(bands).__name__}")
    for k in predicted:
        if k not in DECIDE_KEYS:
            raise ValueError(f"decide: predicted keys must be among {DECIDE_KEYS}, got {k!r}")
    for k, b in bands.items():
        if k not in DECIDE_KEYS:
            raise ValueError(f"decide: bands keys must be among {DECIDE_KEYS}, got {k!r}")
        if b is not None and not isinstance(b, Band):
            raise ValueError(f"decide: bands[{k!r}] must be a Band or None, got "
                             f"{type(b).__name__}")
    pr = {k: _pos(v, f"decide: predicted[{k!r}]") for k, v in predicted.items()}
    if link_free is not None:
        link_free = _pos(link_free, "decide: link_free")
    if ceiling is not None:
        ceiling = _pos(ceiling, "decide: ceiling")
    bd = {k: (bands.get(k).apply(v) if bands.get(k) is not None else None)
          for k, v in pr.items()}
    cls = {k: classify(v, bands.get(k)) for k, v in pr.items()}
    dec: dict[str, float] = {}
    if "multistream" in pr:
        dec["partition"] = pr["subgpu"] / pr["multistream"]
    if link_free is not None:
        dec["communication"] = pr["subgpu"] / float(link_free)
        dec["overlap"] = float(link_free)
    src = {k: b.regime for k, b in bands.items() if b is not None}
    why = []
    if "communication" in dec:
        why.append(f"without the collectives' link time SubGPU predicts {dec['overlap']:.3f}x")
    if ceiling is not None:
        why.append(f"overlap ceiling {ceiling:.2f}x")
    tail = f" ({'; '.join(why)})" if why else ""
    if all(b is None for b in bd.values()):
        return Verdict("measure", pr, bd, cls,
                       "no error band yet: the held-out verdict protocol has not run for this "
                       "GPU and kind of prediction (docs/verdicts.md), so the prediction alone "
                       f"cannot say whether SubGPU pays; measure it (subgpu run or tune){tail}",
                       dec, src)
    if any(b is not None and b.transferred for b in bands.values()):
        return _transferred_verdict(pr, bd, cls, bands, dec, src, tail)
    lows = {k: b[0] for k, b in bd.items() if b is not None}
    best = max(lows, key=lows.get)
    if lows[best] > 1.0:
        lo, hi = bd[best]
        return Verdict(best, pr, bd, cls,
                       f"{best}: predicted {pr[best]:.3f}x, validated band {lo:.2f}-{hi:.2f}x "
                       f"is above 1{tail}", dec, src)
    # every mode predicted to gain more than the neutral zone: its band (if any) did not clear 1
    gains = {k: v for k, v in pr.items() if v > NEUTRAL[1]}
    if gains:
        top = max(gains, key=gains.get)
        why_not = (f"its validated band {bd[top][0]:.2f}-{bd[top][1]:.2f}x does not clear 1"
                   if bd[top] is not None else "it has no error band on this GPU")
        return Verdict("measure", pr, bd, cls,
                       f"uncertain: {top} is predicted to gain ({pr[top]:.3f}x) but {why_not}, "
                       f"so the prediction cannot decide; measure it against temporal on the "
                       f"GPU (subgpu tune, or subgpu run --from-search DIR --top 3) and keep "
                       f"temporal until then{tail}", dec, src)
    lo, hi = bd[best]
    what = "SubGPU is not" if len(lows) == 1 else "neither SubGPU nor multistream is"
    return Verdict("temporal", pr, bd, cls,
                   f"temporal: {what} expected to pay here: no mode is predicted to gain more "
                   f"than {(NEUTRAL[1] - 1) * 100:.0f}% and the best band's low end is "
                   f"{lo:.2f}x ({best}, predicted {pr[best]:.3f}x, band {lo:.2f}-{hi:.2f}x){tail}",
                   dec, src)


def _transferred_verdict(pr, bd, cls, bands, dec, src, tail) -> Verdict:
    """``decide`` on a GPU without its own validation (transferred bands): "temporal" when
    every mode's high end stays below 1, else "measure" (a win is never decided there: the one
    transferred win of the H200 -> H100 test was a loss)."""
    highs = {k: b[1] for k, b in bd.items() if b is not None}
    best = max(highs, key=highs.get)
    lo, hi = bd[best]
    b = bands[best]
    said = (f"predicted {pr[best]:.3f}x; such predictions measured "
            f"{pr[best] * b.lo * b.widening:.2f}-"
            f"{pr[best] * b.hi / b.widening:.2f}x on the held-out workloads of "
            f"{validated_gpus(b)}, {lo:.2f}-{hi:.2f}x with "
            f"the {b.widening:.3f}x margin for a GPU never validated")
    if hi < 1.0:
        what = "SubGPU is" if len(highs) == 1 else "SubGPU and multistream are"
        return Verdict("temporal", pr, bd, cls,
                       f"temporal: {what} predicted to lose here ({best}: {said}){tail}",
                       dec, src)
    return Verdict("measure", pr, bd, cls,
                   f"uncertain on this GPU, which the protocol never validated ({best}: {said}: "
                   f"the range reaches 1); measure it against temporal (subgpu tune, or subgpu "
                   f"run --from-search DIR --top 3) and keep temporal until then{tail}", dec, src)


def validated_gpus(band: Band) -> str:
    """The GPUs a transferred band comes from, in words: ``"the validated GPU (H200)"`` or
    ``"the validated GPUs (H200 and H100)"`` (``band.gpus``).

    Raises:
        ValueError: a band that does not name its GPUs (made without ``transfer_band``)."""
    names = list(band.gpus)
    if not names:
        raise ValueError(f"band {band.regime!r} does not name the GPUs it comes from")
    if len(names) == 1:
        return f"the validated GPU ({names[0]})"
    return f"the validated GPUs ({', '.join(names[:-1])} and {names[-1]})"


def format_band(speedup: float, band: Band | None, gpu: str) -> str:
    """The prediction and what such predictions measured, in words a user reads once:
    ``"predicted 0.653x; on held-out workloads such predictions measured 0.48-0.62x on the H200
    (...)"`` (the range is the prediction times the regime's measured / predicted ratios, so it
    need not contain the prediction itself), the transferred form for a GPU without its own
    validation, or the unvalidated form."""
    if band is None:
        return (f"predicted {speedup:.3f}x; no error band: the held-out verdict protocol has not "
                f"run for this kind of prediction on the {gpu} or any other GPU "
                "(docs/verdicts.md)")
    lo, hi = band.apply(speedup)
    if band.transferred:
        # the measured range: the band's ends undone by the widening transfer_band applied
        return (f"predicted {speedup:.3f}x; the {gpu} was never validated: on the held-out "
                f"workloads of {validated_gpus(band)} such predictions measured "
                f"{lo * band.widening:.2f}-{hi / band.widening:.2f}x, "
                f"{lo:.2f}-{hi:.2f}x with the {band.widening:.3f}x margin for another GPU "
                f"({band.regime}; docs/verdicts.md)")
    return (f"predicted {speedup:.3f}x; on held-out workloads such predictions measured "
            f"{lo:.2f}-{hi:.2f}x on the {gpu} ({band.n} configurations, "
            f"{len(band.workloads)} workloads of its regime: {describe_regime(band.regime)})")


def _results_dir() -> Path:
    return Path(__file__).resolve().parents[2] / "experiments" / "results"


def verdict_digest(gpu: str, model_id: str, folder: str | os.PathLike | None = None) -> Path:
    """The verdict protocol's digest of ``gpu`` made for the uncalibrated model ``model_id``:
    ``hw_verdicts/<folder>/hw_verdicts_<gpu>.json`` (one folder per plan) or, before those,
    ``hw_verdicts_<gpu>.json``; among those whose ``duration_model`` is ``model_id``, the first
    whose configurations that model's own search chose (``chosen_by_same_model``: the user
    path), else one predicted again after a model change; among those the newest (``made``,
    an ISO date the analyze phase writes; older digests have none), then the first path; a
    digest whose folder another one names in ``supersedes`` (a list of sibling folder names: a
    re-measurement of its plan) is never chosen; else the path of the top-level file (which
    may not exist).

    Raises:
        ValueError: a digest that exists but is not readable JSON, or whose ``supersedes`` is
            not a list of other existing digest folders, or digests that supersede each other
            (names the file): none may silently hand the choice to another digest.
    """
    d = Path(folder) if folder is not None else _results_dir()
    name = f"hw_verdicts_{gpu.lower()}.json"
    found, replaced, edges = [], set(), {}
    for f in [*sorted((d / "hw_verdicts").glob(f"*/{name}")), d / name]:
        if not f.exists():
            continue
        try:
            data = json.loads(f.read_text())
            sup = data.get("supersedes", [])
            if not isinstance(sup, list) or not all(
                    isinstance(x, str) and x != f.parent.name and f.parent.parent == d / "hw_verdicts"
                    and (d / "hw_verdicts" / x / name).is_file() for x in sup):
                raise ValueError(f"{f}: supersedes must be a list of other digest folders of "
                                 f"{d / 'hw_verdicts'}, got {sup!r}")
            edges[f.parent.name] = set(sup)
            replaced.update(sup)
            if data.get("duration_model") == model_id:
                found.append((not data.get("chosen_by_same_model", True),
                              str(data.get("made", "")), str(f), f))
        except (OSError, ValueError, AttributeError) as e:
            # a broken digest must not silently hand the choice to an older one
            raise ValueError(f"{f}: unreadable verdict bands ({e.__class__.__name__}: {e}); "
                             "restore it from git or remove it") from None
    for a, bs in edges.items():
        if any(a in edges.get(b, ()) for b in bs):
            raise ValueError(f"{d / 'hw_verdicts' / a / name}: digests {a} and "
                             f"{sorted(b for b in bs if a in edges.get(b, ()))[0]} supersede "
                             f"each other")
    found = [x for x in found if x[3].parent.name not in replaced]
    if not found:
        return d / name
    flag = min(x[0] for x in found)
    cands = [x for x in found if x[0] == flag]
    newest = max(x[1] for x in cands)
    return min((x for x in cands if x[1] == newest), key=lambda x: x[2])[3]


def load_bands(gpu: str, folder: str | os.PathLike | None = None,
               model_id: str | None = None) -> dict[str, Band]:
    """The committed bands of a GPU (``verdict_digest``'s ``bands``), {} when there is no such
    file (a GPU never validated, or a wheel without the results). Bands of the uncalibrated
    regimes are kept only when the digest's ``duration_model`` is ``model_id`` (default: the
    default uncalibrated model, ``sim.contention.uncalibrated_model_id()``): a band measured for
    another model version says nothing about this one's predictions.

    Raises:
        ValueError: the file exists but is unreadable or malformed (names it).
    """
    if not isinstance(gpu, str) or not gpu:
        raise ValueError(f"load_bands: gpu must be a preset name, got {gpu!r}")
    from subgpu_jax.sim.contention import uncalibrated_model_id

    me = uncalibrated_model_id() if model_id is None else model_id
    f = verdict_digest(gpu, me, folder)
    if not f.is_file():
        return {}

    try:
        data = json.loads(f.read_text())
        raw = data["bands"]
        if not isinstance(raw, dict):
            raise TypeError("bands must be an object")
        same_model = data.get("duration_model") == me
        out = {}
        for k, b in raw.items():
            if not isinstance(k, str) or k.count("/") != 4:
                raise ValueError(f"{k!r} is not a regime key")
            ws = b["workloads"]
            if not isinstance(ws, list) or not all(isinstance(w, str) for w in ws):
                raise TypeError(f"{k}: workloads must be a list of names")
            n = b["n"]
            if isinstance(n, bool) or not isinstance(n, int):
                raise TypeError(f"{k}: n must be an integer")
            band = Band(lo=b["lo"], hi=b["hi"], median=b["median"], n=n,
                        workloads=tuple(ws), regime=k, source=str(f.name), gpus=(gpu,))
            if k.split("/")[1] != "uncalibrated" or same_model:
                out[k] = band
        return out
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"{f}: unreadable verdict bands ({e})") from None


def bands_to_json(bands: Mapping[str, Band]) -> dict:
    """The ``bands`` field of a digest (inverse of ``load_bands``)."""
    return {k: {"lo": b.lo, "hi": b.hi, "median": b.median, "n": b.n,
                "workloads": list(b.workloads)} for k, b in sorted(bands.items())}

