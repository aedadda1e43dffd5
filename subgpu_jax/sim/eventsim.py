"""The exact event-driven simulator (docs/method.md §3, "the exact scorer").

Segment tasks of the augmented task DAG (``taskdag.build_task_dag``, the evaluator's dispatch
order) are expanded into their kernels (kernel order; the kernels of one task run one after
another). Each lane (a stream: with one stream per stage, the stage) runs the head of its queue
in the global dispatch order when the head's data predecessors are done, and cannot bypass
blocked work. Whenever a dependency releases a task or a work counter of a running kernel reaches
zero, the rates of the running set are recomputed (``contention.BoundModel.rates_of``) and time
advances to the next event.

**k streams per stage** (``Config.streams_per_stage``, docs/method.md "Streams per stage"): the
j-th task of stage d runs on lane d*k + (j mod k); the k lanes of a stage share its pool of SMs by
``simstate.share_pool`` while contention is on (nothing is shared with ``ContentionModel.off()``).

Structure (SimPy-like): the event loop (``simstate.EventQueue``: ties break by priority, counter
completion < collective setup end < launch end, then push order, so the same input always gives
the same output; completions are invalidated lazily by the lane's epoch) apart from the resources
(``Pool``, ``Lane`` with the named state of its running kernel, ``Job``; the L2 table; the rate
model's bandwidths). ``EventSimulator.step()`` processes every event of the next instant.

A kernel's life: launch overhead (``Hardware.launch_us``, no work moves) -> active: L2 lookups of
its reads (``l2cache``), then compute, data and (after ``Hardware.comm_setup_us``) network counters
progress concurrently -> done when all are zero; its activation writes then enter L2.

With ``ContentionModel.off()`` every kernel takes its isolated static duration (one event per
kernel) and the makespan equals ``evaluator.Evaluator(...).makespan`` up to float rounding.
"""

from __future__ import annotations

import bisect
import gc
import heapq
from array import array
from dataclasses import replace as _dc_replace
from typing import Sequence

import numpy as np

from subgpu_jax.sim.contention import BoundModel, ContentionModel
from subgpu_jax.model.graph import Kernel, OpGraph
from subgpu_jax.model.hardware import Hardware
from subgpu_jax.sim.l2cache import L2Cache, check_policy
from subgpu_jax.sim.periodic import RegionForward
from subgpu_jax.model.kernelcost import device_kernels
from subgpu_jax.sim.simstate import (ACTIVE, IDLE, LAUNCHING, EventQueue, Job, Lane,
                                     LookupObserver, Pool, SimResult, result_of, share_pool,
                                     share_pool_fifo, share_pool_tail)
from subgpu_jax.space.config import Config, check_config
from subgpu_jax.space.taskdag import TaskDAG, build_task_dag

__all__ = ["SimResult", "EventSimulator", "EventQueue", "Job", "Lane", "Pool", "share_pool",
           "simulate", "simulate_streams", "lone_makespan", "object_tables", "SM_MODES",
           "check_sm_mode", "LookupObserver"]

#: How the stages of a pipelined configuration get their SMs: ``"green"``, each stage its own
#: pool (a green context) of ``Config.alloc[d]`` SMs; ``"multistream"``, the same microbatched
#: schedule on plain CUDA streams with no partition: every lane's kernels draw CTAs from all the
#: GPU's SMs as the model's ``pool_sharing`` says (default launch order,
#: ``simstate.share_pool_fifo``: the block scheduler's behaviour measured on the H200 for two
#: streams of one pool, docs/fidelity.md §2).
#: The runtime's ``subgpu run --mode`` takes the same names.
SM_MODES: tuple[str, ...] = ("green", "multistream")


def check_sm_mode(mode: str) -> str:
    """``mode`` if it is one of ``SM_MODES``.

    Raises:
        ValueError: any other value (one line naming the allowed ones).
    """
    if mode not in SM_MODES:
        raise ValueError(f"mode must be one of {', '.join(SM_MODES)}, got {mode!r}")
    return mode

#: Event priorities (the tie-break at equal times): counter completion, setup end, launch end.
_DONE, _SETUP, _LAUNCH = 0, 1, 2
_IDLE, _LAUNCHING, _ACTIVE = IDLE, LAUNCHING, ACTIVE
_INF = float("inf")


def _lane_index(u: "Lane") -> int:
    return u.index


def _canon(name: str, P: int | None) -> tuple[str, int]:
    """Canonical activation name and region shift: "resid.{P}" of region l is "resid.0" of
    region l+1."""
    if P is not None and name == f"resid.{P}":
        return "resid.0", 1
    return name, 0


def lone_makespan(k: Kernel, pool_sms: int, hw: Hardware, model: ContentionModel, scale: float,
                  fixed_us: float, window_B_per_sm: float | None = None) -> float:
    """Makespan (µs) of kernel ``k`` alone on a pool of ``pool_sms`` SMs (cache off), with its
    work scaled by ``scale``, a fixed latency ``fixed_us`` µs added and (when given) its bytes in
    flight per SM set to ``window_B_per_sm``: the lone-kernel solve of a calibrated
    ``ContentionModel`` (injected into ``BoundModel``).

    Raises:
        ValueError: bad kernel work or pool (as ``EventSimulator``).
    """
    sim = EventSimulator([k], [pool_sms], [(0, (), 0, 0, (0,))], hw, model, "none", record=False)
    over = {"scale": scale, "fixed_us": fixed_us}
    if window_B_per_sm is not None:
        over["window_B_per_sm"] = float(window_B_per_sm)
    u = sim.lanes[0]
    u.works[0] = _dc_replace(u.works[0], **over)
    return float(sim.run().makespan)


def object_tables(kernels: Sequence[Kernel], P: int | None) -> tuple[list, list]:
    """Per kernel: its L2 lookups ``(weight reads, activation reads, write bytes, KV bytes)``
    and its activation writes ``(name, region shift, bytes)``, names canonical (``_canon``)."""
    objs, writes = [], []
    for kern in kernels:
        w = tuple((nm, float(b)) for nm, b in kern.weight_objects)
        r = tuple(_canon(nm, P) + (float(b),) for nm, b in kern.act_reads)
        wr = tuple(_canon(nm, P) + (float(b),) for nm, b in kern.act_writes)
        wb = 0.0
        for _, _, x in wr:
            wb += x
        objs.append((w, r, wb, float(kern.kv_bytes)))
        writes.append(wr)
    return objs, writes


class EventSimulator:
    """Event-driven simulation of jobs (segment tasks or streams) on SM pools.

    Args:
        kernels: the kernel table (``OpGraph.kernels`` or any kernels).
        stage_sms: SMs of each lane ("stage": ints >= 1, sum over pools <= hw.num_sms).
        jobs: in global dispatch order, ``(stage, data_preds, region, microbatch, kernel_ids)``;
            stage is the lane that runs the job, data_preds are earlier job indices;
            kernel_ids index ``kernels`` in run order.
        hw: the GPU. model: the ``ContentionModel`` (default: calibrated, contention on).
        cache: L2 policy name (``l2cache.L2_POLICIES``).
        layers_per_region: P for the residual-stream aliasing (None: no aliasing).
        record: keep the utilisation time series.
        pool_of_stage: with k streams per stage, the "stages" here are lanes (streams) and this
            names the SM pool of each lane (lanes of one pool list the pool's SMs in
            ``stage_sms``); the active kernels of a pool share its SMs by ``share_pool`` (and
            with them their compute power and bytes in flight). None: every lane is its own
            pool.
        observer: a ``LookupObserver`` told of every kernel's L2 lookups (its hit and read
            bytes of weight and activation objects), or None. It watches; it changes nothing.

    Attributes:
        lanes, pools: the ``Lane`` and ``Pool`` objects. events_q: the ``EventQueue``.
        active: the lanes whose kernel is active (phase 2), in lane order. cache: the L2 table.
        t: the current instant (µs). events, steps: events popped, instants processed.
        tails: per kernel of the table, whether its op issues further device kernels after it
            (``pool_sharing="tail"``; None until first needed, then from
            ``kernelcost.device_kernels`` on the GPU's kernel profile; set it before ``run`` to
            count another runtime's launches).

    Raises:
        ValueError: bad stages, pools, jobs, policy or kernel work (one line naming the field).
    """

    def __init__(self, kernels: Sequence[Kernel], stage_sms: Sequence[int], jobs: Sequence,
                 hw: Hardware, model: ContentionModel | None = None, cache: str = "lru",
                 layers_per_region: int | None = None, record: bool = True,
                 pool_of_stage: Sequence[int] | None = None,
                 observer: "LookupObserver | None" = None) -> None:
        model = ContentionModel() if model is None else model
        self.observer = observer
        self.bm = BoundModel(model, hw, lone_makespan)
        self.hw, self.model = hw, model
        self.isolated = bool(model.isolated)
        self.tails: list | None = None   # see Attributes
        # the pool-sharing law of the model, chosen once (``ContentionModel.pool_sharing``)
        self._law = {"fifo": self._share_fifo, "tail": self._share_tail,
                     "fair": self._share_fair}[model.pool_sharing]
        #: loaded-latency dilation of fixed phases (ContentionModel.latency_load_gain)
        self._gain = model.latency_gain
        self._inv_copy = 1.0 / float(hw.hbm_copy_Bps)
        self.cache = L2Cache(hw.l2_bytes, check_policy(cache))
        sms = []
        for d, p in enumerate(stage_sms):
            if isinstance(p, bool) or not isinstance(p, (int, np.integer)) or p < 1:
                raise ValueError(f"stage_sms[{d}] must be an integer >= 1, got {p!r}")
            sms.append(int(p))
        if not sms:
            raise ValueError("stage_sms must name at least one stage")
        if pool_of_stage is not None:
            if len(pool_of_stage) != len(sms):
                raise ValueError(f"pool_of_stage has {len(pool_of_stage)} entries, stage_sms "
                                 f"{len(sms)}")
            pools: dict[int, int] = {}
            for d, (q, p) in enumerate(zip(pool_of_stage, sms)):
                if pools.setdefault(int(q), p) != p:
                    raise ValueError(f"pool_of_stage: lane {d} of pool {q} has {p} SMs, another "
                                     f"lane of that pool {pools[int(q)]}")
            total = sum(pools.values())
            pool_ids = [int(q) for q in pool_of_stage]
        else:
            total = sum(sms)
            pool_ids = list(range(len(sms)))
        if total > hw.num_sms:
            raise ValueError(f"stage_sms sum to {total}, more than the {hw.num_sms} SMs of "
                             f"{hw.name}")
        self.stage_sms = tuple(sms)
        self.kernels = tuple(kernels)
        nk = len(self.kernels)
        D = len(sms)
        by_id: dict[int, Pool] = {}
        self.lanes: list[Lane] = []
        for d in range(D):
            pool = by_id.get(pool_ids[d])
            if pool is None:
                pool = by_id[pool_ids[d]] = Pool(pool_ids[d], sms[d])
            u = Lane(d, pool, nk)
            pool.lanes.append(u)
            self.lanes.append(u)
        self.pools = list(by_id.values())
        #: pools whose lanes may share SMs (contention on, more than one lane)
        self._shared = [p for p in self.pools if len(p.lanes) > 1] if not self.isolated else []
        self._add_jobs(jobs, D, nk)
        # per (kernel, lane) work and object names
        for u in self.lanes:
            for kid in {x for j in u.queue for x in j.kids}:
                u.works[kid] = self.bm.work(self.kernels[kid], u.pool.sms)
        self._objs, self._writes = object_tables(self.kernels, layers_per_region)
        self.events_q = EventQueue()
        self.dag: TaskDAG | None = None
        self.t = 0.0
        self.active: list[Lane] = []
        self.events = 0
        self.steps = 0
        self.jobs_done = 0
        self.record = record
        self.util = array("d")  # flat (t µs, HBM B/s, busy SMs, curve cap B/s) samples
        self.bytes_hbm = 0.0
        self.bytes_hit = 0.0
        self.bytes_obj_read = 0.0
        self.bytes_reread = 0.0
        self.bytes_objects = 0.0
        self._started = False
        self.forward: RegionForward | None = None   # set by run(forward=True)

    def _add_jobs(self, jobs: Sequence, D: int, nk: int) -> None:
        """The ``Job`` objects of the job specs (see the class), queued on their lanes, with
        their successors and kernel-instance slots.

        Raises:
            ValueError: a stage out of range, a later or missing data predecessor, a kernel id
                out of range (one line naming the job).
        """
        self.jobs: list[Job] = []
        succ: list[list[int]] = []
        first = 0
        for j, spec in enumerate(jobs):
            s, preds, l, mu, kids = spec
            if not 0 <= s < D:
                raise ValueError(f"job {j}: stage {s} out of range 0..{D - 1}")
            for q in preds:
                if not 0 <= q < j:
                    raise ValueError(f"job {j}: data predecessor {q} must be an earlier job")
                succ[q].append(j)
            kt = tuple(map(int, kids))
            if kt and (min(kt) < 0 or max(kt) >= nk):
                raise ValueError(f"job {j}: kernel ids must be in 0..{nk - 1}, got {kt}")
            job = Job(index=j, stage=int(s), region=int(l), mb=int(mu), kids=kt, first=first,
                      pending=len(set(preds)))
            first += len(kt)
            self.jobs.append(job)
            succ.append([])
            self.lanes[s].queue.append(job)
        for job, x in zip(self.jobs, succ):
            job.succ = tuple(self.jobs[i] for i in sorted(set(x)))
        self.ninst = first
        self.inst_start = [0.0] * first
        self.inst_end = [0.0] * first

    @classmethod
    def from_config(cls, graph: OpGraph, cfg: Config, hw: Hardware,
                    model: ContentionModel | None = None, cache: str = "lru",
                    record: bool = True, mode: str = "green",
                    observer: "LookupObserver | None" = None) -> "EventSimulator":
        """The simulator of one forward pass of ``graph`` under ``cfg`` (not validated: see
        ``check_config``): the tasks of ``taskdag.build_task_dag`` on the lanes of
        ``TaskDAG.lanes``, the k lanes of stage d sharing pool d (``mode="green"``), or every
        lane sharing all ``hw.num_sms`` SMs in launch order (``mode="multistream"``, see
        ``SM_MODES``; ``cfg.alloc`` is then ignored). The task DAG is kept as ``dag``;
        ``observer`` as the constructor's."""
        k = cfg.streams_per_stage
        dag = build_task_dag(graph.n, graph.edges, graph.cross_edges, cfg.seg_of, cfg.D, cfg.w,
                             graph.num_regions, graph.microbatches, cfg.policy,
                             streams_per_stage=k)
        segk = [tuple(i for i in range(graph.n) if cfg.seg_of[i] == kk) for kk in range(cfg.K)]
        lane = dag.lanes().tolist()
        if check_sm_mode(mode) == "multistream" and cfg.D > 1:
            nl = cfg.D * k
            sms, pool_of = [int(hw.num_sms)] * nl, [0] * nl
        elif k == 1:
            sms, pool_of = list(cfg.alloc), None
        else:
            sms = [int(cfg.alloc[d]) for d in range(cfg.D) for _ in range(k)]
            pool_of = [d for d in range(cfg.D) for _ in range(k)]
        jobs = [(lane[i], dag.data_preds[i], int(dag.region[i]), int(dag.mb[i]),
                 segk[int(dag.seg[i])]) for i in range(dag.T)]
        sim = cls(graph.kernels, sms, jobs, hw, model, cache,
                  layers_per_region=graph.layers_per_region, record=record,
                  pool_of_stage=pool_of, observer=observer)
        sim.dag = dag
        return sim

    # ------------------------------------------------------------------ helpers
    def _set_active(self, u: Lane) -> None:
        """Put lane ``u`` into phase 2 and into ``active`` (kept in lane order)."""
        u.phase = _ACTIVE
        act = self.active
        if not act or act[-1].index < u.index:
            act.append(u)
        else:
            bisect.insort(act, u, key=_lane_index)

    def _start_kernel(self, u: Lane, t: float) -> None:
        j = u.job
        q = u.pos
        kid = u.kid = j.kids[q]
        self.inst_start[j.first + q] = t
        w = u.work = u.works[kid]
        if self.isolated:
            self._set_active(u)
            u.F, u.D, u.N, u.setup = 1.0, 0.0, 0.0, False
            self._lookups(u, kid, j)
            self.events_q.push(t + w.static_us, _DONE, u, u.epoch)
        else:
            u.phase = _LAUNCHING
            fixed = w.fixed_us
            if self._gain > 0.0 and fixed > 0.0:   # memory latency loaded by the other lanes
                h = 0.0
                for x in self.active:
                    if x is not u:
                        h += x.rh
                fixed *= 1.0 + self._gain * min(1.0, h * self._inv_copy)
            self.events_q.push(t + self.bm.launch_us + fixed, _LAUNCH, u, -1)

    def _lookups(self, u: Lane, kid: int, j: Job) -> tuple[float, float]:
        """L2 lookups of the reads of kernel ``kid`` of job ``j`` (run by lane ``u``); returns
        (HBM bytes, hit bytes)."""
        l, mu = j.region, j.mb
        w, r, wb, kv = self._objs[kid]
        read = self.cache.read
        hit = miss = 0.0
        for nm, b in w:
            if read(("w", l, nm), b):
                hit += b
            else:
                miss += b
        for nm, sh, b in r:
            if read(("a", l + sh, mu, nm), b):
                hit += b
            else:
                miss += b
        self.bytes_hit += hit
        self.bytes_obj_read += hit + miss
        if self.observer is not None:
            self.observer.on_lookups(kid, hit, hit + miss)
        hbm = miss + wb + kv
        self.bytes_hbm += hbm
        self.bytes_objects += hit + hbm
        return hbm, hit

    def _activate(self, u: Lane, t: float) -> None:
        kid = u.kid
        w = u.work
        hbm, hit = self._lookups(u, kid, u.job)
        if w.extra_hbm_bytes:     # the collective proxy's payload traffic (never in L2)
            hbm += w.extra_hbm_bytes
            self.bytes_hbm += w.extra_hbm_bytes
        data = hbm + hit
        sc = w.scale  # calibration: work scale (1 without one)
        self._set_active(u)
        u.sms = u.want = w.sms
        u.power = u.pow0 = w.power
        u.rate_full, u.window = w.rate_full, w.window_B_per_sm
        u.peak, u.reread = w.peak_Bps, w.reread_per_flop
        u.F = w.flops * sc
        u.D = data * sc
        u.phi = hbm / data if data > 0 else 0.0
        u.N = w.comm_bytes * sc
        self.bytes_reread += w.reread_per_flop * w.flops
        if w.comm_bytes > 0 and self.bm.setup_us > 0:
            u.setup = True
            u.comm_on = False
            self.events_q.push(t + self.bm.setup_us, _SETUP, u, -1)
        else:
            u.setup = False
            u.comm_on = w.comm_bytes > 0

    def _finish_kernel(self, u: Lane, t: float) -> bool:
        """End the running kernel of ``u``; start the job's next kernel or end the job.
        Returns True when the job ended (its successors may have been released)."""
        j = u.job
        q = u.pos
        kid = u.kid
        self.inst_end[j.first + q] = t
        l, mu = j.region, j.mb
        write = self.cache.write
        for nm, sh, b in self._writes[kid]:
            write(("a", l + sh, mu, nm), b)
        u.phase = _IDLE
        self.active.remove(u)
        u.epoch += 1
        u.live = False
        u.rc = u.rd = u.rn = u.rh = 0.0
        u.comm_on = False
        u.pc = u.pd = u.pn = _INF
        if q + 1 < len(j.kids):
            u.pos = q + 1
            self._start_kernel(u, t)
            return False
        self._end_job(u, j, t)
        return True

    def _end_job(self, u: Lane, j: Job, t: float) -> None:
        j.end = t
        u.job = None
        u.head += 1
        self.jobs_done += 1
        for x in j.succ:
            x.pending -= 1

    def _dispatch(self, t: float) -> None:
        """Start the head job of every idle lane whose data predecessors are done (lane
        order; an empty job ends at once and the scan restarts)."""
        again = True
        while again:
            again = False
            for u in self.lanes:
                if u.job is None and u.head < len(u.queue):
                    j = u.queue[u.head]
                    if j.pending == 0:
                        u.job = j
                        u.pos = 0
                        j.start = t
                        if j.kids:
                            self._start_kernel(u, t)
                        else:  # empty job: done at once
                            self._end_job(u, j, t)
                            again = True
                            break

    def _settle(self, t: float, snap: bool) -> None:
        """Complete every active kernel with no work left (first, with ``snap``, zero the
        counters predicted to end by ``t`` up to a rounding tolerance); start successors and
        the heads of idle lanes whose data predecessors are done."""
        fin = []
        tt = t + (1e-9 + 1e-12 * abs(t))
        for u in self.active:
            if snap:
                if u.F <= 0 or u.pc <= tt:
                    u.F = 0.0
                if u.D <= 0 or u.pd <= tt:
                    u.D = 0.0
                if u.N <= 0 or u.pn <= tt:
                    u.N = 0.0
            if u.F <= 0 and u.D <= 0 and u.N <= 0 and not u.setup:
                fin.append(u)
        if fin:
            released = False
            for u in fin:
                if self._finish_kernel(u, t):
                    released = True
            if released:
                self._dispatch(t)

    # ------------------------------------------------------------------ rates
    def _recompute(self, t: float) -> None:
        """Recompute the rates of the active set at time ``t`` and (re)schedule completions.

        A lane keeps its pending completion event when its rates did not change. A compute
        counter's completion is scheduled as an event only when it can change someone's rate
        (the power cap or the L2 bandwidth binds) or when it is the kernel's last counter.
        """
        act = self.active
        if self._shared:
            self._share_pools()
        hsum, cap, pcap, l2s = self.bm.rates_of(act)
        busy = 0.0
        q = self.events_q
        heap = q.heap
        push = heapq.heappush
        for u in act:
            busy += u.sms
            c, d, n = u.rc, u.rd, u.rn
            if u.live and c == u.oc and d == u.od and n == u.on:
                continue
            u.oc, u.od, u.on = c, d, n
            f, dd, nn = u.F, u.D, u.N
            pc = u.pc = (t + f / c * 1e6 if c > 0 else _INF) if f > 0 else t
            pd = u.pd = (t + dd / d * 1e6 if d > 0 else _INF) if dd > 0 else t
            pn = u.pn = (t + nn / n * 1e6 if n > 0 else _INF) if nn > 0 else t
            nxt = _INF
            if dd > 0 and pd < nxt:
                nxt = pd
            if nn > 0 and pn < nxt:
                nxt = pn
            if f > 0 and pc < nxt and (nxt == _INF or pcap or (l2s and u.reread > 0)):
                nxt = pc  # compute done changes a rate, or it is the last counter
            u.epoch += 1
            if nxt < _INF:
                q.seq += 1
                push(heap, (nxt, _DONE, q.seq, u, u.epoch))
                u.live = True
            else:
                u.live = False
        if self.record:
            self._rec(t, hsum, busy, cap)

    def _share_pools(self) -> None:
        """Set the SMs and compute power of every active kernel: its own (want, pow0), or its
        share of a pool whose active kernels want more SMs than it has (power scaled with the
        SMs granted), by the model's ``pool_sharing``: ``share_pool_fifo`` (launch order),
        ``share_pool_tail`` (launch order but for ops with trailing kernels) or ``share_pool``
        (equal shares)."""
        for u in self.active:
            u.sms, u.power = u.want, u.pow0
        for pool in self._shared:
            run = [u for u in pool.lanes if u.phase == _ACTIVE]
            if len(run) < 2:
                continue
            got = self._law(float(pool.sms), run, [u.want for u in run])
            if got is None:
                continue
            for u, g in zip(run, got):
                u.sms = g
                u.power = u.pow0 * g / u.want if u.want > 0 else 0.0

    def _share_fifo(self, sms: float, run: list, wants: list):
        """``share_pool_fifo``: launch order."""
        return share_pool_fifo(sms, wants, [self.inst_start[u.job.first + u.pos] for u in run])

    def _share_tail(self, sms: float, run: list, wants: list):
        """``share_pool_tail``: launch order but for ops with trailing kernels (``tails``)."""
        if self.tails is None:
            prof = self.hw.kernel_profile
            self.tails = [device_kernels(k, prof) > 1 for k in self.kernels]
        return share_pool_tail(sms, wants, [self.inst_start[u.job.first + u.pos] for u in run],
                               [u.remaining_us(self.bm.launch_us) for u in run],
                               [self.tails[u.kid] for u in run], self.model.tail_weight)

    def _share_fair(self, sms: float, run: list, wants: list):
        """``share_pool``: equal shares."""
        return share_pool(sms, wants)

    def _rec(self, t: float, hbm: float, busy: float, cap: float) -> None:
        """Record the utilisation from instant ``t`` on (replacing a sample at the same t)."""
        util = self.util
        if util and util[-4] == t:
            util[-4:] = array("d", (t, hbm, busy, cap))
        else:
            util.extend((t, hbm, busy, cap))

    def _rec_isolated(self, t: float) -> None:
        hsum = busy = 0.0
        for u in self.active:
            w = u.work
            busy += w.sms
            hsum += w.obj_bytes / (w.static_us * 1e-6) if w.static_us > 0 else 0.0
        self._rec(t, hsum, busy, hsum)

    # ------------------------------------------------------------------ stepping
    def start(self) -> None:
        """Dispatch the first tasks at t = 0 (called by ``step`` if needed)."""
        if self._started:
            return
        self._started = True
        self._dispatch(0.0)
        self._settle(0.0, False)
        if self.isolated:
            if self.record:
                self._rec_isolated(0.0)
        else:
            self._recompute(0.0)

    def step(self) -> bool:
        """Process every event of the next instant. Returns False when nothing is left.

        Raises:
            RuntimeError: the event queue ran dry with tasks left (a dependency cycle).
        """
        return self._advance(1)

    def _advance(self, max_steps: float) -> bool:
        """Process the events of up to ``max_steps`` instants; False when nothing is left.

        Per instant: move every active counter at its rate up to the instant and zero the
        counters predicted to end by then (up to a rounding tolerance); pop the instant's
        events (stale completions are skipped); complete finished kernels, release and start
        work (``_settle``); recompute the rates (``_recompute``).
        """
        if not self._started:
            self.start()
        heap = self.events_q.heap
        iso = self.isolated
        pop = heapq.heappop
        active = self.active
        fwd = self.forward if self.forward is not None and self.forward.active else None
        lane0 = self.lanes[0]
        n = 0
        events = 0
        now = self.t
        while heap:
            t = heap[0][0]
            if not iso:
                dt = (t - now) * 1e-6  # seconds; rates are per second
                if dt > 0:
                    for u in active:
                        if u.F > 0:
                            u.F -= u.rc * dt
                        if u.D > 0:
                            u.D -= u.rd * dt
                        if u.N > 0 and not u.setup:
                            u.N -= u.rn * dt
            self.t = now = t
            valid = None          # the first lane with a valid event at this instant
            multi = False         # events of several lanes at this instant
            while heap and heap[0][0] == t:
                _, prio, _, u, ep = pop(heap)
                events += 1
                if prio == _DONE and ep != u.epoch:
                    continue
                if valid is None:
                    valid = u
                elif u is not valid:
                    multi = True
                if prio == _DONE:
                    u.live = False
                    if iso:
                        u.F = u.D = u.N = 0.0
                elif prio == _LAUNCH:
                    self._activate(u, t)
                else:
                    u.setup = False
                    u.comm_on = u.N > 0
            if valid is None:
                continue
            self.steps += 1
            self._settle(t, not iso)
            if iso:
                if self.record:
                    self._rec_isolated(t)
            else:
                self._recompute(t)
            if fwd is not None:   # sim.periodic: ties, and lane 0 starting a region
                fwd.instant(t, multi and iso, lane0.job)
                if not fwd.active:
                    fwd, now = None, self.t     # a jump moves the clock
            n += 1
            if n >= max_steps:
                self.events += events
                return True
        self.events += events
        if self.jobs_done < len(self.jobs):
            raise RuntimeError(f"simulation stalled at t={self.t} µs with "
                               f"{len(self.jobs) - self.jobs_done} tasks left")
        return False

    def run(self, forward: bool = False) -> SimResult:
        """Run to completion and return the ``SimResult``.

        With ``forward`` (and no utilisation series), regions that repeat are skipped in one
        step (``sim.periodic.RegionForward``; the makespan equal to
        float rounding, ``SimResult.forwarded`` says what was skipped). The cyclic garbage
        collector is paused during the loop (the many small heap tuples otherwise trigger
        frequent useless scans).
        """
        if forward and not self.record and not self._started:
            self.forward = RegionForward(self)
        was = gc.isenabled()
        gc.disable()
        try:
            self._advance(_INF)
        finally:
            if was:
                gc.enable()
        return self._result()

    def _result(self) -> SimResult:
        return result_of(self)


def simulate(graph: OpGraph, cfg: Config, hw: Hardware, model: ContentionModel | None = None,
             cache: str = "lru", record: bool = True, validate: bool = True,
             mode: str = "green", forward: bool = False) -> SimResult:
    """Simulate one forward pass of ``graph`` (built for m microbatches) under ``cfg``.

    Args:
        graph: ``graph.build_graph(arch, deploy, m)`` or a synthetic ``OpGraph``.
        cfg: the configuration (D, w, seg_of, alloc, microbatch, policy); temporal execution is
            ``space.temporal_config`` (D = 1, all ``hw.num_sms`` SMs, one microbatch).
        hw: the GPU. model: ``ContentionModel`` (default calibrated; ``ContentionModel.off()``
            for isolated static durations). cache: ``"lru"``, ``"fifo"`` or ``"none"``.
        record: keep the utilisation time series. validate: run ``check_config``.
        mode: ``"green"`` (default: stage d on its own pool of ``cfg.alloc[d]`` SMs) or
            ``"multistream"`` (the same schedule, every lane on all the GPU's SMs, CTAs granted
            in launch order); see ``SM_MODES``. Temporal (D = 1) is the same in both.
        forward: skip regions that repeat (``sim.periodic``; only without ``record``): the
            makespan equal to float rounding, ``SimResult.forwarded`` says what was skipped.

    Returns:
        ``SimResult`` (tasks in the dispatch order of ``taskdag.build_task_dag``). In
        multistream mode ``stage_sms`` lists ``hw.num_sms`` for every stage.

    Raises:
        ValueError: invalid config, unknown cache policy, bad model parameters or kernel work.
    """
    check_policy(cache)
    if model is not None and not isinstance(model, ContentionModel):
        raise ValueError(f"model must be a ContentionModel, got {type(model).__name__}")
    if validate:
        check_config(graph, cfg, hw)
    check_sm_mode(mode)
    sim = EventSimulator.from_config(graph, cfg, hw, model, cache, record, mode)
    k = cfg.streams_per_stage
    dag = sim.dag
    res = sim.run(forward=forward)
    if k != 1:
        res.kernel_stage = res.kernel_stage // k
    if mode == "multistream" and cfg.D > 1:
        res.stage_sms = tuple(int(hw.num_sms) for _ in range(cfg.D))
    elif k != 1:
        res.stage_sms = tuple(int(a) for a in cfg.alloc)
    res.dag = dag
    res.config = cfg
    return res


def simulate_streams(streams: Sequence[tuple[int, Sequence[Kernel]]], hw: Hardware,
                     model: ContentionModel | None = None, cache: str = "lru",
                     record: bool = True) -> SimResult:
    """Run independent kernel streams concurrently, stream d on its own pool (e.g. a GEMM on a
    64-SM green context beside a copy on 68 SMs).

    Args:
        streams: ``[(pool_sms, [Kernel, ...]), ...]``; each stream's kernels run back to back.
            Objects are named as in the kernels (no region/microbatch qualification).
        hw, model, cache, record: as in ``simulate``.

    Returns:
        ``SimResult`` with one task per stream (task_end[d] = when stream d finished).

    Raises:
        ValueError: empty stream list, a pool < 1 SM, pools summing above ``num_sms``, bad work.
    """
    check_policy(cache)
    if not streams:
        raise ValueError("streams must hold at least one (pool_sms, kernels) pair")
    kernels: list[Kernel] = []
    jobs = []
    sms = []
    for d, st in enumerate(streams):
        if len(st) != 2:
            raise ValueError(f"streams[{d}] must be a (pool_sms, kernels) pair")
        p, ks = st
        ids = []
        for k in ks:
            if not isinstance(k, Kernel):
                raise ValueError(f"streams[{d}] holds {type(k).__name__}, expected graph.Kernel")
            ids.append(len(kernels))
            kernels.append(k)
        sms.append(p)
        jobs.append((d, (), 0, 0, tuple(ids)))
    sim = EventSimulator(kernels, sms, jobs, hw, model, cache, layers_per_region=None,
                         record=record)
    return sim.run()
