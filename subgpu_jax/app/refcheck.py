"""The event simulator's check of a search made with a timer other than itself (issue 42): the
batched contention timer (``--exact vcontention``) or the static evaluator decide the search; the
event simulator, the reference, re-scores the best records and the disagreement is written to
``summary.json`` (``reference_check``) and printed (``app.searchtext``).

Units: µs.
"""

from __future__ import annotations

from typing import Sequence

from subgpu_jax.model.generation import search_step
from subgpu_jax.model.graph import Deployment
from subgpu_jax.sim.periodic import FORWARD_TOL
from subgpu_jax.space.config import Config

__all__ = ["best_per_point", "reference_check", "engine_check", "screen_check"]


def best_per_point(records: Sequence[dict]) -> dict:
    """``{(global batch, attention TP, DP, mode): record}``: the record of highest speedup over
    temporal at each (batch, TPxDP) point and mode (the checks' sample)."""
    best: dict = {}
    for r in records:
        k = (int(r["global_batch"]), int(r["attn_tp"]), int(r["attn_dp"]), r["mode"])
        if k not in best or r["speedup_vs_temporal"] > best[k]["speedup_vs_temporal"]:
            best[k] = r
    return best


def reference_check(scorer, records: Sequence[dict]) -> dict:
    """The event simulator's check of a search made with another timer (``scorer``: the
    search's ``app.searchjob.PointScorer``, whose ``timer`` is not the reference): the best record of each (global batch, attention TP, DP), SubGPU and
    temporal, re-scored by the event simulator (its region makespan, at the step the search
    scored), beside the timer's.

    Returns:
        ``{"timer", "reference", "rows": [{"global_batch", "attn_tp", "attn_dp", "mode",
        "region_us", "reference_region_us", "error"}], "median_abs_error",
        "max_abs_error", "checked", "tolerance"}`` with error = timer / event simulator - 1;
        the median and maximum over the SubGPU rows (``checked`` of them; temporal rows are
        the event simulator's own under a contention timer), None when no SubGPU row; ``tolerance``
        the timer's ``TOLERANCE`` (None without one: ``Timer.TOLERANCE``).
    """
    import statistics

    best = best_per_point(records)
    rows = []
    for k in sorted(best):
        r = best[k]
        dep = search_step(Deployment.from_record(r))
        p = scorer.problem(dep)
        cfg = Config.from_record(r, p.workload.graph(1))
        ref = scorer.event.time(p.workload.graph(int(r["microbatches"])), cfg).makespan_us
        rows.append({"global_batch": k[0], "attn_tp": k[1], "attn_dp": k[2], "mode": k[3],
                     "region_us": float(r["region_makespan_us"]),
                     "reference_region_us": float(ref),
                     "error": float(r["region_makespan_us"]) / float(ref) - 1.0})
    # the statistics over the SubGPU rows: a temporal record (D = 1) is the event simulator's
    # own number under every contention timer, so its zero error would halve the median
    errs = [abs(x["error"]) for x in rows if x["mode"] == "subgpu"]
    return {"timer": scorer.timer.describe(), "reference": scorer.event.describe(),
            "rows": rows, "median_abs_error": statistics.median(errs) if errs else None,
            "max_abs_error": max(errs) if errs else None,
            "checked": sum(x["mode"] == "subgpu" for x in rows),
            "tolerance": scorer.timer.TOLERANCE}


def engine_check(scorer, records: Sequence[dict]) -> dict | None:
    """The event simulator's check of its own compiled engine (``score.timer.EventTimer`` with
    ``engine`` ``compiled``: a search's exact steps ran in ``sim.batchednb``, each record's
    numbers come from the Python simulator's re-simulation of its configuration): the best
    SubGPU record of each (global batch, attention TP, DP) timed again by the engine, beside the
    record's region makespan. The engine equals the full simulation bit for bit and the record's
    periodic fast-forward is within ``sim.periodic.FORWARD_TOL`` of it, so an error above that
    ``tolerance`` is a bug (the search prints a warning).

    Returns:
        ``{"engine", "reference", "rows": [{"global_batch", "attn_tp", "attn_dp",
        "engine_region_us", "region_us", "error"}], "median_abs_error", "max_abs_error",
        "checked", "tolerance"}`` with error = engine / simulator - 1, or None when the search's event
        timer has no compiled engine or no SubGPU record of a structure the engine covers
        (several streams per stage and multistream are the Python simulator's alone).
    """
    import statistics

    import numpy as np

    ev = scorer.event
    if not ev.compiled or scorer.timer is not ev:
        return None
    best = {k[:3]: r for k, r in best_per_point(records).items() if k[3] == "subgpu"}
    if not best:
        return None
    rows = []
    for k in sorted(best):
        r = best[k]
        p = scorer.problem(search_step(Deployment.from_record(r)))
        cfg = Config.from_record(r, p.workload.graph(1))
        g = p.workload.graph(int(r["microbatches"]))
        if ev.batches.structure(g, cfg) is None:    # not the engine's (shared pools): skipped
            continue
        got = float(ev.time_allocs(g, cfg, np.asarray([cfg.alloc]))[0])
        ref = float(r["region_makespan_us"])
        rows.append({"global_batch": k[0], "attn_tp": k[1], "attn_dp": k[2],
                     "engine_region_us": got, "region_us": ref, "error": got / ref - 1.0})
    if not rows:
        return None
    errs = [abs(x["error"]) for x in rows]
    return {"engine": "compiled (sim.batchednb)", "reference": ev.describe(), "rows": rows,
            "median_abs_error": statistics.median(errs), "max_abs_error": max(errs),
            "checked": len(rows), "tolerance": FORWARD_TOL}


def screen_check(records: Sequence[dict]) -> dict | None:
    """What the screen of a screened search (``--exact screened``) did: over its SubGPU records,
    the screen's region makespan of each chosen configuration (``screen_region_us``) against the
    event simulator's (``region_makespan_us``, the record's own), and the simulations it cost.

    Returns:
        ``{"points", "median_abs_error", "max_abs_error", "screen_calls", "confirm_calls",
        "screen_best_kept"}`` (error = screen / event simulator - 1; ``screen_calls`` the
        screen's distinct configurations, ``confirm_calls`` the event simulator's;
        ``screen_best_kept`` the points whose record is the screen's own best before the
        final polish, ``screen_rank`` 0), or None without such records.
    """
    import statistics

    rows = [r for r in records if r.get("mode") == "subgpu"
            and r.get("screen_region_us") not in (None, "")]
    if not rows:
        return None
    errs = [abs(float(r["screen_region_us"]) / float(r["region_makespan_us"]) - 1) for r in rows]
    return {"points": len(rows), "median_abs_error": statistics.median(errs),
            "max_abs_error": max(errs),
            "screen_calls": sum(int(r["exact_calls"]) for r in rows),
            "confirm_calls": sum(int(r["confirm_calls"]) for r in rows),
            "screen_best_kept": sum(int(r["screen_rank"]) == 0 for r in rows)}
