"""Input checks shared by every layer: one-line ``ValueError`` messages that name the field and
what is allowed (the house rule for bad input: never a silent fallback)."""

from __future__ import annotations

import math
import os
import re
import stat
from pathlib import Path
from typing import Any, Iterable

import numpy as np

__all__ = ["pos_int", "finite", "flag", "choice", "out_file", "out_dir", "LIMITS", "bounded_int",
           "divisors", "replaceable_file", "ascii_int", "ascii_float"]

#: Upper limits of the counts a user gives (docs/reliability.md, "Inputs"): far above any real
#: deployment, low enough that no step of the program is slow because of them. Every option
#: of the command line is checked against them before any work.
LIMITS = {
    "gpus": 1 << 20,           # GPUs of a deployment (also --tp, --dp, --ep, --nvlink-domain)
    "batch": 1 << 20,          # global decode batch G (requests; also every --batches value)
    "tokens": 1 << 24,         # --kv-history, --input-len (tokens per request)
    "microbatches": 1024,      # m (every --microbatches value, --microbatch in requests: batch)
    "streams": 64,             # streams per stage k
    "passes": 10_000,          # --l-sim
    "grid_points": 100_000,    # grid points of one search (product of the grid's lists)
    "processes": 1 << 16,      # --num-processes
    "sms": 1 << 20,            # --sms, --quantum, --min-pool of `subgpu space`
}


def bounded_int(v: Any, name: str, lo: int, hi: int) -> int:
    """``v`` as an ``int`` when it is an integer (not bool) in ``lo..hi``.

    Raises:
        ValueError: ``"{name} must be an integer in {lo}..{hi}, got {v!r}"`` (huge numbers are
            shown by their digit count).
    """
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not lo <= v <= hi:
        got = repr(v)
        if isinstance(v, (int, np.integer)) and len(got) > 24:
            got = f"a {len(got.lstrip('-'))}-digit number"
        raise ValueError(f"{name} must be an integer in {lo}..{hi:,}, got {got}")
    return int(v)


def ascii_int(text: str) -> int:
    """An integer option as typed: optional sign and the digits 0-9 only. ``int()`` also takes
    other scripts' digits (full-width '２', Arabic-Indic '٢'), underscores and spaces, which a
    command line must not read as a number silently.

    Raises:
        ValueError: anything else (names what was given and what is allowed).
    """
    t = str(text)
    if not re.fullmatch(r"[+-]?[0-9]+", t):
        raise ValueError(f"must be an integer written with the digits 0-9, got {t!r}")
    return int(t)


def ascii_float(text: str) -> float:
    """A real-valued option as typed: ASCII only (``1.5``, ``2e3``, ``inf``; the range is
    checked by :func:`finite` where the option is used). ``float()`` also takes full-width
    digits and underscores.

    Raises:
        ValueError: non-ASCII text, underscores or spaces, or not a number.
    """
    t = str(text)
    if not re.fullmatch(r"[0-9A-Za-z.+-]+", t):
        raise ValueError(f"must be a number written with the digits 0-9, '.', 'e', got {t!r}")
    try:
        return float(t)
    except ValueError:
        raise ValueError(f"must be a number written with the digits 0-9, '.', 'e', got "
                         f"{t!r}") from None


def divisors(n: int) -> list[int]:
    """The positive divisors of ``n`` >= 1, ascending, in O(sqrt(n)) steps."""
    n = pos_int(n, "n")
    small, large = [], []
    i = 1
    while i * i <= n:
        if n % i == 0:
            small.append(i)
            if i != n // i:
                large.append(n // i)
        i += 1
    return small + large[::-1]


def pos_int(v: Any, name: str, minimum: int = 1) -> int:
    """``v`` as an ``int`` when it is an integer (Python or numpy, not bool) >= ``minimum``.

    Raises:
        ValueError: ``"{name} must be an integer >= {minimum}, got {v!r}"``.
    """
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {v!r}")
    return int(v)


def finite(v: Any, name: str, lo: float | None = None, lo_open: bool = False,
           hi: float | None = None) -> float:
    """``v`` as a ``float`` when it is a finite real number in the given range.

    Args:
        v: the value; name: the field named in the error; lo: lower bound (inclusive unless
        ``lo_open``); hi: upper bound (inclusive).

    Raises:
        ValueError: not a finite real number, or out of range.
    """
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a finite number, got {v!r}") from None
    if isinstance(v, bool) or not math.isfinite(x):
        raise ValueError(f"{name} must be a finite number, got {v!r}")
    if lo is not None and (x <= lo if lo_open else x < lo):
        raise ValueError(f"{name} must be {'>' if lo_open else '>='} {lo}, got {v!r}")
    if hi is not None and x > hi:
        raise ValueError(f"{name} must be <= {hi}, got {v!r}")
    return x


def flag(v: Any, name: str, allow_none: bool = False) -> bool | None:
    """``v`` as a ``bool`` when it is True or False (Python or numpy bool), or None when
    ``allow_none``; no coercion (``bool("false")`` is True, so strings and numbers are refused).

    Raises:
        ValueError: ``"{name} must be True or False, got {v!r}"`` (``"True, False or None"``
        with ``allow_none``).
    """
    if v is None and allow_none:
        return None
    if not isinstance(v, (bool, np.bool_)):
        allowed = "True, False or None" if allow_none else "True or False"
        raise ValueError(f"{name} must be {allowed}, got {v!r}")
    return bool(v)


def choice(v: Any, name: str, allowed: Iterable[Any]) -> Any:
    """``v`` when it is one of ``allowed``.

    Raises:
        ValueError: ``"{name} must be one of a, b, c, got {v!r}"``.
    """
    allowed = tuple(allowed)
    if v not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(str, allowed))}, got {v!r}")
    return v


def out_file(path: Any, name: str) -> Path:
    """``path`` as a ``Path`` after checking that it names a file (to be written) in an existing
    folder.

    Raises:
        ValueError: not a str/PathLike (None, a number), an empty path, a missing folder, or a
        path that exists and is not a regular file: a folder, a device node, a FIFO, a symbolic
        link (:func:`replaceable_file`; names ``name``).
    """
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        got = "an empty string" if isinstance(path, str) else repr(path)
        raise ValueError(f"{name} must be a file path, got {got}")
    p = Path(path)
    if not p.parent.is_dir():
        raise ValueError(f"{name}: directory {str(p.parent)!r} does not exist")
    replaceable_file(str(p), name)
    return p


def replaceable_file(path: str, name: str) -> None:
    """Check that writing ``path`` (a new file renamed over it) replaces at most a regular file.

    Outputs are written to ``path.tmp`` and renamed over ``path``; a rename replaces whatever
    directory entry stands there, so a device node (``/dev/null``), a FIFO, a socket or a
    symbolic link at ``path`` would be replaced by a regular file. Such a path is refused; a
    symbolic link too (give the file it points to, resolved on purpose). ``path + ".tmp"`` must
    be absent or a regular file as well (it is removed and created anew).

    Raises:
        ValueError: ``path`` or ``path.tmp`` exists and is not a regular file (names ``name``
            and what stands there).
    """
    for q in (path, path + ".tmp"):
        try:
            st = os.lstat(q)
        except FileNotFoundError:
            continue
        except OSError as e:  # e.g. a path through a file: not ours to replace
            raise ValueError(f"{name}: {q!r} cannot be examined ({e.strerror})") from None
        if stat.S_ISLNK(st.st_mode):
            raise ValueError(f"{name}: {q!r} is a symbolic link (to {os.readlink(q)!r}); outputs "
                             "replace only regular files, give the target's path")
        if stat.S_ISDIR(st.st_mode):
            raise ValueError(f"{name}: {q!r} is a directory, give a file path")
        if not stat.S_ISREG(st.st_mode):
            kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else
                    "a socket" if stat.S_ISSOCK(st.st_mode) else
                    "a device node" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
                    else "not a regular file")
            raise ValueError(f"{name}: {q!r} is {kind}; outputs are written only as regular "
                             "files, give a file path")


def out_dir(path: Any, name: str, read_only_ok: bool = False) -> Path:
    """``path`` as a ``Path`` after checking that it is a folder or can be created as one (its
    nearest existing ancestor is a writable folder); nothing is created. ``read_only_ok``: an
    existing folder may be read-only (the caller reads it, e.g. ``search`` summarises a finished
    sweep there, and finds out itself whether it must write).

    Raises:
        ValueError: not a str/PathLike (None, a number), an empty or blank path, an existing
        file, or an ancestor that is a file or not writable (names ``name``).
    """
    if not isinstance(path, (str, os.PathLike)) or not str(path).strip():
        got = (("an empty string" if not path else f"only blanks ({path!r})")
               if isinstance(path, str) else repr(path))
        raise ValueError(f"{name} must be a folder path, got {got}")
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise ValueError(f"{name}: {str(p)!r} is a file, give a folder path")
    anc = p.absolute()
    while not anc.exists():
        if anc.is_symlink():
            raise ValueError(f"{name}: {str(anc)!r} is a symbolic link to "
                             f"{os.readlink(anc)!r}, which does not exist")
        anc = anc.parent
    if not anc.is_dir():
        raise ValueError(f"{name}: {str(p)!r} cannot be created: {str(anc)!r} is a file")
    if not os.access(anc, os.W_OK | os.X_OK) and not (read_only_ok and p.is_dir()):
        raise ValueError(f"{name}: {str(p)!r} cannot be written: no write access to "
                         f"{str(anc)!r}")
    return p
