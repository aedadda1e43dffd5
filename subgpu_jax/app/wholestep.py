"""The whole decode step as the trace and the figures draw it (issue 41 item 8: every run of
the step in layer order, then the head): the region runs simulated again with their
utilisation series, the head kernels on the whole GPU, and the text that says what is drawn.
Used by ``subgpu simulate`` (``--trace``, ``--gantt``, ``--utilization``) and by the search's
``gantt_best.png``."""

from __future__ import annotations

import dataclasses

__all__ = ["recorded_runs", "whole_step_text", "head_run"]


def head_run(fp, timer):
    """The head kernels of the forward pass ``fp`` (final norm, LM head, sampling, embedding)
    simulated one after the other on the whole GPU with ``timer``'s contention model and L2
    policy (an ``EventTimer``), as ``SimResult``; None when the step has no head."""
    if not fp.head:
        return None
    from subgpu_jax.sim.eventsim import simulate_streams

    return simulate_streams([(timer.hw.num_sms, list(fp.head))], timer.hw, timer.model,
                            cache=timer.cache)


def recorded_runs(fp, cfg, step, timer) -> list:
    """The step's region runs in layer order as ``[(SimResult, first layer)]`` for the trace
    and the figures: the main run's result is the step's own (``step.main``), every other run
    is simulated again with its utilisation series (``record=True``), under ``cfg`` carried
    over to its region (``map_cut``), as ``score.step.time_step`` timed it."""
    from subgpu_jax.space.mapcut import map_cut

    out, first, memo = [], 0, {}
    for j, (g, count) in enumerate(fp.runs):
        if j == step.main_index or (g is fp.main and
                                    count == step.runs[step.main_index]["instances"]):
            r = step.main
        else:
            if (id(g), count) not in memo:
                c = cfg if g is fp.main else map_cut(cfg, fp.main, g)
                memo[(id(g), count)] = timer.time(dataclasses.replace(g, num_regions=count), c,
                                                  record=True).result
            r = memo[(id(g), count)]
        out.append((r, first))
        first += len(g.region_kinds) * int(count)
    return out


def whole_step_text(step, with_head: bool) -> str:
    """What the trace and the figures draw of ``step`` (a ``score.step.StepResult``): every
    run in layer order, then the head, e.g. ``"layers 0-2 (3 layers, 895 µs), then layers
    3-60 (58 layers, 45,909 µs) of the 46,883 µs step, then the head (79 µs: final norm, LM
    head, sampling, embedding)"``."""
    parts, first = [], 0
    for r in step.runs:
        n = len(r["layers"]) * int(r["instances"])
        parts.append(f"layers {first}-{first + n - 1} ({n} layers, {r['makespan_us']:,.0f} µs)"
                     if n > 1 else f"layer {first} (1 layer, {r['makespan_us']:,.0f} µs)")
        first += n
    text = ", then ".join(parts) + f" of the {step.makespan_us:,.0f} µs step"
    if step.head_us > 0:
        text += (f", then the head ({step.head_us:,.0f} µs: final norm, LM head, sampling, "
                 "embedding)" if with_head else
                 f"; not drawn: the head ({step.head_us:,.0f} µs: final norm, LM head, "
                 "sampling, embedding)")
    return text
