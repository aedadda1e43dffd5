"""A workload = model + deployment + GPU, and the helpers that turn user input (kernel names,
SM lists, microbatch sizes) into a validated ``Config``. Shared by the CLI, the experiments and
the notebooks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from .graph import Deployment, OpGraph, build_graph
from .hardware import Hardware, get_hardware
from .models import ModelArch, resolve_model
from .space import Config, check_cut, chain_cut, temporal_config

__all__ = ["Workload", "throughputs"]


def throughputs(makespan_us: float, tokens_per_gpu: float) -> dict[str, float]:
    """Per-user and per-GPU decode throughput of one step.

    Args:
        makespan_us: decode-step (forward-pass) time in µs, > 0.
        tokens_per_gpu: tokens produced per step per GPU (G / n).

    Returns:
        ``{"makespan_us", "per_user_tok_s" (= 1e6 / makespan), "per_gpu_tok_s"
        (= tokens_per_gpu * 1e6 / makespan)}``.

    Raises:
        ValueError: a non-positive or non-finite makespan.
    """
    from .pareto import throughputs as _tp

    per_user, per_gpu = _tp(makespan_us, tokens_per_gpu)
    return {"makespan_us": float(makespan_us), "per_user_tok_s": float(per_user),
            "per_gpu_tok_s": float(per_gpu)}


@dataclass(frozen=True)
class Workload:
    """A model served by a deployment on a GPU type.

    Attributes:
        arch: the model. deploy: the deployment. hw: the GPU.
    """

    arch: ModelArch
    deploy: Deployment
    hw: Hardware
    _graphs: dict = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_names(cls, model: str = "gpt-oss-120b", hardware: str = "B200",
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
        """Build after validating the deployment against the model and the GPU's HBM capacity.

        Raises:
            ValueError: invalid deployment, or weights + KV cache larger than the GPU's HBM.
        """
        deploy.validate(arch)
        deploy.check_memory(arch, hw)
        return cls(arch, deploy, hw)

    @property
    def batch(self) -> int:
        """R = G/d, the per-GPU attention batch (requests) that microbatches divide."""
        return self.deploy.requests_per_gpu

    def graph(self, microbatches: int = 1) -> OpGraph:
        """The region graph for ``microbatches`` microbatches (cached)."""
        if microbatches not in self._graphs:
            self._graphs[microbatches] = build_graph(self.arch, self.deploy, microbatches)
        return self._graphs[microbatches]

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

    def temporal(self) -> Config:
        """The temporal baseline configuration."""
        return temporal_config(self.graph(1).n, self.hw, self.batch)

    def macro_starts(self) -> list[int]:
        """Cut points of the paper's "Macro" design: the last full-attention FMHA of the region
        alone in segment 1 (``[i, i+1]``); with w = 1 the rest of the region shares stage 0."""
        g = self.graph(1)
        full = [i for i, k in enumerate(g.kernels) if k.category == "attn_full"]
        if not full:
            raise ValueError(f"model {self.arch.name} has no full-attention layer for the Macro "
                             "design")
        i = full[-1]
        return [i] if i + 1 >= g.n else [i, i + 1]

    def config(self, starts: Sequence[int | str], sms: Sequence[int], microbatch: int,
               reuse: bool, policy: str = "wavefront") -> Config:
        """A validated configuration from cut points (kernel names or indices where segments
        start), SMs per stage, microbatch size b and boundary reuse.

        Raises:
            ValueError: any infeasibility (names the field: cuts, allocation, D, microbatch, ...).
        """
        g = self.graph(1)
        idx = sorted(g.index(s) for s in starts)
        if len(set(idx)) != len(idx) or any(i == 0 for i in idx):
            raise ValueError(f"cuts must be distinct kernel positions in 1..{g.n - 1}, got {list(starts)}")
        seg = chain_cut(g.n, idx)
        K = len(idx) + 1
        check_cut(seg, g.n, g.edges, K)
        w = 1 if reuse else 0
        D = K - w
        if len(sms) != D:
            raise ValueError(f"sms: {len(sms)} pools given, the cut has {K} segments and w={w}, "
                             f"so D = {D} stages need {D} pool sizes")
        cfg = Config(D=D, w=w, seg_of=seg, alloc=tuple(int(s) for s in sms),
                     microbatch=int(microbatch), policy=policy)
        cfg.check(g.n, g.edges, self.hw, self.batch)
        return cfg

    def even_split(self, D: int) -> list[int]:
        """The SM budget split as evenly as the quantum allows over D stages (SMs)."""
        from .space import even_allocation

        hw = self.hw
        return even_allocation(hw.sm_budget, D, hw.sm_quantum, hw.min_pool_sms).tolist()

    def config_from_options(self, cuts: Sequence[int | str] | None, sms: Sequence[int] | None,
                            microbatch: int | None, reuse: bool | None,
                            policy: str = "wavefront") -> Config:
        """A configuration from command-line style options, with the CLI's defaults: the Macro
        cut (``macro_starts``) with boundary reuse when ``cuts`` is None (explicit cuts default to
        no reuse), an even SM split, and two microbatches.

        Raises:
            ValueError: reuse with fewer than 2 cuts, or any infeasibility of ``config``.
        """
        starts = list(cuts) if cuts else self.macro_starts()
        if reuse is None:
            reuse = not cuts
        K = len(starts) + 1
        if reuse and K < 3:
            raise ValueError("cuts: --reuse (w = 1) needs at least 2 cuts (3 segments, the last "
                             "sharing stage 0 with the first); give another cut or --no-reuse")
        D = K - (1 if reuse else 0)
        alloc = list(sms) if sms else self.even_split(D)
        b = microbatch if microbatch is not None else max(1, self.batch // 2)
        return self.config(starts, alloc, b, reuse, policy)
