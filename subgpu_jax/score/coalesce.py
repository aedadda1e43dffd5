"""Exact steps of several grid points in one batched call (issue 42 item 2).

A sweep that scores several grid points at once in one process (``app.sweep.run_sweep`` with
``in_flight`` > 1: one thread per point) hands them a ``CoalescingTimer``: each point's exact
steps ask it for makespans as they would ask the timer, and it holds every request until all
the points in flight are waiting on it, then times them all in ONE call of the wrapped timer's
``time_many`` (``score.timer.BatchedEventTimer``: one lockstep batch over every structure
asked for) and hands each its rows. The makespans are the wrapped timer's, row for row (its
rows do not depend on the other rows of a batch); only the batches grow. (A configuration that
a point asks for alone is timed by the event simulator when not coalesced and by the loop in a
shared batch: equal to float rounding.)

Requests from a thread that is not a participant (``participant()``) go straight to the wrapped
timer. A scheduler ``enroll``s each participant before starting its thread, so the first to ask
waits for those not yet started. ``cancel()`` (Ctrl-C, or a point that failed) makes every
waiting and later request raise ``Cancelled``, so the threads in flight end at once.

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
        timer: a timer with ``time_many`` (``score.timer.BatchedEventTimer``).

    Attributes:
        timer: the wrapped timer. coalesces: True (``search.problem.TimerExact`` sends single
            configurations through ``time_many`` too). flushes: batched calls made; rows: rows
            timed through them; largest: the most rows of one call.

    Raises:
        ValueError: a timer without ``time_many``.
    """

    def __init__(self, timer) -> None:
        if getattr(timer, "time_many", None) is None:
            raise ValueError(f"the {getattr(timer, 'name', timer)!r} timer cannot batch "
                             "several structures (no time_many); use event-batched")
        self.timer = timer
        self._cv = threading.Condition()
        self._active = 0
        self._waiting: list[_Request] = []
        self._local = threading.local()
        self._cancelled = False
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
            with self._cv:
                self._active -= 1
                self._flush_if_all_wait()

    def cancel(self) -> None:
        """Every waiting and later request of a participant raises ``Cancelled``."""
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
            self._flush_if_all_wait()
            while not req.done:
                self._cv.wait()
        if req.error is not None:
            raise req.error
        return req.result

    def time_allocs(self, graph: OpGraph, cfg: Config, allocs: np.ndarray) -> np.ndarray:
        return self.time_many([(graph, cfg, allocs)])[0]

    def _flush_if_all_wait(self) -> None:
        """With the lock held: when every participant waits, time every waiting request in one
        call (the lock stays held: the others wait anyway) and wake them."""
        if not self._waiting or len(self._waiting) < self._active:
            return
        batch, self._waiting = self._waiting, []
        items = [it for r in batch for it in r.items]
        try:
            vals = self.timer.time_many(items)
        except BaseException as e:      # every request of the batch sees the error
            for r in batch:
                r.error, r.done = e, True
        else:
            k = 0
            for r in batch:
                r.result, r.done = vals[k:k + len(r.items)], True
                k += len(r.items)
            n = sum(len(np.atleast_2d(a)) for _, _, a in items)
            self.flushes += 1
            self.rows += n
            self.largest = max(self.largest, n)
        self._cv.notify_all()
