"""Looking at a schedule: Chrome/Perfetto trace-event JSON, a Gantt chart of the stage timeline
and utilisation plots, all from an ``eventsim.SimResult``.

matplotlib is used with the non-interactive Agg backend (files only, no display needed).
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from subgpu_jax.model.checks import out_file
from subgpu_jax.model.graph import CATEGORIES

__all__ = ["save_figure", "write_trace", "trace_events", "plot_gantt", "plot_utilisation", "CATEGORY_COLORS",
           "IMAGE_FORMATS", "check_image_path", "gantt_figure", "utilisation_figure"]

#: One colour per ``graph.CATEGORIES`` entry (matplotlib tab10), used by the Gantt chart.
CATEGORY_COLORS: dict[str, str] = {
    c: col for c, col in zip(CATEGORIES, ("#1f77b4", "#d62728", "#ff7f0e", "#2ca02c", "#9467bd",
                                          "#8c564b", "#e377c2", "#7f7f7f"))
}


#: Colour of the head kernels (final norm, LM head, sampling, embedding) in the Gantt chart.
HEAD_COLOR = "#bcbd22"

#: Image formats the figure functions write, chosen by the file name's extension (the raster
#: and vector formats of matplotlib's Agg canvas; jpg/jpeg through Pillow, a matplotlib
#: dependency).
IMAGE_FORMATS = ("png", "jpg", "jpeg", "svg", "pdf")


def check_image_path(path: str | os.PathLike, field: str) -> tuple[Path, str]:
    """Check a figure path and return it with the image format named by its extension.

    Args:
        path: output file, e.g. ``gantt.png`` or ``gantt.svg``; its folder must exist.
        field: the option or argument name used in error messages (e.g. ``--gantt``).

    Returns:
        ``(Path, format)`` with format one of ``IMAGE_FORMATS`` (lower case).

    Raises:
        ValueError: as ``checks.out_file``, or an extension that is not one of ``IMAGE_FORMATS``
            (a figure is never written in a format other than the one its name says).
    """
    p = out_file(path, field)
    ext = p.suffix.lower().lstrip(".")
    if ext not in IMAGE_FORMATS:
        raise ValueError(f"{field}: {str(p)!r} must end in one of "
                         f"{', '.join('.' + e for e in IMAGE_FORMATS)} (the image format)")
    return p, ext


def save_figure(fig, path: str | os.PathLike, dpi: int = 120, fmt: str | None = None) -> Path:
    """Write a matplotlib figure atomically: rendered in memory, written to ``path.tmp``,
    fsync-ed and renamed over ``path`` (``store.atomic_write``), so a full disk or a kill
    leaves the old file (or none), never a truncated image.

    Args:
        fig: the figure. path: the image file. dpi: raster resolution. fmt: image format
            (default: the extension's, else png).

    Raises:
        OSError: the file cannot be written (names ``path``; no ``.tmp`` is left).
    """
    import io

    from subgpu_jax.app.store import atomic_write

    p = Path(path)
    buf = io.BytesIO()
    fig.savefig(buf, dpi=dpi, format=fmt or (p.suffix.lower().lstrip(".") or "png"))
    atomic_write(str(p), buf.getvalue())
    return p


def _segments(res) -> np.ndarray:
    """Segment of every kernel instance (the task's segment; the stream index without a DAG)."""
    if res.dag is not None:
        return np.asarray(res.dag.seg)[res.kernel_task]
    return np.asarray(res.kernel_task)


def _pieces(res, layer_offset: int = 0, runs=None) -> tuple[list, float]:
    """What is drawn before the head, one after the other: ``runs`` (the step's region runs in
    layer order, ``[(SimResult, first layer)]``, all with the same stages: ``map_cut`` keeps
    the pools) or ``res`` alone. Returns ``([(SimResult, first layer, start µs)], their
    total µs)``."""
    out, t0 = [], 0.0
    for r, off in (list(runs) if runs else [(res, layer_offset)]):
        out.append((r, int(off), t0))
        t0 += float(r.makespan)
    return out, t0


def trace_events(res, layer_offset: int = 0, head=None, runs=None) -> list[dict]:
    """Trace-event dicts (Chrome JSON format) of a ``SimResult``: one ``"X"`` event per kernel
    instance on the track (tid) of its stage, plus thread-name metadata. ``head``: the head
    kernels' ``SimResult`` (``sim.eventsim.simulate_streams`` of ``ForwardPass.head`` on the
    whole GPU), drawn after ``res`` on a track of its own (category ``head``). ``runs``: the
    whole step's region runs in layer order, ``[(SimResult, first layer)]`` (``res`` among
    them), drawn one after the other on the same stage tracks, then the head: the whole step
    (DeepSeek-V3: layers 0-2, then 3-60, then the head).

    Event args: ``layer`` (the model's layer: ``layer_offset`` + region * layers_per_region +
    kernel.layer; ``layer_offset`` is the model's number of the run's first layer, e.g. 3 for
    DeepSeek-V3's MoE layers), ``region``, ``microbatch``, ``segment``, ``stage``,
    ``category``. Times (``ts``, ``dur``) in µs.
    """
    pieces, end = _pieces(res, layer_offset, runs)
    res = pieces[0][0]
    ev: list[dict] = [{"ph": "M", "pid": 0, "name": "process_name",
                       "args": {"name": f"SubGPU simulation ({res.hw_name})"}}]
    for s, p in enumerate(res.stage_sms):
        ev.append({"ph": "M", "pid": 0, "tid": s, "name": "thread_name",
                   "args": {"name": f"stage {s} ({p} SMs)"}})
    for r, off, t_run in pieces:
        P = 1
        if r.dag is not None and r.kernels:
            P = max(k.layer for k in r.kernels) + 1
        segs = _segments(r)
        for i in range(r.kernel_start.size):
            k = r.kernels[int(r.kernel_index[i])]
            l = int(r.kernel_region[i])
            ev.append({"ph": "X", "pid": 0, "tid": int(r.kernel_stage[i]), "name": k.name,
                       "cat": k.category, "ts": t_run + float(r.kernel_start[i]),
                       "dur": float(r.kernel_end[i] - r.kernel_start[i]),
                       "args": {"layer": off + l * P + int(k.layer), "region": l,
                                "microbatch": int(r.kernel_mb[i]), "segment": int(segs[i]),
                                "stage": int(r.kernel_stage[i]), "category": k.category}})
    if head is not None:  # final norm, LM head, sampling, embedding: after the layers
        tid, t0 = len(res.stage_sms), end
        ev.append({"ph": "M", "pid": 0, "tid": tid, "name": "thread_name",
                   "args": {"name": f"head (whole GPU, {head.stage_sms[0]} SMs)"}})
        for i in range(head.kernel_start.size):
            k = head.kernels[int(head.kernel_index[i])]
            ev.append({"ph": "X", "pid": 0, "tid": tid, "name": k.name, "cat": "head",
                       "ts": t0 + float(head.kernel_start[i]),
                       "dur": float(head.kernel_end[i] - head.kernel_start[i]),
                       "args": {"category": "head", "kernel_category": k.category}})
    return ev


def write_trace(res, path: str | os.PathLike, layer_offset: int = 0,
                scope: str | None = None, head=None, runs=None) -> Path:
    """Write a Chrome/Perfetto trace-event JSON file (open it in ui.perfetto.dev).

    Args:
        res: an ``eventsim.SimResult``.
        path: output file; its directory must exist.
        layer_offset: the model's number of the result's first layer (``trace_events``).
        scope: what the result covers of the step (``step.main_run_scope``'s text), stored
            as ``otherData.shows``.
        head: the head kernels' ``SimResult``, drawn after ``res`` (``trace_events``);
            ``otherData.makespan_us`` then covers both.
        runs: the step's region runs in layer order, ``[(SimResult, first layer)]``, drawn
            one after the other instead of ``res`` alone (``trace_events``).

    Returns:
        The path written.

    Raises:
        ValueError: the directory of ``path`` does not exist.
    """
    from subgpu_jax.app.store import atomic_write

    p = out_file(path, "trace path")
    atomic_write(str(p), json.dumps({
        "traceEvents": trace_events(res, layer_offset, head, runs), "displayTimeUnit": "ms",
        "otherData": {"makespan_us": _pieces(res, layer_offset, runs)[1]
                      + (float(head.makespan) if head is not None else 0.0), "hw": res.hw_name,
                      "shows": scope or "the simulated schedule"}}))
    return p


def plot_gantt(res, path: str | os.PathLike, title: str | None = None,
               t_max_us: float | None = None, scope: str | None = None, head=None,
               runs=None) -> Path:
    """Gantt chart of the stage timeline: one row per stage, one bar per kernel, coloured by
    category (``CATEGORY_COLORS``), the category legend above the chart.

    Args:
        res: a ``SimResult``. path: image path (directory must exist; the format follows the
        extension, one of ``IMAGE_FORMATS``). title: figure title.
        t_max_us: show only [0, t_max_us] (µs; default: the result's whole makespan). When
            this cuts it short, the x-axis label says which part is shown.
        scope: what the result covers of the decode step (``step.main_run_scope``'s text),
            written under the x-axis; default "the simulated schedule".
        head: the head kernels' ``SimResult`` (as in ``trace_events``), drawn after ``res`` on
            a row of its own.
        runs: the step's region runs in layer order, ``[(SimResult, first layer)]``, drawn one
            after the other on the stage rows instead of ``res`` alone (as in ``trace_events``).

    Returns:
        The path written.

    Raises:
        ValueError: the directory of ``path`` does not exist, an unsupported extension, or a
            ``t_max_us`` that is not > 0.
    """
    p, fmt = check_image_path(path, "gantt path")
    import matplotlib.pyplot as plt

    fig = gantt_figure(res, title, t_max_us, scope, head, runs)
    save_figure(fig, p, dpi=120, fmt=fmt)
    plt.close(fig)
    return p


def gantt_figure(res, title: str | None = None, t_max_us: float | None = None,
                 scope: str | None = None, head=None, runs=None):
    """The matplotlib ``Figure`` of ``plot_gantt`` (not saved; the caller closes it); ``head``
    adds a last row, "head", its kernels after ``res``'s makespan (grey); ``runs`` (the
    step's region runs, as in ``trace_events``) are drawn one after the other instead of
    ``res`` alone, the head after the last.

    Raises:
        ValueError: a ``t_max_us`` that is not > 0.
    """
    if t_max_us is not None and not t_max_us > 0:
        raise ValueError(f"t_max_us must be > 0 µs, got {t_max_us!r}")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    pieces, end = _pieces(res, 0, runs)
    res = pieces[0][0]
    D = len(res.stage_sms)
    rows = D + (head is not None)
    makespan = end + (float(head.makespan) if head is not None else 0.0)
    shown = makespan if t_max_us is None else min(float(t_max_us), makespan)
    fig, ax = plt.subplots(figsize=(12, 1.6 + 0.6 * rows))
    cats: list = []
    for r, _, t_run in pieces:
        rcats = [r.kernels[int(k)].category for k in r.kernel_index]
        cats += rcats
        for c in CATEGORIES:
            idx = [i for i, x in enumerate(rcats) if x == c]
            for s in range(D):
                bars = [(t_run + r.kernel_start[i], r.kernel_end[i] - r.kernel_start[i])
                        for i in idx if r.kernel_stage[i] == s]
                if bars:
                    ax.broken_barh(bars, (s - 0.4, 0.8), facecolors=CATEGORY_COLORS[c],
                                   edgecolor="none")
    labels = [f"stage {s}\n{p} SMs" for s, p in enumerate(res.stage_sms)]
    if head is not None:  # final norm, LM head, sampling, embedding: after the layers
        t0 = end
        ax.broken_barh([(t0 + a, b - a) for a, b in zip(head.kernel_start, head.kernel_end)],
                       (D - 0.4, 0.8), facecolors=HEAD_COLOR, edgecolor="none")
        labels.append(f"head\n{head.stage_sms[0]} SMs")
    ax.set_yticks(range(rows))
    ax.set_yticklabels(labels)
    ax.invert_yaxis()
    what = "\n".join(textwrap.wrap(scope or "the simulated schedule", 150))  # fits the width
    if shown < makespan:
        ax.set_xlabel(f"time (µs): first {shown:,.0f} µs of the {makespan:,.0f} µs simulated "
                      f"makespan shown\n(drawn: {what})")
    else:
        ax.set_xlabel(f"time (µs): all {makespan:,.0f} µs simulated\n(drawn: {what})")
    ax.set_xlim(0, max(shown, 1e-9))
    ax.set_title(title or f"{res.hw_name}: makespan {makespan:.1f} µs", pad=24)
    used = [c for c in CATEGORIES if c in set(cats)]
    handles = [Patch(color=CATEGORY_COLORS[c], label=c) for c in used]
    if head is not None:
        handles.append(Patch(color=HEAD_COLOR, label="head"))
    # the legend sits between the title and the axes, so it can never cover the x-axis label
    ax.legend(handles=handles,
              loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=len(handles), fontsize=8,
              frameon=False, borderaxespad=0.2)
    fig.tight_layout()
    return fig


def _step_series(res) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    t = np.append(res.util_t, res.makespan)
    return t, np.append(res.util_hbm, res.util_hbm[-1:]), np.append(res.util_sm, res.util_sm[-1:])


def plot_utilisation(temporal, config, path: str | os.PathLike,
                     labels: tuple[str, str] = ("temporal", "SubGPU"),
                     scopes: tuple[str, str] | None = None, heads=None, runs=None) -> Path:
    """Utilisation figure: HBM bandwidth (fraction of ``hbm_peak_Bps``, a red line drawn on top)
    and fraction of SMs busy (a shaded blue area) over time, for the temporal run (top) and a
    given configuration (bottom); time-weighted means in the legends.

    Args:
        temporal, config: ``SimResult`` objects simulated with ``record=True``.
        path: image path (directory must exist; format from the extension, ``IMAGE_FORMATS``).
        labels: titles of the two panels.
        scopes: what each result covers of the decode step (``step.main_run_scope``'s text),
            in the panel titles instead of the bare makespan.
        heads: ``(temporal head, config head)``: the head kernels' ``SimResult`` of each step
            (``simulate_streams(..., record=True)`` on the whole GPU), drawn after each run
            (grey band): the whole step in the figure. None: the runs only.
        runs: ``(temporal runs, config runs)``: each step's region runs in layer order,
            ``[(SimResult, first layer)]`` (recorded), drawn one after the other instead of
            ``temporal`` / ``config`` alone (as in ``trace_events``); the means in the legends
            are then over all of them, weighted by time.

    Returns:
        The path written.

    Raises:
        ValueError: the directory does not exist, an unsupported extension, or a result has no
            utilisation series.
    """
    p, fmt = check_image_path(path, "utilisation path")
    import matplotlib.pyplot as plt

    fig = utilisation_figure(temporal, config, labels, scopes, heads, runs)
    save_figure(fig, p, dpi=120, fmt=fmt)
    plt.close(fig)
    return p


def utilisation_figure(temporal, config, labels: tuple[str, str] = ("temporal", "SubGPU"),
                       scopes: tuple[str, str] | None = None, heads=None, runs=None):
    """The matplotlib ``Figure`` of ``plot_utilisation`` (not saved; the caller closes it);
    ``heads`` and ``runs`` as there.

    Raises:
        ValueError: a result without a utilisation series.
    """
    panels = [_pieces(r, 0, rr)[0] for r, rr in zip((temporal, config), runs or (None, None))]
    for nm, pieces in zip(("temporal", "config"), panels):
        if any(r.util_t.size == 0 for r, _, _ in pieces):
            raise ValueError(f"{nm}: result has no utilisation series (simulate with record=True)")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 1, figsize=(11, 6), sharex=True)
    for ax, pieces, lab, sc, hd in zip(axes, panels, labels, scopes or (None, None),
                                       heads or (None, None)):
        series = [_step_series(r) for r, _, _ in pieces]   # the runs one after the other
        t = np.concatenate([st + t_run for (st, _, _), (_, _, t_run) in zip(series, pieces)])
        h = np.concatenate([sh for _, sh, _ in series])
        s = np.concatenate([ss for _, _, ss in series])
        span = sum(float(r.makespan) for r, _, _ in pieces)
        r = pieces[0][0] if len(pieces) == 1 else SimpleNamespace(   # time-weighted means
            makespan=span,
            mean_sm_util=sum(x.mean_sm_util * float(x.makespan) for x, _, _ in pieces) / span,
            mean_hbm_util=sum(x.mean_hbm_util * float(x.makespan) for x, _, _ in pieces) / span)
        if hd is not None and hd.util_t.size:   # the head after the run: the whole step
            th, hh, sh = _step_series(hd)
            t0 = span
            t, h, s = (np.concatenate([t, th + t0]), np.concatenate([h, hh]),
                       np.concatenate([s, sh]))
            ax.axvspan(t0, t0 + float(hd.makespan), color=HEAD_COLOR, alpha=0.25, zorder=0,
                       label=f"head ({float(hd.makespan):,.0f} µs)")
        # SMs busy as a light area underneath, HBM as a thick line above it: the SM series
        # switches between 0 and 1 every kernel and would hide a line drawn below it
        ax.fill_between(t, s, step="post", color="#1f77b4", alpha=0.25, linewidth=0, zorder=1,
                        label=f"SMs busy (mean {r.mean_sm_util:.0%})")
        ax.step(t, h, where="post", color="#d62728", linewidth=1.6, zorder=3,
                label=f"HBM bandwidth (mean {r.mean_hbm_util:.0%})")
        ax.set_ylim(0, 1.18)
        ax.set_yticks([0, 0.25, 0.5, 0.75, 1.0])
        ax.set_ylabel("fraction of peak")
        ax.set_title("\n".join(textwrap.wrap(f"{lab}: {sc}", 150)) if sc else
                     f"{lab}: makespan {r.makespan:.1f} µs", fontsize=9 if sc else None)
        ax.legend(loc="upper right", fontsize=8, ncol=2, framealpha=0.9)
    axes[-1].set_xlabel("time (µs)")
    fig.tight_layout()
    return fig
