"""The max-plus recurrence of the static evaluator as one unrolled program per candidate, and
the kernels that run it over a block of (cut, allocation) candidates (``score.massive``,
docs/method.md §2 recurrence, §4 exhaustive search; issue 42 item 4).

``DagProgram`` holds a task DAG as static Python tuples; ``dag_makespan`` unrolls
C_i = max_{j in preds(i)} C_j + tau_{seg(i)} over its tasks for ONE candidate. A *max-plus
kernel* scores a block of candidates with it, chosen once by name from ``MAXPLUS_KERNELS``:

* ``XlaMaxPlus`` (``xla``): the recurrence ``jax.vmap``-ed over the candidates with the segment
  table gather inside, fused by XLA (the evaluator's path before this module; any backend).
* ``PallasMaxPlus`` (``pallas``): the segment durations gathered by XLA into a (K, B) array,
  then one Pallas kernel (Triton on a GPU) in which every program runs the unrolled recurrence
  over ``block`` candidates held as vectors: the completion times stay in registers, nothing
  but the durations is read and nothing but the makespans is written. The same max and add
  in the same order, so the same float32 makespans as ``xla`` (tests compare them bit for bit
  in Pallas' interpreter on the CPU, ``interpret=True``; on a CPU backend it always
  interprets, which is slow: it exists for the tests).

Units: µs, SMs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from subgpu_jax.model.checks import pos_int
from subgpu_jax.space.taskdag import TaskDAG

__all__ = ["DagProgram", "dag_makespan", "MaxPlusKernel", "XlaMaxPlus", "PallasMaxPlus",
           "MAXPLUS_KERNELS", "DEFAULT_MAXPLUS_KERNEL", "maxplus_kernel"]


@dataclass(frozen=True)
class DagProgram:
    """A task DAG as static Python tuples (compile-time constants of the unrolled recurrence).

    Attributes:
        preds: per task (dispatch order), its predecessors (data and stage) of the transitive
            reduction (``from_dag``), sorted.
        seg: per task, its segment 0..K-1.
        sinks: tasks without successors (the makespan is the max of their C).
        levels: per task, its depth (longest edge count from a source).
        K: segments; T: tasks.
    """

    preds: tuple[tuple[int, ...], ...]
    seg: tuple[int, ...]
    sinks: tuple[int, ...]
    levels: tuple[int, ...]
    K: int

    @property
    def T(self) -> int:
        return len(self.seg)

    @classmethod
    def from_dag(cls, dag: TaskDAG) -> "DagProgram":
        """The program of ``dag`` with its transitive reduction's predecessors
        (``networkx.transitive_reduction``): an edge j -> i is dropped where another path
        j -> ... -> k -> i exists. The makespans are bit for bit those of every edge: the
        durations are finite and >= 0, so C_k >= C_j in float32 too (a + t >= a for t >= 0
        under round-to-nearest) and max(C_k, C_j) = C_k exactly. The GPT-OSS 120B
        reference (36 layers, D = 5, m = 8) loses 136 of its 1,563 edges, 16% of the 843 max
        operations per candidate."""
        import networkx as nx

        full = [dag.preds(i) for i in range(dag.T)]
        g = nx.DiGraph()
        g.add_nodes_from(range(dag.T))
        g.add_edges_from((j, i) for i, ps in enumerate(full) for j in ps)
        red = nx.transitive_reduction(g)
        preds = tuple(tuple(sorted(red.predecessors(i))) for i in range(dag.T))
        has_succ = np.zeros(dag.T, dtype=bool)
        for p in full:
            has_succ[list(p)] = True
        lv = dag.levels()
        return cls(preds=preds, seg=tuple(int(s) for s in dag.seg),
                   sinks=tuple(int(i) for i in np.flatnonzero(~has_succ)),
                   levels=tuple(int(x) for x in lv), K=int(dag.K))


def dag_makespan(prog: DagProgram, tau_seg: jax.Array, barrier_every: int = 0) -> jax.Array:
    """Makespan (µs) of ONE candidate: C_i = max_{j in preds(i)} C_j + tau_seg[seg(i)] (0 without
    predecessors), T = max over sinks. ``tau_seg`` (K,) µs. ``barrier_every`` > 0 wraps the
    completion times in ``lax.optimization_barrier`` after every that many DAG levels (bounds the
    size of XLA fusions; 0 = one straight-line program)."""
    taus = [tau_seg[k] for k in range(prog.K)]
    C: list = [None] * prog.T
    order = sorted(range(prog.T), key=lambda i: (prog.levels[i], i)) if barrier_every else \
        range(prog.T)
    cur_level = 0
    pending: list[int] = []
    for i in order:
        if barrier_every and prog.levels[i] >= cur_level + barrier_every:
            vals = jax.lax.optimization_barrier(tuple(C[j] for j in pending))
            for j, v in zip(pending, vals):
                C[j] = v
            pending = []
            cur_level = prog.levels[i]
        ps = prog.preds[i]
        if ps:
            a = C[ps[0]]
            for j in ps[1:]:
                a = jnp.maximum(a, C[j])
            C[i] = a + taus[prog.seg[i]]
        else:
            C[i] = taus[prog.seg[i]]
        pending.append(i)
    out = C[prog.sinks[0]]
    for j in prog.sinks[1:]:
        out = jnp.maximum(out, C[j])
    return out


def _gather_tau(flat: jax.Array, segids: jax.Array, allocs: jax.Array, stage: jax.Array,
                N1: int) -> jax.Array:
    """Segment durations (CB * AB, K) float32 µs of every (cut, allocation) pair of a block:
    ``flat[segids[c, k] * N1 + allocs[a, stage[k]]]``, cut-major (row c * AB + a)."""
    idx = segids[:, None, :] * N1 + allocs[None, :, :][:, :, stage]      # (CB, AB, K)
    return flat[idx].reshape(-1, segids.shape[1])


class MaxPlusKernel(Protocol):
    """Scores a block of candidates with the unrolled recurrence (``score.massive``).

    Attributes:
        name: its key in ``MAXPLUS_KERNELS``.
    """

    name: str

    def block_makespans(self, prog: DagProgram, flat: jax.Array, segids: jax.Array,
                        allocs: jax.Array, stage: jax.Array, N1: int,
                        barrier_every: int = 0) -> jax.Array:
        """Makespans (CB, AB) float32 µs (traced inside ``jax.jit``).

        Args:
            prog: the task DAG. flat: the segment table ((n+1)^2 or K rows, N1 SM counts),
                flattened, float32 µs. segids: (CB, K) int32 row of each cut's segments.
            allocs: (AB, D) int32 SMs per stage. stage: (K,) int32 stage of each segment.
            N1: SM counts of the table (N + 1). barrier_every: as ``dag_makespan``.
        """
        ...


@dataclass(frozen=True)
class XlaMaxPlus:
    """The recurrence vmapped over cuts and allocations, fused by XLA (any backend)."""

    name: ClassVar[str] = "xla"

    def block_makespans(self, prog, flat, segids, allocs, stage, N1, barrier_every=0):
        def one(sid, alloc):
            return dag_makespan(prog, flat[sid * N1 + alloc[stage]], barrier_every)

        return jax.vmap(lambda sid: jax.vmap(lambda a: one(sid, a))(allocs))(segids)


def _pallas_body(tau_ref, out_ref, *, prog: DagProgram):
    """One program: the unrolled recurrence over the block's candidates (vectors of
    ``block``), durations read row by row from the (K_pad, block) block, the makespans
    written; the same max/add order as ``dag_makespan``."""
    taus = [tau_ref[k, :] for k in range(prog.K)]
    C: list = [None] * prog.T
    for i in range(prog.T):
        ps = prog.preds[i]
        t = taus[prog.seg[i]]
        if ps:
            a = C[ps[0]]
            for j in ps[1:]:
                a = jnp.maximum(a, C[j])
            C[i] = a + t
        else:
            C[i] = t
    out = C[prog.sinks[0]]
    for j in prog.sinks[1:]:
        out = jnp.maximum(out, C[j])
    out_ref[...] = out


@dataclass(frozen=True)
class PallasMaxPlus:
    """The recurrence as one Pallas kernel over blocks of ``block`` candidates (Triton on a GPU,
    Pallas' interpreter elsewhere; see the module docstring).

    Args:
        block: candidates per program (a power of two >= 16; Triton's block shapes are powers
            of two). num_warps: warps per program on a GPU (None: Pallas' default).
        interpret: run Pallas' interpreter (None: on any backend but the GPU).

    Raises:
        ValueError: ``block`` not a power of two >= 16, ``num_warps`` not an integer >= 1.
    """

    name: ClassVar[str] = "pallas"
    block: int = 256
    num_warps: int | None = None
    interpret: bool | None = None

    def __post_init__(self) -> None:
        b = pos_int(self.block, "block", minimum=16)
        if b & (b - 1):
            raise ValueError(f"block must be a power of two >= 16, got {self.block!r}")
        if self.num_warps is not None:
            pos_int(self.num_warps, "num_warps")

    def makespans(self, prog: DagProgram, tau: jax.Array) -> jax.Array:
        """Makespans (B,) float32 µs of the candidates' segment durations ``tau`` (B, K) µs."""
        from functools import partial

        from jax.experimental import pallas as pl

        B, K = tau.shape
        Kp = 1 << max(0, (K - 1).bit_length())
        Bp = -(-B // self.block) * self.block
        t = jnp.zeros((Kp, Bp), jnp.float32).at[:K, :B].set(tau.T.astype(jnp.float32))
        interpret = (jax.default_backend() != "gpu") if self.interpret is None \
            else bool(self.interpret)
        kw = {}
        if self.num_warps is not None and not interpret:
            from jax.experimental.pallas import triton as pltriton

            kw["compiler_params"] = pltriton.CompilerParams(num_warps=int(self.num_warps))
        out = pl.pallas_call(
            partial(_pallas_body, prog=prog),
            out_shape=jax.ShapeDtypeStruct((Bp,), jnp.float32),
            grid=(Bp // self.block,),
            in_specs=[pl.BlockSpec((Kp, self.block), lambda i: (0, i))],
            out_specs=pl.BlockSpec((self.block,), lambda i: (i,)),
            interpret=interpret, **kw)(t)
        return out[:B]

    def block_makespans(self, prog, flat, segids, allocs, stage, N1, barrier_every=0):
        tau = _gather_tau(flat, segids, allocs, stage, N1)
        return self.makespans(prog, tau).reshape(segids.shape[0], allocs.shape[0])


#: The max-plus kernels by name (``experiments/exhaustive_gridpoint.py --kernel``,
#: ``experiments/bench_evaluator.py --kernel``): each makes its kernel with its defaults.
MAXPLUS_KERNELS: dict[str, type] = {k.name: k for k in (XlaMaxPlus, PallasMaxPlus)}
#: The default: ``xla``, on every backend (``pallas`` only runs compiled on a GPU).
DEFAULT_MAXPLUS_KERNEL = XlaMaxPlus.name


def maxplus_kernel(name: str, **options) -> MaxPlusKernel:
    """The kernel registered as ``name`` with ``options`` (its fields).

    Raises:
        ValueError: an unknown name (one line listing the kernels) or a bad option."""
    if name not in MAXPLUS_KERNELS:
        raise ValueError(f"kernel must be one of {', '.join(MAXPLUS_KERNELS)}, got {name!r}")
    return MAXPLUS_KERNELS[name](**options)
