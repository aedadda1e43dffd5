"""The search layer of DESIGN §4: Algorithm 1 (simulation-guided search), Algorithm 2
(pairwise-line refinement), the optax relaxation of the allocation, exhaustive search for small
instances, and Pareto records.

Two scorers are used, as in the design:

* the **cheap estimator** f^: the vectorised evaluator (``evaluator.Evaluator``), which scores a
  whole batch of integer allocations (B, D) in one vmapped call and, through ``Evaluator.smooth``,
  gives a differentiable makespan for the relaxation;
* the **exact scorer** f: any callable ``exact(config: space.Config) -> makespan (µs)``, so the
  event simulator can be plugged in. It defaults to ``EvaluatorExact`` (the evaluator's hard
  makespan of the configuration, a thin adapter), and is always wrapped in ``MemoScorer``, which
  memoises calls by ``Config`` and counts the distinct ones.

Vocabulary (DESIGN §2): a cut ``seg_of`` gives each kernel of the region its segment; D stages;
w = 1 is boundary reuse (K = D + 1 segments, the last sharing stage 0 with the first of the next
region); an allocation ``alloc`` (D,) gives each stage its SMs (multiples of ``hw.sm_quantum``,
each >= ``hw.min_pool_sms``, summing to ``hw.sm_budget``); m microbatches of b = R / m requests.

Conventions: times in µs, SM counts ints, allocations int arrays (D,) or batches (B, D). Hosts
validate inputs and raise one-line ``ValueError``s naming the field; nothing raises inside jit.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, Iterator, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from . import evaluator as _evmod
from .evaluator import Evaluator
from .graph import Kernel, OpGraph, StaticDurationModel, build_graph
from .hardware import Hardware, get_hardware
from .pareto import (frontier_curve, pareto_front, pareto_mask, per_gpu_gain_at_matched_user,
                     per_user_gain_at_matched_gpu, throughputs)
from .space import (DISPATCH_POLICIES, Config, binding, chain_cut, check_cut, count_allocations,
                    even_allocation,
                    enumerate_cuts)

__all__ = [
    # features and partition proposal
    "FEATURE_NAMES", "kernel_features", "partition_cost", "CutCandidate", "Proposal",
    "propose_partition",
    # allocation space, seeds, rounding, Algorithm 2
    "AllocSpace", "LineResult", "pairwise_line",
    # problems and scorers
    "Workload", "Problem", "EvaluatorExact", "MemoScorer",
    # Algorithm 1
    "AllocResult", "allocate_pairwise", "choose_cut", "rank_cuts", "cut_neighbours", "refine_cut",
    "CUT_STRATEGIES", "screen_cuts", "Record", "SearchResult", "algorithm1", "pareto_records",
    # relaxation
    "RelaxResult", "relax_allocation", "relax_and_polish", "ANNEAL_TRACES",
    # exhaustive
    "ExhaustiveResult", "exhaustive_allocations", "exhaustive_search",
    # synthetic instances
    "coarse_hardware", "synthetic_workload",
    # re-exported from pareto
    "throughputs", "pareto_mask", "pareto_front", "frontier_curve",
    "per_user_gain_at_matched_gpu", "per_gpu_gain_at_matched_user",
]


def _check_policy(policy: str) -> str:
    if policy not in DISPATCH_POLICIES:
        raise ValueError(f"policy must be one of {', '.join(DISPATCH_POLICIES)}, got {policy!r}")
    return policy


def _pos_int(v: Any, name: str, minimum: int = 1) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {v!r}")
    return int(v)


# ===================================================================================== features
#: Columns of ``kernel_features``.
FEATURE_NAMES: tuple[str, ...] = (
    "compute_frac", "memory_frac", "comm_frac", "launch_frac", "weight_byte_frac", "kv_byte_frac",
)


def _time_components(k: Kernel, hw: Hardware, sms: float) -> tuple[float, float, float, float]:
    """(compute, memory, communication, launch) times in µs of kernel ``k`` alone on ``sms`` SMs,
    with exactly the terms of ``graph.StaticDurationModel`` (its total is launch + max of the
    other three)."""
    p = float(min(sms, k.ctas))
    rate = hw.flops_rate(k.dtype) if k.tensor else hw.tensor_flops["bf16"] / 16.0
    t_comp = k.flops / (rate * p / hw.num_sms) * 1e6
    hb = k.hbm_bytes
    t_mem = (hb / float(hw.mem_bandwidth(p, read_only=k.act_bytes < 0.5 * hb)) * 1e6) if hb else 0.0
    t_comm = (hw.comm_setup_us + k.comm_bytes / hw.nvlink_Bps * 1e6) if k.is_comm else 0.0
    return t_comp, t_mem, t_comm, hw.launch_us


def kernel_features(graph: OpGraph, hw: Hardware, pool_sms: int | None = None
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Kernel features phi (DESIGN §4 step 2): each kernel's expected compute, memory, cache and
    communication behaviour on a pool of ``pool_sms`` SMs.

    Features (columns, ``FEATURE_NAMES``), each in [0, 1]:

    * ``compute_frac``, ``memory_frac``, ``comm_frac``, ``launch_frac``: the compute, HBM,
      NVLink and launch terms of the static duration model, each divided by their sum, i.e. how
      much of the kernel's isolated time is compute-bound, memory-bound, communication or launch
      overhead;
    * ``weight_byte_frac``: share of its bytes that are weights (the cache-reusable part: reused
      across microbatches when resident in L2);
    * ``kv_byte_frac``: share of its bytes that stream the KV cache (never cached).

    Args:
        graph: the region graph (n kernels).
        hw: the GPU.
        pool_sms: SMs the kernel is assumed to run on (default ``hw.sm_budget // 2``, a typical
            stage of a two-stage pipeline).

    Returns:
        ``(phi, weight)``: phi float (n, 6); weight float (n,), each kernel's isolated time (µs)
        on ``pool_sms`` SMs under ``StaticDurationModel``, used to weight the partition objective.

    Raises:
        ValueError: ``pool_sms`` < 1.
    """
    ps = hw.sm_budget // 2 if pool_sms is None else _pos_int(pool_sms, "pool_sms")
    model = StaticDurationModel(hw)
    phi = np.zeros((graph.n, len(FEATURE_NAMES)))
    wt = np.zeros(graph.n)
    for i, k in enumerate(graph.kernels):
        comps = np.array(_time_components(k, hw, ps))
        phi[i, :4] = comps / comps.sum()
        hb = k.hbm_bytes
        if hb > 0:
            phi[i, 4] = k.weight_bytes / hb
            phi[i, 5] = k.kv_bytes / hb
        wt[i] = float(model.kernel_time_us(k, ps))
    return phi, wt


# ============================================================================ partition proposal
def partition_cost(phi: np.ndarray, weight: np.ndarray, groups: Sequence[int]) -> float:
    """Within-group feature dispersion: sum over groups G of sum_{i in G} w_i ||phi_i - mean_G||^2
    (weighted mean). Groups are stages, so with boundary reuse the first and last segment form one
    group.

    Args:
        phi: (n, F) features; weight: (n,) nonnegative kernel weights; groups: (n,) group ids.

    Returns:
        The dispersion (dimensionless x weight units); 0 when every group is homogeneous.
    """
    phi, weight, g = np.asarray(phi, float), np.asarray(weight, float), np.asarray(groups)
    tot = 0.0
    for gid in np.unique(g):
        sel = g == gid
        w = weight[sel]
        sw = w.sum()
        if sw <= 0:
            continue
        mu = (w[:, None] * phi[sel]).sum(0) / sw
        tot += float((w * ((phi[sel] - mu) ** 2).sum(1)).sum())
    return tot


@dataclass(frozen=True)
class CutCandidate:
    """One proposed (cut, boundary reuse) layout.

    Attributes:
        seg_of: the cut (segment of each kernel), K = D + w segments.
        w: boundary reuse (0 or 1).
        feature_cost: ``partition_cost`` of its stage groups.
        origin: ``"anchored"`` (the DP partition anchored at the region start), ``"anchor@a"``
            (the DP partition anchored at kernel a of the circular region), ``"rotation+s"`` (the
            anchored partition rotated by s kernels) or ``"enumerated"`` (general DAG).
    """

    seg_of: tuple[int, ...]
    w: int
    feature_cost: float
    origin: str


@dataclass(frozen=True)
class Proposal:
    """The result of ``propose_partition``.

    Attributes:
        anchored: the anchored w = 0 cut minimising the feature objective.
        rotations: the legal circular rotations and alternative anchors (distinct layouts, w = 0
            or 1), ordered by feature cost.
    """

    anchored: CutCandidate
    rotations: tuple[CutCandidate, ...]

    @property
    def candidates(self) -> tuple[CutCandidate, ...]:
        """``anchored`` followed by ``rotations``."""
        return (self.anchored,) + self.rotations


def _circle_layout(n: int, bounds: Sequence[int]) -> tuple[tuple[int, ...], int]:
    """(seg_of, w) of a circular partition with group starts ``bounds`` (positions 0..n-1)."""
    b = sorted(set(int(x) % n for x in bounds))
    if 0 in b:
        return chain_cut(n, b[1:]), 0
    return chain_cut(n, b), 1


def _groups_of(seg_of: Sequence[int], w: int) -> np.ndarray:
    K = max(seg_of) + 1
    g = np.asarray(seg_of)
    return np.where((w == 1) & (g == K - 1), 0, g)


def _circular_dp(phi: np.ndarray, wt: np.ndarray, D: int, anchor: int) -> tuple[float, list[int]]:
    """Optimal partition of the circular sequence starting at ``anchor`` into D contiguous groups
    (the first starting at ``anchor``), minimising the weighted within-group dispersion.

    Returns (cost, group start positions on the circle)."""
    n = phi.shape[0]
    order = (np.arange(n) + anchor) % n
    ph, w = phi[order], wt[order]
    S0 = np.concatenate([[0.0], np.cumsum(w)])
    S1 = np.concatenate([np.zeros((1, ph.shape[1])), np.cumsum(w[:, None] * ph, axis=0)])
    S2 = np.concatenate([[0.0], np.cumsum(w * (ph ** 2).sum(1))])

    def cost(i: np.ndarray, j: int) -> np.ndarray:  # groups [i, j) for a vector of i
        sw = S0[j] - S0[i]
        s1 = S1[j] - S1[i]
        with np.errstate(divide="ignore", invalid="ignore"):
            c = (S2[j] - S2[i]) - np.where(sw > 0, (s1 ** 2).sum(-1) / np.where(sw > 0, sw, 1), 0)
        return np.maximum(c, 0.0)

    INF = np.inf
    best = np.full((D + 1, n + 1), INF)
    arg = np.zeros((D + 1, n + 1), dtype=np.int64)
    best[0, 0] = 0.0
    for k in range(1, D + 1):
        for j in range(k, n - (D - k) + 1):
            i = np.arange(k - 1, j)
            v = best[k - 1, i] + cost(i, j)
            t = int(np.argmin(v))
            best[k, j], arg[k, j] = v[t], i[t]
    starts, j = [], n
    for k in range(D, 0, -1):
        i = int(arg[k, j])
        starts.append(i)
        j = i
    return float(best[D, n]), sorted(int(order[s]) for s in starts)


def propose_partition(graph: OpGraph, D: int, phi: np.ndarray | None = None,
                      weight: np.ndarray | None = None, hw: Hardware | None = None,
                      enum_limit: int = 200_000) -> Proposal:
    """Algorithm 1 step 3: propose a cut by dynamic programming over anchored,
    dependency-respecting contiguous partitions that minimise the within-segment feature
    dispersion (``partition_cost``), plus its legal circular rotations.

    Chain graphs (``graph.is_chain()``): the region's kernels form a circle (the last kernel of
    one region instance feeds the first of the next). For every anchor a, a DP over contiguous
    partitions of the circle into D groups, the first starting at a, returns the best
    partition; a = 0 gives the anchored w = 0 cut. A partition whose groups do not start at
    kernel 0 wraps around the region boundary: its wrapping group is split into the first and
    the last segment, which share stage 0, i.e. the boundary-reuse layout (w = 1, K = D + 1).
    The rotations of the anchored partition (all group starts shifted by s) are added too.
    Contiguous segments in launch order are always legal cuts.

    General DAGs: the same objective minimised over the legal cuts ``space.enumerate_cuts`` of
    C_D (anchored, w = 0) and C_{D+1} (w = 1, first and last segment one group), when there are
    at most ``enum_limit`` of them; otherwise the contiguous (launch-order) DP above.

    The feature objective only proposes layouts; Algorithm 1 ranks them by the cheap estimator.

    Args:
        graph: region graph (n kernels); D: stages, 1 <= D <= n.
        phi, weight: ``kernel_features`` output; computed with ``hw`` (pool = budget / D) when
            omitted.
        hw: the GPU; required when ``phi`` is omitted.
        enum_limit: largest number of legal cuts enumerated for a general DAG.

    Returns:
        A ``Proposal``: the anchored cut and up to 2n distinct rotations / alternative anchors.

    Raises:
        ValueError: D outside 1..n, or neither ``phi`` nor ``hw`` given.
    """
    n = graph.n
    D = _pos_int(D, "D")
    if D > n:
        raise ValueError(f"D must be in 1..{n} (the region has {n} kernels), got {D}")
    if phi is None:
        if hw is None:
            raise ValueError("propose_partition: give phi/weight or hw")
        phi, weight = kernel_features(graph, hw, pool_sms=max(1, hw.sm_budget // D))
    phi = np.asarray(phi, float)
    weight = np.ones(n) if weight is None else np.asarray(weight, float)
    seen: dict[tuple[tuple[int, ...], int], CutCandidate] = {}

    def add(seg: tuple[int, ...], w: int, origin: str) -> None:
        if (seg, w) in seen or D + w > n:
            return
        check_cut(seg, n, graph.edges, D + w)  # contiguous launch-order cuts are always legal
        seen[(seg, w)] = CutCandidate(seg, w, partition_cost(phi, weight, _groups_of(seg, w)),
                                      origin)

    if graph.is_chain() or sum(1 for _ in itertools.islice(
            itertools.chain(enumerate_cuts(n, graph.edges, D),
                            enumerate_cuts(n, graph.edges, D + 1) if D + 1 <= n else ()),
            enum_limit + 1)) > enum_limit:
        _, b0 = _circular_dp(phi, weight, D, 0)
        anchored_seg, _ = _circle_layout(n, b0)
        anchored = CutCandidate(anchored_seg, 0, partition_cost(phi, weight, anchored_seg),
                                "anchored")
        seen[(anchored_seg, 0)] = anchored
        if D >= 2:
            for a in range(1, n):
                _, b = _circular_dp(phi, weight, D, a)
                add(*_circle_layout(n, b), origin=f"anchor@{a}")
            for s in range(1, n):
                add(*_circle_layout(n, [(x + s) % n for x in b0]), origin=f"rotation+{s}")
    else:
        c0 = list(enumerate_cuts(n, graph.edges, D))
        costs0 = [partition_cost(phi, weight, c) for c in c0]
        j = int(np.argmin(costs0))
        anchored = CutCandidate(tuple(c0[j]), 0, costs0[j], "anchored")
        seen[(anchored.seg_of, 0)] = anchored
        if D >= 2 and D + 1 <= n:
            c1 = list(enumerate_cuts(n, graph.edges, D + 1))
            costs1 = [partition_cost(phi, weight, _groups_of(c, 1)) for c in c1]
            for t in np.argsort(costs1, kind="stable")[: 2 * n]:
                seen[(tuple(c1[t]), 1)] = CutCandidate(tuple(c1[t]), 1, costs1[t], "enumerated")
            for t in np.argsort(costs0, kind="stable")[1: n]:
                seen.setdefault((tuple(c0[t]), 0),
                                CutCandidate(tuple(c0[t]), 0, costs0[t], "enumerated"))
    rots = sorted((c for k, c in seen.items() if k != (anchored.seg_of, 0)),
                  key=lambda c: (c.feature_cost, c.w, c.seg_of))
    return Proposal(anchored, tuple(rots))


# ============================================================================= allocation space
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
        ``hw.min_pool_sms``.

        Raises:
            ValueError: as the constructor.
        """
        return cls(D=D, budget=hw.sm_budget, quantum=hw.sm_quantum, minimum=hw.min_pool_sms)

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


# ================================================================================ Algorithm 2
@dataclass(frozen=True)
class LineResult:
    """Result of ``pairwise_line``.

    Attributes:
        alloc: int64 (D,) final allocation; value: its objective (µs).
        start_value: objective of the start.
        passes: passes that applied a move; evals: objective rows requested (batch rows count
            one each; with a memoised scorer repeated rows are free).
        history: ((donor, receiver, quanta, value), ...) of the applied moves.
    """

    alloc: np.ndarray
    value: float
    start_value: float
    passes: int
    evals: int
    history: tuple[tuple[int, int, int, float], ...] = ()


def pairwise_line(f: Callable[[np.ndarray], np.ndarray], p0: Sequence[int], space: AllocSpace,
                  max_passes: int | None = None, batch_line: bool = False,
                  rtol: float = 1e-6) -> LineResult:
    """Algorithm 2: pairwise-line refinement of an allocation.

    Each pass scores every legal one-quantum move p^{d->r}[1] in ONE call ``f(moves)``, picks
    the best, and stops if it does not improve f (by more than ``rtol`` relative). Otherwise it
    line-searches along that (donor d, receiver r) direction: starting from z = 1 quantum it
    doubles z while f improves; at the first failure (or the donor's limit) it halves the step,
    trying z + step and keeping it when it improves, until the step is below one quantum; the
    move of z quanta in total is applied and the next pass starts.

    Args:
        f: objective, int (B, D) allocations -> (B,) values (µs), lower is better.
        p0: start allocation (D,), feasible.
        space: the allocation space.
        max_passes: pass limit L (None = until no move improves).
        batch_line: score every point of the line (z = 2..z_max) in one extra call and replay the
            doubling/halving on those values (same decisions; use with a vectorised estimator).
            False scores the line points one by one (use with a memoised exact scorer).
        rtol: relative improvement needed to accept a move.

    Returns:
        ``LineResult``; never worse than the start and always in ``space``.

    Raises:
        ValueError: ``p0`` infeasible, ``max_passes`` < 0, or ``f`` returning the wrong shape.
    """
    p = np.asarray(p0, dtype=np.int64).copy()
    if p.shape != (space.D,) or not space.contains(p):
        raise ValueError(f"p0 must be a feasible allocation of {space}, got {p.tolist()}")
    if max_passes is not None and (isinstance(max_passes, bool) or max_passes < 0):
        raise ValueError(f"max_passes must be None or >= 0, got {max_passes!r}")
    evals = 0

    def F(a: np.ndarray) -> np.ndarray:
        nonlocal evals
        a = np.atleast_2d(a)
        v = np.asarray(f(a), dtype=float).reshape(-1)
        if v.shape != (a.shape[0],):
            raise ValueError(f"objective returned shape {v.shape} for {a.shape[0]} allocations")
        evals += a.shape[0]
        return v

    fp = float(F(p)[0])
    start = fp
    passes = 0
    hist = []
    g = space.quantum

    def better(v: float, ref: float) -> bool:
        return v < ref - rtol * abs(ref)

    while max_passes is None or passes < max_passes:
        cand, pairs = space.moves(p)
        if len(cand) == 0:
            break
        vals = F(cand)
        j = int(np.argmin(vals))
        if not better(float(vals[j]), fp):
            break
        d, r = int(pairs[j, 0]), int(pairs[j, 1])
        zmax = (int(p[d]) - space.minimum) // g
        direction = np.zeros(space.D, dtype=np.int64)
        direction[d], direction[r] = -g, g
        table: dict[int, float] = {1: float(vals[j])}
        if batch_line and zmax >= 2:
            zs = np.arange(2, zmax + 1)
            table.update(zip(zs.tolist(), F(p[None] + zs[:, None] * direction[None]).tolist()))

        def val(z: int) -> float:
            if z not in table:
                table[z] = float(F(p + z * direction)[0])
            return table[z]

        z, fz = 1, table[1]
        hi = zmax + 1
        while 2 * z <= zmax:  # doubling
            v = val(2 * z)
            if better(v, fz):
                z, fz = 2 * z, v
            else:
                hi = 2 * z
                break
        step = (hi - z) // 2
        while step >= 1:  # halving
            if z + step <= zmax:
                v = val(z + step)
                if better(v, fz):
                    z, fz = z + step, v
            step //= 2
        p = p + z * direction
        fp = fz
        passes += 1
        hist.append((d, r, z, fz))
    return LineResult(alloc=p, value=fp, start_value=start, passes=passes, evals=evals,
                      history=tuple(hist))


# ======================================================================= workloads and scorers
class Workload:
    """The region graphs of one model/deployment (or a synthetic region) for each microbatch
    count m, with the batch accounting needed to name configurations and throughputs.

    Args:
        graph_fn: m -> ``OpGraph`` built for m microbatches (called once per m, cached).
        batch: R, the per-GPU attention batch (requests); m must divide it; the microbatch size
            in a ``Config`` is b = R / m.
        tokens_per_gpu: G / n, tokens per step per GPU (per-GPU throughput numerator).
        name: label for reports.

    Raises:
        ValueError: ``batch`` < 1 or ``tokens_per_gpu`` <= 0.
    """

    def __init__(self, graph_fn: Callable[[int], OpGraph], batch: int, tokens_per_gpu: float,
                 name: str = "") -> None:
        self.batch = _pos_int(batch, "batch")
        if not np.isfinite(tokens_per_gpu) or tokens_per_gpu <= 0:
            raise ValueError(f"tokens_per_gpu must be > 0, got {tokens_per_gpu!r}")
        self.tokens_per_gpu = float(tokens_per_gpu)
        self._fn = graph_fn
        self._graphs: dict[int, OpGraph] = {}
        self.name = name

    @classmethod
    def from_model(cls, arch, deploy) -> "Workload":
        """Graphs from ``graph.build_graph(arch, deploy, m)``; R = deploy.requests_per_gpu,
        tokens per GPU = G / n."""
        deploy.validate(arch)
        return cls(lambda m: build_graph(arch, deploy, m), deploy.requests_per_gpu,
                   deploy.tokens_per_gpu, name=f"{arch.name}")

    def graph(self, m: int) -> OpGraph:
        """The region graph for m microbatches (cached).

        Raises:
            ValueError: m < 1 or not dividing ``batch``.
        """
        m = _pos_int(m, "microbatches")
        if self.batch % m:
            raise ValueError(f"microbatches={m} must divide the per-GPU batch {self.batch}")
        if m not in self._graphs:
            self._graphs[m] = self._fn(m)
        return self._graphs[m]

    def microbatch_size(self, m: int) -> int:
        """b = R / m."""
        return self.batch // m

    def m_of(self, cfg: Config) -> int:
        """m = R / b of a configuration."""
        return self.batch // cfg.microbatch


class Problem:
    """A workload on one GPU: caches duration tables and evaluators, names configurations.

    Args:
        workload: the graphs per microbatch count.
        hw: the GPU.
        duration_model: object with ``table(graph) -> (n, N+1)`` µs (default
            ``StaticDurationModel(hw)``).
    """

    def __init__(self, workload: Workload, hw: Hardware, duration_model=None) -> None:
        self.workload, self.hw = workload, hw
        self.model = duration_model or StaticDurationModel(hw)
        self._tables: dict[int, np.ndarray] = {}
        self._evs: dict[tuple, Evaluator] = {}

    def space(self, D: int) -> AllocSpace:
        """``AllocSpace.from_hw(hw, D)``.

        Raises:
            ValueError: the space is empty (names budget/minimum) or D < 1.
        """
        return AllocSpace.from_hw(self.hw, D)

    def table(self, m: int) -> np.ndarray:
        """Kernel duration table (n, N_SM+1) µs for m microbatches (cached)."""
        if m not in self._tables:
            self._tables[m] = np.asarray(self.model.table(self.workload.graph(m)))
        return self._tables[m]

    def evaluator(self, seg_of: Sequence[int], D: int, w: int, m: int,
                  policy: str = "wavefront") -> Evaluator:
        """The cheap estimator of one (cut, D, w, m, policy), cached.

        Raises:
            ValueError: unknown policy, illegal cut/D/w, m not dividing the batch.
        """
        _check_policy(policy)
        key = (tuple(int(s) for s in seg_of), int(D), int(w), int(m), policy)
        if key not in self._evs:
            self._evs[key] = Evaluator(self.workload.graph(m), key[0], D, w, self.hw,
                                       policy=policy, table=self.table(m))
        return self._evs[key]

    def config(self, seg_of: Sequence[int], D: int, w: int, alloc: Sequence[int], m: int,
               policy: str = "wavefront") -> Config:
        """The ``Config`` of these choices (microbatch size b = R / m)."""
        return Config(D=int(D), w=int(w), seg_of=tuple(int(s) for s in seg_of),
                      alloc=tuple(int(a) for a in alloc),
                      microbatch=self.workload.microbatch_size(m), policy=policy)

    def exact_batch(self, exact: Callable[[Config], float], seg_of: Sequence[int], D: int, w: int,
                    m: int, policy: str = "wavefront") -> Callable[[np.ndarray], np.ndarray]:
        """Wrap ``exact`` into an objective over allocation batches (B, D) -> (B,) µs, one
        scorer call per row (memoise ``exact`` with ``MemoScorer``)."""
        def f(allocs: np.ndarray) -> np.ndarray:
            return np.array([float(exact(self.config(seg_of, D, w, a, m, policy)))
                             for a in np.atleast_2d(allocs)])
        return f

    def temporal(self) -> float:
        """Temporal baseline makespan (µs): D = 1, one full-batch microbatch, all SMs."""
        return _evmod.temporal_makespan(self.workload.graph(1), self.hw, table=self.table(1))


class EvaluatorExact:
    """Default exact scorer: the vectorised evaluator's hard makespan of a ``Config`` (µs).

    Args:
        problem: supplies graphs and cached evaluators.

    Call: ``exact(cfg) -> float`` µs. Raises ValueError for an infeasible ``cfg`` (as
    ``Config.check``).
    """

    def __init__(self, problem: Problem) -> None:
        self.problem = problem

    def __call__(self, cfg: Config) -> float:
        pb = self.problem
        m = pb.workload.m_of(cfg)
        g = pb.workload.graph(m)
        cfg.check(g.n, g.edges, pb.hw, pb.workload.batch)
        ev = pb.evaluator(cfg.seg_of, cfg.D, cfg.w, m, cfg.policy)
        return float(ev.makespan(np.asarray([cfg.alloc]))[0])


class MemoScorer:
    """Memoises an exact scorer by ``Config`` and counts its distinct calls.

    Args:
        fn: ``Config -> makespan (µs)``.

    Attributes:
        calls: distinct configurations scored (calls that reached ``fn``).
        requests: all lookups, hits included.
        cache: ``{Config: makespan}``.
        seconds: wall time spent inside ``fn``.
    """

    def __init__(self, fn: Callable[[Config], float]) -> None:
        self.fn = fn
        self.cache: dict[Config, float] = {}
        self.calls = 0
        self.requests = 0
        self.seconds = 0.0

    def __call__(self, cfg: Config) -> float:
        self.requests += 1
        if cfg not in self.cache:
            t0 = time.perf_counter()
            v = float(self.fn(cfg))
            self.seconds += time.perf_counter() - t0
            if not np.isfinite(v) or v <= 0:
                raise ValueError(f"exact scorer returned {v!r} for {cfg}; makespans must be "
                                 "finite and > 0 µs")
            self.cache[cfg] = v
            self.calls += 1
        return self.cache[cfg]


def _memo(problem: Problem, exact: Callable[[Config], float] | None) -> MemoScorer:
    if exact is None:
        return MemoScorer(EvaluatorExact(problem))
    return exact if isinstance(exact, MemoScorer) else MemoScorer(exact)


# ================================================================================ Algorithm 1
@dataclass(frozen=True)
class AllocResult:
    """An allocation search on one (cut, D, w, m, policy).

    Attributes:
        alloc: int64 (D,) best allocation; makespan_us: its exact makespan (µs).
        exact_calls: distinct exact-scorer calls this search made (memo misses).
        cheap_evals: allocations scored by the cheap estimator.
        seeds: {name: (seed alloc, exact makespan of the polished result)}.
        seconds: wall time.
    """

    alloc: np.ndarray
    makespan_us: float
    exact_calls: int
    cheap_evals: int
    seeds: Mapping[str, Any] = field(default_factory=dict)
    seconds: float = 0.0


def _seeds(ev: Evaluator, space: AllocSpace) -> dict[str, np.ndarray]:
    """Uniform and service-proportional seeds. A stage's service is the time its segments take
    on the whole budget (µs), i.e. proportional to its work."""
    st = np.asarray(ev.seg_stage)[: ev.K]
    service = np.zeros(space.D)
    for k in range(ev.K):
        service[st[k]] += ev.seg_table_np[k, min(space.budget, ev.seg_table_np.shape[1] - 1)]
    return {"uniform": space.uniform(), "proportional": space.proportional(service)}


def allocate_pairwise(problem: Problem, seg_of: Sequence[int], D: int, w: int, m: int,
                      policy: str = "wavefront", exact: Callable[[Config], float] | None = None,
                      L_est: int | None = None, L_sim: int | None = 2) -> AllocResult:
    """Algorithm 1 steps 4-5 for one structure: seeds, cheap refinement, exact polish.

    For each seed p0 (uniform, service-proportional): refine with the cheap estimator by
    ``pairwise_line`` (pass limit ``L_est``, all moves of a pass in one vmapped call, the line
    scored in one more), then polish both p0 and the refined one with the exact scorer (pass limit
    ``L_sim``); keep the best; polish it once more (``L_sim``).

    Args:
        problem: workload and GPU; seg_of, D, w, m, policy: the structure.
        exact: exact scorer ``Config -> µs`` (default ``EvaluatorExact``), memoised.
        L_est: pass limit of the cheap refinement (None = unlimited).
        L_sim: pass limit of each exact polish (None = unlimited).

    Returns:
        ``AllocResult`` (exact calls counted as new memo entries).

    Raises:
        ValueError: unknown policy, empty allocation space, illegal structure.
    """
    t0 = time.perf_counter()
    memo = _memo(problem, exact)
    calls0 = memo.calls
    space = problem.space(D)
    ev = problem.evaluator(seg_of, D, w, m, policy)
    f_exact = problem.exact_batch(memo, seg_of, D, w, m, policy)
    cheap = 0
    best, best_v, seeds = None, np.inf, {}
    for name, p0 in _seeds(ev, space).items():
        ref = pairwise_line(ev.makespan, p0, space, L_est, batch_line=True)
        cheap += ref.evals
        local = None
        for q in (p0, ref.alloc):
            pol = pairwise_line(f_exact, q, space, L_sim)
            if local is None or pol.value < local.value:
                local = pol
        seeds[name] = (p0.tolist(), local.value)
        if local.value < best_v:
            best, best_v = local.alloc, local.value
    final = pairwise_line(f_exact, best, space, L_sim)
    return AllocResult(alloc=final.alloc, makespan_us=final.value,
                       exact_calls=memo.calls - calls0, cheap_evals=cheap, seeds=seeds,
                       seconds=time.perf_counter() - t0)


@dataclass(frozen=True)
class Record:
    """One record (x, c, w, p*, f(p*)) of Algorithm 1.

    Attributes:
        m: microbatches; D: stages; policy: dispatch order (with the workload, the grid point x).
        microbatch: b = R / m requests.
        seg_of, w: the chosen cut and boundary reuse; origin: how the cut was proposed.
        alloc: p*, SMs per stage (tuple of ints).
        makespan_us: f(p*), the exact makespan (µs).
        per_user, per_gpu: throughputs (tokens/s/user, tokens/s/GPU).
        exact_calls: distinct exact-scorer calls at this grid point.
        cheap_evals: allocations scored by the cheap estimator at this grid point.
        seconds: wall time of the grid point.
    """

    m: int
    D: int
    policy: str
    microbatch: int
    seg_of: tuple[int, ...]
    w: int
    origin: str
    alloc: tuple[int, ...]
    makespan_us: float
    per_user: float
    per_gpu: float
    exact_calls: int
    cheap_evals: int
    seconds: float

    def config(self) -> Config:
        """The record's ``Config``."""
        return Config(D=self.D, w=self.w, seg_of=self.seg_of, alloc=self.alloc,
                      microbatch=self.microbatch, policy=self.policy)

    def as_dict(self) -> dict:
        """JSON-friendly dict."""
        d = dataclasses.asdict(self)
        d["seg_of"], d["alloc"] = list(self.seg_of), list(self.alloc)
        return d


@dataclass(frozen=True)
class SearchResult:
    """Output of ``algorithm1``.

    Attributes:
        records: one per feasible grid point (plus the temporal baseline when asked).
        front: the Pareto-nondominated records (per-user vs per-GPU throughput), per-GPU
            ascending.
        skipped: ((m, D, policy), reason) of infeasible grid points.
        exact_calls: distinct exact-scorer calls in total.
    """

    records: tuple[Record, ...]
    front: tuple[Record, ...]
    skipped: tuple[tuple[tuple[int, int, str], str], ...]
    exact_calls: int

    def best(self) -> Record:
        """The record of least makespan."""
        return min(self.records, key=lambda r: r.makespan_us)


def pareto_records(records: Sequence[Record]) -> tuple[Record, ...]:
    """The Pareto-nondominated records (max per-user and per-GPU throughput), per-GPU
    ascending."""
    if not records:
        return ()
    pts = np.array([[r.per_user, r.per_gpu] for r in records])
    return tuple(records[i] for i in pareto_front(pts))


def rank_cuts(problem: Problem, D: int, m: int, policy: str = "wavefront",
              rotation_refine: int = 3, proposal: Proposal | None = None,
              max_rotations: int | None = 16
              ) -> tuple[list[tuple[float, CutCandidate]], Proposal, int]:
    """Algorithm 1 step 3's evaluation: rank the proposed layouts with the cheap estimator.

    The anchored cut and the ``max_rotations`` rotations / alternative anchors of least feature
    cost (None = all) are each scored at the uniform and service-proportional seeds in one batch
    call; the anchored cut and the ``rotation_refine`` best others are refined with
    ``pairwise_line`` on the cheap estimator.

    Returns:
        ``(ranked, proposal, cheap evaluations)``: ranked = [(refined cheap makespan µs,
        candidate)] ascending, the anchored cut first among equals.

    Raises:
        ValueError: as ``propose_partition`` / ``Problem.evaluator``.
    """
    _check_policy(policy)
    g = problem.workload.graph(m)
    space = problem.space(D)
    if proposal is None:
        phi, wt = kernel_features(g, problem.hw, pool_sms=max(1, space.budget // D))
        proposal = propose_partition(g, D, phi, wt)
    evals = 0
    scored = []
    cands = (proposal.anchored,) + proposal.rotations[:max_rotations]
    for c in cands:
        ev = problem.evaluator(c.seg_of, D, c.w, m, policy)
        seeds = np.stack(list(_seeds(ev, space).values()))
        v = ev.makespan(seeds)
        evals += len(seeds)
        scored.append((float(v.min()), c, seeds[int(np.argmin(v))]))
    others = sorted(scored[1:], key=lambda t: t[0])[: max(0, rotation_refine)]
    ranked = []
    for i, (_, c, p0) in enumerate([scored[0]] + others):
        ev = problem.evaluator(c.seg_of, D, c.w, m, policy)
        r = pairwise_line(ev.makespan, p0, space, None, batch_line=True)
        evals += r.evals
        ranked.append((r.value * (1 + 1e-9 * (i > 0)), i, c))
    ranked.sort(key=lambda t: (t[0], t[1]))
    return [(v, c) for v, _, c in ranked], proposal, evals


def choose_cut(problem: Problem, D: int, m: int, policy: str = "wavefront",
               rotation_refine: int = 3, proposal: Proposal | None = None,
               max_rotations: int | None = 16) -> tuple[CutCandidate, Proposal, int]:
    """The layout Algorithm 1 keeps: the best of ``rank_cuts``; a rotation replaces the anchored
    cut only if it improves on it (giving the boundary-reuse layout when it wraps).

    Returns:
        ``(chosen candidate, proposal, cheap evaluations)``.
    """
    ranked, proposal, evals = rank_cuts(problem, D, m, policy, rotation_refine, proposal,
                                        max_rotations)
    return ranked[0][1], proposal, evals


def cut_neighbours(graph: OpGraph, seg_of: Sequence[int], w: int, D: int
                   ) -> list[tuple[tuple[int, ...], int]]:
    """Legal layouts one kernel away from (seg_of, w): every single-kernel move to another
    segment that keeps the cut legal (predecessor-closed, no empty segment), plus the two
    boundary-reuse toggles: with w = 0, the region's last kernel leaves the last segment to form
    the wrap segment on stage 0 (w = 1); with w = 1 and a one-kernel wrap segment, that kernel
    rejoins the segment before it (w = 0).

    Returns:
        list of (seg_of, w), each in C_{D+w}(G).
    """
    n, K = graph.n, D + w
    seg = list(int(s) for s in seg_of)
    preds = [[] for _ in range(n)]
    succs = [[] for _ in range(n)]
    for u, v in graph.edges:
        preds[v].append(u)
        succs[u].append(v)
    out = []
    counts = np.bincount(seg, minlength=K)
    for i in range(n):
        if counts[seg[i]] == 1:
            continue
        lo = max((seg[u] for u in preds[i]), default=0)
        hi = min((seg[v] for v in succs[i]), default=K - 1)
        for k in range(lo, hi + 1):
            if k != seg[i]:
                c = seg.copy()
                c[i] = k
                out.append((tuple(c), w))
    if w == 0 and D + 1 <= n and D >= 2 and counts[seg[n - 1]] > 1 and seg[n - 1] == K - 1:
        c = seg.copy()
        c[n - 1] = K
        out.append((tuple(c), 1))
    if w == 1 and counts[K - 1] == 1:
        i = seg.index(K - 1)
        c = seg.copy()
        c[i] = K - 2
        out.append((tuple(c), 0))
    legal = []
    for c, ww in out:
        try:
            check_cut(c, n, graph.edges, D + ww)
        except ValueError:
            continue
        legal.append((c, ww))
    return legal


def refine_cut(problem: Problem, cand: CutCandidate, D: int, m: int, policy: str = "wavefront",
               top: int = 3, max_iters: int = 50) -> tuple[CutCandidate, int, float]:
    """Extension (not in DESIGN's Algorithm 1): first-improvement local search over cuts around
    ``cand`` with the cheap estimator. Each iteration scores every ``cut_neighbours`` layout at
    the current allocation and the seeds (one batch call per layout), refines the ``top`` best
    with ``pairwise_line`` on the cheap estimator, and moves if one improves the current refined
    makespan. No exact-scorer calls.

    Returns:
        ``(candidate, cheap evaluations, its refined cheap makespan µs)``; the candidate's origin
        gains a ``+ls<k>`` suffix when k moves were made.
    """
    g = problem.workload.graph(m)
    space = problem.space(D)
    evals = 0

    def refined(seg, w, starts):
        nonlocal evals
        ev = problem.evaluator(seg, D, w, m, policy)
        v = ev.makespan(starts)
        evals += len(starts)
        r = pairwise_line(ev.makespan, starts[int(np.argmin(v))], space, None, batch_line=True)
        evals += r.evals
        return r

    ev0 = problem.evaluator(cand.seg_of, D, cand.w, m, policy)
    cur = refined(cand.seg_of, cand.w, np.stack(list(_seeds(ev0, space).values())))
    seg, w, moves = cand.seg_of, cand.w, 0
    for _ in range(max_iters):
        scored = []
        for c, ww in cut_neighbours(g, seg, w, D):
            ev = problem.evaluator(c, D, ww, m, policy)
            starts = np.stack([cur.alloc] + list(_seeds(ev, space).values()))
            v = ev.makespan(starts)
            evals += len(starts)
            scored.append((float(v.min()), c, ww, starts))
        scored.sort(key=lambda t: t[0])
        best = None
        for _, c, ww, starts in scored[:top]:
            r = refined(c, ww, starts)
            if r.value < cur.value * (1 - 1e-9) and (best is None or r.value < best[0].value):
                best = (r, c, ww)
        if best is None:
            break
        cur, seg, w = best
        moves += 1
    if moves == 0:
        return cand, evals, cur.value
    return (CutCandidate(tuple(seg), w, cand.feature_cost, f"{cand.origin}+ls{moves}"), evals,
            cur.value)


#: Cut strategies of ``algorithm1`` (see its docstring).
CUT_STRATEGIES: tuple[str, ...] = ("proposal", "local_search", "screen")


def _legal_layouts(graph: OpGraph, D: int, limit: int
                   ) -> list[tuple[tuple[int, ...], int]] | None:
    """Every legal layout (seg_of, w): C_D with w = 0 and, when D >= 2 and D + 1 <= n, C_{D+1}
    with w = 1; None when there are more than ``limit`` (the enumeration stops early)."""
    n = graph.n
    gens = [((c, 0) for c in enumerate_cuts(n, graph.edges, D))]
    if D >= 2 and D + 1 <= n:
        gens.append(((c, 1) for c in enumerate_cuts(n, graph.edges, D + 1)))
    out = list(itertools.islice(itertools.chain(*gens), limit + 1))
    return None if len(out) > limit else out


def _layout_groups(problem: Problem, layouts: Sequence[tuple[tuple[int, ...], int]], D: int,
                   m: int, policy: str) -> tuple[list, int, int]:
    """Group layouts whose task DAGs coincide (same w and segment-level edges, as
    ``exhaustive_search``); returns ([(w, layout indices, TaskDAG, segment tables float64
    (C, K, N+1) µs)], T_pad, P_pad) with one padding for all groups."""
    from .taskdag import bucket, build_task_dag

    g = problem.workload.graph(m)
    table = problem.table(m)
    groups: dict[tuple, list[int]] = {}
    for i, (c, w) in enumerate(layouts):
        groups.setdefault((w,) + _dag_key(c, g.edges, g.cross_edges), []).append(i)
    work, T_max, P_max = [], 1, 1
    for key, idx in groups.items():
        w = key[0]
        K = D + w
        dag = build_task_dag(g.n, g.edges, g.cross_edges, layouts[idx[0]][0], D, w,
                             g.num_regions, m, policy)
        T_max = max(T_max, dag.T)
        P_max = max(P_max, max((len(dag.preds(i)) for i in range(dag.T)), default=1))
        C = np.asarray([layouts[i][0] for i in idx])                        # (C, n)
        onehot = (C[:, None, :] == np.arange(K)[None, :, None]).astype(float)
        work.append((w, np.asarray(idx), dag, np.einsum("ckn,nj->ckj", onehot, table)))
    return work, bucket(T_max, 8), bucket(P_max, 2)


def _score_group(w: int, dag, segtab: np.ndarray, A: np.ndarray, D: int, T_pad: int,
                 P_pad: int, chunk: int) -> np.ndarray:
    """Cheap hard makespans (C, R) µs of allocations A int (C, R, D) of the C layouts of one
    task-DAG group with segment tables ``segtab`` (C, K, N+1): durations built on the host
    (float32, as ``Evaluator``), scored by the vmapped max-plus kernel in padded chunks."""
    from .taskdag import bucket

    K = D + w
    C, R = A.shape[:2]
    stage = np.array([binding(k, K, w) for k in range(K)])
    st32 = segtab.astype(np.float32)
    sd = np.take_along_axis(st32, A[:, :, stage].transpose(0, 2, 1), 2)    # (C, K, R)
    sd = sd.transpose(0, 2, 1)                                              # (C, R, K)
    taus = np.zeros((C * R, T_pad), dtype=np.float32)
    taus[:, : dag.T] = sd[:, :, np.asarray(dag.seg)].reshape(-1, dag.T)
    arrs = _evmod.DagArrays.from_dag(dag, pad_tasks=T_pad, pad_preds=P_pad)
    v = np.empty(len(taus))
    rows = min(chunk, bucket(len(taus), 256))
    for s in range(0, len(taus), rows):
        part = taus[s:s + rows]
        pad = np.concatenate([part, np.repeat(part[-1:], rows - len(part), 0)])
        v[s:s + len(part)] = np.asarray(_maxplus_rows(arrs, jnp.asarray(pad)))[: len(part)]
    return v.reshape(C, R)


def _group_seeds(segtab: np.ndarray, w: int, space: AllocSpace) -> np.ndarray:
    """The screening seeds of each layout of a group with segment tables ``segtab``
    (C, K, N+1) µs: uniform and service-proportional (as ``_seeds``), and balanced (each of the
    U free quanta in turn goes to the stage whose segments are slowest on its current
    allocation: the greedy min-max of the stage times, which follows each stage's own
    SM-scaling curve). Returns int64 (C, 3, D)."""
    D = space.D
    C = len(segtab)
    K = D + w
    stage = np.array([binding(k, K, w) for k in range(K)])
    col = min(space.budget, segtab.shape[2] - 1)
    st_time = np.zeros((D, C, segtab.shape[2]))                            # (D, C, N+1)
    np.add.at(st_time, stage, segtab.transpose(1, 0, 2))
    service = st_time[:, :, col].T                                         # (C, D)
    tot = service.sum(1, keepdims=True)
    free = space.budget - D * space.minimum
    prop = space.round(space.minimum + service / np.where(tot > 0, tot, 1.0) * free)
    prop[tot[:, 0] <= 0] = space.uniform()
    bal = np.full((C, D), space.minimum, dtype=np.int64)
    rows = np.arange(C)
    st_time = st_time.transpose(1, 0, 2)                                   # (C, D, N+1)
    for _ in range(space.free_quanta):
        cur = np.take_along_axis(st_time, bal[:, :, None], 2)[:, :, 0]
        bal[rows, np.argmax(cur, 1)] += space.quantum
    return np.stack([np.broadcast_to(space.uniform(), prop.shape), prop, bal], 1)


def _line_moves(A: np.ndarray, space: AllocSpace, max_quanta: int | None = None) -> np.ndarray:
    """The geometric line moves of allocations A (C, D): for every (donor d, receiver r) pair,
    z = 1, 2, 4, ... quanta (z <= min(U, max_quanta)) moved from d to r, as Algorithm 2's
    doubling visits them -> (C, D(D-1)(floor(log2 min(U, max_quanta)) + 1), D); a move whose
    donor would drop below the minimum is replaced by the allocation itself."""
    D, g = space.D, space.quantum
    top_z = space.free_quanta if max_quanta is None else min(space.free_quanta, max_quanta)
    zs = [1 << e for e in range(max(1, top_z).bit_length())]
    moves = [(d, r, z) for d in range(D) for r in range(D) if d != r for z in zs]
    M = np.repeat(A[:, None, :], len(moves), 1).copy()
    for j, (d, r, z) in enumerate(moves):
        ok = A[:, d] - z * g >= space.minimum
        M[ok, j, d] -= z * g
        M[ok, j, r] += z * g
    return M


def screen_cuts(problem: Problem, D: int, m: int, policy: str = "wavefront",
                max_cuts: int = 20_000, top: int = 8, proposal: Proposal | None = None,
                chunk: int = 8192, eta: int = 4, max_step: int | None = 1
                ) -> tuple[list[tuple[float, CutCandidate]], int] | None:
    """Extension (not in DESIGN's Algorithm 1): cheap cut screening by successive halving.

    When the legal layouts (cuts of C_D with w = 0 and, for D >= 2, of C_{D+1} with w = 1)
    number at most ``max_cuts``:

    1. score EVERY layout with the cheap estimator at three seed allocations: the design's
       uniform and service-proportional seeds, and a balanced seed (greedy min-max of the stage
       times, ``_group_seeds``) -- 3 evaluations per layout;
    2. successive halving: keep the best 1/``eta`` of the surviving layouts (at least ``top``),
       give each one steepest-descent step from its current best allocation over the moves of
       Algorithm 2 (every (donor, receiver) pair, z = 1, 2, 4, ... <= ``max_step`` quanta; by
       default one quantum), all scored together, and repeat until ``top`` layouts remain;
    3. refine the ``top`` survivors with ``pairwise_line`` on the cheap estimator (Algorithm 2,
       all moves of a pass in one call) and rank them by the refined makespan.

    Steps 1-2 build task durations on the host and score every layout group sharing one task DAG
    (same w and segment-level edges) in one vmapped max-plus call (``evaluator`` kernel, one
    padding per call of this function, so few compilations). Each layout gets 3 allocations
    plus M = D(D-1)(floor(log2 min(U, max_step)) + 1) per round it survives (U free quanta;
    M = D(D-1) by default), so the cost is about (3 + M/(eta-1)) C cheap evaluations for C
    layouts, independent of |P_H^(D)| = binomial(U+D-1, D-1) (plus the ``top`` refinements):
    a heuristic over cuts and allocations, not the
    exhaustive (cut, allocation) search. No exact-scorer calls.

    Args:
        problem: workload and GPU; D: stages (>= 1); m: microbatches; policy: dispatch order.
        max_cuts: screening budget; more legal layouts than this returns None.
        top: layouts refined (>= 1).
        proposal: used only to label screened layouts that the DP proposal also produced with
            their proposal origin (others get origin ``"screen"``).
        chunk: max rows (allocations) per compiled scoring call.
        eta: halving factor (>= 2): each round keeps 1/eta of the layouts.
        max_step: largest move of a halving descent step, in quanta (>= 1; None = U).

    Returns:
        ``(ranked, cheap evaluations)`` with ranked = [(refined cheap makespan µs,
        CutCandidate)] ascending (feature_cost is NaN for layouts not in ``proposal``), or None
        when the cut space exceeds ``max_cuts``.

    Raises:
        ValueError: unknown policy, D outside 1..n, m not dividing the batch, a nonpositive
            ``max_cuts``/``top``/``chunk``/``max_step``, ``eta`` < 2, an empty allocation
            space.
    """
    _check_policy(policy)
    max_cuts, top = _pos_int(max_cuts, "max_cuts"), _pos_int(top, "top")
    chunk, eta = _pos_int(chunk, "chunk"), _pos_int(eta, "eta", 2)
    if max_step is not None:
        max_step = _pos_int(max_step, "max_step")
    g = problem.workload.graph(m)
    D = _pos_int(D, "D")
    if D > g.n:
        raise ValueError(f"D must be in 1..{g.n} (the region has {g.n} kernels), got {D}")
    space = problem.space(D)
    layouts = _legal_layouts(g, D, max_cuts)
    if layouts is None:
        return None
    work, T_pad, P_pad = _layout_groups(problem, layouts, D, m, policy)
    vals = np.empty(len(layouts))
    cur = np.empty((len(layouts), D), dtype=np.int64)
    evals = 0
    for w, idx, dag, segtab in work:  # round 0: every layout at its three seeds
        A = _group_seeds(segtab, w, space)
        v = _score_group(w, dag, segtab, A, D, T_pad, P_pad, chunk)
        evals += v.size
        j = np.argmin(v, 1)
        vals[idx], cur[idx] = v[np.arange(len(idx)), j], A[np.arange(len(idx)), j]
    alive = np.arange(len(layouts))
    while len(alive) > top and D > 1:  # successive halving with one descent step per round
        alive = alive[np.argsort(vals[alive], kind="stable")[: max(top, -(-len(alive) // eta))]]
        keep = set(alive.tolist())
        for w, idx, dag, segtab in work:
            sel = np.array([t for t, i in enumerate(idx) if i in keep], dtype=np.int64)
            if len(sel) == 0:
                continue
            ii = idx[sel]
            M = _line_moves(cur[ii], space, max_step)
            v = _score_group(w, dag, segtab[sel], M, D, T_pad, P_pad, chunk)
            evals += v.size
            j = np.argmin(v, 1)
            better = v[np.arange(len(ii)), j] < vals[ii]
            vals[ii[better]] = v[np.arange(len(ii)), j][better]
            cur[ii[better]] = M[np.arange(len(ii)), j][better]
    known = {} if proposal is None else {(c.seg_of, c.w): c for c in proposal.candidates}
    ranked = []
    for i in alive[np.argsort(vals[alive], kind="stable")][:top]:
        c, w = layouts[int(i)]
        ev = problem.evaluator(c, D, w, m, policy)
        r = pairwise_line(ev.makespan, cur[int(i)], space, None, batch_line=True)
        evals += r.evals
        cand = known.get((tuple(c), w), CutCandidate(tuple(c), w, float("nan"), "screen"))
        ranked.append((r.value, cand))
    ranked.sort(key=lambda t: t[0])
    return ranked, evals


def algorithm1(problem: Problem, D_values: Sequence[int], microbatch_counts: Sequence[int],
               policies: Sequence[str] = ("wavefront",),
               exact: Callable[[Config], float] | None = None, L_est: int | None = None,
               L_sim: int | None = 2, rotation_refine: int = 3, include_temporal: bool = True,
               cut_local_search: bool = False, ls_starts: int = 3, ls_top: int = 8,
               progress: Callable[[str], None] | None = None, cut_strategy: str | None = None,
               screen_max_cuts: int = 20_000, screen_top: int = 8, screen_polish: int = 1,
               screen_keep_proposal: bool = True) -> SearchResult:
    """Algorithm 1 (simulation-guided search) over the grid x = (m, D, policy) of one workload.

    Per grid point: instantiate the graph (skip infeasible points: m not dividing the batch,
    D larger than the region, an empty allocation space); kernel features; partition proposal
    by DP and ranking of its circular rotations with the cheap estimator (``choose_cut``); seeds
    (uniform, service-proportional); cheap pairwise-line refinement and exact polish
    (``allocate_pairwise``); record (x, c, w, p*, f(p*)). Exact calls are memoised across the
    whole grid. The Pareto-nondominated records are returned with all records.

    Args:
        problem: workload and GPU.
        D_values: stage counts (each >= 2); microbatch_counts: m values.
        policies: dispatch-order policies (``space.DISPATCH_POLICIES``).
        exact: exact scorer ``Config -> µs`` (default ``EvaluatorExact``).
        L_est, L_sim: pass limits of the cheap refinement and of each exact polish.
        rotation_refine: rotations refined by the cheap estimator when ranking cuts.
        include_temporal: add the temporal baseline (D = 1, m = 1) as a record.
        cut_local_search: extension beyond DESIGN's Algorithm 1: after ranking the proposal,
            improve the cut by ``refine_cut`` (cheap-estimator local search over single-kernel
            moves and boundary-reuse toggles) started from the ``ls_starts`` best ranked
            layouts. Off by default (the faithful algorithm).
        ls_starts, ls_top: local-search starts, and neighbours refined per iteration.
        progress: optional callback receiving one line per grid point.
        cut_strategy: how the cut is chosen (``CUT_STRATEGIES``); None means ``"local_search"``
            when ``cut_local_search`` else ``"proposal"`` (backwards compatible).

            * ``"proposal"``: DESIGN's Algorithm 1 (the best of ``rank_cuts``);
            * ``"local_search"``: the same plus ``refine_cut`` from the ``ls_starts`` best
              ranked layouts (extension, = ``cut_local_search=True``);
            * ``"screen"``: extension: when the legal layouts (w = 0 and w = 1) number at most
              ``screen_max_cuts``, ``screen_cuts`` scores every one at three seeds with the
              cheap estimator in batched calls, prunes them by successive halving with
              line-move descent steps and refines the ``screen_top`` survivors by cheap
              pairwise-line search; these join the ranked proposal, and the ``screen_polish``
              best distinct layouts of that merged cheap ranking, plus (``screen_keep_proposal``)
              the proposal's own choice (so the result is never worse than ``"proposal"`` at
              the same grid point with a deterministic scorer), go through the
              seeds/refine/exact-polish of ``allocate_pairwise``; the best exact makespan is
              kept. Larger cut spaces fall back to ``"local_search"``. The exact-scorer cost is
              at most ``screen_polish`` (+ 1) allocation searches per grid point.
        screen_max_cuts: screening budget (legal layouts per grid point).
        screen_top: screened layouts refined with the cheap estimator.
        screen_polish: best layouts of the merged ranking polished with the exact scorer.
        screen_keep_proposal: also polish the proposal's choice (the never-worse guarantee,
            at the price of one more exact allocation search when it is not already polished).

    Returns:
        ``SearchResult``.

    Raises:
        ValueError: an unknown policy, a D < 2 in ``D_values``, an unknown ``cut_strategy``
            (or one contradicting ``cut_local_search=True``), a nonpositive screening
            parameter, or no feasible grid point (the message gives each point's reason).
    """
    if cut_strategy is None:
        cut_strategy = "local_search" if cut_local_search else "proposal"
    if cut_strategy not in CUT_STRATEGIES:
        raise ValueError(f"cut_strategy must be one of {', '.join(CUT_STRATEGIES)}, got "
                         f"{cut_strategy!r}")
    if cut_local_search and cut_strategy != "local_search":
        raise ValueError(f"cut_local_search=True contradicts cut_strategy={cut_strategy!r}")
    _pos_int(screen_max_cuts, "screen_max_cuts")
    _pos_int(screen_top, "screen_top")
    _pos_int(screen_polish, "screen_polish")
    for pol in policies:
        _check_policy(pol)
    for D in D_values:
        _pos_int(D, "D", 2)
    memo = _memo(problem, exact)
    wl = problem.workload
    records, skipped = [], []
    if include_temporal:
        try:
            g1 = wl.graph(1)
            cfg = Config(D=1, w=0, seg_of=(0,) * g1.n, alloc=(problem.hw.num_sms,),
                         microbatch=wl.batch)
            c0 = memo.calls
            t = memo(cfg)
            pu, pg = throughputs(t, wl.tokens_per_gpu)
            records.append(Record(1, 1, "wavefront", wl.batch, cfg.seg_of, 0, "temporal",
                                  cfg.alloc, t, float(pu), float(pg), memo.calls - c0, 0, 0.0))
        except ValueError as e:
            skipped.append(((1, 1, "wavefront"), str(e)))
    for pol in policies:
        for m in microbatch_counts:
            for D in D_values:
                x = (int(m), int(D), pol)
                t0 = time.perf_counter()
                try:
                    g = wl.graph(m)
                    if D > g.n:
                        raise ValueError(f"D={D} exceeds the region's {g.n} kernels")
                    problem.space(D)
                except ValueError as e:
                    skipped.append((x, str(e)))
                    continue
                ranked, prop, cheap = rank_cuts(problem, D, m, pol, rotation_refine)
                cand = ranked[0][1]
                polish = [cand]
                screened = None
                if cut_strategy == "screen":
                    screened = screen_cuts(problem, D, m, pol, screen_max_cuts, screen_top,
                                           prop)
                if screened is not None:
                    sranked, more = screened
                    cheap += more
                    merged, seen = [], set()
                    for _, c in sorted(ranked + sranked, key=lambda t: t[0]):
                        if (c.seg_of, c.w) not in seen:
                            seen.add((c.seg_of, c.w))
                            merged.append(c)
                    polish = merged[:screen_polish]
                    if screen_keep_proposal and all((c.seg_of, c.w) != (cand.seg_of, cand.w)
                                                    for c in polish):
                        polish.append(cand)
                elif cut_strategy != "proposal":  # local search, or screening over budget
                    best_ls = None
                    for _, c in ranked[: max(1, ls_starts)]:
                        c2, more, v2 = refine_cut(problem, c, D, m, pol, top=ls_top)
                        cheap += more
                        if best_ls is None or v2 < best_ls[1]:
                            best_ls = (c2, v2)
                    polish = [best_ls[0]]
                c0 = memo.calls
                res = None
                for c in polish:
                    r = allocate_pairwise(problem, c.seg_of, D, c.w, m, pol, memo, L_est, L_sim)
                    cheap += r.cheap_evals
                    if res is None or r.makespan_us < res.makespan_us:
                        res, cand = r, c
                pu, pg = throughputs(res.makespan_us, wl.tokens_per_gpu)
                rec = Record(m=int(m), D=int(D), policy=pol, microbatch=wl.microbatch_size(m),
                             seg_of=cand.seg_of, w=cand.w, origin=cand.origin,
                             alloc=tuple(int(a) for a in res.alloc),
                             makespan_us=res.makespan_us, per_user=float(pu), per_gpu=float(pg),
                             exact_calls=memo.calls - c0, cheap_evals=cheap,
                             seconds=time.perf_counter() - t0)
                records.append(rec)
                if progress:
                    progress(f"m={m} D={D} {pol}: w={rec.w} alloc={list(rec.alloc)} "
                             f"T={rec.makespan_us:.1f} µs exact_calls={rec.exact_calls}")
    if not records:
        raise ValueError("algorithm1: no feasible grid point: " +
                         "; ".join(f"{x}: {r}" for x, r in skipped))
    return SearchResult(records=tuple(records), front=pareto_records(records),
                        skipped=tuple(skipped), exact_calls=memo.calls)


# ================================================================================= relaxation
#: Traces of the jitted annealer (the no-recompilation test reads it).
ANNEAL_TRACES: dict[str, int] = {"anneal": 0}

_OPTIMIZERS = ("adam", "sgd", "adabelief")


@partial(jax.jit, static_argnames=("optimizer",))
def _anneal(seg_table, seg_stage, arrs, z0, mask, temps, lr0, p_min, free, optimizer="adam"):
    """Anneal logits z (R, D_pad) against the smooth makespan while the temperature follows
    ``temps`` (S,) µs; the learning rate follows a cosine decay from ``lr0`` over S steps.
    ``mask`` (D_pad,) marks the real stages: padded stages get no SMs and no gradient (stage
    indices of the evaluator never point at them), so every D <= D_pad shares one compilation.

    Returns (z (R, D_pad), smooth makespans per step (S, R)). All arguments but ``optimizer``
    are traced: a new temperature schedule or learning rate of the same shapes does not
    recompile.
    """
    ANNEAL_TRACES["anneal"] += 1
    steps = temps.shape[0]
    sched = optax.cosine_decay_schedule(lr0, steps, alpha=0.05)
    opt = {"adam": optax.adam, "sgd": optax.sgd, "adabelief": optax.adabelief}[optimizer](sched)

    def alloc(z):
        sm = jax.nn.softmax(jnp.where(mask, z, -1e9), axis=-1)
        return jnp.where(mask, p_min + free * sm, p_min).astype(seg_table.dtype)

    def loss(z, temp):
        # Evaluator.smooth's jitted kernel, one smooth makespan per restart (vmapped inside)
        f = _evmod._smooth_batch(seg_table, seg_stage, arrs, alloc(z), temp)
        return jnp.sum(f), f

    def step(carry, temp):
        z, st = carry
        (_, f), gz = jax.value_and_grad(loss, has_aux=True)(z, temp)
        upd, st = opt.update(gz, st, z)
        return (optax.apply_updates(z, upd), st), f

    (z, _), hist = jax.lax.scan(step, (z0, opt.init(z0)), temps.astype(seg_table.dtype))
    return z, hist


@dataclass(frozen=True)
class RelaxResult:
    """Output of ``relax_allocation``.

    Attributes:
        continuous: float (R, D) final relaxed allocations (SMs), one per restart.
        rounded: int64 (R, D) largest-remainder roundings.
        rounded_us: float (R,) cheap hard makespans of ``rounded`` (µs).
        smooth_history: float (S, R) smooth makespan per step and restart (µs).
        temps: float (S,) the temperature schedule used (µs).
        best: int64 (D,) best rounded allocation; best_us: its cheap makespan (µs).
    """

    continuous: np.ndarray
    rounded: np.ndarray
    rounded_us: np.ndarray
    smooth_history: np.ndarray
    temps: np.ndarray
    best: np.ndarray
    best_us: float


def relax_allocation(ev: Evaluator, space: AllocSpace, restarts: int = 8, steps: int = 150,
                     lr: float = 0.15, temp_start: float = 2e-2, temp_end: float = 2e-4,
                     seed: int = 0, optimizer: str = "adam") -> RelaxResult:
    """The relaxation of DESIGN §4: a continuous allocation p = p_min + (budget - D p_min)
    softmax(z) (budget and minimum hold by construction), scored by ``Evaluator.smooth``,
    annealed with optax (``optimizer`` with a cosine-decayed learning rate) while the smooth-max
    temperature falls geometrically from ``temp_start`` to ``temp_end`` (fractions of the
    uniform allocation's makespan). ``restarts`` logit vectors are optimised together in one
    batch (restart 0 starts uniform, restart 1 service-proportional, the rest random); each
    result is rounded to the SM quantum with ``AllocSpace.round`` (largest remainder, sum and
    minimum kept) and scored by the cheap hard makespan in one call.

    Args:
        ev: the cheap estimator of the structure; space: its allocation space (same D).
        restarts: R >= 1; steps: S >= 1; lr: initial learning rate (> 0).
        temp_start, temp_end: relative temperatures, temp_start >= temp_end > 0.
        seed: PRNG seed of the random restarts.
        optimizer: ``"adam"``, ``"sgd"`` or ``"adabelief"``.

    Returns:
        ``RelaxResult``.

    Raises:
        ValueError: D mismatch, a nonpositive count/rate/temperature, an unknown optimizer.
    """
    if space.D != ev.D:
        raise ValueError(f"space.D={space.D} must equal the evaluator's D={ev.D}")
    restarts, steps = _pos_int(restarts, "restarts"), _pos_int(steps, "steps")
    if optimizer not in _OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {', '.join(_OPTIMIZERS)}, got {optimizer!r}")
    if not (lr > 0 and np.isfinite(lr)):
        raise ValueError(f"lr must be > 0, got {lr!r}")
    if not (0 < temp_end <= temp_start and np.isfinite(temp_start)):
        raise ValueError(f"temperatures must satisfy 0 < temp_end <= temp_start, got "
                         f"temp_start={temp_start!r}, temp_end={temp_end!r}")
    D = space.D
    seeds = _seeds(ev, space)
    scale = float(ev.makespan(seeds["uniform"][None])[0])
    temps = scale * np.geomspace(temp_start, temp_end, steps)
    free = float(space.budget - D * space.minimum)
    rng = np.random.default_rng(seed)
    z0 = rng.normal(0.0, 1.0, size=(restarts, D))
    z0[0] = 0.0
    if restarts > 1:
        share = (seeds["proportional"] - space.minimum) / max(free, 1.0)
        z0[1] = np.log(np.maximum(share, 1e-3))
    D_pad = max(8, D)
    zp = np.zeros((restarts, D_pad))
    zp[:, :D] = z0
    z, hist = _anneal(ev.seg_table, ev.seg_stage, ev.arrs, jnp.asarray(zp, ev.dtype),
                      jnp.asarray(np.arange(D_pad) < D), jnp.asarray(temps, ev.dtype), jnp.asarray(lr, ev.dtype),
                      jnp.asarray(space.minimum, ev.dtype), jnp.asarray(free, ev.dtype),
                      optimizer=optimizer)
    zz = np.asarray(z, dtype=np.float64)[:, :D]
    sm = np.exp(zz - zz.max(1, keepdims=True))
    cont = space.minimum + free * sm / sm.sum(1, keepdims=True)
    rounded = space.round(cont)
    hard = ev.makespan(rounded)
    j = int(np.argmin(hard))
    return RelaxResult(continuous=cont, rounded=rounded, rounded_us=hard,
                       smooth_history=np.asarray(hist), temps=temps, best=rounded[j],
                       best_us=float(hard[j]))


def relax_and_polish(problem: Problem, seg_of: Sequence[int], D: int, w: int, m: int,
                     policy: str = "wavefront", exact: Callable[[Config], float] | None = None,
                     L_sim: int | None = None, polish_top: int = 1, **relax_kw) -> AllocResult:
    """Relaxation + rounding + exact polish on one structure (our extension of DESIGN §4).

    Runs ``relax_allocation``, takes the ``polish_top`` best distinct rounded allocations (by
    the cheap makespan) and polishes each with ``pairwise_line`` scored by the exact scorer
    (pass limit ``L_sim``); returns the best.

    Args:
        problem, seg_of, D, w, m, policy: the structure.
        exact: exact scorer (default ``EvaluatorExact``), memoised.
        L_sim: pass limit of the exact polish (None = until no move improves).
        polish_top: rounded candidates polished (>= 1).
        **relax_kw: forwarded to ``relax_allocation``.

    Returns:
        ``AllocResult`` (``cheap_evals`` counts the rounded allocations scored; the annealing
        steps are restarts x steps smooth evaluations, not counted).
    """
    t0 = time.perf_counter()
    polish_top = _pos_int(polish_top, "polish_top")
    memo = _memo(problem, exact)
    calls0 = memo.calls
    space = problem.space(D)
    ev = problem.evaluator(seg_of, D, w, m, policy)
    rr = relax_allocation(ev, space, **relax_kw)
    f_exact = problem.exact_batch(memo, seg_of, D, w, m, policy)
    order = np.argsort(rr.rounded_us, kind="stable")
    picked: list[np.ndarray] = []
    for i in order:
        if not any(np.array_equal(rr.rounded[i], q) for q in picked):
            picked.append(rr.rounded[i])
        if len(picked) == polish_top:
            break
    best = None
    for q in picked:
        pol = pairwise_line(f_exact, q, space, L_sim)
        if best is None or pol.value < best.value:
            best = pol
    return AllocResult(alloc=best.alloc, makespan_us=best.value, exact_calls=memo.calls - calls0,
                       cheap_evals=len(rr.rounded), seeds={"relax_best_cheap": rr.best_us},
                       seconds=time.perf_counter() - t0)


# ================================================================================= exhaustive
@dataclass(frozen=True)
class ExhaustiveResult:
    """Output of ``exhaustive_search``.

    Attributes:
        best: the optimal ``Config``; makespan_us: its makespan (µs).
        per_m: {m: (best Config for that m, makespan µs)}.
        evaluated: configurations scored.
    """

    best: Config
    makespan_us: float
    per_m: Mapping[int, tuple[Config, float]]
    evaluated: int


def exhaustive_allocations(ev: Evaluator, space: AllocSpace, chunk: int = 65536
                           ) -> tuple[np.ndarray, float, int]:
    """Best allocation of one structure by scoring all of P_H^(D) with the cheap estimator,
    chunk by chunk (memory bounded by ``chunk`` rows; ``Evaluator.makespan`` further chunks).

    Returns:
        ``(alloc int64 (D,), makespan µs, count scored)``; ties go to the first in enumeration.
    """
    best, best_v, cnt = None, np.inf, 0
    for A in space.iter_all(chunk):
        v = ev.makespan(A)
        cnt += len(A)
        j = int(np.argmin(v))
        if v[j] < best_v:
            best, best_v = A[j].copy(), float(v[j])
    return best, best_v, cnt


#: Hard makespans of explicit task durations (B, T_pad) on one padded DAG (the evaluator's
#: public single-example max-plus kernel, vmapped here).
_maxplus_rows = jax.jit(jax.vmap(_evmod.maxplus_makespan, in_axes=(None, 0)))


def _dag_key(seg_of: Sequence[int], edges, cross_edges) -> tuple:
    """What the task DAG of a cut depends on besides (D, w, L, m, policy): the segment-level
    edges inside a region and across regions."""
    se = frozenset((seg_of[u], seg_of[v]) for u, v in edges if seg_of[u] != seg_of[v])
    ce = frozenset((seg_of[u], seg_of[v]) for u, v in cross_edges)
    return se, ce


def exhaustive_search(problem: Problem, D: int, microbatch_counts: Sequence[int],
                      policy: str = "wavefront", ws: Sequence[int] = (0, 1),
                      max_configs: int = 50_000_000, chunk: int = 8192) -> ExhaustiveResult:
    """The exact optimum of the cheap estimator's model for one D: every legal cut of C_{D+w}
    for each w in ``ws``, every allocation of P_H^(D), every microbatch count.

    Cuts whose augmented task DAGs coincide (same segment-level edges; all contiguous cuts of a
    chain) are scored together: the task durations of every (cut, allocation) pair of a group are
    built on the host from the segment duration tables, exactly as ``Evaluator`` builds them
    (float32), and scored by the evaluator's vmapped max-plus kernel
    (``evaluator.makespan_of_durations``) in chunks of ``chunk`` rows, so memory stays bounded
    by chunk x tasks (plus one allocation chunk per group).

    Args:
        problem: workload and GPU; D: stages (>= 1; D = 1 means w = 0 only).
        microbatch_counts: m values (each must divide the batch).
        policy: dispatch order; ws: boundary-reuse values to include.
        max_configs: refuse larger spaces (ValueError) instead of running for hours.
        chunk: rows (configurations) per compiled call.

    Returns:
        ``ExhaustiveResult`` (makespans of the cheap estimator's static model, µs; ties go to the
        first configuration in enumeration order).

    Raises:
        ValueError: unknown policy, empty allocation space, m not dividing the batch, w not in
            {0, 1}, no legal cut, or more than ``max_configs`` configurations.
    """
    from .taskdag import bucket, build_task_dag

    _check_policy(policy)
    space = problem.space(D)
    chunk = _pos_int(chunk, "chunk")
    for w in ws:
        if w not in (0, 1):
            raise ValueError(f"ws entries must be 0 or 1, got {w!r}")
    total = 0
    plan = []
    for m in microbatch_counts:
        g = problem.workload.graph(m)
        for w in ws:
            if D + w > g.n or (D == 1 and w == 1):
                continue
            cuts = list(enumerate_cuts(g.n, g.edges, D + w))
            plan.append((m, w, cuts))
            total += len(cuts) * space.size
    if total == 0:
        raise ValueError(f"exhaustive_search: no legal cut for D={D}")
    if total > max_configs:
        raise ValueError(f"exhaustive_search: {total} configurations exceed max_configs="
                         f"{max_configs}")
    # one padding for every group of this search, so the scoring kernel compiles once per row
    # bucket (tasks padded to the largest DAG, predecessors to the largest in-degree)
    work = []
    T_max, P_max = 1, 1
    for m, w, cuts in plan:
        g = problem.workload.graph(m)
        groups: dict[tuple, list[tuple[int, ...]]] = {}
        for c in cuts:
            groups.setdefault(_dag_key(c, g.edges, g.cross_edges), []).append(c)
        for cs in groups.values():
            dag = build_task_dag(g.n, g.edges, g.cross_edges, cs[0], D, w, g.num_regions, m,
                                 policy)
            T_max = max(T_max, dag.T)
            P_max = max(P_max, max((len(dag.preds(i)) for i in range(dag.T)), default=1))
            work.append((m, w, cs, dag))
    T_pad, P_pad = bucket(T_max, 8), bucket(P_max, 2)
    per_m: dict[int, tuple[Config, float]] = {}
    cnt = 0
    for m, w, cs, dag in work:
        K = D + w
        table = problem.table(m)
        stage = np.array([binding(k, K, w) for k in range(K)])
        arrs = _evmod.DagArrays.from_dag(dag, pad_tasks=T_pad, pad_preds=P_pad)
        C = np.asarray(cs)                                           # (C, n)
        onehot = (C[:, None, :] == np.arange(K)[None, :, None]).astype(float)
        segtab = np.einsum("ckn,nj->ckj", onehot, table).astype(np.float32)   # (C, K, N+1)
        task_seg = np.asarray(dag.seg)
        for A in space.iter_all(max(1, chunk // len(cs))):
            sd = segtab[:, np.arange(K)[None, :], A[:, stage]]       # (C, a, K) µs
            taus = np.zeros((len(cs) * len(A), T_pad), dtype=np.float32)
            taus[:, : dag.T] = sd[:, :, task_seg].reshape(-1, dag.T)
            vals = np.empty(len(taus))
            rows = min(chunk, bucket(len(taus), 256))
            for s in range(0, len(taus), rows):
                part = taus[s:s + rows]
                pad = np.concatenate([part, np.repeat(part[-1:], rows - len(part), 0)])
                vals[s:s + len(part)] = np.asarray(_maxplus_rows(arrs, jnp.asarray(pad)))[
                    : len(part)]
            cnt += len(vals)
            j = int(np.argmin(vals))
            v = float(vals[j])
            if m not in per_m or v < per_m[m][1]:
                ci, ai = divmod(j, len(A))
                per_m[m] = (problem.config(cs[ci], D, w, A[ai], m, policy), v)
    m_best = min(per_m, key=lambda k: per_m[k][1])
    return ExhaustiveResult(best=per_m[m_best][0], makespan_us=per_m[m_best][1], per_m=per_m,
                            evaluated=cnt)


# ========================================================================= synthetic instances
def coarse_hardware(base: str = "H200", quantum: int = 16, minimum: int = 16,
                    budget: int = 128) -> Hardware:
    """A preset with a coarse SM quantum, for small exhaustively solvable instances.

    Raises:
        ValueError: from ``Hardware`` (names the field), e.g. a budget of 0.
    """
    return dataclasses.replace(get_hardware(base), sm_quantum=quantum, min_pool_sms=minimum,
                               sm_budget=budget)


def synthetic_workload(seed: int, n: int | None = None, chain: bool | None = None,
                       num_regions: int | None = None, batch: int = 8) -> Workload:
    """A random small region for tests and the heuristic-gap experiment.

    Kernels get log-uniform FLOPs (1e8..1e11), weight bytes (1e5..3e8), activation bytes
    (1e5..5e7), sometimes KV bytes and NVLink payloads, tensor or CUDA-core work, and 8..1024
    CTAs. A graph for m microbatches divides FLOPs, activation, KV and communication bytes and
    CTAs by m (weights are read whole by every microbatch). Non-chain instances get a random DAG
    in launch order (every kernel has a predecessor; extra edges with probability 0.25).

    Args:
        seed: PRNG seed; n: kernels (default 5..10); chain: chain or DAG (default random);
        num_regions: region instances L (default 2..6); batch: per-GPU batch R.

    Returns:
        A ``Workload`` (tokens per GPU = ``batch``).
    """
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 11)) if n is None else _pos_int(n, "n", 2)
    chain = bool(rng.random() < 0.5) if chain is None else bool(chain)
    L = int(rng.integers(2, 7)) if num_regions is None else _pos_int(num_regions, "num_regions")

    def lu(lo: float, hi: float) -> float:
        return float(np.exp(rng.uniform(np.log(lo), np.log(hi))))

    base = []
    for i in range(n):
        comm = lu(1e5, 3e7) if rng.random() < 0.15 else 0.0
        kv = lu(1e6, 3e8) if rng.random() < 0.2 else 0.0
        base.append(Kernel(name=f"k{i}", op="synthetic", category="mlp", layer=0,
                           flops=lu(1e8, 1e11), dtype="bf16", tensor=bool(rng.random() < 0.6),
                           weight_objects=((f"w{i}", lu(1e5, 3e8)),),
                           act_reads=((f"a{i}", lu(1e5, 5e7)),), act_writes=(),
                           kv_bytes=kv, comm_bytes=comm,
                           ctas=int(rng.choice([8, 16, 32, 64, 128, 256, 1024]))))
    if chain:
        edges = [(i, i + 1) for i in range(n - 1)]
    else:
        es = set()
        for v in range(1, n):
            es.add((int(rng.integers(0, v)), v))
            for u in range(v):
                if rng.random() < 0.25:
                    es.add((u, v))
        edges = sorted(es)
    cross = [(n - 1, 0)]
    if not chain and rng.random() < 0.5:
        cross.append((n - 1, int(rng.integers(0, n))))

    def graph(m: int) -> OpGraph:
        ks = tuple(dataclasses.replace(
            k, flops=k.flops / m, act_reads=tuple((a, b / m) for a, b in k.act_reads),
            kv_bytes=k.kv_bytes / m, comm_bytes=k.comm_bytes / m,
            ctas=max(1, math.ceil(k.ctas / m))) for k in base)
        return OpGraph(kernels=ks, edges=tuple(edges), cross_edges=tuple(cross), num_regions=L,
                       layers_per_region=1, microbatches=m)

    return Workload(graph, batch=batch, tokens_per_gpu=float(batch),
                    name=f"synthetic{seed}-{'chain' if chain else 'dag'}-n{n}-L{L}")
