"""Bounded caches (docs/reliability.md, "Memory"): a least-recently-used cache bounded by the
bytes of the arrays its values hold, and the byte count itself.

A search keeps expensive objects (cheap estimators of one cut: tens of MiB of tables each) for
reuse within a grid point; an unbounded dict of them grew by ~200 MiB per grid point. ``ByteLRU``
keeps at most ``max_bytes`` of them, evicting the least recently used first, and never stores a
value larger than the bound (it is returned to its caller and dropped after use).
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Hashable

import cachetools

__all__ = ["nbytes_of", "ByteLRU", "CountingLRU"]


#: Values that hold no array (``nbytes_of`` counts them 0).
_SCALARS = (str, bytes, int, float, bool, complex)


def nbytes_of(obj: Any, _seen: set | None = None) -> int:
    """Bytes of the arrays reachable from ``obj`` (numpy or JAX arrays: anything with
    ``nbytes``, ``shape`` and ``dtype``), through dicts, lists, tuples, sets, dataclass fields
    and instance attributes; each object counted once. Other objects count 0 (their Python
    overhead is small beside the arrays of a cached evaluator), and so do objects of a class
    that sets ``SHARED_BY_CACHED_VALUES = True``: descriptions every cached value of a search
    references but none owns (the region graph, the GPU, the contention model), so a cache
    entry's size is what dropping it frees. (Walking a graph's kernels for each of the
    hundreds of estimators a main job caches took 0.9 s of its 23 s in one process.)"""
    seen = set() if _seen is None else _seen
    if (obj is None or isinstance(obj, _SCALARS) or id(obj) in seen
            or getattr(type(obj), "SHARED_BY_CACHED_VALUES", False)):
        return 0
    seen.add(id(obj))
    if hasattr(obj, "nbytes") and hasattr(obj, "shape") and hasattr(obj, "dtype"):
        try:
            return int(obj.nbytes)
        except (TypeError, ValueError):  # an abstract value (a tracer) has no bytes
            return 0
    if isinstance(obj, dict):
        items = obj.values()
    elif isinstance(obj, (list, tuple, set, frozenset)):
        items = obj
    elif getattr(obj, "__dataclass_fields__", None) is not None:
        items = [getattr(obj, f, None) for f in obj.__dataclass_fields__]
    else:
        d = getattr(obj, "__dict__", None)
        if not isinstance(d, dict) or isinstance(obj, type):
            return 0
        items = d.values()
    # scalars skipped here, not in a call each (index tuples of a task DAG hold 10^5 ints)
    return sum(nbytes_of(v, seen) for v in items
               if v is not None and not isinstance(v, _SCALARS))


class ByteLRU:
    """A least-recently-used mapping bounded by the bytes of its values (``nbytes_of``).

    Args:
        max_bytes: the bound (bytes, >= 0); 0 stores nothing.
        sizeof: bytes of a value (default ``nbytes_of``).

    ``get_or_make(key, make)`` returns the cached value or ``make()``, storing the new value
    when it fits (evicting the least recently used values first). Thread-safe.

    Attributes:
        hits, misses, evictions: counters. nbytes: bytes held now.
    """

    def __init__(self, max_bytes: int, sizeof: Callable[[Any], int] = nbytes_of) -> None:
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise ValueError(f"max_bytes must be an integer >= 0, got {max_bytes!r}")
        self.max_bytes = max_bytes
        self._sizeof = sizeof
        self._cache = CountingLRU(max(1, max_bytes), getsizeof=sizeof)
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    @property
    def evictions(self) -> int:
        """Values evicted to make room."""
        return self._cache.evicted

    @property
    def nbytes(self) -> int:
        """Bytes of the values held now."""
        return int(self._cache.currsize) if self.max_bytes else 0

    def __len__(self) -> int:
        return len(self._cache) if self.max_bytes else 0

    def __contains__(self, key: Hashable) -> bool:
        return self.max_bytes > 0 and key in self._cache

    def keys(self) -> list:
        """The keys held, least recently used first."""
        with self._lock:
            return list(self._cache.keys()) if self.max_bytes else []

    def get(self, key: Hashable, default: Any = None) -> Any:
        """The value of ``key`` (marked most recently used; a hit), or ``default`` (a miss)."""
        with self._lock:
            if self.max_bytes and key in self._cache:
                self.hits += 1
                return self._cache[key]
            self.misses += 1
        return default

    def put(self, key: Hashable, value: Any) -> None:
        """Store ``value`` under ``key`` when its size fits the bound (evicting the least
        recently used values first)."""
        with self._lock:
            if self.max_bytes and self._sizeof(value) <= self.max_bytes:
                self._cache[key] = value

    def get_or_make(self, key: Hashable, make: Callable[[], Any]) -> Any:
        """The value of ``key``: cached (marked most recently used), or ``make()`` (stored when
        its size fits the bound)."""
        with self._lock:
            if self.max_bytes and key in self._cache:
                self.hits += 1
                return self._cache[key]
        value = make()
        with self._lock:
            self.misses += 1
            if self.max_bytes and self._sizeof(value) <= self.max_bytes:
                self._cache[key] = value
        return value

    def clear(self) -> None:
        """Drop every value."""
        with self._lock:
            self._cache.clear()


class CountingLRU(cachetools.LRUCache):
    """``cachetools.LRUCache`` (bounded by ``maxsize``: items, or bytes with ``getsizeof``)
    counting its evictions in ``evicted``; ``clear`` does not count as evictions."""

    def __init__(self, maxsize, getsizeof=None) -> None:
        super().__init__(maxsize, getsizeof=getsizeof)
        self.evicted = 0

    def popitem(self):
        self.evicted += 1
        return super().popitem()

    def clear(self) -> None:
        n = self.evicted
        super().clear()
        self.evicted = n
