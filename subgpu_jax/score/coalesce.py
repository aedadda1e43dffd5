"""Exact steps of several grid points in one batched call (issue 42 item 2).

A sweep that scores several grid points at once in one process (``app.sweep.run_sweep`` with
``in_flight`` > 1: one thread per point) hands them a ``CoalescingTimer``: each point's exact
steps ask it for makespans as they would ask the timer, and it holds every request until all
the points in flight are waiting on it, then times them all in ONE call of the wrapped timer's
``time_many`` (``score.timer.BatchedEventTimer``: one lockstep batch over every structure
asked for) and hands each its rows. The makespans are the wrapped timer's for the batch they
were timed in: which rows a shared batch holds decides whether a row goes to the lockstep loop
or to the event simulator (``BatchedEventTimer.min_batch``; with the JAX engine a structure the
loop refuses sends the whole batch to the event simulator), so a makespan can differ with the
number of points in flight by float rounding (4e-15 seen in the tests), and a choice only where
two candidates tie that closely.

Requests from a thread that is not a participant (``participant()``) go straight to the wrapped
timer. A scheduler ``enroll``s each participant before starting its thread, so the first to ask
waits for those not yet started. The batched call runs with the lock released. ``cancel()``
(Ctrl-C, or a point that failed) makes every waiting and later request raise ``Cancelled``, so
the threads in flight end at their next request (a running batched call completes). When a
shared call fails, each request is timed alone, so an error reaches only the point that caused
it.

Units: µs.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Sequence

import numpy as np

from subgpu_jax.model.graph import OpGraph
from subgpu_jax.space.config import Config

__all__ = ["Cancelled", "CoalescingTimer"]


class Cancelled(RuntimeError):
    """The coalescer was cancelled (``CoalescingTimer.cancel``) while a request waited."""


class _Request:
    __slots__ = ("items", "result", "error", "done")

    def __init__(self, items) -> None:
        self.items, self.result, self.error, self.done = items, None, None, False


class CoalescingTimer:
    """A timer that coalesces the ``time_many`` requests of concurrent participants (module
    docstring); every other attribute is the wrapped timer's.

    Args:
        timer: a timer whose ``time_many`` is its own (``batches_structures``: the event
            timers, ``score.timer.BatchedEventTimer``).

    Attributes:
        timer: the wrapped timer. coalesces: True (``search.problem.TimerExact`` sends single
            configurations through ``time_many`` too). flushes: batched calls made; rows: rows
            timed through them; largest: the most rows of one call.

    Raises:
        ValueError: a timer that does not batch several structures (``batches_structures``
            False: its ``time_many`` is a loop of ``time_allocs``).
    """

    def __init__(self, timer) -> None:
        if not timer.batches_structures:
            raise ValueError(f"the {timer.name!r} timer cannot batch several structures (no "
                             "time_many of its own); use event-batched")
        self.timer = timer
        self._cv = threading.Condition()
        self._active = 0
        self._waiting: list[_Request] = []
        self._local = threading.local()
        self._cancelled = False
        self._running = False       # a batch is being timed (outside the lock)
        self.flushes = self.rows = self.largest = 0
        self.coalesces = True

    def __getattr__(self, name):        # the wrapped timer's capabilities and settings
        return getattr(self.__dict__["timer"], name)

    def enroll(self) -> None:
        """Count one more participant now (the scheduler, before it starts the thread, so that
        a thread that asks first does not find itself alone); its thread then enters
        ``participant(enrolled=True)``."""
        with self._cv:
            self._active += 1

    @contextlib.contextmanager
    def participant(self, enrolled: bool = False):
        """The calling thread takes part while the block runs (one grid point): its requests
        wait for the others'. ``enrolled``: ``enroll`` already counted it."""
        if not enrolled:
            self.enroll()
        self._local.on = True
        try:
            yield self
        finally:
            self._local.on = False
            self._leave()

    def cancel(self) -> None:
        """Every waiting and later request of a participant raises ``Cancelled`` (a batch
        already running completes: a batched call cannot be stopped halfway)."""
        with self._cv:
            self._cancelled = True
            for r in self._waiting:
                r.error, r.done = Cancelled("cancelled"), True
            self._waiting = []
            self._cv.notify_all()

    def time_many(self, items: Sequence[tuple[OpGraph, Config, np.ndarray]]
                  ) -> list[np.ndarray]:
        """``timer.time_many(items)``, batched with the other participants' requests."""
        if not getattr(self._local, "on", False):
            return self.timer.time_many(items)
        req = _Request(list(items))
        with self._cv:
            if self._cancelled:
                raise Cancelled("cancelled")
            self._waiting.append(req)
            batch = self._take_if_all_wait()
        self._run(batch)
        with self._cv:
            while not req.done:
                self._cv.wait()
        if req.error is not None:
            raise req.error
        return req.result

    def time_allocs(self, graph: OpGraph, cfg: Config, allocs: np.ndarray) -> np.ndarray:
        return self.time_many([(graph, cfg, allocs)])[0]

    def _leave(self) -> None:
        with self._cv:
            self._active -= 1
            batch = self._take_if_all_wait()
        self._run(batch)

    def _take_if_all_wait(self) -> list | None:
        """With the lock held: every waiting request when every participant waits and no
        batch is running (then one is), else None."""
        if self._running or not self._waiting or len(self._waiting) < self._active:
            return None
        batch, self._waiting = self._waiting, []
        self._running = True
        return batch

    def _run(self, batch: list | None) -> None:
        """Time ``batch`` in one call of the wrapped timer with the lock released (so that
        ``cancel``, ``enroll`` and a leaving participant do not wait for it), hand each request
        its rows and wake them; then the next batch, if every participant waits again. When
        the shared call fails, each request is timed alone, so an error reaches only the
        request that caused it."""
        while batch is not None:
            items = [it for r in batch for it in r.items]
            try:
                vals = self.timer.time_many(items)
            except BaseException:       # noqa: BLE001  (attributed below, request by request)
                vals = None
            if vals is None:
                for r in batch:
                    try:
                        r.result = self.timer.time_many(r.items)
                    except BaseException as e:      # noqa: BLE001  (raised in its own thread)
                        r.error = e
            else:
                k = 0
                for r in batch:
                    r.result = vals[k:k + len(r.items)]
                    k += len(r.items)
            n = sum(len(np.atleast_2d(a)) for _, _, a in items)
            with self._cv:
                for r in batch:
                    r.done = True
                if vals is not None:
                    self.flushes += 1
                    self.rows += n
                    self.largest = max(self.largest, n)
                self._running = False
                self._cv.notify_all()
                batch = self._take_if_all_wait()
