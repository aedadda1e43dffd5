"""Real collectives across the GPUs of a deployment (issue 25, ``--collectives nccl``).

One process per GPU (launched by ``torchrun``: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``), each
with its own green-context partition, CUDA graphs and ``TorchWorkload``; the TP all-reduces and
the EP all-to-alls of the graph are real ``torch.distributed`` collectives, issued from the
stream of the stage that owns them, in place of the one-GPU stand-ins of ``--collectives
sleep|proxy|none`` (``hw_runtime.gpu.collectives``).

* **Groups.** Ranks are laid out as the deployment says: TP groups of ``attn_tp`` consecutive
  ranks (``attn_dp`` of them), EP groups of ``moe_ep`` consecutive ranks (``group_ranks``).
* **One communicator per stream.** Two pools that issue collectives concurrently must not share
  a communicator: NCCL runs the operations of one communicator in the order they are enqueued,
  and two streams of one process enqueue in an order the other ranks need not repeat, which can
  deadlock. Each stream index (the executor's lane) gets its own TP and EP groups, as
  engines that overlap communication do (vLLM's and SGLang's two-batch overlap use a
  communicator per batch); NCCL's implicit launch order (``NCCL_LAUNCH_ORDER_IMPLICIT=1``, NCCL
  2.26+) is set as well for collectives of one communicator from several streams.
* **Settings** (``NCCL_ENV``, set before the process group starts unless the user set them,
  recorded with the NCCL version in the run JSON): NVLink multicast (NVLS) off, as the device
  machines require; implicit launch order on.
* **Payload.** Each collective moves the graph's payload (``Kernel.comm_bytes``) through a
  staging buffer of that size: ``all_reduce`` (sum) over the TP group, ``all_to_all_single``
  over the EP group (the buffer cut to a multiple of the group size). The data are the
  workload's random activations, so only the traffic and its timing are real.
* **Time.** A step's time is the slowest rank's (``reduce_max``).

Needs torch with ``torch.distributed`` only when a context is made; ``group_ranks`` and the
checks are pure Python (tested on the CPU; the collectives with PyTorch's fake process group).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

__all__ = ["NCCL_ENV", "LANES", "DistContext", "group_ranks", "world_from_env", "init",
           "collective_", "reduce_max"]

#: Environment set before NCCL starts (a value the user exported wins). NVLS off: the device
#: machines forbid NVLink multicast (the device README); implicit launch order: NCCL 2.26+'s
#: ordering of one communicator's collectives enqueued from several streams.
NCCL_ENV: dict[str, str] = {"NCCL_NVLS_ENABLE": "0", "NCCL_LAUNCH_ORDER_IMPLICIT": "1"}
#: Streams (lanes) with their own communicators: stages x streams per stage of a run are at
#: most 4 x 2 in every search grid of the repository.
LANES = 8


def group_ranks(world: int, size: int) -> list[list[int]]:
    """The groups of ``size`` consecutive ranks that partition ``world`` ranks.

    Raises:
        ValueError: non-positive values, or ``size`` not dividing ``world``.

    Example: world 8, size 4 -> [[0, 1, 2, 3], [4, 5, 6, 7]].
    """
    for name, v in (("world", world), ("size", size)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"group_ranks: {name} must be an integer >= 1, got {v!r}")
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
    try:
        rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
        local = int(env.get("LOCAL_RANK", rank))
    except (KeyError, ValueError):
        raise ValueError("--collectives nccl runs one process per GPU: launch it with torchrun "
                         "--nproc-per-node N -m subgpu_jax.app.cli run ... --collectives nccl "
                         "(RANK and WORLD_SIZE are not set)") from None
    if not (0 <= rank < world and world >= 2 and local >= 0):
        raise ValueError(f"--collectives nccl: RANK {rank} must be in 0..WORLD_SIZE-1 and "
                         f"WORLD_SIZE >= 2, got WORLD_SIZE {world}")
    return rank, world, local


@dataclass
class DistContext:
    """The process group of one rank and its per-lane groups.

    Attributes:
        rank, world: this process's rank and the world size. tp, ep: the TP and EP group
        sizes. dist: ``torch.distributed``. groups: ``(kind, lane) -> process group`` of this
        rank (kind ``"tp"`` or ``"ep"``). env: the ``NCCL_ENV`` values in force. backend: the
        process-group backend (``"nccl"``; ``"fake"`` in tests). recv: the all-to-alls'
        receive buffers, one per (kernel, lane).
    """

    rank: int
    world: int
    tp: int
    ep: int
    dist: Any
    backend: str
    groups: dict = field(default_factory=dict)
    env: dict = field(default_factory=dict)
    recv: dict = field(default_factory=dict)

    def group(self, kind: str, lane: int = 0):
        """This rank's ``kind`` group of stream ``lane`` (lanes beyond ``LANES`` share)."""
        return self.groups[(kind, int(lane) % LANES)]

    def record(self) -> dict:
        """What a run JSON records of the collectives (backend, sizes, settings, NCCL)."""
        version = None
        try:
            import torch
            version = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception:  # noqa: BLE001  (no CUDA NCCL here: fake process group)
            pass
        return {"backend": self.backend, "world_size": self.world, "tp": self.tp,
                "ep": self.ep, "lanes": LANES, "env": dict(self.env), "nccl": version}


def init(deployment: Any, backend: str = "nccl", rank: int | None = None,
         world: int | None = None, store: Any = None) -> DistContext:
    """Start this rank's process group for ``deployment`` and make its groups.

    Args:
        deployment: ``subgpu_jax.model.graph.Deployment`` (``num_gpus`` must equal the world
            size: one process per GPU). backend: ``"nccl"`` (``"fake"`` for tests).
        rank, world: default ``world_from_env()``. store: a ``torch.distributed`` store
            (default: the environment's rendezvous).

    Raises:
        ValueError: a world that is not the deployment's GPU count, or TP/EP sizes that do not
            divide it (one line).
    """
    if rank is None or world is None:
        rank, world, _ = world_from_env()
    if deployment.num_gpus != world:
        raise ValueError(f"--collectives nccl: the deployment has {deployment.num_gpus} GPUs "
                         f"(--gpus) but {world} processes were launched; launch one per GPU")
    tp_sets, ep_sets = group_ranks(world, deployment.attn_tp), group_ranks(world,
                                                                            deployment.moe_ep)
    env = {}
    for k, v in NCCL_ENV.items():
        os.environ.setdefault(k, v)
        env[k] = os.environ[k]
    import torch.distributed as dist

    if not dist.is_initialized():
        kw = {"store": store} if store is not None else {}
        dist.init_process_group(backend, rank=rank, world_size=world, **kw)
    ctx = DistContext(rank=rank, world=world, tp=deployment.attn_tp, ep=deployment.moe_ep,
                      dist=dist, backend=backend, env=env)
    for lane in range(LANES):       # every rank makes every group, in the same order
        for kind, sets in (("tp", tp_sets), ("ep", ep_sets)):
            for ranks in sets:
                g = dist.new_group(ranks)
                if rank in ranks:
                    ctx.groups[(kind, lane)] = g
    return ctx


def collective_(ctx: DistContext, kernel: Any, buf, lane: int = 0) -> None:
    """Collective ``kernel`` (a graph ``Kernel`` with ``comm_bytes`` > 0) on its staging buffer
    ``buf`` (flat): ``all_to_all_single`` over the EP group for the ops of
    ``subgpu_jax.model.collective.ALLTOALL_OPS``, else ``all_reduce`` (sum) over the TP group;
    issued on the current stream with the groups of ``lane``. A group of one rank is a no-op."""
    from subgpu_jax.model.collective import ALLTOALL_OPS

    if kernel.op in ALLTOALL_OPS:
        g, n = ctx.group("ep", lane), ctx.ep
        m = buf.numel() - buf.numel() % n
        if n > 1 and m:
            key = (kernel.name, lane)
            if key not in ctx.recv:     # allocated on the first (eager) call, before capture
                ctx.recv[key] = buf.new_empty(m)
            ctx.dist.all_to_all_single(ctx.recv[key], buf[:m], group=g)
        return
    if ctx.tp > 1:
        ctx.dist.all_reduce(buf, group=ctx.group("tp", lane))


def reduce_max(ctx: DistContext, value: float) -> float:
    """The largest ``value`` over all ranks (a step's time is the slowest rank's)."""
    import torch

    dev = "cuda" if ctx.backend == "nccl" else "cpu"
    t = torch.tensor([float(value)], dtype=torch.float64, device=dev)
    ctx.dist.all_reduce(t, op=ctx.dist.ReduceOp.MAX)
    return float(t.item())
