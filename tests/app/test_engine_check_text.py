"""The printed engine check (``searchtext.print_search_summary`` of ``summary.json``'s
``engine_check``, ``refcheck.engine_check``): the line always, and a warning only when the
compiled engine and the event simulator differ by more than its ``tolerance``
(``sim.periodic.FORWARD_TOL`` = 1e-9: the engine equals the full simulation bit for bit and the
records' fast-forward is within that of it)."""

from __future__ import annotations

import pytest

from subgpu_jax.app.refcheck import engine_check
from subgpu_jax.app.searchtext import print_search_summary
from subgpu_jax.sim.periodic import FORWARD_TOL


def _summary(err: float, tol=FORWARD_TOL) -> dict:
    chk = {"rows": [{"error": err}], "checked": 1, "max_abs_error": abs(err),
           "median_abs_error": abs(err)}
    if tol is not None:
        chk["tolerance"] = tol
    return {"best_by_batch": [], "best_speedup_record": None, "frontier_temporal": [],
            "frontier_subgpu": [], "matched": {"per_user_gain_at_matched_per_gpu": [],
                                               "per_gpu_gain_at_matched_per_user": []},
            "engine_check": chk}


@pytest.mark.parametrize("err, warned", [(8.0e-15, False), (FORWARD_TOL, False),
                                         (3.0e-6, True), (-0.01, True)])
def test_warning_only_above_the_tolerance(capsys, err, warned):
    print_search_summary(_summary(err), "B200")
    out = capsys.readouterr().out
    assert "ran in its compiled engine" in out and f"{abs(err):.1e}" in out
    assert ("warning: the compiled engine and the event simulator differ" in out) is warned


def test_an_older_summary_without_tolerance_prints_no_warning(capsys):
    print_search_summary(_summary(0.5, tol=None), "B200")
    out = capsys.readouterr().out
    assert "ran in its compiled engine" in out and "warning" not in out


def test_engine_check_needs_the_compiled_engine():
    """A scorer whose event timer runs the Python simulator has nothing to check."""
    class Scorer:
        class event:
            compiled = False
        timer = event
    assert engine_check(Scorer, [{"mode": "subgpu"}]) is None
