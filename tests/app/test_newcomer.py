"""A newcomer's first five minutes with ``subgpu``: parallelisms for any GPU count, honest
headline numbers, next steps after a search, help texts and messages, figures, the README.

CLI tests go through ``subgpu_jax.app.cli.main`` (or a subprocess where the exit path matters).
The search used by several tests is one small event-simulator sweep (GPT-OSS 20B on 8 H200,
two batches, D = 2, m = 2), run once per module.
"""

import argparse
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from subgpu_jax.app import report, viz
from subgpu_jax.app.cli import build_parser, main
from subgpu_jax.app.searchout import OUTPUT_FILES

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["--model", "gpt-oss-20b", "--hardware", "H200", "--gpus", "8", "--tp", "8", "--dp", "1",
         "--ep", "8", "--kv-history", "4096"]
SEARCH = ["search", *SMALL, "--batches", "64,128", "--stages", "2", "--microbatches", "2",
          "--no-progress"]


def run_cli(args, capsys):
    rc = main(args)
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.fixture(scope="module")
def small_search(tmp_path_factory):
    """One small search (event simulator): its folder, printed output and summary."""
    out = tmp_path_factory.mktemp("search") / "runs"
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main([*SEARCH, "--out", str(out)])
    assert rc == 0, buf.getvalue()
    return out, buf.getvalue(), json.loads((out / "summary.json").read_text())


# ------------------------------------------------------------------ item 3: any GPU count
def test_all_parallelisms_for_16_gpus(tmp_path, capsys):
    """``--all-parallelisms`` with 16 GPUs enumerates every attention TP x DP with TP <= 8
    dividing 16 and GPT-OSS 20B's 64 query heads: TP in {1, 2, 4, 8} (hand count), each with
    a temporal point and one D = 2 point, and no `tp*dp must equal num_gpus` error."""
    rc, out, err = run_cli(["search", "--model", "gpt-oss-20b", "--hardware", "H200", "--gpus",
                            "16", "--all-parallelisms", "--batches", "64", "--stages", "2",
                            "--microbatches", "2", "--kv-history", "4096", "--exact", "static",
                            "--budget", "1", "--no-progress", "--out", str(tmp_path / "r")],
                           capsys)
    assert rc == 0, err
    assert "16x H200, 8 grid points (4 temporal)" in out
    man = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert man["meta"]["parallelisms"] == "all"
    rec = json.loads((tmp_path / "r" / "records.jsonl").read_text().splitlines()[0])
    assert rec["attn_tp"] * rec["attn_dp"] == 16


@pytest.mark.parametrize("args, tp, dp", [
    (["--gpus", "16"], 8, 2),            # largest TP <= 8 dividing 16 and 64 heads
    (["--gpus", "16", "--tp", "4"], 4, 4),
    (["--gpus", "16", "--dp", "8"], 2, 8),
    (["--gpus", "6", "--model", "llama-3.1-8b"], 2, 3),  # 32 heads, TP 3 and 6 do not divide
    ([], 8, 4),                          # the reference deployment, unchanged
])
def test_tp_dp_defaults_follow_gpus(args, tp, dp):
    from subgpu_jax.app.args import resolve_parallelism

    a = build_parser().parse_args(["simulate", *args])
    resolve_parallelism(a)
    assert (a.tp, a.dp) == (tp, dp)


def test_simulate_with_only_gpus(capsys):
    rc, out, err = run_cli(["simulate", "--simulator", "static", "--sms", "even", "--json",
                            "--gpus", "16", "--batch", "512"], capsys)
    assert rc == 0, err
    w = json.loads(out)["workload"]
    assert (w["num_gpus"], w["attn_tp"], w["attn_dp"]) == (16, 8, 2)


def test_all_parallelisms_refuses_explicit_tp(capsys):
    rc, _, err = run_cli(["search", "--all-parallelisms", "--tp", "8"], capsys)
    assert rc == 2 and err.startswith("error: tp: --all-parallelisms") and "--tp" in err


def test_tp_not_dividing_gpus_is_one_line(capsys):
    rc, _, err = run_cli(["simulate", "--gpus", "16", "--tp", "3"], capsys)
    assert rc == 2 and err.count("\n") == 1 and err.startswith("error: tp:")


# --------------------------------------------------------- item 4: headline numbers, honestly
def _rec(mode, G, user, gpu, sp=1.0, tp=8, dp=1):
    return {"mode": mode, "global_batch": G, "per_user_tok_s": user, "per_gpu_tok_s": gpu,
            "makespan_us": 1e6 / user, "speedup_vs_temporal": sp, "attn_tp": tp,
            "attn_dp": dp, "temporal_makespan_us": 1e6 / user / sp, "D": 2, "w": 1,
            "microbatches": 2, "sms": "64|64", "cuts": "L1.attn", "policy": "wavefront"}


def test_matched_gain_rows_state_nearest_points():
    """Temporal frontier at per-GPU 100, 200, 300 (per-user 30, 20, 10); SubGPU at 102 (29)
    and 260 (18). Matched per-GPU throughputs inside both ranges: 102, 200, 260. A point's
    distance is the larger of its relative distances in per-GPU and in per-user throughput
    from the frontier's interpolated point. At 102 the temporal frontier is at per-user
    30 - 0.02*10 = 29.8; its point (100, 30) is max(2/102, 0.2/29.8) = 1.96% away -> nearby.
    At 200 the SubGPU frontier is at 29 - 98/158*11 = 22.18; its nearest point (260, 18) is
    max(60/200, 4.18/22.18) = 30% away -> not nearby. At 260 the temporal frontier is at 14;
    (300, 10) is max(40/260, 4/14) = 28.6% away. Gain at 102: 29 / 29.8 - 1 = -2.68%."""
    recs = [_rec("temporal", 1, 30, 100), _rec("temporal", 2, 20, 200),
            _rec("temporal", 3, 10, 300), _rec("subgpu", 1, 29, 102), _rec("subgpu", 2, 18, 260)]
    rows = report.matched_tables(recs)["per_user_gain_at_matched_per_gpu"]
    assert [r["per_gpu_tok_s"] for r in rows] == [102, 200, 260]
    assert [r["nearby"] for r in rows] == [True, False, False]
    assert rows[0]["gain"] == pytest.approx(29 / 29.8 - 1)
    assert rows[0]["nearest_temporal"]["rel_distance"] == pytest.approx(2 / 102)
    assert rows[0]["nearest_temporal"]["global_batch"] == 1
    assert rows[1]["nearest_subgpu"]["rel_distance"] == pytest.approx(60 / 200)
    assert rows[2]["nearest_temporal"]["rel_distance"] == pytest.approx(4 / 14)
    t = report.matched_tables(recs)
    assert t["max_per_user_gain_nearby"] == pytest.approx(29 / 29.8 - 1)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.floats(1, 1e3), st.floats(1, 1e4)), min_size=2,
                max_size=12), st.floats(0, 0.5))
def test_nearby_flag_matches_brute_force(pts, tol):
    """``nearby`` is true exactly when both frontiers have a point within ``tol`` (relative, in
    both throughputs) of their matched point: checked against a brute-force scan of each
    frontier's points, with the frontier's matched point from the gain (base and candidate
    values satisfy cand / base - 1 = gain)."""
    recs = [_rec("subgpu" if s else "temporal", i, u, g) for i, (s, u, g) in enumerate(pts)]
    t = report.matched_tables(recs, tol=tol)
    fr = report.frontiers(recs)
    other = {"per_gpu_tok_s": "per_user_tok_s", "per_user_tok_s": "per_gpu_tok_s"}
    for table, key in (("per_user_gain_at_matched_per_gpu", "per_gpu_tok_s"),
                       ("per_gpu_gain_at_matched_per_user", "per_user_tok_s")):
        o = other[key]
        for r in t[table]:
            x = r[key]
            d = {}
            for side in ("temporal", "subgpu"):
                f = sorted(fr[side], key=lambda p: p[key])
                # the frontier's value at x: on a segment between consecutive points
                v = next(a[o] + (b[o] - a[o]) * ((x - a[key]) / (b[key] - a[key])
                                                if b[key] > a[key] else 0.0)
                         for a, b in zip(f, f[1:] + f[-1:]) if a[key] <= x <= b[key])
                d[side] = min(max(abs(p[key] - x) / x, abs(p[o] - v) / v) for p in f)
            assert r["nearest_temporal"]["rel_distance"] == pytest.approx(d["temporal"],
                                                                          abs=1e-12)
            if any(abs(v - tol) < 1e-9 for v in d.values()):
                continue  # on the boundary the two roundings of the same distance may differ
            assert r["nearby"] == (d["temporal"] <= tol and d["subgpu"] <= tol)


def test_a_point_near_in_one_throughput_but_far_in_the_other_is_not_near():
    """The helper's mini-Mixtral search (H200, 8 GPUs, KV 8k): temporal frontier (per-GPU,
    per-user) (5066.1, 158.32), (6280.4, 98.13), (7082.7, 55.33); SubGPU (5084.8, 158.90),
    (6844.5, 106.95), (7730.0, 60.39). At per-GPU 7082.7 the SubGPU frontier interpolates
    per-user 106.95 - (238.2 / 885.5) * 46.56 = 94.43 (+70.7% over 55.33); its nearest point in
    per-GPU (G = 512, 3.4% away) has per-user 106.95, 13.3% from 94.43: not near, so the
    +70.7% is not shown (it rests on the interpolation across a batch gap alone)."""
    recs = [_rec("temporal", 256, 158.32, 5066.1), _rec("temporal", 512, 98.13, 6280.4),
            _rec("temporal", 1024, 55.33, 7082.7), _rec("subgpu", 256, 158.90, 5084.8),
            _rec("subgpu", 512, 106.95, 6844.5), _rec("subgpu", 1024, 60.39, 7730.0)]
    rows = {round(r["per_gpu_tok_s"], 1): r
            for r in report.matched_tables(recs)["per_user_gain_at_matched_per_gpu"]}
    r = rows[7082.7]
    v = 106.95 - (7082.7 - 6844.5) / (7730.0 - 6844.5) * (106.95 - 60.39)
    assert r["gain"] == pytest.approx(v / 55.33 - 1)
    assert r["nearest_subgpu"]["rel_distance"] == pytest.approx((106.95 - v) / v)
    assert r["nearest_subgpu"]["global_batch"] == 512 and not r["nearby"]
    assert rows[5084.8]["nearby"]


def test_best_by_batch_is_the_best_speedup_per_deployment():
    recs = [_rec("temporal", 64, 10, 100), _rec("subgpu", 64, 11, 110, sp=1.1),
            _rec("subgpu", 64, 12, 120, sp=1.2), _rec("subgpu", 128, 9, 90, sp=0.9),
            _rec("subgpu", 64, 13, 130, sp=1.3, tp=4, dp=2)]
    rows = report.best_by_batch(recs)
    oracle = {}
    for r in recs:
        if r["mode"] == "subgpu":
            k = (r["global_batch"], r["attn_tp"])
            oracle[k] = max(oracle.get(k, 0), r["speedup_vs_temporal"])
    assert [(r["global_batch"], r["attn_tp"]) for r in rows] == sorted(oracle)
    assert [r["speedup_vs_temporal"] for r in rows] == [oracle[k] for k in sorted(oracle)]


def test_validation_status_from_the_committed_h200_file(tmp_path):
    """The H200 numbers are read from experiments/results/hw_validate_h200.json: per batch,
    the best measured speedup among pipelined rows (D > 1) and the largest |error|."""
    data = json.loads((ROOT / "experiments/results/hw_validate_h200.json").read_text())
    v = report.validation_status("H200")
    assert v["file"] == "experiments/results/hw_validate_h200.json"
    for G, b in data["batches"].items():
        pipe = [r for r in b["rows"] if r["D"] > 1]
        best = max(r["speedup_measured"] for r in pipe)
        assert v["batches"][int(G)]["best_speedup_measured"] == pytest.approx(best)
        assert f"{best:.3f}x at G={int(G):,}" in v["text"]
    wins = json.loads((ROOT / "experiments/results/hw_wins_h200.json").read_text())["workloads"]
    top = max(w["best_of_k_measured_speedup"] for w in wins.values())
    assert v["wins"]["best_measured_speedup"] == pytest.approx(top)
    assert f"{len(wins)} workloads measured at best {top:.3f}x" in v["text"]
    first = max(w["measured_speedup"] for w in wins.values())
    assert v["wins"]["best_first_choice_speedup"] == pytest.approx(first)
    assert f"its first choices at best {first:.3f}x" in v["text"]
    beat = top > 1 or any(r["speedup_measured"] > 1 for b in data["batches"].values()
                          for r in b["rows"] if r["D"] > 1)
    assert ("no SubGPU configuration beat temporal" in v["text"]) == (not beat)
    b200 = report.validation_status("B200")
    assert b200["file"] is None and b200["text"].startswith("not validated on a B200")
    assert "H200" in b200["text"]
    assert "no measurement file" in report.validation_status("H200", tmp_path)["text"]


def test_search_output_leads_with_configuration_speedups(small_search):
    """Configuration-level speedups (per batch, same deployment) come before the frontiers and
    the matched gains; every shown matched gain names the frontier points it rests on, within
    the tolerance; the output says these are predictions and quotes the validation status."""
    _, out, summ = small_search
    i_batch = out.index("best SubGPU configuration per batch")
    i_front = out.index("frontier temporal")
    i_match = out.index("matched gains")
    assert i_batch < i_front < i_match
    for r in summ["best_by_batch"]:
        assert f"{r['speedup_vs_temporal']:8.3f}x" in out
    shown = re.findall(r"\((\d+\.\d)% away\)", out[i_match:])
    assert all(float(x) <= 5.0 for x in shown)
    assert "Every number above is a model prediction" in out
    # the note names the model that made them (uncalibrated here) and only its error figures
    assert summ["prediction"]["text"] in out and not summ["prediction"]["calibrated"]
    assert "uncalibrated duration model" in summ["prediction"]["text"]


# ------------------------------------------------------------------- item 5: next steps
def test_search_lists_files_and_reproduce_command(small_search, capsys):
    """The printed file list is exactly the search outputs present in the folder, and the
    printed `subgpu simulate ...` line reproduces the best record's makespan."""
    folder, out, summ = small_search
    line = next(l for l in out.splitlines() if l.startswith("wrote "))
    listed = line.split(": ", 1)[1].split(", ")
    assert listed == [f for f in OUTPUT_FILES if (folder / f).is_file()]
    assert {"records.csv", "summary.json", "frontier.png", "gantt_best.png"} <= set(listed)
    cmd = shlex.split(next(l for l in out.splitlines() if l.strip().startswith("subgpu simulate")))
    rc, js, err = run_cli([*cmd[1:], "--json"], capsys)
    assert rc == 0, err
    best = summ["best_speedup_record"]
    assert json.loads(js)["config"]["makespan_us"] == pytest.approx(best["makespan_us"],
                                                                    rel=1e-9)
    run = shlex.split(next(l for l in out.splitlines() if l.strip().startswith("subgpu run")))
    assert run[1:5] == ["run", "--from-search", str(folder), "--hardware"] and run[5] == "H200"
    rc, _, err = run_cli(run[1:], capsys)
    from hw_runtime.gpu.partition import green_contexts_available
    if green_contexts_available()[0]:  # a GPU machine (experiments/device/run.sh tests): it runs
        assert rc == 0, err
    else:  # it passes every check before the GPU one on this GPU-less machine
        assert rc == 2 and "cannot run configurations on a GPU" in err, err


def test_from_search_for_another_gpu_is_refused_with_the_way_out(small_search, tmp_path,
                                                                 capsys, monkeypatch):
    """On an H200 (the ``--hardware`` default is the GPU it runs on; its name is a fake
    H200's here), a search made for the B200 is refused with the way out."""
    import hw_runtime.commands.device as device

    monkeypatch.setattr(device, "device_name", lambda: "NVIDIA H200")
    folder, _, summ = small_search
    b200 = dict(summ, best_speedup_record=dict(summ["best_speedup_record"], hardware="B200"))
    (tmp_path / "summary.json").write_text(json.dumps(b200))
    rc, _, err = run_cli(["run", "--from-search", str(tmp_path), "--model", "gpt-oss-20b"],
                         capsys)
    assert rc == 2 and err.count("\n") == 1
    assert "search for the B200" in err and "this run is for the H200 (--hardware" in err
    assert "subgpu search --hardware H200" in err and "--hardware B200" in err
    rc, _, err = run_cli(["run", "--from-search", str(folder)], capsys)  # default model
    assert rc == 2 and "pass --model gpt-oss-20b" in err


def test_b200_search_prints_how_to_get_an_h200_search(capsys):
    """After a B200 search the next steps include an H200 search with the same grid: the
    printed command parses and keeps the grid and deployment."""
    from subgpu_jax.app.args import resolve_parallelism
    from subgpu_jax.app.searchtext import print_next_steps

    a = build_parser().parse_args(["search", "--batches", "512,1024", "--out", "runs/x"])
    resolve_parallelism(a)
    a.ep = 32
    best = _rec("subgpu", 512, 10, 100)
    print_next_steps(a, {"best_speedup_record": dict(best, num_gpus=32, moe_ep=32,
                                                      kv_history=32768, microbatch=64)}, "B200")
    out = capsys.readouterr().out
    h = shlex.split(next(l for l in out.splitlines() if "--hardware H200" in l))
    b = build_parser().parse_args(h[1:])
    assert (b.hardware, b.expert_dtype, b.batches, b.tp, b.dp, b.out) == (
        "H200", "bf16", "512,1024", 8, 4, "runs/x-h200")
    assert "subgpu run --from-search runs/x-h200 --top 3" in out   # as the verdict lines say
    # the runtime never ran on a B200: no `subgpu run` for it is suggested
    assert "run it on a local B200" not in out and "never probed on a B200" in out
    assert not [l for l in out.splitlines() if l.strip().startswith("subgpu run") and "B200" in l]


# ------------------------------------------------------ item 6: README time is a measurement
def test_readme_main_command_time_is_the_measured_range():
    """docs/results.md ("How long the main job takes"; docs/usage.md points there, issue 40
    keeps timing history out of the reference) quotes the main command's time from the
    committed measurement (experiments/results/readme_main_command_time.json): the min-max of
    the runs without the install, and each run of the whole first line (install included) with
    its search time."""
    m = json.loads((ROOT / "experiments/results/readme_main_command_time.json").read_text())
    bare = [r["seconds"] for r in m["runs"] if not r["install_included"]]
    whole = [r for r in m["runs"] if r["install_included"]]
    assert len(bare) >= 2 and whole
    assert "docs/usage.md" in (ROOT / "README.md").read_text()
    readme = " ".join((ROOT / "docs" / "results.md").read_text().split())
    assert f"{min(bare):.0f}-{max(bare):.0f} s (install not included)" in readme
    for r in whole:
        search = re.search(r"search ([0-9.]+) s per its own output", r["code"]).group(1)
        assert f"{r['seconds']:.0f} s" in readme and f"{search} s of search" in readme, r["run"]


# ----------------------------------------------------------- item 7: help and messages
def _sub_help(name):
    p = build_parser()
    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name].format_help()


@pytest.mark.parametrize("cmd, default", [("run", None), ("calibrate", None),
                                          ("simulate", "B200"), ("search", "B200")])
def test_hardware_default_in_help_is_the_real_default(cmd, default):
    """The simulator's commands default to the B200; the runtime's to the GPU they run on
    (None: ``hw_runtime.commands.device.resolve_hardware`` reads it)."""
    text = " ".join(_sub_help(cmd).split())
    said = re.search(r"--hardware HARDWARE GPU preset \([^)]*\)\. Default: ([^.]+)\.",
                     text).group(1)
    assert said == (default or "the GPU this runs on (H100, H200 or B200 preset)")
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert sub.choices[cmd].get_default("hardware") == default


def test_cuts_accept_spaces_like_sms(capsys):
    base = ["simulate", "--simulator", "static", "--json", "--reuse"]
    r1 = run_cli([*base, "--cuts", "L1.attn,L1.o_proj", "--sms", "74,74"], capsys)
    r2 = run_cli([*base, "--cuts", "L1.attn, L1.o_proj", "--sms", "74, 74"], capsys)
    assert r1[0] == r2[0] == 0 and json.loads(r1[1]) == json.loads(r2[1])
    rc, _, err = run_cli([*base, "--cuts", "L1.attn,,L1.o_proj"], capsys)
    assert rc == 2 and "empty item" in err


def test_cut_index_out_of_range_quotes_one_range(capsys):
    msgs = []
    for c in ("0", "24", "-1"):
        rc, _, err = run_cli(["simulate", "--simulator", "static", "--cuts", c], capsys)
        assert rc == 2
        msgs.append(re.search(r"in (\d+\.\.\d+)", err).group(1))
    assert msgs == ["1..23"] * 3  # 24 kernels in the GPT-OSS 120B macro-period


def test_out_naming_a_file_is_refused(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    rc, _, err = run_cli([*SEARCH, "--out", str(f)], capsys)
    assert rc == 2 and err.startswith("error: out:") and "is a file" in err
    assert "File exists" not in err


def test_closed_pipe_ends_quietly():
    """`subgpu ... | head` style: stdout closed before the command writes. No message, exit
    141 (128 + SIGPIPE), as a shell tool stopped by a closed pipe."""
    p = subprocess.Popen([sys.executable, "-m", "subgpu_jax.app.cli", "space", "--chain", "20"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 141
    assert err == ""


@pytest.mark.parametrize("ext, magic", [("jpg", b"\xff\xd8\xff"), ("svg", b"<?xml"),
                                        ("png", b"\x89PNG")])
def test_figure_format_follows_extension(tmp_path, ext, magic, capsys):
    g, u = tmp_path / f"g.{ext}", tmp_path / f"u.{ext}"
    rc, _, err = run_cli(["simulate", *SMALL, "--batch", "64", "--sms", "64,64", "--json",
                          "--gantt", str(g), "--utilization", str(u)], capsys)
    assert rc == 0, err
    assert g.read_bytes().startswith(magic) and u.read_bytes().startswith(magic)


def test_unknown_figure_extension_is_refused(tmp_path, capsys):
    rc, _, err = run_cli(["simulate", *SMALL, "--batch", "64", "--sms", "64,64",
                          "--gantt", str(tmp_path / "g.txt")], capsys)
    assert rc == 2 and ".png" in err and err.count("\n") == 1


def test_torn_record_reported_once(tmp_path):
    from subgpu_jax.app.sweep import SweepStore

    s = SweepStore(str(tmp_path), {"a": 1}, resume=False)
    s.add("k1", [{"makespan_us": 1.0}])
    s.close()
    with open(tmp_path / "records.jsonl", "a") as fh:
        fh.write('{"grid_key": "k2", "makesp')
    again = SweepStore(str(tmp_path), {"a": 1}, resume=True)
    again.close()
    assert again.report.lines() == ["records.jsonl: 1 torn last line (a write cut short), "
                                    "1 line(s) dropped"] and again.done == {"k1"}


def test_space_columns_never_run_together(capsys):
    """Counts of a 1,000-operator chain have up to 26 characters: every row still splits
    into its six numbers, equal to the JSON output."""
    args = ["space", "--chain", "1000", "--stages", "2,6,12"]
    rc, out, _ = run_cli(args, capsys)
    assert rc == 0
    rows = json.loads(run_cli([*args, "--json"], capsys)[1])["rows"]
    lines = out.splitlines()[2:]
    keys = ("D", "cuts_w0", "cuts_w1", "cut_binding_choices", "allocations", "total")
    assert len(lines) == len(rows)
    for line, r in zip(lines, rows):
        assert [int(x.replace(",", "")) for x in line.split()] == [r[k] for k in keys]


def test_run_memory_check_uses_the_experts_it_runs(capsys):
    """GPT-OSS 120B on one H200: MXFP4 experts fit (simulate accepts it), the bf16 experts
    `subgpu run` executes on Hopper (~234 GB) do not: run refuses before looking for a GPU,
    with or without --expert-dtype bf16."""
    one = ["--hardware", "H200", "--gpus", "1", "--tp", "1", "--dp", "1", "--ep", "1",
           "--batch", "8", "--kv-history", "1024"]
    rc, _, err = run_cli(["simulate", *one, "--simulator", "static", "--sms", "even"], capsys)
    assert rc == 0, err
    for extra in ([], ["--expert-dtype", "bf16"]):
        rc, _, err = run_cli(["run", *one, *extra], capsys)
        assert rc == 2 and "does not fit" in err, err
    rc, _, err = run_cli(["simulate", *one, "--expert-dtype", "bf16"], capsys)
    assert rc == 2 and "does not fit" in err


# --------------------------------------------------------------------------- item 8: figures
@pytest.fixture(scope="module")
def sims():
    from subgpu_jax.model.graph import Deployment
    from subgpu_jax.model.workload import Workload
    from subgpu_jax.sim.contention import ContentionModel
    from subgpu_jax.sim.eventsim import simulate
    from subgpu_jax.space.config import config_from_options, temporal_of

    wl = Workload.from_names("gpt-oss-20b", "H200", Deployment(
        num_gpus=8, attn_tp=8, attn_dp=1, moe_ep=8, global_batch=64, kv_history=4096))
    cfg = config_from_options(wl, None, [64, 64], None, None)
    r = simulate(wl.graph(2), cfg, wl.hw, ContentionModel(), record=True)
    t = simulate(wl.graph(1), temporal_of(wl), wl.hw, ContentionModel(), record=True)
    return t, r


def _boxes(fig, *artists):
    fig.canvas.draw()
    rend = fig.canvas.get_renderer()
    return [a.get_window_extent(rend) for a in artists]


@pytest.mark.parametrize("t_max", [None, 500.0])
def test_gantt_legend_clear_of_axes_and_label(sims, t_max):
    import matplotlib.pyplot as plt

    _, r = sims
    fig = viz.gantt_figure(r, "t", t_max_us=t_max)
    ax = fig.axes[0]
    leg, lab, box = _boxes(fig, ax.get_legend(), ax.xaxis.label, ax)
    assert not leg.overlaps(lab) and not leg.overlaps(box)
    text = ax.get_xlabel()
    if t_max is None:  # never "the whole" of a step the chart may not hold: what is drawn
        assert f"all {float(r.makespan):,.0f} µs simulated" in text and "the whole" not in text
    else:  # a cut chart says so, with both times
        assert f"first {t_max:,.0f} µs of the {float(r.makespan):,.0f} µs simulated makespan" in text
        assert ax.get_xlim()[1] == pytest.approx(t_max)
    plt.close(fig)


def test_utilisation_hbm_line_drawn_over_sm_area(sims):
    import matplotlib.pyplot as plt

    fig = viz.utilisation_figure(*sims)
    for ax in fig.axes:
        hbm = next(l for l in ax.get_lines() if l.get_label().startswith("HBM"))
        sm = next(c for c in ax.collections if c.get_label().startswith("SMs"))
        assert hbm.get_zorder() > sm.get_zorder() and sm.get_alpha() < 1
        # the SM series must not paint over the HBM line: the area is translucent
        assert hbm.get_visible() and hbm.get_linewidth() >= 1.5
    plt.close(fig)


def test_first_simulate_searches_the_split(capsys):
    """Without --sms, simulate picks the split by a quick search: its makespan is no worse
    than the even split's (simulated separately here), and the text says the split matters."""
    args = ["simulate", *SMALL, "--batch", "64"]
    rc, out, err = run_cli([*args, "--json"], capsys)
    assert rc == 0, err
    r = json.loads(out)
    rc, out_even, _ = run_cli([*args, "--json", "--sms", "even"], capsys)
    even = json.loads(out_even)
    assert r["sms_choice"]["how"] == "search" and even["sms_choice"]["how"] == "even"
    assert even["config"]["sms"] == r["sms_choice"]["even_split"] == [64, 64]
    assert r["config"]["makespan_us"] <= even["config"]["makespan_us"] + 1e-9
    assert r["sms_choice"]["even_speedup"] == pytest.approx(even["speedup"])
    rc, text, _ = run_cli([*args, "--sms", "even"], capsys)
    assert "the split matters" in text


# ---------------------------------------------------------------------------- item 9: README
def test_readme_docs_in_repo_and_venv_activation():
    readme = (ROOT / "README.md").read_text()
    assert "shared folder" not in readme and "DESIGN.md" not in readme
    for doc in set(re.findall(r"`(docs/[\w./-]+)`", readme)):
        assert (ROOT / doc).is_file(), doc
    assert "docs/method.md" in readme
    # bare `subgpu` commands come after the README says how to put it on PATH
    first_bare = min(m.start() for m in re.finditer(r"^subgpu ", readme, re.M))
    assert readme.index("source .venv/bin/activate") < first_bare


def test_reproduce_command_carries_streams_per_stage():
    from subgpu_jax.app.searchtext import search_reproduce_command

    a = build_parser().parse_args(["search"])
    best = dict(_rec("subgpu", 512, 10, 100), num_gpus=32, moe_ep=32, kv_history=32768,
                microbatch=64, streams_per_stage=2)
    cmd = search_reproduce_command(a, best)
    b = build_parser().parse_args(cmd[1:])
    assert int(b.streams_per_stage) == 2 and b.sms == "64,64" and b.cuts == "L1.attn"
    assert "--streams-per-stage" not in search_reproduce_command(a, dict(best,
                                                                          streams_per_stage=1))


def test_from_search_runs_the_records_streams_per_stage(small_search, tmp_path):
    """``subgpu run --from-search`` builds the search's best configuration with the streams per
    stage the search scored it with (it used to run it with one stream per stage)."""
    from hw_runtime.commands.request import RunRequest
    from hw_runtime.commands.run import prepare_run

    folder, _, summ = small_search
    two = dict(summ, best_speedup_record=dict(summ["best_speedup_record"], streams_per_stage=2))
    (tmp_path / "summary.json").write_text(json.dumps(two))
    a = build_parser().parse_args(["run", "--from-search", str(tmp_path), "--model",
                                   "gpt-oss-20b", "--hardware", "H200"])
    prep = prepare_run(RunRequest.from_args(a))
    assert prep.cfg.streams_per_stage == 2 and prep.request.config.streams_per_stage == 2
    a1 = build_parser().parse_args(["run", "--from-search", str(folder), "--model",
                                    "gpt-oss-20b", "--hardware", "H200"])
    assert prepare_run(RunRequest.from_args(a1)).cfg.streams_per_stage == int(
        summ["best_speedup_record"].get("streams_per_stage") or 1)


def test_a_matched_gain_far_above_the_speedups_is_explained():
    """A new user's Llama-3-8B search (H100 x 8, KV 8K, G = 256, 512, 1024) printed "+96.5%"
    per-user gain at matched per-GPU throughput beside configuration speedups of 1.05-1.09x: the
    temporal frontier is flat (G = 512 buys 11% per-GPU throughput over G = 256), so SubGPU at
    G = 256 matches temporal at G = 512. The note says so; gains at one batch, or within 3x the
    best gain, get none."""
    from subgpu_jax.app.searchtext import amplified_gain_note

    def row(gain, gt, gs):
        return {"gain": gain, "nearest_temporal": {"global_batch": gt},
                "nearest_subgpu": {"global_batch": gs}}

    note = amplified_gain_note([row(0.965, 512, 256), row(0.968, 512, 256)], 1.091)
    assert note.startswith("  (a gain of +97% beside configuration speedups of at most 1.091x")
    assert "only at G=512, SubGPU already at G=256" in note
    assert all(len(x) <= 100 for x in note.splitlines())
    assert amplified_gain_note([row(0.965, 512, 512)], 1.091) is None      # the same batch
    assert amplified_gain_note([row(0.20, 512, 256)], 1.091) is None       # within 3 x 9.1%


def test_hopper_search_of_quantised_experts_also_prints_a_bf16_search(capsys):
    """A GPT-OSS search on the H100 predicts its mxfp4 experts, which the runtime runs in bf16
    (``subgpu run`` predicts the configuration again so): the next steps keep the run of this
    search and add a search with bf16 experts (same grid, its own folder); a bf16 model gets
    no such line."""
    import dataclasses

    from subgpu_jax.app.args import resolve_parallelism
    from subgpu_jax.app.searchtext import print_next_steps
    from subgpu_jax.model.models import get_model

    a = build_parser().parse_args(["search", "--hardware", "H100", "--model", "gpt-oss-20b",
                                   "--gpus", "8", "--batches", "256", "--out", "runs/h"])
    resolve_parallelism(a)
    a.ep = 8
    best = dict(_rec("subgpu", 256, 10, 100), num_gpus=8, moe_ep=8, kv_history=32768,
                microbatch=64, model="gpt-oss-20b")
    arch = get_model("gpt-oss-20b")
    assert arch.expert_dtype == "mxfp4"
    print_next_steps(a, {"best_speedup_record": best}, "H100", arch)
    out = capsys.readouterr().out
    h = shlex.split(next(l for l in out.splitlines() if "--expert-dtype bf16" in l))
    b = build_parser().parse_args(h[1:])
    assert (b.hardware, b.expert_dtype, b.model, b.batches, b.out) == (
        "H100", "bf16", "gpt-oss-20b", "256", "runs/h-bf16")
    assert "subgpu run --from-search runs/h --hardware H100" in out
    assert "the runtime runs the experts in bf16 (this search predicted mxfp4" in out
    print_next_steps(a, {"best_speedup_record": best}, "H100",
                     dataclasses.replace(arch, expert_dtype="bf16"))
    out = capsys.readouterr().out
    assert "--expert-dtype bf16" not in out and "subgpu run --from-search runs/h" in out
