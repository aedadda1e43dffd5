"""Tests of the frontier studies' grid (experiments/frontier_study.py): stages 2..6, microbatch
counts up to 16 where they divide the per-GPU batch, every EP degree dividing the GPU count,
and the candidate-kind counts of the study digest."""

from __future__ import annotations

import pytest

from subgpu_jax import get_hardware, get_model
from subgpu_jax.app.sweep import build_grid, outer_parallelisms


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


def _pts(fs):
    arch, hw = get_model("llama-3.1-70b"), get_hardware("H200")
    st = {**fs.STUDIES["llama70b_h200"], **fs.WIDE}
    return build_grid(arch, 8, st["batches"], st["stages"], st["microbatches"],
                      parallelisms=fs.parallelisms(arch, 8, st["all_ep"]), hw=hw)


def test_order_and_coverage(fs):
    """Temporal points come first, then (m, D) ascending, D descending at m = 16 (dense model:
    one EP degree, m = 16 is the last tier); coverage counts finished / total per kind against a brute-force count over
    the same grid."""
    pts = fs.order_points(_pts(fs))
    keys = [(p.D > 1, p.microbatches, -p.D if p.microbatches == 16 else p.D) for p in pts]
    assert keys == sorted(keys)
    done = {p.key for p in pts[::3]}
    cov = fs.coverage(pts, done)
    sub = [p for p in pts if p.D > 1]
    assert cov["temporal"] == [sum(p.key in done for p in pts if p.D == 1),
                               sum(p.D == 1 for p in pts)]
    for m in {p.microbatches for p in sub}:
        assert cov["by_microbatches"][str(m)] == [
            sum(p.key in done for p in sub if p.microbatches == m),
            sum(p.microbatches == m for p in sub)]
    assert sum(t for _, t in cov["by_stages"].values()) == len(sub)
    assert cov["by_ep"] == {"1": [sum(p.key in done for p in sub), len(sub)]}
    # the estimate: every unfinished point costs its kind's measured mean
    est = fs.remaining_estimate(pts, done, {"temporal": 1.0, "1": 2.0})
    left = [p for p in pts if p.key not in done]
    assert est["points_without_measurement"] == sum(p.D > 1 and p.microbatches != 1
                                                    for p in left)
    assert est["cpu_seconds"] == sum(1.0 if p.D == 1 else 2.0 for p in left
                                     if p.D == 1 or p.microbatches == 1)


def test_order_tiers_moe(fs):
    """MoE grid (GPT-OSS 20B, EP 1, 2, 4, 8): temporal, then the largest EP (8) at m <= 8, then
    the other EP degrees at m <= 8, then m = 16; (m, D) ascending within each tier but the
    last, whose D descends (longest first at the study's end); a permutation of the grid."""
    arch, hw = get_model("gpt-oss-20b"), get_hardware("H200")
    st = {**fs.STUDIES["gptoss20b_h200"], **fs.WIDE}
    grid = build_grid(arch, 8, st["batches"], st["stages"], st["microbatches"],
                      parallelisms=fs.parallelisms(arch, 8, True), hw=hw)
    pts = fs.order_points(grid)
    assert sorted(p.key for p in pts) == sorted(p.key for p in grid)

    def tier(p):
        return (0 if p.D == 1 else 3 if p.microbatches == 16 else
                1 if p.deploy.moe_ep == 8 else 2)

    tiers = [tier(p) for p in pts]
    assert tiers == sorted(tiers) and set(tiers) == {0, 1, 2, 3}
    for t in (1, 2, 3):   # the last tier (the study's end): dearest (most stages) first
        keys = [(p.microbatches, -p.D if t == 3 else p.D) for p in pts if tier(p) == t]
        assert keys == sorted(keys)
    assert [p.D for p in pts if tier(p) == 3][0] == max(st["stages"])


def test_schedule_groups(fs):
    """``--schedule``: groups are (tier, D, m, policy, streams), so the deployments of one
    family in one tier share a group; deployments split them (the previous key); fifo has
    none; another name is refused naming the flag."""
    arch, hw = get_model("gpt-oss-20b"), get_hardware("H200")
    st = {**fs.STUDIES["gptoss20b_h200"], **fs.WIDE}
    pts = fs.order_points(build_grid(arch, 8, st["batches"], st["stages"], st["microbatches"],
                                     parallelisms=fs.parallelisms(arch, 8, True), hw=hw))
    fam, dep = fs.schedule_groups("groups", pts), fs.schedule_groups("deployments", pts)
    e_max = max(p.deploy.moe_ep for p in pts)
    for p in pts[:200]:
        assert fam(p) == (fs.tier_of(p, e_max), p.D, p.microbatches, p.policy, p.streams)
    sub = [p for p in pts if p.D == 3 and p.microbatches == 2 and p.deploy.moe_ep < e_max]
    assert len({(q.deploy.attn_tp, q.deploy.moe_ep) for q in sub}) > 1
    assert len({fam(q) for q in sub}) == 1 and len({dep(q) for q in sub}) > 1
    assert fs.schedule_groups("fifo", pts) is None
    with pytest.raises(ValueError, match="--schedule must be one of groups, deployments, fifo"):
        fs.schedule_groups("lifo", pts)


def test_frontier_distribution(fs):
    """Three SubGPU records, one dominated (hand check): the frontier holds D = 2 (m = 1) and
    D = 3 (m = 4); against the temporal record (9 tok/s/GPU at 1 tok/s/user) only the D = 2
    point (2, 8) and the D = 3 point (3, 5) stay nondominated."""
    recs = [dict(mode="temporal", D=1, microbatches=1, moe_ep=1, per_user_tok_s=1.0,
                 per_gpu_tok_s=9.0),
            dict(mode="subgpu", D=2, microbatches=1, moe_ep=4, per_user_tok_s=2.0,
                 per_gpu_tok_s=8.0),
            dict(mode="subgpu", D=3, microbatches=4, moe_ep=8, per_user_tok_s=3.0,
                 per_gpu_tok_s=5.0),
            dict(mode="subgpu", D=4, microbatches=2, moe_ep=8, per_user_tok_s=1.5,
                 per_gpu_tok_s=4.0)]
    d = fs.frontier_distribution(recs)
    assert d["points"] == 2
    assert d["D"] == {"2": 1, "3": 1} and d["microbatches"] == {"1": 1, "4": 1}
    assert d["moe_ep"] == {"4": 1, "8": 1} and d["on_joint_frontier"] == 2


def test_duration_settings_fingerprint(fs):
    """The fingerprint follows the duration model: the same preset gives the same one, a
    different launch cost (the field the uncalibrated model's launch term reads) another."""
    import dataclasses

    arch, hw = get_model("llama-3.1-70b"), get_hardware("H200")
    dep = _pts(fs)[0].deploy
    a, b = fs.duration_settings(arch, hw, dep), fs.duration_settings(arch, hw, dep)
    assert a == b and a["launch_us"] == hw.launch_us
    c = fs.duration_settings(arch, dataclasses.replace(hw, launch_us=hw.launch_us + 1.0), dep)
    assert c["duration_fingerprint"] != a["duration_fingerprint"]
    # one more µs per launch adds at least 1 µs per op (ops launching several device kernels
    # add one per kernel) to the whole-GPU sum
    assert c["main_region_static_us"] - a["main_region_static_us"] >= (
        a["main_region_kernels"] - 1e-6)


def test_study_resumes_within_budgets(fs, tmp_path, monkeypatch):
    """A tiny study (GPT-OSS 20B, first grid, TP8 only, static exact scorer) in chunks of 2:
    ``--budget 6`` stops after 6 points; a second call resumes (no point twice) and logs a
    second run; the digest's counts agree with the store; ``--cpu-budget`` stops after one
    chunk; a changed duration model is refused (exit code 2) unless ``--allow-model-change``;
    a folder holding another grid is refused with exit code 2 unless ``--overwrite``."""
    import json

    monkeypatch.setattr(fs, "HERE", str(tmp_path))
    args = ["--study", "gptoss20b_h200", "--narrow", "--tp", "8", "--exact", "static",
            "--chunk", "2"]
    assert fs.main(args + ["--budget", "6"]) == 0
    d = json.loads((tmp_path / "results" / "frontier_studies.json").read_text())
    s = d["gptoss20b_h200"]
    assert s["finished"] == 6 and s["grid_points"] == 50 and s["remaining"] == 44
    assert s["coverage"]["temporal"] == [5, 5]  # temporal points first
    assert len(s["runs"]) == 1 and s["runs"][0]["evaluated"] == 6
    assert s["settings"]["exact"] == "static" and not s["complete"]
    assert fs.main(args + ["--cpu-budget", "1e-6"]) == 0  # one chunk, then the budget is spent
    s = json.loads((tmp_path / "results" / "frontier_studies.json").read_text())["gptoss20b_h200"]
    assert s["finished"] == 8 and [r["evaluated"] for r in s["runs"]] == [6, 2]
    lines = (tmp_path / "results" / "frontier_gptoss20b_h200" / "records.csv"
             ).read_text().splitlines()
    assert len(lines) == 1 + 8  # header + one record per point, none twice
    # points made with another duration model are not mixed in silently
    real = fs.duration_settings
    monkeypatch.setattr(fs, "duration_settings",
                        lambda *x: {**real(*x), "duration_fingerprint": "another"})
    assert fs.main(args + ["--budget", "1"]) == 2
    assert fs.main(args + ["--budget", "1", "--allow-model-change"]) == 0
    s = json.loads((tmp_path / "results" / "frontier_studies.json").read_text())["gptoss20b_h200"]
    assert s["finished"] == 9 and s["runs"][-1]["duration_fingerprint"] == "another"
    monkeypatch.setattr(fs, "duration_settings", real)
    wide = ["--study", "gptoss20b_h200", "--tp", "8", "--exact", "static", "--budget", "1"]
    assert fs.main(wide) == 2  # the wide grid is another sweep
    assert fs.main(wide + ["--overwrite"]) == 0  # ... started afresh on request
    s = json.loads((tmp_path / "results" / "frontier_studies.json").read_text())["gptoss20b_h200"]
    assert s["finished"] == 1 and s["grid_points"] > 50 and len(s["runs"]) == 1


def test_remaining_estimate_edges(fs):
    """Nothing left: 0 s; only unmeasured kinds left: None with their count."""
    pts = _pts(fs)
    every = {p.key for p in pts}
    assert fs.remaining_estimate(pts, every, {}) == {"cpu_seconds": 0.0,
                                                     "points_without_measurement": 0}
    est = fs.remaining_estimate(pts, set(), {})
    assert est == {"cpu_seconds": None, "points_without_measurement": len(pts)}


def test_report_reads_the_digest(fs):
    """The README's Markdown (``report``) of a hand-made digest: the counts, times, best
    speedup and matched-gain ranges (min .. max of the gain fields, as percentages) and the
    candidate counts appear as written in the digest."""
    d = {"grid_points": 1200, "finished": 450, "wall_seconds": 1234.4, "cpu_seconds": 5678.9,
         "coverage": {"temporal": [10, 10], "by_microbatches": {"1": [400, 600], "8": [40, 590]}},
         "runs": [{"workers": 1}, {"workers": 12}],
         "best": {"speedup_vs_temporal": 1.23456},
         "per_gpu_gain_at_matched_per_user": [{"gain": 0.05}, {"gain": -0.02}, {"gain": None}],
         "per_user_gain_at_matched_per_gpu": [],
         "candidates": {"kinds": {"anchored": "", "anchor@": "", "rotation+": ""},
                        "wins_all_points": {"anchored": 3, "anchor@": 0, "rotation+": 7},
                        "wins_on_frontier": {"anchored": 1, "anchor@": 0, "rotation+": 2},
                        "boundary_reuse_w1": 4, "exact_ranking_changed_choice": 2,
                        "exact_ranking_points": 10},
         "frontier_points": {"points": 3, "D": {"2": 3}, "microbatches": {"1": 2, "8": 1},
                             "moe_ep": {"8": 3}, "on_joint_frontier": 1},
         "duration_model": {"model": "analytic-v2", "duration_fingerprint": "abc"}}
    text = fs.report({"s": d})
    row = [ln for ln in text.splitlines() if ln.startswith("| s |")][0]
    assert "| 450 of 1,200 |" in row and "temporal 10/10, m=1: 400/600, m=8: 40/590" in row
    assert "| 1,234 (5,679, 12) | 1.235x | -2.0% .. +5.0% | - |" in row
    note = [ln for ln in text.splitlines() if ln.startswith("* s:")][0]
    assert "anchored 3 (1), rotation+ 7 (2);" in note and "anchor@" not in note
    assert "w = 1 at 4" in note and "at 2 of 10" in note and "3 SubGPU frontier points" in note
    assert "analytic-v2 (fingerprint abc)" in note


def test_cpu_per_point_prefers_the_longest_measurement(fs):
    """Of each kind, the run that timed the most points wins (a run without ``cpu_points``
    counts as its ``evaluated``); a later run wins ties; kinds only one run measured come from
    it."""
    runs = [{"evaluated": 100, "cpu_per_point": {"1": 1.0, "8": 4.0}},
            {"evaluated": 1, "cpu_per_point": {"8": 27.0}, "cpu_points": {"8": 1}},
            {"evaluated": 150, "cpu_per_point": {"1": 2.0, "16": 9.0},
             "cpu_points": {"1": 100, "16": 50}}]
    assert fs.cpu_per_point(runs) == {"1": 2.0, "8": 4.0, "16": 9.0}
    assert fs.cpu_per_point([]) == {}


@pytest.mark.parametrize("study, tp", [("gptoss120b_b200", 3), ("gptoss20b_h200", 0),
                                       ("llama70b_h200", 16), ("gptoss20b_h200", -8)])
def test_tp_outside_the_study_is_refused(fs, tmp_path, monkeypatch, capsys, study, tp):
    """A --tp that is no attention TP of the study (an empty parallelism list would mean
    build_grid's default grid; 0 used to mean all) exits 2 naming the allowed TPs; nothing is
    written."""
    monkeypatch.setattr(fs, "HERE", str(tmp_path))
    assert fs.main(["--study", study, "--tp", str(tp), "--budget", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: --tp must be one of 1, 2, 4, 8 (the attention TPs of {study}), "
                   f"got {tp}"]
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("content", [None, "{not json", "[1, 2]", '{"x": {"coverage": 1}}'])
def test_report_without_a_digest_file(fs, tmp_path, monkeypatch, capsys, content):
    """--report with frontier_studies.json missing, not JSON or not a file of digests: one
    line naming the file, exit 2 (no traceback)."""
    monkeypatch.setattr(fs, "HERE", str(tmp_path))
    if content is not None:
        (tmp_path / "results").mkdir()
        (tmp_path / "results" / "frontier_studies.json").write_text(content)
    assert fs.main(["--report"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --report: ")
    assert "frontier_studies.json" in err[0]


def test_compile_cache_empty_or_a_file(fs, tmp_path, monkeypatch, capsys):
    """--compile-cache "" is refused (the message says 'none' turns the cache off), and so is
    a path that is an existing file; both before any work."""
    monkeypatch.setattr(fs, "HERE", str(tmp_path))
    a_file = tmp_path / "cache_file"
    a_file.write_text("")
    for bad, why in (("", "got an empty string"), (str(a_file), "is a file")):
        assert fs.main(["--study", "llama70b_h200", "--narrow", "--tp", "8", "--budget", "1",
                        "--workers", "2", "--compile-cache", bad]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: --compile-cache") and why in err[0]
        assert "'none'" in err[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache_file"]


def test_git_state_hashes_the_library_source(fs, tmp_path):
    """The run record's source hash covers ``subgpu_jax/*.py`` of the repository root: never the
    hash of nothing (sha256 of b"" starts e3b0c442, what every run recorded while the default
    root was ``experiments/``), and it changes with a source file's bytes (a copied tree)."""
    import hashlib
    import shutil

    st = fs.git_state()
    assert st["subgpu_jax_sha256"] != hashlib.sha256(b"").hexdigest()[:16]
    assert st["dirty_subgpu_jax"] in (True, False, None)
    lib = tmp_path / "subgpu_jax"
    lib.mkdir()
    (lib / "a.py").write_text("x = 1\n")
    one = fs.git_state(str(tmp_path))
    assert one["commit"] is None or isinstance(one["commit"], str)
    (lib / "a.py").write_text("x = 2\n")
    assert fs.git_state(str(tmp_path))["subgpu_jax_sha256"] != one["subgpu_jax_sha256"]
    shutil.rmtree(lib)
