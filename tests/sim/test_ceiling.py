"""The overlap ceiling (``sim.ceiling``): hand-derived floors of a one-kernel region.

One copy-like kernel moving 1e9 bytes (read 5e8 + write 5e8), no FLOPs, in L = 4 regions at m = 1:
HBM floor = 4 * 1e9 B / hbm_read_Bps; the ceiling against a 2x slower temporal run is 2x, i.e. at
most 50% shorter. At m = 2 each microbatch moves half the bytes (activations only, no weights), so
the m = 2 floor equals the m = 1 floor."""

from __future__ import annotations

import pytest

from subgpu_jax.model.graph import Kernel, OpGraph
from subgpu_jax.model.hardware import get_hardware
from subgpu_jax.sim.ceiling import describe, overlap_ceiling, work_floor

H200 = get_hardware("H200")


def _graph(m: int, bytes_each: float) -> OpGraph:
    k = Kernel(name="L0.copy", op="copy", category="mlp", layer=0, flops=0.0, dtype="bf16",
               tensor=False, act_reads=(("a", bytes_each / 2),), act_writes=(("b", bytes_each / 2),),
               ctas=1024)
    return OpGraph(kernels=(k,), edges=(), cross_edges=((0, 0),), num_regions=4, microbatches=m,
                   layers_per_region=1)


def test_hbm_floor_and_ceiling():
    g = _graph(1, 1e9)
    f = work_floor(g, H200)
    assert f["hbm_us"] == pytest.approx(4e9 / H200.hbm_read_Bps * 1e6)
    assert f["compute_us"] == 0.0 and f["floor_us"] == f["hbm_us"]
    c = overlap_ceiling(g, H200, 2 * f["floor_us"], _graph(2, 5e8))
    assert c["ceiling_speedup_m1"] == pytest.approx(2.0)
    assert c["ceiling_shorter_m1"] == pytest.approx(0.5)
    assert c["floor_m"]["floor_us"] == pytest.approx(f["floor_us"])  # 2 x 5e8 = 1e9 per region
    assert c["bound_m1"] == "hbm" and "at most 50% shorter" in describe(c)
    with pytest.raises(ValueError, match="temporal_us"):
        overlap_ceiling(g, H200, 0.0)


def test_describe_says_no_gain_when_the_microbatched_floor_is_above_temporal():
    """A new user read "at m=2 ... at most 0% (floor 19297 µs)" beside a 16,793 µs temporal step:
    the floor above temporal means no configuration at that m can win; the line says so."""
    c = {"temporal_us": 16793.0, "floor_m1": {"floor_us": 12000.0, "hbm_us": 12000.0,
                                              "compute_us": 3000.0, "comm_us": 0.0},
         "ceiling_shorter_m1": 1 - 12000 / 16793, "bound_m1": "hbm",
         "floor_m": {"floor_us": 19297.0}, "ceiling_shorter_m": 0.0, "microbatches": 2}
    line = describe(c)
    assert line.endswith("at m=2 (weights read per microbatch) no shorter than temporal: its "
                         "floor 19297 µs is above it")
    assert "at most 29% shorter than temporal (16793 µs)" in line
    c["floor_m"]["floor_us"], c["ceiling_shorter_m"] = 15000.0, 1 - 15000 / 16793
    assert describe(c).endswith("at most 11% (floor 15000 µs)")
