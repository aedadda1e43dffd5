"""Fixtures of the search tests: ``fs``, the frontier-study script loaded as a module."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def fs(experiment_script):
    """``experiments/frontier_study.py`` as a module (it is a script, not in a package)."""
    return experiment_script("frontier_study")
