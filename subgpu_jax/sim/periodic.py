"""The periodic fast-forward of the event simulator (issue 42: fewer and smaller simulator calls).

A forward pass chains L identical regions (layers, or pairs of layers for GPT-OSS), and the
task DAG and every lane's queue repeat from region to region. Once the pipeline has filled, the
simulation often repeats too: the state at the moment lane 0 starts region q + 1 is the state at
the start of region q moved on by one region (or by a few: ``MAX_PERIOD``) and by a period of
Delta µs
(``experiments/eventsim_periodicity.py``: 59 of the main job's 72 configurations from the third
region on; the others oscillate or never settle). ``RegionForward`` watches for that moment and
then moves the whole state on by k regions and k x Delta µs in one step, leaving the last regions
and the drain to the simulation as before.

The state compared at two consecutive region starts (every field that decides the future):
every lane (its running job and next job relative to the region, kernel position, phase,
counters left, rates and completion predictions relative to the clock, launch time of its running
kernel), the valid pending events (relative times, priority, lane, in queue order), the data
predecessors still pending of every job not yet started (relative to the region) and the L2 table
(keys relative to the region, in recency order, their bytes, the occupancy). Discrete parts must
be equal and numbers equal to ``tol`` (relative, at least 1 unit absolute: 1e-9 by default, far
below any modelling error); otherwise nothing is skipped and the simulation runs as it did.

Ties: two lanes' events closer than ``TIE_TOL`` (a near tie), or, with static durations
(``ContentionModel.off()``, whose sums tie exactly), at the same instant, are ordered by float
rounding, and the full simulation may order them differently regions later (their L2 lookups
then swap). A period in which such a tie happened (counted by the event loop in
``near_ties``), or a snapshot with two pending events in a near tie, is never a reason to jump.

What a jump writes: the clock, the pending events and every lane's predictions move on by
k x Delta; each lane runs the job k regions on; every job it passes is done, with its task and
kernel times those of the same job one region earlier plus Delta (so the ``SimResult`` arrays
are complete); the pending-predecessor counts and the L2 table are those of the snapshot moved by
k regions; byte and event counters grow by k times their growth over the period. The makespan
then differs from the full simulation's by float rounding (``tests/sim/test_periodic.py`` checks
1e-9 relative on every preset, both SM modes, both link settings, and the tie cases).

Used by ``EventSimulator.run`` when asked (``forward=True``) and there is no utilisation series
(it would need the skipped regions' samples). A lookup observer (``simstate.LookupObserver``)
must then have ``counts()`` and ``set_counts(counts)`` (a tuple of numbers or arrays): its
counts grow by k periods' growth, as the simulator's byte counters.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

__all__ = ["RegionForward", "FORWARD_TOL", "MAX_PERIOD", "TIE_TOL"]

#: Relative tolerance of the state comparison (1 unit absolute at least: bytes, FLOPs, µs).
FORWARD_TOL: float = 1e-9
#: Two instants closer than this (relative to the clock, µs) are a near tie: which comes first
#: is float rounding, and a period in which one happened is never skipped (its repetition would
#: fix an order the full simulation may flip later: found with contention off, where the L2
#: lookups of two lanes' kernels 1e-13 µs apart swapped order regions later).
TIE_TOL: float = 1e-9
#: The longest period looked for, in regions (passes of 3 stages were seen to repeat every 1, 2
#: or 3 regions: experiments/eventsim_periodicity.py and tests/sim/test_periodic.py).
MAX_PERIOD: int = 4

#: The simulator's counters that grow with the regions simulated (moved on by k periods).
#: (``events`` and ``steps`` count the work simulated: they are not moved on.)
_COUNTERS = ("bytes_hbm", "bytes_hit", "bytes_obj_read", "bytes_reread", "bytes_objects")
_CACHE_COUNTERS = ("hit_bytes", "miss_bytes", "evictions")
#: Event priority of a completion (``eventsim._DONE``): stale when its epoch is not the lane's.
_DONE = 0


@dataclass
class _Snap:
    q: int
    t: float
    disc: tuple
    vals: list
    counts: tuple
    ties: int          # ties the event loop counted before this snapshot
    fragile: bool      # two pending events in a near tie: never a state to jump from or to


class RegionForward:
    """Watches an ``EventSimulator`` for a repeating region and moves it on (see the module).

    Args:
        sim: the simulator, not yet run (``EventSimulator``: its ``jobs``, ``lanes``,
            ``events_q``, ``cache``, ``inst_start``/``inst_end`` and counters are read and
            written).
        tol: relative tolerance of the state comparison.

    Attributes:
        active: False once it has jumped or given up (then it costs nothing).
        jumped: (q, k, Delta µs) of the jump made, or None.
    """

    def __init__(self, sim, tol: float = FORWARD_TOL) -> None:
        self.sim, self.tol = sim, float(tol)
        jobs = sim.jobs
        self.jumped = None
        self.L = 1 + max((j.region for j in jobs), default=-1)
        self.by_key = {(j.stage, j.region, j.mb, j.kids): j for j in jobs}
        self.lane_pos = {}
        for u in sim.lanes:
            for i, j in enumerate(u.queue):
                self.lane_pos[j.index] = i
        self.init_pending = [j.pending for j in jobs]
        self.markers = {}            # lane 0's first job of each region
        first: dict[int, int] = {}
        for j in sim.lanes[0].queue if sim.lanes else ():
            if j.region not in first:
                first[j.region] = j.index
                self.markers[j.index] = j.region
        # the regions must be told apart by key and lane 0 must see every region start
        self.active = (len(self.by_key) == len(jobs) and self.L >= 6
                       and len(self.markers) == self.L)
        self.near_ties = 0   # instants in a tie (``instant``)
        self.last = sim.t    # the last instant with a valid event
        self.seen = sim.lanes[0].job if sim.lanes else None   # lane 0's job at that instant
        self.prev: list[_Snap] = []   # the last MAX_PERIOD region starts' states, latest first

    # ------------------------------------------------------------------ watching
    def instant(self, t: float, tied: bool, job) -> None:
        """The event loop processed an instant at ``t`` µs (``tied``: events of several lanes
        fell on it, with static durations); ``job``: lane 0's job after it. Counts a tie (that
        one, or an instant within ``TIE_TOL`` of the previous one) and calls ``at`` when lane 0
        has moved on."""
        if tied or 0.0 < t - self.last <= TIE_TOL * (t if t > 1.0 else 1.0):
            self.near_ties += 1
        self.last = t
        if job is not self.seen:
            self.seen = job
            self.at(job)

    def at(self, job) -> None:
        """Lane 0 has just started ``job`` (or gone idle, ``None``); at a region start, compare
        the state with the previous region start's and jump when they agree."""
        q = self.markers.get(job.index) if job is not None else None
        if q is None:
            return
        if q >= self.L - 4:          # too late to skip anything worth it
            self.active = False
            return
        snap = self.snapshot(q)
        for p in self.prev:                    # a period of one region, then two, ...
            per = q - p.q
            if (not (p.fragile or snap.fragile) and p.ties == snap.ties and p.disc == snap.disc
                    and self._close(p.vals, snap.vals)):
                delta = snap.t - p.t
                k = per * (((self.L - 2) - q) // per)
                if delta > 0 and k >= 2 * per and self.jump(q, k, per, delta, p.counts,
                                                            snap.counts):
                    self.active = False
                    self.jumped = (q, k, delta / per)
                    return
        self.prev = [snap] + [p for p in self.prev if p.q > q - MAX_PERIOD]

    def _close(self, a: list, b: list) -> bool:
        tol = self.tol
        for x, y in zip(a, b):
            if x != y and not abs(x - y) <= tol * max(abs(x), abs(y), 1.0):
                return False
        return len(a) == len(b)

    def _counts(self) -> tuple:
        s = self.sim
        obs = s.observer.counts() if s.observer is not None else ()
        return (tuple(getattr(s, c) for c in _COUNTERS)
                + tuple(getattr(s.cache, c) for c in _CACHE_COUNTERS) + (obs,))

    def _rel(self, j, q: int):
        return None if j is None else (j.stage, j.region - q, j.mb, j.kids)

    def snapshot(self, q: int) -> _Snap:
        """The state at the start of region ``q`` relative to it (see the module)."""
        s = self.sim
        t = s.t
        disc, vals = [], []
        ist = s.inst_start
        for u in s.lanes:
            j = u.job
            nxt = u.queue[u.head] if u.head < len(u.queue) else None
            disc.append((self._rel(j, q), self._rel(nxt, q), u.pos, u.kid, u.phase, u.setup,
                         u.comm_on, u.live))
            vals.extend((u.F, u.D, u.N, u.want, u.pow0, u.sms, u.power, u.rate_full, u.window,
                         u.phi, u.peak, u.reread, u.rc, u.rd, u.rh, u.rn, u.oc, u.od, u.on,
                         u.pc - t, u.pd - t, u.pn - t))
            if j is not None:
                vals.extend((j.start - t, ist[j.first + u.pos] - t))
        ev = sorted(e for e in s.events_q.heap if e[1] != _DONE or e[4] == e[3].epoch)
        fragile, prev_te = False, None
        for te, prio, _, u, _ in ev:
            disc.append((prio, u.index))
            vals.append(te - t)
            if prev_te is not None and 0.0 < te - prev_te <= TIE_TOL * max(te, 1.0):
                fragile = True     # a near tie still pending
            prev_te = te
        init = self.init_pending
        for u in s.lanes:
            start = u.head + (1 if u.job is not None else 0)
            for j in u.queue[start:]:
                if j.pending != init[j.index]:
                    disc.append((self._rel(j, q), j.pending))
        for key, b in s.cache.entries():
            disc.append((_shift_key(key, -q), b))
        vals.append(s.cache.occupancy)
        return _Snap(q, t, tuple(disc), vals, self._counts(), self.near_ties, fragile)

    # ------------------------------------------------------------------ moving on
    def _later(self, j, n: int):
        """The job ``n`` regions after ``j`` (same lane, microbatch and kernels), or None."""
        return self.by_key.get((j.stage, j.region + n, j.mb, j.kids))

    def _plan(self, k: int, per: int):
        """What a jump by ``k`` regions does, before anything changes: ``(heads, moved,
        skipped)``, with ``heads`` (lane, its head job, that job k regions on) per lane,
        ``moved`` {job index: pending count it takes over} and ``skipped`` the jobs passed (in
        region order, each with its job a period earlier done or passed before it); None when
        a lane has finished, a job k regions on is missing, or a skipped job has no such job
        a period earlier."""
        s, later = self.sim, self._later
        heads, waiting = [], []
        for u in s.lanes:
            if u.head >= len(u.queue):
                return None
            x = u.queue[u.head]
            y = later(x, k)
            if y is None or y.stage != x.stage:
                return None
            heads.append((u, x, y))
            start = u.head + (1 if u.job is not None else 0)
            waiting.extend(u.queue[start:])
        moved = {}
        for x in waiting:
            y = later(x, k)
            if y is not None:
                moved[y.index] = x.pending
        skipped = []
        for u, x, y in heads:
            skipped.extend(u.queue[u.head:self.lane_pos[y.index]])
        skipped.sort(key=lambda j: (j.region, j.index))
        lanes, pos = s.lanes, self.lane_pos
        filled = set()
        for y in skipped:    # each from the same job a period earlier, done or filled first
            p = later(y, -per)
            if p is None or not (p.index in filled or pos[p.index] < lanes[p.stage].head):
                return None
            filled.add(y.index)
        return heads, moved, skipped

    def jump(self, q: int, k: int, per: int, delta: float, before: tuple, now: tuple) -> bool:
        """Move the simulator on by ``k`` regions (a multiple of the period ``per`` regions)
        and ``k / per * delta`` µs from the start of region ``q`` (``delta``: µs a period;
        ``before``, ``now``: the counters a period ago and now). Returns False (and changes
        nothing) when a job ``k`` regions on, or the job a period before a skipped one, is
        missing."""
        s = self.sim
        plan = self._plan(k, per)
        if plan is None:
            return False
        heads, moved, skipped = plan
        later = self._later
        n_per = k // per
        D = n_per * delta
        ist, ien = s.inst_start, s.inst_end
        for u, x, y in heads:
            if u.job is not None:              # the running job, k regions on
                y.start = x.start + D
                for i in range(u.pos + 1):
                    ist[y.first + i] = ist[x.first + i] + D
                for i in range(u.pos):
                    ien[y.first + i] = ien[x.first + i] + D
        for y in skipped:
            p = later(y, -per)
            y.start, y.end = p.start + delta, p.end + delta
            for i in range(len(y.kids)):
                ist[y.first + i] = ist[p.first + i] + delta
                ien[y.first + i] = ien[p.first + i] + delta
            y.pending = 0
        for u, x, y in heads:
            u.head = self.lane_pos[y.index]
            if u.job is not None:
                u.job = y
            u.pc += D
            u.pd += D
            u.pn += D
        jobs = s.jobs
        for i, n in moved.items():
            jobs[i].pending = n
        s.jobs_done += len(skipped)
        s.t += D
        heap = s.events_q.heap               # in place: the event loop holds this list
        heap[:] = [(te + D, prio, seq, u, ep) for te, prio, seq, u, ep in heap]
        heapq.heapify(heap)
        s.cache.rename(lambda key: _shift_key(key, k))
        n = len(_COUNTERS)
        for i, c in enumerate(_COUNTERS):
            v = now[i] + n_per * (now[i] - before[i])
            setattr(s, c, int(v) if isinstance(now[i], int) else v)
        for i, c in enumerate(_CACHE_COUNTERS):
            v = now[n + i] + n_per * (now[n + i] - before[n + i])
            setattr(s.cache, c, int(v) if isinstance(now[n + i], int) else v)
        if s.observer is not None:
            s.observer.set_counts(tuple(a + n_per * (a - b) for a, b in zip(now[-1], before[-1])))
        return True


def _shift_key(key, n: int):
    """An L2 key of region l as that of region l + n (``("w", l, name)`` or
    ``("a", l, mb, name)``); other keys unchanged."""
    if isinstance(key, tuple) and len(key) >= 3 and key[0] in ("w", "a"):
        return (key[0], key[1] + n) + key[2:]
    return key

