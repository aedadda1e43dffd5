"""The lone-kernel solves are memoised by the kernel's whole work (``model.kernel.work_signature``),
not by a measurement's key (``model.calibration.kernel_key``): a frontier study found the same
deployment's temporal step at two values 4.6e-7 apart, depending on the worker process that
timed it. GPT-OSS 120B's o_proj at TP8 and at TP4 (G = 4,096) share one ``kernel_key`` (same
FLOPs, same HBM bytes, same CTAs) with other weight and write bytes, and the process that solved
one first served that solve to the other.

Oracle: the same step timed in a process state without any memo (the caches cleared) and after
timing the other deployment must be equal bit for bit."""

from __future__ import annotations

from subgpu_jax.model.calibration import kernel_key
from subgpu_jax.model.graph import Deployment, build_forward
from subgpu_jax.model.hardware import get_hardware
from subgpu_jax.model.kernel import work_signature
from subgpu_jax.model.models import get_model
from subgpu_jax.score import poolwork
from subgpu_jax.score.step import time_step
from subgpu_jax.score.timer import EventTimer
from subgpu_jax.sim.solvecache import LONE_SOLVES, WORKS
from subgpu_jax.space.config import Config

B200 = get_hardware("B200")
ARCH = get_model("gpt-oss-120b")


def _dep(tp: int) -> Deployment:
    return Deployment(num_gpus=32, attn_tp=tp, attn_dp=32 // tp, moe_ep=1, global_batch=4096,
                      kv_history=32768)


def _temporal(tp: int) -> float:
    fp = build_forward(ARCH, _dep(tp), 1)
    g = fp.main
    cfg = Config(D=1, w=0, seg_of=tuple([0] * g.n), alloc=(B200.sm_budget,),
                 microbatch=_dep(tp).requests_per_gpu)
    return time_step(fp, cfg, EventTimer(B200), record=False).makespan_us


def _clear() -> None:
    LONE_SOLVES.clear()
    WORKS.clear()
    poolwork.LONE_POOLS.clear()


def test_shared_measurement_key_other_work():
    """The premise: the two o_proj kernels share a kernel_key and differ in work."""
    k8, k4 = (next(k for k in build_forward(ARCH, _dep(tp), 1).main.kernels
                   if k.name == "L0.o_proj") for tp in (8, 4))
    assert kernel_key(k8) == kernel_key(k4)
    assert work_signature(k8) != work_signature(k4)


def test_temporal_step_does_not_depend_on_what_was_timed_before():
    _clear()
    alone = _temporal(8)
    _clear()
    _temporal(4)
    after = _temporal(8)
    assert after == alone
