"""The text ``subgpu simulate`` prints: the workload (with the model's parameter counts), the
temporal baseline and the configuration, utilisation and kernel residence, the speedup, the
overlap ceiling, how the SM split was chosen, and which model made these predictions with the
error figures that apply to them (``provenance.prediction_note``). Used by
``app/commands/simulate.py``.
"""

from __future__ import annotations

from subgpu_jax.app.modes import verdict_lines
from subgpu_jax.app.options import split_effect
from subgpu_jax.app.fit import params_line
from subgpu_jax.sim.ceiling import describe

__all__ = ["print_simulation"]


def print_config(cfg, m: int, rc: dict, hw) -> None:
    """The configuration's lines: D, w, SMs, microbatch, policy, streams; a note when a stage
    has fewer SMs than ``hw.stage_min_sms`` (the simulator takes any green-context pool, the
    runtime does not: ``Hardware.min_stage_sms``); then each segment's stage and kernels
    (``rc``: the result's ``config`` entry)."""
    print(f"config    D={cfg.D} w={cfg.w} SMs={list(cfg.alloc)} microbatch={cfg.microbatch} "
          f"(m={m}) policy={cfg.policy} streams/stage={cfg.streams_per_stage}")
    small = hw.stages_below_minimum(cfg.alloc)
    if small:
        print(f"  note: stage {small[0]} has {cfg.alloc[small[0]]} SMs; `subgpu run` refuses "
              f"stages below {hw.stage_min_sms} SMs on the {hw.name} (no GEMM launched "
              "on such a pool: docs/verdicts.md), and `subgpu search` never proposes them")
    for j, segk in enumerate(rc["segments"]):
        print(f"  segment {j} -> stage {rc['stage_of_segment'][j]}: "
              f"{segk[0]} .. {segk[-1]} ({len(segk)} kernel{'s' if len(segk) != 1 else ''})")


def print_simulation(a, res: dict, wl, cfg, m: int, fp1, hw, deploy=None,
                     serving: list[str] = ()) -> None:
    """Print a ``subgpu simulate`` result as text.

    Args:
        a: the parsed options. res: the result dict (the ``--json`` output). wl: the
        ``Workload``. cfg: the configuration. m: its microbatch count. fp1: the forward pass
        at m = 1 (its runs of region kinds). hw: the GPU (calibrated when ``--calibration``).
        deploy: the deployment as given (a generation's; default ``wl.deploy``). serving: the
        serving-accounting lines (``simtext.serving_lines``), printed after the workload.
    """
    extra_c = "l2_hit_rate" in res["config"]
    tok, label = wl.deploy.tokens_per_gpu, res["duration_model"]
    d = deploy if deploy is not None else wl.deploy
    print(f"workload  {wl.arch.name} on {d.num_gpus}x {hw.name}: attention TP{d.attn_tp} x "
          f"DP{d.attn_dp}, MoE EP{d.moe_ep}, global batch {d.global_batch}, KV {d.kv_history}")
    runs = " + ".join(f"{c} x {len(gr.region_kinds)}-layer region ({gr.n} kernels"
                      f"{', main' if gr is fp1.main else ''})" for gr, c in fp1.runs)
    print(f"          per-GPU attention batch R = {wl.batch}, tokens/step/GPU = {tok:g}, "
          f"{runs} + head (final norm, LM head, sampling, embedding)")
    exp = f", experts {wl.arch.expert_dtype}" if wl.arch.is_moe else ""
    kind = wl.arch.model_type or wl.arch.family  # the config's model_type (mistral, not llama)
    print(f"          {kind}: {params_line(wl.arch)}{exp}; {d.topology_label()}")
    if wl.arch.is_moe and (d.routing != "uniform" or d.routing_imbalance != 1):
        from subgpu_jax.model.routing import rank_count_variance

        token_var = rank_count_variance(wl.arch.num_experts, wl.arch.top_k, d.moe_ep,
                                        wl.arch.n_group, wl.arch.topk_group)
        print(f"          routing {d.routing}: busiest EP rank at "
              f"{d.expert_load_factor(wl.arch.top_k, m, token_var):.3f}x the mean expert load "
              f"(m={m})")
    if d.kv_lengths:
        print(f"          per-request KV lengths: mean {res['workload']['kv_lengths']['mean']:.0f}"
              f", max {max(d.kv_lengths)}; busiest DP rank {d.kv_tokens():.0f} tokens/request")
    for line in serving:
        print(line)
    print(f"          duration model: {label}")
    print(f"{'':10s}{'makespan (µs)':>15s}{'tok/s/user':>13s}{'tok/s/GPU':>13s}")
    for name, r in (("temporal", res["temporal"]), ("config", res["config"])):
        print(f"{name:10s}{r['makespan_us']:15.1f}{r['per_user_tok_s']:13.2f}"
              f"{r['per_gpu_tok_s']:13.1f}")
    print_config(cfg, m, res["config"], hw)
    if extra_c:
        print(f"{'':10s}{'L2 hit':>9s}{'HBM util':>10s}{'SM util':>9s}   kernel residence per "
              "category (µs)")
        for name in ("temporal", "config"):
            r = res[name]
            cats = "  ".join(f"{k}={v:.0f}" for k, v in r["category_time_us"].items() if v > 0)
            print(f"{name:10s}{r['l2_hit_rate']:9.1%}{r['mean_hbm_util']:10.1%}"
                  f"{r['mean_sm_util']:9.1%}   {cats}")
    print(f"speedup   {res['speedup']:.3f}x over temporal")
    if "modes" in res:  # the three modes and the verdict (app.modes)
        print("\n".join(verdict_lines(res["modes"])))
    print(describe(res["ceiling"]) + " (simulated temporal)")
    ch = res["sms_choice"]
    even = "|".join(str(x) for x in ch["even_split"])
    if ch["how"] == "search":
        scorer = res.get("prediction", {}).get("scorer", "event simulator")
        print(f"SM split  {'|'.join(str(x) for x in cfg.alloc)} from a quick search "
              f"(Algorithm 2 with the {scorer}, {ch['exact_calls']} evaluations, "
              f"{ch['seconds']:.1f} s); the even split {even} gives {ch['even_speedup']:.3f}x: "
              f"{split_effect(res['speedup'], ch)}. Fix it with --sms "
              f"{','.join(str(x) for x in cfg.alloc)}, or --sms even")
    elif ch["how"] == "even":
        print(f"SM split  even ({even}); the split matters: leave --sms out for a quick search "
              "of the best split, or run `subgpu search`")
    for f in ("trace", "gantt", "utilization"):
        if getattr(a, f, None):
            print(f"wrote     {getattr(a, f)}")
    for f in ("gantt", "trace"):  # the main run and the head
        if getattr(a, f, None) and res.get("trace_shows"):
            print(f"          ({f}: {res['trace_shows']})")
            break
    if getattr(a, "utilization", None):
        print(f"          (utilization: {res['figures_show']})")
    print(res["prediction"]["text"])
