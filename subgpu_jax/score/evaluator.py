"""The vectorised max-plus evaluator (docs/method.md §2, §3 "fast scorer").

The recurrence A_i = max(C_j : j in preds(i)), C_i = A_i + tau_i, T = max_i C_i is written for ONE
vector of task durations as a ``lax.scan`` over the tasks in dispatch order (a topological order of
the augmented DAG); ``jax.vmap`` lifts it over a batch of SM allocations at the API edge. A smooth variant replaces every max by a temperature-scaled logsumexp (finite sentinels,
never -inf, so the gradient is finite everywhere).

Shapes are padded to power-of-two buckets (``taskdag.bucket``) and the index tables are passed as
arguments, so another cut, allocation batch or temperature of the same bucket reuses one compiled
function.
"""

from __future__ import annotations

from typing import Sequence

import chex
import jax
import jax.numpy as jnp
import numpy as np

from subgpu_jax.model.checks import pos_int
from subgpu_jax.model.graph import OpGraph, StaticDurationModel
from subgpu_jax.model.hardware import Hardware
from subgpu_jax.space.config import DEFAULT_POLICY, Config, binding
from subgpu_jax.space.taskdag import TaskDAG, bucket, build_task_dag, per_dag
from subgpu_jax.score.programs import ProgramCache, to_device
from subgpu_jax.score.protocol import SmoothTerms

__all__ = ["check_alloc_batch", "run_in_chunks", "DagArrays", "maxplus_makespan",
           "smooth_makespan", "Evaluator", "validate_durations", "hard_batch", "smooth_batch",
           "tau_batch", "hard_batch_impl", "smooth_batch_impl", "tau_batch_impl", "maxplus_rows"]


_NEG = -1e9  # finite sentinel for masked entries of the smooth max (never -inf)


@chex.dataclass(frozen=True, mappable_dataclass=False)
class DagArrays:
    """Padded index arrays of one augmented task DAG (a ``chex.dataclass`` pytree of arrays).

    Tasks are in the global dispatch order, a topological order, so one pass over them in order
    fills every completion time after its predecessors'. Predecessors are stored as backward
    offsets (i - j), all <= the window Delta, so the scan carries only the last Delta completion
    times instead of all of them (the dispatch order keeps dependencies close).

    Attributes:
        offsets: (T_pad, P) int32 backward offsets i - j in 1..Delta (pads 1, masked out).
        pred_mask: (T_pad, P) bool, True for real predecessors.
        task_seg: (T_pad,) int32 segment of each task (pads 0).
        task_valid: (T_pad,) bool, True for real tasks (pads have no predecessors, tau 0).
        window: (Delta,) zeros; its shape fixes the carried window.
    """

    offsets: jax.Array
    pred_mask: jax.Array
    task_seg: jax.Array
    task_valid: jax.Array
    window: jax.Array

    @classmethod
    def from_dag(cls, dag: TaskDAG, pad_tasks: int | None = None,
                 pad_preds: int | None = None, pad_window: int | None = None) -> "DagArrays":
        """Build from a ``TaskDAG``; sizes default to ``bucket`` of the true sizes. Memoised
        per DAG and paddings (``space.taskdag.per_dag``; the arrays are immutable).

        Raises:
            ValueError: a requested padding is smaller than the DAG needs.
        """
        return per_dag(dag, ("DagArrays", pad_tasks, pad_preds, pad_window),
                       lambda: cls._build(dag, pad_tasks, pad_preds, pad_window))

    @classmethod
    def _build(cls, dag: TaskDAG, pad_tasks: int | None, pad_preds: int | None,
               pad_window: int | None) -> "DagArrays":
        a = dag.arrays(pad_tasks=pad_tasks, pad_preds=pad_preds)
        Tp = a["T_pad"]
        idx = np.arange(Tp)[:, None]
        off = np.where(a["pred_mask"], idx - a["preds"], 1).astype(np.int32)
        need = int(off.max()) if off.size else 1
        Dw = pad_window or bucket(need, 4)
        if Dw < need:
            raise ValueError(f"DagArrays: window {Dw} smaller than the largest offset {need}")
        return cls(to_device(off), to_device(a["pred_mask"]), to_device(a["task_seg"]),
                   to_device(a["task_valid"]), to_device(np.zeros(Dw, dtype=np.int8)))

    @property
    def T_pad(self) -> int:
        """Padded task count."""
        return int(self.offsets.shape[0])


def validate_durations(tau: np.ndarray, name: str = "durations") -> None:
    """Host-side check: every duration finite and >= 0.

    Raises:
        ValueError: names ``name`` and the first bad index.
    """
    t = np.asarray(tau, dtype=float)
    bad = np.flatnonzero(~np.isfinite(t) | (t < 0))
    if bad.size:
        raise ValueError(f"{name} must be finite and >= 0 (µs); entry {int(bad[0])} is "
                         f"{t.flat[bad[0]]!r}")


def _scan(arrs: DagArrays, tau: jax.Array, combine) -> jax.Array:
    """C_i = combine(C[preds(i)], mask_i) + tau_i over the tasks in order; returns C (T_pad,)."""
    Dw = arrs.window.shape[0]
    buf0 = jnp.zeros(Dw, dtype=tau.dtype)

    def body(buf, x):
        off, mk, t = x
        c = combine(buf[Dw - off], mk) + t
        return jnp.concatenate([buf[1:], c[None]]), c

    _, C = jax.lax.scan(body, buf0, (arrs.offsets, arrs.pred_mask, tau), unroll=8)
    return C


def _hard_combine(vals: jax.Array, mask: jax.Array) -> jax.Array:
    return jnp.max(jnp.where(mask, vals, 0.0))


def completion_times(arrs: DagArrays, tau: jax.Array) -> jax.Array:
    """Completion times C (T_pad,) in µs of ONE duration vector ``tau`` (T_pad,), pads 0.

    A_i = max(C_j, j in preds(i)) (0 without predecessors), C_i = A_i + tau_i; a padded task has
    no predecessors and tau 0, so its C is 0.
    """
    return _scan(arrs, tau, _hard_combine)


def maxplus_makespan(arrs: DagArrays, tau: jax.Array) -> jax.Array:
    """Hard makespan T = max_i C_i (µs) of ONE duration vector ``tau`` (T_pad,), pads 0."""
    return jnp.max(completion_times(arrs, tau))


def _smax(x: jax.Array, mask: jax.Array, temp: jax.Array, axis: int = -1) -> jax.Array:
    """temp * logsumexp(x / temp) over masked entries (masked-out -> finite _NEG)."""
    z = jnp.where(mask, x, _NEG) / temp
    return temp * jax.scipy.special.logsumexp(z, axis=axis)


def smooth_makespan(arrs: DagArrays, tau: jax.Array, temp: jax.Array) -> jax.Array:
    """Smooth makespan: every max of the recurrence replaced by ``temp``-scaled logsumexp.

    Converges to ``maxplus_makespan`` from above as temp -> 0 (bias at most temp * log(#preds)
    per max). Tasks without predecessors start at 0 exactly. Gradient finite everywhere.
    """
    def comb(vals, mk):
        return jnp.where(mk.any(), _smax(vals, mk, temp), 0.0)

    C = _scan(arrs, tau, comb)
    return _smax(C, arrs.task_valid, temp, axis=0)


def _tau_from_alloc(seg_table: jax.Array, seg_stage: jax.Array, arrs: DagArrays,
                    alloc: jax.Array) -> jax.Array:
    """Task durations (T_pad+2,) for ONE integer allocation (D,): tau_i = seg_table[k_i, p]."""
    p_seg = alloc[seg_stage]                                   # (K_pad,)
    seg_dur = jnp.take_along_axis(seg_table, p_seg[:, None], axis=1)[:, 0]
    return jnp.where(arrs.task_valid, seg_dur[arrs.task_seg], 0.0)


def _tau_from_alloc_cont(seg_table: jax.Array, seg_stage: jax.Array, arrs: DagArrays,
                         alloc: jax.Array) -> jax.Array:
    """As ``_tau_from_alloc`` for a real-valued allocation: linear interpolation between SM
    counts (differentiable in ``alloc``)."""
    N = seg_table.shape[1] - 1
    p = jnp.clip(alloc[seg_stage], 1.0, float(N))
    lo = jnp.floor(p).astype(jnp.int32)
    hi = jnp.minimum(lo + 1, N)
    f = p - lo
    t_lo = jnp.take_along_axis(seg_table, lo[:, None], axis=1)[:, 0]
    t_hi = jnp.take_along_axis(seg_table, hi[:, None], axis=1)[:, 0]
    seg_dur = t_lo + f * (t_hi - t_lo)
    return jnp.where(arrs.task_valid, seg_dur[arrs.task_seg], 0.0)


def hard_batch_impl(seg_table, seg_stage, arrs, allocs):

    def one(a):
        return maxplus_makespan(arrs, _tau_from_alloc(seg_table, seg_stage, arrs, a))

    return jax.vmap(one)(allocs)


def smooth_batch_impl(seg_table, seg_stage, arrs, allocs, temp):

    def one(a):
        return smooth_makespan(arrs, _tau_from_alloc_cont(seg_table, seg_stage, arrs, a), temp)

    return jax.vmap(one)(allocs)


def tau_batch_impl(arrs, taus):
    return jax.vmap(lambda t: maxplus_makespan(arrs, t))(taus)


# The compiled batch programs (tests wrap the ``*_impl`` functions in chex.assert_max_traces):
# compiled once per padded structure, at most PROGRAM_CACHE_SIZE structures kept (programs.py)
#: (seg_table, seg_stage, arrs, allocs (B, D) int) -> (B,) hard makespans (µs).
hard_batch = ProgramCache(hard_batch_impl)
#: (seg_table, seg_stage, arrs, allocs (B, D) float, temp) -> (B,) smooth makespans (µs);
#: differentiable in ``allocs``, also traced inside the relaxation's own jit.
smooth_batch = jax.jit(smooth_batch_impl)
#: (arrs, taus (B, T)) -> (B,) hard makespans (µs) of explicit task durations.
tau_batch = ProgramCache(tau_batch_impl)
#: (arrs, taus (B, T)) -> (B,) hard makespans (µs), one jit for the exhaustive scorers.
maxplus_rows = jax.jit(jax.vmap(maxplus_makespan, in_axes=(None, 0)))


def makespan_of_durations(dag: TaskDAG, taus: np.ndarray) -> np.ndarray:
    """Hard makespans (µs) of explicit per-task durations ``taus`` (B, T) on ``dag``; (B,).

    Raises:
        ValueError: a duration negative or NaN, or the wrong number of tasks.
    """
    taus = np.atleast_2d(np.asarray(taus, dtype=float))
    if taus.shape[1] != dag.T:
        raise ValueError(f"durations: {taus.shape[1]} per row given, the DAG has {dag.T} tasks")
    validate_durations(taus)
    arrs = DagArrays.from_dag(dag)
    pad = np.zeros((taus.shape[0], arrs.T_pad), dtype=taus.dtype)
    pad[:, : dag.T] = taus
    return np.asarray(tau_batch(arrs, to_device(pad)))


__all__.append("makespan_of_durations")


def check_alloc_batch(allocs: np.ndarray, D: int, max_sms: int) -> np.ndarray:
    """Validate a batch of allocations on the host: shape (B, D) (a (D,) vector is promoted),
    integer SM counts in 1..``max_sms``. Returns the (B, D) array.

    Raises:
        ValueError: wrong shape, non-integer or out-of-range SM counts.
    """
    a = np.asarray(allocs)
    if a.ndim == 1:
        a = a[None]
    if a.ndim != 2 or a.shape[1] != D:
        raise ValueError(f"allocations must have shape (batch, {D}), got {a.shape}")
    if not np.all(np.isfinite(a)) or np.any(a != np.round(a)):
        raise ValueError("allocations: SMs per stage must be integers")
    if np.any(a < 1) or np.any(a > max_sms):
        raise ValueError(f"allocations: SMs per stage must be in 1..{max_sms}")
    return a


def run_in_chunks(a: np.ndarray, chunk: int, fn, workers: int = 1,
                  pad_small: bool = False) -> np.ndarray:
    """Apply a compiled batch scorer ``fn`` ((c, D) int32 -> (c,)) to ``a`` (B, D) in chunks of
    ``chunk`` rows; the last chunk is padded by repeating its last row, so every call has the
    same shape and nothing recompiles. A batch smaller than ``chunk`` runs as one call of a
    bucketed size (``taskdag.bucket(B, 8)``: a few shapes, each compiled once), or with
    ``pad_small`` padded to the full ``chunk`` (one shape: one compilation per scorer, for
    scorers whose compilation costs far more than scoring a chunk). With ``workers`` > 1 the
    chunks run in that many threads (JAX releases the GIL while a compiled call runs: on a CPU
    whose compiled kernel uses one core, two threads use two). Returns float (B,)."""
    out = np.empty(a.shape[0])
    c = chunk if (pad_small or a.shape[0] > chunk) else bucket(a.shape[0], 8)

    def one(s: int) -> None:
        part = a[s:s + c]
        padded = np.concatenate([part, np.repeat(part[-1:], c - len(part), 0)])
        out[s:s + len(part)] = np.asarray(fn(padded))[: len(part)]

    starts = range(0, a.shape[0], c)
    one(starts[0])  # alone: a first call that compiles is traced once
    if workers > 1 and len(starts) > 2:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(min(int(workers), len(starts) - 1)) as ex:
            list(ex.map(one, starts[1:]))
    else:
        for s in starts[1:]:
            one(s)
    return out


class Evaluator:
    """Scores many SM allocations of ONE (cut, D, w, m, policy) on one workload.

    Args:
        graph: the region graph built for m microbatches (``build_graph``).
        seg_of: the cut (segment of every kernel).
        D: stages; w: boundary reuse; policy: dispatch order.
        hw: the GPU; durations come from ``duration_model.table(graph)`` (µs, shape
            (n, N_SM+1)), the static model by default.
        dtype: float dtype of the evaluation (float32; float64 needs ``jax_enable_x64``).
        chunk: allocations per compiled call; batches are padded to it (no recompilation).
            Default 2048 on CPU (fits the caches; measured fastest on a 2-core machine) and
            65536 on an accelerator.
        streams_per_stage: k streams per stage: the task DAG's stage edge goes to the task k
            positions earlier on the stage. Every task keeps its duration on the whole pool
            (tasks of one stage overlap without sharing its SMs: the event simulator with
            contention off; docs/method.md, "Streams per stage", measures the error).

    Raises:
        ValueError: an illegal cut or D/w, negative/NaN durations in the table, or a ``chunk``
            that is not an integer >= 1 (bool, float and str refused: the message names chunk).
    """

    def __init__(self, graph: OpGraph, seg_of: Sequence[int], D: int, w: int, hw: Hardware,
                 policy: str = DEFAULT_POLICY, duration_model=None, dtype=jnp.float32,
                 chunk: int | None = None, table: np.ndarray | None = None,
                 streams_per_stage: int = 1) -> None:
        from subgpu_jax.space.config import check_cut

        if chunk is None:
            chunk = 2048 if jax.default_backend() == "cpu" else 65536
        self.chunk = pos_int(chunk, "chunk")
        K = D + w
        check_cut(seg_of, graph.n, graph.edges, K)
        self.graph, self.hw, self.D, self.w, self.K = graph, hw, D, w, K
        self.seg_of = tuple(int(s) for s in seg_of)
        self.dag = build_task_dag(graph.n, graph.edges, graph.cross_edges, self.seg_of, D, w,
                                  graph.num_regions, graph.microbatches, policy,
                                  streams_per_stage=streams_per_stage)
        self.arrs = DagArrays.from_dag(self.dag)
        if table is None:
            model = duration_model or StaticDurationModel(hw)
            table = model.table(graph)
        table = np.asarray(table, dtype=float)
        validate_durations(table, "duration table")
        self.kernel_table = table
        Kp = bucket(K, 2)
        seg_table = np.zeros((Kp, table.shape[1]))
        for i, s in enumerate(self.seg_of):
            seg_table[s] += table[i]
        self.seg_table_np = seg_table
        self.seg_table = to_device(seg_table, dtype)
        stage = np.zeros(Kp, dtype=np.int32)
        stage[:K] = [binding(k, K, w) for k in range(K)]
        self.seg_stage = to_device(stage)
        self.dtype = dtype

    @classmethod
    def for_config(cls, graph: OpGraph, cfg: Config, hw: Hardware, **kw) -> "Evaluator":
        """Evaluator of ``cfg``'s structure (its allocation is scored by ``makespan([cfg.alloc])``)."""
        kw.setdefault("streams_per_stage", cfg.streams_per_stage)
        return cls(graph, cfg.seg_of, cfg.D, cfg.w, hw, policy=cfg.policy, **kw)

    def _check_allocs(self, allocs: np.ndarray) -> np.ndarray:
        return check_alloc_batch(allocs, self.D, self.seg_table.shape[1] - 1)

    def check_feasible(self, allocs: np.ndarray) -> np.ndarray:
        """Host validation of a batch (B, D) (or (D,)) of allocations of P_H^(D): integer SMs,
        multiples of the SM quantum, each >= the minimum pool, summing to the SM budget (any
        single pool of 1..N SMs when D = 1). Returns the (B, D) array.

        Raises:
            ValueError: wrong shape, non-integer values, or an infeasible row (names the row and
                the violated condition).
        """
        a = self._check_allocs(allocs)
        if self.D > 1:
            hw = self.hw
            bad = ((a % hw.sm_quantum != 0).any(1) | (a < hw.min_pool_sms).any(1)
                   | (a.sum(1) != hw.sm_budget))
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise ValueError(f"allocations: row {i} {a[i].tolist()} is not feasible on "
                                 f"{hw.name}: multiples of {hw.sm_quantum} SMs, each >= "
                                 f"{hw.min_pool_sms}, summing to {hw.sm_budget}")
        return a

    def makespan(self, allocs: np.ndarray, feasible_only: bool = True) -> np.ndarray:
        """Hard makespans (µs) of integer allocations (B, D) -> (B,), in chunks of ``chunk``.

        Args:
            allocs: SMs per stage, (B, D) or (D,).
            feasible_only: require every row to be in P_H^(D) of ``hw`` (multiples of the SM
                quantum, each >= the minimum pool, summing to the SM budget). Pass False to score
                arbitrary SM counts in 1..N_SM (model studies).

        Raises:
            ValueError: wrong shape, non-integer values, or (``feasible_only``) an infeasible row
                (names the row and the violated condition).
        """
        a = (self.check_feasible(allocs) if feasible_only
             else self._check_allocs(allocs)).astype(np.int32)
        return run_in_chunks(a, self.chunk, lambda c: hard_batch(
            self.seg_table, self.seg_stage, self.arrs, to_device(c)))

    def stage_service(self, sms: int) -> np.ndarray:
        """``score.protocol.StageService``: float64 (D,) µs, the summed time of each stage's
        segments on ``sms`` SMs (clipped to the table's largest column)."""
        st = np.asarray(self.seg_stage)[: self.K]
        col = min(int(sms), self.seg_table_np.shape[1] - 1)
        service = np.zeros(self.D)
        for k in range(self.K):
            service[st[k]] += self.seg_table_np[k, col]
        return service

    def smooth_terms(self) -> SmoothTerms:
        """``score.protocol.Smooth``: the device arrays ``smooth_batch`` evaluates."""
        return SmoothTerms(self.seg_table, self.seg_stage, self.arrs)

    def smooth(self, allocs: jax.Array, temp: float | jax.Array) -> jax.Array:
        """Smooth makespans (µs) of real-valued allocations (B, D) at temperature ``temp`` (µs);
        differentiable in ``allocs``; returns a jax array (B,)."""
        return smooth_batch(self.seg_table, self.seg_stage, self.arrs,
                             jnp.asarray(allocs, dtype=self.dtype), jnp.asarray(temp, self.dtype))

    def task_durations(self, alloc: Sequence[int]) -> np.ndarray:
        """tau (T,) in µs of every task for one integer allocation (host, numpy)."""
        a = self._check_allocs(np.asarray(alloc))[0]
        st = np.asarray(self.seg_stage)[: self.K]
        seg_dur = self.seg_table_np[np.arange(self.K), a[st]]
        return seg_dur[self.dag.seg]


def temporal_makespan(graph: OpGraph, hw: Hardware, duration_model=None,
                      table: np.ndarray | None = None) -> float:
    """Temporal baseline (µs): every kernel of every region, one full-batch pass on all SMs.

    ``graph`` must be built for one microbatch (m = 1). With D = 1 the recurrence is the sum.
    """
    if graph.microbatches != 1:
        raise ValueError("temporal_makespan needs a graph built with microbatches=1")
    if table is None:
        table = (duration_model or StaticDurationModel(hw)).table(graph)
    return float(np.asarray(table)[:, hw.num_sms].sum() * graph.num_regions)


__all__.append("temporal_makespan")
