"""The CPU half of the GPU runtime (docs/method.md §6): the launch plan of a ``Config``, the stream
backend protocol, ``issue_plan`` and ``FakeStreamBackend``.

``build_launch_plan(graph, cfg)`` turns a configuration into the exact schedule the simulator
scores: the segment tasks of ``subgpu_jax.space.taskdag.build_task_dag`` in the global dispatch
order, each on a stream of its stage (rho_w(k)), with the CUDA events it must wait on (its data
predecessors that run on another stream; same-stream predecessors, including the stage edge, are
implied by stream order) and whether it must record an event. With k streams per stage (the
published prototype used two per green context) the j-th task issued on stage d goes to the
stage's stream j mod k (its *lane* d*k + j mod k): a stage then runs up to k tasks at once, and
each task still follows the task k positions earlier on its stage in stream order, the stage
edge of the task DAG with k streams per stage. ``issue_plan(plan, backend)`` walks
a plan against a stream backend; ``FakeStreamBackend`` replays it with given kernel durations
(stream FIFO + event waits), which is how CI checks the plan against the simulator's task DAG.
``build_step_plan(forward_pass, cfg)`` is the plan of a whole decode step: every run of region
instances (DeepSeek-V3: 3 dense layers, then 58 MoE layers), each under the configuration carried
over to its region kind, then the head kernels on the last stage. Pure CPU: no torch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Protocol

from subgpu_jax.model.graph import ForwardPass, OpGraph
from subgpu_jax.space.config import Config
from subgpu_jax.space.taskdag import build_task_dag


@dataclass(frozen=True)
class PlanTask:
    """One segment task of the plan (one entry of the global dispatch order).

    Attributes:
        index: position in the dispatch order (= the task index of ``taskdag.TaskDAG``).
        region: region instance l. microbatch: mu. segment: k. stage: rho_w(k) = its stream.
        kernels: kernel indices of the region graph launched for this task, in order.
        data_preds: data-predecessor task indices (as in the TaskDAG).
        stage_pred: the previous task on the same stage, or -1.
        waits: task indices whose completion event this task's stream waits on before its first
            kernel: the data predecessors on OTHER streams (sorted).
        record: True when some later task on another stream waits on this task's event.
        lane: the stream the task is issued on, stage * k + (j mod k) for the j-th task of its
            stage with k streams per stage (= stage when k = 1).
        run: the run of region instances the task belongs to (``StepPlan``; 0 in a
            ``LaunchPlan``), or ``HEAD_RUN`` for the head kernels, whose ``kernels`` then index
            the forward pass's ``head``.
    """

    index: int
    region: int
    microbatch: int
    segment: int
    stage: int
    kernels: tuple[int, ...]
    data_preds: tuple[int, ...]
    stage_pred: int
    waits: tuple[int, ...]
    record: bool
    lane: int = -1
    run: int = 0

    def __post_init__(self) -> None:
        if self.lane < 0:
            object.__setattr__(self, "lane", self.stage)


@dataclass(frozen=True)
class LaunchPlan:
    """The schedule of one forward pass.

    Attributes:
        tasks: ``PlanTask`` in the global dispatch order (issue order).
        num_streams: D * k streams (k = ``streams_per_stage``); stage d owns streams
            d*k .. d*k + k - 1.
        stage_sms: SMs of each stage's pool (the Config's allocation; ``(num_sms,)`` for temporal).
        microbatches: m. num_regions: L. kernels_per_region: n.
        config: the Config the plan realises.
    """

    tasks: tuple[PlanTask, ...]
    num_streams: int
    stage_sms: tuple[int, ...]
    microbatches: int
    num_regions: int
    kernels_per_region: int
    config: Config
    streams_per_stage: int = 1

    @property
    def T(self) -> int:
        """Number of segment tasks, L * m * K."""
        return len(self.tasks)

    def stream_tasks(self) -> list[list[int]]:
        """Task indices issued on each stream (lane), in issue order (list of D*k lists)."""
        out: list[list[int]] = [[] for _ in range(self.num_streams)]
        for t in self.tasks:
            out[t.lane].append(t.index)
        return out

    def events(self) -> int:
        """CUDA events the plan records (tasks with ``record``)."""
        return sum(1 for t in self.tasks if t.record)

    def kernel_launches(self) -> int:
        """Kernel launches of one pass (sum of ``len(task.kernels)``)."""
        return sum(len(t.kernels) for t in self.tasks)

    def summary(self) -> dict:
        """JSON-ready description (counts, streams, SMs)."""
        c = self.config
        return {"D": c.D, "w": c.w, "K": c.K, "alloc": list(self.stage_sms),
                "microbatch": c.microbatch, "microbatches": self.microbatches,
                "policy": c.policy, "tasks": self.T, "events": self.events(),
                "waits": sum(len(t.waits) for t in self.tasks),
                "streams_per_stage": self.streams_per_stage,
                "kernel_launches": self.kernel_launches()}


def check_config_for_graph(graph: OpGraph, cfg: Config, batch: int | None = None) -> None:
    """Check that ``cfg`` fits ``graph`` (cut length, segment count, microbatch count).

    Args:
        graph: the region graph built for m = R / cfg.microbatch microbatches.
        cfg: the configuration.
        batch: per-GPU attention batch R (default: from ``graph.deployment``).

    Raises:
        ValueError: the cut does not have one entry per kernel (a config built for another model
            or deployment), K != D + w, or the graph's microbatch count is not R / b.
    """
    if not isinstance(cfg, Config):
        raise ValueError(f"config must be a subgpu_jax.space.Config, got {type(cfg).__name__}")
    if len(cfg.seg_of) != graph.n:
        raise ValueError(f"config has a cut of {len(cfg.seg_of)} kernels, the workload's region "
                         f"has {graph.n}: the configuration was built for another model")
    if max(cfg.seg_of) + 1 != cfg.K:
        raise ValueError(f"config: the cut has {max(cfg.seg_of) + 1} segments, D + w = {cfg.K}")
    if len(cfg.alloc) != cfg.D:
        raise ValueError(f"config.alloc has {len(cfg.alloc)} pools, D = {cfg.D}")
    R = batch if batch is not None else (graph.deployment.requests_per_gpu
                                         if graph.deployment is not None else None)
    if R is not None:
        if cfg.microbatch < 1 or R % cfg.microbatch:
            raise ValueError(f"config.microbatch={cfg.microbatch} does not divide the per-GPU "
                             f"batch R = {R}: the configuration was built for another deployment")
        if R // cfg.microbatch != graph.microbatches:
            raise ValueError(f"config.microbatch={cfg.microbatch} gives m = "
                             f"{R // cfg.microbatch}, the graph has {graph.microbatches}")


def build_launch_plan(graph: OpGraph, cfg: Config, batch: int | None = None,
                      streams_per_stage: int | None = None) -> LaunchPlan:
    """The launch plan of ``cfg`` on ``graph`` (pure CPU; no torch).

    Tasks, stages, data and stage predecessors are exactly those of
    ``taskdag.build_task_dag(graph.n, graph.edges, graph.cross_edges, cfg.seg_of, cfg.D, cfg.w,
    graph.num_regions, graph.microbatches, cfg.policy)``, i.e. what ``eventsim.simulate`` scores.

    Args:
        graph: region graph built for m = R / b microbatches (``build_graph(arch, dep, m)``).
        cfg: the configuration (temporal: ``space.temporal_config``).
        batch: per-GPU attention batch R (default from the graph's deployment).
        streams_per_stage: k >= 1 streams per stage (default: ``cfg.streams_per_stage`` when the
            Config has it, else 1).

    Returns:
        The ``LaunchPlan``.

    Raises:
        ValueError: see ``check_config_for_graph``; an illegal cut or policy (from the DAG);
            ``streams_per_stage`` not an integer >= 1.
    """
    check_config_for_graph(graph, cfg, batch)
    k = streams_per_stage if streams_per_stage is not None else getattr(cfg, "streams_per_stage", 1)
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"streams_per_stage must be an integer >= 1, got {k!r}")
    dag = build_task_dag(graph.n, graph.edges, graph.cross_edges, cfg.seg_of, cfg.D, cfg.w,
                         graph.num_regions, graph.microbatches, cfg.policy, streams_per_stage=k)
    segk = [tuple(i for i in range(graph.n) if cfg.seg_of[i] == kk) for kk in range(cfg.K)]
    T = dag.T
    stage = [int(s) for s in dag.stage]
    lane = [int(x) for x in dag.lanes()]
    waits = []
    recorded = [False] * T
    for i in range(T):
        w = tuple(sorted(j for j in dag.data_preds[i] if lane[j] != lane[i]))
        for j in w:
            recorded[j] = True
        waits.append(w)
    tasks = tuple(PlanTask(index=i, region=int(dag.region[i]), microbatch=int(dag.mb[i]),
                           segment=int(dag.seg[i]), stage=stage[i],
                           kernels=segk[int(dag.seg[i])], data_preds=tuple(dag.data_preds[i]),
                           stage_pred=int(dag.stage_pred[i]), waits=waits[i],
                           record=recorded[i], lane=lane[i]) for i in range(T))
    return LaunchPlan(tasks=tasks, num_streams=cfg.D * k,
                      stage_sms=tuple(int(a) for a in cfg.alloc),
                      microbatches=graph.microbatches, num_regions=graph.num_regions,
                      kernels_per_region=graph.n, config=cfg, streams_per_stage=k)


#: ``PlanTask.run`` of the head kernels' task.
HEAD_RUN = -1


@dataclass(frozen=True)
class StepPlan:
    """The schedule of a whole decode step (``build_step_plan``): every run of region instances
    of the forward pass, one after the other, then the head kernels.

    Attributes:
        tasks: all tasks in issue order with global indices (``PlanTask.run`` names the run;
            waits and events refer to global indices); the last task is the head's.
        runs: each run's own ``LaunchPlan`` (local task indices; its graph has ``num_regions``
            = the run's instance count).
        graphs: each run's region graph (as built, ``num_regions`` = the kind's instances over
            all runs: the weights a workload of that kind allocates).
        offsets: the first region instance of each run among its kind's instances (a kind that
            occurs in two runs continues its instance numbering).
        head: the head kernels (``ForwardPass.head``).
        num_streams, stage_sms, microbatches, streams_per_stage, config: as ``LaunchPlan``.
    """

    tasks: tuple[PlanTask, ...]
    runs: tuple[LaunchPlan, ...]
    graphs: tuple[OpGraph, ...]
    offsets: tuple[int, ...]
    head: tuple
    num_streams: int
    stage_sms: tuple[int, ...]
    microbatches: int
    config: Config
    streams_per_stage: int = 1

    @property
    def T(self) -> int:
        """Number of tasks (all runs' segment tasks + the head task)."""
        return len(self.tasks)

    def head_tasks(self) -> list[PlanTask]:
        """The head's tasks (``run == HEAD_RUN``)."""
        return [t for t in self.tasks if t.run == HEAD_RUN]

    def events(self) -> int:
        """CUDA events the plan records."""
        return sum(1 for t in self.tasks if t.record)

    def kernel_launches(self) -> int:
        """Kernel launches of one step (region kernels + head kernels)."""
        return sum(len(t.kernels) for t in self.tasks)

    def summary(self) -> dict:
        """JSON-ready description: the main plan's fields (``LaunchPlan.summary`` of the run of
        the main region) plus per-run task counts and the head's stage."""
        main = max(range(len(self.runs)), key=lambda r: self.runs[r].T)
        out = self.runs[main].summary()
        h = self.head_tasks()
        out.update(tasks=self.T, events=self.events(),
                   waits=sum(len(t.waits) for t in self.tasks),
                   kernel_launches=self.kernel_launches(),
                   runs=[{"layers": [list(x) for x in g.region_kinds], "instances": p.num_regions,
                          "tasks": p.T} for g, p in zip(self.graphs, self.runs)],
                   head={"kernels": [k.name for k in self.head],
                         "stage": h[0].stage if h else None})
        return out


def build_step_plan(fp: ForwardPass, cfg: Config, batch: int | None = None,
                    streams_per_stage: int | None = None) -> StepPlan:
    """The launch plan of a whole decode step of ``fp`` under ``cfg`` (a configuration of
    ``fp.main``), the schedule ``subgpu_jax.score.step.time_step`` times:

    * each run of region instances gets ``build_launch_plan`` of its region graph (with
      ``num_regions`` = the run's count) under ``cfg``, carried over to other region kinds by
      ``subgpu_jax.space.mapcut.map_cut`` (same stages, pools, microbatches, policy);
    * runs follow one another with the pipeline drained in between: the first task on each
      stream of run r waits for the last task of every other stream of run r - 1;
    * the head kernels (final norm, LM head, sampling, embedding) are one task on the LAST
      stage's first stream (the whole GPU in the temporal baseline), after the last run has
      drained (it waits for the last task of every other stream).

    Args:
        fp: ``model.graph.build_forward(arch, deploy, m)`` with m = R / cfg.microbatch.
        cfg: the configuration of ``fp.main``.
        batch: per-GPU attention batch R (default from the graph's deployment).
        streams_per_stage: k streams per stage (default the Config's, else 1).

    Returns:
        The ``StepPlan``.

    Raises:
        ValueError: as ``build_launch_plan``; a region kind the cut cannot be carried to.
    """
    from subgpu_jax.space.mapcut import map_cut

    runs, graphs, offsets, seen = [], [], [], {}
    for g, count in fp.runs:
        c = cfg if g is fp.main else map_cut(cfg, fp.main, g)
        runs.append(build_launch_plan(dataclasses.replace(g, num_regions=count), c, batch,
                                      streams_per_stage))
        graphs.append(g)
        offsets.append(seen.get(id(g), 0))
        seen[id(g)] = offsets[-1] + count
    k = runs[0].streams_per_stage
    S = runs[0].num_streams
    tasks: list[PlanTask] = []
    last_on: dict[int, int] = {}  # lane -> global index of its last task so far
    for r, lp in enumerate(runs):
        base = len(tasks)
        prev_last = dict(last_on)
        first_seen: set[int] = set()
        for t in lp.tasks:
            waits = set(j + base for j in t.waits)
            if r and t.lane not in first_seen:  # drain of the previous run
                waits |= {j for ln, j in prev_last.items() if ln != t.lane}
            first_seen.add(t.lane)
            tasks.append(dataclasses.replace(
                t, index=base + t.index, data_preds=tuple(j + base for j in t.data_preds),
                stage_pred=t.stage_pred + base if t.stage_pred >= 0 else
                prev_last.get(t.lane, -1), waits=tuple(sorted(waits)), record=False, run=r))
            last_on[t.lane] = base + t.index
    D = cfg.D
    head_lane = (D - 1) * k
    hw = tuple(sorted(j for ln, j in last_on.items() if ln != head_lane))
    tasks.append(PlanTask(index=len(tasks), region=0, microbatch=0, segment=-1, stage=D - 1,
                          kernels=tuple(range(len(fp.head))),
                          data_preds=tuple(sorted(last_on.values())),
                          stage_pred=last_on.get(head_lane, -1), waits=hw, record=False,
                          lane=head_lane, run=HEAD_RUN))
    need = {j for t in tasks for j in t.waits}
    tasks = [dataclasses.replace(t, record=t.index in need) for t in tasks]
    return StepPlan(tasks=tuple(tasks), runs=tuple(runs), graphs=tuple(graphs),
                    offsets=tuple(offsets), head=tuple(fp.head), num_streams=S,
                    stage_sms=tuple(int(a) for a in cfg.alloc), microbatches=runs[0].microbatches,
                    config=cfg, streams_per_stage=k)


class StreamBackend(Protocol):
    """What ``issue_plan`` needs from a stream implementation.

    ``wait(stream, task)``: the stream waits for the event recorded after ``task``;
    ``launch(stream, task, kernel)``: enqueue one kernel of a task; ``record(stream, task)``:
    record the task's completion event on the stream.
    """

    def wait(self, stream: int, task: int) -> None: ...

    def launch(self, stream: int, task: PlanTask, kernel: int) -> None: ...

    def record(self, stream: int, task: int) -> None: ...


def issue_plan(plan: LaunchPlan | StepPlan, backend: StreamBackend,
               single_stream: bool = False) -> None:
    """Issue every task of ``plan`` (a ``LaunchPlan`` or a whole step's ``StepPlan``) in the
    global dispatch order on ``backend``.

    For each task: wait on the events of its cross-stream data predecessors, launch its kernels
    on its stream (``task.lane``), record its event if a later task on another stream needs it.

    Args:
        plan: the launch plan.
        backend: a ``StreamBackend`` (``FakeStreamBackend`` or the executor's torch backend).
        single_stream: issue everything on stream 0 with no events (the sequential reference).
    """
    for t in plan.tasks:
        s = 0 if single_stream else t.lane
        if not single_stream:
            for j in t.waits:
                backend.wait(s, j)
        for k in t.kernels:
            backend.launch(s, t, k)
        if t.record and not single_stream:
            backend.record(s, t.index)


class FakeStreamBackend:
    """A CPU model of CUDA streams and events, for testing plans without a GPU.

    Each stream executes its operations in FIFO order; a kernel of ``duration(task, kernel)`` µs
    starts when the stream is free and every event the stream waited on before it has completed;
    an event completes when everything enqueued on its stream before the record has completed
    (CUDA semantics of ``cudaEventRecord`` / ``cudaStreamWaitEvent``).

    Args:
        num_streams: streams (>= 1).
        duration: ``(task: PlanTask, kernel: int) -> µs`` (>= 0).

    Attributes:
        ops: the operations in issue order, ``(kind, stream, task, kernel)``.
        task_start, task_end: µs per task index (first kernel start / last kernel end).
        kernel_times: ``(task, kernel, start, end)`` per launch.

    Raises:
        ValueError: a wait on an event that was never recorded (a plan bug), a negative duration.
    """

    def __init__(self, num_streams: int,
                 duration: Callable[[PlanTask, int], float] | None = None) -> None:
        if num_streams < 1:
            raise ValueError(f"num_streams must be >= 1, got {num_streams}")
        self.duration = duration or (lambda task, k: 1.0)
        self.ops: list[tuple] = []
        self.free = [0.0] * num_streams     # when each stream's last operation completes
        self.gate = [0.0] * num_streams     # pending waits of the stream
        self.events: dict[int, float] = {}
        self.task_start: dict[int, float] = {}
        self.task_end: dict[int, float] = {}
        self.kernel_times: list[tuple[int, int, float, float]] = []

    def wait(self, stream: int, task: int) -> None:
        """The stream waits for task ``task``'s recorded event."""
        if task not in self.events:
            raise ValueError(f"stream {stream} waits on the event of task {task}, which was not "
                             "recorded before (plan bug)")
        self.ops.append(("wait", stream, task, -1))
        self.gate[stream] = max(self.gate[stream], self.events[task])

    def launch(self, stream: int, task: PlanTask, kernel: int) -> None:
        """Enqueue one kernel."""
        d = float(self.duration(task, kernel))
        if not d >= 0:
            raise ValueError(f"duration of task {task.index} kernel {kernel} must be >= 0, "
                             f"got {d!r}")
        self.ops.append(("launch", stream, task.index, kernel))
        st = max(self.free[stream], self.gate[stream])
        en = st + d
        self.free[stream] = en
        self.task_start.setdefault(task.index, st)
        self.task_end[task.index] = en
        self.kernel_times.append((task.index, kernel, st, en))

    def record(self, stream: int, task: int) -> None:
        """Record task ``task``'s completion event on the stream."""
        self.ops.append(("record", stream, task, -1))
        self.events[task] = max(self.free[stream], self.gate[stream])

    @property
    def makespan(self) -> float:
        """Completion of the last operation (µs)."""
        return max(self.free) if self.free else 0.0


