"""``subgpu tune`` takes the search's strategy and scorer choices from the same registries as
``subgpu search`` (issue 38: no hand-written choice lists). Oracle: the two sub-parsers'
choices, option by option, and the registries' own names."""

from __future__ import annotations

import argparse

import pytest

from subgpu_jax.app.cli import build_parser
from subgpu_jax.score.timer import TIMERS
from subgpu_jax.search.strategies import (ALLOC_STRATEGIES, CHEAP_ESTIMATORS,
                                          CUT_STRATEGY_REGISTRY)


def _choices(parser: argparse.ArgumentParser, cmd: str) -> dict:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    if cmd not in sub.choices:
        pytest.skip(f"`subgpu {cmd}` is not registered here (install the package)")
    return {a.option_strings[0]: tuple(a.choices) for a in sub.choices[cmd]._actions
            if a.choices is not None and a.option_strings}


def test_tune_and_search_share_the_registries():
    p = build_parser()
    search, tune = _choices(p, "search"), _choices(p, "tune")
    want = {"--exact": tuple(TIMERS), "--cheap": tuple(CHEAP_ESTIMATORS),
            "--cut-strategy": tuple(CUT_STRATEGY_REGISTRY),
            "--alloc-strategy": tuple(ALLOC_STRATEGIES)}
    for flag, names in want.items():
        assert search[flag] == names and tune[flag] == names, flag


def test_tune_takes_the_strategy_options_of_search():
    """``subgpu tune`` and ``subgpu search`` add the strategy flags with one helper
    (``app.args.add_strategy_args``): both take ``--cut-options`` and ``--alloc-options``."""
    p = build_parser()
    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    if "tune" not in sub.choices:
        pytest.skip("`subgpu tune` is not registered here (install the package)")
    for cmd in ("search", "tune"):
        flags = {s for a in sub.choices[cmd]._actions for s in a.option_strings}
        assert {"--cut-options", "--alloc-options"} <= flags, cmd
