"""The one ``Workload``: the region graphs of a model on a deployment and GPU (or of a synthetic
region) for each microbatch count m, with the batch accounting that names configurations and
throughputs (docs/method.md §2). Used by the CLI, the search, the experiments and the notebooks;
``space.config`` turns user input (kernel names, SM lists, microbatch sizes) into a validated
``Config`` for a workload.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from subgpu_jax.model.checks import finite, pos_int
from subgpu_jax.model.graph import Deployment, OpGraph, build_graph
from subgpu_jax.model.hardware import Hardware, get_hardware
from subgpu_jax.model.memory import check_memory
from subgpu_jax.model.models import DEFAULT_MODEL, ModelArch, resolve_model

__all__ = ["Workload"]


@dataclass(frozen=True, eq=False)
class Workload:
    """The region graphs of one model/deployment (or a synthetic region) for each microbatch
    count m.

    Attributes:
        graph_fn: m -> ``OpGraph`` built for m microbatches (called once per m, cached).
        batch: R, the per-GPU attention batch (requests); m must divide it; the microbatch size
            in a ``Config`` is b = R / m.
        tokens_per_gpu: G / n, tokens per step per GPU (per-GPU throughput numerator).
        name: label for reports.
        arch, deploy, hw: the model, deployment and GPU when built from a model (None for a
            synthetic region; ``hw`` may be None when the GPU is given separately).

    Raises:
        ValueError: ``batch`` not an integer >= 1 or ``tokens_per_gpu`` not finite and > 0.
    """

    graph_fn: Callable[[int], OpGraph]
    batch: int
    tokens_per_gpu: float
    name: str = ""
    arch: ModelArch | None = None
    deploy: Deployment | None = None
    hw: Hardware | None = None
    _graphs: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "batch", pos_int(self.batch, "batch"))
        object.__setattr__(self, "tokens_per_gpu",
                           finite(self.tokens_per_gpu, "tokens_per_gpu", lo=0.0, lo_open=True))

    @classmethod
    def from_model(cls, arch: ModelArch, deploy: Deployment, hw: Hardware | None = None
                   ) -> "Workload":
        """Graphs from ``graph.build_graph(arch, deploy, m)``; R = deploy.requests_per_gpu,
        tokens per GPU = G / n.

        Raises:
            ValueError: a deployment invalid for the model.
        """
        deploy.validate(arch)
        return cls(lambda m: build_graph(arch, deploy, m), deploy.requests_per_gpu,
                   deploy.tokens_per_gpu, name=f"{arch.name}", arch=arch, deploy=deploy, hw=hw)

    @classmethod
    def from_names(cls, model: str = DEFAULT_MODEL, hardware: str = "B200",
                   deploy: Deployment | None = None) -> "Workload":
        """Build from a model name or config.json path and a hardware preset name.

        Raises:
            ValueError: unknown model/hardware, or a deployment invalid for the model.
        """
        arch = resolve_model(model)
        hw = get_hardware(hardware)
        d = deploy or Deployment()
        return cls.checked(arch, d, hw)

    @classmethod
    def checked(cls, arch: ModelArch, deploy: Deployment, hw: Hardware) -> "Workload":
        """``from_model`` after checking weights + KV cache + activations against the GPU's
        memory budget (``model.memory.check_memory``: ``deploy.gpu_memory_utilization`` of its
        HBM).

        Raises:
            ValueError: invalid deployment, or a deployment over its memory budget.
        """
        deploy.validate(arch)
        check_memory(arch, deploy, hw)
        return cls.from_model(arch, deploy, hw)

    def graph(self, m: int = 1) -> OpGraph:
        """The region graph for m microbatches (cached).

        Raises:
            ValueError: m < 1 or not dividing ``batch``.
        """
        m = pos_int(m, "microbatches")
        if self.batch % m:
            raise ValueError(f"microbatches={m} must divide the per-GPU batch {self.batch}")
        if m not in self._graphs:
            self._graphs[m] = self.graph_fn(m)
        return self._graphs[m]

    def microbatch_size(self, m: int) -> int:
        """b = R / m."""
        return self.batch // m

    def m_of(self, cfg) -> int:
        """m = R / b of a configuration (any object with an int ``microbatch``)."""
        return self.batch // cfg.microbatch

    def microbatches_of(self, microbatch: int) -> int:
        """m = R / b.

        Raises:
            ValueError: b does not divide R.
        """
        R = self.batch
        if isinstance(microbatch, bool) or microbatch < 1 or R % microbatch:
            raise ValueError(f"microbatch={microbatch} must divide the per-GPU attention batch "
                             f"R = {R}")
        return R // microbatch

    def macro_starts(self) -> list[int]:
        """Cut points of the paper's "Macro" design: the last full-attention FMHA of the region
        alone in segment 1 (``[i, i+1]``); with w = 1 the rest of the region shares stage 0. A
        region whose every layer slides (Mistral-7B-v0.1, a Mixtral with ``sliding_window``)
        isolates its last sliding-window attention instead.

        Raises:
            ValueError: a region without any attention kernel."""
        g = self.graph(1)
        full = [i for i, k in enumerate(g.kernels) if k.category == "attn_full"] or \
            [i for i, k in enumerate(g.kernels) if k.category.startswith("attn")]
        if not full:
            raise ValueError(f"model {self.name} has no attention layer for the Macro design")
        i = full[-1]
        return [i] if i + 1 >= g.n else [i, i + 1]
