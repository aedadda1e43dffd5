"""The work of one kernel on every pool 0..N as the event simulator uses it, for the vectorised
tables of ``score.vctables.kernel_profiles``: the calibrated work (work scale, fixed phase,
window) of a measured kernel, and the lone-static scale of an uncalibrated GEMM
(``sim.contention.ContentionModel.lone_static``). Both are solved by ``BoundModel.work`` on the
pools an allocation can hold and carried to the others.

Units: µs, SMs, bytes.
"""

from __future__ import annotations

import threading

import numpy as np

from subgpu_jax.model.hardware import Hardware
from subgpu_jax.model.kernel import work_signature
from subgpu_jax.model.lru import CountingLRU

__all__ = ["calibrated_pools", "lone_static_pools", "LONE_POOLS", "LONE_POOLS_SIZE"]

#: Kernel signatures whose per-pool lone-static scales are kept (least recently used first out;
#: two (N+1,) float arrays each, ~2 KiB: at most ~8 MiB).
LONE_POOLS_SIZE = 4096

#: The memo of ``lone_static_pools``: (hardware id, model parameters, kernel signature) ->
#: ((scale, fixed_us), hw). The kernels of one region repeat in every layer and every cut of a
#: grid point builds its tables from them: before this memo, the main job re-derived the same
#: 18 pool solves 153,000 times (28 s of a 111 s profile).
LONE_POOLS = CountingLRU(LONE_POOLS_SIZE)
_LONE_POOLS_LOCK = threading.Lock()


def lone_static_pools(bm, k, hw: Hardware) -> tuple[np.ndarray, np.ndarray]:
    """The work scale and fixed phase (µs) of uncalibrated GEMM ``k`` on every pool 0..N
    (``ContentionModel.lone_static``: alone, cache off, it takes its static time), as the event
    simulator uses them (``BoundModel.lone_static_scale``): solved on the pools an allocation
    can hold (multiples of ``hw.sm_quantum``, and 1 and N), linear in between. Memoised in
    ``LONE_POOLS`` by ``work_signature`` (the solves themselves are memoised per pool in
    ``sim.solvecache.LONE_SOLVES``; this saves re-deriving the pools' ``KernelWork``).

    Returns:
        ``(scale, fixed_us)``, each float (N+1, 1, 1).
    """
    key = (id(hw), bm.model_key, work_signature(k))
    with _LONE_POOLS_LOCK:
        hit = LONE_POOLS.get(key)
    if hit is None:
        N, q = hw.num_sms, hw.sm_quantum
        pools = sorted({1, N, *range(q, N + 1, q)})
        ws = [bm.work(k, p) for p in pools]
        P = np.arange(N + 1, dtype=float)
        P[0] = 1.0
        val = (np.interp(P, pools, [w.scale for w in ws]),
               np.interp(P, pools, [w.fixed_us for w in ws]))
        for a in val:
            a.setflags(write=False)
        hit = (val, hw)   # keeps hw alive while its id is a key
        with _LONE_POOLS_LOCK:
            LONE_POOLS[key] = hit
    scale, fixed = hit[0]
    return scale[:, None, None], fixed[:, None, None]


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
