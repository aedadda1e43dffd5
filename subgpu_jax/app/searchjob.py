"""The main job's parts: its options (``SearchOptions``), the scorer of one grid point
(``PointScorer``, Algorithm 1 with the exact timer) and what a worker process needs to build
it (``ScorerSpec``); ``app.searchrun.run_search`` drives them over the grid and
``app.searchout.write_outputs`` writes the outputs.

``searchrun.run_search`` evaluates every grid point of ``sweep.build_grid`` (temporal baseline at every
(q, G); Algorithm 1 at every (q, G, m, D, policy)) with the exact scorer (the event simulator with
contention and L2 residency by default), appends the records to a crash-safe store, and writes
into the results folder:

* ``records.jsonl`` (the store) and ``records.csv`` (every record: all of theta, makespan,
  throughputs, speedup over the temporal baseline of the same (q, G), per-category times),
* ``summary.json`` (frontiers, matched-gain tables, best configurations),
* ``frontier.png``, ``frontier_by_stages.png`` and ``gantt_best.png``.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass

from subgpu_jax.model.deployment import RECORD_OPTIONS
from subgpu_jax.model.generation import generation_steps, search_step
from subgpu_jax.model.graph import CATEGORIES, Deployment
from subgpu_jax.model.hardware import Hardware
from subgpu_jax.model.models import ModelArch
from subgpu_jax.model.setup import GpuSetup
from subgpu_jax.app.args import DEFAULT_L_SIM
from subgpu_jax.app.recordingtimer import RecordingTimer
from subgpu_jax.search.problem import TimerExact
from subgpu_jax.search.strategies import (ALLOC_STRATEGIES, by_name, CHEAP_ESTIMATORS,
                                          CUT_STRATEGY_REGISTRY, DEFAULT_ALLOC_STRATEGY,
                                          DEFAULT_CHEAP, DEFAULT_CUT_STRATEGY)
from subgpu_jax.score.programs import JAX_CACHE_CLEAR_EVERY, release_compiled
from subgpu_jax.score.step import time_step
from subgpu_jax.score.timer import DEFAULT_TIMER, EventTimer, Timer, timer_for
from subgpu_jax.space.config import Config, temporal_config
from subgpu_jax.app.sweep import GridPoint
from subgpu_jax.model.accounting import throughput_record

__all__ = ["PointScorer", "ScorerSpec", "SearchOptions", "CHEAP_KINDS"]

#: Deployment fields beyond the grid's (topology, routing, serving) that records carry.
DEPLOY_OPTIONS = RECORD_OPTIONS

#: Cheap estimators (the keys of ``search.strategies.CHEAP_ESTIMATORS``): ``auto`` =
#: ``vcontention`` when the exact scorer is the event simulator, else ``static``;
#: ``vcontention`` = ``score.vcontention.ContentionEstimator`` (contention-aware,
#: docs/method.md §3); ``static`` = ``score.evaluator.Evaluator`` (isolated kernel durations).
CHEAP_KINDS = tuple(CHEAP_ESTIMATORS)


@dataclass(frozen=True)
class SearchOptions:
    """The options of ``searchrun.run_search``: the scorers and strategies (as ``PointScorer``) and the
    sweep's (as ``app.sweep.run_sweep`` and ``app.store.SweepStore``).

    Attributes:
        timer: the exact scorer, a ``score.timer.Timer`` made once at the command line's edge
            (``score.timer.timer_for``; None: the event simulator of the setup, the default).
        cache: L2 policy of the event simulator (None: the setup's). L_sim: pass limit of the
            exact polish.
        cut_strategy: a name of ``search.strategies.CUT_STRATEGY_REGISTRY`` or a cut strategy.
        cheap: a name of ``search.strategies.CHEAP_ESTIMATORS`` or a cheap estimator.
        alloc_strategy: a name of ``search.strategies.ALLOC_STRATEGIES`` or an allocation
            strategy.
        resume: continue the sweep in the folder. budget: most grid points to evaluate (None:
            all). progress: print one line per grid point.
        min_tokens_per_user: see ``write_outputs``.
        overwrite: delete the records in the folder (of any sweep) and start afresh.
        repair: keep this sweep's finished grid points in a folder that also holds another
            sweep's manifest or records, setting those aside (``SweepStore(repair=True)``).
        workers: local CPU processes scoring grid points at once (``app.pool.run_sweep_pool``:
            JAX on the CPU, one thread each; the records do not depend on it); 1 scores them in
            this process (JAX on its default backend).
        in_flight: grid points scored at once in this process, one thread each, their exact
            steps timed together in one batched call (``score.coalesce.CoalescingTimer``; a
            timer with ``time_many``, ``event-batched``; the same configurations whatever
            the count, makespans equal to float rounding); 1: one point after the other.
        pool: worker processes started ahead of the sweep (``app.pool.WorkerPool``; with
            ``workers`` > 1 the sweep takes its first workers instead of starting its own), or
            None. The caller closes it.
    """

    timer: Timer | None = None
    cache: str | None = None
    L_sim: int = DEFAULT_L_SIM
    cut_strategy: object = DEFAULT_CUT_STRATEGY
    cheap: object = DEFAULT_CHEAP
    alloc_strategy: object = DEFAULT_ALLOC_STRATEGY
    resume: bool = False
    budget: int | None = None
    progress: bool = True
    min_tokens_per_user: float | None = None
    overwrite: bool = False
    repair: bool = False
    workers: int = 1
    in_flight: int = 1
    pool: object = None


def _steps_of(dep: Deployment) -> set:
    """``dep``, the step the search scores (``search_step``) and every step of its generation
    (``generation_steps``): the deployments whose caches a grid point of ``dep`` fills."""
    return {dep, search_step(dep), *(d for d, _ in generation_steps(dep))}


def _trim_heap() -> None:
    """Hand freed heap pages back to the OS (glibc ``malloc_trim``; a no-op elsewhere): the
    tables a grid point frees are large, and glibc keeps freed heap memory resident."""
    import ctypes
    import ctypes.util

    try:
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


class PointScorer:
    """Scores grid points of one model on one GPU (callable: GridPoint -> list of records).

    Args:
        arch: model. setup: the GPU, a ``model.setup.GpuSetup`` (``Calibration.bind(hw)`` for a
        calibrated search) or a ``Hardware`` (uncalibrated). timer: the exact scorer, a
        ``score.timer.Timer`` of the same GPU (``score.timer.timer_for``; None: the event
        simulator of ``setup``). cache: L2 policy of the event simulator (None: the setup's).
        L_sim: pass limit of the exact polish (Algorithm 2 with the exact scorer).
        cut_strategy: a name of ``search.strategies.CUT_STRATEGY_REGISTRY`` or a cut strategy
            (``search.strategies.CutStrategy``).
        cheap: a name of ``search.strategies.CHEAP_ESTIMATORS`` or a cheap estimator (``auto``:
            the contention-aware ``vcontention`` estimator when the timer models contention,
            else ``static``).
        alloc_strategy: a name of ``search.strategies.ALLOC_STRATEGIES`` or an allocation
            strategy (``search.strategies.AllocationStrategy``).

    Memory (docs/reliability.md): nothing of a grid point is kept once its records are made
    (its cheap estimators, simulation summaries and rest-of-step times, :meth:`forget_point`);
    a deployment's problems and temporal baselines are freed when the sweep leaves it
    (:meth:`release`); the compiled batch kernels are shared by every grid point of one
    structure and bounded (``score.programs.ProgramCache``).

    Attributes:
        scorers: ``{"cheap": ..., "exact": ...}``, the names of the scorers in use.

    Raises:
        ValueError: a timer of another GPU or not a ``Timer``, an unknown ``cheap`` or strategy
            name, an unknown cache policy.
    """

    def __init__(self, arch: ModelArch, setup: GpuSetup | Hardware, timer: Timer | None = None,
                 cache: str | None = None, L_sim: int = DEFAULT_L_SIM,
                 cut_strategy=DEFAULT_CUT_STRATEGY,
                 cheap: str = DEFAULT_CHEAP, alloc_strategy=DEFAULT_ALLOC_STRATEGY) -> None:
        self.cut = by_name(CUT_STRATEGY_REGISTRY, cut_strategy, "cut_strategy")
        self.cut_strategy = self.cut.name
        self.alloc = by_name(ALLOC_STRATEGIES, alloc_strategy, "alloc_strategy")
        if not isinstance(setup, GpuSetup):
            setup = GpuSetup.uncalibrated(setup)
        self.setup, self.hw, self.calibration = setup, setup.hw, setup.calibration
        # the event simulator (records, verdicts, the contention-aware cheap estimator's model)
        # and the exact scorer's timer (made once at the command line's edge)
        if timer is not None and not isinstance(timer, Timer):
            raise ValueError(f"timer must be a score.timer.Timer (timer_for), got {timer!r}")
        # an event timer chosen at the edge (event, event-full) is the search's event simulator
        self.event = (timer if timer is not None and timer.reference
                      else EventTimer.of(setup, cache))
        self.timer = self.event if timer is None else timer
        if self.timer.hw != self.hw:
            raise ValueError(f"timer: made for {self.timer.hw.name}, the search runs on "
                             f"{self.hw.name} (make it from the same setup)")
        # the timer the search ranks and polishes with: a screened timer's screen, which the
        # event simulator then confirms (search.algorithm1's confirm), else the timer itself
        self.ranker = self.timer.screen if self.timer.screen is not None else self.timer
        self.cheap = by_name(CHEAP_ESTIMATORS, cheap, "cheap").resolve(self.timer)
        self.cheap_kind = self.cheap.name
        self.arch, self.L_sim = arch, L_sim
        self.cache, self.model = self.event.cache, self.event.model
        self._problems: dict = {}
        self._temporal: dict = {}
        self._sim_summary: dict = {}  # (deployment, Config) -> categories and L2 hit rate
        self.points_forgotten = 0  # grid points whose leftovers were freed (forget_point)
        #: a ``score.coalesce.CoalescingTimer`` over the timer while grid points are scored in
        #: flight together (``run_search``, ``SearchOptions.in_flight``), else None
        self.coalescer = None
        self._lock = threading.RLock()

    @property
    def scorers(self) -> dict:
        """``{"cheap": name, "exact": name}`` of the scorers in use."""
        return {"cheap": self.cheap_kind, "exact": self.timer.name}

    def problem(self, dep: Deployment, streams_per_stage: int = 1):
        """The ``search.Problem`` of a deployment with k streams per stage (cached), made by the
        cheap estimator's factory (``search.strategies.CheapEstimator.problem``)."""
        from subgpu_jax.model.workload import Workload

        key = (dep, streams_per_stage)
        with self._lock:    # grid points in flight (threads) share one Problem per key
            if key not in self._problems:
                dm = self.setup.duration_model
                if self.calibration is not None:
                    self.calibration.check_workload(self.arch, dep, self.hw)
                wl = Workload.from_model(self.arch, dep)
                self._problems[key] = self.cheap.problem(wl, self.hw, dm, self.model,
                                                         self.cache, streams_per_stage,
                                                         self.ranker)
            return self._problems[key]

    def release(self, dep: Deployment) -> None:
        """Free what the sweep no longer needs once it leaves deployment ``dep``: its
        ``Problem`` per stream count (graphs, duration tables, evaluators), its temporal and
        rest-of-step makespans and simulation summaries (of ``dep``, the step the search scores
        and every step of its generation)."""
        deps = _steps_of(dep)

        def of_dep(key) -> bool:  # keys: dep, (dep, k), (dep, cfg), ("rest", dep, cfg)
            return key in deps or (isinstance(key, tuple) and any(d in key[:2] for d in deps))

        for cache in (self._problems, self._temporal, self._sim_summary):
            # list() copies the keys in one step: grid points in flight may add keys meanwhile
            for k in [k for k in list(cache) if of_dep(k)]:
                cache.pop(k, None)

    def forget_point(self, pt: GridPoint) -> None:
        """Free what grid point ``pt`` left behind once its records are made: the cheap
        estimators of its problem (they serve no other grid point: their key holds its D, m
        and policy), the simulation summaries of its deployment and the rest-of-step times of
        its pipelined configurations (the temporal baseline's are kept for the next point).
        Every deployment of the point counts: the step the search scores and, for a generation,
        each of its steps. Every ``JAX_CACHE_CLEAR_EVERY`` points the compiled programs and
        JAX's own caches are released (``score.programs.release_compiled``). The freed heap
        pages are handed back to the OS (``malloc_trim``). With points in flight together
        (``coalescer`` set) nothing is freed here: the other points of the deployment still use
        it, and ``release`` frees it all once they are stored."""
        if self.coalescer is not None:
            return
        deps = _steps_of(pt.deploy)
        for key, p in self._problems.items():
            if key[0] in deps:
                p.clear_evaluators()
        for k in [k for k in self._sim_summary if k[0] in deps]:
            del self._sim_summary[k]
        for k in [k for k in self._temporal if isinstance(k, tuple) and k[0] == "rest"
                  and k[1] in deps and k[2].D != 1]:
            del self._temporal[k]
        self.points_forgotten += 1
        if self.points_forgotten % JAX_CACHE_CLEAR_EVERY == 0:
            release_compiled()
        _trim_heap()

    def simulate(self, dep: Deployment, cfg: Config):
        """Event-simulate ``cfg`` (the graph of ``dep`` for its microbatch count; not validated:
        the search's configurations are) with the Python simulator; keeps its per-category
        times, L2 hit rate and makespan for ``_record`` (a record re-runs a configuration only
        when the compiled engine scored it, which keeps makespans alone). Ctrl-C is
        honoured before and after (:func:`subgpu_jax.app.interrupt.check`), i.e. around the
        compilations of the exact polish.

        Returns:
            the ``SimResult``."""
        from subgpu_jax.app.interrupt import check

        check()
        p = self.problem(dep)
        m = p.workload.m_of(cfg)
        r = self.event.time(p.workload.graph(m), cfg, record=False, validate=False).result
        self._sim_summary[(dep, cfg)] = (
            {c: float(r.category_time.get(c, 0.0)) for c in CATEGORIES}, float(r.l2_hit_rate),
            float(r.makespan))
        check()
        return r

    def exact(self, dep: Deployment, streams_per_stage: int = 1) -> TimerExact:
        """Exact scorer Config -> makespan µs for this deployment (k streams per stage): a
        ``search.problem.TimerExact`` over the timer, observed by ``RecordingTimer`` when it is
        the event simulator (each simulation kept for the records); a batched timer scores a
        pass's moves in one call (``TimerExact.many``)."""
        p = self.problem(dep, streams_per_stage)
        if self.timer is self.event:
            return TimerExact(p, RecordingTimer(self, dep))
        return TimerExact(p, self.timer if self.coalescer is None else self.coalescer)

    def search_scorers(self, dep: Deployment, streams_per_stage: int = 1
                       ) -> tuple[TimerExact, TimerExact | None]:
        """The scorers of a grid point's search: ``(exact, confirm)``. With a screened timer
        (``timer.screen``) the search ranks and polishes with the screen and the event
        simulator confirms (``search.algorithm1``'s ``confirm``); else ``(self.exact(dep),
        None)``."""
        if self.timer.screen is None:
            return self.exact(dep, streams_per_stage), None
        p = self.problem(dep, streams_per_stage)
        return TimerExact(p, self.ranker), self.exact(dep, streams_per_stage)

    def temporal_makespan(self, dep: Deployment) -> float:
        """Temporal baseline (µs) of a deployment under the exact scorer (cached)."""
        if dep not in self._temporal:
            p = self.problem(dep)
            g1 = p.workload.graph(1)
            cfg = temporal_config(g1.n, self.hw, p.workload.batch)
            self._temporal[dep] = float(self.exact(dep)(cfg))
        return self._temporal[dep]

    def rest_of_step(self, dep: Deployment, cfg: Config) -> float:
        """Time (µs) of the step outside the searched main region (``score/step.py``): the runs
        of the model's other region kinds under ``cfg`` carried over by ``map_cut``, and the
        head kernels; the same scorer kind as the exact one (cached)."""
        key = ("rest", dep, cfg)
        if key not in self._temporal:
            from subgpu_jax.model.graph import ForwardPass, build_forward

            fp = build_forward(self.arch, dep, self.problem(dep).workload.m_of(cfg))
            rest = ForwardPass(runs=tuple((g, c) for g, c in fp.runs if g is not fp.main),
                               head=fp.head, main=fp.main)
            self._temporal[key] = time_step(rest, cfg, self.timer, record=False).makespan_us
        return self._temporal[key]

    def generation_makespan(self, dep: Deployment, cfg: Config, region_us: float) -> dict:
        """The whole step's time (µs) of ``cfg``: at ``dep``'s one step, or for a generation
        (``output_len`` > 0) the weighted mean over ``model.generation.generation_steps``
        (docs/accounting.md item 6), the exact scorer's region makespan at each step plus the
        rest of the step; ``region_us`` is the search's region makespan at
        ``search_step(dep)``.

        Returns:
            ``{"makespan_us"}`` and, for a generation, ``"step_makespans_us"`` ("|"-joined, µs)
            and ``"step_kv_histories"`` (tokens).
        """
        ds = search_step(dep)
        if not dep.output_len:
            return {"makespan_us": region_us + self.rest_of_step(dep, cfg)}
        steps = []
        for d, w in generation_steps(dep):
            reg = region_us if d == ds else (
                self.temporal_makespan(d) if cfg.D == 1 else float(self.exact(d)(cfg)))
            steps.append((d.kv_history, w, reg + self.rest_of_step(d, cfg)))
        return {"makespan_us": float(sum(w * t for _, w, t in steps)),
                "step_makespans_us": "|".join(f"{t:.1f}" for _, _, t in steps),
                "step_kv_histories": "|".join(str(kv) for kv, _, _ in steps)}

    def _record(self, pt: GridPoint, cfg: Config, makespan: float, extra: dict) -> dict:
        d = pt.deploy
        ds = search_step(d)  # the step the search scored (a generation's middle step)
        p = self.problem(ds)
        g1 = p.workload.graph(1)
        # the search scores the main region; records time the whole step (score/step.py), or the
        # mean step of a whole generation
        region_us = makespan
        if self.timer is self.event:
            if (ds, cfg) not in self._sim_summary:
                self.simulate(ds, cfg)
            cats, hit, sim_us = self._sim_summary[(ds, cfg)]
            if cfg.D > 1:   # the simulator's own number (the search's may be its compiled engine's)
                region_us = sim_us
        gen = self.generation_makespan(d, cfg, region_us)
        makespan = gen.pop("makespan_us")
        t_cfg1 = temporal_config(g1.n, self.hw, p.workload.batch)
        t_temp = self.generation_makespan(d, t_cfg1, self.temporal_makespan(ds))["makespan_us"]
        rec = {"model": self.arch.name, "hardware": self.hw.name, **d.to_record(),
               "mode": "temporal" if cfg.D == 1 else "subgpu",
               **cfg.to_record(g1, p.workload.m_of(cfg)),
               **throughput_record(makespan, d.tokens_per_gpu),
               "temporal_makespan_us": t_temp, "speedup_vs_temporal": t_temp / makespan,
               "region_makespan_us": region_us, "rest_of_step_us": makespan - region_us,
               "exact": self.timer.name, **gen}
        if self.arch.kv_dtype != "bf16":
            rec["kv_dtype"] = self.arch.kv_dtype
        rec.update(extra)
        if self.timer is self.event:
            for c in CATEGORIES:
                rec[f"cat_{c}_us"] = cats[c]
            rec["l2_hit_rate"] = hit
        return rec

    def __call__(self, pt: GridPoint) -> list[dict]:
        from subgpu_jax.search.algorithm1 import Algorithm1Options, algorithm1

        d = search_step(pt.deploy)  # one step, or the middle step of a generation
        p = self.problem(d)
        if pt.D == 1:
            g1 = p.workload.graph(1)
            cfg = temporal_config(g1.n, self.hw, p.workload.batch)
            return [self._record(pt, cfg, self.temporal_makespan(d),
                                 {"exact_calls": 1, "cheap_evals": 0, "origin": "temporal"})]
        try:
            exact, confirm = self.search_scorers(d, pt.streams)
            opts = Algorithm1Options(L_sim=self.L_sim, include_temporal=False, cut=self.cut,
                                     allocate=self.alloc)
            if confirm is not None:  # a screened timer: its confirmation budget
                opts = dataclasses.replace(opts, confirm_top=self.timer.confirm_top)
            res = algorithm1(self.problem(d, pt.streams), [pt.D], [pt.microbatches],
                             [pt.policy], exact=exact, confirm=confirm, options=opts)
            return [self._record(pt, r.config(), r.makespan_us,
                                 {"exact_calls": r.exact_calls, "cheap_evals": r.cheap_evals,
                                  "origin": r.origin, "cheap_rank": r.cheap_rank,
                                  **({} if confirm is None else
                                     {"screen_region_us": r.screen_us,
                                      "confirm_calls": r.confirm_calls,
                                      "screen_rank": r.screen_rank})})
                    for r in res.records]
        finally:
            self.forget_point(pt)


@dataclass(frozen=True)
class ScorerSpec:
    """What a worker process needs to build a ``PointScorer`` (``app.pool.run_sweep_pool``'s
    ``make_scorer``): picklable, so it travels to ``spawn``-ed processes. The timer travels by
    its registry name and is made in the worker (it holds that process's caches).

    Attributes:
        arch: the model. setup: the GPU (a ``GpuSetup``, calibrated or not; a ``Hardware`` is
            taken uncalibrated). timer: a name of ``score.timer.TIMERS``. cache: the L2 policy
            (None: the setup's). L_sim, cut_strategy, cheap, alloc_strategy: as ``PointScorer``.
        compiled: False when the sweep's timer runs without its compiled engine
            (``Timer.without_engine``: a small sweep's choice, ``app.searchrun``); the worker's
            timer then does too.
    """

    arch: ModelArch
    setup: GpuSetup | Hardware
    timer: str = DEFAULT_TIMER
    cache: str | None = None
    L_sim: int = DEFAULT_L_SIM
    cut_strategy: object = DEFAULT_CUT_STRATEGY
    cheap: object = DEFAULT_CHEAP
    alloc_strategy: object = DEFAULT_ALLOC_STRATEGY
    compiled: bool = True

    @classmethod
    def like(cls, scorer: "PointScorer") -> "ScorerSpec":
        """The spec of a scorer already made (its timer by name, its resolved strategies).

        Raises:
            ValueError: the scorer's timer is not the one its name makes for its setup (another
                contention model, L2 policy, mode or contention setting: a worker would time
                with other physics than this process, so the records would depend on
                ``workers``)."""
        spec = cls(scorer.arch, scorer.setup, scorer.timer.name, scorer.cache, scorer.L_sim,
                   scorer.cut, scorer.cheap, scorer.alloc, scorer.timer.compiled)
        t, made = scorer.timer, timer_for(scorer.setup, scorer.timer.name, scorer.cache)
        # confirm_top: a screened timer's budget (None elsewhere: Timer's optional capabilities)
        same = all(getattr(t, f) == getattr(made, f)
                   for f in ("model", "cache", "mode", "contention", "hw", "confirm_top"))
        if not same:
            raise ValueError(f"workers: the exact scorer {t.name!r} was made with other settings "
                             "than its registry name gives (contention model, L2 policy, mode, "
                             "confirmation budget); worker processes rebuild it by name: use "
                             "workers=1")
        return spec

    def __call__(self) -> "PointScorer":
        """A new ``PointScorer`` (raises as ``timer_for`` and ``PointScorer``)."""
        setup = self.setup if isinstance(self.setup, GpuSetup) else \
            GpuSetup.uncalibrated(self.setup)
        timer = timer_for(setup, self.timer, self.cache)
        if not self.compiled:
            timer = timer.without_engine()
        return PointScorer(self.arch, setup, timer, self.cache, self.L_sim,
                           cut_strategy=self.cut_strategy, cheap=self.cheap,
                           alloc_strategy=self.alloc_strategy)
