"""What a kernel builder of ``kernels`` gets: the ``KernelContext`` of one kernel of a
``TorchWorkload`` (its tensors, shapes and the helpers its builders share: RMSNorm, the
virtual collective's endpoint and wait, rotary embedding), and ``rotate_into``, the PyTorch
rotary embedding. Needs torch only when a helper runs.
"""

from __future__ import annotations

from typing import Any

from hw_runtime.gpu import fused

__all__ = ["KernelContext", "rotate_into"]


def rotate_into(t, dst, x, cos, sin) -> None:
    """dst <- x rotated in the half-split layout over its last axis (width ``2 * len(cos)``):
    ``(x1 cos - x2 sin, x2 cos + x1 sin)``, four PyTorch kernels (the ``torch`` elementwise
    path; ``fused`` has the one-kernel version)."""
    h2 = x.shape[-1] // 2
    x1, x2 = x[..., :h2], x[..., h2:]
    d1, d2 = dst[..., :h2], dst[..., h2:]
    t.mul(x1, cos, out=d1)
    d1.addcmul_(x2, sin, value=-1.0)
    t.mul(x2, cos, out=d2)
    d2.addcmul_(x1, sin)


class KernelContext:
    """Everything a kernel builder needs about kernel ``i`` of a ``TorchWorkload``.

    Attributes:
        wl: the workload; t: torch; F_: torch.nn.functional; s: its ``WorkloadShapes``;
        arch: the model; kern: the graph kernel; p: its layer's tensor prefix ``"L{j}."``;
        H, Rm, hd, qh, kvh: hidden size, requests per microbatch, head dim, query and KV heads;
        eps: RMSNorm epsilon; fused: the workload's elementwise kernels are the Triton ones
        (``hw_runtime.gpu.fused``); attention: its resolved decode attention (a name of
        ``decode_attn.ATTENTION_BACKENDS``); device_sms: the GPU's SMs (the pool of a launch
        issued with ``sms=None``); spin: spin cycles after a virtual collective; stage: the
        name of its communication buffer; kv_pos: the KV-cache slot of the new token; W, KV,
        ACT: weight, KV-cache and activation tensor dicts (per region instance / microbatch),
        nW, nKV their counts; resid_in, resid_out: residual-stream tensor names of the layer.

    The pool and the stream of a launch are not here: a kernel callable gets them as its
    arguments ``sms`` and ``lane`` (``kernels`` module docstring).
    """

    def __init__(self, wl: Any, i: int, kern: Any) -> None:
        t, s = wl.torch, wl.shapes
        self.wl, self.t, self.s, self.arch, self.kern = wl, t, s, wl.arch, kern
        self.F_ = t.nn.functional
        j = kern.layer
        self.p = f"L{j}."
        self.H, self.Rm, self.hd, self.qh, self.kvh = s.H, s.Rm, s.hd, s.qh, s.kvh
        self.eps = 1e-5
        self.spin = wl.spin_cycles(kern)
        self.stage = f"stage.{i}"
        self.kv_pos = s.kv_pos[j]
        self.W, self.KV, self.ACT = wl.weights, wl.kv, wl.acts
        self.nW, self.nKV = len(self.W), len(self.KV)
        self.resid_in, self.resid_out = f"resid.{j}", f"resid.{j + 1}"
        self.fused = wl.elementwise == "triton"
        self.attention = wl.attention
        self.device_sms = int(wl.device_sms)

    def pool(self, sms: int | None) -> int:
        """The SMs of the issuing pool from a launch's ``sms`` argument: ``sms``, or the whole
        GPU (``device_sms``) for None."""
        return self.device_sms if sms is None else int(sms)

    def norm_into(self, dst, x, w) -> None:
        """dst <- RMSNorm(x) * w over the last axis (one Triton kernel when ``fused``)."""
        if self.fused and x.dim() == 2:
            fused.rmsnorm_(dst, x, w, self.eps)
            return
        dst.copy_(self.F_.rms_norm(x, (x.shape[-1],), w, self.eps))

    def add_norm_into(self, h, hn, a, b, w) -> None:
        """h <- a + b; hn <- RMSNorm(h) * w (one Triton kernel when ``fused``)."""
        if self.fused and a.dim() == 2:
            fused.add_rmsnorm_(h, hn, a, b, w, self.eps)
            return
        self.t.add(a, b, out=h)
        self.norm_into(hn, h, w)

    def comm(self, a, src, lane: int = 0) -> None:
        """The endpoint work of a collective issued from stream ``lane`` (its index): ``src``
        into the stage's buffer (``VirtualCollectives.endpoint_``: a copy, the paced proxy, or
        with ``--collectives nccl`` the real collective over that lane's groups)."""
        if self.stage in a:
            self.wl.endpoint_(self.kern, a[self.stage], src.reshape(-1), lane)

    def spin_end(self) -> None:
        """The ``sleep`` mode's wait to the modelled link time of a virtual collective (a
        one-thread ``torch.cuda._sleep``: it holds no SMs); nothing in the other modes."""
        if self.spin:
            self.t.cuda._sleep(self.spin)

    def rope_into(self, dst, x) -> None:
        """dst <- rotary embedding of x (half-split layout) at the decode position."""
        rotate_into(self.t, dst, x, self.wl.consts.rope_cos, self.wl.consts.rope_sin)
