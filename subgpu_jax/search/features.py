"""Kernel features and the partition proposal of Algorithm 1 (docs/method.md §4): each kernel's
normalised time components, the circular-DP cut proposal and its cost."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from subgpu_jax.model.checks import pos_int
from subgpu_jax.model.graph import Kernel, OpGraph, StaticDurationModel
from subgpu_jax.model.kernelcost import op_cost
from subgpu_jax.model.hardware import Hardware
from subgpu_jax.space.config import chain_cut, check_cut, enumerate_cuts

__all__ = ["FEATURE_NAMES", "kernel_features", "partition_cost", "CutCandidate", "Proposal",
    "propose_partition"]


#: Columns of ``kernel_features``.
FEATURE_NAMES: tuple[str, ...] = (
    "compute_frac", "memory_frac", "comm_frac", "launch_frac", "weight_byte_frac", "kv_byte_frac",
)


def _time_components(k: Kernel, hw: Hardware, sms: float) -> tuple[float, float, float, float]:
    """(compute, memory, communication, launch) times in µs of kernel ``k`` alone on ``sms`` SMs,
    with exactly the terms of ``graph.StaticDurationModel`` (its total is launch + max of the
    other three; launch includes the op's fixed phase, ``kernelcost.op_cost``)."""
    oc = op_cost(k, hw, float(sms))
    p = float(oc.sms)
    rate = (hw.flops_rate(k.dtype) * oc.rate_scale if k.tensor
            else hw.tensor_flops["bf16"] / 16.0)
    t_comp = k.flops / (rate * p / hw.num_sms) * 1e6
    hb = k.hbm_bytes
    t_mem = (hb / float(hw.mem_bandwidth(p * oc.inflight_scale, read_only=k.act_bytes < 0.5 * hb))
             * 1e6) if hb else 0.0
    t_comm = k.link_us(hw.comm_setup_us, hw.nvlink_Bps)  # scale-out part at its own bandwidth
    return t_comp, t_mem, t_comm, hw.launch_us + float(oc.fixed_us)


def kernel_features(graph: OpGraph, hw: Hardware, pool_sms: int | None = None
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Kernel features phi (docs/method.md §4 step 2): each kernel's expected compute, memory, cache and
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
    ps = hw.sm_budget // 2 if pool_sms is None else pos_int(pool_sms, "pool_sms")
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
    D = pos_int(D, "D")
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
