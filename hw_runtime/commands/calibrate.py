"""``subgpu calibrate --out FILE``: ``hw_runtime.gpu.calibrate.calibrate`` for the workload
options."""

from __future__ import annotations

import json

from hw_runtime.commands.common import gpu_check
from hw_runtime.commands.device import note_preset, resolve_hardware
from hw_runtime.commands.request import KernelSettings
from subgpu_jax.app.store import atomic_write
from subgpu_jax.model.calibration import Calibration
from subgpu_jax.model.checks import out_file

__all__ = ["cmd_calibrate"]


def cmd_calibrate(a) -> int:
    """``subgpu calibrate``: check the options and the output file, resolve ``--hardware``
    (``device.resolve_hardware``: by default this GPU's preset), measure on the local GPU
    (``hw_runtime.gpu.calibrate.calibrate`` with the kernel choices of ``a``, read once as a
    ``request.KernelSettings``), write the calibration to ``--out``; exit code 0.

    Raises:
        ValueError: bad options, an output that cannot be written, no GPU with green
            contexts, no ``--hardware`` on a GPU that is none of the presets, or a measured
            calibration that ``--calibration`` would refuse (one line naming the flag)."""
    from subgpu_jax.app.options import int_list as _int_list
    from subgpu_jax.app.args import resolve_arch_ep
    from subgpu_jax.model.graph import Deployment
    from subgpu_jax.model.hardware import get_hardware
    from subgpu_jax.app.args import given_tp_ep
    from subgpu_jax.app.fit import checked_workload
    from hw_runtime.gpu.workload import hopper_arch

    kernels = KernelSettings.from_args(a, lanes=False)
    # the output first: a folder, a FIFO, a device node, a link or a missing folder is refused
    # before any GPU work (it was found only when the finished calibration was written)
    out_file(a.out, "--out")
    batches = _int_list(a.batches, "batches") if a.batches else [a.batch]
    mbs = _int_list(a.microbatches, "microbatches")
    pools = _int_list(a.pools, "pools")
    if a.reps < 1:
        raise ValueError(f"--reps must be >= 1, got {a.reps}")
    for f, v in (("batches", batches), ("microbatches", mbs), ("pools", pools)):
        if not v or any(x < 1 for x in v):
            raise ValueError(f"--{f} must be positive integers, got {v}")
    arch, ep = resolve_arch_ep(a)
    dep = Deployment(num_gpus=a.gpus, attn_tp=a.tp, attn_dp=a.dp, moe_ep=ep,
                     global_batch=batches[0], input_len=a.input_len, kv_history=a.kv_history)
    hardware = resolve_hardware(a.hardware)   # default: this GPU's preset
    # memory checked with the experts the calibration runs (bf16 on Hopper)
    wl = checked_workload(hopper_arch(arch), dep, get_hardware(hardware),
                          *given_tp_ep(a), kv_flag=False)
    for G in batches:
        import dataclasses
        dataclasses.replace(dep, global_batch=G).validate(wl.arch)
    hw = wl.hw
    for p in pools:
        if p % hw.sm_quantum or p < hw.min_pool_sms or p > hw.sm_budget:
            raise ValueError(f"--pools: {p} SMs is not a valid {hw.name} pool (multiples of "
                             f"{hw.sm_quantum}, {hw.min_pool_sms}..{hw.sm_budget})")
    gpu_check()
    note_preset(hardware)
    from hw_runtime.gpu.calibrate import calibrate
    from hw_runtime.gpu.partition import GreenContextError
    from hw_runtime.gpu.workload import WorkloadMemoryError

    try:
        res = calibrate(hopper_arch(wl.arch), dep, batches, mbs, pools, reps=a.reps,
                        coruns=not a.no_coruns, hardware=hw.name, collectives=a.collectives,
                        **kernels.policies())
    except (WorkloadMemoryError, GreenContextError) as e:
        raise ValueError(str(e)) from None
    try:  # only a file that --calibration loads is written
        Calibration.from_dict(res)
    except ValueError as e:
        why = str(e).removeprefix("calibration: ")
        raise ValueError(f"--out: {a.out} not written, --calibration would refuse it: {why}; "
                         "run subgpu calibrate again") from None
    atomic_write(a.out, json.dumps(res, indent=1), "--out")  # a kill leaves the old file or none
    print(f"wrote {a.out}: {len(res['kernels'])} kernel tables, {len(res['coruns'])} co-runs")
    return 0
