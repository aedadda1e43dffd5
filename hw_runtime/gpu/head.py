"""Torch kernels of the decode step's head (``model.graph.head_kernels``): final RMSNorm, the
LM head over this GPU's vocabulary shard, Gumbel-max sampling and the embedding lookup of the
sampled token, for the whole per-GPU batch R after the last region.

``TorchHead(workload)`` allocates the head's weights and buffers next to a ``TorchWorkload``
(same device, random weights, nothing downloaded) and ``launch()`` runs the four kernels on the
current torch stream (``lane``: that stream's index, for the exchange's real collective under
``--collectives nccl``), writing only into preallocated tensors (capturable in a CUDA graph):

==========  ==================================================================================
final_norm  RMSNorm of each microbatch's last residual (``resid.0``, the region output) into
            ``final_xn`` [R, h]
lm_head     ``mm`` final_xn @ W_head [h, V/t] -> bf16 ``logits`` [R, V/t]
sample      logits + Gumbel noise (a fixed bf16 buffer, so replays are deterministic), ``max``
            over the shard -> ``tokens`` [R] (int64); with t > 1 a virtual exchange of the
            candidates (copy + spin, as the workload's collectives)
embed       ``index_select`` of the sampled tokens' rows of the local embedding shard
            [V/t, h] into each microbatch's ``resid.0`` (the next step's input; R/t rows, the
            others arriving through the virtual all-reduce)
==========  ==================================================================================
"""

from __future__ import annotations

import math
from typing import Any

from subgpu_jax.model.graph import head_kernels

__all__ = ["TorchHead"]


class TorchHead:
    """The head kernels of a ``TorchWorkload``'s model and deployment (see the module docstring).

    Args:
        wl: the ``TorchWorkload`` whose last residuals the head reads.
        share: another ``TorchHead`` of the same model and deployment (any microbatch count)
            whose weights and Gumbel noise this one reuses (one device copy of the V/t x h LM
            head and embedding shards); None allocates them.

    Attributes:
        kernels: the graph's head kernels (``head_kernels``), in launch order.
        weights, acts: the head's tensors by name.

    Raises:
        ValueError: from ``head_kernels`` for an invalid deployment; ``share`` of another model
            or deployment.
    """

    def __init__(self, wl: Any, share: "TorchHead | None" = None) -> None:
        t = wl.torch
        self.wl, self.t = wl, t
        arch, dep = wl.arch, wl.deployment
        self.kernels = head_kernels(arch, dep)
        s = wl.shapes
        self.R, self.H, self.m, self.Rm = s.R, s.H, s.m, s.Rm
        self.tp = dep.attn_tp
        self.Vl = int(math.ceil(arch.vocab / self.tp))
        dev, bf = wl.device, t.bfloat16
        if share is not None:
            if share.wl.arch != arch or share.wl.deployment != dep:
                raise ValueError("TorchHead: share must be a head of the same model and "
                                 "deployment")
            self.weights, gumbel = share.weights, share.acts["gumbel"]
        else:
            self.weights = {
                "final_norm.w": t.ones((self.H,), dtype=bf, device=dev),
                "lm_head.w": wl.rand((self.H, self.Vl), 1.0 / math.sqrt(self.H)),
                "embed.w": wl.rand((self.Vl, self.H), 1.0),
            }
            u = t.empty((self.R, self.Vl), dtype=t.float32, device=dev)
            u.uniform_(1e-6, 1.0 - 1e-6, generator=wl.generator)
            gumbel = (-t.log(-t.log(u))).to(bf)
        self.acts = {
            "final_xn": t.empty((self.R, self.H), dtype=bf, device=dev),
            "logits": t.empty((self.R, self.Vl), dtype=bf, device=dev),
            "gumbel": gumbel,
            "scores": t.empty((self.R, self.Vl), dtype=bf, device=dev),
            "best": t.empty((self.R,), dtype=bf, device=dev),
            "tokens": t.zeros((self.R,), dtype=t.int64, device=dev),
        }
        for k in self.kernels:
            if k.is_comm:
                self.acts["stage." + k.name] = t.zeros((int(math.ceil(k.comm_bytes / 2.0)),),
                                                       dtype=bf, device=dev)
        self._fns = {k.name: getattr(self, "_" + k.op) for k in self.kernels}
        self._spin = {k.name: wl.spin_cycles(k) for k in self.kernels}
        self._by_name = {k.name: k for k in self.kernels}

    @property
    def names(self) -> tuple[str, ...]:
        """The head kernels' names in launch order."""
        return tuple(k.name for k in self.kernels)

    def launch(self, name: str | None = None, lane: int = 0) -> None:
        """Run one head kernel (``name``) or all four in order on the current torch stream,
        whose index is ``lane`` (an int >= 0: the groups of the sample/embed exchange under
        ``--collectives nccl``; unused otherwise).

        Raises:
            ValueError: an unknown kernel name (lists the names).
        """
        if name is None:
            for nm in self.names:
                self._fns[nm](lane)
            return
        if name not in self._fns:
            raise ValueError(f"head kernel must be one of {', '.join(self.names)}, got {name!r}")
        self._fns[name](lane)

    # ------------------------------------------------------------------ kernels
    def _comm(self, name: str, src, lane: int) -> None:
        buf = self.acts.get("stage." + name)
        if buf is not None:
            self.wl.endpoint_(self._by_name[name], buf, src.reshape(-1), lane)
        if self._spin[name]:
            self.t.cuda._sleep(self._spin[name])

    def _final_norm(self, lane: int) -> None:
        F_ = self.t.nn.functional
        w, xn, Rm = self.weights["final_norm.w"], self.acts["final_xn"], self.Rm
        for mu in range(self.m):
            x = self.wl.acts[mu]["resid.0"]
            xn[mu * Rm:(mu + 1) * Rm].copy_(F_.rms_norm(x, (self.H,), w, 1e-5))

    def _lm_head(self, lane: int) -> None:
        self.t.mm(self.acts["final_xn"], self.weights["lm_head.w"], out=self.acts["logits"])

    def _sample(self, lane: int) -> None:
        a = self.acts
        self.t.add(a["logits"], a["gumbel"], out=a["scores"])
        self.t.max(a["scores"], dim=-1, out=(a["best"], a["tokens"]))
        self._comm("sample", a["best"], lane)

    def _embed(self, lane: int) -> None:
        t, a, Rm = self.t, self.acts, self.Rm
        rows = max(1, math.ceil(Rm / self.tp))
        W = self.weights["embed.w"]
        for mu in range(self.m):
            dst = self.wl.acts[mu]["resid.0"]
            t.index_select(W, 0, a["tokens"][mu * Rm:mu * Rm + rows], out=dst[:rows])
        self._comm("embed", a["final_xn"], lane)
