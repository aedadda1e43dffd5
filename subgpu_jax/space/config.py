"""The configuration space F of docs/method.md §2: cuts, boundary reuse and binding, SM allocations,
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

from subgpu_jax.model.checks import choice, divisors, pos_int
from subgpu_jax.model.graph import OpGraph
from subgpu_jax.model.hardware import Hardware
from subgpu_jax.model.workload import Workload

__all__ = [
    "Config", "binding", "enumerate_cuts", "count_cuts", "chain_cut", "cut_from_starts",
    "enumerate_allocations", "count_allocations", "microbatch_sizes", "temporal_config",
    "check_allocation", "space_size", "DISPATCH_POLICIES", "DEFAULT_POLICY", "even_allocation",
    "AllocSpace",
    "check_dispatch_policy", "temporal_of", "workload_config", "config_from_options",
    "check_config",
]

#: Global dispatch-order policies understood by ``taskdag.build_task_dag``.
DISPATCH_POLICIES: tuple[str, ...] = ("wavefront", "layer_major")
#: The default dispatch-order policy (docs/method.md §2): every function, record and flag that
#: takes a policy defaults to it.
DEFAULT_POLICY: str = DISPATCH_POLICIES[0]


def check_dispatch_policy(policy: str) -> str:
    """``policy`` when it is one of ``DISPATCH_POLICIES``.

    Raises:
        ValueError: ``"policy must be one of ..., got ..."``.
    """
    return choice(policy, "policy", DISPATCH_POLICIES)


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
    sizes = divisors(batch)
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
        streams_per_stage: k >= 1 streams per stage (green context): a stage runs up to k tasks
            at once, sharing its SMs (the published prototype used 2). Default 1.
    """

    D: int
    w: int
    seg_of: tuple[int, ...]
    alloc: tuple[int, ...]
    microbatch: int
    policy: str = DEFAULT_POLICY
    streams_per_stage: int = 1

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

    def cut_names(self, g1) -> list[str]:
        """Names of the kernels of ``g1`` (the region graph) where segments 1..K-1 start
        (numbered from 0)."""
        return [g1.kernels[i].name for i in range(1, len(self.seg_of))
                if self.seg_of[i] != self.seg_of[i - 1]]

    def to_record(self, g1, microbatches: int) -> dict:
        """The configuration's fields of a search record (``records.csv``; the one codec with
        ``from_record``): ``D``, ``w``, ``K``, ``microbatches`` (m, given: it needs the batch),
        ``microbatch``, ``policy``, ``streams_per_stage``, ``cuts`` (the kernel names where
        segments 1..K-1 start in ``g1``, numbered from 0, ``"|"``-joined, empty for one segment) and ``sms`` (SMs
        per stage, ``"|"``-joined, e.g. ``"64|64"``)."""
        return {"D": self.D, "w": self.w, "K": self.K, "microbatches": int(microbatches),
                "microbatch": self.microbatch, "policy": self.policy,
                "streams_per_stage": self.streams_per_stage,
                "cuts": "|".join(self.cut_names(g1)),
                "sms": "|".join(str(a) for a in self.alloc)}

    @classmethod
    def from_record(cls, rec, g1) -> "Config":
        """The ``Config`` of a search record (``to_record``'s fields; ``K`` and
        ``microbatches`` are not read) on ``g1``, the chain region graph its cuts name.

        Raises:
            KeyError: a missing field. ValueError: a cut that names no kernel of ``g1``, or
                fields that are not integers.
        """
        names = rec["cuts"].split("|") if rec["cuts"] else []
        seg = chain_cut(g1.n, sorted(g1.index(n) for n in names))
        return cls(D=int(rec["D"]), w=int(rec["w"]), seg_of=seg, alloc=cls.record_alloc(rec),
                   microbatch=int(rec["microbatch"]), policy=rec["policy"],
                   streams_per_stage=int(rec.get("streams_per_stage", 1) or 1))

    @staticmethod
    def record_alloc(rec) -> tuple[int, ...]:
        """SMs per stage of a search record (its ``sms`` field, ``"64|84"``; ``to_record``).

        Raises:
            KeyError: no ``sms``. ValueError: a value that is not an integer.
        """
        return tuple(int(x) for x in str(rec["sms"]).split("|"))

    def check(self, n: int, edges: Sequence[tuple[int, int]], hw: Hardware, batch: int) -> None:
        """Feasibility theta in F (docs/method.md §2). ``batch`` is the per-GPU attention batch R.

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
        k = self.streams_per_stage
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"config.streams_per_stage must be an integer >= 1, got {k!r}")
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


@dataclass(frozen=True)
class AllocSpace:
    """The feasible allocations P_H^(D): D pools, each a multiple of ``quantum`` SMs and
    >= ``minimum``, summing to ``budget``.

    Attributes:
        D: stages (>= 1); budget: SMs to split (> 0); quantum: g (> 0); minimum: p_min (> 0,
        a multiple of ``quantum``).

    Raises:
        ValueError: a nonpositive field, ``budget`` or ``minimum`` not a multiple of ``quantum``,
            or an empty set (D * minimum > budget); the message names the field.
    """

    D: int
    budget: int
    quantum: int
    minimum: int

    def __post_init__(self) -> None:
        for f in ("D", "budget", "quantum", "minimum"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v <= 0:
                raise ValueError(f"allocation space: {f} must be a positive integer, got {v!r}")
            object.__setattr__(self, f, int(v))
        if self.budget % self.quantum:
            raise ValueError(f"allocation space: budget={self.budget} must be a multiple of "
                             f"quantum={self.quantum}")
        if self.minimum % self.quantum:
            raise ValueError(f"allocation space: minimum={self.minimum} must be a multiple of "
                             f"quantum={self.quantum}")
        if self.D * self.minimum > self.budget:
            raise ValueError(f"allocation space is empty: D={self.D} pools of minimum="
                             f"{self.minimum} SMs need {self.D * self.minimum} > budget="
                             f"{self.budget}")

    @classmethod
    def from_hw(cls, hw: Hardware, D: int) -> "AllocSpace":
        """P_H^(D) of ``hw``: budget ``hw.sm_budget``, quantum ``hw.sm_quantum``, minimum
        ``hw.stage_min_sms`` (the green context's minimum, or the runtime's where a GEMM does not
        launch on it: 16 SMs on the H100 and H200, ``Hardware.min_stage_sms``).

        Raises:
            ValueError: as the constructor.
        """
        return cls(D=D, budget=hw.sm_budget, quantum=hw.sm_quantum, minimum=hw.stage_min_sms)

    @property
    def free_quanta(self) -> int:
        """U = (budget - D*minimum) / quantum, the quanta above the minimum to distribute."""
        return (self.budget - self.D * self.minimum) // self.quantum

    @property
    def size(self) -> int:
        """|P_H^(D)| = binomial(U + D - 1, D - 1)."""
        return count_allocations(self.budget, self.D, self.quantum, self.minimum)

    def contains(self, alloc: np.ndarray) -> np.ndarray:
        """Feasibility of allocations (..., D) -> bool (...)."""
        a = np.asarray(alloc)
        ok = (a.shape[-1] == self.D)
        return (ok & np.all(a >= self.minimum, -1) & np.all(a % self.quantum == 0, -1)
                & (a.sum(-1) == self.budget))

    def round(self, x: np.ndarray) -> np.ndarray:
        """Project real allocations onto the space by largest remainder.

        The SMs above the minimum, max(x - minimum, 0), are rescaled to exactly U quanta, floored,
        and the leftover quanta go to the largest fractional parts (ties to the lower stage
        index). An all-minimum input (nothing above the minimum) gives the uniform allocation.

        Args:
            x: (D,) or (B, D) real SM targets (any sum; negative entries count as the minimum).

        Returns:
            int64 array of the shape of ``x``: multiples of ``quantum``, >= ``minimum``, rows
            summing to ``budget``.

        Raises:
            ValueError: last axis not of length D, or a non-finite entry.
        """
        a = np.asarray(x, dtype=float)
        one = a.ndim == 1
        a = np.atleast_2d(a)
        if a.shape[-1] != self.D or a.ndim != 2:
            raise ValueError(f"allocation: last axis must have length D={self.D}, got {a.shape}")
        if not np.all(np.isfinite(a)):
            raise ValueError("allocation: entries must be finite")
        U = self.free_quanta
        free = np.maximum(a - self.minimum, 0.0)
        tot = free.sum(1, keepdims=True)
        share = np.where(tot > 0, free / np.where(tot > 0, tot, 1.0), 1.0 / self.D)
        u = share * U
        fl = np.floor(u + 1e-9).astype(np.int64)
        fl = np.minimum(fl, U)
        rem = U - fl.sum(1)
        frac = u - fl
        order = np.argsort(-frac, axis=1, kind="stable")
        ranks = np.empty_like(order)
        np.put_along_axis(ranks, order, np.arange(self.D)[None].repeat(len(a), 0), axis=1)
        fl = fl + (ranks < rem[:, None]).astype(np.int64)
        # rem can be negative only through the 1e-9 guard on exact integers; fix by removing
        # from the largest
        while np.any(fl.sum(1) > U):
            r = np.flatnonzero(fl.sum(1) > U)
            fl[r, np.argmax(fl[r], 1)] -= 1
        out = self.minimum + self.quantum * fl
        return out[0] if one else out

    def uniform(self) -> np.ndarray:
        """The uniform seed: the free quanta split as evenly as possible (extra quanta to the
        first stages); int64 (D,)."""
        return even_allocation(self.budget, self.D, self.quantum, self.minimum)

    def proportional(self, service: Sequence[float]) -> np.ndarray:
        """The service-proportional seed: SMs proportional to each stage's service demand,
        projected with ``round`` (every stage keeps at least the minimum); int64 (D,).

        Args:
            service: (D,) nonnegative demand of each stage (e.g. its work time in µs).

        Raises:
            ValueError: wrong length, negative or non-finite entries.
        """
        s = np.asarray(service, dtype=float)
        if s.shape != (self.D,) or np.any(~np.isfinite(s)) or np.any(s < 0):
            raise ValueError(f"service must be ({self.D},) finite and >= 0, got {s!r}")
        if s.sum() <= 0:
            return self.uniform()
        return self.round(self.minimum + s / s.sum() * (self.budget - self.D * self.minimum))

    def moves(self, alloc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """All legal one-quantum moves p^{d->r}[1] from ``alloc`` (D,).

        Returns:
            ``(allocs, pairs)``: int64 (M, D) moved allocations and int64 (M, 2) (donor,
            receiver), donors that can give a quantum without dropping below the minimum.
        """
        p = np.asarray(alloc, dtype=np.int64)
        pairs = np.array([(d, r) for d in range(self.D) for r in range(self.D)
                          if d != r and p[d] - self.quantum >= self.minimum],
                         dtype=np.int64).reshape(-1, 2)
        out = np.repeat(p[None], len(pairs), 0)
        out[np.arange(len(pairs)), pairs[:, 0]] -= self.quantum
        out[np.arange(len(pairs)), pairs[:, 1]] += self.quantum
        return out, pairs

    def iter_all(self, chunk: int = 65536) -> Iterator[np.ndarray]:
        """Every allocation of the space in chunks of at most ``chunk`` rows (int64 (c, D)),
        lexicographic in the stars-and-bars positions; memory bounded by ``chunk``."""
        U, D = self.free_quanta, self.D
        if D == 1:
            yield np.array([[self.budget]], dtype=np.int64)
            return
        it = itertools.combinations(range(U + D - 1), D - 1)
        while True:
            bars = np.array(list(itertools.islice(it, chunk)), dtype=np.int64)
            if bars.size == 0:
                return
            c = len(bars)
            ext = np.concatenate([np.full((c, 1), -1), bars, np.full((c, 1), U + D - 1)], 1)
            yield (np.diff(ext, axis=1) - 1) * self.quantum + self.minimum


# ------------------------------------------------------------------ configurations of a workload
def _need_hw(wl: Workload) -> Hardware:
    if wl.hw is None:
        raise ValueError(f"workload {wl.name!r}: hw is None; build it with Workload.from_model("
                         "arch, deploy, hw) or Workload.from_names to name configurations")
    return wl.hw


def temporal_of(wl: Workload) -> Config:
    """The temporal baseline configuration of a workload (D = 1, all SMs, one full-batch
    microbatch).

    Raises:
        ValueError: the workload has no GPU (``wl.hw`` is None).
    """
    return temporal_config(wl.graph(1).n, _need_hw(wl), wl.batch)


def workload_config(wl: Workload, starts: Sequence[int | str], sms: Sequence[int],
                    microbatch: int, reuse: bool, policy: str = DEFAULT_POLICY) -> Config:
    """A validated configuration of a workload from cut points (kernel names or indices where
    segments start), SMs per stage, microbatch size b and boundary reuse.

    Raises:
        ValueError: any infeasibility (names the field: cuts, allocation, D, microbatch, ...).
    """
    hw = _need_hw(wl)
    g = wl.graph(1)
    rng = f"cuts must be distinct kernel positions in 1..{g.n - 1} (or kernel names)"
    for x in starts:  # an index out of range gets the same message as 0 (one range for cuts)
        if isinstance(x, (int, np.integer)) or str(x).strip().lstrip("-").isdigit():
            if not 1 <= int(x) <= g.n - 1:
                raise ValueError(f"{rng}, got {list(starts)}")
    try:
        idx = sorted(g.index(s) for s in starts)
    except ValueError as e:   # an unknown kernel name: name the option it came from
        raise ValueError(f"--cuts: {e}") from None
    if len(set(idx)) != len(idx) or any(i == 0 for i in idx):
        raise ValueError(f"{rng}, got {list(starts)}")
    seg = chain_cut(g.n, idx)
    K = len(idx) + 1
    check_cut(seg, g.n, g.edges, K)
    w = 1 if reuse else 0
    D = K - w
    if len(sms) != D:
        raise ValueError(f"sms: {len(sms)} pools given, the cut has {K} segments and w={w}, "
                         f"so D = {D} stages need {D} pool sizes")
    cfg = Config(D=D, w=w, seg_of=seg, alloc=tuple(int(s) for s in sms),
                 microbatch=int(microbatch), policy=policy)
    cfg.check(g.n, g.edges, hw, wl.batch)
    return cfg


def config_from_options(wl: Workload, cuts: Sequence[int | str] | None,
                        sms: Sequence[int] | None, microbatch: int | None, reuse: bool | None,
                        policy: str = DEFAULT_POLICY) -> Config:
    """A configuration from command-line style options, with the CLI's defaults: the Macro
    cut (``Workload.macro_starts``) with boundary reuse when ``cuts`` is None (explicit cuts
    default to no reuse), an even SM split (``even_allocation``), and two microbatches.

    Raises:
        ValueError: reuse with fewer than 2 cuts, cuts not in region order (the SMs follow the
            stages in that order), or any infeasibility of ``workload_config`` (a given SM
            split out of range names ``--sms``).
    """
    hw = _need_hw(wl)
    starts = list(cuts) if cuts else wl.macro_starts()
    if cuts:
        g = wl.graph(1)
        try:
            idx = [g.index(s) for s in starts]
        except (ValueError, KeyError, IndexError, TypeError):
            idx = None                    # unknown names: workload_config names the problem
        if idx is not None and any(a >= b for a, b in zip(idx, idx[1:])) \
                and len(set(idx)) == len(idx):
            order = ",".join(g.kernels[i].name for i in sorted(idx))
            raise ValueError(f"cuts must be given in region order (the SMs follow the stages in "
                             f"that order): --cuts {order}, got {','.join(map(str, starts))}")
    if reuse is None:
        reuse = not cuts
    K = len(starts) + 1
    if reuse and K < 3:
        raise ValueError("cuts: --reuse (w = 1) needs at least 2 cuts (3 segments, the last "
                         "sharing stage 0 with the first); give another cut or --no-reuse")
    D = K - (1 if reuse else 0)
    alloc = list(sms) if sms else even_allocation(hw.sm_budget, D, hw.sm_quantum,
                                                  hw.even_split_min_sms(D)).tolist()
    b = microbatch if microbatch is not None else max(1, wl.batch // 2)
    try:
        return workload_config(wl, starts, alloc, b, reuse, policy)
    except ValueError as e:  # a split given out of range names its flag (--sms)
        if not sms or not str(e).startswith("allocation: "):
            raise
        raise ValueError(f"--sms {','.join(map(str, sms))}: "
                         f"{str(e)[len('allocation: '):]}") from None


def check_config(graph: OpGraph, cfg: Config, hw: Hardware) -> None:
    """Validate ``cfg`` against ``graph`` and ``hw`` for simulation.

    With a deployment on the graph the full feasibility check of ``Config.check`` applies and the
    graph's microbatch count must equal R / cfg.microbatch; for synthetic graphs the cut must be
    legal, the allocation must have D positive integer entries summing to at most ``num_sms``.

    Raises:
        ValueError: one line naming the offending field.
    """
    if not isinstance(cfg, Config):
        raise ValueError(f"config must be a space.Config, got {type(cfg).__name__}")
    if not isinstance(graph, OpGraph):
        raise ValueError(f"graph must be an OpGraph, got {type(graph).__name__}")
    if not isinstance(hw, Hardware):
        raise ValueError(f"hw must be a Hardware, got {type(hw).__name__}")
    if isinstance(cfg.D, bool) or not isinstance(cfg.D, (int, np.integer)) or cfg.D < 1:
        raise ValueError(f"config.D must be an integer >= 1, got {cfg.D!r}")
    if cfg.w not in (0, 1):
        raise ValueError(f"config.w must be 0 or 1, got {cfg.w!r}")
    pos_int(cfg.streams_per_stage, "config.streams_per_stage")
    if len(cfg.alloc) != cfg.D:
        raise ValueError(f"config.alloc has {len(cfg.alloc)} entries, D = {cfg.D} needs {cfg.D}")
    for d, p in enumerate(cfg.alloc):
        if isinstance(p, bool) or not isinstance(p, (int, np.integer)) or p < 1:
            raise ValueError(f"config.alloc[{d}] must be an integer >= 1 SMs, got {p!r}")
    if sum(cfg.alloc) > hw.num_sms:
        raise ValueError(f"config.alloc sums to {sum(cfg.alloc)} SMs, {hw.name} has "
                         f"{hw.num_sms}")
    if graph.deployment is not None:
        R = graph.deployment.requests_per_gpu
        cfg.check(graph.n, graph.edges, hw, R)
        if R // cfg.microbatch != graph.microbatches:
            raise ValueError(f"config.microbatch={cfg.microbatch} gives m = {R // cfg.microbatch}"
                             f" microbatches, the graph was built for {graph.microbatches}")
    else:
        check_cut(cfg.seg_of, graph.n, graph.edges, cfg.K)
