"""Compiled programs with a bounded lifetime, and host arrays moved to the device without
compiling anything (docs/reliability.md, "Memory").

JAX keeps every executable a ``jax.jit`` function compiled (its caches hold thousands of
entries) for as long as that function object lives; a module-level ``jax.jit`` lives forever.
A sweep compiles the batch kernels once per padded task-DAG structure, so their executables
(one to a few MiB each on the CPU) piled up grid point after grid point. ``ProgramCache`` gives
each structure (the static arguments and the shapes and dtypes of the array arguments) its own
``jax.jit`` wrapper and keeps at most ``maxsize`` of them, least recently used first out: an
evicted wrapper takes its executable with it (JAX's caches key them weakly by the wrapped
function), and every grid point of one structure shares one compiled program.

``jnp.asarray`` of a numpy array compiles a small program per shape and dtype in JAX 0.10
(kept in the same caches); ``to_device`` puts the array in its final dtype with
``jax.device_put``, which compiles nothing.
"""

from __future__ import annotations

import functools
import threading
import weakref
from typing import Callable, Sequence

import jax
import numpy as np

from subgpu_jax.model.lru import CountingLRU

__all__ = ["ProgramCache", "to_device", "PROGRAM_CACHE_SIZE", "JAX_CACHE_CLEAR_EVERY",
           "FAST_COMPILE", "release_compiled"]

#: Default number of compiled structures each ``ProgramCache`` keeps. A grid point of the
#: search compiles 2-3 structures of the batch kernel (one to ~15 MiB each on the CPU); 16 hold
#: the default ``subgpu search`` grid (4 points per deployment), so its later deployments
#: compile nothing; a longer grid compiles a structure again when it comes back.
PROGRAM_CACHE_SIZE = 16

#: Grid points a sweep stores between two calls of ``release_compiled``. Besides executables,
#: JAX keeps tracing caches keyed by the shapes of every structure it traced (entries of
#: ``_cached_abstract_eval``, ``trace_to_jaxpr``, ``_infer_params_cached``, ...), bounded only
#: by their entry counts (2,048-8,192 each). Clearing every 16 points bounds them: over a
#: 141-point sweep of new structures the resident memory after each such release stays flat
#: (docs/reliability.md, "Memory"); the default search grid (4 points per deployment)
#: recompiles its few structures at most once per 16.
JAX_CACHE_CLEAR_EVERY = 16

#: XLA compile options for programs compiled once and called a few times (``ProgramCache``'s
#: ``compiler_options``; ``score.vcontention`` takes them on a CPU only): LLVM's optimisation
#: level 0 (``xla_backend_optimization_level``, a flag of XLA's ``xla/debug_options_flags.cc``).
#: The main job's 8 contention programs, one process, empty caches, a loaded 2-core box
#: (2026-12-08): 7.8 and 8.4 s of compilation against 12.1 and 17.1 s, calls no slower, the
#: records identical (docs/results.md "Speed").
FAST_COMPILE = {"xla_backend_optimization_level": 0}

#: Every live ``ProgramCache`` (weakly: a cache that is no longer referenced is not kept).
_LIVE: "weakref.WeakSet[ProgramCache]" = weakref.WeakSet()


def release_compiled() -> int:
    """Drop every compiled program: the wrappers of each live ``ProgramCache`` and JAX's own
    caches (``jax.clear_caches``: executables and tracing caches). Values are unchanged; the
    next call of a structure compiles it again. Returns the number of wrappers dropped."""
    dropped = 0
    for pc in list(_LIVE):
        dropped += len(pc)
        pc.clear()
    jax.clear_caches()
    return dropped


def to_device(x, dtype=None) -> jax.Array:
    """``x`` (array-like) as a device array of ``dtype`` (default: x's own, 64-bit types
    narrowed to 32 bits unless ``jax_enable_x64``), without compiling a conversion program."""
    a = np.asarray(x)
    if dtype is None:
        dtype = jax.dtypes.canonicalize_dtype(a.dtype)
    return jax.device_put(np.ascontiguousarray(a, dtype=np.dtype(dtype)))


def _structure(args: Sequence, static: frozenset) -> tuple:
    """The key of one call: static arguments by value, array arguments by pytree structure and
    the shape and dtype of every leaf."""
    key = []
    for i, a in enumerate(args):
        if i in static:
            key.append(("s", a))
        else:
            leaves, tree = jax.tree_util.tree_flatten(a)
            key.append((tree, tuple((tuple(np.shape(x)), str(getattr(x, "dtype", type(x))))
                                    for x in leaves)))
    return tuple(key)


class ProgramCache:
    """A ``jax.jit`` of ``fn`` whose compiled programs are bounded: one wrapper per structure
    of the arguments, at most ``maxsize`` wrappers, least recently used evicted first.

    Args:
        fn: the function to compile (positional arguments).
        static_argnums: its static arguments (hashable), as ``jax.jit``'s.
        maxsize: structures kept (>= 1).
        compiler_options: XLA compile options of every program (``jax.jit``'s, e.g.
            ``FAST_COMPILE``); None: XLA's defaults.

    Calling it is calling ``jax.jit(fn, static_argnums=...)``; the values are identical.
    Thread-safe (two threads calling one new structure may both compile it once).

    Attributes:
        compiles: structures compiled so far (misses); evictions: wrappers dropped.
    """

    def __init__(self, fn: Callable, static_argnums: Sequence[int] = (),
                 maxsize: int = PROGRAM_CACHE_SIZE,
                 compiler_options: dict | None = None) -> None:
        if isinstance(maxsize, bool) or not isinstance(maxsize, int) or maxsize < 1:
            raise ValueError(f"maxsize must be an integer >= 1, got {maxsize!r}")
        self.fn = fn
        self.static_argnums = tuple(static_argnums)
        self.compiler_options = None if compiler_options is None else dict(compiler_options)
        self._static = frozenset(self.static_argnums)
        self._progs = CountingLRU(maxsize)
        self._lock = threading.Lock()
        self.compiles = 0
        functools.update_wrapper(self, fn)
        _LIVE.add(self)

    @property
    def evictions(self) -> int:
        """Wrappers (and their compiled programs) dropped to stay within ``maxsize``."""
        return self._progs.evicted

    def __len__(self) -> int:
        return len(self._progs)

    def _program(self, args: Sequence) -> Callable:
        key = _structure(args, self._static)
        with self._lock:
            prog = self._progs.get(key)
            if prog is None:
                # a new function object per structure: JAX's caches hold its executables only
                # while this wrapper lives
                prog = jax.jit(functools.partial(self.fn), static_argnums=self.static_argnums,
                               compiler_options=self.compiler_options)
                self._progs[key] = prog
                self.compiles += 1
        return prog

    def __call__(self, *args):
        return self._program(args)(*args)

    def lower(self, *args):
        """``jax.jit(...).lower(*args)`` of the structure of ``args`` (ahead-of-time use)."""
        return self._program(args).lower(*args)

    def clear(self) -> None:
        """Drop every compiled structure."""
        with self._lock:
            self._progs.clear()
