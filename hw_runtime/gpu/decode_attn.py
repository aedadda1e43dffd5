"""The runtime's decode-attention backends (issue 38, item 5): one class per ``--attention``
kernel in one registry, as vLLM's attention-backend registry.

``ATTENTION_BACKENDS`` maps a name to an ``AttentionBackend`` subclass, registered where it is
defined (``@register_attention_backend``). Its capabilities are class attributes
(``supports_gqa``, ``supports_mla``, ``pool_sized``: sizes its grid by the issuing pool's
``sms``, ``per_lane``: keeps state per issuing stream, its ``lane``), its refusals ``check``, its
per-workload state
``workload_consts`` and its launches ``gqa``/``mla`` (``kernels._attn``, ``kernels._mla_attn``);
the runtime asks these, never a kernel's name. The backends:

* ``"sdpa"`` (``SdpaAttention``): ``torch.nn.functional.scaled_dot_product_attention``, which
  on the H200 picks a cuDNN kernel named ``sdpa_sm80_flash_fprop_wmma``: it streams the KV cache
  at 1.02-1.07 of the copy bandwidth on the whole GPU and at 0.96-1.09 of a pool's on 32-96 SMs.
* ``"triton"`` (``TritonAttention``): the split-KV kernels of ``splitkv_attn`` (GQA without
  expanding the cache, and multi-head latent attention), splits sized for the issuing pool;
  refused where Triton or CUDA is missing. It measured 1-12% slower than SDPA on the whole GPU
  (two leases) and 1.2-1.6x slower on 32-64 SMs; for MLA, where SDPA has no fused kernel
  (576-wide keys, 512-wide values), ``mla_decode_attention`` is 1.9-3.5x faster.
* ``"flashinfer"`` (``FlashInferAttention``): FlashInfer's tensor-core batch decode over the same
  caches (``flashinfer_attn``, GQA/MHA only; refused without the package or CUDA), 1-3% and
  1.1-1.2x slower than SDPA. The pipelined Llama-3.1-70B winner (1.099x with SDPA) measured
  0.939x and 1.049x with Triton and FlashInfer (docs/results.md, "Kernel choices").

``ATTENTION`` (the ``--attention`` choices, ``hw_runtime.gpu.policies``) is ``"auto"`` and the
registry's names; ``resolve`` turns a choice into a backend's name (``"auto"``: SDPA for GQA,
Triton for MLA). The Triton launchers are re-exported here (``decode_attention`` ...). Pure
Python until a kernel runs (tested on the CPU).
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar

from subgpu_jax.model.checks import choice

from hw_runtime.gpu import flashinfer_attn
from hw_runtime.gpu.splitkv_attn import (BLOCK_N, FP8_KV, MAX_SPLITS, MLA_HEADS_PER_PROGRAM,
                                         MLA_MAX_SPLITS, decode_attention, mla_decode_attention,
                                         num_kv_splits, paged_decode_attention)

__all__ = ["AttentionBackend", "ATTENTION_BACKENDS", "register_attention_backend",
           "attention_backend", "SdpaAttention", "TritonAttention", "FlashInferAttention",
           "ATTENTION", "resolve", "auto_choice", "attention_help", "AUTO_HELP", "AUTO_TRITON_MLA",
           "num_kv_splits", "decode_attention", "paged_decode_attention", "mla_decode_attention",
           "FP8_KV", "BLOCK_N", "MAX_SPLITS", "MLA_MAX_SPLITS", "MLA_HEADS_PER_PROGRAM"]

#: ``"auto"`` picks the Triton kernel for MLA: on DeepSeek-V3 TP8 shapes it measured 1.9-3.5x
#: faster than SDPA (0.53-0.97 of the copy bandwidth against 0.18-0.43;
#: docs/results.md, "Kernel choices", the ``mla`` rows).
AUTO_TRITON_MLA = True

#: Name -> backend class, in registration order (``register_attention_backend``).
ATTENTION_BACKENDS: dict[str, type["AttentionBackend"]] = {}


def register_attention_backend(cls: type["AttentionBackend"]) -> type["AttentionBackend"]:
    """Class decorator: add ``cls`` to ``ATTENTION_BACKENDS`` under ``cls.name``.

    Raises:
        ValueError: an empty name, ``"auto"``, a name already registered, or a backend that
            runs neither GQA/MHA nor MLA.
    """
    if not cls.name or cls.name == "auto" or cls.name in ATTENTION_BACKENDS:
        raise ValueError(f"register_attention_backend: {cls.__name__} needs a new name other "
                         f"than 'auto', got {cls.name!r}")
    if not (cls.supports_gqa or cls.supports_mla):
        raise ValueError(f"register_attention_backend: {cls.__name__} supports neither GQA nor "
                         "MLA")
    ATTENTION_BACKENDS[cls.name] = cls
    return cls


class AttentionBackend:
    """One decode-attention kernel of the runtime (``--attention NAME``). Subclasses set the
    class attributes and override what they support; they are never instantiated.

    Attributes:
        name: the ``--attention`` value. help: its part of ``subgpu run --help``.
        supports_gqa, supports_mla: the GQA/MHA (``kernels._attn``) and the multi-head latent
            (``kernels._mla_attn``) builders run it; anything else is refused there.
        pool_sized: sizes its grid (KV split) by the SMs of the issuing pool, the ``sms`` its
            ``attend`` gets (every launcher passes the pool it issues on: the executor per
            launch, ``time_kernels`` and the co-runs theirs).
        per_lane: keeps state per issuing stream (FlashInfer's workspace holds the split
            partials), keyed by the ``lane`` its ``attend`` gets.
    """

    name: ClassVar[str] = ""
    help: ClassVar[str] = ""
    supports_gqa: ClassVar[bool] = False
    supports_mla: ClassVar[bool] = False
    pool_sized: ClassVar[bool] = False
    per_lane: ClassVar[bool] = False

    @classmethod
    def runs(cls, is_cuda: bool) -> bool:
        """True where the kernel can run on the workload's device (what ``"auto"`` asks)."""
        return True

    @classmethod
    def check(cls, is_cuda: bool, mla: bool) -> None:
        """Refuse ``--attention NAME`` where it cannot run.

        Raises:
            ValueError: one line naming the flag: MLA without ``supports_mla``, GQA/MHA
                without ``supports_gqa``, a device or package the kernel needs is missing.
        """
        if mla and not cls.supports_mla:
            takes = [n for n, b in ATTENTION_BACKENDS.items() if b.supports_mla]
            raise ValueError(f"--attention {cls.name} serves GQA/MHA decode here; multi-head "
                             f"latent attention takes {', '.join(takes)} or auto")
        if not mla and not cls.supports_gqa:
            takes = [n for n, b in ATTENTION_BACKENDS.items() if b.supports_gqa]
            raise ValueError(f"--attention {cls.name} serves multi-head latent attention here; "
                             f"GQA/MHA takes {', '.join(takes)} or auto")

    @classmethod
    def workload_consts(cls, torch: Any, shapes: Any, device: Any) -> dict:
        """Per-workload state of the kernel (``WorkloadConsts`` fields; built per workload, so
        ``TorchWorkload.derive`` rebuilds it for other microbatch counts). ``shapes``: the
        workload's ``WorkloadShapes``. Default: none."""
        return {}

    @classmethod
    def gqa(cls, c: Any) -> Callable[..., None]:
        """The GQA/MHA launch of kernel context ``c`` (``kernelctx.KernelContext``):
        ``attend(q, k, v, out, sink, sms, lane)`` with ``q``, ``out`` ``(Rm, qh, 1, hd)`` bf16
        views, ``k``, ``v`` the ``(Rm, kvh, L, hd)`` caches, ``sink`` the per-head scale
        ``(1, qh, 1, 1)`` of GPT-OSS's sinks or None, ``sms`` the SMs of the issuing pool (an
        int, the whole GPU's outside a partition) and ``lane`` the index of the issuing stream
        (an int >= 0); writes ``out`` only (capturable in a CUDA graph).

        Raises:
            NotImplementedError: a backend without ``supports_gqa``.
        """
        raise NotImplementedError(f"{cls.__name__} does not run GQA/MHA")

    @classmethod
    def mla(cls, c: Any, scale: float) -> Callable[..., None]:
        """The absorbed MLA launch of ``c``: ``attend(q, cache, out, sms, lane)`` with ``q`` the
        ``(Rm, qh, c + r)`` query buffer, ``cache`` ``(Rm, 1, L, c + r)``, ``out`` the
        ``(Rm, qh, c)`` latent output buffer, ``sms`` and ``lane`` as in ``gqa``; ``scale`` the
        softmax scale.

        Raises:
            NotImplementedError: a backend without ``supports_mla``.
        """
        raise NotImplementedError(f"{cls.__name__} does not run MLA")


def _split_kv(c: Any, run: Callable[[Any, Any, Any, Any, int, int], None]
              ) -> Callable[..., None]:
    """``AttentionBackend.gqa``'s ``attend`` of a kernel that writes ``(Rm, qh, hd)``: ``run(q,
    k, v, out, sms, lane)``, then the sink scale in place."""
    Rm, qh, hd = c.Rm, c.qh, c.hd

    def attend(q, k, v, out, sink, sms, lane):
        run(q.view(Rm, qh, hd), k, v, out.view(Rm, qh, hd), sms, lane)
        if sink is not None:
            out.mul_(sink)
    return attend


@register_attention_backend
class SdpaAttention(AttentionBackend):
    """PyTorch's ``scaled_dot_product_attention`` (cuDNN's kernel on the H200); for MLA the
    latent cache as one head (SDPA has no fused kernel for 576-wide keys)."""

    name = "sdpa"
    help = "PyTorch's scaled_dot_product_attention"
    supports_gqa = supports_mla = True

    @classmethod
    def gqa(cls, c):
        t, F_ = c.t, c.F_
        gqa = c.qh != c.kvh

        def attend(q, k, v, out, sink, sms, lane):   # (SDPA: neither sized nor per lane)
            o = F_.scaled_dot_product_attention(q, k, v, enable_gqa=gqa) if gqa else \
                F_.scaled_dot_product_attention(q, k, v)
            if sink is not None:
                t.mul(o, sink, out=out)
            else:
                out.copy_(o)
        return attend

    @classmethod
    def mla(cls, c, scale):
        F_, s = c.F_, c.s
        Rm, qh, cl, r = s.Rm, s.qh, s.c, s.r

        def attend(q, cache, out, sms, lane):
            o = F_.scaled_dot_product_attention(q.view(Rm, 1, qh, cl + r), cache,
                                                cache[..., :cl], scale=scale)
            out.view(Rm, 1, qh, cl).copy_(o)
        return attend


@register_attention_backend
class TritonAttention(AttentionBackend):
    """This module's split-KV kernels (``decode_attention``, ``mla_decode_attention``), the
    splits sized for the issuing pool."""

    name = "triton"
    help = ("split-KV, GQA without expanding the cache, splits sized for the pool: "
            "hw_runtime/gpu/decode_attn.py; for MLA a latent-cache kernel")
    supports_gqa = supports_mla = True
    pool_sized = True

    @classmethod
    def runs(cls, is_cuda):
        from hw_runtime.gpu.fused import triton_available

        return is_cuda and triton_available()

    @classmethod
    def check(cls, is_cuda, mla):
        super().check(is_cuda, mla)
        if not cls.runs(is_cuda):
            why = "the device is not a CUDA GPU" if not is_cuda else "triton does not import"
            raise ValueError(f"--attention triton needs Triton on a CUDA GPU, but {why}; "
                             "use sdpa or auto")

    @classmethod
    def gqa(cls, c):
        return _split_kv(c, lambda q, k, v, out, sms, lane: decode_attention(q, k, v, out, sms))

    @classmethod
    def mla(cls, c, scale):
        s = c.s
        Rm, qh, cl, r = s.Rm, s.qh, s.c, s.r

        def attend(q, cache, out, sms, lane):   # split-KV latent attention, all heads of a
            # request per program, the splits sized for the pool
            mla_decode_attention(q.view(Rm, qh, cl + r), cache[:, 0], out.view(Rm, qh, cl),
                                 sms, scale, cl)
        return attend


@register_attention_backend
class FlashInferAttention(AttentionBackend):
    """FlashInfer's FA2 batch decode over the runtime's caches (``flashinfer_attn``), split
    sized for the pool, one workspace per issuing stream."""

    name = "flashinfer"
    help = ("FlashInfer's FA2 decode over the same caches, split sized for the pool, GQA/MHA "
            "only; needs the flashinfer extra: pip install -e .[flashinfer]")
    supports_gqa = True
    pool_sized = per_lane = True

    @classmethod
    def runs(cls, is_cuda):
        return is_cuda and flashinfer_attn.available()

    @classmethod
    def check(cls, is_cuda, mla):
        super().check(is_cuda, mla)
        if not is_cuda:
            raise ValueError("--attention flashinfer needs a CUDA GPU; use sdpa or auto")
        flashinfer_attn.check_importable()

    @classmethod
    def workload_consts(cls, torch, shapes, device):
        """``attn_decoders``: one ``flashinfer_attn.FlashInferDecode`` per distinct KV length
        of the layers, planned on first use."""
        s = shapes
        return {"attn_decoders": {L: flashinfer_attn.FlashInferDecode(
            torch, s.Rm, s.qh, s.kvh, s.hd, L, torch.bfloat16, device)
            for L in sorted(set(s.kv_len))}}

    @classmethod
    def gqa(cls, c):
        dec = c.wl.consts.attn_decoders[c.s.kv_len[c.kern.layer]]
        return _split_kv(c, lambda q, k, v, out, sms, lane: dec(q, k, v, out, sms, lane=lane))


#: The decode-attention policies ``KernelSettings(attention=...)`` (``TorchWorkload(kernels=...)``)
#: and ``--attention`` take: ``"auto"`` and the registry's names.
ATTENTION: tuple[str, ...] = ("auto", *ATTENTION_BACKENDS)

#: ``--attention auto``'s part of the help (``attention_help``).
AUTO_HELP = ("sdpa for GQA: on the H200 it measured fastest, flashinfer 1-3%% and triton 1-12%% "
             "slower on the whole GPU and 1.2x and 1.6x slower on a 32-SM pool, "
             "docs/results.md; triton for MLA")


def attention_help() -> str:
    """``--attention``'s help (argparse text, ``%%`` for a percent sign): each backend's
    ``help`` in registry order, then ``"auto"``'s."""
    parts = [f"{n} ({b.help})" for n, b in ATTENTION_BACKENDS.items()]
    return f"{', '.join(parts)} or auto ({AUTO_HELP})"


def attention_backend(name: str, mla: bool = False) -> type[AttentionBackend]:
    """The backend a builder runs for a resolved name (``kernels._attn``/``_mla_attn``).

    Raises:
        ValueError: ``"decode attention (GQA/MHA) must be one of ..."`` (or ``(MLA)``): a name
            the registry lacks or whose backend does not support that attention.
    """
    ok = [n for n, b in ATTENTION_BACKENDS.items() if (b.supports_mla if mla else b.supports_gqa)]
    choice(name, f"decode attention ({'MLA' if mla else 'GQA/MHA'})", ok)
    return ATTENTION_BACKENDS[name]


def resolve(policy: str, is_cuda: bool, mla: bool = False) -> str:
    """The decode attention a workload uses: a name of ``ATTENTION_BACKENDS``.

    Args:
        policy: one of ``ATTENTION``. is_cuda: the workload's device is a CUDA GPU.
        mla: the model's attention is multi-head latent attention (``"auto"`` is Triton there
            when ``AUTO_TRITON_MLA`` and Triton runs, SDPA otherwise and for GQA/MHA).

    Raises:
        ValueError: an unknown policy, or the backend's refusal (``AttentionBackend.check``:
            ``"triton"`` without a CUDA device or without Triton, ``"flashinfer"`` without a
            CUDA device or the package, or for MLA).
    """
    if not isinstance(mla, bool):
        raise ValueError(f"decode_attn.resolve: mla must be True or False, got {mla!r}")
    if not isinstance(is_cuda, bool):
        raise ValueError(f"decode_attn.resolve: is_cuda must be True or False, got {is_cuda!r}")
    choice(policy, "--attention", ATTENTION)
    if policy == "auto":
        # SDPA for GQA: on the H200 it streams the KV cache at the copy bandwidth, also on
        # small pools, where the Triton and FlashInfer kernels measured slower; Triton for MLA
        # (docs/results.md, "Kernel choices")
        pick = ATTENTION_BACKENDS[auto_choice(mla)]
        return pick.name if pick.runs(is_cuda) else SdpaAttention.name
    backend = ATTENTION_BACKENDS[policy]
    backend.check(is_cuda, mla)
    return backend.name


def auto_choice(mla: bool) -> str:
    """What ``"auto"`` picks where Triton runs: ``"triton"`` for multi-head latent attention
    (``AUTO_TRITON_MLA``), ``"sdpa"`` for GQA/MHA."""
    return TritonAttention.name if mla and AUTO_TRITON_MLA else SdpaAttention.name
