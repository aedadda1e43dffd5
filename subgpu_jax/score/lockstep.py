"""Batches of allocations run by an engine of the batched event simulator (docs/method.md §3,
issue 42): the one place that turns a timer's ``(graph, cfg, allocs)`` requests into
``sim.batched`` structures, stacks and engine calls, and sends what the engines do not cover to
the event simulator.

Engines (``LockstepBatches.ENGINES``):

* ``compiled`` (``sim.batchednb``): each allocation's own events in machine code (Numba), one
  row after another, following the event simulator's own loop: its full simulation's makespans
  bit for bit, 5.6-11.7x faster per allocation (``results/bench_compiled_sim_cpu.json``). The
  ``event`` timer's engine for batches.
* ``numpy`` (``sim.batched``): every allocation of a batch in lockstep as NumPy vectors; pays
  per instant, so it breaks even with the event simulator only at about 300 allocations per
  call on a CPU (``MIN_BATCH``).
* ``jax`` (``sim.batchedjax``): the same loop as one ``lax.while_loop``, for accelerators; on
  one H100 a search's batches (11-46 rows) made it slower than one host core
  (docs/results.md "Speed").
* ``auto``: ``compiled`` where Numba imports, else ``numpy`` on a CPU and ``jax`` elsewhere.

Covered: green contexts with one stream per stage, the contention model; temporal
configurations (D = 1), shared pools (several streams per stage, multistream) and the isolated
model go to the event simulator (``fallback``), as do batches under ``min_batch`` rows.
Units: µs.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from subgpu_jax.model.checks import pos_int
from subgpu_jax.model.graph import OpGraph
from subgpu_jax.model.hardware import Hardware
from subgpu_jax.model.lru import ByteLRU
from subgpu_jax.sim.contention import ContentionModel
from subgpu_jax.space.config import Config

__all__ = ["LockstepBatches", "compiled_available"]


def compiled_available() -> bool:
    """Whether the compiled engine runs here (Numba importable; ``sim.batchednb.available``)."""
    from subgpu_jax.sim.batchednb import available

    return available()


class LockstepBatches:
    """Runs ``(graph, cfg, allocs)`` requests of one GPU, contention model and L2 policy as
    batched-simulator calls of one engine.

    Args:
        hw: the GPU. model: the ``ContentionModel``. cache: the L2 policy. mode: the SM mode
            (multistream configurations with D > 1 go to ``fallback``). engine: ``ENGINES``.
        min_batch: the smallest batch (rows of all requests together) an engine runs (>= 1;
            None: ``MIN_BATCH`` of the engine). cache_mib: bound of the structures kept (MiB).

    Attributes:
        lockstep_rows, event_rows: allocations the engine timed, and the fallback instead.

    Raises:
        ValueError: an unknown engine, ``compiled`` without Numba, or ``min_batch`` < 1.
    """

    ENGINES = ("auto", "compiled", "numpy", "jax")
    #: The smallest batch an engine runs by default. compiled: 1 (faster than the event
    #: simulator on one allocation: ``experiments/bench_compiled_sim.py``). NumPy: 300, about
    #: where it breaks even with the event simulator per allocation on a CPU with the lru table
    #: (0.77-1.17x, median 0.92x, at 303-307 allocations of four of the main job's structures;
    #: ``results/batched_eventsim_proto_lru300.json``). JAX: 2 (on one H100 the loop did
    #: 6.8-12x one host core's work per allocation at 1,024 rows and 34-51x at 8,192-65,536,
    #: ``results/batched_eventsim_h100.json``).
    MIN_BATCH = {"compiled": 1, "numpy": 300, "jax": 2}

    def __init__(self, hw: Hardware, model: ContentionModel, cache: str, mode: str = "green",
                 engine: str = "auto", min_batch: int | None = None,
                 cache_mib: int = 256) -> None:
        if engine not in self.ENGINES:
            raise ValueError(f"engine must be one of {', '.join(self.ENGINES)}, got {engine!r}")
        if engine == "compiled" and not compiled_available():
            raise ValueError("engine 'compiled' needs numba, which does not import here "
                             "(pip install numba; or engine 'numpy')")
        self.hw, self.model, self.cache, self.mode, self.engine = hw, model, cache, mode, engine
        self.min_batch = (self.MIN_BATCH[self.engine_name()] if min_batch is None
                          else pos_int(min_batch, "min_batch"))
        self.structures = ByteLRU(int(cache_mib) * 2**20)
        self.lockstep_rows = self.event_rows = 0

    def engine_name(self) -> str:
        """The engine the batches run: ``compiled``, ``numpy`` or ``jax``."""
        if self.engine != "auto":
            return self.engine
        if compiled_available():
            return "compiled"
        import jax

        return "numpy" if jax.default_backend() == "cpu" else "jax"

    def structure(self, graph: OpGraph, cfg: Config):
        """The ``sim.batched.BatchStructure`` of ``cfg``'s structure (kept while its graph
        lives), or None when the batched simulator does not cover it."""
        from subgpu_jax.sim.batched import BatchStructure, Unbatchable

        key = (id(graph), cfg.seg_of, cfg.D, cfg.w, cfg.policy, cfg.streams_per_stage)

        def make():
            try:
                return (graph, BatchStructure(graph, cfg, self.hw, self.model, self.mode))
            except Unbatchable:
                return (graph, None)

        hit = self.structures.get_or_make(key, make)
        if hit[0] is not graph:     # an id reused by a new graph after the old one was freed
            self.structures.clear()
            return self.structure(graph, cfg)
        return hit[1]

    def run(self, items: Sequence[tuple[OpGraph, Config, np.ndarray]],
            fallback: Callable[[OpGraph, Config, np.ndarray], np.ndarray]) -> list[np.ndarray]:
        """Makespans (µs) of every request, float64 (B_i,) each: the covered ones in ONE engine
        call (their structures stacked) when they hold at least ``min_batch`` rows, the others
        by ``fallback(graph, cfg, allocs)`` (the event simulator).

        Raises:
            ValueError: ``allocs`` not (B, cfg.D) integers."""
        from subgpu_jax.sim.batched import StructureStack, Unbatchable

        mats = [np.atleast_2d(np.asarray(allocs)) for _, _, allocs in items]
        for (_, cfg, _), A in zip(items, mats):
            if A.ndim != 2 or A.shape[1] != cfg.D:
                raise ValueError(f"allocs must be (B, {cfg.D}) for a {cfg.D}-stage "
                                 f"configuration, got shape {A.shape}")
            if A.dtype.kind not in "iu":    # never truncated silently (64.5 -> 64)
                raise ValueError(f"allocs must hold integers (SMs), got dtype {A.dtype}")
        out: list = [None] * len(items)
        sts: list = []
        index: dict = {}
        batched = []            # (item, structure index)
        for n, (graph, cfg, _) in enumerate(items):
            st = None if cfg.D == 1 else self.structure(graph, cfg)
            if st is not None:
                batched.append((n, index.setdefault(id(st), len(index))))
                if len(sts) < len(index):
                    sts.append(st)
        nrows = sum(len(mats[n]) for n, _ in batched)
        if batched and nrows >= self.min_batch:
            D = max(st.D for st in sts)
            A = np.zeros((nrows, D), dtype=np.int64)
            sid = np.zeros(nrows, dtype=np.int64)
            k = 0
            for n, s in batched:
                A[k:k + len(mats[n]), :mats[n].shape[1]] = mats[n]
                sid[k:k + len(mats[n])] = s
                k += len(mats[n])
            try:
                vals = self._engine_call(StructureStack(sts), sid, A)
            except Unbatchable:     # (the JAX loop: a task without kernels)
                vals = None
            if vals is not None:
                self.lockstep_rows += nrows
                k = 0
                for n, _ in batched:
                    out[n] = np.asarray(vals[k:k + len(mats[n])], dtype=float)
                    k += len(mats[n])
        for n, (graph, cfg, _) in enumerate(items):
            if out[n] is None:
                self.event_rows += len(mats[n])
                out[n] = np.asarray(fallback(graph, cfg, mats[n]), dtype=float)
        return out

    def _engine_call(self, stack, sid: np.ndarray, A: np.ndarray) -> np.ndarray:
        engine = self.engine_name()
        if engine == "compiled":
            from subgpu_jax.sim.batchednb import simulate_stack_compiled

            return simulate_stack_compiled(stack, sid, A, self.cache)
        if engine == "jax":
            from subgpu_jax.sim.batchedjax import simulate_stack_jax

            return simulate_stack_jax(stack, sid, A, self.cache)
        from subgpu_jax.sim.batched import simulate_stack

        return simulate_stack(stack, sid, A, self.cache)
