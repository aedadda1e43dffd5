"""What every GPU command of ``hw_runtime.commands`` shares: the GPU check, JSON cleaning and
the EP default of the workload options."""

from __future__ import annotations

import math

__all__ = ["gpu_check", "json_safe", "a_or_an"]


def gpu_check() -> None:
    """Raise ``ValueError`` (one line) unless torch, a CUDA GPU, cuda-bindings and green
    contexts are all available here."""
    from hw_runtime.gpu.partition import green_contexts_available

    ok, why = green_contexts_available(0)
    if ok:
        return
    why = why.removeprefix("GreenPartition: ")
    if "not importable" in why:  # the GPU extra is missing: installing it is the way out
        raise ValueError(f"this machine cannot run configurations on a GPU ({why}): `subgpu "
                         "run`, `calibrate` and `tune` need pip install -e \".[gpu]\" (torch, "
                         "cuda-bindings) and an NVIDIA GPU with green contexts (CUDA 12.4+ "
                         "driver)")
    # the extra is there; the GPU (or its driver) is not: lead with that, no install advice
    raise ValueError(f"{why}: this machine cannot run configurations on a GPU (`subgpu run`, "
                     "`calibrate` and `tune` need an NVIDIA GPU with green contexts, CUDA 12.4+ "
                     "driver; `simulate` and `search` run on a CPU)")


def json_safe(obj):
    """``obj`` with every non-finite float (NaN, inf) replaced by None, so that ``json.dumps``
    writes strict JSON (``null``) that every JSON reader accepts."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def a_or_an(name: str) -> str:
    """``name`` with its indefinite article, for a GPU's or a preset's name read letter by
    letter where it starts with a capital: ``"an H100"``, ``"an NVIDIA H20"``, ``"a B200"``."""
    return f"{'an' if name[:1] in 'AEFHILMNORSX' else 'a'} {name}"
