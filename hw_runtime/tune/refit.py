"""Refit the model from what ``subgpu tune`` measured: a calibration file
(``subgpu-calibration/1``, the format of ``subgpu calibrate``) whose kernel tables move the
model's kernel durations to the ones traced on the GPU.

Data: for every traced run (the temporal baseline and green candidates; multistream runs have
no pools of their own and are left out), the measured mean duration of each kernel per
(kernel key, pool SMs) (``summarize_trace``), and the base model's mean duration of the same
kernels in the same run (``Predictor.kernel_times``: co-running under the event simulator, alone
under the static evaluator).

Rule: the refitted time of kernel u alone on p SMs is the base model's, t_base(u, p), times the
ratio r(u, p) = measured / predicted duration in the traced runs (geometric mean over the runs
that ran u on p SMs). A pool that was not traced takes r interpolated linearly in 1/p between the
traced pools of that kernel (the nearest one outside them); a kernel never traced keeps r = 1.
The table holds the base pools (the starting calibration's, or 8..128 and the whole GPU) and the
traced ones. So the whole-GPU times come from the temporal run (kernels alone: exact) and the
pool times carry what the GPU did beside the other stage: the measured co-run slowdowns are
folded into the per-pool times, since the calibration format has no other place the simulators
read. The factors themselves are reported in ``meta.tune.corun`` per kernel category:
measured / model in context on pools, the same on the whole GPU alone, and their quotient (the
co-run slowdown the model misses, if its alone-time error does not depend on the pool).

The refit always starts from the base model (the tune's starting calibration or the
uncalibrated model) with every trace so far, so rounds do not compound.

Units: µs, SMs. Errors: ``ValueError`` (one line) when a traced kernel is not in the workload.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Iterable, Mapping, Sequence

import numpy as np

from hw_runtime.tune.spec import Candidate, Predictor
from hw_runtime.gpu import decode_attn, moe_gemm
from hw_runtime.gpu.calibrate import moe_gemm_meta

__all__ = ["summarize_trace", "refit_calibration", "resolved_moe_gemm", "DEFAULT_POOLS"]


def resolved_moe_gemm(spec, G: int) -> str | None:
    """The expert GEMMs the runtime ran for ``spec`` at global batch ``G`` on a GPU with Triton
    (``moe_gemm.resolve``: ``auto`` is Triton up to ``AUTO_MAX_ROWS`` routed slots per expert);
    None for a dense model."""
    if not spec.arch.is_moe:
        return None
    if spec.moe_gemm != "auto":
        return spec.moe_gemm
    from hw_runtime.gpu.workload import workload_shapes
    from subgpu_jax.model.graph import build_graph

    return moe_gemm.auto_choice(workload_shapes(build_graph(spec.arch, spec.deployment(G),
                                                            1)).cap)

#: Pools (SMs) of the table of a kernel the base calibration does not hold (the whole GPU is
#: added): the pools ``subgpu calibrate`` measures.
DEFAULT_POOLS: tuple[int, ...] = (8, 16, 32, 64, 96, 128)


def summarize_trace(intervals: Sequence[Mapping], graph, cfg, num_sms: int
                    ) -> list[list]:
    """Mean measured duration per (kernel key, pool) of one traced replay.

    Args:
        intervals: ``map_activities`` output (``op``, ``stage``, ``start_us``, ``end_us``).
        graph: the region graph the plan ran (``Workload.graph(m)``). cfg: its ``Config``
            (D = 1: the temporal run, pool = ``num_sms``).

    Returns:
        ``[[kernel key, pool SMs, mean µs, launches], ...]`` sorted (JSON-ready).

    Raises:
        ValueError: an interval naming an op outside the graph or a stage outside ``cfg``.
    """
    from subgpu_jax.model.calibration import kernel_key

    pools = [int(num_sms)] if cfg.D == 1 else [int(p) for p in cfg.alloc]
    acc: dict = defaultdict(list)
    for iv in intervals:
        op, st = int(iv["op"]), int(iv["stage"])
        if not 0 <= op < graph.n or not 0 <= st < len(pools):
            raise ValueError(f"trace: op {op} / stage {st} is not in the region graph "
                             f"({graph.n} kernels, {len(pools)} stages)")
        acc[(kernel_key(graph.kernels[op]), pools[st])].append(
            float(iv["end_us"]) - float(iv["start_us"]))
    return sorted([k, p, float(np.mean(v)), len(v)] for (k, p), v in acc.items())


def _kernels_of(pred: Predictor, batches: Iterable[int], ms: Iterable[int]) -> dict:
    """kernel key -> a Kernel, over every region kind of the forward passes the searches and
    measurements use (batches x microbatch counts)."""
    from subgpu_jax.model.calibration import kernel_key
    from subgpu_jax.model.graph import build_forward

    out: dict = {}
    for G in batches:
        dep = pred.spec.deployment(G)
        R = dep.requests_per_gpu
        for m in sorted(set(ms) | {1}):
            if m < 1 or R % m:
                continue
            for g, _ in build_forward(pred.spec.arch, dep, m).runs:
                for k in g.kernels:
                    out.setdefault(kernel_key(k), k)
    return out


def _ratio_fn(points: Mapping[int, float]):
    """p -> ratio, linear in 1/p between the given pools, constant outside."""
    ps = sorted(points)
    xs = np.array([1.0 / p for p in ps[::-1]])
    ys = np.array([points[p] for p in ps[::-1]])
    return lambda p: float(np.interp(1.0 / p, xs, ys))


def refit_calibration(base: Predictor, traced: Sequence[tuple[Candidate, Sequence]],
                      batches: Sequence[int], microbatches: Sequence[int],
                      elementwise: str | None = None) -> tuple[dict, dict]:
    """The refitted calibration (module docstring).

    Args:
        base: the base model (``Predictor`` with the starting calibration or None).
        traced: ``(candidate, summarize_trace rows)`` of every traced run (temporal or green).
        batches, microbatches: the batches and microbatch counts the refitted model must cover
            (every kernel of their forward passes gets a table).
        elementwise: the runtime's resolved elementwise choice (``meta.elementwise``).

    Returns:
        ``(calibration dict, info)``: the JSON object ``Calibration.from_dict`` accepts, and
        ``{"kernels_refit", "pools_traced", "ratios": {key: {pool: r}}, "corun": {category:
        {...}}}``.
    """
    from subgpu_jax.model.calibration import DEPLOY_FIELDS, FORMAT

    spec, hw = base.spec, base.spec.hw
    logs: dict = defaultdict(list)          # (key, pool) -> log ratios
    cats: dict = defaultdict(lambda: {"pool": [], "whole": []})
    for cand, rows in traced:
        if cand.mode == "multistream":
            continue
        pred = base.kernel_times(cand)
        for key, pool, meas, _n in rows:
            p = pred.get((key, int(pool)))
            if p is None or not p > 0 or not meas > 0:
                continue
            lr = math.log(float(meas) / p)
            logs[(key, int(pool))].append(lr)
            cat = key.split("|")[1]
            cats[cat]["whole" if cand.mode == "temporal" else "pool"].append(lr)
    ratios: dict = defaultdict(dict)
    for (key, pool), v in logs.items():
        ratios[key][pool] = math.exp(float(np.mean(v)))
    kernels = _kernels_of(base, batches, microbatches)
    unknown = sorted(set(ratios) - set(kernels))
    if unknown:
        raise ValueError(f"refit: traced kernel {unknown[0]!r} is not in the workload")
    cal = base.calibration
    entries = []
    for key, kern in kernels.items():
        if cal is not None and key in cal.tables:
            pools = {int(p) for p in cal.tables[key][0]}
        else:
            pools = set(DEFAULT_POOLS) | {hw.num_sms}
        pools = sorted(p for p in pools | set(ratios.get(key, {})) if 1 <= p <= hw.num_sms)
        rf = _ratio_fn(ratios[key]) if key in ratios else (lambda p: 1.0)
        times = {str(p): base.alone_us(kern, p) * rf(p) for p in pools}
        e = {"key": key, "name": (cal.names.get(key, kern.name) if cal is not None
                                  else kern.name), "times_us": times}
        if cal is not None and key in cal.activity_counts:
            e["activities"] = int(cal.activity_counts[key])
        entries.append(e)
    if cal is not None:
        bw = {"sms": [float(s) for s in cal.bw_sms], "copy_GBps": [b / 1e9 for b in cal.bw_Bps]}
    else:
        pts = [(x * hw.num_sms, y * hw.hbm_copy_Bps / 1e9)
               for x, y in zip(hw.bw_curve_x, hw.bw_curve_y) if x > 0]
        bw = {"sms": [p[0] for p in pts], "copy_GBps": [p[1] for p in pts]}

    def gm(v):
        return math.exp(float(np.mean(v))) if v else None

    corun = {}
    for cat, d in sorted(cats.items()):
        a, b = gm(d["pool"]), gm(d["whole"])
        corun[cat] = {"measured_over_model_on_pools": a, "measured_over_model_whole_gpu": b,
                      "corun_factor_missed": (a / b) if a is not None and b is not None
                      else None}
    dep = spec.deployment(batches[0])
    meta = {"source": "subgpu tune (refit from traced runs, hw_runtime/tune/refit.py)",
            "base": getattr(cal, "meta", {}).get("path", "calibration") if cal is not None
            else "uncalibrated model", "gemm": spec.gemm,
            "elementwise": elementwise or spec.elementwise,
            # what the runtime resolves the policies to on a GPU with Triton
            "attention": (decode_attn.auto_choice(spec.arch.is_mla) if spec.attention == "auto"
                          else spec.attention),
            "moe_gemm": moe_gemm_meta({str(int(G)): resolved_moe_gemm(spec, int(G))
                                       for G in batches}),
            "tune": {"traces": len(traced), "corun": corun,
                     "pools_traced": {k: sorted(v) for k, v in ratios.items()}}}
    out = {"format": FORMAT, "model": spec.arch.name, "hardware": hw.name,
           "num_sms": hw.num_sms, "expert_dtype": spec.arch.expert_dtype,
           "deployment": {f: int(getattr(dep, f)) for f in DEPLOY_FIELDS},
           "global_batches": sorted({int(G) for G in batches}), "kernels": entries,
           "bw_curve": bw, "coruns": list(cal.coruns) if cal is not None else [],
           "meta": meta}
    info = {"kernels_refit": len(ratios), "pools_traced": sum(len(v) for v in ratios.values()),
            "ratios": {k: {str(p): r for p, r in v.items()} for k, v in ratios.items()},
            "corun": corun}
    return out, info
