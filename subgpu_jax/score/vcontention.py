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

import chex
import jax
import jax.numpy as jnp
import numpy as np

from subgpu_jax.sim.contention import ContentionModel
from subgpu_jax.score.protocol import SmoothTerms
from subgpu_jax.score.evaluator import (DagArrays, Evaluator, check_alloc_batch, completion_times,
    run_in_chunks, validate_durations)
from subgpu_jax.model.checks import finite, flag, pos_int
from subgpu_jax.model.graph import OpGraph, StaticDurationModel
from subgpu_jax.model.kernelcost import is_gemm, op_cost
from subgpu_jax.model.lru import ByteLRU
from subgpu_jax.score.poolwork import calibrated_pools, lone_static_pools, work_signature
from subgpu_jax.model.hardware import Hardware
from subgpu_jax.space.config import Config, binding, check_cut, even_allocation
from subgpu_jax.sim.eventsim import EventSimulator, check_config, lone_makespan
from subgpu_jax.sim.l2cache import check_policy
from subgpu_jax.score.programs import ProgramCache, to_device
from subgpu_jax.score.lanes import LanePlan, incomparable_pairs, lane_integrals, level_completion_times
from subgpu_jax.score.vcoptions import VCOptions
from subgpu_jax.score.vcbatch import (cell_table, check_integrals, grid_spec, interp_weights,
                                     vcb_batch, vcb_batch_impl)
from subgpu_jax.space.taskdag import TaskDAG, bucket, build_task_dag

__all__ = ["SegTables", "uncovered_overlaps", "kernel_profiles", "segment_tables", "estimate_hits",
           "vc_makespan", "VContentionEvaluator", "ContentionEstimator", "CONC_GRID", "POWER_GRID",
           "fine_bucket", "VC_STATIC_ARGNUMS", "SCANS", "PAD_SMALL_MAX_TASKS", "HitCounter",
           "vc_batch", "vc_batch_impl", "bilinear_rows"]

#: Grid of the other stages' bytes in flight, as a fraction of the whole-GPU window
#: (``inflight_per_sm_B * num_sms``); the response curve saturates at 1 (measured H200 curve).
CONC_GRID: np.ndarray = np.linspace(0.0, 1.0, 33)
#: Grid of the other stages' compute power (sum of pi = min(1, g p / N) of computing kernels);
#: the sum over a full partition is at most ``compute_gain`` * budget / N ~ 1.08 on H200.
POWER_GRID: np.ndarray = np.linspace(0.0, 1.25, 6)

_BIG = 1e30  # sentinel time (µs) of padded stage slots
#: The memo of ``kernel_profiles``' per-kernel tables (hardware and calibration ids, model
#: parameters, grids, work signature, hit fraction; the hardware and calibration objects kept
#: alive in the value), bounded by bytes: about 0.94 MB a kernel, so ~70 kernels (the distinct
#: kernels of a grid point's cuts).
KERNEL_PROFILES = ByteLRU(64 * 2**20)
#: Whether the tables charge the others' L2 traffic on the shared L2 port
#: (``kernel_profiles(shared_l2=...)``).
SHARED_L2 = True
#: Kernels (``VContentionEvaluator(scan=...)``): the vmapped ``vc_makespan`` with its completion
#: times by the dispatch-order window scan, by DAG levels or as a straight-line program; or the
#: batch-last kernel of ``score.vcbatch`` (``"batched"``: same model, allocations as the trailing
#: contiguous axis).
SCANS = ("window", "levels", "straight", "batched")


# ============================================================================ host tables
def kernel_profiles(graph: OpGraph, hw: Hardware, model: ContentionModel | None = None,
                    hits: np.ndarray | None = None, conc_grid: np.ndarray = CONC_GRID,
                    power_grid: np.ndarray = POWER_GRID,
                    shared_l2: bool = SHARED_L2) -> dict[str, np.ndarray]:
    """Per-kernel time and resource integrals under a constant external load (host, numpy).

    For kernel u on a pool of p SMs (p = 0..N; 0 is treated as 1), beside other kernels holding
    ``conc_grid[a] * window * N`` bytes in flight with total compute power ``power_grid[b]``, the
    rates follow ``BoundModel.rates_of`` for u (its HBM share is proportional to its bytes in
    flight; the others' ceiling is taken equal to u's; the others' L2 and NVLink use is ignored):
    compute rate R_u pi_u / max(1, pi_u + pi_o); bytes in flight c_u = min(p_u w_u, cmax, miss
    bytes) with w_u the kernel's own window per SM; HBM share = curve((c_u + c_o) / (w N)) * peak_u * c_u / (c_u + c_o), capped by
    phi_u p_u issue; data rate = min(p_u issue, share / phi_u); L2 bandwidth scaling; network
    after the setup latency at ``nvlink_Bps``. Duration = launch + fixed phase + max(compute,
    data, network). With a calibration in ``model`` (``model.calibration``), every measured
    kernel uses on each pool the calibrated work the event simulator uses there (work scale on
    FLOPs, bytes and payload; fixed phase; window: ``calibrated_pools``), so its entry at no
    external load is its measured time alone; ``isolated`` entries are the measured times.

    Args:
        graph: the region graph (n kernels). hw: the GPU. model: rate-model parameters (default
            ``ContentionModel()``); with ``model.isolated`` (``ContentionModel.off()``)
            every entry is the static duration (the measured time for a calibrated kernel).
        hits: (n,) fraction (0..1) of each kernel's object-read bytes (weights + activation
            reads) served by L2; None = 0.
        conc_grid: (NC,) others' bytes in flight / (w N), increasing, from 0.
        power_grid: (NP,) others' compute power, increasing, from 0.

    Returns:
        dict of float64 arrays (n, N+1, NC, NP): ``tau`` µs, ``busy`` µs with the data counter
        active, ``conc`` (bytes in flight / (w N)) x µs, ``power`` pi x µs of compute activity.

    Raises:
        ValueError: hits of the wrong shape or outside 0..1; grids not increasing from 0.
    """
    model = ContentionModel() if model is None else model
    bm = model.bind(hw, lone_makespan)
    cal = model.calibration
    # the kernels' uncalibrated work; a calibration enters per pool below (calibrated_pools)
    bm0 = bm if cal is None else model.replace(calibration=None).bind(hw, lone_makespan)
    n, N = graph.n, hw.num_sms
    cg = np.asarray(conc_grid, dtype=float)
    pg = np.asarray(power_grid, dtype=float)
    for nm, g in (("conc_grid", cg), ("power_grid", pg)):
        if g.ndim != 1 or g.size < 2 or g[0] != 0.0 or np.any(np.diff(g) <= 0):
            raise ValueError(f"{nm} must be 1-D, increasing, starting at 0")
    h = np.zeros(n) if hits is None else np.asarray(hits, dtype=float)
    if h.shape != (n,) or np.any(~np.isfinite(h)) or np.any(h < 0) or np.any(h > 1):
        raise ValueError(f"hits must be ({n},) fractions in 0..1")
    NC, NP = cg.size, pg.size
    shape = (n, N + 1, NC, NP)
    out = {k: np.zeros(shape) for k in ("tau", "busy", "conc", "power")}
    P = np.arange(N + 1, dtype=float)
    P[0] = 1.0
    static = StaticDurationModel(hw)
    if model.isolated:
        for u, k in enumerate(graph.kernels):
            t_iso = (cal.times(k, P, warn=False) if cal is not None and cal.has(k)
                     else static.kernel_time_us(k, P))
            out["tau"][u] = np.asarray(t_iso, dtype=float)[:, None, None]
            # isolated kernels still report their resource use (for inspection only)
            out["busy"][u] = out["tau"][u]
        return out
    W = bm.full_window
    xs, ys = np.asarray(bm.curve_x), np.asarray(bm.curve_y)
    co = (cg * W)[None, :, None]                          # (1, NC, 1) bytes
    po = pg[None, None, :]                                # (1, 1, NP)
    # The others' demand on the shared L2 port (``BoundModel.rates_of`` scales every running
    # kernel's data and re-read rates by l2 / total demand): their HBM bytes at the grid's
    # concurrency, each costing ``miss_l2_cost`` L2 bytes (as misses: their hit shares are not in
    # the table), and their operand re-reads at compute power ``po``, as tensor-core GEMMs at the
    # bf16 rate with the tile re-read ``dtype bytes / tile_edge`` per FLOP (large GEMMs' value).
    beta_o = (2.0 / model.tile_edge) if model.tile_edge > 0 else 0.0
    rc_full_o = hw.flops_rate("bf16") if shared_l2 else 0.0
    # The loaded memory latency (``ContentionModel.latency_gain``; the event simulator dilates a
    # kernel's fixed phase at its start by 1 + gain x min(1, others' HBM bytes/s / copy peak)):
    # the others' HBM rate at the grid's concurrency alone, on the response curve at the copy
    # peak.
    gain = float(model.latency_gain) if shared_l2 else 0.0
    dil = 1.0 + gain * np.minimum(1.0, np.interp(cg, xs, ys))[None, :, None]  # (1, NC, 1)
    def profile(u: int, k) -> tuple:
        """Kernel ``k``'s four tables (N+1, NC, NP) at its hit fraction h[u]."""
        out = {}
        w = bm0.work(k, 1)
        oc = op_cost(k, hw, P)                            # SMs reached, fixed phase per pool
        pu = oc.sms[:, None, None]                        # (N+1, 1, 1)
        # per pool (N+1, 1, 1): work scale, fixed phase µs, window B/SM, network payload bytes
        # (scaled) and whether the network phase runs: the uncalibrated kernel's, or the
        # calibrated KernelWork the event simulator uses on that pool (calibrated_pools)
        if cal is not None and cal.has(k):
            ws, fx, win, comm_b, comm_f = calibrated_pools(bm, k, cal, hw)
        else:
            ws, fx, win = 1.0, oc.fixed_us[:, None, None], float(w.window_B_per_sm)
            comm_b, comm_f = float(w.comm_bytes), float(w.comm)
            if model.lone_static and is_gemm(k) and k.flops > 0:
                ws, fx = lone_static_pools(bm0, k, hw)
        pi = np.minimum(1.0, bm.gain * pu / bm.N)
        read_b = k.weight_bytes + sum(b for _, b in k.act_reads)
        data0 = w.obj_bytes + w.extra_hbm_bytes   # + the collective proxy's payload traffic
        phi = (data0 - h[u] * read_b) / data0 if data0 > 0 else 0.0   # miss share (any scale)
        data = data0 * ws                         # the work scale multiplies bytes and FLOPs
        miss = data * phi
        flops = w.flops * ws
        # compute
        if w.flops > 0:
            ptot = pi + po
            cs = np.where(ptot > 1.0, 1.0 / np.maximum(ptot, 1e-30), 1.0)
            rc = w.rate_full * pi * cs
        else:
            rc = np.zeros_like(pi + po)
        # HBM share and data rate
        if data0 > 0:
            issue = pu * bm.issue
            if phi > 0:
                # bytes in flight this kernel sustains per SM (KernelWork.window_B_per_sm:
                # kernel-aware contention, per pool when calibrated)
                c = np.minimum(pu * win, bm.cmax)
                if bm.demand_cap:
                    c = np.minimum(c, miss)
                ct = c + co
                frac = np.interp(ct / W, xs, ys)
                share = frac * w.peak_Bps * c / ct
                rh = np.minimum(phi * issue, share)
                rd = np.where(rh < issue * phi, rh / phi, issue)
            else:
                c = np.zeros_like(pu)
                rd = issue + 0.0 * co
            ld = rd * (1.0 + (bm.kappa - 1.0) * phi)
            lc = w.reread_per_flop * rc
            lo = 0.0
            if shared_l2:   # the others' L2 traffic on the same port (see above)
                if phi > 0:
                    ho = frac * w.peak_Bps * co / np.maximum(ct, 1e-30)
                else:
                    ho = np.interp(co / W, xs, ys) * w.peak_Bps + 0.0 * pu
                ptot_o = pi + po
                rco = rc_full_o * po * np.where(ptot_o > 1.0, 1.0 / np.maximum(ptot_o, 1e-30),
                                                1.0)
                lo = ho * bm.kappa + beta_o * rco
            sc = np.where(ld + lc + lo > bm.l2, bm.l2 / np.maximum(ld + lc + lo, 1e-30), 1.0)
            td = data / (rd * sc) * 1e6
            if w.reread_per_flop > 0 and w.flops > 0:
                # both counters slowed by the L2 port until the first finishes; then the other
                # runs alone on the port (the event simulator recomputes rates at that event)
                tc = flops / (rc * sc) * 1e6
                sd = np.minimum(1.0, bm.l2 / np.maximum(ld + lo, 1e-30))
                scc = np.minimum(1.0, bm.l2 / np.maximum(lc + lo, 1e-30))
                td_after = tc + (data - rd * sc * tc * 1e-6) / (rd * sd) * 1e6
                tc_after = td + (flops - rc * sc * td * 1e-6) / (rc * scc) * 1e6
                first_c = tc <= td
                td, tc = np.where(first_c, td_after, td), np.where(first_c, tc, tc_after)
                rc = flops / tc * 1e6
        else:
            c = np.zeros_like(pu)
            td = np.zeros_like(pu + co + po)
        tc = (flops / rc * 1e6) if w.flops > 0 else np.zeros_like(td)
        tn = np.where(np.asarray(comm_f) > 0, bm.setup_us + comm_b / bm.nvlink * 1e6, 0.0)
        t = bm.launch_us + fx * dil + np.maximum(np.maximum(tc, td), tn)
        bshape = np.broadcast_shapes(t.shape, (N + 1, NC, NP))
        out["tau"] = np.broadcast_to(t, bshape)
        out["busy"] = np.broadcast_to(td, bshape)
        out["conc"] = np.broadcast_to(c / W * td, bshape)
        out["power"] = np.broadcast_to(pi * tc, bshape)

        return tuple(np.array(out[x]) for x in ("tau", "busy", "conc", "power"))

    # kernels of every layer and every cut of one graph repeat: memoised by their work
    # signature and hit fraction (4,896 rows, 382 distinct, in a profile of the main job)
    base = (id(hw), bm.model_key, id(cal), cg.tobytes(), pg.tobytes(), bool(shared_l2))
    for u, k in enumerate(graph.kernels):
        key = (*base, work_signature(k), float(h[u]))
        # (hw and cal stay alive while their ids are in a key; held by a closure, which the
        # cache's byte count does not walk into)
        tabs, _keep = KERNEL_PROFILES.get_or_make(key, lambda: (profile(u, k),
                                                                lambda: (hw, cal)))
        for x, t in zip(("tau", "busy", "conc", "power"), tabs):
            out[x][u] = t
    return out


@chex.dataclass(frozen=True, mappable_dataclass=False)
class SegTables:
    """Per-segment tables of one cut (a ``chex.dataclass`` pytree of arrays), K_pad =
    bucket(K, 2), N = num_sms.

    Attributes:
        tau: (K_pad, N+1, NC, NP) µs, segment duration on p SMs beside external load (c_o, pi_o).
        busy: same shape, µs during which the segment's data counter is active.
        conc: same shape, (bytes in flight / whole-GPU window) x µs.
        power: same shape, compute power pi x µs.
        seg_stage: (K_pad,) int32 stage of each segment (pads 0).
        conc_grid: (NC,) and power_grid: (NP,) the grid abscissae (uniformly spaced).
        rows: (K_pad * (N+1) * NC * NP, 4) the four tables as rows (tau, busy, conc, power),
            row ((k * (N+1) + p) * NC + c) * NP + q: what the JAX core gathers.
    """

    tau: jax.Array
    busy: jax.Array
    conc: jax.Array
    power: jax.Array
    seg_stage: jax.Array
    conc_grid: jax.Array
    power_grid: jax.Array
    rows: jax.Array


def segment_tables(graph: OpGraph, seg_of: Sequence[int], K: int, w: int, hw: Hardware,
                   model: ContentionModel | None = None, hits: np.ndarray | None = None,
                   dtype=jnp.float32, pad_segments: int | None = None) -> SegTables:
    """Sum ``kernel_profiles`` over the kernels of each segment of the cut ``seg_of``.

    Args:
        graph, hw, model, hits: as in ``kernel_profiles``.
        seg_of: (n,) segment of each kernel, K segments; w: boundary reuse (binding).
        dtype: float dtype of the tables. pad_segments: K_pad (default bucket(K, 2)).

    Returns:
        ``SegTables`` (padded segments are all-zero, stage 0).

    Raises:
        ValueError: an illegal cut, or a table entry negative/NaN.
    """
    check_cut(seg_of, graph.n, graph.edges, K)
    for nm, gr in (("CONC_GRID", CONC_GRID), ("POWER_GRID", POWER_GRID)):
        if not np.allclose(np.diff(gr), gr[1] - gr[0]):
            raise ValueError(f"{nm} must be uniformly spaced (the JAX core interpolates by "
                             "arithmetic)")
    prof = kernel_profiles(graph, hw, model, hits)
    Kp = pad_segments or bucket(K, 2)
    if Kp < K:
        raise ValueError(f"pad_segments={Kp} smaller than K={K}")
    seg = np.asarray(seg_of)
    members = [np.flatnonzero(seg == k) for k in range(K)]
    tabs = {}
    for key, arr in prof.items():
        # each segment's rows added in kernel order from 0 (bit for bit what np.add.at did,
        # which was 6.6 s of a 111 s main-job profile)
        t = np.zeros((Kp,) + arr.shape[1:])
        for k, idx in enumerate(members):
            if idx.size:
                np.sum(arr[idx], axis=0, out=t[k])
        tabs[key] = t
    validate_durations(tabs["tau"], "segment duration table")
    stage = np.zeros(Kp, dtype=np.int32)
    stage[:K] = [binding(k, K, w) for k in range(K)]
    names = ("tau", "busy", "conc", "power")
    rows = np.stack([tabs[k] for k in names], -1).reshape(-1, 4)
    return SegTables(*(to_device(tabs[k], dtype) for k in names),
                     to_device(stage), to_device(CONC_GRID, dtype),
                     to_device(POWER_GRID, dtype), to_device(rows, dtype))


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
    same L2 table and policy) for ``cfg`` and records each kernel instance's hit and read bytes;
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
                               observer=obs).run()
    return obs.hit_rates()


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
            ``vcbatch.INTEGRALS`` (every message names its argument).
    """

    def __init__(self, graph: OpGraph, seg_of: Sequence[int], D: int, w: int, hw: Hardware,
                 policy: str = "wavefront", model: ContentionModel | None = None,
                 hits: np.ndarray | None = None, streams_per_stage: int = 1,
                 options: VCOptions | None = None) -> None:
        o = VCOptions() if options is None else options
        cache, ref_alloc, iters, damping, dtype = (o.cache, o.ref_alloc, o.iters, o.damping,
                                                   o.dtype)
        chunk, scan, workers, packed, block = o.chunk, o.scan, o.workers, o.packed, o.block
        inline_tables, level_unroll, pad_small, integrals = (o.inline_tables, o.level_unroll,
                                                             o.pad_small, o.integrals)
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
        if scan is None:
            scan = "batched"
        if scan not in SCANS:
            raise ValueError(f"scan must be one of {SCANS}, got {scan!r}")
        self.scan = scan
        if scan != "batched" and (packed is not None or block is not None or inline_tables
                                  or level_unroll is not None or integrals is not None):
            raise ValueError("packed, block, inline_tables, level_unroll and integrals apply "
                             f"to scan='batched' only, got scan={scan!r}")
        self.level_unroll = 2 if level_unroll is None else level_unroll
        if integrals is None:  # a layout of the slices (packed) asks for the slices
            integrals = "slices" if cpu or packed is not None else "gather"
        if integrals == "gather" and packed is not None:
            raise ValueError("packed applies to integrals='slices' only (the gathered form sums "
                             f"the three rates in one reduction), got packed={packed!r}")
        self.integrals = integrals
        if workers is None:
            workers = min(2, os.cpu_count() or 1) if cpu else 1
        self.workers = workers
        if hits is None:
            if self.model.isolated or cache == "none":
                hits = np.zeros(graph.n)
            else:
                if ref_alloc is None:
                    ref_alloc = even_allocation(hw.sm_budget, D, hw.sm_quantum,
                                                hw.min_pool_sms)
                R = graph.deployment.requests_per_gpu if graph.deployment is not None else None
                mb = R // graph.microbatches if R is not None else 1
                cfg = Config(D=D, w=w, seg_of=self.seg_of, alloc=tuple(int(a) for a in ref_alloc),
                             microbatch=mb, policy=policy, streams_per_stage=streams_per_stage)
                hits = estimate_hits(graph, cfg, hw, cache)
        self.hits = np.asarray(hits, dtype=float)
        self.tabs = segment_tables(graph, self.seg_of, K, w, hw, self.model, self.hits, dtype,
                                   pad_segments)
        # the batch-last kernel's table of grid cells (16 x the rows: built only when used)
        self.cells = (cell_table(np.asarray(self.tabs.rows), self.tabs.tau.shape, dtype)
                      if scan == "batched" else None)
        self.packed = (None if self.integrals == "gather"   # the slices form's layout only
                       else True if packed is None else packed)
        self.block = block if block is not None or cpu else 128
        self.grids = (grid_spec(self.tabs.conc_grid), grid_spec(self.tabs.power_grid))
        self.inline_tables, self._inline = inline_tables, None
        self.iters, self.damping = int(iters), float(damping)
        self.dtype = dtype

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
                    self._inline = jax.jit(lambda c: vcb_batch_impl(tabs, cells, plan, c,
                                                                     *static))
                return run_in_chunks(a, self.chunk, lambda c: self._inline(to_device(c)),
                                     self.workers, self.pad_small)
            return run_in_chunks(a, self.chunk, lambda c: vcb_batch(
                self.tabs, self.cells, self.plan, to_device(c), *static), self.workers,
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
                 policy: str = "wavefront", table: np.ndarray | None = None,
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
