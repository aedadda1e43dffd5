"""How the runtime launches GEMMs on an SM pool: the ``stock`` or the ``pool``-aware policy.

cuBLAS picks a GEMM's kernel and tile grid from the device's SM count (132 on an H200), so a
GEMM launched inside a green context of 96 SMs runs a grid sized for 132 SMs: two waves, as
slow as on 64 SMs (measured, docs/results.md "History: before the fused kernels":
llama-3.1-70b ``mlp_up`` at M = 512: 94.5 µs on 132 SMs, 172.6 µs on 96, 175.1 µs on 64).
cuBLASLt takes the SM count to plan for as a matmul attribute
(``CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET``, cuBLAS documentation, "cublasLtMatmulDescAttributes_t");
PyTorch sets it from its SM carve-out (``torch._C._set_sm_carveout_experimental``: target = SMs
of the device - carve-out) on its cuBLASLt paths (``mm``, ``addmm``, ``bmm``, ``baddbmm``).

Policies:

* ``stock``: PyTorch's defaults (its preferred BLAS library, no SM target).
* ``pool``: every GEMM goes through cuBLASLt (``torch.backends.cuda.preferred_blas_library``)
  and is planned for the SMs of the pool it is launched on; GEMMs on the whole GPU (temporal,
  multistream) use cuBLASLt without a target. The kernel choice happens when the GEMM is
  launched, so under CUDA-graph capture the captured kernel keeps the pool's plan.
* ``tuned``: cuBLASLt's heuristic with the pool as target is not always faster: measured on the
  H200 (docs/results.md "History: before the fused kernels"), llama-3.1-70b ``mlp_up`` at
  M = 512 on 96 SMs takes 118.9 µs with the target against 172.2 µs without, but on 64 SMs
  292.4 µs against 174.6 µs. So ``tuned`` times each kernel, on its pool, under the SM targets
  ``tuning_targets(pool)`` and no target, before the graph is captured, and launches it with the
  fastest (no target unless a target is at least ``TUNE_MARGIN`` faster). The choice is kept per
  (kernel shape, pool) for the life of the policy.

The temporal baseline and the pipelined runs of one measurement use the same policy, so a
comparison never mixes libraries.
"""

from __future__ import annotations

from typing import Any

__all__ = ["GEMM_POLICIES", "GemmPolicy", "check_gemm_policy", "tuning_targets", "TUNE_MARGIN"]

#: The GEMM launch policies (module docstring).
GEMM_POLICIES: tuple[str, ...] = ("stock", "pool", "tuned")

#: PyTorch's preferred BLAS library before the first policy of this process changed it.
_DEFAULT_BLAS = None

#: A target replaces "no target" only when it is at least this much faster (relative), so timing
#: noise on kernels without a GEMM never changes their launch.
TUNE_MARGIN: float = 0.03


def tuning_targets(sms: int, num_sms: int) -> list[int]:
    """SM targets the ``tuned`` policy tries for a pool of ``sms`` SMs on a ``num_sms`` GPU:
    the pool, 3/4 and 1/2 of it, and twice it (capped below the device), distinct, descending.

    Raises:
        ValueError: ``sms`` or ``num_sms`` not a positive integer, or ``sms`` >= ``num_sms``.
    """
    for nm, v in (("sms", sms), ("num_sms", num_sms)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"tuning_targets: {nm} must be a positive integer, got {v!r}")
    if sms >= num_sms:
        raise ValueError(f"tuning_targets: sms must be smaller than the device's {num_sms} SMs "
                         f"(a whole-GPU GEMM gets no target), got {sms}")
    cand = {sms, max(1, (3 * sms) // 4), max(1, sms // 2), min(2 * sms, num_sms - 1)}
    return sorted((c for c in cand if 0 < c < num_sms), reverse=True)


def check_gemm_policy(policy: Any) -> str:
    """``policy`` if it is one of ``GEMM_POLICIES``.

    Raises:
        ValueError: anything else (names the allowed values).
    """
    if not isinstance(policy, str) or policy not in GEMM_POLICIES:
        raise ValueError(f"gemm policy must be one of {', '.join(GEMM_POLICIES)}, got {policy!r}")
    return policy


class GemmPolicy:
    """The GEMM launch policy of one process on one device.

    Args:
        torch: the torch module. policy: ``"stock"``, ``"pool"`` or ``"tuned"`` (module
            docstring).
        device: CUDA ordinal (its SM count is the base of the carve-out).

    Attributes:
        policy: the policy. num_sms: SMs of the device (0 when torch has no CUDA device, for
            the CPU tests; ``prepare`` and ``set_pool`` are then no-ops).

    Raises:
        ValueError: an unknown policy.
        RuntimeError: ``pool`` on a torch without the SM carve-out or cuBLASLt selection.
    """

    def __init__(self, torch: Any, policy: str = "stock", device: int = 0) -> None:
        self.policy = check_gemm_policy(policy)
        self.t = torch
        cuda = getattr(torch, "cuda", None)
        self.num_sms = (int(torch.cuda.get_device_properties(device).multi_processor_count)
                        if cuda is not None and torch.cuda.is_available() else 0)
        self._set = getattr(getattr(torch, "_C", None), "_set_sm_carveout_experimental", None)
        self._get = getattr(getattr(torch, "_C", None), "_get_sm_carveout_experimental", None)
        if self.num_sms:
            global _DEFAULT_BLAS
            if _DEFAULT_BLAS is None:      # the process's library before any policy changed it
                _DEFAULT_BLAS = torch.backends.cuda.preferred_blas_library()
            if policy == "stock":          # another policy of this process may have set cuBLASLt
                torch.backends.cuda.preferred_blas_library(_DEFAULT_BLAS)
        if policy != "stock" and self.num_sms:
            if self._set is None or self._get is None:
                raise RuntimeError(f"gemm policy {policy!r} needs "
                                   "torch._C._set_sm_carveout_experimental (PyTorch >= 2.5)")
            torch.backends.cuda.preferred_blas_library("cublaslt")
        self._current: int | None = None
        #: (kernel key, pool SMs) -> chosen carve-out (``tuned``), and the timings behind it
        self.choices: dict[tuple[str, int], int | None] = {}
        self.timings: dict[tuple[str, int], dict] = {}

    @property
    def active(self) -> bool:
        """True when GEMMs get an SM target (policy ``pool`` or ``tuned`` on a CUDA device)."""
        return self.policy != "stock" and self.num_sms > 0

    def carveout(self, sms: int | None) -> int | None:
        """The carve-out for a GEMM on a pool of ``sms`` SMs (None: the whole GPU / no target).

        Raises:
            ValueError: ``sms`` not a positive integer.
        """
        if sms is None or not self.active:
            return None
        if isinstance(sms, bool) or not isinstance(sms, int) or sms < 1:
            raise ValueError(f"pool SMs must be a positive integer, got {sms!r}")
        return None if sms >= self.num_sms else self.num_sms - sms

    def prepare(self, key: str, sms: int | None, fn, stream, reps: int = 4) -> None:
        """Before launching kernel ``key`` (``fn()`` launches it on the current stream) on a
        pool of ``sms`` SMs: set its carve-out; under ``tuned``, time it first (once per key
        and pool, eagerly, on ``stream``; NEVER call this inside a CUDA-graph capture for a key
        not tuned yet: the capture then falls back to the pool target).

        Args:
            key: the kernel's shape key (``subgpu_jax.model.calibration.kernel_key``).
            sms: SMs of the pool (None: whole GPU, no target). fn: launches the kernel once.
            stream: the pool's stream. reps: launches per timing.
        """
        if not self.active or sms is None or sms >= self.num_sms:
            self.set_pool(None)
            return
        if self.policy == "pool":
            self.set_pool(sms)
            return
        k = (key, int(sms))
        if k not in self.choices:
            if self.t.cuda.is_current_stream_capturing():
                self.set_pool(sms)
                return
            self.choices[k], self.timings[k] = self._tune(sms, fn, stream, reps)
        c = self.choices[k]
        if c != self._current:
            self._set(c)
            self._current = c

    def _tune(self, sms: int, fn, stream, reps: int) -> tuple[int | None, dict]:
        """Time ``fn`` under no target and each target of ``tuning_targets``; a target whose
        launch fails (seen on the H200: ``CUBLAS_STATUS_EXECUTION_FAILED`` for the 4-SM target
        of an 8-SM pool, llama-3.1-8b ``qkv`` at M = 64) is dropped when the device is still
        usable afterwards, and recorded as ``"failed"`` in the timings.

        Raises:
            RuntimeError: the launch without a target fails, or a failure left the device
                unusable (a sticky CUDA error: the next synchronisation fails too).
        """
        t = self.t
        cands: list[int | None] = [None] + [self.num_sms - x for x in
                                            tuning_targets(int(sms), self.num_sms)]
        best: dict = {}
        failed: set = set()
        with t.cuda.stream(stream):
            for _round in range(2):
                for c in cands:
                    if c in failed:
                        continue
                    self._set(c)
                    try:
                        fn()
                        e0, e1 = (t.cuda.Event(enable_timing=True),
                                  t.cuda.Event(enable_timing=True))
                        e0.record(stream)
                        for _ in range(reps):
                            fn()
                        e1.record(stream)
                        e1.synchronize()
                    except RuntimeError:
                        if c is None:
                            raise
                        t.cuda.synchronize()      # raises again when the error is sticky
                        failed.add(c)
                        best.pop(c, None)
                        continue
                    us = e0.elapsed_time(e1) * 1e3 / reps
                    best[c] = min(best.get(c, float("inf")), us)
        self._set(None)
        self._current = None
        base = best[None]
        c_best = min(best, key=lambda c: best[c])
        choice = c_best if best[c_best] < (1.0 - TUNE_MARGIN) * base else None
        timing: dict = {("none" if c is None else str(self.num_sms - c)): us
                        for c, us in best.items()}
        timing.update({str(self.num_sms - c): "failed" for c in failed})
        return choice, timing

    def set_pool(self, sms: int | None) -> None:
        """Plan the GEMMs launched from now on for a pool of ``sms`` SMs (None: whole GPU)."""
        if not self.active:
            return
        c = self.carveout(sms)
        if c != self._current:
            self._set(c)
            self._current = c

    def reset(self) -> None:
        """Back to no target (PyTorch's default carve-out)."""
        if self.active:
            self._set(None)
            self._current = None
