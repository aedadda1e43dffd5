"""Frontier studies: temporal vs SubGPU per-user / per-GPU throughput frontiers with matched gains.

Presets (``--study``):
  gptoss120b_b200  GPT-OSS 120B on 32 B200 (the reference study, docs/method.md §5), every attention
                   TP x DP split with TP <= 8, MoE EP32, KV history 32,768.
  gptoss20b_h200   GPT-OSS 20B on 8 H200 (attention TP x DP, MoE EP8), KV history 32,768.
  llama70b_h200    Llama-3.1-70B on 8 H200 (attention TP x DP, dense MLP on TP), KV 32,768.

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

from subgpu_jax import get_hardware, get_model
from subgpu_jax.app.searchjob import run_search
from subgpu_jax.app.sweep import build_grid

HERE = os.path.dirname(os.path.abspath(__file__))

STUDIES = {
    "gptoss120b_b200": dict(model="gpt-oss-120b", hw="B200", gpus=32,
                            batches=[256, 512, 1024, 2048, 4096], stages=[2, 3, 4],
                            microbatches=[1, 2, 4]),
    "gptoss20b_h200": dict(model="gpt-oss-20b", hw="H200", gpus=8,
                           batches=[64, 128, 256, 512, 1024], stages=[2, 3, 4],
                           microbatches=[1, 2, 4]),
    # KV of a Llama-3.1-70B request at 32k tokens is 10.7 GB over 8 GPUs: G <= ~96 fits.
    "llama70b_h200": dict(model="llama-3.1-70b", hw="H200", gpus=8,
                          batches=[8, 16, 32, 64, 96], stages=[2, 3, 4],
                          microbatches=[1, 2, 4]),
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study", choices=sorted(STUDIES), default="gptoss120b_b200")
    ap.add_argument("--budget", type=int, default=None, help="grid points in this call")
    ap.add_argument("--exact", default="event", choices=("event", "static"))
    ap.add_argument("--kv-history", type=int, default=32768)
    ap.add_argument("--tp", type=int, default=None,
                    help="restrict to this attention TP (default: every TP <= 8)")
    a = ap.parse_args(argv)
    st = STUDIES[a.study]
    arch, hw = get_model(st["model"]), get_hardware(st["hw"])
    pars = None
    if a.tp:
        from subgpu_jax.app.sweep import outer_parallelisms
        pars = [p for p in outer_parallelisms(arch, st["gpus"]) if p[0] == a.tp]
    skipped: list = []
    pts = build_grid(arch, st["gpus"], st["batches"], st["stages"], st["microbatches"],
                     kv_history=a.kv_history, parallelisms=pars, hw=hw, skipped=skipped)
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
