"""The search's strategies as small frozen objects, one protocol and one registry per choice
(docs/method.md §4):

* cut strategies (``CutStrategy``): how Algorithm 1 chooses the cut of a grid point —
  ``ProposalCut`` (the method as published), ``LocalSearchCut`` and ``ScreenCut``
  (extensions); registry ``CUT_STRATEGY_REGISTRY``;
* allocation strategies (``AllocationStrategy``): the allocation search of one cut —
  ``PairwiseAllocation`` (Algorithm 2) and ``RelaxAllocation`` (the optax relaxation); registry
  ``ALLOC_STRATEGIES``;
* cheap estimators (``CheapEstimator``): factories of the ``Problem`` whose evaluators rank
  cuts and allocations — ``StaticCheap``, ``ContentionCheap`` and ``AutoCheap`` (chooses by the
  exact scorer); registry ``CHEAP_ESTIMATORS``.

The command line's ``choices=`` are the registries' keys (``app.args``,
``app.commands.search``); ``by_name`` turns a name (or a strategy object) into the object with
one-line errors. Every cut and allocation strategy is a ``StrategyMeta``: its ``options()``
are what ``--cut-options``/``--alloc-options`` set (``with_options``), its ``meta()`` (name and
options) what a sweep's ``summary.json`` records (``meta_of``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable, ClassVar, NamedTuple, Protocol, Sequence, TYPE_CHECKING

from subgpu_jax.model.checks import flag, pos_int

if TYPE_CHECKING:  # the search's modules load JAX: imported where used, so that the command
    # line reads the registries without it
    from subgpu_jax.search.cuts import RankedCut
    from subgpu_jax.search.features import Proposal
    from subgpu_jax.search.pairwise import AllocResult
    from subgpu_jax.search.problem import Problem
    from subgpu_jax.space.config import Config

__all__ = ["StrategyMeta", "CutChoice", "CutStrategy", "ProposalCut", "LocalSearchCut",
           "ScreenCut", "CUT_STRATEGY_REGISTRY", "CUT_STRATEGIES", "AllocationStrategy",
           "PairwiseAllocation", "RelaxAllocation", "ALLOC_STRATEGIES", "CheapEstimator",
           "StaticCheap", "ContentionCheap", "AutoCheap", "CHEAP_ESTIMATORS", "by_name",
           "distinct_layouts", "meta_of", "strategy_options", "strategies_help", "with_options",
           "changed_options", "strategy_meta", "make_strategies", "DEFAULT_CUT_STRATEGY",
           "DEFAULT_ALLOC_STRATEGY", "DEFAULT_CHEAP"]


def distinct_layouts(cands: Sequence[RankedCut]) -> list[RankedCut]:
    """The first entry of each distinct layout (seg_of, w) of ``cands``, order kept."""
    out, seen = [], set()
    for rc in cands:
        if (rc.cand.seg_of, rc.cand.w) not in seen:
            seen.add((rc.cand.seg_of, rc.cand.w))
            out.append(rc)
    return out


def _field_options(strategy) -> dict:
    """The options of a dataclass strategy: its fields holding an int or a bool (not ``name``,
    not nested strategies such as ``ScreenCut.fallback``), with their current values; {} for
    anything else (``strategy_options``)."""
    if not dataclasses.is_dataclass(strategy):
        return {}
    return {f.name: getattr(strategy, f.name) for f in dataclasses.fields(strategy)
            if f.name != "name" and isinstance(getattr(strategy, f.name), (bool, int))}


class StrategyMeta:
    """What a cut or allocation strategy (a frozen dataclass) tells the store and the command
    line about itself, written once for all of them: ``options()``, the options it takes from
    ``--cut-options``/``--alloc-options`` (its int and bool fields, with their values), and
    ``meta()``, its name and those options (what ``summary.json`` records)."""

    def options(self) -> dict:
        """``{option: value}``: the int and bool fields of this strategy (not ``name``, not a
        nested strategy such as ``ScreenCut.fallback``), in field order."""
        return _field_options(self)

    def meta(self) -> dict:
        """``{"name": name, "options": options()}``: how a sweep's ``summary.json`` records
        this strategy (``app.searchout``)."""
        return {"name": self.name, "options": self.options()}


class CutChoice(NamedTuple):
    """What a cut strategy hands Algorithm 1 at one grid point.

    Attributes:
        cands: the layouts in cheap-ranking order (``RankedCut``).
        n_polish: how many of them (after the exact-top check) go through the allocation search.
        cheap_evals: allocations the strategy scored with the cheap estimator.
        keep_proposal: also polish the proposal's own choice (``ScreenCut``'s guarantee).
    """

    cands: list
    n_polish: int
    cheap_evals: int
    keep_proposal: bool = False


class CutStrategy(Protocol):
    """How Algorithm 1 chooses the cut at a grid point, after ``rank_cuts`` (the registry's
    are also ``StrategyMeta``: ``options()``, ``meta()``)."""

    name: str

    def choose(self, problem: Problem, D: int, m: int, policy: str,
               ranked: list[RankedCut], proposal: Proposal) -> CutChoice:
        """The candidate layouts of one grid point (``ranked``, ``proposal``: of ``rank_cuts``)."""
        ...


@dataclass(frozen=True)
class ProposalCut(StrategyMeta):
    """Cut strategy ``proposal``: Algorithm 1 of docs/method.md §4 (the best of ``rank_cuts``)."""

    #: one line for the command-line help (``app.args.add_strategy_args``)
    summary: ClassVar[str] = ("the method as published, docs/method.md §4: dynamic-programming "
                              "feature partition + rotations")
    name: str = "proposal"

    def choose(self, problem, D, m, policy, ranked, proposal) -> CutChoice:
        """The ranked proposal itself (arguments as ``CutStrategy.choose``)."""
        return CutChoice(ranked, 1, 0)


@dataclass(frozen=True)
class LocalSearchCut(StrategyMeta):
    """Cut strategy ``local_search`` (extension): the ranked proposal, then ``refine_cut``
    (cheap-estimator local search over single-kernel moves and boundary-reuse toggles) from the
    ``starts`` best ranked layouts, refining ``top`` neighbours per iteration."""

    #: one line for the command-line help (``app.args.add_strategy_args``)
    summary: ClassVar[str] = ("proposal, then a cheap-estimator local search over single-kernel "
                              "moves and boundary-reuse toggles")
    name: str = "local_search"
    starts: int = 3
    top: int = 8

    def __post_init__(self) -> None:
        pos_int(self.starts, "local_search starts")
        pos_int(self.top, "local_search top")

    def choose(self, problem, D, m, policy, ranked, proposal) -> CutChoice:
        """The distinct local optima, cheap-ranked (arguments as ``CutStrategy.choose``)."""
        from subgpu_jax.search.cuts import refine_cut

        found, cheap = [], 0
        for rc in ranked[: max(1, self.starts)]:
            r2, more = refine_cut(problem, rc.cand, D, m, policy, top=self.top)
            cheap += more
            found.append(r2)
        return CutChoice(distinct_layouts(sorted(found, key=lambda t: t.value)), 1, cheap)


@dataclass(frozen=True)
class ScreenCut(StrategyMeta):
    """Cut strategy ``screen`` (extension): when the legal layouts (w = 0 and w = 1) number at
    most ``max_cuts``, ``screen_cuts`` scores every one at three seeds with the cheap estimator,
    prunes them by successive halving with line-move descent steps and refines the ``top``
    survivors by cheap pairwise-line search; these join the ranked proposal, and the
    ``polish`` best distinct layouts of that merged cheap ranking, plus (``keep_proposal``) the
    proposal's own choice (so the result is never worse than ``proposal`` at the same grid
    point with a deterministic scorer), go through the allocation search. Larger cut spaces
    fall back to ``fallback`` (local search).

    Raises:
        ValueError: a nonpositive ``max_cuts``, ``top`` or ``polish``.
    """

    #: one line for the command-line help (``app.args.add_strategy_args``)
    summary: ClassVar[str] = ("every legal cut scored by the cheap estimator when there are at "
                              "most max_cuts, else local_search; within 1% of the simulator's "
                              "optimum on 40/40 instances of "
                              "experiments/results/heuristic_gap.json")
    name: str = "screen"
    max_cuts: int = 20_000
    top: int = 8
    polish: int = 1
    keep_proposal: bool = True
    fallback: LocalSearchCut = field(default_factory=LocalSearchCut)

    def __post_init__(self) -> None:
        pos_int(self.max_cuts, "screen_max_cuts")
        pos_int(self.top, "screen_top")
        pos_int(self.polish, "screen_polish")

    def choose(self, problem, D, m, policy, ranked, proposal) -> CutChoice:
        """The merged cheap ranking, or the fallback's (arguments as ``CutStrategy.choose``)."""
        from subgpu_jax.search.cuts import screen_cuts

        screened = screen_cuts(problem, D, m, policy, self.max_cuts, self.top, proposal)
        if screened is None:
            return self.fallback.choose(problem, D, m, policy, ranked, proposal)
        sranked, more = screened
        cands = distinct_layouts(sorted(ranked + sranked, key=lambda t: t.value))
        return CutChoice(cands, self.polish, more, self.keep_proposal)


#: Cut strategies by name (``subgpu search --cut-strategy``).
CUT_STRATEGY_REGISTRY: dict[str, CutStrategy] = {
    s.name: s for s in (ProposalCut(), LocalSearchCut(), ScreenCut())}
#: The cut strategies' names.
CUT_STRATEGIES: tuple[str, ...] = tuple(CUT_STRATEGY_REGISTRY)
#: The default cut strategy (every default of ``--cut-strategy`` and of the search's options).
DEFAULT_CUT_STRATEGY: str = ProposalCut.name


class AllocationStrategy(Protocol):
    """The allocation search of one structure, returning an ``AllocResult`` (the registry's
    are also ``StrategyMeta``: ``options()``, ``meta()``)."""

    name: str

    def __call__(self, problem: Problem, seg_of, D: int, w: int, m: int, policy: str,
                 exact: Callable[[Config], float], L_est: int | None,
                 L_sim: int | None) -> AllocResult:
        ...


@dataclass(frozen=True)
class PairwiseAllocation(StrategyMeta):
    """Allocation strategy ``pairwise``: steps 4-5 of Algorithm 1 in docs/method.md §4 (seeds,
    Algorithm 2's pairwise-line refinement with the cheap estimator, exact polish:
    ``search.pairwise.allocate_pairwise``)."""

    #: one line for the command-line help (``app.args.add_strategy_args``)
    summary: ClassVar[str] = ("Algorithm 1 steps 4-5: seeds, Algorithm 2's line search, cheap "
                              "estimator, exact polish")
    name: str = "pairwise"

    def __call__(self, problem, seg_of, D, w, m, policy, exact, L_est, L_sim):
        """``AllocResult`` of one structure (arguments as ``allocate_pairwise``)."""
        from subgpu_jax.search.pairwise import allocate_pairwise

        return allocate_pairwise(problem, seg_of, D, w, m, policy, exact=exact, L_est=L_est,
                                 L_sim=L_sim)


@dataclass(frozen=True)
class RelaxAllocation(StrategyMeta):
    """Allocation strategy ``relax``: the optax relaxation of the smooth makespan, rounding and
    exact polish (``search.relax.relax_and_polish``; our extension of docs/method.md §4).

    Attributes:
        restarts: annealing restarts (>= 1); steps: optimiser steps per restart (>= 1).
    """

    #: one line for the command-line help (``app.args.add_strategy_args``)
    summary: ClassVar[str] = ("optax relaxation of the smooth makespan, rounding, exact polish")
    name: str = "relax"
    restarts: int = 8
    steps: int = 150

    def __post_init__(self) -> None:
        pos_int(self.restarts, "relax restarts")
        pos_int(self.steps, "relax steps")

    def __call__(self, problem, seg_of, D, w, m, policy, exact, L_est, L_sim):
        """``AllocResult`` of one structure (``L_est`` is unused: no cheap line search)."""
        from subgpu_jax.search.relax import relax_and_polish

        return relax_and_polish(problem, seg_of, D, w, m, policy, exact=exact, L_sim=L_sim,
                                restarts=self.restarts, steps=self.steps)


#: Allocation strategies by name (``subgpu search --alloc-strategy``).
ALLOC_STRATEGIES: dict[str, AllocationStrategy] = {
    s.name: s for s in (PairwiseAllocation(), RelaxAllocation())}
#: The default allocation strategy (Algorithm 2).
DEFAULT_ALLOC_STRATEGY: str = PairwiseAllocation.name


class CheapEstimator(Protocol):
    """A factory of the search's ``Problem``: its evaluators are the cheap estimator."""

    name: str

    def resolve(self, timer) -> "CheapEstimator":
        """The concrete estimator beside the exact scorer ``timer`` (a ``score.timer.Timer``)."""
        ...

    def problem(self, workload, hw, duration_model, model, cache: str,
                streams_per_stage: int, timer=None) -> Problem:
        """The ``Problem`` of one workload whose evaluators are this estimator (``timer``: the
        search's exact scorer, whose tables it may share)."""
        ...

    def for_sweep(self, reuse: bool) -> "CheapEstimator":
        """This estimator for a sweep whose processes each score many grid points of one
        structure family (``reuse`` True: ``app.searchrun.reuses_programs``), so compiled
        programs are reused and their tracing is paid once, or not."""
        ...


@dataclass(frozen=True)
class StaticCheap:
    """Cheap estimator ``static``: ``score.evaluator.Evaluator`` (isolated kernel durations)."""

    name: str = "static"

    def resolve(self, timer) -> "StaticCheap":
        """Itself (``timer`` is unused)."""
        return self

    def problem(self, workload, hw, duration_model, model, cache, streams_per_stage,
                timer=None):
        """A static ``Problem`` (``model`` and ``cache`` are unused); it shares the tables of
        ``timer`` when that holds this estimator's (``Timer.cheap_tables``: the static timer)
        for the same duration model."""
        from subgpu_jax.search.problem import Problem

        share = (timer is not None and timer.cheap_tables == "static"
                 and timer.duration_model is duration_model)
        return Problem(workload, hw, duration_model, streams_per_stage=streams_per_stage,
                       source=timer.structures if share else None)

    def for_sweep(self, reuse: bool) -> "StaticCheap":
        """Itself: the static evaluator's programs take one form."""
        return self


@dataclass(frozen=True)
class ContentionCheap:
    """Cheap estimator ``vcontention``: ``score.vcontention.ContentionEstimator``
    (contention-aware, docs/method.md §3) with the event simulator's ``model`` and L2 ``cache``;
    ``reuse``: the form of its overlap integrals for a sweep that reuses its compiled programs
    (``for_sweep``; the same makespans up to float32 summation order)."""

    name: str = "vcontention"
    #: the sweep reuses its programs (``score.vcoptions.VCOptions.reuse``, ``for_sweep``)
    reuse: bool = False

    def resolve(self, timer) -> "ContentionCheap":
        """Itself (``timer`` is unused)."""
        return self

    def problem(self, workload, hw, duration_model, model, cache, streams_per_stage,
                timer=None):
        """A ``Problem`` with ``ContentionEstimators`` (arguments as
        ``CheapEstimator.problem``); it shares the tables of ``timer`` when that holds this
        estimator's (``Timer.cheap_tables``: the batched contention timer) for the same model
        and L2 policy (the exact polish then rebuilds nothing; its estimators are then the
        timer's, whose integral form does not follow ``reuse``: ``--exact vcontention`` and
        ``screened`` keep the plan-size rule)."""
        from subgpu_jax.search.problem import ContentionEstimators, Problem

        share = (timer is not None and timer.cheap_tables == "vcontention"
                 and timer.model == model and timer.cache == cache)
        return Problem(workload, hw, duration_model, streams_per_stage=streams_per_stage,
                       source=timer.structures if share else None,
                       estimator=ContentionEstimators(model, cache, reuse=self.reuse))

    def for_sweep(self, reuse: bool) -> "ContentionCheap":
        """This estimator with ``reuse`` (``score.vcoptions.VCOptions.reuse``).

        Raises:
            ValueError: ``reuse`` not True or False."""
        return dataclasses.replace(self, reuse=flag(reuse, "reuse"))


@dataclass(frozen=True)
class AutoCheap:
    """Cheap estimator ``auto``: ``vcontention`` when the exact scorer is the event simulator,
    else ``static``."""

    name: str = "auto"

    def resolve(self, timer) -> CheapEstimator:
        """``ContentionCheap`` beside a timer that models contention, else ``StaticCheap``."""
        return ContentionCheap() if timer.contention else StaticCheap()

    def problem(self, workload, hw, duration_model, model, cache, streams_per_stage,
                timer=None):
        """Refused: resolve the estimator first (``resolve``)."""
        raise ValueError("cheap: 'auto' chooses by the exact scorer; resolve it first")

    def for_sweep(self, reuse: bool) -> CheapEstimator:
        """Refused: resolve the estimator first (``resolve``)."""
        raise ValueError("cheap: 'auto' chooses by the exact scorer; resolve it first")


#: Cheap estimators by name (``subgpu search --cheap``).
CHEAP_ESTIMATORS: dict[str, CheapEstimator] = {
    s.name: s for s in (AutoCheap(), ContentionCheap(), StaticCheap())}
#: The default cheap estimator (``--cheap``): chosen by the exact scorer.
DEFAULT_CHEAP: str = AutoCheap.name


def by_name(registry: dict, value, field_name: str):
    """The object of ``registry`` named ``value``, or ``value`` itself when it is a strategy
    object (anything with a ``name``).

    Args:
        registry: one of the registries above. value: a name or a strategy object.
        field_name: the option's name, for the error.

    Raises:
        ValueError: an unknown name, or neither a name nor an object with a name (one line).
    """
    if isinstance(value, str):
        if value not in registry:
            raise ValueError(f"{field_name} must be one of {', '.join(registry)}, got {value!r}")
        return registry[value]
    if not hasattr(value, "name"):
        raise ValueError(f"{field_name} must be one of {', '.join(registry)} or a strategy "
                         f"object with a name, got {value!r}")
    return value


def meta_of(strategy) -> dict:
    """What a sweep's ``summary.json`` records of a strategy: its ``meta()``
    (``StrategyMeta``); for an object without ``meta`` (a strategy object of the caller's own,
    which ``by_name`` accepts), its ``name`` and its dataclass fields holding an int or a bool
    (``{"name", "options"}``)."""
    meta = getattr(strategy, "meta", None)
    return meta() if callable(meta) else {"name": strategy.name,
                                          "options": _field_options(strategy)}


def strategy_options(strategy) -> dict:
    """The options a strategy takes from the command line (``--cut-options``,
    ``--alloc-options``), with their current values: its ``meta()``'s (``StrategyMeta``); for
    an object without ``meta`` (a strategy object of the caller's own, which ``by_name``
    accepts), its dataclass fields holding an int or a bool, or {}."""
    meta = getattr(strategy, "meta", None)
    return meta()["options"] if callable(meta) else _field_options(strategy)


def strategies_help(registry: dict, default: str) -> str:
    """The command-line help of a strategy registry's choices: each name with its ``summary``,
    the default marked, e.g. ``"proposal (the method as published: ..., default);
    local_search (+ boundary moves); ..."`` (``app.args.add_strategy_args``)."""
    return "; ".join(f"{n} ({getattr(s, 'summary', n)}{', default' if n == default else ''})"
                     for n, s in registry.items())


def changed_options(strategy, registry: dict) -> dict:
    """The options of ``strategy`` that differ from its registry entry's (what a sweep's
    fingerprint and summary record beside the name; {} for the defaults)."""
    base = strategy_options(registry.get(strategy.name))
    return {k: v for k, v in strategy_options(strategy).items() if base.get(k) != v}


#: The largest integer a strategy option takes from the command line (a bound on the work it
#: asks for: 10**6 relax steps or screened cuts is already hours; larger values only exhaust
#: memory, as 10**12 relax steps did).
OPTION_MAX = 1_000_000

_BOOLS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}


def with_options(registry: dict, name: str, text: str | None, flag_name: str):
    """The strategy ``name`` of ``registry`` with the options of ``text``, ``"K=V[,K=V...]"``
    (integers as the digits 0-9, booleans as true/false/yes/no/1/0; None or "": the defaults).

    Raises:
        ValueError: an unknown name (as ``by_name``), a malformed item, an option the strategy
            does not take, a value of the wrong kind or outside its range (one line naming
            ``flag_name`` and what is allowed).
    """
    from subgpu_jax.model.checks import ascii_int

    base = by_name(registry, name, flag_name.lstrip("-").replace("-options", "-strategy"))
    if not text or not str(text).strip():
        return base
    allowed = strategy_options(base)
    takes = (f"{base.name} takes {', '.join(f'{k}={v}' for k, v in allowed.items())}"
             if allowed else f"{base.name} takes no options")
    opts = {}
    for item in str(text).split(","):
        key, eq, val = item.strip().partition("=")
        key, val = key.strip(), val.strip()
        if not eq or not key or not val:
            raise ValueError(f"{flag_name}: items are K=V separated by commas ({takes}), "
                             f"got {item.strip()!r}")
        if key not in allowed:
            raise ValueError(f"{flag_name}: {takes}; got {key!r}")
        if key in opts:
            raise ValueError(f"{flag_name}: {key} given twice; give each option once")
        if isinstance(allowed[key], bool):
            if val.lower() not in _BOOLS:
                raise ValueError(f"{flag_name}: {key} is true or false, got {val!r}")
            opts[key] = _BOOLS[val.lower()]
        else:
            try:
                opts[key] = ascii_int(val)
            except ValueError:
                raise ValueError(f"{flag_name}: {key} is an integer, got {val!r}") from None
            if opts[key] > OPTION_MAX:
                raise ValueError(f"{flag_name}: {key} is an integer of at most {OPTION_MAX:,}, "
                                 f"got {val}")
    try:
        return dataclasses.replace(base, **opts)
    except ValueError as e:
        raise ValueError(f"{flag_name}: {e}") from None


def strategy_meta(strategy, registry: dict):
    """How a sweep's fingerprint records ``strategy``: its name, or ``{"name", **options}``
    with the options that differ from its registry entry's (``changed_options``), so a
    strategy at its defaults keeps the fingerprint it had before options existed."""
    more = changed_options(strategy, registry)
    return {"name": strategy.name, **more} if more else strategy.name


def make_strategies(cut: str, cut_options: str | None, alloc: str,
                    alloc_options: str | None) -> tuple:
    """The (cut, allocation) strategy objects of their names and ``K=V`` option texts, as
    ``--cut-strategy``/``--cut-options``/``--alloc-strategy``/``--alloc-options`` give them
    (``with_options``; ``subgpu search`` and ``subgpu tune``).

    Raises:
        ValueError: as ``with_options``, naming ``--cut-options`` or ``--alloc-options``."""
    return (with_options(CUT_STRATEGY_REGISTRY, cut, cut_options, "--cut-options"),
            with_options(ALLOC_STRATEGIES, alloc, alloc_options, "--alloc-options"))
