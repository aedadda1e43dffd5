"""The batched event simulator (docs/method.md §3, issue 42): B SM allocations of one
configuration structure simulated together in lockstep, each with its own events.

Two studies showed why a batched exact timer has to advance every allocation's own events:
the vectorised contention scorer's residual against the event simulator is HBM sharing itself
(``experiments/vc_mechanisms.py``: 2.0% median, 11.3% max with every other mechanism off), and
the allocations of a batch do not share one order of events
(``experiments/eventsim_order_sharing.py``: 4 of 48 one-quantum moves keep their record's
order). So here each of the B allocations takes its own next instant per step (the earliest of
its lanes' launch, setup and completion events), moves its counters on, activates, snaps and
finishes kernels, releases and starts tasks, and recomputes its rates with
``BoundModel.rates_of``'s rules (the response curve, water-filling by concurrency, the demand
cap, the power cap, the L2 port, the loaded memory latency of launches, the link time and its
setup); the per-lane loops run over the D stages and every operation is a vector over B.

``sim.eventsim.EventSimulator`` is the reference, and this module reproduces its semantics:
the L2 table per allocation (``BatchedL2``, policies lru, fifo and none) with each kernel's
reads looked up in order at its activation and its writes admitted when it ends; activations of
one instant in the order their launch events were pushed (the simulator's event queue order,
which decides the order of the L2 lookups); completions and releases in lane order.
Covered: green contexts with one stream per stage (each stage its own pool), contention on,
calibrated or not; refused (``Unbatchable``): pools shared by several lanes (several streams
per stage, or multistream with D > 1) and the isolated model. Agreement (tests and
``experiments/batched_eventsim_proto.py``): makespans within 1e-9 relative of
``simulate(..., forward=False)`` on the main job's configurations; near-tied event instants
can order differently after float drift (measured: up to 1.4e-3 on 3 of 12,060 random
allocations with the cache off; a review probe of seven contention-model variants found
8.5e-6 at most, where the simulator itself moves 3.7e-5 for a 1e-13 change of a parameter).

Two engines run the same loop: NumPy here (``simulate_stack``, ``simulate_allocs``: a Python
step loop over vector operations; its cost is per instant, so it gains per allocation only on
large batches: 0.45-0.80x the event simulator at 103-107 allocations with the lru table,
2.7-3.7x at 1,000 with the cache off; docs/method.md §3) and JAX (``sim.batchedjax``: one
``lax.while_loop`` in float64, compiled once per padded shape; for accelerators).

Units: µs (instants, makespans), FLOP, bytes, bytes/s, SMs.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from subgpu_jax.model.graph import OpGraph
from subgpu_jax.model.hardware import Hardware
from subgpu_jax.sim.contention import BoundModel, ContentionModel
from subgpu_jax.sim.eventsim import EventSimulator, check_sm_mode, lone_makespan, object_tables
from subgpu_jax.sim.l2cache import check_policy
from subgpu_jax.space.config import Config

__all__ = ["Unbatchable", "BatchStructure", "StructureStack", "WORK_FIELDS", "work_tables",
           "BatchedL2", "check_rows", "check_allocs", "simulate_stack", "simulate_allocs"]

INF = float("inf")


class Unbatchable(ValueError):
    """A configuration the batched simulator does not cover (shared pools, the isolated model);
    the event simulator times it."""


class BatchStructure:
    """The task DAG of one configuration structure (graph, cut, stages, reuse, microbatches,
    policy; one stream per stage) as flat arrays: lane queues, the kernel instances of each
    task, the successors and data-predecessor counts, and the L2 objects each kernel instance
    reads and writes; taken from the event simulator's own jobs
    (``EventSimulator.from_config``).

    Args:
        graph: the region graph, built for ``cfg``'s microbatch count. cfg: any allocation of
            the structure (its ``alloc`` is not kept). hw: the GPU. model: the contention
            model. mode: the SM mode (``sim.eventsim.SM_MODES``).

    Attributes:
        hw, model, graph: as given (the engines simulate with them). D: lanes (stages).
        T: tasks. I: kernel instances (tasks x their kernels). queues: per lane, its task
        indices in run order. qlen: (D,) tasks per lane. qjob: (D, max qlen + 1) the i-th task
        of each lane (-1 past the end). nkids: (T,) kernels per task. first: (T,) the task's
        first instance. inst_kid: (I,) each instance's kernel id. succ: per task, its data
        successors. pending0: (T,) data-predecessor counts. lane_kids: per lane, the kernel
        ids it runs. objects: the number of distinct L2 objects. read_key, read_bytes: (I, R)
        object ids (-1 pads) and bytes of each instance's reads in lookup order; write_key,
        write_bytes: (I, W) its writes; always_hbm: (I,) bytes always from HBM (activation
        writes + KV), and its two terms write_hbm and kv_hbm (I,).

    Raises:
        Unbatchable: a pool shared by several lanes, or the isolated model.
    """

    def __init__(self, graph: OpGraph, cfg: Config, hw: Hardware, model: ContentionModel,
                 mode: str = "green") -> None:
        if model.isolated:
            raise Unbatchable("the batched simulator models contention; the isolated model is "
                              "the event simulator's")
        if cfg.streams_per_stage != 1:
            raise Unbatchable("the batched simulator covers one stream per stage, got "
                              f"{cfg.streams_per_stage}")
        if check_sm_mode(mode) == "multistream" and cfg.D > 1:
            raise Unbatchable("the batched simulator covers stages on pools of their own; "
                              "multistream shares one pool")
        sim = EventSimulator.from_config(graph, cfg, hw, model, "none", record=False)
        self.hw, self.model, self.graph = hw, model, graph
        self.D = len(sim.lanes)
        self.queues = [[j.index for j in u.queue] for u in sim.lanes]
        self.T = len(sim.jobs)
        kids = [j.kids for j in sim.jobs]
        self.succ = [[x.index for x in j.succ] for j in sim.jobs]
        self.pending0 = np.array([j.pending for j in sim.jobs], dtype=np.int64)
        self.lane_kids = [sorted({k for j in self.queues[d] for k in kids[j]})
                          for d in range(self.D)]
        self.nkids = np.array([len(k) for k in kids], dtype=np.int64)
        self.first = np.concatenate([[0], np.cumsum(self.nkids)[:-1]]).astype(np.int64)
        self.I = int(self.nkids.sum())
        self.inst_kid = np.array([k for ks in kids for k in ks], dtype=np.int64)
        objs, writes = object_tables(graph.kernels, graph.layers_per_region)
        ids: dict = {}
        R = max(1, max((len(objs[k][0]) + len(objs[k][1]) for k in self.inst_kid), default=1))
        Wm = max(1, max((len(writes[k]) for k in self.inst_kid), default=1))
        self.read_key = np.full((self.I, R), -1, dtype=np.int64)
        self.read_bytes = np.zeros((self.I, R))
        self.write_key = np.full((self.I, Wm), -1, dtype=np.int64)
        self.write_bytes = np.zeros((self.I, Wm))
        self.always_hbm = np.zeros(self.I)
        self.write_hbm = np.zeros(self.I)     # the two terms of always_hbm, apart: the event
        self.kv_hbm = np.zeros(self.I)        # simulator adds them to the misses one by one
        for j, job in enumerate(sim.jobs):
            l, mu = job.region, job.mb
            for q, k in enumerate(job.kids):
                i0 = self.first[j] + q
                w, r, wb, kv = objs[k]
                slots = [(("w", l, nm), b) for nm, b in w]
                slots += [(("a", l + sh, mu, nm), b) for nm, sh, b in r]
                for i, (key, b) in enumerate(slots):
                    self.read_key[i0, i] = ids.setdefault(key, len(ids))
                    self.read_bytes[i0, i] = b
                for i, (nm, sh, b) in enumerate(writes[k]):
                    self.write_key[i0, i] = ids.setdefault(("a", l + sh, mu, nm), len(ids))
                    self.write_bytes[i0, i] = b
                self.always_hbm[i0] = wb + kv
                self.write_hbm[i0], self.kv_hbm[i0] = wb, kv
        self.objects = len(ids)
        self.qlen = np.array([len(q) for q in self.queues], dtype=np.int64)
        self.qjob = np.full((self.D, int(self.qlen.max()) + 1), -1, dtype=np.int64)
        for d, q in enumerate(self.queues):
            self.qjob[d, :len(q)] = q
        self._alone: StructureStack | None = None

    def alone(self) -> "StructureStack":
        """The stack of this structure alone (made once)."""
        if self._alone is None:
            self._alone = StructureStack([self])
        return self._alone


def _pad(arrays: Sequence[np.ndarray], fill) -> np.ndarray:
    """``arrays`` (same rank, any shapes) stacked on a new first axis, each padded with
    ``fill`` to the largest extent of every axis."""
    shape = [len(arrays)] + [max(a.shape[i] for a in arrays) for i in range(arrays[0].ndim)]
    out = np.full(shape, fill, dtype=arrays[0].dtype)
    for s, a in enumerate(arrays):
        out[(s,) + tuple(slice(0, n) for n in a.shape)] = a
    return out


class StructureStack:
    """Several ``BatchStructure`` of one GPU and contention model padded to one shape, so that
    allocations of different structures (other cuts, stage counts, microbatch counts, graphs)
    run in one lockstep batch: each row names its structure (``sid``) and gathers its tables.
    A lane past a structure's D has an empty queue (it never starts a task); a task past its
    T never becomes ready (its row ends when its own T tasks are done).

    Args:
        structures: one or more, all built for the same ``hw`` and ``model`` objects.

    Attributes:
        structures, hw, model; S, D, T, I: the padded counts (structures, lanes, tasks,
        instances). NK: the largest kernel table. Ts: (S,) each structure's task count.
        qlen (S, D), qjob (S, D, Q) (-1 past the end), nkids (S, T), first (S, T),
        inst_kid (S, I), succ (S, T, smax) (T: a dummy column), pending0 (S, T + 1),
        read_key / read_bytes (S, I, R), write_key / write_bytes (S, I, W),
        always_hbm (S, I); objects: the largest object count.

    Raises:
        ValueError: no structure, or structures of other GPUs or models.
    """

    def __init__(self, structures: Sequence[BatchStructure]) -> None:
        sts = list(structures)
        if not sts:
            raise ValueError("a structure stack needs at least one structure")
        hw, model = sts[0].hw, sts[0].model
        if any(st.hw is not hw or st.model is not model for st in sts):
            raise ValueError("the structures of one stack must share their hw and model objects")
        self.structures, self.hw, self.model = sts, hw, model
        self.S = len(sts)
        self.D = max(st.D for st in sts)
        self.Ts = np.array([st.T for st in sts], dtype=np.int64)
        self.T = int(self.Ts.max())
        self.NK = max(len(st.graph.kernels) for st in sts)
        self.objects = max(st.objects for st in sts)
        self.qlen = _pad([st.qlen for st in sts], 0)
        self.qjob = _pad([st.qjob for st in sts], -1)
        self.nkids = _pad([st.nkids for st in sts], 0)
        self.first = _pad([st.first for st in sts], 0)
        self.inst_kid = _pad([st.inst_kid for st in sts], 0)
        self.I = self.inst_kid.shape[1]
        smax = max(1, max((len(x) for st in sts for x in st.succ), default=1))
        self.succ = np.full((self.S, self.T, smax), self.T, dtype=np.int64)
        for s, st in enumerate(sts):
            for j, x in enumerate(st.succ):
                self.succ[s, j, :len(x)] = x
        self.pending0 = np.zeros((self.S, self.T + 1), dtype=np.int64)
        for s, st in enumerate(sts):
            self.pending0[s, :st.T] = st.pending0
        self.read_key = _pad([st.read_key for st in sts], -1)
        self.read_bytes = _pad([st.read_bytes for st in sts], 0.0)
        self.write_key = _pad([st.write_key for st in sts], -1)
        self.write_bytes = _pad([st.write_bytes for st in sts], 0.0)
        self.always_hbm = _pad([st.always_hbm for st in sts], 0.0)
        self.write_hbm = _pad([st.write_hbm for st in sts], 0.0)
        self.kv_hbm = _pad([st.kv_hbm for st in sts], 0.0)


#: The ``KernelWork`` fields the batched loop reads (sim.kernelwork).
WORK_FIELDS = ("sms", "flops", "rate_full", "power", "obj_bytes", "reread_per_flop", "peak_Bps",
               "comm_bytes", "fixed_us", "scale", "window_B_per_sm", "extra_hbm_bytes")


def work_tables(stack: StructureStack, sid: np.ndarray, allocs: np.ndarray,
                bm: BoundModel) -> dict:
    """``{field: (B, D, NK) float64}``: the ``KernelWork`` (``WORK_FIELDS``) of every kernel of
    lane d of row b's structure ``sid[b]`` on the row's pool of d, ``allocs[b, d]`` SMs
    (``BoundModel.work``, memoised by kernel and pool size; kernels a lane never runs stay 0).
    ``allocs``: int (B, D) SMs (padded lanes: any value, unread)."""
    B, D = allocs.shape
    W = {n: np.zeros((B, D, stack.NK)) for n in WORK_FIELDS}
    for s, st in enumerate(stack.structures):
        mine = sid == s
        if not mine.any():
            continue
        kernels = st.graph.kernels
        for d in range(st.D):
            ks = st.lane_kids[d]
            for p in np.unique(allocs[mine, d]):
                rows = np.flatnonzero(mine & (allocs[:, d] == p))
                for k in ks:
                    w = bm.work(kernels[k], int(p))
                    for n in WORK_FIELDS:
                        W[n][rows, d, k] = getattr(w, n)
    return W


class BatchedL2:
    """The L2 table of ``sim.l2cache.L2Cache`` for B allocations at once: per allocation, the
    structure's objects' bytes and order stamps (recency under lru, admission under fifo; the
    oldest stamp is evicted first). An object is resident where its stamp is below ``ABSENT``
    (the JAX loop keeps its table the same way: ``sim.batchedjax``).

    Args:
        B: allocations. objects: distinct objects. capacity: bytes (``Hardware.l2_bytes``).
        policy: ``lru`` (a hit refreshes the stamp) or ``fifo`` (it does not).
    """

    #: The stamp of an object that is not resident (above every clock value).
    ABSENT = np.iinfo(np.int64).max

    def __init__(self, B: int, objects: int, capacity: float, policy: str = "lru") -> None:
        if policy not in ("lru", "fifo"):
            raise ValueError(f"policy must be lru or fifo, got {policy!r}")
        self.cap = float(capacity)
        self.refresh = policy == "lru"
        self.nbytes = np.zeros((B, objects))
        self.stamp = np.full((B, objects), self.ABSENT, dtype=np.int64)
        self.clock = np.zeros(B, dtype=np.int64)
        self.occ = np.zeros(B)
        self.count = np.zeros(B, dtype=np.int64)     # resident objects

    def _touch(self, rows: np.ndarray, keys: np.ndarray) -> None:
        self.clock[rows] += 1
        self.stamp[rows, keys] = self.clock[rows]

    def insert(self, m: np.ndarray, key: np.ndarray, n: np.ndarray) -> None:
        """``L2Cache._insert`` for the allocations of mask m (bool (B,)): object ``key`` (int
        (B,), -1 = none) of ``n`` bytes (B,) becomes the newest, the oldest evicted until it
        fits; an object over the capacity is dropped, not admitted."""
        rows = np.flatnonzero(m & (key >= 0))
        if rows.size == 0:
            return
        k, b = key[rows], n[rows]
        was = self.stamp[rows, k] < self.ABSENT
        self.occ[rows[was]] -= self.nbytes[rows[was], k[was]]
        self.stamp[rows[was], k[was]] = self.ABSENT
        self.count[rows[was]] -= 1
        ok = (b <= self.cap) & (b > 0)
        rows, k, b = rows[ok], k[ok], b[ok]
        while True:
            need = (self.occ[rows] + b > self.cap) & (self.count[rows] > 0)
            if not need.any():
                break
            r = rows[need]
            victim = np.argmin(self.stamp[r], axis=1)
            self.occ[r] -= self.nbytes[r, victim]
            self.stamp[r, victim] = self.ABSENT
            self.count[r] -= 1
        self.nbytes[rows, k] = b
        self.occ[rows] += b
        self.count[rows] += 1
        self._touch(rows, k)

    def read(self, m: np.ndarray, key: np.ndarray, n: np.ndarray) -> np.ndarray:
        """``L2Cache.read`` for the allocations of mask m: bool (B,), True where a hit (the
        stamp refreshed under lru); a miss is admitted."""
        valid = m & (key >= 0)
        hit = np.zeros_like(valid)
        hit[valid] = self.stamp[np.flatnonzero(valid), key[valid]] < self.ABSENT
        rows = np.flatnonzero(hit)
        if rows.size and self.refresh:
            self._touch(rows, key[rows])
        self.insert(valid & ~hit, key, n)
        return hit


class _Lockstep:
    """The NumPy loop's state and its steps (``simulate_stack``); one per batch."""

    def __init__(self, stack: StructureStack, sid: np.ndarray, allocs: np.ndarray,
                 cache: str) -> None:
        hw, model = stack.hw, stack.model
        bm = self.bm = BoundModel(model, hw, lone_makespan)
        self.sk, self.sid = stack, sid
        B, D = self.B, self.D = allocs.shape
        self.W = work_tables(stack, sid, allocs, bm)
        self.capped = model.inflight_max_B is not None
        self.xs, self.ys = np.asarray(bm.curve_x), np.asarray(bm.curve_y)
        self.gain, self.inv_copy = model.latency_gain, 1.0 / float(hw.hbm_copy_Bps)
        self.bi = np.arange(B)
        self.lanes = np.arange(D)
        self.qlen = stack.qlen[sid]                       # (B, D) tasks per lane
        self.Ts = stack.Ts[sid]                           # (B,) tasks per row
        self.t = np.zeros(B)
        self.phase = np.zeros((B, D), dtype=np.int8)      # 0 idle, 1 launching, 2 active
        self.head = np.zeros((B, D), dtype=np.int64)      # position in the lane's queue
        self.pos = np.zeros((B, D), dtype=np.int64)       # kernel within the task
        self.inst = np.zeros((B, D), dtype=np.int64)      # kernel instance
        self.kid = np.zeros((B, D), dtype=np.int64)
        z = lambda: np.zeros((B, D))   # noqa: E731
        self.F, self.Dd, self.Nn, self.phi = z(), z(), z(), z()
        self.rc, self.rd, self.rn, self.rh = z(), z(), z(), z()
        self.pc, self.pd, self.pn = (np.full((B, D), INF) for _ in range(3))
        self.ev_launch, self.ev_setup, self.ev_done = (np.full((B, D), INF) for _ in range(3))
        self.setup = np.zeros((B, D), dtype=bool)
        self.comm_on = np.zeros((B, D), dtype=bool)
        self.seq = np.zeros((B, D), dtype=np.int64)       # when each launch event was pushed
        self.nseq = np.zeros(B, dtype=np.int64)
        self.pending = stack.pending0[sid].copy()         # (B, T + 1); the last a dummy
        self.jobs_done = np.zeros(B, dtype=np.int64)
        self.l2 = None if cache == "none" else BatchedL2(B, stack.objects, hw.l2_bytes, cache)

    def job(self, m: np.ndarray, d: int) -> np.ndarray:
        """The task at the head of lane d for the allocations of mask m."""
        return self.sk.qjob[self.sid[m], d, self.head[m, d]]

    def wk(self, name: str, m: np.ndarray, d: int) -> np.ndarray:
        """Work field ``name`` of lane d's current kernel for the allocations of mask m."""
        return self.W[name][m, d, self.kid[m, d]]

    def lanes_field(self, name: str) -> np.ndarray:
        """Work field ``name`` of every lane's current kernel, (B, D)."""
        return self.W[name][self.bi[:, None], self.lanes, self.kid]

    def start_kernel(self, m: np.ndarray, d: int, now: np.ndarray) -> None:
        """Lane d of the allocations in m starts its current kernel (``_start_kernel``): the
        launch event after the launch overhead and the kernel's fixed latency, loaded by the
        other lanes' HBM traffic."""
        sk, sm = self.sk, self.sid[m]
        self.inst[m, d] = i = sk.first[sm, self.job(m, d)] + self.pos[m, d]
        self.kid[m, d] = sk.inst_kid[sm, i]
        self.nseq[m] += 1
        self.seq[m, d] = self.nseq[m]
        self.phase[m, d] = 1
        fixed = self.wk("fixed_us", m, d)
        if self.gain > 0.0:
            others = np.where(self.phase[m] == 2, self.rh[m], 0.0)
            others[:, d] = 0.0
            h = others.sum(axis=1)
            fixed = np.where(fixed > 0.0,
                             fixed * (1.0 + self.gain * np.minimum(1.0, h * self.inv_copy)),
                             fixed)
        self.ev_launch[m, d] = now[m] + self.bm.launch_us + fixed

    def end_job(self, m: np.ndarray, d: int) -> None:
        """Lane d of the allocations in m ends its task (``_end_job``): its successors lose a
        pending predecessor (the dummy column takes the padding)."""
        j = self.job(m, d)
        rows = np.flatnonzero(m)
        self.pending[rows[:, None], self.sk.succ[self.sid[rows], j]] -= 1
        self.head[m, d] += 1
        self.jobs_done[m] += 1

    def dispatch(self, m: np.ndarray) -> None:
        """Start the head task of every idle lane whose predecessors are done, in lane order;
        an empty task ends at once and the scan restarts (``_dispatch``)."""
        sk, B = self.sk, self.B
        again = m.copy()
        while again.any():
            nxt = np.zeros(B, dtype=bool)
            scan = again.copy()
            for d in range(self.D):
                h = np.minimum(self.head[:, d], self.qlen[:, d])
                j = sk.qjob[self.sid, d, h]
                ok = scan & (self.phase[:, d] == 0) & (self.head[:, d] < self.qlen[:, d])
                ok &= np.where(j >= 0, self.pending[self.bi, np.maximum(j, 0)] == 0, False)
                if not ok.any():
                    continue
                empty = ok & (sk.nkids[self.sid, np.maximum(j, 0)] == 0)
                go = ok & ~empty
                if go.any():
                    self.pos[go, d] = 0
                    self.start_kernel(go, d, self.t)
                if empty.any():
                    self.end_job(empty, d)
                    nxt |= empty
                    scan &= ~empty      # its scan restarts
            again = nxt

    def recompute(self, m: np.ndarray) -> None:
        """Rates and completion events of the active kernels of the allocations in m
        (``_recompute``, ``BoundModel.rates_of``)."""
        bm, D, bi = self.bm, self.D, self.bi
        F, Dd, Nn, phi = self.F, self.Dd, self.Nn, self.phi
        act = (self.phase == 2) & m[:, None]
        d_on = act & (Dd > 0)
        power = self.lanes_field("power")
        ptot = np.where(act & (F > 0), power, 0.0).sum(axis=1)
        sms = self.lanes_field("sms")
        win = self.lanes_field("window_B_per_sm")
        peak = self.lanes_field("peak_Bps")
        conc_on = d_on & (phi > 0)
        c = np.minimum(sms * win, bm.cmax if self.capped else win * bm.N)
        if bm.demand_cap:
            c = np.minimum(c, Dd * phi)
        c = np.where(conc_on, c, 0.0)
        ctot = c.sum(axis=1)
        pk = (c * peak).sum(axis=1)
        have = ctot > 0
        x = np.where(have, ctot / bm.full_window, 0.0)
        frac = np.where(x >= self.xs[-1], self.ys[-1], np.interp(x, self.xs, self.ys))
        bw = np.where(have, frac * pk / np.where(have, ctot, 1.0), 0.0)
        want = phi * sms * bm.issue
        key = np.where(conc_on, want / np.where(c > 0, c, 1.0), INF)
        order = np.argsort(key, axis=1, kind="stable")     # ties: lane order
        rh = self.rh
        rh[:] = np.where(act, 0.0, rh)
        left_bw, left_w = bw.copy(), ctot.copy()
        filling = have & m
        for j in range(D):       # water-filling by concurrency
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
                    rh[bi[o2], dd[o2]] = (left_bw * c[bi, dd]
                                          / np.where(left_w > 0, left_w, 1.0))[o2]
                filling &= ~over
        cs = np.where(ptot > 1.0, 1.0 / np.where(ptot > 1.0, ptot, 1.0), 1.0)
        rate_full = self.lanes_field("rate_full")
        reread = self.lanes_field("reread_per_flop")
        self.rc[:] = np.where(act, np.where(F > 0, rate_full * power * cs[:, None], 0.0), self.rc)
        r = sms * bm.issue
        r = np.where((phi > 0) & (rh < r * phi), rh / np.where(phi > 0, phi, 1.0), r)
        self.rd[:] = np.where(act, np.where(Dd > 0, r, 0.0), self.rd)
        rc, rd = self.rc, self.rd
        l2 = np.where(act & (Dd > 0), rd * (1.0 + (bm.kappa - 1.0) * phi), 0.0).sum(axis=1)
        l2 += np.where(act & (reread > 0), reread * rc, 0.0).sum(axis=1)
        rh[:] = np.where(act, rd * phi, rh)
        ncomm = (act & self.comm_on).sum(axis=1)
        nv = np.where(ncomm > 0, bm.nvlink / np.maximum(ncomm, 1), 0.0)
        self.rn[:] = np.where(act, np.where(self.comm_on, nv[:, None], 0.0), self.rn)
        scaled = l2 > bm.l2
        if scaled.any():        # the L2 port binds: data and re-read rates scaled down
            sc = np.where(scaled, bm.l2 / np.where(scaled, l2, 1.0), 1.0)[:, None]
            sel = act & scaled[:, None]
            rd[:] = np.where(sel, rd * sc, rd)
            rc[:] = np.where(sel & (reread > 0), rc * sc, rc)
            rh[:] = np.where(sel, rd * phi, rh)
        tt = self.t[:, None]
        rn = self.rn
        with np.errstate(divide="ignore", invalid="ignore"):
            self.pc[:] = np.where(act, np.where(F > 0, np.where(rc > 0, tt + F / rc * 1e6, INF),
                                                tt), self.pc)
            self.pd[:] = np.where(act, np.where(Dd > 0, np.where(rd > 0, tt + Dd / rd * 1e6, INF),
                                                tt), self.pd)
            self.pn[:] = np.where(act, np.where(Nn > 0, np.where(rn > 0, tt + Nn / rn * 1e6, INF),
                                                tt), self.pn)
        nxt = np.full((self.B, D), INF)
        nxt = np.where(Dd > 0, np.minimum(nxt, self.pd), nxt)
        nxt = np.where(Nn > 0, np.minimum(nxt, self.pn), nxt)
        pcap = (ptot > 1.0)[:, None]
        # a compute completion is an event only when it can change a rate or is the last one
        use_c = ((F > 0) & (self.pc < nxt)
                 & ((nxt == INF) | pcap | (scaled[:, None] & (reread > 0))))
        nxt = np.where(use_c, self.pc, nxt)
        self.ev_done[:] = np.where(act, nxt, self.ev_done)

    def activate(self, m: np.ndarray, d: int) -> None:
        """Lane d of the allocations in m activates its kernel (``_activate``): the L2 lookups
        of its reads in order, then its counters."""
        sk, t = self.sk, self.t
        sc = self.wk("scale", m, d)
        if self.l2 is None:
            hbm = data = self.wk("obj_bytes", m, d) + self.wk("extra_hbm_bytes", m, d)
        else:       # ``_lookups``: each read slot in order, hits and misses
            i = self.inst[:, d]
            hit_b = np.zeros(self.B)
            miss_b = np.zeros(self.B)
            for slot in range(sk.read_key.shape[2]):
                key, nb = sk.read_key[self.sid, i, slot], sk.read_bytes[self.sid, i, slot]
                h = self.l2.read(m, key, nb)
                hit_b += np.where(h, nb, 0.0)
                miss_b += np.where(m & (key >= 0) & ~h, nb, 0.0)
            hbm = (miss_b + sk.always_hbm[self.sid, i])[m] + self.wk("extra_hbm_bytes", m, d)
            data = hbm + hit_b[m]
        self.phase[m, d] = 2
        self.F[m, d] = self.wk("flops", m, d) * sc
        self.Dd[m, d] = data * sc
        self.phi[m, d] = np.where(data > 0, hbm / np.where(data > 0, data, 1.0), 0.0)
        comm = self.wk("comm_bytes", m, d)
        self.Nn[m, d] = comm * sc
        s_on = (comm > 0) & (self.bm.setup_us > 0)
        self.setup[m, d] = s_on
        self.comm_on[m, d] = (comm > 0) & ~s_on
        self.ev_setup[m, d] = np.where(s_on, t[m] + self.bm.setup_us, INF)

    def finish(self, m: np.ndarray, d: int) -> np.ndarray:
        """Lane d of the allocations in m ends its kernel (``_finish_kernel``): its writes
        admitted to L2, then the task's next kernel starts or the task ends; returns the mask
        of the allocations whose task ended."""
        sk = self.sk
        self.phase[m, d] = 0
        self.rc[m, d] = self.rd[m, d] = self.rn[m, d] = self.rh[m, d] = 0.0
        self.comm_on[m, d] = False
        self.pc[m, d] = self.pd[m, d] = self.pn[m, d] = INF
        self.ev_done[m, d] = INF
        if self.l2 is not None:
            i = self.inst[:, d]
            for slot in range(sk.write_key.shape[2]):
                self.l2.insert(m, sk.write_key[self.sid, i, slot],
                               sk.write_bytes[self.sid, i, slot])
        more = np.zeros(self.B, dtype=bool)
        more[m] = self.pos[m, d] + 1 < sk.nkids[self.sid[m], self.job(m, d)]
        if more.any():
            self.pos[more, d] += 1
            self.start_kernel(more, d, self.t)
        ends = m & ~more
        if ends.any():
            self.end_job(ends, d)
        return ends

    def step(self, run: np.ndarray) -> None:
        """Process every event of each running allocation's next instant (``_advance``)."""
        D = self.D
        tn = np.minimum(np.minimum(self.ev_launch, self.ev_setup), self.ev_done).min(axis=1)
        tn = np.where(run, tn, self.t)
        if np.any(run & ~np.isfinite(tn)):
            raise RuntimeError("a batched simulation stalled with tasks left")
        dt = ((tn - self.t) * 1e-6)[:, None]
        act = self.phase == 2
        self.F[:] = np.where(act & (self.F > 0), self.F - self.rc * dt, self.F)
        self.Dd[:] = np.where(act & (self.Dd > 0), self.Dd - self.rd * dt, self.Dd)
        self.Nn[:] = np.where(act & (self.Nn > 0) & ~self.setup, self.Nn - self.rn * dt, self.Nn)
        self.t = t = tn
        at = run[:, None]
        la = at & (self.ev_launch == tn[:, None])
        se = at & (self.ev_setup == tn[:, None])
        do = at & (self.ev_done == tn[:, None])
        self.ev_launch[la] = INF
        self.ev_setup[se] = INF
        self.ev_done[do] = INF
        if la.any():
            if self.l2 is None or D == 1:
                for d in range(D):
                    if la[:, d].any():
                        self.activate(la[:, d], d)
            else:       # in push order: it decides the order of the L2 lookups
                rank = np.argsort(np.argsort(np.where(la, self.seq, np.iinfo(np.int64).max),
                                             axis=1, kind="stable"), axis=1, kind="stable")
                for r in range(D):
                    for d in range(D):
                        m = la[:, d] & (rank[:, d] == r)
                        if m.any():
                            self.activate(m, d)
        self.setup[se] = False
        self.comm_on[se] = self.Nn[se] > 0
        any_ev = (la | se | do).any(axis=1)
        # settle: snap the counters predicted to end by the instant (up to the rounding
        # tolerance), then finish kernels in lane order (the active list's order)
        tol = (t + (1e-9 + 1e-12 * np.abs(t)))[:, None]
        act = (self.phase == 2) & any_ev[:, None]
        self.F[:] = np.where(act & ((self.F <= 0) | (self.pc <= tol)), 0.0, self.F)
        self.Dd[:] = np.where(act & ((self.Dd <= 0) | (self.pd <= tol)), 0.0, self.Dd)
        self.Nn[:] = np.where(act & ((self.Nn <= 0) | (self.pn <= tol)), 0.0, self.Nn)
        fin = act & (self.F <= 0) & (self.Dd <= 0) & (self.Nn <= 0) & ~self.setup
        released = np.zeros(self.B, dtype=bool)
        for d in range(D):
            if fin[:, d].any():
                released |= self.finish(fin[:, d], d)
        if released.any():
            self.dispatch(released)
        self.recompute(any_ev)

    def run(self) -> np.ndarray:
        every = np.ones(self.B, dtype=bool)
        self.dispatch(every)
        self.recompute(every)
        while True:
            run = self.jobs_done < self.Ts
            if not run.any():
                return self.t
            self.step(run)


def check_rows(stack: StructureStack, sid, allocs) -> tuple[np.ndarray, np.ndarray]:
    """``(sid, allocs)`` as int64 (B,) and (B, stack.D), each row's allocation padded with 0
    to the stack's D (a row's columns past its own structure's D are never read).

    Raises:
        ValueError: shapes that do not match, B < 1, values that are not integers, a
            structure index out of range, more columns than the stack's D, or a row whose
            stages are not SMs >= 1 summing to at most the GPU's (the event simulator's own
            check; the allocation space's quantum and minimum are ``Config.check``'s)."""
    sid = np.asarray(sid)
    A = np.asarray(allocs)
    if sid.ndim != 1 or A.ndim != 2 or len(sid) != len(A) or len(sid) < 1:
        raise ValueError(f"sid (B,) and allocs (B, D) with B >= 1 must match, got shapes "
                         f"{sid.shape} and {A.shape}")
    for name, x in (("sid", sid), ("allocs", A)):
        if x.dtype.kind not in "iu":
            raise ValueError(f"{name} must hold integers, got dtype {x.dtype}")
    if sid.min() < 0 or sid.max() >= stack.S:
        raise ValueError(f"sid must index the stack's {stack.S} structures")
    if A.shape[1] > stack.D:
        raise ValueError(f"allocs has {A.shape[1]} columns, the stack {stack.D} lanes")
    out = np.zeros((len(A), stack.D), dtype=np.int64)
    out[:, :A.shape[1]] = A
    D_of = np.array([st.D for st in stack.structures])[sid]
    used = np.arange(stack.D)[None, :] < D_of[:, None]
    over = (used & (out > stack.hw.num_sms)).any(axis=1)    # before the sum can overflow
    bad = np.flatnonzero((used & (out < 1)).any(axis=1) | over
                         | (np.where(used & ~over[:, None], out, 0).sum(axis=1)
                            > stack.hw.num_sms))
    if bad.size:
        b = int(bad[0])
        raise ValueError(f"allocs row {b}: {out[b, :D_of[b]].tolist()} must be SMs >= 1 per "
                         f"stage summing to at most the {stack.hw.num_sms} of {stack.hw.name}")
    return sid.astype(np.int64), out


def check_allocs(st: BatchStructure, allocs) -> np.ndarray:
    """``allocs`` as int64 (B, D) for ``st``.

    Raises:
        ValueError: not (B, D) with B >= 1, or not integers."""
    A = np.asarray(allocs)
    if A.ndim != 2 or A.shape[0] < 1 or A.shape[1] != st.D:
        raise ValueError(f"allocs must be (B, {st.D}) with B >= 1, got shape {A.shape}")
    if A.dtype.kind not in "iu":
        raise ValueError(f"allocs must hold integers, got dtype {A.dtype}")
    return A.astype(np.int64)


def simulate_stack(stack: StructureStack, sid, allocs, cache: str = "lru") -> np.ndarray:
    """Makespans (µs, float64 (B,)) of row b's structure ``stack.structures[sid[b]]`` under
    allocation ``allocs[b]`` (int SMs per stage, its first D columns read; each a feasible
    allocation), every row simulated together in lockstep in NumPy (module docstring) on the
    stack's GPU and contention model; ``cache``: the L2 policy (``sim.l2cache.L2_POLICIES``).

    Raises:
        ValueError: an unknown cache policy or malformed rows (``check_rows``).
        RuntimeError: a simulation stalled (a dependency cycle)."""
    cache = check_policy(cache)
    sid, A = check_rows(stack, sid, allocs)
    return _Lockstep(stack, sid, A, cache).run()


def simulate_allocs(st: BatchStructure, allocs: np.ndarray, cache: str = "lru") -> np.ndarray:
    """``simulate_stack`` of one structure: makespans (µs, float64 (B,)) of ``st`` under each
    row of ``allocs`` (int (B, D) SMs per stage, each row feasible).

    Raises:
        ValueError: an unknown cache policy, or ``allocs`` not (B, D) with B >= 1.
        RuntimeError: a simulation stalled (a dependency cycle)."""
    A = check_allocs(st, allocs)
    return simulate_stack(st.alone(), np.zeros(len(A), dtype=np.int64), A, cache)
