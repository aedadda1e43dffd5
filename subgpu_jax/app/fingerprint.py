"""A sweep's identity: the fingerprint of its defining parameters, and the checksums of its
records (``store.SweepStore``; the layout of a block is in ``store``'s docstring).

Input files enter by content (:func:`file_digest`), never by the path they were given by: the
paths are kept in ``meta["about"]``, which describes the sweep but is not part of its
fingerprint (issue 41: a re-calibrated ``cal.json`` reused the old records, ``./cal.json`` was
refused as another sweep).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Iterable

__all__ = ["grid_fingerprint", "file_digest", "normalise", "without_about", "canonical",
           "checksum", "records_digest", "block_and_sums", "block_text"]


def grid_fingerprint(meta: dict) -> str:
    """SHA-256 (16 hex) of the sweep's defining parameters (model, hardware, grid, scorer ...).

    ``meta["about"]`` is left out: it holds what only describes the sweep (the paths its input
    files were given by); the files themselves enter as their :func:`file_digest`, so
    ``./cal.json`` and ``cal.json`` are one sweep and a re-calibrated ``cal.json`` another."""
    body = {k: v for k, v in meta.items() if k != "about"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


def without_about(man: dict | None) -> dict | None:
    """A manifest (``{"format", "fingerprint", "meta"}``) without ``meta["about"]``; None
    stays None."""
    return None if man is None else {**man, "meta": {k: v for k, v in man["meta"].items()
                                                     if k != "about"}}


def file_digest(path: str) -> str:
    """``"sha256:"`` + the SHA-256 (16 hex) of a file's bytes: an input file's identity in a
    sweep's fingerprint. Raises ``OSError`` (names the file) when it cannot be read."""
    with open(path, "rb") as fh:
        return "sha256:" + hashlib.sha256(fh.read()).hexdigest()[:16]


def normalise(meta: dict) -> dict:
    """``meta`` as it reads back from JSON (tuples become lists), so a re-run compares equal."""
    return json.loads(json.dumps(meta, sort_keys=True))


def canonical(obj: Any) -> str:
    """JSON with sorted keys and no spaces: the text a checksum is taken of."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def checksum(obj: dict) -> str:
    """SHA-256 (16 hex) of a record's or marker's fields other than ``_sum`` (canonical JSON:
    sorted keys, no spaces; floats as Python writes them, which round-trip exactly)."""
    return hashlib.sha256(canonical({k: v for k, v in obj.items() if k != "_sum"}).encode()
                          ).hexdigest()[:16]


def records_digest(sums: Iterable[str]) -> str:
    """SHA-256 (16 hex) of a block's record checksums in order (the marker's ``_recs``)."""
    return hashlib.sha256(",".join(sums).encode()).hexdigest()[:16]


def block_and_sums(key: str, recs: list[dict], fp: str) -> tuple[bytes, list[str]]:
    """One grid point's block of ``records.jsonl`` (its records with their ``_sum``, then its
    ``_done`` marker for sweep ``fp``) as bytes, and the records' checksums."""
    lines, sums = [], []
    for r in recs:
        s = checksum(r)
        sums.append(s)
        lines.append(json.dumps(dict(r, _sum=s), sort_keys=True))
    marker = {"_done": key, "_fp": fp, "_n": len(recs), "_recs": records_digest(sums)}
    marker["_sum"] = checksum(marker)
    lines.append(json.dumps(marker, sort_keys=True))
    return ("\n".join(lines) + "\n").encode(), sums


def block_text(key: str, recs: list[dict], marker: dict) -> str:
    """A verified block re-serialised exactly as :meth:`SweepStore.add` wrote it."""
    return block_and_sums(key, recs, marker["_fp"])[0].decode()
