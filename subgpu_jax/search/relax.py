"""The optax relaxation of the SM allocation (docs/method.md §4): annealed softmax pools over
the smooth evaluator, rounded and polished by Algorithm 2."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from subgpu_jax.model.checks import pos_int
from subgpu_jax.score.evaluator import smooth_batch
from subgpu_jax.score.programs import ProgramCache, to_device
from subgpu_jax.score.protocol import Scorer, Smooth, StageService
from subgpu_jax.search.pairwise import AllocResult, pairwise_line, seeds
from subgpu_jax.search.problem import memoised, Problem
from subgpu_jax.space.config import DEFAULT_POLICY, AllocSpace, Config

__all__ = ["RelaxResult", "relax_allocation", "relax_and_polish", "anneal_impl", "ANNEAL",
           "OPTIMIZERS"]

#: optax optimizers of the relaxation.
OPTIMIZERS = ("adam", "sgd", "adabelief")


def anneal_impl(seg_table, seg_stage, arrs, z0, mask, temps, lr0, p_min, free,
                optimizer="adam"):
    """Anneal logits z (R, D_pad) against the smooth makespan while the temperature follows
    ``temps`` (S,) µs; the learning rate follows a cosine decay from ``lr0`` over S steps.
    ``mask`` (D_pad,) marks the real stages: padded stages get no SMs and no gradient (stage
    indices of the evaluator never point at them), so every D <= D_pad shares one compilation.

    ``seg_table``, ``seg_stage``, ``arrs``: the ``score.protocol.SmoothTerms`` of the structure.

    Returns (z (R, D_pad), smooth makespans per step (S, R)). All arguments but ``optimizer``
    are traced: a new temperature schedule or learning rate of the same shapes does not
    recompile (the test wraps this function in ``chex.assert_max_traces``).
    """
    steps = temps.shape[0]
    sched = optax.cosine_decay_schedule(lr0, steps, alpha=0.05)
    opt = {"adam": optax.adam, "sgd": optax.sgd, "adabelief": optax.adabelief}[optimizer](sched)

    def alloc(z):
        sm = jax.nn.softmax(jnp.where(mask, z, -1e9), axis=-1)
        return jnp.where(mask, p_min + free * sm, p_min).astype(seg_table.dtype)

    def loss(z, temp):
        # the smooth capability's jitted kernel, one smooth makespan per restart (vmapped inside)
        f = smooth_batch(seg_table, seg_stage, arrs, alloc(z), temp)
        return jnp.sum(f), f

    def step(carry, temp):
        z, st = carry
        (_, f), gz = jax.value_and_grad(loss, has_aux=True)(z, temp)
        upd, st = opt.update(gz, st, z)
        return (optax.apply_updates(z, upd), st), f

    (z, _), hist = jax.lax.scan(step, (z0, opt.init(z0)), temps.astype(seg_table.dtype))
    return z, hist


#: The compiled annealer (``anneal_impl``), one program per padded structure and optimizer
#: (static), at most ``score.programs.PROGRAM_CACHE_SIZE`` kept.
ANNEAL = ProgramCache(anneal_impl, (9,))


@dataclass(frozen=True)
class RelaxResult:
    """Output of ``relax_allocation``.

    Attributes:
        continuous: float (R, D) final relaxed allocations (SMs), one per restart.
        rounded: int64 (R, D) largest-remainder roundings.
        rounded_us: float (R,) cheap hard makespans of ``rounded`` (µs).
        smooth_history: float (S, R) smooth makespan per step and restart (µs).
        temps: float (S,) the temperature schedule used (µs).
        best: int64 (D,) best rounded allocation; best_us: its cheap makespan (µs).
    """

    continuous: np.ndarray
    rounded: np.ndarray
    rounded_us: np.ndarray
    smooth_history: np.ndarray
    temps: np.ndarray
    best: np.ndarray
    best_us: float


def relax_allocation(ev: Scorer | Smooth | StageService, space: AllocSpace, restarts: int = 8, steps: int = 150,
                     lr: float = 0.15, temp_start: float = 2e-2, temp_end: float = 2e-4,
                     seed: int = 0, optimizer: str = "adam") -> RelaxResult:
    """The relaxation of docs/method.md §4: a continuous allocation p = p_min + (budget - D p_min)
    softmax(z) (budget and minimum hold by construction), scored by the smooth capability (``Evaluator.smooth``),
    annealed with optax (``optimizer`` with a cosine-decayed learning rate) while the smooth-max
    temperature falls geometrically from ``temp_start`` to ``temp_end`` (fractions of the
    uniform allocation's makespan). ``restarts`` logit vectors are optimised together in one
    batch (restart 0 starts uniform, restart 1 service-proportional, the rest random); each
    result is rounded to the SM quantum with ``AllocSpace.round`` (largest remainder, sum and
    minimum kept) and scored by the cheap hard makespan in one call.

    Args:
        ev: the cheap estimator of the structure, with the ``score.protocol`` capabilities
            ``Scorer`` (hard makespans of the rounded allocations), ``Smooth`` (the annealed
            objective) and ``StageService`` (the proportional restart); space: its allocation
            space (same D).
        restarts: R >= 1; steps: S >= 1; lr: initial learning rate (> 0).
        temp_start, temp_end: relative temperatures, temp_start >= temp_end > 0.
        seed: PRNG seed of the random restarts.
        optimizer: ``"adam"``, ``"sgd"`` or ``"adabelief"``.

    Returns:
        ``RelaxResult``.

    Raises:
        ValueError: D mismatch, a nonpositive count/rate/temperature, an unknown optimizer.
    """
    if space.D != ev.D:
        raise ValueError(f"space.D={space.D} must equal the evaluator's D={ev.D}")
    restarts, steps = pos_int(restarts, "restarts"), pos_int(steps, "steps")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {optimizer!r}")
    if not (lr > 0 and np.isfinite(lr)):
        raise ValueError(f"lr must be > 0, got {lr!r}")
    if not (0 < temp_end <= temp_start and np.isfinite(temp_start)):
        raise ValueError(f"temperatures must satisfy 0 < temp_end <= temp_start, got "
                         f"temp_start={temp_start!r}, temp_end={temp_end!r}")
    D = space.D
    sd = seeds(ev, space)
    scale = float(ev.makespan(sd["uniform"][None])[0])
    temps = scale * np.geomspace(temp_start, temp_end, steps)
    free = float(space.budget - D * space.minimum)
    rng = np.random.default_rng(seed)
    z0 = rng.normal(0.0, 1.0, size=(restarts, D))
    z0[0] = 0.0
    if restarts > 1:
        share = (sd["proportional"] - space.minimum) / max(free, 1.0)
        z0[1] = np.log(np.maximum(share, 1e-3))
    D_pad = max(8, D)
    zp = np.zeros((restarts, D_pad))
    zp[:, :D] = z0
    terms = ev.smooth_terms()
    z, hist = ANNEAL(terms.seg_table, terms.seg_stage, terms.arrs, to_device(zp, ev.dtype),
                      to_device(np.arange(D_pad) < D), to_device(temps, ev.dtype),
                      to_device(lr, ev.dtype), to_device(space.minimum, ev.dtype),
                      to_device(free, ev.dtype), optimizer)
    zz = np.asarray(z, dtype=np.float64)[:, :D]
    sm = np.exp(zz - zz.max(1, keepdims=True))
    cont = space.minimum + free * sm / sm.sum(1, keepdims=True)
    rounded = space.round(cont)
    hard = ev.makespan(rounded)
    j = int(np.argmin(hard))
    return RelaxResult(continuous=cont, rounded=rounded, rounded_us=hard,
                       smooth_history=np.asarray(hist), temps=temps, best=rounded[j],
                       best_us=float(hard[j]))


def relax_and_polish(problem: Problem, seg_of: Sequence[int], D: int, w: int, m: int,
                     policy: str = DEFAULT_POLICY, *, exact: Callable[[Config], float],
                     L_sim: int | None = None, polish_top: int = 1, **relax_kw) -> AllocResult:
    """Relaxation + rounding + exact polish on one structure (our extension of docs/method.md §4).

    Runs ``relax_allocation``, takes the ``polish_top`` best distinct rounded allocations (by
    the cheap makespan) and polishes each with ``pairwise_line`` scored by the exact scorer
    (pass limit ``L_sim``); returns the best.

    Args:
        problem, seg_of, D, w, m, policy: the structure.
        exact: the exact scorer ``Config -> makespan µs`` (required, keyword-only; see
            ``allocate_pairwise``), memoised.
        L_sim: pass limit of the exact polish (None = until no move improves).
        polish_top: rounded candidates polished (>= 1).
        **relax_kw: forwarded to ``relax_allocation``.

    Returns:
        ``AllocResult`` (``cheap_evals`` counts the rounded allocations scored; the annealing
        steps are restarts x steps smooth evaluations, not counted).
    """
    t0 = time.perf_counter()
    polish_top = pos_int(polish_top, "polish_top")
    memo = memoised(exact)
    calls0 = memo.calls
    space = problem.space(D)
    ev = problem.evaluator(seg_of, D, w, m, policy)
    rr = relax_allocation(ev, space, **relax_kw)
    f_exact = problem.exact_batch(memo, seg_of, D, w, m, policy)
    order = np.argsort(rr.rounded_us, kind="stable")
    picked: list[np.ndarray] = []
    for i in order:
        if not any(np.array_equal(rr.rounded[i], q) for q in picked):
            picked.append(rr.rounded[i])
        if len(picked) == polish_top:
            break
    best = None
    for q in picked:
        pol = pairwise_line(f_exact, q, space, L_sim)
        if best is None or pol.value < best.value:
            best = pol
    return AllocResult(alloc=best.alloc, makespan_us=best.value, exact_calls=memo.calls - calls0,
                       cheap_evals=len(rr.rounded), seeds={"relax_best_cheap": rr.best_us},
                       seconds=time.perf_counter() - t0)
