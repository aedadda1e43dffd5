"""Vectorised contention (docs/method.md §3 "fast scorer"): the max-plus evaluator with the
contention-rate updates of ``contention.BoundModel`` approximated by a fixed-point iteration in
JAX, for ONE allocation and ``jax.vmap``-ed over a batch of allocations at the API edge.

Scheme (everything in µs, bytes, SMs):

1. Host (numpy), once per (graph, cut, D, w, m): for every segment k, pool size p (0..N SMs) and
   a grid of *external* conditions -- the bytes in flight ``c_o`` of the kernels running on other
   stages (normalised by the whole-GPU window ``inflight_per_sm_B * N``) and their compute power
   ``pi_o`` (the power-cap share of ``contention``) -- the time of every kernel of the segment is
   evaluated with the rate rules of ``BoundModel.rates_of`` for that kernel alone beside a
   constant external load: launch, then compute, data and network counters concurrently. Summing
   over the segment's kernels gives ``SegTables``: the task duration, its data-active time, its
   concurrency-time integral and its compute-power-time integral. L2 hits enter through a
   per-kernel hit fraction (``estimate_hits``: the event simulator's LRU table replayed once on
   the static schedule of a reference allocation).
2. JAX, per allocation, every per-task quantity in the lane-major layout of ``lanes.LanePlan``:
   tau <- isolated durations (c_o = pi_o = 0); repeat ``iters`` times: completion times C (the
   dispatch-order scan of ``evaluator.completion_times`` or one step per DAG level), S = C - tau;
   for every task i, the data-active time, concurrency-time and power-time that tasks of OTHER
   lanes spend inside [S_i, C_i] (tasks uniform inside their interval; partners: exactly the
   tasks no DAG path orders with i, ``lanes.lane_integrals``: static slices, O(pairs) work,
   no T x T matrix); the fraction f of task i's window during which other stages move data
   (union bound, clipped to 1) and their mean concurrency / power while they do; the new
   duration is the harmonic mixture 1 / ((1 - f) / tau_iso + f / tau_busy), tau_busy
   bilinearly interpolated in the table; damped update. Then the makespan of the final tau.
   This module's ``vc_makespan`` is that kernel written for one allocation and ``jax.vmap``-ed
   (``scan="window"``, ``"levels"``, ``"straight"``); the default, ``scan="batched"``, is the
   batch-last kernel of ``score.vcbatch`` (same model; start times from the recurrence itself,
   not S = C - tau; the allocations as the trailing axis).

With a calibration in the ``ContentionModel``, the tables of the measured kernels use the
calibrated work per pool (``calibrated_pools``), as the event simulator does.

With ``ContentionModel.off()`` the tables hold the static durations and the iteration is skipped:
the result equals ``evaluator.Evaluator.makespan`` exactly (same seg-table sums, same scan).

Shapes are padded to buckets (``taskdag.bucket``, ``fine_bucket``) and all tables are
arguments, so another cut, allocation batch or graph of the same task-DAG structure reuses one
compiled function (the lane plan's pair groups are compile-time constants of a structure; tests
wrap ``vc_batch_impl`` in ``chex.assert_max_traces``).
"""

from __future__ import annotations

import os
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from subgpu_jax.sim.contention import ContentionModel
from subgpu_jax.score.protocol import SmoothTerms
from subgpu_jax.score.evaluator import (DagArrays, Evaluator, check_alloc_batch, completion_times,
    run_in_chunks)
from subgpu_jax.model.checks import finite, flag, pos_int
from subgpu_jax.model.graph import OpGraph
from subgpu_jax.model.hardware import Hardware
from subgpu_jax.space.config import DEFAULT_POLICY, Config, check_cut, even_allocation
from subgpu_jax.sim.eventsim import EventSimulator
from subgpu_jax.space.config import check_config
from subgpu_jax.sim.l2cache import check_policy
from subgpu_jax.score.programs import FAST_COMPILE, ProgramCache, to_device
from subgpu_jax.score.lanes import LanePlan, incomparable_pairs, lane_integrals, level_completion_times
from subgpu_jax.score.vcoptions import VCOptions
from subgpu_jax.score.vcbatch import (check_integrals, grid_spec, interp_weights, vcb_batch,
                                     vcb_batch_fast, vcb_batch_impl)
from subgpu_jax.space.taskdag import TaskDAG, build_task_dag
# the host tables (re-exported: ``vcontention.kernel_profiles`` etc. stay valid)
from subgpu_jax.score.vctables import (CONC_GRID, POWER_GRID, PoolTables, SegTables,
                                       kernel_profiles, segment_tables)

__all__ = ["SegTables", "uncovered_overlaps", "kernel_profiles", "segment_tables", "estimate_hits",
           "reference_hits",
           "vc_makespan", "VContentionEvaluator", "ContentionEstimator", "CONC_GRID", "POWER_GRID",
           "fine_bucket", "VC_STATIC_ARGNUMS", "SCANS", "PAD_SMALL_MAX_TASKS", "GATHER_MIN_TRIPLES",
           "GATHER_MIN_TRIPLES_REUSED",
           "HitCounter",
           "vc_batch", "vc_batch_impl", "bilinear_rows"]

_BIG = 1e30  # sentinel time (µs) of padded stage slots
#: Kernels (``VContentionEvaluator(scan=...)``): the vmapped ``vc_makespan`` with its completion
#: times by the dispatch-order window scan, by DAG levels or as a straight-line program; or the
#: batch-last kernel of ``score.vcbatch`` (``"batched"``: same model, allocations as the trailing
#: contiguous axis).
SCANS = ("window", "levels", "straight", "batched")


def uncovered_overlaps(dag: TaskDAG, tau: np.ndarray) -> int:
    """Number of task pairs on different lanes whose intervals overlap (by more than 1e-9 µs)
    in the schedule of durations ``tau`` (T,) µs but which are not ``lanes.incomparable_pairs``
    (host, numpy, O(T^2) memory). 0 means the ``LanePlan`` integrals see every overlap of this
    schedule."""
    T = dag.T
    C = np.zeros(T)
    for i in range(T):
        C[i] = max((C[j] for j in dag.preds(i)), default=0.0) + float(tau[i])
    S = C - np.asarray(tau, dtype=float)
    ln = np.asarray(dag.lanes())
    ov = (np.minimum(C[:, None], C[None]) - np.maximum(S[:, None], S[None])) > 1e-9
    ov &= ln[:, None] != ln[None]
    ov = np.triu(ov, 1)
    ii, jj = incomparable_pairs(dag)
    ov[ii, jj] = False
    return int(ov.sum())


# ============================================================================ L2 hit estimate
def estimate_hits(graph: OpGraph, cfg: Config, hw: Hardware, cache: str = "lru") -> np.ndarray:
    """Per-kernel L2 hit fraction of object-read bytes, averaged over all instances (host).

    Replays the event simulator with isolated static durations (``ContentionModel.off()``, the
    same L2 table and policy; regions that repeat skipped, ``sim.periodic``) for ``cfg`` and
    records each kernel instance's hit and read bytes;
    contention changes the interleaving only slightly, so one replay per structure serves every
    allocation (the allocation of ``cfg`` is the reference one).

    Returns:
        float64 (n,), hit bytes / (weight + activation read bytes) per region kernel (0 where a
        kernel reads nothing); all zeros for ``cache="none"``.

    Raises:
        ValueError: invalid config or cache policy (from ``eventsim.simulate``).
    """
    check_policy(cache)
    check_config(graph, cfg, hw)
    n = graph.n
    if cache == "none":
        return np.zeros(n)
    obs = HitCounter(n)
    EventSimulator.from_config(graph, cfg, hw, ContentionModel.off(), cache, record=False,
                               observer=obs).run(forward=True)
    return obs.hit_rates()


def reference_hits(graph: OpGraph, seg_of: Sequence[int], D: int, w: int, hw: Hardware,
                   policy: str, streams_per_stage: int, cache: str,
                   ref_alloc: Sequence[int] | None = None) -> np.ndarray:
    """``estimate_hits`` of a structure at its reference allocation (``ref_alloc``, default the
    even split of the SM budget): float64 (n,) hit fractions.

    Raises:
        ValueError: an invalid structure or cache policy (as ``estimate_hits``).
    """
    if ref_alloc is None:
        ref_alloc = even_allocation(hw.sm_budget, D, hw.sm_quantum, hw.min_pool_sms)
    R = graph.deployment.requests_per_gpu if graph.deployment is not None else None
    mb = R // graph.microbatches if R is not None else 1
    cfg = Config(D=D, w=w, seg_of=tuple(seg_of), alloc=tuple(int(a) for a in ref_alloc),
                 microbatch=mb, policy=policy, streams_per_stage=streams_per_stage)
    return estimate_hits(graph, cfg, hw, cache)


class HitCounter:
    """A ``sim.eventsim.LookupObserver`` summing each kernel's L2 hit and read bytes.

    Args:
        n: kernels of the simulated graph.

    Attributes:
        hit, read: float64 (n,) bytes per kernel (summed over its instances).
    """

    def __init__(self, n: int) -> None:
        self.hit = np.zeros(n)
        self.read = np.zeros(n)

    def on_lookups(self, kid: int, hit_bytes: float, read_bytes: float) -> None:
        self.hit[kid] += hit_bytes
        self.read[kid] += read_bytes

    def counts(self) -> tuple[np.ndarray, np.ndarray]:
        """(hit, read) copies: what ``sim.periodic`` moves on over skipped regions."""
        return self.hit.copy(), self.read.copy()

    def set_counts(self, counts: tuple[np.ndarray, np.ndarray]) -> None:
        """Replace (hit, read) by ``counts`` (``sim.periodic``, after a jump)."""
        self.hit, self.read = (np.asarray(c, dtype=float).copy() for c in counts)

    def hit_rates(self) -> np.ndarray:
        """float64 (n,) hit / read bytes per kernel, 0 where a kernel read nothing."""
        tot = self.read
        return np.clip(np.where(tot > 0, self.hit / np.maximum(tot, 1e-30), 0.0), 0.0, 1.0)


# ============================================================================ JAX core
def bilinear_rows(rows: jax.Array, r0: jax.Array, NP: int, ic, fc, ip, fp) -> jax.Array:
    """Bilinear interpolation in a table stored as rows of 4 values (tau, busy, conc, power):
    row (r0 + c) * NP + p holds grid point (c, p) of a task's (segment, pool); r0, ic, ip (T,)
    int32, fc, fp (T,) fractions -> (4, T). Four plain row gathers per task (on the CPU far
    cheaper than one gather of a 2 x 2 x 4 patch)."""
    r = (r0 + ic) * NP + ip
    f_c, f_p = fc[:, None], fp[:, None]
    v = (rows[r] * (1 - f_c) * (1 - f_p) + rows[r + NP] * f_c * (1 - f_p)
         + rows[r + 1] * (1 - f_c) * f_p + rows[r + NP + 1] * f_c * f_p)
    return v.T


def _completion(plan: LanePlan, arrs: DagArrays, tau: jax.Array, scan: str) -> jax.Array:
    """Completion times (H,) µs of home-layout durations ``tau`` (H,): by DAG levels in a
    ``lax.scan`` (``scan="levels"``) or written out as a straight-line program
    (``"straight"``), or by the dispatch-order window scan of ``evaluator.completion_times``
    (``"window"``: T steps of a small window, fastest on a CPU; two permutations per call)."""
    if scan != "window":
        return level_completion_times(plan.levels, tau, unrolled=scan == "straight")
    C = completion_times(arrs, jnp.pad(tau, (0, 1))[plan.slot])        # (T_pad,) task order
    return jnp.pad(C, (0, 1))[plan.task]


def vc_makespan(tabs: SegTables, plan: LanePlan, arrs: DagArrays, alloc: jax.Array,
                iters: int = 4, damping: float = 0.5, isolated: bool = False,
                scan: str = "window") -> jax.Array:
    """Makespan (µs) of ONE integer allocation (D,) with vectorised contention.

    Every per-task quantity lives in the lane-major home layout of ``plan`` (H slots).

    Args:
        tabs: segment tables. plan: the DAG's ``lanes.LanePlan``. arrs: the same DAG in
            dispatch order (``evaluator.DagArrays``, T_pad = ``plan.slot`` size), for
            ``scan="window"``.
        alloc: (D,) int32 SMs per stage (validated on the host).
        iters: fixed-point iterations (static). damping: weight of the previous durations in
            each update (static, 0..1). isolated: skip the iteration (contention off).
        scan: static, how the completion times are computed (``_completion``).

    Returns:
        Scalar makespan T = max_i C_i in µs.
    """
    p_seg = alloc[tabs.seg_stage]                                 # (K_pad,)
    valid = plan.valid
    seg = plan.seg
    _, N1, NC, NP = tabs.tau.shape
    rows = tabs.rows                                              # (tau, busy, conc, power)
    r0 = (seg * N1 + p_seg[seg]) * NC                             # (H,) first row of each task
    iso4 = rows[r0 * NP].T                                        # (4, H) at c = p = 0
    tau_iso = jnp.where(valid, iso4[0], 0.0)
    if isolated or iters == 0:
        return jnp.max(_completion(plan, arrs, tau_iso, scan))
    iso = iso4[1:]                                                # (3, H)
    safe_iso = jnp.maximum(tau_iso, 1e-9)

    def body(_, carry):
        tau, vals = carry
        C = _completion(plan, arrs, tau, scan)
        S = C - tau
        tsafe = jnp.maximum(tau, 1e-9)
        busy_o, conc_o, power_o = lane_integrals(plan, S, C, vals / tsafe[None])
        f = jnp.clip(busy_o / tsafe, 0.0, 1.0)   # union bound of the other stages' busy share
        fb = jnp.maximum(f * tsafe, 1e-9)
        cb = conc_o / fb
        pb = power_o / fb
        ic, fc = interp_weights(tabs.conc_grid, cb)
        ip, fp = interp_weights(tabs.power_grid, pb)
        v4 = bilinear_rows(rows, r0, NP, ic, fc, ip, fp)                       # (4, H)
        tb = jnp.maximum(v4[0], 1e-9)
        rate = (1.0 - f) / safe_iso + f / tb
        new = jnp.where(valid, 1.0 / rate, 0.0)
        busy_v = v4[1:]
        new_vals = new[None] * ((1.0 - f)[None] * iso / safe_iso[None] + f[None] * busy_v / tb[None])
        tau2 = damping * tau + (1.0 - damping) * new
        vals2 = damping * vals + (1.0 - damping) * jnp.where(valid[None], new_vals, 0.0)
        return tau2, vals2

    tau, _ = jax.lax.fori_loop(0, iters, body, (tau_iso, jnp.where(valid[None], iso, 0.0)))
    return jnp.max(_completion(plan, arrs, tau, scan))


def vc_batch_impl(tabs, plan, arrs, allocs, iters, damping, isolated, scan):
    """``vc_makespan`` vmapped over allocations (B, D) -> (B,) µs."""
    return jax.vmap(lambda a: vc_makespan(tabs, plan, arrs, a, iters, damping, isolated,
                                          scan))(allocs)


#: The compiled batch entry point (static: iters, damping, isolated, scan).
VC_STATIC_ARGNUMS = (4, 5, 6, 7)
vc_batch = ProgramCache(vc_batch_impl, VC_STATIC_ARGNUMS)  # bounded (programs.py)


def fine_bucket(x: int, minimum: int = 8) -> int:
    """Round ``x`` up to one of four steps per power of two: a multiple of
    max(``minimum``, 2^(floor(log2 x) - 2)), and at least ``minimum``. Padding is at most 25%
    once x >= 4 x ``minimum`` (below, up to the next multiple of ``minimum``: 9 -> 16); few
    distinct shapes to compile.

    Args:
        x: a count (tasks), int >= 0. minimum: the smallest bucket and step, int >= 1.

    Returns:
        The bucket, int >= max(x, minimum).
    """
    x = max(int(x), minimum)
    step = max(minimum, 1 << max(x.bit_length() - 3, 0))
    return -(-x // step) * step


#: Most lane-plan triples (``lanes.LanePlan.triples``) for which a CPU takes the slices form of
#: the overlap integrals by default (``VContentionEvaluator(integrals=None)``); a plan with more
#: takes the gather form. The slices form writes one slice of the partner row per triple into
#: the program, so tracing and compiling it grow with the triples (1-1.6 s a program at 200-560
#: triples, traced again in every process even where JAX's persistent cache holds it), while
#: the gather form's program does not; a search calls each program a few dozen times on small
#: batches, so that cost decides. Measured on the 2-core box (one GPT-OSS 120B B200 grid point
#: per search, ``experiments/bench_integrals.py``; the threshold was read off a first run with
#: it at 64, ``results/bench_integrals_cpu_t64.json``, and ``results/bench_integrals_cpu.json``
#: is the run after): up to 30 triples the two forms are within run-to-run noise (the main job,
#: whose plans have at most 30: slices 13.3 and 15.1 s of search against 14.1 and 15.3 s for
#: the gather in the two runs); at 44-126 the gather form is 8-26% faster on a first run; at
#: 234-560 (D = 4-6, m = 8-16) 1.7-2.4x on a first run and 1.2-1.9x on a second; the records
#: are the same throughout. The slices form stays the faster kernel per allocation on large
#: batches (2.3-5.1x at m = 8, D = 5 in chunks of 64-256), for a caller that scores many
#: allocations of one plan and asks for it.
GATHER_MIN_TRIPLES = 32

#: Most lane-plan triples for which a CPU takes the slices form when the caller reuses its
#: programs (``VCOptions.reuse``: a sweep's worker scoring many grid points of one structure
#: family, ``app.searchrun.reuses_programs``). There the tracing is paid once per family and
#: the calls decide. Measured on the 2-core box (2026-12-07,
#: ``experiments/bench_integrals_reuse.py``, docs/results.md "Speed", the reuse rule: one
#: process scoring the first 6 GPT-OSS 120B B200 frontier-study points of a family, warm JAX
#: cache): up to 126 triples the slices form's points after the first cost 0.68-0.96x the
#: gather form's (D = 2, m = 16; D = 4, m = 4 and 8; D = 6, m = 4; D = 3, m = 8) and its first
#: point -1.4..+2.4 s, so the family cost 0.72-0.88x (1.15x at D = 3, m = 8); at 196-280
#: triples its first point costs 2.0-2.1x (+7 to +15 s) and the later ones 0.86-1.31x, the
#: family 1.35-1.68x. The same configurations throughout. (The frontier study on a 16-CPU host
#: took 8,460 CPU-s with the slices for every plan and 10,329 with ``GATHER_MIN_TRIPLES``.)
GATHER_MIN_TRIPLES_REUSED = 128

#: Largest task DAG (tasks) whose small batches ``VContentionEvaluator`` pads to its chunk on a
#: CPU by default (``pad_small``; measured: docs/results.md "Speed").
PAD_SMALL_MAX_TASKS = 768


# ============================================================================ API
class VContentionEvaluator:
    """Scores many SM allocations of ONE (cut, D, w, m, policy) with vectorised contention.

    Args:
        graph: region graph built for m microbatches. seg_of, D, w, policy: the structure.
        hw: the GPU. model: ``ContentionModel`` (default calibrated; ``off()`` = static
            durations, identical to ``evaluator.Evaluator``).
        hits: (n,) per-kernel L2 hit fractions; None = ``estimate_hits`` on
            ``options.ref_alloc`` with the L2 policy ``options.cache``.
        streams_per_stage: k streams per stage (the task DAG's stage edge, ``Evaluator``).
            Approximation for k > 1: tasks of one stage on different streams overlap and load
            HBM and the power cap like tasks of other stages (the lane plan pairs tasks of
            different lanes), but each keeps its duration table on the whole pool: the SMs they
            share in the event simulator are not modelled (docs/method.md, "Streams per stage").

        options: ``score.vcoptions.VCOptions`` (None: the defaults): the hit replay's L2 policy
            and reference allocation, the fixed point, chunks, paddings and kernel.

    Raises:
        ValueError: an illegal cut/D/w, bad hits, iters not an integer >= 0, damping outside
            [0, 1); chunk, block, level_unroll or workers not an integer >= 1 (bool, float,
            str, NaN refused); packed not True, False or None, or given with
            ``integrals="gather"``; inline_tables not True or False; integrals not in
            ``vcbatch.INTEGRALS``; reuse not True or False (every message names its argument).
    """

    def __init__(self, graph: OpGraph, seg_of: Sequence[int], D: int, w: int, hw: Hardware,
                 policy: str = DEFAULT_POLICY, model: ContentionModel | None = None,
                 hits: np.ndarray | None = None, streams_per_stage: int = 1,
                 options: VCOptions | None = None) -> None:
        o = VCOptions() if options is None else options
        cache, ref_alloc, iters, damping, dtype = (o.cache, o.ref_alloc, o.iters, o.damping,
                                                   o.dtype)
        chunk, scan, workers, packed, block = o.chunk, o.scan, o.workers, o.packed, o.block
        inline_tables, level_unroll, pad_small, integrals = (o.inline_tables, o.level_unroll,
                                                             o.pad_small, o.integrals)
        flag(o.reuse, "reuse")
        pad_lanes, pad_positions, pad_levels, pad_width = (o.pad_lanes, o.pad_positions,
                                                           o.pad_levels, o.pad_width)
        pad_preds, pad_segments, pad_tasks, pad_window = (o.pad_preds, o.pad_segments,
                                                          o.pad_tasks, o.pad_window)
        cpu = jax.default_backend() == "cpu"
        iters = pos_int(iters, "iters", minimum=0)
        if not finite(damping, "damping", lo=0.0) < 1.0:
            raise ValueError(f"damping must be in [0, 1), got {damping!r}")
        self.chunk = pos_int((64 if cpu else 65536) if chunk is None else chunk, "chunk")
        pad_small = flag(pad_small, "pad_small", allow_none=True)
        if block is not None:
            block = pos_int(block, "block")
        if level_unroll is not None:
            level_unroll = pos_int(level_unroll, "level_unroll")
        packed = flag(packed, "packed", allow_none=True)
        inline_tables = flag(inline_tables, "inline_tables")
        if integrals is not None:
            integrals = check_integrals(integrals)
        if workers is not None:
            workers = pos_int(workers, "workers")
        K = D + w
        check_cut(seg_of, graph.n, graph.edges, K)
        self.model = ContentionModel() if model is None else model
        self.graph, self.hw, self.D, self.w, self.K = graph, hw, D, w, K
        self.seg_of = tuple(int(s) for s in seg_of)
        self.policy = policy
        self.dag = build_task_dag(graph.n, graph.edges, graph.cross_edges, self.seg_of, D, w,
                                  graph.num_regions, graph.microbatches, policy,
                                  streams_per_stage=streams_per_stage)
        self.arrs = DagArrays.from_dag(self.dag, pad_tasks or fine_bucket(self.dag.T),
                                       pad_preds, pad_window)
        self.pad_small = (cpu and self.dag.T <= PAD_SMALL_MAX_TASKS if pad_small is None
                          else pad_small)
        self.plan = LanePlan.from_dag(self.dag, self.arrs.T_pad, pad_lanes, pad_positions,
                                      pad_levels, pad_width, pad_preds, dtype=dtype)
        scan = "batched" if scan is None else scan
        if scan not in SCANS:
            raise ValueError(f"scan must be one of {SCANS}, got {scan!r}")
        self.scan = scan
        if scan != "batched" and (packed is not None or block is not None or inline_tables
                                  or level_unroll is not None or integrals is not None):
            raise ValueError("packed, block, inline_tables, level_unroll and integrals apply "
                             f"to scan='batched' only, got scan={scan!r}")
        self.level_unroll = 2 if level_unroll is None else level_unroll
        if integrals is None:  # a layout of the slices (packed) asks for the slices
            limit = GATHER_MIN_TRIPLES_REUSED if o.reuse else GATHER_MIN_TRIPLES
            small = len(self.plan.triples) <= limit
            integrals = "slices" if (cpu and small) or packed is not None else "gather"
        if integrals == "gather" and packed is not None:
            raise ValueError("packed applies to integrals='slices' only (the gathered form sums "
                             f"the three rates in one reduction), got packed={packed!r}")
        self.integrals = integrals
        # on a CPU, programs a sweep reuses keep XLA's optimisations and the others compile
        # fast (``programs.FAST_COMPILE``: compiling is most of their cost); an accelerator
        # keeps XLA's defaults (level 0 was never measured there)
        self.reuse = o.reuse
        self.fast_compile = cpu and not o.reuse
        if workers is None:
            workers = min(2, os.cpu_count() or 1) if cpu else 1
        self.workers = workers
        if hits is None:
            hits = (np.zeros(graph.n) if self.model.isolated or cache == "none" else
                    reference_hits(graph, self.seg_of, D, w, hw, policy, streams_per_stage,
                                   cache, ref_alloc))
        self.hits = np.asarray(hits, dtype=float)
        # the cut's tables, filled pool by pool as the batch-last kernel's allocations need
        # them (``vctables.PoolTables``; the other kernels read ``tabs``: every pool)
        self.pool_tables = PoolTables(graph, self.seg_of, K, w, hw, self.model, self.hits,
                                      dtype, pad_segments, cells=scan == "batched")
        if scan != "batched" or inline_tables:   # whole now: what a cache measures it holds
            self.pool_tables.full()
        self.packed = (None if self.integrals == "gather"   # the slices form's layout only
                       else True if packed is None else packed)
        self.block = block if block is not None or cpu else 128
        self.grids = (grid_spec(self.pool_tables.index.conc_grid),
                      grid_spec(self.pool_tables.index.power_grid))
        self.inline_tables, self._inline = inline_tables, None
        self.iters, self.damping = int(iters), float(damping)
        self.dtype = dtype

    @property
    def tabs(self) -> SegTables:
        """The segment tables on every pool (``vctables.segment_tables``; made on first use)."""
        return self.pool_tables.full()

    @property
    def cells(self) -> jax.Array | None:
        """The batch-last kernel's grid cells on every pool (``vcbatch.cell_table``'s layout,
        16 x the rows), or None for the other kernels."""
        if self.scan != "batched":
            return None
        self.pool_tables.fill(np.arange(1, self.hw.num_sms + 1))
        return self.pool_tables.cells()

    @classmethod
    def for_config(cls, graph: OpGraph, cfg: Config, hw: Hardware,
                   **kw) -> "VContentionEvaluator":
        """Evaluator of ``cfg``'s structure; ``cfg.alloc`` is the reference of the hit replay.

        Args:
            graph, hw: as the constructor. cfg: the structure (and the hit replay's reference).
            **kw: ``model``, ``hits`` and any field of ``VCOptions``.
        """
        kw.setdefault("ref_alloc", cfg.alloc)
        model, hits = kw.pop("model", None), kw.pop("hits", None)
        return cls(graph, cfg.seg_of, cfg.D, cfg.w, hw, policy=cfg.policy, model=model,
                   hits=hits, streams_per_stage=kw.pop("streams_per_stage", cfg.streams_per_stage),
                   options=VCOptions(**kw))

    def _check_allocs(self, allocs: np.ndarray) -> np.ndarray:
        a = check_alloc_batch(allocs, self.D, self.hw.num_sms)
        if np.any(a.sum(axis=1) > self.hw.num_sms):
            raise ValueError(f"allocations: SMs must sum to at most {self.hw.num_sms}")
        return a

    @property
    def batched_static(self) -> tuple:
        """The static arguments of the batch-last kernel's compiled entry point
        (``vcbatch.VCB_STATIC_ARGNUMS``: iters, damping, isolated, packed, block, grids,
        level_unroll, integrals) for this evaluator's options."""
        return (self.iters, self.damping, bool(self.model.isolated), self.packed, self.block,
                self.grids, self.level_unroll, self.integrals)

    def makespan(self, allocs: np.ndarray) -> np.ndarray:
        """Makespans (µs) of integer allocations (B, D) -> float64 (B,), in chunks of ``chunk``.

        Raises:
            ValueError: wrong shape, non-integer SMs, a pool outside 1..N, sum above N.
        """
        a = self._check_allocs(allocs).astype(np.int32)
        if self.scan == "batched":
            static = self.batched_static
            if self.inline_tables:
                if self._inline is None:  # this evaluator's own program, tables as constants
                    tabs, cells, plan = self.tabs, self.cells, self.plan
                    self._inline = jax.jit(
                        lambda c: vcb_batch_impl(tabs, cells, plan, c, *static),
                        compiler_options=FAST_COMPILE if self.fast_compile else None)
                return run_in_chunks(a, self.chunk, lambda c: self._inline(to_device(c)),
                                     self.workers, self.pad_small)
            pt = self.pool_tables
            pt.fill(a)
            index, cells = pt.index, pt.cells()
            prog = vcb_batch_fast if self.fast_compile else vcb_batch
            return run_in_chunks(a, self.chunk, lambda c: prog(
                index, cells, self.plan, to_device(c), *static), self.workers,
                self.pad_small)
        return run_in_chunks(a, self.chunk, lambda c: vc_batch(
            self.tabs, self.plan, self.arrs, to_device(c), self.iters, self.damping,
            bool(self.model.isolated), self.scan), self.workers, self.pad_small)


class ContentionEstimator:
    """The cheap estimator of the search when the exact scorer is the event simulator: its hard
    ``makespan`` is the contention-aware ``VContentionEvaluator`` (``contention``).

    It is not an ``Evaluator``; it holds one (``static``, the same structure on isolated kernel
    durations) and lends, by name, the two capabilities the contention model lacks
    (docs/method.md §3: the fast scorer): ``stage_service`` (``score.protocol.StageService``,
    the service-proportional seed) and ``smooth``/``smooth_terms`` (``score.protocol.Smooth``,
    the optax relaxation), both the STATIC model's: a relaxation under contention anneals the
    static smooth makespan, then rounds and ranks with the contention-aware ``makespan``.
    Implements ``score.protocol.Scorer``.

    Args:
        graph, seg_of, D, w, hw, policy, streams_per_stage: the structure (as ``Evaluator``).
        table: static kernel durations (n, N+1) µs (None = ``StaticDurationModel``).
        model: the event simulator's ``ContentionModel`` (default calibrated); cache: its L2
            policy (``"lru"``, ``"fifo"``, ``"none"``) for the hit estimate.
        **vc_kw: further ``VContentionEvaluator`` options (fields of ``VCOptions``: iters,
            damping, chunk, paddings).

    Raises:
        ValueError: as ``Evaluator`` and ``VContentionEvaluator``.
    """

    def __init__(self, graph: OpGraph, seg_of: Sequence[int], D: int, w: int, hw: Hardware,
                 policy: str = DEFAULT_POLICY, table: np.ndarray | None = None,
                 model: ContentionModel | None = None, cache: str = "lru",
                 streams_per_stage: int = 1, **vc_kw) -> None:
        self.static = Evaluator(graph, seg_of, D, w, hw, policy=policy, table=table,
                                streams_per_stage=streams_per_stage)
        self.graph, self.hw, self.D, self.w, self.K = graph, hw, D, w, self.static.K
        self.dtype = self.static.dtype
        self.contention = VContentionEvaluator(graph, seg_of, D, w, hw, policy=policy,
                                               model=model, streams_per_stage=streams_per_stage,
                                               options=VCOptions(cache=cache, **vc_kw))

    def makespan(self, allocs: np.ndarray, feasible_only: bool = True) -> np.ndarray:
        """Contention-aware makespans (µs) of integer allocations (B, D) -> float64 (B,).

        Raises:
            ValueError: as ``Evaluator.makespan`` (shape, integers, feasibility).
        """
        a = (self.static.check_feasible(allocs) if feasible_only
             else check_alloc_batch(allocs, self.D, self.static.seg_table.shape[1] - 1))
        return self.contention.makespan(a)

    def check_feasible(self, allocs: np.ndarray) -> np.ndarray:
        """As ``Evaluator.check_feasible`` (the same allocation space)."""
        return self.static.check_feasible(allocs)

    def stage_service(self, sms: int) -> np.ndarray:
        """The static model's stage service (``Evaluator.stage_service``): float64 (D,) µs."""
        return self.static.stage_service(sms)

    def smooth_terms(self) -> SmoothTerms:
        """The static model's smooth terms (``Evaluator.smooth_terms``)."""
        return self.static.smooth_terms()

    def smooth(self, allocs, temp):
        """The static model's smooth makespans (``Evaluator.smooth``), jax array (B,) µs."""
        return self.static.smooth(allocs, temp)
