"""The options of ``score.vcontention.VContentionEvaluator`` (issue 26: the evaluator takes
its structure and one options object): the hit replay's L2 policy and reference allocation, the
fixed point, chunking, paddings and the kernel's form. Checked by the evaluator (one-line
errors naming the option)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import jax.numpy as jnp

__all__ = ["VCOptions"]


@dataclass(frozen=True)
class VCOptions:
    """Options of ``VContentionEvaluator`` (defaults: as the evaluator had them).

    Attributes:
        cache: L2 policy for the hit estimate (``"lru"``, ``"fifo"``, ``"none"``).
        ref_alloc: reference allocation of the hit replay (default: as equal as the quantum
            allows, remainder to the first stages).
        iters: fixed-point iterations (default 4). damping: 0..1 (default 0.5).
        dtype: float dtype (float32). chunk: allocations per compiled call (as ``Evaluator``;
            default 64 on CPU: every batch above 64 runs in one compiled shape, and the
            search's calls are small; large batches run about 1.1x faster in chunks of 256 on
            the 2-core CI machine, docs/results.md "Speed"), 65536 on an
            accelerator).
        pad_lanes, pad_positions, pad_levels, pad_width, pad_preds: paddings of
            ``lanes.LanePlan.from_dag``; pad_tasks, pad_window (and pad_preds): of
            ``DagArrays.from_dag``; pad_segments: K_pad of the tables. Fix them to one value
            across structures of equal lane triples to share one compiled function (default:
            ``fine_bucket`` of the task count, the level program's own sizes
            (``LanePlan.from_dag``), power-of-two buckets and multiples of 8 of the other
            sizes).
        scan: the kernel (``SCANS``): the vmapped ``vc_makespan`` with completion times by
            ``"window"`` (dispatch-order scan), ``"levels"`` (one scan step per DAG level) or
            ``"straight"`` (the levels as one straight-line program), or ``"batched"``
            (default): ``score.vcbatch``, the allocations as the trailing contiguous axis. Same
            numbers up to float32 summation order (experiments/bench_vcontention.py measures
            all four; at m = 8, D = 5 batched is the fastest on the 2-core CPU and, with its
            gathered integrals, on the H200: 1.49e6/s; docs/results.md "Speed").
        packed: ``scan="batched"`` and ``integrals="slices"`` only: the three rate integrals
            as one array with a trailing rate axis (default) or three arrays,
            ``vcbatch.batched_integrals``. block: ``scan="batched"`` only: allocations per
            block of the batch-last layout (``vcbatch.vcb_batch_impl``; default: the whole
            chunk on a CPU, 128 on an accelerator). inline_tables: ``scan="batched"`` only:
            compile this evaluator's own program with its tables as constants (about 25%
            faster on the CPU, experiments/bench_vcontention.py; one compilation per
            evaluator, for scoring many allocations of one cut) instead of the shared program
            that takes the tables as arguments (one compilation per lane structure).
        level_unroll: ``scan="batched"`` only: DAG levels per loop iteration of its level
            scans (``vcbatch.batched_start_completion``; default 2).
        integrals: ``scan="batched"`` only: the form of the overlap integrals,
            ``vcbatch.INTEGRALS`` (``vcbatch.batched_integrals``): ``"slices"`` (default on a
            CPU for plans of at most ``vcontention.GATHER_MIN_TRIPLES`` triples, and wherever
            ``packed`` is given) or ``"gather"`` (default elsewhere; on an accelerator:
            on the H200 1.49e6 allocations/s against 9.0e5/s for the slices, m = 8, D = 5,
            on the 2-core CPU it runs 2.3x and 5.1x slower than the slices in chunks of 64 and
            256 at m = 8, D = 5, as fast at m = 4, D = 3; docs/results.md "Speed").
            ``packed`` applies to the slices form only (``self.packed`` is None with the gather).
        reuse: the caller scores many grid points of this structure in one process (a sweep's
            worker keeping to a family of stages and microbatches, ``app.searchrun``), so the
            slices form's tracing and compilation are paid once and its faster calls pay them
            back: the default form on a CPU is then the slices up to
            ``vcontention.GATHER_MIN_TRIPLES_REUSED`` triples instead of
            ``GATHER_MIN_TRIPLES``. No effect where ``integrals`` is given.
        pad_small: pad a batch smaller than ``chunk`` to the full chunk (``run_in_chunks``):
            one compiled shape per lane structure instead of one per batch-size bucket (8,
            16, 32, 64; a compilation costs 0.7-1.4 s on the CPU). Default: True on a CPU for
            task DAGs of at most ``PAD_SMALL_MAX_TASKS`` tasks, else False (measured on
            frontier-study grid points, docs/results.md "Speed": 1.3-2.0x
            less CPU per point for GPT-OSS DAGs of 192-720 tasks, 14% more for Llama's
            960-task DAG, whose padded calls cost 5.5 ms instead of 1.0; same records).
        workers: threads running chunks concurrently (default 2 on a CPU: the compiled kernel
            uses about one core, measured 1.8x on the 2-core machine; 1 on an accelerator).
    """

    cache: str = "lru"
    ref_alloc: Sequence[int] | None = None
    iters: int = 4
    damping: float = 0.5
    dtype: Any = jnp.float32
    chunk: int | None = None
    pad_lanes: int | None = None
    pad_positions: int | None = None
    pad_levels: int | None = None
    pad_width: int | None = None
    pad_preds: int | None = None
    pad_segments: int | None = None
    pad_tasks: int | None = None
    pad_window: int | None = None
    scan: str | None = None
    workers: int | None = None
    packed: bool | None = None
    block: int | None = None
    inline_tables: bool = False
    level_unroll: int | None = None
    pad_small: bool | None = None
    integrals: str | None = None
    reuse: bool = False
