"""Algorithm 1 (docs/method.md §4): simulation-guided search over a grid of (m, D, policy),
its records and their Pareto front."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from subgpu_jax.model.accounting import throughputs
from subgpu_jax.model.checks import pos_int
from subgpu_jax.search.cuts import (CUT_STRATEGIES, RankedCut, rank_cuts, refine_cut,
                                     screen_cuts)
from subgpu_jax.search.pairwise import allocate_pairwise
from subgpu_jax.search.pareto import pareto_front
from subgpu_jax.search.problem import memoised, MemoScorer, Problem
from subgpu_jax.space.config import check_dispatch_policy, Config, temporal_config

__all__ = ["Record", "SearchResult", "pareto_records", "algorithm1"]


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


def _distinct(cands: Sequence[RankedCut]) -> list[RankedCut]:
    """The first entry of each distinct layout (seg_of, w), order kept."""
    out, seen = [], set()
    for rc in cands:
        if (rc.cand.seg_of, rc.cand.w) not in seen:
            seen.add((rc.cand.seg_of, rc.cand.w))
            out.append(rc)
    return out


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
    rest = [(memo(problem.config(rc.cand.seg_of, D, rc.cand.w, rc.alloc, m, policy)), i)
            for i, rc in enumerate(cands[:k])]
    order = []
    while rest:
        vmin = min(v for v, _ in rest)
        pick = min((t for t in rest if t[0] <= vmin * (1 + rtol)), key=lambda t: t[1])
        order.append(pick[1])
        rest.remove(pick)
    return [(i, cands[i]) for i in order + list(range(k, len(cands)))]


def algorithm1(problem: Problem, D_values: Sequence[int], microbatch_counts: Sequence[int],
               policies: Sequence[str] = ("wavefront",), *,
               exact: Callable[[Config], float], exact_top: int = 3, L_est: int | None = None,
               L_sim: int | None = 2, rotation_refine: int = 3, include_temporal: bool = True,
               cut_local_search: bool = False, ls_starts: int = 3, ls_top: int = 8,
               progress: Callable[[str], None] | None = None, cut_strategy: str | None = None,
               screen_max_cuts: int = 20_000, screen_top: int = 8, screen_polish: int = 1,
               screen_keep_proposal: bool = True,
               allocate: Callable | None = None) -> SearchResult:
    """Algorithm 1 (simulation-guided search) over the grid x = (m, D, policy) of one workload.

    Per grid point: instantiate the graph (skip infeasible points: m not dividing the batch,
    D larger than the region, an empty allocation space); kernel features; partition proposal
    by DP and ranking of its circular rotations with the cheap estimator (``rank_cuts``); the
    ``exact_top`` best layouts of that cheap ranking are scored by the exact scorer at their
    cheap-refined allocations (one call each) and the best by the exact scorer is kept (the
    method ranks the layouts by the estimator alone; this exact check is a budgeted guard
    against the estimator's ranking errors; ``exact_top=1`` is the estimator-only choice); seeds
    (uniform, service-proportional); cheap pairwise-line refinement and exact polish
    (``allocate_pairwise``); record (x, c, w, p*, f(p*)). Exact calls are memoised across the
    whole grid. The Pareto-nondominated records are returned with all records.

    Args:
        problem: workload and GPU.
        D_values: stage counts (each >= 2); microbatch_counts: m values.
        policies: dispatch-order policies (``space.DISPATCH_POLICIES``).
        exact: the exact scorer f, ``Config -> makespan µs`` (required, keyword-only; e.g.
            ``EventSimExact(problem)``, the event simulator, or ``EvaluatorExact(problem)``,
            the cheap estimator's own model), memoised with ``MemoScorer`` unless it is one.
        exact_top: layouts of the cheap ranking scored by the exact scorer before the choice
            (>= 1; each costs one exact call, memoised); values within 1e-6 relative count as
            ties, broken by the cheap ranking. ``Record.cheap_rank`` says where the chosen
            layout stood in the cheap ranking.
        L_est, L_sim: pass limits of the cheap refinement and of each exact polish.
        rotation_refine: rotations refined by the cheap estimator when ranking cuts.
        include_temporal: add the temporal baseline (D = 1, m = 1) as a record.
        cut_local_search: extension beyond Algorithm 1 (docs/method.md §4): after ranking the proposal,
            improve the cut by ``refine_cut`` (cheap-estimator local search over single-kernel
            moves and boundary-reuse toggles) started from the ``ls_starts`` best ranked
            layouts. Off by default (the faithful algorithm).
        ls_starts, ls_top: local-search starts, and neighbours refined per iteration.
        progress: optional callback receiving one line per grid point.
        cut_strategy: how the cut is chosen (``CUT_STRATEGIES``); None means ``"local_search"``
            when ``cut_local_search`` else ``"proposal"`` (backwards compatible).

            * ``"proposal"``: Algorithm 1 of docs/method.md §4 (the best of ``rank_cuts``);
            * ``"local_search"``: the same plus ``refine_cut`` from the ``ls_starts`` best
              ranked layouts (extension, = ``cut_local_search=True``);
            * ``"screen"``: extension: when the legal layouts (w = 0 and w = 1) number at most
              ``screen_max_cuts``, ``screen_cuts`` scores every one at three seeds with the
              cheap estimator in batched calls, prunes them by successive halving with
              line-move descent steps and refines the ``screen_top`` survivors by cheap
              pairwise-line search; these join the ranked proposal, and the ``screen_polish``
              best distinct layouts of that merged cheap ranking, plus (``screen_keep_proposal``)
              the proposal's own choice (so the result is never worse than ``"proposal"`` at
              the same grid point with a deterministic scorer), go through the
              seeds/refine/exact-polish of ``allocate_pairwise``; the best exact makespan is
              kept. The merged ranking's ``exact_top`` best are exact-scored first, as for
              the proposal. Larger cut spaces fall back to ``"local_search"``. The
              exact-scorer cost is at most ``screen_polish`` (+ 1) allocation searches and
              2 ``exact_top`` single calls per grid point.
        screen_max_cuts: screening budget (legal layouts per grid point).
        screen_top: screened layouts refined with the cheap estimator.
        screen_polish: best layouts of the merged ranking polished with the exact scorer.
        screen_keep_proposal: also polish the proposal's choice (the never-worse guarantee,
            at the price of one more exact allocation search when it is not already polished).
        allocate: allocation strategy with the signature of ``allocate_pairwise`` (positional:
            problem, seg_of, D, w, m, policy, exact, L_est, L_sim) returning an ``AllocResult``;
            None = ``allocate_pairwise`` (Algorithm 2).

    Returns:
        ``SearchResult``.

    Raises:
        ValueError: ``exact`` missing or not callable, ``exact_top`` < 1, an unknown policy, a
            D < 2 in ``D_values``, an unknown ``cut_strategy``
            (or one contradicting ``cut_local_search=True``), a nonpositive screening
            parameter, or no feasible grid point (the message gives each point's reason).
    """
    if cut_strategy is None:
        cut_strategy = "local_search" if cut_local_search else "proposal"
    if cut_strategy not in CUT_STRATEGIES:
        raise ValueError(f"cut_strategy must be one of {', '.join(CUT_STRATEGIES)}, got "
                         f"{cut_strategy!r}")
    if cut_local_search and cut_strategy != "local_search":
        raise ValueError(f"cut_local_search=True contradicts cut_strategy={cut_strategy!r}")
    pos_int(screen_max_cuts, "screen_max_cuts")
    pos_int(screen_top, "screen_top")
    pos_int(screen_polish, "screen_polish")
    exact_top = pos_int(exact_top, "exact_top")
    for pol in policies:
        check_dispatch_policy(pol)
    for D in D_values:
        pos_int(D, "D", 2)
    memo = memoised(exact)
    wl = problem.workload
    records, skipped = [], []
    if include_temporal:
        try:
            g1 = wl.graph(1)
            cfg = temporal_config(g1.n, problem.hw, wl.batch)
            c0 = memo.calls
            t = memo(cfg)
            pu, pg = throughputs(t, wl.tokens_per_gpu)
            records.append(Record(1, 1, "wavefront", wl.batch, cfg.seg_of, 0, "temporal",
                                  cfg.alloc, t, float(pu), float(pg), memo.calls - c0, 0, 0.0))
        except ValueError as e:
            skipped.append(((1, 1, "wavefront"), str(e)))
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
                c0 = memo.calls
                ranked, prop, cheap = rank_cuts(problem, D, m, pol, rotation_refine)
                cands, n_polish = ranked, 1
                screened = None
                if cut_strategy == "screen":
                    screened = screen_cuts(problem, D, m, pol, screen_max_cuts, screen_top,
                                           prop)
                if screened is not None:
                    sranked, more = screened
                    cheap += more
                    cands = _distinct(sorted(ranked + sranked, key=lambda t: t.value))
                    n_polish = screen_polish
                elif cut_strategy != "proposal":  # local search, or screening over budget
                    found = []
                    for rc in ranked[: max(1, ls_starts)]:
                        r2, more = refine_cut(problem, rc.cand, D, m, pol, top=ls_top)
                        cheap += more
                        found.append(r2)
                    cands = _distinct(sorted(found, key=lambda t: t.value))
                polish = _exact_order(memo, problem, D, m, pol, cands, exact_top)[:n_polish]
                if screened is not None and screen_keep_proposal:
                    # the choice of cut_strategy="proposal" (never-worse guarantee)
                    pc = _exact_order(memo, problem, D, m, pol, ranked, exact_top)[0][1]
                    keys = [(rc.cand.seg_of, rc.cand.w) for rc in cands]
                    if all((rc.cand.seg_of, rc.cand.w) != (pc.cand.seg_of, pc.cand.w)
                           for _, rc in polish):
                        polish.append((keys.index((pc.cand.seg_of, pc.cand.w)), pc))
                res = None
                for rank, rc in polish:
                    if allocate is None:
                        r = allocate_pairwise(problem, rc.cand.seg_of, D, rc.cand.w, m, pol,
                                              exact=memo, L_est=L_est, L_sim=L_sim)
                    else:
                        r = allocate(problem, rc.cand.seg_of, D, rc.cand.w, m, pol, memo, L_est,
                                     L_sim)
                    cheap += r.cheap_evals
                    if res is None or r.makespan_us < res.makespan_us:
                        res, cand, cheap_rank = r, rc.cand, rank
                pu, pg = throughputs(res.makespan_us, wl.tokens_per_gpu)
                rec = Record(m=int(m), D=int(D), policy=pol, microbatch=wl.microbatch_size(m),
                             seg_of=cand.seg_of, w=cand.w, origin=cand.origin,
                             alloc=tuple(int(a) for a in res.alloc),
                             makespan_us=res.makespan_us, per_user=float(pu), per_gpu=float(pg),
                             exact_calls=memo.calls - c0, cheap_evals=cheap,
                             seconds=time.perf_counter() - t0,
                             streams_per_stage=problem.streams_per_stage,
                             cheap_rank=int(cheap_rank))
                records.append(rec)
                if progress:
                    progress(f"m={m} D={D} {pol}: w={rec.w} alloc={list(rec.alloc)} "
                             f"T={rec.makespan_us:.1f} µs exact_calls={rec.exact_calls} "
                             f"cheap_rank={rec.cheap_rank}")
    if not records:
        raise ValueError("algorithm1: no feasible grid point: " +
                         "; ".join(f"{x}: {r}" for x, r in skipped))
    return SearchResult(records=tuple(records), front=pareto_records(records),
                        skipped=tuple(skipped), exact_calls=memo.calls, exact_top=exact_top)
