"""Named state of the event simulator (``eventsim``): the event loop's queue, the resources and
the result.

``EventQueue`` is the clock-ordered event heap (a SimPy-like core without resources). The
resources are SM pools (``Pool``, one green context) and their lanes (``Lane``: one stream, with
the named state of the kernel it runs: counters, rate-model inputs and outputs, predicted
completions); ``Job`` is one task; ``share_pool``, ``share_pool_fifo`` and ``share_pool_tail`` are
the rules by which the lanes of one pool share its SMs (docs/method.md, "Streams per stage");
``SimResult`` is the outcome of a run.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from itertools import chain
from typing import Protocol, Sequence, runtime_checkable

import numpy as np

from subgpu_jax.model.graph import CATEGORIES
from subgpu_jax.sim.kernelwork import KernelWork
from subgpu_jax.space.config import Config
from subgpu_jax.space.taskdag import TaskDAG

__all__ = ["LookupObserver", "EventQueue", "Job", "Lane", "Pool", "share_pool", "share_pool_fifo",
           "share_pool_tail", "SimResult", "result_of", "IDLE", "LAUNCHING", "ACTIVE"]

#: Lane phases: no kernel, a kernel launching (no work moves), a kernel active.
IDLE, LAUNCHING, ACTIVE = 0, 1, 2
_INF = float("inf")


def share_pool(pool: float, wants: Sequence[float]) -> list[float] | None:
    """Water-fill a pool of SMs between the kernels active on its lanes.

    Each kernel wants min(pool SMs, its CTAs) SMs. When the wants fit in the pool nothing is
    shared (None). Otherwise, in increasing order of want (ties in lane order), each kernel gets
    min(its want, an equal share of what is left): equal shares, a kernel never above its want,
    what it leaves going to the others.

    Args:
        pool: SMs of the pool (> 0). wants: SMs each active kernel wants (> 0), in lane order.

    Returns:
        SMs granted to each kernel (same order, summing to ``pool``), or None when
        ``sum(wants) <= pool``.
    """
    if sum(wants) <= pool:
        return None
    out = [0.0] * len(wants)
    left, n = float(pool), len(wants)
    for i, s in enumerate(sorted(range(n), key=wants.__getitem__)):
        share = left / (n - i)
        g = min(wants[s], share)
        out[s] = g
        left -= g
    return out


def share_pool_fifo(pool: float, wants: Sequence[float], starts: Sequence[float]
                    ) -> list[float] | None:
    """Share a pool of SMs between the kernels active on its lanes in launch order.

    The kernel that started first gets what it wants, the next what is left, and so on, with
    at least one SM each (a later kernel's blocks still find room on the SMs the earlier one
    leaves partly free). Measured on the H200 (docs/fidelity.md §2,
    two streams of one green context, one launch each): a GEMM launched first ends at its alone
    time (309.6 vs 308.7 µs on 32 SMs) and the attention launched 2 µs after it ends at the sum
    of both alone times (1,098 vs 1,102 µs); an RMSNorm launched after attention waits for it.
    The order is kernel by kernel (the later kernels of a multi-kernel op queue behind the other
    stream's kernel); attention launched first leaves room for a GEMM beside it (it slows
    1.29x), a partial co-residence this rule does not model.

    Args:
        pool: SMs of the pool (> 0). wants: SMs each active kernel wants (> 0). starts: when
            each kernel started (µs); ties go to the earlier lane (list order).

    Returns:
        SMs granted to each kernel (same order, summing to ``pool``), or None when
        ``sum(wants) <= pool``.
    """
    if sum(wants) <= pool:
        return None
    n = len(wants)
    out = [1.0] * n
    left = float(pool) - n
    for i in sorted(range(n), key=lambda i: (starts[i], i)):
        g = min(wants[i] - 1.0, max(0.0, left))
        out[i] += g
        left -= g
    return out


def share_pool_tail(pool: float, wants: Sequence[float], starts: Sequence[float],
                    remaining_us: Sequence[float], tails: Sequence[bool], tail_weight: float
                    ) -> list[float] | None:
    """Share a pool of SMs in launch order, except where the earlier op has trailing kernels.

    Mechanism (docs/verdicts.md "Two large kernels on one pool", fitted by
    ``experiments/corun_lanes_fit.py``): the block scheduler serves kernels in launch order, so
    an op of ONE device kernel launched first keeps the pool (``share_pool_fifo``); an op of
    several device kernels loses its place, because its later kernels are launched after the
    other stream's kernel and queue behind it, so it ends near the later op's end. In the fluid
    model the kernels share the pool in proportion to their remaining alone times, the later
    ones weighted theta = ``tail_weight``: a compute-bound earlier op A then ends about
    rem(A) + theta x rem(B) after B starts (theta = 1: both end together), B at the sum.

    Rule, in launch order (ties to the earlier lane): every kernel first gets 1 SM; of the
    ``left`` SMs beyond those, kernel i takes the fraction r_i / (r_i + th_i x sum of the later
    kernels' r_j) (r = ``remaining_us``; th_i = ``tail_weight`` if ``tails[i]`` else 0, and a
    fraction of 1 when both are 0), at least what the later kernels cannot use and at most
    want_i - 1; the rest goes on to the later kernels. With ``tail_weight = 0`` or no tails
    this is ``share_pool_fifo`` exactly.

    Hand-derived: pool 128, wants (128, 128), A launched first with r = 60 µs and trailing
    kernels, B with r = 240 µs, theta = 0.5: A takes 60 / (60 + 0.5 x 240) = 1/3 of the 126 SMs
    beyond the floors, 1 + 42 = 43 SMs, and B 1 + 84 = 85; compute-bound and linear in SMs, A's
    60 µs of work then take 60 x 128 / 43 = 178.6 µs, about r(A) + theta x r(B) = 180 µs.

    Args:
        pool: SMs of the pool (>= the number of kernels). wants: SMs each active kernel wants
            (>= 1). starts: when each kernel started (µs). remaining_us: each kernel's work
            left, as µs alone on the pool (>= 0; ``Lane.remaining_us``). tails: whether each
            kernel's op issues more device kernels after it (``kernelcost.device_kernels`` > 1).
            tail_weight: theta >= 0. All sequences in the same (lane) order.

    Returns:
        SMs granted to each kernel (same order, summing to ``pool``, each in [1, want]), or None
        when ``sum(wants) <= pool``.
    """
    if sum(wants) <= pool:
        return None
    n = len(wants)
    out = [1.0] * n
    left = float(pool) - n
    order = sorted(range(n), key=lambda i: (starts[i], i))
    for pos, i in enumerate(order):
        later = order[pos + 1:]
        cap = min(wants[i] - 1.0, max(0.0, left))
        must = max(0.0, left - sum(wants[j] - 1.0 for j in later))
        r = float(remaining_us[i])
        th = float(tail_weight) if (tails[i] and later) else 0.0
        tot = r + th * sum(float(remaining_us[j]) for j in later)
        frac = r / tot if tot > 0 else 1.0
        g = min(cap, max(must, frac * left))
        out[i] += g
        left -= g
    return out


@runtime_checkable
class LookupObserver(Protocol):
    """Watches the L2 lookups of an ``EventSimulator`` (e.g. ``score.vcontention.estimate_hits``
    counts each kernel's hit rate with one)."""

    def on_lookups(self, kid: int, hit_bytes: float, read_bytes: float) -> None:
        """Kernel ``kid`` (an index of the simulator's kernel table) read ``read_bytes`` bytes of
        weight and activation objects, ``hit_bytes`` of them from L2 (KV-cache streams are not
        looked up)."""
        ...


class EventQueue:
    """The event loop's clock-ordered queue (no resources; SimPy-like core).

    Events are ``(time µs, priority, sequence, lane, epoch)`` tuples in a heap; the sequence
    number makes every key unique, so ties break by priority, then push order.

    Attributes:
        heap: the events. seq: events pushed so far. now: time of the last instant (µs).
        popped: events popped so far.
    """

    __slots__ = ("heap", "seq", "now", "popped")

    def __init__(self) -> None:
        self.heap: list = []
        self.seq = 0
        self.now = 0.0
        self.popped = 0

    def push(self, t: float, prio: int, lane: "Lane", epoch: int) -> None:
        """Schedule an event at ``t`` µs with priority ``prio`` for ``lane`` (epoch: validity
        stamp of completion events, -1 for events that are always valid)."""
        self.seq += 1
        heapq.heappush(self.heap, (t, prio, self.seq, lane, epoch))


@dataclass(eq=False, slots=True)
class Job:
    """One task (a segment task, or a whole stream for ``simulate_streams``).

    Attributes:
        index: position in the global dispatch order. stage: the lane that runs it.
        region, mb: region instance and microbatch (L2 object names).
        kids: kernel ids in run order. first: index of its first kernel instance.
        succ: data successors (``Job`` objects). pending: data predecessors not yet done.
        start, end: A_i and C_i (µs).
    """

    index: int
    stage: int
    region: int
    mb: int
    kids: tuple
    first: int
    succ: tuple = ()
    pending: int = 0
    start: float = 0.0
    end: float = 0.0


class Lane:
    """One stream (lane) and the named state of the kernel it runs.

    Attributes:
        index: lane number (the ``stage`` of the jobs it runs). pool: its ``Pool``.
        queue: its jobs in dispatch order; head: index of the next one to run.
        job, pos: the running job (None when idle) and the position of its running kernel.
        kid: the running kernel's id. phase: 0 idle, 1 launching, 2 active.
        works: ``KernelWork`` of each kernel id on the pool (None for kernels it never runs).
        work: the running kernel's ``KernelWork``.
        F, D, N: FLOP, data bytes and network bytes left. setup: collective setup pending.
        want, pow0: the running kernel's SMs p_u and compute power pi_u alone on the pool.
        sms, power, rate_full, window, phi, peak, reread, comm_on: inputs of the rate model
            (``BoundModel.rates_of``; sms and power are the shared values when the pool is
            split); rc, rd, rh, rn: its outputs (FLOP/s, bytes/s, HBM bytes/s, network bytes/s);
            oc, od, on: the rates its pending completion event was computed from.
        pc, pd, pn: predicted completion times of the three counters at the current rates (µs).
        epoch: stamp of the valid completion event; live: such an event is pending.
    """

    __slots__ = ("index", "pool", "queue", "head", "job", "pos", "kid", "phase", "works",
                 "work", "F", "D", "N", "setup", "want", "pow0", "sms", "power", "rate_full",
                 "window", "phi", "peak", "reread", "comm_on", "rc", "rd", "rh", "rn", "oc",
                 "od", "on", "pc", "pd", "pn", "epoch", "live")

    def __init__(self, index: int, pool: "Pool", nkernels: int) -> None:
        self.index, self.pool = index, pool
        self.queue: list[Job] = []
        self.head = 0
        self.job: Job | None = None
        self.pos = self.kid = self.phase = 0
        self.works: list[KernelWork | None] = [None] * nkernels
        self.work: KernelWork | None = None
        self.F = self.D = self.N = 0.0
        self.setup = self.comm_on = self.live = False
        self.want = self.pow0 = self.sms = self.power = self.rate_full = self.window = 0.0
        self.phi = self.peak = self.reread = 0.0
        self.rc = self.rd = self.rh = self.rn = 0.0
        self.oc = self.od = self.on = 0.0
        self.pc = self.pd = self.pn = _INF
        self.epoch = 0

    def remaining_us(self, launch_us: float) -> float:
        """The running kernel's work left, as µs alone on the pool (0 unless active): the
        largest fraction left of its FLOP, data and network counters times its active time
        alone, ``static_us - launch_us - fixed_us`` (>= 0). ``launch_us``: the launch overhead
        included in ``KernelWork.static_us`` (``Hardware.launch_us``). The ``share_pool_tail``
        input."""
        w = self.work
        if w is None or self.phase != ACTIVE:
            return 0.0
        s = w.scale
        left = 0.0
        for x, x0 in ((self.F, w.flops), (self.D, w.obj_bytes + w.extra_hbm_bytes),
                      (self.N, w.comm_bytes)):
            if x0 > 0 and x > 0:
                left = max(left, x / (x0 * s))
        return min(1.0, left) * max(0.0, w.static_us - launch_us - w.fixed_us)


class Pool:
    """A pool of SMs (a green context) and the lanes that share it.

    Attributes:
        index: pool id. sms: its SMs. lanes: its ``Lane`` objects (lane order).
    """

    __slots__ = ("index", "sms", "lanes")

    def __init__(self, index: int, sms: int) -> None:
        self.index, self.sms = index, sms
        self.lanes: list[Lane] = []


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
        forwarded: ``(q, k, period µs)`` when the run skipped k regions from the start of
            region q (``sim.periodic``), else None.
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
    forwarded: tuple | None = None

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


def result_of(sim) -> SimResult:
    """The ``SimResult`` of a finished ``eventsim.EventSimulator`` ``sim`` (its jobs, kernel
    instance times, utilisation samples, byte counters and L2 table)."""
    jobs = sim.jobs
    nj = len(jobs)
    ninst = sim.ninst
    info = np.fromiter(chain.from_iterable((j.stage, j.region, j.mb, len(j.kids))
                                           for j in jobs), np.int64, 4 * nj).reshape(nj, 4)
    ktask = np.repeat(np.arange(nj, dtype=np.int64), info[:, 3])
    kidx = np.fromiter(chain.from_iterable(j.kids for j in jobs), np.int64, ninst)
    kst, kl, km = info[ktask, 0], info[ktask, 1], info[ktask, 2]
    ks = np.array(sim.inst_start)
    ke = np.array(sim.inst_end)
    A = np.fromiter((j.start for j in jobs), float, nj)
    C = np.fromiter((j.end for j in jobs), float, nj)
    T = float(C.max()) if nj else 0.0
    cat = {c: 0.0 for c in CATEGORIES}
    dur = ke - ks
    cats = [sim.kernels[k].category for k in range(len(sim.kernels))]
    sums = np.bincount(kidx, weights=dur, minlength=len(sim.kernels)) if ninst else []
    for k, v in enumerate(sums):
        cat[cats[k]] = cat.get(cats[k], 0.0) + float(v)
    u = np.frombuffer(sim.util, dtype=float).reshape(-1, 4)
    ut = u[:, 0].copy()
    uh = u[:, 1] / sim.hw.hbm_peak_Bps
    us = u[:, 2] / sim.hw.num_sms
    ucap = u[:, 3].copy()
    if ut.size and T > 0:
        w = np.diff(np.append(ut, max(T, ut[-1])))
        mh = float((uh * w).sum() / T)
        ms = float((us * w).sum() / T)
    else:
        mh = ms = 0.0
    hr = sim.bytes_hit / sim.bytes_obj_read if sim.bytes_obj_read > 0 else 0.0
    return SimResult(makespan=T, task_start=A, task_end=C, tau=C - A, kernel_task=ktask,
                     kernel_index=kidx, kernel_stage=kst, kernel_region=kl, kernel_mb=km,
                     kernel_start=ks, kernel_end=ke, kernels=sim.kernels,
                     stage_sms=sim.stage_sms, category_time=cat, l2_hit_rate=hr,
                     bytes_hbm=sim.bytes_hbm, bytes_l2_hit=sim.bytes_hit,
                     bytes_reread=sim.bytes_reread, bytes_objects=sim.bytes_objects,
                     l2_max_occupancy=sim.cache.max_occupancy, util_t=ut, util_hbm=uh,
                     util_sm=us, hbm_cap_Bps=ucap, mean_hbm_util=mh, mean_sm_util=ms,
                     events=sim.events, steps=sim.steps, hw_name=sim.hw.name,
                     forwarded=sim.forward.jumped if sim.forward is not None else None)
