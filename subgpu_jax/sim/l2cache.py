"""L2 residency model (docs/method.md §3): a capacity-bounded table of logical weight and activation
objects with deterministic admission and eviction.

The table starts empty for every simulation and is carried across stages, layers and
microbatches. Reads of resident objects are hits; a missed object is fetched from HBM and admitted;
activation writes seed residency (write-allocate) and may evict residents. KV-cache traffic is
streaming and never enters the table (the simulator never calls ``read``/``write`` for it).
An object larger than the whole capacity is never admitted (it streams through).

Keys are any hashable value; the simulator qualifies names by region instance and microbatch
(``("w", l, name)`` for weights, ``("a", l, mu, name)`` for activations), so weight reuse across
microbatches emerges only when the schedule keeps a weight resident between its uses.

Policies (``L2_POLICIES``): ``"lru"`` (default; a hit refreshes recency), ``"fifo"`` (eviction in
admission order, hits do not refresh) and ``"none"`` (nothing is ever admitted: every read misses).
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
from typing import Hashable

__all__ = ["L2Cache", "L2_POLICIES", "check_policy"]

#: Cache policies understood by ``L2Cache`` (and by ``eventsim.simulate(cache=...)``).
L2_POLICIES: tuple[str, ...] = ("lru", "fifo", "none")


def check_policy(policy: str) -> str:
    """Return ``policy`` lower-cased if it is one of ``L2_POLICIES``.

    Raises:
        ValueError: unknown policy; the message lists the allowed ones.
    """
    p = str(policy).lower() if isinstance(policy, str) else policy
    if p not in L2_POLICIES:
        raise ValueError(f"cache policy must be one of {', '.join(L2_POLICIES)}, got {policy!r}")
    return p


class L2Cache:
    """Capacity-bounded residency table of logical objects.

    Args:
        capacity: bytes (``Hardware.l2_bytes``); must be finite and > 0.
        policy: one of ``L2_POLICIES``.

    Attributes:
        occupancy: bytes currently resident (float); never exceeds ``capacity``.
        max_occupancy: the largest occupancy seen (bytes).
        hit_bytes, miss_bytes: read bytes that hit / missed so far.
        evictions: number of objects evicted.

    Raises:
        ValueError: bad capacity or unknown policy (one line naming the field).
    """

    __slots__ = ("capacity", "policy", "_t", "occupancy", "max_occupancy", "hit_bytes",
                 "miss_bytes", "evictions", "_admit", "_refresh")

    def __init__(self, capacity: float, policy: str = "lru") -> None:
        if isinstance(capacity, (bool, str)) or not isinstance(capacity, (int, float, np.number)):
            raise ValueError(f"l2 capacity must be a positive number of bytes, got {capacity!r}")
        cap = float(capacity)
        if not cap > 0 or cap == float("inf"):
            raise ValueError(f"l2 capacity must be a positive finite number of bytes, "
                             f"got {capacity!r}")
        self.capacity = cap
        self.policy = check_policy(policy)
        self._t: OrderedDict[Hashable, float] = OrderedDict()
        self.occupancy = 0.0
        self.max_occupancy = 0.0
        self.hit_bytes = 0.0
        self.miss_bytes = 0.0
        self.evictions = 0
        self._admit = self.policy != "none"
        self._refresh = self.policy == "lru"

    def __contains__(self, key: Hashable) -> bool:
        return key in self._t

    def __len__(self) -> int:
        return len(self._t)

    def keys(self) -> list:
        """Resident keys, oldest (next to evict) first."""
        return list(self._t)

    def entries(self) -> list[tuple[Hashable, float]]:
        """Resident ``(key, bytes)`` pairs, oldest (next to evict) first."""
        return list(self._t.items())

    def rename(self, rename) -> None:
        """Replace every resident key by ``rename(key)``, keeping the order, the bytes and the
        counters (``sim.periodic``: a forward pass moved on by whole regions renames the objects
        of region l as those of region l + k).

        Raises:
            ValueError: ``rename`` maps two resident keys to one.
        """
        t = OrderedDict((rename(k), b) for k, b in self._t.items())
        if len(t) != len(self._t):
            raise ValueError("rename must map resident keys to distinct keys")
        self._t = t

    def _insert(self, key: Hashable, nbytes: float) -> None:
        t = self._t
        if key in t:
            self.occupancy -= t.pop(key)
        if nbytes > self.capacity or nbytes <= 0:
            return
        while self.occupancy + nbytes > self.capacity and t:
            _, b = t.popitem(last=False)
            self.occupancy -= b
            self.evictions += 1
        t[key] = nbytes
        self.occupancy += nbytes
        if self.occupancy > self.max_occupancy:
            self.max_occupancy = self.occupancy

    def read(self, key: Hashable, nbytes: float) -> bool:
        """Read object ``key`` of ``nbytes`` bytes. Returns True on a hit.

        A hit refreshes recency under LRU; a miss admits the object (evicting the oldest
        residents until it fits) unless the policy is ``"none"`` or it exceeds the capacity.
        """
        t = self._t
        if key in t:
            self.hit_bytes += nbytes
            if self._refresh:
                t.move_to_end(key)
            return True
        self.miss_bytes += nbytes
        if self._admit:
            self._insert(key, nbytes)
        return False

    def write(self, key: Hashable, nbytes: float) -> None:
        """Write object ``key`` (write-allocate): it becomes the most recent resident, evicting
        the oldest residents if needed (no-op under ``"none"`` or when larger than capacity)."""
        if self._admit:
            self._insert(key, nbytes)
