"""A prototype of a batched event simulator (issue 42 item 1): many SM allocations of one
structure simulated together in lockstep, each with its own control flow, in NumPy; checked
against the event simulator and timed beside it. An experiment, not a library timer.

``vc_mechanisms.py`` found that the vectorised contention scorer cannot reproduce the event
simulator (its residual is HBM sharing itself) and ``eventsim_order_sharing.py`` that the
allocations of a batch do not share one order of events. So a batched exact timer has to advance
every allocation's own events. This prototype does that for B allocations of one configuration
structure (cut, stages, reuse, microbatches, policy; one stream per stage): per step, each
allocation takes its own next instant (the earliest of its lanes' launch, setup and completion
events), moves its counters on, activates, snaps and finishes kernels, releases and starts
tasks in lane order, and recomputes its rates (``BoundModel.rates_of``'s rules: the response
curve, water-filling by concurrency, the demand cap, the power cap, the L2 port, the loaded
memory latency of launches, the link time and its setup), with the per-lane loops over the D
stages and every operation a vector over the B allocations.

The L2 table (``--cache lru``, the default model's policy) is ``BatchedLRU``: per allocation,
which of the structure's objects (``eventsim.object_tables``) are resident, their bytes and
recency, each kernel's reads looked up in order at its activation and its writes admitted when
it ends; in both loops (the JAX loop's eviction is a ``lax.while_loop`` of argmins). **Not
covered**: pools
shared by several streams (refused), calibrations. The reference is ``eventsim.simulate(...,
cache, forward=False)`` on the same configurations.

The same loop is written twice: in NumPy (``simulate_batch``: a Python step loop over vector
operations) and in JAX (``simulate_batch_jax``: one ``lax.while_loop``, float64, compiled once
per structure and batch size; on an accelerator as on the CPU).

Measured (a table and ``results/batched_eventsim_proto.json``): per SubGPU record of a search of
the default workload (``--records``), its configuration and every one-quantum move (one polish
pass, 2-6 allocations) plus ``--extra`` random allocations of the same structure, scored (a) by
the event simulator one at a time (full simulation, the cache off), (b) by the NumPy loop and
(c) by the JAX loop in one batch each; the largest relative makespan difference and the wall
seconds of each (JAX: its compilation and one run apart), at the batch sizes given.

Usage: python experiments/batched_eventsim_proto.py --records DIR/records.jsonl
       [--extra N ...] [--out JSON]
Units: µs (makespans), seconds (wall), FLOP, bytes, bytes/s inside.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from digest_cli import check_out, write_digest  # noqa: E402
from eventsim_order_sharing import default_records, record_setup  # noqa: E402  (shared)

INF = float("inf")


class Structure:
    """The task DAG of one configuration structure as flat arrays (lane queues, kernels of each
    task, successors, data-predecessor counts), from the event simulator's own jobs."""

    def __init__(self, g, cfg, hw, model) -> None:
        from subgpu_jax.sim.eventsim import EventSimulator, object_tables

        if cfg.streams_per_stage != 1:
            raise ValueError("the prototype covers one stream per stage")
        sim = EventSimulator.from_config(g, cfg, hw, model, "none", record=False)
        self.kernels = g.kernels
        self.D = len(sim.lanes)
        self.queues = [[j.index for j in u.queue] for u in sim.lanes]
        self.T = len(sim.jobs)
        self.kids = [j.kids for j in sim.jobs]
        self.succ = [[s.index for s in j.succ] for j in sim.jobs]
        self.pending0 = np.array([j.pending for j in sim.jobs], dtype=np.int64)
        self.lane_kids = [sorted({k for j in self.queues[d] for k in self.kids[j]})
                          for d in range(self.D)]
        # the L2 objects of every kernel instance (eventsim.object_tables): read and write
        # slots (object id, bytes; -1 pads) and the bytes always from HBM (writes + KV)
        objs, writes = object_tables(g.kernels, g.layers_per_region)
        ids: dict = {}
        kmax = max(1, max(len(k) for k in self.kids))
        R = max(1, max(len(objs[k][0]) + len(objs[k][1]) for ks in self.kids for k in ks))
        Wm = max(1, max(len(writes[k]) for ks in self.kids for k in ks))
        self.read_key = np.full((self.T, kmax, R), -1, dtype=np.int64)
        self.read_bytes = np.zeros((self.T, kmax, R))
        self.write_key = np.full((self.T, kmax, Wm), -1, dtype=np.int64)
        self.write_bytes = np.zeros((self.T, kmax, Wm))
        self.always_hbm = np.zeros((self.T, kmax))
        for j, job in enumerate(sim.jobs):
            l, mu = job.region, job.mb
            for q, k in enumerate(job.kids):
                w, r, wb, kv = objs[k]
                slots = [(("w", l, nm), b) for nm, b in w]
                slots += [(("a", l + sh, mu, nm), b) for nm, sh, b in r]
                for i, (key, b) in enumerate(slots):
                    self.read_key[j, q, i] = ids.setdefault(key, len(ids))
                    self.read_bytes[j, q, i] = b
                for i, (nm, sh, b) in enumerate(writes[k]):
                    self.write_key[j, q, i] = ids.setdefault(("a", l + sh, mu, nm), len(ids))
                    self.write_bytes[j, q, i] = b
                self.always_hbm[j, q] = wb + kv
        self.objects = len(ids)


#: The ``KernelWork`` fields the batched loop reads (sim.kernelwork).
WORK_FIELDS = ("sms", "flops", "rate_full", "power", "obj_bytes", "reread_per_flop", "peak_Bps",
               "comm_bytes", "fixed_us", "scale", "window_B_per_sm", "extra_hbm_bytes")


def work_tables(st: Structure, allocs: np.ndarray, bm) -> dict:
    """``{field: (B, D, NK) array}``: the ``KernelWork`` of every kernel of lane d on
    allocation b's pool of d (``BoundModel.work``, memoised by kernel and pool size)."""
    B, D = allocs.shape
    W = {n: np.zeros((B, D, len(st.kernels))) for n in WORK_FIELDS}
    memo: dict = {}
    for b in range(B):
        for d in range(D):
            p = int(allocs[b, d])
            for k in st.lane_kids[d]:
                w = memo.get((k, p))
                if w is None:
                    w = memo[(k, p)] = bm.work(st.kernels[k], p)
                for n in WORK_FIELDS:
                    W[n][b, d, k] = getattr(w, n)
    return W


class BatchedLRU:
    """The L2 table of ``sim.l2cache.L2Cache`` (policy ``lru``) for B allocations at once: per
    allocation, which of the structure's objects are resident, their bytes and recency."""

    def __init__(self, B: int, objects: int, capacity: float) -> None:
        self.cap = float(capacity)
        self.present = np.zeros((B, objects), dtype=bool)
        self.nbytes = np.zeros((B, objects))
        self.stamp = np.zeros((B, objects), dtype=np.int64)
        self.clock = np.zeros(B, dtype=np.int64)
        self.occ = np.zeros(B)

    def _touch(self, rows, keys) -> None:
        self.clock[rows] += 1
        self.stamp[rows, keys] = self.clock[rows]

    def insert(self, m: np.ndarray, key: np.ndarray, n: np.ndarray) -> None:
        """``L2Cache._insert`` for the allocations of mask m (key, bytes each)."""
        rows = np.flatnonzero(m & (key >= 0))
        if rows.size == 0:
            return
        k, b = key[rows], n[rows]
        was = self.present[rows, k]
        self.occ[rows[was]] -= self.nbytes[rows[was], k[was]]
        self.present[rows[was], k[was]] = False
        ok = (b <= self.cap) & (b > 0)
        rows, k, b = rows[ok], k[ok], b[ok]
        while True:
            need = (self.occ[rows] + b > self.cap) & self.present[rows].any(axis=1)
            if not need.any():
                break
            r = rows[need]
            victim = np.argmin(np.where(self.present[r], self.stamp[r], np.iinfo(np.int64).max),
                               axis=1)
            self.occ[r] -= self.nbytes[r, victim]
            self.present[r, victim] = False
        self.present[rows, k] = True
        self.nbytes[rows, k] = b
        self.occ[rows] += b
        self._touch(rows, k)

    def read(self, m: np.ndarray, key: np.ndarray, n: np.ndarray) -> np.ndarray:
        """``L2Cache.read``: True where a hit (recency refreshed); a miss is admitted."""
        valid = m & (key >= 0)
        hit = np.zeros_like(valid)
        hit[valid] = self.present[np.flatnonzero(valid), key[valid]]
        rows = np.flatnonzero(hit)
        if rows.size:
            self._touch(rows, key[rows])
        self.insert(valid & ~hit, key, n)
        return hit


def simulate_batch(st: Structure, allocs: np.ndarray, hw, model,
                   cache: str = "none") -> np.ndarray:
    """Makespans (µs) of the allocations ``allocs`` (B, D) of ``st`` (module docstring);
    ``cache``: the L2 policy, ``none`` or ``lru`` (``BatchedLRU``).

    Raises:
        ValueError: another cache policy."""
    if cache not in ("none", "lru"):
        raise ValueError(f"cache must be none or lru, got {cache!r}")
    from subgpu_jax.sim.contention import BoundModel
    from subgpu_jax.sim.eventsim import lone_makespan

    bm = BoundModel(model, hw, lone_makespan)
    B, D = allocs.shape
    W = work_tables(st, allocs, bm)
    # the rate model's constants (BoundModel's own)
    issue, N, nvlink = bm.issue, bm.N, bm.nvlink
    capped = model.inflight_max_B is not None
    cmax0 = bm.cmax
    xs, ys = np.asarray(bm.curve_x), np.asarray(bm.curve_y)
    k1, l2cap, dcap = bm.kappa - 1.0, bm.l2, bm.demand_cap
    launch_us, setup_us = bm.launch_us, bm.setup_us
    gain, inv_copy = model.latency_gain, 1.0 / float(hw.hbm_copy_Bps)

    bi = np.arange(B)
    t = np.zeros(B)
    phase = np.zeros((B, D), dtype=np.int8)      # 0 idle, 1 launching, 2 active
    head = np.zeros((B, D), dtype=np.int64)
    pos = np.zeros((B, D), dtype=np.int64)
    kid = np.zeros((B, D), dtype=np.int64)
    F, Dd, Nn = (np.zeros((B, D)) for _ in range(3))
    phi = np.zeros((B, D))
    setup = np.zeros((B, D), dtype=bool)
    comm_on = np.zeros((B, D), dtype=bool)
    rc, rd, rn, rh = (np.zeros((B, D)) for _ in range(4))
    pc, pd, pn = (np.full((B, D), INF) for _ in range(3))
    ev_launch, ev_setup, ev_done = (np.full((B, D), INF) for _ in range(3))
    pending = np.tile(st.pending0, (B, 1))
    jobs_done = np.zeros(B, dtype=np.int64)
    l2 = BatchedLRU(B, st.objects, hw.l2_bytes) if cache == "lru" else None
    qlen = np.array([len(q) for q in st.queues])
    qjob = np.full((D, int(qlen.max()) + 1), -1, dtype=np.int64)
    for d, q in enumerate(st.queues):
        qjob[d, :len(q)] = q
    nkids = np.array([len(k) for k in st.kids])
    kidtab = np.full((st.T, int(nkids.max()) if st.T else 1), -1, dtype=np.int64)
    for j, ks in enumerate(st.kids):
        kidtab[j, :len(ks)] = ks

    def wk(name, m, d):
        """Work field ``name`` of lane d's current kernel for the allocations of mask m."""
        return W[name][m, d, kid[m, d]]

    def start_kernel(m, d, now):
        """Lane d of the allocations in m starts its current kernel (``_start_kernel``)."""
        kid[m, d] = kidtab[qjob[d, head[m, d]], pos[m, d]]
        phase[m, d] = 1
        fixed = wk("fixed_us", m, d)
        if gain > 0.0:
            others = np.where(phase[m] == 2, rh[m], 0.0)
            others[:, d] = 0.0
            h = others.sum(axis=1)
            fixed = np.where(fixed > 0.0, fixed * (1.0 + gain * np.minimum(1.0, h * inv_copy)),
                             fixed)
        ev_launch[m, d] = now[m] + launch_us + fixed

    def end_job(m, d):
        """Lane d of the allocations in m ends its task (``_end_job``)."""
        j = qjob[d, head[m, d]]
        head[m, d] += 1
        jobs_done[m] += 1
        for b, jj in zip(np.flatnonzero(m), j):
            for s in st.succ[jj]:
                pending[b, s] -= 1

    def dispatch(m, now):
        """Start the head task of every idle lane whose predecessors are done, in lane order;
        an empty task ends at once and the scan restarts (``_dispatch``)."""
        again = m.copy()
        while again.any():
            nxt = np.zeros(B, dtype=bool)
            scan = again.copy()
            for d in range(D):
                j = qjob[d, np.minimum(head[:, d], qlen[d])]
                ok = scan & (phase[:, d] == 0) & (head[:, d] < qlen[d])
                ok &= np.where(j >= 0, pending[bi, np.maximum(j, 0)] == 0, False)
                if not ok.any():
                    continue
                empty = ok & (nkids[np.maximum(j, 0)] == 0)
                go = ok & ~empty
                if go.any():
                    pos[go, d] = 0
                    start_kernel(go, d, now)
                if empty.any():
                    end_job(empty, d)
                    nxt |= empty
                    scan &= ~empty      # its scan restarts
            again = nxt

    def recompute(m, now):
        """Rates and completion events of the active kernels (``_recompute``, ``rates_of``)."""
        act = (phase == 2) & m[:, None]
        f_on, d_on = act & (F > 0), act & (Dd > 0)
        ptot = np.where(f_on, W["power"][bi[:, None], np.arange(D), kid], 0.0).sum(axis=1)
        sms = W["sms"][bi[:, None], np.arange(D), kid]
        win = W["window_B_per_sm"][bi[:, None], np.arange(D), kid]
        peak = W["peak_Bps"][bi[:, None], np.arange(D), kid]
        conc_on = d_on & (phi > 0)
        c = sms * win
        cm = cmax0 if capped else win * N
        c = np.minimum(c, cm)
        if dcap:
            c = np.minimum(c, Dd * phi)
        c = np.where(conc_on, c, 0.0)
        ctot = c.sum(axis=1)
        pk = (c * peak).sum(axis=1)
        have = ctot > 0
        x = np.where(have, ctot / bm.full_window, 0.0)
        frac = np.where(x >= xs[-1], ys[-1], np.interp(x, xs, ys))
        bw = np.where(have, frac * pk / np.where(have, ctot, 1.0), 0.0)
        want = phi * sms * issue
        key = np.where(conc_on, want / np.where(c > 0, c, 1.0), INF)
        order = np.argsort(key, axis=1, kind="stable")     # ties: lane order
        rh[:] = np.where(act, 0.0, rh)
        left_bw, left_w = bw.copy(), ctot.copy()
        filling = have & m
        for j in range(D):
            dj = order[:, j]
            on = filling & conc_on[bi, dj]
            cj, wj = c[bi, dj], want[bi, dj]
            share = np.where(on, left_bw * cj / np.where(left_w > 0, left_w, 1.0), 0.0)
            fits = on & (wj <= share)
            rh[bi[fits], dj[fits]] = wj[fits]
            left_bw = np.where(fits, left_bw - wj, left_bw)
            left_w = np.where(fits, left_w - cj, left_w)
            over = on & ~fits
            if over.any():      # this one and every later one share what is left
                for jj in range(j, D):
                    dd = order[:, jj]
                    o2 = over & conc_on[bi, dd]
                    rh[bi[o2], dd[o2]] = (left_bw * c[bi, dd] / np.where(left_w > 0, left_w,
                                                                         1.0))[o2]
                filling &= ~over
        cs = np.where(ptot > 1.0, 1.0 / np.where(ptot > 1.0, ptot, 1.0), 1.0)
        rate_full = W["rate_full"][bi[:, None], np.arange(D), kid]
        power = W["power"][bi[:, None], np.arange(D), kid]
        reread = W["reread_per_flop"][bi[:, None], np.arange(D), kid]
        rc[:] = np.where(act, np.where(F > 0, rate_full * power * cs[:, None], 0.0), rc)
        r = sms * issue
        r = np.where((phi > 0) & (rh < r * phi), rh / np.where(phi > 0, phi, 1.0), r)
        rd[:] = np.where(act, np.where(Dd > 0, r, 0.0), rd)
        l2 = np.where(act & (Dd > 0), rd * (1.0 + k1 * phi), 0.0).sum(axis=1)
        l2 += np.where(act & (reread > 0), reread * rc, 0.0).sum(axis=1)
        rh[:] = np.where(act, rd * phi, rh)
        ncomm = (act & comm_on).sum(axis=1)
        nv = np.where(ncomm > 0, nvlink / np.maximum(ncomm, 1), 0.0)
        rn[:] = np.where(act, np.where(comm_on, nv[:, None], 0.0), rn)
        scaled = l2 > l2cap
        if scaled.any():
            sc = np.where(scaled, l2cap / np.where(scaled, l2, 1.0), 1.0)[:, None]
            sel = act & scaled[:, None]
            rd[:] = np.where(sel, rd * sc, rd)
            rc[:] = np.where(sel & (reread > 0), rc * sc, rc)
            rh[:] = np.where(sel, rd * phi, rh)
        tt = now[:, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            pc[:] = np.where(act, np.where(F > 0, np.where(rc > 0, tt + F / rc * 1e6, INF), tt), pc)
            pd[:] = np.where(act, np.where(Dd > 0, np.where(rd > 0, tt + Dd / rd * 1e6, INF), tt),
                             pd)
            pn[:] = np.where(act, np.where(Nn > 0, np.where(rn > 0, tt + Nn / rn * 1e6, INF), tt),
                             pn)
        nxt = np.full((B, D), INF)
        nxt = np.where(Dd > 0, np.minimum(nxt, pd), nxt)
        nxt = np.where(Nn > 0, np.minimum(nxt, pn), nxt)
        pcap = (ptot > 1.0)[:, None]
        use_c = (F > 0) & (pc < nxt) & ((nxt == INF) | pcap | (scaled[:, None] & (reread > 0)))
        nxt = np.where(use_c, pc, nxt)
        ev_done[:] = np.where(act, nxt, ev_done)

    every = np.ones(B, dtype=bool)
    dispatch(every, t)
    recompute(every, t)
    T = st.T
    while True:
        run = jobs_done < T
        if not run.any():
            break
        tn = np.minimum(np.minimum(ev_launch, ev_setup), ev_done).min(axis=1)
        tn = np.where(run, tn, t)
        if np.any(run & ~np.isfinite(tn)):
            raise RuntimeError("a batched simulation stalled with tasks left")
        dt = ((tn - t) * 1e-6)[:, None]
        act = phase == 2
        F[:] = np.where(act & (F > 0), F - rc * dt, F)
        Dd[:] = np.where(act & (Dd > 0), Dd - rd * dt, Dd)
        Nn[:] = np.where(act & (Nn > 0) & ~setup, Nn - rn * dt, Nn)
        t = tn
        at = run[:, None] & np.isfinite(tn)[:, None]
        la = at & (ev_launch == tn[:, None])
        se = at & (ev_setup == tn[:, None])
        do = at & (ev_done == tn[:, None])
        ev_launch[la] = INF
        ev_setup[se] = INF
        ev_done[do] = INF
        for d in range(D):          # activations (``_activate``), cache off
            m = la[:, d]
            if not m.any():
                continue
            sc = wk("scale", m, d)
            if l2 is None:
                data = wk("obj_bytes", m, d) + wk("extra_hbm_bytes", m, d)
                hbm = data
            else:       # ``_lookups``: each read slot in order, hits and misses
                j, q = qjob[d, head[:, d]], pos[:, d]
                hit_b = np.zeros(B)
                miss_b = np.zeros(B)
                for slot in range(st.read_key.shape[2]):
                    key, nb = st.read_key[j, q, slot], st.read_bytes[j, q, slot]
                    h = l2.read(m, key, nb)
                    hit_b += np.where(h, nb, 0.0)
                    miss_b += np.where(m & (key >= 0) & ~h, nb, 0.0)
                hbm = (miss_b + st.always_hbm[j, q])[m] + wk("extra_hbm_bytes", m, d)
                data = hbm + hit_b[m]
            phase[m, d] = 2
            F[m, d] = wk("flops", m, d) * sc
            Dd[m, d] = data * sc
            phi[m, d] = np.where(data > 0, hbm / np.where(data > 0, data, 1.0), 0.0)
            comm = wk("comm_bytes", m, d)
            Nn[m, d] = comm * sc
            s_on = (comm > 0) & (setup_us > 0)
            setup[m, d] = s_on
            comm_on[m, d] = (comm > 0) & ~s_on
            ev_setup[m, d] = np.where(s_on, t[m] + setup_us, INF)
        setup[se] = False
        comm_on[se] = Nn[se] > 0
        any_ev = (la | se | do).any(axis=1)
        # settle (snap to the instant up to the rounding tolerance, then finish)
        tol = (t + (1e-9 + 1e-12 * np.abs(t)))[:, None]
        act = (phase == 2) & any_ev[:, None]
        F[:] = np.where(act & ((F <= 0) | (pc <= tol)), 0.0, F)
        Dd[:] = np.where(act & ((Dd <= 0) | (pd <= tol)), 0.0, Dd)
        Nn[:] = np.where(act & ((Nn <= 0) | (pn <= tol)), 0.0, Nn)
        fin = act & (F <= 0) & (Dd <= 0) & (Nn <= 0) & ~setup
        released = np.zeros(B, dtype=bool)
        for d in range(D):          # in lane order, as the active list
            m = fin[:, d]
            if not m.any():
                continue
            phase[m, d] = 0
            rc[m, d] = rd[m, d] = rn[m, d] = rh[m, d] = 0.0
            comm_on[m, d] = False
            pc[m, d] = pd[m, d] = pn[m, d] = INF
            ev_done[m, d] = INF
            j = qjob[d, head[m, d]]
            if l2 is not None:     # ``_finish_kernel``: the kernel's activation writes
                jj, qq = qjob[d, head[:, d]], pos[:, d]
                for slot in range(st.write_key.shape[2]):
                    l2.insert(m, st.write_key[jj, qq, slot], st.write_bytes[jj, qq, slot])
            more = np.zeros(B, dtype=bool)
            more[m] = pos[m, d] + 1 < nkids[j]
            if more.any():
                pos[more, d] += 1
                start_kernel(more, d, t)
            ends = m & ~more
            if ends.any():
                end_job(ends, d)
                released |= ends
        if released.any():
            dispatch(released, t)
        recompute(any_ev, t)
    return t


def simulate_batch_jax(st: Structure, allocs: np.ndarray, hw, model,
                       timing: dict | None = None, cache: str = "none") -> np.ndarray:
    """``simulate_batch`` as one ``jax.lax.while_loop`` (in float64, under
    ``jax.enable_x64(True)``, as the simulator), each step the same operations over the B allocations; the D stages unrolled. Tasks
    with no kernel are refused (the NumPy loop ends them at once; no structure of the studies
    has one). ``timing``, when given, receives ``compile_s`` and ``run_s`` (wall seconds of the
    compilation and of one execution, the result fetched)."""
    import jax
    import jax.numpy as jnp

    from subgpu_jax.sim.contention import BoundModel
    from subgpu_jax.sim.eventsim import lone_makespan

    if cache not in ("none", "lru"):
        raise ValueError(f"cache must be none or lru, got {cache!r}")
    with jax.enable_x64(True):
        return _simulate_batch_jax(st, allocs, hw, model, timing, cache)


def _simulate_batch_jax(st, allocs, hw, model, timing, cache):
    """The body of ``simulate_batch_jax`` (float64 on)."""
    import jax
    import jax.numpy as jnp

    from subgpu_jax.sim.contention import BoundModel
    from subgpu_jax.sim.eventsim import lone_makespan

    nk_task = np.array([len(k) for k in st.kids])
    if (nk_task == 0).any():
        raise ValueError("simulate_batch_jax: a task with no kernel (use simulate_batch)")
    bm = BoundModel(model, hw, lone_makespan)
    B, D = allocs.shape
    Wn = work_tables(st, allocs, bm)
    W = {n: jnp.asarray(v) for n, v in Wn.items()}
    issue, N, nvlink = bm.issue, bm.N, bm.nvlink
    capped = model.inflight_max_B is not None
    cmax0 = bm.cmax
    xs, ys = jnp.asarray(bm.curve_x), jnp.asarray(bm.curve_y)
    k1, l2cap, dcap = bm.kappa - 1.0, bm.l2, bm.demand_cap
    launch_us, setup_us = bm.launch_us, bm.setup_us
    gain, inv_copy = model.latency_gain, 1.0 / float(hw.hbm_copy_Bps)
    T = st.T
    qlen_np = np.array([len(q) for q in st.queues])
    qjob_np = np.full((D, int(qlen_np.max()) + 1), 0, dtype=np.int64)
    for d, q in enumerate(st.queues):
        qjob_np[d, :len(q)] = q
    kid_np = np.zeros((T, int(nk_task.max())), dtype=np.int64)
    for j, ks in enumerate(st.kids):
        kid_np[j, :len(ks)] = ks
    smax = max(1, max(len(x) for x in st.succ))
    succ_np = np.full((T, smax), T, dtype=np.int64)        # T: a dummy column
    for j, x in enumerate(st.succ):
        succ_np[j, :len(x)] = x
    qlen, qjob = jnp.asarray(qlen_np), jnp.asarray(qjob_np)
    nkids, kidtab, succ = jnp.asarray(nk_task), jnp.asarray(kid_np), jnp.asarray(succ_np)
    bi = jnp.arange(B)
    lanes = jnp.arange(D)
    lru = cache == "lru"
    cap = float(hw.l2_bytes)
    rkey, rbytes = jnp.asarray(st.read_key), jnp.asarray(st.read_bytes)
    wkey, wbytes = jnp.asarray(st.write_key), jnp.asarray(st.write_bytes)
    always = jnp.asarray(st.always_hbm)
    big = jnp.iinfo(jnp.int64).max

    def l2_insert(s, m, key, n):
        """``BatchedLRU.insert`` on the state's L2 arrays (``l2p``, ``l2b``, ``l2t``,
        ``l2c``, ``l2o``): residency, bytes, stamps, clock, occupancy."""
        valid = m & (key >= 0)
        k = jnp.maximum(key, 0)
        pres, nb = s["l2p"], s["l2b"]
        was = valid & pres[bi, k]
        occ = s["l2o"] - jnp.where(was, nb[bi, k], 0.0)
        pres = pres.at[bi, k].set(jnp.where(was, False, pres[bi, k]))
        ok = valid & (n <= cap) & (n > 0)

        def need(c):
            pres_, occ_ = c
            return ok & (occ_ + n > cap) & pres_.any(axis=1)

        def evict(c):
            pres_, occ_ = c
            nd = need(c)
            v = jnp.argmin(jnp.where(pres_, s["l2t"], big), axis=1)
            occ_ = occ_ - jnp.where(nd, nb[bi, v], 0.0)
            pres_ = pres_.at[bi, v].set(jnp.where(nd, False, pres_[bi, v]))
            return pres_, occ_

        pres, occ = jax.lax.while_loop(lambda c: need(c).any(), evict, (pres, occ))
        clock = s["l2c"] + ok
        return dict(s, l2p=pres.at[bi, k].set(jnp.where(ok, True, pres[bi, k])),
                    l2b=nb.at[bi, k].set(jnp.where(ok, n, nb[bi, k])),
                    l2t=s["l2t"].at[bi, k].set(jnp.where(ok, clock, s["l2t"][bi, k])),
                    l2c=clock, l2o=occ + jnp.where(ok, n, 0.0))

    def l2_read(s, m, key, n):
        """``BatchedLRU.read``: (state, hit mask)."""
        valid = m & (key >= 0)
        k = jnp.maximum(key, 0)
        hit = valid & s["l2p"][bi, k]
        clock = s["l2c"] + hit
        s = dict(s, l2c=clock, l2t=s["l2t"].at[bi, k].set(jnp.where(hit, clock,
                                                                       s["l2t"][bi, k])))
        return l2_insert(s, valid & ~hit, key, n), hit

    def g(name, kid):
        """Work field of every lane's current kernel, (B, D)."""
        return jnp.take_along_axis(W[name], kid[..., None], axis=2)[..., 0]

    def start_kernel(s, m, d):
        kid = s["kid"].at[:, d].set(jnp.where(m, kidtab[qjob[d, s["head"][:, d]], s["pos"][:, d]],
                                             s["kid"][:, d]))
        fixed = W["fixed_us"][bi, d, kid[:, d]]
        if gain > 0.0:
            others = jnp.where((s["phase"] == 2) & (lanes[None, :] != d), s["rh"], 0.0)
            h = others.sum(axis=1)
            fixed = jnp.where(fixed > 0.0, fixed * (1.0 + gain * jnp.minimum(1.0, h * inv_copy)),
                              fixed)
        s = dict(s, kid=kid)
        s["phase"] = s["phase"].at[:, d].set(jnp.where(m, 1, s["phase"][:, d]))
        s["ev_launch"] = s["ev_launch"].at[:, d].set(
            jnp.where(m, s["t"] + launch_us + fixed, s["ev_launch"][:, d]))
        return s

    def end_job(s, m, d):
        j = qjob[d, s["head"][:, d]]
        s = dict(s)
        s["head"] = s["head"].at[:, d].add(m.astype(s["head"].dtype))
        s["jobs_done"] = s["jobs_done"] + m
        dec = jnp.zeros((B, T + 1), dtype=s["pending"].dtype)
        dec = dec.at[bi[:, None], succ[j]].add(m[:, None].astype(dec.dtype))
        s["pending"] = s["pending"] - dec
        return s

    def dispatch(s, m):
        for d in range(D):
            h = s["head"][:, d]
            j = qjob[d, jnp.minimum(h, qlen[d])]
            ok = m & (s["phase"][:, d] == 0) & (h < qlen[d]) & (s["pending"][bi, j] == 0)
            s = dict(s, pos=s["pos"].at[:, d].set(jnp.where(ok, 0, s["pos"][:, d])))
            s = start_kernel(s, ok, d)
        return s

    def recompute(s, m):
        kid, F, Dd, Nn, phi = s["kid"], s["F"], s["Dd"], s["Nn"], s["phi"]
        act = (s["phase"] == 2) & m[:, None]
        sms, win, peak = g("sms", kid), g("window_B_per_sm", kid), g("peak_Bps", kid)
        rate_full, power, reread = g("rate_full", kid), g("power", kid), g("reread_per_flop", kid)
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
        for jpos in range(D):
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
        pc = jnp.where(act, jnp.where(F > 0, jnp.where(rc > 0, tt + F / jnp.where(rc > 0, rc, 1.0)
                                                      * 1e6, jnp.inf), tt), s["pc"])
        pd = jnp.where(act, jnp.where(Dd > 0, jnp.where(rd > 0, tt + Dd / jnp.where(rd > 0, rd, 1.0)
                                                       * 1e6, jnp.inf), tt), s["pd"])
        pn = jnp.where(act, jnp.where(Nn > 0, jnp.where(rn > 0, tt + Nn / jnp.where(rn > 0, rn, 1.0)
                                                       * 1e6, jnp.inf), tt), s["pn"])
        nxt = jnp.full((B, D), jnp.inf)
        nxt = jnp.where(Dd > 0, jnp.minimum(nxt, pd), nxt)
        nxt = jnp.where(Nn > 0, jnp.minimum(nxt, pn), nxt)
        pcap = (ptot > 1.0)[:, None]
        use_c = (F > 0) & (pc < nxt) & ((nxt == jnp.inf) | pcap | (scaled[:, None] & (reread > 0)))
        nxt = jnp.where(use_c, pc, nxt)
        return dict(s, rc=rc, rd=rd, rn=rn, rh=rh, pc=pc, pd=pd, pn=pn,
                    ev_done=jnp.where(act, nxt, s["ev_done"]))

    def step(s):
        run = s["jobs_done"] < T
        tn = jnp.minimum(jnp.minimum(s["ev_launch"], s["ev_setup"]), s["ev_done"]).min(axis=1)
        tn = jnp.where(run, tn, s["t"])
        dt = ((tn - s["t"]) * 1e-6)[:, None]
        act = s["phase"] == 2
        s = dict(s)
        s["F"] = jnp.where(act & (s["F"] > 0), s["F"] - s["rc"] * dt, s["F"])
        s["Dd"] = jnp.where(act & (s["Dd"] > 0), s["Dd"] - s["rd"] * dt, s["Dd"])
        s["Nn"] = jnp.where(act & (s["Nn"] > 0) & ~s["setup"], s["Nn"] - s["rn"] * dt, s["Nn"])
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
        if lru:     # lookups lane by lane, slot by slot (``_lookups``)
            hbm_l, data_l = [], []
            for d in range(D):
                m = la[:, d]
                j, q = qjob[d, s["head"][:, d]], s["pos"][:, d]
                hit_b = jnp.zeros(B)
                miss_b = jnp.zeros(B)
                for slot in range(st.read_key.shape[2]):
                    key, nb = rkey[j, q, slot], rbytes[j, q, slot]
                    s, h = l2_read(s, m, key, nb)
                    hit_b = hit_b + jnp.where(h, nb, 0.0)
                    miss_b = miss_b + jnp.where(m & (key >= 0) & ~h, nb, 0.0)
                hb = miss_b + always[j, q] + W["extra_hbm_bytes"][bi, d, kid[:, d]]
                hbm_l.append(hb)
                data_l.append(hb + hit_b)
            hbm, data = jnp.stack(hbm_l, axis=1), jnp.stack(data_l, axis=1)
        comm = g("comm_bytes", kid)
        s_on = (comm > 0) & (setup_us > 0)
        s["phase"] = jnp.where(la, 2, s["phase"])
        s["F"] = jnp.where(la, g("flops", kid) * sc, s["F"])
        s["Dd"] = jnp.where(la, data * sc, s["Dd"])
        s["phi"] = jnp.where(la, jnp.where(data > 0, hbm / jnp.where(data > 0, data, 1.0), 0.0),
                             s["phi"])
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
        for d in range(D):
            m = fin[:, d]
            for nm in ("rc", "rd", "rn", "rh"):
                s[nm] = s[nm].at[:, d].set(jnp.where(m, 0.0, s[nm][:, d]))
            for nm in ("pc", "pd", "pn", "ev_done"):
                s[nm] = s[nm].at[:, d].set(jnp.where(m, jnp.inf, s[nm][:, d]))
            s["phase"] = s["phase"].at[:, d].set(jnp.where(m, 0, s["phase"][:, d]))
            s["comm_on"] = s["comm_on"].at[:, d].set(jnp.where(m, False, s["comm_on"][:, d]))
            j = qjob[d, s["head"][:, d]]
            if lru:     # the kernel's activation writes (``_finish_kernel``)
                for slot in range(st.write_key.shape[2]):
                    s = l2_insert(s, m, wkey[j, s["pos"][:, d], slot],
                                  wbytes[j, s["pos"][:, d], slot])
            more = m & (s["pos"][:, d] + 1 < nkids[j])
            s["pos"] = s["pos"].at[:, d].add(more.astype(s["pos"].dtype))
            s = start_kernel(s, more, d)
            ends = m & ~more
            s = end_job(s, ends, d)
            released = released | ends
        s = dispatch(s, released)
        return recompute(s, any_ev)

    f64 = jnp.float64
    s0 = {"t": jnp.zeros(B, f64), "phase": jnp.zeros((B, D), jnp.int32),
          "head": jnp.zeros((B, D), jnp.int64), "pos": jnp.zeros((B, D), jnp.int64),
          "kid": jnp.zeros((B, D), jnp.int64), "jobs_done": jnp.zeros(B, jnp.int64),
          "pending": jnp.concatenate([jnp.tile(jnp.asarray(st.pending0), (B, 1)),
                                      jnp.zeros((B, 1), jnp.int64)], axis=1),
          "setup": jnp.zeros((B, D), bool), "comm_on": jnp.zeros((B, D), bool)}
    for nm in ("F", "Dd", "Nn", "phi", "rc", "rd", "rn", "rh"):
        s0[nm] = jnp.zeros((B, D), f64)
    for nm in ("pc", "pd", "pn", "ev_launch", "ev_setup", "ev_done"):
        s0[nm] = jnp.full((B, D), jnp.inf, f64)
    K = max(st.objects, 1) if lru else 1
    s0.update(l2p=jnp.zeros((B, K), bool), l2b=jnp.zeros((B, K), f64),
              l2t=jnp.zeros((B, K), jnp.int64), l2c=jnp.zeros(B, jnp.int64),
              l2o=jnp.zeros(B, f64))

    def run(s):
        s = dispatch(s, jnp.ones(B, dtype=bool))
        s = recompute(s, jnp.ones(B, dtype=bool))
        s = jax.lax.while_loop(lambda s: jnp.any(s["jobs_done"] < T), step, s)
        return s["t"]

    t0 = time.perf_counter()
    exe = jax.jit(run).lower(s0).compile()
    t1 = time.perf_counter()
    out = np.asarray(exe(s0))
    t2 = time.perf_counter()
    if timing is not None:
        timing.update(compile_s=t1 - t0, run_s=t2 - t1)
    return out


def scale_study(a, recs, hw, arch, model, rng) -> int:
    """``--scale``: the JAX loop alone at large batches (module docstring)."""
    import jax

    from subgpu_jax.sim.eventsim import simulate

    rows = []
    for rec in recs:
        cfg, g, space = record_setup(rec, hw, arch)
        st = Structure(g, cfg, hw, model)
        for B in a.scale:
            A = np.asarray(random_allocs(space, B, rng), dtype=np.int64)
            tm: dict = {}
            got = simulate_batch_jax(st, A, hw, model, tm, a.cache)
            pick = rng.choice(B, size=16, replace=False)
            t0 = time.perf_counter()
            ref = np.array([simulate(g, dataclasses.replace(cfg, alloc=tuple(int(x) for x in A[i])),
                                     hw, model, a.cache, record=False, validate=False,
                                     forward=False).makespan for i in pick])
            per_event = (time.perf_counter() - t0) / len(pick)
            err = float(np.max(np.abs(got[pick] / ref - 1)))
            rows.append({"grid_key": rec["grid_key"], "D": cfg.D, "microbatches": g.microbatches,
                         "batch": B, "jax_compile_s": round(tm["compile_s"], 3),
                         "jax_run_s": round(tm["run_s"], 4),
                         "allocs_per_s": round(B / tm["run_s"], 1),
                         "eventsim_s_per_alloc": round(per_event, 5),
                         "speedup_per_alloc": round(per_event * B / tm["run_s"], 2),
                         "sample_max_rel_diff": err})
            print(f"{rec['grid_key']:42s} B={B:6d} jax {tm['run_s']:7.3f} s ({B / tm['run_s']:9.0f}"
                  f" allocations/s, {per_event * B / tm['run_s']:6.1f}x the event simulator; "
                  f"compile {tm['compile_s']:.1f} s); sample |rel diff| {err:.1e}", flush=True)
    out = {"what": __doc__.split("\n\n")[0] + " (--scale: the JAX loop alone)",
           "cache": a.cache, "backend": jax.default_backend(),
           "device": jax.devices()[0].device_kind, "cpu_count": os.cpu_count(), "rows": rows,
           "sample_max_rel_diff": max(r["sample_max_rel_diff"] for r in rows)}
    write_digest(a.out, out)
    print(f"wrote {a.out}")
    return 0


def random_allocs(space, n: int, rng) -> list[np.ndarray]:
    """``n`` allocations drawn uniformly from ``space`` (``space.config.AllocSpace``: D stages,
    multiples of the quantum, each at least the minimum, summing to the budget): stars and bars
    over the quanta left after the minimums."""
    q, D = space.quantum, space.D
    U = (space.budget - D * space.minimum) // q
    out = []
    for _ in range(n):
        bars = np.sort(rng.choice(U + D - 1, size=D - 1, replace=False))
        parts = np.diff(np.concatenate([[-1], bars, [U + D - 1]])) - 1
        out.append(parts * q + space.minimum)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", required=True,
                    help="records.jsonl of `subgpu search` on the default workload")
    ap.add_argument("--extra", type=int, nargs="+", default=[0, 1000],
                    help="random allocations added to each record's polish pass (batch sizes)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache", default="none", choices=("none", "lru"),
                    help="the L2 policy of the simulator and both loops (lru: the default "
                         "model's)")
    ap.add_argument("--scale", type=int, nargs="+", default=None, metavar="B",
                    help="instead: the JAX loop alone at these batch sizes (random allocations "
                         "of each record's structure, on JAX's default device), 16 of each "
                         "batch checked against the event simulator")
    ap.add_argument("--records-limit", type=int, default=None,
                    help="the first N SubGPU records only")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "batched_eventsim_proto.json"))
    a = ap.parse_args(argv)
    if any(x < 0 for x in a.extra) or a.seed < 0:
        ap.error("--extra and --seed must be integers >= 0")
    if a.scale is not None and any(x < 16 for x in a.scale):
        ap.error("--scale batch sizes must be integers >= 16")
    if a.records_limit is not None and a.records_limit < 1:
        ap.error("--records-limit must be an integer >= 1")
    try:
        check_out(a.out)
    except ValueError as e:
        ap.error(str(e))
    try:
        recs = default_records(a.records)
    except ValueError as e:
        ap.error(str(e))
    from subgpu_jax import get_hardware, get_model
    from subgpu_jax.sim.contention import ContentionModel
    from subgpu_jax.sim.eventsim import simulate

    hw, arch, model = get_hardware("B200"), get_model("gpt-oss-120b"), ContentionModel()
    rng = np.random.default_rng(a.seed)
    recs = recs[:a.records_limit]
    if a.scale is not None:
        return scale_study(a, recs, hw, arch, model, rng)
    rows = []
    for rec in recs:
        cfg, g, space = record_setup(rec, hw, arch)
        moves, _ = space.moves(np.asarray(cfg.alloc))
        st = Structure(g, cfg, hw, model)
        for extra in a.extra:
            allocs = [np.asarray(cfg.alloc), *moves]
            if extra:
                allocs += random_allocs(space, extra, rng)
            A = np.asarray(allocs, dtype=np.int64)
            t0 = time.perf_counter()
            ref = np.array([simulate(g, dataclasses.replace(cfg, alloc=tuple(int(x) for x in r)),
                                     hw, model, a.cache, record=False, validate=False,
                                     forward=False).makespan for r in A])
            t_ref = time.perf_counter() - t0
            t0 = time.perf_counter()
            got = simulate_batch(st, A, hw, model, a.cache)
            t_batch = time.perf_counter() - t0
            err = float(np.max(np.abs(got / ref - 1)))
            row = {"grid_key": rec["grid_key"], "D": cfg.D, "microbatches": g.microbatches,
                   "batch": len(A), "extra": extra, "max_rel_diff": err,
                   "eventsim_s": round(t_ref, 4), "batched_s": round(t_batch, 4),
                   "speedup": round(t_ref / t_batch, 2)}
            line = (f"{rec['grid_key']:42s} B={len(A):4d} |rel diff| {err:.1e}  event "
                    f"{t_ref:6.2f} s  numpy {t_batch:6.2f} s ({t_ref / t_batch:5.2f}x)")
            tm: dict = {}
            got_j = simulate_batch_jax(st, A, hw, model, tm, a.cache)
            row.update(jax_max_rel_diff=float(np.max(np.abs(got_j / ref - 1))),
                       jax_compile_s=round(tm["compile_s"], 3),
                       jax_run_s=round(tm["run_s"], 4),
                       jax_speedup=round(t_ref / tm["run_s"], 2))
            line += (f"  jax {tm['run_s']:6.3f} s ({t_ref / tm['run_s']:5.2f}x; compile "
                     f"{tm['compile_s']:.1f} s; |rel diff| {row['jax_max_rel_diff']:.1e})")
            rows.append(row)
            print(line, flush=True)
    keys = ("speedup", "jax_speedup", "jax_compile_s")
    med = {str(e): {k: statistics.median(r[k] for r in rows if r["extra"] == e) for k in keys}
           for e in a.extra}
    out = {"what": __doc__.split("\n\n")[0], "cache": a.cache, "backend": "cpu",
           "cpu_count": os.cpu_count(), "rows": rows,
           "max_rel_diff": max(r["max_rel_diff"] for r in rows),
           "median_by_extra": med,
           "jax_max_rel_diff": max(r["jax_max_rel_diff"] for r in rows)}
    write_digest(a.out, out)
    print(f"max |rel diff| {out['max_rel_diff']:.2e}; medians by added random allocations "
          f"{med}; wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
