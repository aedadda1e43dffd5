"""Fit the kernel-aware contention model's global parameters to the co-run matrix (and nothing
else): the bytes-in-flight gain of HBM-saturating kernels and the launch cost per device activity.

The per-kernel parts come from the isolated kernel tables (``Calibration``): every measured
kernel alone on a pool of p SMs reproduces its measured time, either through its own bytes in
flight per SM (memory- or latency-limited kernels), a compute efficiency (compute-limited), or a
work scale (kernels faster than the analytical byte count). Two quantities cannot be identified
from kernels alone and are fitted on the pairs of ``hw_runtime.gpu.corun.corun_matrix``:

* ``saturating_window_gain`` (sigma >= 1): a kernel that already reaches its HBM ceiling alone
  (decode attention on >= ~64 H200 SMs) keeps more bytes in flight than the least that reaches
  the ceiling; its window is multiplied by sigma, which sets how much HBM it takes from kernels
  co-running beside it.
* ``gemm_window_gain``: the same for tensor-core GEMMs, whose TMA load pipelines keep many
  bytes in flight although they need little bandwidth.
* ``launch_us_per_activity`` (delta >= 0): the part of a kernel's measured time that is launch
  overhead of its device activities inside a CUDA graph (holds the SMs, moves no bytes, does not
  slow under contention), at most the time the memory model cannot explain.

The fit is a grid search minimising the mean absolute log ratio of predicted to measured co-run
time of kernel A over all pairs; the validation configurations are never used.

Units: µs, bytes, SMs.
"""

from __future__ import annotations

import math
from typing import Callable, Mapping, Sequence

__all__ = ["GRIDS", "pair_kernels", "predict_pairs", "fit_corun"]

#: Grids searched: window gains of HBM-saturating kernels and of tensor GEMMs (dimensionless),
#: launch cost per device activity (µs; 0 = no fixed launch phase).
GRIDS: dict[str, tuple[float, ...]] = {
    "saturating_window_gain": (1.0, 2.0),
    "gemm_window_gain": (1.0, 2.0),
    "launch_us_per_activity": (0.0, 1.0),
}


def pair_kernels(matrix: dict, graph, synthetic: dict) -> dict:
    """The ``Kernel`` of each class of a co-run matrix.

    Args:
        matrix: ``hw_runtime.gpu.corun.corun_matrix`` output (``kernels``: class -> name).
        graph: the region graph the workload classes were measured on (m = its microbatches).
        synthetic: ``{"dense_gemm": Kernel, "copy": Kernel}`` (``corun.synthetic_kernels``).

    Returns:
        ``{class: Kernel}``.

    Raises:
        ValueError: a class kernel missing from the graph.
    """
    out = {}
    for c, info in matrix["kernels"].items():
        if info.get("synthetic"):
            out[c] = synthetic[c]
        else:
            out[c] = graph.kernels[graph.index(info["name"])]
    return out


def predict_pairs(matrix: dict, kernels: Mapping, hw, model) -> list[dict]:
    """Model predictions of every pair of a co-run matrix.

    Kernel A repeated ``launches_a`` times on its pool and B ``launches_b * b_replays`` times on
    the other, simulated with ``simulate_streams`` (L2 off: the measurement rotates instances so
    repeated launches find nothing in L2).

    Returns:
        one dict per pair: the measured fields plus ``pred_a_alone_us``, ``pred_a_corun_us``,
        ``pred_slowdown`` (pred co-run / pred alone) and ``meas_slowdown``.
    """
    from subgpu_jax.sim.eventsim import simulate_streams

    out, alone = [], {}
    for p in matrix["pairs"]:
        ka, kb = kernels[p["a"]], kernels[p["b"]]
        na, nb = int(p["launches_a"]), int(p["launches_b"]) * int(p["b_replays"])
        key = (p["a"], p["sms_a"])
        if key not in alone:
            alone[key] = float(simulate_streams([(p["sms_a"], [ka] * na)], hw, model, "none",
                                                record=False).makespan)
        r = simulate_streams([(p["sms_a"], [ka] * na), (p["sms_b"], [kb] * nb)], hw, model,
                             "none", record=False)
        co = float(r.task_end[0])
        out.append({**{k: p[k] for k in ("a", "b", "sms_a", "sms_b", "a_alone_us",
                                          "a_corun_us")},
                    "pred_a_alone_us": alone[key], "pred_a_corun_us": co,
                    "pred_slowdown": co / alone[key],
                    "meas_slowdown": p["a_corun_us"] / p["a_alone_us"]})
    return out


def _score(rows: Sequence[dict]) -> float:
    """Mean |log(predicted slowdown / measured slowdown)| over pairs."""
    return float(sum(abs(math.log(r["pred_slowdown"] / r["meas_slowdown"])) for r in rows)
                 / max(1, len(rows)))


def fit_corun(matrix: dict, kernels: Mapping, hw, make_model: Callable[..., object],
              grids: Mapping[str, Sequence[float]] | None = None,
              log: Callable[[str], None] | None = None) -> dict:
    """Grid search of the model's global parameters on the co-run matrix.

    Args:
        matrix, kernels, hw: as ``predict_pairs`` (hw with the calibrated bandwidth curve).
        make_model: ``(**params) -> ContentionModel`` (calibrated, kernel-aware).
        grids: parameter name -> values (default ``GRIDS``); the full product is searched.

    Returns:
        ``{"params": best {name: value}, "score" (mean |log ratio| of slowdowns), "grid":
        [{**params, "score"}], "pairs": predict_pairs rows at the best point}``.
    """
    import itertools

    grids = dict(GRIDS if grids is None else grids)
    names = list(grids)
    grid, best = [], None
    for vals in itertools.product(*(grids[n] for n in names)):
        params = dict(zip(names, vals))
        rows = predict_pairs(matrix, kernels, hw, make_model(**params))
        sc = _score(rows)
        grid.append({**params, "score": sc})
        if log:
            log(f"fit: {params} mean |log ratio| {sc:.4f}")
        if best is None or sc < best[0]:
            best = (sc, params, rows)
    return {"params": best[1], "score": best[0], "grid": grid, "pairs": best[2]}
