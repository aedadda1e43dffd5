"""Grid points of one sweep scored by N local CPU worker processes, stored as they finish.

``run_sweep_pool`` is the multi-process counterpart of ``sweep.run_sweep`` for one machine with
many CPU cores (``subgpu search --workers``, the frontier studies'
``experiments/frontier_study.py --workers N``): the parent holds the results folder's
``SweepStore`` and appends every grid point the moment a worker returns it (the store's write is
fsync-ed), so a kill of the whole process group at any moment loses at most the points in
flight. Workers are ``spawn``-ed processes (a fresh interpreter: no JAX state is forked) that
each build one scorer (``make_scorer()``, a ``searchjob.ScorerSpec`` making a
``searchjob.PointScorer``) and score the grid points the parent hands them one at a time
(``Scheduler``: in the given order, but a worker takes next a point of a *group* it already
scored, e.g. the same stages and microbatches, whose compiled programs it holds, so each program
is compiled by one process, not by all); JAX is forced onto the CPU with one thread per process
(``WORKER_ENV``), so N workers use N cores.
A point's records do not depend on which worker scored it or on what that worker scored before
(the scorer's caches are keyed by deployment and configuration; tested against the
single-process sweep in tests/search/test_frontier_pool.py and tests/app/test_search_workers.py).

A ``deadline`` (``time.monotonic()`` seconds) stops the sweep cleanly: no point starts after
it, the workers still running are terminated (their points are lost, not half-written) and
the call returns with ``stopped`` set; the caller then writes its outputs. Ctrl-C does the
same (``stopped = "interrupt"``): the workers ignore SIGINT, the parent turns it into a flag
(``app.interrupt.sigint_as_flag``) checked between messages; a second Ctrl-C leaves at once
with exit code 130 (every finished point is already stored).

Engine choice: ``multiprocessing`` with two queues rather than ``concurrent.futures`` because
terminating running workers at the deadline (``Process.terminate``) is public API there.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import queue
import re
import signal
import threading
import time
import traceback
from typing import Callable, Hashable, Sequence

from subgpu_jax.app.platform import JAX_PLATFORM_ENV, SCORER_PLATFORM

__all__ = ["WORKER_ENV", "WORKER_NICE", "MAX_AUTO_WORKERS", "MAX_WORKERS", "POINTS_PER_WORKER",
           "WorkerError", "WorkerPool", "Scheduler", "compile_cache_env", "run_sweep_pool",
           "search_workers", "worker_main"]

#: Environment of every worker process: JAX on the CPU, XLA's CPU client and the BLAS/OpenMP
#: libraries on one thread each (N workers then load N cores, not N x cores). XLA flag names
#: from XLA's ``xla/debug_options_flags.cc``.
WORKER_ENV = {"JAX_PLATFORMS": "cpu",
              "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
              "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


#: The workers' niceness increment: below the parent and the engine's one compilation
#: (``sim.batchednb.compile_ahead``), which then finishes before the workers need it instead of
#: sharing the cores three ways (the main job's first run on 2 cores: 16.2-16.9 s of search
#: with the workers at the parent's priority, 14.8-15.0 s at +5; 2026-12-07, not in a digest).
WORKER_NICE = 5


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies (``prctl(PR_SET_PDEATHSIG)``,
    PR_SET_PDEATHSIG = 1 in <linux/prctl.h>), so that killing the sweep's process (``timeout``,
    ``kill -9``) leaves no worker running; a no-op where prctl is absent."""
    import ctypes
    import ctypes.util
    import signal

    try:
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl(
            1, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        pass


class WorkerError(RuntimeError):
    """A sweep worker failed (not on bad input: that is re-raised as the ``ValueError`` the
    single-process sweep gives) or died. The message is one line naming the grid point;
    ``worker_traceback`` holds the worker's traceback text ("" when it died)."""

    def __init__(self, message: str, worker_traceback: str = "") -> None:
        super().__init__(message)
        self.worker_traceback = worker_traceback


class Scheduler:
    """Which grid point a free worker scores next (the parent's side of ``run_sweep_pool``).

    Points start in the given order (the caller's: longest first in ``subgpu search``), except
    that a worker prefers a point of a group it has already scored: the vectorised scorer's
    programs are compiled per task-DAG structure (stages, microbatches, policy, streams and the
    deployment's shape, not its batch), 0.7-1.5 s each on a CPU, so a structure scored by one
    worker is compiled once instead of once per worker. A worker with no such point left takes
    the first point of a group no other worker holds; failing that, the first point left.
    Which worker scores a point never changes its records (the scorer's caches are keyed by
    deployment and configuration), only the time.

    Args:
        points: the points to score, in start order.
        group: ``point -> hashable`` group key, or None (every point its own group: plain
            first-come order, as one shared queue).

    Example: two workers, groups ``aabb``: worker 0 takes a1, worker 1 takes b1 (a is held),
    then each takes the second point of its own group.
    """

    def __init__(self, points: Sequence, group: Callable[[object], Hashable] | None = None
                 ) -> None:
        self.left = list(range(len(points)))
        self.keys = [group(p) if group is not None else ("point", i)
                     for i, p in enumerate(points)]
        self.held: dict[int, set] = {}

    def __len__(self) -> int:
        return len(self.left)

    def next_for(self, worker: int) -> int | None:
        """Index of the point ``worker`` scores next (removed from the points left), or None
        when none is left."""
        if not self.left:
            return None
        mine = self.held.setdefault(worker, set())
        others = set().union(*(h for w, h in self.held.items() if w != worker))
        pick = next((i for i in self.left if self.keys[i] in mine), None)
        if pick is None:
            pick = next((i for i in self.left if self.keys[i] not in others), self.left[0])
        self.left.remove(pick)
        mine.add(self.keys[pick])
        return pick


def worker_main(wid: int, parent: int, make_scorer: Callable[[], Callable] | None, tasks,
                results, prepare: Callable[[], None] | None = None) -> None:
    """The worker process's entry (public for tests): build the scorer (``make_scorer()``,
    e.g. a ``searchjob.ScorerSpec``), then score ``(index, GridPoint)`` items of ``tasks``
    until a None; report ``("start", wid, i)``, then ``("done", wid, i, records, cpu_s,
    wall_s)`` or ``("error", wid, i, traceback text,
    the ValueError or None)`` on ``results`` (i = -1: building the scorer failed). ``parent``:
    the parent's PID; a worker whose parent died while it started (before the death signal was
    armed) leaves at once. A worker started ahead of its sweep (``WorkerPool``) gets
    ``make_scorer`` None: it runs ``prepare()`` (its imports), then reads ``make_scorer`` as the
    first item of ``tasks`` (None: the pool closed unused, it leaves)."""
    _die_with_parent()
    os.nice(WORKER_NICE)
    if os.getppid() != parent:   # the parent is gone already: nobody reads the results
        os._exit(0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C is the parent's to handle
    try:
        if make_scorer is None:
            if prepare is not None:
                prepare()
            make_scorer = tasks.get()
            if make_scorer is None:
                return
        scorer = make_scorer()
    except BaseException as e:  # reported to the parent, which stops the sweep
        results.put(("error", wid, -1, traceback.format_exc(),
                     e if isinstance(e, ValueError) else None))
        return
    release = getattr(scorer, "release", None)
    prev = None
    while True:
        item = tasks.get()
        if item is None:
            return
        i, p = item
        results.put(("start", wid, i))
        try:
            if prev is not None and p.deploy != prev and release is not None:
                release(prev)
            prev = p.deploy
            c0, t0 = time.process_time(), time.monotonic()
            recs = scorer(p)
            results.put(("done", wid, i, recs, time.process_time() - c0, time.monotonic() - t0))
        except BaseException as e:  # reported to the parent, which stops the sweep
            results.put(("error", wid, i, traceback.format_exc(),
                         e if isinstance(e, ValueError) else None))
            return


#: Most processes ``search_workers("auto")`` starts (beyond that the per-process start-up,
#: about 3 s of imports, and the memory of one scorer each outweigh a 15-point main job).
MAX_AUTO_WORKERS = 8
#: SubGPU grid points per worker below which ``"auto"`` starts fewer workers: a point of the
#: main job takes 2-6 CPU-s (experiments/bench_sweeps.py), a worker about 3 s to start.
POINTS_PER_WORKER = 4


#: Most processes ``--workers N`` may ask for (a bound, as ``checks.LIMITS`` bounds every count:
#: at most the grid points to score are started anyway).
MAX_WORKERS = 1024


def search_workers(value, cluster: bool = False, points: int | None = None) -> int:
    """The worker count of ``subgpu search --workers``.

    Args:
        value: ``"auto"``, or an integer in 1..``MAX_WORKERS`` (an int, or its text written with
            the digits 0-9: other scripts' digits are refused, as ``checks.ascii_int`` does).
        cluster: the search runs under ``--cluster`` (one scoring process per member).
        points: SubGPU grid points to score (D > 1), for ``"auto"``; None: no limit.

    Returns:
        ``"auto"``: the cores this process may use (``os.sched_getaffinity``, else
        ``os.cpu_count()``), at most ``MAX_AUTO_WORKERS`` and at most one per
        ``POINTS_PER_WORKER`` SubGPU points; 1 with ``cluster`` or when ``JAX_PLATFORMS``
        names a platform other than the CPU (the workers run JAX on the CPU, so a user who
        chose another platform keeps it). Otherwise the integer.

    Raises:
        ValueError: anything else; an integer > 1 with ``cluster``, or while ``JAX_PLATFORMS``
            names another platform than the CPU (one line naming ``workers``).
    """
    plat = os.environ.get(JAX_PLATFORM_ENV)   # pin_jax_to_cpu's variable and platform
    other = plat is not None and plat.strip().lower() != SCORER_PLATFORM   # "": JAX's choice
    if isinstance(value, str) and value.strip().lower() == "auto":
        if cluster or other:
            return 1
        try:
            cores = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cores = os.cpu_count() or 1
        n = min(MAX_AUTO_WORKERS, cores)
        if points is not None:
            n = min(n, int(points) // POINTS_PER_WORKER)
        return max(1, n)
    n = None
    if isinstance(value, int) and not isinstance(value, bool):
        n = value
    elif isinstance(value, str) and re.fullmatch(r"[0-9]+", value.strip()):
        n = int(value.strip())
    if n is None or not 1 <= n <= MAX_WORKERS:
        shown = repr(value) if len(repr(value)) <= 24 else \
            f"a {len(str(value).strip())}-digit number"
        raise ValueError(f"workers must be 'auto' or an integer in 1..{MAX_WORKERS:,} "
                         f"(processes), got {shown}")
    if cluster and n > 1:
        raise ValueError("workers: with --cluster every member scores its share in one process; "
                         "leave out --workers or give 1")
    if other and n > 1:
        raise ValueError(f"workers: worker processes run JAX on the CPU, but "
                         f"JAX_PLATFORMS={plat!r} chooses another platform; give --workers 1, "
                         "or unset JAX_PLATFORMS")
    return n


def compile_cache_env(folder: str) -> dict:
    """Environment variables that make JAX keep every compiled function in ``folder`` (JAX's
    persistent compilation cache, CPU included; no minimum compile time or size), so that
    processes sharing ``folder`` compile each shape once. Measured on five GPT-OSS 20B grid
    points (event simulator; experiments/bench_compile_cache.py, docs/results.md "Speed"):
    51.8 CPU-s in a fresh process with an
    empty cache, 17.6 CPU-s (2.9x less) in a second one reading it, the same makespans. JAX
    writes an entry without a rename: a worker terminated mid-write leaves a truncated entry,
    which JAX reports as a warning and recompiles."""
    return {"JAX_COMPILATION_CACHE_DIR": folder,
            "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
            "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}


def _spawn_workers(ctx, make_scorer, tasks: list, results, compile_cache: str | None,
                   prepare: Callable[[], None] | None = None) -> list:
    """Start one ``worker_main`` process per queue of ``tasks`` (``ctx``: the ``spawn``
    context), with ``WORKER_ENV`` (and the shared compile cache's variables) in their
    environment and SIGINT ignored while they start (kept across exec, so a Ctrl-C while they
    import reaches only this process; each worker keeps ignoring it). This process's
    environment and SIGINT handler are restored. Returns the started processes."""
    env = {**WORKER_ENV, **(compile_cache_env(compile_cache) if compile_cache else {})}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # spawn-ed children copy the parent's environment at start
    procs = []
    sig = signal.signal(signal.SIGINT, signal.SIG_IGN) \
        if threading.current_thread() is threading.main_thread() else None
    try:
        for w, q in enumerate(tasks):
            pr = ctx.Process(target=worker_main,
                             args=(w, os.getpid(), make_scorer, q, results, prepare),
                             daemon=True, name=f"sweep-worker-{w}")
            pr.start()
            procs.append(pr)
    finally:
        if sig is not None:
            signal.signal(signal.SIGINT, sig)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return procs


def _end(procs: Sequence, queues: Sequence) -> None:
    """Terminate the processes still running, wait for them (at most 10 s each) and close the
    queues without waiting for their feeder threads."""
    for pr in procs:
        if pr.is_alive():
            pr.terminate()
    for pr in procs:
        pr.join(timeout=10)
    for q in queues:
        q.cancel_join_thread()
        q.close()


class WorkerPool:
    """Worker processes started before their sweep is known: each starts its interpreter and
    runs ``prepare()`` (its imports: JAX and the scorer's modules, 2-3 s of a core a process)
    while the parent still parses, imports and builds its grid (``subgpu search`` starts them
    before it imports JAX), then waits for its scorer. ``run_sweep_pool(..., pool=)`` hands
    the first workers their scorer (``make_scorer``, sent once to each) and their points, and
    ends the others. Each pool serves one sweep; ``close()`` ends whatever is left (a sweep
    that was refused, or used fewer workers).

    Args:
        workers: processes to start (>= 1).
        compile_cache: as ``run_sweep_pool``'s (JAX's persistent cache folder shared by the
            workers), or None.
        prepare: a picklable function without arguments run by each worker while it waits
            (unpickling it imports its module in the worker), or None.

    Attributes:
        procs, tasks, results: the processes, their task queues and the shared result queue.
        used: whether a sweep took it.

    Raises:
        ValueError: ``workers`` < 1.
    """

    def __init__(self, workers: int, compile_cache: str | None = None,
                 prepare: Callable[[], None] | None = None) -> None:
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be an integer >= 1 processes, got {workers!r}")
        self.ctx = mp.get_context("spawn")
        self.compile_cache = compile_cache
        self.tasks = [self.ctx.Queue() for _ in range(workers)]
        self.results = self.ctx.Queue()
        self.procs = _spawn_workers(self.ctx, None, self.tasks, self.results, compile_cache,
                                    prepare)
        self.used = False

    def __len__(self) -> int:
        return len(self.procs)

    def take(self, n: int, make_scorer: Callable[[], Callable]) -> tuple[list, list, object]:
        """The first ``n`` workers (at most all) with ``make_scorer`` sent to each; the others
        are ended. Returns ``(procs, task queues, result queue)``.

        Raises:
            ValueError: a pool taken before."""
        if self.used:
            raise ValueError("WorkerPool: each pool serves one sweep")
        self.used = True
        n = min(n, len(self.procs))
        for q in self.tasks[:n]:
            q.put(make_scorer)
        for q in self.tasks[n:]:
            q.put(None)
        return self.procs[:n], self.tasks[:n], self.results

    def close(self) -> None:
        """End every worker still running (terminated: a worker never used holds nothing, so a
        refused command leaves at once instead of waiting for its workers' imports) and close
        the queues."""
        _end(self.procs, (*self.tasks, self.results))


def run_sweep_pool(points: Sequence, make_scorer: Callable[[], Callable], store,
                   workers: int,
                   budget: int | None = None, deadline: float | None = None,
                   on_point: Callable[[object, list, float], None] | None = None,
                   poll_s: float = 0.5, compile_cache: str | None = None,
                   own_sigint: bool = True,
                   group: Callable[[object], Hashable] | None = None,
                   pool: WorkerPool | None = None) -> dict:
    """Score the grid points not yet in ``store`` with ``workers`` processes.

    Args:
        points: ``sweep.GridPoint`` list, in the order the points should start.
        make_scorer: a picklable callable without arguments that returns the scorer (a
            callable ``GridPoint -> records``, with an optional ``release(deployment)``), sent
            to every worker and called there once (``searchjob.ScorerSpec``: the workload, the
            GPU setup, the timer's registry name and the strategies).
        store: the open ``SweepStore`` (this process appends to it).
        workers: processes (>= 1; more than the points to score are not started).
        budget: at most this many grid points in this call (>= 1) or None.
        deadline: ``time.monotonic()`` value after which no point starts and running ones are
            terminated; None for no limit.
        on_point: ``on_point(point, records, cpu_seconds)`` after each stored point (the
            caller's digest; the store is already written).
        poll_s: seconds between checks of the deadline and of the workers' health.
        compile_cache: a folder the workers share as JAX's persistent compilation cache
            (``compile_cache_env``), or None (each worker compiles every shape itself).
        own_sigint: install this call's own Ctrl-C handler (``interrupt.sigint_as_flag``);
            False inside a caller's cooperative handler (``subgpu search``: its stop message
            stays, and a Ctrl-C that came before this call stops it at once).
        group: ``point -> hashable``: points of one group go to the worker that scored the
            group before where it can (``Scheduler``; e.g. ``searchrun.structure_key``, points
            sharing compiled programs); None: the given order only.
        pool: workers started ahead (``WorkerPool``, not used before): its first
            ``min(workers, points, len(pool))`` workers score the points (``compile_cache`` is
            then the pool's own); None: ``workers`` processes are started here.

    Returns:
        ``{"evaluated": n, "again": n, "skipped": n, "remaining": n, "seconds": wall s,
        "cpu_seconds": CPU-s of the workers' points, "stopped": None, "deadline" or
        "interrupt" (Ctrl-C), "lost_in_flight": points terminated at the stop}``.

    Raises:
        ValueError: ``workers`` or ``budget`` < 1.
        TypeError: ``make_scorer`` is not callable.
        ValueError: a worker's scorer refused its input (the single-process sweep's message).
        WorkerError: a worker failed otherwise (one line naming the grid point; the traceback
            in ``worker_traceback``) or died (names the point and the exit code); the points
            stored before are kept.
    """
    from subgpu_jax.app import interrupt
    from subgpu_jax.app.sweep import pending_points

    if not callable(make_scorer):
        raise TypeError(f"make_scorer must be callable, got {type(make_scorer).__name__}")
    if workers < 1:
        raise ValueError(f"workers must be >= 1 processes, got {workers}")
    todo, skipped, again = pending_points(points, store, budget)
    t0 = time.monotonic()
    out = {"evaluated": 0, "again": 0, "skipped": skipped, "cpu_seconds": 0.0,
           "stopped": None, "lost_in_flight": 0}
    if not todo or (deadline is not None and time.monotonic() >= deadline):
        out["stopped"] = "deadline" if todo else None
        out["remaining"] = sum(p.key not in store.done for p in points)
        out["seconds"] = time.monotonic() - t0
        return out
    run = _PoolRun.start(todo, again, store, out, Scheduler(todo, group), deadline, on_point,
                         min(workers, len(todo)), make_scorer, compile_cache, pool)
    with (interrupt.sigint_as_flag(_STOP_MESSAGE, cooperative=True) if own_sigint
          else contextlib.nullcontext()):
        try:
            run.loop(poll_s)
        finally:
            run.close()
    out["remaining"] = sum(p.key not in store.done for p in points)
    out["seconds"] = time.monotonic() - t0
    return out


#: What a Ctrl-C during ``run_sweep_pool`` prints (its own handler, ``own_sigint``).
_STOP_MESSAGE = ("interrupted: the finished grid points are stored; run the same command again "
                 "to continue")


class _PoolRun:
    """The parent's side of one ``run_sweep_pool`` call: it feeds each worker its next point
    (``Scheduler``), stores the records the workers send back, watches the deadline, Ctrl-C
    and the workers' health, and ends the workers. ``out`` is the call's result dict (updated
    in place); ``procs`` are set once the workers are spawned."""

    def __init__(self, todo: list, again: set, store, out: dict, sched: Scheduler,
                 tasks: list, results, deadline: float | None,
                 on_point: Callable[[object, list, float], None] | None) -> None:
        self.todo, self.again, self.store, self.out, self.sched = todo, again, store, out, sched
        self.tasks, self.results, self.deadline, self.on_point = tasks, results, deadline, on_point
        self.procs: list = []
        self.assigned: dict[int, int] = {}   # worker -> index of the point handed to it
        self.running: dict[int, int] = {}    # worker -> index of the point it has started

    @classmethod
    def start(cls, todo: list, again: set, store, out: dict, sched: Scheduler,
              deadline: float | None, on_point, n: int, make_scorer, compile_cache: str | None,
              pool: WorkerPool | None) -> "_PoolRun":
        """A run with ``n`` workers scoring: taken from ``pool`` (sent ``make_scorer``) or
        spawned here, each handed its first point. One queue per worker, fed by this process
        one point at a time (``Scheduler``), so no point starts after a stop and each worker
        keeps to the groups it has compiled."""
        if pool is not None:
            procs, tasks, results = pool.take(n, make_scorer)
            run = cls(todo, again, store, out, sched, tasks, results, deadline, on_point)
            run.procs = procs
            for w in range(len(procs)):
                run.feed(w)
            return run
        ctx = mp.get_context("spawn")
        run = cls(todo, again, store, out, sched, [ctx.Queue() for _ in range(n)], ctx.Queue(),
                  deadline, on_point)
        for w in range(n):
            run.feed(w)
        run.procs = _spawn_workers(ctx, make_scorer, run.tasks, run.results, compile_cache)
        return run

    def _past_deadline(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def feed(self, w: int) -> None:
        """Hand worker ``w`` its next point, or None (it ends) when none is left."""
        i = self.sched.next_for(w)
        if i is None:
            self.assigned.pop(w, None)
            self.tasks[w].put(None)
        else:
            self.assigned[w] = i
            self.tasks[w].put((i, self.todo[i]))

    def handle(self, msg) -> None:
        """One worker message: ``start``, ``done`` (store, feed the worker again unless the
        sweep is stopping) or ``error`` (raised: a ValueError as the single-process sweep's,
        anything else as a ``WorkerError`` naming the point)."""
        from subgpu_jax.app import interrupt

        kind, w, i = msg[0], msg[1], msg[2]
        if kind == "start":
            self.running[w] = i
        elif kind == "error":
            exc = msg[4] if len(msg) > 4 else None
            if isinstance(exc, ValueError):   # bad input: the single-process sweep's error
                raise ValueError(str(exc))
            where = f"grid point {self.todo[i].key}" if i >= 0 else "its scorer"
            last = (msg[3].strip().splitlines() or ["?"])[-1]
            raise WorkerError(f"sweep worker {w} failed on {where}: {last}", msg[3])
        else:
            self.running.pop(w, None)
            p, recs, cpu = self.todo[i], msg[3], msg[4]
            self.store.add(p.key, recs)
            if not (interrupt.requested() or self._past_deadline()):
                self.feed(w)
            out = self.out
            out["evaluated"] += 1
            out["again"] += p.key in self.again
            out["cpu_seconds"] += cpu
            if self.on_point is not None:
                self.on_point(p, recs, cpu)

    def loop(self, poll_s: float) -> None:
        """Handle messages until every point is stored, or stop at the deadline or a Ctrl-C
        (keeping the points finished before it)."""
        from subgpu_jax.app import interrupt

        out, todo = self.out, self.todo
        while out["evaluated"] < len(todo):
            why = ("deadline" if self._past_deadline()
                   else "interrupt" if interrupt.requested() else None)
            if why:
                while True:  # points finished before the stop are kept
                    try:
                        self.handle(self.results.get_nowait())
                    except queue.Empty:
                        break
                out["stopped"] = why
                out["lost_in_flight"] = len(self.running)
                return
            try:
                msg = self.results.get(timeout=poll_s)
            except queue.Empty:
                self._check_workers()
                continue
            self.handle(msg)

    def _check_workers(self) -> None:
        """No message came within a poll: handle the last one of a worker that just ended;
        raise a ``WorkerError`` for a worker that died holding a point, or when every worker
        ended with points left."""
        from subgpu_jax.app import interrupt

        procs = self.procs
        if any(not pr.is_alive() for pr in procs):
            try:   # a worker that just ended flushed its last messages first
                self.handle(self.results.get(timeout=1.0))
                return
            except queue.Empty:
                pass
        if interrupt.requested():
            return   # the loop's head stops on it
        for w, pr in enumerate(procs):
            if not pr.is_alive() and w in self.assigned:
                raise WorkerError(f"sweep worker {w} died (exit code {pr.exitcode}) while "
                                  f"scoring grid point {self.todo[self.assigned[w]].key}")
        if not any(pr.is_alive() for pr in procs):
            raise WorkerError("every sweep worker ended with grid points left "
                              f"({len(self.todo) - self.out['evaluated']} of {len(self.todo)})")

    def close(self) -> None:
        """End the workers still running and close the queues."""
        _end(self.procs, (*self.tasks, self.results))
