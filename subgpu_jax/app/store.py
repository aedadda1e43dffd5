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

Verifying ``records.jsonl`` is :mod:`subgpu_jax.app.recordscan`; every file-system call goes
through :func:`subgpu_jax.app.safeio.fs_call`, which calls a test hook (:func:`set_fault_hook`)
first: the fault-injection tests kill the process at each write, fsync and rename.
"""

from __future__ import annotations

import json
import os
from typing import Callable, Iterable

from subgpu_jax.app.fingerprint import (block_and_sums, block_text, checksum, file_digest,
                                         grid_fingerprint, normalise, without_about)
from subgpu_jax.app.recordscan import LoadReport, RecordScan
from subgpu_jax.app.safeio import (LOCK_NAME, PROBE_NAME, READ_ONLY_ERRNOS, FolderLock,
                                   atomic_write, fs_call, fsync_dir, pid_alive, set_fault_hook,
                                   unwritable, write_all)
from subgpu_jax.model.checks import replaceable_file

__all__ = ["SweepStore", "LoadReport", "FolderLock", "checksum", "atomic_write",
           "grid_fingerprint", "file_digest", "set_fault_hook", "FORMAT", "LOCK_NAME",
           "PROBE_NAME"]

#: Version of the records.jsonl layout written by :class:`SweepStore` (1: no checksums).
FORMAT = 2
RECORDS = "records.jsonl"
MANIFEST = "manifest.json"
#: Files derived from the records (rewritten by the search job; deleted with them by overwrite).
DERIVED = ("records.csv", "summary.json")
#: Files written through :func:`atomic_write` whose ``.tmp`` leftovers are removed on open.
TMP_NAMES = (MANIFEST, RECORDS) + DERIVED



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
            if e.errno not in READ_ONLY_ERRNOS:
                raise
            self.read_only = True  # a finished sweep can still be read and summarised
            self.read_only_why = f"results folder {folder} is read-only"
        if not self.read_only:
            self.read_only_why = unwritable(folder, os.path.join(folder, RECORDS))
            self.read_only = bool(self.read_only_why)
        if self._lock is not None and self._lock.stale_pid:
            pid = self._lock.stale_pid
            self.notes.append(
                f"took over the lock of PID {pid}: that process is running but did not hold "
                "the lock (its PID was reused, or the lock file came from another folder or "
                "machine)" if pid_alive(pid) else
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
                    fs_call("unlink", p, os.unlink, p)
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
        scan = RecordScan(self.fp, self.keys, self.check_record, data, legacy_ok)
        has_lines = bool(data.strip())
        if overwrite:
            if has_lines:
                self._need_write("delete its records")
                fs_call("unlink", self.path, os.unlink, self.path)
                for name in DERIVED:  # they describe the deleted records
                    p = os.path.join(self.folder, name)
                    if os.path.exists(p):
                        fs_call("unlink", p, os.unlink, p)
                fsync_dir(self.folder)
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

    def _refusal(self, man: dict | None, scan: RecordScan) -> str:
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

    def _set_aside(self, man: dict | None, scan: RecordScan) -> str:
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

    def _bring_back(self, side: str, scan: RecordScan) -> None:
        """Add to ``scan`` this sweep's finished grid points that an earlier ``repair`` (another
        sweep opened the folder) set aside in ``side``; a writable folder gets them back in
        ``records.jsonl`` and ``side`` (with its manifest) is removed once they are there."""
        with open(side, "rb") as fh:
            back = RecordScan(self.fp, self.keys, self.check_record, fh.read())
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
                    fs_call("unlink", q, os.unlink, q)
            fsync_dir(self.folder)

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
        fd = fs_call("open", self.path, os.open, self.path,
                  os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            size0 = os.fstat(fd).st_size
            try:
                write_all(fd, blob, self.path)
                fs_call("fsync", self.path, os.fsync, fd)
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
            fsync_dir(self.folder)
        self.records.extend(recs)
        self.done.add(key)
