"""The compiled engine's parts (``sim.batchednb``, Numba): the JIT decorator, the layout of
its work and parameter tables, the L2 table as a recency list, the event heap, and
``BoundModel.rates_of`` over one allocation's lane arrays.

Every function here is compiled (``cached_njit``) and called from ``sim.batchednb``'s row loop;
they follow ``sim.eventsim`` and ``sim.contention`` operation for operation, so the engine's
makespans equal the event simulator's bit for bit (``tests/sim/test_batched.py``).
Units: µs, FLOP, bytes, bytes/s, SMs.
"""

from __future__ import annotations

import os

import numpy as np

from subgpu_jax.sim.batched import WORK_FIELDS

__all__ = ["numba_available", "cached_njit", "engine_cache_dir", "ENGINE_SOURCES", "POLICY_CODE", "EV_DONE", "EV_SETUP",
           "EV_LAUNCH", "KIND_STEP", "l2_remove", "l2_append", "l2_insert", "heap_push",
           "heap_pop", "heap_grow", "rates_into", "end_task", "INF"] + [
           f"W_{n}" for n in ("SMS", "FLOPS", "RATE", "POWER", "OBJ", "REREAD", "PEAK", "COMM",
                              "FIXED", "SCALE", "WIN", "EXTRA")] + [
           f"P_{n}" for n in ("CMAX", "CAPPED", "N", "FULLWIN", "ISSUE", "DCAP", "KAPPA",
                              "NVLINK", "L2BW", "LAUNCH", "SETUP", "GAIN", "INVCOPY", "L2CAP")]

try:    # Numba is a dependency (pyproject.toml); a broken install leaves the NumPy engine
    import numba
    _HAVE = True
except ImportError:     # pragma: no cover - exercised only without numba
    numba = None
    _HAVE = False


def numba_available() -> bool:
    """Whether Numba imports here and compiles: with ``NUMBA_DISABLE_JIT=1`` its functions run
    as Python, about 5x slower than the Python event simulator itself (a breaker's measurement),
    so the engine counts as absent and the timers use the Python simulator."""
    return _HAVE and not numba.config.DISABLE_JIT


#: The files the compiled code depends on: the engine's two modules and ``sim.batched`` (its
#: ``WORK_FIELDS`` order is baked into the code as constants). Numba's own cache checks only the
#: timestamp of the file defining each function, so an edit of another one kept the old code (a
#: breaker's find, 2026-12-07); the cache folder is named by a hash of all three instead.
ENGINE_SOURCES = ("compiledparts.py", "batchednb.py", "batched.py")
_CACHE_DIR: list = []


def engine_cache_dir() -> str | None:
    """The folder of the engine's compiled code: ``<NUMBA_CACHE_DIR, or ~/.cache/subgpu/numba>/
    <numba version>-<sha256 of ENGINE_SOURCES>``, made on first use; None where it cannot be
    written (the engine then compiles in each process)."""
    if not _CACHE_DIR:
        import hashlib
        import tempfile
        from pathlib import Path

        here = Path(__file__).resolve().parent
        h = hashlib.sha256()
        for name in ENGINE_SOURCES:
            h.update(name.encode() + b"\0" + (here / name).read_bytes())
        home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"),
                                                                  ".cache")
        root = os.environ.get("NUMBA_CACHE_DIR") or os.path.join(home, "subgpu", "numba")
        d = os.path.join(root, f"{numba.__version__}-{h.hexdigest()[:16]}")
        try:
            os.makedirs(d, exist_ok=True)
            tempfile.TemporaryFile(dir=d).close()
        except OSError:
            d = None
        _CACHE_DIR.append(d)
    return _CACHE_DIR[0]


def cached_njit(f=None, *, inline: bool = False):
    """``numba.njit`` with the compiled code cached on disk in ``engine_cache_dir()`` (a folder
    per version of the engine's sources); where none is writable (a read-only install, a user
    without a home), compiled in each process instead. ``inline``: inlined into its callers at
    Numba's IR level (no call per use)."""
    if f is None:
        return lambda g: cached_njit(g, inline=inline)
    if not _HAVE:   # pragma: no cover
        return f
    opts = {"nogil": True, "inline": "always" if inline else "never"}
    d = engine_cache_dir()
    if d is None:
        return numba.njit(**opts)(f)
    before = numba.config.CACHE_DIR
    numba.config.CACHE_DIR = d      # read by Numba's locator when the function is decorated
    try:
        return numba.njit(cache=True, **opts)(f)
    except RuntimeError:    # "cannot cache function ...: no locator available"
        return numba.njit(**opts)(f)
    finally:
        numba.config.CACHE_DIR = before


INF = np.inf

# the WORK_FIELDS rows of the work table (B, len(WORK_FIELDS), D, NK)
_FIELD = {n: i for i, n in enumerate(WORK_FIELDS)}
W_SMS, W_FLOPS, W_RATE, W_POWER = (_FIELD["sms"], _FIELD["flops"], _FIELD["rate_full"],
                                    _FIELD["power"])
W_OBJ, W_REREAD, W_PEAK, W_COMM = (_FIELD["obj_bytes"], _FIELD["reread_per_flop"],
                                   _FIELD["peak_Bps"], _FIELD["comm_bytes"])
W_FIXED, W_SCALE, W_WIN, W_EXTRA = (_FIELD["fixed_us"], _FIELD["scale"],
                                    _FIELD["window_B_per_sm"], _FIELD["extra_hbm_bytes"])

# the model's scalars, one float64 vector (``sim.batchednb.model_params``)
(P_CMAX, P_CAPPED, P_N, P_FULLWIN, P_ISSUE, P_DCAP, P_KAPPA, P_NVLINK, P_L2BW, P_LAUNCH,
 P_SETUP, P_GAIN, P_INVCOPY, P_L2CAP) = range(14)


#: The L2 policies as the compiled loop takes them.
POLICY_CODE = {"none": 0, "lru": 1, "fifo": 2}


@cached_njit
def l2_remove(k, prv, nxt, res):
    p, n = prv[k], nxt[k]
    nxt[p] = n
    prv[n] = p
    res[k] = False


@cached_njit
def l2_append(k, prv, nxt, res, head):
    last = prv[head]
    nxt[last] = k
    prv[k] = last
    nxt[k] = head
    prv[head] = k
    res[k] = True


@cached_njit
def l2_insert(key, b, cap, nb, prv, nxt, res, occ_cnt):
    """``BatchedL2.insert`` of one row: ``occ_cnt`` = [occupancy bytes, resident count]."""
    head = nb.shape[0] - 1          # the sentinel of the recency list
    if key < 0:
        return
    if res[key]:
        occ_cnt[0] -= nb[key]
        occ_cnt[1] -= 1.0
        l2_remove(key, prv, nxt, res)
    if not (b <= cap and b > 0):
        return
    while occ_cnt[0] + b > cap and occ_cnt[1] > 0:
        v = nxt[head]               # the oldest resident
        occ_cnt[0] -= nb[v]
        occ_cnt[1] -= 1.0
        l2_remove(v, prv, nxt, res)
    nb[key] = b
    occ_cnt[0] += b
    occ_cnt[1] += 1.0
    l2_append(key, prv, nxt, res, head)


# the event kinds in the order the event simulator's queue breaks ties (eventsim._DONE, ...)
EV_DONE, EV_SETUP, EV_LAUNCH = 0, 1, 2


#: the event kind's place in the heap key: kind * KIND_STEP + push order (orders like the event
#: simulator's (t, kind, push order) tuples while the push order stays below 2**40)
KIND_STEP = 1 << 40


@cached_njit
def heap_push(ht, hk, hl, he, n, t, key, lane, ep):
    """Push (t, key) -> (lane, epoch) on the heap of ``n`` entries (capacity checked by the
    caller))."""
    i = n
    while i > 0:
        q = (i - 1) >> 1
        if ht[q] < t or (ht[q] == t and hk[q] < key):
            break
        ht[i], hk[i], hl[i], he[i] = ht[q], hk[q], hl[q], he[q]
        i = q
    ht[i], hk[i], hl[i], he[i] = t, key, lane, ep


@cached_njit
def heap_pop(ht, hk, hl, he, n):
    """Remove the least entry of the heap of ``n`` entries (read its fields first)."""
    n -= 1
    if n <= 0:
        return
    t, key, lane, ep = ht[n], hk[n], hl[n], he[n]
    i = 0
    while True:
        a = 2 * i + 1
        if a >= n:
            break
        b = a + 1
        if b < n and (ht[b] < ht[a] or (ht[b] == ht[a] and hk[b] < hk[a])):
            a = b
        if ht[a] < t or (ht[a] == t and hk[a] < key):
            ht[i], hk[i], hl[i], he[i] = ht[a], hk[a], hl[a], he[a]
            i = a
        else:
            break
    ht[i], hk[i], hl[i], he[i] = t, key, lane, ep


@cached_njit
def heap_grow(ht, hk, hl, he):
    m = 2 * ht.shape[0]
    ht2, hk2 = np.empty(m), np.empty(m, np.int64)
    hl2, he2 = np.empty(m, np.int64), np.empty(m, np.int64)
    for i in range(ht.shape[0]):    # a loop: slice assignment costs seconds of compilation
        ht2[i], hk2[i], hl2[i], he2[i] = ht[i], hk[i], hl[i], he[i]
    return ht2, hk2, hl2, he2


@cached_njit(inline=True)
def rates_into(Dn, phase, kid, Wb, P, xs, ys, F, Dd, phi, comm_on, rc, rd, rn, rh, c, keyv,
               order):
    """``BoundModel.rates_of`` over the active lanes (phase 2) of one allocation, in its
    arithmetic and order: writes the compute, data, network and HBM rates ``rc``, ``rd``,
    ``rn``, ``rh`` (FLOP/s, bytes/s) of every active lane (``c``, ``keyv``, ``order``: scratch
    (Dn,)); returns ``(power_capped, l2_scaled)``."""
    issue = P[P_ISSUE]
    ptot = 0.0
    ctot = 0.0
    pk = 0.0
    ncomm = 0
    nord = 0
    for d in range(Dn):
        if phase[d] != 2:
            continue
        k = kid[d]
        if F[d] > 0:
            ptot += Wb[W_POWER, d, k]
        if comm_on[d]:
            ncomm += 1
        rh[d] = 0.0
        if Dd[d] > 0:
            f = phi[d]
            if f > 0:
                sms = Wb[W_SMS, d, k]
                win = Wb[W_WIN, d, k]
                cc = sms * win
                cm = P[P_CMAX] if P[P_CAPPED] > 0 else win * P[P_N]
                if cc > cm:
                    cc = cm
                if P[P_DCAP] > 0:
                    dm = Dd[d] * f
                    if dm < cc:
                        cc = dm
                c[d] = cc
                x = f * sms * issue / cc    # water-filling key; ties in lane order
                keyv[d] = x
                b = nord - 1
                while b >= 0 and keyv[order[b]] > x:
                    order[b + 1] = order[b]
                    b -= 1
                order[b + 1] = d
                nord += 1
                ctot += cc
                pk += cc * Wb[W_PEAK, d, k]
    cs = 1.0 / ptot if ptot > 1.0 else 1.0
    if nord > 0:
        x = ctot / P[P_FULLWIN]
        nx = xs.shape[0]
        if x >= xs[nx - 1]:
            frac = ys[nx - 1]
        else:
            q = 0                       # bisect_right
            while q < nx and xs[q] <= x:
                q += 1
            x0 = xs[q - 1]
            frac = ys[q - 1] + (ys[q] - ys[q - 1]) * (x - x0) / (xs[q] - x0)
        bw = frac * (pk / ctot)
        if nord == 1:
            d = order[0]
            want = phi[d] * Wb[W_SMS, d, kid[d]] * issue
            rh[d] = want if want < bw else bw
        else:
            left_bw = bw
            left_w = ctot
            for a in range(nord):
                d = order[a]
                want = phi[d] * Wb[W_SMS, d, kid[d]] * issue
                share = left_bw * c[d] / left_w
                if want <= share:
                    rh[d] = want
                    left_bw -= want
                    left_w -= c[d]
                else:           # this one and every later one share what is left
                    for a2 in range(a, nord):
                        d2 = order[a2]
                        rh[d2] = left_bw * c[d2] / left_w
                    break
    k1 = P[P_KAPPA] - 1.0
    l2 = 0.0
    nv = P[P_NVLINK] / ncomm if ncomm > 0 else 0.0
    for d in range(Dn):
        if phase[d] != 2:
            continue
        k = kid[d]
        r_c = Wb[W_RATE, d, k] * Wb[W_POWER, d, k] * cs if F[d] > 0 else 0.0
        rc[d] = r_c
        f = phi[d]
        if Dd[d] > 0:
            r = Wb[W_SMS, d, k] * issue
            if f > 0 and rh[d] < r * f:
                r = rh[d] / f
            rd[d] = r
            l2 += r * (1.0 + k1 * f)
        else:
            r = 0.0
            rd[d] = 0.0
        rr = Wb[W_REREAD, d, k]
        if rr > 0:
            l2 += rr * r_c
        rh[d] = r * f
        rn[d] = nv if ncomm > 0 and comm_on[d] else 0.0
    scaled = l2 > P[P_L2BW]
    if scaled:
        scl = P[P_L2BW] / l2
        for d in range(Dn):
            if phase[d] != 2:
                continue
            rd[d] *= scl
            if Wb[W_REREAD, d, kid[d]] > 0:
                rc[d] *= scl
            rh[d] = rd[d] * phi[d]
    return ptot > 1.0, scaled


@cached_njit
def end_task(d, s, j, succ, pending, head):
    """``_end_job`` of lane d's task j (structure s): its data successors lose a pending
    predecessor (``succ``'s pad value, its task count, is skipped) and the lane moves to its
    next task."""
    T = succ.shape[1]
    for q in range(succ.shape[2]):
        x = succ[s, j, q]
        if x < T:
            pending[x] -= 1
    head[d] += 1
