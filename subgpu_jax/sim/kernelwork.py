"""``KernelWork``: the work of one kernel on one pool as the contention rate model
(``sim.contention``) and the event simulator (``sim.eventsim``) see it.

Units: SMs, FLOP, bytes, bytes/s, µs.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["KernelWork"]


@dataclass(frozen=True)
class KernelWork:
    """The work of one kernel on one pool, as the rate model sees it.

    Attributes:
        sms: p_u = the SMs the op reaches on the pool (``kernelcost.op_cost``: min(pool SMs,
            ctas), wave-quantised for tensor-core GEMMs) (SMs).
        flops: FLOP; rate_full: full-GPU FLOP/s (x the decode GEMM efficiency);
            power: pi_u = min(1, g p_u / N).
        obj_bytes: weight + activation + KV bytes (all HBM when the cache is off).
        reread_per_flop: operand re-read bytes per FLOP (L2 traffic paced by compute).
        peak_Bps: HBM ceiling of the kernel (read or copy, the static model's rule).
        comm_bytes: NVLink payload (bytes); comm: True for a collective.
        static_us: isolated duration (µs): ``StaticDurationModel.kernel_time_us``, or the
            measured time when the model carries a calibration that has this kernel.
        fixed_us: extra latency after the launch overhead during which the kernel holds its SMs
            but moves no work (µs): the analytical launches of its other device kernels, their
            minimum kernel time and GEMM wave latency (``kernelcost.op_cost``), or the
            calibration's solved value.
        scale: factor applied to the kernel's work counters (FLOP, bytes, payload) at activation
            (calibration; 1 otherwise).
        window_B_per_sm: bytes in flight each of this kernel's SMs keeps outstanding (bytes);
            its concurrency is c_u = min(p_u * window_B_per_sm, cap, remaining miss bytes), and
            co-running kernels share HBM in proportion to c_u. Default: the model's
            ``inflight_per_sm_B`` (x ``Hardware.vector_inflight_ratio`` for CUDA-core kernels);
            a calibration sets it per kernel and pool (kernel-aware
            contention, docs/fidelity.md).
        extra_hbm_bytes: HBM bytes moved on top of the kernel's own objects (the collective
            proxy's payload traffic, ``ContentionModel.proxy_collectives``; 0 otherwise).
    """

    sms: float
    flops: float
    rate_full: float
    power: float
    obj_bytes: float
    reread_per_flop: float
    peak_Bps: float
    comm_bytes: float
    comm: bool
    static_us: float
    fixed_us: float = 0.0
    scale: float = 1.0
    window_B_per_sm: float = 32768.0
    extra_hbm_bytes: float = 0.0
