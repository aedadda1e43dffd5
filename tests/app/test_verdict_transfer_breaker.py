"""Breaker review: the transferred band's text (a GPU never validated, the B200) says which
range was measured and which is the widened extrapolation, never "measured" of the widened one.

Oracle: ``transfer_band`` of the committed H100 and H200 digests: the measured range is the
prediction times the validated GPUs' lowest and highest ratios (the transferred band's ends
undone by ``CROSS_GPU_WIDENING``), the widened one the prediction times the band's ends.
"""

from __future__ import annotations

from subgpu_jax.app.verdict import (CROSS_GPU_WIDENING, format_band, transfer_band,
                                    validated_bands)


def test_transferred_band_text_separates_measured_and_widened():
    b = transfer_band(validated_bands(exclude="B200"), False, False, "green", "sleep")
    assert b is not None and b.transferred
    sp = 0.953
    lo, hi = b.apply(sp)
    mlo, mhi = sp * b.lo * CROSS_GPU_WIDENING, sp * b.hi / CROSS_GPU_WIDENING
    text = format_band(sp, b, "B200")
    assert f"such predictions measured {mlo:.2f}-{mhi:.2f}x" in text, text
    assert f"measured {lo:.2f}-{hi:.2f}x" not in text
    assert f"{lo:.2f}-{hi:.2f}x with the {CROSS_GPU_WIDENING:.3f}x margin" in text
