"""Which model made a prediction, and which measured error figures apply to it.

Every predicted number subgpu prints (``subgpu search``, ``subgpu simulate``) is followed by one
note made here, and only here:

* **who predicted it**: the uncalibrated duration model (``sim.contention.uncalibrated_model_id``) or the
  model calibrated with a named file, and the scorer (event simulator or static evaluator);
* **which error figures apply**: only those measured for that kind of prediction (calibrated or
  not, event simulator) on that GPU, read from the committed study digests in
  ``report.results_dir()`` (``hw_fidelity_<gpu>.json``: step times; ``hw_wins_<gpu>.json``: the
  calibrated simulator; docs/results.md describes both's first choices, predicted vs measured speedup); where none exist the note
  says so, and it says whether the model itself was ever measured;
* **how measured wins were obtained**: every error figure it quotes was measured with the
  collectives emulated on one GPU as a wait (``EMULATED_COLLECTIVES``, ``--collectives sleep``,
  what ``simulate`` and ``search`` predict), and the note says so; ``subgpu run`` labels
  its measurement with its own mode (``collectives_label``: the registry's labels,
  ``model.collective.COLLECTIVE_MODES``).

A future validated band (a predicted speedup with the range measured for its regime) belongs in
``prediction_note`` too: callers print ``note["text"]`` and need not change.
"""

from __future__ import annotations

import json
import os
import re
import statistics
from pathlib import Path

from subgpu_jax.app.report import results_dir
from subgpu_jax.model.collective import COLLECTIVE_MODES, DEFAULT_COLLECTIVES, collective_mode

__all__ = ["prediction_note", "EMULATED_COLLECTIVES", "COPY_ONLY_COLLECTIVES",
           "PROXY_COLLECTIVES", "collectives_label", "STUDY_MODELS",
           "uncalibrated_first_choices"]

#: The model preset each workload key of the H200 studies measured (key prefix -> preset name).
STUDY_MODELS: dict[str, str] = {"gptoss120b": "gpt-oss-120b", "gptoss20b": "gpt-oss-20b",
                                "llama70b": "llama-3.1-70b"}

#: How the collectives of every measured run were executed (hw_runtime.gpu.workload): the one
#: GPU emulates one rank of the deployment, and a TP/EP collective is a copy of its payload
#: followed by a spin to the modelled link time that holds no SMs, which the other stage's work
#: can hide.
EMULATED_COLLECTIVES = COLLECTIVE_MODES["sleep"].label


def _model_of(key: str) -> str | None:
    return STUDY_MODELS.get(key.split("_")[0])


def _rng(xs, fmt: str) -> str:
    lo, hi = min(xs), max(xs)
    return f"{lo:{fmt}}" if f"{lo:{fmt}}" == f"{hi:{fmt}}" else f"{lo:{fmt}}-{hi:{fmt}}"


def uncalibrated_first_choices(rows) -> dict[str, dict]:
    """Per workload of a fidelity study's ``rows``: the pipelined (``green``) configuration the
    uncalibrated model predicts fastest, with its predicted and measured speedup over the
    workload's temporal row (``predicted_uncalibrated_us``, ``measured_us``).

    Returns:
        ``{workload: {"name", "predicted", "measured"}}`` (speedups as ratios).
    """
    by: dict[str, list] = {}
    for r in rows:
        by.setdefault(r["workload"], []).append(r)
    out = {}
    for w, rs in by.items():
        t = next((r for r in rs if r["mode"] == "temporal"), None)
        green = [r for r in rs if r["mode"] == "green"]
        if t is None or not green:
            continue
        b = min(green, key=lambda r: float(r["predicted_uncalibrated_us"]))
        out[w] = {"name": b["name"],
                  "predicted": float(t["predicted_uncalibrated_us"])
                  / float(b["predicted_uncalibrated_us"]),
                  "measured": float(t["measured_us"]) / float(b["measured_us"])}
    return out


#: How ``subgpu run --collectives none`` runs them: the control without the emulated wait.
COPY_ONLY_COLLECTIVES = COLLECTIVE_MODES["none"].label
#: How ``subgpu run --collectives proxy`` runs them (``model.collective``).
PROXY_COLLECTIVES = COLLECTIVE_MODES["proxy"].label


def collectives_label(mode: str) -> str:
    """The provenance line of runs measured with ``--collectives mode`` (sleep, proxy, none).

    Raises:
        ValueError: an unknown mode (one line naming ``--collectives``).
    """
    return collective_mode(mode).label


def uncalibrated_errors(d: Path, gpu: str, errors: list, model_id: str | None = None) -> str:
    """The measured error of the uncalibrated model *as it is now* on ``gpu``: the held-out
    workloads of the verdict protocol (``hw_verdicts_<gpu>.json``, experiments/hw_verdicts_h200.py)
    when that digest was made with this model (its ``duration_model`` equals
    ``sim.contention.uncalibrated_model_id()``): speedup error of the pipelined configurations,
    wrong verdicts, temporal error, over the held-out rows measured with the collectives the
    prediction assumes (``DEFAULT_COLLECTIVES``: ``simulate`` and ``search`` predict those;
    rows of digests from before the field count as that). ``model_id``: the model to quote
    (default the default uncalibrated model). Appends the figures to ``errors``; returns the
    text (or that none were measured for this model version)."""
    from subgpu_jax.app.verdict import NEUTRAL, verdict_digest
    from subgpu_jax.sim.contention import uncalibrated_model_id

    me = uncalibrated_model_id() if model_id is None else model_id
    f = verdict_digest(gpu, me, d)
    rel = f"experiments/results/{f.relative_to(d).as_posix()}"
    if not f.is_file():
        return ("none measured for this model version (no digest of the verdict protocol under "
                "experiments/results/hw_verdicts/ was made for it)")
    try:
        res = json.loads(f.read_text())
        if res.get("duration_model") != me:
            return (f"none measured for this model version ({rel} was measured for "
                    f"{res.get('duration_model') or 'an earlier version'})")
        s = res["summary"]
        held = set(s["held_out_workloads"])
        sp = [r for r in res["rows"] if r["workload"] in held
              and r.get("collectives", DEFAULT_COLLECTIVES) == DEFAULT_COLLECTIVES]
        ratio = [float(r["predicted_speedup"]) / float(r["measured_speedup"]) for r in sp]
        tm = [float(e) for w, by in s["temporal_error"].items() if w in held
              for c, e in by.items() if c == DEFAULT_COLLECTIVES]
        if not sp or not tm:
            return f"none measured for this model version (no held-out rows in {rel})"
        ae = sorted(abs(x - 1.0) for x in ratio)
        err = {"median": statistics.median(ae), "max": ae[-1]}
        judged = [r for r in sp if not NEUTRAL[0] <= float(r["measured_speedup"]) <= NEUTRAL[1]]
        wrong = sum(bool(r.get("verdict_wrong")) for r in judged)
        works = len({r["workload"] for r in sp})
        errors.append({"what": "speedup of pipelined configurations", "file": rel,
                       "collectives": DEFAULT_COLLECTIVES,
                       "configurations": len(sp), "workloads": works,
                       "median_abs_error": float(err["median"]),
                       "max_abs_error": float(err["max"]), "ratio_min": min(ratio),
                       "ratio_max": max(ratio), "verdict_wrong": int(wrong),
                       "verdict_judged": len(judged),
                       "temporal_error": [min(tm), max(tm)]})
        return (f"on {len(sp)} pipelined configurations of {works} workloads never used in "
                f"any fit, measured with --collectives {DEFAULT_COLLECTIVES}, its speedups were "
                f"within a median {err['median']:.1%} (max {err['max']:.0%}; measured / "
                f"predicted {1 / max(ratio):.2f}-{1 / min(ratio):.2f}, as the bands read it), "
                f"its verdicts wrong on {wrong} of "
                f"{len(judged)} judged, and its temporal steps {min(tm):+.0%} to "
                f"{max(tm):+.0%} ({rel})")
    except OSError:
        return "none measured for this model version (no " + rel + ")"
    except (ValueError, KeyError, TypeError, AttributeError, ZeroDivisionError) as e:
        return f"{f.name} unreadable ({e})"


def prediction_note(hardware: str, calibration: str | None = None, model: str | None = None,
                    timer=None, folder: str | os.PathLike | None = None,
                    model_id: str | None = None) -> dict:
    """The provenance of a prediction and the measured error figures that apply to it.

    Args:
        hardware: the GPU preset the prediction is for (``B200``, ``H200``, ...), or a
            ``NAME:VERSION`` spec (its version names the uncalibrated model).
        calibration: the calibration file the prediction used, or None (uncalibrated).
        model: the model preset or config name predicted (said whether it was ever measured).
        timer: the exact scorer, a ``score.timer.Timer`` (None: the event simulator). The
            measured errors of the studies apply to the event simulator (``timer.reference``)
            only; a batched timer's predictions also carry its measured disagreement with the
            event simulator (``summary.json``'s ``reference_check``).
        folder: where the study files are (default ``report.results_dir()``).
        model_id: the uncalibrated model that predicted (``sim.contention.uncalibrated_model_id
            (hw)``; default the default version); ignored with a calibration.

    Returns:
        ``{"made_by": str, "calibrated": bool, "calibration": path or None, "hardware",
        "model", "model_measured": bool or None (None: no study for this GPU), "errors": [{"what",
        "file", ...numbers}], "text": str}``. ``errors`` holds only figures measured for this
        kind of prediction on this GPU (empty when none exist); ``text`` is the note printed
        under the prediction.

    Raises:
        ValueError: an unknown preset or version in ``hardware``.
    """
    from subgpu_jax.model.hardware import get_hardware
    from subgpu_jax.sim.contention import uncalibrated_model_id

    reference = timer is None or timer.reference
    hw = get_hardware(hardware)   # a preset or NAME:VERSION spec (ValueError names both lists)
    hardware = hw.name
    d = Path(folder) if folder is not None else results_dir()
    gpu = hardware.upper()
    cal = bool(calibration)
    me = uncalibrated_model_id(hw) if model_id is None else model_id
    made_by = (f"the duration model calibrated with {calibration}" if cal else
               f"the uncalibrated duration model {me}")
    scorer = "event simulator" if timer is None else timer.describe()
    out = {"made_by": made_by, "scorer": scorer, "calibrated": cal,
           "calibration": calibration or None, "hardware": hardware, "model": model,
           "model_measured": None, "errors": []}
    head = f"Predicted by {made_by}, {scorer}, for the {hardware}."
    fid, wins = d / f"hw_fidelity_{gpu.lower()}.json", d / f"hw_wins_{gpu.lower()}.json"
    files = ([*d.glob("hw_fidelity_*.json"), *d.glob("hw_verdicts/*/hw_verdicts_*.json"),
              *d.glob("hw_verdicts_*.json")] if d.is_dir() else [])
    measured = sorted({m.group(2).upper() for f in files
                       if (m := re.fullmatch(r"hw_(fidelity|verdicts)_([a-z0-9]+)\.json",
                                             f.name))})
    if not fid.is_file() and not wins.is_file() and gpu not in measured:
        where = (f" (only the {' and the '.join(measured)} "
                 f"{'was' if len(measured) == 1 else 'were'} measured)" if measured else "")
        out["text"] = (f"{head} Measured error: none exists, no {hardware} was ever "
                       f"measured{where}; see the README's \"Known limitations\".")
        return out
    parts: list[str] = []
    if not reference:
        parts.append(f"none for the {scorer} (the studies measured the event simulator's "
                     "predictions)")
    if fid.is_file() and reference and cal:
        parts.append(_step_time_errors(fid, out["errors"]))
    if reference and cal and not fid.is_file() and not wins.is_file():
        parts.append(f"none for the calibrated model (the {hardware} was measured by the "
                     "verdict protocol, on the uncalibrated model's predictions only)")
    if reference and not cal:
        parts.append(uncalibrated_errors(d, gpu, out["errors"], me))
    if wins.is_file() and reference and cal:
        parts.append(_first_choice_errors(wins, out["errors"]))
    if model is not None:
        out["model_measured"] = model in _measured_models(d, gpu, me, fid, wins)
        parts.append(f"{model} was measured, at the deployments and batches of these studies "
                     "only" if out["model_measured"] else f"{model} itself was never measured")
    out["text"] = (f"{head} Measured error of this kind on the {hardware}: " + "; ".join(parts)
                   + f". The measured runs quoted had {EMULATED_COLLECTIVES}; see the README's "
                   "\"Known limitations\".")
    return out


#: What reading a study file may raise (a file that is not the study's JSON).
_UNREADABLE = (OSError, ValueError, KeyError, TypeError, AttributeError)


def _step_time_errors(fid: Path, errors: list) -> str:
    """The calibrated step-time errors of ``hw_fidelity_<gpu>.json`` (``fid``): appended to
    ``errors`` (``prediction_note``'s ``errors``); returns their sentence."""
    try:
        ws = {k: v for k, v in json.loads(fid.read_text())["workloads"].items() if v}
        med = [float(v["median_abs_error"]) for v in ws.values()]
        mx = [float(v["max_abs_error"]) for v in ws.values()]
        names = sorted({_model_of(k) or k for k in ws})
        rel = f"experiments/results/{fid.name}"
        errors.append({"what": "step time", "file": rel, "workloads": len(ws),
                       "median_abs_error": med, "max_abs_error": mx})
        return (f"step times within a median {_rng(med, '.0%')} (max {max(mx):.0%}) on "
                f"{len(ws)} workloads of {', '.join(names)}, each calibrated on its own kernel "
                f"tables and the co-run matrix ({rel})")
    except _UNREADABLE as e:
        return f"{fid.name} unreadable ({e})"


def _first_choice_errors(wins: Path, errors: list) -> str:
    """The calibrated first choices' predicted and measured speedups of ``hw_wins_<gpu>.json``
    (``wins``): appended to ``errors``; returns their sentence."""
    try:
        w = json.loads(wins.read_text())["workloads"]
        pred = [float(v["predicted_speedup"]) for v in w.values()]
        meas = [float(v["measured_speedup"]) for v in w.values()]
        rel = f"experiments/results/{wins.name}"
        errors.append({"what": "speedup of the first choice", "file": rel,
                       "workloads": len(w), "predicted": pred, "measured": meas})
        return (f"the calibrated first choices of {len(w)} workloads were predicted "
                f"{_rng(pred, '.2f')}x and measured {_rng(meas, '.2f')}x ({rel})")
    except _UNREADABLE as e:
        return f"{wins.name} unreadable ({e})"


def _measured_models(d: Path, gpu: str, model_id: str, fid: Path, wins: Path) -> set[str]:
    """The model names the studies of ``gpu`` measured, whatever the prediction's kind: the
    fidelity and wins studies' workloads and the verdict protocol's (measured whatever model
    version predicted them); unreadable files add nothing."""
    from subgpu_jax.app.verdict import verdict_digest

    models: set[str] = set()
    for f in (fid, wins):
        try:
            models.update(_model_of(k) or k for k in json.loads(f.read_text())["workloads"])
        except _UNREADABLE:
            pass
    try:
        models.update(json.loads(verdict_digest(gpu, model_id, d).read_text())["models"]
                      .values())
    except _UNREADABLE:
        pass
    return models
