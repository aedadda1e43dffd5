"""``subgpu search`` over a local two-process ``jax.distributed`` cluster on the CPU: the grid
points are split between the processes, process 0 writes the results folder, and the records
equal a single-process evaluation of the same grid (the oracle: ``PointScorer`` in this
process, written by the same ``write_outputs``)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from subgpu_jax.score.timer import StaticTimer
from subgpu_jax.app import searchjob as sj
from subgpu_jax.app import searchout
from subgpu_jax.app.sweep import GridPoint
from subgpu_jax.model.graph import Deployment
from subgpu_jax.model.hardware import get_hardware
from subgpu_jax.model.models import get_model

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ARGS = ["search", "--model", "gpt-oss-20b", "--hardware", "H200", "--gpus", "8", "--tp", "8",
        "--dp", "1", "--ep", "8", "--batches", "256", "--stages", "2", "--microbatches", "2",
        "--exact", "static", "--no-progress"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_process_search_equals_single_process(tmp_path, child_pythonpath):
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=child_pythonpath)
    out = tmp_path / "cluster"
    addr = f"127.0.0.1:{_free_port()}"
    cmd = [sys.executable, "-m", "subgpu_jax.app.cli"] + ARGS + ["--out", str(out),
                                                                 "--cluster", addr,
                                                                 "--num-processes", "2"]
    procs = [subprocess.Popen(cmd + ["--process-id", str(i), "--cluster-timeout", "120"],
                              env=env, cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (o, e) in zip(procs, outs):
        assert p.returncode == 0, e[-2000:]
    assert "scored its share of 2 grid points" in outs[1][0]
    assert "evaluated 2 grid points" in outs[0][0]
    # oracle: the same two grid points scored here, one after the other
    dep = Deployment(num_gpus=8, attn_tp=8, attn_dp=1, moe_ep=8, global_batch=256)
    sc = sj.PointScorer(get_model("gpt-oss-20b"), get_hardware("H200"), timer=StaticTimer(get_hardware("H200")))
    recs = [dict(r, grid_key=pt.key)  # the store tags every record with its grid point
            for pt in (GridPoint(dep, 1, 1, "wavefront"), GridPoint(dep, 2, 2, "wavefront"))
            for r in sc(pt)]
    ref = tmp_path / "single"
    ref.mkdir()
    searchout.write_outputs(recs, str(ref), "t", sc)
    assert (out / "records.csv").read_text() == (ref / "records.csv").read_text()


def test_cluster_options_need_an_address(capsys):
    from subgpu_jax.app.cli import main

    assert main(ARGS + ["--num-processes", "2", "--out", "/tmp/never-written"]) == 2
    assert "need --cluster" in capsys.readouterr().err
