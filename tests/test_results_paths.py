"""Committed results and test data never name a path of the machine they were made on: the
checkout's own absolute path (a traceback or a log copied from this machine) must not appear
in any text file under experiments/results/ or tests/data/."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEXT = {".json", ".csv", ".log", ".md", ".txt", ".jsonl"}


def test_no_committed_result_names_this_checkout():
    me = str(ROOT)
    hits = []
    for base in (ROOT / "experiments" / "results", ROOT / "tests" / "data"):
        for p in base.rglob("*"):
            if p.is_file() and p.suffix in TEXT and me in p.read_text(errors="replace"):
                hits.append(str(p.relative_to(ROOT)))
    assert not hits, f"files naming {me}: {hits}"
