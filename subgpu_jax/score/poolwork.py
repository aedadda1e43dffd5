"""The work of one kernel on every pool 0..N as the event simulator uses it, for the vectorised
tables of ``score.vcontention.kernel_profiles``: the calibrated work (work scale, fixed phase,
window) of a measured kernel, and the lone-static scale of an uncalibrated GEMM
(``sim.contention.ContentionModel.lone_static``). Both are solved by ``BoundModel.work`` on the
pools an allocation can hold and carried to the others.

Units: µs, SMs, bytes.
"""

from __future__ import annotations

import numpy as np

from subgpu_jax.model.hardware import Hardware

__all__ = ["calibrated_pools", "lone_static_pools"]


def lone_static_pools(bm, k, hw: Hardware) -> tuple[np.ndarray, np.ndarray]:
    """The work scale and fixed phase (µs) of uncalibrated GEMM ``k`` on every pool 0..N
    (``ContentionModel.lone_static``: alone, cache off, it takes its static time), as the event
    simulator uses them (``BoundModel.lone_static_scale``): solved on the pools an allocation
    can hold (multiples of ``hw.sm_quantum``, and 1 and N), linear in between.

    Returns:
        ``(scale, fixed_us)``, each float (N+1, 1, 1).
    """
    N, q = hw.num_sms, hw.sm_quantum
    pools = sorted({1, N, *range(q, N + 1, q)})
    ws = [bm.work(k, p) for p in pools]
    P = np.arange(N + 1, dtype=float)
    P[0] = 1.0
    return (np.interp(P, pools, [w.scale for w in ws])[:, None, None],
            np.interp(P, pools, [w.fixed_us for w in ws])[:, None, None])


def calibrated_pools(bm, k, cal, hw: Hardware) -> tuple[np.ndarray, ...]:
    """The calibrated work of kernel ``k`` on every pool 0..N, as the event simulator uses it
    (``BoundModel.work``: the per-pool work scale, fixed phase and window solved so that ``k``
    alone takes its measured time), for ``kernel_profiles``.

    Solved on the pools an allocation can hold (multiples of ``hw.sm_quantum``) inside the
    calibration's measured range of ``k`` plus the range's ends (no extrapolation, so no
    ``CalibrationExtrapolationWarning``); every other pool takes the nearest solved pool's
    values (pools outside the measured range are extrapolated differently by the event
    simulator). The solves are memoised per pool (``sim.solvecache.LONE_SOLVES``).

    Returns:
        ``(scale, fixed_us, window_B_per_sm, comm_bytes, comm)``, each float (N+1, 1, 1):
        work scale, fixed phase µs, bytes in flight per SM, network payload bytes (scaled) and
        1.0 where the network phase runs (0.0 for kernel-aware calibrated collectives, whose
        link time is in the fixed phase).
    """
    from subgpu_jax.model.calibration import kernel_key

    sms_m = np.asarray(cal.tables[kernel_key(k)][0], dtype=float)
    lo, hi = int(np.ceil(sms_m[0])), int(np.floor(sms_m[-1]))
    q = int(hw.sm_quantum)
    solved = sorted({p for p in range(q, hw.num_sms + 1, q) if lo <= p <= hi} | {lo, hi})
    works = [bm.work(k, p) for p in solved]
    P = np.arange(hw.num_sms + 1)
    near = np.abs(P[:, None] - np.asarray(solved)[None, :]).argmin(axis=1)

    def per_pool(f) -> np.ndarray:
        v = np.array([float(f(x)) for x in works])
        return v[near][:, None, None]

    return (per_pool(lambda x: x.scale), per_pool(lambda x: x.fixed_us),
            per_pool(lambda x: x.window_B_per_sm),
            per_pool(lambda x: x.comm_bytes * x.scale), per_pool(lambda x: x.comm))
