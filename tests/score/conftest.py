"""Fixtures shared by the scorer tests: GPT-OSS 20B on 8 H200 (TP8, EP8, G = 256) at m = 2, and
a chain-cut configuration maker for it."""

from __future__ import annotations

import pytest

from subgpu_jax.model.graph import Deployment, build_graph
from subgpu_jax.model.models import get_model
from subgpu_jax.space.config import Config, chain_cut

#: The deployment of ``gptoss20b_m2``.
GPTOSS20B_DEP = Deployment(num_gpus=8, attn_tp=8, attn_dp=1, moe_ep=8, global_batch=256)


@pytest.fixture(scope="module")
def gptoss20b_m2():
    """The region graph of GPT-OSS 20B at m = 2 microbatches (``GPTOSS20B_DEP``)."""
    return build_graph(get_model("gpt-oss-20b"), GPTOSS20B_DEP, 2)


@pytest.fixture
def chain_config():
    """``make(g, starts, w, alloc)``: the ``Config`` of the chain cut starting segments at
    ``starts`` (D = len(starts) + 1 - w stages), microbatch R / m of ``GPTOSS20B_DEP``."""
    def make(g, starts, w, alloc):
        D = len(starts) + 1 - w
        return Config(D=D, w=w, seg_of=chain_cut(g.n, starts), alloc=tuple(alloc),
                      microbatch=GPTOSS20B_DEP.requests_per_gpu // g.microbatches)
    return make


def _lockstep_search(folder, in_flight=1, min_batch=2):
    """A small search (GPT-OSS 20B, TP8, G = 64 and 128, D = 2 and 3, m = 2) with a NumPy
    lockstep timer that batches from ``min_batch`` rows; returns (stats, summary, timer)."""
    from subgpu_jax.app import searchjob, searchrun, sweep
    from subgpu_jax.model.hardware import get_hardware
    from subgpu_jax.model.models import get_model
    from subgpu_jax.score.timer import BatchedEventTimer

    arch, hw = get_model("gpt-oss-20b"), get_hardware("H200")
    pts = sweep.build_grid(arch, 8, [64, 128], [2, 3], [2], hw=hw, parallelisms=[(8, 1, 8)])
    timer = BatchedEventTimer(hw, engine="numpy", min_batch=min_batch)
    stats, summ = searchrun.run_search(arch, hw, pts, str(folder), {"t": 1},
                                       searchjob.SearchOptions(timer=timer, progress=False,
                                                               in_flight=in_flight))
    return stats, summ, timer


@pytest.fixture
def lockstep_search():
    """``_lockstep_search``: a small search timed by the NumPy lockstep loop."""
    return _lockstep_search
