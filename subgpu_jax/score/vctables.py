"""The host tables of the vectorised contention scorer (``score.vcontention``, docs/method.md
§3): per kernel, and summed per segment of a cut, the time and resource integrals of a kernel on
a pool of p SMs (0..N) beside a constant external load, on a grid of the other stages' bytes in
flight (``CONC_GRID``) and compute power (``POWER_GRID``), from the event simulator's rate rules
(``sim.contention.BoundModel``). Host numpy; the JAX core reads them.

Units: µs, bytes, SMs.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass
from typing import Any, Sequence

import chex
import jax
import jax.numpy as jnp
import numpy as np

from subgpu_jax.model.graph import OpGraph, StaticDurationModel
from subgpu_jax.model.hardware import Hardware
from subgpu_jax.model.kernelcost import is_gemm, op_cost
from subgpu_jax.model.lru import ByteLRU
from subgpu_jax.score.evaluator import validate_durations
from subgpu_jax.model.kernel import work_signature
from subgpu_jax.score.poolwork import calibrated_pools, lone_static_pools
from subgpu_jax.score.programs import to_device
from subgpu_jax.sim.contention import ContentionModel
from subgpu_jax.sim.eventsim import lone_makespan
from subgpu_jax.space.config import binding, check_cut
from subgpu_jax.space.taskdag import bucket

__all__ = ["CONC_GRID", "POWER_GRID", "PROFILE_MEMO", "SHARED_L2", "kernel_profiles",
           "SegTables", "segment_tables", "CellIndex", "PoolTables", "fill_cells", "POOL_ROWS"]

#: Grid of the other stages' bytes in flight, as a fraction of the whole-GPU window
#: (``inflight_per_sm_B * num_sms``); the response curve saturates at 1 (measured H200 curve).
CONC_GRID: np.ndarray = np.linspace(0.0, 1.0, 33)
#: Grid of the other stages' compute power (sum of pi = min(1, g p / N) of computing kernels);
#: the sum over a full partition is at most ``compute_gain`` * budget / N ~ 1.08 on H200.
POWER_GRID: np.ndarray = np.linspace(0.0, 1.25, 6)

#: The memo of ``kernel_profiles``' per-kernel tables (hardware and calibration ids, model
#: parameters, grids, work signature, hit fraction; the hardware and calibration objects kept
#: alive in the value), bounded by bytes: about 0.94 MB a kernel, so ~70 kernels (the distinct
#: kernels of a grid point's cuts).
PROFILE_MEMO = ByteLRU(64 * 2**20)
#: One pool's rows of a kernel's four tables (each (NC, NP)), by the ``PROFILE_MEMO`` key and
#: the pool: what ``PoolTables``' first fills compute for kernels whose whole table is not in
#: ``PROFILE_MEMO`` (6.3 KB a row; in a profile of the main job 11,094 rows asked, 4,250
#: distinct).
POOL_ROWS = ByteLRU(32 * 2**20)
#: Whether the tables charge the others' L2 traffic on the shared L2 port
#: (``kernel_profiles(shared_l2=...)``).
SHARED_L2 = True
@dataclass(frozen=True)
class _Load:
    """The constants of one ``kernel_profiles`` call that every kernel's tables read: the bound
    models (``bm`` with the calibration, ``bm0`` without), the GPU, the pools ``P`` (N+1,), the
    others' bytes in flight ``co`` (1, NC, 1) and compute power ``po`` (1, 1, NP), the response
    curve (``xs``, ``ys``, window ``W`` bytes), the shared-L2 terms and the fixed-phase dilation
    ``dil`` (1, NC, 1)."""

    bm: Any
    bm0: Any
    cal: Any
    model: ContentionModel
    hw: Hardware
    P: np.ndarray
    co: np.ndarray
    po: np.ndarray
    W: float
    xs: np.ndarray
    ys: np.ndarray
    shared_l2: bool
    beta_o: float
    rc_full_o: float
    dil: np.ndarray
    N: int
    NC: int
    NP: int
    pools: np.ndarray | None = None
    base: tuple = ()

    def at(self, pools: np.ndarray) -> "_Load":
        """The same load on the pools ``pools`` only (int (q,) pool sizes 0..N; 0 is 1 SM):
        every entry of a kernel's tables depends on its own pool alone, so the tables of this
        load are the rows ``pools`` of the whole one, bit for bit. Called on the whole load."""
        return dataclasses.replace(self, P=self.P[pools], pools=np.asarray(pools))

    def per_pool(self, a):
        """``a`` (N+1, ...) per pool, or a scalar, restricted to this load's pools."""
        return a if self.pools is None or np.ndim(a) == 0 else a[self.pools]


def _kernel_tables(env: "_Load", k, hit: float) -> tuple:
    """Kernel ``k``'s four tables (P, NC, NP) at its L2 hit fraction ``hit`` under the load
    grid ``env`` (``kernel_profiles``), on the load's P pools (all N+1 unless ``env.at``)."""
    out = {}
    w = env.bm0.work(k, 1)
    oc = op_cost(k, env.hw, env.P)                            # SMs reached, fixed phase per pool
    pu = oc.sms[:, None, None]                        # (env.N+1, 1, 1)
    # per pool (env.N+1, 1, 1): work scale, fixed phase µs, window B/SM, network payload bytes
    # (scaled) and whether the network phase runs: the uncalibrated kernel's, or the
    # calibrated KernelWork the event simulator uses on that pool (calibrated_pools)
    if env.cal is not None and env.cal.has(k):
        ws, fx, win, comm_b, comm_f = (env.per_pool(a) for a in
                                       calibrated_pools(env.bm, k, env.cal, env.hw))
    else:
        ws, fx, win = 1.0, oc.fixed_us[:, None, None], float(w.window_B_per_sm)
        comm_b, comm_f = float(w.comm_bytes), float(w.comm)
        if env.model.lone_static and is_gemm(k) and k.flops > 0:
            ws, fx = (env.per_pool(a) for a in lone_static_pools(env.bm0, k, env.hw))
    pi = np.minimum(1.0, env.bm.gain * pu / env.bm.N)
    read_b = k.weight_bytes + sum(b for _, b in k.act_reads)
    data0 = w.obj_bytes + w.extra_hbm_bytes   # + the collective proxy's payload traffic
    phi = (data0 - hit * read_b) / data0 if data0 > 0 else 0.0   # miss share (any scale)
    data = data0 * ws                         # the work scale multiplies bytes and FLOPs
    miss = data * phi
    flops = w.flops * ws
    # compute
    if w.flops > 0:
        ptot = pi + env.po
        cs = np.where(ptot > 1.0, 1.0 / np.maximum(ptot, 1e-30), 1.0)
        rc = w.rate_full * pi * cs
    else:
        rc = np.zeros_like(pi + env.po)
    # HBM share and data rate
    if data0 > 0:
        issue = pu * env.bm.issue
        if phi > 0:
            # bytes in flight this kernel sustains per SM (KernelWork.window_B_per_sm:
            # kernel-aware contention, per pool when calibrated)
            c = np.minimum(pu * win, env.bm.cmax)
            if env.bm.demand_cap:
                c = np.minimum(c, miss)
            ct = c + env.co
            frac = np.interp(ct / env.W, env.xs, env.ys)
            share = frac * w.peak_Bps * c / ct
            rh = np.minimum(phi * issue, share)
            rd = np.where(rh < issue * phi, rh / phi, issue)
        else:
            c = np.zeros_like(pu)
            rd = issue + 0.0 * env.co
        ld = rd * (1.0 + (env.bm.kappa - 1.0) * phi)
        lc = w.reread_per_flop * rc
        lo = 0.0
        if env.shared_l2:   # the others' L2 traffic on the same port (see above)
            if phi > 0:
                ho = frac * w.peak_Bps * env.co / np.maximum(ct, 1e-30)
            else:
                ho = np.interp(env.co / env.W, env.xs, env.ys) * w.peak_Bps + 0.0 * pu
            ptot_o = pi + env.po
            rco = env.rc_full_o * env.po * np.where(ptot_o > 1.0, 1.0 / np.maximum(ptot_o, 1e-30),
                                            1.0)
            lo = ho * env.bm.kappa + env.beta_o * rco
        sc = np.where(ld + lc + lo > env.bm.l2, env.bm.l2 / np.maximum(ld + lc + lo, 1e-30), 1.0)
        td = data / (rd * sc) * 1e6
        if w.reread_per_flop > 0 and w.flops > 0:
            # both counters slowed by the L2 port until the first finishes; then the other
            # runs alone on the port (the event simulator recomputes rates at that event)
            tc = flops / (rc * sc) * 1e6
            sd = np.minimum(1.0, env.bm.l2 / np.maximum(ld + lo, 1e-30))
            scc = np.minimum(1.0, env.bm.l2 / np.maximum(lc + lo, 1e-30))
            td_after = tc + (data - rd * sc * tc * 1e-6) / (rd * sd) * 1e6
            tc_after = td + (flops - rc * sc * td * 1e-6) / (rc * scc) * 1e6
            first_c = tc <= td
            td, tc = np.where(first_c, td_after, td), np.where(first_c, tc, tc_after)
            rc = flops / tc * 1e6
    else:
        c = np.zeros_like(pu)
        td = np.zeros_like(pu + env.co + env.po)
    tc = (flops / rc * 1e6) if w.flops > 0 else np.zeros_like(td)
    tn = np.where(np.asarray(comm_f) > 0, env.bm.setup_us + comm_b / env.bm.nvlink * 1e6, 0.0)
    t = env.bm.launch_us + fx * env.dil + np.maximum(np.maximum(tc, td), tn)
    bshape = np.broadcast_shapes(t.shape, (env.P.size, env.NC, env.NP))
    out["tau"] = np.broadcast_to(t, bshape)
    out["busy"] = np.broadcast_to(td, bshape)
    out["conc"] = np.broadcast_to(c / env.W * td, bshape)
    out["power"] = np.broadcast_to(pi * tc, bshape)

    return tuple(np.array(out[x]) for x in ("tau", "busy", "conc", "power"))


def _isolated_profiles(graph: OpGraph, hw: Hardware, cal, P: np.ndarray,
                       out: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``kernel_profiles`` without contention: every entry the kernel's static time on the pool
    (its measured time where ``cal`` has it), ``busy`` the same, into the zeroed ``out``."""
    static = StaticDurationModel(hw)
    for u, k in enumerate(graph.kernels):
        t_iso = (cal.times(k, P, warn=False) if cal is not None and cal.has(k)
                 else static.kernel_time_us(k, P))
        out["tau"][u] = np.asarray(t_iso, dtype=float)[:, None, None]
        # isolated kernels still report their resource use (for inspection only)
        out["busy"][u] = out["tau"][u]
    return out


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
    env = _environment(hw, model, conc_grid, power_grid, shared_l2)
    n = graph.n
    h = _check_hits(hits, n)
    shape = (n, env.N + 1, env.NC, env.NP)
    out = {k: np.zeros(shape) for k in ("tau", "busy", "conc", "power")}
    if model.isolated:
        return _isolated_profiles(graph, hw, model.calibration, env.P, out)
    for u, k in enumerate(graph.kernels):
        for x, t in zip(("tau", "busy", "conc", "power"), _memo_tables(env, k, float(h[u]))):
            out[x][u] = t
    return out


def _check_hits(hits, n: int) -> np.ndarray:
    """``hits`` as float64 (n,) fractions (None: zeros).

    Raises:
        ValueError: the wrong shape, or a fraction outside 0..1 or not finite."""
    h = np.zeros(n) if hits is None else np.asarray(hits, dtype=float)
    if h.shape != (n,) or np.any(~np.isfinite(h)) or np.any(h < 0) or np.any(h > 1):
        raise ValueError(f"hits must be ({n},) fractions in 0..1")
    return h


def _environment(hw: Hardware, model: ContentionModel, conc_grid, power_grid,
                 shared_l2: bool) -> _Load:
    """The load grid of ``kernel_profiles`` on every pool (its ``base`` memo key included).

    Raises:
        ValueError: grids not 1-D, increasing, from 0."""
    bm = model.bind(hw, lone_makespan)
    cal = model.calibration
    # the kernels' uncalibrated work; a calibration enters per pool below (calibrated_pools)
    bm0 = bm if cal is None else model.replace(calibration=None).bind(hw, lone_makespan)
    N = hw.num_sms
    cg = np.asarray(conc_grid, dtype=float)
    pg = np.asarray(power_grid, dtype=float)
    for nm, g in (("conc_grid", cg), ("power_grid", pg)):
        if g.ndim != 1 or g.size < 2 or g[0] != 0.0 or np.any(np.diff(g) <= 0):
            raise ValueError(f"{nm} must be 1-D, increasing, starting at 0")
    NC, NP = cg.size, pg.size
    P = np.arange(N + 1, dtype=float)
    P[0] = 1.0
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
    # kernels of every layer and every cut of one graph repeat: memoised by their work
    # signature and hit fraction (4,896 rows, 382 distinct, in a profile of the main job)
    base = (id(hw), bm.model_key, id(cal), cg.tobytes(), pg.tobytes(), bool(shared_l2))
    return _Load(bm, bm0, cal, model, hw, P, co, po, W, xs, ys, bool(shared_l2), beta_o,
                 rc_full_o, dil, N, NC, NP, base=base)


def _memo_key(env: _Load, k, hit: float) -> tuple:
    """Kernel ``k``'s key in ``PROFILE_MEMO`` (and, with a pool, in ``POOL_ROWS``)."""
    return (*env.base, work_signature(k), hit)


def _memo_tables(env: _Load, k, hit: float, key: tuple | None = None) -> tuple:
    """Kernel ``k``'s four tables (N+1, NC, NP) on every pool at hit fraction ``hit``, from
    ``PROFILE_MEMO`` or computed and stored there (``key``: its ``_memo_key``, when known)."""
    key = _memo_key(env, k, hit) if key is None else key
    # (hw and cal stay alive while their ids are in a key; held by a closure, which the
    # cache's byte count does not walk into)
    hw, cal = env.hw, env.cal
    tabs, _keep = PROFILE_MEMO.get_or_make(key, lambda: (_kernel_tables(env, k, hit),
                                                         lambda: (hw, cal)))
    return tabs


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


@chex.dataclass(frozen=True, mappable_dataclass=False)
class CellIndex:
    """What the batch-last kernel (``score.vcbatch.vcb_makespans``) reads of a cut's tables
    besides its grid cells: the segments' stages and the grids (``SegTables`` has the same
    fields).

    Attributes:
        seg_stage: (K_pad,) int32 stage of each segment (pads 0).
        conc_grid: (NC,) and power_grid: (NP,) the grid abscissae (uniformly spaced).
    """

    seg_stage: jax.Array
    conc_grid: jax.Array
    power_grid: jax.Array


def _check_uniform_grids() -> None:
    for nm, gr in (("CONC_GRID", CONC_GRID), ("POWER_GRID", POWER_GRID)):
        if not np.allclose(np.diff(gr), gr[1] - gr[0]):
            raise ValueError(f"{nm} must be uniformly spaced (the JAX core interpolates by "
                             "arithmetic)")


def fill_cells(cells: np.ndarray, rows: np.ndarray, pools=slice(None)) -> None:
    """Copy the grid points of ``rows`` into the corners of ``cells`` (host, in place).

    Args:
        cells: (16, K_pad, N+1, NC-1, NP-1): entry (4 j + x, k, p, c, q) is quantity x
            (tau, busy, conc, power) at corner j = 0..3 = (c, q), (c+1, q), (c, q+1),
            (c+1, q+1) of cell (c, q) of segment k on p SMs.
        rows: (K_pad, P, NC, NP, 4) the tables on the pools ``pools`` (P of them; default
            every pool).
        pools: the pools (an index of ``cells``' axis 2) that ``rows`` holds.
    """
    corners = ((slice(None, -1), slice(None, -1)), (slice(1, None), slice(None, -1)),
               (slice(None, -1), slice(1, None)), (slice(1, None), slice(1, None)))
    for j, (c, q) in enumerate(corners):
        for x in range(4):
            cells[4 * j + x][:, pools] = rows[:, :, c, q, x]


class PoolTables:
    """A cut's segment tables (``segment_tables``) filled pool by pool as allocations need
    them, for the batch-last kernel (``score.vcbatch``).

    An allocation reads the tables only at its own pools' sizes, and every entry of a kernel's
    tables depends on its own pool alone (``_Load.at``). So the first ``fill`` computes the
    tables on the pools it names only when they are at most a quarter of them (a cut whose
    estimator scores its two seeds and nothing else, 13 of the 17 of a main-job grid point,
    needs at most 2 D of the N+1 pools), taking each kernel's rows from ``PROFILE_MEMO`` where
    its whole table is there, else from ``POOL_ROWS`` or computed; any other fill that needs
    another pool computes every pool. Filled entries equal ``segment_tables``' bit
    for bit (the same float64 operations, the same kernel-order sums, the same rounding to
    ``dtype``); entries not filled are never read.

    It holds one array of its size for its whole life, the device cells (zeros until filled),
    so a byte-bounded cache that measures it when it is made (``model.lru.ByteLRU``) counts
    what it will hold; the host arrays of a fill are dropped once copied. ``full()`` (the
    ``SegTables`` of the other kernels, tests and studies) adds those tables.

    Args:
        graph, seg_of, K, w, hw, model, hits, dtype, pad_segments: as ``segment_tables``.
        cells: hold the batch-last kernel's cells (False: ``full()`` only, for the other
            kernels; ``fill`` and ``cells()`` refuse).

    Attributes:
        shape: (K_pad, N+1, NC, NP). index: the ``CellIndex`` (device arrays).
        filled: bool (N+1,) the pools filled so far.

    ``fill`` and ``full`` hold a lock: threads may share one.

    Raises:
        ValueError: as ``segment_tables`` (an illegal cut, bad hits, a table entry negative or
            not finite).
    """

    NAMES = ("tau", "busy", "conc", "power")

    def __init__(self, graph: OpGraph, seg_of: Sequence[int], K: int, w: int, hw: Hardware,
                 model: ContentionModel | None = None, hits: np.ndarray | None = None,
                 dtype=jnp.float32, pad_segments: int | None = None,
                 cells: bool = True) -> None:
        check_cut(seg_of, graph.n, graph.edges, K)
        _check_uniform_grids()
        self.graph, self.hw, self.dtype = graph, hw, np.dtype(dtype)
        self._lock = threading.RLock()
        self.model = ContentionModel() if model is None else model
        self.env = _environment(hw, self.model, CONC_GRID, POWER_GRID, SHARED_L2)
        self.hits = _check_hits(hits, graph.n)
        Kp = pad_segments or bucket(K, 2)
        if Kp < K:
            raise ValueError(f"pad_segments={Kp} smaller than K={K}")
        seg = np.asarray(seg_of)
        self.members = [np.flatnonzero(seg == k) for k in range(K)]
        stage = np.zeros(Kp, dtype=np.int32)
        stage[:K] = [binding(k, K, w) for k in range(K)]
        self.shape = (Kp, hw.num_sms + 1, self.env.NC, self.env.NP)
        self.filled = np.zeros(hw.num_sms + 1, dtype=bool)
        self.index = CellIndex(seg_stage=to_device(stage), conc_grid=to_device(CONC_GRID, dtype),
                               power_grid=to_device(POWER_GRID, dtype))
        self._device = (to_device(np.zeros((16, self._cell_count()), dtype=self.dtype))
                        if cells else None)
        self._full: SegTables | None = None

    def _cell_count(self) -> int:
        Kp, N1, NC, NP = self.shape
        return Kp * N1 * (NC - 1) * (NP - 1)

    def _kernel(self, u: int, pools: np.ndarray | None) -> tuple:
        """Kernel ``u``'s four tables on ``pools`` (None: every pool): from its whole table
        in ``PROFILE_MEMO``, else pool by pool from ``POOL_ROWS``, computing the pools it
        lacks (and storing them there)."""
        k, hit = self.graph.kernels[u], float(self.hits[u])
        key = _memo_key(self.env, k, hit)
        if pools is None or key in PROFILE_MEMO:
            tabs = _memo_tables(self.env, k, hit, key)
            return tabs if pools is None else tuple(t[pools] for t in tabs)
        got = {int(p): POOL_ROWS.get((key, int(p)), (None,))[0] for p in pools}
        todo = np.array([p for p, v in got.items() if v is None], dtype=np.int64)
        if todo.size:
            new = _kernel_tables(self.env.at(todo), k, hit)
            hw, cal = self.env.hw, self.env.cal
            for i, p in enumerate(todo.tolist()):
                got[p] = tuple(np.array(t[i]) for t in new)
                # hw and cal kept alive while their ids are in the key (as PROFILE_MEMO)
                POOL_ROWS.put((key, p), (got[p], lambda: (hw, cal)))
        return tuple(np.stack([got[int(p)][x] for p in pools]) for x in range(4))

    def _sums(self, pools: np.ndarray | None) -> dict[str, np.ndarray]:
        """The segments' tables on ``pools`` (None: every pool), float64 (K_pad, P, NC, NP):
        each segment's kernels added in kernel order from 0."""
        Kp, N1, NC, NP = self.shape
        P = N1 if pools is None else len(pools)
        if self.model.isolated:
            iso = _isolated_profiles(self.graph, self.hw, self.model.calibration, self.env.P,
                                     {x: np.zeros((self.graph.n, N1, NC, NP))
                                      for x in self.NAMES})
            per = {x: (a if pools is None else a[:, pools]) for x, a in iso.items()}
            kernel = lambda u: tuple(per[x][u] for x in self.NAMES)   # noqa: E731
        else:
            kernel = lambda u: self._kernel(u, pools)                 # noqa: E731
        out = {x: np.zeros((Kp, P, NC, NP)) for x in self.NAMES}
        for k, idx in enumerate(self.members):
            for i, u in enumerate(idx):
                for x, t in zip(self.NAMES, kernel(int(u))):
                    if i == 0:
                        out[x][k] = t
                    else:
                        out[x][k] += t
        validate_durations(out["tau"], "segment duration table")
        return out

    def _upload(self, rows: np.ndarray, pools=None) -> None:
        """Cells from ``rows`` (K_pad, P, NC, NP, 4) in ``dtype`` on ``pools`` (None: every
        pool; the other pools' cells zero) onto the device."""
        Kp, N1, NC, NP = self.shape
        cells = np.zeros((16, Kp, N1, NC - 1, NP - 1), dtype=self.dtype)
        fill_cells(cells, rows, slice(None) if pools is None else pools)
        self._device = to_device(cells.reshape(16, -1))

    def fill(self, pools) -> None:
        """Make the cells hold the pools ``pools`` (integer array-like of pool sizes 0..N SMs;
        0 is read as 1 SM, as in every table).

        Raises:
            ValueError: pools that are not integers (floats, bools, strings) or outside 0..N;
                a table entry negative or not finite; a ``PoolTables`` made without cells."""
        a = np.asarray(pools)
        if a.size and a.dtype.kind not in "iu":
            raise ValueError(f"pools must be integers (SMs), got dtype {a.dtype}")
        p = np.unique(a.astype(np.int64).ravel())
        if p.size and (p[0] < 0 or p[-1] > self.hw.num_sms):
            raise ValueError(f"pools must be in 0..{self.hw.num_sms}, got {p.tolist()}")
        if self._device is None:
            raise ValueError("this PoolTables was made without cells (cells=False)")
        with self._lock:
            self._fill(p)

    def _fill(self, p: np.ndarray) -> None:
        need = p[~self.filled[p]]
        if need.size == 0:
            return
        # pool by pool on a first fill of a few pools; otherwise the whole table (faster
        # than many single pools, and kept in PROFILE_MEMO for the next cut)
        first = (not self.filled.any() and not self.model.isolated
                 and need.size <= self.shape[1] // 4)
        sums = self._sums(need if first else None)
        rows = np.stack([sums[x] for x in self.NAMES], -1).astype(self.dtype)
        self._upload(rows, need if first else None)
        self.filled[need if first else slice(None)] = True

    def cells(self) -> jax.Array:
        """The grid cells (16, K_pad * (N+1) * (NC-1) * (NP-1)) on the device
        (``vcbatch.cell_table``'s layout), as filled so far (zeros elsewhere).

        Raises:
            ValueError: a ``PoolTables`` made without cells."""
        if self._device is None:
            raise ValueError("this PoolTables was made without cells (cells=False)")
        return self._device

    def full(self) -> SegTables:
        """Every pool: the ``SegTables`` of ``segment_tables`` (made once; the cells filled
        too when it holds them)."""
        with self._lock:
            return self._make_full()

    def _make_full(self) -> SegTables:
        if self._full is None:
            sums = self._sums(None)
            Kp, N1, NC, NP = self.shape
            rows = np.ascontiguousarray(np.stack([sums[x] for x in self.NAMES], -1),
                                        dtype=self.dtype)
            self._full = SegTables(*(to_device(sums[x], self.dtype) for x in self.NAMES),
                                   self.index.seg_stage, self.index.conc_grid,
                                   self.index.power_grid, to_device(rows.reshape(-1, 4)))
            if self._device is not None and not self.filled.all():
                self._upload(rows)
                self.filled[:] = True
        return self._full


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
    return PoolTables(graph, seg_of, K, w, hw, model, hits, dtype, pad_segments).full()
