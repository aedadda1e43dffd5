"""Pareto frontiers and matched comparisons (docs/method.md §4 "Outputs").

A decode step of makespan T µs gives

* per-user throughput  = 1e6 / T                      (tokens/s/user), and
* per-GPU throughput   = tokens_per_gpu * 1e6 / T      (tokens/s/GPU),

with ``tokens_per_gpu`` = G / n (``graph.Deployment.tokens_per_gpu``). Both are maximised. A point
is on the frontier when no other point is at least as good in both and strictly better in one.

Matched comparisons interpolate a frontier linearly between its points (no extrapolation): the
per-user gain at matched per-GPU throughput y is u_cand(y) / u_base(y) - 1, and the per-GPU gain at
matched per-user throughput u is g_cand(u) / g_base(u) - 1.

Pure numpy; no JAX.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = [
    "pareto_mask", "pareto_front", "frontier_curve",
    "per_user_gain_at_matched_gpu", "per_gpu_gain_at_matched_user",
]


def _points(points: np.ndarray | Sequence[Sequence[float]], name: str = "points") -> np.ndarray:
    p = np.asarray(points, dtype=float)
    if p.ndim != 2 or p.shape[1] != 2:
        raise ValueError(f"{name} must have shape (N, 2) = (per_user, per_gpu), got {p.shape}")
    if np.any(~np.isfinite(p)):
        raise ValueError(f"{name} must be finite")
    return p


def pareto_mask(points: np.ndarray | Sequence[Sequence[float]]) -> np.ndarray:
    """Which points are Pareto-nondominated when both coordinates are maximised.

    Args:
        points: (N, 2) array of (per_user, per_gpu) throughputs (any two maximised objectives).

    Returns:
        bool (N,): True for points no other point dominates (>= in both, > in at least one).
        Exact duplicates of a nondominated point are all kept.

    Raises:
        ValueError: wrong shape or a non-finite entry.
    """
    p = _points(points)
    n = p.shape[0]
    if n == 0:
        return np.zeros(0, dtype=bool)
    # sort by x descending, then y descending; sweep keeping the best y seen at strictly larger x
    order = np.lexsort((-p[:, 1], -p[:, 0]))
    keep = np.zeros(n, dtype=bool)
    best_y_prev_x = -np.inf  # best y among points with strictly greater x
    i = 0
    while i < n:
        j = i
        x = p[order[i], 0]
        while j < n and p[order[j], 0] == x:
            j += 1
        group = order[i:j]
        ymax = p[group, 1].max()
        for g in group:  # within equal x only the max y survives (ties all survive)
            keep[g] = p[g, 1] == ymax and p[g, 1] > best_y_prev_x
        best_y_prev_x = max(best_y_prev_x, ymax)
        i = j
    return keep


def pareto_front(points: np.ndarray | Sequence[Sequence[float]]) -> np.ndarray:
    """Indices of the nondominated points, sorted by per-GPU throughput ascending.

    Args:
        points: (N, 2) (per_user, per_gpu).

    Returns:
        int array (F,) of row indices into ``points``.

    Raises:
        ValueError: as ``pareto_mask``.
    """
    p = _points(points)
    idx = np.flatnonzero(pareto_mask(p))
    return idx[np.lexsort((-p[idx, 0], p[idx, 1]))]


def frontier_curve(points: np.ndarray | Sequence[Sequence[float]]) -> np.ndarray:
    """The frontier of ``points`` as a (F, 2) array of (per_user, per_gpu), per-GPU ascending
    (so per-user descending), duplicates removed.

    Raises:
        ValueError: as ``pareto_mask``; an empty ``points``.
    """
    p = _points(points)
    if p.shape[0] == 0:
        raise ValueError("points must not be empty")
    f = np.unique(p[pareto_front(p)], axis=0)
    return f[np.argsort(f[:, 1], kind="stable")]


def _interp_no_extrap(x: np.ndarray, xp: np.ndarray, fp: np.ndarray) -> np.ndarray:
    """np.interp over ascending ``xp`` with NaN outside [xp[0], xp[-1]]."""
    y = np.interp(x, xp, fp)
    return np.where((x < xp[0]) | (x > xp[-1]), np.nan, y)


def _matched(base: np.ndarray, cand: np.ndarray, key: int, at: np.ndarray | None
             ) -> tuple[np.ndarray, np.ndarray]:
    fb, fc = frontier_curve(base), frontier_curve(cand)
    val = 1 - key
    # along a frontier, sorted by the key coordinate ascending
    ob, oc = np.argsort(fb[:, key], kind="stable"), np.argsort(fc[:, key], kind="stable")
    xb, yb = fb[ob, key], fb[ob, val]
    xc, yc = fc[oc, key], fc[oc, val]
    if at is None:
        lo, hi = max(xb[0], xc[0]), min(xb[-1], xc[-1])
        pts = np.unique(np.concatenate([xb, xc]))
        at = pts[(pts >= lo) & (pts <= hi)]
    at = np.asarray(at, dtype=float).ravel()
    ub = _interp_no_extrap(at, xb, yb)
    uc = _interp_no_extrap(at, xc, yc)
    with np.errstate(divide="ignore", invalid="ignore"):
        gain = uc / ub - 1.0
    return at, gain


def per_user_gain_at_matched_gpu(base: np.ndarray, cand: np.ndarray,
                                 at: np.ndarray | Sequence[float] | None = None
                                 ) -> tuple[np.ndarray, np.ndarray]:
    """Per-user throughput gain of ``cand`` over ``base`` at matched per-GPU throughput.

    Each set of points is reduced to its Pareto frontier, which is interpolated linearly in
    per-GPU throughput (no extrapolation).

    Args:
        base, cand: (N, 2) and (M, 2) arrays of (per_user, per_gpu) throughputs.
        at: per-GPU throughputs (tokens/s/GPU) to compare at; default: every frontier point of
            either set inside the per-GPU range both frontiers cover.

    Returns:
        ``(at, gain)``: float arrays (A,); gain = u_cand(at) / u_base(at) - 1 (0.2 = +20%), NaN
        where ``at`` lies outside either frontier's range.

    Raises:
        ValueError: wrong shapes, non-finite or empty inputs.
    """
    return _matched(_points(base, "base"), _points(cand, "cand"), 1, at)


def per_gpu_gain_at_matched_user(base: np.ndarray, cand: np.ndarray,
                                 at: np.ndarray | Sequence[float] | None = None
                                 ) -> tuple[np.ndarray, np.ndarray]:
    """Per-GPU throughput gain of ``cand`` over ``base`` at matched per-user throughput.

    As ``per_user_gain_at_matched_gpu`` with the roles of the coordinates swapped: frontiers are
    interpolated linearly in per-user throughput; ``at`` holds per-user throughputs
    (tokens/s/user); gain = g_cand(at) / g_base(at) - 1, NaN outside either range.
    """
    return _matched(_points(base, "base"), _points(cand, "cand"), 0, at)
