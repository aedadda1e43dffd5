"""Sweep records -> frontiers, matched-gain tables and figures (docs/method.md §4 "Outputs").

Records are flat dicts as written by ``searchrun.score_point`` (one per grid point): ``mode``
("temporal" or "subgpu"), ``D``, ``per_user_tok_s``, ``per_gpu_tok_s``, ``makespan_us``, ...
"""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np

from subgpu_jax.app.viz import plot_gantt
from subgpu_jax.search.pareto import (frontier_curve, pareto_front, per_gpu_gain_at_matched_user,
    per_user_gain_at_matched_gpu)

__all__ = ["frontiers", "matched_tables", "plot_frontier", "plot_frontier_by_stages",
           "write_search_figures"]


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


def matched_tables(records: Sequence[dict]) -> dict:
    """Matched comparisons of the SubGPU frontier (pooled over stage counts) against temporal.

    Returns:
        ``{"per_user_gain_at_matched_per_gpu": [{"per_gpu_tok_s", "gain"}...],
        "per_gpu_gain_at_matched_per_user": [{"per_user_tok_s", "gain"}...],
        "max_per_user_gain", "max_per_gpu_gain"}``; gains are fractions (0.1 = +10%), computed
        by linear interpolation between frontier points inside the range both frontiers cover.
        Empty tables when either side has no record.
    """
    t = [r for r in records if r["mode"] == "temporal"]
    s = [r for r in records if r["mode"] == "subgpu"]
    res = {"per_user_gain_at_matched_per_gpu": [], "per_gpu_gain_at_matched_per_user": [],
           "max_per_user_gain": None, "max_per_gpu_gain": None}
    if not t or not s:
        return res
    at, g = per_user_gain_at_matched_gpu(_pts(t), _pts(s))
    res["per_user_gain_at_matched_per_gpu"] = [
        {"per_gpu_tok_s": float(a), "gain": float(x)} for a, x in zip(at, g) if np.isfinite(x)]
    at, g = per_gpu_gain_at_matched_user(_pts(t), _pts(s))
    res["per_gpu_gain_at_matched_per_user"] = [
        {"per_user_tok_s": float(a), "gain": float(x)} for a, x in zip(at, g) if np.isfinite(x)]
    for k, name in (("per_user_gain_at_matched_per_gpu", "max_per_user_gain"),
                    ("per_gpu_gain_at_matched_per_user", "max_per_gpu_gain")):
        if res[k]:
            res[name] = max(r["gain"] for r in res[k])
    return res


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
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120, format="png")
    plt.close(fig)
    return path


def plot_frontier(records: Sequence[dict], path: str, title: str = "") -> str:
    """Per-user throughput (tokens/s/user, y) vs per-GPU throughput (tokens/s/GPU, x): every
    record as a dot, the temporal and SubGPU frontiers as lines. Writes a PNG; returns the path.

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
    fig, ax = plt.subplots(figsize=(7, 5))
    if s:
        p = _pts(s)
        ax.scatter(p[:, 1], p[:, 0], s=10, c="tab:orange", alpha=0.35, label="SubGPU points")
    if t:
        p = _pts(t)
        ax.scatter(p[:, 1], p[:, 0], s=14, c="tab:blue", alpha=0.6, label="temporal points")
    _frontier_line(ax, t, color="tab:blue", lw=2, marker="o", label="temporal frontier")
    _frontier_line(ax, s, color="tab:orange", lw=2, marker="s", label="SubGPU frontier")
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
    fig, ax = plt.subplots(figsize=(7, 5))
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
    are records) and ``gantt_best.png`` of the best configuration's simulation.

    Args:
        folder: output folder; records: search-job records (dicts); title: figure title;
        best_run: ``(SimResult, title)`` of the best configuration, or None for no Gantt chart.

    Returns:
        The paths written.
    """
    out = []
    if records:
        out.append(plot_frontier(records, os.path.join(folder, "frontier.png"), title))
        out.append(plot_frontier_by_stages(records, os.path.join(folder, "frontier_by_stages.png"),
                                           title))
    if best_run is not None:
        r, gtitle = best_run
        out.append(str(plot_gantt(r, os.path.join(folder, "gantt_best.png"), title=gtitle,
                                  t_max_us=min(float(r.makespan), 3000.0))))
    return out
