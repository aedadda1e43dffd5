"""Breaker review: the provenance note of a GPU validated only by the verdict protocol (the
H100: a verdict digest, no hw_fidelity/hw_wins study) never says that GPU was never measured.

Oracle: ``experiments/results/hw_verdicts/*/hw_verdicts_h100.json`` exists (committed), so the
H100 was measured; its held-out figures are what ``uncalibrated_errors`` quotes for it.
"""

from __future__ import annotations

from pathlib import Path

from subgpu_jax.app.provenance import prediction_note, uncalibrated_errors
from subgpu_jax.sim.contention import uncalibrated_model_id
from subgpu_jax.model.hardware import get_hardware

RESULTS = Path(__file__).resolve().parents[2] / "experiments" / "results"


def test_h100_note_quotes_its_own_verdict_digest():
    assert list(RESULTS.glob("hw_verdicts/*/hw_verdicts_h100.json"))
    note = prediction_note("H100")
    assert "no H100 was ever measured" not in note["text"], note["text"]
    want = uncalibrated_errors(RESULTS, "H100", [], uncalibrated_model_id(get_hardware("H100")))
    assert want.startswith("on ") and want in note["text"]


def test_h100_calibrated_note_says_what_was_measured():
    note = prediction_note("H100", calibration="cal.json")
    assert "no H100 was ever measured" not in note["text"], note["text"]
    assert "on the H100: ;" not in note["text"] and "on the H100: ." not in note["text"]
    assert "none for the calibrated model" in note["text"]


def test_b200_note_still_says_never_measured():
    assert "no B200 was ever measured (only the H100 and the H200 were measured)" in \
        prediction_note("B200")["text"]
