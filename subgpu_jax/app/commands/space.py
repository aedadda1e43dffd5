"""``subgpu space``: the size of the design space (cuts x bindings x allocations) per stage
count, for a workload's region graph or a synthetic chain."""

from __future__ import annotations

import argparse
import json

from subgpu_jax.model.graph import Deployment
from subgpu_jax.app.args import add_workload_args, resolve_arch_ep
from subgpu_jax.app.options import int_list

__all__ = ["add_space_parser", "cmd_space"]


def add_space_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``space`` sub-command's parser to ``sub``."""
    sp = sub.add_parser("space", help="size of the design space (cuts x bindings x allocations)",
                        description="Print the number of legal cuts (w=0 and w=1), SM allocations "
                        "and their product for each stage count, for a workload's region graph or "
                        "a synthetic chain.")
    add_workload_args(sp)
    sp.add_argument("--chain", type=int, default=None,
                    help="use a synthetic chain of this many operators instead of the model")
    sp.add_argument("--stages", default="2,3,4,5,6",
                    help="comma-separated stage counts D. Default: 2,3,4,5,6")
    sp.add_argument("--sms", type=int, default=None,
                    help="SM budget to split (SMs). Default: the hardware's budget")
    sp.add_argument("--quantum", type=int, default=None,
                    help="SM quantum g (SMs). Default: the hardware's (8 on the H100/H200)")
    sp.add_argument("--min-pool", type=int, default=None,
                    help="minimum SMs per stage. Default: the hardware's")
    sp.add_argument("--json", action="store_true", help="print machine-readable JSON")


def cmd_space(a) -> int:
    """Run ``subgpu space``: one row per stage count (cuts w=0 and w=1, cut and binding choices,
    SM allocations, their product), as a table or ``--json``.

    Raises:
        ValueError: a chain, SM budget, quantum, minimum pool or stage count out of range."""
    from subgpu_jax.space.config import space_size

    stages = int_list(a.stages, "stages")
    if a.chain is not None:
        if not 1 <= a.chain <= 100_000:
            raise ValueError(f"chain must be 1..100000 operators, got {a.chain}")
        n, edges, label = a.chain, [(i, i + 1) for i in range(a.chain - 1)], f"{a.chain}-operator chain"
        from subgpu_jax.model.hardware import get_hardware
        hw = get_hardware(a.hardware)
    else:
        from subgpu_jax.model.graph import build_graph
        from subgpu_jax.model.hardware import get_hardware

        arch, ep = resolve_arch_ep(a)  # counts do not depend on batch or KV: no memory check
        dep = Deployment(num_gpus=a.gpus, attn_tp=a.tp, attn_dp=a.dp, moe_ep=ep,
                         global_batch=a.batch, input_len=a.input_len, kv_history=a.kv_history)
        g = build_graph(arch, dep, 1)
        hw = get_hardware(a.hardware)
        n, edges = g.n, list(g.edges)
        label = f"{arch.name} region ({g.n} kernels, {g.layers_per_region} layer(s))"
    budget = a.sms if a.sms is not None else hw.sm_budget
    q = a.quantum if a.quantum is not None else hw.sm_quantum
    # default minimum: the GPU's stage minimum, rounded up to the quantum
    mn = a.min_pool if a.min_pool is not None else max(q, -(-hw.stage_min_sms // max(q, 1)) * q)
    for f, v in (("sms", budget), ("quantum", q), ("min-pool", mn)):
        if v <= 0:
            raise ValueError(f"{f} must be a positive integer, got {v}")
    if budget % q:
        raise ValueError(f"quantum: {q} SMs does not divide the SM budget {budget} (--sms); give "
                         f"a --quantum that divides it")
    if mn % q:
        raise ValueError(f"min-pool: {mn} SMs is not a multiple of the quantum {q}")
    if mn > budget:
        raise ValueError(f"min-pool ({mn}) must not exceed the SM budget ({budget})")
    rows = []
    for D in stages:
        if not 2 <= D <= n:
            raise ValueError(f"stages must be in 2..{n} for {n} operators, got {D}")
        rows.append({"D": D, **space_size(n, edges, D, budget, q, mn)})
    if a.json:
        print(json.dumps({"graph": label, "sm_budget": budget, "quantum": q, "min_pool": mn,
                          "rows": rows}, indent=2))
        return 0
    print(f"{label}; {budget} SMs in quanta of {q}, >= {mn} per stage")
    cols = (("D", "D"), ("cuts w=0", "cuts_w0"), ("cuts w=1", "cuts_w1"),
            ("cut+binding", "cut_binding_choices"), ("allocations", "allocations"),
            ("total", "total"))
    cells = [[f"{r[k]:,d}" for _, k in cols] for r in rows]
    # each column as wide as its widest entry: counts of long chains have dozens of digits
    width = [max(len(h), *(len(c[j]) for c in cells)) for j, (h, _) in enumerate(cols)]
    print("  ".join(h.rjust(w) for (h, _), w in zip(cols, width)))
    for c in cells:
        print("  ".join(x.rjust(w) for x, w in zip(c, width)))
    return 0
