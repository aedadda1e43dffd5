"""The augmented task DAG of docs/method.md §2: segment tasks (region instance l, microbatch mu,
segment k), data edges (inside a region, across regions along the residual stream, and edges that
skip segments) and stage edges from a global dispatch order.

Exports padded integer index arrays for JAX (``TaskDAG.arrays``) and a networkx DiGraph
(``TaskDAG.to_networkx``) for tests.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Sequence

import networkx as nx
import numpy as np

from subgpu_jax.model.lru import ByteLRU
from subgpu_jax.space.config import DEFAULT_POLICY, DISPATCH_POLICIES, binding

__all__ = ["TaskDAG", "build_task_dag", "bucket", "per_dag"]


def bucket(x: int, minimum: int = 4) -> int:
    """Round ``x`` up to the next power of two (>= ``minimum``): the padding buckets that keep
    repeated JAX calls from recompiling."""
    b = minimum
    while b < x:
        b *= 2
    return b


@dataclass(frozen=True)
class TaskDAG:
    """Segment tasks in the global dispatch order (a topological order of data AND stage edges).

    Attributes:
        region, mb, seg, stage: int arrays (T,) describing each task.
        data_preds: tuple of T tuples, the data predecessors of each task (task indices).
        stage_pred: int array (T,), the task ``streams_per_stage`` positions earlier on the
            same stage (with one stream: the previous one), or -1.
        K, D, w, num_regions, microbatches: the structure.
        policy: the dispatch-order policy used.
        streams_per_stage: k, streams (lanes) per stage; the q-th task of stage d runs on lane
            d * k + (q mod k) (``lanes``).
    """

    region: np.ndarray
    mb: np.ndarray
    seg: np.ndarray
    stage: np.ndarray
    data_preds: tuple[tuple[int, ...], ...]
    stage_pred: np.ndarray
    K: int
    D: int
    w: int
    num_regions: int
    microbatches: int
    policy: str
    streams_per_stage: int = 1

    @property
    def T(self) -> int:
        """Number of tasks, L * m * K."""
        return int(self.region.shape[0])

    def lanes(self) -> np.ndarray:
        """Lane of each task, int (T,): the q-th task of stage d (dispatch order) runs on lane
        d * k + (q mod k), k = ``streams_per_stage`` (the runtime's rule; k = 1: the stage)."""
        k = self.streams_per_stage
        lane = np.empty(self.T, dtype=np.int64)
        seen = [0] * self.D
        for i, d in enumerate(self.stage.tolist()):
            lane[i] = d * k + seen[d] % k
            seen[d] += 1
        return lane

    def preds(self, i: int) -> tuple[int, ...]:
        """All predecessors of task i (data and stage), sorted, no duplicates."""
        p = set(self.data_preds[i])
        if self.stage_pred[i] >= 0:
            p.add(int(self.stage_pred[i]))
        return tuple(sorted(p))

    def to_networkx(self, tau: Sequence[float] | None = None) -> nx.DiGraph:
        """The augmented DAG; nodes are task indices with attributes region/mb/seg/stage and,
        if ``tau`` is given, ``tau``; edges carry ``kind`` = "data" or "stage"."""
        g = nx.DiGraph()
        for i in range(self.T):
            attrs = dict(region=int(self.region[i]), mb=int(self.mb[i]), seg=int(self.seg[i]),
                         stage=int(self.stage[i]))
            if tau is not None:
                attrs["tau"] = float(tau[i])
            g.add_node(i, **attrs)
        for i in range(self.T):
            for j in self.data_preds[i]:
                g.add_edge(j, i, kind="data")
            if self.stage_pred[i] >= 0 and not g.has_edge(int(self.stage_pred[i]), i):
                g.add_edge(int(self.stage_pred[i]), i, kind="stage")
        return g

    def levels(self) -> np.ndarray:
        """Depth of each task in the augmented DAG (0 for sources), int (T,)."""
        lv = np.zeros(self.T, dtype=np.int64)
        for i in range(self.T):
            p = self.preds(i)
            if p:
                lv[i] = 1 + max(lv[j] for j in p)
        return lv

    def arrays(self, pad_tasks: int | None = None, pad_preds: int | None = None) -> dict[str, np.ndarray]:
        """Padded index arrays for the JAX evaluator, tasks in dispatch order.

        Slot T_pad is a source that always holds 0; padded entries of ``preds`` point there.
        Sizes default to ``bucket`` of the true sizes, so similar DAGs share one compiled
        function.

        Returns:
            ``preds`` (T_pad, P) int32, ``pred_mask`` (T_pad, P) bool, ``task_seg`` (T_pad,)
            int32 (pads 0), ``task_valid`` (T_pad,) bool, and ints ``T``, ``T_pad``.

        Raises:
            ValueError: a requested padding is smaller than the DAG.
        """
        T = self.T
        all_p = [self.preds(i) for i in range(T)]
        need_p = max((len(p) for p in all_p), default=1)
        P = pad_preds or bucket(need_p, 2)
        Tp = pad_tasks or bucket(T, 8)
        if Tp < T or P < need_p:
            raise ValueError(f"TaskDAG.arrays: padding ({Tp}, {P}) smaller than the DAG ({T}, {need_p})")
        preds = np.full((Tp, P), Tp, dtype=np.int32)
        mask = np.zeros((Tp, P), dtype=bool)
        for i, p in enumerate(all_p):
            preds[i, : len(p)] = p
            mask[i, : len(p)] = True
        seg = np.zeros(Tp, dtype=np.int32)
        seg[:T] = self.seg
        valid = np.zeros(Tp, dtype=bool)
        valid[:T] = True
        return {"preds": preds, "pred_mask": mask, "task_seg": seg, "task_valid": valid,
                "T": T, "T_pad": Tp}


def build_task_dag(n: int, edges: Sequence[tuple[int, int]], cross_edges: Sequence[tuple[int, int]],
                   seg_of: Sequence[int], D: int, w: int, num_regions: int, microbatches: int,
                   policy: str = DEFAULT_POLICY, streams_per_stage: int = 1) -> TaskDAG:
    """Unroll a cut region into the augmented task DAG.

    Args:
        n, edges, cross_edges: the region graph (``OpGraph`` fields).
        seg_of: the cut (segment of each kernel), K = max + 1 segments.
        D, w: stages and boundary reuse (K must equal D + w).
        num_regions: L, region instances in the forward pass.
        microbatches: m.
        policy: ``"wavefront"`` (default: a task of global segment g = l*K + k of microbatch mu
            is dispatched in wave g + mu, lower mu first: the factory line) or ``"layer_major"``
            (region by region, segment by segment, microbatches innermost).
        streams_per_stage: k >= 1; a stage runs up to k tasks at once, so the stage edge of a
            task comes from the task k positions earlier on its stage (k = 1: the previous one).

    Returns:
        The TaskDAG, tasks in dispatch order.

    Raises:
        ValueError: unknown policy, or K != D + w.
    """
    if policy not in DISPATCH_POLICIES:
        raise ValueError(f"policy must be one of {', '.join(DISPATCH_POLICIES)}, got {policy!r}")
    K = max(seg_of) + 1
    if K != D + w:
        raise ValueError(f"cut has {K} segments, D + w = {D + w}")
    if num_regions < 1 or microbatches < 1:
        raise ValueError("num_regions and microbatches must be >= 1")
    if isinstance(streams_per_stage, bool) or not isinstance(streams_per_stage, (int, np.integer)) \
            or streams_per_stage < 1:
        raise ValueError(f"streams_per_stage must be an integer >= 1, got {streams_per_stage!r}")
    seg = [int(s) for s in seg_of]
    seg_edges = tuple(sorted({(seg[u], seg[v]) for u, v in edges if seg[u] != seg[v]}))
    cross_seg = tuple(sorted({(seg[u], seg[v]) for u, v in cross_edges}))
    return _unroll(seg_edges, cross_seg, K, int(D), int(w), int(num_regions), int(microbatches),
                   policy, int(streams_per_stage))


#: What ``per_dag`` keeps: the arrays and plans derived from the task DAGs in use, by the DAG's
#: identity (the DAGs themselves are shared by ``build_task_dag``'s memo); 256 entries (every
#: entry counted as 1 by the LRU's size function).
_PER_DAG = ByteLRU(256, sizeof=lambda value: 1)


def per_dag(dag: TaskDAG, key: Hashable, make: Callable[[], Any]) -> Any:
    """``make()``, memoised per task DAG and ``key`` (the DAG's arrays in a layout, its lane
    plan: ``score.evaluator.DagArrays.from_dag``, ``score.lanes.LanePlan.from_dag``). Values
    are shared: they must be immutable (device arrays, read-only numpy). Bounded: the 256 most
    recently used."""
    # the DAG is held in the value, so no other object takes its id while it is cached
    return _PER_DAG.get_or_make((id(dag), key), lambda: (dag, make()))[1]


@functools.lru_cache(maxsize=256)
def _unroll(seg_edges: tuple, cross_seg: tuple, K: int, D: int, w: int, L: int, m: int,
            policy: str, streams_per_stage: int) -> TaskDAG:
    """The task DAG of ``build_task_dag`` from the segment-level edges, all it depends on of a
    cut: memoised (cuts with the same segment-level edges share one read-only ``TaskDAG``;
    the rotations of a main-job grid point's proposal share a handful)."""
    keys = []
    for l in range(L):
        for mu in range(m):
            for k in range(K):
                g = l * K + k
                key = (g + mu, mu, g) if policy == "wavefront" else (l, k, mu)
                keys.append((key, l, mu, k))
    keys.sort()
    T = len(keys)
    region = np.array([x[1] for x in keys], dtype=np.int32)
    mb = np.array([x[2] for x in keys], dtype=np.int32)
    seg = np.array([x[3] for x in keys], dtype=np.int32)
    stage = np.array([binding(k, K, w) for k in seg], dtype=np.int32)
    pos = {(int(region[i]), int(mb[i]), int(seg[i])): i for i in range(T)}
    data_preds = []
    for i in range(T):
        l, mu, k = int(region[i]), int(mb[i]), int(seg[i])
        p = {pos[(l, mu, a)] for a, b in seg_edges if b == k}
        if l > 0:
            p |= {pos[(l - 1, mu, a)] for a, b in cross_seg if b == k}
        data_preds.append(tuple(sorted(p)))
    stage_pred = np.full(T, -1, dtype=np.int64)
    hist: dict[int, list[int]] = {}
    for i in range(T):
        h = hist.setdefault(int(stage[i]), [])
        if len(h) >= streams_per_stage:
            stage_pred[i] = h[-streams_per_stage]
        h.append(i)
    for i in range(T):  # the order must be topological for data edges
        assert all(j < i for j in data_preds[i]), "dispatch order is not topological"
    for a in (region, mb, seg, stage, stage_pred):
        a.setflags(write=False)
    return TaskDAG(region=region, mb=mb, seg=seg, stage=stage, data_preds=tuple(data_preds),
                   stage_pred=stage_pred, K=K, D=D, w=w, num_regions=L, microbatches=m,
                   policy=policy, streams_per_stage=int(streams_per_stage))
