"""The outer grid and the crash-safe sweep store: resume after kill -9, corrupted files, refusal to
mix sweeps."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from subgpu_jax import get_model
from subgpu_jax.app.sweep import GridPoint, SweepStore, build_grid, outer_parallelisms, run_sweep

SCRIPT = textwrap.dedent("""
    import sys, time
    from subgpu_jax import get_model
    from subgpu_jax.app.sweep import SweepStore, build_grid, run_sweep
    arch = get_model("gpt-oss-20b")
    pts = build_grid(arch, 8, [256, 512], [2, 3], [1, 2])
    def score(p):
        time.sleep(float(sys.argv[2]))
        return [{"D": p.D, "m": p.microbatches, "G": p.deploy.global_batch,
                 "value": p.D * 1000 + p.microbatches * 10 + p.deploy.global_batch}]
    store = SweepStore(sys.argv[1], {"model": "gpt-oss-20b", "v": 1})
    run_sweep(pts, score, store, progress=False)
""")


def _score(p: GridPoint):
    return [{"D": p.D, "m": p.microbatches, "G": p.deploy.global_batch,
             "value": p.D * 1000 + p.microbatches * 10 + p.deploy.global_batch}]


def test_outer_parallelisms_gptoss_32():
    pars = outer_parallelisms(get_model("gpt-oss-120b"), 32)
    assert (8, 4, 32) in pars
    assert all(t * d == 32 and 64 % t == 0 and e == 32 for t, d, e in pars)


def test_grid_has_temporal_at_every_q_and_batch():
    arch = get_model("gpt-oss-20b")
    pts = build_grid(arch, 8, [256, 512], [2, 3], [1, 2])
    qb = {(p.deploy.attn_tp, p.deploy.global_batch) for p in pts}
    temporal = {(p.deploy.attn_tp, p.deploy.global_batch) for p in pts if p.D == 1}
    assert qb == temporal
    assert len({p.key for p in pts}) == len(pts)


def test_empty_grid_names_constraint():
    arch = get_model("gpt-oss-20b")
    with pytest.raises(ValueError, match="grid is empty"):
        build_grid(arch, 8, [8], [2], [3], parallelisms=[(8, 1, 8)])
    with pytest.raises(ValueError, match="policy"):
        build_grid(arch, 8, [256], [2], [1], policies=["nope"])


def test_resume_after_kill_equals_uninterrupted(tmp_path):
    ref_dir = tmp_path / "ref"
    arch = get_model("gpt-oss-20b")
    pts = build_grid(arch, 8, [256, 512], [2, 3], [1, 2])
    ref = SweepStore(str(ref_dir), {"model": "gpt-oss-20b", "v": 1}, resume=False)
    run_sweep(pts, _score, ref, progress=False)
    ref.close()

    out = tmp_path / "killed"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(out), "0.15"], env=env)
    deadline = time.time() + 60
    path = out / "records.jsonl"
    while time.time() < deadline:
        if path.exists() and path.read_text().count("_done") >= 3:
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    partial = path.read_text().count("_done")
    assert 3 <= partial < len(pts)
    # a torn write at the end must be detected and dropped
    with open(path, "a") as fh:
        fh.write('{"D": 2, "m"')
    store = SweepStore(str(out), {"model": "gpt-oss-20b", "v": 1}, resume=True)
    assert store.report.count("torn") == 1, "the torn line must be reported, once"
    assert len(store.done) == partial
    res = run_sweep(pts, _score, store, progress=False)
    store.close()
    assert res["evaluated"] == len(pts) - partial
    key = lambda r: r["grid_key"]
    assert sorted(store.records, key=key) == sorted(ref.records, key=key)
    # reloading gives the same records, no duplicates, nothing to report
    again = SweepStore(str(out), {"model": "gpt-oss-20b", "v": 1}, resume=True)
    again.close()
    assert sorted(again.records, key=key) == sorted(ref.records, key=key)
    assert not again.report


def test_refuses_other_sweep_reuses_same(tmp_path):
    s = SweepStore(str(tmp_path), {"model": "a"}, resume=False)
    s.add("k", [{"x": 1}])
    s.close()
    with pytest.raises(ValueError, match="another sweep"):
        SweepStore(str(tmp_path), {"model": "b"}, resume=True)
    with SweepStore(str(tmp_path), {"model": "a"}, resume=False) as same:
        assert same.done == {"k"} and same.records == [{"x": 1, "grid_key": "k"}]


def test_budget(tmp_path):
    arch = get_model("gpt-oss-20b")
    pts = build_grid(arch, 8, [256], [2], [1, 2])
    s = SweepStore(str(tmp_path), {"m": 1}, resume=False)
    r = run_sweep(pts, _score, s, budget=2, progress=False)
    assert r["evaluated"] == 2 and r["remaining"] == len(pts) - 2
    with pytest.raises(ValueError, match="budget"):
        run_sweep(pts, _score, s, budget=0, progress=False)
    s.close()
    lines = [json.loads(x) for x in open(tmp_path / "records.jsonl")]
    assert sum("_done" in x for x in lines) == 2


def test_invalid_records_are_dropped_and_recomputed(tmp_path):
    arch = get_model("gpt-oss-20b")
    pts = build_grid(arch, 8, [256], [2], [1, 2])
    s = SweepStore(str(tmp_path), {"m": 1}, resume=False)
    run_sweep(pts, lambda p: [dict(_score(p)[0], makespan_us=100.0)], s, progress=False)
    s.close()
    lines = (tmp_path / "records.jsonl").read_text().splitlines()
    bad = json.loads(lines[0])
    bad["makespan_us"] = -5.0
    lines[0] = json.dumps(bad)
    lines.insert(2, "[1, 2]")
    lines.append(json.dumps({"_done": "orphan-key"}))
    (tmp_path / "records.jsonl").write_text("\n".join(lines) + "\n")
    again = SweepStore(str(tmp_path), {"m": 1}, resume=True)
    assert "orphan-key" not in again.done
    assert len(again.done) == len(pts) - 1  # only the edited point; the garbage line costs nothing
    assert all(r["makespan_us"] > 0 for r in again.records)
    assert [e[0] for e in again.report.events] == ["bad_point", "unreadable", "legacy"]
    assert again.report.again == [pts[0].key]
    r = run_sweep(pts, lambda p: [dict(_score(p)[0], makespan_us=100.0)], again, progress=False)
    again.close()
    assert r["evaluated"] == 1 and r["again"] == 1 and len(again.records) == len(pts)


def test_manifest_not_an_object_is_rewritten(tmp_path):
    (tmp_path / "manifest.json").write_text("[]")
    with SweepStore(str(tmp_path), {"m": 1}, resume=True) as s:
        assert s.notes == ["manifest.json was not a manifest (a JSON object with fingerprint "
                           "and meta): rewritten from this command's options"]
    assert json.loads((tmp_path / "manifest.json").read_text())["meta"] == {"m": 1}
