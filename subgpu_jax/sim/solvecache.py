"""The memo of lone-kernel solves (``sim.contention.BoundModel``): bounded and thread-safe.

A solve finds, by a few event simulations of one kernel alone on one pool, the work scale (and
fixed latency) with which the kernel takes its static or measured time there. A grid point of
the search asks for some hundreds (kernels x pools); they repeat across grid points of one
deployment, so they are memoised. Keys: (calibration or tag, hardware id, curve, copy peak, the
model's parameters, kernel key, pool SMs); values hold the calibration and hardware objects
whose ids are in the key, so those ids stay valid while the entry lives.
"""

from __future__ import annotations

import threading
from typing import Any, Hashable

from subgpu_jax.model.lru import CountingLRU

__all__ = ["LONE_SOLVE_CACHE_SIZE", "SolveCache", "LONE_SOLVES", "WORK_CACHE_SIZE", "WORKS"]

#: Lone-kernel solves kept, least recently used first out (entries of about 1 KiB: some 20 MiB).
#: Before, a dict cleared only past 200,000 entries.
LONE_SOLVE_CACHE_SIZE = 20_000


class SolveCache:
    """A ``CountingLRU`` of at most ``maxsize`` solves behind a lock (the search may score from
    several threads).

    Attributes:
        entries: the underlying ``CountingLRU`` (its ``evicted`` counts evictions).
    """

    def __init__(self, maxsize: int) -> None:
        self.entries = CountingLRU(maxsize)
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Any:
        """The value of ``key``, or None."""
        with self._lock:
            return self.entries.get(key)

    def put(self, key: Hashable, value: Any) -> None:
        """Store ``value`` under ``key`` (evicting the least recently used past the bound)."""
        with self._lock:
            self.entries[key] = value

    def __len__(self) -> int:
        return len(self.entries)

    def clear(self) -> None:
        with self._lock:
            self.entries.clear()


#: The one memo of ``sim.contention``.
LONE_SOLVES = SolveCache(LONE_SOLVE_CACHE_SIZE)

#: ``KernelWork`` objects kept (``sim.contention.BoundModel.work``: a few hundred bytes each, so
#: some 20 MiB). The event simulator builds one per kernel and pool for every simulation; the
#: search simulates the same kernels on the same pools hundreds of times.
WORK_CACHE_SIZE = 50_000

#: The memo of ``BoundModel.work``: key (model parameters, calibration id, hardware id, kernel
#: id, pool SMs); value (the work, and the kernel, hardware and calibration objects whose ids
#: are in the key, kept alive with it).
WORKS = SolveCache(WORK_CACHE_SIZE)

