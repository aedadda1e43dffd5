"""The event simulator compiled (docs/method.md §3, "The compiled engine"; issue 42): its loop
run per allocation in machine code by Numba, one row after another, for the allocations of a
``sim.batched.StructureStack`` (each row one allocation of one structure).

It follows ``sim.eventsim.EventSimulator`` (with ``forward=False``), not the lockstep loop of
``sim.batched``: an event heap ordered by (instant, kind, push order) that keeps the stale
completions the simulator's queue keeps (each still moves the counters on to its instant); a
lane's pending completion kept while its rates do not change; launches activated in pop order
(their L2 lookups in that order), kernels snapped and finished in lane order (their writes
admitted to L2), successors and idle lanes' heads started in lane order; the rates by
``BoundModel.rates_of``'s arithmetic in its order (``sim.compiledparts.rates_into``). The L2
table is a recency list (its head the eviction, O(1)). So its makespans equal the simulator's
bit for bit (``tests/sim/test_batched.py``, ``experiments/bench_compiled_sim.py``); coverage is
``sim.batched``'s (green contexts, one stream per stage, the contention model; ``Unbatchable``
otherwise: the timers hand those to the Python simulator).

Cost: the compilation, 4-5 s once per Python environment (kept in Numba's cache beside
``sim.compiledparts`` and this file, or under ``NUMBA_CACHE_DIR``; where no folder is writable,
once per process), then 2-9 ms an allocation of the GPT-OSS 120B frontier structures against
12-114 ms for the Python simulator (``results/bench_compiled_sim_cpu.json``).
Units: µs (instants, makespans), FLOP, bytes, bytes/s, SMs.
"""

from __future__ import annotations

import os

import numpy as np

from subgpu_jax.sim.batched import WORK_FIELDS, StructureStack, check_rows, work_tables
from subgpu_jax.sim.compiledparts import (
    EV_DONE, EV_LAUNCH, EV_SETUP, INF, KIND_STEP, P_CAPPED, P_CMAX, P_DCAP, P_FULLWIN, P_GAIN,
    P_INVCOPY, P_ISSUE, P_KAPPA, P_L2BW, P_L2CAP, P_LAUNCH, P_N, P_NVLINK, P_SETUP, POLICY_CODE,
    W_COMM, W_EXTRA, W_FIXED, W_FLOPS, W_REREAD, W_SCALE, cached_njit, end_task,
    engine_cache_dir, heap_grow, heap_pop, heap_push, l2_append, l2_insert, l2_remove,
    numba_available, rates_into)
from subgpu_jax.sim.contention import BoundModel
from subgpu_jax.sim.eventsim import lone_makespan
from subgpu_jax.sim.l2cache import check_policy

__all__ = ["available", "simulate_stack_compiled", "compile_now", "compile_ahead", "compile_later",
           "engine_ready", "ensure_compiled", "model_params"]


def available() -> bool:
    """Whether the compiled engine can run here (Numba importable)."""
    return numba_available()


@cached_njit
def _simulate_row(s, Wb, P, xs, ys, policy, Dn, Tn, qlen, qjob, nkids, first, inst_kid, succ,
                  pending0, read_key, read_bytes, write_key, write_bytes, write_hbm, kv_hbm,
                  nb, prv, nxt, res):
    """The makespan (µs) of one row: structure ``s`` with work table ``Wb`` (fields, D, NK),
    simulated as ``eventsim.EventSimulator`` does it (its event queue with stale completions,
    pending completions kept while a lane's rates do not change, its arithmetic in its order);
    -1.0 when the simulation stalls (tasks left, no event)."""
    phase = np.zeros(Dn, np.int64)
    head = np.zeros(Dn, np.int64)
    pos = np.zeros(Dn, np.int64)
    inst = np.zeros(Dn, np.int64)
    kid = np.zeros(Dn, np.int64)
    epoch = np.zeros(Dn, np.int64)
    live = np.zeros(Dn, np.bool_)
    F = np.zeros(Dn)
    Dd = np.zeros(Dn)
    Nn = np.zeros(Dn)
    phi = np.zeros(Dn)
    rc = np.zeros(Dn)
    rd = np.zeros(Dn)
    rn = np.zeros(Dn)
    rh = np.zeros(Dn)
    oc = np.zeros(Dn)
    od = np.zeros(Dn)
    on = np.zeros(Dn)
    pc = np.full(Dn, INF)
    pd = np.full(Dn, INF)
    pn = np.full(Dn, INF)
    setup = np.zeros(Dn, np.bool_)
    comm_on = np.zeros(Dn, np.bool_)
    pending = pending0[s].copy()
    c = np.zeros(Dn)
    keyv = np.zeros(Dn)
    order = np.zeros(Dn, np.int64)
    fin = np.zeros(Dn, np.int64)
    occ_cnt = np.zeros(2)
    ht, hk = np.empty(256), np.empty(256, np.int64)     # the event heap: time, kind and
    hl, he = np.empty(256, np.int64), np.empty(256, np.int64)   # push order, lane, epoch
    n = np.int64(0)                 # heap entries (int64, no literal: one compilation
    none = np.int64(-1)             # of heap_push and heap_pop); no epoch
    seq = 0                         # the queue's push counter
    cap = P[P_L2CAP]
    sent = nb.shape[0] - 1
    if policy != 0:                 # an empty table: the sentinel alone
        for i in range(res.shape[0]):
            res[i] = False
        prv[sent] = sent
        nxt[sent] = sent
    jobs_done = 0
    tmax = 0.0
    now = 0.0
    t = 0.0
    started = False
    while True:
        # room for this instant's pushes, reserved once: per lane at most a setup, a launch
        # and a completion event
        while n + 3 * Dn + 1 > ht.shape[0]:
            ht, hk, hl, he = heap_grow(ht, hk, hl, he)
        if started:
            if n == 0:
                break
            # ---- the next instant: counters moved on, its events popped (_advance)
            t = ht[0]
            dt = (t - now) * 1e-6
            if dt > 0:
                for d in range(Dn):
                    if phase[d] == 2:
                        if F[d] > 0:
                            F[d] -= rc[d] * dt
                        if Dd[d] > 0:
                            Dd[d] -= rd[d] * dt
                        if Nn[d] > 0 and not setup[d]:
                            Nn[d] -= rn[d] * dt
            now = t
            valid = False
            while n > 0 and ht[0] == t:
                prio, d, ep = hk[0] // KIND_STEP, hl[0], he[0]
                heap_pop(ht, hk, hl, he, n)
                n -= 1
                if prio == EV_DONE and ep != epoch[d]:
                    continue        # a stale completion
                valid = True
                if prio == EV_DONE:
                    live[d] = False
                elif prio == EV_LAUNCH:     # _activate: the reads' L2 lookups, the counters
                    k = kid[d]
                    i = inst[d]
                    hit_b = 0.0
                    miss_b = 0.0
                    for slot in range(read_key.shape[2]):
                        key = read_key[s, i, slot]
                        if key < 0:
                            continue
                        nbytes = read_bytes[s, i, slot]
                        if policy != 0 and res[key]:
                            hit_b += nbytes
                            if policy == 1:     # lru: a hit becomes the newest
                                l2_remove(key, prv, nxt, res)
                                l2_append(key, prv, nxt, res, sent)
                        else:
                            miss_b += nbytes
                            if policy != 0:
                                l2_insert(key, nbytes, cap, nb, prv, nxt, res, occ_cnt)
                    hbm = miss_b + write_hbm[s, i] + kv_hbm[s, i]
                    extra = Wb[W_EXTRA, d, k]
                    if extra != 0.0:
                        hbm += extra
                    data = hbm + hit_b
                    sc = Wb[W_SCALE, d, k]
                    phase[d] = 2
                    F[d] = Wb[W_FLOPS, d, k] * sc
                    Dd[d] = data * sc
                    phi[d] = hbm / data if data > 0 else 0.0
                    comm = Wb[W_COMM, d, k]
                    Nn[d] = comm * sc
                    if comm > 0 and P[P_SETUP] > 0:
                        setup[d] = True
                        comm_on[d] = False
                        seq += 1
                        heap_push(ht, hk, hl, he, n, t + P[P_SETUP], EV_SETUP * KIND_STEP + seq,
                                   d, none)
                        n += 1
                    else:
                        setup[d] = False
                        comm_on[d] = comm > 0
                else:                       # a setup ends: the payload starts moving
                    setup[d] = False
                    comm_on[d] = Nn[d] > 0
            if not valid:
                continue
            snap = True
        else:
            started = True
            snap = False
        # ---- _settle (snap), then _dispatch when a task ended (at the start: dispatch first)
        released = not snap         # the start dispatches first
        if snap:
            tt = t + (1e-9 + 1e-12 * abs(t))
            nfin = 0
            for d in range(Dn):
                if phase[d] != 2:
                    continue
                if F[d] <= 0 or pc[d] <= tt:
                    F[d] = 0.0
                if Dd[d] <= 0 or pd[d] <= tt:
                    Dd[d] = 0.0
                if Nn[d] <= 0 or pn[d] <= tt:
                    Nn[d] = 0.0
                if F[d] <= 0 and Dd[d] <= 0 and Nn[d] <= 0 and not setup[d]:
                    fin[nfin] = d
                    nfin += 1
            for a in range(nfin):           # _finish_kernel: writes admitted, next kernel
                d = fin[a]
                if policy != 0:
                    i = inst[d]
                    for slot in range(write_key.shape[2]):
                        l2_insert(write_key[s, i, slot], write_bytes[s, i, slot], cap, nb,
                                   prv, nxt, res, occ_cnt)
                phase[d] = 0
                epoch[d] += 1
                live[d] = False
                rc[d] = 0.0
                rd[d] = 0.0
                rn[d] = 0.0
                rh[d] = 0.0
                comm_on[d] = False
                pc[d] = INF
                pd[d] = INF
                pn[d] = INF
                j = qjob[s, d, head[d]]
                if pos[d] + 1 < nkids[s, j]:
                    pos[d] += 1
                    seq += 1
                    heap_push(ht, hk, hl, he, n, _launch_time(d, t, s, Wb, P, first, inst_kid,
                                                               qjob, head, pos, inst, kid, phase,
                                                               rh, Dn), EV_LAUNCH * KIND_STEP + seq,
                               d, none)
                    n += 1
                else:
                    end_task(d, s, j, succ, pending, head)
                    jobs_done += 1
                    tmax = t if t > tmax else tmax
                    released = True
        if released:    # _dispatch: idle lanes' ready heads in lane order; empty tasks restart
            again = True
            while again:
                again = False
                for d in range(Dn):
                    if phase[d] != 0 or head[d] >= qlen[s, d]:
                        continue
                    j = qjob[s, d, head[d]]
                    if j < 0 or pending[j] != 0:
                        continue
                    pos[d] = 0
                    if nkids[s, j] > 0:
                        seq += 1
                        heap_push(ht, hk, hl, he, n, _launch_time(
                            d, t, s, Wb, P, first, inst_kid, qjob, head, pos, inst, kid, phase,
                            rh, Dn), EV_LAUNCH * KIND_STEP + seq, d, none)
                        n += 1
                    else:
                        end_task(d, s, j, succ, pending, head)
                        jobs_done += 1
                        tmax = t if t > tmax else tmax
                        again = True
                        break
        # ---- _recompute: BoundModel.rates_of over the active lanes, then completion events
        pcap, scaled = rates_into(Dn, phase, kid, Wb, P, xs, ys, F, Dd, phi, comm_on, rc, rd,
                                  rn, rh, c, keyv, order)
        for d in range(Dn):
            if phase[d] != 2:
                continue
            cr, dr, nr = rc[d], rd[d], rn[d]
            if live[d] and cr == oc[d] and dr == od[d] and nr == on[d]:
                continue            # the pending completion stays
            oc[d], od[d], on[d] = cr, dr, nr
            f_, dd, nn = F[d], Dd[d], Nn[d]
            if f_ > 0:
                pc[d] = t + f_ / cr * 1e6 if cr > 0 else INF
            else:
                pc[d] = t
            if dd > 0:
                pd[d] = t + dd / dr * 1e6 if dr > 0 else INF
            else:
                pd[d] = t
            if nn > 0:
                pn[d] = t + nn / nr * 1e6 if nr > 0 else INF
            else:
                pn[d] = t
            nx_ = INF
            if dd > 0 and pd[d] < nx_:
                nx_ = pd[d]
            if nn > 0 and pn[d] < nx_:
                nx_ = pn[d]
            if f_ > 0 and pc[d] < nx_ and (nx_ == INF or pcap
                                            or (scaled and Wb[W_REREAD, d, kid[d]] > 0)):
                nx_ = pc[d]
            epoch[d] += 1
            if nx_ < INF:
                seq += 1
                heap_push(ht, hk, hl, he, n, nx_, EV_DONE * KIND_STEP + seq, d, epoch[d])
                n += 1
                live[d] = True
            else:
                live[d] = False
    if jobs_done < Tn:
        return -1.0
    return tmax


@cached_njit
def _launch_time(d, t, s, Wb, P, first, inst_kid, qjob, head, pos, inst, kid, phase, rh, Dn):
    """``_start_kernel``: lane d's current kernel launches; returns its launch event's time
    (after the launch overhead and its fixed latency, loaded by the active lanes' HBM
    traffic)."""
    j = qjob[s, d, head[d]]
    i = first[s, j] + pos[d]
    inst[d] = i
    k = inst_kid[s, i]
    kid[d] = k
    phase[d] = 1
    fixed = Wb[W_FIXED, d, k]
    gain = P[P_GAIN]
    if gain > 0.0 and fixed > 0.0:
        h = 0.0
        for e in range(Dn):
            if phase[e] == 2:
                h += rh[e]
        x = h * P[P_INVCOPY]
        fixed *= 1.0 + gain * (x if x < 1.0 else 1.0)
    return t + P[P_LAUNCH] + fixed


@cached_njit
def _simulate_rows(sid, W, P, xs, ys, policy, Ds, Ts, qlen, qjob, nkids, first, inst_kid,
                   succ, pending0, read_key, read_bytes, write_key, write_bytes, write_hbm,
                   kv_hbm, objects):
    B = sid.shape[0]
    out = np.empty(B)
    nb = np.zeros(objects + 1)
    prv = np.zeros(objects + 1, np.int64)
    nxt = np.zeros(objects + 1, np.int64)
    res = np.zeros(objects + 1, np.bool_)
    for b in range(B):
        s = sid[b]
        out[b] = _simulate_row(s, W[b], P, xs, ys, policy, Ds[s], Ts[s], qlen, qjob, nkids,
                               first, inst_kid, succ, pending0, read_key, read_bytes,
                               write_key, write_bytes, write_hbm, kv_hbm, nb, prv, nxt, res)
    return out


def model_params(bm: BoundModel) -> np.ndarray:
    """The model's scalars as the compiled loop reads them (``P_*``)."""
    hw, model = bm.hw, bm.model
    p = np.zeros(14)
    p[P_CMAX] = bm.cmax
    p[P_CAPPED] = 1.0 if model.inflight_max_B is not None else 0.0
    p[P_N] = bm.N
    p[P_FULLWIN] = bm.full_window
    p[P_ISSUE] = bm.issue
    p[P_DCAP] = 1.0 if bm.demand_cap else 0.0
    p[P_KAPPA] = bm.kappa
    p[P_NVLINK] = bm.nvlink
    p[P_L2BW] = bm.l2
    p[P_LAUNCH] = bm.launch_us
    p[P_SETUP] = bm.setup_us
    p[P_GAIN] = model.latency_gain
    p[P_INVCOPY] = 1.0 / float(hw.hbm_copy_Bps)
    p[P_L2CAP] = float(hw.l2_bytes)
    return p


def simulate_stack_compiled(stack: StructureStack, sid, allocs, cache: str = "lru"
                            ) -> np.ndarray:
    """``sim.batched.simulate_stack`` run by the compiled loop: makespans (µs, float64 (B,)) of
    row b's structure ``stack.structures[sid[b]]`` under allocation ``allocs[b]`` (int SMs per
    stage, each row feasible), one row after another.

    Raises:
        ValueError: an unknown cache policy or malformed rows (``sim.batched.check_rows``).
        RuntimeError: a simulation stalled (a dependency cycle), or Numba is not installed.
    """
    if not numba_available():
        raise RuntimeError("the compiled batched simulator needs numba (pip install numba)")
    if not _READY:
        ensure_compiled()
    return _run_rows(stack, sid, allocs, cache)


def _run_rows(stack: StructureStack, sid, allocs, cache: str) -> np.ndarray:
    """``simulate_stack_compiled`` without the readiness step (``compile_now`` compiles
    through it)."""
    cache = check_policy(cache)
    sid, A = check_rows(stack, sid, allocs)
    bm = BoundModel(stack.model, stack.hw, lone_makespan)
    Wd = work_tables(stack, sid, A, bm)
    W = np.ascontiguousarray(np.stack([Wd[n] for n in WORK_FIELDS], axis=1))  # (B, F, D, NK)
    Ds = np.array([st.D for st in stack.structures], dtype=np.int64)
    out = _simulate_rows(sid, W, model_params(bm), np.asarray(bm.curve_x, dtype=float),
                         np.asarray(bm.curve_y, dtype=float), POLICY_CODE[cache], Ds,
                         stack.Ts, stack.qlen, stack.qjob, stack.nkids, stack.first,
                         stack.inst_kid, stack.succ, stack.pending0, stack.read_key,
                         stack.read_bytes, stack.write_key, stack.write_bytes,
                         stack.write_hbm, stack.kv_hbm, int(stack.objects))
    if np.any(out < 0):
        raise RuntimeError("a compiled batched simulation stalled with tasks left")
    return out


_READY: list = []      # non-empty once this process holds the compiled engine


#: The longest wait (s) for another process's compilation (the lock's holder) before this
#: process compiles its own: a compilation takes 5-9 s on the 2-core box; a holder stopped
#: (Ctrl-Z) or hung would otherwise block every run on its cache folder.
LOCK_WAIT_S = 60.0
#: The Numba index file whose presence means the folder holds the whole engine (the outermost
#: function is compiled, and cached, last).
COMPILED_MARK = "*_simulate_rows*.nbi"


def _lock_file(d: str | None):
    """The engine cache folder's lock file opened for ``flock``, or None where there is no
    folder, no ``fcntl`` (Windows) or the file cannot be opened (another user's, read-only)."""
    if d is None:
        return None
    try:
        import fcntl  # noqa: F401
    except ImportError:     # pragma: no cover - not on Linux or macOS
        return None
    try:
        return open(os.path.join(d, "compile.lock"), "a")
    except OSError:
        return None


def ensure_compiled(wait_s: float = LOCK_WAIT_S) -> float:
    """Make the engine ready in this process, compiling it at most once per cache folder at a
    time: the first process to get the folder's lock file (``compile.lock``, ``fcntl.flock``)
    compiles and writes Numba's cache, the others wait for it and then load that cache (about
    0.3 s instead of 5-6 s each; a search's workers and the compilation ``compile_ahead``
    starts share one). Each process compiles its own where the lock cannot be had: no writable
    cache folder, no ``fcntl`` (Windows), a lock file that cannot be opened or locked (another
    user's; a file system without locks), or a holder that keeps it longer than ``wait_s``
    seconds (a stopped or hung process; said on stderr). Returns the seconds this call took
    (waiting included); 0.0 when the engine was ready.

    Raises:
        RuntimeError: Numba is not installed."""
    if _READY:
        return 0.0
    import time

    t0 = time.perf_counter()
    f = _lock_file(engine_cache_dir())
    if f is None:
        compile_now()
    else:
        import fcntl

        with f:
            locked = False
            while True:
                try:
                    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    locked = True
                    break
                except BlockingIOError:     # held by another process: wait for it
                    if time.perf_counter() - t0 > wait_s:
                        import sys

                        print(f"note: another process has held the compiled engine's lock "
                              f"({f.name}) for {wait_s:.0f} s; compiling in this process",
                              file=sys.stderr)
                        break
                    time.sleep(0.05)
                except OSError:             # no locks on this file system: compile here
                    break
            compile_now()                   # loads the cache when the holder wrote it
            if locked:
                fcntl.flock(f, fcntl.LOCK_UN)
    _READY.append(True)
    return time.perf_counter() - t0


def engine_ready() -> bool:
    """Whether the engine runs here without compiling: ready in this process, or its cache
    folder holds the whole compiled engine (``COMPILED_MARK``; loading it takes about 0.3 s).
    False where Numba is missing or there is no cache folder."""
    if _READY:
        return True
    if not numba_available():
        return False
    import glob

    d = engine_cache_dir()
    return d is not None and bool(glob.glob(os.path.join(d, "**", COMPILED_MARK),
                                            recursive=True))


def compile_ahead():
    """Start compiling the engine in a background process, so that a sweep's worker processes,
    which each need it, wait for one compilation instead of each running their own (5-6 s of a
    core each; ``ensure_compiled``'s lock makes them wait and then load Numba's cache). Started
    only where it pays: Numba installed, a writable cache folder without the whole compiled
    engine in it (no ``COMPILED_MARK`` index file: an interrupted compilation leaves the inner
    functions' files only), a lock file that can be locked and no other process compiling (the
    lock is free). This process takes the lock and hands it to the child (the child's copy of
    the descriptor holds it until the child exits), so no worker can start compiling first.

    Returns:
        the ``subprocess.Popen`` of the compiling process (the caller ``wait()``s for it once
        its sweep ends), or None when nothing was started."""
    return _start_compile(detached=False)


def compile_later():
    """Start compiling the engine for the NEXT run, in a detached process (its own session: it
    outlives this command, which does not wait for it, as ``git gc --auto`` does), under the
    same conditions and lock as ``compile_ahead``. A small sweep that found no compiled engine
    times with the Python simulator (the compilation would cost more than it saves there:
    ``app.searchrun.ENGINE_MIN_POINTS``) and calls this once its grid points are scored, so the
    compilation runs on the core its outputs leave idle. At the caller's priority, not lower:
    a process that needs the engine meanwhile waits for the lock's holder
    (``ensure_compiled``), and a holder at ``nice`` 19 starved by busy cores kept such waiters
    for up to ``LOCK_WAIT_S`` (seen in the test suite on 2 cores).

    Returns:
        the ``subprocess.Popen`` of the compiling process, or None when nothing was started."""
    return _start_compile(detached=True)


def _start_compile(detached: bool):
    """``compile_ahead`` (``detached`` False) and ``compile_later`` (True)."""
    if engine_ready() or not numba_available():
        return None
    d = engine_cache_dir()
    f = _lock_file(d)
    if f is None:
        return None
    import fcntl
    import subprocess
    import sys

    code = "from subgpu_jax.sim.batchednb import compile_now; compile_now()"
    # the child imports this copy of the package: this process's import path (a script or a
    # notebook may have put a checkout first) as its PYTHONPATH
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    with f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:     # another process compiles now, or no locks here
            return None
        try:
            return subprocess.Popen(
                [sys.executable, "-c", code], pass_fds=(f.fileno(),), env=env,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=detached)
        except OSError:     # no process can be started (a process limit): compiled when needed
            return None


def compile_now() -> float:
    """Compile the engine (or load it from Numba's cache) by simulating one small structure (a
    Llama-3.1-8B region graph on the H200, two stages, two microbatches); returns the seconds it
    took. ``experiments/device/studies/frontier.sh`` calls it once before the study's workers
    start, so that they read one cached compilation instead of each compiling its own. A cache
    file Numba cannot read (truncated: Numba renames its files into place without an fsync, so
    a crash can leave one empty; it then raised ``EOFError`` in every later run) is deleted with
    the folder's other engine files, said on stderr, and the engine compiled afresh.

    Raises:
        RuntimeError: Numba is not installed."""
    import pickle

    try:
        return _compile_probe()
    except (EOFError, pickle.UnpicklingError) as e:
        import glob
        import sys

        d = engine_cache_dir()
        if d is None:
            raise
        for f in glob.glob(os.path.join(d, "**", "*.nb[ic]"), recursive=True):
            try:
                os.remove(f)
            except OSError:
                pass
        print(f"note: the compiled engine's cache in {d} was unreadable "
              f"({type(e).__name__}: {e}); deleted and compiled again", file=sys.stderr)
        return _compile_probe()


def _compile_probe() -> float:
    """``compile_now``'s simulation (no cache repair)."""
    import time

    from subgpu_jax.model.deployment import Deployment
    from subgpu_jax.model.hardware import get_hardware
    from subgpu_jax.model.models import get_model
    from subgpu_jax.model.workload import Workload
    from subgpu_jax.sim.batched import BatchStructure
    from subgpu_jax.sim.contention import ContentionModel
    from subgpu_jax.space.config import Config, chain_cut, even_allocation

    t0 = time.perf_counter()
    hw = get_hardware("H200")
    wl = Workload.from_model(get_model("llama-3.1-8b"), Deployment(1, 1, 1, 1, 64, 1024, 1024),
                             hw)
    g = wl.graph(2)
    even = even_allocation(hw.sm_budget, 2, hw.sm_quantum, hw.stage_min_sms)
    cfg = Config(D=2, w=0, seg_of=chain_cut(g.n, [g.n // 2]),
                 alloc=tuple(int(x) for x in even), microbatch=wl.microbatch_size(2))
    st = BatchStructure(g, cfg, hw, ContentionModel())
    _run_rows(st.alone(), np.zeros(1, dtype=np.int64), np.asarray([cfg.alloc], dtype=np.int64),
              "lru")
    return time.perf_counter() - t0
