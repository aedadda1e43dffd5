"""A kernel's work on a pool of SMs, as the rate model runs it (``sim.contention.BoundModel``):
the uncalibrated work from the kernel's FLOPs and bytes, and the solves that make a kernel alone
on a pool take its static time (``ContentionModel.lone_static``) or its measured time (a
calibration), each by a few lone-kernel event simulations (``eventsim.lone_makespan``, injected
into the bound model), memoised in ``sim.solvecache.LONE_SOLVES``.

Every function takes the ``BoundModel`` (``bm``: its model, hardware, constants and injected
lone-kernel simulation) as its first argument. Units: µs, bytes, FLOPs, SMs.
"""

from __future__ import annotations

import math

import numpy as np
from dataclasses import replace as _dc_replace

from subgpu_jax.model.collective import proxy_plan
from subgpu_jax.model.graph import Kernel
from subgpu_jax.model.kernel import work_signature
from subgpu_jax.model.hardware import DTYPE_BYTES
from subgpu_jax.model.kernelcost import is_gemm, op_cost
from subgpu_jax.sim.kernelwork import KernelWork
from subgpu_jax.sim.solvecache import LONE_SOLVES

__all__ = ["kernel_work", "proxied_work", "lone_static_scale", "check_kernel"]


def kernel_work(bm, k: Kernel, pool_sms: int) -> KernelWork:
    """``KernelWork`` of kernel ``k`` on a pool of ``pool_sms`` SMs.

    Raises:
        ValueError: ``pool_sms`` < 1, or negative/NaN work in the kernel (names the field).
    """
    if not pool_sms >= 1:
        raise ValueError(f"pool_sms must be >= 1, got {pool_sms!r}")
    check_kernel(k)
    hw = bm.hw
    oc = op_cost(k, hw, float(pool_sms))
    p = float(oc.sms)
    rate = (hw.flops_rate(k.dtype) * oc.rate_scale if k.tensor
            else hw.tensor_flops["bf16"] / 16.0)
    obj = k.hbm_bytes
    read_only = k.act_bytes < 0.5 * obj
    peak = hw.hbm_read_Bps if read_only else hw.hbm_copy_Bps
    rr = 0.0
    if k.tensor and bm.model.tile_edge > 0 and k.flops > 0:
        beta = DTYPE_BYTES[k.dtype] / bm.model.tile_edge
        rr = max(0.0, beta * k.flops - obj) / k.flops
    static = float(bm.static.kernel_time_us(k, pool_sms))
    w = KernelWork(sms=p, flops=float(k.flops), rate_full=float(rate),
                   power=min(1.0, bm.gain * p / bm.N), obj_bytes=float(obj),
                   reread_per_flop=rr, peak_Bps=float(peak),
                   comm_bytes=k.link_bytes(hw.nvlink_Bps), comm=k.is_comm,
                   static_us=static, fixed_us=float(oc.fixed_us),
                   window_B_per_sm=bm.window * oc.inflight_scale)
    cal = bm.model.calibration
    if cal is not None and cal.has(k):
        w = _calibrated(bm, k, int(pool_sms), w, cal)
    elif k.is_comm and not bm.model.link_time:
        w = _dc_replace(w, comm_bytes=0.0)   # no network counter, hence no setup phase
    elif bm.model.lone_static and is_gemm(k) and k.flops > 0 and not bm.model.isolated:
        s, fixed = lone_static_scale(bm, k, int(pool_sms), w)
        w = _dc_replace(w, scale=s, fixed_us=fixed)
    if k.is_comm and bm.model.proxy_collectives and not bm.model.isolated \
            and not (cal is not None and cal.has(k)):
        w = proxied_work(bm, k, w)
    return w

def proxied_work(bm, k: Kernel, w: KernelWork) -> KernelWork:
    """``w`` of uncalibrated collective ``k`` under the collective proxy
    (``proxy_collectives``): it also moves the proxy's payload bytes through HBM
    (``model.collective.proxy_plan``), in its data counter beside its local work while its
    link time runs (not paced). Its SMs stay those of its local work (the rate model holds
    one SM count per kernel, and the epilogue after the proxy runs on the whole pool), so
    the proxy's 16-36 CTAs are not charged separately; FLOPs and link payload unchanged. A
    calibrated collective keeps its measured time (calibrate with ``--collectives proxy``
    for the proxy's), with nothing added."""
    return _dc_replace(w, extra_hbm_bytes=float(proxy_plan(k).hbm_bytes))

def lone_static_scale(bm, k: Kernel, pool_sms: int, w: KernelWork) -> tuple[float, float]:
    """``(scale, fixed_us)`` with which uncalibrated GEMM ``k`` alone on ``pool_sms`` SMs
    (cache off) takes its static time (``ContentionModel.lone_static``): t(s) = launch +
    fixed + s x work (+ a latency floor; up to four secant steps to 1e-4); a GEMM slower
    than its static time even at tiny s gives the excess up from its fixed phase (>= 0).
    Memoised. Raises ValueError without an injected ``lone_makespan``."""
    hw = bm.hw
    mkey = bm.model_key
    # keyed by the kernel's whole work: a measurement's key (kernel_key) is shared by kernels of
    # other work, and a solve for one of them served the other in a process that met it first
    key = ("lone", id(hw), hw.bw_curve_y, hw.hbm_copy_Bps, mkey, work_signature(k), pool_sms)
    hit = LONE_SOLVES.get(key)
    if hit is not None:
        return hit[0]
    if bm.lone_makespan is None:
        raise ValueError("lone_static needs the lone-kernel simulation: bind the model with "
                         "lone_makespan=eventsim.lone_makespan")
    base = bm.model.replace(lone_static=False)
    t0 = bm.launch_us + w.fixed_us

    def alone(s: float, fixed: float = w.fixed_us) -> float:
        return float(bm.lone_makespan(k, pool_sms, hw, base, s, fixed, w.window_B_per_sm))
    s, t1 = 1.0, alone(1.0)
    if t1 > t0 and w.static_us > t0:
        s_prev, t_prev = 1.0, t1
        s = max((w.static_us - t0) / (t1 - t0), 1e-6)
        for _ in range(4):                       # secant steps (near-linear in s)
            t2 = alone(s)
            if abs(t2 - w.static_us) <= 1e-4 * w.static_us or abs(t2 - t_prev) < 1e-9:
                break
            s, s_prev, t_prev = (max(s + (w.static_us - t2) * (s - s_prev) / (t2 - t_prev),
                                     1e-6), s, t2)
    s, fixed = max(s, 1e-6), w.fixed_us
    t = alone(s)
    if t > w.static_us * (1 + 1e-4):             # the latency floor: shorten the fixed phase
        fixed = max(0.0, fixed - (t - w.static_us))
    LONE_SOLVES.put(key, ((s, fixed), hw))   # keep hw alive while its id is a key
    return s, fixed

def _calibrated(bm, k: Kernel, pool_sms: int, w: KernelWork, cal) -> KernelWork:
    """``w`` adjusted so that ``k`` alone on ``pool_sms`` SMs (cache off) takes its measured
    time: a fixed latency when the model is faster than the measurement, else a work scale
    solved by a few secant steps on lone-kernel simulations (memoised per calibration,
    model parameters, hardware, kernel and pool)."""

    t_meas = float(cal.kernel_time_us(k, pool_sms))
    if bm.model.isolated:
        return _dc_replace(w, static_us=t_meas)
    hw = bm.hw
    mkey = bm.model_key
    key = (id(cal), id(hw), hw.bw_curve_y, hw.hbm_copy_Bps, mkey, work_signature(k), pool_sms)
    hit = LONE_SOLVES.get(key)
    if hit is None:
        if bm.lone_makespan is None:
            raise ValueError("a calibrated ContentionModel needs the lone-kernel simulation: "
                             "bind it with lone_makespan=eventsim.lone_makespan")
        base = bm.model.replace(calibration=None)
        if bm.model.kernel_aware and k.is_comm:
            hit = _solve_collective(bm, k, pool_sms, w, t_meas, cal, base)
        elif bm.model.kernel_aware:
            hit = _solve_kernel_aware(bm, k, pool_sms, w, t_meas, cal, base)
        else:
            hit = _solve_legacy(bm, k, pool_sms, t_meas, base)
        LONE_SOLVES.put(key, (hit, cal, hw))  # keep cal and hw alive while their ids are keys
    else:
        hit = hit[0]
    if bm.model.kernel_aware and k.is_comm:   # the link time is the fixed wait
        fixed = hit[1] + (hit[3] if bm.model.link_time else 0.0)
        return _dc_replace(w, scale=hit[0], fixed_us=fixed, window_B_per_sm=hit[2],
                           static_us=t_meas, comm_bytes=0.0, comm=False)
    return _dc_replace(w, scale=hit[0], fixed_us=hit[1], window_B_per_sm=hit[2],
                       static_us=t_meas)

def _solve_collective(bm, k: Kernel, pool_sms: int, w: KernelWork, t_meas: float, cal,
                      base) -> tuple:
    """Kernel-aware calibration of a (virtual) collective on one pool.

    The runtime's collective (``hw_runtime/gpu/workload.py``, ``TorchWorkload.spin_cycles``)
    copies its payload and runs its epilogue (residual add, norm, gather), then waits out
    the rest of the modelled link time, setup + payload / NVLink - 2 x payload / copy
    bandwidth, in a one-thread timed wait that leaves the pool's SMs free. So the wait is a
    fixed phase (in the event simulator it belongs to the launch: the lane is busy, the
    pool's SMs are free for the other lanes of the stage, and it does not dilate with HBM
    load) and the rest of the measured time is solved as for any other kernel
    (``_solve_kernel_aware``) with no network payload. Not fitted: the wait follows the
    runtime's formula with this hardware's NVLink and copy bandwidths.

    Returns:
        ``(scale, fixed_us, window_B_per_sm, wait_us)``: the solved work scale, fixed
        latency and window of the copy and epilogue, and the link wait; the caller adds the
        wait to the fixed latency unless ``ContentionModel.link_time`` is False, and drops
        the network payload.
    """
    hw = bm.hw
    wait = max(0.0, k.link_us(hw.comm_setup_us, hw.nvlink_Bps)
               - 2.0 * k.comm_bytes / hw.hbm_copy_Bps * 1e6)
    k0 = _dc_replace(k, comm_bytes=0.0, scaleout_bytes=0.0)
    w0 = _dc_replace(w, comm_bytes=0.0, comm=False)
    t0 = float(bm.lone_makespan(k0, pool_sms, hw, base, 1.0, 0.0, None))
    wait = min(wait, max(0.0, t_meas - t0))   # never below what moving its bytes takes
    scale, fixed, win = _solve_kernel_aware(bm, k0, pool_sms, w0, t_meas - wait, cal, base)
    return (scale, fixed, win, wait)

def _solve_legacy(bm, k: Kernel, pool_sms: int, t_meas: float, base) -> tuple:
    """The first calibration rule: a fixed latency when the model is faster than the
    measurement, else a work scale (secant steps); the window stays the global one."""
    hw = bm.hw

    def alone(scale: float, fixed: float) -> float:
        return float(bm.lone_makespan(k, pool_sms, hw, base, scale, fixed))

    t0 = alone(1.0, 0.0)
    if t_meas >= t0:
        return (1.0, t_meas - t0, bm.window)
    return (_secant_scale(bm, lambda s: alone(s, 0.0), t0, t_meas, k), 0.0, bm.window)

def _secant_scale(bm, f, t0: float, t_meas: float, k: Kernel) -> float:
    """Work scale s with ``f(s)`` = ``t_meas`` (a few secant steps from s = 1, f(1) = t0)."""
    c = bm.launch_us + (bm.setup_us if k.is_comm else 0.0)
    s, t = 1.0, t0
    for _ in range(6):
        if t - c <= 1e-9:
            break
        s = max(1e-4, s * max(t_meas - c, 1e-6) / (t - c))
        t = f(s)
        if abs(t - t_meas) <= 1e-3 * t_meas:
            break
    return s

def _solve_kernel_aware(bm, k: Kernel, pool_sms: int, w: KernelWork, t_meas: float,
                        cal, base) -> tuple:
    """Kernel-aware calibration of one kernel on one pool (docs/fidelity.md).

    With t_inf its lone time when it may keep unlimited bytes in flight and w_s the least
    window (bytes in flight per SM) within 2% of t_inf:

    * compute-limited (its compute alone takes >= 80% of t_inf): a work scale reproduces
      ``t_meas``, window ``gemm_window_gain`` x w_s (tensor-core GEMMs keep deep load
      pipelines in flight);
    * at its HBM ceiling (``t_meas`` <= ``saturation_ratio`` x t_inf): a work scale (bytes
      it effectively moves) reproduces ``t_meas``, window ``saturating_window_gain`` x w_s (it keeps more in flight
      than the least that saturates HBM, fitted on the co-run matrix);
    * a tensor GEMM reaching >= 35% of its HBM ceiling alone: window
      ``gemm_window_gain`` x w_s and the time beyond t_inf as a fixed phase (non-memory work
      that does not dilate with HBM load);
    * otherwise memory-latency-limited: a fixed launch phase of
      ``launch_us_per_activity`` x its device activities (capped at ``t_meas - t_inf``), and
      the window w < w_s solved by bisection so that it alone takes ``t_meas``: few bytes in
      flight, so it slows as co-running kernels load HBM (Little's law).

    Returns:
        ``(scale, fixed_us, window_B_per_sm)``.
    """
    hw = bm.hw
    p = float(min(pool_sms, k.ctas))

    def alone(scale: float, fixed: float, win: float) -> float:
        return float(bm.lone_makespan(k, pool_sms, hw, base, scale, fixed, win))

    big = 1e12 / max(p, 1.0)
    t_inf = alone(1.0, 0.0, big)
    lo, hi = 1.0, big
    for _ in range(40):                       # least window within 2% of t_inf
        mid = math.sqrt(lo * hi)
        if alone(1.0, 0.0, mid) <= 1.02 * t_inf:
            hi = mid
        else:
            lo = mid
        if hi / lo < 1.05:
            break
    w_s = hi
    c0 = bm.launch_us + (bm.setup_us if k.is_comm else 0.0)
    t_comp = c0 + (w.flops / (w.rate_full * w.power) * 1e6 if w.flops > 0 else 0.0)
    wg = w_s * float(bm.model.gemm_window_gain)
    if t_comp >= 0.8 * t_inf:
        t_g = alone(1.0, 0.0, wg)
        if abs(t_meas - t_g) <= 1e-3 * t_meas:
            return (1.0, 0.0, wg)
        return (_secant_scale(bm, lambda s: alone(s, 0.0, wg), t_g, t_meas, k), 0.0, wg)
    if t_meas <= float(bm.model.saturation_ratio) * t_inf:
        wsat = w_s * float(bm.model.saturating_window_gain)
        t_sat = alone(1.0, 0.0, wsat)
        s = 1.0
        if abs(t_meas - t_sat) > 1e-3 * t_meas:
            s = _secant_scale(bm, lambda s: alone(s, 0.0, wsat), t_sat, t_meas, k)
        return (s, 0.0, wsat)
    bw_frac = (k.hbm_bytes / (t_meas * 1e-6)) / w.peak_Bps if t_meas > 0 else 0.0
    if k.tensor and w.flops > 0 and bw_frac >= 0.35:
        # a GEMM streaming its operands through a deep pipeline, with non-memory phases
        # (tile synchronisation, epilogues): the time beyond t_inf does not dilate with HBM
        t_g = alone(1.0, 0.0, wg)
        if t_meas >= t_g:
            return (1.0, t_meas - t_g, wg)
        return (_secant_scale(bm, lambda s: alone(s, 0.0, wg), t_g, t_meas, k), 0.0, wg)
    acts = float(cal.activities(k) or 1)
    fixed = min(float(bm.model.launch_us_per_activity) * acts, max(0.0, t_meas - t_inf))
    lo, hi = 1e-3, w_s
    if alone(1.0, fixed, lo) < t_meas:        # even a tiny window is too fast: add latency
        return (1.0, fixed + t_meas - alone(1.0, fixed, lo), lo)
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        if alone(1.0, fixed, mid) > t_meas:
            lo = mid
        else:
            hi = mid
        if hi / lo < 1.002:
            break
    return (1.0, fixed, math.sqrt(lo * hi))


def check_kernel(k: Kernel) -> None:
    """Raise ValueError naming the kernel and field when its work is negative, NaN or missing."""
    for f in ("flops", "kv_bytes", "comm_bytes"):
        v = getattr(k, f)
        if v is None or not isinstance(v, (int, float, np.floating, np.integer)) \
                or not math.isfinite(v) or v < 0:
            raise ValueError(f"kernel {k.name}: {f} must be a finite number >= 0, got {v!r}")
    for nm, b in k.weight_objects + k.act_reads + k.act_writes:
        if b is None or not math.isfinite(b) or b < 0:
            raise ValueError(f"kernel {k.name}: bytes of object {nm} must be finite and >= 0, "
                             f"got {b!r}")
    if isinstance(k.ctas, bool) or not isinstance(k.ctas, (int, np.integer)) or k.ctas < 1:
        raise ValueError(f"kernel {k.name}: ctas must be an integer >= 1, got {k.ctas!r}")
