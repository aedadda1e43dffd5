"""Algorithm 1 (docs/method.md §4): simulation-guided search over a grid of (m, D, policy),
its records and their Pareto front."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from subgpu_jax.model.accounting import throughputs
from subgpu_jax.model.checks import pos_int
from subgpu_jax.score.timer import ScreenedTimer
from subgpu_jax.search.cuts import RankedCut, rank_cuts
from subgpu_jax.search.pairwise import improves, pairwise_line
from subgpu_jax.search.pareto import pareto_front
from subgpu_jax.search.problem import memoised, MemoScorer, Problem
from subgpu_jax.search.strategies import (ALLOC_STRATEGIES, AllocationStrategy, by_name,
                                          CUT_STRATEGY_REGISTRY, CutStrategy, PairwiseAllocation,
                                          ProposalCut)
from subgpu_jax.space.config import DEFAULT_POLICY, check_dispatch_policy, Config, temporal_config

__all__ = ["Record", "SearchResult", "pareto_records", "Algorithm1Options", "algorithm1"]


@dataclass(frozen=True)
class Record:
    """One record (x, c, w, p*, f(p*)) of Algorithm 1.

    Attributes:
        m: microbatches; D: stages; policy: dispatch order (with the workload, the grid point x).
        microbatch: b = R / m requests.
        seg_of, w: the chosen cut and boundary reuse; origin: how the cut was proposed.
        alloc: p*, SMs per stage (tuple of ints).
        makespan_us: f(p*), the exact makespan (µs).
        per_user, per_gpu: throughputs (tokens/s/user, tokens/s/GPU).
        exact_calls: distinct exact-scorer calls at this grid point.
        cheap_evals: allocations scored by the cheap estimator at this grid point.
        seconds: wall time of the grid point.
        streams_per_stage: k streams per stage (the problem's).
        cheap_rank: rank of the chosen layout in the cheap estimator's ranking of the grid
            point (0 = the estimator's own choice; > 0 when scoring the top layouts with the
            exact scorer changed the choice, see ``algorithm1``'s ``exact_top``).
        screen_us: with a confirming scorer (``algorithm1``'s ``confirm``), the exact
            (screening) scorer's makespan of the chosen configuration (µs; ``makespan_us`` is
            the confirming scorer's); None without one.
        confirm_calls: distinct confirming-scorer calls at this grid point: the layout
            ranking's, the confirmation's and its polish's (0 without one; where the two
            scorers are one memo, the screen's calls too).
        screen_rank: the index, in the confirmation's candidates, of the one it kept before
            its polish: 0 to ``confirm_top`` - 1 the screen's best first, then the layout
            ranking's configurations in scoring order (0 without a confirming scorer).
    """

    m: int
    D: int
    policy: str
    microbatch: int
    seg_of: tuple[int, ...]
    w: int
    origin: str
    alloc: tuple[int, ...]
    makespan_us: float
    per_user: float
    per_gpu: float
    exact_calls: int
    cheap_evals: int
    seconds: float
    streams_per_stage: int = 1
    cheap_rank: int = 0
    screen_us: float | None = None
    confirm_calls: int = 0
    screen_rank: int = 0

    def config(self) -> Config:
        """The record's ``Config``."""
        return Config(D=self.D, w=self.w, seg_of=self.seg_of, alloc=self.alloc,
                      microbatch=self.microbatch, policy=self.policy,
                      streams_per_stage=self.streams_per_stage)

    def as_dict(self) -> dict:
        """JSON-friendly dict."""
        d = dataclasses.asdict(self)
        d["seg_of"], d["alloc"] = list(self.seg_of), list(self.alloc)
        return d


@dataclass(frozen=True)
class SearchResult:
    """Output of ``algorithm1``.

    Attributes:
        records: one per feasible grid point (plus the temporal baseline when asked).
        front: the Pareto-nondominated records (per-user vs per-GPU throughput), per-GPU
            ascending.
        skipped: ((m, D, policy), reason) of infeasible grid points.
        exact_calls: distinct exact-scorer calls in total.
        exact_top: the exact-ranking budget used (layouts scored by the exact scorer per grid
            point before the polish, see ``algorithm1``).
    """

    records: tuple[Record, ...]
    front: tuple[Record, ...]
    skipped: tuple[tuple[tuple[int, int, str], str], ...]
    exact_calls: int
    exact_top: int = 1

    def best(self) -> Record:
        """The record of least makespan."""
        return min(self.records, key=lambda r: r.makespan_us)


def pareto_records(records: Sequence[Record]) -> tuple[Record, ...]:
    """The Pareto-nondominated records (max per-user and per-GPU throughput), per-GPU
    ascending."""
    if not records:
        return ()
    pts = np.array([[r.per_user, r.per_gpu] for r in records])
    return tuple(records[i] for i in pareto_front(pts))


def _exact_order(memo: MemoScorer, problem: Problem, D: int, m: int, policy: str,
                 cands: Sequence[RankedCut], top: int, rtol: float = 1e-6
                 ) -> list[tuple[int, RankedCut]]:
    """Layouts in the order Algorithm 1 polishes them: the first ``top`` of the cheap ranking
    ``cands`` are scored by the exact scorer ``memo`` at their cheap-refined allocations (one
    call each) and come first, least exact makespan first (values within ``rtol`` relative of
    the least are ties, broken by cheap rank); the rest follow in cheap order.

    Returns:
        [(cheap rank, RankedCut)], a permutation of ``enumerate(cands)``.
    """
    k = min(top, len(cands))
    vals = memo.many([problem.config(rc.cand.seg_of, D, rc.cand.w, rc.alloc, m, policy)
                      for rc in cands[:k]])     # one call (a batched timer: one batch)
    rest = [(v, i) for i, v in enumerate(vals)]
    order = []
    while rest:
        vmin = min(v for v, _ in rest)
        pick = min((t for t in rest if t[0] <= vmin * (1 + rtol)), key=lambda t: t[1])
        order.append(pick[1])
        rest.remove(pick)
    return [(i, cands[i]) for i in order + list(range(k, len(cands)))]


def _confirm(memo: MemoScorer, cmemo: MemoScorer, scored: Sequence[tuple[Config, float]],
             confirmed: Sequence[Config], layouts: dict, top: int, rtol: float = 1e-6
             ) -> tuple[Config, float, float, int]:
    """The confirmation of one grid point (``algorithm1``'s ``confirm``): of the configurations
    ``scored`` there by the screen ``memo`` ((Config, makespan µs) in scoring order) whose
    layout (cut, reuse) is in ``layouts``, the ``top`` best by the screen (ties by scoring
    order) are re-scored by ``cmemo``, beside those it already ``confirmed`` at that point
    (the layout ranking's); the best by ``cmemo`` wins (values within ``rtol`` relative are
    ties, broken by the screen's order, then the confirmed ones' order).

    Returns:
        ``(config, confirmed makespan µs, screen makespan µs, screen rank)``; the screen rank
        counts the screen's order of the candidates (those confirmed before come after the
        ``top``).
    """
    cands = [c for _, _, c in sorted(((v, i, c) for i, (c, v) in enumerate(scored)
                                      if (c.seg_of, c.w) in layouts),
                                     key=lambda t: (t[0], t[1]))[:top]]
    cands += [c for c in confirmed if (c.seg_of, c.w) in layouts and c not in cands]
    if not cands:
        raise ValueError("confirm: the grid point scored no configuration of its polished "
                         "layouts (an allocation strategy that calls no exact scorer?)")
    vals = cmemo.many(cands)
    vmin = min(vals)
    j = next(j for j, v in enumerate(vals) if v <= vmin * (1 + rtol))
    return cands[j], float(vals[j]), float(memo(cands[j])), j


@dataclass(frozen=True)
class Algorithm1Options:
    """The options of ``algorithm1``.

    Attributes:
        exact_top: layouts of the cheap ranking scored by the exact scorer before the choice
            (>= 1; each costs one exact call, memoised); values within 1e-6 relative count as
            ties, broken by the cheap ranking. ``Record.cheap_rank`` says where the chosen
            layout stood in the cheap ranking.
        L_est, L_sim: pass limits of the cheap refinement and of each exact polish.
        confirm_top: with a confirming scorer (``algorithm1``'s ``confirm``), the number of
            configurations of a grid point it re-scores (>= 1): the best distinct ones by the
            exact (screening) scorer among all it scored at that point.
        confirm_passes: pass limit of the confirming scorer's polish of the confirmed best
            (Algorithm 2 from it, every move scored by ``confirm``; 0: none).
        rotation_refine: rotations refined by the cheap estimator when ranking cuts.
        include_temporal: add the temporal baseline (D = 1, m = 1) as a record.
        cut: the cut strategy, a ``search.strategies.CutStrategy`` or its name in
            ``CUT_STRATEGY_REGISTRY`` (default ``ProposalCut()``, the faithful algorithm;
            ``LocalSearchCut`` and ``ScreenCut`` are extensions, their docstrings say how).
        allocate: the allocation strategy, a ``search.strategies.AllocationStrategy`` or its
            name in ``ALLOC_STRATEGIES`` (default ``PairwiseAllocation()``, Algorithm 2).

    Raises:
        ValueError: ``exact_top`` or ``confirm_top`` < 1, an unknown strategy name (one line).
    """

    exact_top: int = 3
    confirm_top: int = ScreenedTimer.CONFIRM_TOP
    confirm_passes: int = 2
    L_est: int | None = None
    L_sim: int | None = 2
    rotation_refine: int = 3
    include_temporal: bool = True
    cut: CutStrategy = field(default_factory=ProposalCut)
    allocate: AllocationStrategy = field(default_factory=PairwiseAllocation)

    def __post_init__(self) -> None:
        object.__setattr__(self, "exact_top", pos_int(self.exact_top, "exact_top"))
        object.__setattr__(self, "confirm_top", pos_int(self.confirm_top, "confirm_top"))
        object.__setattr__(self, "confirm_passes",
                           pos_int(self.confirm_passes, "confirm_passes", 0))
        object.__setattr__(self, "cut", by_name(CUT_STRATEGY_REGISTRY, self.cut,
                                                "cut_strategy"))
        object.__setattr__(self, "allocate", by_name(ALLOC_STRATEGIES, self.allocate,
                                                     "alloc_strategy"))


def _grid_point(problem: Problem, D: int, m: int, pol: str, memo: MemoScorer,
                cmemo: MemoScorer | None, o: "Algorithm1Options", t0: float) -> Record:
    """One feasible grid point (m, D, policy) of ``algorithm1`` (its docstring): the cut
    ranking, the exact ordering of the layouts, their allocation searches and, with a
    confirming scorer ``cmemo``, the confirmation; ``t0`` is the point's start
    (``time.perf_counter``). Returns its ``Record``."""
    wl = problem.workload
    c0 = memo.calls
    seen = memo.watch() if cmemo is not None else None   # what the screen scores here
    ranked, prop, cheap = rank_cuts(problem, D, m, pol, o.rotation_refine)
    cands, n_polish, more, keep_proposal = o.cut.choose(problem, D, m, pol, ranked, prop)
    cheap += more
    # the layouts are ranked by the confirming scorer when there is one
    lmemo = memo if cmemo is None else cmemo
    k0 = 0 if cmemo is None else cmemo.calls
    # ... and what the confirming scorer scores here (one log when both are one memo)
    confirmed = None if cmemo is None else seen if cmemo is memo else cmemo.watch()
    polish = _exact_order(lmemo, problem, D, m, pol, cands, o.exact_top)[:n_polish]
    if keep_proposal:
        # the choice of the proposal strategy (never-worse guarantee)
        pc = _exact_order(lmemo, problem, D, m, pol, ranked, o.exact_top)[0][1]
        keys = [(rc.cand.seg_of, rc.cand.w) for rc in cands]
        if all((rc.cand.seg_of, rc.cand.w) != (pc.cand.seg_of, pc.cand.w)
               for _, rc in polish):
            polish.append((keys.index((pc.cand.seg_of, pc.cand.w)), pc))
    res = None
    for rank, rc in polish:
        r = o.allocate(problem, rc.cand.seg_of, D, rc.cand.w, m, pol, memo, o.L_est, o.L_sim)
        cheap += r.cheap_evals
        if res is None or improves(r.makespan_us, res.makespan_us):   # ties: first kept
            res, cand, cheap_rank = r, rc.cand, rank
    alloc, makespan, conf = tuple(int(a) for a in res.alloc), res.makespan_us, {}
    if cmemo is not None:
        layouts = {(rc.cand.seg_of, rc.cand.w): (rank, rc.cand) for rank, rc in polish}
        # (the logs are read here; algorithm1 closes them when the point ends)
        cfg, makespan, screen_us, srank = _confirm(
            memo, cmemo, [(c, memo.cache[c]) for c in seen], list(confirmed), layouts,
            o.confirm_top)
        cheap_rank, cand = layouts[(cfg.seg_of, cfg.w)]
        alloc = cfg.alloc
        if o.confirm_passes:
            f_c = problem.exact_batch(cmemo, cfg.seg_of, D, cfg.w, m, pol)
            fin = pairwise_line(f_c, alloc, problem.space(D), o.confirm_passes)
            if fin.value < makespan:
                alloc, makespan = tuple(int(a) for a in fin.alloc), fin.value
                screen_us = memo(problem.config(cfg.seg_of, D, cfg.w, alloc, m, pol))
        conf = {"screen_us": screen_us, "confirm_calls": cmemo.calls - k0,
                "screen_rank": srank}
    pu, pg = throughputs(makespan, wl.tokens_per_gpu)
    return Record(m=int(m), D=int(D), policy=pol, microbatch=wl.microbatch_size(m),
                  seg_of=cand.seg_of, w=cand.w, origin=cand.origin, alloc=alloc,
                  makespan_us=makespan, per_user=float(pu), per_gpu=float(pg),
                  exact_calls=memo.calls - c0, cheap_evals=cheap,
                  seconds=time.perf_counter() - t0, streams_per_stage=problem.streams_per_stage,
                  cheap_rank=int(cheap_rank), **conf)


def algorithm1(problem: Problem, D_values: Sequence[int], microbatch_counts: Sequence[int],
               policies: Sequence[str] = (DEFAULT_POLICY,), *,
               exact: Callable[[Config], float],
               confirm: Callable[[Config], float] | None = None,
               options: Algorithm1Options | None = None,
               progress: Callable[[str], None] | None = None) -> SearchResult:
    """Algorithm 1 (simulation-guided search) over the grid x = (m, D, policy) of one workload.

    Per grid point: instantiate the graph (skip infeasible points: m not dividing the batch,
    D larger than the region, an empty allocation space); kernel features; partition proposal
    by DP and ranking of its circular rotations with the cheap estimator (``rank_cuts``); the
    cut strategy's candidate layouts (``options.cut``: the ranked proposal itself by default);
    the ``exact_top`` best layouts of that cheap ranking are scored by the exact scorer at their
    cheap-refined allocations (one call each) and the best by the exact scorer is kept (the
    method ranks the layouts by the estimator alone; this exact check is a budgeted guard
    against the estimator's ranking errors; ``exact_top=1`` is the estimator-only choice); the
    allocation strategy (``options.allocate``; by default seeds, cheap pairwise-line refinement
    and exact polish, ``allocate_pairwise``); record (x, c, w, p*, f(p*)). Exact calls are
    memoised across the whole grid. The Pareto-nondominated records are returned with all
    records.

    With a confirming scorer ``confirm`` (the event simulator behind a batched screening
    ``exact``, ``score.timer.ScreenedTimer``), each grid point ends with a confirmation: the
    ``options.confirm_top`` best distinct configurations by ``exact`` among all it scored at
    that point in the polished layouts (polish moves and line points) are re-scored by
    ``confirm``, and the record is the best of them by ``confirm`` (values within 1e-6
    relative are ties, broken by the screen's order), polished by ``confirm`` for ``options.confirm_passes`` passes of
    Algorithm 2; its ``makespan_us`` is ``confirm``'s, ``screen_us`` the screen's. The layouts
    (``exact_top``) are then ranked by ``confirm`` too, and its values of them join the
    confirmation.

    Args:
        problem: workload and GPU.
        D_values: stage counts (each >= 2); microbatch_counts: m values.
        policies: dispatch-order policies (``space.DISPATCH_POLICIES``).
        exact: the exact scorer f, ``Config -> makespan µs`` (required, keyword-only; e.g.
            ``TimerExact(problem, EventTimer(problem.hw))``, the event simulator, or
            ``TimerExact(problem, EstimatorTimer(problem))``, the cheap estimator's own
            model), memoised with ``MemoScorer`` unless it is one.
        confirm: the confirming scorer, ``Config -> makespan µs`` (None: no confirmation),
            memoised likewise.
        options: ``Algorithm1Options`` (None: the defaults, the faithful algorithm).
        progress: optional callback receiving one line per grid point.

    Returns:
        ``SearchResult``.

    Raises:
        ValueError: ``exact`` missing or not callable, an unknown policy, a D < 2 in
            ``D_values``, or no feasible grid point (the message gives each point's reason).
    """
    o = Algorithm1Options() if options is None else options
    for pol in policies:
        check_dispatch_policy(pol)
    for D in D_values:
        pos_int(D, "D", 2)
    memo = memoised(exact)
    cmemo = None if confirm is None else memoised(confirm)
    wl = problem.workload
    records, skipped = [], []
    if o.include_temporal:
        try:
            g1 = wl.graph(1)
            cfg = temporal_config(g1.n, problem.hw, wl.batch)
            tm = memo if cmemo is None else cmemo   # the confirming scorer's, when there is one
            c0 = tm.calls
            t = tm(cfg)
            pu, pg = throughputs(t, wl.tokens_per_gpu)
            records.append(Record(1, 1, DEFAULT_POLICY, wl.batch, cfg.seg_of, 0, "temporal",
                                  cfg.alloc, t, float(pu), float(pg), tm.calls - c0, 0, 0.0))
        except ValueError as e:
            skipped.append(((1, 1, DEFAULT_POLICY), str(e)))
    for pol in policies:
        for m in microbatch_counts:
            for D in D_values:
                x = (int(m), int(D), pol)
                t0 = time.perf_counter()
                try:
                    g = wl.graph(m)
                    if D > g.n:
                        raise ValueError(f"D={D} exceeds the region's {g.n} kernels")
                    problem.space(D)
                except ValueError as e:
                    skipped.append((x, str(e)))
                    continue
                try:
                    rec = _grid_point(problem, D, m, pol, memo, cmemo, o, t0)
                finally:   # the point's request logs close even when it fails
                    for mm in (memo, cmemo):
                        if mm is not None:
                            mm.unwatch()
                records.append(rec)
                if progress:
                    progress(f"m={m} D={D} {pol}: w={rec.w} alloc={list(rec.alloc)} "
                             f"T={rec.makespan_us:.1f} µs exact_calls={rec.exact_calls} "
                             f"cheap_rank={rec.cheap_rank}")
    if not records:
        raise ValueError("algorithm1: no feasible grid point: " +
                         "; ".join(f"{x}: {r}" for x, r in skipped))
    return SearchResult(records=tuple(records), front=pareto_records(records),
                        skipped=tuple(skipped), exact_calls=memo.calls, exact_top=o.exact_top)
