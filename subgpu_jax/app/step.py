"""A whole decode step: every region kind of the forward pass, then the head kernels.

A model whose layers are not all alike (DeepSeek-V3: 3 dense layers then 58 MoE layers; a
Qwen3-MoE with ``mlp_only_layers``) has several region graphs (``model.graph.build_forward``).
A configuration is chosen for the model's main region (the kind with the most layers: the one
``subgpu simulate --cuts`` names and ``subgpu search`` cuts); every other region kind runs with
the same stages, SM pools, microbatches and policy, and its cut carried over kernel by kernel
(``map_cut``: each segment starts at the first kernel of the same place in the layer, e.g. a cut
before the MoE ``router`` starts before the dense ``mlp_up``). Runs execute one after the other
(the pipeline drains between runs of different kinds), then the head kernels (final norm, LM
head, sampling, embedding lookup) run once for the whole per-GPU batch on the whole GPU. So

    step time = sum over runs of the run's pipelined makespan + the head's time    [µs]

For a model with one region kind this is the region makespan plus the head.

A whole generation (``Deployment.output_len`` > 0) is timed by ``simulate_generation``: the
steps of ``model.generation.generation_nodes`` (first, middle and last), each with its KV
history, averaged with their weights into the time per output token (docs/accounting.md item 6).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from subgpu_jax.model.deployment import Deployment
from subgpu_jax.model.generation import generation_steps
from subgpu_jax.model.graph import ForwardPass, OpGraph, StaticDurationModel, build_forward
from subgpu_jax.model.hardware import Hardware
from subgpu_jax.space.config import Config, chain_cut

__all__ = ["StepResult", "map_cut", "simulate_step", "GenerationResult", "simulate_generation",
           "main_run_scope"]

#: Place of each kernel kind inside a layer (the launch order of ``build_graph``), used to carry a
#: cut from one region kind to another; kernels of different kinds at the same place share a rank.
_PLACE = {"rmsnorm": 0, "qkv": 1, "mla_down": 1, "mla_q_up": 2, "rope_kv": 3, "attn": 4,
          "mla_v_up": 5, "o_proj": 6, "allreduce": 7, "residual_norm": 7, "router": 8,
          "topk": 9, "dispatch": 10, "shared_up": 11, "shared_down": 12, "expert_up": 13,
          "mlp_up": 13, "expert_down": 14, "mlp_down": 14, "combine": 15, "mlp_allreduce": 15,
          "mlp_residual": 15}


def _rank(g: OpGraph, i: int) -> tuple[int, int]:
    k = g.kernels[i]
    op = k.name.split(".", 1)[1] if "." in k.name else k.name
    return (k.layer, _PLACE.get(op, 99))


def map_cut(cfg: Config, src: OpGraph, dst: OpGraph) -> Config:
    """``cfg`` (a configuration of region ``src``) carried over to region ``dst``: same D, w,
    SM pools, microbatch and policy; each segment start moves to the first kernel of ``dst`` at
    or after the same place in the layer (``_PLACE``), then starts are pushed apart so that every
    segment keeps at least one kernel.

    Raises:
        ValueError: ``dst`` has fewer kernels than the K segments, or is not a chain.
    """
    if cfg.D == 1:
        return dataclasses.replace(cfg, seg_of=(0,) * dst.n)
    starts = [i for i in range(1, src.n) if cfg.seg_of[i] != cfg.seg_of[i - 1]]
    K, n = len(starts) + 1, dst.n
    if n < K:
        raise ValueError(f"cuts: the region {dst.region_kinds} has {n} kernels, fewer than the "
                         f"{K} segments of the configuration")
    if not dst.is_chain():
        raise ValueError("cuts: can only carry a cut over to a chain region")
    ranks = [_rank(dst, i) for i in range(n)]
    new = []
    for s in starts:
        r = _rank(src, s)
        new.append(next((i for i in range(1, n) if ranks[i] >= r), n - 1))
    for j in range(len(new)):  # strictly increasing, >= 1
        new[j] = max(new[j], (new[j - 1] + 1) if j else 1)
    for j in reversed(range(len(new))):  # and <= n-1, leaving room for the later starts
        new[j] = min(new[j], n - (len(new) - j))
        if j + 1 < len(new):
            new[j] = min(new[j], new[j + 1] - 1)
    return dataclasses.replace(cfg, seg_of=chain_cut(n, new))


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


def simulate_step(fp: ForwardPass, cfg: Config, hw: Hardware, simulator: str = "event",
                  model=None, cache: str = "lru", duration_model=None,
                  record: bool = True, mode: str = "green") -> StepResult:
    """Time one decode step of ``fp`` (built for the configuration's microbatch count) under
    ``cfg`` (a configuration of ``fp.main``; see the module docstring).

    Args:
        fp: ``model.graph.build_forward(arch, deploy, m)``.
        cfg: the configuration (D = 1 with all SMs is the temporal baseline).
        hw: the GPU.
        simulator: ``"event"`` (``sim.eventsim.simulate`` with ``model`` and ``cache``) or
            ``"static"`` (the max-plus evaluator with ``duration_model``, default analytical;
            head kernels always use the analytical model, they are not calibrated).
        record: keep the event simulator's utilisation series (main run only).
        mode: ``"green"`` or ``"multistream"`` (``sim.eventsim.SM_MODES``; the event simulator
            only: the static evaluator has no shared-pool model).

    Returns:
        ``StepResult``.

    Raises:
        ValueError: an unknown simulator, or an infeasible configuration.
    """
    if simulator not in ("event", "static"):
        raise ValueError(f"simulator must be 'event' or 'static', got {simulator!r}")
    from subgpu_jax.sim.eventsim import check_sm_mode

    if check_sm_mode(mode) != "green" and simulator != "event":
        raise ValueError(f"mode {mode!r} needs the event simulator")
    res = StepResult(makespan_us=0.0)
    cats: dict[str, float] = {}
    memo: dict = {}
    for g, count in fp.runs:
        key = (id(g), count)
        if key not in memo:
            c = cfg if g is fp.main else map_cut(cfg, fp.main, g)
            gr = dataclasses.replace(g, num_regions=count)
            if simulator == "event":
                from subgpu_jax.sim.eventsim import simulate

                r = simulate(gr, c, hw, model, cache=cache,
                             record=record and g is fp.main and res.main is None, mode=mode)
                memo[key] = (float(r.makespan), dict(r.category_time), r)
            else:
                from subgpu_jax.score.evaluator import Evaluator, temporal_makespan

                if c.D == 1:
                    t = temporal_makespan(gr, hw, duration_model)
                else:
                    t = float(Evaluator.for_config(gr, c, hw, duration_model=duration_model)
                              .makespan([c.alloc])[0])
                memo[key] = (t, {}, None)
        t, cat, r = memo[key]
        if g is fp.main and res.main is None:
            res.main, res.main_index = r, len(res.runs)
        res.runs.append({"layers": [list(x) for x in g.region_kinds],
                         "instances": int(count), "kernels": g.n, "makespan_us": t})
        res.makespan_us += t
        for kname, v in cat.items():
            cats[kname] = cats.get(kname, 0.0) + float(v)
    if simulator == "event":
        from subgpu_jax.sim.eventsim import simulate_streams

        r = simulate_streams([(hw.num_sms, list(fp.head))], hw, model, cache=cache,
                             record=False)
        res.head_us = float(r.makespan)
    else:
        sd = StaticDurationModel(hw)
        res.head_us = float(sum(float(np.asarray(sd.kernel_time_us(k, hw.num_sms)).ravel()[0])
                                for k in fp.head))
        cats = {}
    if simulator == "event":
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


def simulate_generation(arch, deploy: Deployment, cfg: Config, hw: Hardware, microbatches: int,
                        simulator: str = "event", model=None, cache: str = "lru",
                        duration_model=None) -> GenerationResult:
    """Time ``deploy``'s generation (``output_len`` steps from ``input_len``; one step when
    ``output_len`` is 0) under ``cfg`` with ``microbatches`` microbatches: ``simulate_step`` at
    each step of ``model.generation.generation_steps``, averaged with its weights.

    Args:
        arch: the model. deploy: the deployment. cfg: a configuration of the main region.
        hw: the GPU. microbatches: m of ``cfg``. simulator, model, cache, duration_model: as
            ``simulate_step``.

    Returns:
        ``GenerationResult`` (µs).

    Raises:
        ValueError: as ``simulate_step``.
    """
    out = GenerationResult(makespan_us=0.0)
    for d, w in generation_steps(deploy):
        t = simulate_step(build_forward(arch, d, microbatches), cfg, hw, simulator, model, cache,
                          duration_model=duration_model, record=False).makespan_us
        out.steps.append({"step": int(d.kv_history - deploy.kv_history),
                          "kv_history": int(d.kv_history), "weight": float(w),
                          "makespan_us": float(t)})
        out.makespan_us += w * t
    return out


def main_run_scope(res: StepResult) -> dict:
    """What a figure or trace of ``res.main`` (one run of the main region) shows of the step.

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
    if res.head_us > 0:
        missing.append(f"the head ({res.head_us:,.0f} µs: final norm, LM head, sampling, "
                       "embedding)")
    text = (f"layers {lo}-{hi} ({hi - lo + 1} layers, {t:,.0f} µs) of the "
            f"{res.makespan_us:,.0f} µs step")
    if missing:
        text += "; not drawn: " + ", ".join(missing)
    return {"layer_offset": lo, "first_layer": lo, "last_layer": hi, "run_us": t,
            "step_us": float(res.makespan_us), "whole": not missing, "text": text}
