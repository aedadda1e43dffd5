"""The exact event-driven simulator (docs/method.md §3, "the exact scorer").

Segment tasks of the augmented task DAG (``taskdag.build_task_dag``, the evaluator's dispatch
order) are expanded into their kernels (kernel order; the kernels of one task run one after
another on the task's stage). Each stage runs only the head of its queue in the global dispatch
order and cannot bypass blocked work. Whenever a dependency releases a task or a work counter of a
running kernel reaches zero, the rates of the running set are recomputed (``contention``) and time
advances to the next event.

Events live in a heap of ``(time µs, priority, sequence, kind, stage, epoch)``: ties break by
priority (counter completion < collective setup end < launch end) then by push order, so the same
input always gives the same output. Completion events are invalidated lazily by an epoch per stage.
``EventSimulator.step()`` processes every event of the next instant; ``run()`` loops to the end.

A kernel's life: launch overhead (``Hardware.launch_us``, no work moves) -> active: L2 lookups of
its reads (``l2cache``), then compute, data and (after ``Hardware.comm_setup_us``) network counters
progress concurrently -> done when all are zero; its activation writes then enter L2.

With ``ContentionModel.off()`` every kernel takes its isolated static duration (one event per
kernel) and the makespan equals ``evaluator.Evaluator(...).makespan`` up to float rounding.
"""

from __future__ import annotations

import gc
import heapq
from dataclasses import dataclass, replace as _dc_replace
from typing import Sequence

import numpy as np

from subgpu_jax.sim.contention import BoundModel, ContentionModel
from subgpu_jax.model.graph import CATEGORIES, Kernel, OpGraph
from subgpu_jax.model.hardware import Hardware
from subgpu_jax.sim.l2cache import L2Cache, check_policy
from subgpu_jax.space.config import Config, check_cut
from subgpu_jax.space.taskdag import TaskDAG, build_task_dag

__all__ = ["SimResult", "EventSimulator", "simulate", "simulate_streams", "check_config"]

_DONE, _SETUP, _LAUNCH, _KEND = 0, 1, 2, 0
_INF = float("inf")


@dataclass
class SimResult:
    """Outcome of one simulation. Times in µs, bytes in bytes.

    Attributes:
        makespan: T, the completion of the last kernel (µs).
        task_start, task_end, tau: (T,) A_i, C_i and tau_i = C_i - A_i of each segment task
            (dispatch order of ``dag``; for ``simulate_streams`` one task per stream).
        kernel_task, kernel_index, kernel_stage: (Kinst,) int: task, kernel index (into
            ``kernels``) and stage of every kernel instance, in (task, kernel order).
        kernel_region, kernel_mb: (Kinst,) int region instance and microbatch of each instance.
        kernel_start, kernel_end: (Kinst,) µs; start = launch begins, end = all work done.
        kernels: the kernel table the indices refer to.
        stage_sms: SMs of each stage.
        category_time: µs of kernel residence (end - start summed) per ``graph.CATEGORIES`` entry.
        l2_hit_rate: hit bytes / object-read bytes (weights + activations; KV excluded).
        bytes_hbm: bytes moved to/from HBM (read misses + activation writes + KV).
        bytes_l2_hit: object-read bytes served by L2. bytes_reread: operand re-read bytes
            (tensor kernels, L2 only; 0 when isolated). bytes_objects: sum of the kernels'
            ``hbm_bytes`` over all instances (= bytes_hbm + bytes_l2_hit).
        l2_max_occupancy: the largest L2 occupancy seen (bytes).
        util_t: (S,) breakpoints (µs); util_hbm, util_sm: (S,) HBM bytes/s as a fraction of
            ``hbm_peak_Bps`` and fraction of SMs busy on [util_t[s], util_t[s+1]) (last segment
            to the makespan). hbm_cap_Bps: (S,) bandwidth the response curve allows at that
            instant's concurrency (bytes/s). mean_hbm_util, mean_sm_util: time-weighted means.
        events: heap events processed (kernel events); steps: distinct instants processed.
        dag: the task DAG (None for ``simulate_streams``). config: the Config (or None).
    """

    makespan: float
    task_start: np.ndarray
    task_end: np.ndarray
    tau: np.ndarray
    kernel_task: np.ndarray
    kernel_index: np.ndarray
    kernel_stage: np.ndarray
    kernel_region: np.ndarray
    kernel_mb: np.ndarray
    kernel_start: np.ndarray
    kernel_end: np.ndarray
    kernels: tuple
    stage_sms: tuple
    category_time: dict
    l2_hit_rate: float
    bytes_hbm: float
    bytes_l2_hit: float
    bytes_reread: float
    bytes_objects: float
    l2_max_occupancy: float
    util_t: np.ndarray
    util_hbm: np.ndarray
    util_sm: np.ndarray
    hbm_cap_Bps: np.ndarray
    mean_hbm_util: float
    mean_sm_util: float
    events: int
    steps: int
    dag: TaskDAG | None = None
    config: Config | None = None
    hw_name: str = ""

    def kernel_durations(self) -> np.ndarray:
        """(Kinst,) residence time of each kernel instance (µs)."""
        return self.kernel_end - self.kernel_start

    def summary(self) -> dict:
        """Scalar results as a JSON-ready dict."""
        return {"makespan_us": float(self.makespan), "l2_hit_rate": float(self.l2_hit_rate),
                "mean_hbm_util": float(self.mean_hbm_util),
                "mean_sm_util": float(self.mean_sm_util),
                "bytes_hbm": float(self.bytes_hbm), "bytes_l2_hit": float(self.bytes_l2_hit),
                "category_time_us": {k: float(v) for k, v in self.category_time.items()},
                "events": int(self.events), "kernel_instances": int(self.kernel_start.size)}


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
    sim._work[(0, 0)] = _dc_replace(sim._work[(0, 0)], **over)
    return float(sim.run().makespan)


class EventSimulator:
    """Event-driven simulation of jobs (segment tasks or streams) on SM pools.

    Args:
        kernels: the kernel table (``OpGraph.kernels`` or any kernels).
        stage_sms: SMs of each stage (ints >= 1, sum <= hw.num_sms).
        jobs: in global dispatch order, ``(stage, data_preds, region, microbatch, kernel_ids)``;
            data_preds are earlier job indices; kernel_ids index ``kernels`` in run order.
        hw: the GPU. model: the ``ContentionModel`` (default: calibrated, contention on).
        cache: L2 policy name (``l2cache.L2_POLICIES``).
        layers_per_region: P for the residual-stream aliasing (None: no aliasing).
        record: keep the utilisation time series.
        pool_of_stage: with k streams per stage, the "stages" here are lanes (streams) and this
            names the SM pool of each lane (lanes of one pool list the pool's SMs in
            ``stage_sms``); while n lanes of a pool run kernels at once, each gets 1/n of the
            pool's SMs (and so of its compute power, issue bandwidth and bytes in flight). None:
            every stage is its own pool.

    Raises:
        ValueError: bad stages, jobs, policy or kernel work (one line naming the field).
    """

    def __init__(self, kernels: Sequence[Kernel], stage_sms: Sequence[int], jobs: Sequence,
                 hw: Hardware, model: ContentionModel | None = None, cache: str = "lru",
                 layers_per_region: int | None = None, record: bool = True,
                 pool_of_stage: Sequence[int] | None = None) -> None:
        model = ContentionModel() if model is None else model
        self.bm = BoundModel(model, hw, lone_makespan)
        self.hw, self.model = hw, model
        self.isolated = bool(model.isolated)
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
            self.pool_of = [int(q) for q in pool_of_stage]
        else:
            total = sum(sms)
            self.pool_of = None
        if total > hw.num_sms:
            raise ValueError(f"stage_sms sum to {total}, more than the {hw.num_sms} SMs of "
                             f"{hw.name}")
        self.stage_sms = tuple(sms)
        self.kernels = tuple(kernels)
        D = len(sms)
        self.jobs = list(jobs)
        nj = len(self.jobs)
        self.job_stage = []
        self.job_kids = []
        self.job_l = []
        self.job_mu = []
        succ: list[list[int]] = [[] for _ in range(nj)]
        pending = []
        for j, (s, preds, l, mu, kids) in enumerate(self.jobs):
            if not 0 <= s < D:
                raise ValueError(f"job {j}: stage {s} out of range 0..{D - 1}")
            for q in preds:
                if not 0 <= q < j:
                    raise ValueError(f"job {j}: data predecessor {q} must be an earlier job")
                succ[q].append(j)
            for k in kids:
                if not 0 <= k < len(self.kernels):
                    raise ValueError(f"job {j}: kernel id {k} out of range")
            self.job_stage.append(int(s))
            self.job_kids.append(tuple(int(k) for k in kids))
            self.job_l.append(int(l))
            self.job_mu.append(int(mu))
            pending.append(len(set(preds)))
        self.succ = [tuple(sorted(set(x))) for x in succ]
        self.pending = pending
        self.queue = [[j for j in range(nj) if self.job_stage[j] == s] for s in range(D)]
        self.head = [0] * D
        off = [0]
        for kids in self.job_kids:
            off.append(off[-1] + len(kids))
        self.job_off = off
        ninst = off[-1]
        self.inst_start = [0.0] * ninst
        self.inst_end = [0.0] * ninst
        self.task_start = [0.0] * nj
        self.task_end = [0.0] * nj
        # per (kernel, stage) work and object names
        self._work = {}
        for s in range(D):
            for kid in {k for j in self.queue[s] for k in self.job_kids[j]}:
                self._work[(kid, s)] = self.bm.work(self.kernels[kid], sms[s])
        P = layers_per_region
        self._objs = []
        for k in self.kernels:
            w = tuple((nm, float(b)) for nm, b in k.weight_objects)
            r = tuple(_canon(nm, P) + (float(b),) for nm, b in k.act_reads)
            wr = tuple(_canon(nm, P) + (float(b),) for nm, b in k.act_writes)
            self._objs.append((w, r, wr, float(k.kv_bytes)))
        # stage state
        self.s_job = [-1] * D       # current job
        self.s_pos = [0] * D        # position of the running kernel in its job
        self.s_phase = [0] * D      # 0 idle, 1 launching, 2 active
        self.s_w = [None] * D       # KernelWork of the running kernel
        self.F = [0.0] * D
        self.Dd = [0.0] * D
        self.Nn = [0.0] * D
        self.setup = [False] * D
        self.phi = [0.0] * D
        self.rc = [0.0] * D
        self.rd = [0.0] * D
        self.rn = [0.0] * D
        self.rh = [0.0] * D
        self.k_sms = [0.0] * D      # constants of the running kernel, per stage
        self.k_rfull = [0.0] * D
        self.k_pow = [0.0] * D
        self.k_win = [0.0] * D      # bytes in flight per SM of the running kernel
        self.k_peak = [0.0] * D
        self.k_rr = [0.0] * D
        self.comm_on = [False] * D
        self.pf = [[_INF, _INF, _INF] for _ in range(D)]
        self.epoch = [0] * D
        self._live = [False] * D    # a valid completion event is pending for the stage
        self.heap: list = []
        self.seq = 0
        self.t = 0.0
        self.events = 0
        self.steps = 0
        self.jobs_done = 0
        self.record = record
        self.ut: list[float] = []
        self.uh: list[float] = []
        self.us: list[float] = []
        self.ucap: list[float] = []
        self.bytes_hbm = 0.0
        self.bytes_hit = 0.0
        self.bytes_obj_read = 0.0
        self.bytes_reread = 0.0
        self.bytes_objects = 0.0
        self._started = False

    # ------------------------------------------------------------------ helpers
    def _push(self, t: float, prio: int, kind: int, s: int, ep: int) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, prio, self.seq, kind, s, ep))

    def _start_kernel(self, s: int, t: float) -> None:
        j = self.s_job[s]
        q = self.s_pos[s]
        kid = self.job_kids[j][q]
        w = self._work[(kid, s)]
        self.s_w[s] = w
        self.inst_start[self.job_off[j] + q] = t
        if self.isolated:
            self.s_phase[s] = 2
            self.F[s], self.Dd[s], self.Nn[s], self.setup[s] = 1.0, 0.0, 0.0, False
            self._lookups(s, kid, j)
            self._push(t + w.static_us, _DONE, _KEND, s, self.epoch[s])
        else:
            self.s_phase[s] = 1
            self._push(t + self.bm.launch_us + w.fixed_us, _LAUNCH, _LAUNCH, s, -1)

    def _lookups(self, s: int, kid: int, j: int) -> tuple[float, float]:
        """L2 lookups of the reads of kernel ``kid`` of job ``j``; returns (HBM bytes, hit bytes)."""
        cache = self.cache
        l, mu = self.job_l[j], self.job_mu[j]
        w, r, wr, kv = self._objs[kid]
        hit = miss = 0.0
        for nm, b in w:
            if cache.read(("w", l, nm), b):
                hit += b
            else:
                miss += b
        for nm, sh, b in r:
            if cache.read(("a", l + sh, mu, nm), b):
                hit += b
            else:
                miss += b
        wb = 0.0
        for _, _, b in wr:
            wb += b
        self.bytes_hit += hit
        self.bytes_obj_read += hit + miss
        hbm = miss + wb + kv
        self.bytes_hbm += hbm
        self.bytes_objects += hit + hbm
        return hbm, hit

    def _activate(self, s: int, t: float) -> None:
        j = self.s_job[s]
        kid = self.job_kids[j][self.s_pos[s]]
        w = self.s_w[s]
        hbm, hit = self._lookups(s, kid, j)
        data = hbm + hit
        sc = w.scale  # calibration: work scale (1 without one)
        self.s_phase[s] = 2
        self.k_sms[s], self.k_rfull[s], self.k_pow[s] = w.sms, w.rate_full, w.power
        self.k_win[s] = w.window_B_per_sm
        self.k_peak[s], self.k_rr[s] = w.peak_Bps, w.reread_per_flop
        self.F[s] = w.flops * sc
        self.Dd[s] = data * sc
        self.phi[s] = hbm / data if data > 0 else 0.0
        self.Nn[s] = w.comm_bytes * sc
        self.bytes_reread += w.reread_per_flop * w.flops
        if w.comm_bytes > 0 and self.bm.setup_us > 0:
            self.setup[s] = True
            self.comm_on[s] = False
            self._push(t + self.bm.setup_us, _SETUP, _SETUP, s, -1)
        else:
            self.setup[s] = False
            self.comm_on[s] = w.comm_bytes > 0

    def _finish_kernel(self, s: int, t: float) -> bool:
        j = self.s_job[s]
        q = self.s_pos[s]
        kid = self.job_kids[j][q]
        self.inst_end[self.job_off[j] + q] = t
        l, mu = self.job_l[j], self.job_mu[j]
        for nm, sh, b in self._objs[kid][2]:
            self.cache.write(("a", l + sh, mu, nm), b)
        self.s_phase[s] = 0
        self.epoch[s] += 1
        self._live[s] = False
        self.rc[s] = self.rd[s] = self.rn[s] = self.rh[s] = 0.0
        self.comm_on[s] = False
        self.pf[s] = [_INF, _INF, _INF]
        if q + 1 < len(self.job_kids[j]):
            self.s_pos[s] = q + 1
            self._start_kernel(s, t)
            return False
        # job done
        self.task_end[j] = t
        self.s_job[s] = -1
        self.head[s] += 1
        self.jobs_done += 1
        for x in self.succ[j]:
            self.pending[x] -= 1
        return True

    def _dispatch(self, t: float) -> None:
        """Start the head job of every idle stage whose data predecessors are done."""
        for s in range(len(self.stage_sms)):
            if self.s_job[s] < 0 and self.head[s] < len(self.queue[s]):
                j = self.queue[s][self.head[s]]
                if self.pending[j] == 0:
                    self.s_job[s] = j
                    self.s_pos[s] = 0
                    self.task_start[j] = t
                    if self.job_kids[j]:
                        self._start_kernel(s, t)
                    else:  # empty job: done at once
                        self.task_end[j] = t
                        self.s_job[s] = -1
                        self.head[s] += 1
                        self.jobs_done += 1
                        for x in self.succ[j]:
                            self.pending[x] -= 1
                        self._dispatch(t)
                        return

    def _settle(self, t: float) -> None:
        """Complete every active kernel with no work left; start successors and the heads of
        idle stages whose data predecessors are done."""
        F, Dd, Nn, setup, phase = self.F, self.Dd, self.Nn, self.setup, self.s_phase
        released = False
        for s in range(len(phase)):
            if phase[s] == 2 and F[s] <= 0 and Dd[s] <= 0 and Nn[s] <= 0 and not setup[s]:
                if self._finish_kernel(s, t):
                    released = True
        if released:
            self._dispatch(t)

    # ------------------------------------------------------------------ rates
    def _recompute(self, t: float) -> None:
        """Recompute the rates of the active set at time ``t`` and (re)schedule completions.

        A stage keeps its pending completion event when its rates did not change. A compute
        counter's completion is scheduled as an event only when it can change someone's rate
        (the power cap or the L2 bandwidth binds) or when it is the kernel's last counter.
        """
        phase = self.s_phase
        act = [s for s in range(len(phase)) if phase[s] == 2]
        F, Dd, Nn, rc, rd, rn = self.F, self.Dd, self.Nn, self.rc, self.rd, self.rn
        oc, od, on = rc[:], rd[:], rn[:]
        ksms, kpow = self.k_sms, self.k_pow
        if self.pool_of is not None:
            ksms, kpow = self._share_pools(act)
        hsum, cap, pcap, l2s = self.bm.rates_into(
            act, ksms, self.k_rfull, kpow, F, Dd, self.phi, self.k_peak, self.k_rr,
            self.comm_on, rc, rd, self.rh, rn, self.k_win)
        busy = 0.0
        live, pfl, krr, epoch = self._live, self.pf, self.k_rr, self.epoch
        heap = self.heap
        for s in act:
            busy += ksms[s]
            c, d, n = rc[s], rd[s], rn[s]
            if live[s] and c == oc[s] and d == od[s] and n == on[s]:
                continue
            f, dd, nn = F[s], Dd[s], Nn[s]
            pc = (t + f / c * 1e6 if c > 0 else _INF) if f > 0 else t
            pd = (t + dd / d * 1e6 if d > 0 else _INF) if dd > 0 else t
            pn = (t + nn / n * 1e6 if n > 0 else _INF) if nn > 0 else t
            pfl[s] = [pc, pd, pn]
            nxt = _INF
            if dd > 0 and pd < nxt:
                nxt = pd
            if nn > 0 and pn < nxt:
                nxt = pn
            if f > 0 and pc < nxt and (nxt == _INF or pcap or (l2s and krr[s] > 0)):
                nxt = pc  # compute done changes a rate, or it is the last counter
            epoch[s] += 1
            if nxt < _INF:
                self.seq += 1
                heapq.heappush(heap, (nxt, _DONE, self.seq, _DONE, s, epoch[s]))
                live[s] = True
            else:
                live[s] = False
        if self.record:
            self._rec(t, hsum, busy, cap)

    def _share_pools(self, act: list[int]) -> tuple[list[float], list[float]]:
        """SMs and compute power of the running kernels when lanes share a pool: each kernel
        wants min(pool SMs, its CTAs); when the wants of a pool's running kernels exceed its
        SMs, the pool is water-filled (equal shares, a kernel never above its want, leftovers
        to the others). Power scales with the SMs granted."""
        ksms, kpow = self.k_sms[:], self.k_pow[:]
        by_pool: dict[int, list[int]] = {}
        for s in act:
            by_pool.setdefault(self.pool_of[s], []).append(s)
        for lanes in by_pool.values():
            if len(lanes) < 2:
                continue
            cap = float(self.stage_sms[lanes[0]])
            if sum(self.k_sms[s] for s in lanes) <= cap:
                continue
            left, todo = cap, sorted(lanes, key=lambda s: self.k_sms[s])
            for i, s in enumerate(todo):
                share = left / (len(todo) - i)
                g = min(self.k_sms[s], share)
                ksms[s] = g
                kpow[s] = self.k_pow[s] * g / self.k_sms[s] if self.k_sms[s] > 0 else 0.0
                left -= g
        return ksms, kpow

    def _rec(self, t: float, hbm: float, busy: float, cap: float) -> None:
        if self.ut and self.ut[-1] == t:
            self.uh[-1], self.us[-1], self.ucap[-1] = hbm, busy, cap
        else:
            self.ut.append(t)
            self.uh.append(hbm)
            self.us.append(busy)
            self.ucap.append(cap)

    def _rec_isolated(self, t: float) -> None:
        hsum = busy = 0.0
        for s in range(len(self.stage_sms)):
            if self.s_phase[s] == 2:
                w = self.s_w[s]
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
        self._settle(0.0)
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
        if not self._started:
            self.start()
        heap = self.heap
        iso = self.isolated
        D = len(self.stage_sms)
        F, Dd, Nn, phase, setup = self.F, self.Dd, self.Nn, self.s_phase, self.setup
        rc, rd, rn, epoch = self.rc, self.rd, self.rn, self.epoch
        while heap:
            t = heap[0][0]
            if not iso:
                dt = (t - self.t) * 1e-6  # seconds; rates are per second
                if dt > 0:
                    for s in range(D):
                        if phase[s] == 2:
                            if F[s] > 0:
                                F[s] -= rc[s] * dt
                            if Dd[s] > 0:
                                Dd[s] -= rd[s] * dt
                            if Nn[s] > 0 and not setup[s]:
                                Nn[s] -= rn[s] * dt
            self.t = t
            valid = False
            while heap and heap[0][0] == t:
                _, prio, _, kind, s, ep = heapq.heappop(heap)
                self.events += 1
                if prio == _DONE:
                    if ep != epoch[s]:
                        continue
                    valid = True
                    self._live[s] = False
                    if iso:
                        F[s] = Dd[s] = Nn[s] = 0.0
                elif prio == _LAUNCH:
                    valid = True
                    self._activate(s, t)
                else:
                    valid = True
                    setup[s] = False
                    self.comm_on[s] = Nn[s] > 0
            if not valid:
                continue
            self.steps += 1
            if not iso:
                tol = 1e-9 + 1e-12 * abs(t)
                for s in range(D):
                    if phase[s] == 2:
                        pf = self.pf[s]
                        if F[s] <= 0 or pf[0] <= t + tol:
                            F[s] = 0.0
                        if Dd[s] <= 0 or pf[1] <= t + tol:
                            Dd[s] = 0.0
                        if Nn[s] <= 0 or pf[2] <= t + tol:
                            Nn[s] = 0.0
            self._settle(t)
            if iso:
                if self.record:
                    self._rec_isolated(t)
            else:
                self._recompute(t)
            return True
        if self.jobs_done < len(self.jobs):
            raise RuntimeError(f"simulation stalled at t={self.t} µs with "
                               f"{len(self.jobs) - self.jobs_done} tasks left")
        return False

    def run(self) -> SimResult:
        """Run to completion and return the ``SimResult``.

        The cyclic garbage collector is paused during the loop (the simulator creates no
        reference cycles; the many small heap tuples otherwise trigger frequent useless scans).
        """
        was = gc.isenabled()
        gc.disable()
        try:
            while self.step():
                pass
        finally:
            if was:
                gc.enable()
        return self._result()

    def _result(self) -> SimResult:
        nj = len(self.jobs)
        ninst = self.job_off[-1]
        ktask = np.repeat(np.arange(nj), [len(k) for k in self.job_kids]).astype(np.int64)
        kidx = np.fromiter((k for kids in self.job_kids for k in kids), dtype=np.int64,
                           count=ninst)
        kst = np.array(self.job_stage, dtype=np.int64)[ktask] if ninst else np.zeros(0, int)
        kl = np.array(self.job_l, dtype=np.int64)[ktask] if ninst else np.zeros(0, int)
        km = np.array(self.job_mu, dtype=np.int64)[ktask] if ninst else np.zeros(0, int)
        ks = np.array(self.inst_start)
        ke = np.array(self.inst_end)
        A = np.array(self.task_start)
        C = np.array(self.task_end)
        T = float(C.max()) if nj else 0.0
        cat = {c: 0.0 for c in CATEGORIES}
        dur = ke - ks
        cats = [self.kernels[k].category for k in range(len(self.kernels))]
        sums = np.bincount(kidx, weights=dur, minlength=len(self.kernels)) if ninst else []
        for k, v in enumerate(sums):
            cat[cats[k]] = cat.get(cats[k], 0.0) + float(v)
        ut = np.array(self.ut)
        uh = np.array(self.uh) / self.hw.hbm_peak_Bps
        us = np.array(self.us) / self.hw.num_sms
        ucap = np.array(self.ucap)
        if ut.size and T > 0:
            w = np.diff(np.append(ut, max(T, ut[-1])))
            mh = float((uh * w).sum() / T)
            ms = float((us * w).sum() / T)
        else:
            mh = ms = 0.0
        hr = self.bytes_hit / self.bytes_obj_read if self.bytes_obj_read > 0 else 0.0
        return SimResult(makespan=T, task_start=A, task_end=C, tau=C - A, kernel_task=ktask,
                         kernel_index=kidx, kernel_stage=kst, kernel_region=kl, kernel_mb=km,
                         kernel_start=ks, kernel_end=ke, kernels=self.kernels,
                         stage_sms=self.stage_sms, category_time=cat, l2_hit_rate=hr,
                         bytes_hbm=self.bytes_hbm, bytes_l2_hit=self.bytes_hit,
                         bytes_reread=self.bytes_reread, bytes_objects=self.bytes_objects,
                         l2_max_occupancy=self.cache.max_occupancy, util_t=ut, util_hbm=uh,
                         util_sm=us, hbm_cap_Bps=ucap, mean_hbm_util=mh, mean_sm_util=ms,
                         events=self.events, steps=self.steps, hw_name=self.hw.name)


def check_config(graph: OpGraph, cfg: Config, hw: Hardware) -> None:
    """Validate ``cfg`` against ``graph`` and ``hw`` for simulation.

    With a deployment on the graph the full feasibility check of ``Config.check`` applies and the
    graph's microbatch count must equal R / cfg.microbatch; for synthetic graphs the cut must be
    legal, the allocation must have D positive integer entries summing to at most ``num_sms``.

    Raises:
        ValueError: one line naming the offending field.
    """
    if not isinstance(cfg, Config):
        raise ValueError(f"config must be a space.Config, got {type(cfg).__name__}")
    if not isinstance(graph, OpGraph):
        raise ValueError(f"graph must be an OpGraph, got {type(graph).__name__}")
    if not isinstance(hw, Hardware):
        raise ValueError(f"hw must be a Hardware, got {type(hw).__name__}")
    if isinstance(cfg.D, bool) or not isinstance(cfg.D, (int, np.integer)) or cfg.D < 1:
        raise ValueError(f"config.D must be an integer >= 1, got {cfg.D!r}")
    if cfg.w not in (0, 1):
        raise ValueError(f"config.w must be 0 or 1, got {cfg.w!r}")
    if len(cfg.alloc) != cfg.D:
        raise ValueError(f"config.alloc has {len(cfg.alloc)} entries, D = {cfg.D} needs {cfg.D}")
    for d, p in enumerate(cfg.alloc):
        if isinstance(p, bool) or not isinstance(p, (int, np.integer)) or p < 1:
            raise ValueError(f"config.alloc[{d}] must be an integer >= 1 SMs, got {p!r}")
    if sum(cfg.alloc) > hw.num_sms:
        raise ValueError(f"config.alloc sums to {sum(cfg.alloc)} SMs, {hw.name} has "
                         f"{hw.num_sms}")
    if graph.deployment is not None:
        R = graph.deployment.requests_per_gpu
        cfg.check(graph.n, graph.edges, hw, R)
        if R // cfg.microbatch != graph.microbatches:
            raise ValueError(f"config.microbatch={cfg.microbatch} gives m = {R // cfg.microbatch}"
                             f" microbatches, the graph was built for {graph.microbatches}")
    else:
        check_cut(cfg.seg_of, graph.n, graph.edges, cfg.K)


def simulate(graph: OpGraph, cfg: Config, hw: Hardware, model: ContentionModel | None = None,
             cache: str = "lru", record: bool = True, validate: bool = True) -> SimResult:
    """Simulate one forward pass of ``graph`` (built for m microbatches) under ``cfg``.

    Args:
        graph: ``graph.build_graph(arch, deploy, m)`` or a synthetic ``OpGraph``.
        cfg: the configuration (D, w, seg_of, alloc, microbatch, policy); temporal execution is
            ``space.temporal_config`` (D = 1, all ``hw.num_sms`` SMs, one microbatch).
        hw: the GPU. model: ``ContentionModel`` (default calibrated; ``ContentionModel.off()``
            for isolated static durations). cache: ``"lru"``, ``"fifo"`` or ``"none"``.
        record: keep the utilisation time series. validate: run ``check_config``.

    Returns:
        ``SimResult`` (tasks in the dispatch order of ``taskdag.build_task_dag``).

    Raises:
        ValueError: invalid config, unknown cache policy, bad model parameters or kernel work.
    """
    check_policy(cache)
    if model is not None and not isinstance(model, ContentionModel):
        raise ValueError(f"model must be a ContentionModel, got {type(model).__name__}")
    if validate:
        check_config(graph, cfg, hw)
    k = int(getattr(cfg, "streams_per_stage", 1))
    dag = build_task_dag(graph.n, graph.edges, graph.cross_edges, cfg.seg_of, cfg.D, cfg.w,
                         graph.num_regions, graph.microbatches, cfg.policy,
                         streams_per_stage=k)
    segk = [tuple(i for i in range(graph.n) if cfg.seg_of[i] == kk) for kk in range(cfg.K)]
    if k == 1:
        lane = [int(s) for s in dag.stage]
        sms, pool_of = list(cfg.alloc), None
    else:  # stage d's j-th task on lane d*k + j mod k (the runtime's rule, hw_runtime.plan)
        seen = [0] * cfg.D
        lane = []
        for i in range(dag.T):
            d = int(dag.stage[i])
            lane.append(d * k + seen[d] % k)
            seen[d] += 1
        sms = [int(cfg.alloc[d]) for d in range(cfg.D) for _ in range(k)]
        pool_of = [d for d in range(cfg.D) for _ in range(k)]
    jobs = [(lane[i], dag.data_preds[i], int(dag.region[i]), int(dag.mb[i]),
             segk[int(dag.seg[i])]) for i in range(dag.T)]
    sim = EventSimulator(graph.kernels, sms, jobs, hw, model, cache,
                         layers_per_region=graph.layers_per_region, record=record,
                         pool_of_stage=pool_of)
    res = sim.run()
    if k != 1:
        res.kernel_stage = res.kernel_stage // k
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
