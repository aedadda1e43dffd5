"""The configuration space (docs/method.md §2): cuts, boundary reuse, SM allocations
(``AllocSpace``), ``Config`` with its one feasibility ``check``, and the task DAG of a
configuration (``taskdag``)."""
