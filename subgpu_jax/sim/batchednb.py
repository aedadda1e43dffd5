"""The batched event simulator compiled (docs/method.md §3, issue 42): the lockstep loop of
``sim.batched`` written per allocation as scalar loops and compiled by Numba, so one
allocation costs what the event simulator's own loop costs in machine code, not in Python.

``sim.batched._Lockstep`` is the specification this module follows step for step (and through
it ``sim.eventsim.EventSimulator``, the reference): each row (one allocation of one structure
of a ``StructureStack``) takes its next instant (the earliest launch, setup or completion
event of its lanes), moves its counters on, activates the launched kernels in the order their
launch events were pushed (their L2 lookups in that order), snaps and finishes kernels in lane
order (their writes admitted to L2), starts successors and idle lanes' heads, and recomputes
its rates with ``BoundModel.rates_of``'s rules (the response curve, water-filling by
concurrency, the demand cap, the power cap, the L2 port, the loaded memory latency of
launches, the link time and its setup). The rows run one after another; nothing is shared
between them.

The L2 table of a row is a doubly linked list of its resident objects in stamp order (oldest
first): the NumPy loop's stamps are unique per row, so its ``argmin`` over stamps is this
list's head, found in O(1) instead of a scan over every object.

Agreement (``tests/sim/test_batchednb.py``): the same makespans as the NumPy loop and the event
simulator to float rounding (the tests' bound is 1e-9 relative), on every preset's structures,
the three L2 policies and calibrated models; coverage is ``sim.batched``'s (green contexts,
one stream per stage, the contention model; ``Unbatchable`` otherwise).

Cost: the compilation (a few seconds, once per Python environment: the compiled code is kept
in Numba's cache beside this file, or under ``NUMBA_CACHE_DIR``), then per allocation about
the event simulator's work in machine code (``experiments/bench_compiled_sim.py`` measures the
ratio). Units: µs (instants, makespans), FLOP, bytes, bytes/s, SMs.
"""

from __future__ import annotations

import numpy as np

from subgpu_jax.sim.batched import (WORK_FIELDS, StructureStack, check_rows,
                                    work_tables)
from subgpu_jax.sim.contention import BoundModel
from subgpu_jax.sim.eventsim import lone_makespan
from subgpu_jax.sim.l2cache import check_policy

__all__ = ["available", "simulate_stack_compiled", "compile_now", "POLICY_CODE"]

#: The L2 policies as the compiled loop takes them.
POLICY_CODE = {"none": 0, "lru": 1, "fifo": 2}

# the WORK_FIELDS rows of the work table (B, len(WORK_FIELDS), D, NK)
_F = {n: i for i, n in enumerate(WORK_FIELDS)}
W_SMS, W_FLOPS, W_RATE, W_POWER = _F["sms"], _F["flops"], _F["rate_full"], _F["power"]
W_OBJ, W_REREAD, W_PEAK, W_COMM = (_F["obj_bytes"], _F["reread_per_flop"], _F["peak_Bps"],
                                   _F["comm_bytes"])
W_FIXED, W_SCALE, W_WIN, W_EXTRA = (_F["fixed_us"], _F["scale"], _F["window_B_per_sm"],
                                    _F["extra_hbm_bytes"])

# the model's scalars, one float64 vector (``_params``)
(P_CMAX, P_CAPPED, P_N, P_FULLWIN, P_ISSUE, P_DCAP, P_KAPPA, P_NVLINK, P_L2BW, P_LAUNCH,
 P_SETUP, P_GAIN, P_INVCOPY, P_L2CAP) = range(14)

try:    # Numba is a dependency (pyproject.toml); a broken install leaves the NumPy engine
    import numba
    _njit = numba.njit(cache=True, nogil=True)
    _HAVE = True
except ImportError:     # pragma: no cover - exercised only without numba
    numba = None
    _HAVE = False

    def _njit(f):
        return f


def available() -> bool:
    """Whether the compiled engine can run here (Numba importable)."""
    return _HAVE


INF = np.inf


@_njit
def _l2_remove(k, prv, nxt, res):
    p, n = prv[k], nxt[k]
    nxt[p] = n
    prv[n] = p
    res[k] = False


@_njit
def _l2_append(k, prv, nxt, res, head):
    last = prv[head]
    nxt[last] = k
    prv[k] = last
    nxt[k] = head
    prv[head] = k
    res[k] = True


@_njit
def _l2_insert(key, b, cap, nb, prv, nxt, res, occ_cnt):
    """``BatchedL2.insert`` of one row: ``occ_cnt`` = [occupancy bytes, resident count]."""
    head = nb.shape[0] - 1          # the sentinel of the recency list
    if key < 0:
        return
    if res[key]:
        occ_cnt[0] -= nb[key]
        occ_cnt[1] -= 1.0
        _l2_remove(key, prv, nxt, res)
    if not (b <= cap and b > 0):
        return
    while occ_cnt[0] + b > cap and occ_cnt[1] > 0:
        v = nxt[head]               # the oldest resident
        occ_cnt[0] -= nb[v]
        occ_cnt[1] -= 1.0
        _l2_remove(v, prv, nxt, res)
    nb[key] = b
    occ_cnt[0] += b
    occ_cnt[1] += 1.0
    _l2_append(key, prv, nxt, res, head)


@_njit
def _start_kernel(d, now, s, Wb, P, first, inst_kid, qjob, head, pos, inst, kid, seq, nseq,
                  phase, rh, ev_launch, Dn):
    j = qjob[s, d, head[d]]
    i = first[s, j] + pos[d]
    inst[d] = i
    k = inst_kid[s, i]
    kid[d] = k
    nseq[0] += 1
    seq[d] = nseq[0]
    phase[d] = 1
    fixed = Wb[W_FIXED, d, k]
    gain = P[P_GAIN]
    if gain > 0.0 and fixed > 0.0:
        h = 0.0
        for e in range(Dn):
            if e != d and phase[e] == 2:
                h += rh[e]
        x = h * P[P_INVCOPY]
        if x > 1.0:
            x = 1.0
        fixed = fixed * (1.0 + gain * x)
    ev_launch[d] = now + P[P_LAUNCH] + fixed


@_njit
def _end_job(d, s, qjob, succ, pending, head, T):
    j = qjob[s, d, head[d]]
    for q in range(succ.shape[2]):
        x = succ[s, j, q]
        if x < T:
            pending[x] -= 1
    head[d] += 1


@_njit
def _simulate_row(s, Wb, P, xs, ys, policy, Dn, Tn, qlen, qjob, nkids, first, inst_kid, succ,
                  pending0, read_key, read_bytes, write_key, write_bytes, always_hbm,
                  nb, prv, nxt, res):
    """The makespan (µs) of one row: structure ``s`` with work table ``Wb`` (fields, D, NK);
    -1.0 when the simulation stalls (tasks left, no event)."""
    T = succ.shape[1]               # the padded task count: succ's pad value
    t = 0.0
    phase = np.zeros(Dn, np.int64)
    head = np.zeros(Dn, np.int64)
    pos = np.zeros(Dn, np.int64)
    inst = np.zeros(Dn, np.int64)
    kid = np.zeros(Dn, np.int64)
    seq = np.zeros(Dn, np.int64)
    nseq = np.zeros(1, np.int64)
    F = np.zeros(Dn)
    Dd = np.zeros(Dn)
    Nn = np.zeros(Dn)
    phi = np.zeros(Dn)
    rc = np.zeros(Dn)
    rd = np.zeros(Dn)
    rn = np.zeros(Dn)
    rh = np.zeros(Dn)
    pc = np.full(Dn, INF)
    pd = np.full(Dn, INF)
    pn = np.full(Dn, INF)
    ev_launch = np.full(Dn, INF)
    ev_setup = np.full(Dn, INF)
    ev_done = np.full(Dn, INF)
    setup = np.zeros(Dn, np.bool_)
    comm_on = np.zeros(Dn, np.bool_)
    pending = pending0[s].copy()
    c = np.zeros(Dn)
    want = np.zeros(Dn)
    conc_on = np.zeros(Dn, np.bool_)
    keyv = np.zeros(Dn)
    order = np.zeros(Dn, np.int64)
    la = np.zeros(Dn, np.int64)
    se = np.zeros(Dn, np.int64)
    occ_cnt = np.zeros(2)
    cap = P[P_L2CAP]
    sent = nb.shape[0] - 1
    if policy != 0:                 # an empty table: the sentinel alone
        res[:] = False
        prv[sent] = sent
        nxt[sent] = sent
    jobs_done = 0
    first_pass = True
    while True:
        if first_pass:
            first_pass = False
            released = True
        else:
            if jobs_done >= Tn:
                return t
            # ---- the next instant and its events (step)
            tn = INF
            for d in range(Dn):
                if ev_launch[d] < tn:
                    tn = ev_launch[d]
                if ev_setup[d] < tn:
                    tn = ev_setup[d]
                if ev_done[d] < tn:
                    tn = ev_done[d]
            if tn == INF:
                return -1.0
            dt = (tn - t) * 1e-6
            for d in range(Dn):
                if phase[d] == 2:
                    if F[d] > 0:
                        F[d] = F[d] - rc[d] * dt
                    if Dd[d] > 0:
                        Dd[d] = Dd[d] - rd[d] * dt
                    if Nn[d] > 0 and not setup[d]:
                        Nn[d] = Nn[d] - rn[d] * dt
            t = tn
            nla = 0
            nse = 0
            for d in range(Dn):
                if ev_launch[d] == tn:
                    ev_launch[d] = INF
                    la[nla] = d
                    nla += 1
                if ev_setup[d] == tn:
                    ev_setup[d] = INF
                    se[nse] = d
                    nse += 1
                if ev_done[d] == tn:
                    ev_done[d] = INF
            if nla > 1 and policy != 0:     # push order decides the order of L2 lookups
                for a in range(1, nla):     # insertion sort by (seq, lane): stable
                    x = la[a]
                    b = a - 1
                    while b >= 0 and seq[la[b]] > seq[x]:
                        la[b + 1] = la[b]
                        b -= 1
                    la[b + 1] = x
            for a in range(nla):            # activate (_activate, _lookups)
                d = la[a]
                k = kid[d]
                sc = Wb[W_SCALE, d, k]
                if policy == 0:
                    hbm = Wb[W_OBJ, d, k] + Wb[W_EXTRA, d, k]
                    data = hbm
                else:
                    i = inst[d]
                    hit_b = 0.0
                    miss_b = 0.0
                    for slot in range(read_key.shape[2]):
                        key = read_key[s, i, slot]
                        if key < 0:
                            continue
                        nbytes = read_bytes[s, i, slot]
                        if res[key]:
                            hit_b += nbytes
                            if policy == 1:     # lru: a hit becomes the newest
                                _l2_remove(key, prv, nxt, res)
                                _l2_append(key, prv, nxt, res, sent)
                        else:
                            miss_b += nbytes
                            _l2_insert(key, nbytes, cap, nb, prv, nxt, res, occ_cnt)
                    hbm = miss_b + always_hbm[s, i] + Wb[W_EXTRA, d, k]
                    data = hbm + hit_b
                phase[d] = 2
                F[d] = Wb[W_FLOPS, d, k] * sc
                Dd[d] = data * sc
                phi[d] = hbm / data if data > 0 else 0.0
                comm = Wb[W_COMM, d, k]
                Nn[d] = comm * sc
                s_on = comm > 0 and P[P_SETUP] > 0
                setup[d] = s_on
                comm_on[d] = comm > 0 and not s_on
                ev_setup[d] = t + P[P_SETUP] if s_on else INF
            for a in range(nse):            # a setup ends: the payload starts moving
                d = se[a]
                setup[d] = False
                comm_on[d] = Nn[d] > 0
            # settle: snap the counters predicted to end by the instant, finish in lane order
            tol = t + (1e-9 + 1e-12 * abs(t))
            released = False
            for d in range(Dn):
                if phase[d] != 2:
                    continue
                if F[d] <= 0 or pc[d] <= tol:
                    F[d] = 0.0
                if Dd[d] <= 0 or pd[d] <= tol:
                    Dd[d] = 0.0
                if Nn[d] <= 0 or pn[d] <= tol:
                    Nn[d] = 0.0
            for d in range(Dn):
                if phase[d] != 2 or F[d] > 0 or Dd[d] > 0 or Nn[d] > 0 or setup[d]:
                    continue
                # finish (_finish_kernel): writes admitted, next kernel or the task ends
                phase[d] = 0
                rc[d] = 0.0
                rd[d] = 0.0
                rn[d] = 0.0
                rh[d] = 0.0
                comm_on[d] = False
                pc[d] = INF
                pd[d] = INF
                pn[d] = INF
                ev_done[d] = INF
                if policy != 0:
                    i = inst[d]
                    for slot in range(write_key.shape[2]):
                        _l2_insert(write_key[s, i, slot], write_bytes[s, i, slot], cap, nb,
                                   prv, nxt, res, occ_cnt)
                j = qjob[s, d, head[d]]
                if pos[d] + 1 < nkids[s, j]:
                    pos[d] += 1
                    _start_kernel(d, t, s, Wb, P, first, inst_kid, qjob, head, pos, inst,
                                  kid, seq, nseq, phase, rh, ev_launch, Dn)
                else:
                    _end_job(d, s, qjob, succ, pending, head, T)
                    jobs_done += 1
                    released = True
        if released:
            # dispatch: idle lanes whose head task is ready, in lane order; an empty task ends
            # at once and the scan restarts
            again = True
            while again:
                again = False
                for d in range(Dn):
                    if phase[d] != 0 or head[d] >= qlen[s, d]:
                        continue
                    j = qjob[s, d, head[d]]
                    if j < 0 or pending[j] != 0:
                        continue
                    if nkids[s, j] == 0:
                        _end_job(d, s, qjob, succ, pending, head, T)
                        jobs_done += 1
                        again = True
                        break
                    pos[d] = 0
                    _start_kernel(d, t, s, Wb, P, first, inst_kid, qjob, head, pos, inst, kid,
                                  seq, nseq, phase, rh, ev_launch, Dn)
        # ---- recompute (BoundModel.rates_of over the active lanes)
        ptot = 0.0
        ctot = 0.0
        pk = 0.0
        issue = P[P_ISSUE]
        for d in range(Dn):
            conc_on[d] = False
            c[d] = 0.0
            if phase[d] != 2:
                continue
            k = kid[d]
            if F[d] > 0:
                ptot += Wb[W_POWER, d, k]
            sms = Wb[W_SMS, d, k]
            want[d] = phi[d] * sms * issue
            if Dd[d] > 0 and phi[d] > 0:
                win = Wb[W_WIN, d, k]
                cc = sms * win
                cm = P[P_CMAX] if P[P_CAPPED] > 0 else win * P[P_N]
                if cc > cm:
                    cc = cm
                if P[P_DCAP] > 0:
                    dm = Dd[d] * phi[d]
                    if dm < cc:
                        cc = dm
                c[d] = cc
                conc_on[d] = True
                ctot += cc
                pk += cc * Wb[W_PEAK, d, k]
        bw = 0.0
        if ctot > 0:
            x = ctot / P[P_FULLWIN]
            nx = xs.shape[0]
            if x >= xs[nx - 1]:
                frac = ys[nx - 1]
            elif x <= xs[0]:
                frac = ys[0]
            else:
                q = 1
                while xs[q] <= x:
                    q += 1
                frac = ys[q - 1] + (ys[q] - ys[q - 1]) * (x - xs[q - 1]) / (xs[q] - xs[q - 1])
            bw = frac * pk / ctot
        nord = 0
        for d in range(Dn):
            if phase[d] == 2:
                rh[d] = 0.0
            if conc_on[d]:          # water-filling key; ties in lane order (stable)
                keyv[d] = want[d] / (c[d] if c[d] > 0 else 1.0)
                x = keyv[d]
                b = nord - 1
                while b >= 0 and keyv[order[b]] > x:
                    order[b + 1] = order[b]
                    b -= 1
                order[b + 1] = d
                nord += 1
        if ctot > 0:
            left_bw = bw
            left_w = ctot
            for a in range(nord):
                d = order[a]
                share = left_bw * c[d] / (left_w if left_w > 0 else 1.0)
                if want[d] <= share:
                    rh[d] = want[d]
                    left_bw -= want[d]
                    left_w -= c[d]
                else:               # this one and every later one share what is left
                    for a2 in range(a, nord):
                        d2 = order[a2]
                        rh[d2] = left_bw * c[d2] / (left_w if left_w > 0 else 1.0)
                    break
        cs = 1.0 / ptot if ptot > 1.0 else 1.0
        l2 = 0.0
        ncomm = 0
        for d in range(Dn):
            if phase[d] == 2 and comm_on[d]:
                ncomm += 1
        nv = P[P_NVLINK] / ncomm if ncomm > 0 else 0.0
        k1 = P[P_KAPPA] - 1.0
        for d in range(Dn):
            if phase[d] != 2:
                continue
            k = kid[d]
            rc[d] = Wb[W_RATE, d, k] * Wb[W_POWER, d, k] * cs if F[d] > 0 else 0.0
            r = Wb[W_SMS, d, k] * issue
            f = phi[d]
            if f > 0 and rh[d] < r * f:
                r = rh[d] / f
            rd[d] = r if Dd[d] > 0 else 0.0
            if Dd[d] > 0:
                l2 += rd[d] * (1.0 + k1 * f)
            rr = Wb[W_REREAD, d, k]
            if rr > 0:
                l2 += rr * rc[d]
            rh[d] = rd[d] * f
            rn[d] = nv if comm_on[d] else 0.0
        scaled = l2 > P[P_L2BW]
        if scaled:
            scl = P[P_L2BW] / l2
            for d in range(Dn):
                if phase[d] != 2:
                    continue
                rd[d] = rd[d] * scl
                if Wb[W_REREAD, d, kid[d]] > 0:
                    rc[d] = rc[d] * scl
                rh[d] = rd[d] * phi[d]
        pcap = ptot > 1.0
        for d in range(Dn):
            if phase[d] != 2:
                continue
            if F[d] > 0:
                pc[d] = t + F[d] / rc[d] * 1e6 if rc[d] > 0 else INF
            else:
                pc[d] = t
            if Dd[d] > 0:
                pd[d] = t + Dd[d] / rd[d] * 1e6 if rd[d] > 0 else INF
            else:
                pd[d] = t
            if Nn[d] > 0:
                pn[d] = t + Nn[d] / rn[d] * 1e6 if rn[d] > 0 else INF
            else:
                pn[d] = t
            nx_ = INF
            if Dd[d] > 0 and pd[d] < nx_:
                nx_ = pd[d]
            if Nn[d] > 0 and pn[d] < nx_:
                nx_ = pn[d]
            if F[d] > 0 and pc[d] < nx_ and (nx_ == INF or pcap
                                              or (scaled and Wb[W_REREAD, d, kid[d]] > 0)):
                nx_ = pc[d]
            ev_done[d] = nx_


@_njit
def _simulate_rows(sid, W, P, xs, ys, policy, Ds, Ts, qlen, qjob, nkids, first, inst_kid,
                   succ, pending0, read_key, read_bytes, write_key, write_bytes, always_hbm,
                   objects):
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
                               write_key, write_bytes, always_hbm, nb, prv, nxt, res)
    return out


def _params(bm: BoundModel) -> np.ndarray:
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
    if not _HAVE:
        raise RuntimeError("the compiled batched simulator needs numba (pip install numba)")
    cache = check_policy(cache)
    sid, A = check_rows(stack, sid, allocs)
    bm = BoundModel(stack.model, stack.hw, lone_makespan)
    Wd = work_tables(stack, sid, A, bm)
    W = np.ascontiguousarray(np.stack([Wd[n] for n in WORK_FIELDS], axis=1))  # (B, F, D, NK)
    Ds = np.array([st.D for st in stack.structures], dtype=np.int64)
    out = _simulate_rows(sid, W, _params(bm), np.asarray(bm.curve_x, dtype=float),
                         np.asarray(bm.curve_y, dtype=float), POLICY_CODE[cache], Ds,
                         stack.Ts, stack.qlen, stack.qjob, stack.nkids, stack.first,
                         stack.inst_kid, stack.succ, stack.pending0, stack.read_key,
                         stack.read_bytes, stack.write_key, stack.write_bytes,
                         stack.always_hbm, int(stack.objects))
    if np.any(out < 0):
        raise RuntimeError("a compiled batched simulation stalled with tasks left")
    return out


def compile_now() -> float:
    """Compile the engine (or load it from Numba's cache) by simulating one small structure (a
    Llama-3.1-8B region graph on the H200, two stages, two microbatches); returns the seconds it
    took. A pool of worker processes calls it once before starting them, so that they read one
    cached compilation instead of each compiling its own.

    Raises:
        RuntimeError: Numba is not installed."""
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
    simulate_stack_compiled(st.alone(), np.zeros(1, dtype=np.int64),
                            np.asarray([cfg.alloc], dtype=np.int64))
    return time.perf_counter() - t0
