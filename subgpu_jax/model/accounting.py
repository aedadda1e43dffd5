"""Throughput accounting of a decode step (docs/method.md §4 "Outputs").

A decode step of makespan T µs gives per-user throughput 1e6 / T (tokens/s/user) and per-GPU
throughput tokens_per_gpu * 1e6 / T (tokens/s/GPU), with ``tokens_per_gpu`` = G / n
(``Deployment.tokens_per_gpu``). Pure numpy.
"""

from __future__ import annotations

import numpy as np

__all__ = ["throughputs", "throughput_record"]


def throughputs(makespan_us: np.ndarray | float, tokens_per_gpu: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-user and per-GPU throughput of decode steps.

    Args:
        makespan_us: step time(s) in µs, any shape, each > 0.
        tokens_per_gpu: G / n, tokens each GPU produces per step (> 0).

    Returns:
        ``(per_user, per_gpu)`` in tokens/s/user and tokens/s/GPU, the shape of ``makespan_us``.

    Raises:
        ValueError: a makespan that is not finite and > 0, or ``tokens_per_gpu`` <= 0.
    """
    t = np.asarray(makespan_us, dtype=float)
    if np.any(~np.isfinite(t) | (t <= 0)):
        raise ValueError("makespan_us must be finite and > 0 (µs)")
    if not np.isfinite(tokens_per_gpu) or tokens_per_gpu <= 0:
        raise ValueError(f"tokens_per_gpu must be > 0, got {tokens_per_gpu!r}")
    per_user = 1e6 / t
    return per_user, per_user * float(tokens_per_gpu)


def throughput_record(makespan_us: float, tokens_per_gpu: float) -> dict[str, float]:
    """Per-user and per-GPU decode throughput of one step.

    Args:
        makespan_us: decode-step (forward-pass) time in µs, > 0.
        tokens_per_gpu: tokens produced per step per GPU (G / n).

    Returns:
        ``{"makespan_us", "per_user_tok_s" (= 1e6 / makespan), "per_gpu_tok_s"
        (= tokens_per_gpu * 1e6 / makespan)}``.

    Raises:
        ValueError: a non-positive or non-finite makespan.
    """
    per_user, per_gpu = throughputs(makespan_us, tokens_per_gpu)
    return {"makespan_us": float(makespan_us), "per_user_tok_s": float(per_user),
            "per_gpu_tok_s": float(per_gpu)}
