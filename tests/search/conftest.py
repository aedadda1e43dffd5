"""Fixtures of the search tests: ``fs``, the frontier-study script loaded as a module."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def fs():
    """``experiments/frontier_study.py`` as a module (it is a script, not in a package)."""
    spec = importlib.util.spec_from_file_location("frontier_study",
                                                  ROOT / "experiments" / "frontier_study.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
