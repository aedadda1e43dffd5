"""Where the scorers' JAX programs run: on the CPU, unless the user chose otherwise.

The search, the simulators and the scorers are CPU programs (their speed is benchmarked on the
CPU, their records are compared byte for byte across machines and across the worker processes
of ``--workers``, which always run on the CPU: :data:`subgpu_jax.app.pool.WORKER_ENV`). On a
machine with an NVIDIA GPU and a CUDA build of JAX, JAX would otherwise take the GPU at its
first operation: it preallocates 75% of the GPU's memory (JAX's documented default,
``XLA_PYTHON_CLIENT_MEM_FRACTION``) and shares the CUDA primary context with the PyTorch
workload that ``subgpu run``, ``calibrate`` and ``tune`` measure in the same process, so the
measured workload would run beside a foreign allocator on a GPU with a quarter of its memory.

``pin_jax_to_cpu`` sets ``JAX_PLATFORMS=cpu`` unless the environment already names a platform
(a user who wants the scorers on the GPU sets ``JAX_PLATFORMS=cuda`` themselves, outside
``run``/``calibrate``/``tune``). It must run before JAX creates its first backend; the command
line calls it first thing.
"""

from __future__ import annotations

import os
import sys

__all__ = ["JAX_PLATFORM_ENV", "SCORER_PLATFORM", "pin_jax_to_cpu"]

#: The environment variable JAX reads for its platforms (JAX's ``jax_platforms`` option).
JAX_PLATFORM_ENV = "JAX_PLATFORMS"
#: The scorers' default platform.
SCORER_PLATFORM = "cpu"


def pin_jax_to_cpu() -> str:
    """Make JAX use the CPU unless ``JAX_PLATFORMS`` is already set; returns the platform list
    JAX will use (the environment's value). If JAX is already imported (a library user's
    session) its ``jax_platforms`` option is updated too; once a JAX backend exists that has no
    effect, which is why the command line calls this before any JAX work."""
    chosen = os.environ.get(JAX_PLATFORM_ENV)
    if chosen:
        return chosen
    os.environ[JAX_PLATFORM_ENV] = SCORER_PLATFORM
    jax = sys.modules.get("jax")
    if jax is not None:
        jax.config.update("jax_platforms", SCORER_PLATFORM)
    return SCORER_PLATFORM
