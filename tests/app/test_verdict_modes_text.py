"""``app.modes.verdict_for``: the reason names SubGPU's link-free speedup only where the
deployment has collectives (a one-GPU workload has no link time to remove)."""

from __future__ import annotations

from subgpu_jax.app.modes import ModePrediction, verdict_for


def _mp(nolink_factor: float) -> ModePrediction:
    """Temporal 100 µs, SubGPU 95, multistream 98; without the link time each x factor."""
    f = nolink_factor
    return ModePrediction(temporal_us=100.0, subgpu_us=95.0, multistream_us=98.0,
                          temporal_nolink_us=100.0 * f, subgpu_nolink_us=95.0 * f,
                          multistream_nolink_us=98.0 * f)


def test_link_free_clause_only_with_collectives():
    one_gpu = verdict_for(_mp(1.0), "H200", False, False, bands={})
    assert "link time" not in one_gpu["reason"] and one_gpu["communication"] is None
    tp8 = verdict_for(_mp(0.9), "H200", False, False, bands={})
    assert "without the collectives' link time SubGPU predicts 1.053x" in tp8["reason"]
    assert abs(tp8["communication"] - 1.0) < 1e-12   # the same factor on both: nothing hidden
