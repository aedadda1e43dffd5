"""The search layer (docs/method.md §4): the partition proposal (``features``), Algorithm 2
(``pairwise``), problems and exact scorers (``problem``), cuts (``cuts``), the strategy objects
and their registries (``strategies``), Algorithm 1
(``algorithm1``), the optax relaxation (``relax``), exhaustive search (``exhaustive``) and Pareto
fronts (``pareto``). This ``__init__`` re-exports their public names, each
module loaded on first use (PEP 562: the command line reads ``strategies``' registries without
loading JAX)."""

from __future__ import annotations

import importlib
import sys
import types

#: Module of each re-exported name.
EXPORTS: dict[str, str] = {
    "FEATURE_NAMES": "features", "kernel_features": "features", "partition_cost": "features",
    "CutCandidate": "features", "Proposal": "features", "propose_partition": "features",
    "LineResult": "pairwise", "line_search": "pairwise", "pairwise_line": "pairwise",
    "AllocResult": "pairwise", "allocate_pairwise": "pairwise", "seeds": "pairwise",
    "Problem": "problem", "ContentionEstimators": "problem", "TimerExact": "problem",
    "EstimatorTimer": "problem", "MemoScorer": "problem", "memoised": "problem",
    "RankedCut": "cuts", "rank_cuts": "cuts", "choose_cut": "cuts", "cut_neighbours": "cuts",
    "refine_cut": "cuts", "screen_cuts": "cuts",
    "StrategyMeta": "strategies", "CutChoice": "strategies", "CutStrategy": "strategies",
    "ProposalCut": "strategies", "LocalSearchCut": "strategies", "ScreenCut": "strategies",
    "CUT_STRATEGY_REGISTRY": "strategies", "CUT_STRATEGIES": "strategies",
    "AllocationStrategy": "strategies", "PairwiseAllocation": "strategies", "RelaxAllocation":
    "strategies", "ALLOC_STRATEGIES": "strategies", "CheapEstimator": "strategies",
    "StaticCheap": "strategies", "ContentionCheap": "strategies", "AutoCheap": "strategies",
    "CHEAP_ESTIMATORS": "strategies", "by_name": "strategies", "distinct_layouts": "strategies",
    "Record": "algorithm1", "SearchResult": "algorithm1", "pareto_records": "algorithm1",
    "Algorithm1Options": "algorithm1", "algorithm1": "algorithm1",
    "RelaxResult": "relax", "relax_allocation": "relax", "relax_and_polish": "relax",
    "ExhaustiveResult": "exhaustive", "exhaustive_allocations": "exhaustive", "exhaustive_search":
    "exhaustive", "count_configs": "exhaustive", "exhaustive_exact": "exhaustive",
    "pareto_mask": "pareto", "pareto_front": "pareto", "frontier_curve": "pareto",
    "per_user_gain_at_matched_gpu": "pareto", "per_gpu_gain_at_matched_user": "pareto",
}

__all__ = list(EXPORTS)



def __getattr__(name: str):
    """The re-exported ``name``, importing its module (``EXPORTS``) on first use."""
    if name not in EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The module's names, the re-exported ones included."""
    return sorted(set(globals()) | set(EXPORTS))


class _Package(types.ModuleType):
    """This package, keeping a re-exported function whose name is its module's (``algorithm1``):
    when Python first loads the submodule ``subgpu_jax.search.algorithm1`` it sets the package's
    attribute of that name to the module, which would leave ``search.algorithm1`` a module or a
    function by import order. The function wins: ``importlib.import_module`` and ``from
    subgpu_jax.search.algorithm1 import ...`` still reach the module, ``import
    subgpu_jax.search.algorithm1 as m`` binds the function."""

    def __setattr__(self, name: str, value) -> None:
        if (EXPORTS.get(name) == name and isinstance(value, types.ModuleType)
                and value.__name__ == f"{__name__}.{name}"):
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
