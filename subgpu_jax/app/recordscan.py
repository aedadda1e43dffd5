"""One pass over a sweep's ``records.jsonl`` (the layout: ``app.store``): the verified blocks of
this sweep, the blocks of another sweep's fingerprint, and what was dropped or repaired, counted
exactly (:class:`LoadReport`)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Callable

from subgpu_jax.app.fingerprint import checksum, records_digest

__all__ = ["LoadReport", "RecordScan", "valid_values"]


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


class RecordScan:
    """One pass over records.jsonl: verified blocks of this sweep (``blocks``), blocks of
    another fingerprint (``foreign``), the findings (``report``) and the keys that lost records
    (``dropped_keys``).

    Args:
        fp: this sweep's fingerprint. keys: its grid keys (a finished block with another key is
            dropped; None accepts any). check_record: ``check_record(key, record) -> reason or
            None`` (None: no check). data: the file's bytes. legacy_ok: blocks without checksums
            (format 1) are accepted when their values pass the checks (the manifest of a
            format-1 sweep vouches for them)."""

    def __init__(self, fp: str, keys: set[str] | None,
                 check_record: Callable[[str, dict], str | None] | None, data: bytes,
                 legacy_ok: bool = False) -> None:
        self.fp = fp
        self.keys = keys
        self.check_record = check_record
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
                if reason is None and self.check_record is not None:
                    reason = self.check_record(key, r)
                if reason is not None:
                    reason = f"{key}: {reason}"
                    break
        if reason is not None:
            self.report.add("bad_point", key, len(mine) + dups + 1, reason)
            self.dropped_keys.add(key)
            return
        for _ in range(dups):
            self.report.add("duplicate_line", key)
        fp = self.fp if legacy else m["_fp"]
        recs = [{k: v for k, v in r.items() if k != "_sum"} for r in mine]
        if fp != self.fp:
            self.foreign.append((key, recs, m))
            return
        if key in self._sums:
            self.report.add("duplicate_point", key, len(mine) + 1)
            return
        if self.keys is not None and key not in self.keys:
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
