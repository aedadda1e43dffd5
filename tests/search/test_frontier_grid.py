"""Tests of the frontier studies' grid (experiments/frontier_study.py): stages 2..6, microbatch
counts up to 16 where they divide the per-GPU batch, every EP degree dividing the GPU count,
and the candidate-kind counts of the study digest."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from subgpu_jax import get_hardware, get_model
from subgpu_jax.app.sweep import build_grid, outer_parallelisms

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def fs():
    spec = importlib.util.spec_from_file_location("frontier_study",
                                                  ROOT / "experiments" / "frontier_study.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_ep_degrees_divide_gpus_and_experts(fs):
    arch = get_model("gpt-oss-20b")  # 32 experts
    pars = fs.parallelisms(arch, 8, all_ep=True)
    tps = sorted({t for t, _, _ in outer_parallelisms(arch, 8)})
    assert sorted({t for t, _, _ in pars}) == tps
    for t in tps:
        assert sorted(e for tt, _, e in pars if tt == t) == [1, 2, 4, 8]
    assert all(t * d == 8 for t, d, _ in pars)
    assert fs.parallelisms(arch, 8, all_ep=False) == outer_parallelisms(arch, 8)
    dense = get_model("llama-3.1-70b")
    assert {e for _, _, e in fs.parallelisms(dense, 8, all_ep=True)} == {1}


def test_wide_grid_covers_stages_and_microbatches(fs):
    arch, hw = get_model("llama-3.1-70b"), get_hardware("H200")
    st = {**fs.STUDIES["llama70b_h200"], **fs.WIDE}
    assert st["stages"] == [2, 3, 4, 5, 6] and max(st["microbatches"]) >= 8
    pts = build_grid(arch, 8, st["batches"], st["stages"], st["microbatches"],
                     parallelisms=fs.parallelisms(arch, 8, st["all_ep"]), hw=hw)
    sub = [p for p in pts if p.D > 1]
    assert {p.D for p in sub} == {2, 3, 4, 5, 6}
    assert {8, 16} <= {p.microbatches for p in sub}
    for p in sub:  # m divides R = G / d
        assert (p.deploy.global_batch // p.deploy.attn_dp) % p.microbatches == 0
    # D = 4 with more microbatches than stages is on the grid (the narrow grid never had it)
    assert any(p.D == 4 and p.microbatches > 4 for p in sub)


def test_candidate_kinds(fs):
    assert fs.origin_kind("anchor@7+ls2") == "anchor@"
    assert fs.origin_kind("rotation+3") == "rotation+"
    assert fs.origin_kind("anchored") == "anchored"
    recs = [dict(mode="temporal", origin="temporal", w=0, per_user_tok_s=1.0, per_gpu_tok_s=9.0,
                 D=1),
            dict(mode="subgpu", origin="anchor@2", w=1, per_user_tok_s=2.0, per_gpu_tok_s=8.0,
                 D=2, cheap_rank=1),
            dict(mode="subgpu", origin="rotation+1", w=0, per_user_tok_s=1.5,
                 per_gpu_tok_s=7.0, D=2, cheap_rank=0)]
    c = fs.candidate_stats(recs)
    assert c["wins_all_points"]["anchor@"] == 1 and c["wins_all_points"]["rotation+"] == 1
    assert c["wins_on_frontier"]["anchor@"] == 1 and c["wins_on_frontier"]["rotation+"] == 0
    assert c["exact_ranking_changed_choice"] == 1 and c["exact_ranking_points"] == 2
    assert c["boundary_reuse_w1"] == 1
