"""Where the scorers' JAX programs run: on the CPU, unless the user chose otherwise.

The search, the simulators and the scorers are CPU programs (their speed is benchmarked on the
CPU, their records are compared byte for byte across machines and across the worker processes
of ``--workers``, which always run on the CPU: :data:`subgpu_jax.app.pool.WORKER_ENV`). On a
machine with an NVIDIA GPU and a CUDA build of JAX, JAX would otherwise take the GPU at its
first operation: it preallocates 75% of the GPU's memory (JAX's documented default,
``XLA_PYTHON_CLIENT_MEM_FRACTION``) and shares the CUDA primary context with the PyTorch
workload that ``subgpu run``, ``calibrate`` and ``tune`` measure in the same process, so the
measured workload would run beside a foreign allocator on a GPU with a quarter of its memory.

``pin_jax_to_cpu`` sets ``JAX_PLATFORMS=cpu`` unless the user chose JAX's platforms (a user
who wants the scorers on the GPU sets ``JAX_PLATFORMS=cuda`` themselves, outside
``run``/``calibrate``/``tune``). It must run before JAX creates its first backend; the command
line calls it before any command runs.
"""

from __future__ import annotations

import os
import sys

__all__ = ["made_cache_folder", "JAX_PLATFORM_ENV", "SCORER_PLATFORM", "pin_jax_to_cpu", "COMPILE_CACHE_ENV",
           "compile_cache_dir", "enable_compile_cache"]

#: The environment variable naming the folder of the scorers' persistent compile cache (empty:
#: no persistent cache). Default: ``$XDG_CACHE_HOME/subgpu/jax`` (``~/.cache/subgpu/jax``).
COMPILE_CACHE_ENV = "SUBGPU_JAX_CACHE"

#: The environment variable JAX reads for its platforms (JAX's ``jax_platforms`` option).
JAX_PLATFORM_ENV = "JAX_PLATFORMS"
#: The scorers' default platform.
SCORER_PLATFORM = "cpu"


def pin_jax_to_cpu() -> str:
    """Make JAX use the CPU unless the user chose its platforms: ``JAX_PLATFORMS`` present in
    the environment (even empty, which is JAX's "choose automatically") or, in a session that
    already imported JAX, a non-empty ``jax_platforms`` option. Returns the platforms JAX will
    use ("" for JAX's automatic choice).

    Raises:
        ValueError: (one line naming ``JAX_PLATFORMS``) the user's non-empty choice other than
            ``cpu`` cannot start a JAX backend on this machine (e.g. ``cuda`` without a GPU, or
            a misspelling); JAX itself would fail later with a traceback.
    """
    jax = sys.modules.get("jax")
    if JAX_PLATFORM_ENV in os.environ:
        chosen = os.environ[JAX_PLATFORM_ENV]
        if chosen.strip() and chosen.strip() != SCORER_PLATFORM:
            _check_backend(chosen)
        return chosen
    if jax is not None and jax.config.jax_platforms:
        return str(jax.config.jax_platforms)
    os.environ[JAX_PLATFORM_ENV] = SCORER_PLATFORM
    if jax is not None:
        jax.config.update("jax_platforms", SCORER_PLATFORM)
    return SCORER_PLATFORM


def _check_backend(chosen: str) -> None:
    """Start JAX's backend for the user's ``JAX_PLATFORMS`` now, so that a value JAX cannot use
    is one clear line instead of a traceback inside the first scorer call."""
    try:
        import jax

        jax.devices()
    except Exception as e:  # noqa: BLE001 - JAX raises RuntimeError, AssertionError, ...
        first = (str(e).strip().splitlines() or [""])[0][:200]
        raise ValueError(f"JAX_PLATFORMS={chosen!r}: JAX cannot start that platform here "
                         f"({type(e).__name__}: {first}); unset JAX_PLATFORMS to run the "
                         f"scorers on the CPU") from None


def compile_cache_dir() -> str | None:
    """The persistent compile cache's folder: ``$SUBGPU_JAX_CACHE`` when set (empty: None, no
    persistent cache), else ``$XDG_CACHE_HOME/subgpu/jax`` or ``~/.cache/subgpu/jax``."""
    if COMPILE_CACHE_ENV in os.environ:
        return os.environ[COMPILE_CACHE_ENV].strip() or None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "subgpu", "jax")


def made_cache_folder(folder: str | None = None) -> str | None:
    """The persistent compile cache's folder (``folder``, default ``compile_cache_dir()``),
    created when missing; None when disabled (``SUBGPU_JAX_CACHE=""``) or when it cannot be
    created. What this process and its sweep workers share (``enable_compile_cache``,
    ``app.commands.search.start_search_workers``)."""
    folder = compile_cache_dir() if folder is None else folder
    if not folder:
        return None
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:
        return None
    return folder


def enable_compile_cache(folder: str | None = None) -> str | None:
    """Keep the scorers' compiled JAX programs on disk between runs (JAX's persistent
    compilation cache): a second ``subgpu search`` of the same structures loads its vectorised
    scorers instead of compiling them (compilation was 13.7 s of a 111 s profile of the main
    job; ``experiments/bench_sweeps.py`` measures cold and warm runs). Every program is kept
    (no minimum compile time); JAX keys entries by the program, the JAX version and the
    backend, so a stale entry is never used for another program.

    Args:
        folder: the cache folder (default ``compile_cache_dir()``).

    Returns:
        the folder in use, or None when disabled (``SUBGPU_JAX_CACHE=""``) or when the folder
        cannot be created (then nothing is kept and nothing else changes).
    """
    folder = made_cache_folder(folder)
    if folder is None:
        return None
    import jax

    jax.config.update("jax_compilation_cache_dir", folder)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return folder
