"""Batch scorers of SM allocations (docs/method.md §3-4): the vmapped max-plus evaluator, the
vectorised contention scorer and the exhaustive streaming scorer; ``protocol.Scorer`` is their
common interface."""
