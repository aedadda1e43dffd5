"""subgpu_jax: operator graphs, configuration space, simulators, scorers and search for SubGPU
pipelining of LLM decode (docs/method.md: cut a region's operator graph into segments, bind them to
disjoint SM pools, stream microbatches through them).

The package is layered, each folder importing only those before it (docs/usage.md "Layout"):
``model`` < ``space`` < ``sim`` < ``score`` < ``search`` < ``app``. This module re-exports the
names a user needs, each imported on first use (PEP 562 ``__getattr__``), so that
``import subgpu_jax`` imports no submodule and does not pull in JAX.
"""

from __future__ import annotations

import importlib

#: Lazily re-exported name -> defining module.
_LAZY = {
    **{n: "subgpu_jax.model.graph" for n in ("CATEGORIES", "REFERENCE_DEPLOYMENT", "Deployment",
                                             "Kernel", "OpGraph", "StaticDurationModel",
                                             "build_graph")},
    **{n: "subgpu_jax.model.hardware" for n in ("HARDWARE", "Hardware", "get_hardware")},
    **{n: "subgpu_jax.model.models" for n in ("MODELS", "ModelArch", "get_model",
                                              "load_hf_config", "resolve_model")},
    "Workload": "subgpu_jax.model.workload",
    "throughputs": "subgpu_jax.model.accounting",
    "load_calibration": "subgpu_jax.model.calibration",
    "Config": "subgpu_jax.space.config",
    "AllocSpace": "subgpu_jax.space.config",
    "temporal_config": "subgpu_jax.space.config",
    "workload_config": "subgpu_jax.space.config",
    "ContentionModel": "subgpu_jax.sim.contention",
    "simulate": "subgpu_jax.sim.eventsim",
    "Scorer": "subgpu_jax.score.protocol",
    "Evaluator": "subgpu_jax.score.evaluator",
    "VContentionEvaluator": "subgpu_jax.score.vcontention",
    "Problem": "subgpu_jax.search.problem",
    "algorithm1": "subgpu_jax.search.algorithm1",
    "pareto_front": "subgpu_jax.search.pareto",
    "frontier_curve": "subgpu_jax.search.pareto",
    "per_user_gain_at_matched_gpu": "subgpu_jax.search.pareto",
    "per_gpu_gain_at_matched_user": "subgpu_jax.search.pareto",
    "run_search": "subgpu_jax.app.searchrun",
}

__all__ = [*_LAZY]

__version__ = "0.1.0"


def __getattr__(name: str):
    """Import a lazily re-exported name (``_LAZY``) on first access.

    Raises:
        AttributeError: not a name of this package.
    """
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'subgpu_jax' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
