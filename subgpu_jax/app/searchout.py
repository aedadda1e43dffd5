"""The outputs of a search job (``write_outputs``): records.csv, summary.json (frontiers,
matched-gain tables, best configurations, verdicts, the scorers' checks) and the figures, from
the store's records and the sweep's ``app.searchjob.PointScorer``."""

from __future__ import annotations

import csv
import json
import os
from typing import TYPE_CHECKING, Sequence

from subgpu_jax.model.deployment import Deployment
from subgpu_jax.model.generation import search_step
from subgpu_jax.model.kernelcost import ANALYTIC_MODEL, analytic_model_of
from subgpu_jax.app.report import best_by_batch, frontiers, matched_tables, write_search_figures
from subgpu_jax.app.store import atomic_write
from subgpu_jax.score.step import time_step
from subgpu_jax.search.strategies import meta_of
from subgpu_jax.space.config import Config

if TYPE_CHECKING:
    from subgpu_jax.app.searchjob import PointScorer

__all__ = ["write_outputs", "OUTPUT_FILES"]

#: The files a search job writes into its results folder (``SweepStore``: the manifest and the
#: record store; ``write_outputs``: the table, the summary and the figures).
OUTPUT_FILES = ("records.jsonl", "records.csv", "summary.json", "manifest.json", "frontier.png",
                "frontier_by_stages.png", "gantt_best.png")


def _write_records_csv(recs: list[dict], folder: str) -> None:
    """Write every record into ``folder``'s records.csv: the identifying and headline columns
    first, the others sorted."""
    import io

    cols = sorted({k for r in recs for k in r})
    first = ["mode", "model", "hardware", "num_gpus", "attn_tp", "attn_dp", "moe_ep",
             "global_batch", "D", "w", "microbatches", "policy", "cuts", "sms",
             "makespan_us", "per_user_tok_s", "per_gpu_tok_s", "speedup_vs_temporal"]
    cols = [c for c in first if c in cols] + [c for c in cols if c not in first]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols)
    w.writeheader()
    for r in recs:
        w.writerow(r)
    atomic_write(os.path.join(folder, "records.csv"), buf.getvalue())


def _verdicts(scorer: PointScorer, sub: list[dict]) -> list[dict]:
    """``modes.batch_verdicts`` of the best SubGPU record of each (batch, attention TP, DP)
    among ``sub``, in that order, on the step each was searched at."""
    from subgpu_jax.app.modes import batch_verdicts
    top: dict = {}
    for r in sub:   # the best SubGPU record of each (batch, attention TP, DP), as best_by_batch
        k = (int(r["global_batch"]), int(r["attn_tp"]), int(r["attn_dp"]))
        if k not in top or r["speedup_vs_temporal"] > top[k]["speedup_vs_temporal"]:
            top[k] = r
    entries = []
    for k in sorted(top):
        dep = search_step(Deployment.from_record(top[k]))  # a generation's searched step
        entries.append((top[k], dep, Config.from_record(top[k],
                                                   scorer.problem(dep).workload.graph(1))))
    return batch_verdicts(entries, scorer.arch, scorer.hw, scorer.model,
                          scorer.cache, scorer.calibration is not None,
                          reuse_subgpu=scorer.timer.reference)


def _add_checks(summary: dict, scorer: PointScorer, recs: list[dict]) -> None:
    """Add to ``summary`` the checks that apply to ``scorer``: the event simulator's check of
    a non-reference scorer (``reference_check``), the compiled engine's of the reference
    (``engine_check``, when it ran) and the screen's (``screen_check``)."""
    from subgpu_jax.app.refcheck import engine_check, reference_check, screen_check

    if not scorer.timer.reference:
        summary["reference_check"] = reference_check(scorer, recs)
    else:
        chk = engine_check(scorer, recs)
        if chk is not None:
            summary["engine_check"] = chk
    if scorer.timer.screen is not None:
        summary["screen_check"] = screen_check(recs)


def _best_run(best: dict, scorer: PointScorer) -> tuple:
    """The best SubGPU record's whole step in the event simulator, as
    ``write_search_figures``'s ``best_run``: the main run, its title, the scope text, the head's
    run and every recorded run."""
    from subgpu_jax.model.graph import build_forward
    from subgpu_jax.app.wholestep import head_run, recorded_runs, whole_step_text

    dep = search_step(Deployment.from_record(best))  # the step the search scored
    p = scorer.problem(dep)
    cfg = Config.from_record(best, p.workload.graph(1))
    # the whole step in the event simulator: every run in layer order, then the head
    fp = build_forward(scorer.arch, dep, best["microbatches"])
    st = time_step(fp, cfg, scorer.event, record=True)
    head = head_run(fp, scorer.event)
    sp = best["speedup_vs_temporal"]
    word = "best SubGPU" if sp > 1 else "least slow SubGPU (loses to temporal)"
    scope = whole_step_text(st, with_head=head is not None)
    if not scorer.timer.reference:
        scope += (f"\nin the event simulator ({scorer.timer.name}: a "
                  f"{best['makespan_us']:,.0f} µs step)")
    return (st.main, f"{word}: D={cfg.D} w={cfg.w} SMs={list(cfg.alloc)} "
                     f"m={best['microbatches']} G={best['global_batch']} "
                     f"(predicted {sp:.3f}x temporal)", scope,
            head, recorded_runs(fp, cfg, st, scorer.event))


def write_outputs(records: Sequence[dict], folder: str, title: str, scorer: PointScorer | None,
                  min_tokens_per_user: float | None = None, write: bool = True,
                  prediction: dict | None = None) -> dict:
    """Write records.csv, summary.json and the figures of a finished (or partial) sweep.

    ``min_tokens_per_user`` (tokens/s/user, a per-token latency bound of 1e6/X µs): the
    frontiers, matched gains and best configuration use only the records that meet it
    (records.csv keeps them all). ``write`` False computes the summary only (a read-only
    results folder). ``prediction``: ``provenance.prediction_note`` of the search (which model
    made its predictions, which measured errors apply), stored as ``summary["prediction"]``.

    Returns:
        The summary dict (also in summary.json).
    """
    recs = list(records)
    if recs and write:
        _write_records_csv(recs, folder)
    all_recs = recs
    if min_tokens_per_user is not None:
        recs = [r for r in recs if r["per_user_tok_s"] >= min_tokens_per_user]
    fr = frontiers(recs)
    tables = matched_tables(recs)
    sub = [r for r in recs if r["mode"] == "subgpu"]
    best = max(sub, key=lambda r: r["speedup_vs_temporal"]) if sub else None
    summary = {"title": title, "records": len(all_recs),
               "frontier_temporal": fr["temporal"], "frontier_subgpu": fr["subgpu"],
               "frontier_subgpu_by_D": {str(k): v for k, v in fr["subgpu_D"].items()},
               "matched": tables, "best_speedup_record": best,
               "best_by_batch": best_by_batch(recs),
               # the uncalibrated duration model's name and version (model/kernelcost.py)
               "analytic_model": (analytic_model_of(scorer.hw) if scorer is not None
                                  else ANALYTIC_MODEL)}
    if prediction is not None:
        summary["prediction"] = prediction
    if min_tokens_per_user is not None:
        summary["min_tokens_per_user"] = float(min_tokens_per_user)
        summary["records_meeting_it"] = len(recs)
    if scorer is not None and scorer.timer.contention and sub and write:
        summary["verdicts"] = _verdicts(scorer, sub)
    if scorer is not None and write:
        _add_checks(summary, scorer, recs)
    if scorer is not None:
        summary["scorers"] = dict(scorer.scorers)
        cut, alloc = meta_of(scorer.cut), meta_of(scorer.alloc)   # StrategyMeta.meta
        summary["strategies"] = {"cut": cut["name"], "alloc": alloc["name"],
                                 "cut_options": cut["options"], "alloc_options": alloc["options"]}
    if not write:
        return summary
    atomic_write(os.path.join(folder, "summary.json"), json.dumps(summary, indent=2))
    best_run = None
    if best is not None and scorer is not None and scorer.timer.contention:
        best_run = _best_run(best, scorer)
    write_search_figures(folder, recs, title, best_run)
    return summary
