"""Input checks shared by every layer: one-line ``ValueError`` messages that name the field and
what is allowed (the house rule for bad input: never a silent fallback)."""

from __future__ import annotations

import math
from typing import Any, Iterable

import numpy as np

__all__ = ["pos_int", "finite", "choice"]


def pos_int(v: Any, name: str, minimum: int = 1) -> int:
    """``v`` as an ``int`` when it is an integer (Python or numpy, not bool) >= ``minimum``.

    Raises:
        ValueError: ``"{name} must be an integer >= {minimum}, got {v!r}"``.
    """
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {v!r}")
    return int(v)


def finite(v: Any, name: str, lo: float | None = None, lo_open: bool = False,
           hi: float | None = None) -> float:
    """``v`` as a ``float`` when it is a finite real number in the given range.

    Args:
        v: the value; name: the field named in the error; lo: lower bound (inclusive unless
        ``lo_open``); hi: upper bound (inclusive).

    Raises:
        ValueError: not a finite real number, or out of range.
    """
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a finite number, got {v!r}") from None
    if isinstance(v, bool) or not math.isfinite(x):
        raise ValueError(f"{name} must be a finite number, got {v!r}")
    if lo is not None and (x <= lo if lo_open else x < lo):
        raise ValueError(f"{name} must be {'>' if lo_open else '>='} {lo}, got {v!r}")
    if hi is not None and x > hi:
        raise ValueError(f"{name} must be <= {hi}, got {v!r}")
    return x


def choice(v: Any, name: str, allowed: Iterable[Any]) -> Any:
    """``v`` when it is one of ``allowed``.

    Raises:
        ValueError: ``"{name} must be one of a, b, c, got {v!r}"``.
    """
    allowed = tuple(allowed)
    if v not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(str, allowed))}, got {v!r}")
    return v
