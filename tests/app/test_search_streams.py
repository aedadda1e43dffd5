"""``subgpu search --streams-per-stage K[,K...]``: every pipelined grid point is searched for each
k, the records carry ``streams_per_stage``, and each k-record's configuration re-scores to its
makespan with k streams (the static exact scorer: the max-plus evaluator with the k-stream task
DAG, docs/method.md "Streams per stage"; the record's region makespan, without the rest of the
step)."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from subgpu_jax.app.cli import main
from subgpu_jax.app.sweep import GridPoint, build_grid
from subgpu_jax.model.graph import REFERENCE_DEPLOYMENT, build_graph
from subgpu_jax.model.hardware import get_hardware
from subgpu_jax.model.models import get_model
from subgpu_jax.score.evaluator import Evaluator
from subgpu_jax.space.config import chain_cut

H200 = get_hardware("H200")


def test_search_over_streams_per_stage(tmp_path):
    out = tmp_path / "s"
    args = ["search", "--model", "gpt-oss-20b", "--hardware", "H200", "--gpus", "8", "--tp", "8",
            "--dp", "1", "--batches", "64", "--stages", "2", "--microbatches", "2",
            "--exact", "static", "--out", str(out), "--no-progress"]
    assert main(args + ["--streams-per-stage", "1,2"]) == 0
    recs = list(csv.DictReader(open(out / "records.csv")))
    sub = [r for r in recs if r["mode"] == "subgpu"]
    assert sorted({r["streams_per_stage"] for r in sub}) == ["1", "2"]
    arch = get_model("gpt-oss-20b")
    dep = type(REFERENCE_DEPLOYMENT)(num_gpus=8, attn_tp=8, attn_dp=1, moe_ep=8, global_batch=64)
    g = build_graph(arch, dep, 2)
    for r in sub:
        starts = sorted(g.index(n) for n in r["cuts"].split("|"))
        alloc = [int(x) for x in r["sms"].split("|")]
        ev = Evaluator(g, chain_cut(g.n, starts), int(r["D"]), int(r["w"]), H200,
                       streams_per_stage=int(r["streams_per_stage"]))
        region = float(r.get("region_makespan_us") or r["makespan_us"])  # the region's part
        assert float(ev.makespan(np.array([alloc]))[0]) == pytest.approx(region, rel=1e-5)
    assert main(args + ["--streams-per-stage", "0"]) == 2


def test_grid_repeats_pipelined_points_per_k():
    arch = get_model("gpt-oss-20b")
    pts = build_grid(arch, 8, [64], [2, 3], [2], streams=(1, 2), parallelisms=[(8, 1, 8)])
    sub = [p for p in pts if p.D > 1]
    assert len(sub) == 4 and sorted({p.streams for p in sub}) == [1, 2]
    assert len({p.key for p in pts}) == len(pts)
    assert GridPoint(pts[0].deploy, 2, 2).key.endswith("wavefront")  # k = 1 keys unchanged
    with pytest.raises(ValueError, match="streams-per-stage"):
        build_grid(arch, 8, [64], [2], [2], streams=(0,), parallelisms=[(8, 1, 8)])
