"""The sweep's record store: locked, checksummed, crash-safe (docs/usage.md "Reliability").

A results folder holds:

* ``.lock``: an advisory exclusive lock (``flock``) held for the life of a :class:`SweepStore`;
  the file holds the holder's PID. A second writer gets a one-line error naming that PID. The
  kernel drops the lock when its holder dies (kill -9 included), so a PID left in the file with
  the lock free is a stale lock: it is taken over and reported.
* ``manifest.json``: ``{"format", "fingerprint", "meta"}`` of the sweep, written atomically and
  only when it changes. It can always be rebuilt: every finished grid point's ``_done`` marker
  carries the sweep fingerprint, so records found without a (readable) manifest are checked
  against the command's own options and the manifest is written again.
* ``records.jsonl``: one block per finished grid point, appended in ONE write and fsync-ed:
  its records (one JSON object per line, each with ``grid_key`` and ``_sum``, the SHA-256 (16 hex)
  of its other fields) and a ``_done`` marker line ``{"_done": key, "_fp": fingerprint,
  "_n": records, "_recs": digest of the records' sums, "_sum": the marker's own checksum}``.

On load every block is verified (marker checksum, record checksums, record count and order,
finite positive throughputs, the caller's record-vs-grid-key check); exact duplicate lines and
repeated grid points are dropped; records without their marker (orphans), damaged markers and
blocks that fail verification are dropped, counted and reported, and their grid points are
evaluated again. When anything was dropped the file is rewritten atomically with the verified
blocks only. Every message counts exactly what was dropped (:meth:`LoadReport.lines`).

All file-system calls go through :func:`_sys`, which calls a test hook (:func:`set_fault_hook`)
first: the fault-injection tests kill the process at each write, fsync and rename.
"""

from __future__ import annotations

import errno
import fcntl
import json
import math
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

from subgpu_jax.app.fingerprint import (block_and_sums, block_text, checksum, file_digest,
                                         grid_fingerprint, normalise, records_digest,
                                         without_about)
from subgpu_jax.model.checks import replaceable_file

__all__ = ["SweepStore", "LoadReport", "FolderLock", "checksum", "atomic_write",
           "grid_fingerprint", "file_digest", "set_fault_hook", "FORMAT", "LOCK_NAME"]

#: Version of the records.jsonl layout written by :class:`SweepStore` (1: no checksums).
FORMAT = 2
LOCK_NAME = ".lock"
#: A file created and removed at open to learn whether the folder accepts new files (an
#: existing, writable lock file does not tell: ``chmod a-w DIR`` leaves it writable).
PROBE_NAME = ".write-probe"
RECORDS = "records.jsonl"
MANIFEST = "manifest.json"
#: Files derived from the records (rewritten by the search job; deleted with them by overwrite).
DERIVED = ("records.csv", "summary.json")
#: Files written through :func:`atomic_write` whose ``.tmp`` leftovers are removed on open.
TMP_NAMES = (MANIFEST, RECORDS) + DERIVED

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


def _sys(op: str, path: str, fn: Callable, *args):
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


def _write_all(fd: int, data: bytes, path: str) -> None:
    view = memoryview(data)
    while view:
        n = _sys("write", path, os.write, fd, bytes(view))
        view = view[n:]


def _fsync_dir(folder: str) -> None:
    """fsync the folder so a rename or a new file survives a power loss."""
    fd = os.open(folder or ".", os.O_RDONLY)
    try:
        _sys("fsync_dir", folder, os.fsync, fd)
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
        _sys("unlink", tmp, os.unlink, tmp)  # a regular leftover of an interrupted write
    fd = _sys("open", tmp, os.open, tmp,
              os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        try:
            _write_all(fd, raw, path)
            _sys("fsync", path, os.fsync, fd)
        finally:
            os.close(fd)
        replaceable_file(path, name)  # nothing special appeared at path meanwhile
        _sys("replace", path, os.replace, tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(os.path.dirname(path))


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
        self.fd: int | None = _sys("open", self.path, os.open, self.path,
                                   os.O_RDWR | os.O_CREAT, 0o644)
        try:
            _sys("lock", self.path, fcntl.flock, self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
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
        _sys("truncate", self.path, os.ftruncate, self.fd, 0)
        _sys("write", self.path, os.pwrite, self.fd, pid, 0)
        _sys("fsync", self.path, os.fsync, self.fd)

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


#: Kinds of findings in :class:`LoadReport`, with the noun phrase its message counts.
_KINDS = {
    "torn": "torn last line (a write cut short)",
    "unreadable": "unreadable line(s) (not a JSON object)",
    "newline": "missing final newline (restored)",
    "duplicate_line": "duplicated record line(s) (one copy of each kept)",
    "duplicate_point": "repeated grid point(s) (the first copy kept)",
    "orphan": "grid point(s) with records but no _done marker",
    "bad_marker": "_done marker(s) failing their checksum",
    "empty_marker": "_done marker(s) without records",
    "bad_point": "grid point(s) failing verification",
    "unknown": "grid point(s) not in this sweep's grid",
    "legacy": "grid point(s) without checksums (written by an older subgpu)",
    "upgraded": "grid point(s) of the older format without checksums (checksums added)",
}


@dataclass
class LoadReport:
    """What loading ``records.jsonl`` dropped or repaired, counted exactly.

    Attributes:
        events: ``(kind, grid key or "", lines dropped, detail)`` per finding; kinds in
            ``_KINDS``.
        again: grid keys that lost records and are not done (they are evaluated again).
    """

    events: list[tuple[str, str, int, str]] = field(default_factory=list)
    again: list[str] = field(default_factory=list)

    def add(self, kind: str, key: str = "", lines: int = 1, detail: str = "") -> None:
        """Record one finding (``kind`` from ``_KINDS``)."""
        assert kind in _KINDS, kind
        self.events.append((kind, key, lines, detail))

    def count(self, kind: str) -> int:
        """Number of findings of ``kind``."""
        return sum(1 for e in self.events if e[0] == kind)

    def lines_dropped(self, kind: str | None = None) -> int:
        """Lines dropped (of ``kind``, or in total)."""
        return sum(e[2] for e in self.events if kind is None or e[0] == kind)

    def __bool__(self) -> bool:
        return bool(self.events)

    def lines(self) -> list[str]:
        """One message line per kind of finding (how many, how many lines dropped, the grid
        keys and reasons), then the grid points evaluated again."""
        out = []
        for kind, text in _KINDS.items():
            evs = [e for e in self.events if e[0] == kind]
            if not evs:
                continue
            msg = f"records.jsonl: {len(evs)} {text}"
            dropped = sum(e[2] for e in evs)
            if kind != "newline":
                msg += f", {dropped} line(s) dropped"
            keys = sorted({e[1] for e in evs if e[1]})
            if keys:
                msg += ": " + _some(keys)
            details = sorted({e[3] for e in evs if e[3]})
            if details:
                msg += " [" + "; ".join(details[:3]) + "]"
            out.append(msg)
        if self.again:
            out.append(f"records.jsonl: {len(self.again)} grid point(s) lost their records and "
                       f"are evaluated again: {_some(self.again)}")
        return out


def _some(keys: list[str], n: int = 3) -> str:
    return ", ".join(keys[:n]) + (f" (+{len(keys) - n} more)" if len(keys) > n else "")


def valid_values(r: dict) -> str | None:
    """None when a record's throughput fields (those present) are finite positive numbers,
    else the reason."""
    for k in ("makespan_us", "per_user_tok_s", "per_gpu_tok_s"):
        if k in r:
            v = r[k]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                    or v <= 0:
                return f"{k} = {v!r} is not a finite positive number"
    return None


class SweepStore:
    """Locked, checksummed, append-only record store of one sweep in ``folder``.

    Opening it takes the folder's lock, removes ``.tmp`` leftovers, reads the manifest and
    verifies ``records.jsonl`` (see the module docstring). Finished grid points of the same sweep
    (same fingerprint) are reused whether or not ``resume`` is set.

    Args:
        folder: results folder (created).
        meta: the sweep's defining parameters (JSON-serialisable); its fingerprint identifies the
            sweep.
        resume: the caller expects an existing sweep: an empty folder is an error.
        overwrite: delete the records found in ``folder`` (of any sweep) and start afresh.
        repair: the folder also holds another sweep's manifest or records: keep this sweep's
            finished grid points (their ``_done`` markers carry its fingerprint), set the other
            sweep's records aside in ``records.<fingerprint>.jsonl`` and its manifest in
            ``manifest.<fingerprint>.json``, and rebuild ``manifest.json``; nothing is deleted.
        keys: the grid keys of this sweep (a finished block with another key is dropped); None
            accepts any key.
        check_record: ``check_record(key, record) -> reason or None``: whether a record
            describes grid point ``key`` (a record filed under another key is dropped).

    Attributes:
        records: verified records (dicts with ``grid_key``; without ``_sum``), in file order.
        done: keys of finished grid points. report: :class:`LoadReport` of the load.
        notes: informational lines (stale lock taken over, manifest rebuilt, overwrite, ...).
        read_only: the folder is not writable (finished sweeps can still be read).

    Raises:
        ValueError: another run holds the lock (names its PID); the folder holds another sweep's
            manifest or records without ``repair`` or ``overwrite`` (names what differs, how
            many finished grid points belong to this sweep, and the repair that keeps them:
            ``--overwrite`` is offered only when none does); records no fingerprint vouches for;
            ``resume`` with nothing to resume; ``resume`` with ``overwrite``; ``folder`` is a
            file; one of the folder's own files (``.lock``, ``manifest.json``, ``records.jsonl``,
            ``records.csv``, ``summary.json`` or their ``.tmp``) is not a regular file.
        OSError: the folder cannot be created or written (names the file).
    """

    def __init__(self, folder: str, meta: dict, resume: bool = False, overwrite: bool = False,
                 keys: Iterable[str] | None = None,
                 check_record: Callable[[str, dict], str | None] | None = None,
                 repair: bool = False) -> None:
        if resume and overwrite:
            raise ValueError("resume and overwrite exclude each other: --resume keeps the "
                             "records in the folder, --overwrite deletes them")
        if repair and overwrite:
            raise ValueError("repair and overwrite exclude each other: --repair keeps every "
                             "record (another sweep's set aside), --overwrite deletes them")
        self.repair = repair
        self.folder = folder
        self.meta = normalise(meta)
        self.fp = grid_fingerprint(self.meta)
        self.path = os.path.join(folder, RECORDS)
        self.man_path = os.path.join(folder, MANIFEST)
        self.keys = set(keys) if keys is not None else None
        self.check_record = check_record
        self.records: list[dict] = []
        self.done: set[str] = set()
        self.report = LoadReport()
        self.notes: list[str] = []
        self._lock: FolderLock | None = None
        if os.path.exists(folder) and not os.path.isdir(folder):
            raise ValueError(f"out: {folder} is a file, not a results folder")
        os.makedirs(folder, exist_ok=True)
        # a FIFO here would hang a read or the write probe, a link be replaced or truncated
        for name in (LOCK_NAME, PROBE_NAME) + TMP_NAMES:
            replaceable_file(os.path.join(folder, name), "--out")
        self.read_only = False
        self.read_only_why = ""
        try:
            self._lock = FolderLock(folder)
        except OSError as e:
            if e.errno not in _READ_ONLY:
                raise
            self.read_only = True  # a finished sweep can still be read and summarised
            self.read_only_why = f"results folder {folder} is read-only"
        if not self.read_only:
            self.read_only_why = _unwritable(folder, os.path.join(folder, RECORDS))
            self.read_only = bool(self.read_only_why)
        if self._lock is not None and self._lock.stale_pid:
            pid = self._lock.stale_pid
            self.notes.append(
                f"took over the lock of PID {pid}: that process is running but did not hold "
                "the lock (its PID was reused, or the lock file came from another folder or "
                "machine)" if _pid_alive(pid) else
                f"took over the lock of PID {pid}, which ended without releasing it")
        try:
            self._open(resume, overwrite)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ opening
    def __enter__(self) -> "SweepStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Release the folder's lock (idempotent; the kernel also drops it when the process
        dies)."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def _read_manifest(self) -> tuple[str, dict | None, str]:
        """(state, manifest, reason): state ``ok``, ``missing`` or ``broken``."""
        if not os.path.exists(self.man_path):
            return "missing", None, "missing"
        try:
            with open(self.man_path, "rb") as fh:
                man = json.loads(fh.read())
        except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
            return "broken", None, f"unreadable ({type(e).__name__})"
        if not isinstance(man, dict) or not isinstance(man.get("fingerprint"), str) \
                or not isinstance(man.get("meta"), dict):
            return "broken", None, "not a manifest (a JSON object with fingerprint and meta)"
        return "ok", man, ""

    def _open(self, resume: bool, overwrite: bool) -> None:
        if not self.read_only:
            gone = 0
            for name in TMP_NAMES:
                p = os.path.join(self.folder, name + ".tmp")
                if os.path.exists(p):
                    _sys("unlink", p, os.unlink, p)
                    gone += 1
            if gone:
                self.notes.append(f"removed {gone} leftover .tmp file(s) of an interrupted write")
        state, man, why = self._read_manifest()
        if os.path.exists(self.path) and not os.path.isfile(self.path):
            raise ValueError(f"results folder {self.folder}: {RECORDS} is not a file")
        data = b""
        if os.path.exists(self.path):
            with open(self.path, "rb") as fh:
                data = fh.read()
        # a sweep started by an older subgpu (format 1: no checksums) keeps its records: its
        # manifest vouches for them, and they are rewritten with checksums
        legacy_ok = state == "ok" and "format" not in man and man["fingerprint"] == self.fp
        scan = _Scan(self, data, legacy_ok)
        has_lines = bool(data.strip())
        if overwrite:
            if has_lines:
                self._need_write("delete its records")
                _sys("unlink", self.path, os.unlink, self.path)
                for name in DERIVED:  # they describe the deleted records
                    p = os.path.join(self.folder, name)
                    if os.path.exists(p):
                        _sys("unlink", p, os.unlink, p)
                _fsync_dir(self.folder)
                n = len({b[0] for b in scan.blocks + scan.foreign})
                self.notes.append(f"--overwrite: deleted {RECORDS} ({n} finished grid point(s) "
                                  "of the sweep that was there)")
            self._write_manifest(man)
            return
        man_foreign = state == "ok" and man["fingerprint"] != self.fp
        if man_foreign or scan.foreign:
            if not self.repair:
                raise ValueError(self._refusal(man, scan))
            self._need_write("set another sweep's records aside")
            self.notes.append(self._set_aside(man if man_foreign else None, scan))
            state, man = "repaired", None
        side = os.path.join(self.folder, f"records.{self.fp}.jsonl")
        if os.path.isfile(side):  # this sweep's points, set aside while another sweep ran here
            self._bring_back(side, scan)
        if state in ("missing", "broken") and has_lines and not scan.blocks:
            nl = len([x for x in data.split(b"\n") if x.strip()])
            raise ValueError(
                f"results folder {self.folder}: {RECORDS} holds {nl} "
                f"line(s) but no finished grid point this sweep can verify (manifest.json "
                f"{why}); choose another --out, or pass --overwrite to delete them")
        if resume and state == "missing" and not has_lines:
            raise ValueError(f"out: nothing to resume in {self.folder!r} (no {RECORDS}, no "
                             f"{MANIFEST}); run without --resume to start this sweep")
        if state == "broken" and not scan.blocks:
            self.notes.append(f"{MANIFEST} was {why}: rewritten from this command's options")
        if state in ("missing", "broken") and scan.blocks:
            self.notes.append(f"{MANIFEST} was {why}: rebuilt from this command's options (the "
                              f"{len(scan.blocks)} finished grid point(s) in {RECORDS} carry this "
                              "sweep's fingerprint)")
        self.report = scan.report
        for key, recs, _marker in scan.blocks:
            self.records.extend(recs)
            self.done.add(key)
        self.report.again = sorted(k for k in scan.dropped_keys
                                   if k not in self.done and (self.keys is None or k in self.keys))
        if scan.report and not self.read_only:
            atomic_write(self.path, "".join(block_text(k, r, m) for k, r, m in scan.blocks))
        if not self.read_only:
            self._write_manifest(man)

    def _refusal(self, man: dict | None, scan: "_Scan") -> str:
        """The one-line refusal of a folder holding another sweep's manifest or records: what
        differs, which finished grid points are this sweep's (by the fingerprint their markers
        carry) and the repair that keeps them; ``--overwrite`` only when none is."""
        others = {}
        for key, _recs, m in scan.foreign:
            others.setdefault(m["_fp"], set()).add(key)
        n_other = sum(len(v) for v in others.values())
        parts = []
        if man is not None and man["fingerprint"] != self.fp:
            om = normalise(man["meta"])
            diff = sorted(k for k in set(om) | set(self.meta)
                          if om.get(k) != self.meta.get(k) and k != "about")
            model = f"model {om['model']!r}; " if "model" in om else ""
            parts.append(f"{MANIFEST} of another sweep ({model}differs in {', '.join(diff)})"
                         if diff else f"{MANIFEST} of another sweep ({model}same options, "
                         "another sweep format)")
        if others:
            parts.append(f"{n_other} finished grid point(s) of another sweep (fingerprint "
                         f"{', '.join(sorted(others))})")
        held = " and ".join(parts)
        aside = ("set the other sweep's records aside in "
                 + ", ".join(f"records.{fp}.jsonl" for fp in sorted(others))
                 if others else f"keep the other {MANIFEST} as manifest.<fingerprint>.json")
        if scan.blocks:
            return (f"results folder {self.folder} holds {len(scan.blocks)} finished grid "
                    f"point(s) of this sweep (their records carry its fingerprint {self.fp}) "
                    f"and {held}; pass --repair to keep them, rebuild {MANIFEST} and {aside} "
                    "(nothing is deleted), or choose another --out")
        return (f"results folder {self.folder} holds another sweep: {held}, none of this "
                f"sweep; choose another --out, pass --repair to {aside} and start this sweep "
                "(nothing is deleted), or --overwrite to delete them")

    def _set_aside(self, man: dict | None, scan: "_Scan") -> str:
        """``repair``: write the other sweeps' blocks to ``records.<fp>.jsonl`` (appended to
        what a previous repair put there, each block once) and their manifest to
        ``manifest.<fp>.json``, then ``records.jsonl`` with this sweep's blocks only; every file
        replaced atomically, side files first (a kill in between loses nothing, and the same
        repair again finishes it). Returns the note."""
        by_fp: dict[str, list[str]] = {}
        for key, recs, m in scan.foreign:
            by_fp.setdefault(m["_fp"], []).append(block_text(key, recs, m))
        moved = []
        for fp, blocks in sorted(by_fp.items()):
            side = os.path.join(self.folder, f"records.{fp}.jsonl")
            old = ""
            if os.path.exists(side):
                with open(side, encoding="utf-8", errors="replace") as fh:
                    old = fh.read()
            new = old + "".join(b for b in blocks if b not in old)
            if new != old:
                atomic_write(side, new)
            moved.append(f"{len(blocks)} grid point(s) of sweep {fp} to {os.path.basename(side)}")
        if man is not None:
            side = os.path.join(self.folder, f"manifest.{man['fingerprint']}.json")
            atomic_write(side, json.dumps(man, indent=2, sort_keys=True) + "\n")
            moved.append(f"its {MANIFEST} to {os.path.basename(side)}")
        atomic_write(self.path, "".join(block_text(k, r, m) for k, r, m in scan.blocks))
        return (f"--repair: kept the {len(scan.blocks)} finished grid point(s) of this sweep, "
                f"set aside {'; '.join(moved)}; {MANIFEST} rebuilt (nothing deleted)")

    def _bring_back(self, side: str, scan: "_Scan") -> None:
        """Add to ``scan`` this sweep's finished grid points that an earlier ``repair`` (another
        sweep opened the folder) set aside in ``side``; a writable folder gets them back in
        ``records.jsonl`` and ``side`` (with its manifest) is removed once they are there."""
        with open(side, "rb") as fh:
            back = _Scan(self, fh.read())
        have = {b[0] for b in scan.blocks}
        new = [b for b in back.blocks if b[0] not in have]
        scan.blocks.extend(new)
        self.notes.append(f"brought back {len(new)} finished grid point(s) of this sweep from "
                          f"{os.path.basename(side)} (set aside by an earlier --repair)")
        if self.read_only:
            return
        atomic_write(self.path, "".join(block_text(k, r, m) for k, r, m in scan.blocks))
        if not back.foreign and not back.report:  # nothing else in it: all is in RECORDS now
            for q in (side, os.path.join(self.folder, f"manifest.{self.fp}.json")):
                if os.path.exists(q):
                    _sys("unlink", q, os.unlink, q)
            _fsync_dir(self.folder)

    def _write_manifest(self, old: dict | None) -> None:
        new = {"format": FORMAT, "fingerprint": self.fp, "meta": self.meta}
        if old == new or without_about(old) == without_about(new):  # same sweep, other paths
            return
        self._need_write(f"write {MANIFEST}")
        atomic_write(self.man_path, json.dumps(new, indent=2, sort_keys=True) + "\n")

    def _need_write(self, what: str) -> None:
        if self.read_only:
            raise ValueError(f"{self.read_only_why}: cannot {what}")

    # ------------------------------------------------------------------ appending
    def add(self, key: str, records: Iterable[dict]) -> None:
        """Append one finished grid point (its records and ``_done`` marker in one write, then
        fsync; the folder is fsync-ed when the file is new). A failed write (disk full) is cut
        back so no partial block stays in the file.

        Raises:
            ValueError: read-only folder, or the store was closed.
            OSError: the write failed (names the file; the finished grid points are kept).
        """
        self._need_write(f"store grid point {key}")
        if self._lock is None:
            raise ValueError(f"results folder {self.folder}: the store is closed")
        recs = []
        for r in records:
            rec = {k: v for k, v in r.items() if k != "_sum"}
            rec["grid_key"] = key
            recs.append(rec)
        blob, sums = block_and_sums(key, recs, self.fp)
        new = not os.path.exists(self.path)
        fd = _sys("open", self.path, os.open, self.path,
                  os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            size0 = os.fstat(fd).st_size
            try:
                _write_all(fd, blob, self.path)
                _sys("fsync", self.path, os.fsync, fd)
            except OSError as e:
                try:
                    os.ftruncate(fd, size0)
                    os.fsync(fd)
                except OSError:
                    pass
                raise OSError(e.errno, f"{e.strerror} (grid point {key} not stored; the "
                              f"{len(self.done)} finished grid point(s) are kept)",
                              self.path) from None
        finally:
            os.close(fd)
        if new:
            _fsync_dir(self.folder)
        self.records.extend(recs)
        self.done.add(key)


_READ_ONLY = (errno.EACCES, errno.EPERM, errno.EROFS)


def _pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this machine (signal 0; a process of another user
    exists too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return not isinstance(pid, bool) and 0 < pid < 1 << 22
    return True


def _unwritable(folder: str, records: str) -> str:
    """Why the store could not write ``folder`` (checked at open, before any grid point is
    computed), or "": a new file is created and removed there (the lock file may be writable
    in a folder that accepts no new file: ``chmod a-w DIR``), and an existing ``records``
    must be writable. A full disk is not read-only (creating an empty file needs no block)."""
    probe = os.path.join(folder, PROBE_NAME)
    try:
        if os.path.lexists(probe):  # a regular leftover of a killed run (checked at open)
            _sys("unlink", probe, os.unlink, probe)
        # never through a link (O_TRUNC truncated its target) nor a FIFO (the open blocked)
        fd = _sys("open", probe, os.open, probe,
                  os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        os.close(fd)
        _sys("unlink", probe, os.unlink, probe)
    except OSError as e:
        if e.errno in _READ_ONLY:
            return f"results folder {folder} is read-only (no new file can be created there)"
        if e.errno != errno.ENOSPC:
            raise
    if os.path.exists(records) and not os.access(records, os.W_OK):
        return f"results folder {folder} is read-only ({records} is not writable)"
    return ""


class _Scan:
    """One pass over records.jsonl: verified blocks of this sweep (``blocks``), blocks of
    another fingerprint (``foreign``), the findings (``report``) and the keys that lost records
    (``dropped_keys``). ``legacy_ok``: blocks without checksums (format 1) are accepted when their
    values pass the checks (the manifest of a format-1 sweep vouches for them)."""

    def __init__(self, store: SweepStore, data: bytes, legacy_ok: bool = False) -> None:
        self.store = store
        self.legacy_ok = legacy_ok
        self.blocks: list[tuple[str, list[dict], dict]] = []
        self.foreign: list[tuple[str, list[dict], dict]] = []
        self.report = LoadReport()
        self.dropped_keys: set[str] = set()
        self._sums: dict[str, set[str]] = {}
        parts = data.split(b"\n")
        tail_open = not data.endswith(b"\n")
        pending: list[dict] = []
        for i, raw in enumerate(parts):
            if not raw.strip():
                continue
            is_tail = tail_open and i == len(parts) - 1
            try:
                obj = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                obj = None
            if not isinstance(obj, dict):
                self.report.add("torn" if is_tail else "unreadable")
                continue
            if is_tail:
                self.report.add("newline", lines=0)
            if "_done" in obj:
                self._marker(obj, pending)
                pending = []
            else:
                pending.append(obj)
        self._orphans(pending)

    def _orphans(self, recs: list[dict]) -> None:
        by_key: dict[str, int] = {}
        for r in recs:
            key = r.get("grid_key") if isinstance(r.get("grid_key"), str) else ""
            if key in self._sums and r.get("_sum") in self._sums[key] \
                    and r.get("_sum") == checksum(r):
                self.report.add("duplicate_line", key)
                continue
            by_key[key] = by_key.get(key, 0) + 1
        for key, n in by_key.items():
            self.report.add("orphan", key, n)
            if key:
                self.dropped_keys.add(key)

    def _marker(self, m: dict, pending: list[dict]) -> None:
        key = m.get("_done")
        legacy = isinstance(key, str) and "_sum" not in m and "_fp" not in m
        if legacy and not self.legacy_ok:
            self.report.add("legacy", key, len(pending) + 1)
            if pending:
                self.dropped_keys.add(key)
            return
        if not legacy and (not isinstance(key, str) or m.get("_sum") != checksum(m)
                           or not isinstance(m.get("_n"), int)
                           or not isinstance(m.get("_fp"), str)):
            self.report.add("bad_marker", key if isinstance(key, str) else "")
            if isinstance(key, str):  # its grid point is not done: computed again, and said
                self.dropped_keys.add(key)
            self._orphans(pending)
            return
        mine = [r for r in pending if r.get("grid_key") == key]
        self._orphans([r for r in pending if r.get("grid_key") != key])
        if not mine:
            self.report.add("empty_marker", key)
            self.dropped_keys.add(key)  # its records are gone: computed again, and said
            return
        reason, dups = (None, 0) if legacy else self._verify(key, m, mine)
        if dups:
            seen: set = set()
            mine = [r for r in mine if not (r["_sum"] in seen or seen.add(r["_sum"]))]
        if reason is None:
            for r in mine:
                reason = valid_values(r)
                if reason is None and self.store.check_record is not None:
                    reason = self.store.check_record(key, r)
                if reason is not None:
                    reason = f"{key}: {reason}"
                    break
        if reason is not None:
            self.report.add("bad_point", key, len(mine) + dups + 1, reason)
            self.dropped_keys.add(key)
            return
        for _ in range(dups):
            self.report.add("duplicate_line", key)
        fp = self.store.fp if legacy else m["_fp"]
        recs = [{k: v for k, v in r.items() if k != "_sum"} for r in mine]
        if fp != self.store.fp:
            self.foreign.append((key, recs, m))
            return
        if key in self._sums:
            self.report.add("duplicate_point", key, len(mine) + 1)
            return
        if self.store.keys is not None and key not in self.store.keys:
            self.report.add("unknown", key, len(mine) + 1)
            return
        if legacy:
            self.report.add("upgraded", key, 0)
        self.blocks.append((key, recs, {"_fp": fp}))
        self._sums[key] = {checksum(r) for r in recs}

    @staticmethod
    def _verify(key: str, m: dict, mine: list[dict]) -> tuple[str | None, int]:
        """(reason the block fails, or None; exact duplicate lines to drop) of a checksummed
        block: every record's checksum, then count and order against its marker (a block that
        matches once exact duplicate lines are dropped passes)."""
        for j, r in enumerate(mine):
            if r.get("_sum") != checksum(r):
                return f"{key}: record {j + 1} of {len(mine)} fails its checksum", 0
        if len(mine) == m["_n"] and records_digest(r["_sum"] for r in mine) == m.get("_recs"):
            return None, 0
        seen: set = set()
        uniq = [r for r in mine if not (r["_sum"] in seen or seen.add(r["_sum"]))]
        if len(uniq) == m["_n"] and records_digest(r["_sum"] for r in uniq) == m.get("_recs"):
            return None, len(mine) - len(uniq)
        if len(mine) != m["_n"]:
            return f"{key}: {len(mine)} records where its _done marker lists {m['_n']}", 0
        return f"{key}: its records are not the ones its _done marker lists", 0
