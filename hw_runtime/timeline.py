"""Measured timelines on the CPU: map profiled device activities of a graph replay onto the plan's
(task, op) launches, write them beside the simulated schedule as one Perfetto trace, and split the
makespan error into isolated kernel times, co-run slowdowns and gaps (pure Python, no torch).

Mapping (``map_activities``): inside one CUDA graph replay every launch lane (a stage's stream)
issues its device activities (kernels, memcpys, memsets) in plan order, and one launch of op i
issues ``counts[i]`` of them (``hw_runtime.gpu.profile.op_activity_names``, measured). Profiled
streams are matched to lanes by activity count, or, when the graph executor spread a lane over
several hardware streams, task by task by activity names (see ``map_activities``); one run of
activities is one op of one task, its interval [first start, last end].

Units: µs.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

__all__ = ["MappingError", "lanes_of_plan", "map_activities", "sim_intervals", "stage_busy",
           "category_residence", "error_breakdown", "trace_document"]


class MappingError(ValueError):
    """Profiled activities that cannot be matched to the plan's launches (counts differ)."""


def lanes_of_plan(plan, streams_per_stage: int = 1) -> dict[tuple[int, int], list]:
    """The launch lanes of ``plan``: ``(stage, substream) -> [(task, op), ...]`` in issue order.

    The substream is the task's lane within its stage (``PlanTask.lane`` = stage * k +
    substream, set by ``hw_runtime.plan`` from ``TaskDAG.lanes``).
    """
    lanes: dict[tuple[int, int], list] = defaultdict(list)
    for t in plan.tasks:
        j = t.lane - t.stage * streams_per_stage
        for op in t.kernels:
            lanes[(t.stage, j)].append((t, op))
    return dict(lanes)


def _count(c) -> int:
    return c if isinstance(c, int) else len(c)


#: Activities that may be missing at the ends of profiled streams (rule 2 of ``map_activities``).
MAX_TRUNCATED = 64


def map_activities(plan, activities: Sequence[dict], counts: Sequence,
                   streams_per_stage: int = 1) -> list[dict]:
    """Intervals of every (task, op) launch of ONE profiled replay of ``plan``.

    Two rules, the first that applies:

    1. *lanes*: every profiled stream matches one launch lane by its activity count (ties broken
       by the order of first activity); its activities are cut into consecutive runs of
       ``counts[op]`` in the lane's launch order.
    2. *task blocks* (the CUDA graph executor may replay one lane on several hardware streams,
       as seen with 2 streams per stage): each profiled stream is a sequence of whole tasks.
       Going through the streams' next unassigned activities in time order, each block is given
       to the earliest task in dispatch order whose data predecessors and lane predecessor are
       already placed and whose expected activity names (``counts`` given as name lists) match
       the stream's next activities. A stream whose last activities are missing (the profiler
       has dropped the tail of a long replay: the last ~6 of ~1,900 per stream at G = 2,048 on
       the H200) ends with the prefix of a task's names; that task is mapped with the
       activities there are, up to ``MAX_TRUNCATED`` missing in all.

    Args:
        plan: the ``LaunchPlan`` that was captured.
        activities: ``{"stream", "start_us", "dur_us", "name"}`` of one replay (any order).
        counts: per op of the region, its activity count, or the list of its activity names
            (``Executor.activity_counts``; rule 2 needs names).
        streams_per_stage: k.

    Returns:
        one dict per launch: ``task, op, stage, lane, region, microbatch, segment, start_us,
        end_us, activities`` (kernel names), sorted by start.

    Raises:
        MappingError: neither rule maps the activities (one line with the counts).
    """
    lanes = lanes_of_plan(plan, streams_per_stage)
    need = {ln: sum(_count(counts[op]) for _, op in seq) for ln, seq in lanes.items()}
    by_stream: dict[int, list[dict]] = defaultdict(list)
    for a in activities:
        by_stream[int(a["stream"])].append(a)
    for st in by_stream.values():
        st.sort(key=lambda a: a["start_us"])
    streams = sorted(by_stream, key=lambda st: by_stream[st][0]["start_us"])
    lane_order = sorted(lanes, key=lambda ln: lanes[ln][0][0].index)
    assign: dict[tuple[int, int], int] = {}
    free = list(streams)
    for ln in lane_order:
        hit = next((st for st in free if len(by_stream[st]) == need[ln]), None)
        if hit is None:
            break
        assign[ln] = hit
        free.remove(hit)
    if len(assign) == len(lanes) and not free:
        out = []
        for ln, seq in lanes.items():
            acts = by_stream[assign[ln]]
            pos = 0
            for t, op in seq:
                c = _count(counts[op])
                out.append(_launch(t, op, ln[1], acts[pos:pos + c]))
                pos += c
        out = [r for r in out if r is not None]
        out.sort(key=lambda r: r["start_us"])
        return out
    if not all(isinstance(c, (list, tuple)) for c in counts):
        have = {st: len(by_stream[st]) for st in streams}
        raise MappingError(f"trace mapping: lanes need {sorted(need.values())} activities, "
                           f"profiled streams have {sorted(have.values())} (task-block matching "
                           f"needs activity names)")
    return _map_blocks(plan, by_stream, counts, streams_per_stage)


def _launch(t, op: int, lane: int, run: Sequence[dict]) -> dict | None:
    if not run:
        return None
    return {"task": t.index, "op": op, "stage": t.stage, "lane": lane, "region": t.region,
            "microbatch": t.microbatch, "segment": t.segment,
            "start_us": min(a["start_us"] for a in run),
            "end_us": max(a["start_us"] + a["dur_us"] for a in run),
            "activities": [a["name"][:80] for a in run]}


def _norm(name: str) -> str:
    """Activity name for matching: copies and sets are named differently inside CUDA graphs
    (a copy kernel eagerly, a memcpy node in a graph), so they match by kind only."""
    low = name.lower()
    if "memcpy" in low or "copy" in low and "kernel" not in low:
        return "memcpy"
    if "memset" in low:
        return "memset"
    return name


def _map_blocks(plan, by_stream: dict, names: Sequence[Sequence[str]],
                streams_per_stage: int) -> list[dict]:
    """Rule 2 of ``map_activities``."""
    tasks = plan.tasks
    sig = [tuple(_norm(n) for op in t.kernels for n in names[op]) for t in tasks]
    lane_prev: dict[int, int] = {}
    prev_of = [-1] * len(tasks)
    for t in tasks:
        prev_of[t.index] = lane_prev.get(t.lane, -1)
        lane_prev[t.lane] = t.index
    placed = [False] * len(tasks)
    truncated = [0]       # activities missing at the ends of streams (profiler losses)
    cursor = {st: 0 for st in by_stream}
    out: list[dict] = []
    left = len(tasks)
    while left:
        live = [st for st in by_stream if cursor[st] < len(by_stream[st])]
        if not live:
            break
        st = min(live, key=lambda x: by_stream[x][cursor[x]]["start_us"])
        acts = by_stream[st]
        pos = cursor[st]
        nxt = tuple(_norm(a["name"]) for a in acts[pos:pos + 4096])
        hit = None
        for t in tasks:
            if placed[t.index] or (prev_of[t.index] >= 0 and not placed[prev_of[t.index]]):
                continue
            if any(not placed[j] for j in t.data_preds):
                continue
            s_ = sig[t.index]
            if nxt[:len(s_)] == s_:
                hit = t
                break
        if hit is None:   # the stream's last activities lost by the profiler: a prefix
            for t in tasks:
                if placed[t.index] or (prev_of[t.index] >= 0 and not placed[prev_of[t.index]]) \
                        or any(not placed[j] for j in t.data_preds):
                    continue
                s_ = sig[t.index]
                if len(nxt) < len(s_) and s_[:len(nxt)] == nxt:
                    hit, truncated[0] = t, truncated[0] + len(s_) - len(nxt)
                    break
        if hit is None:
            raise MappingError(f"trace mapping: no ready task matches the activities of stream "
                               f"{st} at position {pos} ({nxt[0][:40] if nxt else '-'}...)")
        placed[hit.index] = True
        left -= 1
        p = pos
        for op in hit.kernels:
            c = len(names[op])
            r = _launch(hit, op, hit.lane % streams_per_stage, acts[p:min(p + c, len(acts))])
            if r is not None:
                out.append(r)
            p += c
        cursor[st] = min(p, len(acts))
    if left:
        raise MappingError(f"trace mapping: {left} tasks left without activities")
    if truncated[0] > MAX_TRUNCATED:
        raise MappingError(f"trace mapping: {truncated[0]} activities missing at the ends of "
                           f"streams (more than {MAX_TRUNCATED})")
    out.sort(key=lambda r: r["start_us"])
    return out


def sim_intervals(sim) -> list[dict]:
    """The kernel instances of an event-simulator result (``SimResult`` with its task DAG) in
    the form of ``map_activities``: ``task, op, stage, region, microbatch, segment, start_us,
    end_us``."""
    dag = sim.dag
    out = []
    for i in range(len(sim.kernel_start)):
        t = int(sim.kernel_task[i])
        out.append({"task": t, "op": int(sim.kernel_index[i]), "stage": int(sim.kernel_stage[i]),
                    "lane": 0, "region": int(sim.kernel_region[i]),
                    "microbatch": int(sim.kernel_mb[i]),
                    "segment": int(dag.seg[t]) if dag is not None else 0,
                    "start_us": float(sim.kernel_start[i]), "end_us": float(sim.kernel_end[i])})
    out.sort(key=lambda r: r["start_us"])
    return out


def stage_busy(intervals: Sequence[dict], D: int) -> list[dict]:
    """Per stage: busy µs (union of its launch intervals), first start, last end, idle µs.

    Args:
        intervals: from ``map_activities`` (or the simulator's in the same form).
        D: stages.

    Returns:
        D dicts ``{"stage", "busy_us", "span_us", "idle_us"}``; span = last end - first start of
        the whole pass, idle = span - busy.
    """
    if not intervals:
        return [{"stage": d, "busy_us": 0.0, "span_us": 0.0, "idle_us": 0.0} for d in range(D)]
    t0 = min(r["start_us"] for r in intervals)
    t1 = max(r["end_us"] for r in intervals)
    out = []
    for d in range(D):
        iv = sorted((r["start_us"], r["end_us"]) for r in intervals if r["stage"] == d)
        busy, cur_s, cur_e = 0.0, None, None
        for s, e in iv:
            if cur_e is None or s > cur_e:
                if cur_e is not None:
                    busy += cur_e - cur_s
                cur_s, cur_e = s, e
            else:
                cur_e = max(cur_e, e)
        if cur_e is not None:
            busy += cur_e - cur_s
        out.append({"stage": d, "busy_us": busy, "span_us": t1 - t0, "idle_us": t1 - t0 - busy})
    return out


def category_residence(intervals: Sequence[dict], graph) -> dict[str, float]:
    """Sum of launch durations per kernel category (µs) of ``graph``'s ops."""
    out: dict[str, float] = defaultdict(float)
    for r in intervals:
        out[graph.kernels[r["op"]].category] += r["end_us"] - r["start_us"]
    return dict(out)


def error_breakdown(measured: dict, simulated: dict, isolated_measured_us: Sequence[float],
                    isolated_model_us: Sequence[float]) -> dict:
    """Split ``simulated makespan - measured makespan`` on the measured bottleneck stage.

    With, for stage d, busy_x(d) (union of launch intervals), gap_x(d) = makespan_x - busy_x(d)
    and iso_x(d) the sum of the isolated times of its launches at its pool size (x = measured:
    the calibration tables; x = model: the model's lone-kernel times), on the stage b with the
    largest measured busy time:

        P - M = (iso_model(b) - iso_meas(b))                         isolated kernel times
              + ((busy_sim(b) - iso_model(b)) - (busy_meas(b) - iso_meas(b)))   co-run slowdowns
              + (gap_sim(b) - gap_meas(b))                             gaps (launches, waits,
                                                                       dependency bubbles)

    which adds up exactly (each term in µs and as a fraction of M).

    Args:
        measured, simulated: ``{"makespan_us", "busy_us": [per stage]}``.
        isolated_measured_us, isolated_model_us: per stage sums (µs).

    Returns:
        ``{"stage", "isolated_us", "corun_us", "gaps_us", "total_us", and *_frac}``.
    """
    M, P = float(measured["makespan_us"]), float(simulated["makespan_us"])
    bm, bs = measured["busy_us"], simulated["busy_us"]
    b = max(range(len(bm)), key=lambda d: bm[d])
    iso = isolated_model_us[b] - isolated_measured_us[b]
    cor = (bs[b] - isolated_model_us[b]) - (bm[b] - isolated_measured_us[b])
    gap = (P - bs[b]) - (M - bm[b])
    out = {"stage": b, "isolated_us": iso, "corun_us": cor, "gaps_us": gap, "total_us": P - M}
    for k in ("isolated", "corun", "gaps", "total"):
        out[f"{k}_frac"] = out[f"{k}_us"] / M if M else 0.0
    return out


def trace_document(processes: Sequence[tuple[str, Sequence[dict], object]]) -> dict:
    """A Chrome/Perfetto trace with one process per timeline (the workflow writes it: the core
    writes no file).

    Args:
        processes: ``(label, intervals, graph)``: intervals as ``map_activities`` returns them
            (``stage``, ``op``, ``start_us``, ``end_us``, ``region``, ``microbatch``,
            ``segment``); one track per stage, slices named by the op's kernel name.

    Returns:
        ``{"traceEvents": [...], "displayTimeUnit": "ns"}`` (times in µs).
    """
    ev = []
    for pid, (label, intervals, graph) in enumerate(processes, start=1):
        ev.append({"ph": "M", "pid": pid, "name": "process_name", "args": {"name": label}})
        ev.append({"ph": "M", "pid": pid, "name": "process_sort_index", "args": {"sort_index": pid}})
        stages = sorted({r["stage"] for r in intervals})
        for s in stages:
            ev.append({"ph": "M", "pid": pid, "tid": s, "name": "thread_name",
                       "args": {"name": f"stage {s}"}})
        t0 = min((r["start_us"] for r in intervals), default=0.0)
        for r in intervals:
            k = graph.kernels[r["op"]]
            ev.append({"ph": "X", "pid": pid, "tid": r["stage"], "name": k.name,
                       "cat": k.category, "ts": r["start_us"] - t0,
                       "dur": max(0.0, r["end_us"] - r["start_us"]),
                       "args": {"kernel": k.name, "category": k.category, "layer": k.layer,
                                "region": r.get("region"), "microbatch": r.get("microbatch"),
                                "segment": r.get("segment"), "stage": r["stage"]}})
    return {"traceEvents": ev, "displayTimeUnit": "ns"}
