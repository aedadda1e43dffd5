"""Every ``argparse`` helper of the command line, in one place (``subgpu`` and the runtime's
``run``, ``calibrate``, ``tune``): the options each command declares (workload, strategies,
grid, scoring, serving, topology and traffic) and the functions that read or complete a parsed
``Namespace`` (``resolve_context``, ``resolve_parallelism``, ``resolve_arch_ep``,
``serving_options``, ``topology_options``, ``check_bounds``, ``workload_of``: their checked
workload, and the flags a search prints back: ``serving_args``, ``topology_args``). Imported by
every parser that takes them, so the runtime's commands never import the CLI module itself
(under ``python -m subgpu_jax.app.cli`` that module is ``__main__``, and importing it again
would load it twice). Typed values and parsing of single values (lists, ``ArchOptions``, the SM
split of ``simulate``) live in ``app/options.py``, with ``model_of`` (``options.resolve_arch``
reads it, and ``args`` imports ``options``: here it would close a cycle).
"""

from __future__ import annotations

import argparse

from subgpu_jax.model.hardware import HARDWARE
from subgpu_jax.model.deployment import DEFAULT_CONTEXT
from subgpu_jax.model.models import DEFAULT_MODEL, MODEL_TYPES, MODELS
from subgpu_jax.app.options import (ArchOptions, int_list, kv_lengths_from, model_of,
                                   resolve_arch)

__all__ = ["DEFAULT_L_SIM", "add_workload_args", "add_strategy_args", "strategies_from_args",
           "GRID_DEFAULTS", "grid_default", "add_grid_args", "add_scoring_args", "KV_DTYPES",
           "DEFAULT_GPU_MEMORY_UTILIZATION", "add_serving_args", "resolve_context",
           "serving_options", "serving_args", "TOPOLOGY_DEFAULTS", "topology_args", "INT_OPTIONS",
           "LIST_OPTIONS", "FLOAT_OPTIONS", "check_bounds", "resolve_arch_ep",
           "resolve_parallelism", "TOPOLOGIES", "add_topology_args", "topology_options",
           "given_tp_ep", "workload_of"]

#: The search grid's defaults, written once: ``subgpu search`` and ``subgpu tune`` take them
#: (``add_grid_args``), ``hw_runtime.tune.spec.TuneSpec`` too. Comma-separated, as typed.
GRID_DEFAULTS: dict[str, str] = {"batches": "512,1024,2048", "stages": "2,3",
                                 "microbatches": "2,4", "streams_per_stage": "1"}


def grid_default(name: str) -> tuple[int, ...]:
    """``GRID_DEFAULTS[name]`` as integers (``stages``, ``microbatches``, ``streams_per_stage``,
    ``batches``), for the dataclasses whose fields take the grid's defaults."""
    return tuple(int(x) for x in GRID_DEFAULTS[name].split(","))


#: The pass limit of the search's exact polish (``--l-sim``; ``SearchOptions.L_sim``).
DEFAULT_L_SIM = 2


def add_workload_args(p: argparse.ArgumentParser, hardware: str | None = "B200",
                      serving: bool = False, batch: bool = True,
                      hardware_help: str | None = None) -> None:
    """Add the workload options (model, GPU, deployment, batch, KV history) to ``p``.

    Args:
        p: a sub-command's parser. hardware: the ``--hardware`` default of this command (its
            help text says it), or None for a command that resolves it itself (the runtime's:
            the GPU it runs on); hardware_help: what the help says of that default then.
            serving: add the serving options too (``--output-len``, ``--kv-dtype``,
            ``--gpu-memory-utilization``, ``--dispatch``: ``add_serving_args``).
            batch: list ``--batch`` in the help (False for ``search``, which takes
            ``--batches`` and refuses ``--batch`` naming it).
    """
    g = p.add_argument_group("workload (defaults: the reference workload, docs/method.md §5)")
    g.add_argument("--model", "--config", dest="model", default=DEFAULT_MODEL,
                   help=f"model preset ({', '.join(MODELS)}) or path to a Hugging Face "
                        f"config.json (model_type {', '.join(MODEL_TYPES)}); --config FILE is "
                        f"the same. Default: {DEFAULT_MODEL}")
    g.add_argument("--name", default=None,
                   help="name of a model read from a config.json (what the output and the "
                        "results call it). Default: the file's _name_or_path or name_or_path "
                        "field, else the name of its folder")
    g.add_argument("--hardware", default=hardware,
                   help=f"GPU preset ({', '.join(HARDWARE)}). Default: "
                        f"{hardware or hardware_help}. A suffix "
                        "picks the uncalibrated model version: H200:analytic-v3 times kernels as "
                        "the runtime's fused kernels and pool-tuned GEMMs run them (the default), "
                        "H200:analytic-v2 the previous version (docs/fidelity.md §6)")
    g.add_argument("--gpus", type=int, default=32, help="GPUs serving the model, n = TP x DP. "
                   "Default: 32")
    g.add_argument("--tp", type=int, default=None,
                   help="attention tensor parallelism t. Default: --gpus / --dp, or without "
                        "--dp the largest t <= 8 dividing --gpus and the query heads (8 for the "
                        "reference workload)")
    g.add_argument("--dp", type=int, default=None,
                   help="attention data parallelism d. Default: --gpus / --tp (4 for the "
                        "reference workload)")
    g.add_argument("--ep", type=int, default=None,
                   help="MoE expert parallelism e. Default: --gpus for MoE models (the largest "
                        "divisor of both --gpus and the expert count), 1 for dense models")
    g.add_argument("--expert-dtype", default=None, choices=("bf16", "fp8", "mxfp4"),
                   help="datatype of the expert weights. Default: the model's (MXFP4 for "
                        "GPT-OSS); use bf16 to match what Hopper runs (`subgpu run`)")
    g.add_argument("--batch", type=int, default=2048,
                   help="global decode batch G (requests = tokens per step). Default: 2048"
                   if batch else argparse.SUPPRESS)
    g.add_argument("--input-len", type=int, default=None,
                   help=f"prompt length (tokens). Default: --kv-history, or {DEFAULT_CONTEXT}")
    g.add_argument("--kv-history", type=int, default=None,
                   help="tokens in each request's KV cache at the decode step timed (>= "
                        "--input-len). Default: --input-len (the first step after the prompt), "
                        f"or {DEFAULT_CONTEXT}")
    if serving:
        add_serving_args(g)


#: The strategy flags of ``add_strategy_args``: (flag prefix, noun, what it chooses); the
#: choices, their one-line summaries and their options come from the registries.
_STRATEGY_FLAGS = (("cut", "cut", "how Algorithm 1 chooses the cut"),
                   ("alloc", "allocation", "allocation search per cut"))


def add_strategy_args(g, command: str = "search") -> None:
    """Add the search's strategy options to the argument group ``g``: ``--cut-strategy``,
    ``--cut-options``, ``--alloc-strategy``, ``--alloc-options``, their choices and defaults
    from the registries of ``search.strategies`` (``subgpu search`` and ``subgpu tune`` take
    the same ones; ``command`` names the command in the help)."""
    from subgpu_jax.search.strategies import (ALLOC_STRATEGIES, CUT_STRATEGY_REGISTRY,
                                              DEFAULT_ALLOC_STRATEGY, DEFAULT_CUT_STRATEGY,
                                              strategies_help, strategy_options)

    regs = {"cut": (CUT_STRATEGY_REGISTRY, DEFAULT_CUT_STRATEGY),
            "alloc": (ALLOC_STRATEGIES, DEFAULT_ALLOC_STRATEGY)}
    as_search = "" if command == "search" else " (as `subgpu search`)"
    for kind, noun, what in _STRATEGY_FLAGS:
        reg, default = regs[kind]
        takes = "; ".join(f"{n}: " + ", ".join(f"{k}={v}" for k, v in
                                               strategy_options(st).items())
                          for n, st in reg.items() if strategy_options(st))
        g.add_argument(f"--{kind}-strategy", default=default, choices=tuple(reg),
                       help=(f"{what}: {strategies_help(reg, default)}"
                             + as_search).replace("%", "%%"))
        g.add_argument(f"--{kind}-options", metavar="K=V[,K=V]", default=None,
                       help=f"options of the {noun} strategy, with their defaults ({takes}; the "
                            f"others take none), recorded in the sweep"
                            + as_search)


def strategies_from_args(a) -> tuple:
    """The (cut, allocation) strategy objects of parsed ``add_strategy_args`` options, made once
    at the command line's edge (``search.strategies.make_strategies``).

    Raises:
        ValueError: a bad option (one line naming ``--cut-options`` or ``--alloc-options``)."""
    from subgpu_jax.search.strategies import make_strategies

    return make_strategies(a.cut_strategy, a.cut_options, a.alloc_strategy, a.alloc_options)


def add_grid_args(g, command: str = "search") -> None:
    """Add the search grid's options to the argument group ``g`` (``subgpu search`` and
    ``subgpu tune`` take the same ones, defaults ``GRID_DEFAULTS``): ``--batches``,
    ``--stages``, ``--microbatches``, ``--policies``, ``--streams-per-stage``; ``command``
    names the command in the help."""
    from subgpu_jax.space.config import DEFAULT_POLICY, DISPATCH_POLICIES

    d = GRID_DEFAULTS
    full = " (use 2,3,4,5,6 for the full grid)" if command == "search" else ""
    g.add_argument("--batches", default=d["batches"],
                   help=f"comma-separated global batches G (requests). Default: {d['batches']}")
    g.add_argument("--stages", default=d["stages"],
                   help=f"comma-separated stage counts D (>= 2). Default: {d['stages']}{full}")
    g.add_argument("--microbatches", default=d["microbatches"],
                   help="comma-separated microbatch counts m (each must divide R = G/d). "
                        f"Default: {d['microbatches']}")
    g.add_argument("--policies", default=DEFAULT_POLICY,
                   help=f"comma-separated dispatch policies ({', '.join(DISPATCH_POLICIES)}). "
                        f"Default: {DEFAULT_POLICY}")
    g.add_argument("--streams-per-stage", default=d["streams_per_stage"], metavar="K[,K...]",
                   help="comma-separated streams per stage k (docs/method.md, 'Streams per "
                        "stage'); every pipelined grid point is searched for each. Default: "
                        + d["streams_per_stage"])


def add_scoring_args(g, command: str = "search") -> None:
    """Add the search's scorers and strategies to the argument group ``g`` (``subgpu search``
    and ``subgpu tune`` take the same ones): ``--exact`` (the timers' registry,
    ``score.timer.TIMERS``), ``--cheap`` (``search.strategies.CHEAP_ESTIMATORS``), the
    strategy options (``add_strategy_args``), ``--l-sim`` and ``--cache``."""
    from subgpu_jax.score.timer import DEFAULT_TIMER, TIMERS, timer_help
    from subgpu_jax.search.strategies import CHEAP_ESTIMATORS, DEFAULT_CHEAP

    as_search = "" if command == "search" else " (as `subgpu search`)"
    g.add_argument("--exact", default=DEFAULT_TIMER, choices=tuple(TIMERS),
                   help="the exact scorer of the search (records and verdicts are the event "
                        "simulator's under event, event-full and screened)" + as_search + ": "
                        + timer_help())
    g.add_argument("--cheap", default=DEFAULT_CHEAP, choices=tuple(CHEAP_ESTIMATORS),
                   help="cheap estimator of the allocation search: auto (default: the "
                        "contention-aware vcontention scorer beside a contention timer, else "
                        "static), vcontention, or static (isolated kernel durations)" + as_search)
    add_strategy_args(g, command)
    g.add_argument("--l-sim", type=int, default=DEFAULT_L_SIM,
                   help="pass limit of the exact polish (Algorithm 2 with the exact scorer). "
                        f"Default: {DEFAULT_L_SIM}")
    g.add_argument("--cache", default=None,
                   help="L2 policy of the event simulator (lru, fifo, none; default none once "
                        "calibrated, else lru)")


# -- the serving, topology and traffic options; checks and defaults of parsed options --------

#: ``--kv-dtype`` choices: the KV cache's datatype (bf16, or FP8 E4M3 as vLLM's
#: ``--kv-cache-dtype fp8`` stores it: half the bytes).
KV_DTYPES = ("bf16", "fp8")


#: ``--gpu-memory-utilization`` default: vLLM's (``EngineArgs.gpu_memory_utilization`` = 0.9).
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9


def add_serving_args(g, moe: bool = True) -> None:
    """Declare the serving options on the argument group ``g`` (a workload group that already
    has ``--input-len`` and ``--kv-history``): ``--output-len``, ``--kv-dtype``,
    ``--gpu-memory-utilization`` and, with ``moe``, ``--dispatch`` (docs/accounting.md)."""
    from subgpu_jax.model.routing import DISPATCH_MODES

    g.add_argument("--output-len", type=int, default=None, metavar="N",
                   help="tokens generated per request: time a whole generation, the KV history "
                        "growing from --input-len to --input-len + N, and report the time per "
                        "output token averaged over it (3 steps simulated: start, middle, end). "
                        "Default: one decode step at --kv-history")
    g.add_argument("--kv-dtype", default=None, choices=KV_DTYPES,
                   help="datatype of the KV cache (fp8 halves its bytes, in the step and in the "
                        "memory check). Default: the model's (bf16)")
    g.add_argument("--gpu-memory-utilization", type=float,
                   default=DEFAULT_GPU_MEMORY_UTILIZATION, metavar="U",
                   help="fraction of each GPU's HBM for weights + KV cache + activations, as "
                        "vLLM's option of the same name (the rest for CUDA graphs, NCCL, the "
                        "context); a batch that needs more is refused. Default: 0.9")
    if moe:
        g.add_argument("--dispatch", default=DISPATCH_MODES[0], choices=DISPATCH_MODES,
                       help="MoE dispatch payload: per-expert (one copy of a token per selected "
                            "expert on another rank, default) or per-rank (one copy per "
                            "destination rank, deduplicated as DeepEP does)")


def resolve_context(a) -> None:
    """Fill in ``a.input_len`` and ``a.kv_history`` (None when not given) consistently: the one
    given sets the other (the first decode step after the prompt), 32,768 each when neither is;
    check ``--output-len`` and ``--gpu-memory-utilization``.

    Raises:
        ValueError: a KV history shorter than the prompt, ``--kv-history`` with
            ``--output-len`` (the generation starts at the prompt), ``--output-len`` < 1, or a
            utilization outside (0, 1] (one line naming the flag).
    """
    if not hasattr(a, "input_len"):
        return
    out = getattr(a, "output_len", None)
    if out is not None and out < 1:
        raise ValueError(f"output-len must be a positive number of tokens, got {out}")
    if out is not None and a.kv_history is not None:
        raise ValueError("kv-history: with --output-len the KV history grows from --input-len "
                         "to --input-len + --output-len; leave out --kv-history")
    for f in ("input_len", "kv_history"):
        v = getattr(a, f)
        if v is not None and v < 1:
            raise ValueError(f"{f.replace('_', '-')} must be a positive number of tokens, got {v}")
    if a.input_len is None and a.kv_history is None:
        a.input_len = a.kv_history = DEFAULT_CONTEXT
    elif a.kv_history is None:
        a.kv_history = a.input_len
    elif a.input_len is None:
        a.input_len = a.kv_history
    elif a.kv_history < a.input_len:
        raise ValueError(f"kv-history: {a.kv_history} tokens is shorter than --input-len "
                         f"{a.input_len}; the prompt is in the KV cache at every decode step")
    u = getattr(a, "gpu_memory_utilization", DEFAULT_GPU_MEMORY_UTILIZATION)
    if not 0 < u <= 1:
        raise ValueError(f"gpu-memory-utilization must be a fraction in (0, 1] of each GPU's "
                         f"HBM, got {u}")


def serving_options(a) -> dict:
    """``Deployment`` keyword arguments of the serving options (after ``resolve_context``):
    ``input_len``, ``kv_history``, ``output_len`` (0 = one step), ``gpu_memory_utilization`` and
    ``dispatch`` (when the command has it)."""
    out = dict(input_len=a.input_len, kv_history=a.kv_history,
               output_len=getattr(a, "output_len", None) or 0,
               gpu_memory_utilization=getattr(a, "gpu_memory_utilization",
                                              DEFAULT_GPU_MEMORY_UTILIZATION))
    if getattr(a, "dispatch", None):
        out["dispatch"] = a.dispatch
    return out


def serving_args(a) -> list[str]:
    """The serving options of parsed arguments that differ from their defaults, as command-line
    arguments (``--output-len``, ``--kv-dtype``, ``--gpu-memory-utilization``, ``--dispatch``),
    for the commands a search prints."""
    from subgpu_jax.model.routing import DISPATCH_MODES

    args = []
    if getattr(a, "output_len", None):
        args += ["--output-len", str(a.output_len)]
    if getattr(a, "kv_dtype", None):
        args += ["--kv-dtype", a.kv_dtype]
    u = getattr(a, "gpu_memory_utilization", DEFAULT_GPU_MEMORY_UTILIZATION)
    if u != DEFAULT_GPU_MEMORY_UTILIZATION:
        args += ["--gpu-memory-utilization", f"{u:g}"]
    if getattr(a, "dispatch", DISPATCH_MODES[0]) != DISPATCH_MODES[0]:
        args += ["--dispatch", a.dispatch]
    return args


#: The defaults of the topology and traffic options (``add_topology_args``):
#: written once, read by the parser and by ``topology_args``.
TOPOLOGY_DEFAULTS: dict = {"topology": "one-domain", "nvlink_domain": None,
                           "scaleout_gbps": 50.0, "routing": "uniform", "routing_imbalance": 1.0,
                           "kv_lengths": None}


def topology_args(a, path=str) -> list[str]:
    """The topology and traffic options of parsed arguments that differ from their defaults
    (``TOPOLOGY_DEFAULTS``), as command-line arguments, for the commands a search prints:
    ``--topology``, ``--nvlink-domain``, ``--scaleout-gbps``, ``--routing``,
    ``--routing-imbalance``, ``--kv-lengths`` (absent options are skipped; ``path`` writes a
    ``--kv-lengths`` value, e.g. absolute)."""
    args = []
    for name, default in TOPOLOGY_DEFAULTS.items():
        v = getattr(a, name, default)
        if v != default:
            args += ["--" + name.replace("_", "-"),
                     path(v) if name == "kv_lengths" else f"{v:g}" if isinstance(v, float)
                     else str(v)]
    return args


#: Integer options of every command (attribute -> (lowest, key of ``checks.LIMITS``)), checked
#: by ``check_bounds`` before any work (absent attributes and None are skipped).
INT_OPTIONS = {
    "gpus": (1, "gpus"), "tp": (1, "gpus"), "dp": (1, "gpus"), "ep": (1, "gpus"),
    "nvlink_domain": (0, "gpus"), "batch": (1, "batch"), "microbatch": (1, "batch"),
    "input_len": (1, "tokens"), "kv_history": (1, "tokens"), "output_len": (0, "tokens"),
    "streams_per_stage": (1, "streams"), "l_sim": (1, "passes"), "budget": (1, "grid_points"),
    "num_processes": (1, "processes"), "process_id": (0, "processes"),
    "sms": (1, "sms"), "quantum": (1, "sms"), "min_pool": (1, "sms"), "top": (1, "grid_points"),
    "rounds": (1, "passes"), "replays": (1, "passes"), "warmup": (0, "passes"),
    "reps": (1, "passes"), "max_rounds": (1, "passes"), "refine_passes": (1, "passes"),
}


#: Comma-separated integer lists (attribute -> (lowest, key of ``checks.LIMITS``)).
LIST_OPTIONS = {"batches": (1, "batch"), "microbatches": (1, "microbatches"),
                "streams_per_stage": (1, "streams"), "stages": (1, "microbatches")}


#: Real-valued options (attribute -> (lowest, highest, lowest excluded)).
FLOAT_OPTIONS = {"scaleout_gbps": (0.01, 1e5, False), "routing_imbalance": (1.0, 1e6, False),
                 "cluster_timeout": (0.0, 86400.0 * 7, True),
                 "min_tokens_per_user": (0.0, 1e12, True),
                 "budget_s": (0.0, 86400.0 * 30, True)}


def check_bounds(a) -> None:
    """Check every count and number of parsed options ``a`` against ``checks.LIMITS`` before
    any work: one line naming the option and what is allowed (no loop or allocation of the
    program grows with a number the user gives beyond these limits).

    Raises:
        ValueError: an integer outside its range, a list item outside it (names the option).
    """
    from subgpu_jax.model.checks import LIMITS, bounded_int, finite

    def flag(attr: str) -> str:
        return "--" + attr.replace("_", "-")

    for attr, (lo, key) in INT_OPTIONS.items():
        v = getattr(a, attr, None)
        if v is not None and not isinstance(v, str):
            bounded_int(v, flag(attr), lo, LIMITS[key])
    for attr, (lo, key) in LIST_OPTIONS.items():
        v = getattr(a, attr, None)
        if isinstance(v, str):
            for x in int_list(v, flag(attr), unique=False):
                bounded_int(x, f"{flag(attr)} (each value)", lo, LIMITS[key])
    for attr, (lo, hi, open_lo) in FLOAT_OPTIONS.items():
        v = getattr(a, attr, None)
        if v is not None:
            finite(v, flag(attr), lo=lo, lo_open=open_lo, hi=hi)


def resolve_arch_ep(a):
    """``resolve_arch`` of parsed workload arguments (``ArchOptions.from_args``)."""
    return resolve_arch(ArchOptions.from_args(a))


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

    t, d, _ = outer_parallelisms(model_of(a), a.gpus)[-1]
    a.tp, a.dp = t, d


#: NVLink domain presets (GPUs per domain; 0 = all GPUs in one domain): DGX/HGX 8-GPU nodes,
#: GB200 NVL72 racks.
TOPOLOGIES = {"one-domain": 0, "hgx8": 8, "nvl72": 72}


def add_topology_args(p: argparse.ArgumentParser) -> None:
    """Add the topology (``--topology``, ``--nvlink-domain``, ``--scaleout-gbps``) and traffic
    (``--routing``, ``--routing-imbalance``, ``--kv-lengths``) options to ``p``."""
    g = p.add_argument_group("topology (default: all GPUs in one NVLink domain)")
    g.add_argument("--topology", default=TOPOLOGY_DEFAULTS["topology"], choices=tuple(TOPOLOGIES),
                   help="NVLink domain preset: one-domain (default), hgx8 (DGX/HGX 8-GPU nodes), "
                        "nvl72 (GB200 NVL72 racks); collectives spanning domains are charged at "
                        "--scaleout-gbps")
    g.add_argument("--nvlink-domain", type=int, default=TOPOLOGY_DEFAULTS["nvlink_domain"],
                   help="GPUs per NVLink domain (overrides --topology; 0 = one domain)")
    g.add_argument("--scaleout-gbps", type=float, default=TOPOLOGY_DEFAULTS["scaleout_gbps"],
                   help="scale-out bandwidth per GPU and direction between domains, GB/s, "
                        "0.01..100000. Default: 50 (one 400 Gb/s NIC per GPU)")
    r = p.add_argument_group("traffic (default: uniform routing, every request at --kv-history)")
    r.add_argument("--routing", default=TOPOLOGY_DEFAULTS["routing"],
                   choices=("uniform", "multinomial"),
                   help="expert load of the busiest EP rank: uniform (the mean G*k/n, default) "
                        "or multinomial (expected maximum under random routing of a microbatch)")
    r.add_argument("--routing-imbalance", type=float,
                   default=TOPOLOGY_DEFAULTS["routing_imbalance"],
                   help="extra factor >= 1 on the busiest EP rank's load (busiest / mean)")
    r.add_argument("--kv-lengths", default=TOPOLOGY_DEFAULTS["kv_lengths"], metavar="FILE|DIST",
                   help="per-request KV lengths (tokens): a file of integers (whitespace, comma "
                        "or JSON list), or uniform:LO:HI or lognormal:MEDIAN:SIGMA (SIGMA <= 4) "
                        "sampled for the G requests (seed 0), all in 1..16777216 tokens; "
                        "attention is charged for the busiest DP rank")


def topology_options(a) -> dict:
    """The ``Deployment`` fields that the options of :func:`add_topology_args` set (all but
    ``--kv-lengths``): the NVLink domain (``--nvlink-domain``, else ``--topology``'s), the
    scale-out bandwidth and the routing."""
    dom = a.nvlink_domain if a.nvlink_domain is not None else TOPOLOGIES[a.topology]
    return dict(nvlink_domain=dom, scaleout_GBps=a.scaleout_gbps, routing=a.routing,
                routing_imbalance=a.routing_imbalance)


def given_tp_ep(a) -> tuple[int | None, int | None]:
    """The ``--tp`` and ``--ep`` a user typed (None where left out: ``--tp`` counts as typed
    only when ``resolve_parallelism`` recorded it in ``a.parallelism_given``), for
    ``app.fit.checked_workload``'s advice on what makes a deployment fit."""
    tp = a.tp if "tp" in (getattr(a, "parallelism_given", None) or []) else None
    return tp, getattr(a, "ep", None)


def workload_of(a):
    """The checked ``Workload`` of parsed workload options (``app.fit.checked_workload``: a
    deployment that does not fit the GPU's memory is refused naming the flags that make it fit),
    with the topology and traffic options where the command has them."""
    from subgpu_jax.app.fit import checked_workload
    from subgpu_jax.model.graph import Deployment
    from subgpu_jax.model.hardware import get_hardware

    arch, ep = resolve_arch_ep(a)
    topo = {}
    if hasattr(a, "topology"):
        topo = topology_options(a)
        if a.kv_lengths:
            topo["kv_lengths"] = kv_lengths_from(a.kv_lengths, a.batch)
    dep = Deployment(num_gpus=a.gpus, attn_tp=a.tp, attn_dp=a.dp, moe_ep=ep,
                     global_batch=a.batch, **serving_options(a), **topo)
    return checked_workload(arch, dep, get_hardware(a.hardware), *given_tp_ep(a))
