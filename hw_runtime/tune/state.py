"""The state of a tune on disk (``DIR/tune_state.json``): every measurement and trace, each
round's predictions and errors, and the GPU time per phase. Rewritten atomically
(``subgpu_jax.app.store.atomic_write``) after every measurement, trace and round, so a killed
tune resumes without measuring anything twice.

A folder holding the state of another tune (other options: ``TuneSpec.meta``) is refused with
one line naming the first option that differs.
"""

from __future__ import annotations

import json
import os
from typing import Any

from subgpu_jax.app.store import atomic_write

__all__ = ["TuneState", "STATE_FILE", "STATE_FORMAT"]

STATE_FILE = "tune_state.json"
STATE_FORMAT = "subgpu-tune-state/1"


class TuneState:
    """Measurements and traces by candidate key, rounds, GPU seconds per phase.

    Attributes:
        path: the state file. meta: the tune's options (``TuneSpec.meta``).
        measurements: key -> ``{"candidate", "measured_us", "spread", "round_medians_us",
            "gpu_s", "phase", "round", "order", "note"}``.
        traces: key -> ``{"candidate", "rows" (``summarize_trace``), "gpu_s", "error"}``.
        rounds: one dict per finished round (see ``loop``). gpu_s: phase -> GPU seconds.
        search_s: CPU seconds of the searches. resumed: True when loaded from disk.

    Raises:
        ValueError: an unreadable or foreign state file, or other options (one line).
    """

    def __init__(self, folder: str, meta: dict) -> None:
        self.path = os.path.join(folder, STATE_FILE)
        self.meta = json.loads(json.dumps(meta))
        self.measurements: dict[str, dict] = {}
        self.traces: dict[str, dict] = {}
        self.rounds: list[dict] = []
        self.gpu_s: dict[str, float] = {}
        self.search_s = 0.0
        self.resumed = False
        if os.path.exists(self.path):
            self._load()
        else:
            os.makedirs(folder, exist_ok=True)

    def _load(self) -> None:
        try:
            with open(self.path) as fh:
                d = json.load(fh)
        except (OSError, json.JSONDecodeError) as e:
            raise ValueError(f"--out: cannot read {self.path} ({e}); move it away to start "
                             "afresh") from None
        if not isinstance(d, dict) or d.get("format") != STATE_FORMAT:
            raise ValueError(f"--out: {self.path} is not a subgpu tune state "
                             f"({STATE_FORMAT}); choose another --out")
        old = d.get("meta", {})
        for k in sorted(set(old) | set(self.meta)):
            if old.get(k) != self.meta.get(k):
                raise ValueError(f"--out: the folder holds a tune with {k}={old.get(k)!r}, this "
                                 f"one has {k}={self.meta.get(k)!r}; use the same options to "
                                 "resume it or choose another --out")
        self.measurements = dict(d.get("measurements", {}))
        self.traces = dict(d.get("traces", {}))
        self.rounds = list(d.get("rounds", []))
        self.gpu_s = {k: float(v) for k, v in d.get("gpu_s", {}).items()}
        self.search_s = float(d.get("search_s", 0.0))
        self.resumed = True

    @property
    def gpu_total_s(self) -> float:
        """GPU seconds spent so far (all phases, this and earlier calls)."""
        return float(sum(self.gpu_s.values()))

    def charge(self, phase: str, seconds: float) -> None:
        """Add GPU seconds to ``phase``."""
        self.gpu_s[phase] = self.gpu_s.get(phase, 0.0) + float(seconds)

    def as_dict(self) -> dict[str, Any]:
        """The JSON object written to ``path``."""
        return {"format": STATE_FORMAT, "meta": self.meta, "measurements": self.measurements,
                "traces": self.traces, "rounds": self.rounds, "gpu_s": self.gpu_s,
                "search_s": self.search_s}

    def save(self) -> None:
        """Write the state atomically (a crash leaves the previous or the new file)."""
        atomic_write(self.path, json.dumps(self.as_dict(), indent=1, sort_keys=True))
