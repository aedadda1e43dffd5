"""Simulators (docs/method.md §3): the contention rate model, the L2 cache model, the event
simulator, and the H200 green-context probe prediction (``probe``)."""
