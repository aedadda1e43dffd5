"""The driver side of CUDA Green Contexts (``partition.GreenPartition`` builds on it): the
device's SM resource (``device_sm_info``), the pure planning of pools against its quantum and
minimum (``plan_pools``), the errors, and the helpers that import torch and
``cuda.bindings.driver`` and check a driver call's result (``check_call``).

Importing this module needs neither torch nor cuda-bindings (CI has no GPU); ``SmInfo`` and
``plan_pools`` are pure Python.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Sequence

__all__ = [
    "GreenContextError", "GreenContextUnavailable", "SmInfo", "plan_pools", "device_sm_info",
    "green_contexts_available", "import_driver", "import_torch", "check_call",
]


class GreenContextError(RuntimeError):
    """A driver call failed, or a created partition failed its verification."""


class GreenContextUnavailable(GreenContextError):
    """torch / cuda-bindings / a CUDA GPU / green-context support is missing."""


# --------------------------------------------------------------------------- pure planning

@dataclass(frozen=True)
class SmInfo:
    """The device's SM resource as the driver reports it.

    Attributes:
        sm_count: SMs of the device.
        quantum: ``smCoscheduledAlignment``: pool sizes are multiples of this.
        min_partition: ``minSmPartitionSize``: the smallest pool.
        device: CUDA ordinal.
        name: device name.
        compute_capability: (major, minor).
        driver_version: ``cuDriverGetVersion`` (e.g. 13000).
    """

    sm_count: int
    quantum: int
    min_partition: int
    device: int = 0
    name: str = ""
    compute_capability: tuple[int, int] = (0, 0)
    driver_version: int = 0

    @property
    def unit(self) -> int:
        """Granularity of a pool: the quantum (>= 1)."""
        return max(1, int(self.quantum))

    @property
    def min_pool(self) -> int:
        """Smallest grantable pool: the minimum partition rounded up to the quantum."""
        u = self.unit
        return max(u, int(math.ceil(max(1, self.min_partition) / u) * u))

    @property
    def aligned_budget(self) -> int:
        """SMs that can be split into aligned pools: sm_count rounded down to the quantum."""
        return (self.sm_count // self.unit) * self.unit

    @property
    def max_pools(self) -> int:
        """Most pools one split can make."""
        return self.aligned_budget // self.min_pool


def plan_pools(requested: Sequence[int], info: SmInfo, round_up: bool = False
               ) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """Check a pool request against the device and return the SM counts to ask the driver for.

    Args:
        requested: SMs wanted for each pool.
        info: the device's SM resource (``device_sm_info``).
        round_up: round a pool that is below the minimum or not a multiple of the quantum up to
            the next grantable size (reported in the returned notes) instead of refusing it.

    Returns:
        ``(planned, notes)``: the SM count of each pool, and one line per rounded pool.

    Raises:
        ValueError: one line naming the offending pool and the rule: not an integer or not
            positive, below the minimum, not a multiple of the quantum (without ``round_up``), more
            pools than the device allows, or pools summing to more than the aligned budget.
    """
    try:
        req = list(requested)
    except TypeError:
        raise ValueError(f"GreenPartition: pools must be a sequence of SM counts, "
                         f"got {requested!r}") from None
    if not req:
        raise ValueError("GreenPartition: at least one pool is needed, got an empty list")
    u, mn = info.unit, info.min_pool
    if len(req) > info.max_pools:
        raise ValueError(f"GreenPartition: {len(req)} pools requested, the device allows at most "
                         f"{info.max_pools} ({info.aligned_budget} splittable SMs, minimum pool "
                         f"{mn})")
    planned, notes = [], []
    for i, p in enumerate(req):
        if isinstance(p, bool) or not isinstance(p, numbers.Integral):
            raise ValueError(f"GreenPartition: pool {i} must be an integer SM count, got {p!r}")
        p = int(p)
        if p <= 0:
            raise ValueError(f"GreenPartition: pool {i} must have a positive SM count, got {p}")
        q = p
        if q < mn:
            if not round_up:
                raise ValueError(f"GreenPartition: pool {i} asks for {p} SMs, below the device's "
                                 f"minimum pool of {mn} SMs (or pass round_up=True)")
            q = mn
        if q % u:
            if not round_up:
                lo, hi = (q // u) * u, (q // u + 1) * u
                alt = f"{lo} or {hi}" if lo >= mn else f"{hi}"
                raise ValueError(f"GreenPartition: pool {i} asks for {p} SMs, not a multiple of "
                                 f"the device's SM quantum {u} (use {alt}, or round_up=True)")
            q = int(math.ceil(q / u) * u)
        if q != p:
            notes.append(f"pool {i}: {p} SMs requested, rounded up to {q}")
        planned.append(q)
    tot = sum(planned)
    if tot > info.aligned_budget:
        raise ValueError(f"GreenPartition: pools sum to {tot} SMs, more than the "
                         f"{info.aligned_budget} SMs the device can split into aligned pools "
                         f"({info.sm_count} SMs, quantum {u})")
    return tuple(planned), tuple(notes)


# --------------------------------------------------------------------------- driver helpers

def import_driver():
    """``cuda.bindings.driver``.

    Raises:
        GreenContextUnavailable: cuda-bindings does not import.
    """
    try:
        from cuda.bindings import driver  # type: ignore
    except Exception as e:  # ImportError, or a broken install
        raise GreenContextUnavailable(f"GreenPartition: cuda-bindings is not importable "
                                      f"({e.__class__.__name__}: {e}); install the 'gpu' extra"
                                      ) from None
    return driver


def import_torch():
    """``torch``, with a CUDA GPU visible.

    Raises:
        GreenContextUnavailable: torch does not import, or sees no CUDA GPU.
    """
    try:
        import torch  # type: ignore
    except Exception as e:
        raise GreenContextUnavailable(f"GreenPartition: torch is not importable "
                                      f"({e.__class__.__name__}: {e})") from None
    if not torch.cuda.is_available():
        raise GreenContextUnavailable("GreenPartition: no CUDA GPU is visible to torch")
    return torch


def _err_name(drv, err) -> str:
    try:
        e2, name = drv.cuGetErrorName(err)
        if e2 == drv.CUresult.CUDA_SUCCESS:
            return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:  # pragma: no cover - best effort
        pass
    return str(err)


def check_call(drv, ret, what: str):
    """Unpack a cuda.bindings return tuple ``(err, *values)`` of the driver call ``what``: None,
    the one value, or the tuple of values.

    Raises:
        GreenContextUnavailable: the driver says not supported, no device or not found.
        GreenContextError: any other error, naming ``what`` and the driver's error name.
    """
    if isinstance(ret, tuple):
        err, vals = ret[0], ret[1:]
    else:
        err, vals = ret, ()
    if err != drv.CUresult.CUDA_SUCCESS:
        name = _err_name(drv, err)
        cls = (GreenContextUnavailable if name in ("CUDA_ERROR_NOT_SUPPORTED",
                                                   "CUDA_ERROR_NO_DEVICE",
                                                   "CUDA_ERROR_NOT_FOUND") else GreenContextError)
        raise cls(f"GreenPartition: {what} failed with {name}")
    if not vals:
        return None
    return vals[0] if len(vals) == 1 else vals


def device_sm_info(device: int = 0) -> SmInfo:
    """Read the device's SM resource (count, quantum, minimum) through the driver.

    Raises:
        GreenContextUnavailable: no cuda-bindings, no GPU, or a driver without green contexts.
    """
    drv = import_driver()
    try:
        check_call(drv, drv.cuInit(0), "cuInit")
    except GreenContextError as e:
        raise GreenContextUnavailable(str(e)) from None
    except RuntimeError as e:  # no libcuda.so: no driver at all
        raise GreenContextUnavailable(f"GreenPartition: no CUDA driver ({e})") from None
    ver = check_call(drv, drv.cuDriverGetVersion(), "cuDriverGetVersion")
    n = check_call(drv, drv.cuDeviceGetCount(), "cuDeviceGetCount")
    if not 0 <= device < n:
        raise GreenContextUnavailable(f"GreenPartition: device {device} does not exist "
                                      f"({n} CUDA devices)")
    dev = check_call(drv, drv.cuDeviceGet(device), "cuDeviceGet")
    if not hasattr(drv, "cuDeviceGetDevResource") or ver < 12040:
        raise GreenContextUnavailable(f"GreenPartition: driver {ver} has no green contexts "
                                      "(CUDA 12.4+ needed)")
    res = check_call(drv, drv.cuDeviceGetDevResource(
        dev, drv.CUdevResourceType.CU_DEV_RESOURCE_TYPE_SM), "cuDeviceGetDevResource(SM)")
    A = drv.CUdevice_attribute
    major = check_call(drv, drv.cuDeviceGetAttribute(
        A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), "cuDeviceGetAttribute")
    minor = check_call(drv, drv.cuDeviceGetAttribute(
        A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), "cuDeviceGetAttribute")
    name = check_call(drv, drv.cuDeviceGetName(256, dev), "cuDeviceGetName")
    name = name.split(b"\0", 1)[0].decode(errors="replace") if isinstance(name, bytes) else str(name)
    sm = res.sm
    # Older bindings lack the alignment fields: fall back to the documented values (8 on 9.0+).
    quantum = int(getattr(sm, "smCoscheduledAlignment", 0) or (8 if major >= 9 else 2))
    minimum = int(getattr(sm, "minSmPartitionSize", 0) or quantum)
    return SmInfo(sm_count=int(sm.smCount), quantum=quantum, min_partition=minimum,
                  device=device, name=name, compute_capability=(int(major), int(minor)),
                  driver_version=int(ver))


def green_contexts_available(device: int = 0) -> tuple[bool, str]:
    """``(True, "")`` when torch, cuda-bindings, a GPU and green contexts are all there, else
    ``(False, reason)``. Never raises (used by tests to skip)."""
    try:
        import_torch()
        device_sm_info(device)
    except GreenContextError as e:
        return False, str(e)
    except Exception as e:  # pragma: no cover - anything unexpected means "not available"
        return False, f"{e.__class__.__name__}: {e}"
    return True, ""
