"""``subgpu`` command line: the parser, the dispatch and ``main``. The commands of this package,
``simulate``, ``search`` and ``space``, live in ``app/commands/`` (one module each: its
sub-parser and its body); ``run``, ``calibrate`` and ``tune`` come from the ``subgpu.commands``
entry point (``hw_runtime/commands/``, ``hw_runtime/tune/``).

Every bad input ends with a one-line ``error: ...`` on stderr and exit code 2, no traceback; a
closed stdout (``subgpu ... | head``) ends quietly with exit code 141.
"""

from __future__ import annotations

import argparse
import os
import sys
from importlib.metadata import entry_points
from typing import Sequence

from subgpu_jax.app.commands.search import add_search_parser, cmd_search
from subgpu_jax.app.commands.simulate import add_simulate_parser, cmd_simulate
from subgpu_jax.app.commands.space import add_space_parser, cmd_space
from subgpu_jax.app.options import OneLineParser
from subgpu_jax.app.args import check_bounds, resolve_context, resolve_parallelism

__all__ = ["main", "build_parser"]


#: Entry-point group through which other packages add ``subgpu`` sub-commands (``hw_runtime``
#: adds ``run`` and ``calibrate``: pyproject ``[project.entry-points."subgpu.commands"]``).
COMMANDS_GROUP = "subgpu.commands"


def add_plugin_commands(sub: argparse._SubParsersAction) -> None:
    """Call every ``subgpu.commands`` entry point (``add_commands(sub)``) to add its sub-commands.

    Plugins are discovered with ``importlib.metadata.entry_points``; this package never imports
    them by name. A plugin that fails to load is reported on stderr and skipped.
    """
    seen = set()
    for ep in sorted(entry_points(group=COMMANDS_GROUP), key=lambda e: e.name):
        if ep.value in seen:  # the same plugin declared by two distributions on the path
            continue
        seen.add(ep.value)
        try:
            add = ep.load()
        except ImportError as e:  # pragma: no cover - a broken optional plugin
            print(f"subgpu: commands plugin {ep.name!r} not loaded: {e}", file=sys.stderr)
            continue
        add(sub)


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of the ``subgpu`` command (all sub-commands)."""
    p = OneLineParser(
        prog="subgpu",
        description="SubGPU pipelining of LLM decode: simulate and search configurations "
                    "(cuts, SM pools, microbatches) against the temporal baseline.")
    sub = p.add_subparsers(dest="cmd", required=True)
    add_simulate_parser(sub)
    add_search_parser(sub)
    add_plugin_commands(sub)
    add_space_parser(sub)
    return p


def _broken_pipe() -> int:
    """The reader of stdout went away (``subgpu ... | head``): stop quietly, as the shell's own
    tools do. Points stdout at /dev/null so the interpreter's final flush cannot fail again.

    Returns:
        141 (128 + SIGPIPE, the status a shell reports for a tool stopped by a closed pipe).
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # pragma: no cover - stdout without a file descriptor
        pass
    return 141


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``subgpu`` console script; returns the exit code (2 on bad input, 130
    on Ctrl-C: ``search`` stops at its next safe point, other commands at once; see
    :func:`subgpu_jax.app.interrupt.run_cli`)."""
    from subgpu_jax.app.interrupt import run_cli

    def parse_and_run() -> int:
        parser = build_parser()
        return _dispatch(parser, parser.parse_args(argv))

    return run_cli(parse_and_run, console=argv is None)


def _dispatch(parser: argparse.ArgumentParser, a) -> int:
    """Run the parsed command; bad input -> one line and 2, Ctrl-C -> one line and 130."""
    import warnings

    from subgpu_jax.app.interrupt import (EXIT_CODE, Interrupted, configure_command, requested,
                                          stop_message)
    from subgpu_jax.app.flagterms import derived_terms, in_flag_terms
    from subgpu_jax.app.platform import enable_compile_cache, pin_jax_to_cpu
    from subgpu_jax.app.pool import WorkerError

    configure_command(a.cmd, getattr(a, "out", ""))
    commands = {"simulate": cmd_simulate, "space": cmd_space, "search": cmd_search}
    run = commands.get(a.cmd) or getattr(a, "func", None)
    if run is None:  # pragma: no cover - every sub-parser has a command
        parser.error(f"unknown command {a.cmd}")

    def _one_line(message, category, filename, lineno, file=None, line=None):
        print(f"warning: {message}", file=sys.stderr)

    shown = warnings.showwarning
    warnings.showwarning = _one_line  # e.g. calibration extrapolation: one line, no source
    try:
        pin_jax_to_cpu()  # the scorers on the CPU, never beside the measured workload on a GPU
        check_bounds(a)  # every count bounded before any work (checks.LIMITS)
        if getattr(a, "chain", None) is None:
            resolve_parallelism(a)
        resolve_context(a)
        if run is not cmd_search:  # search enables it once its workers start (they import
            enable_compile_cache()  # JAX meanwhile); compiled scorers kept between runs
        rc = run(a)
        if requested():  # Ctrl-C after the last safe point: still 130
            raise Interrupted
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        return rc
    except ValueError as e:  # the model layer's field names told as the flags that set them
        print(f"error: {in_flag_terms(str(e), a.cmd, derived_terms(a))}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return _broken_pipe()
    except OSError as e:  # unwritable or unreadable paths given on the command line
        where = f" {e.filename!r}" if getattr(e, "filename", None) else ""
        print(f"error: cannot access{where}: {e.strerror or e}", file=sys.stderr)
        return 2
    except WorkerError as e:   # a worker process failed or died: one line, not its traceback
        print(f"error: {e}", file=sys.stderr)
        return 1
    except (Interrupted, KeyboardInterrupt):
        print(stop_message(), file=sys.stderr)  # the search's own once its grid is done
        return EXIT_CODE
    finally:
        warnings.showwarning = shown


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
