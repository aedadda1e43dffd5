"""The search layer (docs/method.md §4): the partition proposal (``features``), Algorithm 2
(``pairwise``), problems and exact scorers (``problem``), cut strategies (``cuts``), Algorithm 1
(``algorithm1``), the optax relaxation (``relax``), exhaustive search (``exhaustive``) and Pareto
fronts (``pareto``). This ``__init__`` re-exports their public names."""

from subgpu_jax.search.features import (FEATURE_NAMES, kernel_features, partition_cost,
    CutCandidate, Proposal, propose_partition)
from subgpu_jax.search.pairwise import (LineResult, line_search, pairwise_line, AllocResult,
    allocate_pairwise, seeds)
from subgpu_jax.search.problem import (Problem, ContentionProblem, EvaluatorExact, EventSimExact,
    TimerExact, EstimatorTimer, MemoScorer, memoised)
from subgpu_jax.search.cuts import (RankedCut, rank_cuts, choose_cut, cut_neighbours, refine_cut,
    CUT_STRATEGIES, screen_cuts)
from subgpu_jax.search.algorithm1 import (Record, SearchResult, pareto_records, algorithm1)
from subgpu_jax.search.relax import (RelaxResult, relax_allocation, relax_and_polish)
from subgpu_jax.search.exhaustive import (ExhaustiveResult, exhaustive_allocations,
    exhaustive_search, count_configs, exhaustive_exact)
from subgpu_jax.search.pareto import (pareto_mask, pareto_front, frontier_curve,
    per_user_gain_at_matched_gpu, per_gpu_gain_at_matched_user)

__all__ = ["FEATURE_NAMES", "kernel_features", "partition_cost", "CutCandidate", "Proposal",
    "propose_partition", "LineResult", "line_search", "pairwise_line", "AllocResult",
    "allocate_pairwise", "seeds", "memoised", "Problem", "ContentionProblem", "EvaluatorExact",
    "EventSimExact", "TimerExact", "EstimatorTimer", "MemoScorer", "RankedCut", "rank_cuts",
    "choose_cut", "cut_neighbours",
    "refine_cut", "CUT_STRATEGIES", "screen_cuts", "Record", "SearchResult", "pareto_records",
    "algorithm1", "RelaxResult", "relax_allocation", "relax_and_polish",
    "ExhaustiveResult", "exhaustive_allocations", "exhaustive_search", "count_configs",
    "exhaustive_exact", "pareto_mask",
    "pareto_front", "frontier_curve", "per_user_gain_at_matched_gpu",
    "per_gpu_gain_at_matched_user"]
