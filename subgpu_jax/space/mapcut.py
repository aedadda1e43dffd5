"""Carry a configuration of one region kind over to another (``map_cut``).

A model whose layers are not all alike (DeepSeek-V3: 3 dense layers then 58 MoE layers; a
Qwen3-MoE with ``mlp_only_layers``) has several region graphs (``model.graph.build_forward``). A
configuration is chosen for the main region; every other region kind runs with the same stages,
SM pools, microbatches and policy, and its cut carried over kernel by kernel: each segment starts
at the first kernel of the same place in the layer (e.g. a cut before the MoE ``router`` starts
before the dense ``mlp_up``). ``score.step.time_step`` times the whole step with it, and the GPU
runtime's plan (``hw_runtime.plan``) runs it.
"""

from __future__ import annotations

import dataclasses

from subgpu_jax.model.graph import OpGraph
from subgpu_jax.space.config import Config, chain_cut

__all__ = ["map_cut", "PLACE"]

#: Place of each kernel kind inside a layer (the launch order of ``build_graph``), used to carry a
#: cut from one region kind to another; kernels of different kinds at the same place share a rank.
PLACE = {"rmsnorm": 0, "qkv": 1, "mla_down": 1, "mla_q_up": 2, "rope_kv": 3, "attn": 4,
         "mla_v_up": 5, "o_proj": 6, "allreduce": 7, "residual_norm": 7, "router": 8,
         "topk": 9, "dispatch": 10, "shared_up": 11, "shared_down": 12, "expert_up": 13,
         "mlp_up": 13, "expert_down": 14, "mlp_down": 14, "combine": 15, "mlp_allreduce": 15,
         "mlp_residual": 15}


def _rank(g: OpGraph, i: int) -> tuple[int, int]:
    k = g.kernels[i]
    op = k.name.split(".", 1)[1] if "." in k.name else k.name
    return (k.layer, PLACE.get(op, 99))


def map_cut(cfg: Config, src: OpGraph, dst: OpGraph) -> Config:
    """``cfg`` (a configuration of region ``src``) carried over to region ``dst``: same D, w,
    SM pools, microbatch and policy; each segment start moves to the first kernel of ``dst`` at
    or after the same place in the layer (``PLACE``), then starts are pushed apart so that every
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
