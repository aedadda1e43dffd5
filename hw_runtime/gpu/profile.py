"""Measured timelines of CUDA-graph replays through torch.profiler (Kineto/CUPTI) (needs a GPU).

``op_activity_counts(wl)`` counts the device activities (kernels, memcpys, memsets) that one
launch of each op of the region issues, by profiling each op alone; ``profile_replays(ex, cfg,
mode)`` captures the configuration's forward pass as a CUDA graph (``Executor.capture``), replays
it under the profiler and returns every device activity with its stream, start and duration.
``hw_runtime.timeline.map_activities`` (CPU) then maps the activities of each stream, in order,
onto the plan's (task, op) launches of that stream, using the counts.

Units: µs (activity timestamps relative to the first activity of the profiled replay).
"""

from __future__ import annotations

_DEVICE_KINDS = ("kernel", "gpu_memcpy", "gpu_memset")


def _device_events(prof) -> list[dict]:
    """Device activities of a finished ``torch.profiler.profile`` as plain dicts, sorted by start.

    Each: ``{"name", "kind", "stream", "start_us", "dur_us"}``.
    """
    out = []
    for e in prof.events():
        dt = getattr(e, "device_type", None)
        if dt is None or "CUDA" not in str(dt):
            continue
        kind = str(getattr(e, "kind", "")) if hasattr(e, "kind") else ""
        tr = e.time_range
        out.append({"name": e.name, "stream": int(getattr(e, "device_resource_id", 0) or 0),
                    "start_us": float(tr.start), "dur_us": float(tr.end - tr.start),
                    "kind": kind})
    out.sort(key=lambda d: d["start_us"])
    return out


def _kineto_events(prof) -> list[dict]:
    """Device activities read from the Kineto trace (stream ids are reliable there)."""
    import json
    import os
    import tempfile

    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as fh:
            tr = json.load(fh)
    finally:
        os.unlink(path)
    out = []
    for e in tr.get("traceEvents", []):
        cat = str(e.get("cat", "")).lower()
        if e.get("ph") != "X" or cat not in _DEVICE_KINDS:
            continue
        args = e.get("args", {}) or {}
        out.append({"name": e.get("name", ""), "kind": cat,
                    "stream": int(args.get("stream", e.get("tid", 0)) or 0),
                    "start_us": float(e["ts"]), "dur_us": float(e.get("dur", 0.0))})
    out.sort(key=lambda d: (d["start_us"], d["stream"]))
    return out


def op_activity_counts(wl, microbatch: int = 0, region: int = 0) -> list[int]:
    """Device activities one launch of each op of ``wl.graph`` issues (profiled eagerly, alone).

    Args:
        wl: a CUDA ``TorchWorkload``.

    Returns:
        list of n ints (one per op of the region, in graph order).
    """
    return [len(x) for x in op_activity_names(wl, microbatch, region)]


def op_activity_names(wl, microbatch: int = 0, region: int = 0, gemm=None,
                      sms_of=None) -> list[list[str]]:
    """Names of the device activities one launch of each op issues, in order (profiled eagerly,
    alone; the same kernels run inside the CUDA graph).

    Args:
        gemm: the ``hw_runtime.gpu.blas.GemmPolicy`` the graph was captured with (None: stock);
        sms_of: (n,) SMs of the pool each op runs on (None entries or None: the whole GPU), so
            each op is launched with the GEMM plan it has in the graph (a GEMM planned for a
            pool may issue another number of kernels, e.g. a split-K reduction) and issued with
            that pool as its ``sms`` (a pool-sized decode attention's KV split); every launch
            is issued as lane 0.

    Returns:
        n lists of activity names (kernel names, memcpy/memset labels).
    """
    import torch
    from torch.profiler import ProfilerActivity, profile

    def sms(i: int) -> int | None:
        return None if sms_of is None else sms_of[i]

    def prep(i: int) -> None:
        if gemm is not None and gemm.active:
            from subgpu_jax.model.calibration import kernel_key
            gemm.prepare(kernel_key(wl.graph.kernels[i]), sms(i),
                         lambda: wl.launch(i, microbatch, region, sms=sms(i)), s)

    counts = []
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        for i in range(wl.n):          # warm every op first (handles, kernel choice)
            prep(i)
            wl.launch(i, microbatch, region, sms=sms(i))
    torch.cuda.synchronize()
    try:
        for i in range(wl.n):
            prep(i)
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                with torch.cuda.stream(s):
                    wl.launch(i, microbatch, region, sms=sms(i))
                torch.cuda.synchronize()
            counts.append([a["name"] for a in _kineto_events(prof)])
    finally:
        if gemm is not None:
            gemm.reset()
    return counts


def profile_replays(ex, cfg, mode: str = "green", replays: int = 2, warmup: int = 3,
                    streams_per_stage: int | None = None) -> dict:
    """Device activities of ``replays`` graph replays of ``cfg`` (after ``warmup`` replays).

    Args:
        ex: an ``Executor``. cfg: the Config. mode: ``green``, ``multistream`` or ``temporal``.
        streams_per_stage: k streams per stage (default the Config's, else 1).

    Returns:
        ``{"activities": [...], "streams": [stream id of stage d's stream (one list per stage)],
        "replays", "plan": LaunchPlan.summary(), "replay_bounds_us": [[start, end], ...]}``;
        activity times in µs relative to the first activity.

    Raises:
        ValueError: as ``Executor.measure``.
    """
    import torch
    from torch.profiler import ProfilerActivity, profile

    plan = ex.plan(cfg, streams_per_stage)
    streams, part = ex.stage_streams(cfg, mode, plan.streams_per_stage)
    try:
        g, nodes, _ = ex.capture(plan, streams)
        s0 = streams[0]
        with torch.cuda.stream(s0):
            for _ in range(warmup):
                g.replay()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            with torch.cuda.stream(s0):
                for _ in range(replays):
                    g.replay()
            torch.cuda.synchronize()
        acts = _kineto_events(prof)
        del g
    finally:
        if part is not None:
            torch.cuda.synchronize()
            part.close()
    t0 = acts[0]["start_us"] if acts else 0.0
    for a in acts:
        a["start_us"] -= t0
    return {"activities": acts, "replays": replays, "plan": plan.summary(),
            "stream_handles": [int(getattr(s, "cuda_stream", 0)) for s in streams],
            "graph_nodes": nodes}
