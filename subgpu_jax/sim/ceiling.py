"""The overlap ceiling: how much shorter a decode step could be if every kernel's work overlapped
perfectly with every other's (docs/fidelity.md).

A forward pass must at least move its HBM bytes at the achievable HBM bandwidth, do its FLOPs at
the achievable tensor (or CUDA-core) rate and push its collective payload over NVLink; with
perfect overlap it takes the largest of the three. SubGPU pipelining can at best bring the
temporal baseline down to that floor, and microbatching raises the floor (every microbatch
reads the weights again). ``overlap_ceiling`` compares a temporal makespan (measured or
simulated) with the floor at m = 1 and at the microbatch count of a configuration.

Units: µs, bytes, FLOPs.
"""

from __future__ import annotations

from subgpu_jax.model.graph import OpGraph
from subgpu_jax.model.hardware import Hardware

__all__ = ["work_floor", "overlap_ceiling"]


def work_floor(graph: OpGraph, hw: Hardware) -> dict:
    """Work of one forward pass of ``graph`` (all region instances, all microbatches) and the
    time each resource needs for it alone.

    Args:
        graph: the region graph (built for m microbatches; its kernels carry the work of ONE
            microbatch, weights read by each).
        hw: the GPU: ``hbm_read_Bps`` (achievable HBM read bandwidth), ``flops_rate(dtype)`` for
            tensor work and bf16 / 16 for CUDA-core work (the static duration model's rates),
            ``nvlink_Bps`` (source: the preset's documented datasheet or measured figures).

    Returns:
        ``{"hbm_bytes", "flops", "comm_bytes", "hbm_us", "compute_us", "comm_us", "floor_us"}``.
    """
    reps = graph.num_regions * graph.microbatches
    by = fl_us = fl = cb = 0.0
    for k in graph.kernels:
        by += k.hbm_bytes
        fl += k.flops
        rate = hw.flops_rate(k.dtype) if k.tensor else hw.tensor_flops["bf16"] / 16.0
        fl_us += k.flops / rate * 1e6
        cb += k.comm_bytes
    hbm_us = by * reps / hw.hbm_read_Bps * 1e6
    comp_us = fl_us * reps
    comm_us = cb * reps / hw.nvlink_Bps * 1e6
    return {"hbm_bytes": by * reps, "flops": fl * reps, "comm_bytes": cb * reps,
            "hbm_us": hbm_us, "compute_us": comp_us, "comm_us": comm_us,
            "floor_us": max(hbm_us, comp_us, comm_us)}


def overlap_ceiling(graph1: OpGraph, hw: Hardware, temporal_us: float,
                    graph_m: OpGraph | None = None) -> dict:
    """The best speedup perfect overlap could give over a temporal makespan.

    Args:
        graph1: the region graph at m = 1 (the temporal baseline's work).
        hw: the GPU (see ``work_floor``).
        temporal_us: the temporal makespan (µs), measured or simulated, > 0.
        graph_m: the graph at the configuration's microbatch count (None: m = 1 only).

    Returns:
        ``{"temporal_us", "floor_m1": work_floor(graph1), "ceiling_speedup_m1",
        "ceiling_shorter_m1" (fraction), "bound_m1" ("hbm"/"compute"/"comm")}`` and, with
        ``graph_m``, the same keys for m (``*_m``), plus ``"microbatches"``.

    Raises:
        ValueError: ``temporal_us`` not > 0.
    """
    if not temporal_us > 0:
        raise ValueError(f"temporal_us must be > 0, got {temporal_us!r}")
    out: dict = {"temporal_us": float(temporal_us)}
    for tag, g in (("m1", graph1), ("m", graph_m)):
        if g is None:
            continue
        f = work_floor(g, hw)
        out[f"floor_{tag}"] = f
        out[f"ceiling_speedup_{tag}"] = temporal_us / f["floor_us"]
        out[f"ceiling_shorter_{tag}"] = max(0.0, 1.0 - f["floor_us"] / temporal_us)
        out[f"bound_{tag}"] = max(("hbm", "compute", "comm"), key=lambda r: f[f"{r}_us"])
    if graph_m is not None:
        out["microbatches"] = graph_m.microbatches
    return out


def describe(c: dict) -> str:
    """One line for the CLI: 'ceiling: at most x% shorter with perfect overlap ...'."""
    f = c["floor_m1"]
    s = (f"ceiling: at most {c['ceiling_shorter_m1']:.0%} shorter than temporal "
         f"({c['temporal_us']:.0f} µs) with perfect overlap at m=1 (floor {f['floor_us']:.0f} "
         f"µs, {c['bound_m1']}-bound: HBM {f['hbm_us']:.0f}, compute {f['compute_us']:.0f}, "
         f"NVLink {f['comm_us']:.0f} µs)")
    if "floor_m" in c:
        fm = c["floor_m"]["floor_us"]
        if fm >= c["temporal_us"]:   # no overlap can win: say so rather than "at most 0%"
            s += (f"; at m={c['microbatches']} (weights read per microbatch) no shorter than "
                  f"temporal: its floor {fm:.0f} µs is above it")
        else:
            s += (f"; at m={c['microbatches']} (weights read per microbatch) at most "
                  f"{c['ceiling_shorter_m']:.0%} (floor {fm:.0f} µs)")
    return s


__all__ += ["describe"]
