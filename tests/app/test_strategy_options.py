"""Strategy options from the command line (issue 38 item 2: "a strategy's options reach the CLI
and its meta() reaches the store"): ``--cut-options`` / ``--alloc-options`` make the registry's
strategy with those fields (``search.strategies.with_options``), refuse anything else in one
line naming the flag and what the strategy takes, and a sweep records the options: in
``summary.json``, and in its fingerprint only when they differ from the defaults (a default
sweep keeps its fingerprint, another option value is another sweep)."""

from __future__ import annotations

import json

import pytest

from subgpu_jax.app.cli import main
from subgpu_jax.search.strategies import (ALLOC_STRATEGIES, CUT_STRATEGY_REGISTRY,
                                          RelaxAllocation, ScreenCut, StrategyMeta,
                                          changed_options, meta_of, strategy_options,
                                          with_options)

SMALL = ["search", "--model", "gpt-oss-20b", "--gpus", "8", "--tp", "8", "--dp", "1",
         "--exact", "static", "--batches", "64", "--stages", "2", "--microbatches", "2",
         "--no-progress"]


def test_with_options_by_hand():
    s = with_options(CUT_STRATEGY_REGISTRY, "screen", "max_cuts=500, keep_proposal=no",
                     "--cut-options")
    assert s == ScreenCut(max_cuts=500, keep_proposal=False)
    assert changed_options(s, CUT_STRATEGY_REGISTRY) == {"max_cuts": 500, "keep_proposal": False}
    assert with_options(CUT_STRATEGY_REGISTRY, "screen", None, "--cut-options") is \
        CUT_STRATEGY_REGISTRY["screen"]
    assert strategy_options(CUT_STRATEGY_REGISTRY["proposal"]) == {}
    assert strategy_options(ALLOC_STRATEGIES["relax"]) == {"restarts": 8, "steps": 150}


def test_every_strategy_has_meta():
    """Every registered cut and allocation strategy is a ``StrategyMeta``: ``meta()`` is its
    name and its options (``strategy_options``, what ``summary.json`` records); a strategy
    object of the caller's own without ``meta`` gets the same from its dataclass fields.
    Oracle: the dataclasses' int and bool fields, written out."""
    from dataclasses import dataclass

    want = {"proposal": {}, "local_search": {"starts": 3, "top": 8},
            "screen": {"max_cuts": 20_000, "top": 8, "polish": 1, "keep_proposal": True},
            "pairwise": {}, "relax": {"restarts": 8, "steps": 150}}
    for reg in (CUT_STRATEGY_REGISTRY, ALLOC_STRATEGIES):
        for name, st in reg.items():
            assert isinstance(st, StrategyMeta)
            assert st.meta() == meta_of(st) == {"name": name, "options": want[name]}
            assert strategy_options(st) == st.options() == want[name]
    assert RelaxAllocation(restarts=2, steps=20).meta() == {
        "name": "relax", "options": {"restarts": 2, "steps": 20}}

    @dataclass(frozen=True)
    class Mine:
        name: str = "mine"
        tries: int = 4
        label: str = "x"

    assert meta_of(Mine()) == {"name": "mine", "options": {"tries": 4}}
    assert strategy_options(Mine()) == {"tries": 4} and strategy_options(None) == {}


@pytest.mark.parametrize("name,text,msg", [
    ("screen", "max_cuts=0", "--cut-options: screen_max_cuts must be an integer >= 1, got 0"),
    ("screen", "maxcuts=5", "--cut-options: screen takes max_cuts=20000, top=8, polish=1, "
                            "keep_proposal=True; got 'maxcuts'"),
    ("screen", "max_cuts", "--cut-options: items are K=V separated by commas"),
    ("screen", "max_cuts=１２", "--cut-options: max_cuts is an integer, got '１２'"),
    ("screen", "keep_proposal=2", "--cut-options: keep_proposal is true or false, got '2'"),
    ("proposal", "top=3", "--cut-options: proposal takes no options; got 'top'"),
    ("local_search", "starts=-1", "--cut-options: local_search starts must be an integer"),
])
def test_bad_cut_options(name, text, msg):
    with pytest.raises(ValueError) as e:
        with_options(CUT_STRATEGY_REGISTRY, name, text, "--cut-options")
    assert str(e.value).startswith(msg) and "\n" not in str(e.value)


def test_relax_steps_validated():
    with pytest.raises(ValueError, match="^--alloc-options: relax steps must be an integer >= 1"):
        with_options(ALLOC_STRATEGIES, "relax", "steps=0", "--alloc-options")


def test_cli_records_options_and_fingerprints_them(tmp_path, capsys):
    out = tmp_path / "s"
    args = SMALL + ["--cut-strategy", "local_search", "--cut-options", "starts=1,top=2",
                    "--out", str(out)]
    assert main(args) == 0
    capsys.readouterr()
    summ = json.loads((out / "summary.json").read_text())
    assert summ["strategies"]["cut"] == "local_search"
    assert summ["strategies"]["cut_options"] == {"starts": 1, "top": 2}
    man = json.loads((out / "manifest.json").read_text())
    assert json.dumps({"name": "local_search", "starts": 1, "top": 2}) in json.dumps(man)
    # the same sweep again: reused; another option value: another sweep, refused
    assert main(args) == 0
    assert "skipped 2 already done" in capsys.readouterr().out
    rc = main(SMALL + ["--cut-strategy", "local_search", "--cut-options", "starts=2,top=2",
                       "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1


def test_cli_bad_option_is_one_line_exit_2(tmp_path, capsys):
    rc = main(SMALL + ["--alloc-strategy", "relax", "--alloc-options", "stepz=3", "--out",
                       str(tmp_path / "s")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err == ["error: --alloc-options: relax takes restarts=8, steps=150; "
                               "got 'stepz'"]
    assert not (tmp_path / "s" / "records.jsonl").exists()
