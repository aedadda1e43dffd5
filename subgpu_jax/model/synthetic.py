"""Synthetic instances for tests and the heuristic-gap experiment: a coarse-quantum hardware
preset and random small regions (chains or DAGs) as a ``Workload``."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from subgpu_jax.model.checks import pos_int
from subgpu_jax.model.graph import Kernel, OpGraph
from subgpu_jax.model.hardware import get_hardware, Hardware
from subgpu_jax.model.workload import Workload


def coarse_hardware(base: str = "H200", quantum: int = 16, minimum: int = 16,
                    budget: int = 128) -> Hardware:
    """A preset with a coarse SM quantum, for small exhaustively solvable instances: its pools
    are multiples of ``quantum`` of at least ``minimum`` SMs summing to ``budget``, with no
    runtime stage minimum (``min_stage_sms`` 0: ``minimum`` is every stage's), so searches and
    exhaustive enumerations of it see one space.

    Raises:
        ValueError: from ``Hardware`` (names the field), e.g. a budget of 0.
    """
    return dataclasses.replace(get_hardware(base), sm_quantum=quantum, min_pool_sms=minimum,
                               sm_budget=budget, min_stage_sms=0)


def synthetic_workload(seed: int, n: int | None = None, chain: bool | None = None,
                       num_regions: int | None = None, batch: int = 8) -> Workload:
    """A random small region for tests and the heuristic-gap experiment.

    Kernels get log-uniform FLOPs (1e8..1e11), weight bytes (1e5..3e8), activation bytes
    (1e5..5e7), sometimes KV bytes and NVLink payloads, tensor or CUDA-core work, and 8..1024
    CTAs. A graph for m microbatches divides FLOPs, activation, KV and communication bytes and
    CTAs by m (weights are read whole by every microbatch). Non-chain instances get a random DAG
    in launch order (every kernel has a predecessor; extra edges with probability 0.25).

    Args:
        seed: PRNG seed; n: kernels (default 5..10); chain: chain or DAG (default random);
        num_regions: region instances L (default 2..6); batch: per-GPU batch R.

    Returns:
        A ``Workload`` (tokens per GPU = ``batch``).
    """
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 11)) if n is None else pos_int(n, "n", 2)
    chain = bool(rng.random() < 0.5) if chain is None else bool(chain)
    L = int(rng.integers(2, 7)) if num_regions is None else pos_int(num_regions, "num_regions")

    def lu(lo: float, hi: float) -> float:
        return float(np.exp(rng.uniform(np.log(lo), np.log(hi))))

    base = []
    for i in range(n):
        comm = lu(1e5, 3e7) if rng.random() < 0.15 else 0.0
        kv = lu(1e6, 3e8) if rng.random() < 0.2 else 0.0
        base.append(Kernel(name=f"k{i}", op="synthetic", category="mlp", layer=0,
                           flops=lu(1e8, 1e11), dtype="bf16", tensor=bool(rng.random() < 0.6),
                           weight_objects=((f"w{i}", lu(1e5, 3e8)),),
                           act_reads=((f"a{i}", lu(1e5, 5e7)),), act_writes=(),
                           kv_bytes=kv, comm_bytes=comm,
                           ctas=int(rng.choice([8, 16, 32, 64, 128, 256, 1024]))))
    if chain:
        edges = [(i, i + 1) for i in range(n - 1)]
    else:
        es = set()
        for v in range(1, n):
            es.add((int(rng.integers(0, v)), v))
            for u in range(v):
                if rng.random() < 0.25:
                    es.add((u, v))
        edges = sorted(es)
    cross = [(n - 1, 0)]
    if not chain and rng.random() < 0.5:
        cross.append((n - 1, int(rng.integers(0, n))))

    def graph(m: int) -> OpGraph:
        ks = tuple(dataclasses.replace(
            k, flops=k.flops / m, act_reads=tuple((a, b / m) for a, b in k.act_reads),
            kv_bytes=k.kv_bytes / m, comm_bytes=k.comm_bytes / m,
            ctas=max(1, math.ceil(k.ctas / m))) for k in base)
        return OpGraph(kernels=ks, edges=tuple(edges), cross_edges=tuple(cross), num_regions=L,
                       layers_per_region=1, microbatches=m)

    return Workload(graph, batch=batch, tokens_per_gpu=float(batch),
                    name=f"synthetic{seed}-{'chain' if chain else 'dag'}-n{n}-L{L}")
