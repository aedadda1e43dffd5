"""The search layer (docs/method.md §4): the partition proposal (``features``), Algorithm 2
(``pairwise``), problems and exact scorers (``problem``), cuts (``cuts``), the strategy objects
and their registries (``strategies``), Algorithm 1
(``algorithm1``), the optax relaxation (``relax``), exhaustive search (``exhaustive``) and Pareto
fronts (``pareto``). This ``__init__`` re-exports their public names, each
module loaded on first use (PEP 562: the command line reads ``strategies``' registries without
loading JAX)."""

from __future__ import annotations

import importlib

#: Module of each re-exported name.
EXPORTS: dict[str, str] = {
    "FEATURE_NAMES": "features", "kernel_features": "features", "partition_cost": "features",
    "CutCandidate": "features", "Proposal": "features", "propose_partition": "features",
    "LineResult": "pairwise", "line_search": "pairwise", "pairwise_line": "pairwise",
    "AllocResult": "pairwise", "allocate_pairwise": "pairwise", "seeds": "pairwise",
    "Problem": "problem", "ContentionEstimators": "problem", "EvaluatorExact": "problem",
    "EventSimExact": "problem", "TimerExact": "problem", "EstimatorTimer": "problem", "MemoScorer":
    "problem", "memoised": "problem",
    "RankedCut": "cuts", "rank_cuts": "cuts", "choose_cut": "cuts", "cut_neighbours": "cuts",
    "refine_cut": "cuts", "screen_cuts": "cuts",
    "CutChoice": "strategies", "CutStrategy": "strategies", "ProposalCut": "strategies",
    "LocalSearchCut": "strategies", "ScreenCut": "strategies", "CUT_STRATEGY_REGISTRY":
    "strategies", "CUT_STRATEGIES": "strategies", "AllocationStrategy": "strategies",
    "PairwiseAllocation": "strategies", "RelaxAllocation": "strategies", "ALLOC_STRATEGIES":
    "strategies", "CheapEstimator": "strategies", "StaticCheap": "strategies", "ContentionCheap":
    "strategies", "AutoCheap": "strategies", "CHEAP_ESTIMATORS": "strategies", "by_name":
    "strategies", "distinct_layouts": "strategies",
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
