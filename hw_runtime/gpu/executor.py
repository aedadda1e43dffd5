"""Execute a subgpu_jax ``Config`` on an NVIDIA GPU (docs/method.md §6).

Two layers:

* **Launch plan** (pure CPU, no torch): ``build_launch_plan(graph, cfg)`` turns a configuration
  into the exact schedule the simulator scores: the segment tasks of
  ``taskdag.build_task_dag`` in the global dispatch order, each on the stream of its stage
  (rho_w(k)), with the CUDA events it must wait on (its data predecessors that run on another
  stream; same-stream predecessors, including the stage edge, are implied by stream order) and
  whether it must record an event. ``issue_plan(plan, backend, launch)`` walks a plan against a
  stream backend; ``FakeStreamBackend`` replays it with given kernel durations (stream FIFO +
  event waits), which is how CI checks the plan against the simulator's task DAG.
* **Executor** (needs torch + CUDA): ``Executor(workload)`` holds a ``hw_runtime.gpu.workload.TorchWorkload``
  (weights and KV caches allocated once) and derives the per-microbatch-count workloads from it
  (sharing weights and KV, ``derive_workload``). ``Executor.measure(cfg, mode)`` captures ONE
  decode step (``step_plan``: every run of region instances, with one workload per region kind
  (``hw_runtime.gpu.step``), all microbatches, then the head kernels on the last stage; with
  ``step=False`` the main region's instances only) as a CUDA graph, each stage's tasks on
  its own stream (``mode="green"``: a ``GreenPartition`` with the Config's SM allocation, the
  capturing stream of each kernel fixes its SMs; ``"multistream"``: the same schedule on plain
  streams, no SM partition; ``"temporal"``: the D = 1 plan on one whole-GPU stream), and times
  graph replays with CUDA events: ``warmup`` replays, then ``rounds`` rounds of ``replays``
  back-to-back replays with an event between consecutive replays; the per-pass time is the median
  over all replays, the spread is (max - min) / median of the round medians.

Correctness: ``Executor.check_output(cfg, mode)`` restores the same inputs before each run,
warms the stage streams with a sequential pass on each, captures the pipelined graph, runs the
plan sequentially on one whole-GPU stream (the dispatch order is a topological order of the data
edges, so this is the reference) and replays the graph (twice by default), and compares the
residual-stream outputs of every microbatch (bitwise equality, relative L2 error, replay-to-replay
equality, top-k index flips) and the sampled tokens.

Units: µs for times, bytes, SMs. Errors: ``ValueError`` (one line) for configurations the
workload cannot run, ``ExecutorUnavailable`` when torch / a GPU / green contexts are missing.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from subgpu_jax.model.graph import OpGraph
from subgpu_jax.space.config import Config, temporal_config

# (the stream-priority policies live with the kernel policies; re-exported here)
from hw_runtime.gpu.policies import DEFAULT_LANE_PRIORITY, LANE_PRIORITY, LANE_PRIORITY_HELP
from hw_runtime.plan import (LaunchPlan, PlanTask, StepPlan, build_launch_plan, build_step_plan,
                             issue_plan)

__all__ = ["ExecutorUnavailable", "Executor", "Measurement", "derive_workload", "MODES",
           "cuda_torch", "LANE_PRIORITY", "DEFAULT_LANE_PRIORITY", "LANE_PRIORITY_HELP"]

#: Execution modes: SM-partitioned stages, the same schedule on plain streams, one stream.
MODES: tuple[str, ...] = ("green", "multistream", "temporal")


class ExecutorUnavailable(RuntimeError):
    """torch, a CUDA GPU, or green-context support is missing on this machine."""


# =========================================================================== the GPU executor

def cuda_torch():
    try:
        import torch  # type: ignore
    except Exception as e:  # noqa: BLE001
        raise ExecutorUnavailable(f"executor: torch is not importable ({e.__class__.__name__}: "
                                  f"{e})") from None
    if not torch.cuda.is_available():
        raise ExecutorUnavailable("executor: no CUDA GPU is visible (torch.cuda.is_available() "
                                  "is False)")
    return torch


def derive_workload(base, graph: OpGraph):
    """``base.derive(graph)`` (``TorchWorkload.derive``): a workload for ``graph`` (another
    microbatch count of the same model and deployment) that shares ``base``'s weights and KV
    caches; ``base`` itself when the microbatch count is the same.

    Raises:
        ValueError: another model/deployment than ``base``.
    """
    return base.derive(graph)


class _TorchBackend:
    """``StreamBackend`` over torch streams: one ``torch.cuda.Event`` per recorded task.

    ``wl`` is the workload of a ``LaunchPlan``, or for a ``StepPlan`` the list of each run's
    workload; ``offsets`` the runs' first region instances; ``head`` the ``TorchHead``;
    ``gemm`` the GEMM launch policy (``hw_runtime.gpu.blas``) and ``pool_of`` each stream's
    pool size (SMs, by ``cuda_stream`` handle). Every launch is issued with the SMs of its
    stream's pool (None: the whole GPU) and the stream's index as its lane
    (``StepWorkloads.resolve``): the pool-sized decode attentions size their KV split by the
    first, real collectives and FlashInfer's workspaces are per lane."""

    def __init__(self, torch, streams: Sequence, wl, gemm=None, pool_of=None,
                 offsets: Sequence[int] = (0,), head=None) -> None:
        self.t, self.streams = torch, list(streams)
        self.wls = list(wl) if isinstance(wl, (list, tuple)) else [wl]
        self.offsets, self.head = list(offsets), head
        self.gemm, self.pool_of = gemm, (pool_of or {})
        self._keys: dict[tuple[int, int], str] = {}
        self.ev: dict[int, Any] = {}
        self._cur = None

    def wait(self, stream: int, task: int) -> None:
        self.streams[stream].wait_event(self.ev[task])

    def launch(self, stream: int, task: PlanTask, kernel: int) -> None:
        s = self.streams[stream]
        if self._cur is not s:
            self._ctx_exit()
            self._ctx = self.t.cuda.stream(s)
            self._ctx.__enter__()
            self._cur = s
        from hw_runtime.gpu.step import StepWorkloads
        kern, call = StepWorkloads.resolve(self.wls, self.offsets, self.head, task, kernel)
        # SMs of this stream's pool (None: whole GPU, or torch on the CPU, whose stream is None)
        pool = self.pool_of.get(s.cuda_stream) if s is not None else None
        if self.gemm is not None and self.gemm.active:   # GEMMs planned for this stream's pool
            if (task.run, kernel) not in self._keys:
                from subgpu_jax.model.calibration import kernel_key
                self._keys[(task.run, kernel)] = kernel_key(kern)
            self.gemm.prepare(self._keys[(task.run, kernel)], pool,
                              lambda: call(pool, stream), s)
        call(pool, stream)                       # this pool's SMs, this stream's lane

    def record(self, stream: int, task: int) -> None:
        e = self.t.cuda.Event()
        e.record(self.streams[stream])
        self.ev[task] = e

    def _ctx_exit(self) -> None:
        if self._cur is not None:
            self._ctx.__exit__(None, None, None)
            self._cur = None

    def close(self) -> None:
        self._ctx_exit()
        if self.gemm is not None:
            self.gemm.reset()


@dataclass
class Measurement:
    """A timed configuration.

    Attributes:
        mode: ``green`` / ``multistream`` / ``temporal``.
        makespan_us: median per-pass time over all timed replays (µs).
        round_medians_us: median of each round (µs). spread: (max - min) / median of the round
            medians. replays, rounds, warmup: what was run.
        capture_s: seconds to capture + instantiate the graph. graph_nodes: captured nodes (or
            None). plan: ``LaunchPlan.summary()``. partition: ``GreenPartition.summary()`` or
            None. all_us: every replay's time (µs). note: set when graph capture failed and
            eager launches were timed instead. gemm: the GEMM launch policy
            (``hw_runtime.gpu.blas``).
    """

    mode: str
    makespan_us: float
    round_medians_us: list
    spread: float
    replays: int
    rounds: int
    warmup: int
    capture_s: float
    graph_nodes: int | None
    plan: dict
    partition: dict | None = None
    all_us: list = field(default_factory=list)
    note: str = ""
    gemm: str = "stock"

    def as_dict(self) -> dict:
        """JSON-ready dict (without ``all_us``)."""
        return {k: v for k, v in self.__dict__.items() if k != "all_us"}


class Executor:
    """Runs configurations of one workload on the local GPU.

    Args:
        workload: a ``hw_runtime.gpu.workload.TorchWorkload`` (any microbatch count; it owns the weights
            and KV caches that every derived workload shares).
        device: CUDA ordinal.
        gemm: the GEMM launch policy, ``"stock"`` or ``"pool"`` (``hw_runtime.gpu.blas``:
            GEMMs planned for the SMs of their pool); the temporal baseline uses it too.

    Raises:
        ExecutorUnavailable: no torch / no GPU.
        ValueError: a CPU workload or an unknown GEMM policy.
    """

    def __init__(self, workload, device: int = 0, gemm: str = "stock") -> None:
        self.torch = cuda_torch()
        if not getattr(workload, "is_cuda", False):
            raise ValueError("Executor: the workload must live on a CUDA device")
        from hw_runtime.gpu.blas import GemmPolicy
        self.base = workload
        self.device = device
        self.gemm = GemmPolicy(self.torch, gemm, device)
        # the workload's resolved kernel choices (fused.py, decode_attn.py, moe_gemm.py; the
        # expert GEMMs None for a dense region)
        self.elementwise, self.attention = workload.elementwise, workload.attention
        self.moe_gemm = workload.moe_gemm
        # Stream priorities of the pipelined runs (``LANE_PRIORITY``): "auto" turns them on
        # when every lane holds at most one microbatch (m <= k).
        self.lane_priority = DEFAULT_LANE_PRIORITY
        self._pool_of: dict[int, int] = {}
        self._wls = {workload.graph.microbatches: workload}

    def priority_for(self, cfg: Config, k: int) -> bool:
        """Whether the k streams of each stage get CUDA priorities (lane 0 highest) for
        ``cfg``, by ``self.lane_priority`` (one of ``LANE_PRIORITY``).

        ``"auto"``: on when m <= k, i.e. each lane holds at most one microbatch. Measured on
        the H200 (llama-3.1-70b TP8, layer split, fused kernels, tuned GEMMs;
        docs/fidelity.md §3, docs/results.md "Wins on the H200"): with equal priorities, m = k = 2
        locks both microbatches onto one stage while the other idles in back-to-back replays
        (G=1,024 48/80: 74.7 ms, 55.4 ms with priorities; G=2,048 32/96: 132.5 vs 100.4 ms),
        while with m = 4 > k = 2 priorities cost 2% (G=2,048 32/96: 90.3 vs 88.4 ms).

        Raises:
            ValueError: an unknown ``lane_priority``.
        """
        if self.lane_priority not in LANE_PRIORITY:
            raise ValueError(f"lane_priority must be one of {', '.join(LANE_PRIORITY)}, got "
                             f"{self.lane_priority!r}")
        if self.lane_priority != "auto":
            return self.lane_priority == "on"
        return k > 1 and self.batch // cfg.microbatch <= k

    # ------------------------------------------------------------------ workloads
    def workload_for(self, m: int):
        """The workload for m microbatches (derived from the base, cached)."""
        if m not in self._wls:
            from subgpu_jax.model.graph import build_graph
            g = build_graph(self.base.arch, self.base.deployment, m)
            self._wls[m] = derive_workload(self.base, g)
        return self._wls[m]

    @property
    def batch(self) -> int:
        """R, the per-GPU attention batch."""
        return self.base.deployment.requests_per_gpu

    def temporal_config(self) -> Config:
        """The temporal baseline Config (D = 1, whole GPU, one full-batch microbatch)."""
        sms = self.torch.cuda.get_device_properties(self.device).multi_processor_count
        return temporal_config(self.base.graph.n, _hw_like(sms), self.batch)

    def step_workloads(self, m: int) -> tuple[list, Any]:
        """The torch side of a whole step at m microbatches: ``(workloads, head)``, one
        workload per run of ``build_forward`` and the ``TorchHead``
        (``hw_runtime.gpu.step.StepWorkloads``; cached).

        Raises:
            WorkloadMemoryError: a region kind's weights do not fit in the free memory.
        """
        if "_steps" not in self.__dict__:
            from hw_runtime.gpu.step import StepWorkloads
            self._steps = StepWorkloads(self.base, self.workload_for, derive_workload)
        return self._steps.get(m)

    def step_plan(self, cfg: Config, streams_per_stage: int | None = None) -> StepPlan:
        """``build_step_plan``: every run of the forward pass under ``cfg`` (carried over to
        other region kinds) and the head kernels on the last stage.

        Raises:
            ValueError: the config does not fit the workload.
        """
        self.plan(cfg, streams_per_stage)  # the same checks
        from subgpu_jax.model.graph import build_forward
        m = self.batch // cfg.microbatch
        fp = build_forward(self.base.arch, self.base.deployment, m)
        return build_step_plan(fp, cfg, self.batch, streams_per_stage)

    def plan(self, cfg: Config, streams_per_stage: int | None = None) -> LaunchPlan:
        """``build_launch_plan`` for ``cfg`` on the workload of its microbatch count.

        Args:
            cfg: the configuration. streams_per_stage: k streams per stage (default the
                Config's, else 1).

        Raises:
            ValueError: the config does not fit the workload (see ``check_config_for_graph``).
        """
        if len(cfg.seg_of) != self.base.graph.n:
            raise ValueError(f"config has a cut of {len(cfg.seg_of)} kernels, the workload's "
                             f"region has {self.base.graph.n}: built for another model")
        R = self.batch
        if cfg.microbatch < 1 or R % cfg.microbatch:
            raise ValueError(f"config.microbatch={cfg.microbatch} does not divide the per-GPU "
                             f"batch R = {R}: built for another deployment")
        wl = self.workload_for(R // cfg.microbatch)
        return build_launch_plan(wl.graph, cfg, R, streams_per_stage)

    # ------------------------------------------------------------------ streams
    def stage_streams(self, cfg: Config, mode: str, k: int = 1):
        """D * k streams, stage d's at d*k .. d*k + k - 1 (green: k streams per pool), and the
        ``GreenPartition`` (None without one)."""
        t = self.torch
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        self._pool_of = {}                     # stream handles of closed pools may be reused
        if mode == "temporal":
            if cfg.D != 1:
                raise ValueError("mode 'temporal' runs D = 1 configurations only")
            return [t.cuda.Stream(device=self.device)], None
        if mode == "multistream" or cfg.D == 1:
            return [t.cuda.Stream(device=self.device) for _ in range(cfg.D * k)], None
        from hw_runtime.gpu.partition import GreenPartition
        part = GreenPartition(list(cfg.alloc), streams_per_pool=k, device=self.device,
                              lane_priority=self.priority_for(cfg, k))
        streams = [part.stream(d, j) for d in range(cfg.D) for j in range(k)]
        for d in range(cfg.D):                 # each stream's pool size, for the GEMM policy
            for j in range(k):
                self._pool_of[streams[d * k + j].cuda_stream] = int(part.granted[d])
        return streams, part

    def issue(self, plan: LaunchPlan | StepPlan, streams: Sequence,
              single_stream: bool = False) -> None:
        """Issue one forward pass of ``plan`` on ``streams`` (eager or under capture): the main
        region's instances for a ``LaunchPlan``, the whole step (every run, then the head) for
        a ``StepPlan``."""
        if isinstance(plan, StepPlan):
            wls, head = self.step_workloads(plan.microbatches)
            be = _TorchBackend(self.torch, streams, wls, self.gemm, self._pool_of, plan.offsets,
                               head)
        else:
            be = _TorchBackend(self.torch, streams, self.workload_for(plan.microbatches),
                               self.gemm, self._pool_of)
        try:
            issue_plan(plan, be, single_stream=single_stream)
        finally:
            be.close()

    def capture(self, plan: LaunchPlan, streams: Sequence):
        """Capture one forward pass as a CUDA graph on ``streams[0]`` (the other streams fork
        from and join back into it through events). Returns ``(graph, nodes, seconds)``."""
        t = self.torch
        s0 = streams[0]
        # warm (cuBLAS handles, SDPA kernel choice) outside capture
        self.issue(plan, streams)
        t.cuda.synchronize(self.device)
        t0 = time.perf_counter()
        g = t.cuda.CUDAGraph(keep_graph=True)
        with t.cuda.graph(g, stream=s0):
            fork = t.cuda.Event()
            fork.record(s0)
            for s in streams[1:]:
                s.wait_event(fork)
            self.issue(plan, streams)
            for s in streams[1:]:
                j = t.cuda.Event()
                j.record(s)
                s0.wait_event(j)
        from hw_runtime.gpu.kerneltime import graph_nodes

        nodes = graph_nodes(g)
        g.instantiate()
        t.cuda.synchronize(self.device)
        return g, nodes, time.perf_counter() - t0

    def measure(self, cfg: Config, mode: str = "green", rounds: int = 3, replays: int = 100,
                warmup: int = 3, streams_per_stage: int | None = None,
                step: bool = True) -> Measurement:
        """Capture ``cfg`` as a CUDA graph and time its replays.

        Args:
            cfg: the configuration (D = 1 for ``mode="temporal"``).
            mode: ``green`` (SM pools from ``cfg.alloc``), ``multistream`` (no partition) or
                ``temporal``.
            rounds, replays, warmup: timing protocol (module docstring).
            step: time the whole decode step (``step_plan``: every run of region instances,
                then the head kernels on the last stage), as ``subgpu simulate`` predicts it;
                False: the main region's instances only (``plan``).

        Returns:
            ``Measurement``.

        Raises:
            ValueError: bad mode / config; GreenContextError / GreenContextUnavailable from the
                partition. The partition is closed on return or error.
        """
        t = self.torch
        if rounds < 1 or replays < 1 or warmup < 0:
            raise ValueError("rounds and replays must be >= 1, warmup >= 0")
        plan = (self.step_plan if step else self.plan)(cfg, streams_per_stage)
        streams, part = self.stage_streams(cfg, mode, plan.streams_per_stage)
        try:
            note = ""
            try:
                g, nodes, cap_s = self.capture(plan, streams)
                run = g.replay
            except Exception as e:  # noqa: BLE001 - fall back to eager launches, say so
                t.cuda.synchronize(self.device)
                g, nodes, cap_s = None, None, 0.0
                note = f"graph capture failed ({e.__class__.__name__}: {e}); eager launches"

                def run():
                    self.issue(plan, streams)
                    for s in streams[1:]:  # join: the next pass starts after all streams
                        j = t.cuda.Event()
                        j.record(s)
                        streams[0].wait_event(j)
                    for s in streams[1:]:
                        f = t.cuda.Event()
                        f.record(streams[0])
                        s.wait_event(f)
            s0 = streams[0]
            with t.cuda.stream(s0):
                for _ in range(warmup):
                    run()
                allv, meds = [], []
                for _ in range(rounds):
                    evs = [t.cuda.Event(enable_timing=True) for _ in range(replays + 1)]
                    evs[0].record(s0)
                    for r in range(replays):
                        run()
                        evs[r + 1].record(s0)
                    evs[-1].synchronize()
                    ts = [evs[r].elapsed_time(evs[r + 1]) * 1e3 for r in range(replays)]
                    allv += ts
                    meds.append(statistics.median(ts))
            t.cuda.synchronize(self.device)
            del g
            med = statistics.median(allv)
            spread = (max(meds) - min(meds)) / med if med > 0 else 0.0
            return Measurement(mode=mode, makespan_us=med, round_medians_us=meds, spread=spread,
                               replays=replays, rounds=rounds, warmup=warmup, capture_s=cap_s,
                               graph_nodes=nodes, plan=plan.summary(),
                               partition=part.summary() if part is not None else None,
                               all_us=allv, note=note, gemm=self.gemm.policy)
        finally:
            if part is not None:
                t.cuda.synchronize(self.device)
                part.close()

    # ------------------------------------------------------------------ timelines
    def profile(self, cfg: Config, mode: str = "green", streams_per_stage: int | None = None
                ) -> dict:
        """Device activities of one profiled graph replay of ``cfg``
        (``hw_runtime.gpu.profile.profile_replays``), plus ``plan_object`` (the LaunchPlan)."""
        from hw_runtime.gpu.profile import profile_replays

        out = profile_replays(self, cfg, mode, replays=1, streams_per_stage=streams_per_stage)
        out["plan_object"] = self.plan(cfg, streams_per_stage)
        return out

    def activity_counts(self, m: int, cfg: Config | None = None,
                        mode: str = "green") -> list[list[str]]:
        """Names of the device activities each op issues per launch at m microbatches (measured
        with the profiler, cached); ``len`` of each entry is the op's activity count. With an
        active GEMM policy and a green ``cfg``, each op is profiled with the GEMM plan of its
        stage's pool (the one captured in the graph)."""
        from hw_runtime.gpu.profile import op_activity_names

        sms_of = None
        if cfg is not None and mode == "green" and cfg.D > 1 and self.gemm.active:
            st = cfg.stage_of_segment()
            sms_of = [int(cfg.alloc[st[s]]) for s in cfg.seg_of]
        key = (m, None if sms_of is None else tuple(sms_of))
        cache = self.__dict__.setdefault("_acts", {})
        if key not in cache:
            cache[key] = op_activity_names(self.workload_for(m), gemm=self.gemm, sms_of=sms_of)
        return cache[key]

    # ------------------------------------------------------------------ correctness
    def check_output(self, cfg: Config, mode: str = "green", replays: int = 2,
                     deterministic: bool = False, streams_per_stage: int | None = None,
                     step: bool = True) -> dict:
        """``_check_output`` (below), optionally under deterministic settings:
        ``torch.use_deterministic_algorithms(True)`` and SDPA restricted to FlashAttention or
        the math backend (cuDNN's attention is not deterministic) (cuBLAS also needs
        ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` in the environment before its first use; the result
        says whether it was set). Two replays of the same graph must then be bitwise equal;
        ``replays_equal: false`` there is a race, not numerics.

        Returns:
            ``_check_output``'s dict plus ``deterministic`` and ``cublas_workspace_config``.
        """
        import contextlib
        import os
        t = self.torch
        prev = t.are_deterministic_algorithms_enabled()
        sdpa = contextlib.nullcontext()
        if deterministic:
            t.use_deterministic_algorithms(True, warn_only=True)
            # cuDNN's decode attention (PyTorch's default SDPA backend on the H200) is not
            # deterministic: two replays of one temporal graph differ (measured,
            # docs/results.md "Output check"); FlashAttention and the math
            # backend replay bitwise equal.
            from torch.nn.attention import SDPBackend, sdpa_kernel
            sdpa = sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.MATH])
        try:
            with sdpa:
                out = self._check_output(cfg, mode, replays, streams_per_stage, step)
        finally:
            t.use_deterministic_algorithms(prev)
        out["deterministic"] = bool(deterministic)
        out["cublas_workspace_config"] = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
        return out

    def _check_output(self, cfg: Config, mode: str = "green", replays: int = 2,
                      streams_per_stage: int | None = None, step: bool = True) -> dict:
        """Pipelined graph replay vs sequential execution of the same plan (the whole step's
        ``step_plan`` by default, head kernels included: the outputs are then the next step's
        embedded inputs and ``tokens_equal`` compares the sampled tokens), same inputs.

        Procedure (every step starts from the same restored residual-stream inputs, and every
        stream used is synchronised explicitly after it):

        1. open the stage streams (a fresh ``GreenPartition`` for ``mode="green"``) and run the
           plan SEQUENTIALLY (``single_stream``, no overlap) once on each stage's stream: this
           warms every stream (kernel loading, cuBLAS workspaces) before any cross-stream work
           and gives ``pool_sequential_equal`` (the same sequential pass on each SM pool is
           bitwise equal to the whole-GPU reference: kernel choice does not depend on the pool);
        2. capture the pipelined pass as a CUDA graph (``capture``; its warm-up run is discarded);
        3. the reference: the plan sequentially on one plain whole-GPU stream;
        4. ``replays`` graph replays, each from the restored inputs.

        Seen on the H200 (docs/results.md "Runtime probes on the H200", TINY test model): the
        former procedure (reference first, then a pipelined eager warm-up as the first work on
        brand-new green contexts, capture, ONE replay, no per-stream synchronisation) failed
        intermittently, on the first check of a process (rel_l2 0.42 in the pytest run, 0.20 in
        the diagnostic, 0 when repeated at once, 0 under CUDA_LAUNCH_BLOCKING=1, 0 in 9 checks of
        an instrumented copy). Every other variant of the same plan was bitwise equal to the
        sequential reference: sequential on each pool's stream, task by task fully synchronised,
        eager pipelined (repeated, with delays injected on each stage), 5 graph replays, the graph
        with all tasks chained, graphs of every plan prefix. So it is neither a numerical effect
        of the pools nor a missing event wait of the plan; ``replays_equal`` is there to catch a
        race should it come back.

        Returns:
            dict: ``bitwise_equal`` / ``max_abs_diff`` / ``rel_l2`` (first replay vs the
            reference, residual-stream outputs of all microbatches; rel_l2 = ||out - ref|| /
            ||ref||), ``replays_equal`` (every replay bitwise equal to the first: a race gives
            varying results), ``pool_sequential_equal``, ``topk_flips`` (top-k expert indices
            that differ from the reference over all layers and microbatches; the routing of the
            workload is static, so flips change only the combine weights), ``finite``,
            ``microbatches``, ``mode``, ``how`` (``graph`` or ``eager`` when capture failed).
        """
        t = self.torch
        if replays < 1:
            raise ValueError(f"check_output: replays must be >= 1, got {replays}")
        plan = (self.step_plan if step else self.plan)(cfg, streams_per_stage)
        wl = self.workload_for(plan.microbatches)
        head = self.step_workloads(plan.microbatches)[1] if step else None
        m = plan.microbatches
        t.cuda.synchronize(self.device)
        inputs = [wl.output(mu).clone() for mu in range(m)]
        topk_keys = [k for k in wl.acts[0] if k.endswith("topk_i")]
        plain = t.cuda.Stream(device=self.device)

        def sync(streams) -> None:
            for s in streams:
                s.synchronize()
            t.cuda.synchronize(self.device)

        def restore() -> None:
            t.cuda.synchronize(self.device)
            for mu in range(m):
                wl.output(mu).copy_(inputs[mu])
            t.cuda.synchronize(self.device)

        def state(streams):
            sync(streams)
            outs = [wl.output(mu).clone() for mu in range(m)]
            tk = [wl.acts[mu][k].clone() for mu in range(m) for k in topk_keys]
            if head is not None:
                outs.append(head.acts["tokens"].clone())
            t.cuda.synchronize(self.device)
            return outs, tk

        def same(a, b) -> bool:
            return all(bool(t.equal(x, y)) for x, y in zip(a, b))

        streams, part = self.stage_streams(cfg, mode, plan.streams_per_stage)
        how = "graph"
        pool_seq = []
        runs = []
        try:
            for s in streams:                      # 1. sequential on each stage stream
                restore()
                self.issue(plan, [s], single_stream=True)
                pool_seq.append(state(streams)[0])
            try:                                   # 2. capture (warm-up run discarded)
                restore()
                g, _, _ = self.capture(plan, streams)
            except Exception:  # noqa: BLE001 - eager pipelined launches instead
                sync(streams)
                g, how = None, "eager"
            restore()                              # 3. the reference
            self.issue(plan, [plain], single_stream=True)
            ref, ref_tk = state([plain])
            for _ in range(replays):               # 4. pipelined replays
                restore()
                if g is not None:
                    with t.cuda.stream(streams[0]):
                        g.replay()
                else:
                    self.issue(plan, streams)
                runs.append(state(streams))
            del g
        finally:
            if part is not None:
                sync(streams)
                part.close()
        restore()
        out, out_tk = runs[0]
        tokens_equal = None
        if head is not None:  # the sampled tokens, compared apart from the residual stream
            tokens_equal = bool(t.equal(out[-1], ref[-1]))
            out, ref = out[:-1], ref[:-1]
            pool_seq = [o[:-1] for o in pool_seq]
        eq = same(out, ref)
        diff = max(float((a.float() - b.float()).abs().max()) for a, b in zip(out, ref))
        num = math.sqrt(sum(float(((a.float() - b.float()) ** 2).sum()) for a, b in zip(out, ref)))
        den = math.sqrt(sum(float((b.float() ** 2).sum()) for b in ref))
        fin = all(bool(t.isfinite(a.float()).all()) for a in out + ref)
        flips = sum(int((a != b).sum()) for a, b in zip(out_tk, ref_tk))
        return {"bitwise_equal": eq, "max_abs_diff": diff, "rel_l2": num / den if den else 0.0,
                "replays_equal": all(same(o, out) for o, _ in runs[1:]),
                "pool_sequential_equal": all(same(o, ref) for o in pool_seq),
                "topk_flips": flips, "finite": fin, "microbatches": m, "mode": mode,
                "how": how, "tokens_equal": tokens_equal}


def _hw_like(num_sms: int):
    """A stand-in ``Hardware`` with ``num_sms`` for ``temporal_config`` (only num_sms is read)."""
    from subgpu_jax.model.hardware import get_hardware
    import dataclasses
    h = get_hardware("H200")
    return h if h.num_sms == num_sms else dataclasses.replace(
        h, num_sms=num_sms, sm_budget=min(h.sm_budget, (num_sms // h.sm_quantum) * h.sm_quantum))
