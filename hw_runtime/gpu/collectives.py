"""The virtual collectives of the GPU workload: what stands in, on one GPU, for a TP/EP
collective of the deployment (``--collectives``, ``subgpu_jax.model.collective``).

Every collective's endpoint work starts with its payload: ``Kernel.comm_bytes`` bytes filled
into the stage's staging buffer from the kernel's source activation (read + write). Then, by mode:

* ``sleep``: the copy at full speed, the kernel's epilogue, then ``torch.cuda._sleep`` for the
  rest of the modelled link time (``comm_target_us`` = floor + payload / link bandwidth, minus
  the copy at the copy peak), calibrated in clock cycles per µs when the workload is built;
* ``proxy``: the copy done by the engine collective's CTA count (``model.collective.proxy_plan``:
  16, 20 or 36 CTAs of 512 threads) on the issuing pool, paced to the link rate: each CTA moves
  its share in up to 64 steps, step i not before t0 + i x target / steps (``%globaltimer``), and
  spins on the timer until t0 + target. The CTAs stay resident for the whole link time, as
  NCCL's and vLLM's collective kernels do, and the payload's HBM traffic is spread over it;
* ``none``: the copy only.

``VirtualCollectives`` is the part of ``TorchWorkload`` that does this (a mixin: it reads the
workload's ``spin``, ``proxy``, ``is_cuda``, ``torch``, ``comm_floor_us``, ``link_Bps``,
``copy_Bps``). Needs torch, and Triton for the proxy, only when a collective runs.

Units: µs, bytes, CTAs.
"""

from __future__ import annotations

import functools
import math

from subgpu_jax.model.collective import proxy_plan

__all__ = ["VirtualCollectives", "proxy_", "PROXY_THREADS", "PROXY_MAX_STEPS"]

#: Threads per proxy CTA: vLLM's custom all-reduce launches 512 (csrc/custom_all_reduce.cuh),
#: NCCL 512-640 per channel (``NCCL_NTHREADS``).
PROXY_THREADS = 512
#: Most pacing steps per CTA (the copy is spread over the link time in this many slices).
PROXY_MAX_STEPS = 64
_BLOCK = 4096       # elements per load/store tile (8 bf16 per thread)


@functools.lru_cache(maxsize=1)
def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def _now():
        return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64,
                                         is_pure=False, pack=1)

    @triton.jit
    def proxy_k(src, dst, n_src, n_dst, per_cta, steps, target_ns, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        t0 = _now()
        lo = pid * per_cta
        hi = tl.minimum(lo + per_cta, n_dst)
        chunk = tl.cdiv(per_cta, steps)
        for i in range(steps):
            deadline = t0 + (i * target_ns) // steps
            now = _now()
            while now < deadline:
                now = _now()
            c_lo = lo + i * chunk
            c_hi = tl.minimum(c_lo + chunk, hi)
            for off in range(c_lo, c_hi, BLOCK):
                idx = off + tl.arange(0, BLOCK)
                m = idx < c_hi
                v = tl.load(src + (idx % n_src), mask=m)
                tl.store(dst + idx, v, mask=m)
        end = t0 + target_ns
        now = _now()
        while now < end:
            now = _now()

    return proxy_k


def proxy_(dst, src, ctas: int, target_us: float) -> None:
    """The collective proxy: fill the flat ``dst`` with cyclic copies of the flat ``src`` using
    ``ctas`` CTAs of ``PROXY_THREADS`` threads, paced so that the kernel lasts ``target_us``.

    Args:
        dst, src: 1-D CUDA tensors of one dtype (``dst`` the staging buffer, ``src`` the payload).
        ctas: grid size (>= 1). target_us: the modelled link time (µs, >= 0).

    Raises:
        ValueError: bad shapes, dtypes or arguments (one line).
    """
    if dst.dim() != 1 or src.dim() != 1 or dst.dtype != src.dtype or src.numel() < 1:
        raise ValueError(f"proxy_: dst and src must be 1-D of one dtype, src non-empty; got "
                         f"{tuple(dst.shape)} {dst.dtype}, {tuple(src.shape)} {src.dtype}")
    if int(ctas) < 1 or not target_us >= 0:
        raise ValueError(f"proxy_: ctas must be >= 1 and target_us >= 0, got {ctas!r}, "
                         f"{target_us!r}")
    n = dst.numel()
    per = max(1, math.ceil(n / int(ctas)))
    steps = max(1, min(PROXY_MAX_STEPS, math.ceil(per / _BLOCK)))
    _kernel()[(int(ctas),)](src, dst, src.numel(), n, per, steps, int(target_us * 1000.0),
                            BLOCK=_BLOCK, num_warps=PROXY_THREADS // 32)


class VirtualCollectives:
    """The virtual-collective methods of ``TorchWorkload`` (see the module docstring)."""

    def _calibrate_spin(self) -> float:
        """Clock cycles of ``torch.cuda._sleep`` per µs, timed on this GPU."""
        t = self.torch
        st = t.cuda.current_stream(self.device)
        for _ in range(2):
            t.cuda._sleep(100_000)
        cyc, best = 2_000_000, float("inf")
        for _ in range(3):
            e0, e1 = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)
            e0.record(st)
            t.cuda._sleep(cyc)
            e1.record(st)
            e1.synchronize()
            best = min(best, e0.elapsed_time(e1) * 1000.0)
        return cyc / best

    def comm_target_us(self, kernel) -> float:
        """Floor duration of a virtual collective: floor + payload / link bandwidth (µs)."""
        return self.comm_floor_us + kernel.comm_bytes / self.link_Bps * 1e6 if kernel.is_comm \
            else 0.0

    def spin_cycles(self, kernel) -> int:
        """Clock cycles of the ``sleep`` wait after collective ``kernel`` (0 in other modes)."""
        if not self.spin or not kernel.is_comm:
            return 0
        copy_us = 2.0 * kernel.comm_bytes / self.copy_Bps * 1e6
        return int(max(0.0, self.comm_target_us(kernel) - copy_us) * self._cycles_per_us)

    @staticmethod
    def cycle_copy(dst, src) -> None:
        """Fill the flat ``dst`` with copies of the flat ``src`` (the payload's endpoint work)."""
        n, m = dst.numel(), src.numel()
        full = n // m
        for r in range(full):
            dst[r * m:(r + 1) * m].copy_(src)
        rem = n - full * m
        if rem:
            dst[full * m:].copy_(src[:rem])

    def endpoint_(self, kernel, dst, src) -> None:
        """The payload of collective ``kernel`` into its staging buffer ``dst`` from ``src``
        (flat): the paced proxy with ``proxy`` on a CUDA device, else the full-speed copy."""
        if getattr(self, "proxy", False) and self.is_cuda:
            proxy_(dst, src, proxy_plan(kernel).ctas, self.comm_target_us(kernel))
        else:
            self.cycle_copy(dst, src)
