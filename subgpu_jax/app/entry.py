"""The ``subgpu`` console script's entry point: Ctrl-C is handled from its first instruction.

Importing this module installs a SIGINT handler before anything else of the program is imported
(``subgpu_jax`` and ``subgpu_jax.app`` import nothing at package level; numpy, JAX and the
command line come after): a Ctrl-C while the program starts exits with code 130 and one line,
``interrupted``, never a ``KeyboardInterrupt`` traceback. ``main`` then runs the command line
(:func:`subgpu_jax.app.cli.main`), which installs its own handler
(:mod:`subgpu_jax.app.interrupt`) and restores this one when it returns.

Only the interpreter's own start (before it runs this module) is outside the handler: a
SIGINT then ends the process by the signal, which the shell also reports as 130. A process
started with SIGINT ignored (a shell's background job, a search worker) is left ignoring it.
"""

import os
import signal


def _stop(signum, frame):  # noqa: ARG001 - signal API
    """Exit 130 at once with one line (safe in a signal handler: ``os.write``, ``os._exit``)."""
    try:
        os.write(2, b"\ninterrupted\n")
    finally:
        os._exit(130)


# a process started with SIGINT ignored keeps ignoring it (POSIX: a shell's background job; a
# ``subgpu search --workers`` worker, which imports this module as its main module)
if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
    signal.signal(signal.SIGINT, _stop)


def main() -> int:
    """Run ``subgpu`` (``sys.argv``); returns its exit code."""
    from subgpu_jax.app.cli import main as cli_main

    return cli_main()
