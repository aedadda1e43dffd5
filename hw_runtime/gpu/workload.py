"""A real PyTorch workload for every kernel of a per-GPU ``OpGraph`` (docs/method.md §5-6).

``TorchWorkload(graph)`` allocates, once, random weights (nothing is downloaded), KV caches and per-
microbatch activation buffers at the graph's exact per-GPU shapes, and
``workload.launch(kernel_index, microbatch, region_instance, sms=None, lane=0)`` runs that
kernel's work on the current torch stream (wrap it in ``torch.cuda.stream(s)`` to place it on a
green-context pool; ``sms``, the SMs of that pool, and ``lane``, the index of the issuing stream,
are what the pool-sized decode attentions and the per-stream state read). Every launch writes
into preallocated buffers, so launches can be captured in CUDA graphs.

Kernels (``Kernel.op``) and what runs:

========================  ===================================================================
rmsnorm                   ``F.rms_norm`` of the residual into ``xn``
qkv                       ``addmm`` xn @ W_qkv (+ bias) -> qkv            [Rm, (qh+2kvh)*hd]
rope_kv                   (q/k RMSNorm for Qwen3) RoPE of q and k at position kv_history-1;
                          q -> ``q``, k and v written into slot kv_history-1 of the KV cache
                          (ring slot ``(kv_history-1) % window`` for sliding layers)
attn                      ``F.scaled_dot_product_attention(..., enable_gqa=True)`` (or the
                          ``--attention`` kernel: Triton, FlashInfer) of one query
                          token over the layer's KV (kv_history tokens, or the window for
                          sliding layers). Attention sinks are APPROXIMATED by a per-head scale
                          of the output (the exact rescaling needs the log-sum-exp, which SDPA
                          does not return; the extra work is one tiny elementwise kernel)
o_proj                    ``addmm`` attn_out @ W_o (+ bias) -> o_part
allreduce (attention)     virtual collective (below) + residual add + post-attention RMSNorm
residual_norm             residual add + post-attention RMSNorm (attention TP 1)
router                    hn[:Tr] @ W_router (+ bias) -> fp32 logits
topk                      ``torch.topk`` + softmax over the k selected logits
dispatch                  virtual all-to-all: gather of the routed tokens into the expert input
                          ``x_exp`` [experts hit, tokens per expert, H] + the collective
expert_up                 ``baddbmm`` over the local experts hit (+ bias), clamped SwiGLU of
                          GPT-OSS (alpha 1.702, limit 7; SiLU-GLU for other families)
expert_down               ``baddbmm`` (+ bias) -> y_exp
combine                   virtual all-to-all + top-k weighted sum (``baddbmm``) + residual add
mlp_up / mlp_down         dense SwiGLU MLP (``mm``): dense models, the dense layers of MoE
                          models (a region may mix dense and MoE layers), shared experts
                          (``shared_up`` / ``shared_down``, added in the combine)
allreduce (mlp) /         virtual collective + residual add / residual add
residual
mla_down, mla_q_up,       multi-head latent attention, absorbed (``kernels._mla_*``): latent
rope_kv, attn, mla_v_up   down-projection; q up + W_UK; compressed-cache append; the qh heads
                          as qh queries of one head over the cache; W_UV per head
topk (grouped)            DeepSeek-V3 routing: sigmoid scores, top groups, top-k inside them
========================  ===================================================================

Virtual collectives (docs/method.md §5): the endpoint memory work is a copy of the payload
(``Kernel.comm_bytes``, read + write, from the kernel's source activation into a staging buffer),
then the kernel's local work, then a spin (``torch.cuda._sleep``, calibrated in clock cycles per
µs when the workload is built) so the kernel lasts at least ``comm_floor_us + comm_bytes /
link_Bps`` (3 µs + payload / 450 GB/s for H200 NVLink 4). The copy's expected time at the copy
peak is subtracted from the spin. With ``proxy`` the copy is the paced collective proxy instead
and there is no spin (``hw_runtime.gpu.collectives``, ``--collectives proxy``).

Routing is static: the expected counts of docs/method.md §5 (``G*k/(n*m)`` assignments per microbatch,
spread evenly over the expected number of distinct local experts hit, padded to equal counts per
expert so one ``bmm`` serves them all), not the data-dependent top-k result; this keeps every
launch free of host synchronisation and capturable.

Datatypes: bf16 weights, activations and KV. Expert weights must be bf16 on Hopper (MXFP4 has no
tensor-core support there): build the graph with ``dataclasses.replace(arch, expert_dtype='bf16')``
(``hopper_arch`` does that, and also runs FP8 experts' GEMMs in bf16) so the simulator's byte
counts match what runs; a graph with MXFP4 or FP8 experts is refused.

A model with several region kinds (``build_forward``) gets one workload per kind, each built
from its own region graph and sharing the main one's residual stream (``residual_of`` /
``share_residual``; ``hw_runtime.gpu.step``).

Memory: weights are allocated per region instance (``instances``, default every instance, so a
kernel never finds another instance's weights in L2), activations per microbatch (shared by the
region instances of that microbatch, which run one after the other). KV caches:
``kv_cache="per_instance"`` gives every region instance its own cache (the reference's 18
full-attention layers x 4.29 GB = 77 GB fit on one H200), ``"shared"`` one cache per layer of the
region, reused by all instances (fine for timing: a 4.29 GB cache is far larger than the L2), and
``"auto"`` (default) picks per-instance when it fits. The bytes needed are computed before any
allocation and a workload that does not fit in the GPU's free memory is refused.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from subgpu_jax.model.checks import pos_int
from subgpu_jax.model.graph import Kernel, OpGraph
from subgpu_jax.model.models import ModelArch

from hw_runtime.gpu.collectives import VirtualCollectives
from hw_runtime.gpu.decode_attn import ATTENTION_BACKENDS, resolve as resolve_attention
from hw_runtime.gpu.moe_gemm import (deinterleave_gate_up, resolve as resolve_moe_gemm,
                                     routed_tokens, static_routing)
from hw_runtime.gpu.fused import resolve as resolve_elementwise
from hw_runtime.gpu.kernels import KernelContext, kernel_builder
from hw_runtime.gpu.policies import KernelSettings
from hw_runtime.gpu.shapes import (GIB, WorkloadConsts, WorkloadShapes, act_specs, estimate_bytes,
                                   kv_specs, need_graph, region_instances, weight_specs,
                                   workload_shapes)

__all__ = [
    "TorchWorkload", "WorkloadShapes", "workload_shapes", "estimate_bytes", "hopper_arch",
    "arch_label", "WorkloadConsts", "WorkloadMemoryError",
]

class WorkloadMemoryError(MemoryError):
    """The workload needs more device memory than is free."""


def hopper_arch(arch: ModelArch) -> ModelArch:
    """``arch`` with every module group in bf16 (weights and GEMMs; Hopper has no MXFP4 tensor
    cores, and the workload's GEMMs run in bf16, also for DeepSeek-V3's block-wise FP8 layers):
    build the graph for the workload and the simulator from this (``ModelArch.all_bf16``)."""
    return arch.all_bf16()


def arch_label(arch: ModelArch) -> str:
    """The model's name as the runtime's output prints it: ``"mixtral-8x7b (bf16 experts)"``
    for a MoE model (``hopper_arch`` runs its experts in bf16), the plain name otherwise."""
    return f"{arch.name} (bf16 experts)" if arch.num_experts else arch.name


# --------------------------------------------------------------------------- the workload

def _torch():
    try:
        import torch  # type: ignore
    except Exception as e:
        raise ImportError(f"TorchWorkload needs torch ({e.__class__.__name__}: {e}); install the "
                          "'gpu' extra") from None
    return torch


class TorchWorkload(VirtualCollectives):
    """Buffers and kernel callables for one per-GPU region graph.

    Args:
        graph: from ``build_graph(hopper_arch(arch), deployment, microbatches)``.
        device: torch device (``"cuda"``, ``"cuda:0"``; ``"cpu"`` runs everything except the
            spins, for tests).
        instances: region instances with their own weights (and KV when per-instance); a launch
            for instance l uses copy ``l % instances``. Default: all ``graph.num_regions``.
        kv_cache: ``"auto"``, ``"per_instance"`` or ``"shared"``.
        seed: RNG seed of the random weights/caches.
        comm_floor_us, link_Bps: the virtual collective's floor and link bandwidth.
        copy_Bps: copy bandwidth used to subtract the payload copy from the spin (H200: 4245e9).
        spin: emulate the link time with ``torch.cuda._sleep`` (CUDA only; ``--collectives
            sleep``). proxy: run each collective as the paced collective proxy instead
            (``hw_runtime.gpu.collectives``, ``--collectives proxy``; CUDA only; not with spin).
            dist: a ``distributed.DistContext``: each collective is a real one over this
            rank's groups (``--collectives nccl``; not with spin or proxy).
        kernels: the kernel choices (``policies.KernelSettings``; default: every policy's
            default), kept as ``self.kernels``. This workload reads three of them, each resolved
            once here: ``elementwise`` (``"auto"``, ``"triton"``, ``"torch"``: ``fused.resolve``)
            -> ``self.elementwise``; ``attention``, the decode attention (``"auto"``,
            ``"sdpa"``, ``"triton"``, ``"flashinfer"``: ``decode_attn.resolve``) ->
            ``self.attention``; ``moe_gemm``, the expert GEMMs (``"auto"``, ``"triton"``: one
            grouped launch over the routed tokens with the gather and activation fused,
            ``"bmm"``: gather + batched GEMMs over padded expert batches;
            ``moe_gemm.resolve``) -> ``self.moe_gemm`` (``"bmm"`` or ``"triton"``; None for a
            region without MoE layers). With Triton, GPT-OSS's interleaved gate/up columns are
            stored as gate then up halves (once, at allocation, as vLLM loads them). ``gemm``
            and ``lane_priority`` are the ``Executor``'s.
        workspace_bytes: memory kept free for workspaces/temporaries.
        residual_of: another region kind's workload of the same model, deployment and
            microbatch count whose residual stream this one reads and writes
            (``share_residual``): the region kinds of one forward pass (``build_forward``:
            DeepSeek-V3's dense then MoE layers) then run one after the other on the same tokens.

    Raises:
        ValueError: a graph the workload cannot run, bad arguments.
        WorkloadMemoryError: the GPU's free memory is below ``estimate_bytes(...)["total"]``
            (nothing is allocated then).
        ImportError: torch is missing.
    """

    def __init__(self, graph: OpGraph, device: str = "cuda", instances: int | None = None,
                 kv_cache: str = "auto", seed: int = 0, comm_floor_us: float = 3.0,
                 link_Bps: float = 450e9, copy_Bps: float = 4245e9, spin: bool = True,
                 proxy: bool = False, dist: Any = None,
                 workspace_bytes: float = 2 * GIB, residual_of: "TorchWorkload | None" = None,
                 kernels: KernelSettings = KernelSettings()) -> None:
        torch = _torch()
        self.torch = torch
        self.graph = graph
        self.arch, self.deployment = need_graph(graph)
        self.shapes = s = workload_shapes(graph)
        self.instances = region_instances(graph, instances)
        if kv_cache not in ("auto", "per_instance", "shared"):
            raise ValueError(f"TorchWorkload: kv_cache must be 'auto', 'per_instance' or 'shared', "
                             f"got {kv_cache!r}")
        self.device = torch.device(device)
        self.is_cuda = self.device.type == "cuda"
        if self.is_cuda and not torch.cuda.is_available():
            raise ValueError("TorchWorkload: device is CUDA but torch sees no GPU")
        self.comm_floor_us, self.link_Bps, self.copy_Bps = comm_floor_us, link_Bps, copy_Bps
        if spin and proxy:
            raise ValueError("TorchWorkload: spin (--collectives sleep) and proxy (--collectives "
                             "proxy) exclude each other")
        self.spin, self.proxy = bool(spin) and self.is_cuda, bool(proxy) and self.is_cuda
        if dist is not None and (spin or proxy):
            raise ValueError("TorchWorkload: dist (--collectives nccl) runs real collectives; "
                             "it excludes spin and proxy")
        if not isinstance(kernels, KernelSettings):
            raise ValueError(f"TorchWorkload: kernels must be a KernelSettings, got "
                             f"{type(kernels).__name__}")
        self.dist = dist
        self.kernels = kernels                # as asked: other region kinds resolve it too
        self.elementwise = resolve_elementwise(kernels.elementwise, self.is_cuda)
        self.attention = resolve_attention(kernels.attention, self.is_cuda, self.arch.is_mla)
        self.moe_gemm = (resolve_moe_gemm(kernels.moe_gemm, self.is_cuda, s.cap) if s.moe
                         else None)
        # the GPU's SMs: the pool of a launch issued with sms=None (the whole GPU)
        self.device_sms = (torch.cuda.get_device_properties(self.device).multi_processor_count
                           if self.is_cuda else 1)
        # ---- memory check before allocating anything
        free = None
        if self.is_cuda:
            free, _total = torch.cuda.mem_get_info(self.device)
        if kv_cache == "auto":
            per = estimate_bytes(graph, self.instances, "per_instance", workspace_bytes)
            kv_cache = "per_instance" if (free is None or per["total"] <= free) else "shared"
        self.kv_cache = kv_cache
        self.memory = estimate_bytes(graph, self.instances, kv_cache, workspace_bytes)
        if free is not None and self.memory["total"] > free:
            mm = self.memory
            raise WorkloadMemoryError(
                f"TorchWorkload needs {mm['total'] / 1e9:.1f} GB (weights {mm['weights'] / 1e9:.1f}, "
                f"KV {mm['kv'] / 1e9:.1f}, activations {mm['activations'] / 1e9:.2f}, workspace "
                f"{mm['workspace'] / 1e9:.1f}) but the GPU has {free / 1e9:.1f} GB free; use "
                f"kv_cache='shared' or fewer instances")
        # ---- allocate
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(int(seed))
        wspec, kvspec, aspec = (weight_specs(s, self.arch), kv_specs(s),
                                act_specs(s, graph))
        self.weights = [self._alloc_weights(wspec) for _ in range(self.instances)]
        if self.moe_gemm == "triton" and self.arch.family == "gpt_oss":
            for w in self.weights:
                deinterleave_gate_up(w)
        n_kv = self.instances if kv_cache == "per_instance" else 1
        self.kv = [{nm: self.rand(shp, 1.0) for nm, (shp, _) in kvspec.items()}
                   for _ in range(n_kv)]
        self.acts = []
        for _ in range(s.m):
            a = {nm: self.rand(shp, 1.0, dt) for nm, (shp, dt) in aspec.items()}
            a[f"resid.{s.P}"] = a["resid.0"]  # the region's output is the next instance's input
            self.acts.append(a)
        if residual_of is not None:
            self.share_residual(residual_of)
        self._consts()
        self._cycles_per_us = self._calibrate_spin() if self.spin else 0.0
        self._fns = [self._make(i, kern) for i, kern in enumerate(graph.kernels)]
        if self.is_cuda:
            torch.cuda.synchronize(self.device)

    # ---------------------------------------------------------------- allocation helpers
    def _dtype(self, dt: str):
        t = self.torch
        return {"bf16": t.bfloat16, "fp32": t.float32, "int64": t.int64}[dt]

    def rand(self, shape, std: float, dt: str = "bf16"):
        t = self.torch
        if dt == "int64":
            return t.zeros(shape, dtype=t.int64, device=self.device)
        x = t.empty(shape, dtype=self._dtype(dt), device=self.device)
        x.normal_(0.0, std, generator=self.generator)
        return x

    def _alloc_weights(self, spec) -> dict:
        out = {}
        for nm, (shp, _dt) in spec.items():
            if nm.endswith("norm.w"):
                out[nm] = self.torch.ones(shp, dtype=self.torch.bfloat16, device=self.device)
            elif nm.endswith("sink_scale"):
                x = self.torch.empty(shp, dtype=self.torch.float32, device=self.device)
                x.uniform_(0.6, 1.0, generator=self.generator)
                out[nm] = x.to(self.torch.bfloat16)
            elif nm.endswith(".b"):
                out[nm] = self.rand(shp, 0.02)
            elif nm.endswith(".corr"):  # fp32 routing-score correction bias (DeepSeek-V3)
                out[nm] = self.rand(shp, 0.02, "fp32")
            else:  # fan-in scaled so activations stay O(1)
                fan_in = shp[-2]
                out[nm] = self.rand(shp, 1.0 / math.sqrt(fan_in))
        return out

    def _consts(self) -> None:
        """``self.consts`` (``WorkloadConsts``) of this graph."""
        t, s = self.torch, self.shapes
        pos = s.kv_history - 1
        rope = {}
        for nm, d in (("", s.hd), ("_r", s.r)):
            if not d:
                continue
            inv = 1.0 / (10000.0 ** (t.arange(0, d // 2, dtype=t.float64) * 2.0 / d))
            ang = pos * inv
            rope["rope_cos" + nm] = t.cos(ang).to(t.bfloat16).to(self.device)
            rope["rope_sin" + nm] = t.sin(ang).to(t.bfloat16).to(self.device)
        moe = {}
        if s.moe:
            rows = s.n_hit * s.cap
            moe["wsel_idx"] = (t.arange(s.Rm) % s.Tr).to(self.device)
            if self.moe_gemm == "triton":   # (moe_gemm.static_routing)
                counts, src, slot = static_routing(s.A, s.n_hit, s.cap, s.Tr)
                moe["routing"] = routed_tokens(t.tensor(src, device=self.device), counts, s.cap)
                moe["comb_idx"] = t.tensor([slot[j % s.A] for j in range(s.Rm * s.k)],
                                           device=self.device)
            else:
                moe["disp_idx"] = (t.arange(rows) % s.Tr).to(self.device)
                moe["comb_idx"] = (t.arange(s.Rm * s.k) % rows).to(self.device)
        # the decode attention's own state (FlashInfer: one wrapper per KV length)
        attn = ATTENTION_BACKENDS[self.attention].workload_consts(t, s, self.device)
        self.consts = WorkloadConsts(**rope, **moe, **attn)

    # ---------------------------------------------------------------- kernels
    def _make(self, i: int, kern: Kernel):
        """The callable ``f(mu, l, sms=None, lane=0)`` of kernel ``i`` (built by its op's
        ``kernels.KERNELS`` entry; ``kernels`` module docstring).

        Raises:
            ValueError: an op the workload does not implement.
        """
        return kernel_builder(kern, self.arch)(KernelContext(self, i, kern))

    def share_residual(self, src: "TorchWorkload") -> None:
        """Make every microbatch's region input/output (``resid.0``, aliased by ``resid.P``)
        the buffer of ``src`` (same model, deployment and microbatch count; no copy).

        Raises:
            ValueError: ``src`` has another model, deployment, microbatch count or device.
        """
        if (src.arch != self.arch or src.deployment != self.deployment
                or src.shapes.m != self.shapes.m or src.device != self.device):
            raise ValueError("TorchWorkload.share_residual: the workloads must have the same "
                             "model, deployment, microbatch count and device")
        for a, b in zip(self.acts, src.acts):
            a["resid.0"] = a[f"resid.{self.shapes.P}"] = b["resid.0"]

    def derive(self, graph: OpGraph) -> "TorchWorkload":
        """A workload for ``graph`` that SHARES this one's weights and KV caches and owns new
        activation buffers (one device copy of the weights and caches serves every microbatch
        count); ``self`` when ``graph`` has the same microbatch count.

        ``graph`` must be the same model and deployment (any microbatch count). KV rows of
        microbatch mu are rows ``mu*R/m .. (mu+1)*R/m`` of the shared caches, as here. Every
        kernel choice (``kernels`` and the resolved ones) and collective setting is this
        workload's. Activation memory:
        ``estimate_bytes(graph)["activations"]`` (tens of MB).

        Raises:
            ValueError: another model/deployment.
        """
        if graph.arch != self.arch or graph.deployment != self.deployment:
            raise ValueError("derive_workload: the graph's model/deployment differs from the base "
                             "workload's")
        if graph.microbatches == self.graph.microbatches:
            return self
        W = object.__new__(TorchWorkload)
        keep = ("torch", "arch", "deployment", "instances", "device", "is_cuda", "comm_floor_us",
                "link_Bps", "copy_Bps", "spin", "proxy", "dist", "kernels", "elementwise",
                "attention", "moe_gemm", "device_sms", "kv_cache", "weights", "kv",
                "_cycles_per_us")
        for name in keep:
            setattr(W, name, getattr(self, name))
        W.graph = graph
        W.shapes = s = workload_shapes(graph)
        W.memory = estimate_bytes(graph, self.instances, self.kv_cache)
        W.generator = self.torch.Generator(device=self.device)
        W.generator.manual_seed(1 + graph.microbatches)
        W.acts = []
        for _ in range(s.m):
            a = {nm: W.rand(shp, 1.0, dt) for nm, (shp, dt) in act_specs(s, graph).items()}
            a[f"resid.{s.P}"] = a["resid.0"]
            W.acts.append(a)
        W._consts()
        W._fns = [W._make(i, k) for i, k in enumerate(graph.kernels)]
        return W

    # ---------------------------------------------------------------- public API
    def kernel_fn(self, i: int):
        """The callable ``f(mu, l, sms=None, lane=0)`` that issues kernel ``i`` (``launch``
        without its checks; ``sms`` None: the whole GPU)."""
        return self._fns[i]

    @property
    def n(self) -> int:
        """Kernels in the region."""
        return self.graph.n

    def launch(self, kernel_index: int | str, microbatch: int = 0, region_instance: int = 0,
               sms: int | None = None, lane: int = 0) -> None:
        """Run one kernel's work on the current torch stream (asynchronously).

        Args:
            kernel_index: index (or name, e.g. ``"L1.attn"``) of the kernel in the region.
            microbatch: 0..m-1 (selects the activation buffers and the KV rows).
            region_instance: 0..num_regions-1 (selects the weights/KV copy ``l % instances``).
            sms: the number of SMs of the pool the current stream runs on (None: the whole
                GPU, ``device_sms``): the pool-sized decode attentions size their KV split by
                it. It places nothing: the stream does.
            lane: the index of the issuing stream (0..): real collectives use this lane's
                communicators, FlashInfer this lane's workspace.

        Raises:
            ValueError: an index out of range (names the valid range), ``sms`` not a positive
                int or None, ``lane`` not an int >= 0.
        """
        i = self.graph.index(kernel_index)
        m, L = self.shapes.m, self.graph.num_regions
        if isinstance(microbatch, bool) or not 0 <= int(microbatch) < m:
            raise ValueError(f"TorchWorkload.launch: microbatch must be in 0..{m - 1}, got "
                             f"{microbatch!r}")
        if isinstance(region_instance, bool) or not 0 <= int(region_instance) < L:
            raise ValueError(f"TorchWorkload.launch: region_instance must be in 0..{L - 1}, got "
                             f"{region_instance!r}")
        if sms is not None:
            pos_int(sms, "TorchWorkload.launch: sms")
        if isinstance(lane, bool) or not isinstance(lane, int) or lane < 0:
            raise ValueError(f"TorchWorkload.launch: lane must be an int >= 0, got {lane!r}")
        self._fns[i](int(microbatch), int(region_instance),
                     None if sms is None else int(sms), lane)

    def launch_region(self, microbatch: int = 0, region_instance: int = 0,
                      kernels: Sequence[int] | None = None, sms: int | None = None,
                      lane: int = 0) -> None:
        """Launch kernels (default: all, in order) of one region instance for one microbatch,
        issued on a pool of ``sms`` SMs (None: the whole GPU) from stream ``lane`` (``launch``).
        """
        for i in (range(self.n) if kernels is None else kernels):
            self.launch(i, microbatch, region_instance, sms, lane)

    def output(self, microbatch: int = 0):
        """The residual stream of a microbatch (the region's input and output buffer)."""
        return self.acts[microbatch]["resid.0"]

    def kernel_info(self, i: int) -> dict:
        """Analytical work of kernel ``i`` (from the graph) plus the collective's floor."""
        k = self.graph.kernels[i]
        return {"name": k.name, "op": k.op, "category": k.category, "flops": k.flops,
                "hbm_bytes": k.hbm_bytes, "weight_bytes": k.weight_bytes,
                "kv_bytes": k.kv_bytes, "act_bytes": k.act_bytes, "comm_bytes": k.comm_bytes,
                "comm_target_us": self.comm_target_us(k)}

    def summary(self) -> dict:
        """JSON-able description of shapes, memory and settings."""
        s = self.shapes
        return {"shapes": {f: getattr(s, f) for f in s.__dataclass_fields__},
                "memory_bytes": self.memory, "kv_cache": self.kv_cache,
                "instances": self.instances, "spin_cycles_per_us": self._cycles_per_us,
                "comm_floor_us": self.comm_floor_us, "link_Bps": self.link_Bps,
                "expert_dtype": self.arch.expert_dtype, "device": str(self.device)}
