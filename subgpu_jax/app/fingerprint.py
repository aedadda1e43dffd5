"""A sweep's identity: the fingerprint of its defining parameters (``store.SweepStore``).

Input files enter by content (:func:`file_digest`), never by the path they were given by: the
paths are kept in ``meta["about"]``, which describes the sweep but is not part of its
fingerprint (issue 41: a re-calibrated ``cal.json`` reused the old records, ``./cal.json`` was
refused as another sweep).
"""

from __future__ import annotations

import hashlib
import json

__all__ = ["grid_fingerprint", "file_digest", "normalise", "without_about"]


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
