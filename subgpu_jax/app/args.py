"""The command-line arguments every command shares (``subgpu`` and the runtime's ``run``,
``calibrate``, ``tune``): one definition of the workload options, imported by every parser that
takes them, so the runtime's commands never import the CLI module itself (under ``python -m
subgpu_jax.app.cli`` that module is ``__main__``, and importing it again would load it twice).
"""

from __future__ import annotations

import argparse

from subgpu_jax.model.hardware import HARDWARE
from subgpu_jax.model.models import MODEL_TYPES, MODELS
from subgpu_jax.app.options import add_serving_args

__all__ = ["add_workload_args", "add_strategy_args", "strategies_from_args", "GRID_DEFAULTS",
           "grid_default", "add_grid_args", "add_scoring_args"]

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
            ``--gpu-memory-utilization``, ``--dispatch``: options.py).
            batch: list ``--batch`` in the help (False for ``search``, which takes
            ``--batches`` and refuses ``--batch`` naming it).
    """
    g = p.add_argument_group("workload (defaults: the reference workload, docs/method.md §5)")
    g.add_argument("--model", "--config", dest="model", default="gpt-oss-120b",
                   help=f"model preset ({', '.join(MODELS)}) or path to a Hugging Face "
                        f"config.json (model_type {', '.join(MODEL_TYPES)}); --config FILE is "
                        "the same. Default: gpt-oss-120b")
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
                   help="prompt length (tokens). Default: --kv-history, or 32768")
    g.add_argument("--kv-history", type=int, default=None,
                   help="tokens in each request's KV cache at the decode step timed (>= "
                        "--input-len). Default: --input-len (the first step after the prompt), "
                        "or 32768")
    if serving:
        add_serving_args(g)


#: The strategy flags of ``add_strategy_args``: (flag prefix, noun, what it chooses, the options
#: it takes).
_STRATEGY_FLAGS = (
    ("cut", "cut", "how Algorithm 1 chooses the cut: proposal (the method as published: DP feature "
            "partition + rotations, default), local_search (+ boundary moves), screen (every "
            "legal cut by the cheap estimator when <= 20,000; within 1%% of the simulator's "
            "optimum on 40/40 instances of heuristic_gap.json)",
     "local_search: starts, top; screen: max_cuts, top, polish, keep_proposal"),
    ("alloc", "allocation", "allocation search per cut: pairwise (Algorithm 1 steps 4-5: "
                            "seeds, Algorithm 2's line search, cheap estimator, exact polish; "
                            "default) or relax (optax relaxation of the smooth makespan, "
                            "rounding, exact polish)",
     "relax: restarts, steps"))


def add_strategy_args(g, command: str = "search") -> None:
    """Add the search's strategy options to the argument group ``g``: ``--cut-strategy``,
    ``--cut-options``, ``--alloc-strategy``, ``--alloc-options``, their choices and defaults
    from the registries of ``search.strategies`` (``subgpu search`` and ``subgpu tune`` take
    the same ones; ``command`` names the command in the help)."""
    from subgpu_jax.search.strategies import (ALLOC_STRATEGIES, CUT_STRATEGY_REGISTRY,
                                              DEFAULT_ALLOC_STRATEGY, DEFAULT_CUT_STRATEGY)

    regs = {"cut": (CUT_STRATEGY_REGISTRY, DEFAULT_CUT_STRATEGY),
            "alloc": (ALLOC_STRATEGIES, DEFAULT_ALLOC_STRATEGY)}
    as_search = "" if command == "search" else " (as `subgpu search`)"
    for kind, noun, what, takes in _STRATEGY_FLAGS:
        reg, default = regs[kind]
        g.add_argument(f"--{kind}-strategy", default=default, choices=tuple(reg),
                       help=what + as_search)
        g.add_argument(f"--{kind}-options", metavar="K=V[,K=V]", default=None,
                       help=f"options of the {noun} strategy ({takes}), recorded in the sweep"
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
