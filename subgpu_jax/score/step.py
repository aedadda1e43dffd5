"""A whole decode step: every region kind of the forward pass, then the head kernels.

A model whose layers are not all alike (DeepSeek-V3: 3 dense layers then 58 MoE layers; a
Qwen3-MoE with ``mlp_only_layers``) has several region graphs (``model.graph.build_forward``).
A configuration is chosen for the model's main region (the kind with the most layers: the one
``subgpu simulate --cuts`` names and ``subgpu search`` cuts); every other region kind runs with
the same stages, SM pools, microbatches and policy, and its cut carried over kernel by kernel
(``space.mapcut.map_cut``: each segment starts at the first kernel of the same place in the
layer, e.g. a cut before the MoE ``router`` starts before the dense ``mlp_up``). Runs execute one after the other
(the pipeline drains between runs of different kinds), then the head kernels (final norm, LM
head, sampling, embedding lookup) run once for the whole per-GPU batch on the whole GPU. So

    step time = sum over runs of the run's pipelined makespan + the head's time    [µs]

For a model with one region kind this is the region makespan plus the head.

A whole generation (``Deployment.output_len`` > 0) is timed by ``time_generation``: the
steps of ``model.generation.generation_nodes`` (first, middle and last), each with its KV
history, averaged with their weights into the time per output token (docs/accounting.md item 6).

Any ``score.timer.Timer`` times the runs: ``EventTimer`` (the event simulator) or
``StaticTimer`` (the max-plus evaluator on isolated durations; head kernels always analytical).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from subgpu_jax.model.deployment import Deployment
from subgpu_jax.model.generation import generation_steps
from subgpu_jax.model.graph import ForwardPass, build_forward
from subgpu_jax.score.timer import Timer
from subgpu_jax.space.config import Config
from subgpu_jax.space.mapcut import map_cut

__all__ = ["StepResult", "time_step", "GenerationResult", "time_generation", "main_run_scope"]


@dataclass
class StepResult:
    """Times of one decode step (µs).

    Attributes:
        makespan_us: the whole step (runs + head).
        runs: per run ``{"layers", "instances", "kernels", "makespan_us"}`` in layer order.
        head_us: the head kernels' time on the whole GPU.
        category_time_us: kernel residence per category (event simulator; summed over runs and
            the head), empty for the static evaluator.
        main: the event simulator's result of the first run of the main region (for traces and
            plots), or None.
        main_index: the index in ``runs`` of that run.
    """

    makespan_us: float
    runs: list = field(default_factory=list)
    head_us: float = 0.0
    category_time_us: dict = field(default_factory=dict)
    main: Any = None
    main_index: int = 0


def time_step(fp: ForwardPass, cfg: Config, timer: Timer, record: bool = True) -> StepResult:
    """Time one decode step of ``fp`` (built for the configuration's microbatch count) under
    ``cfg`` (a configuration of ``fp.main``; see the module docstring) with ``timer``.

    Args:
        fp: ``model.graph.build_forward(arch, deploy, m)``.
        cfg: the configuration (D = 1 with all SMs is the temporal baseline).
        timer: a ``score.timer.Timer`` (``EventTimer`` or ``StaticTimer``).
        record: keep the event simulator's utilisation series (main run only).

    Returns:
        ``StepResult`` (µs); ``category_time_us`` holds the head's time under ``"head"`` for the
        event timer and is empty for the static one.

    Raises:
        ValueError: an infeasible configuration.
    """
    res = StepResult(makespan_us=0.0)
    cats: dict[str, float] = {}
    memo: dict = {}
    for g, count in fp.runs:
        key = (id(g), count)
        if key not in memo:
            c = cfg if g is fp.main else map_cut(cfg, fp.main, g)
            gr = dataclasses.replace(g, num_regions=count)
            tm = timer.time(gr, c, record=record and g is fp.main and res.main is None)
            memo[key] = (tm.makespan_us, tm.category_time_us, tm.result)
        t, cat, r = memo[key]
        if g is fp.main and res.main is None:
            res.main, res.main_index = r, len(res.runs)
        res.runs.append({"layers": [list(x) for x in g.region_kinds],
                         "instances": int(count), "kernels": g.n, "makespan_us": t})
        res.makespan_us += t
        for kname, v in cat.items():
            cats[kname] = cats.get(kname, 0.0) + float(v)
    res.head_us = timer.head_us(fp.head)
    if cats or timer.reference:
        cats["head"] = cats.get("head", 0.0) + res.head_us
    res.makespan_us += res.head_us
    res.category_time_us = cats
    return res


@dataclass
class GenerationResult:
    """A whole generation's time per output token.

    Attributes:
        makespan_us: the weighted mean step time over the generation (µs; TPOT).
        steps: per simulated step ``{"step", "kv_history", "weight", "makespan_us"}``.
    """

    makespan_us: float
    steps: list = field(default_factory=list)


def time_generation(arch, deploy: Deployment, cfg: Config, microbatches: int,
                    timer: Timer) -> GenerationResult:
    """Time ``deploy``'s generation (``output_len`` steps from ``input_len``; one step when
    ``output_len`` is 0) under ``cfg`` with ``microbatches`` microbatches: ``time_step`` at
    each step of ``model.generation.generation_steps``, averaged with its weights.

    Args:
        arch: the model. deploy: the deployment. cfg: a configuration of the main region.
        microbatches: m of ``cfg``. timer: a ``score.timer.Timer``.

    Returns:
        ``GenerationResult`` (µs).

    Raises:
        ValueError: as ``time_step``.
    """
    out = GenerationResult(makespan_us=0.0)
    for d, w in generation_steps(deploy):
        t = time_step(build_forward(arch, d, microbatches), cfg, timer, record=False).makespan_us
        out.steps.append({"step": int(d.kv_history - deploy.kv_history),
                          "kv_history": int(d.kv_history), "weight": float(w),
                          "makespan_us": float(t)})
        out.makespan_us += w * t
    return out


def main_run_scope(res: StepResult, with_head: bool = False) -> dict:
    """What a figure or trace of ``res.main`` (one run of the main region) shows of the step;
    ``with_head``: the head kernels are drawn after the run (``--trace``).

    Returns:
        ``{"layer_offset": the model's number of the run's first layer, "first_layer",
        "last_layer", "run_us": the run's makespan, "step_us", "whole": True when the run is the
        step but for nothing, "text"}``; ``text`` says which layers are drawn, of which step, and
        what is not drawn (the other runs' layers and the head, with their times), e.g.
        ``"layers 3-60 (58 layers, 32,551 µs) of the 34,390 µs step; not drawn: layers 0-2
        (1,712 µs), the head (127 µs)"``.
    """
    first = 0
    spans = []
    for j, r in enumerate(res.runs):
        n = len(r["layers"]) * int(r["instances"])
        spans.append((first, first + n - 1, float(r["makespan_us"])))
        first += n
    lo, hi, t = spans[res.main_index]
    missing = [f"layers {a}-{b} ({u:,.0f} µs)" if a != b else f"layer {a} ({u:,.0f} µs)"
               for j, (a, b, u) in enumerate(spans) if j != res.main_index]
    if res.head_us > 0 and not with_head:
        missing.append(f"the head ({res.head_us:,.0f} µs: final norm, LM head, sampling, "
                       "embedding)")
    text = (f"layers {lo}-{hi} ({hi - lo + 1} layers, {t:,.0f} µs) of the "
            f"{res.makespan_us:,.0f} µs step")
    if with_head and res.head_us > 0:
        text += f", then the head ({res.head_us:,.0f} µs: final norm, LM head, sampling, embedding)"
    if missing:
        text += "; not drawn: " + ", ".join(missing)
    return {"layer_offset": lo, "first_layer": lo, "last_layer": hi, "run_us": t,
            "step_us": float(res.makespan_us), "whole": not missing, "text": text}
