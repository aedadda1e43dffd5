"""Text lines ``subgpu simulate`` prints about the serving accounting (docs/accounting.md): the
memory budget, the KV datatype, the MoE dispatch and collectives, and a whole generation.
"""

from __future__ import annotations

from subgpu_jax.model.deployment import Deployment
from subgpu_jax.model.memory import MemoryUse
from subgpu_jax.model.models import ModelArch
from subgpu_jax.model.routing import (busiest_rank_load, rank_count_variance,
                                      remote_ranks_per_token)

__all__ = ["serving_lines", "serving_json"]


def serving_json(arch: ModelArch, deploy: Deployment, m: int, mu: MemoryUse,
                 gen: dict | None) -> dict:
    """The JSON fields of ``simulate --json`` for the serving accounting.

    Args:
        arch: the model. deploy: the deployment as given (a generation's, not its step's).
        m: microbatches of the configuration. mu: ``model.memory.memory_use``.
        gen: ``{"temporal": GenerationResult, "config": GenerationResult}`` or None (one step).

    Returns:
        ``{"memory": {... GB}, "kv_dtype", "dtypes", "unquantised_layers": {group: [layer,
        ...]} (when a checkpoint keeps some layers unquantised), "moe": {...} (MoE models),
        "generation": {...}}``.
    """
    out: dict = {"memory": mu.as_dict(), "kv_dtype": arch.kv_dtype,
                 "dtypes": {g: list(arch.dtypes(g)) for g in
                            ("attn", "dense_mlp", "shared_experts", "experts", "other")}}
    if arch.unquantised_layers:  # {group: [layers that keep it in weight_dtype]}
        kept: dict = {}
        for i, tag in enumerate(arch.unquantised_layers):
            for g in filter(None, tag.split("+")):
                kept.setdefault(g, []).append(i)
        out["unquantised_layers"] = kept
    if arch.is_moe:
        load = busiest_rank_load(arch.num_experts, arch.top_k, deploy.moe_ep,
                                 deploy.global_batch, deploy.num_gpus, m,
                                 deploy.expert_load_factor(arch.top_k, m, rank_count_variance(
                                     arch.num_experts, arch.top_k, deploy.moe_ep, arch.n_group,
                                     arch.topk_group)))
        e = deploy.moe_ep
        copies = (arch.top_k * (e - 1) / e if deploy.dispatch == "per-expert"
                  else remote_ranks_per_token(arch.num_experts, arch.top_k, e, arch.n_group,
                                              arch.topk_group))
        out["moe"] = {"dispatch": deploy.dispatch, "remote_copies_per_token": copies,
                      "busiest_rank_assignments": load.assignments,
                      "busiest_rank_experts_hit": load.experts_hit,
                      "tp_gather": bool(deploy.moe_tp_gather and deploy.attn_tp > 1)}
    if gen is not None:
        out["generation"] = {"input_len": deploy.input_len, "output_len": deploy.output_len,
                             **{k: {"mean_makespan_us": g.makespan_us, "steps": g.steps}
                                for k, g in gen.items()}}
    return out


def serving_lines(arch: ModelArch, deploy: Deployment, m: int, mu: MemoryUse,
                  gen: dict | None) -> list[str]:
    """The lines ``subgpu simulate`` prints under its workload line (arguments as
    ``serving_json``)."""
    j = serving_json(arch, deploy, m, mu, gen)
    me = j["memory"]
    sw = arch.sliding_window if "sliding" in arch.layer_types else 0
    slide = (f"; the {arch.layer_types.count('sliding')} sliding-window layers keep the last {sw}"
             if 0 < sw < me["kv_tokens"] else "")
    lines = [f"          memory per GPU: weights {me['weights_GB']:.1f} GB + KV cache "
             f"{me['kv_GB']:.1f} GB ({arch.kv_dtype}, {me['kv_tokens']} tokens x "
             f"{me['requests_per_gpu']} requests{slide}) + activations "
             f"{me['activations_GB']:.2f} GB = "
             f"{me['total_GB']:.1f} GB of a {me['budget_GB']:.1f} GB budget "
             f"(--gpu-memory-utilization {me['gpu_memory_utilization']:g} x "
             f"{me['hbm_GB']:.1f} GB)"]
    # the groups this model has (the JSON lists every group's dtypes)
    has = {"dense_mlp": "dense" in arch.mlp_types or not arch.is_moe,
           "shared_experts": arch.num_shared_experts > 0, "experts": arch.is_moe}
    q = [f"{g} {w}" + (f"/{x}" if x != w else "") for g, (w, x) in j["dtypes"].items()
         if has.get(g, True) and (w, x) != ("bf16", "bf16")]
    if q:
        lines.append("          quantised (weights/GEMM): " + ", ".join(q))
    if "unquantised_layers" in j:
        lines.append(f"          kept {arch.weight_dtype} by the checkpoint: " + "; ".join(
            f"{g} in layers {', '.join(map(str, ls))}" for g, ls in
            j["unquantised_layers"].items()))
    if "moe" in j:
        mo = j["moe"]
        what = ("one copy per selected expert" if mo["dispatch"] == "per-expert"
                else "one copy per destination rank, deduplicated")
        gather = (f"; the combine all-gathers the MoE output over the {deploy.attn_tp} attention "
                  "ranks" if mo["tp_gather"] else "")
        lines.append(f"          MoE dispatch {mo['dispatch']} ({what}: "
                     f"{mo['remote_copies_per_token']:.2f} remote copies per token){gather}; "
                     f"busiest EP rank {mo['busiest_rank_assignments']:.1f} assignments on "
                     f"{mo['busiest_rank_experts_hit']:.2f} experts per microbatch")
    if gen is not None:
        st = gen["config"].steps
        kvs = ", ".join(str(s["kv_history"]) for s in st)
        lines.append(f"          whole generation: {deploy.input_len} -> "
                     f"{deploy.input_len + deploy.output_len} tokens ({deploy.output_len} "
                     f"steps); times are the mean step over it, from {len(st)} simulated "
                     f"step(s) at KV {kvs} (docs/accounting.md)")
    return lines
