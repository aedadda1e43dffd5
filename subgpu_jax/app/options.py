"""Typed option values of the ``subgpu`` command line (``app/cli.py``; ``hw_runtime/commands/``
uses them too): comma-separated lists (``int_list``, ``str_list``), the model and its options
(``ArchOptions`` with its ``from_args`` constructor, ``model_of``, ``resolve_arch``: they take
an ``ArchOptions`` or a parsed ``Namespace`` alike), the KV lengths of ``--kv-lengths``, the L2
policy (``resolve_cache``), the grid-size limit (``check_grid_size``), a search record's
configuration options (``record_config_options``), the one-line parser and usage error, and the
SM split of ``subgpu simulate`` (given, even, or a quick search: ``choose_split``,
``split_effect``). The helpers that declare options or read and complete a parsed
``Namespace`` are in ``app/args.py``.

The GPU runtime's workflows (``hw_runtime/commands/``, ``hw_runtime/tune/``) use these helpers
and import the app's other functions from the modules that define them, with plain imports; the
runtime core (``hw_runtime/gpu/``, ``plan.py``, ``timeline.py``) imports nothing of the app
(``tests/test_layering.py``).
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass

__all__ = ["int_list", "str_list", "model_of", "ArchOptions", "resolve_arch", "choose_split",
           "resolve_cache", "usage_error", "kv_lengths_from", "check_grid_size", "OneLineParser",
           "record_config_options", "split_effect"]


def check_grid_size(shapes: int, batches: int, per_deployment: int) -> None:
    """Refuse a search grid larger than ``checks.LIMITS["grid_points"]`` before it is built:
    ``shapes`` parallelisms x ``batches`` x (``per_deployment`` pipelined points + temporal).

    Raises:
        ValueError: one line with the size and the limit.
    """
    from subgpu_jax.model.checks import LIMITS

    size = shapes * batches * (per_deployment + 1)
    if size > LIMITS["grid_points"]:
        raise ValueError(f"grid: {size:,} grid points (parallelisms x --batches x (--microbatches "
                         f"x --stages x --policies x --streams-per-stage + temporal)); at most "
                         f"{LIMITS['grid_points']:,} in one search: split it into several --out")


def _typed(parse):
    """An argparse type from a checks parser: its ValueError message becomes argparse's."""
    def typed(text: str):
        try:
            return parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    typed.__name__ = parse.__name__
    return typed


class OneLineParser(argparse.ArgumentParser):
    """ArgumentParser whose usage errors are one line (``error: ...``) and exit code 2 (the
    ``subgpu`` command's); without a command it names the option given and the commands.
    Abbreviated long options are refused (``--kv-hist`` is not ``--kv-history``): a typo must
    never be taken for another option silently."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        from subgpu_jax.model.checks import ascii_float, ascii_int

        # type=int / type=float read ASCII only ('２' is no 2): checks.ascii_int, ascii_float
        self.register("type", int, _typed(ascii_int))
        self.register("type", float, _typed(ascii_float))

    def parse_args(self, args=None, namespace=None):  # noqa: D102 - argparse API
        self.argv = list(sys.argv[1:] if args is None else args)
        return super().parse_args(args, namespace)

    def error(self, message: str):  # noqa: D401 - argparse API
        subs = [x for x in self._actions if isinstance(x, argparse._SubParsersAction)]
        if subs and "required: cmd" in message:  # `subgpu --bogus`: name what was wrong
            given = next((x for x in getattr(self, "argv", []) if x.startswith("-")), None)
            message = (f"no command given{f' (unrecognized option {given})' if given else ''}; "
                       f"the commands are {', '.join(subs[0].choices)}")
        from subgpu_jax.app.flagterms import unrecognized_hint  # what to type instead
        hint = unrecognized_hint(self, getattr(self, "argv", []), message)
        message = f"{message}; {hint}" if hint else message
        sys.stderr.write(f"error: {self.prog}: {message} (see --help)\n")
        sys.exit(2)


def usage_error(msg: str) -> int:
    """Print ``error: msg`` (one line, no traceback) on stderr for a bad command-line argument
    of a script (the experiments' entry points); returns the exit code 2."""
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


def record_config_options(rec) -> dict:
    """The configuration options of ``subgpu simulate``/``run`` that reproduce a search record
    (the command-line form of ``Config.to_record``'s fields; the one place the record's
    ``"|"``-joined ``cuts`` and ``sms`` become the options' comma-separated lists).

    Args:
        rec: a search record (``records.csv`` row or ``summary.json`` record).

    Returns:
        ``{"cuts": "L1.attn,L1.o_proj" or None (no cut), "sms": "48,78,22", "microbatch": int,
        "reuse": bool, "policy": str, "streams_per_stage": int}``.

    Raises:
        KeyError: a missing field. ValueError: a field that is not an integer.
    """
    return {"cuts": ",".join(rec["cuts"].split("|")) if rec["cuts"] else None,
            "sms": ",".join(str(rec["sms"]).split("|")),
            "microbatch": int(rec["microbatch"]), "reuse": bool(int(rec["w"])),
            "policy": rec.get("policy") or "wavefront",
            "streams_per_stage": int(rec.get("streams_per_stage") or 1)}


def int_list(s: str, field: str, unique: bool = True) -> list[int]:
    """Parse a comma-separated list of integers; with ``unique``, duplicates are an error.

    Raises:
        ValueError: not integers, empty, or duplicated values (names ``field``).
    """
    from subgpu_jax.model.checks import ascii_int

    items = [x.strip() for x in s.split(",")]
    if not any(items):
        raise ValueError(f"{field} must not be empty")
    try:  # an empty item ('2,,3') is a typo, not a shorter list
        v = [ascii_int(x) for x in items]
    except ValueError:
        raise ValueError(f"{field} must be a comma-separated list of integers (digits 0-9), "
                         f"got {s!r}") from None
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


def model_of(a):
    """The model of parsed workload arguments (``--model``/``--config``, ``--name``), as
    ``model.models.resolve_model`` reads it.

    Raises:
        ValueError: as ``resolve_model``; a config file's problem names ``--model/--config``."""
    from subgpu_jax.model.models import resolve_model

    try:
        return resolve_model(a.model, getattr(a, "name", None))   # a Namespace or ArchOptions
    except ValueError as e:   # a file's problem: name the option it came from
        msg = str(e)
        raise ValueError(msg if msg.startswith(("model", "name")) else
                         f"--model/--config: {msg}") from None


@dataclass(frozen=True)
class ArchOptions:
    """The options that decide the model as it is simulated or run and its MoE EP degree
    (``resolve_arch``): typed, from parsed arguments (``from_args``) or a run request.

    Attributes:
        model: ``--model``/``--config`` (a preset name or a ``config.json`` path). name:
            ``--name`` (None: the file's). expert_dtype, kv_dtype: ``--expert-dtype``,
            ``--kv-dtype`` (None: the model's). calibration: ``--calibration`` path (None).
        moe_gemm: ``--moe-gemm`` (``auto`` or None: no choice made). dispatch: ``--dispatch``.
        ep: ``--ep`` (None: its default from ``gpus``). gpus: ``--gpus``.
    """

    model: str
    gpus: int
    ep: int | None = None
    name: str | None = None
    expert_dtype: str | None = None
    kv_dtype: str | None = None
    calibration: str | None = None
    moe_gemm: str | None = "auto"
    dispatch: str = "per-expert"

    @classmethod
    def from_args(cls, a) -> "ArchOptions":
        """From parsed arguments of any command (the options it lacks at their defaults)."""
        ns = vars(a)
        return cls(model=a.model, gpus=a.gpus, ep=a.ep,
                   **{f: ns[f] for f in ("name", "expert_dtype", "kv_dtype", "calibration",
                                         "moe_gemm", "dispatch") if f in ns})


def resolve_arch(o: ArchOptions):
    """The model (with ``--expert-dtype`` and ``--kv-dtype`` applied) and the MoE EP degree
    (``--ep`` or its default). A ``--calibration`` measured with every module group in bf16
    (``subgpu calibrate`` on Hopper) builds the model so too, unless ``--expert-dtype`` says
    otherwise (then the calibration's check names the mismatch).

    Returns:
        ``(ModelArch, ep)``.

    Raises:
        ValueError: as ``model_of``; ``--expert-dtype``, ``--moe-gemm`` or ``--dispatch
            per-rank`` for a dense model.
    """
    import dataclasses

    arch = model_of(o)
    if o.calibration and not o.expert_dtype:
        from subgpu_jax.model.calibration import measured_weights_dtype
        if measured_weights_dtype(o.calibration) == "bf16":  # as the GPU runtime builds it
            arch = arch.all_bf16()
    if o.expert_dtype:
        if not arch.is_moe:
            raise ValueError(f"expert-dtype: {arch.name} is a dense model without experts")
        arch = dataclasses.replace(arch, expert_dtype=o.expert_dtype)
    if o.kv_dtype:
        arch = dataclasses.replace(arch, kv_dtype=o.kv_dtype)
    if o.moe_gemm not in ("auto", None) and not arch.is_moe:
        raise ValueError(f"moe-gemm: {arch.name} is a dense model without expert GEMMs (leave "
                         f"--moe-gemm at auto)")
    if o.dispatch != "per-expert" and not arch.is_moe:
        raise ValueError(f"dispatch: {arch.name} is a dense model without an MoE dispatch")
    ep = o.ep
    if ep is None:  # the largest divisor of both --gpus and the expert count: their gcd
        ep = math.gcd(o.gpus, arch.num_experts) if arch.is_moe and o.gpus >= 1 else 1
    return arch, ep


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

    even = even_allocation(hw.sm_budget, cfg.D, hw.sm_quantum,
                           hw.even_split_min_sms(cfg.D)).tolist()
    info: dict = {"how": how if how in ("search", "even") else "given",
                  "even_split": [int(x) for x in even]}
    if info["how"] != "search":
        return cfg, info
    if cfg.D * hw.stage_min_sms > hw.sm_budget:   # the search's space is empty
        raise ValueError(f"cuts: {cfg.D} stages of at least {hw.stage_min_sms} SMs (the "
                         f"runtime's minimum on the {hw.name}) need {cfg.D * hw.stage_min_sms} "
                         f"> {hw.sm_budget} SMs; give fewer --cuts, or --sms (or --sms even) to "
                         f"simulate smaller stages")
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


#: Largest SIGMA of ``--kv-lengths lognormal:MEDIAN:SIGMA`` (a spread of e^4 ~ 55x per
#: standard deviation; serving traces have SIGMA ~ 1).
SIGMA_MAX = 4.0


def kv_lengths_from(spec: str, count: int) -> tuple[int, ...]:
    """Per-request KV lengths (tokens) from ``--kv-lengths``: a file of integers in
    1..``LIMITS["tokens"]``, or ``uniform:LO:HI`` (integers, 1 <= LO <= HI <= 16,777,216) /
    ``lognormal:MEDIAN:SIGMA`` (1 <= MEDIAN <= 16,777,216, 0 <= SIGMA <= ``SIGMA_MAX``; samples
    rounded and truncated to 1..16,777,216) sampled for ``count`` requests with seed 0.

    Raises:
        ValueError: an unreadable file, non-integers, or a bad distribution (names the option).
    """
    import numpy as np

    from subgpu_jax.model.checks import LIMITS, ascii_float, ascii_int

    top = LIMITS["tokens"]
    kind, _, rest = spec.partition(":")
    if kind in ("uniform", "lognormal") and rest:
        form = "uniform:LO:HI" if kind == "uniform" else "lognormal:MEDIAN:SIGMA"
        try:
            a_, b_ = (ascii_float(x) for x in rest.split(":"))
        except ValueError:
            raise ValueError(f"--kv-lengths: {kind} needs two numbers, {form}, got "
                             f"{spec!r}") from None
        rng = np.random.default_rng(0)
        if kind == "uniform":
            if not (a_.is_integer() and b_.is_integer() and 1 <= a_ <= b_ <= top):
                raise ValueError(f"--kv-lengths: uniform:LO:HI needs integers 1 <= LO <= HI <= "
                                 f"{top:,} (tokens), got {spec!r}")
            x = rng.integers(int(a_), int(b_) + 1, size=count)
        else:
            if not (1 <= a_ <= top and 0 <= b_ <= SIGMA_MAX):  # NaN fails both
                raise ValueError(f"--kv-lengths: lognormal:MEDIAN:SIGMA needs 1 <= MEDIAN <= "
                                 f"{top:,} tokens and 0 <= SIGMA <= {SIGMA_MAX:g}, got {spec!r}")
            # the samples are the lognormal truncated to 1..LIMITS["tokens"] (documented)
            x = np.clip(np.rint(a_ * np.exp(b_ * rng.standard_normal(count))), 1, top)
        return tuple(int(v) for v in x)
    try:
        with open(spec, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as e:
        raise ValueError(f"kv-lengths: cannot read {spec!r} ({e.strerror or e}); give a file "
                         "or uniform:LO:HI / lognormal:MEDIAN:SIGMA") from None
    except UnicodeDecodeError:
        raise ValueError(f"kv-lengths: {spec!r} is not a text file of integers") from None
    toks = text.replace("[", " ").replace("]", " ").replace(",", " ").split()
    try:
        vals = tuple(ascii_int(t) for t in toks)
    except ValueError:
        raise ValueError(f"kv-lengths: {spec!r} must hold integers (tokens)") from None
    if not vals or min(vals) < 1 or max(vals) > top:
        raise ValueError(f"--kv-lengths: {spec!r} must hold integers in 1..{top:,} (tokens)")
    return vals
