"""Crash-safe file-system calls: :func:`atomic_write` (every output of the package), the
results folder's lock (:class:`FolderLock`) and the checks at open (:func:`unwritable`,
:func:`pid_alive`).

All file-system calls of the sweep's store (``app.store``) go through :func:`fs_call`, which
calls a test hook (:func:`set_fault_hook`) first: the fault-injection tests kill the process at
each write, fsync and rename.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from typing import Callable

from subgpu_jax.model.checks import replaceable_file

__all__ = ["atomic_write", "FolderLock", "fs_call", "write_all", "fsync_dir", "set_fault_hook",
           "unwritable", "pid_alive", "READ_ONLY_ERRNOS", "LOCK_NAME", "PROBE_NAME"]

LOCK_NAME = ".lock"
#: A file created and removed at open to learn whether the folder accepts new files (an
#: existing, writable lock file does not tell: ``chmod a-w DIR`` leaves it writable).
PROBE_NAME = ".write-probe"
#: The errors of a folder that cannot be written (a finished sweep in it can still be read).
READ_ONLY_ERRNOS = (errno.EACCES, errno.EPERM, errno.EROFS)

_FAULT_HOOK: Callable[[str, str, tuple], None] | None = None


def set_fault_hook(hook: Callable[[str, str, tuple], None] | None) -> None:
    """Install (or remove, with None) the fault-injection hook of the store's file-system calls.

    The hook is called as ``hook(op, path, args)`` right before each call, ``op`` one of
    ``open``, ``write`` (``args = (fd, bytes)``), ``fsync``, ``fsync_dir``, ``replace``,
    ``truncate``, ``unlink``, ``lock``. Tests use it to kill the process at the n-th call or to
    raise ``OSError(ENOSPC)``.
    """
    global _FAULT_HOOK
    _FAULT_HOOK = hook


def fs_call(op: str, path: str, fn: Callable, *args):
    """Run one file-system call ``fn(*args)`` after the fault hook; an ``OSError`` without a
    file name gets ``path`` so every error message names its file."""
    if _FAULT_HOOK is not None:
        _FAULT_HOOK(op, path, args)
    try:
        return fn(*args)
    except OSError as e:
        if e.filename is None and e.errno is not None:
            raise OSError(e.errno, e.strerror or os.strerror(e.errno), path) from None
        raise


def write_all(fd: int, data: bytes, path: str) -> None:
    """Write all of ``data`` to ``fd`` (a short write goes on with the rest), each write
    through :func:`fs_call` (errors name ``path``)."""
    view = memoryview(data)
    while view:
        n = fs_call("write", path, os.write, fd, bytes(view))
        view = view[n:]


def fsync_dir(folder: str) -> None:
    """fsync the folder so a rename or a new file survives a power loss."""
    fd = os.open(folder or ".", os.O_RDONLY)
    try:
        fs_call("fsync_dir", folder, os.fsync, fd)
    finally:
        os.close(fd)


def atomic_write(path: str, data: str | bytes, name: str = "output") -> None:
    """Replace ``path`` by ``data`` atomically: write ``path.tmp``, fsync, rename, fsync the folder.

    Only a regular file is replaced: anything else at ``path`` or ``path.tmp`` (device node,
    FIFO, folder, symbolic link) is refused before writing and again before the rename
    (``checks.replaceable_file``); ``path.tmp`` is created ``O_EXCL | O_NOFOLLOW``. Every output
    of the package is written here. ``name``: what messages call ``path`` (e.g. ``--trace``).

    Raises:
        ValueError: ``path`` or ``path.tmp`` exists and is not a regular file (names ``name``).
        OSError: a failure (disk full, read-only folder) names ``path``; the ``.tmp`` file is
            removed and the old file is left unchanged.
    """
    raw = data.encode() if isinstance(data, str) else data
    tmp = path + ".tmp"
    replaceable_file(path, name)
    if os.path.lexists(tmp):
        fs_call("unlink", tmp, os.unlink, tmp)  # a regular leftover of an interrupted write
    fd = fs_call("open", tmp, os.open, tmp,
              os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        try:
            write_all(fd, raw, path)
            fs_call("fsync", path, os.fsync, fd)
        finally:
            os.close(fd)
        replaceable_file(path, name)  # nothing special appeared at path meanwhile
        fs_call("replace", path, os.replace, tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(os.path.dirname(path))


class FolderLock:
    """Exclusive advisory lock (``flock``) on ``folder/.lock``, holding this process's PID.

    Args:
        folder: the results folder (must exist and be writable).

    Attributes:
        stale_pid: PID left in the lock file by a run that ended without releasing it (killed),
            now taken over; None when the file was empty.

    Raises:
        ValueError: another run holds the lock (names its PID).
        OSError: the lock file cannot be created (read-only folder).
    """

    def __init__(self, folder: str) -> None:
        self.path = os.path.join(folder, LOCK_NAME)
        self.fd: int | None = fs_call("open", self.path, os.open, self.path,
                                   os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fs_call("lock", self.path, fcntl.flock, self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = self._read_pid()
            deadline = time.monotonic() + 1.0   # the holder writes its PID right after locking
            while holder is None and time.monotonic() < deadline:
                time.sleep(0.01)
                holder = self._read_pid()
            os.close(self.fd)
            self.fd = None
            who = f"PID {holder}" if holder else "a process that has not written its PID yet"
            raise ValueError(f"results folder {folder} is in use by another run ({who} holds "
                             f"{self.path}); wait for it to end or choose another --out") from None
        except BaseException:
            os.close(self.fd)
            self.fd = None
            raise
        old = self._read_pid()
        self.stale_pid = old if old and old != os.getpid() else None
        pid = f"{os.getpid()}\n".encode()
        fs_call("truncate", self.path, os.ftruncate, self.fd, 0)
        fs_call("write", self.path, os.pwrite, self.fd, pid, 0)
        fs_call("fsync", self.path, os.fsync, self.fd)

    def _read_pid(self) -> int | None:
        try:
            txt = os.pread(self.fd, 32, 0).decode("ascii", "replace").strip()
            return int(txt) if txt else None
        except (OSError, ValueError):
            return None

    def release(self) -> None:
        """Clear the PID and drop the lock (idempotent). The file is kept: deleting it would let
        a waiting process lock an unlinked file while a third one locks a new one."""
        if self.fd is None:
            return
        try:
            os.ftruncate(self.fd, 0)
        except OSError:
            pass
        try:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
        finally:
            os.close(self.fd)
            self.fd = None



def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this machine (signal 0; a process of another user
    exists too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return not isinstance(pid, bool) and 0 < pid < 1 << 22
    return True


def unwritable(folder: str, records: str) -> str:
    """Why the store could not write ``folder`` (checked at open, before any grid point is
    computed), or "": a new file is created and removed there (the lock file may be writable
    in a folder that accepts no new file: ``chmod a-w DIR``), and an existing ``records``
    must be writable. A full disk is not read-only (creating an empty file needs no block)."""
    probe = os.path.join(folder, PROBE_NAME)
    try:
        if os.path.lexists(probe):  # a regular leftover of a killed run (checked at open)
            fs_call("unlink", probe, os.unlink, probe)
        # never through a link (O_TRUNC truncated its target) nor a FIFO (the open blocked)
        fd = fs_call("open", probe, os.open, probe,
                  os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        os.close(fd)
        fs_call("unlink", probe, os.unlink, probe)
    except OSError as e:
        if e.errno in READ_ONLY_ERRNOS:
            return f"results folder {folder} is read-only (no new file can be created there)"
        if e.errno != errno.ENOSPC:
            raise
    if os.path.exists(records) and not os.access(records, os.W_OK):
        return f"results folder {folder} is read-only ({records} is not writable)"
    return ""
