"""Ctrl-C (SIGINT) as a flag checked at safe points, and an exit with code 130 every time.

Python's default turns SIGINT into a ``KeyboardInterrupt`` raised wherever the main thread happens
to be: inside a callback that JAX runs from C++ (where it is swallowed, and the run goes on), or
while XLA compiles on a worker thread, when unwinding and interpreter finalisation can tear the
XLA client down under that thread (a segmentation fault). Here the handler only sets a flag:

* cooperative commands (``subgpu search``) call :func:`check` between units of work (before each
  grid point, before and after each event simulation of the exact polish); it raises
  :class:`Interrupted`, a plain exception raised from Python code, which unwinds to the CLI. A
  second Ctrl-C stops at once (``os._exit(130)``; every finished grid point is already
  fsync-ed);
* other commands stop at once on the first Ctrl-C (``os._exit(130)`` from the handler, which
  runs between bytecodes of the main thread, never inside a JAX callback).

:func:`exit_now` is also what the console script uses to leave with 130 without interpreter
finalisation.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from typing import Callable, Iterator

__all__ = ["Interrupted", "sigint_as_flag", "configure", "configure_command", "run_cli", "check",
           "requested", "exit_now", "EXIT_CODE", "set_message", "stop_message"]

#: Exit status of an interrupted command (128 + SIGINT, the shell's convention).
EXIT_CODE = 130

_state = {"flag": False, "count": 0, "cooperative": False, "message": "interrupted"}


class Interrupted(Exception):
    """Raised by :func:`check` at a safe point after Ctrl-C."""


def exit_now(message: str | None = None) -> None:
    """Write ``message`` (one line) to stderr and leave with code 130 at once: no unwinding, no
    interpreter finalisation (so no XLA teardown under a running thread). Safe inside a signal
    handler (``os.write`` on fd 2, no buffered I/O)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a broken pipe must not stop the exit
            pass
    if message:
        try:
            os.write(2, ("\n" + message + "\n").encode())
        except OSError:
            pass
    os._exit(EXIT_CODE)


def _handler(signum, frame) -> None:  # noqa: ARG001 - signal API
    _state["count"] += 1
    if not _state["cooperative"] or _state["count"] > 1:
        exit_now(_state["message"])
    _state["flag"] = True
    try:
        os.write(2, b"\ninterrupt: stopping after the current unit of work "
                    b"(Ctrl-C again to stop now)\n")
    except OSError:
        pass


def requested() -> bool:
    """True once Ctrl-C was pressed inside :func:`sigint_as_flag`."""
    return bool(_state["flag"])


def check() -> None:
    """Raise :class:`Interrupted` when Ctrl-C was pressed (call between units of work, never
    from inside a JAX callback)."""
    if _state["flag"]:
        raise Interrupted("interrupted")


def set_message(message: str) -> None:
    """Change the stop message only (e.g. once a sweep has stored its last grid point, a Ctrl-C
    no longer leaves anything to continue)."""
    _state["message"] = message


def stop_message() -> str:
    """The line printed when the command stops on Ctrl-C now."""
    return str(_state["message"])


def configure(message: str, cooperative: bool) -> None:
    """Change, inside :func:`sigint_as_flag`, the stop message and whether the command is
    cooperative (known only once the command line is parsed)."""
    _state.update(message=message, cooperative=cooperative)


@contextlib.contextmanager
def sigint_as_flag(message: str, cooperative: bool = True) -> Iterator[None]:
    """Install the SIGINT handler for the block; restores the previous handler after it.

    Args:
        message: the line printed when the process stops at once (second Ctrl-C, or the first
            one of a non-cooperative command).
        cooperative: the block calls :func:`check` often enough; False: stop at once.

    Off the main thread (where Python cannot install signal handlers) it does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.getsignal(signal.SIGINT)
    _state.update(flag=False, count=0, cooperative=cooperative, message=message)
    signal.signal(signal.SIGINT, _handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
        _state.update(flag=False, count=0)


def configure_command(cmd: str, out: str) -> str:
    """:func:`configure` for a ``subgpu`` command: ``search`` (results folder ``out``) is
    cooperative, every other command stops at once. Returns the stop message."""
    stop = (f"interrupted: the finished grid points are kept in {out}; run the same command "
            "again to continue" if cmd == "search" else "interrupted")
    configure(stop, cooperative=cmd == "search")
    return stop


def run_cli(parse_and_run: Callable[[], int], console: bool) -> int:
    """Run a command line inside :func:`sigint_as_flag` (installed before parsing, so a Ctrl-C
    at any moment of the command is handled); returns its exit code. With ``console`` (the
    console script) an exit code of 130 leaves through :func:`exit_now`: no interpreter
    finalisation while XLA threads may still run."""
    with sigint_as_flag("interrupted", cooperative=False):
        rc = parse_and_run()
        if rc == EXIT_CODE and console:
            exit_now()
    return rc
