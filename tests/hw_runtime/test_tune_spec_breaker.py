"""Breaker review: a ``TuneSpec`` refuses an exact scorer outside the timer registry at once
(one line naming --exact), as it does every other option, instead of a KeyError from
``Predictor.contention`` rounds later; every registered timer is accepted, made as the command
line makes it (``timer_for``), and a timer class or name is not a timer."""

from __future__ import annotations

import pytest

from hw_runtime.tune.spec import TuneSpec
from subgpu_jax.model.models import get_model
from subgpu_jax.model.hardware import get_hardware
from subgpu_jax.model.setup import GpuSetup
from subgpu_jax.score.timer import TIMERS, timer_for


def _spec(**kw) -> TuneSpec:
    base = dict(arch=get_model("llama-3.1-8b"), hardware="H200", num_gpus=1, attn_tp=1,
                attn_dp=1, moe_ep=1, kv_history=1024, input_len=1024, batches=(64,),
                stages=(2,), microbatches=(2,), top=2, budget_s=1e6, max_rounds=3,
                refine=False)
    base.update(kw)
    return TuneSpec(**base)


def test_unknown_exact_scorer_is_one_line():
    for bad in ("fast", "event", None, object, TIMERS["event"]):  # the CLI makes the timer
        with pytest.raises(ValueError, match="^--exact must be one of event, event-full, static, "
                                             "vcontention, screened, event-batched \\(a timer "
                                             "made"):
            _spec(exact=bad)
    setup = GpuSetup.uncalibrated(get_hardware("H200"))
    for name in TIMERS:
        timer = timer_for(setup, name)
        spec = _spec(exact=timer)
        assert spec.exact is timer and spec.meta()["exact"] == name
    assert _spec().exact.name == "event" and _spec().meta()["exact"] == "event"


def test_strategy_options_checked_and_fingerprinted_only_when_set():
    """``--cut-options``/``--alloc-options`` of ``subgpu tune``: a bad one is refused at the
    spec (one line naming the flag); unset, the fingerprint has no such keys (tune folders made
    before the options keep resuming); set, it holds them."""
    with pytest.raises(ValueError, match=r"^--cut-options: proposal takes no options; got 'x'$"):
        _spec(cut_options="x=1")
    with pytest.raises(ValueError, match=r"^--alloc-options: relax steps must be an integer"):
        _spec(alloc_strategy="relax", alloc_options="steps=0")
    assert "cut_options" not in _spec().meta() and "alloc_options" not in _spec().meta()
    s = _spec(alloc_strategy="relax", alloc_options="steps=40")
    assert s.meta()["alloc_options"] == "steps=40"
    assert s.strategies()[1].steps == 40
