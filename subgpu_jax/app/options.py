"""Option helpers of the ``subgpu`` command line (``app/cli.py``; ``hw_runtime/cli.py`` uses
them too): comma-separated lists, the model and EP degree, the attention TP x DP defaults for a
GPU count, and the SM split of ``subgpu simulate`` (given, even, or a quick search).
"""

from __future__ import annotations

__all__ = ["int_list", "str_list", "resolve_arch_ep", "resolve_parallelism", "choose_split",
           "resolve_cache", "usage_error"]


def usage_error(msg: str) -> int:
    """Print ``error: msg`` (one line, no traceback) on stderr for a bad command-line argument
    of a script (the experiments' entry points); returns the exit code 2."""
    import sys

    print(f"error: {msg}", file=sys.stderr)
    return 2


def resolve_cache(cache: str | None, calibration: str | None) -> str:
    """The L2 policy of the event simulator when ``--cache`` is not given: ``none`` with a
    calibration (the measured kernel times already hold the L2 behaviour of the real run, so
    the residency model would count those hits twice; docs/fidelity.md), else ``lru``.

    Args:
        cache: the ``--cache`` option (None = not given). calibration: the ``--calibration`` path.

    Returns:
        ``cache`` when given, else the default above (validity is checked by
        ``sim.l2cache.check_policy``).
    """
    if cache is not None:
        return cache
    return "none" if calibration else "lru"


def int_list(s: str, field: str, unique: bool = True) -> list[int]:
    """Parse a comma-separated list of integers; with ``unique``, duplicates are an error.

    Raises:
        ValueError: not integers, empty, or duplicated values (names ``field``).
    """
    try:
        v = [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{field} must be a comma-separated list of integers, got {s!r}") from None
    if not v:
        raise ValueError(f"{field} must not be empty")
    if unique and len(set(v)) != len(v):
        raise ValueError(f"{field} has duplicated values: {v}")
    return v


def str_list(s: str, field: str) -> list[str]:
    """Parse a comma-separated list of names (spaces around items are ignored).

    Raises:
        ValueError: an empty item or an empty list (names ``field``).
    """
    v = [x.strip() for x in s.split(",")]
    if not any(v):
        raise ValueError(f"{field} must not be empty")
    if not all(v):
        raise ValueError(f"{field} has an empty item in {s!r}: give comma-separated names or "
                         "indices")
    return v


def resolve_arch_ep(a):
    """The model (with ``--expert-dtype`` applied) and the MoE EP degree (``--ep`` or its
    default) of parsed workload arguments."""
    import dataclasses

    from subgpu_jax.model.models import resolve_model

    arch = resolve_model(a.model)
    if getattr(a, "expert_dtype", None):
        if not arch.is_moe:
            raise ValueError(f"expert-dtype: {arch.name} is a dense model without experts")
        arch = dataclasses.replace(arch, expert_dtype=a.expert_dtype)
    ep = a.ep
    if ep is None:
        if arch.is_moe and a.gpus >= 1:
            ep = max(x for x in range(1, a.gpus + 1)
                     if a.gpus % x == 0 and arch.num_experts % x == 0)
        else:
            ep = 1
    return arch, ep


def resolve_parallelism(a) -> None:
    """Fill in ``a.tp`` / ``a.dp`` left at their defaults (None) for ``a.gpus`` GPUs: the one
    given determines the other (n = t x d); with neither, t is the largest of 1..8 dividing
    ``--gpus`` and the model's query heads (``sweep.outer_parallelisms``) and d = n / t. Sets
    ``a.parallelism_given`` to the options the user gave (``["tp"]``, ``["tp", "dp"]``, ...).

    Raises:
        ValueError: ``--gpus`` not divisible by the given ``--tp`` or ``--dp`` (one line naming
            them), or no split fits the model.
    """
    if getattr(a, "gpus", None) is None:
        return
    a.parallelism_given = [f for f in ("tp", "dp") if getattr(a, f) is not None]
    if a.tp is not None and a.dp is not None:
        return
    if a.gpus < 1:
        raise ValueError(f"gpus must be a positive integer, got {a.gpus}")
    if a.tp is not None or a.dp is not None:
        name, given, other = ("tp", a.tp, "dp") if a.tp is not None else ("dp", a.dp, "tp")
        if given < 1 or a.gpus % given:
            raise ValueError(f"{name}: --gpus {a.gpus} is not a multiple of --{name} {given}; "
                             f"give --{other} too, or a --{name} that divides --gpus")
        setattr(a, other, a.gpus // given)
        return
    from subgpu_jax.app.sweep import outer_parallelisms
    from subgpu_jax.model.models import resolve_model

    t, d, _ = outer_parallelisms(resolve_model(a.model), a.gpus)[-1]
    a.tp, a.dp = t, d


def choose_split(wl, hw, cfg, m: int, how: str, exact, duration_model, score):
    """The SM split of ``simulate``: the given one, the even one, or (``how == "search"``) the
    best found by steps 4-5 of Algorithm 1 (``search.allocate_pairwise``: uniform and
    work-proportional seeds refined with the static estimator, then polished with ``exact``) on
    ``cfg``'s cut.

    Args:
        wl: the workload; hw: the GPU (calibrated when a calibration is used); cfg: the
            configuration with the even split (or the user's); m: microbatches; how:
            ``"search"``, ``"even"`` or ``"given"`` (anything else); exact: ``Config -> µs``
            polishing scorer (None: the static evaluator); duration_model: the static
            estimator's kernel times (None: analytical); score: ``Config -> µs`` of the
            simulator the command reports (for the even split's makespan).

    Returns:
        ``(cfg, info)``: the configuration to report and ``{"how", "even_split", ...}`` with,
        after a search, ``exact_calls``, ``seconds`` and ``even_makespan_us`` (µs).
    """
    import dataclasses

    from subgpu_jax.space.config import even_allocation

    even = even_allocation(hw.sm_budget, cfg.D, hw.sm_quantum, hw.min_pool_sms).tolist()
    info: dict = {"how": how if how in ("search", "even") else "given",
                  "even_split": [int(x) for x in even]}
    if info["how"] != "search":
        return cfg, info
    from subgpu_jax.search import Problem, allocate_pairwise

    prob = Problem(wl, hw, duration_model,
                   streams_per_stage=getattr(cfg, "streams_per_stage", 1))
    r = allocate_pairwise(prob, cfg.seg_of, cfg.D, cfg.w, m, cfg.policy, exact=exact, L_sim=2)
    even_cfg = dataclasses.replace(cfg, alloc=tuple(info["even_split"]))
    info.update(exact_calls=int(r.exact_calls), seconds=float(r.seconds),
                even_makespan_us=float(score(even_cfg)))
    return dataclasses.replace(cfg, alloc=tuple(int(x) for x in r.alloc)), info


def split_effect(speedup: float, choice: dict) -> str:
    """How much the searched SM split changes the speedup against the even split, in words for
    ``subgpu simulate``: "the split matters" when the two speedups differ by 1% or more, else
    that it changes the result by under 1%.

    Args:
        speedup: the configuration's speedup (x). choice: ``sms_choice`` with ``even_speedup``.
    """
    even = float(choice["even_speedup"])
    if even > 0 and abs(float(speedup) / even - 1.0) < 0.01:
        return "the split changes the speedup by under 1% here"
    return "the split matters"
