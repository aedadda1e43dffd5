"""The per-GPU shapes of one model under one deployment: the one description the graph builder
(``model.builder``), the memory accounting (``model.memory``) and the runtime's buffers
(``hw_runtime.gpu.shapes``) read for the heads, the QKV width, the dense, expert and shared-expert
sizes and the MLA dimensions, so that each is split over the GPUs in one place (what each
kernel reads or writes, and the datatypes, stay the builder's and the runtime's).

Units: elements (heads, dimensions, experts); no bytes here (the datatypes are the model's).
"""

from __future__ import annotations

from dataclasses import dataclass

from subgpu_jax.model.deployment import Deployment
from subgpu_jax.model.models import ModelArch

__all__ = ["LocalShapes"]


@dataclass(frozen=True)
class LocalShapes:
    """What one GPU holds of each layer (attention TP ``t``, MoE EP ``e``).

    Fields:
        H: hidden size. hd: head dim. t, e: attention TP and MoE EP degrees.
        qh: query heads per GPU (``num_heads // t``). kvh: KV heads per GPU
            (``Deployment.local_kv_heads``: 1 for MLA or where KV heads are replicated).
        nq: the fused QKV projection's output width, ``(qh + 2 kvh) hd`` (0 for MLA).
        I: the dense MLP's intermediate size per GPU (``intermediate // t``).
        E, El: routed experts in all and per GPU (``num_experts // e``); F: one expert's
            intermediate size; Fs: the shared experts' intermediate size per GPU
            (``num_shared_experts * moe_intermediate // t``).
        mla: multi-head latent attention; then c, r, ql: the KV latent rank, the rope head dim
            and the query latent rank (0: no query compression), nope, v: the no-rope query
            head dim and the value head dim, nd: the down projection's width ``ql + c + r``
            (all 0 without MLA).
    """

    H: int
    hd: int
    t: int
    e: int
    qh: int
    kvh: int
    nq: int
    I: int  # noqa: E741  (the intermediate size, as the papers name it)
    E: int
    El: int
    F: int
    Fs: int
    mla: bool = False
    c: int = 0
    r: int = 0
    ql: int = 0
    nope: int = 0
    v: int = 0
    nd: int = 0

    @classmethod
    def of(cls, arch: ModelArch, deploy: Deployment) -> "LocalShapes":
        """The shapes of ``arch`` on one GPU of ``deploy`` (integer division where a size is
        split; ``Deployment.validate`` refuses the splits that do not divide)."""
        t, e = deploy.attn_tp, deploy.moe_ep
        qh, kvh = arch.num_heads // t, deploy.local_kv_heads(arch)
        mla = {}
        if arch.is_mla:
            c, r, ql = arch.kv_lora_rank, arch.qk_rope_head_dim, arch.q_lora_rank
            mla = dict(mla=True, c=c, r=r, ql=ql, nope=arch.qk_nope_head_dim,
                       v=arch.v_head_dim, nd=ql + c + r)
        return cls(H=arch.hidden, hd=arch.head_dim, t=t, e=e, qh=qh, kvh=kvh,
                   nq=0 if arch.is_mla else (qh + 2 * kvh) * arch.head_dim,
                   I=arch.intermediate // t, E=arch.num_experts,
                   El=arch.num_experts // e if arch.num_experts else 0, F=arch.moe_intermediate,
                   Fs=arch.num_shared_experts * arch.moe_intermediate // t, **mla)
