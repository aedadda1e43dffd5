"""Frontier studies: temporal vs SubGPU per-user / per-GPU throughput frontiers with matched gains.

Presets (``--study``):
  gptoss120b_b200  GPT-OSS 120B on 32 B200 (the reference study, docs/method.md §5), every attention
                   TP x DP split with TP <= 8, KV history 32,768.
  gptoss20b_h200   GPT-OSS 20B on 8 H200 (attention TP x DP), KV history 32,768.
  llama70b_h200    Llama-3.1-70B on 8 H200 (attention TP x DP, dense MLP on TP), KV 32,768.

Grid (the method's study, docs/method.md §4): stages D = 2..6, microbatch counts m = 1, 2, 4, 8
and 16 where m divides the per-GPU batch R = G/d (``build_grid`` drops the others), and for MoE
models every expert-parallel degree e dividing both the GPU count and the expert count (experts
replicated n/e times; ``build_grid`` drops deployments whose weights and KV cache do not fit).
``--narrow`` restores the first published grid (D = 2..4, m = 1, 2, 4, the largest EP only).

Cost with the event simulator on a 2-core CPU machine: a Llama-3.1-70B grid point takes
about 5-25 CPU-seconds (more stages and microbatches cost more), so the wide Llama study (236
grid points) needs tens of CPU-minutes; the digest records each call's CPU time
(``cpu_seconds``). The MoE studies are several times larger (EP axis) and are meant for the
distributed sweep (``subgpu_jax.app.distributed``) or ``--budget`` chunks (the sweep resumes;
points run temporal first, then by microbatch and stage count).

Each study is a resumable sweep (kill it and run again: finished grid points are kept) written to
``experiments/results/frontier_<study>/`` (records.csv, records.jsonl, summary.json,
frontier.png, frontier_by_stages.png, gantt_best.png); a one-line-per-study digest is appended to
``experiments/results/frontier_studies.json``.

Usage: python experiments/frontier_study.py --study gptoss120b_b200 [--budget N] [--exact event]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from subgpu_jax import get_hardware, get_model
from subgpu_jax.app.searchjob import run_search
from subgpu_jax.app.sweep import build_grid, outer_parallelisms, SweepStore

HERE = os.path.dirname(os.path.abspath(__file__))

#: The method's grid of stage and microbatch counts; ``--narrow`` uses the first published one.
WIDE = dict(stages=[2, 3, 4, 5, 6], microbatches=[1, 2, 4, 8, 16], all_ep=True)
NARROW = dict(stages=[2, 3, 4], microbatches=[1, 2, 4], all_ep=False)

STUDIES = {
    "gptoss120b_b200": dict(model="gpt-oss-120b", hw="B200", gpus=32,
                            batches=[256, 512, 1024, 2048, 4096]),
    "gptoss20b_h200": dict(model="gpt-oss-20b", hw="H200", gpus=8,
                           batches=[64, 128, 256, 512, 1024]),
    # KV of a Llama-3.1-70B request at 32k tokens is 10.7 GB over 8 GPUs: G <= ~96 fits.
    "llama70b_h200": dict(model="llama-3.1-70b", hw="H200", gpus=8,
                          batches=[8, 16, 32, 64, 96]),
}

#: Kinds of candidate layouts, by ``CutCandidate.origin`` prefix (``search.features``).
ORIGIN_KINDS = (("anchored", "anchored DP cut (the proposal)"),
                ("anchor@", "DP proposal re-run from another start kernel"),
                ("rotation+", "boundary shift of the anchored cut"),
                ("enumerated", "enumerated cut of a general DAG"),
                ("screen", "cut screening (extension)"))


def parallelisms(arch, gpus: int, all_ep: bool) -> list[tuple[int, int, int]]:
    """(attention TP t, DP d, MoE EP e) of a study: ``outer_parallelisms`` (largest EP), or with
    ``all_ep`` every e dividing both ``gpus`` and the expert count (MoE models; dense: e = 1)."""
    base = outer_parallelisms(arch, gpus)
    if not all_ep or not arch.is_moe:
        return base
    eps = [e for e in range(1, gpus + 1) if gpus % e == 0 and arch.num_experts % e == 0]
    return [(t, d, e) for t, d, _ in base for e in eps]


def origin_kind(origin: str) -> str:
    """The ``ORIGIN_KINDS`` key of a record's cut origin (``+ls<k>`` suffixes ignored)."""
    for key, _ in ORIGIN_KINDS:
        if origin.startswith(key):
            return key
    return origin


def candidate_stats(records: list[dict]) -> dict:
    """How often each kind of candidate layout wins (among all SubGPU records and among those on
    the SubGPU frontier), and how often scoring the top layouts with the exact scorer changed
    Algorithm 1's choice (records with ``cheap_rank`` > 0)."""
    from subgpu_jax.app.report import frontiers

    sub = [r for r in records if r["mode"] == "subgpu"]
    on_front = frontiers(records)["subgpu"]

    def count(rs):
        out = {key: 0 for key, _ in ORIGIN_KINDS}
        for r in rs:
            k = origin_kind(r.get("origin", ""))
            out[k] = out.get(k, 0) + 1
        return out

    ranks = [r["cheap_rank"] for r in sub if r.get("cheap_rank") is not None]
    return {"kinds": dict(ORIGIN_KINDS), "wins_all_points": count(sub),
            "wins_on_frontier": count(on_front),
            "boundary_reuse_w1": int(sum(r["w"] == 1 for r in sub)),
            "exact_ranking_changed_choice": int(sum(k > 0 for k in ranks)),
            "exact_ranking_points": len(ranks)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study", choices=sorted(STUDIES), default="gptoss120b_b200")
    ap.add_argument("--budget", type=int, default=None, help="grid points in this call")
    ap.add_argument("--exact", default="event", choices=("event", "static"))
    ap.add_argument("--kv-history", type=int, default=32768)
    ap.add_argument("--tp", type=int, default=None,
                    help="restrict to this attention TP (default: every TP <= 8)")
    ap.add_argument("--narrow", action="store_true",
                    help="the first published grid: D = 2..4, m = 1, 2, 4, largest EP only")
    a = ap.parse_args(argv)
    st = {**STUDIES[a.study], **(NARROW if a.narrow else WIDE)}
    arch, hw = get_model(st["model"]), get_hardware(st["hw"])
    pars = parallelisms(arch, st["gpus"], st["all_ep"])
    if a.tp:
        pars = [p for p in pars if p[0] == a.tp]
    skipped: list = []
    pts = build_grid(arch, st["gpus"], st["batches"], st["stages"], st["microbatches"],
                     kv_history=a.kv_history, parallelisms=pars, hw=hw, skipped=skipped)
    # temporal baselines first, then by microbatch count and stage count: a sweep cut short by
    # its --budget covers every deployment at the smaller microbatch counts
    pts = sorted(pts, key=lambda p: (p.D > 1, p.microbatches, p.D))
    if skipped:
        print(f"skipped {len(skipped)} infeasible combinations, e.g. {skipped[0]}")
    out = os.path.join(HERE, "results", f"frontier_{a.study}")
    meta = {"study": a.study, **st, "exact": a.exact, "kv_history": a.kv_history, "tp": a.tp}
    print(f"{a.study}: {len(pts)} grid points -> {out}")
    resume = os.path.exists(os.path.join(out, "manifest.json"))
    stats, summ = run_search(arch, hw, pts, out, meta, resume=resume, budget=a.budget,
                             exact=a.exact)
    m = summ["matched"]
    digest = {"study": a.study, "grid_points": len(pts), **{k: stats[k] for k in
              ("evaluated", "skipped", "remaining")},
              "max_per_user_gain_at_matched_per_gpu": m["max_per_user_gain"],
              "max_per_gpu_gain_at_matched_per_user": m["max_per_gpu_gain"],
              "per_user_gain_at_matched_per_gpu": m["per_user_gain_at_matched_per_gpu"],
              "per_gpu_gain_at_matched_per_user": m["per_gpu_gain_at_matched_per_user"],
              "grid": {k: st[k] for k in ("stages", "microbatches", "all_ep")},
              "cpu_seconds": time.process_time(),
              "candidates": candidate_stats(list(SweepStore(out, meta, resume=True).records)),
              "best": summ["best_speedup_record"]}
    path = os.path.join(HERE, "results", "frontier_studies.json")
    allr = {}
    if os.path.exists(path):
        with open(path) as fh:
            allr = json.load(fh)
    allr[a.study] = digest
    with open(path + ".tmp", "w") as fh:
        json.dump(allr, fh, indent=2)
    os.replace(path + ".tmp", path)
    print(json.dumps({k: v for k, v in digest.items() if k not in ("best",)}, indent=1)[:3000])
    b = digest["best"]
    if b:
        print(f"best: G={b['global_batch']} TP{b['attn_tp']}xDP{b['attn_dp']} D={b['D']} "
              f"w={b['w']} m={b['microbatches']} SMs={b['sms']} -> "
              f"{b['speedup_vs_temporal']:.3f}x temporal")
    return 0


if __name__ == "__main__":
    sys.exit(main())
