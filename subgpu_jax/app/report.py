"""Sweep records -> frontiers, matched-gain tables and figures (docs/method.md §4 "Outputs").

Records are flat dicts as written by ``searchjob.PointScorer`` (one or more per grid point): ``mode``
("temporal" or "subgpu"), ``D``, ``per_user_tok_s``, ``per_gpu_tok_s``, ``makespan_us``, ...
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Sequence

import numpy as np

from subgpu_jax.app.viz import plot_gantt, save_figure
from subgpu_jax.search.pareto import (frontier_curve, pareto_front, per_gpu_gain_at_matched_user,
    per_user_gain_at_matched_gpu)

__all__ = ["frontiers", "matched_tables", "best_by_batch", "validation_status", "results_dir",
           "MATCH_TOL", "plot_frontier", "plot_frontier_by_stages", "write_search_figures"]


def _pts(recs: Sequence[dict]) -> np.ndarray:
    return np.array([[r["per_user_tok_s"], r["per_gpu_tok_s"]] for r in recs], dtype=float)


def frontiers(records: Sequence[dict]) -> dict:
    """Pareto frontiers (per-user vs per-GPU throughput, both maximised).

    Returns:
        ``{"temporal": [rec...], "subgpu": [rec...], "subgpu_D": {D: [rec...]}}``, each list the
        frontier's records sorted by per-GPU throughput ascending; empty lists where no record.
    """
    out: dict = {"temporal": [], "subgpu": [], "subgpu_D": {}}
    groups = {"temporal": [r for r in records if r["mode"] == "temporal"],
              "subgpu": [r for r in records if r["mode"] == "subgpu"]}
    for D in sorted({r["D"] for r in groups["subgpu"]}):
        groups[("D", D)] = [r for r in groups["subgpu"] if r["D"] == D]
    for key, recs in groups.items():
        if not recs:
            continue
        idx = pareto_front(_pts(recs))
        front = sorted((recs[i] for i in idx), key=lambda r: r["per_gpu_tok_s"])
        if isinstance(key, tuple):
            out["subgpu_D"][key[1]] = front
        else:
            out[key] = front
    return out


#: A matched gain is shown (``nearby``) only where both frontiers have a point within this
#: relative distance of the matched point, in both throughputs (5%): elsewhere the gain rests on
#: a linear interpolation across a gap between frontier points that lie at different batches
#: (per-user throughput can halve from one batch of the grid to the next).
MATCH_TOL = 0.05

#: The other throughput of each matched one.
_OTHER = {"per_gpu_tok_s": "per_user_tok_s", "per_user_tok_s": "per_gpu_tok_s"}


def _nearest(front: Sequence[dict], key: str, x: float) -> dict:
    """The frontier record nearest to the frontier's own point at ``x`` in the ``key``
    throughput: its other throughput there is the frontier's linear interpolation ``v(x)``, and
    a record's relative distance is ``max(|x - x_i| / x, |v(x) - v_i| / v(x))`` (so a record
    close in ``key`` but far in the other throughput is not "near"). Returns that distance
    (``rel_distance``), the record's ``key`` throughput, batch and makespan."""
    o = _OTHER[key]
    pts = sorted(front, key=lambda f: f[key])
    v = float(np.interp(x, [f[key] for f in pts], [f[o] for f in pts]))

    def dist(f: dict) -> float:
        return max(abs(f[key] - x) / x, abs(f[o] - v) / v if v > 0 else float("inf"))
    r = min(front, key=dist)
    return {"rel_distance": dist(r), key: float(r[key]),
            "global_batch": r.get("global_batch"), "makespan_us": r.get("makespan_us")}


def matched_tables(records: Sequence[dict], tol: float = MATCH_TOL) -> dict:
    """Matched comparisons of the SubGPU frontier (pooled over stage counts) against temporal.

    Each frontier is interpolated linearly between its points (``search.pareto``); the points
    lie at different global batches, so a row compares frontiers, not one configuration with
    another. Every row says how far the nearest point of each frontier is from the frontier's
    matched point (in both throughputs, ``_nearest``) and whether both are within ``tol``
    (``nearby``).

    Args:
        records: search-job records (dicts with ``mode``, ``per_user_tok_s``,
            ``per_gpu_tok_s``, ``global_batch``, ``makespan_us``).
        tol: relative distance (fraction, >= 0) within which a frontier point counts as nearby.

    Returns:
        ``{"per_user_gain_at_matched_per_gpu": [{"per_gpu_tok_s", "gain", "nearby",
        "nearest_temporal", "nearest_subgpu"}...], "per_gpu_gain_at_matched_per_user":
        [{"per_user_tok_s", ...}...], "max_per_user_gain", "max_per_gpu_gain" (over all rows),
        "max_per_user_gain_nearby", "max_per_gpu_gain_nearby" (over nearby rows, None when
        none), "tolerance"}``; gains are fractions (0.1 = +10%); ``nearest_*`` hold the
        nearest frontier point's ``rel_distance``, throughput, ``global_batch`` and makespan.
        Empty tables when either side has no record.

    Raises:
        ValueError: ``tol`` negative or not finite.
    """
    if not np.isfinite(tol) or tol < 0:
        raise ValueError(f"tol must be a finite fraction >= 0, got {tol!r}")
    t = [r for r in records if r["mode"] == "temporal"]
    s = [r for r in records if r["mode"] == "subgpu"]
    res = {"per_user_gain_at_matched_per_gpu": [], "per_gpu_gain_at_matched_per_user": [],
           "max_per_user_gain": None, "max_per_gpu_gain": None,
           "max_per_user_gain_nearby": None, "max_per_gpu_gain_nearby": None,
           "tolerance": float(tol)}
    if not t or not s:
        return res
    fr = frontiers(records)
    for fn, key, table in ((per_user_gain_at_matched_gpu, "per_gpu_tok_s",
                            "per_user_gain_at_matched_per_gpu"),
                           (per_gpu_gain_at_matched_user, "per_user_tok_s",
                            "per_gpu_gain_at_matched_per_user")):
        at, g = fn(_pts(t), _pts(s))
        rows = []
        for a, x in zip(at, g):
            if not np.isfinite(x):
                continue
            nt, ns = _nearest(fr["temporal"], key, float(a)), _nearest(fr["subgpu"], key, float(a))
            rows.append({key: float(a), "gain": float(x),
                         "nearby": bool(nt["rel_distance"] <= tol and ns["rel_distance"] <= tol),
                         "nearest_temporal": nt, "nearest_subgpu": ns})
        res[table] = rows
    for k, name in (("per_user_gain_at_matched_per_gpu", "max_per_user_gain"),
                    ("per_gpu_gain_at_matched_per_user", "max_per_gpu_gain")):
        if res[k]:
            res[name] = max(r["gain"] for r in res[k])
        near = [r["gain"] for r in res[k] if r["nearby"]]
        if near:
            res[name + "_nearby"] = max(near)
    return res


def best_by_batch(records: Sequence[dict]) -> list[dict]:
    """Configuration-level speedups: at each (attention TP, DP, global batch) with a temporal
    record, the SubGPU record with the highest ``speedup_vs_temporal`` (the temporal baseline of
    the same deployment; no interpolation).

    Records without a deployment field count as 0 there (minimal records of tests and tools).

    Returns:
        One dict per (TP, DP, G) with a SubGPU record, sorted by (G, TP): ``global_batch``,
        ``attn_tp``, ``attn_dp``, ``temporal_makespan_us``, ``makespan_us``,
        ``speedup_vs_temporal`` and the configuration (``D``, ``w``, ``microbatches``,
        ``sms``, ``cuts``, ``policy``).
    """
    best: dict = {}
    for r in records:
        if r["mode"] != "subgpu":
            continue
        k = tuple(int(r.get(f, 0)) for f in ("global_batch", "attn_tp", "attn_dp"))
        if k not in best or r["speedup_vs_temporal"] > best[k]["speedup_vs_temporal"]:
            best[k] = r
    out = []
    for k in sorted(best):
        r = best[k]
        out.append({f: r.get(f) for f in ("global_batch", "attn_tp", "attn_dp",
                                      "temporal_makespan_us", "makespan_us",
                                      "speedup_vs_temporal", "D", "w", "microbatches", "sms",
                                      "cuts", "policy")})
    return out


def sim_extra(r) -> dict:
    """Event-simulator outputs of a ``SimResult`` added to ``subgpu simulate --json``: L2 hit
    rate, mean HBM and SM utilisation (fractions) and per-category residence (µs)."""
    return {"l2_hit_rate": float(r.l2_hit_rate), "mean_hbm_util": float(r.mean_hbm_util),
            "mean_sm_util": float(r.mean_sm_util),
            "category_time_us": {k: float(v) for k, v in r.category_time.items()}}


def results_dir() -> Path:
    """``experiments/results`` of the repository this package runs from (an editable install
    or a checkout; it may be absent from a wheel)."""
    return Path(__file__).resolve().parents[2] / "experiments" / "results"


def _validation_files(d: Path) -> dict[str, Path]:
    """The ``hw_validate_<gpu>.json`` files of folder ``d`` by upper-case GPU name (none when
    ``d`` is not a folder)."""
    files = {}
    if d.is_dir():
        for f in sorted(d.glob("hw_validate_*.json")):
            m = re.fullmatch(r"hw_validate_([a-z0-9]+)\.json", f.name)
            if m:
                files[m.group(1).upper()] = f
    return files


def _read_validation(f: Path, batches: dict) -> dict:
    """Read the validation file ``f`` and fill ``batches`` with its pipelined configurations'
    best measured speedup, its name and the largest |error| per batch G, in batch order.

    Returns:
        the file's content.

    Raises:
        OSError, ValueError, KeyError, TypeError: an unreadable file (``batches`` keeps the
            batches read before)."""
    data = json.loads(f.read_text())
    for G, b in sorted(data["batches"].items(), key=lambda kv: int(kv[0])):
        pipe = [r for r in b["rows"] if r.get("D", 1) > 1]
        best = max(pipe, key=lambda r: r["speedup_measured"])
        batches[int(G)] = {
            "best_speedup_measured": float(best["speedup_measured"]),
            "best_name": best["name"],
            "max_abs_error": max(abs(float(r["error"])) for r in pipe)}
    return data


def _measured_model(d: Path, data: dict) -> tuple[str | None, str]:
    """``(model, what)``: the measured model named by the calibration file the validation
    ``data`` used (a path relative to ``d``'s parent) and its text with the experts'
    datatype; ``(None, "")`` when that file is absent or unreadable."""
    try:  # the measured model: named by the calibration file the validation used
        cal = json.loads((d.parent / str(data.get("calibration", ""))).read_text())
        model = str(cal["model"])
        what = f"{cal['model']}" + (f", {cal['expert_dtype']} experts"
                                    if cal.get("expert_dtype") else "")
    except (OSError, ValueError, KeyError, TypeError):
        return None, ""
    return model, what


def _fidelity_text(d: Path, gpu: str, out: dict) -> str:
    """The text appended to the measured summary by the fidelity study of ``gpu``
    (``hw_fidelity_<gpu>.json`` in ``d``), its figures stored as ``out["fidelity"]``; empty
    without that file, a note when it is unreadable."""
    fid = d / f"hw_fidelity_{gpu.lower()}.json"
    if not fid.is_file():
        return ""
    try:  # the fidelity study (kernel-aware calibrated model, 5 workloads)
        ws = json.loads(fid.read_text())["workloads"]
        med = [float(v["median_abs_error"]) for v in ws.values() if v]
        out["fidelity"] = {"file": f"experiments/results/{fid.name}", "workloads": len(med),
                           "median_abs_error": med}
        return (f"; the current kernel-aware calibrated model's median |error| is "
                f"{min(med):.0%}-{max(med):.0%} over {len(med)} workloads "
                f"(experiments/results/{fid.name})")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        return f"; experiments/results/{fid.name} unreadable ({e})"


def _with_wins(d: Path, gpu: str, out: dict, measured: str) -> tuple[str, float | None]:
    """``(measured, top)``: ``measured`` preceded by the wins study of ``gpu``
    (``hw_wins_<gpu>.json`` in ``d``: the calibrated simulator's top picks, measured), its
    figures stored as ``out["wins"]``, and its best measured speedup (None without a readable
    file; an unreadable one is noted after ``measured``)."""
    top = None
    wins = d / f"hw_wins_{gpu.lower()}.json"
    if wins.is_file():  # the wins study: the calibrated simulator's top picks, measured
        try:
            w = json.loads(wins.read_text())["workloads"]
            top = max(float(v["best_of_k_measured_speedup"]) for v in w.values())
            first = max(float(v["measured_speedup"]) for v in w.values())
            out["wins"] = {"file": f"experiments/results/{wins.name}", "workloads": len(w),
                           "best_measured_speedup": top, "best_first_choice_speedup": first}
            wins_txt = (f"the calibrated simulator's top picks for {len(w)} workloads "
                        f"measured at best {top:.3f}x temporal, its first choices at best "
                        f"{first:.3f}x (experiments/results/{wins.name})")
            measured = f"{wins_txt}; {measured}"
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            measured += f"; experiments/results/{wins.name} unreadable ({e})"
    return measured, top


def _status_text(hardware: str, gpu: str, files: dict, measured: str) -> str:
    """The sentence of ``validation_status``: ``measured`` as measured on ``hardware`` itself
    (``gpu``), or saying it was never measured and quoting the GPUs that were (``files``)."""
    if gpu == hardware.upper():
        return f"measured on an {gpu}: {measured}"
    return (f"not validated on a {hardware} (no hw_validate_{hardware.lower()}.json); "
            f"on the {gpu}, the only GPU measured, {measured}"
            if len(files) == 1 else
            f"not validated on a {hardware}; measured on "
            f"{', '.join(sorted(files))}. On the {gpu}: {measured}")


def validation_status(hardware: str, folder: str | os.PathLike | None = None) -> dict:
    """The measured validation status of the simulator, from the committed
    ``hw_validate_<gpu>.json`` files (``experiments/hw_validate_h200.py``), with the fidelity study
    (``hw_fidelity_<gpu>.json``) and the wins study (``hw_wins_<gpu>.json``) when present.

    Args:
        hardware: the GPU preset name of the predictions (``B200``, ``H200``, ...).
        folder: where the validation files are (default ``results_dir()``).

    Returns:
        ``{"hardware", "validated_on" (GPU names with a file), "file" (the file describing
        ``hardware`` or None), "model" (the measured model, when its calibration file names
        it), "batches": {G: {"best_speedup_measured", "best_name",
        "max_abs_error"}} (for the GPU used in the text), "wins" (from ``hw_wins_<gpu>.json``
        when present: ``workloads``, ``best_measured_speedup``), "text"}``: ``text`` is one
        sentence for a report; it says when ``hardware`` itself was never measured and then
        quotes the GPUs that were.
    """
    d = Path(folder) if folder is not None else results_dir()
    files = _validation_files(d)
    hw = hardware.upper()
    out = {"hardware": hardware, "validated_on": sorted(files), "file": None, "batches": {},
           "text": ""}
    if not files:
        out["text"] = (f"not validated on hardware: no measurement file (hw_validate_*.json) "
                       f"in {d}")
        return out
    gpu = hw if hw in files else sorted(files)[0]
    f = files[gpu]
    try:
        data = _read_validation(f, out["batches"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        out["text"] = f"validation file {f} unreadable ({e})"
        return out
    model, what = _measured_model(d, data)
    if model is not None:
        out["model"] = model
    rel = f"experiments/results/{f.name}"
    bs = out["batches"]
    beat = [G for G, v in bs.items() if v["best_speedup_measured"] > 1]
    best_txt = ", ".join(f"{v['best_speedup_measured']:.3f}x at G={G:,}" for G, v in bs.items())
    err = max(v["max_abs_error"] for v in bs.values())
    measured = (f"the first validation ({rel}, {what or 'one model'}) measured at best "
                f"{best_txt}, the simulator of that time erring by up to {err:.0%} on pipelined "
                f"configurations")
    measured += _fidelity_text(d, gpu, out)
    measured, top = _with_wins(d, gpu, out, measured)
    if beat or (top is not None and top > 1):
        verdict = ("SubGPU beat temporal in a measurement" +
                   (f" (at G={', '.join(f'{G:,}' for G in beat)})" if beat else ""))
    else:
        verdict = "no SubGPU configuration beat temporal"
    measured = f"{verdict}: {measured}"
    if gpu == hw:
        out["file"] = rel
    out["text"] = _status_text(hardware, gpu, files, measured)
    return out


def _frontier_line(ax, recs, **kw):
    if not recs:
        return
    f = frontier_curve(_pts(recs))
    ax.plot(f[:, 1], f[:, 0], **kw)


def _finish(fig, ax, path: str, title: str) -> str:
    """Label the throughput axes, save the PNG at exactly ``path`` and close the figure."""
    import matplotlib.pyplot as plt

    ax.set_xlabel("per-GPU throughput (tokens/s/GPU)")
    ax.set_ylabel("per-user throughput (tokens/s/user)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    # outside the axes: a legend inside could cover frontier points
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    fig.tight_layout()
    save_figure(fig, path, dpi=120, fmt="png")  # atomic: temporary file and rename
    plt.close(fig)
    return path


def plot_frontier(records: Sequence[dict], path: str, title: str = "") -> str:
    """Per-user throughput (tokens/s/user, y) vs per-GPU throughput (tokens/s/GPU, x): every
    record as a dot, the temporal and SubGPU frontiers as lines with each frontier point's
    global batch G written beside it, the legend outside the axes. Writes a PNG; returns the
    path.

    Raises:
        ValueError: the directory of ``path`` does not exist.
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(d):
        raise ValueError(f"figure path: directory {d!r} does not exist")
    t = [r for r in records if r["mode"] == "temporal"]
    s = [r for r in records if r["mode"] == "subgpu"]
    fig, ax = plt.subplots(figsize=(8.5, 5))
    if s:
        p = _pts(s)
        ax.scatter(p[:, 1], p[:, 0], s=10, c="tab:orange", alpha=0.35, label="SubGPU points")
    if t:
        p = _pts(t)
        ax.scatter(p[:, 1], p[:, 0], s=14, c="tab:blue", alpha=0.6, label="temporal points")
    _frontier_line(ax, t, color="tab:blue", lw=2, marker="o", label="temporal frontier")
    _frontier_line(ax, s, color="tab:orange", lw=2, marker="s", label="SubGPU frontier")
    fr = frontiers(records)
    for key, col, dy in (("temporal", "tab:blue", -11), ("subgpu", "tab:orange", 5)):
        seen: dict = {}
        for r in fr[key]:  # frontier points lie at different batches: say which
            if "global_batch" not in r:
                continue
            G = r["global_batch"]
            k = seen[G] = seen.get(G, -1) + 1  # points at one batch: stacked, each its TPxDP
            same = sum(x.get("global_batch") == G for x in fr[key]) > 1
            par = f" TP{r.get('attn_tp')}xDP{r.get('attn_dp')}" if same else ""
            ax.annotate(f"G={G}{par}", (r["per_gpu_tok_s"], r["per_user_tok_s"]),
                        textcoords="offset points", xytext=(5, dy + (9 if dy > 0 else -9) * k),
                        fontsize=7, color=col)
    return _finish(fig, ax, path, title or "decode throughput frontier")


def plot_frontier_by_stages(records: Sequence[dict], path: str, title: str = "") -> str:
    """As ``plot_frontier`` with one SubGPU frontier per stage count D. Returns the path."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(d):
        raise ValueError(f"figure path: directory {d!r} does not exist")
    fr = frontiers(records)
    fig, ax = plt.subplots(figsize=(8.5, 5))
    _frontier_line(ax, fr["temporal"], color="black", lw=2, marker="o", label="temporal")
    cmap = plt.get_cmap("viridis")
    Ds = sorted(fr["subgpu_D"])
    for i, D in enumerate(Ds):
        _frontier_line(ax, fr["subgpu_D"][D], color=cmap(i / max(1, len(Ds) - 1)), lw=1.5,
                       marker="s", label=f"SubGPU D={D}")
    return _finish(fig, ax, path, title or "frontier per stage count")


def write_search_figures(folder: str, records: Sequence[dict], title: str = "",
                         best_run: tuple | None = None) -> list[str]:
    """The figures of a search job: ``frontier.png`` and ``frontier_by_stages.png`` (when there
    are records) and ``gantt_best.png`` of the best configuration's whole step.

    Args:
        folder: output folder; records: search-job records (dicts); title: figure title;
        best_run: ``(SimResult, title, scope, head, runs)`` of the best configuration: its
            main region's result, the title, what the figure covers of the decode step, the
            head's ``SimResult`` (or None) and the step's region runs in layer order
            (``app.wholestep.recorded_runs``), drawn whole; or None for no Gantt chart.

    Returns:
        The paths written.
    """
    out = []
    if records:
        out.append(plot_frontier(records, os.path.join(folder, "frontier.png"), title))
        out.append(plot_frontier_by_stages(records, os.path.join(folder, "frontier_by_stages.png"),
                                           title))
    if best_run is not None:
        r, gtitle, scope, head, runs = best_run
        out.append(str(plot_gantt(r, os.path.join(folder, "gantt_best.png"), title=gtitle,
                                  scope=scope, head=head, runs=runs)))
    return out
