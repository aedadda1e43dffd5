"""The configuration space F of DESIGN §2: cuts, boundary reuse and binding, SM allocations,
microbatch sizes, and the ``Config`` theta = (D, w, cut, allocation, microbatch).

Conventions: segments and stages are 0-based here (segment k runs on stage ``binding(k)``); a cut
is a tuple ``seg_of`` giving each kernel's segment; a cut is legal when every segment is nonempty
and every prefix S_0 u ... u S_k is predecessor-closed, i.e. seg_of[u] <= seg_of[v] for each edge.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np

from .hardware import Hardware

__all__ = [
    "Config", "binding", "enumerate_cuts", "count_cuts", "chain_cut", "cut_from_starts",
    "enumerate_allocations", "count_allocations", "microbatch_sizes", "temporal_config",
    "check_allocation", "space_size", "DISPATCH_POLICIES", "even_allocation",
]

#: Global dispatch-order policies understood by ``taskdag.build_task_dag``.
DISPATCH_POLICIES: tuple[str, ...] = ("wavefront", "layer_major")


def binding(k: int, K: int, w: int) -> int:
    """rho_w(k): the stage (0-based) of segment k of K; with w = 1 the last segment shares
    stage 0 with the first segment of the next region instance."""
    return 0 if (w == 1 and k == K - 1) else k


def _check_edges(n: int, edges: Sequence[tuple[int, int]]) -> None:
    for u, v in edges:
        if not (0 <= u < n and 0 <= v < n):
            raise ValueError(f"edges: ({u}, {v}) out of range 0..{n - 1}")


def is_chain(n: int, edges: Sequence[tuple[int, int]]) -> bool:
    """True when the edges contain every (i, i+1): the only topological order is 0..n-1."""
    es = set(map(tuple, edges))
    return all((i, i + 1) in es for i in range(n - 1))


def chain_cut(n: int, starts: Sequence[int]) -> tuple[int, ...]:
    """``seg_of`` of a chain of n kernels whose segments 1..K-1 start at ``starts`` (sorted)."""
    seg, k = [], 0
    st = set(starts)
    for i in range(n):
        if i in st:
            k += 1
        seg.append(k)
    return tuple(seg)


def enumerate_cuts(n: int, edges: Sequence[tuple[int, int]], K: int) -> Iterator[tuple[int, ...]]:
    """All legal cuts C_K(G) of the DAG (kernels 0..n-1 in a topological order), as ``seg_of``.

    Fast path for chains: the C(n-1, K-1) boundary choices. General DAGs: depth-first assignment
    in topological order with seg_of[v] >= max(seg_of[preds]) and every segment nonempty.

    Raises:
        ValueError: K not in 1..n, or an edge out of range.
    """
    _check_edges(n, edges)
    if not 1 <= K <= n:
        raise ValueError(f"K (segments) must be in 1..{n}, got {K}")
    if is_chain(n, edges):
        for starts in itertools.combinations(range(1, n), K - 1):
            yield chain_cut(n, starts)
        return
    preds: list[list[int]] = [[] for _ in range(n)]
    for u, v in edges:
        preds[v].append(u)
    seg = [0] * n

    def rec(i: int, used: int) -> Iterator[tuple[int, ...]]:
        if i == n:
            if used == (1 << K) - 1:
                yield tuple(seg)
            return
        lo = max((seg[u] for u in preds[i]), default=0)
        remaining = n - i
        for s in range(lo, K):
            new = used | (1 << s)
            # prune: segments still empty must fit in the remaining kernels
            if K - bin(new).count("1") > remaining - 1:
                continue
            seg[i] = s
            yield from rec(i + 1, new)

    yield from rec(0, 0)


def count_cuts(n: int, edges: Sequence[tuple[int, int]], K: int) -> int:
    """|C_K(G)|: binomial(n-1, K-1) for a chain, else by enumeration."""
    if is_chain(n, edges):
        return math.comb(n - 1, K - 1) if 1 <= K <= n else 0
    return sum(1 for _ in enumerate_cuts(n, edges, K))


def cut_from_starts(n: int, edges: Sequence[tuple[int, int]], starts: Sequence[int]) -> tuple[int, ...]:
    """A chain-style cut whose segments start at the kernel indices ``starts`` (0 excluded).

    Raises:
        ValueError: starts not strictly increasing in 1..n-1, or the cut is not legal on this DAG
            (an edge would go from a later segment to an earlier one).
    """
    st = list(starts)
    if any(not 1 <= s < n for s in st) or st != sorted(set(st)):
        raise ValueError(f"cuts must be strictly increasing kernel indices in 1..{n - 1}, got {st}")
    seg = chain_cut(n, st)
    check_cut(seg, n, edges, len(st) + 1)
    return seg


def check_cut(seg_of: Sequence[int], n: int, edges: Sequence[tuple[int, int]], K: int) -> None:
    """Raise ValueError naming the violated condition if ``seg_of`` is not in C_K(G)."""
    if len(seg_of) != n:
        raise ValueError(f"cut: seg_of has {len(seg_of)} entries, the graph has {n} kernels")
    if any(not 0 <= s < K for s in seg_of):
        raise ValueError(f"cut: segment indices must be in 0..{K - 1}")
    if set(seg_of) != set(range(K)):
        raise ValueError(f"cut: every one of the {K} segments must be nonempty")
    for u, v in edges:
        if seg_of[u] > seg_of[v]:
            raise ValueError(f"cut: not predecessor-closed: kernel {u} (segment {seg_of[u]}) "
                             f"feeds kernel {v} (segment {seg_of[v]})")


def count_allocations(budget: int, D: int, quantum: int, minimum: int) -> int:
    """|P_H^(D)|: ordered D-tuples of multiples of ``quantum``, each >= ``minimum``, summing to
    ``budget`` = binomial(U + D - 1, D - 1) with U = (budget - D*minimum)/quantum free quanta."""
    if D < 1 or budget % quantum or minimum % quantum:
        return 0
    U = (budget - D * minimum) // quantum
    return math.comb(U + D - 1, D - 1) if U >= 0 else 0


def enumerate_allocations(budget: int, D: int, quantum: int, minimum: int,
                          limit: int = 20_000_000) -> np.ndarray:
    """All allocations P_H^(D), shape (count, D) int32, in lexicographic order of the bars.

    Raises:
        ValueError: no allocation exists, or more than ``limit`` would be materialised (use the
            chunked generators of the search module for larger spaces).
    """
    c = count_allocations(budget, D, quantum, minimum)
    if c == 0:
        raise ValueError(f"allocation: no way to split {budget} SMs into {D} pools of >= "
                         f"{minimum} SMs in multiples of {quantum}")
    if c > limit:
        raise ValueError(f"allocation: {c} allocations exceed the limit {limit}")
    U = (budget - D * minimum) // quantum
    if D == 1:
        return np.array([[budget]], dtype=np.int32)
    bars = np.array(list(itertools.combinations(range(U + D - 1), D - 1)), dtype=np.int64)
    ext = np.concatenate([np.full((c, 1), -1), bars, np.full((c, 1), U + D - 1)], axis=1)
    parts = np.diff(ext, axis=1) - 1
    return (parts * quantum + minimum).astype(np.int32)


def even_allocation(budget: int, D: int, quantum: int, minimum: int) -> np.ndarray:
    """The allocation of P_H^(D) closest to equal: each stage gets ``minimum`` SMs plus an even
    share of the free quanta, the extra quanta going to the first stages; int64 (D,) SMs.

    Raises:
        ValueError: no allocation exists (``count_allocations`` is 0).
    """
    if count_allocations(budget, D, quantum, minimum) == 0:
        raise ValueError(f"allocation: no way to split {budget} SMs into {D} pools of >= "
                         f"{minimum} SMs in multiples of {quantum}")
    U = (budget - D * minimum) // quantum
    q = np.full(D, U // D, dtype=np.int64)
    q[: U % D] += 1
    return minimum + quantum * q


def check_allocation(alloc: Sequence[int], hw: Hardware, D: int) -> None:
    """Raise ValueError naming the violated condition if ``alloc`` is not in P_H^(D)."""
    a = list(alloc)
    if len(a) != D:
        raise ValueError(f"allocation: {len(a)} pools given, D = {D} stages need {D}")
    for d, p in enumerate(a):
        if isinstance(p, bool) or not np.isfinite(p) or int(p) != p:  # NaN/inf: no int()
            raise ValueError(f"allocation: stage {d} has {p!r} SMs, must be an integer")
        if p < hw.min_pool_sms:
            raise ValueError(f"allocation: stage {d} has {p} SMs, below the minimum "
                             f"{hw.min_pool_sms} of {hw.name}")
        if p % hw.sm_quantum:
            raise ValueError(f"allocation: stage {d} has {p} SMs, not a multiple of the "
                             f"{hw.name} SM quantum {hw.sm_quantum}")
    if sum(a) != hw.sm_budget:
        raise ValueError(f"allocation: SMs sum to {sum(a)}, must equal the {hw.name} budget "
                         f"{hw.sm_budget}")


def microbatch_sizes(batch: int, supported: Sequence[int] | None = None) -> list[int]:
    """B(B): microbatch sizes b dividing the per-GPU batch ``batch`` (optionally restricted to
    ``supported``), ascending."""
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    sizes = [b for b in range(1, batch + 1) if batch % b == 0]
    if supported is not None:
        sizes = [b for b in sizes if b in set(supported)]
    return sizes


@dataclass(frozen=True)
class Config:
    """A configuration theta = (D, w, cut, allocation, microbatch) plus the dispatch policy.

    Attributes:
        D: number of stages (1 = temporal execution).
        w: boundary reuse, 0 or 1 (K = D + w segments).
        seg_of: the cut, segment (0..K-1) of each kernel of the region.
        alloc: SMs of each stage, length D.
        microbatch: b, requests of the per-GPU attention batch R in one microbatch (m = R / b).
        policy: global dispatch-order policy (``DISPATCH_POLICIES``).
    """

    D: int
    w: int
    seg_of: tuple[int, ...]
    alloc: tuple[int, ...]
    microbatch: int
    policy: str = "wavefront"

    @property
    def K(self) -> int:
        """Segments per region, D + w."""
        return self.D + self.w

    def stage_of_segment(self) -> tuple[int, ...]:
        """rho_w(k) for k = 0..K-1."""
        return tuple(binding(k, self.K, self.w) for k in range(self.K))

    def microbatches(self, batch: int) -> int:
        """m = batch / b."""
        return batch // self.microbatch

    def check(self, n: int, edges: Sequence[tuple[int, int]], hw: Hardware, batch: int) -> None:
        """Feasibility theta in F (DESIGN §2). ``batch`` is the per-GPU attention batch R.

        Raises:
            ValueError: the first violated condition, naming the field and what is allowed.
        """
        if not isinstance(hw, Hardware):
            raise ValueError(f"hw must be a Hardware preset (hardware.get_hardware), got "
                             f"{type(hw).__name__}")
        if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or batch < 1:
            raise ValueError(f"batch (per-GPU requests R) must be a positive integer, got {batch!r}")
        if isinstance(self.D, bool) or not isinstance(self.D, (int, np.integer)):
            raise ValueError(f"config.D must be an integer, got {self.D!r}")
        if isinstance(self.microbatch, bool) or not isinstance(self.microbatch, (int, np.integer)):
            raise ValueError(f"config.microbatch must be an integer, got {self.microbatch!r}")
        if self.w not in (0, 1) or isinstance(self.w, bool):
            raise ValueError(f"config.w (boundary reuse) must be 0 or 1, got {self.w!r}")
        if self.policy not in DISPATCH_POLICIES:
            raise ValueError(f"config.policy must be one of {', '.join(DISPATCH_POLICIES)}, "
                             f"got {self.policy!r}")
        if self.D == 1:
            if self.w != 0 or self.microbatch != batch or tuple(self.alloc) != (hw.num_sms,):
                raise ValueError("config: D = 1 is the temporal baseline: w = 0, one microbatch of "
                                 f"the whole batch {batch}, all {hw.num_sms} SMs")
            check_cut(self.seg_of, n, edges, 1)
            return
        if not 2 <= self.D <= n - self.w:
            raise ValueError(f"config.D must be in 2..{n - self.w} (|V| - w) or 1 (temporal), "
                             f"got {self.D}")
        check_cut(self.seg_of, n, edges, self.K)
        check_allocation(self.alloc, hw, self.D)
        if isinstance(self.microbatch, bool) or self.microbatch < 1 or batch % self.microbatch:
            raise ValueError(f"config.microbatch={self.microbatch} must divide the per-GPU batch "
                             f"{batch}; allowed: {microbatch_sizes(batch)}")


def temporal_config(n: int, hw: Hardware, batch: int) -> Config:
    """The temporal baseline: D = 1, one segment, the whole GPU, one microbatch of ``batch``."""
    return Config(D=1, w=0, seg_of=(0,) * n, alloc=(hw.num_sms,), microbatch=batch)


def space_size(n: int, edges: Sequence[tuple[int, int]], D: int, budget: int, quantum: int,
               minimum: int) -> dict[str, int]:
    """Design-space counts for one grid point with D stages.

    Returns:
        ``{"cuts_w0": |C_D|, "cuts_w1": |C_{D+1}|, "cut_binding_choices": sum,
        "allocations": |P_H^(D)|, "total": product}``.
    """
    c0 = count_cuts(n, edges, D) if D <= n else 0
    c1 = count_cuts(n, edges, D + 1) if D + 1 <= n else 0
    a = count_allocations(budget, D, quantum, minimum)
    return {"cuts_w0": c0, "cuts_w1": c1, "cut_binding_choices": c0 + c1, "allocations": a,
            "total": (c0 + c1) * a}
