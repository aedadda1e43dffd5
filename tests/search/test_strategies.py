"""The search's strategies (``search.strategies``): the registries drive the command line, the
options objects keep the search's entry points short, and bad names fail in one line.

Oracle: the registries themselves (the CLI's ``choices=`` must equal their keys), the
signatures' parameter counts (issue 26, item 2: at most 10), and the default options against
the defaults they replaced.
"""

from __future__ import annotations

import argparse
import inspect

import pytest

from subgpu_jax.app.cli import build_parser
from subgpu_jax.app.searchjob import PointScorer, SearchOptions
from subgpu_jax.app.searchrun import run_search
from subgpu_jax.score.timer import TIMERS
from subgpu_jax.score.vcontention import VContentionEvaluator
from subgpu_jax.search import algorithm1, Algorithm1Options
from subgpu_jax.search.strategies import (ALLOC_STRATEGIES, by_name, CHEAP_ESTIMATORS,
                                          CUT_STRATEGIES, CUT_STRATEGY_REGISTRY,
                                          ContentionCheap, LocalSearchCut, PairwiseAllocation,
                                          ProposalCut, ScreenCut, StaticCheap)


def _search_choices() -> dict[str, tuple]:
    """``subgpu search``'s option -> choices."""
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {o: tuple(a.choices) for a in sub.choices["search"]._actions if a.choices
            for o in a.option_strings}


def test_cli_choices_are_the_registries():
    ch = _search_choices()
    assert ch["--cut-strategy"] == tuple(CUT_STRATEGY_REGISTRY) == CUT_STRATEGIES
    assert ch["--alloc-strategy"] == tuple(ALLOC_STRATEGIES)
    assert ch["--cheap"] == tuple(CHEAP_ESTIMATORS)
    assert ch["--exact"] == tuple(TIMERS)
    for reg in (CUT_STRATEGY_REGISTRY, ALLOC_STRATEGIES, CHEAP_ESTIMATORS):
        assert all(obj.name == name for name, obj in reg.items())


def test_entry_points_take_at_most_ten_parameters():
    for fn in (algorithm1, run_search, VContentionEvaluator.__init__):
        params = [p for p in inspect.signature(fn).parameters if p != "self"]
        assert len(params) <= 10, (fn.__qualname__, params)


def test_default_options_are_the_faithful_algorithm():
    o = Algorithm1Options()
    assert (o.exact_top, o.L_est, o.L_sim, o.rotation_refine, o.include_temporal) == (
        3, None, 2, 3, True)
    assert o.cut == ProposalCut() and o.allocate == PairwiseAllocation()
    assert Algorithm1Options(cut="screen").cut == ScreenCut()
    assert ScreenCut().fallback == LocalSearchCut(starts=3, top=8)
    s = SearchOptions()
    assert (s.timer, s.cache, s.L_sim, s.cut_strategy, s.cheap, s.alloc_strategy) == (
        None, None, 2, "proposal", "auto", "pairwise")   # timer None: the event simulator


def test_cheap_estimators_resolve_by_the_exact_scorer():
    from subgpu_jax.model.hardware import get_hardware
    from subgpu_jax.score.timer import ContentionTimer, EventTimer, StaticTimer

    hw = get_hardware("H200")
    assert CHEAP_ESTIMATORS["auto"].resolve(EventTimer(hw)) == ContentionCheap()
    assert CHEAP_ESTIMATORS["auto"].resolve(ContentionTimer(hw)) == ContentionCheap()
    assert CHEAP_ESTIMATORS["auto"].resolve(StaticTimer(hw)) == StaticCheap()
    assert CHEAP_ESTIMATORS["static"].resolve(EventTimer(hw)) == StaticCheap()
    with pytest.raises(ValueError, match="resolve"):
        CHEAP_ESTIMATORS["auto"].problem(None, None, None, None, "lru", 1)


def test_bad_names_fail_in_one_line():
    for reg, field in ((CUT_STRATEGY_REGISTRY, "cut_strategy"), (ALLOC_STRATEGIES,
                                                                 "alloc_strategy"),
                       (CHEAP_ESTIMATORS, "cheap")):
        with pytest.raises(ValueError, match=f"^{field} must be one of .*, got 'x'$"):
            by_name(reg, "x", field)
        with pytest.raises(ValueError, match="strategy object with a name"):
            by_name(reg, 3, field)
    with pytest.raises(ValueError, match="^cheap must be one of auto, vcontention, static"):
        PointScorer(None, None, cheap="fast")


def test_strategies_help_follows_the_registries():
    """The --cut-strategy/--alloc-strategy help is built from the registries: every registered
    strategy with its summary, the default marked once, nothing hand-written to keep in step
    (a new strategy in a registry reaches the help with no other edit)."""
    from subgpu_jax.search.strategies import (ALLOC_STRATEGIES, CUT_STRATEGY_REGISTRY,
                                              DEFAULT_ALLOC_STRATEGY, DEFAULT_CUT_STRATEGY,
                                              strategies_help)

    for reg, default in ((CUT_STRATEGY_REGISTRY, DEFAULT_CUT_STRATEGY),
                         (ALLOC_STRATEGIES, DEFAULT_ALLOC_STRATEGY)):
        text = strategies_help(reg, default)
        for name, st in reg.items():
            assert f"{name} ({st.summary}" in text
        assert text.count(", default)") == 1 and f"{default} (" in text
    extra = {**ALLOC_STRATEGIES, "probe": type("Probe", (), {"summary": "a probe"})()}
    assert strategies_help(extra, DEFAULT_ALLOC_STRATEGY).endswith("; probe (a probe)")
