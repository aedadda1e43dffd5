"""Timing a ``TorchWorkload``'s kernels alone (``time_kernels``: the calibration's and the
probes' protocol) and counting a captured CUDA graph's nodes (``graph_nodes``). Split out of
``hw_runtime.gpu.workload``."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from hw_runtime.gpu.workload import TorchWorkload

def graph_nodes(g) -> int | None:
    """Nodes (kernels, memcpys, memsets) of a captured, not yet instantiated CUDA graph."""
    try:
        from cuda.bindings import driver as drv
        h = g.raw_cuda_graph()
        r = drv.cuGraphGetNodes(drv.CUgraph(int(h)), 0)
        return int(r[-1]) if r[0] == drv.CUresult.CUDA_SUCCESS else None
    except Exception:  # counting is informative only
        return None


def time_kernels(wl: "TorchWorkload", kernels: Sequence[int] | None = None, microbatch: int = 0,
                 reps: int = 25, warmup: int = 3, rotate: int | None = None, stream=None,
                 use_graphs: bool = True, gemm=None, sms: int | None = None) -> list[dict]:
    """Time kernels one at a time with CUDA events (each kernel alone on ``stream``).

    Each measurement runs the kernel once for each of ``rotate`` region instances (different
    weights/KV, so repeated runs do not find their data in L2), captured in one CUDA graph (no
    host launch gaps) when ``use_graphs``; per-launch time = replay time / ``rotate``; the median
    over ``reps`` replays is reported.

    Args:
        gemm: a ``hw_runtime.gpu.blas.GemmPolicy`` (None: stock); sms: SMs of ``stream``'s pool
            (a count; None: the whole GPU), so a ``pool`` policy plans the GEMMs for that pool
            and the pool-sized decode attentions size their KV split for it; every launch is
            issued as lane 0.

    Returns:
        one dict per kernel: ``kernel_info`` plus ``us`` (median), ``us_min``, ``us_max``,
        ``GBps`` (graph hbm_bytes / time), ``kv_GBps``, ``TFLOPs``, ``launches``, and
        ``graph_nodes_per_launch`` (CUDA kernels/copies one launch of the op issues; None if
        cuda-bindings cannot count them).
    """
    t = wl.torch
    if not wl.is_cuda:
        raise ValueError("time_kernels needs a CUDA workload")
    s = stream if stream is not None else t.cuda.Stream(device=wl.device)
    # pool-sized kernels (the decode attentions) size their split for this pool, lane 0
    if gemm is None or not gemm.active:
        return _time_kernels(wl, kernels, microbatch, reps, warmup, rotate, s, use_graphs,
                             sms=sms)
    from subgpu_jax.model.calibration import kernel_key

    def before(i: int) -> None:
        gemm.prepare(kernel_key(wl.graph.kernels[i]), sms,
                     lambda: wl.launch(i, microbatch, 0, sms=sms), s)
    try:
        return _time_kernels(wl, kernels, microbatch, reps, warmup, rotate, s, use_graphs,
                             before, sms)
    finally:
        gemm.reset()


def _time_kernels(wl, kernels, microbatch, reps, warmup, rotate, s, use_graphs, before=None,
                  sms=None) -> list[dict]:
    t = wl.torch
    nrot = min(wl.graph.num_regions, rotate or wl.instances)
    ids = list(range(wl.n)) if kernels is None else [wl.graph.index(k) for k in kernels]
    pool = t.cuda.graph_pool_handle() if use_graphs else None
    out = []
    # Warm every kernel (cuBLAS handles, SDPA backend choice) before any capture.
    with t.cuda.stream(s):
        for i in ids:
            if before is not None:
                before(i)
            for l in range(nrot):
                wl.launch(i, microbatch, l, sms=sms)
    s.synchronize()
    for i in ids:
        times = []
        if before is not None:
            before(i)
        with t.cuda.stream(s):
            nodes = None
            if use_graphs:
                g = t.cuda.CUDAGraph(keep_graph=True)
                with t.cuda.graph(g, stream=s, pool=pool):
                    for l in range(nrot):
                        wl.launch(i, microbatch, l, sms=sms)
                nodes = graph_nodes(g)
                g.instantiate()
                run = g.replay
            else:
                def run(i=i):
                    for l in range(nrot):
                        wl.launch(i, microbatch, l, sms=sms)
            for _ in range(warmup):
                run()
            evs = []
            for _ in range(reps):
                e0, e1 = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)
                e0.record(s)
                run()
                e1.record(s)
                evs.append((e0, e1))
        s.synchronize()
        times = [a.elapsed_time(b) * 1000.0 / nrot for a, b in evs]
        if use_graphs:
            del g
        info = wl.kernel_info(i)
        us = statistics.median(times)
        info.update(us=us, us_min=min(times), us_max=max(times), launches=nrot, reps=reps,
                    graph_nodes_per_launch=None if nodes is None else nodes / nrot,
                    GBps=info["hbm_bytes"] / us / 1e3,
                    kv_GBps=info["kv_bytes"] / us / 1e3 if info["kv_bytes"] else 0.0,
                    TFLOPs=info["flops"] / us / 1e6)
        out.append(info)
    return out
