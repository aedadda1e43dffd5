"""The torch side of a whole decode step (docs/method.md §6): one ``TorchWorkload`` per region
kind of the forward pass and the ``TorchHead``, and the launch of one task of a ``StepPlan``.

A model whose layers are not all alike (DeepSeek-V3: 3 dense layers, then 58 MoE layers; a
Qwen3-MoE with ``mlp_only_layers``) has several region graphs (``model.graph.build_forward``).
``StepWorkloads(base)`` gives each region kind its own ``TorchWorkload`` built from its own
region graph (weights of all of that kind's instances, its KV caches, its activations), every
one reading and writing the residual stream of ``base`` (the main region's workload,
``TorchWorkload.share_residual``), so the runs of a ``hw_runtime.plan.StepPlan`` execute one
after the other on the same tokens, and a ``TorchHead`` whose weights are shared by every
microbatch count. ``launch(task, kernel, sms, lane)`` runs one kernel of a plan task (a region
kernel of its run's workload at instance ``offset + region``, or a head kernel) issued on a pool
of ``sms`` SMs from stream ``lane``. Works on CPU (tests) and CUDA (the executor).
"""

from __future__ import annotations

from typing import Any

from hw_runtime.plan import HEAD_RUN, PlanTask

__all__ = ["StepWorkloads"]


class StepWorkloads:
    """Per microbatch count m: the workloads of every run of ``build_forward`` and the head.

    Args:
        base: the main region's ``TorchWorkload`` (any microbatch count); its device, KV-cache
            mode, kernel choices (``kernels``) and collective settings are used for the other
            region kinds.
        workload_for: ``m -> TorchWorkload`` of the main region at m microbatches sharing the
            base's weights (``Executor.workload_for``); default: ``base`` only (m must then be
            the base's microbatch count).
        derive: ``(workload, graph) -> TorchWorkload`` sharing the workload's weights at the
            graph's microbatch count (``executor.derive_workload``); default: none (every m
            must be the first one asked for).

    Raises:
        ValueError: from the workloads (a graph they cannot run).
        WorkloadMemoryError: a region kind does not fit in the free device memory.
    """

    def __init__(self, base: Any, workload_for=None, derive=None) -> None:
        self.base = base
        self._main = workload_for or self._only_base
        self._derive = derive or self._same_m
        self._kind_base: dict = {}
        self._cache: dict = {}
        self._head = None

    def _only_base(self, m: int):
        if m != self.base.graph.microbatches:
            raise ValueError(f"StepWorkloads: m must be {self.base.graph.microbatches} (the base "
                             f"workload's microbatches) without workload_for, got {m}")
        return self.base

    @staticmethod
    def _same_m(wl: Any, graph: Any) -> Any:
        if graph.microbatches != wl.graph.microbatches:
            raise ValueError("StepWorkloads: another microbatch count needs derive "
                             "(executor.derive_workload)")
        return wl

    def get(self, m: int) -> tuple[list, Any]:
        """``(workloads, head)`` at m microbatches: one workload per run of
        ``build_forward(arch, deployment, m)`` (runs of the same region kind share one) and
        the ``TorchHead`` reading the main workload's residuals. Cached per m."""
        if m in self._cache:
            return self._cache[m]
        from subgpu_jax.model.graph import build_forward
        from hw_runtime.gpu.head import TorchHead
        from hw_runtime.gpu.workload import TorchWorkload

        b = self.base
        fp = build_forward(b.arch, b.deployment, m)
        main = self._main(m)
        per_kind: dict = {}
        wls = []
        for g, _count in fp.runs:
            key = g.region_kinds
            if key not in per_kind:
                if g is fp.main:
                    wl = main
                else:
                    if key not in self._kind_base:  # its own weights, allocated once
                        self._kind_base[key] = TorchWorkload(
                            g, device=str(b.device), kv_cache=b.kv_cache,
                            comm_floor_us=b.comm_floor_us, link_Bps=b.link_Bps,
                            copy_Bps=b.copy_Bps, spin=b.spin, proxy=b.proxy, dist=b.dist,
                            seed=1 + len(self._kind_base), kernels=b.kernels)
                    wl = self._derive(self._kind_base[key], g)
                    wl.share_residual(main)
                per_kind[key] = wl
            wls.append(per_kind[key])
        head = TorchHead(main, share=self._head)
        self._head = self._head or head
        self._cache[m] = (wls, head)
        return self._cache[m]

    @staticmethod
    def resolve(wls: list, offsets, head: Any, task: PlanTask, kernel: int) -> tuple[Any, Any]:
        """``(graph kernel, call)`` of kernel ``kernel`` of ``task`` (a ``StepPlan`` or
        ``LaunchPlan`` task): ``call(sms, lane)`` launches it on the current stream, issued on
        a pool of ``sms`` SMs (a count; None: the whole GPU) from the stream of index ``lane``
        (an int >= 0): a head kernel for ``HEAD_RUN`` (which reads only the lane), else the
        run's workload at region instance ``offsets[run] + task.region``."""
        if task.run == HEAD_RUN:
            kern = head.kernels[kernel]
            return kern, lambda sms=None, lane=0: head.launch(kern.name, lane)
        wl, mu, r = wls[task.run], task.microbatch, offsets[task.run] + task.region
        fn = wl.kernel_fn(kernel)
        return wl.graph.kernels[kernel], lambda sms=None, lane=0: fn(mu, r, sms, lane)

    @staticmethod
    def launch(wls: list, offsets, head: Any, task: PlanTask, kernel: int,
               sms: int | None = None, lane: int = 0) -> None:
        """Run kernel ``kernel`` of ``task`` on the current stream, issued on a pool of ``sms``
        SMs (None: the whole GPU) from stream ``lane`` (``resolve``)."""
        StepWorkloads.resolve(wls, offsets, head, task, kernel)[1](sms, lane)
