"""Looking at a schedule: Chrome/Perfetto trace-event JSON, a Gantt chart of the stage timeline
and utilisation plots, all from an ``eventsim.SimResult``.

matplotlib is used with the non-interactive Agg backend (files only, no display needed).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from subgpu_jax.model.graph import CATEGORIES

__all__ = ["write_trace", "trace_events", "plot_gantt", "plot_utilisation", "CATEGORY_COLORS"]

#: One colour per ``graph.CATEGORIES`` entry (matplotlib tab10), used by the Gantt chart.
CATEGORY_COLORS: dict[str, str] = {
    c: col for c, col in zip(CATEGORIES, ("#1f77b4", "#d62728", "#ff7f0e", "#2ca02c", "#9467bd",
                                          "#8c564b", "#e377c2", "#7f7f7f"))
}


def _check_out(path: str | os.PathLike, field: str) -> Path:
    p = Path(path)
    if not str(path):
        raise ValueError(f"{field} must be a file path, got an empty string")
    if not p.parent.is_dir():
        raise ValueError(f"{field}: directory {str(p.parent)!r} does not exist")
    if p.is_dir():
        raise ValueError(f"{field}: {str(p)!r} is a directory, give a file path")
    return p


def _segments(res) -> np.ndarray:
    """Segment of every kernel instance (the task's segment; the stream index without a DAG)."""
    if res.dag is not None:
        return np.asarray(res.dag.seg)[res.kernel_task]
    return np.asarray(res.kernel_task)


def trace_events(res) -> list[dict]:
    """Trace-event dicts (Chrome JSON format) of a ``SimResult``: one ``"X"`` event per kernel
    instance on the track (tid) of its stage, plus thread-name metadata.

    Event args: ``layer`` (global layer = region * layers_per_region + kernel.layer), ``region``,
    ``microbatch``, ``segment``, ``stage``, ``category``. Times (``ts``, ``dur``) in µs.
    """
    P = 1
    if res.dag is not None and res.kernels:
        P = max(k.layer for k in res.kernels) + 1
    segs = _segments(res)
    ev: list[dict] = [{"ph": "M", "pid": 0, "name": "process_name",
                       "args": {"name": f"SubGPU simulation ({res.hw_name})"}}]
    for s, p in enumerate(res.stage_sms):
        ev.append({"ph": "M", "pid": 0, "tid": s, "name": "thread_name",
                   "args": {"name": f"stage {s} ({p} SMs)"}})
    for i in range(res.kernel_start.size):
        k = res.kernels[int(res.kernel_index[i])]
        l = int(res.kernel_region[i])
        ev.append({"ph": "X", "pid": 0, "tid": int(res.kernel_stage[i]), "name": k.name,
                   "cat": k.category, "ts": float(res.kernel_start[i]),
                   "dur": float(res.kernel_end[i] - res.kernel_start[i]),
                   "args": {"layer": l * P + int(k.layer), "region": l,
                            "microbatch": int(res.kernel_mb[i]), "segment": int(segs[i]),
                            "stage": int(res.kernel_stage[i]), "category": k.category}})
    return ev


def write_trace(res, path: str | os.PathLike) -> Path:
    """Write a Chrome/Perfetto trace-event JSON file (open it in ui.perfetto.dev).

    Args:
        res: an ``eventsim.SimResult``.
        path: output file; its directory must exist.

    Returns:
        The path written.

    Raises:
        ValueError: the directory of ``path`` does not exist.
    """
    p = _check_out(path, "trace path")
    with open(p, "w") as f:
        json.dump({"traceEvents": trace_events(res), "displayTimeUnit": "ms",
                   "otherData": {"makespan_us": float(res.makespan), "hw": res.hw_name}}, f)
    return p


def plot_gantt(res, path: str | os.PathLike, title: str | None = None,
               t_max_us: float | None = None) -> Path:
    """Gantt PNG of the stage timeline: one row per stage, one bar per kernel, coloured by
    category (``CATEGORY_COLORS``).

    Args:
        res: a ``SimResult``. path: PNG path (directory must exist). title: figure title.
        t_max_us: show only [0, t_max_us] (default: the whole makespan).

    Returns:
        The path written.

    Raises:
        ValueError: the directory of ``path`` does not exist.
    """
    p = _check_out(path, "gantt path")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    D = len(res.stage_sms)
    fig, ax = plt.subplots(figsize=(12, 1.0 + 0.6 * D))
    cats = [res.kernels[int(k)].category for k in res.kernel_index]
    for c in CATEGORIES:
        idx = [i for i, x in enumerate(cats) if x == c]
        for s in range(D):
            bars = [(res.kernel_start[i], res.kernel_end[i] - res.kernel_start[i]) for i in idx
                    if res.kernel_stage[i] == s]
            if bars:
                ax.broken_barh(bars, (s - 0.4, 0.8), facecolors=CATEGORY_COLORS[c],
                               edgecolor="none")
    ax.set_yticks(range(D))
    ax.set_yticklabels([f"stage {s}\n{p} SMs" for s, p in enumerate(res.stage_sms)])
    ax.invert_yaxis()
    ax.set_xlabel("time (µs)")
    ax.set_xlim(0, t_max_us or max(res.makespan, 1e-9))
    ax.set_title(title or f"{res.hw_name}: makespan {res.makespan:.1f} µs")
    used = [c for c in CATEGORIES if c in set(cats)]
    ax.legend(handles=[Patch(color=CATEGORY_COLORS[c], label=c) for c in used],
              loc="upper center", bbox_to_anchor=(0.5, -0.35 if D < 3 else -0.2),
              ncol=len(used), fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(p, dpi=120, format="png")
    plt.close(fig)
    return p


def _step_series(res) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    t = np.append(res.util_t, res.makespan)
    return t, np.append(res.util_hbm, res.util_hbm[-1:]), np.append(res.util_sm, res.util_sm[-1:])


def plot_utilisation(temporal, config, path: str | os.PathLike,
                     labels: tuple[str, str] = ("temporal", "SubGPU")) -> Path:
    """Utilisation PNG: HBM bandwidth (fraction of ``hbm_peak_Bps``) and fraction of SMs busy over
    time, for the temporal run (top) and a given configuration (bottom); time-weighted means in
    the legends.

    Args:
        temporal, config: ``SimResult`` objects simulated with ``record=True``.
        path: PNG path (directory must exist). labels: titles of the two panels.

    Returns:
        The path written.

    Raises:
        ValueError: the directory does not exist, or a result has no utilisation series.
    """
    p = _check_out(path, "utilisation path")
    for nm, r in (("temporal", temporal), ("config", config)):
        if r.util_t.size == 0:
            raise ValueError(f"{nm}: result has no utilisation series (simulate with record=True)")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 1, figsize=(11, 6), sharex=True)
    for ax, r, lab in zip(axes, (temporal, config), labels):
        t, h, s = _step_series(r)
        ax.step(t, h, where="post", color="#d62728",
                label=f"HBM bandwidth (mean {r.mean_hbm_util:.0%})")
        ax.step(t, s, where="post", color="#1f77b4",
                label=f"SMs busy (mean {r.mean_sm_util:.0%})")
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("fraction of peak")
        ax.set_title(f"{lab}: makespan {r.makespan:.1f} µs")
        ax.legend(loc="lower right", fontsize=8)
    axes[-1].set_xlabel("time (µs)")
    fig.tight_layout()
    fig.savefig(p, dpi=120, format="png")
    plt.close(fig)
    return p
