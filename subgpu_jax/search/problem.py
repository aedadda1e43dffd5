"""A search problem (workload on one GPU, cached duration tables and evaluators) and its exact
scorers f (docs/method.md §4): ``TimerExact``, the one adapter from a ``score.timer.Timer``
(``TimerExact(problem, EventTimer(problem.hw))``: the event simulator, the scorer the method
means; ``TimerExact(problem, EstimatorTimer(problem))``: the cheap estimator's own hard
makespan, for studies of the search under that model); and ``MemoScorer`` (memoisation and
call counting).

An exact scorer is any callable ``exact(cfg: Config) -> makespan (µs)``; the searches take it as a
required argument and never fall back to the estimator."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from subgpu_jax.model.checks import pos_int
from subgpu_jax.model.graph import StaticDurationModel
from subgpu_jax.model.hardware import Hardware
from subgpu_jax.model.lru import ByteLRU
from subgpu_jax.model.workload import Workload
from subgpu_jax.score.evaluator import Evaluator, temporal_makespan
from subgpu_jax.score.timer import StaticTimer, Timer, TimerBase, Timing
from subgpu_jax.score.vcontention import ContentionEstimator
from subgpu_jax.space.config import DEFAULT_POLICY, AllocSpace, check_dispatch_policy, Config

__all__ = ["Problem", "ContentionEstimators", "TimerExact",
           "EstimatorTimer", "MemoScorer", "memoised"]


class Problem:
    """A workload on one GPU: caches duration tables and evaluators, names configurations.

    Args:
        workload: the graphs per microbatch count.
        hw: the GPU.
        duration_model: a ``model.setup.DurationModel`` (``table(graph) -> (n, N+1)`` µs;
            default ``StaticDurationModel(hw)``).
        streams_per_stage: k streams per stage of every configuration it names (its task DAG
            and cheap estimator; docs/method.md, "Streams per stage"). Default 1.
        evaluator_cache_mib: bound (MiB) of the cache of cheap estimators (``evaluator``): the
            least recently used are dropped beyond it (default ``EVALUATOR_CACHE_MIB``; 0
            caches nothing). A contention-aware estimator holds ~10 MiB of tables.
        source: a ``score.timer.StructureCache`` of estimators of this problem's kind and
            model (the search's exact timer's ``structures``) to take them from (None: its own).
        estimator: the factory of the cheap estimators (``ContentionEstimators``: the
            contention-aware ``ContentionEstimator``), or None: the static ``Evaluator``.

    Attributes:
        evaluators: the ``model.lru.ByteLRU`` of cheap estimators (hits, misses,
            evictions, nbytes).
    """

    #: Default bound (MiB) of each problem's cache of cheap estimators (docs/reliability.md).
    EVALUATOR_CACHE_MIB = 256

    def __init__(self, workload: Workload, hw: Hardware, duration_model=None,
                 streams_per_stage: int = 1, evaluator_cache_mib: int | None = None,
                 source=None, estimator: "ContentionEstimators | None" = None) -> None:
        self.workload, self.hw, self.source = workload, hw, source
        self.estimator = estimator
        #: whether the cheap estimator models contention (``estimator``'s capability)
        self.contention = bool(getattr(estimator, "contention", False))
        self.streams_per_stage = pos_int(streams_per_stage, "streams_per_stage")
        self.model = duration_model or StaticDurationModel(hw)
        self._tables: dict[int, np.ndarray] = {}
        mib = self.EVALUATOR_CACHE_MIB if evaluator_cache_mib is None else pos_int(
            evaluator_cache_mib, "evaluator_cache_mib", minimum=0)
        self.evaluators = ByteLRU(int(mib) * 2**20)

    def space(self, D: int) -> AllocSpace:
        """``AllocSpace.from_hw(hw, D)``.

        Raises:
            ValueError: the space is empty (names budget/minimum) or D < 1.
        """
        return AllocSpace.from_hw(self.hw, D)

    def table(self, m: int) -> np.ndarray:
        """Kernel duration table (n, N_SM+1) µs for m microbatches (cached)."""
        if m not in self._tables:
            self._tables[m] = np.asarray(self.model.table(self.workload.graph(m)))
        return self._tables[m]

    def evaluator(self, seg_of: Sequence[int], D: int, w: int, m: int,
                  policy: str = DEFAULT_POLICY) -> Evaluator:
        """The cheap estimator of one (cut, D, w, m, policy), cached (least recently used
        first out beyond ``evaluator_cache_mib``; a rebuilt estimator scores identically).

        Raises:
            ValueError: unknown policy, illegal cut/D/w, m not dividing the batch.
        """
        check_dispatch_policy(policy)
        key = (tuple(int(s) for s in seg_of), int(D), int(w), int(m), policy)
        return self.evaluators.get_or_make(key, lambda: self._new_evaluator(
            self.workload.graph(m), key[0], int(D), int(w), policy, self.table(m)))

    def clear_evaluators(self) -> None:
        """Drop every cached cheap estimator (a search job calls it once a grid point is
        stored: the estimators of one (D, m, policy) serve no other grid point)."""
        self.evaluators.clear()

    def _new_evaluator(self, graph, seg_of: tuple, D: int, w: int, policy: str,
                       table: np.ndarray) -> Evaluator:
        """A new cheap estimator of one structure (``evaluator`` caches it): from ``source``
        when given (the search's exact timer of the same model, ``score.timer.StructureCache``:
        the cheap ranking and the exact polish then build each structure once), else the
        static ``Evaluator`` on ``table`` (n, N_SM+1) µs, or the ``estimator`` factory's."""
        if self.source is not None:
            return self.source.get(graph, seg_of, D, w, policy, self.streams_per_stage, table)
        if self.estimator is not None:
            return self.estimator(graph, seg_of, D, w, self.hw, policy, table,
                                  self.streams_per_stage)
        return Evaluator(graph, seg_of, D, w, self.hw, policy=policy, table=table,
                         streams_per_stage=self.streams_per_stage)

    def config(self, seg_of: Sequence[int], D: int, w: int, alloc: Sequence[int], m: int,
               policy: str = DEFAULT_POLICY) -> Config:
        """The ``Config`` of these choices (microbatch size b = R / m)."""
        return Config(D=int(D), w=int(w), seg_of=tuple(int(s) for s in seg_of),
                      alloc=tuple(int(a) for a in alloc),
                      microbatch=self.workload.microbatch_size(m), policy=policy,
                      streams_per_stage=self.streams_per_stage)

    def exact_batch(self, exact: Callable[[Config], float], seg_of: Sequence[int], D: int, w: int,
                    m: int, policy: str = DEFAULT_POLICY) -> Callable[[np.ndarray], np.ndarray]:
        """Wrap ``exact`` into an objective over allocation batches (B, D) -> (B,) µs: one call
        of ``exact.many`` for the whole batch where the scorer has it (``MemoScorer`` over a
        batched ``TimerExact``: one vectorised call for the rows not yet scored), else one
        scorer call per row (memoise ``exact`` with ``MemoScorer``)."""
        many = getattr(exact, "many", None)

        def f(allocs: np.ndarray) -> np.ndarray:
            cfgs = [self.config(seg_of, D, w, a, m, policy) for a in np.atleast_2d(allocs)]
            if many is not None:
                return np.asarray(many(cfgs), dtype=float)
            return np.array([float(exact(c)) for c in cfgs])
        return f

    def temporal(self) -> float:
        """Temporal baseline makespan (µs): D = 1, one full-batch microbatch, all SMs."""
        return temporal_makespan(self.workload.graph(1), self.hw, table=self.table(1))


class MemoScorer:
    """Memoises an exact scorer by ``Config`` and counts its distinct calls.

    Args:
        fn: ``Config -> makespan (µs)``.

    Attributes:
        calls: distinct configurations scored (calls that reached ``fn``).
        requests: all lookups, hits included.
        cache: ``{Config: makespan}``.
        seconds: wall time spent inside ``fn``.
        seen: while a ``watch()`` is open, the distinct configurations requested since (cache
            hits included), in request order; else None.
    """

    def __init__(self, fn: Callable[[Config], float]) -> None:
        self.fn = fn
        self.cache: dict[Config, float] = {}
        self.calls = 0
        self.requests = 0
        self.seconds = 0.0
        self.seen: dict[Config, None] | None = None

    def watch(self) -> dict:
        """Start recording the configurations requested (``seen``, a fresh insertion-ordered
        dict, returned); ``unwatch`` stops. ``search.algorithm1`` watches one grid point's
        requests, memo hits included."""
        self.seen = {}
        return self.seen

    def unwatch(self) -> None:
        """Stop recording requests (``seen`` becomes None)."""
        self.seen = None

    def __call__(self, cfg: Config) -> float:
        return self.many([cfg])[0]

    def many(self, cfgs: Sequence[Config]) -> list[float]:
        """Makespans (µs) of ``cfgs``; the ones not yet scored go to ``fn.many`` in one call
        where ``fn`` has it (a batched ``TimerExact``), else to ``fn`` one by one. Each
        distinct configuration counts as one call.

        Raises:
            ValueError: a makespan that is not finite and > 0."""
        self.requests += len(cfgs)
        if self.seen is not None:
            self.seen.update(dict.fromkeys(cfgs))
        todo = list(dict.fromkeys(c for c in cfgs if c not in self.cache))
        if todo:
            t0 = time.perf_counter()
            fm = getattr(self.fn, "many", None)
            vals = fm(todo) if fm is not None and len(todo) > 1 else [self.fn(c) for c in todo]
            self.seconds += time.perf_counter() - t0
            for c, v in zip(todo, vals):
                v = float(v)
                if not np.isfinite(v) or v <= 0:
                    raise ValueError(f"exact scorer returned {v!r} for {c}; makespans must be "
                                     "finite and > 0 µs")
                self.cache[c] = v
            self.calls += len(todo)
        return [self.cache[c] for c in cfgs]


class TimerExact:
    """Exact scorer from a ``score.timer.Timer``: the timer's makespan (µs) of a ``Config`` on
    the problem's graph for its microbatch count, after one feasibility check.

    Args:
        problem: supplies the graph of each microbatch count and the GPU.
        timer: an ``EventTimer`` or ``StaticTimer`` (``score.timer``) of the problem's GPU.

    Call: ``exact(cfg) -> float`` µs (through ``many`` when the timer ``coalesces``: a
    ``score.coalesce.CoalescingTimer`` batches single configurations with the other grid
    points' requests; or ``batches_structures``: an event timer's ``time_many``). Raises
    ValueError for an infeasible ``cfg`` (as ``Config.check``).
    """

    def __init__(self, problem: Problem, timer: Timer) -> None:
        self.problem, self.timer = problem, timer

    def __call__(self, cfg: Config) -> float:
        if self.timer.coalesces or self.timer.batches_structures:  # a shared batch, an engine
            return self.many([cfg])[0]
        pb = self.problem
        m = pb.workload.m_of(cfg)
        g = pb.workload.graph(m)
        cfg.check(g.n, g.edges, pb.hw, pb.workload.batch)
        return self.timer.time(g, cfg, record=False, validate=False).makespan_us

    def many(self, cfgs: Sequence[Config]) -> list[float]:
        """Makespans (µs) of ``cfgs``: configurations of one structure (cut, stages, reuse,
        microbatch, policy, streams) go to the timer's ``time_allocs`` together (one
        vectorised call for a batched timer), or every structure to its ``time_many`` in one
        call where the timer ``batches_structures`` (the event timers), each checked first.

        Raises:
            ValueError: an infeasible configuration (as ``Config.check``)."""
        pb = self.problem
        groups: dict = {}
        for i, c in enumerate(cfgs):
            groups.setdefault(dataclasses.replace(c, alloc=()), []).append(i)
        out = [0.0] * len(cfgs)
        items = []
        for idx in groups.values():
            c0 = cfgs[idx[0]]
            g = pb.workload.graph(pb.workload.m_of(c0))
            for i in idx:
                cfgs[i].check(g.n, g.edges, pb.hw, pb.workload.batch)
            items.append((g, c0, np.array([cfgs[i].alloc for i in idx])))
        vals_of = self.timer.time_many(items)   # one call, or time_allocs per structure
        for idx, vals in zip(groups.values(), vals_of):
            for i, v in zip(idx, np.asarray(vals, dtype=float).tolist()):
                out[i] = v
        return out


class EstimatorTimer(TimerBase):
    """The problem's cheap estimator as a ``score.timer.Timer``: the vectorised evaluator's hard
    makespan (µs) of a configuration of the problem's graphs, from the problem's cached
    estimators (``Problem.evaluator``).

    Args:
        problem: the graphs (``graph`` passed to ``time`` must be one of them, for the
            configuration's microbatch count) and the estimators.
    """

    name = "static"
    reference, batched, screen, compiled = False, True, None, False

    def __init__(self, problem: Problem) -> None:
        self.problem, self.hw = problem, problem.hw
        # the problem's estimators model contention or not (its cheap estimator's own model)
        self.contention = problem.contention

    def describe(self) -> str:
        return ("the search's contention-aware cheap estimator" if self.contention
                else "the search's static cheap estimator")

    def time_allocs(self, graph, cfg: Config, allocs: np.ndarray) -> np.ndarray:
        pb = self.problem
        ev = pb.evaluator(cfg.seg_of, cfg.D, cfg.w, pb.workload.m_of(cfg), cfg.policy)
        return np.asarray(ev.makespan(np.atleast_2d(allocs)), dtype=float)

    def time(self, graph, cfg: Config, record: bool = False, validate: bool = True) -> Timing:
        pb = self.problem
        if validate:
            cfg.check(graph.n, graph.edges, pb.hw, pb.workload.batch)
        ev = pb.evaluator(cfg.seg_of, cfg.D, cfg.w, pb.workload.m_of(cfg), cfg.policy)
        return Timing(float(ev.makespan(np.asarray([cfg.alloc]))[0]))

    def head_us(self, kernels) -> float:
        return StaticTimer(self.hw).head_us(kernels)


def memoised(exact: Callable[[Config], float] | None) -> MemoScorer:
    """``exact`` memoised (itself when it is a ``MemoScorer``).

    Raises:
        ValueError: ``exact`` is None or not callable (the searches need an explicit exact
            scorer; they never fall back to the cheap estimator).
    """
    if exact is None or not callable(exact):
        raise ValueError(f"exact must be an exact scorer Config -> makespan µs (e.g. "
                         f"TimerExact(problem, EventTimer(problem.hw))), got {exact!r}")
    return exact if isinstance(exact, MemoScorer) else MemoScorer(exact)


@dataclass(frozen=True)
class ContentionEstimators:
    """The factory of a ``Problem``'s contention-aware cheap estimators
    (``score.vcontention.ContentionEstimator``: same seeds and smooth relaxation as the static
    evaluator, hard makespans from the vectorised contention model of the event simulator).

    Attributes:
        model: the event simulator's ``ContentionModel`` (None: the default); cache: its L2
            policy. contention: True (the capability ``Problem.contention`` reads). reuse:
            ``score.vcoptions.VCOptions.reuse`` (the caller scores many grid points per
            structure family).
    """

    model: object = None
    cache: str = "lru"
    contention: bool = True
    reuse: bool = False

    def __call__(self, graph, seg_of, D: int, w: int, hw: Hardware, policy: str,
                 table: np.ndarray, streams_per_stage: int) -> ContentionEstimator:
        """The estimator of one structure (``Problem.evaluator`` caches it)."""
        return ContentionEstimator(graph, seg_of, D, w, hw, policy=policy, table=table,
                                   model=self.model, cache=self.cache,
                                   streams_per_stage=streams_per_stage, reuse=self.reuse)
