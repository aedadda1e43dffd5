"""The command-line frame the digest scripts share (``attention_compare.py``, ``profile_digest.py``,
``device_tests_digest.py``, ``kernel_efficiency.py``, ``tune_collect.py``): each reads device
results and writes one JSON digest to ``--out``. Bad input is one line naming the flag or file
and exit code 2 (the project's rule for every command), never a traceback. Not a script."""

from __future__ import annotations

import os
import sys
from typing import Callable, TypeVar

__all__ = ["check_out", "check_seed_and_out", "run_digest", "write_digest", "finish_digest",
           "run_stamp"]

T = TypeVar("T")


def check_out(path: str) -> None:
    """Refuse an ``--out`` that is empty, a folder (or ends with a path separator), in a folder
    that does not exist or where no file can be created (tried: a temporary file made and
    removed there, so a long run never fails only at its end), or an entry a new file must not
    replace (a device node such as ``/dev/null``, a FIFO, a symbolic link:
    ``subgpu_jax.model.checks.out_file``).

    Raises:
        ValueError: naming ``--out`` and what is allowed.
    """
    import tempfile

    from subgpu_jax.model.checks import out_file

    if isinstance(path, str) and path and (os.path.isdir(path)
                                           or path.endswith(("/", os.sep))):
        raise ValueError(f"--out: {path!r} must be a file in an existing folder, not a folder")
    try:
        p = out_file(path, "--out")
    except ValueError as e:
        raise ValueError(f"--out: {path!r} must be a file in an existing folder, a regular "
                         f"file or none yet ({e})") from None
    try:
        with tempfile.NamedTemporaryFile(dir=p.parent, prefix=".check_out_"):
            pass
    except OSError as e:
        raise ValueError(f"--out: no file can be written in {str(p.parent)!r} "
                         f"({e.strerror or e})") from None


def check_seed_and_out(ap, a) -> None:
    """``ap.error`` (one line, exit 2) for a ``--seed`` outside 0..2**32 - 1 (NumPy's and
    random's seed range) or a bad ``--out`` (``check_out``), before any work."""
    if not 0 <= a.seed <= 2**32 - 1:
        ap.error(f"--seed must be an integer from 0 to {2**32 - 1:,}, got {a.seed}")
    try:
        check_out(a.out)
    except ValueError as e:
        ap.error(str(e))


def write_digest(path: str, doc: dict) -> None:
    """``check_out(path)``, then ``doc`` as indented JSON, written atomically (fsync-ed and
    renamed: ``subgpu_jax.app.store.atomic_write``).

    Raises:
        ValueError: a bad ``--out`` (``check_out``). OSError: it cannot be written.
    """
    import json

    from subgpu_jax.app.store import atomic_write

    check_out(path)
    atomic_write(path, json.dumps(doc, indent=1))


def run_digest(work: Callable[[], T], out: str) -> tuple[int, T | None]:
    """``(0, work())``; or, when ``work`` raises ``ValueError`` (bad input, its message names
    the flag or file) or ``OSError`` (``--out`` cannot be written), the error as one line on
    stderr and ``(2, None)``."""
    try:
        return 0, work()
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
    except OSError as e:
        print(f"error: --out {out!r}: cannot write ({e.strerror or e})", file=sys.stderr)
    return 2, None


def finish_digest(path: str, doc: dict, script: str) -> int:
    """The end of a benchmark that printed its table: ``write_digest(path, doc)`` and "wrote
    PATH" (0), or, when ``--out`` cannot be written now (the folder changed since the check at
    the start), one line on stderr saying the table above is the result (2)."""
    try:
        write_digest(path, doc)
    except (OSError, ValueError) as e:
        print(f"{script}: --out {path!r} cannot be written now ({e}); the table above is the "
              "result", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0


def run_stamp(root: str) -> dict:
    """What a digest records about its run: ``date`` (YYYY-MM-DD), ``commit`` (the short hash
    of ``root``'s HEAD, None outside a git checkout) and ``env`` (CPU count, machine, Python)."""
    import platform
    import subprocess
    import time

    commit = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip() or None
    return {"date": time.strftime("%Y-%m-%d"), "commit": commit,
            "env": {"cpu_count": os.cpu_count(), "machine": platform.machine(),
                    "python": platform.python_version()}}

