"""Contention (rate) model of docs/method.md §3: how fast each running kernel progresses, given every
other kernel running at the same instant.

A running kernel u on a stage of p SMs uses p_u = min(p, ctas_u) SMs and carries three work
counters that progress concurrently; it finishes when all are zero (plus its launch overhead,
paid first, and the collective setup latency, paid before its payload moves):

* compute (FLOP): rate = R_u * pi_u * s_pow, with R_u the kernel's full-GPU rate (the same as
  ``graph.StaticDurationModel``: ``Hardware.flops_rate(dtype)`` for tensor work, bf16/16 for
  CUDA-core work), pi_u = min(1, g * p_u / N) its share of the chip's compute power (linear in SMs,
  g = ``compute_gain``), s_pow = 1 / max(1, sum pi) when the running kernels together ask for more
  than the whole chip (power/clock cap: a full-GPU GEMM runs ~11% slower per SM than one on a
  small pool, measured).
* data (bytes moved through L2: hits, HBM misses, and for tensor kernels the operand re-reads of a
  tiled GEMM, ``reread_bytes``): its bytes in flight c_u = min(p_u * ``inflight_per_sm_B``,
  ``inflight_max_B``, remaining miss bytes) select, summed over all running kernels, the HBM
  bandwidth from the measured response curve (``Hardware.bw_curve_x/y`` in units of "SMs of a copy
  kernel", scaled by the concurrency-weighted read/copy ceiling ``hbm_read_Bps``/``hbm_copy_Bps``).
  That bandwidth is shared in proportion to c_u (water-filling: a kernel never gets more than it can
  use); every kernel is capped by the issue bandwidth of its SMs, p_u * ``issue_Bps_per_sm``.
  L2 bandwidth (``Hardware.l2_Bps``) is consumed by hits (1 byte per byte), by HBM traffic
  (``miss_l2_cost`` bytes per byte: the fill plus the access) and by operand re-reads paced by the
  compute counter; when the demand exceeds it, every consumer is scaled by the same factor
  (a FIFO-served port gives each client a share proportional to its offered load).
* network (bytes): after ``Hardware.comm_setup_us``, the payload shares ``Hardware.nvlink_Bps``
  equally with the other collectives moving payload.

With one kernel alone, cache off and ``compute_gain = 1`` this is exactly
``StaticDurationModel`` for every kernel whose re-read L2 traffic does not saturate L2 and whose
bytes exceed its in-flight window (then it is at most about one memory latency slower: Little's
law). ``ContentionModel.off()`` makes every kernel run at its isolated static duration, the mode
in which the event simulator equals the max-plus evaluator.

Units: bytes, bytes/s, FLOP, FLOP/s; times in µs at the API edge.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass, fields
from typing import ClassVar, Any, Callable

import numpy as np

from subgpu_jax.model.graph import Kernel, StaticDurationModel
from subgpu_jax.model.hardware import Hardware
from subgpu_jax.sim.kernelwork import KernelWork
from subgpu_jax.sim.solvecache import WORKS
from subgpu_jax.sim.worksolve import kernel_work, lone_static_scale

__all__ = ["ContentionModel", "BoundModel", "KernelWork", "RunningKernel", "H200_GEMM_PER_SM_TFLOPS",
           "LoneMakespan", "UNCALIBRATED_LATENCY_LOAD_GAIN", "uncalibrated_model_id",
           "POOL_SHARING"]

#: ``(kernel, pool_sms, hw, model, scale, fixed_us) -> makespan µs`` of one kernel alone.
LoneMakespan = Callable[..., float]  # (kernel, pool_sms, hw, model, scale, fixed_us[, window]) -> µs

#: Per-SM bf16 GEMM throughput (TFLOP/s per SM) measured on green-context pools of an H200
#: (tests/data/h200_green_context_probe.csv: 1.0995e12 FLOP / mm_ms / granted SMs) at the
#: pool sizes below the chip's power cap (16, 32, 64, 72 SMs).
H200_GEMM_PER_SM_TFLOPS: dict[int, float] = {
    16: 1.0995e12 / 9.972e-3 / 16 / 1e12,
    32: 1.0995e12 / 5.044e-3 / 32 / 1e12,
    64: 1.0995e12 / 2.573e-3 / 64 / 1e12,
    72: 1.0995e12 / 2.287e-3 / 72 / 1e12,
}
_H200_FULL_PER_SM = 1.0995e12 / 1.3715e-3 / 132 / 1e12  # 6.07 TFLOP/s per SM on the whole GPU
_GAIN = float(np.mean(list(H200_GEMM_PER_SM_TFLOPS.values())) / _H200_FULL_PER_SM)  # ~1.114


#: The uncalibrated model's loaded-latency dilation (``ContentionModel.latency_load_gain``):
#: fitted on the H200's co-run matrix only (108 pairs of six kernel classes,
#: docs/verdicts.md "The co-run fix"; grid 0-8, mean |log ratio| of
#: slowdowns 0.158 -> 0.104), then checked on 50 pipelined runs never used in the fit (median
#: predicted / measured speedup 1.136 -> 1.004, wrong signs 13 -> 3):
#: ``experiments/latency_dilation_fit.py``; docs/verdicts.md "The co-run fix" names the digest.
UNCALIBRATED_LATENCY_LOAD_GAIN: float = 1.5


#: The rules by which the kernels active on the lanes (streams) of one pool share its SMs
#: (``ContentionModel.pool_sharing``; ``EventSimulator`` dispatches each to its function):
#: "tail" (the default, ``simstate.share_pool_tail``), "fifo" (``simstate.share_pool_fifo``),
#: "fair" (``simstate.share_pool``).
POOL_SHARING: tuple[str, ...] = ("tail", "fifo", "fair")


def uncalibrated_model_id(hw=None, model: "ContentionModel | None" = None) -> str:
    """The name of the uncalibrated model that predicts: ``hw``'s duration model version (default
    ``kernelcost.ANALYTIC_MODEL``) and what ``model`` (default ``ContentionModel()``) adds: its
    co-run gain, lone-GEMM rule and lanes rule (named unless ``"fifo"``, the rule before
    ``"tail"``, so each rule's digests apply to it alone), or "without contention". Error figures and verdict bands
    apply only where measured for this exact name."""
    from subgpu_jax.model.kernelcost import ANALYTIC_MODEL, analytic_model_of

    v = ANALYTIC_MODEL if hw is None else analytic_model_of(hw)
    if hw is not None and getattr(hw, "own_constants", ""):
        v = f"{v} with the {hw.name}'s {hw.own_constants}"
    m = ContentionModel() if model is None else model.replace(calibration=None)
    if m.isolated:
        return f"{v} without contention"
    lone = ", GEMMs alone at their static time" if m.lone_static else ""
    lanes = "" if m.pool_sharing == "fifo" else (   # the model before "tail" keeps its name
        f", lanes of a pool sharing it {m.pool_sharing!r}"
        + (f" with theta {m.tail_weight:g}" if m.pool_sharing == "tail" else ""))
    return f"{v} (co-run memory-latency gain {m.latency_gain:g}{lone}{lanes})"


@dataclass(frozen=True)
class ContentionModel:
    """Parameters of the rate model (all floats >= 0 unless stated; every one has a source).

    Attributes:
        isolated: True = no contention at all: each kernel takes its isolated static duration
            ``StaticDurationModel.kernel_time_us`` (what ``off()`` returns). Default False.
        inflight_per_sm_B: bytes in flight one SM of a streaming kernel keeps outstanding
            (32 KiB). Source: Little's law on the measured whole-GPU copy, 4245 GB/s x ~1 µs loaded
            latency / 132 SMs = 32 KB (latency: assumption). The response curve is indexed in
            units of this per-SM window, so its value only matters relative to kernels' remaining
            miss bytes (the demand cap). > 0.
        inflight_max_B: hardware limit on one kernel's bytes in flight; ``None`` = the whole GPU's
            window (num_sms x inflight_per_sm_B), where the measured curve saturates. > 0.
        demand_cap: cap each kernel's bytes in flight by its remaining HBM bytes (Little's law: a
            kernel cannot have more in flight than it still has to move). Default True.
        issue_ratio: per-SM issue bandwidth as a multiple of the whole-GPU read bandwidth per SM
            (``hbm_read_Bps / num_sms``): 3.2 -> 112 GB/s per H200 SM, i.e. 64 B/clk at ~1.75 GHz
            (assumption), above the 80-88 GB/s per SM the measured copy reaches on an 8-SM pool
            (the curve's steepest part), so it never binds a lone streaming kernel. > 0.
        miss_l2_cost: L2 bandwidth consumed per HBM byte in units of a hit byte: 2 by
            construction (a read miss is an L2 fill plus the access; a write is the access plus
            the write-back), raised to 2.5 to fit the measured co-run probe (GEMM on 64 SMs
            beside a copy on 68: 25% slowdown; the model gives 28% in steady state). >= 1.
        tile_edge: effective output-tile edge of tensor-core kernels; operand re-read traffic
            through L2 = dtype_bytes / tile_edge per FLOP (minus the object bytes already
            counted), paced by the compute counter. 136: the smallest round value for which the
            measured full-GPU bf16 GEMM (801.7 TFLOP/s) is not L2-bound under
            ``Hardware.l2_Bps`` = 12 TB/s (needs >= 134; cuBLAS mixes 128x128 and 128x256
            tiles, so an effective edge between 128 and 170 is plausible). 0 disables re-reads.
        compute_gain: per-SM compute rate on a partial pool relative to ``flops_rate / num_sms``
            (1.114: mean measured GEMM TFLOP/s per SM at 16-72 SMs over the whole-GPU figure,
            ``H200_GEMM_PER_SM_TFLOPS``); the chip total stays capped at ``flops_rate``
            (power/clock limit). 1.0 gives the linear static model.
        calibration: a ``calibration.Calibration`` (measured per-kernel time tables) or None.
            With it, every measured kernel alone on a pool of p SMs takes its measured time
            (interpolated in 1/p): ``BoundModel.work`` adds a fixed latency phase after the launch
            (ops that are launch-bound chains of small CUDA kernels) or scales the kernel's work
            counters down (kernels faster than the analytical model); co-running kernels still
            share HBM/L2/compute through the rate model. Take the GPU (its measured bandwidth
            curve) and the L2 policy from the same ``Calibration.bind(hw)``
            (``score.timer.EventTimer.of`` does). Isolated mode uses the measured times directly.

        kernel_aware: with a calibration, each measured kernel gets its own bytes in flight per
            SM (``KernelWork.window_B_per_sm``) solved from its isolated time on each pool, so
            co-running kernels share HBM in proportion to what each keeps in flight
            (``sim.worksolve``, the kernel-aware solve; docs/fidelity.md). False = the first rule
            (one global window; a fixed latency or a work scale). Default True.
        saturating_window_gain: sigma >= 1, the factor on the window of a kernel that reaches
            its HBM ceiling alone (it keeps more in flight than the least that saturates HBM).
            Fitted on the measured co-run matrix (``sim.fit.fit_corun``); 1.0 = not fitted.
        saturation_ratio: a calibrated kernel whose isolated time is within this factor of its
            time with unlimited bytes in flight counts as HBM-saturating (>= 1; 1.25: the copy
            kernel on 64 of the H200's SMs reaches 87% of the whole-GPU copy bandwidth,
            shared/calibration).
        gemm_window_gain: the same factor for tensor-core GEMMs (compute-limited ones, and those
            reaching >= 35% of their HBM ceiling alone). Fitted on the co-run matrix; 1.0 = not
            fitted.
        launch_us_per_activity: delta >= 0, µs of a calibrated memory-latency-limited kernel's
            time that is launch overhead per device activity (kernels, memcpys) inside a CUDA
            graph: it holds the SMs, moves no bytes and does not slow under contention. Fitted on
            the co-run matrix; 0.0 = not fitted.
        pool_sharing: how the kernels active on the k lanes (streams) of one pool share its SMs:
            ``"tail"`` (default since 2026-12-06: ``simstate.share_pool_tail``, launch order, but
            an op of several device kernels launched first shares the pool with the later
            kernels by remaining alone time, the later ones weighted ``tail_weight``),
            ``"fifo"`` (launch order, ``simstate.share_pool_fifo``; measured on the H200,
            docs/fidelity.md §2; the default before) or ``"fair"`` (equal shares,
            ``simstate.share_pool``, the rule before that). "tail" was fitted leaving one family
            out on two-lane microbenchmarks of 5 families, H200 and H100
            (experiments/corun_lanes_fit.py): mean |log| error 0.436 (fifo) -> 0.382, 4 of 5
            left-out families better; checked once on held-out pipelined rows of both GPUs
            (docs/verdicts.md): lower speedup error, fewer wrong verdicts. ``POOL_SHARING``.
        tail_weight: theta >= 0 of ``pool_sharing="tail"`` (0 = "fifo"); 0.5: the all-family
            fit of corun_lanes_fit.py (its leave-one-family-out fits: 0.4-0.6). Ignored by the
            other rules.
        link_time: True (default) charges each collective its link time (setup + payload /
            NVLink, the network counter; with a calibration, the measured wait of the
            runtime's virtual collective). False is the control of a deployment whose
            collectives cost nothing beyond their endpoint copy (``subgpu run --collectives
            none``): the network payload and the setup latency are dropped, the HBM copy stays.
            The decomposition of a predicted gain into hidden communication and overlapped
            compute/memory work compares the two (``sim.modes``). Ignored when ``isolated``.
        proxy_collectives: True charges each collective the HBM traffic of the engine's
            collective kernel (``subgpu run --collectives proxy``,
            ``model.collective.proxy_plan``): 2 x its payload on top of its local work, moved
            while its link time runs (``worksolve.proxied_work``). False (default): the local work
            only, the link time as ``link_time`` says (``--collectives sleep`` / ``none``).
        lone_static: True (default) scales each uncalibrated tensor-core GEMM's work per pool
            so that alone, cache off, it takes its static time (the analytical model fitted on
            isolated kernel tables), as a calibration does with measured times. Without it
            the L2 port makes a lone decode GEMM on the whole GPU up to 1.34x its static time
            and ``compute_gain`` one on a partial pool 0.92-1.00x, in SubGPU's favour
            (docs/verdicts.md). Co-runs still come from the rates.

    Raises:
        ValueError: a parameter negative, NaN, zero where a rate is needed, or of the wrong type
            (one line naming the field).
    """

    #: not counted in the size of a cached value that references it (``model.lru.nbytes_of``)
    SHARED_BY_CACHED_VALUES: ClassVar[bool] = True

    isolated: bool = False
    inflight_per_sm_B: float = 32768.0
    inflight_max_B: float | None = None
    demand_cap: bool = True
    issue_ratio: float = 3.2
    miss_l2_cost: float = 2.5
    tile_edge: float = 136.0
    compute_gain: float = _GAIN
    calibration: Any = None
    kernel_aware: bool = True
    saturating_window_gain: float = 1.0
    gemm_window_gain: float = 1.0
    launch_us_per_activity: float = 0.0
    saturation_ratio: float = 1.25
    pool_sharing: str = "tail"
    tail_weight: float = 0.5
    link_time: bool = True
    proxy_collectives: bool = False
    latency_load_gain: float | None = None
    lone_static: bool = True

    def __post_init__(self) -> None:
        if self.calibration is not None:
            from subgpu_jax.model.calibration import Calibration
            if not isinstance(self.calibration, Calibration):
                raise ValueError(f"contention.calibration must be a calibration.Calibration or "
                                 f"None, got {type(self.calibration).__name__}")
        if self.pool_sharing not in POOL_SHARING:
            raise ValueError(f"contention.pool_sharing must be 'fifo', 'fair' or 'tail', got "
                             f"{self.pool_sharing!r}")
        for f in ("isolated", "demand_cap", "kernel_aware", "link_time", "lone_static",
                  "proxy_collectives"):
            if not isinstance(getattr(self, f), (bool, np.bool_)):
                raise ValueError(f"contention.{f} must be a bool, got {getattr(self, f)!r}")
        if self.proxy_collectives and not self.link_time:
            raise ValueError("contention.proxy_collectives needs link_time=True (the proxy is "
                             "paced to the link time; --collectives proxy, not none)")
        for f in ("inflight_per_sm_B", "issue_ratio", "miss_l2_cost", "tile_edge",
                  "compute_gain", "inflight_max_B", "saturating_window_gain", "gemm_window_gain",
                  "launch_us_per_activity", "saturation_ratio", "latency_load_gain",
                  "tail_weight"):
            v = getattr(self, f)
            if v is None and f in ("inflight_max_B", "latency_load_gain"):
                continue
            if v is None:
                raise ValueError(f"contention.{f} is missing (None); it must be a number")
            if isinstance(v, (bool, np.bool_, str)) or not isinstance(v, (int, float, np.number)):
                raise ValueError(f"contention.{f} must be a number, got {v!r}")
            x = float(v)
            if math.isnan(x) or math.isinf(x):
                raise ValueError(f"contention.{f} must be finite, got {v!r}")
            if f == "tile_edge":
                if x < 0:
                    raise ValueError(f"contention.tile_edge must be >= 0 (0 = no re-reads), "
                                     f"got {v!r}")
            elif f in ("miss_l2_cost", "saturating_window_gain", "gemm_window_gain",
                       "saturation_ratio"):
                if x < 1:
                    raise ValueError(f"contention.{f} must be >= 1, got {v!r}")
            elif f in ("launch_us_per_activity", "latency_load_gain", "tail_weight"):
                if x < 0:
                    raise ValueError(f"contention.{f} must be >= 0, got {v!r}")
            elif x <= 0:
                raise ValueError(f"contention.{f} must be > 0 (it sets a rate), got {v!r}")

    @property
    def latency_gain(self) -> float:
        """The loaded-latency dilation in force (``latency_load_gain``, or its default for the
        model's kind: ``UNCALIBRATED_LATENCY_LOAD_GAIN`` uncalibrated, 0 calibrated)."""
        if self.latency_load_gain is not None:
            return float(self.latency_load_gain)
        return UNCALIBRATED_LATENCY_LOAD_GAIN if self.calibration is None else 0.0

    @classmethod
    def off(cls) -> "ContentionModel":
        """No contention: every kernel runs for its isolated static duration."""
        return cls(isolated=True)

    @classmethod
    def static_consistent(cls) -> "ContentionModel":
        """Contention on, but a lone kernel reproduces ``StaticDurationModel`` (linear compute,
        no operand re-read traffic, no demand cap)."""
        return cls(compute_gain=1.0, tile_edge=0.0, demand_cap=False)

    def replace(self, **kw) -> "ContentionModel":
        """A copy with some fields changed (validated)."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        unknown = set(kw) - set(d)
        if unknown:
            raise ValueError(f"contention: unknown field(s) {sorted(unknown)}; allowed: "
                             f"{', '.join(d)}")
        d.update(kw)
        return ContentionModel(**d)

    def bind(self, hw: Hardware, lone_makespan: LoneMakespan | None = None) -> "BoundModel":
        """Precompute the hardware-dependent constants (see ``BoundModel``; ``lone_makespan``
        is the lone-kernel simulation a calibrated model needs, ``eventsim.lone_makespan``)."""
        return BoundModel(self, hw, lone_makespan)


class BoundModel:
    """A ``ContentionModel`` bound to one ``Hardware``: constants and the rate function.

    Attributes:
        model, hw: the inputs. N: SMs. curve_x, curve_y: response curve knots (lists).
        window: bytes in flight of one SM (``inflight_per_sm_B``); cmax: per-kernel limit.
        issue: issue bytes/s per SM. l2: L2 bytes/s. nvlink: bytes/s. launch_us, setup_us: µs.
        lone_makespan: ``(kernel, pool_sms, hw, model, scale, fixed_us) -> µs``, the event
            simulation of one kernel alone on a pool (``eventsim.lone_makespan``), injected so
            that this rate model does not import the simulator; needed only when the model
            carries a calibration (``work`` raises ValueError without it).
    """

    def __init__(self, model: ContentionModel, hw: Hardware,
                 lone_makespan: LoneMakespan | None = None) -> None:
        if not isinstance(model, ContentionModel):
            raise ValueError(f"model must be a ContentionModel, got {type(model).__name__}")
        if not isinstance(hw, Hardware):
            raise ValueError(f"hw must be a Hardware, got {type(hw).__name__}")
        self.model, self.hw = model, hw
        self.lone_makespan = lone_makespan
        # the model's parameters but its calibration, one tuple the lone-solve keys share
        self.model_key = tuple(getattr(model, f.name) for f in fields(model)
                               if f.name != "calibration")
        self.N = float(hw.num_sms)
        self.curve_x = [float(v) for v in hw.bw_curve_x]
        self.curve_y = [float(v) for v in hw.bw_curve_y]
        self.window = float(model.inflight_per_sm_B)
        self.cmax = (float(model.inflight_max_B) if model.inflight_max_B is not None
                     else self.window * self.N)
        self.full_window = self.window * self.N
        self.issue = model.issue_ratio * hw.hbm_read_Bps / hw.num_sms
        self.l2 = float(hw.l2_Bps)
        self.nvlink = float(hw.nvlink_Bps)
        self.launch_us = float(hw.launch_us)
        self.setup_us = float(hw.comm_setup_us)
        self.gain = float(model.compute_gain)
        self.kappa = float(model.miss_l2_cost)
        self.demand_cap = bool(model.demand_cap)
        self.static = StaticDurationModel(hw)

    # ------------------------------------------------------------------ per-kernel work
    def work(self, k: Kernel, pool_sms: int) -> KernelWork:
        """``KernelWork`` of kernel ``k`` on a pool of ``pool_sms`` SMs
        (``sim.worksolve.kernel_work``; memoised in ``sim.solvecache.WORKS`` by the model's
        parameters, calibration, hardware, kernel object and pool).

        Raises:
            ValueError: ``pool_sms`` < 1, or negative/NaN work in the kernel (names the field).
        """
        cal = self.model.calibration
        key = (self.model_key, id(cal), id(self.hw), id(k), pool_sms)
        hit = WORKS.get(key)
        if hit is not None:
            return hit[0]
        w = kernel_work(self, k, pool_sms)
        WORKS.put(key, (w, k, self.hw, cal))   # the objects whose ids are in the key stay alive
        return w

    def lone_static_scale(self, k: Kernel, pool_sms: int, w: KernelWork) -> tuple[float, float]:
        """``(scale, fixed_us)`` of uncalibrated GEMM ``k`` alone on ``pool_sms`` SMs at its static
        time (``sim.worksolve.lone_static_scale``)."""
        return lone_static_scale(self, k, pool_sms, w)

    # ------------------------------------------------------------------ the curve
    def bw_fraction_of_window(self, c: float) -> float:
        """Fraction (0..1) of the whole-GPU HBM bandwidth reached with ``c`` bytes in flight
        (piecewise-linear in the measured curve, x = c / (window * N), clipped to the last knot)."""
        x = c / self.full_window
        xs, ys = self.curve_x, self.curve_y
        if x >= xs[-1]:
            return ys[-1]
        if x <= xs[0]:
            return ys[0]
        i = bisect_right(xs, x)
        x0, x1 = xs[i - 1], xs[i]
        y0, y1 = ys[i - 1], ys[i]
        return y0 + (y1 - y0) * (x - x0) / (x1 - x0)

    # ------------------------------------------------------------------ the rates
    def rates(self, sms, rate_full, power, flops_left, data_left, miss_frac, peak, reread,
              comm_on, win=None):
        """Instantaneous rates of the running kernels (lists of equal length n, plain floats).

        Args:
            sms: p_u (SMs). rate_full: full-GPU FLOP/s. power: pi_u.
            flops_left: remaining FLOP (0 = compute done).
            data_left: remaining bytes of the data counter (0 = done).
            miss_frac: fraction of the data counter's bytes that go to HBM (0..1).
            peak: HBM ceiling of each kernel (bytes/s). reread: operand bytes per FLOP.
            comm_on: True while the kernel's network payload is moving.
            win: bytes in flight per SM of each kernel (``KernelWork.window_B_per_sm``; None =
                the model's ``inflight_per_sm_B`` for all).

        Returns:
            ``(r_comp, r_data, r_hbm, r_net)``: lists of FLOP/s, data bytes/s, HBM bytes/s and
            network bytes/s (0 for counters that are done or not moving).
        """
        n = len(sms)
        ws = [self.window] * n if win is None else win
        act = [RunningKernel(i, sms[i], rate_full[i], power[i], ws[i], flops_left[i],
                             data_left[i], miss_frac[i], peak[i], reread[i], comm_on[i])
               for i in range(n)]
        self.rates_of(act)
        return ([u.rc for u in act], [u.rd for u in act], [u.rh for u in act],
                [u.rn for u in act])

    def rates_of(self, act) -> tuple[float, float, bool, bool]:
        """Rates of the running kernels ``act``, written into them (the event simulator's
        ``eventsim.Lane`` objects, or ``RunningKernel``).

        Each element carries the inputs ``sms`` (p_u), ``rate_full`` (FLOP/s), ``power`` (pi_u),
        ``window`` (bytes in flight per SM, ``KernelWork.window_B_per_sm``), ``F`` (FLOP left),
        ``D`` (data bytes left), ``phi`` (HBM fraction of the data bytes), ``peak`` (HBM
        ceiling, bytes/s), ``reread`` (operand bytes per FLOP), ``comm_on`` (network payload
        moving) and ``index`` (a unique int: the tie-break of the water-filling order); this
        sets ``rc`` (FLOP/s), ``rd`` (data bytes/s), ``rh`` (HBM bytes/s) and ``rn`` (network
        bytes/s). A kernel's bytes in flight are c_u = min(p_u * window_u, cap, remaining miss
        bytes), with cap = ``inflight_max_B`` or, without one, window_u * N.

        Returns:
            ``(hbm_total_Bps, curve_Bps, power_capped, l2_scaled)``: the HBM bandwidth in use,
            the bandwidth the response curve allows at the current concurrency, whether the
            compute power cap binds, whether L2 bandwidth binds.
        """
        if not act:
            return 0.0, 0.0, False, False
        issue, dcap, N = self.issue, self.demand_cap, self.N
        cmax0, capped = self.cmax, self.model.inflight_max_B is not None
        ptot = ctot = pk = 0.0
        concs = []
        ncomm = 0
        for u in act:
            if u.F > 0:
                ptot += u.power
            if u.comm_on:
                ncomm += 1
            u.rh = 0.0
            d = u.D
            if d > 0:
                f = u.phi
                if f > 0:
                    c = u.sms * u.window
                    cmax = cmax0 if capped else u.window * N
                    if c > cmax:
                        c = cmax
                    if dcap:
                        m = d * f
                        if m < c:
                            c = m
                    # (water-filling key: HBM rate it can use per byte in flight, tie-break)
                    concs.append((f * u.sms * issue / c, u.index, u, c))
                    ctot += c
                    pk += c * u.peak
        cs = 1.0 / ptot if ptot > 1.0 else 1.0
        bw = 0.0
        if concs:
            # fraction of the response curve at the total concurrency (inlined for speed)
            x = ctot / self.full_window
            xs, ys = self.curve_x, self.curve_y
            if x >= xs[-1]:
                frac = ys[-1]
            else:
                i = bisect_right(xs, x)
                x0 = xs[i - 1]
                frac = ys[i - 1] + (ys[i] - ys[i - 1]) * (x - x0) / (xs[i] - x0)
            bw = frac * (pk / ctot)
            if len(concs) == 1:
                u = concs[0][2]
                want = u.phi * u.sms * issue
                u.rh = want if want < bw else bw
            else:
                # water-filling in proportion to concurrency, capped by usable HBM rate
                concs.sort()
                left_bw, left_w = bw, ctot
                for j, (_, _, u, c) in enumerate(concs):
                    want = u.phi * u.sms * issue
                    share = left_bw * c / left_w
                    if want <= share:
                        u.rh = want
                        left_bw -= want
                        left_w -= c
                    else:
                        for _, _, u2, c2 in concs[j:]:
                            u2.rh = left_bw * c2 / left_w
                        break
        k1 = self.kappa - 1.0
        l2 = hsum = 0.0
        nv = self.nvlink / ncomm if ncomm else 0.0
        for u in act:
            rc = u.rc = u.rate_full * u.power * cs if u.F > 0 else 0.0
            f = u.phi
            if u.D > 0:
                r = u.sms * issue
                if f > 0 and u.rh < r * f:
                    r = u.rh / f
                u.rd = r
                l2 += r * (1.0 + k1 * f)
            else:
                r = u.rd = 0.0
            if u.reread > 0:
                l2 += u.reread * rc
            h = u.rh = r * f
            hsum += h
            u.rn = nv if ncomm and u.comm_on else 0.0
        scaled = l2 > self.l2
        if scaled:
            sc = self.l2 / l2
            hsum = 0.0
            for u in act:
                u.rd *= sc
                if u.reread > 0:
                    u.rc *= sc
                h = u.rh = u.rd * u.phi
                hsum += h
        return hsum, bw, ptot > 1.0, scaled


class RunningKernel:
    """A running kernel as ``BoundModel.rates_of`` sees it (inputs and output rates; see there).

    Args:
        index: unique tie-break id. sms, rate_full, power, window, F, D, phi, peak, reread,
            comm_on: the rate model's inputs (SMs, FLOP/s, pi, bytes per SM, FLOP, bytes,
            fraction, bytes/s, bytes per FLOP, bool).
    """

    __slots__ = ("index", "sms", "rate_full", "power", "window", "F", "D", "phi", "peak",
                 "reread", "comm_on", "rc", "rd", "rh", "rn")

    def __init__(self, index, sms, rate_full, power, window, F, D, phi, peak, reread,
                 comm_on) -> None:
        self.index, self.sms, self.rate_full, self.power = index, sms, rate_full, power
        self.window, self.F, self.D, self.phi = window, F, D, phi
        self.peak, self.reread, self.comm_on = peak, reread, comm_on
        self.rc = self.rd = self.rh = self.rn = 0.0
