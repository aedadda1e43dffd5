"""Massive candidate evaluation: billions of (cut, allocation) candidates scored with the
static max-plus model, streamed through ONE compiled function in chunks sized by a memory
budget, top-k and Pareto records kept on the fly, sharded over local devices. The cuts are
unranked on the device; the allocations are enumerated once on the host and kept on the device
when they fit ``PRECOMPUTED_ALLOCS_BYTES`` (each block slices them), else unranked per block.

Pieces (docs/method.md §2 recurrence, §4 exhaustive search):

* **Unranking in JAX** (``unrank_combination``, ``unrank_allocation``, ``unrank_chain_bounds``):
  a rank in ``[0, C(n, r))`` -> the rank-th combination of ``itertools.combinations(range(n), r)``
  (lexicographic order), by the combinatorial number system of the complement. Binomial tables are
  compile-time constants. An allocation of P_H^(D) is the stars-and-bars composition of its
  combination (same order as ``space.enumerate_allocations``); a chain cut with K segments is a
  combination of K-1 start positions in 1..n-1 (same order as ``space.enumerate_cuts``).
* **DagProgram**: the augmented task DAG (``taskdag.TaskDAG``) as compile-time constants: the
  recurrence C_i = max_{j in preds(i)} C_j + tau_{seg(i)}, T = max over sink tasks, is unrolled
  in Python over the tasks for ONE candidate (every index static), so XLA fuses it into straight
  -line code per candidate (optionally ``lax.optimization_barrier`` every few DAG levels to bound
  fusion size). Bit-identical to ``evaluator.Evaluator.makespan`` in float32 (same seg-table
  sums, same max/add order: C >= 0, so the evaluator's max with 0 is a no-op).
* **Segment tables**: durations of every contiguous segment [s, e) of a chain at every SM count,
  (n+1)^2 rows x (N+1) µs, summed in float64 in kernel order exactly as ``Evaluator`` sums them,
  then cast: any cut's tau is a gather ``seg_tab[s*(n+1)+e, p]`` (prefix sums over the chain's
  kernels, without the cancellation error of subtracting prefix sums).
* **Blocks**: one compiled call scores a block of ``cut_block`` cuts x ``alloc_block``
  allocations starting at scalar ranks (arguments, so every chunk reuses the compilation; the
  tail is masked with +inf), and returns its ``topk`` best (value, cut rank, allocation rank),
  per row of ``TOPK_ROW`` then over the rows' bests (``block_topk``); the recurrence itself is
  a ``score.maxplus`` kernel (XLA or Pallas).
  The host merges the tiny per-chunk results (``TopK``, ``StreamingPareto``): memory is bounded
  by the block, whatever the candidate count.
* **Sharding**: with ``devices=n`` the block is replicated over a 1-D ``Mesh`` (axis
  ``"cand"``) through ``jax.shard_map``; device d scores the cut ranks ``base + d*cut_block...``;
  the per-device top-k are gathered and merged on the host.

Units: µs, SMs, bytes. Errors are raised on the host (ValueError naming the field).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import partial
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from subgpu_jax.score.maxplus import DagProgram, MaxPlusKernel, XlaMaxPlus, dag_makespan
from subgpu_jax.space.config import DEFAULT_POLICY, binding
from subgpu_jax.space.taskdag import TaskDAG, build_task_dag

__all__ = [
    "binom_table", "unrank_combination", "unrank_allocation", "unrank_chain_bounds",
    "DagProgram", "dag_makespan", "chain_segment_table", "cut_segment_table", "BlockPlan",
    "plan_blocks", "bytes_per_candidate", "MassiveEvaluator", "TopK", "StreamingPareto",
    "ExhaustiveChainResult", "exhaustive_chain", "numpy_makespans",
    "MIN_BLOCK", "TOPK_ROW", "ALLOC_ALIGN", "PRECOMPUTED_ALLOCS_BYTES", "block_topk",
]

#: Smallest block (candidates per compiled call) a memory budget must allow.
MIN_BLOCK = 128


# ============================================================================ unranking
def binom_table(n: int, r: int) -> np.ndarray:
    """C(a, j) for a in 0..n, j in 0..r as int64 (n+1, r+1)."""
    t = np.zeros((n + 1, r + 1), dtype=np.int64)
    for a in range(n + 1):
        for j in range(r + 1):
            t[a, j] = math.comb(a, j)
    return t


def _check_comb(n: int, r: int) -> None:
    if n < 0 or r < 0 or r > n:
        raise ValueError(f"combinations: need 0 <= r <= n, got n={n}, r={r}")
    if math.comb(n, r) >= 2**31:
        raise ValueError(f"combinations: C({n}, {r}) = {math.comb(n, r)} ranks exceed int32")


def unrank_combination(rank: jax.Array, n: int, r: int) -> jax.Array:
    """The ``rank``-th r-subset of ``range(n)`` in ``itertools.combinations`` order, for ONE rank.

    Lexicographic rank x maps to the combinadic N = C(n, r) - 1 - x of the reflected subset
    {n-1-c}: for j = r..1, a_j = max{a : C(a, j) <= N}, N -= C(a_j, j); then c = n-1-a_j,
    increasing. Each max is a count of table entries <= N (no data-dependent control flow).

    Args:
        rank: int32 scalar in [0, C(n, r)) (out-of-range ranks give some valid-looking subset;
            mask them). n, r: static ints with C(n, r) < 2**31.

    Returns:
        int32 (r,) strictly increasing entries in 0..n-1.

    Raises:
        ValueError (at trace time): r > n or C(n, r) >= 2**31.
    """
    _check_comb(n, r)
    if r == 0:
        return jnp.zeros((0,), jnp.int32)
    tab = binom_table(max(n - 1, 0), r)  # rows a = 0..n-1
    N = jnp.int32(math.comb(n, r) - 1) - rank.astype(jnp.int32)
    out = []
    for j in range(r, 0, -1):
        col = jnp.asarray(tab[:, j].astype(np.int32))      # nondecreasing in a, col[0] = 0
        a = jnp.sum((col <= N).astype(jnp.int32)) - 1
        N = N - col[a]
        out.append(jnp.int32(n - 1) - a)
    return jnp.stack(out)


def unrank_allocation(rank: jax.Array, D: int, budget: int, quantum: int, minimum: int
                      ) -> jax.Array:
    """The ``rank``-th allocation of P_H^(D) in ``space.enumerate_allocations`` order (ONE rank).

    Stars and bars: U = (budget - D*minimum)/quantum free quanta; the bars are the rank-th
    (D-1)-subset of range(U + D - 1); part_d = gap - 1 quanta above the minimum.

    Returns:
        int32 (D,) SMs per stage, each a multiple of ``quantum``, >= ``minimum``, summing to
        ``budget``.

    Raises:
        ValueError (trace time): an empty space or a non-multiple budget/minimum.
    """
    if D < 1 or budget % quantum or minimum % quantum or D * minimum > budget:
        raise ValueError(f"allocation space empty or malformed: D={D}, budget={budget}, "
                         f"quantum={quantum}, minimum={minimum}")
    U = (budget - D * minimum) // quantum
    if D == 1:
        return jnp.full((1,), budget, jnp.int32)
    bars = unrank_combination(rank, U + D - 1, D - 1)
    ext = jnp.concatenate([jnp.full((1,), -1, jnp.int32), bars,
                           jnp.full((1,), U + D - 1, jnp.int32)])
    return (jnp.diff(ext) - 1) * quantum + minimum


def unrank_chain_bounds(rank: jax.Array, n: int, K: int) -> jax.Array:
    """Segment bounds (K+1,) int32 = (0, s_1, ..., s_{K-1}, n) of the ``rank``-th K-segment cut
    of an n-kernel chain in ``space.enumerate_cuts`` order (starts = combinations of 1..n-1)."""
    if not 1 <= K <= n:
        raise ValueError(f"K (segments) must be in 1..{n}, got {K}")
    st = unrank_combination(rank, n - 1, K - 1) + 1
    return jnp.concatenate([jnp.zeros((1,), jnp.int32), st, jnp.full((1,), n, jnp.int32)])


# ============================================================================ segment tables
def chain_segment_table(table: np.ndarray) -> np.ndarray:
    """Durations of every contiguous segment [s, e) of a chain: float64 ((n+1)^2, N+1) µs, row
    s*(n+1)+e = sum of kernel rows s..e-1 (summed in order from 0.0 as ``Evaluator`` does; rows
    with e <= s are 0)."""
    t = np.asarray(table, dtype=float)
    n = t.shape[0]
    out = np.zeros(((n + 1) * (n + 1), t.shape[1]))
    for s in range(n):
        acc = np.zeros(t.shape[1])
        for e in range(s + 1, n + 1):
            acc = acc + t[e - 1]
            out[s * (n + 1) + e] = acc
    return out


def cut_segment_table(table: np.ndarray, seg_of: Sequence[int]) -> np.ndarray:
    """Segment durations (K, N+1) µs of one cut (``Evaluator.seg_table_np`` without padding)."""
    t = np.asarray(table, dtype=float)
    K = max(seg_of) + 1
    out = np.zeros((K, t.shape[1]))
    for i, s in enumerate(seg_of):
        out[s] += t[i]
    return out


# ============================================================================ memory planning
def bytes_per_candidate(T: int, K: int, D: int) -> int:
    """Conservative device bytes per candidate of a block: every completion time materialised
    (float32 T), segment durations and indices (K), the allocation (D), value and two ranks, x2
    for XLA temporaries."""
    return 2 * 4 * (T + 2 * K + D + 4)


@dataclass(frozen=True)
class BlockPlan:
    """Block shape of one compiled call: ``cut_block`` cuts x ``alloc_block`` allocations.

    Attributes:
        cut_block, alloc_block: block shape; size: their product (candidates per call);
        est_bytes: estimated device bytes of one call; fixed_bytes: tables.
    """

    cut_block: int
    alloc_block: int
    est_bytes: int
    fixed_bytes: int

    @property
    def size(self) -> int:
        return self.cut_block * self.alloc_block


def _pow2_floor(x: int) -> int:
    return 1 << (max(int(x), 1).bit_length() - 1)


#: The allocation axis of a block is a multiple of this many allocations (``plan_blocks``):
#: the two-stage top-k's row (``TOPK_ROW``, 1,024) and a multiple of every Pallas program's
#: block (``score.maxplus.PallasMaxPlus.block``, a power of two up to 1,024).
ALLOC_ALIGN = 1024


def plan_blocks(n_cuts: int, n_allocs: int, per_cand: int, fixed_bytes: int,
                memory_budget: int | None = None, max_block: int | None = None,
                topk: int = 1) -> BlockPlan:
    """The block of one compiled call: the most candidates whose estimated bytes fit
    ``memory_budget`` (and ``max_block``), with as little padding as the space allows.

    Allocations fill the block first (unranked or sliced once per block, shared by its cuts),
    then cuts. The allocation axis covers the space in the fewest blocks that fit the cap,
    split evenly and rounded up to ``ALLOC_ALIGN``: a space of 1,088,430 allocations (D = 5 on
    148 SMs) takes one block of 1,088,512, where the next power of two (2,097,152, the rule
    before 2026-12-08) computed 48% masked padding in every call. The cut axis takes what the
    cap leaves (at most the power of two of ``n_cuts``). The records do not depend on the
    block (``TopK`` orders ties by rank).

    Args:
        n_cuts, n_allocs: the space (>= 1 each). per_cand: ``bytes_per_candidate``.
        fixed_bytes: tables resident on the device. memory_budget: bytes (None = no limit).
        max_block: cap on candidates per call (default 2**16 on CPU, 2**22 on an accelerator).
        topk: records kept per call (the block must hold at least ``max(topk, MIN_BLOCK)``).

    Raises:
        ValueError: the budget is smaller than one minimal block; the message gives the minimum.
    """
    if max_block is None:
        max_block = 2**16 if jax.default_backend() == "cpu" else 2**22
    min_cands = max(MIN_BLOCK, int(topk))
    need = fixed_bytes + min_cands * per_cand
    cap = max_block
    if memory_budget is not None:
        if memory_budget < need:
            raise ValueError(f"memory_budget={memory_budget} bytes is too small for one chunk: "
                             f"a chunk of {min_cands} candidates needs at least {need} bytes "
                             f"({per_cand} bytes/candidate + {fixed_bytes} bytes of tables)")
        cap = min(cap, (memory_budget - fixed_bytes) // per_cand)
    cap = max(int(cap), 1)
    n_allocs, n_cuts = max(int(n_allocs), 1), max(int(n_cuts), 1)
    if cap >= ALLOC_ALIGN:
        parts = -(-n_allocs // (cap // ALLOC_ALIGN * ALLOC_ALIGN))      # fewest blocks that fit
        ab = -(-(-(-n_allocs // parts)) // ALLOC_ALIGN) * ALLOC_ALIGN
        if ab >= n_allocs:          # one block: no more than the space's power of two before
            ab = min(ab, 1 << (n_allocs - 1).bit_length())
    else:                           # a small cap: a power of two, as before
        ab = min(_pow2_floor(cap), 1 << (n_allocs - 1).bit_length())
    ab = max(ab, 1)
    cb = max(1, min(cap // ab, 1 << (n_cuts - 1).bit_length()))
    if cb * ab < min_cands:   # tiny spaces: pad the allocation axis up to the minimum block
        ab = 1 << max(min_cands // cb - 1, 0).bit_length()
    return BlockPlan(cut_block=int(cb), alloc_block=int(ab), est_bytes=int(fixed_bytes +
                     cb * ab * per_cand), fixed_bytes=int(fixed_bytes))


# ============================================================================ streaming records
class TopK:
    """The k smallest (value, key...) seen so far; ties broken by the key tuple (lowest first).

    ``add(values, keys)`` with values (B,) and keys (B, q) int64 merges a chunk; memory O(k).
    """

    def __init__(self, k: int) -> None:
        if k < 1:
            raise ValueError(f"topk must be >= 1, got {k}")
        self.k = int(k)
        self.values = np.zeros(0)
        self.keys: np.ndarray | None = None

    def add(self, values: np.ndarray, keys: np.ndarray) -> None:
        v = np.asarray(values, dtype=float).ravel()
        kk = np.asarray(keys, dtype=np.int64).reshape(len(v), -1)
        ok = np.isfinite(v)
        v, kk = v[ok], kk[ok]
        if self.keys is not None:
            v = np.concatenate([self.values, v])
            kk = np.concatenate([self.keys, kk])
        order = np.lexsort(tuple(kk[:, j] for j in range(kk.shape[1] - 1, -1, -1)) + (v,))
        order = order[: self.k]
        self.values, self.keys = v[order], kk[order]


class StreamingPareto:
    """Pareto-nondominated records over (per-user, per-GPU) throughput, maintained on the fly.

    ``add(record)`` with ``record["makespan_us"]`` and ``record["tokens_per_gpu"]``; per-user
    throughput = 1e6/T, per-GPU = tokens_per_gpu * 1e6 / T (``pareto.throughputs``). Records with
    equal objectives keep the first one added.
    """

    def __init__(self) -> None:
        self.records: list[dict] = []

    def add(self, rec: dict) -> bool:
        u = 1e6 / rec["makespan_us"]
        g = u * rec["tokens_per_gpu"]
        keep = []
        for r in self.records:
            ru = 1e6 / r["makespan_us"]
            rg = ru * r["tokens_per_gpu"]
            if ru >= u and rg >= g:
                return False            # dominated or equal: keep the existing one
            if not (u >= ru and g >= rg):
                keep.append(r)
        keep.append(rec)
        self.records = keep
        return True


# ============================================================================ the block function
#: Row width of the block's two-stage top-k (``block_topk``): each row's k best, then the k best
#: of those; exact (the k best of the block are among their rows' k best) and, on the H100, far
#: cheaper than one top-k over millions of makespans (``experiments/bench_maxplus_parts.py``).
TOPK_ROW = 1024
#: Largest device array (bytes) of every allocation of the space precomputed once
#: (``MassiveEvaluator``): a block then slices it instead of unranking its allocations again
#: (unranking 1,088,430 allocations took 16x the recurrence of 2 cuts x those allocations on
#: an H100, ``bench_maxplus_parts.py``). Larger spaces unrank per block.
PRECOMPUTED_ALLOCS_BYTES = 256 * 2**20


def block_topk(ms: jax.Array, k: int, row: int = TOPK_ROW) -> tuple[jax.Array, jax.Array]:
    """The ``k`` smallest of the flat makespans ``ms`` (B,) and their indices, ascending, ties
    to the lowest index (as ``lax.top_k`` of the negated values): per row of ``row`` values
    (the tail padded with +inf), then over the rows' k best. Exact: each of the k smallest is
    among its row's k smallest. Falls back to one ``lax.top_k`` when B <= row or k > row."""
    B = ms.shape[0]
    if B <= row or k > row:
        neg, idx = jax.lax.top_k(-ms, k)
        return -neg, idx.astype(jnp.int32)
    R = -(-B // row)
    x = jnp.pad(ms, (0, R * row - B), constant_values=jnp.inf).reshape(R, row)
    neg, idx = jax.lax.top_k(-x, k)                                      # (R, k) each row
    flat_idx = (jnp.arange(R, dtype=jnp.int32)[:, None] * row + idx).reshape(-1)
    neg2, j = jax.lax.top_k(neg.reshape(-1), k)
    return -neg2, flat_idx[j]


def _block_impl(seg_tab, bases, allocs_all, *, prog: DagProgram, mode: str, n: int, stage: tuple,
                D: int, budget: int, quantum: int, minimum: int, n_cuts: int, n_allocs: int,
                cut_block: int, alloc_block: int, topk: int, barrier_every: int, N1: int,
                kernel: MaxPlusKernel, topk_row: int):
    """Score one block (per device) with ``kernel`` (``score.maxplus``): bases (1, 2) int32 =
    (cut rank base, alloc rank base); ``allocs_all``: every allocation of the space (rows padded
    to a multiple of ``alloc_block``), or a (1, D) placeholder: unrank the block's own.

    Returns (vals (1, topk) f32, flat index (1, topk) int32 within the block)."""
    cut0, a0 = bases[0, 0], bases[0, 1]
    ar = a0 + jnp.arange(alloc_block, dtype=jnp.int32)
    a_ok = ar < n_allocs
    if allocs_all.shape[0] >= n_allocs:
        allocs = jax.lax.dynamic_slice_in_dim(allocs_all, jnp.minimum(a0, allocs_all.shape[0]
                                                                      - alloc_block),
                                              alloc_block)              # (AB, D)
    else:
        allocs = jax.vmap(lambda r: unrank_allocation(r, D, budget, quantum, minimum))(
            jnp.minimum(ar, n_allocs - 1))                               # (AB, D)
    cr = cut0 + jnp.arange(cut_block, dtype=jnp.int32)
    c_ok = cr < n_cuts
    K = prog.K
    if mode == "chain":
        bounds = jax.vmap(lambda r: unrank_chain_bounds(r, n, K))(jnp.minimum(cr, n_cuts - 1))
        segids = bounds[:, :-1] * (n + 1) + bounds[:, 1:]                # (CB, K)
    else:
        segids = jnp.broadcast_to(jnp.arange(K, dtype=jnp.int32), (cut_block, K))
    stage_a = jnp.asarray(np.asarray(stage, dtype=np.int32))
    flat = seg_tab.reshape(-1)

    ms = kernel.block_makespans(prog, flat, segids, allocs, stage_a, N1,
                                barrier_every)                          # (CB, AB)
    ms = jnp.where(c_ok[:, None] & a_ok[None, :], ms, jnp.inf).reshape(-1)
    vals, idx = block_topk(ms, topk, topk_row)
    return vals[None], idx[None]


class MassiveEvaluator:
    """Streams every candidate of one DAG structure through one compiled block function.

    Two modes:

    * ``mode="chain"``: all cuts of an n-kernel chain into K = D + w segments (one structure:
      every contiguous cut of a chain has the same task DAG) x all allocations of P_H^(D).
      ``table``: kernel durations (n, N+1) µs.
    * ``mode="fixed"``: ONE cut (``seg_of``) of any DAG x all allocations. ``table`` is the
      kernel table and ``seg_of`` the cut.

    Args:
        dag: the augmented ``TaskDAG`` (for chain mode, of any cut with K = D + w).
        table: kernel durations (n, N+1) µs, finite and >= 0.
        D, w: stages, boundary reuse. budget, quantum, minimum: the allocation space.
        mode: ``"chain"`` or ``"fixed"``; seg_of: the cut (fixed mode).
        topk: records kept. memory_budget: device bytes for one call (None = backend default
            cap). max_block: cap on candidates per call. devices: number of local devices to
            shard the block over (default 1). barrier_every: see ``dag_makespan``.
        dtype: float32. kernel: the ``score.maxplus.MaxPlusKernel`` that scores a block
            (default ``XlaMaxPlus()``; ``PallasMaxPlus`` on a GPU), made once by the caller.
        precompute_allocations: keep every allocation on the device (when it fits
            ``PRECOMPUTED_ALLOCS_BYTES``) and slice it per block; False: each block unranks its
            own (the path before; same records). two_stage_topk: a block's top-k per row of
            ``TOPK_ROW`` (``block_topk``); False: one ``lax.top_k`` (same records).

    Raises:
        ValueError: bad table, mode, space, budget too small, more devices than exist.
    """

    def __init__(self, dag: TaskDAG, table: np.ndarray, D: int, w: int, budget: int,
                 quantum: int, minimum: int, mode: str = "chain",
                 seg_of: Sequence[int] | None = None, topk: int = 8,
                 memory_budget: int | None = None, max_block: int | None = None,
                 devices: int | None = None, barrier_every: int = 0,
                 cut_block: int | None = None, alloc_block: int | None = None,
                 kernel: MaxPlusKernel | None = None, precompute_allocations: bool = True,
                 two_stage_topk: bool = True) -> None:
        from subgpu_jax.score.evaluator import validate_durations
        from subgpu_jax.space.config import count_allocations

        table = np.asarray(table, dtype=float)
        validate_durations(table, "duration table")
        if mode not in ("chain", "fixed"):
            raise ValueError(f"mode must be 'chain' or 'fixed', got {mode!r}")
        K = D + w
        if dag.K != K or dag.D != D or dag.w != w:
            raise ValueError(f"dag has (D, w, K) = ({dag.D}, {dag.w}, {dag.K}), expected "
                             f"({D}, {w}, {K})")
        n = table.shape[0]
        self.n, self.D, self.w, self.K = n, D, w, K
        self.N1 = table.shape[1]
        if budget > self.N1 - 1:
            raise ValueError(f"budget={budget} SMs exceeds the table's {self.N1 - 1} SMs")
        self.n_allocs = count_allocations(budget, D, quantum, minimum)
        if self.n_allocs == 0:
            raise ValueError(f"allocation space empty: D={D}, budget={budget}, "
                             f"quantum={quantum}, minimum={minimum}")
        if mode == "chain":
            self.n_cuts = math.comb(n - 1, K - 1)
            seg_tab = chain_segment_table(table)
        else:
            if seg_of is None:
                raise ValueError("mode='fixed' needs seg_of")
            self.n_cuts = 1
            seg_tab = cut_segment_table(table, seg_of)
            if seg_tab.shape[0] != K:
                raise ValueError(f"seg_of has {seg_tab.shape[0]} segments, D + w = {K}")
        if self.n_allocs >= 2**31 or self.n_cuts >= 2**31:
            raise ValueError("more than 2**31 allocations or cuts: split the space")
        self.seg_of = None if seg_of is None else tuple(int(s) for s in seg_of)
        self.mode = mode
        self.seg_tab_np = seg_tab
        self.seg_tab = jnp.asarray(seg_tab, dtype=jnp.float32)
        self.prog = DagProgram.from_dag(dag)
        self.stage = tuple(binding(k, K, w) for k in range(K))
        self.space = (D, budget, quantum, minimum)
        ndev_avail = len(jax.local_devices())
        self.devices = 1 if devices is None else int(devices)
        if self.devices < 1 or self.devices > ndev_avail:
            raise ValueError(f"devices={devices}: {ndev_avail} local device(s) exist "
                             f"({jax.default_backend()})")
        self.topk = int(topk)
        per = bytes_per_candidate(self.prog.T, K, D)
        fixed = int(seg_tab.size * 4 + 65536)
        pre = precompute_allocations and self.n_allocs * D * 4 <= PRECOMPUTED_ALLOCS_BYTES
        if pre:  # every allocation on the device once, sliced by each block
            fixed += int(self.n_allocs * D * 4 * 2)
        plan = plan_blocks(self.n_cuts, self.n_allocs, per, fixed, memory_budget, max_block,
                           topk)
        if cut_block is not None or alloc_block is not None:
            plan = BlockPlan(int(cut_block or plan.cut_block), int(alloc_block or plan.alloc_block),
                             fixed + per * int(cut_block or plan.cut_block)
                             * int(alloc_block or plan.alloc_block), fixed)
        if self.topk > plan.size:
            raise ValueError(f"topk={topk} exceeds the block of {plan.size} candidates")
        self.plan = plan
        self.barrier_every = int(barrier_every)
        self.kernel = XlaMaxPlus() if kernel is None else kernel
        self.allocs_dev = (self._all_allocations(plan.alloc_block) if pre
                           else jnp.zeros((1, D), jnp.int32))
        row = TOPK_ROW if two_stage_topk else plan.cut_block * plan.alloc_block
        fn = partial(_block_impl, kernel=self.kernel, topk_row=row, prog=self.prog, mode=mode,
                     n=n, stage=self.stage, D=D, budget=budget, quantum=quantum, minimum=minimum, n_cuts=self.n_cuts,
                     n_allocs=self.n_allocs, cut_block=plan.cut_block,
                     alloc_block=plan.alloc_block, topk=self.topk,
                     barrier_every=self.barrier_every, N1=self.N1)
        if self.devices == 1:
            self._fn = jax.jit(fn)
        else:
            from jax.sharding import Mesh, PartitionSpec as P
            mesh = Mesh(np.array(jax.local_devices()[: self.devices]), ("cand",))
            self._fn = jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=(P(), P("cand"), P()),
                                             out_specs=(P("cand"), P("cand"))))

    def _all_allocations(self, block: int) -> jax.Array:
        """Every allocation of the space, (ceil(n_allocs / block) * block, D) int32 on the
        device (rank order: ``space.enumerate_allocations``, the order of
        ``unrank_allocation``; the padding rows repeat the last one, masked by the blocks).
        Enumerated on the host (1.4 s for the 1,088,430 of the exhaustive instance on a 2-core
        CPU; unranking them on a GPU compiled for tens of seconds) and kept in ``self.allocs``."""
        from subgpu_jax.space.config import enumerate_allocations

        D, budget, quantum, minimum = self.space
        a = enumerate_allocations(budget, D, quantum, minimum, limit=self.n_allocs)
        self.allocs = a
        rows = -(-self.n_allocs // block) * block
        return jnp.asarray(np.concatenate([a, np.repeat(a[-1:], rows - len(a), 0)]), jnp.int32)

    @property
    def total(self) -> int:
        """Candidates of the space: cuts x allocations."""
        return self.n_cuts * self.n_allocs

    def _block_bases(self):
        """(cut base, alloc base) of each call; devices take consecutive cut blocks (or, with one
        cut block covering every cut, consecutive allocation blocks)."""
        cb, ab, nd = self.plan.cut_block, self.plan.alloc_block, self.devices
        blocks = [(c, a) for c in range(0, self.n_cuts, cb) for a in range(0, self.n_allocs, ab)]
        for s in range(0, len(blocks), nd):
            grp = blocks[s:s + nd]
            grp = grp + [(self.n_cuts, self.n_allocs)] * (nd - len(grp))  # all-masked pads
            yield grp

    def run(self, limit: int | None = None, progress: Callable[[int, float], None] | None = None
            ) -> "ExhaustiveChainResult":
        """Score every candidate (or the first ``limit`` calls' worth), streaming.

        Returns:
            ``ExhaustiveChainResult`` of this structure: top-k (makespan µs, cut rank, alloc
            rank), candidates evaluated, seconds.
        """
        top = TopK(self.topk)
        cb, ab = self.plan.cut_block, self.plan.alloc_block
        t0 = time.perf_counter()
        evaluated = 0
        pending = None

        def drain(p):
            grp, (vals, idx) = p
            vals, idx = np.asarray(vals), np.asarray(idx)
            for d, (c0, a0) in enumerate(grp):
                ci = c0 + idx[d] // ab
                ai = a0 + idx[d] % ab
                top.add(vals[d], np.stack([ci, ai], 1))

        for ncall, grp in enumerate(self._block_bases()):
            if limit is not None and ncall >= limit:
                break
            bases = jnp.asarray(np.array(grp, dtype=np.int32))
            out = self._fn(self.seg_tab, bases, self.allocs_dev)
            for c0, a0 in grp:
                evaluated += max(0, min(cb, self.n_cuts - c0)) * max(0, min(ab, self.n_allocs - a0))
            if pending is not None:
                drain(pending)
            pending = (grp, out)
            if progress is not None:
                progress(evaluated, time.perf_counter() - t0)
        if pending is not None:
            drain(pending)
        dt = time.perf_counter() - t0
        return ExhaustiveChainResult(values=top.values, cut_ranks=top.keys[:, 0],
                                     alloc_ranks=top.keys[:, 1], evaluated=evaluated, seconds=dt,
                                     D=self.D, w=self.w)

    def makespan(self, allocs: np.ndarray, cut_rank: int = 0) -> np.ndarray:
        """``score.protocol.Scorer``: makespans (µs, (B,) float64) of allocations (B, D) of the
        scorer's space for one cut (fixed mode: ``seg_of``; chain mode: the cut of rank
        ``cut_rank``), validated on the host.

        Raises:
            ValueError: wrong shape, non-integer SMs, a row outside the allocation space
                (multiples of the quantum, each >= the minimum, summing to the budget), or a cut
                rank outside 0..n_cuts-1.
        """
        from subgpu_jax.score.evaluator import check_alloc_batch

        D, budget, quantum, minimum = self.space
        a = check_alloc_batch(allocs, D, self.N1 - 1)
        bad = (a % quantum != 0).any(1) | (a < minimum).any(1) | (a.sum(1) != budget)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(f"allocations: row {i} {a[i].tolist()} is outside the space: "
                             f"multiples of {quantum} SMs, each >= {minimum}, summing to {budget}")
        if not 0 <= int(cut_rank) < self.n_cuts:
            raise ValueError(f"cut_rank must be in 0..{self.n_cuts - 1}, got {cut_rank}")
        return self.score(a.astype(np.int32), int(cut_rank))

    def score(self, allocs: np.ndarray, cut_rank: int = 0) -> np.ndarray:
        """Makespans (µs, float32 -> float64 (B,)) of explicit allocations (B, D) for one cut rank
        (fixed mode: the cut), with the same per-candidate program (for checks and baselines)."""
        a = np.asarray(allocs, dtype=np.int32).reshape(-1, self.D)
        if self.mode == "chain":
            import itertools
            st = next(itertools.islice(itertools.combinations(range(1, self.n), self.K - 1),
                                       int(cut_rank), None))
            b = np.array((0,) + st + (self.n,))
            sid = b[:-1] * (self.n + 1) + b[1:]
        else:
            sid = np.arange(self.K)
        if not hasattr(self, "_score"):
            stage = jnp.asarray(np.asarray(self.stage, dtype=np.int32))
            prog, be, N1 = self.prog, self.barrier_every, self.N1

            def f(tab, sid, al):
                flat = tab.reshape(-1)
                return jax.vmap(lambda x: dag_makespan(prog, flat[sid * N1 + x[stage]], be))(al)
            self._score = jax.jit(f)
        return np.asarray(self._score(self.seg_tab, jnp.asarray(sid, jnp.int32),
                                      jnp.asarray(a)), dtype=float)

    # ---------------------------------------------------------------- helpers on the host
    def cut_of_rank(self, rank: int) -> tuple[int, ...]:
        """``seg_of`` of a cut rank (chain mode: the rank-th of ``space.enumerate_cuts``)."""
        if self.mode == "fixed":
            return self.seg_of
        from subgpu_jax.space.config import chain_cut
        import itertools
        starts = next(itertools.islice(itertools.combinations(range(1, self.n), self.K - 1),
                                       int(rank), None))
        return chain_cut(self.n, starts)

    def alloc_of_rank(self, rank: int) -> tuple[int, ...]:
        """Allocation of a rank (same order as ``enumerate_allocations``): a row of the
        enumerated allocations where they were kept, else unranked (jitted: eager unranking
        dispatches hundreds of small device operations)."""
        if getattr(self, "allocs", None) is not None:
            return tuple(int(x) for x in self.allocs[int(rank)])
        if not hasattr(self, "_unrank"):
            self._unrank = jax.jit(lambda r: unrank_allocation(r, *self.space))
        return tuple(int(x) for x in np.asarray(self._unrank(jnp.int32(rank))))


@dataclass(frozen=True)
class ExhaustiveChainResult:
    """Top-k of one structure: ``values`` (k,) µs ascending, ``cut_ranks``/``alloc_ranks`` (k,),
    ``evaluated`` candidates, ``seconds`` wall, and the structure (D, w)."""

    values: np.ndarray
    cut_ranks: np.ndarray
    alloc_ranks: np.ndarray
    evaluated: int
    seconds: float
    D: int
    w: int

    @property
    def evals_per_s(self) -> float:
        return self.evaluated / max(self.seconds, 1e-12)


def exhaustive_chain(table: np.ndarray, num_regions: int, microbatches: int, D: int,
                     budget: int, quantum: int, minimum: int, ws: Sequence[int] = (0, 1),
                     policy: str = DEFAULT_POLICY, topk: int = 8, **kw) -> dict:
    """Exact optimum over every cut-and-binding choice and every allocation of an n-kernel chain
    (edges i -> i+1, cross edge n-1 -> 0) under the static model.

    Args:
        table: kernel durations (n, N+1) µs for the graph of ``microbatches`` microbatches.
        num_regions: L; microbatches: m; D: stages; budget/quantum/minimum: allocation space.
        ws: boundary-reuse values; policy: dispatch order; topk: records kept per w.
        **kw: ``MassiveEvaluator`` options (memory_budget, devices, max_block, barrier_every).

    Returns:
        dict with ``best`` (makespan_us, w, seg_of, alloc), ``per_w`` results, ``evaluated``,
        ``seconds``, ``evals_per_s``.
    """
    n = np.asarray(table).shape[0]
    edges = [(i, i + 1) for i in range(n - 1)]
    per_w = {}
    best = None
    ev_total, secs = 0, 0.0
    for w in ws:
        K = D + w
        if K > n:
            continue
        from subgpu_jax.space.config import chain_cut
        seg0 = chain_cut(n, list(range(1, K)))
        dag = build_task_dag(n, edges, [(n - 1, 0)], seg0, D, w, num_regions, microbatches,
                             policy)
        me = MassiveEvaluator(dag, table, D, w, budget, quantum, minimum, mode="chain",
                              topk=topk, **kw)
        r = me.run()
        per_w[w] = (me, r)
        ev_total += r.evaluated
        secs += r.seconds
        if len(r.values):
            cand = (float(r.values[0]), w, int(r.cut_ranks[0]), int(r.alloc_ranks[0]))
            if best is None or cand < best:
                best = cand
    me = per_w[best[1]][0]
    return {"best": {"makespan_us": best[0], "w": best[1],
                     "seg_of": me.cut_of_rank(best[2]), "alloc": me.alloc_of_rank(best[3]),
                     "cut_rank": best[2], "alloc_rank": best[3]},
            "per_w": {w: r for w, (_, r) in per_w.items()},
            "evaluators": {w: e for w, (e, _) in per_w.items()},
            "evaluated": ev_total, "seconds": secs, "evals_per_s": ev_total / max(secs, 1e-12)}


# ============================================================================ numpy reference
def numpy_makespans(dag: TaskDAG, seg_table: np.ndarray, stage: Sequence[int],
                    allocs: np.ndarray) -> np.ndarray:
    """Plain NumPy baseline, vectorised over the batch: the same recurrence task by task.

    Args:
        dag: the task DAG; seg_table (K, N+1) µs; stage: stage of each segment;
        allocs: (B, D) int SMs.

    Returns:
        float32 (B,) makespans µs (float32 like the JAX evaluators).
    """
    a = np.asarray(allocs)
    st = np.asarray(stage)
    tab = np.asarray(seg_table, dtype=np.float32)
    tau = tab[np.arange(len(st))[None, :], a[:, st]]                       # (B, K)
    C = np.zeros((a.shape[0], dag.T), dtype=np.float32)
    for i in range(dag.T):
        p = dag.preds(i)
        t = tau[:, dag.seg[i]]
        C[:, i] = (C[:, list(p)].max(axis=1) + t) if p else t
    return C.max(axis=1)
