"""Analytical cost terms of one graph op on a pool of SMs, without any measurement of that op
(the uncalibrated model of docs/fidelity.md §6).

One graph op (``graph.Kernel``) is not one device kernel: the PyTorch workload of this repository
(``hw_runtime/gpu/kernels.py``) launches several (RoPE + KV append: 9 as PyTorch chains, 1 as the
fused Triton kernel). Which, and how GEMMs are planned, is the hardware's kernel profile
(``KERNEL_PROFILES``: ``torch`` = analytic-v2, ``fused`` = analytic-v3, the default; ``fused``
adds the pool-planned GEMM and the per-SM scale loss, ``op_cost``). Its isolated time on a pool
of p SMs is

    t(u, p) = n_u * launch + n_u * min_kernel + waves_u(p) * gemm_wave
              + max(FLOPs / (rate_u * p_u / N), bytes / BW(r_u * p_u), comm)      [µs]

* n_u = ``device_kernels(u, profile)``, the device kernels one launch of the op issues
  (``DEVICE_KERNELS``, ``DEVICE_KERNELS_FUSED``);
* launch = ``Hardware.launch_us``, the cost of one kernel launch inside a CUDA graph (measured);
* min_kernel = ``Hardware.min_kernel_us``, the time a real device kernel holds its SMs beyond its
  launch even when it moves almost nothing (memory latency, tail);
* tensor-core GEMMs (``is_gemm``): the grid is planned for the whole GPU (cuBLAS sizes split-K and
  persistent grids by the device's SM count, which a green context does not change), T =
  ``Hardware.gemm_grid_ctas`` CTAs, so on p SMs it runs waves = ceil(T / p) waves and reaches
  p_u = T / waves SMs' worth of throughput (wave quantisation: 64 and 96 SMs both take 2 waves);
  each wave adds ``Hardware.gemm_wave_us`` (pipeline fill and epilogue) and the FLOP rate is
  ``Hardware.flops_rate`` x ``Hardware.decode_gemm_efficiency``;
* CUDA-core kernels (``tensor=False``: norms, elementwise, gathers, collectives' local work) keep
  r = ``Hardware.vector_inflight_ratio`` of a copy kernel's bytes in flight per SM, so alone they
  reach the copy curve's bandwidth at r x p SMs (BW = ``Hardware.mem_bandwidth``), and beside
  other pools they get a share of HBM in proportion to what they keep in flight (the contention
  model's window, ``sim.contention.KernelWork.window_B_per_sm``); decode attention and GEMMs keep
  r = 1;
* p_u = min(p, ctas) for every non-GEMM op;
* kernels whose op kind is not a decode-graph op (``modelled``: synthetic kernels, probes) keep
  the plain roofline: one launch, p_u = min(p, ctas), no other term.

With these terms a latency-bound op (top-k: 4 device kernels, 34 KB of logits) costs the same on
16 SMs as on 132, as measured, and a GEMM on 80 SMs costs as much as on 64.

Hand-derived examples on the H200 with analytic-v2 (``H200:analytic-v2``; launch 1.199 µs,
min_kernel 1.301 µs, wave 1.078 µs, T = 128, decode GEMM efficiency 0.8899, r = 0.2549):

* llama-3.1-70b TP8 MLP up-projection at G = 512, one microbatch (M = 512, N = 7168, K = 8192,
  bf16: 60.13 GFLOP, 129.5 MB moved; 3 device kernels: mm, SiLU, mul). On 64 SMs: waves =
  ceil(128/64) = 2, p_u = 64, rate = 989e12 x 0.8106 x 0.8899 = 713.4 TFLOP/s, compute =
  60.13e9 / (713.4e12 x 64/132) = 173.8 µs > memory 129.5e6 / 3.92e12 = 33.0 µs, so t = 3 x 1.199
  + 3 x 1.301 + 2 x 1.078 + 173.8 = 183.5 µs (measured 175.1). On 80 SMs: also 2 waves, p_u = 64,
  the same 183.5 µs (measured 172.7); on 132 SMs: 1 wave, p_u = 128: 95.5 µs (measured 94.5).
* gpt-oss-120b top-k at G = 2048 (4 device kernels, 2 CTAs, 57.3 kFLOP on CUDA cores, 34.8 KB):
  compute 57344 / (61.8e12 x 2/132) = 0.06 µs, memory 34816 B / BW(0.2549 x 2 SMs) = 34816 /
  41.1e9 = 0.85 µs, t = 4 x (1.199 + 1.301) + 0.85 = 10.85 µs on every pool (measured 15.3).

The constants are fitted on the isolated kernel tables only (``fit_analytic``);
``tests/test_kernelcost.py`` recomputes the fit from the committed tables.

Units: µs, SMs, bytes, FLOP.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import MappingProxyType
from typing import Iterable, Mapping

import numpy as np

__all__ = ["ANALYTIC_MODEL", "ANALYTIC_MODELS", "analytic_model_of", "KERNEL_PROFILES",
           "KernelProfile", "DEVICE_KERNELS_FUSED", "FIT_WEIGHTS", "DEVICE_KERNELS",
           "device_kernels", "is_gemm", "OpCost", "op_cost", "fit_analytic", "FIT_PARAMS",
           "modelled"]

#: Name and version of the uncalibrated duration model (recorded by simulations and searches so
#: that results of different model versions are told apart). v1: launch 2 µs per op, no wave
#: quantisation; v2: wave quantisation, PyTorch elementwise chains (kernel profile ``torch``;
#: ``--hardware H200:analytic-v2``); v3, the default: the runtime's default kernels (profile
#: ``fused``: fused Triton kernels, pool-tuned GEMMs). docs/fidelity.md §6, docs/verdicts.md.
ANALYTIC_MODEL = "analytic-v3"

#: Device kernels (kernels, memcpys, memsets) one launch of each graph op issues in this
#: repository's PyTorch workload (``hw_runtime/gpu/kernels.py``), as counted by torch.profiler in
#: the committed fit data (docs/fidelity.md §1 and §6: ``fitdata_*.json``, ``activity_counts``;
#: most frequent value over 5 workloads and m = 1, 2, 4). Keys are ``op`` or ``op/category``:
#:
#: * ``rmsnorm`` 2: ``F.rms_norm`` + the copy into the output buffer;
#: * ``qkv`` 2: one cuBLAS GEMM and its split-K reduction (measured 1 on some shapes, 2 on most);
#: * ``o_proj``, ``mlp_down``, ``lm_head``, MLA projections 1: one cuBLAS GEMM;
#: * ``rope_kv`` 9: four elementwise kernels each for q and k (mul, addcmul, mul, addcmul) and the
#:   V append copy;
#: * ``attn`` 2: the fused attention kernel and the copy (or sink scale) into the output (3 when
#:   the attention backend splits the KV sequence);
#: * ``allreduce/out_residual`` 6: the virtual collective's payload copy (2), residual add,
#:   RMSNorm + copy, spin to the link time; ``residual_norm`` 3 (the same without the collective);
#: * ``allreduce/combine`` 4: payload copy (2), residual add, spin; ``residual`` 1;
#: * ``router`` 3: GEMM (with its split-K reduction) and the bias add / copy;
#: * ``topk`` 4: top-k (2 kernels), softmax, copy;
#: * ``dispatch`` 6: payload copy, index gather, spin and the copies around them;
#: * ``expert_up`` 9: batched GEMM and the clamped SwiGLU's elementwise kernels;
#: * ``expert_down`` 2: batched GEMM (+ reduction);
#: * ``combine`` 7: payload copy, two gathers, dtype cast, batched weighted sum, spin;
#: * ``mlp_up`` 3: GEMM, SiLU, multiply;
#: * head: ``final_norm`` 2 (as ``rmsnorm``), ``sample`` 2 and ``embed`` 1 (assumptions, not
#:   measured).
DEVICE_KERNELS: Mapping[str, int] = MappingProxyType({
    "rmsnorm": 2, "qkv": 2, "rope_kv": 9, "attn": 2, "o_proj": 1,
    "allreduce/out_residual": 6, "residual_norm": 3, "allreduce/combine": 4, "residual": 1,
    "router": 3, "topk": 4, "dispatch": 6, "expert_up": 9, "expert_down": 2, "combine": 7,
    "mlp_up": 3, "mlp_down": 1, "mla_down": 1, "mla_q_up": 1, "mla_v_up": 1,
    "final_norm": 2, "lm_head": 1, "sample": 2, "embed": 1,
})


#: Device kernels one launch of each graph op issues under the runtime's defaults
#: (``elementwise="auto"``: the Triton kernels of ``hw_runtime/gpu/fused.py``; ``gemm="tuned"``),
#: as counted by torch.profiler in the committed fit data of that runtime
#: (docs/fidelity.md §6: ``fused/fitdata_*.json``, ``activity_counts``; most frequent
#: value over 7 workloads of 2 families and m = 1, 2, 4). Where they differ from
#: ``DEVICE_KERNELS``: ``rmsnorm`` 1 and ``rope_kv`` 1 (one Triton kernel each), ``qkv`` 1 (the
#: tuned GEMM without split-K), ``allreduce/out_residual`` 4 (payload copy, the fused residual
#: add + RMSNorm, spin), ``mlp_up`` 2 (GEMM, fused SiLU x mul), ``expert_up`` 3 (batched GEMM,
#: fused clamped SwiGLU). Not in that fit data (read from the runtime's code, not measured):
#: ``residual_norm`` 1 (``fused.add_rmsnorm_``), ``final_norm`` 1 (``fused.rmsnorm_``).
DEVICE_KERNELS_FUSED: Mapping[str, int] = MappingProxyType({
    **DEVICE_KERNELS, "rmsnorm": 1, "qkv": 1, "rope_kv": 1, "allreduce/out_residual": 4,
    "residual_norm": 1, "mlp_up": 2, "expert_up": 3, "final_norm": 1,
})


@dataclass(frozen=True)
class KernelProfile:
    """How the runtime launches each graph op, as the uncalibrated model sees it.

    Attributes:
        name: registry key (``KERNEL_PROFILES``).
        model: the uncalibrated model version this profile defines (``ANALYTIC_MODELS``).
        counts: device kernels per op (keys ``op`` or ``op/category``, as ``DEVICE_KERNELS``).
        gemm_tuned: True when each GEMM is launched with the faster of a grid planned for the
            whole GPU and one planned for its pool (``hw_runtime.gpu.blas`` policy ``tuned``);
            False when every grid is planned for the whole GPU (wave quantisation only).
        fused_ops: ops run as one fused (Triton) kernel: they keep
            ``Hardware.fused_inflight_ratio`` of a copy kernel's bytes in flight per SM instead of
            ``Hardware.vector_inflight_ratio``; ``residual`` (one vectorised PyTorch add, no
            chain) streams as they do.
    """

    name: str
    model: str
    counts: Mapping[str, int]
    gemm_tuned: bool
    fused_ops: frozenset

    def kernels(self, k) -> int:
        """Device kernels one launch of graph op ``k`` issues (1 for an op kind the table does
        not list, e.g. synthetic kernels)."""
        return int(self.counts.get(f"{k.op}/{k.category}", self.counts.get(k.op, 1)))


#: The kernel profiles, by name (``Hardware.kernel_profile``): ``torch`` is the runtime with
#: ``--elementwise torch --gemm stock`` (the fit data under ``hw_fidelity/``), ``fused`` its
#: defaults (the fit data under ``hw_fidelity/fused/``).
KERNEL_PROFILES: Mapping[str, KernelProfile] = MappingProxyType({
    "torch": KernelProfile("torch", "analytic-v2", DEVICE_KERNELS, gemm_tuned=False,
                           fused_ops=frozenset()),
    "fused": KernelProfile("fused", "analytic-v3", DEVICE_KERNELS_FUSED, gemm_tuned=True,
                           fused_ops=frozenset({"rmsnorm", "rope_kv", "residual_norm",
                                                "final_norm", "residual"})),
})


#: Uncalibrated model versions -> the kernel profile each is built on.
ANALYTIC_MODELS: Mapping[str, str] = MappingProxyType({p.model: p.name
                                                      for p in KERNEL_PROFILES.values()})


def analytic_model_of(hw) -> str:
    """The uncalibrated model version a ``Hardware`` carries (its ``kernel_profile``'s)."""
    return KERNEL_PROFILES[hw.kernel_profile].model


_OPS = frozenset(key.split("/")[0] for key in DEVICE_KERNELS)


def device_kernels(k, profile: str) -> int:
    """Device kernels one launch of graph op ``k`` issues under kernel profile ``profile``
    (``KERNEL_PROFILES``; 1 for an op kind the table does not list, e.g. synthetic kernels).

    Raises:
        KeyError: an unknown profile."""
    return KERNEL_PROFILES[profile].kernels(k)


def modelled(k) -> bool:
    """True when ``k``'s op kind is one of the decode graph's (a key, or the op of a key, of
    ``DEVICE_KERNELS``); other kernels (synthetic kernels, microbenchmark probes) keep the plain
    roofline of ``graph.StaticDurationModel``: one launch, no minimum kernel time, no waves."""
    return k.op in _OPS


def is_gemm(k) -> bool:
    """True for a tensor-core GEMM (every ``tensor`` op except decode attention)."""
    return bool(k.tensor) and k.op != "attn"


@dataclass(frozen=True)
class OpCost:
    """The analytical terms of one op on pools of ``sms`` SMs (arrays of the shape of ``sms``).

    Attributes:
        sms: p_u, SMs' worth of throughput the op reaches (<= pool; wave-quantised for GEMMs).
        waves: GEMM waves ceil(T / p) (1 for other ops).
        fixed_us: µs beyond the first launch during which the op holds its SMs but moves no work:
            (n_u - 1) x launch + n_u x min_kernel + waves x gemm_wave.
        rate_scale: factor on ``Hardware.flops_rate`` (decode GEMM efficiency, or 1).
        inflight_scale: factor on the bytes in flight per SM (``Hardware.vector_inflight_ratio``
            for CUDA-core kernels, else 1): the op reaches BW(inflight_scale x sms).
        kernels: n_u.
    """

    sms: np.ndarray
    waves: np.ndarray
    fixed_us: np.ndarray
    rate_scale: float
    inflight_scale: float
    kernels: int


def op_cost(k, hw, sms) -> OpCost:
    """``OpCost`` of graph op ``k`` on pools of ``sms`` SMs (array-like, each >= 1) of ``hw``.

    Raises:
        ValueError: a pool smaller than 1 SM.
    """
    p = np.asarray(sms, dtype=float)
    if np.any(p < 1):
        raise ValueError("sms must be >= 1 for every pool")
    if not modelled(k):  # a synthetic kernel or probe: the plain roofline (one launch)
        pu = np.minimum(p, float(k.ctas))
        z = np.zeros_like(p)
        return OpCost(sms=pu, waves=z + 1.0, fixed_us=z, rate_scale=1.0, inflight_scale=1.0,
                      kernels=1)
    prof = KERNEL_PROFILES[hw.kernel_profile]
    n = prof.kernels(k)
    if is_gemm(k) and int(hw.gemm_grid_ctas) > 0:
        T = float(hw.gemm_grid_ctas)
        waves = np.ceil(T / p)
        pu = T / waves
        rs, bs = float(hw.decode_gemm_efficiency), 1.0
        if prof.gemm_tuned:
            # tuned: a grid planned for the pool (one wave over p SMs at pool_gemm_efficiency of
            # the rate) wherever it reaches more throughput than the grid of T CTAs; on the whole
            # GPU the library's own plan is the one for its pool (hw_runtime.gpu.blas)
            own = p * float(hw.pool_gemm_efficiency) > pu
            waves = np.where(own, 1.0, waves)
            pu = np.where(own, p * float(hw.pool_gemm_efficiency), pu)
        # per-SM GEMM throughput falls as the pool grows (tails, shared L2 and HBM; fitted;
        # below 1/2 so that p x (1 - loss x p/N) still grows up to the whole GPU)
        pu = pu * (1.0 - float(hw.gemm_scale_loss) * p / float(hw.num_sms))
        wave_us = waves * float(hw.gemm_wave_us)
    else:
        waves = np.ones_like(p)
        pu = np.minimum(p, float(k.ctas))
        rs = float(hw.decode_gemm_efficiency) if k.tensor and k.op != "attn" else 1.0
        bs = 1.0 if k.tensor else float(hw.fused_inflight_ratio if k.op in prof.fused_ops
                                        else hw.vector_inflight_ratio)
        wave_us = 0.0 * p
    fixed = (n - 1) * float(hw.launch_us) + n * float(hw.min_kernel_us) + wave_us
    return OpCost(sms=pu, waves=waves, fixed_us=fixed, rate_scale=rs, inflight_scale=bs,
                  kernels=n)


#: The fitted constants of ``fit_analytic`` and the ``Hardware`` fields they set.
FIT_PARAMS: tuple[str, ...] = ("min_kernel_us", "decode_gemm_efficiency", "vector_inflight_ratio",
                               "gemm_wave_us", "pool_gemm_efficiency", "fused_inflight_ratio",
                               "gemm_scale_loss")

#: Bounds of ``FIT_PARAMS`` in ``fit_analytic`` (lower, upper), in the same order.
_FIT_BOUNDS = ([0.0, 0.01, 0.01, 0.0, 0.01, 0.01, 0.0], [20.0, 1.5, 1.5, 20.0, 1.5, 1.5, 0.45])


#: Sample weightings of ``fit_analytic``: ``uniform`` (every op x pool sample alike, the v2 fit)
#: or ``time`` (each sample's log error weighted by sqrt(t / mean t): a step's makespan is a sum
#: of kernel times, so a 900 µs attention counts more than a 2 µs RoPE).
FIT_WEIGHTS: tuple[str, ...] = ("uniform", "time")


def fit_analytic(samples: Iterable[tuple], hw, model_cls, grids: Iterable[int] = (128, 132),
                 weight: str = "time", params: Iterable[str] | None = None) -> dict:
    """Least-squares fit of the analytical model's free constants on isolated kernel times.

    Minimises sum over samples of log(t_model / t_measured)^2 (``scipy.optimize.least_squares``;
    bounds: times 0..20 µs, efficiencies 0.01..1.5) over ``FIT_PARAMS`` (those the kernel
    profile ``hw.kernel_profile`` uses: without pool-tuned GEMMs or fused ops their constants
    stay at ``hw``'s), with ``hw.launch_us`` fixed (a measurement) and the GEMM grid T chosen
    among ``grids`` (the one with the lowest cost). The model is ``graph.StaticDurationModel``
    on ``hw`` with the candidate constants.

    Args:
        samples: ``(kernel, pool_sms, measured_us)`` triples: every op of the fit data alone on a
            pool (one triple per distinct op and pool).
        hw: the ``Hardware`` whose other constants are kept.
        model_cls: the duration model class, ``graph.StaticDurationModel`` (passed in: this
            module is imported by ``graph``).
        grids: candidate ``gemm_grid_ctas`` values (CTAs).
        weight: a ``FIT_WEIGHTS`` entry (default ``time``).
        params: the constants to fit (a subset of ``FIT_PARAMS``; default all that the
            profile uses); the others keep ``hw``'s values.

    Returns:
        ``{"params": {field: value}, "gemm_grid_ctas": T, "median_abs_error": ...,
        "rms_log_error": ..., "n": samples, "per_op": {op: median signed error}}``.

    Raises:
        ValueError: no samples, a measured time that is not positive, or an unknown weight.
    """
    import dataclasses

    from scipy.optimize import least_squares

    StaticDurationModel = model_cls
    S = list(samples)
    if not S:
        raise ValueError("samples must not be empty")
    if any(not (float(t) > 0) for _, _, t in S):
        raise ValueError("samples: every measured time must be > 0 µs")
    if weight not in FIT_WEIGHTS:
        raise ValueError(f"weight must be one of {', '.join(FIT_WEIGHTS)}, got {weight!r}")
    tm = np.array([float(t) for _, _, t in S])
    meas = np.log(tm)
    wts = np.sqrt(tm / tm.mean()) if weight == "time" else np.ones_like(tm)
    prof = KERNEL_PROFILES[hw.kernel_profile]
    want = FIT_PARAMS if params is None else tuple(params)
    bad = [f for f in want if f not in FIT_PARAMS]
    if bad:
        raise ValueError(f"params must be among {', '.join(FIT_PARAMS)}, got {bad}")
    free = [f for f in FIT_PARAMS if f in want
            and not (f == "pool_gemm_efficiency" and not prof.gemm_tuned)
            and not (f == "fused_inflight_ratio" and not prof.fused_ops)]
    lo = [_FIT_BOUNDS[0][FIT_PARAMS.index(f)] for f in free]
    hi = [_FIT_BOUNDS[1][FIT_PARAMS.index(f)] for f in free]
    scale = [1.0 if f.endswith("_us") else 0.1 for f in free]
    best = None
    for T in grids:
        def resid(x, T=T):
            h = dataclasses.replace(hw, gemm_grid_ctas=int(T), **dict(zip(free, x)))
            sd = StaticDurationModel(h)
            return wts * (np.array([math.log(float(sd.kernel_time_us(k, p)))
                                    for k, p, _ in S]) - meas)
        x0 = [min(max(float(getattr(hw, f)), a), b) for f, a, b in zip(free, lo, hi)]
        r = least_squares(resid, x0, bounds=(lo, hi), x_scale=scale)
        if best is None or r.cost < best[1].cost:
            best = (int(T), r, resid)
    T, r, resid = best
    e = resid(r.x) / wts
    per: dict = {}
    for (k, _, _), v in zip(S, e):
        per.setdefault(k.op if k.op != "allreduce" else f"allreduce/{k.category}", []).append(v)
    params = {f: float(getattr(hw, f)) for f in FIT_PARAMS}
    params.update({f: float(v) for f, v in zip(free, r.x)})
    return {"params": params, "fitted": free, "gemm_grid_ctas": T, "profile": prof.name,
            "weight": weight,
            "median_abs_error": float(np.median(np.abs(np.expm1(e)))),
            "rms_log_error": float(np.sqrt(np.mean(e ** 2))), "n": len(S),
            "per_op": {o: float(np.median(np.expm1(v))) for o, v in sorted(per.items())}}
