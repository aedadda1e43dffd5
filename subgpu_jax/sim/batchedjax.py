"""The batched event simulator in JAX (``sim.batched``'s loop as one ``lax.while_loop``, in
float64 as the event simulator): every step the same vector operations over the B allocations,
the D stages unrolled. For accelerators: its per-step cost is nearly flat in B, so its rate
grows with the batch. Rows may belong to different structures (a ``StructureStack``: other
cuts, stage counts, microbatch counts or graphs of one GPU and model), whose tables are the
program's arguments, not its constants.

Batches are padded to ``bucket(B)`` rows (a power of two, at least ``MIN_BUCKET``; the padding
repeats the first row) and the stack's tables to power-of-two extents, so a sweep compiles one
program per padded shape and L2 policy, kept in a bounded cache (``PROGRAMS_KEPT``).
Compilation takes seconds per program on a CPU (1.9-5.4 s measured on the main job's
structures; docs/method.md §3, "The batched event simulator").

Semantics and coverage are ``sim.batched``'s, and one more refusal: a task with no kernel
(``Unbatchable``; the NumPy loop ends such tasks at once).

Units: µs, FLOP, bytes, bytes/s, SMs.
"""

from __future__ import annotations

import threading

import cachetools
import numpy as np

from subgpu_jax.sim.batched import (BatchStructure, StructureStack, Unbatchable, check_allocs,
                                    check_rows, work_tables)
from subgpu_jax.sim.contention import BoundModel
from subgpu_jax.sim.eventsim import lone_makespan
from subgpu_jax.sim.l2cache import check_policy

__all__ = ["MIN_BUCKET", "OBJECT_SLOT_STEP", "bucket", "object_slots", "simulate_stack_jax",
           "simulate_allocs_jax"]

#: The smallest padded batch (rows).
MIN_BUCKET = 8
#: Compiled programs kept (least recently used dropped first).
PROGRAMS_KEPT = 32
_PROGRAMS: cachetools.LRUCache = cachetools.LRUCache(PROGRAMS_KEPT)
_LOCK = threading.Lock()


def bucket(B: int, least: int = MIN_BUCKET) -> int:
    """The padded size of B: the next power of two, at least ``least``."""
    return max(int(least), 1 << (max(int(B), 1) - 1).bit_length())


#: The L2 tables' object slots are padded to a multiple of this (not to a power of two: every
#: step's evictions scan every slot of every row, and the main job's 1,226 objects padded to
#: 2,048 made those scans 1.7 times as long as needed).
OBJECT_SLOT_STEP = 128


def object_slots(objects: int) -> int:
    """The L2 tables' width for ``objects`` objects: the next multiple of
    ``OBJECT_SLOT_STEP`` (at least one step)."""
    n = max(int(objects), 1)
    return -(-n // OBJECT_SLOT_STEP) * OBJECT_SLOT_STEP


#: The stack's tables the program takes as arguments, and their padding values.
_TABLES = {"qlen": 0, "qjob": 0, "nkids": 0, "first": 0, "inst_kid": 0, "succ": None,
           "pending0": 0, "read_key": -1, "read_bytes": 0.0, "write_key": -1,
           "write_bytes": 0.0, "always_hbm": 0.0, "Ts": 0}


def _padded_tables(stack: StructureStack) -> dict:
    """The stack's tables padded to bucketed extents (structures, tasks and instances to powers
    of two), so that stacks of similar sizes share a compiled program; padding is never read
    (a padded structure has no rows, a padded task never becomes ready, a padded instance
    never starts). ``qjob`` and ``inst_kid`` pads are 0 (valid indices, unread)."""
    S, T, I = bucket(stack.S, 1), bucket(stack.T, 8), bucket(stack.I, 8)
    out = {}
    for name, fill in _TABLES.items():
        a = np.asarray(getattr(stack, name))
        if name == "qjob":
            a = np.maximum(a, 0)
        if name == "succ":      # the dummy column moves to the padded T
            a = np.where(a == stack.T, T, a)
            fill = T
        shape = list(a.shape)
        shape[0] = S
        if name in ("nkids", "first", "succ"):
            shape[1] = T
        elif name == "pending0":
            shape[1] = T + 1
        elif name in ("inst_kid", "read_key", "read_bytes", "write_key", "write_bytes",
                      "always_hbm"):
            shape[1] = I
        full = np.full(shape, fill, dtype=a.dtype)
        if name == "pending0":
            full[:a.shape[0], :stack.T] = a[:, :stack.T]
        else:
            full[tuple(slice(0, n) for n in a.shape)] = a
        out[name] = full
    return out


def simulate_stack_jax(stack: StructureStack, sid, allocs, cache: str = "lru",
                       timing: dict | None = None) -> np.ndarray:
    """``sim.batched.simulate_stack`` in JAX on its default device: makespans (µs, float64
    (B,)) of row b's structure ``stack.structures[sid[b]]`` under ``allocs[b]``. ``timing``,
    when given, receives ``compile_s`` (0 when the program was cached) and ``run_s`` (wall
    seconds; the result fetched).

    Raises:
        ValueError: an unknown cache policy or malformed rows.
        Unbatchable: a task with no kernel.
        RuntimeError: a simulation stalled (tasks left and no event: a dependency cycle or
            work at zero rate), as the NumPy loop."""
    import time

    import jax

    cache = check_policy(cache)
    sid, A = check_rows(stack, sid, allocs)
    if any((st.nkids == 0).any() for st in stack.structures):
        raise Unbatchable("the JAX loop needs a kernel in every task")
    B = len(A)
    Bp = bucket(B)
    if Bp > B:
        A = np.concatenate([A, np.repeat(A[:1], Bp - B, axis=0)])
        sid = np.concatenate([sid, np.repeat(sid[:1], Bp - B)])
    bm = BoundModel(stack.model, stack.hw, lone_makespan)
    W = work_tables(stack, sid, A, bm)
    NK = bucket(stack.NK, 8)
    if NK > stack.NK:
        W = {n: np.concatenate([v, np.zeros(v.shape[:2] + (NK - stack.NK,))], axis=2)
             for n, v in W.items()}
    tabs = _padded_tables(stack)
    K = object_slots(stack.objects) if cache != "none" else 1
    t0 = time.perf_counter()
    with jax.enable_x64(True):
        key = (cache, K, tuple((n, v.shape) for n, v in tabs.items()), W["sms"].shape,
               id(stack.model), id(stack.hw))
        with _LOCK:
            hit = _PROGRAMS.get(key)
        if hit is None or hit[1] is not stack.model or hit[2] is not stack.hw:
            exe = _program(bm, stack.hw, stack.model, Bp, cache, K).lower(tabs, W, sid).compile()
            with _LOCK:
                _PROGRAMS[key] = (exe, stack.model, stack.hw)
        else:
            exe = hit[0]
        t1 = time.perf_counter()
        t, stalled = exe(tabs, W, sid)
        if bool(stalled):
            raise RuntimeError("a batched simulation stalled with tasks left")
        out = np.asarray(t)[:B]
    t2 = time.perf_counter()
    if timing is not None:
        timing.update(compile_s=t1 - t0, run_s=t2 - t1)
    return out


def simulate_allocs_jax(st: BatchStructure, allocs: np.ndarray, cache: str = "lru",
                        timing: dict | None = None) -> np.ndarray:
    """``simulate_stack_jax`` of one structure: makespans (µs, float64 (B,)) of ``st`` under
    each row of ``allocs`` (int (B, D) SMs per stage, feasible); ``timing`` as there.

    Raises:
        ValueError: an unknown cache policy or a malformed ``allocs``.
        Unbatchable: a task with no kernel."""
    A = check_allocs(st, allocs)
    return simulate_stack_jax(st.alone(), np.zeros(len(A), dtype=np.int64), A, cache, timing)


def _program(bm: BoundModel, hw, model, B: int, cache: str, K: int):
    """The jitted loop for B rows, the L2 policy ``cache`` and K object slots:
    ``run(tabs, W, sid) -> makespans`` (float64 on), the stack's tables (``_padded_tables``),
    the rows' work tables and structure indices as arguments."""
    import jax
    import jax.numpy as jnp

    issue, N, nvlink = bm.issue, bm.N, bm.nvlink
    capped = model.inflight_max_B is not None
    cmax0 = bm.cmax
    xs, ys = jnp.asarray(bm.curve_x), jnp.asarray(bm.curve_y)
    k1, l2cap, dcap = bm.kappa - 1.0, bm.l2, bm.demand_cap
    launch_us, setup_us = bm.launch_us, bm.setup_us
    gain, inv_copy = model.latency_gain, 1.0 / float(hw.hbm_copy_Bps)
    bi = jnp.arange(B)
    l2_on = cache != "none"
    refresh = cache == "lru"
    cap = float(hw.l2_bytes)
    big = jnp.iinfo(jnp.int64).max
    # L2 stamps: one clock tick per insertion or refresh, far below 2**31 in any simulation
    stamp_big = jnp.iinfo(jnp.int32).max

    def l2_insert(s, m, key, n):
        """``BatchedL2.insert`` on the state's L2 arrays (``l2b``, ``l2t``, ``l2c``, ``l2o``,
        ``l2n``): bytes, stamps (``stamp_big``: not resident, so residency is ``l2t <
        stamp_big`` and the oldest resident object is the stamps' argmin), clock, occupancy,
        resident count."""
        valid = m & (key >= 0)
        k = jnp.maximum(key, 0)
        st, nb = s["l2t"], s["l2b"]
        was = valid & (st[bi, k] < stamp_big)
        occ = s["l2o"] - jnp.where(was, nb[bi, k], 0.0)
        cnt = s["l2n"] - was
        st = st.at[bi, k].set(jnp.where(was, stamp_big, st[bi, k]))
        ok = valid & (n <= cap) & (n > 0)

        def need(c):
            _, occ_, cnt_ = c
            return ok & (occ_ + n > cap) & (cnt_ > 0)

        def evict(c):
            st_, occ_, cnt_ = c
            nd = need(c)
            v = jnp.argmin(st_, axis=1)
            occ_ = occ_ - jnp.where(nd, nb[bi, v], 0.0)
            st_ = st_.at[bi, v].set(jnp.where(nd, stamp_big, st_[bi, v]))
            return st_, occ_, cnt_ - nd

        st, occ, cnt = jax.lax.while_loop(lambda c: need(c).any(), evict, (st, occ, cnt))
        clock = s["l2c"] + ok
        return dict(s, l2b=nb.at[bi, k].set(jnp.where(ok, n, nb[bi, k])),
                    l2t=st.at[bi, k].set(jnp.where(ok, clock, st[bi, k])),
                    l2c=clock, l2o=occ + jnp.where(ok, n, 0.0), l2n=cnt + ok)

    def l2_read(s, m, key, n):
        """``BatchedL2.read``: (state, hit mask)."""
        valid = m & (key >= 0)
        k = jnp.maximum(key, 0)
        hit = valid & (s["l2t"][bi, k] < stamp_big)
        if refresh:
            clock = s["l2c"] + hit
            s = dict(s, l2c=clock, l2t=s["l2t"].at[bi, k].set(jnp.where(hit, clock,
                                                                           s["l2t"][bi, k])))
        return l2_insert(s, valid & ~hit, key, n), hit

    def body(tabs, W, sid):
        D = W["sms"].shape[1]
        T = tabs["nkids"].shape[1]
        Q = tabs["qjob"].shape[2]
        lanes = jnp.arange(D)
        qlen = tabs["qlen"][sid]            # (B, D)
        Ts = tabs["Ts"][sid]                # (B,)
        qjob, first, inst_kid = tabs["qjob"], tabs["first"], tabs["inst_kid"]
        nkids, succ = tabs["nkids"], tabs["succ"]
        rkey, rbytes = tabs["read_key"], tabs["read_bytes"]
        wkey, wbytes = tabs["write_key"], tabs["write_bytes"]
        always = tabs["always_hbm"]

        def g(name, kid):
            """Work field of every lane's current kernel, (B, D)."""
            return jnp.take_along_axis(W[name], kid[..., None], axis=2)[..., 0]

        def job(s, d, rows=bi):
            """The task at the head of lane d (clamped past the end: unread)."""
            return qjob[sid[rows], d, jnp.minimum(s["head"][rows, d], Q - 1)]

        def start_kernel(s, m, d):
            inst = first[sid, job(s, d)] + s["pos"][:, d]
            s = dict(s)
            s["inst"] = s["inst"].at[:, d].set(jnp.where(m, inst, s["inst"][:, d]))
            kid = s["kid"].at[:, d].set(jnp.where(m, inst_kid[sid, inst], s["kid"][:, d]))
            fixed = W["fixed_us"][bi, d, kid[:, d]]
            if gain > 0.0:
                others = jnp.where((s["phase"] == 2) & (lanes[None, :] != d), s["rh"], 0.0)
                h = others.sum(axis=1)
                fixed = jnp.where(fixed > 0.0,
                                  fixed * (1.0 + gain * jnp.minimum(1.0, h * inv_copy)), fixed)
            nseq = s["nseq"] + m        # the event queue's push order
            s.update(kid=kid, nseq=nseq,
                     seq=s["seq"].at[:, d].set(jnp.where(m, nseq, s["seq"][:, d])))
            s["phase"] = s["phase"].at[:, d].set(jnp.where(m, 1, s["phase"][:, d]))
            s["ev_launch"] = s["ev_launch"].at[:, d].set(
                jnp.where(m, s["t"] + launch_us + fixed, s["ev_launch"][:, d]))
            return s

        def end_job(s, m, d):
            j = job(s, d)
            s = dict(s)
            dec = jnp.zeros((B, T + 1), dtype=s["pending"].dtype)
            dec = dec.at[bi[:, None], succ[sid, j]].add(m[:, None].astype(dec.dtype))
            s["pending"] = s["pending"] - dec
            s["head"] = s["head"].at[:, d].add(m.astype(s["head"].dtype))
            s["jobs_done"] = s["jobs_done"] + m
            return s

        def dispatch(s, m):
            for d in range(D):
                h = s["head"][:, d]
                j = qjob[sid, d, jnp.minimum(h, Q - 1)]
                ok = m & (s["phase"][:, d] == 0) & (h < qlen[:, d]) & (s["pending"][bi, j] == 0)
                s = dict(s, pos=s["pos"].at[:, d].set(jnp.where(ok, 0, s["pos"][:, d])))
                s = start_kernel(s, ok, d)
            return s

        def recompute(s, m):
            kid, F, Dd, Nn, phi = s["kid"], s["F"], s["Dd"], s["Nn"], s["phi"]
            act = (s["phase"] == 2) & m[:, None]
            sms, win, peak = g("sms", kid), g("window_B_per_sm", kid), g("peak_Bps", kid)
            rate_full, power = g("rate_full", kid), g("power", kid)
            reread = g("reread_per_flop", kid)
            ptot = jnp.where(act & (F > 0), power, 0.0).sum(axis=1)
            conc_on = act & (Dd > 0) & (phi > 0)
            c = jnp.minimum(sms * win, cmax0 if capped else win * N)
            if dcap:
                c = jnp.minimum(c, Dd * phi)
            c = jnp.where(conc_on, c, 0.0)
            ctot = c.sum(axis=1)
            pk = (c * peak).sum(axis=1)
            have = ctot > 0
            x = jnp.where(have, ctot / bm.full_window, 0.0)
            frac = jnp.where(x >= xs[-1], ys[-1], jnp.interp(x, xs, ys))
            bw = jnp.where(have, frac * pk / jnp.where(have, ctot, 1.0), 0.0)
            want = phi * sms * issue
            key = jnp.where(conc_on, want / jnp.where(c > 0, c, 1.0), jnp.inf)
            order = jnp.argsort(key, axis=1, stable=True)
            rh = jnp.where(act, 0.0, s["rh"])
            left_bw, left_w = bw, ctot
            over = jnp.zeros(B, dtype=bool)
            for jpos in range(D):       # water-filling by concurrency
                dj = order[:, jpos]
                on = have & conc_on[bi, dj]
                cj, wj = c[bi, dj], want[bi, dj]
                share = left_bw * cj / jnp.where(left_w > 0, left_w, 1.0)
                fits = on & ~over & (wj <= share)
                val = jnp.where(fits, wj, jnp.where(on, share, rh[bi, dj]))
                rh = rh.at[bi, dj].set(val)
                left_bw = jnp.where(fits, left_bw - wj, left_bw)
                left_w = jnp.where(fits, left_w - cj, left_w)
                over = over | (on & ~fits)
            cs = jnp.where(ptot > 1.0, 1.0 / jnp.where(ptot > 1.0, ptot, 1.0), 1.0)
            rc = jnp.where(act, jnp.where(F > 0, rate_full * power * cs[:, None], 0.0), s["rc"])
            r = sms * issue
            r = jnp.where((phi > 0) & (rh < r * phi), rh / jnp.where(phi > 0, phi, 1.0), r)
            rd = jnp.where(act, jnp.where(Dd > 0, r, 0.0), s["rd"])
            l2 = jnp.where(act & (Dd > 0), rd * (1.0 + k1 * phi), 0.0).sum(axis=1)
            l2 = l2 + jnp.where(act & (reread > 0), reread * rc, 0.0).sum(axis=1)
            rh = jnp.where(act, rd * phi, rh)
            ncomm = (act & s["comm_on"]).sum(axis=1)
            nv = jnp.where(ncomm > 0, nvlink / jnp.maximum(ncomm, 1), 0.0)
            rn = jnp.where(act, jnp.where(s["comm_on"], nv[:, None], 0.0), s["rn"])
            scaled = l2 > l2cap
            sc = jnp.where(scaled, l2cap / jnp.where(scaled, l2, 1.0), 1.0)[:, None]
            sel = act & scaled[:, None]
            rd = jnp.where(sel, rd * sc, rd)
            rc = jnp.where(sel & (reread > 0), rc * sc, rc)
            rh = jnp.where(sel, rd * phi, rh)
            tt = s["t"][:, None]

            def until(work, rate):
                return jnp.where(work > 0, jnp.where(rate > 0, tt + work / jnp.where(
                    rate > 0, rate, 1.0) * 1e6, jnp.inf), tt)

            pc = jnp.where(act, until(F, rc), s["pc"])
            pd = jnp.where(act, until(Dd, rd), s["pd"])
            pn = jnp.where(act, until(Nn, rn), s["pn"])
            nxt = jnp.full((B, D), jnp.inf)
            nxt = jnp.where(Dd > 0, jnp.minimum(nxt, pd), nxt)
            nxt = jnp.where(Nn > 0, jnp.minimum(nxt, pn), nxt)
            pcap = (ptot > 1.0)[:, None]
            use_c = ((F > 0) & (pc < nxt)
                     & ((nxt == jnp.inf) | pcap | (scaled[:, None] & (reread > 0))))
            nxt = jnp.where(use_c, pc, nxt)
            return dict(s, rc=rc, rd=rd, rn=rn, rh=rh, pc=pc, pd=pd, pn=pn,
                        ev_done=jnp.where(act, nxt, s["ev_done"]))

        def step(s):
            run = s["jobs_done"] < Ts
            tn = jnp.minimum(jnp.minimum(s["ev_launch"], s["ev_setup"]), s["ev_done"]).min(axis=1)
            tn = jnp.where(run, tn, s["t"])
            s = dict(s, stalled=s["stalled"] | jnp.any(run & ~jnp.isfinite(tn)))
            dt = ((tn - s["t"]) * 1e-6)[:, None]
            act = s["phase"] == 2
            s = dict(s)
            s["F"] = jnp.where(act & (s["F"] > 0), s["F"] - s["rc"] * dt, s["F"])
            s["Dd"] = jnp.where(act & (s["Dd"] > 0), s["Dd"] - s["rd"] * dt, s["Dd"])
            s["Nn"] = jnp.where(act & (s["Nn"] > 0) & ~s["setup"], s["Nn"] - s["rn"] * dt,
                                s["Nn"])
            s["t"] = tn
            at = (run & jnp.isfinite(tn))[:, None]
            la = at & (s["ev_launch"] == tn[:, None])
            se = at & (s["ev_setup"] == tn[:, None])
            do = at & (s["ev_done"] == tn[:, None])
            s["ev_launch"] = jnp.where(la, jnp.inf, s["ev_launch"])
            s["ev_setup"] = jnp.where(se, jnp.inf, s["ev_setup"])
            s["ev_done"] = jnp.where(do, jnp.inf, s["ev_done"])
            kid = s["kid"]
            sc = g("scale", kid)
            data = g("obj_bytes", kid) + g("extra_hbm_bytes", kid)
            hbm = data
            if l2_on:   # lookups slot by slot (``_lookups``), the lanes in push order
                order = jnp.argsort(jnp.where(la, s["seq"], big), axis=1, stable=True)
                hbm, data = jnp.zeros((B, D)), jnp.zeros((B, D))
                for r_ in range(D):
                    d = order[:, r_]
                    m = la[bi, d]
                    i = s["inst"][bi, d]
                    hit_b = jnp.zeros(B)
                    miss_b = jnp.zeros(B)
                    for slot in range(rkey.shape[2]):
                        key, nb = rkey[sid, i, slot], rbytes[sid, i, slot]
                        s, h = l2_read(s, m, key, nb)
                        hit_b = hit_b + jnp.where(h, nb, 0.0)
                        miss_b = miss_b + jnp.where(m & (key >= 0) & ~h, nb, 0.0)
                    hb = miss_b + always[sid, i] + W["extra_hbm_bytes"][bi, d, kid[bi, d]]
                    hbm = hbm.at[bi, d].set(hb)
                    data = data.at[bi, d].set(hb + hit_b)
            comm = g("comm_bytes", kid)
            s_on = (comm > 0) & (setup_us > 0)
            s["phase"] = jnp.where(la, 2, s["phase"])
            s["F"] = jnp.where(la, g("flops", kid) * sc, s["F"])
            s["Dd"] = jnp.where(la, data * sc, s["Dd"])
            s["phi"] = jnp.where(la, jnp.where(data > 0, hbm / jnp.where(data > 0, data, 1.0),
                                               0.0), s["phi"])
            s["Nn"] = jnp.where(la, comm * sc, s["Nn"])
            s["setup"] = jnp.where(la, s_on, s["setup"])
            s["comm_on"] = jnp.where(la, (comm > 0) & ~s_on, s["comm_on"])
            s["ev_setup"] = jnp.where(la, jnp.where(s_on, tn[:, None] + setup_us, jnp.inf),
                                      s["ev_setup"])
            s["setup"] = jnp.where(se, False, s["setup"])
            s["comm_on"] = jnp.where(se, s["Nn"] > 0, s["comm_on"])
            any_ev = (la | se | do).any(axis=1)
            tol = (tn + (1e-9 + 1e-12 * jnp.abs(tn)))[:, None]
            act = (s["phase"] == 2) & any_ev[:, None]
            s["F"] = jnp.where(act & ((s["F"] <= 0) | (s["pc"] <= tol)), 0.0, s["F"])
            s["Dd"] = jnp.where(act & ((s["Dd"] <= 0) | (s["pd"] <= tol)), 0.0, s["Dd"])
            s["Nn"] = jnp.where(act & ((s["Nn"] <= 0) | (s["pn"] <= tol)), 0.0, s["Nn"])
            fin = act & (s["F"] <= 0) & (s["Dd"] <= 0) & (s["Nn"] <= 0) & ~s["setup"]
            released = jnp.zeros(B, dtype=bool)
            for d in range(D):      # finishes in lane order
                m = fin[:, d]
                for nm in ("rc", "rd", "rn", "rh"):
                    s[nm] = s[nm].at[:, d].set(jnp.where(m, 0.0, s[nm][:, d]))
                for nm in ("pc", "pd", "pn", "ev_done"):
                    s[nm] = s[nm].at[:, d].set(jnp.where(m, jnp.inf, s[nm][:, d]))
                s["phase"] = s["phase"].at[:, d].set(jnp.where(m, 0, s["phase"][:, d]))
                s["comm_on"] = s["comm_on"].at[:, d].set(jnp.where(m, False, s["comm_on"][:, d]))
                if l2_on:   # the kernel's activation writes (``_finish_kernel``)
                    i = s["inst"][:, d]
                    for slot in range(wkey.shape[2]):
                        s = l2_insert(s, m, wkey[sid, i, slot], wbytes[sid, i, slot])
                more = m & (s["pos"][:, d] + 1 < nkids[sid, job(s, d)])
                s["pos"] = s["pos"].at[:, d].add(more.astype(s["pos"].dtype))
                s = start_kernel(s, more, d)
                ends = m & ~more
                s = end_job(s, ends, d)
                released = released | ends
            s = dispatch(s, released)
            return recompute(s, any_ev)

        f64 = jnp.float64
        s = {"t": jnp.zeros(B, f64), "phase": jnp.zeros((B, D), jnp.int32),
             "head": jnp.zeros((B, D), jnp.int64), "pos": jnp.zeros((B, D), jnp.int64),
             "inst": jnp.zeros((B, D), jnp.int64),
             "kid": jnp.zeros((B, D), jnp.int64), "jobs_done": jnp.zeros(B, jnp.int64),
             "pending": tabs["pending0"][sid],
             "setup": jnp.zeros((B, D), bool), "comm_on": jnp.zeros((B, D), bool),
             "seq": jnp.zeros((B, D), jnp.int64), "nseq": jnp.zeros(B, jnp.int64)}
        for nm in ("F", "Dd", "Nn", "phi", "rc", "rd", "rn", "rh"):
            s[nm] = jnp.zeros((B, D), f64)
        for nm in ("pc", "pd", "pn", "ev_launch", "ev_setup", "ev_done"):
            s[nm] = jnp.full((B, D), jnp.inf, f64)
        s.update(l2b=jnp.zeros((B, K), f64),
                 l2t=jnp.full((B, K), stamp_big, jnp.int32), l2c=jnp.zeros(B, jnp.int32),
                 l2o=jnp.zeros(B, f64), l2n=jnp.zeros(B, jnp.int64))
        s = dispatch(s, jnp.ones(B, dtype=bool))
        s = recompute(s, jnp.ones(B, dtype=bool))
        s["stalled"] = jnp.zeros((), bool)
        # a row with tasks left and no event (a dependency cycle, zero-rate work) stops the
        # loop instead of spinning; the caller raises
        s = jax.lax.while_loop(lambda s: jnp.any(s["jobs_done"] < Ts) & ~s["stalled"], step, s)
        return s["t"], s["stalled"]

    return jax.jit(body)
