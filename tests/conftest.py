"""Shared fixtures of the foundation tests.

* A hypothesis profile (modest example counts, no deadline: the first call of a jitted function
  compiles, which is slow but not a failure) so the whole suite stays well under 3 minutes on a
  2-core CPU machine.
* ``x64``: turns on ``jax_enable_x64`` for ONE test and restores the previous value afterwards,
  so float64 oracles compare against a float64 evaluator without leaking into other tests.
* JAX on the CPU unless ``JAX_PLATFORMS`` is set, as ``subgpu`` runs it
  (``subgpu_jax.app.platform``), so that a GPU machine runs the same tests with the same values.
* ``child_pythonpath``: the ``PYTHONPATH`` of a child interpreter (the checkout, then the
  caller's entries).
* ``experiment_script``: loads ``experiments/<name>.py`` as a module (the scripts are not a
  package), for the tests of an experiment's helpers.
* ``calibration_dir``: ``tests/data``, the measured H200 calibration CSVs vendored into the repository
  (provenance in ``tests/data/CALIBRATION.md``).
"""

from __future__ import annotations

import os
from pathlib import Path

# The suite tests the scorers as the command line runs them: JAX on the CPU
# (subgpu_jax.app.platform), also on a machine with a GPU, unless JAX_PLATFORMS is set.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import pytest
from hypothesis import HealthCheck, settings

#: The vendored calibration CSVs (h200_*.csv) and their provenance (CALIBRATION.md).
DATA = Path(__file__).resolve().parent / "data"

settings.register_profile(
    "subgpu",
    max_examples=40,
    deadline=None,
    # ``x64`` is function-scoped on purpose: it must stay on for every example of the test.
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                           HealthCheck.data_too_large],
)
settings.load_profile("subgpu")


@pytest.fixture
def x64():
    """Enable float64 in JAX for the duration of one test; restores the previous setting."""
    old = bool(jax.config.jax_enable_x64)
    jax.config.update("jax_enable_x64", True)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", old)


@pytest.fixture(scope="session")
def child_pythonpath() -> str:
    """``PYTHONPATH`` for a child interpreter: the checkout first, then the caller's own entries
    (packages installed there, e.g. the GPU machine's wheels, stay importable in the child)."""
    root = str(Path(__file__).resolve().parents[1])
    return os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)


@pytest.fixture(scope="session")
def calibration_dir() -> Path:
    """``tests/data``: the measured H200 calibration CSVs (in the repository)."""
    return DATA


def pytest_terminal_summary(terminalreporter) -> None:
    """One line per reason tests were skipped, most frequent first (issue 40): the README's
    test command says why its skips happened (no GPU, no torch, ...), not only how many."""
    from collections import Counter

    reasons: Counter = Counter()
    for rep in terminalreporter.stats.get("skipped", []):
        lr = rep.longrepr
        reason = lr[2] if isinstance(lr, tuple) and len(lr) == 3 else str(lr)
        reason = str(reason).removeprefix("Skipped: ")
        if "No module named 'torch'" in reason:   # three skip messages, one cause
            reason = "torch is not installed (the GPU extra: pip install -e \".[gpu]\")"
        reasons[reason] += 1
    if reasons:
        terminalreporter.section("why tests were skipped", sep="-")
        for reason, n in reasons.most_common():
            terminalreporter.write_line(f"{n:5d} skipped: {reason}")


@pytest.fixture(scope="session")
def experiment_script():
    """``load(name)``: ``experiments/<name>.py`` loaded as a fresh module."""
    import importlib.util

    root = Path(__file__).resolve().parents[1] / "experiments"

    def load(name: str):
        spec = importlib.util.spec_from_file_location(name, root / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod

    return load
