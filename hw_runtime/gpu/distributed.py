"""Real collectives across the GPUs of a deployment (issue 25, ``--collectives nccl``).

One process per GPU (launched by ``torchrun``: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``), each
with its own green-context partition, CUDA graphs and ``TorchWorkload``; the TP all-reduces and
the EP all-to-alls of the graph are real ``torch.distributed`` collectives, issued from the
stream of the stage that owns them, in place of the one-GPU stand-ins of ``--collectives
sleep|proxy|none`` (``hw_runtime.gpu.collectives``).

* **Groups.** Ranks are laid out as the deployment says: TP groups of ``attn_tp`` consecutive
  ranks (``attn_dp`` of them), EP groups of ``moe_ep`` consecutive ranks (``group_ranks``).
* **One communicator per stream.** Each stream of a run (the executor's lane, ``lanes`` of them:
  stages x streams per stage) gets its own TP and EP groups, so two pools never enqueue into
  one communicator in orders that differ between ranks (vLLM's and SGLang's two-batch overlap
  use a communicator per batch the same way). Collectives of *different* communicators on one
  GPU can still deadlock when the GPUs schedule them in different orders; NCCL's implicit
  launch order (``NCCL_LAUNCH_ORDER_IMPLICIT=1``, NCCL 2.26+) orders them by host issue order,
  which every rank shares here (the plan is the same on every rank). Its cost: NCCL 2.26, and
  2.27.3+ on drivers older than 12.9, run it in "serial" mode inside CUDA graphs, where each
  collective waits for the one issued before it: overlap between two stages' collectives is
  lost (overlap of a collective with the other stage's compute is not).
* **Settings** (``NCCL_ENV``, forced before the process group starts, recorded with the NCCL and
  CUDA versions in the run JSON): NVLink multicast (NVLS) off, as the device machines require;
  implicit launch order on.
* **Payload** (``collective_plan``). Each collective sends what the graph charges each GPU
  (``Kernel.comm_bytes``): an all-reduce over the TP group reduces ``comm_bytes x t / (2(t-1))``
  (a ring sends 2(t-1)/t of the tensor), an all-to-all over the EP group exchanges ``comm_bytes
  x e / (e-1)`` (1/e stays local). The graph's other collectives (the combine's gather back to
  the TP ranks where EP is 1, the head's sample gather) run as all-reduces of the same bytes
  sent. Buffers are this rank's own, allocated on first (eager) use per size and lane; their
  data are random, so only the traffic and its timing are real.
* **Time.** A step's time is the slowest rank's (``reduce_max``).

Needs torch with ``torch.distributed`` only when a context is made; ``group_ranks`` and the
checks are pure Python (tested on the CPU; the collectives with PyTorch's fake process group).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from subgpu_jax.model.checks import pos_int
from subgpu_jax.model.collective import (ALLTOALL_OPS, allreduce_tensor_bytes,
                                         alltoall_buffer_bytes)

__all__ = ["NCCL_ENV", "LANES", "DistContext", "group_ranks", "world_from_env", "init",
           "collective_plan", "collective_", "reduce_max", "visible_device"]

#: Environment forced before NCCL starts. NVLS off: the device machines forbid NVLink multicast
#: (the device README); implicit launch order: NCCL 2.26+ orders the collectives of different
#: communicators on one GPU by host issue order (the module docstring says what it costs).
NCCL_ENV: dict[str, str] = {"NCCL_NVLS_ENABLE": "0", "NCCL_LAUNCH_ORDER_IMPLICIT": "1"}
#: Default streams (lanes) with their own communicators; ``init(lanes=...)`` sizes it from the
#: run (stages x streams per stage).
LANES = 8


def group_ranks(world: int, size: int) -> list[list[int]]:
    """The groups of ``size`` consecutive ranks that partition ``world`` ranks.

    Raises:
        ValueError: non-positive values, or ``size`` not dividing ``world``.

    Example: world 8, size 4 -> [[0, 1, 2, 3], [4, 5, 6, 7]].
    """
    pos_int(world, "group_ranks: world")
    pos_int(size, "group_ranks: size")
    if world % size:
        raise ValueError(f"group_ranks: a group of {size} ranks does not divide {world} ranks")
    return [list(range(g, g + size)) for g in range(0, world, size)]


def world_from_env(env: dict | None = None) -> tuple[int, int, int]:
    """``(rank, world_size, local_rank)`` of this process from ``torchrun``'s environment.

    Raises:
        ValueError: the variables are missing or not integers (one line naming
            ``--collectives nccl`` and how to launch it).
    """
    env = os.environ if env is None else env
    if "RANK" not in env or "WORLD_SIZE" not in env:
        raise ValueError("--collectives nccl runs one process per GPU: launch it with torchrun "
                         "--nproc-per-node N -m subgpu_jax.app.cli run ... --collectives nccl "
                         "(RANK and WORLD_SIZE are not set)")
    try:
        rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
        local = int(env.get("LOCAL_RANK", rank))
    except ValueError:
        raise ValueError(f"--collectives nccl: RANK, WORLD_SIZE and LOCAL_RANK must be integers, "
                         f"got {env.get('RANK')!r}, {env.get('WORLD_SIZE')!r}, "
                         f"{env.get('LOCAL_RANK')!r}") from None
    if not (world >= 2 and 0 <= rank < world and 0 <= local < world):
        raise ValueError(f"--collectives nccl: WORLD_SIZE must be >= 2 and RANK and LOCAL_RANK in "
                         f"0..WORLD_SIZE-1, got {rank}, {world}, {local}")
    return rank, world, local


def visible_device(local: int, env: dict | None = None) -> str:
    """The ``CUDA_VISIBLE_DEVICES`` value that shows local rank ``local`` its own GPU as device
    0: ``str(local)`` when unset, else the ``local``-th entry of the list already set (a
    scheduler's).

    Raises:
        ValueError: the list set has no entry ``local`` (one line).
    """
    env = os.environ if env is None else env
    vis = env.get("CUDA_VISIBLE_DEVICES")
    if vis is None or vis == "":
        return str(local)
    ids = [v.strip() for v in vis.split(",") if v.strip()]
    if local >= len(ids):
        raise ValueError(f"--collectives nccl: LOCAL_RANK {local} has no GPU in "
                         f"CUDA_VISIBLE_DEVICES={vis!r}")
    return ids[local]


@dataclass
class DistContext:
    """The process group of one rank and its per-lane groups.

    Attributes:
        rank, world: this process's rank and the world size. tp, ep: the TP and EP group
        sizes. dist: ``torch.distributed``. groups: ``(kind, lane) -> process group`` of this
        rank (kind ``"tp"`` or ``"ep"``). env: the ``NCCL_ENV`` values in force. backend: the
        process-group backend (``"nccl"``; ``"fake"`` in tests). lanes: streams with their own
        groups. recv: the collectives' buffers, ``(kind, elements, lane) -> (send, recv)``.
        plans: ``collective_plan`` per (kernel name, payload).
    """

    rank: int
    world: int
    tp: int
    ep: int
    dist: Any
    backend: str
    lanes: int = LANES
    groups: dict = field(default_factory=dict)
    env: dict = field(default_factory=dict)
    recv: dict = field(default_factory=dict)
    plans: dict = field(default_factory=dict)

    def group(self, kind: str, lane: int = 0):
        """This rank's ``kind`` group of stream ``lane``.

        Raises:
            ValueError: ``lane`` beyond the context's ``lanes`` (two streams never share one).
        """
        if not 0 <= int(lane) < self.lanes:
            raise ValueError(f"--collectives nccl: stream {lane} has no communicator of its own "
                             f"(the context has {self.lanes} lanes)")
        return self.groups[(kind, int(lane))]

    def record(self) -> dict:
        """What a run JSON records of the collectives (backend, sizes, settings, NCCL)."""
        version = cuda = None
        try:
            import torch
            cuda = torch.version.cuda
            version = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception:  # noqa: BLE001  (no CUDA NCCL here: fake process group)
            pass
        return {"backend": self.backend, "world_size": self.world, "tp": self.tp,
                "ep": self.ep, "lanes": self.lanes, "env": dict(self.env), "nccl": version,
                "cuda": cuda}


def init(deployment: Any, backend: str = "nccl", rank: int | None = None,
         world: int | None = None, store: Any = None, lanes: int = LANES) -> DistContext:
    """Start this rank's process group for ``deployment`` and make its groups.

    Args:
        deployment: ``subgpu_jax.model.graph.Deployment`` (``num_gpus`` must equal the world
            size: one process per GPU). backend: ``"nccl"`` (``"fake"`` for tests).
        rank, world: default ``world_from_env()``. store: a ``torch.distributed`` store
            (default: the environment's rendezvous). lanes: streams with their own
            communicators (the run's stages x streams per stage).

    Raises:
        ValueError: a world that is not the deployment's GPU count, TP/EP sizes that do not
            divide it, or a process group already started with another rank, world or backend
            (one line).
    """
    if rank is None or world is None:
        rank, world, _ = world_from_env()
    if deployment.num_gpus != world:
        raise ValueError(f"--collectives nccl: the deployment has {deployment.num_gpus} GPUs "
                         f"(--gpus) but {world} processes were launched; launch one per GPU")
    tp_sets, ep_sets = group_ranks(world, deployment.attn_tp), group_ranks(world,
                                                                            deployment.moe_ep)
    pos_int(lanes, "--collectives nccl: lanes")
    env = {}
    for k, v in NCCL_ENV.items():
        os.environ[k] = v
        env[k] = v
    import torch.distributed as dist

    if dist.is_initialized():
        if (dist.get_rank(), dist.get_world_size(), dist.get_backend()) != (rank, world, backend):
            raise ValueError(f"--collectives nccl: a process group already runs as rank "
                             f"{dist.get_rank()} of {dist.get_world_size()} "
                             f"({dist.get_backend()}), not rank {rank} of {world} ({backend})")
    else:
        kw = {"store": store} if store is not None else {}
        dist.init_process_group(backend, rank=rank, world_size=world, **kw)
    ctx = DistContext(rank=rank, world=world, tp=deployment.attn_tp, ep=deployment.moe_ep,
                      dist=dist, backend=backend, lanes=lanes, env=env)
    for lane in range(lanes):       # every rank makes every group, in the same order
        for kind, sets in (("tp", tp_sets), ("ep", ep_sets)):
            for ranks in sets:
                g = dist.new_group(ranks)
                if rank in ranks:
                    ctx.groups[(kind, lane)] = g
    return ctx


def collective_plan(kernel: Any, tp: int, ep: int) -> tuple[str, int]:
    """``(kind, elements)`` of collective ``kernel``'s real counterpart: ``"all_to_all"`` over
    the EP group for ``ALLTOALL_OPS`` when EP > 1, else ``"all_reduce"`` over the TP group;
    bf16 elements sized so that this rank sends the graph's ``comm_bytes`` (module
    docstring); ``("none", 0)`` where the group has one rank.

    Example: ``comm_bytes`` 28 MiB of an all-reduce at TP8: 28 MiB x 8 / 14 = 16 MiB = 8 Mi
    elements; 3 MiB of a dispatch at EP4: 4 MiB = 2 Mi elements (a multiple of 4).
    """
    b = float(kernel.comm_bytes)
    if kernel.op in ALLTOALL_OPS and ep > 1:
        n = int(round(alltoall_buffer_bytes(b, ep) / 2.0))
        return "all_to_all", max(ep, n - n % ep)
    if tp > 1:
        return "all_reduce", max(1, int(round(allreduce_tensor_bytes(b, tp) / 2.0)))
    return "none", 0


def collective_(ctx: DistContext, kernel: Any, buf, lane: int = 0) -> None:
    """Collective ``kernel`` (a graph ``Kernel`` with ``comm_bytes`` > 0) as ``collective_plan``
    says, on this rank's buffers of that size and ``lane`` (``buf``, the staging buffer, only
    gives the device and dtype), issued on the current stream with the groups of ``lane``."""
    pk = (kernel.name, kernel.comm_bytes)
    if pk not in ctx.plans:         # worked out once per kernel and payload (a launch looks up)
        ctx.plans[pk] = collective_plan(kernel, ctx.tp, ctx.ep)
    kind, n = ctx.plans[pk]
    if kind == "none":
        return
    key = (kind, n, int(lane))
    if key not in ctx.recv:         # allocated on the first (eager) call, before capture
        ctx.recv[key] = (buf.new_empty(n), buf.new_empty(n) if kind == "all_to_all" else None)
    send, recv = ctx.recv[key]
    if kind == "all_to_all":
        ctx.dist.all_to_all_single(recv, send, group=ctx.group("ep", lane))
    else:
        ctx.dist.all_reduce(send, group=ctx.group("tp", lane))


def reduce_max(ctx: DistContext, value: float) -> float:
    """The largest ``value`` over all ranks (a step's time is the slowest rank's)."""
    import torch

    dev = "cuda" if ctx.backend == "nccl" else "cpu"
    t = torch.tensor([float(value)], dtype=torch.float64, device=dev)
    ctx.dist.all_reduce(t, op=ctx.dist.ReduceOp.MAX)
    return float(t.item())
