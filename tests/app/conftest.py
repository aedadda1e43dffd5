"""Fixtures of the ``subgpu search --workers`` process tests (test_search_workers.py,
test_workers_breaker.py): a search run as a child process, waited on until it stores its first
grid point, and its worker processes read from /proc (Linux)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

#: The console script's entry, run by this interpreter (the package need not be installed).
SUBGPU = [sys.executable, "-c", "import sys; from subgpu_jax.app.entry import main; "
          "sys.exit(main())"]


def _start(args: list[str], **popen) -> subprocess.Popen:
    """``subgpu`` with ``args`` as a child process (``popen``: ``subprocess.Popen`` options)."""
    return subprocess.Popen(SUBGPU + list(args), **popen)


def _wait_first_point(p: subprocess.Popen, out, timeout_s: float = 120.0) -> None:
    """Wait until the search ``p`` has stored a grid point in ``out`` (or ended, or timed out)."""
    recs, t0 = out / "records.jsonl", time.monotonic()
    while p.poll() is None and time.monotonic() < t0 + timeout_s:
        if recs.exists() and "_done" in recs.read_text():
            return
        time.sleep(0.05)


def _children(pid: int) -> list[int]:
    """The PIDs of ``pid``'s child processes (empty once it ended)."""
    f = f"/proc/{pid}/task/{pid}/children"
    return [int(x) for x in open(f).read().split()] if os.path.exists(f) else []


def _alive(pid: int) -> bool:
    """The process runs (it exists and is not a zombie awaiting its parent)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            return "State:\tZ" not in fh.read()
    except OSError:
        return False


def _none_left(pids: list[int], timeout_s: float = 10.0) -> bool:
    """Whether every process of ``pids`` has ended within ``timeout_s`` seconds."""
    t0 = time.monotonic()
    while any(map(_alive, pids)) and time.monotonic() < t0 + timeout_s:
        time.sleep(0.05)
    return not any(map(_alive, pids))


@pytest.fixture
def sweep_procs():
    """``start(args, **popen)``, ``wait_first_point(p, out)``, ``children(pid)``,
    ``alive(pid)``, ``none_left(pids)`` (see the functions above)."""
    return SimpleNamespace(start=_start, wait_first_point=_wait_first_point,
                           children=_children, alive=_alive, none_left=_none_left)
