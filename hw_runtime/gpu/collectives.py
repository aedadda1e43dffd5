"""The virtual collectives of the GPU workload: what stands in, on one GPU, for a TP/EP
collective of the deployment (``--collectives``, ``subgpu_jax.model.collective``).

Each collective has a staging buffer of ``Kernel.comm_bytes`` bytes. By mode:

* ``sleep``: the payload copied into it from the kernel's source activation at full speed (read +
  write), the kernel's epilogue, then ``torch.cuda._sleep`` for the rest of the modelled link
  time (``comm_target_us`` = floor + payload / link bandwidth, minus the copy at the copy peak),
  calibrated in clock cycles per µs when the workload is built;
* ``proxy``: instead of the copy, the staging buffer read and rewritten in place by the engine
  collective's CTA count (``model.collective.proxy_plan``: 16, 20 or 36 CTAs of 512 threads)
  on the issuing pool, paced to the link rate: each CTA moves its share in up to 64 steps at
  least 4 µs apart, step i not before t0 + i x target / steps (``%globaltimer``), and spins on
  the timer until t0 + target. The CTAs stay resident for the whole link time, as NCCL's and
  vLLM's collective kernels do, and the payload's HBM traffic is spread over it;
  Only whole 64 KiB tiles are touched: a tail under 64 KiB (a payload under 64 KiB entirely)
  moves no bytes, where the simulator charges 2 x ``comm_bytes``; the link time still holds;
* ``none``: the copy only.

``VirtualCollectives`` is the part of ``TorchWorkload`` that does this (a mixin: it reads the
workload's ``spin``, ``proxy``, ``dist``, ``is_cuda``, ``torch``, ``device``, ``deployment``,
``comm_floor_us``, ``link_Bps``, ``copy_Bps`` and ``_cycles_per_us``, the sleep's calibration).
The issuing stream's index (``lane``) is an argument of ``endpoint_``, passed down by the kernel
callables (``kernels``).
Needs torch, and Triton for the proxy, only when a collective runs.

Units: µs, bytes, CTAs.
"""

from __future__ import annotations

import functools
import math

from subgpu_jax.model.collective import proxy_plan

from hw_runtime.gpu.distributed import collective_

__all__ = ["VirtualCollectives", "proxy_", "PROXY_THREADS", "PROXY_MAX_STEPS"]

#: Threads per proxy CTA: vLLM's custom all-reduce launches 512 (csrc/custom_all_reduce.cuh),
#: NCCL 512-640 per channel (``NCCL_NTHREADS``).
PROXY_THREADS = 512
#: Most pacing steps per CTA (the copy is spread over the link time in this many slices).
PROXY_MAX_STEPS = 64
#: Least µs between two pacing steps: a step's load and store take 1-2 µs of memory latency on
#: the H200 and ``%globaltimer`` ticks about every µs. With 4 µs steps the proxy meets every
#: target of 5-70 µs within 1.2 µs where its bytes fit; steps under 1 µs overran a 60 µs target
#: by 50-90% (both measured, docs/collectives.md "Measured on the H200").
PROXY_STEP_US = 4.0
_BLOCK = 32768      # 2-byte elements per tile: 64 KiB, 128 B per thread in flight


@functools.lru_cache(maxsize=1)
def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def _now():
        return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64,
                                         is_pure=False, pack=1)

    @triton.jit
    def proxy_k(buf, n_tiles, tiles_per_cta, steps, target_ns, zero, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        t0 = _now()
        t_lo = pid * tiles_per_cta
        t_hi = tl.minimum(t_lo + tiles_per_cta, n_tiles)
        per_step = tl.cdiv(tiles_per_cta, steps)
        for i in range(steps):
            deadline = t0 + (i * target_ns) // steps
            now = _now()
            while now < deadline:
                now = _now()
            s_lo = t_lo + i * per_step
            s_hi = tl.minimum(s_lo + per_step, t_hi)
            for t in range(s_lo, s_hi):
                idx = t.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
                v = tl.load(buf + idx)
                tl.store(buf + idx, (v ^ zero).to(tl.int16))   # zero: a runtime 0: the store stays
        end = t0 + target_ns
        now = _now()
        while now < end:
            now = _now()

    return proxy_k


def proxy_(buf, ctas: int, target_us: float) -> None:
    """The collective proxy: ``ctas`` CTAs of ``PROXY_THREADS`` threads read and rewrite (in
    place, unchanged) every whole 64 KiB tile of the flat staging buffer ``buf`` (the payload's
    HBM traffic: a read and a write of each byte), paced so that the kernel lasts ``target_us``
    (longer when the bytes take longer at the bandwidth its CTAs reach). In place and without
    masks so that the loads are 16-byte vectors (a cyclic gather from the source activation
    reached 13 GB/s per CTA, measured); a tail under 64 KiB is not touched.

    Args:
        buf: a 1-D contiguous CUDA tensor of a 2-byte dtype (bf16). ctas: grid size (>= 1).
        target_us: the modelled link time (µs, >= 0).

    Raises:
        ValueError: bad tensor or arguments (one line).
    """
    if buf.dim() != 1 or buf.element_size() != 2 or not buf.is_contiguous():
        raise ValueError(f"proxy_: buf must be a contiguous 1-D tensor of a 2-byte dtype, got "
                         f"{tuple(buf.shape)} {buf.dtype}")
    if int(ctas) < 1 or not target_us >= 0:
        raise ValueError(f"proxy_: ctas must be >= 1 and target_us >= 0, got {ctas!r}, "
                         f"{target_us!r}")
    import torch

    tiles = buf.numel() // _BLOCK
    per = max(1, math.ceil(tiles / int(ctas)))
    steps = max(1, min(PROXY_MAX_STEPS, per, int(target_us // PROXY_STEP_US)))
    _kernel()[(int(ctas),)](buf.view(torch.int16), tiles, per, steps,
                            int(target_us * 1000.0), 0, BLOCK=_BLOCK,
                            num_warps=PROXY_THREADS // 32)


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
        """Fill the flat ``dst`` with copies of the flat ``src`` (the payload's endpoint work).

        Raises:
            ValueError: ``src`` is empty.
        """
        n, m = dst.numel(), src.numel()
        if m < 1:
            raise ValueError("cycle_copy: the source of a collective's payload is empty")
        full = n // m
        for r in range(full):
            dst[r * m:(r + 1) * m].copy_(src)
        rem = n - full * m
        if rem:
            dst[full * m:].copy_(src[:rem])

    def endpoint_(self, kernel, dst, src, lane: int = 0) -> None:
        """The payload of collective ``kernel`` into its staging buffer ``dst`` from ``src``
        (flat), issued from the stream of index ``lane``: with a ``dist`` context
        (``--collectives nccl``) the real collective on ``dst`` (``distributed.collective_``,
        the groups of ``lane``); the paced proxy with ``proxy`` on a CUDA device (``dst`` then
        a contiguous 1-D bf16 tensor; the CTA count of ``proxy_plan`` for the deployment's
        attention TP); else the full-speed copy (``lane`` unused by both).

        Raises:
            ValueError: from ``proxy_`` (a buffer it cannot run on) or ``cycle_copy``; from
                ``collective_``: a lane without communicators of its own.
        """
        dist = self.dist
        if dist is not None:         # --collectives nccl: the real collective, this lane's group
            collective_(dist, kernel, dst, lane)
        elif self.proxy:             # (CUDA only: TorchWorkload sets it so)
            proxy_(dst, *self.proxy_args(kernel))
        else:
            self.cycle_copy(dst, src)

    def proxy_args(self, kernel) -> tuple[int, float]:
        """``(ctas, target_us)`` of collective ``kernel``'s proxy: ``proxy_plan``'s CTA count for
        the deployment's attention TP and ``comm_target_us``; worked out once per kernel (a
        launch only looks them up)."""
        memo = self.__dict__.setdefault("_proxy_memo", {})
        if kernel.name not in memo:
            memo[kernel.name] = (proxy_plan(kernel, self.deployment.attn_tp).ctas,
                                 self.comm_target_us(kernel))
        return memo[kernel.name]
