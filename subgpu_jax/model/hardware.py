"""Hardware presets: SM counts, green-context quanta, HBM/L2/NVLink figures and tensor rates.

Every number carries its source. Two kinds of source are used:

* vendor datasheets (NVIDIA H100/H200/B200 product briefs and the DGX B200 datasheet), and
* measurements on one NVIDIA H200 in ``tests/data/`` (2026-11-29), which this module
  embeds verbatim (``H200_COPY_BW_GBPS``) and which ``tests/test_hardware.py`` checks against the
  CSV files whenever they are present beside the checkout.

Units: bandwidths in bytes/s, capacities in bytes, tensor throughput in FLOP/s, times in µs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import ClassVar, Mapping

import numpy as np

from subgpu_jax.model.kernelcost import KERNEL_PROFILES

__all__ = [
    "Hardware",
    "HARDWARE",
    "get_hardware",
    "H200_COPY_BW_GBPS", "H100_COPY_BW_GBPS",
    "DTYPE_BYTES",
]

#: Bytes per element of each datatype the model knows. ``mxfp4`` is 4-bit values plus one 8-bit
#: scale per 32 values (OCP Microscaling spec v1.0): 4.25 bits = 0.53125 bytes per parameter.
DTYPE_BYTES: Mapping[str, float] = MappingProxyType(
    {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "mxfp4": 0.53125, "int32": 4.0}
)

#: Device-to-device copy bandwidth (read + write bytes / time, GB/s) on a green-context pool of the
#: given SM count, measured on one H200 (``tests/data/h200_copy_bandwidth_vs_pool.csv``,
#: 1 GiB bf16 copy, mean of 20 launches). 132 = whole GPU without a green context.
H200_COPY_BW_GBPS: Mapping[int, float] = MappingProxyType(
    {
        8: 645.0, 16: 1200.0, 24: 1734.0, 32: 2222.0, 40: 2664.0, 48: 3061.0, 56: 3393.0,
        64: 3610.0, 72: 3735.0, 80: 3805.0, 88: 3855.0, 96: 3917.0, 104: 4016.0, 112: 4111.0,
        120: 4182.0, 128: 4230.0, 132: 4245.0,
    }
)


#: The H100's copy bandwidth (GB/s) by pool size (SMs): measured by ``subgpu calibrate`` on one
#: NVIDIA H100 80GB HBM3 (2026-12-06; docs/verdicts.md, "The H100's own constants": the
#: calibration's ``bw_curve``, a copy kernel alone on a green-context pool, median of replays).
#: The whole GPU measured 2,987 GB/s, within the spread of the 2,991 at 128 SMs: the table keeps
#: the running maximum (the response never falls with more SMs).
H100_COPY_BW_GBPS: Mapping[int, float] = MappingProxyType(
    {8: 622.7, 16: 1153.2, 32: 2056.3, 64: 2750.0, 96: 2967.5, 128: 2991.0, 132: 2991.0})


def _fraction_curve(table: Mapping[int, float]) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(SM fraction, bandwidth fraction) knots of a copy-bandwidth table: x = pool SMs / 132,
    y = GB/s / the whole GPU's (132 SMs), the origin prepended."""
    sms = np.array(sorted(table), dtype=float)
    bw = np.array([table[int(s)] for s in sms])
    x = np.concatenate([[0.0], sms / 132.0])
    y = np.concatenate([[0.0], bw / table[132]])
    return tuple(float(v) for v in x), tuple(float(v) for v in y)


def _h200_bw_fraction_curve() -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Return the H200 copy-bandwidth response as (SM fraction, bandwidth fraction) knots.

    Derived from ``H200_COPY_BW_GBPS``: x = pool SMs / 132, y = GB/s / 4245 (whole-GPU copy), with
    the origin (0, 0) prepended. Monotone nondecreasing by measurement.
    """
    sms = np.array(sorted(H200_COPY_BW_GBPS), dtype=float)
    bw = np.array([H200_COPY_BW_GBPS[int(s)] for s in sms])
    x = np.concatenate([[0.0], sms / 132.0])
    y = np.concatenate([[0.0], bw / H200_COPY_BW_GBPS[132]])
    return tuple(float(v) for v in x), tuple(float(v) for v in y)


@dataclass(frozen=True)
class Hardware:
    """One GPU model as the simulators see it.

    Attributes:
        name: preset name (``"B200"``, ``"H200"``, ``"H100"``).
        num_sms: streaming multiprocessors on the die (SMs).
        sm_quantum: granularity g of a green-context SM pool (SMs); allocations are multiples.
        min_pool_sms: smallest pool a green context can own (SMs).
        sm_budget: SMs that can be split into aligned pools (the partitionable budget of docs/method.md
            §2/§6); a SubGPU allocation sums to this. Temporal execution uses ``num_sms``.
        hbm_bytes: HBM capacity (bytes) as the device reports it (CUDA ``totalGlobalMem``, what
            ``torch.cuda.get_device_properties().total_memory`` and a serving engine's
            ``gpu_memory_utilization`` budget start from), not the datasheet's round figure.
        hbm_peak_Bps: theoretical HBM bandwidth (bytes/s): the datasheet's, or bus width x
            memory clock x 2 where the device reports less than the datasheet (B200).
        hbm_copy_Bps: achievable whole-GPU copy bandwidth (read+write bytes/s), measured or derated.
        hbm_read_Bps: achievable whole-GPU read-dominated streaming bandwidth (bytes/s).
        l2_bytes: L2 capacity (bytes).
        l2_Bps: L2 bandwidth (bytes/s); an estimate, see the preset's source note.
        tensor_flops: dense tensor-core throughput per datatype (FLOP/s, datasheet, no sparsity).
        gemm_efficiency: fraction of ``tensor_flops`` a well-shaped GEMM reaches (measured on H200).
        nvlink_Bps: NVLink bandwidth per direction per GPU (bytes/s).
        comm_setup_us: fixed latency of one collective (µs); docs/method.md §5's 3 µs virtual-kernel floor.
        launch_us: cost of one device-kernel launch inside a CUDA graph (µs): 200 dependent
            empty kernels on one stream (the event-latency probe, docs/fidelity.md §1). A graph op of several device
            kernels pays it once per kernel (``kernelcost.op_cost``).
        min_kernel_us: time a real device kernel holds its SMs beyond its launch even when it
            moves almost nothing (memory latency, tail), µs; fitted (docs/fidelity.md §6). 0 =
            none (the default of a hand-built ``Hardware``).
        decode_gemm_efficiency: fraction of ``flops_rate`` that decode-shaped tensor-core GEMMs
            reach (small M, grid sized for the whole GPU); fitted. Default 1.
        vector_inflight_ratio: bytes in flight per SM of CUDA-core kernels (norms, elementwise,
            gathers) as a fraction of a copy kernel's: alone on p SMs they reach the copy
            curve's bandwidth at this fraction of p; fitted. Default 1.
        gemm_wave_us: latency of one wave of a tensor-core GEMM's CTAs (pipeline fill,
            epilogue), µs; fitted. Default 0.
        gemm_grid_ctas: CTAs of a tensor-core GEMM's grid, planned for the whole GPU (cuBLAS
            sizes split-K and persistent grids by the device's SM count, which a green context does
            not change): a pool of p SMs runs ceil(T/p) waves. 0 = no wave quantisation (the
            graph's ``Kernel.ctas`` bounds the SMs; the default).
        kernel_profile: how the runtime launches each graph op, a key of
            ``kernelcost.KERNEL_PROFILES``: ``"torch"`` (PyTorch elementwise chains, GEMMs
            planned for the whole GPU: model analytic-v2; the default of a hand-built
            ``Hardware``) or ``"fused"`` (the runtime's defaults: one Triton kernel per
            elementwise op, GEMMs tuned for their pool: analytic-v3, the presets' default).
        pool_gemm_efficiency: under a profile whose GEMMs are tuned for their pool, the fraction
            of the whole-GPU-planned rate a GEMM planned for its pool reaches per SM; fitted.
            Default 1.
        fused_inflight_ratio: ``vector_inflight_ratio`` of the profile's fused (Triton) kernels;
            fitted. Default 1.
        gemm_scale_loss: fraction of a tensor-core GEMM's per-SM throughput lost on the whole GPU
            relative to a very small pool (linear in the pool's share of the SMs: tails, shared
            L2 and HBM); below 1/2, so a GEMM never slows with more SMs; fitted. Default 0.
        min_stage_sms: smallest pool the search gives a stage (SMs) where the runtime cannot run
            a GEMM on the green-context minimum ``min_pool_sms``: 16 on the H100 and the H200.
            Measured: on one H100 no cuBLAS or cuBLASLt launch of any Llama-3.1-8B GEMM (QKV, O,
            gate+up, down at M = 64-128) succeeded on the 8-SM pool of an [8, 120] split (the
            split a 2-stage pipeline makes), every one on the first pool of [16, 112], [24, 104]
            and [32, 96] did (``experiments/hw_small_pool_gemm.py``,
            ``results/hw_verdicts/analytic-v3-tail-plan/diagnosis/small_pool_gemm_h100.json``;
            `subgpu calibrate`, which makes a single pool, [8], did time GEMMs on 8 SMs);
            on the H200 an 8-SM stage holding the QKV GEMM measured 0.448x where 0.912x was
            predicted (docs/verdicts.md) and `subgpu tune` saw 8-SM pools fail at m = 4
            (docs/tune.md). 0 (the default, the B200's: never measured) = ``min_pool_sms``.
            ``stage_min_sms`` is the larger of the two.
        bw_curve_x, bw_curve_y: knots of the HBM bandwidth response: fraction of the whole GPU's
            bandwidth (y) reached by a pool holding a fraction x of the SMs (measured on H200).
        own_constants: what of this GPU was measured on it where other presets carry the
            H200's, in words ("copy-bandwidth curve"; empty: nothing, or the H200 itself); part
            of the uncalibrated model's name
            (``sim.contention.uncalibrated_model_id``), so that error figures and verdict bands
            measured with other constants never apply to it.
        runtime: the GPU runtime (``hw_runtime``: ``subgpu run``, ``calibrate``, ``tune``)
            measures on a GPU of this kind: its green contexts were probed and calibrated on
            one (the H200, ``tests/data/h200_green_context_probe.csv``, 2026-11-29; the H100,
            docs/verdicts.md "The H100's own constants", 2026-12-06) and it runs the experts in
            bf16 (Hopper). False (the default of a hand-built ``Hardware``): the simulator only.
        measured: pipelined runs on a GPU of this kind were measured for this repository (the
            verdict protocol, docs/verdicts.md: the H200's digests and the H100's of
            2026-12-06), so its predictions can be held against measurements. False (the
            B200, a hand-built ``Hardware``): every constant is a datasheet figure or carried
            over from another GPU.
        source: free-text provenance of every number above.

    Raises:
        ValueError: from ``__post_init__`` when a field is out of range (names the field).
    """

    #: not counted in the size of a cached value that references it (``model.lru.nbytes_of``)
    SHARED_BY_CACHED_VALUES: ClassVar[bool] = True

    name: str
    num_sms: int
    sm_quantum: int
    min_pool_sms: int
    sm_budget: int
    hbm_bytes: float
    hbm_peak_Bps: float
    hbm_copy_Bps: float
    hbm_read_Bps: float
    l2_bytes: float
    l2_Bps: float
    tensor_flops: Mapping[str, float]
    gemm_efficiency: float
    nvlink_Bps: float
    comm_setup_us: float
    launch_us: float
    min_kernel_us: float = 0.0
    decode_gemm_efficiency: float = 1.0
    vector_inflight_ratio: float = 1.0
    gemm_wave_us: float = 0.0
    gemm_grid_ctas: int = 0
    kernel_profile: str = "torch"
    pool_gemm_efficiency: float = 1.0
    fused_inflight_ratio: float = 1.0
    gemm_scale_loss: float = 0.0
    min_stage_sms: int = 0
    bw_curve_x: tuple[float, ...] = field(default_factory=lambda: _h200_bw_fraction_curve()[0])
    bw_curve_y: tuple[float, ...] = field(default_factory=lambda: _h200_bw_fraction_curve()[1])
    own_constants: str = ""
    runtime: bool = False
    measured: bool = False
    source: str = ""

    def __post_init__(self) -> None:
        for f in ("num_sms", "sm_quantum", "min_pool_sms", "sm_budget"):
            v = getattr(self, f)
            if not isinstance(v, (int, np.integer)) or v <= 0:
                raise ValueError(f"hardware.{f} must be a positive integer, got {v!r}")
        for f in ("hbm_bytes", "hbm_peak_Bps", "hbm_copy_Bps", "hbm_read_Bps", "l2_bytes",
                  "l2_Bps", "gemm_efficiency", "nvlink_Bps", "launch_us"):
            v = float(getattr(self, f))
            if not np.isfinite(v) or v <= 0:
                raise ValueError(f"hardware.{f} must be a positive finite number, got {v!r}")
        for f in ("min_kernel_us", "gemm_wave_us"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, (int, float, np.number)) \
                    or not np.isfinite(v) or v < 0:
                raise ValueError(f"hardware.{f} must be a finite number >= 0, got {v!r}")
        for f in ("decode_gemm_efficiency", "vector_inflight_ratio", "pool_gemm_efficiency",
                  "fused_inflight_ratio"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, (int, float, np.number)) \
                    or not (0 < v <= 1.5):
                raise ValueError(f"hardware.{f} must be in (0, 1.5], got {v!r}")
        if self.kernel_profile not in KERNEL_PROFILES:
            raise ValueError(f"hardware.kernel_profile must be one of {sorted(KERNEL_PROFILES)}, "
                             f"got {self.kernel_profile!r}")
        v = self.gemm_scale_loss
        if isinstance(v, bool) or not isinstance(v, (int, float, np.number)) or not (0 <= v < 0.5):
            raise ValueError(f"hardware.gemm_scale_loss must be in [0, 0.5), got {v!r}")
        g = self.gemm_grid_ctas
        if isinstance(g, bool) or not isinstance(g, (int, np.integer)) or g < 0:
            raise ValueError(f"hardware.gemm_grid_ctas must be an integer >= 0, got {g!r}")
        for f in ("runtime", "measured"):
            if not isinstance(getattr(self, f), bool):
                raise ValueError(f"hardware.{f} must be True or False, got "
                                 f"{getattr(self, f)!r}")
        if not np.isfinite(self.comm_setup_us) or self.comm_setup_us < 0:
            raise ValueError(f"hardware.comm_setup_us must be >= 0, got {self.comm_setup_us!r}")
        if self.sm_budget > self.num_sms:
            raise ValueError(f"hardware.sm_budget must be <= num_sms={self.num_sms}")
        if self.min_pool_sms % self.sm_quantum or self.sm_budget % self.sm_quantum:
            raise ValueError("hardware.min_pool_sms and sm_budget must be multiples of sm_quantum")
        v = self.min_stage_sms
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0 \
                or v % self.sm_quantum or v > self.sm_budget:
            raise ValueError(f"hardware.min_stage_sms must be 0 or a multiple of sm_quantum="
                             f"{self.sm_quantum} up to sm_budget={self.sm_budget}, got {v!r}")
        if not self.tensor_flops or any(not np.isfinite(v) or v <= 0
                                        for v in self.tensor_flops.values()):
            raise ValueError("hardware.tensor_flops must map datatypes to positive FLOP/s")
        x, y = np.asarray(self.bw_curve_x), np.asarray(self.bw_curve_y)
        if x.shape != y.shape or x.size < 2 or np.any(np.diff(x) <= 0) or np.any(np.diff(y) < 0):
            raise ValueError("hardware.bw_curve_x must increase and bw_curve_y must not decrease")
        object.__setattr__(self, "tensor_flops", MappingProxyType(dict(self.tensor_flops)))

    def __getstate__(self) -> dict:
        """Pickle state (a ``Hardware`` travels to ``app.pool`` worker processes): the fields,
        with the read-only ``tensor_flops`` view as a plain dict (a mappingproxy does not
        pickle)."""
        state = dict(self.__dict__)
        state["tensor_flops"] = dict(state["tensor_flops"])
        return state

    def __setstate__(self, state: dict) -> None:
        """Restore a pickled ``Hardware`` (``tensor_flops`` read-only again)."""
        for k, v in state.items():
            object.__setattr__(self, k, MappingProxyType(dict(v)) if k == "tensor_flops" else v)

    # ------------------------------------------------------------------ derived quantities
    @property
    def stage_min_sms(self) -> int:
        """Smallest pool a stage of the search gets (SMs): the larger of ``min_pool_sms`` (the
        green context's minimum) and ``min_stage_sms`` (the runtime's, where measured)."""
        return max(int(self.min_pool_sms), int(self.min_stage_sms))

    def stages_below_minimum(self, alloc) -> list[int]:
        """The stages of an allocation (SMs per stage) with fewer SMs than ``stage_min_sms``:
        those the search never proposes and ``subgpu run`` refuses on green contexts."""
        return [d for d, p in enumerate(alloc) if p < self.stage_min_sms]

    def even_split_min_sms(self, D: int) -> int:
        """The pool minimum of an even split of the budget into ``D`` stages (the default
        ``--sms`` of ``simulate``/``run``): ``stage_min_sms`` where ``D`` such stages fit the
        budget, else the green context's ``min_pool_sms`` (a configuration the simulator takes
        and ``subgpu run`` refuses)."""
        return self.stage_min_sms if D * self.stage_min_sms <= self.sm_budget \
            else int(self.min_pool_sms)

    def compute_dtype(self, dtype: str) -> str:
        """Return the tensor datatype a kernel with operands of ``dtype`` computes in (str).

        A datatype the tensor cores lack (MXFP4 on Hopper) is dequantised and computed in bf16,
        which is what Hopper MoE kernels do with MXFP4 weights. ``fp32`` maps to ``bf16`` rates
        for the activations' tensor work (the model keeps fp32 only for reductions).

        Raises:
            ValueError: ``dtype`` is not a datatype of ``DTYPE_BYTES``.
        """
        if dtype not in DTYPE_BYTES:
            raise ValueError(f"dtype must be one of {sorted(DTYPE_BYTES)}, got {dtype!r}")
        if dtype in ("fp32", "fp16", "int32"):
            return "bf16"
        if dtype == "mxfp4":
            return "fp4" if "fp4" in self.tensor_flops else "bf16"
        return dtype if dtype in self.tensor_flops else "bf16"

    def flops_rate(self, dtype: str) -> float:
        """Achievable whole-GPU tensor throughput (FLOP/s) for operands of ``dtype``.

        = datasheet dense rate of ``compute_dtype(dtype)`` x ``gemm_efficiency``.
        """
        return float(self.tensor_flops[self.compute_dtype(dtype)]) * self.gemm_efficiency

    def bw_fraction(self, sms: float | np.ndarray) -> np.ndarray:
        """Fraction of the whole-GPU HBM bandwidth a pool of ``sms`` SMs reaches (0..1).

        Piecewise-linear interpolation of the measured response curve in SM fraction; shape of
        ``sms`` is kept. Not a linear share: 12% of the H200's SMs reach 28% of its bandwidth.
        """
        x = np.asarray(sms, dtype=float) / self.num_sms
        return np.interp(x, self.bw_curve_x, self.bw_curve_y)

    def mem_bandwidth(self, sms: float | np.ndarray, read_only: bool = True) -> np.ndarray:
        """Achievable HBM bandwidth (bytes/s) of a kernel running alone on ``sms`` SMs.

        ``read_only`` selects the read-dominated ceiling (``hbm_read_Bps``) instead of the copy
        ceiling (``hbm_copy_Bps``); both are scaled by ``bw_fraction``.
        """
        peak = self.hbm_read_Bps if read_only else self.hbm_copy_Bps
        return self.bw_fraction(sms) * peak


_NOTE_CURVE = ("HBM response curve: H200 copy bandwidth vs pool size, "
               "tests/data/h200_copy_bandwidth_vs_pool.csv, as fractions of SMs and of the "
               "whole-GPU figure; reused in SM fraction for the other GPUs (assumption).")

#: Per-launch cost of one device kernel inside a CUDA graph on the H200 (µs): 200 dependent empty
#: kernels on one stream (docs/fidelity.md §1 and §6: the co-run matrix file
#: ``corun_matrix.json``, ``event_latency.per_kernel_us`` = 1.19904), rounded to 1 ns.
H200_LAUNCH_US = 1.199

#: The uncalibrated model's constants, analytic-v2 (kernel profile ``torch``):
#: fitted on the H200's isolated kernel tables of the runtime with PyTorch chains and stock GEMMs
#: (docs/fidelity.md §6: ``fitdata_*.json``, 976 op x pool times; ``kernelcost.fit_analytic``,
#: least squares on log time, uniform weights, GEMM grid 128 chosen over 132; median |error|
#: 15.5%), 4 digits.
H200_FIT: Mapping[str, float] = MappingProxyType({
    "min_kernel_us": 1.301, "decode_gemm_efficiency": 0.8899, "vector_inflight_ratio": 0.2549,
    "gemm_wave_us": 1.078,
})

#: analytic-v3 (kernel profile ``fused``, the presets' default): fitted on the isolated kernel
#: tables of the runtime's
#: defaults (docs/fidelity.md §6: ``fused/fitdata_*.json``, 7 workloads, Llama-3.1-70B
#: and GPT-OSS, 1,152 op x pool times; least squares on log time weighted by sqrt(time), GEMM
#: grid 128 chosen over 132; median |error| 15.0%), 4 digits. docs/fidelity.md §6.
H200_FIT_V3: Mapping[str, float] = MappingProxyType({
    "min_kernel_us": 2.094, "decode_gemm_efficiency": 0.9154, "vector_inflight_ratio": 0.2034,
    "gemm_wave_us": 2.102, "pool_gemm_efficiency": 1.300, "fused_inflight_ratio": 1.086,
    "gemm_scale_loss": 0.2424,
})

#: Uncalibrated model version -> the ``Hardware`` fields it sets on a preset (``get_hardware``
#: with a ``NAME:VERSION`` spec); the presets are built with the default, analytic-v3.
ANALYTIC_CONSTANTS: Mapping[str, Mapping] = MappingProxyType({
    "analytic-v2": MappingProxyType({"kernel_profile": "torch", **H200_FIT,
                                     # the terms v2 does not have, neutral
                                     "pool_gemm_efficiency": 1.0, "fused_inflight_ratio": 1.0,
                                     "gemm_scale_loss": 0.0}),
    "analytic-v3": MappingProxyType({"kernel_profile": "fused", **H200_FIT_V3}),
})

B200 = Hardware(
    name="B200",
    num_sms=148,
    sm_quantum=2,
    min_pool_sms=2,
    sm_budget=148,
    hbm_bytes=191.5e9,
    hbm_peak_Bps=7.672e12,
    hbm_copy_Bps=7.672e12 * 4245.0 / 4800.0,
    hbm_read_Bps=7.672e12 * 4614.0 / 4800.0,
    l2_bytes=126.5e6,
    l2_Bps=7.672e12 * 2.5,
    tensor_flops={"bf16": 2.25e15, "fp16": 2.25e15, "fp8": 4.5e15, "fp4": 9.0e15},
    gemm_efficiency=801.7 / 989.0,
    nvlink_Bps=900e9,
    comm_setup_us=3.0,
    launch_us=H200_LAUNCH_US,
    **ANALYTIC_CONSTANTS["analytic-v3"],   # the default model version's profile and constants
    gemm_grid_ctas=144,
    source=("Datasheet (NVIDIA DGX B200 datasheet, system specifications table, per GPU = 1/8): "
            "180 GB HBM3e at 8 TB/s; dense BF16 2.25 PFLOP/s, FP8 4.5, FP4 9 (the table's "
            "sparse figures halved); NVLink 5 1.8 TB/s bidirectional = 900 GB/s per direction. "
            "What a B200 reports (device query in github.com/pytorch/ao pull 4002, 2026-03): "
            "178.35 GiB of global memory = 191.5e9 B (the capacity used here), a 7,680-bit "
            "memory bus at 3,996 MHz, so 7,680 / 8 x 3.996e9 x 2 = 7.672 TB/s theoretical (the "
            "peak used here: the datasheet's 8 TB/s assumed an 8,192-bit bus). "
            "148 SMs and L2 126.5 MB: docs/method.md §5 (NVIDIA Blackwell architecture technical "
            "brief). SM quantum 2: the search policy of docs/method.md §5. Carried over from the "
            "H200 measurements (assumptions, no B200 measurement exists in this repository): "
            "achievable copy and read bandwidth as the H200's fractions of its datasheet peak "
            "(4245/4800, 4614/4800) of the 7.672 TB/s, large-GEMM efficiency 801.7/989, the "
            "per-launch cost in a CUDA graph (1.199 µs), the minimum kernel time, decode GEMM efficiency, vector "
            "bytes-in-flight ratio and GEMM wave latency fitted on the H200 (docs/fidelity.md §6), "
            "and the GEMM grid as the same 128/132 share of the SMs (144). L2 bandwidth 2.5x HBM "
            "(assumption, no public figure). " + _NOTE_CURVE),
)

H200 = Hardware(
    name="H200",
    num_sms=132,
    sm_quantum=8,
    min_pool_sms=8,
    min_stage_sms=16,   # no GEMM launched on the 8-SM pool of [8, 120] (the field's docstring)
    sm_budget=128,
    hbm_bytes=150.1e9,
    hbm_peak_Bps=4.8e12,
    hbm_copy_Bps=4245e9,
    hbm_read_Bps=4614e9,
    l2_bytes=60 * 2**20,
    l2_Bps=4.8e12 * 2.5,
    tensor_flops={"bf16": 989e12, "fp16": 989e12, "fp8": 1979e12},
    gemm_efficiency=801.7 / 989.0,
    nvlink_Bps=450e9,
    comm_setup_us=3.0,
    launch_us=H200_LAUNCH_US,
    **ANALYTIC_CONSTANTS["analytic-v3"],   # the default model version's profile and constants
    gemm_grid_ctas=128,
    runtime=True,    # green contexts probed: tests/data/h200_green_context_probe.csv
    measured=True,   # the verdict protocol's digests (docs/verdicts.md)
    source=("NVIDIA H200 product brief: 132 SMs (SXM), 141 GB HBM3e at 4.8 TB/s, dense BF16 989 "
            "TFLOP/s, FP8 1979; the device reports 139.8 GiB = 150.1e9 B of global memory (the "
            "capacity used here; issue 41's hand check of a serving engine's budget); NVLink 4 900 GB/s bidirectional = 450 GB/s per direction. Measured "
            "(tests/data): 60 MiB L2; green-context quantum and minimum 8 SMs, 128 = 16x8 "
            "splittable SMs; copy 4245 GB/s; decode attention reads K/V at 4614 GB/s; 8192^3 bf16 "
            "mm 1.0995e12 FLOP in 1.3715 ms = 801.7 TFLOP/s. L2 bandwidth 2.5x HBM (assumption). "
            "Launch 1.199 µs per device kernel in a CUDA graph (event-latency probe, "
            "corun_matrix.json, docs/fidelity.md §1). Minimum kernel time, decode GEMM "
            "efficiency, vector bytes-in-flight ratio, GEMM wave latency and grid (128 CTAs) "
            "fitted on the isolated kernel tables fitdata_*.json "
            "(analytic-v2; the preset carries analytic-v3's, fitted on fused/fitdata_*.json with two more GEMM terms and a fused-kernel ratio) "
            "(kernelcost.fit_analytic; docs/fidelity.md §6). " + _NOTE_CURVE),
)

H100 = Hardware(
    name="H100",
    num_sms=132,
    sm_quantum=8,
    min_pool_sms=8,
    min_stage_sms=16,   # no GEMM launched on the 8-SM pool of [8, 120] (the field's docstring)
    sm_budget=128,
    hbm_bytes=85_017_493_504.0,
    hbm_peak_Bps=3.35e12,
    hbm_copy_Bps=H100_COPY_BW_GBPS[132] * 1e9,
    hbm_read_Bps=H100_COPY_BW_GBPS[132] * 1e9 * 4614.0 / 4245.0,
    l2_bytes=50e6,
    l2_Bps=3.35e12 * 2.5,
    tensor_flops={"bf16": 989e12, "fp16": 989e12, "fp8": 1979e12},
    gemm_efficiency=801.7 / 989.0,
    nvlink_Bps=450e9,
    comm_setup_us=3.0,
    launch_us=H200_LAUNCH_US,
    **ANALYTIC_CONSTANTS["analytic-v3"],   # the default model version's profile and constants
    gemm_grid_ctas=128,
    bw_curve_x=_fraction_curve(H100_COPY_BW_GBPS)[0],
    bw_curve_y=_fraction_curve(H100_COPY_BW_GBPS)[1],
    own_constants="copy-bandwidth curve",   # measured on an H100: H100_COPY_BW_GBPS
    runtime=True,    # calibrated on one, 2026-12-06 (docs/verdicts.md, "The H100's own constants")
    measured=True,   # its own verdict protocol, 2026-12-06 (docs/verdicts.md)
    source=("Datasheet (NVIDIA H100 Tensor Core GPU datasheet, specifications table, H100 SXM "
            "column): 80 GB HBM3 at 3.35 TB/s (the device reports 85,017,493,504 B of global "
            "memory, the capacity used here: cuDeviceTotalMem on an H100 80GB HBM3, 2026-12-06, "
            "nvidia-smi 81,559 MiB), dense BF16 989 TFLOP/s, FP8 1979 (the table's "
            "sparse figures halved); NVLink 900 GB/s bidirectional = 450 GB/s per direction. "
            "132 SMs and 50 MB L2: NVIDIA H100 Tensor Core GPU architecture whitepaper (H100 SXM5 "
            "configuration). Same die as the H200 (GH100), so quantum/minimum 8 and a 128-SM "
            "budget as measured there. Measured on one H100 80GB HBM3 (2026-12-06, "
            "H100_COPY_BW_GBPS, calibration_h100_qwen25_7b.json): the copy bandwidth on every "
            "pool (2,991 GB/s on the whole GPU, 89% of the datasheet; a 32-SM pool 2,056 GB/s, "
            "69% of it, where the H200's curve gives 52%) and the response curve from it; the "
            "read bandwidth at the H200's measured read/copy ratio (4614/4245). Carried over "
            "from the H200 measurements (assumptions): large-GEMM "
            "efficiency 801.7/989, the per-launch cost in a CUDA graph (1.199 µs), the minimum "
            "kernel time, decode GEMM efficiency, vector bytes-in-flight ratio, GEMM wave latency "
            "and grid (128 CTAs) fitted on the H200 (docs/fidelity.md §6). L2 bandwidth 2.5x HBM "
            "(assumption, no public figure). " + _NOTE_CURVE),
)

#: Presets by name.
HARDWARE: Mapping[str, Hardware] = MappingProxyType({"B200": B200, "H200": H200, "H100": H100})


def get_hardware(name: str) -> Hardware:
    """Return the preset called ``name`` (case-insensitive), optionally with the uncalibrated
    model version after a colon: ``"H200"`` (the default version, analytic-v3) or
    ``"H200:analytic-v2"`` (the preset with that version's constants, ``ANALYTIC_CONSTANTS``;
    its name stays ``"H200"``).

    Raises:
        ValueError: unknown preset or version; the message lists both.
    """
    key, colon, version = str(name).partition(":")
    key = key.upper()
    if key not in HARDWARE or (colon and version.lower() not in ANALYTIC_CONSTANTS):
        raise ValueError(f"hardware must be one of {', '.join(HARDWARE)}, optionally followed "
                         f"by :{' or :'.join(ANALYTIC_CONSTANTS)} (the uncalibrated model "
                         f"version), got {name!r}")
    hw = HARDWARE[key]
    if colon:
        hw = dataclasses.replace(hw, **ANALYTIC_CONSTANTS[version.lower()])
    return hw
