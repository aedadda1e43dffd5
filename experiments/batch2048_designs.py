"""Global batch 2,048 on the reference deployment (GPT-OSS 120B, 32 B200, TP8 x DP4, EP32):
temporal vs hand-made SubGPU designs vs the best the search finds, all scored by the event
simulator (contention + L2 residency).

Designs (cuts named by kernel; segment k runs on stage k, the last one on stage 0 when w = 1):
  macro        the paper's "Macro" design: full-attention FMHA alone on stage 1, everything else of
               the two-layer macro-period on stage 0 (w = 1), two microbatches.
  macro_m4     the same cut with four microbatches.
  sliding_stage  a stage dedicated to sliding-window attention: stages {rest}, {sliding FMHA},
               {sliding out .. full qkv}, {full FMHA} (D = 4, w = 1).
  three_stage  attention (both FMHAs' layer halves) and MoE halves on three stages spanning two
               layers: [L0 norm..L0 rope] [L0 attn..L1 rope] [L1 attn..] (D = 3, w = 1 -> K = 4).
  search       Algorithm 1 over D in {2,3,4}, m in {1,2,4,8}.
For every hand-made design the allocation is optimised by Algorithm 2 (cheap pairwise-line
refinement, then exact polish with the simulator).

Writes experiments/results/batch2048_designs.json and prints a table of makespan reduction vs
temporal.
"""

from __future__ import annotations

import json
import os
import time

from subgpu_jax import REFERENCE_DEPLOYMENT, get_hardware, get_model
from subgpu_jax.sim.contention import ContentionModel
from subgpu_jax.sim.eventsim import simulate
from subgpu_jax.search.problem import MemoScorer, Problem
from subgpu_jax.model.workload import Workload
from subgpu_jax.search.algorithm1 import Algorithm1Options, algorithm1
from subgpu_jax.search.pairwise import allocate_pairwise
from subgpu_jax.space.config import Config, chain_cut

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> None:
    arch, hw, dep = get_model("gpt-oss-120b"), get_hardware("B200"), REFERENCE_DEPLOYMENT
    wl = Workload.from_model(arch, dep)
    prob = Problem(wl, hw)
    model = ContentionModel()

    def exact(cfg: Config) -> float:
        return float(simulate(wl.graph(wl.m_of(cfg)), cfg, hw, model, record=False,
                              validate=False).makespan)

    memo = MemoScorer(exact)
    g1 = wl.graph(1)
    ix = g1.index
    t_temp = exact(Config(D=1, w=0, seg_of=(0,) * g1.n, alloc=(hw.num_sms,),
                          microbatch=wl.batch))
    designs = {
        "macro": ([ix("L1.attn"), ix("L1.o_proj")], 1, 2),
        "macro_m4": ([ix("L1.attn"), ix("L1.o_proj")], 1, 4),
        "sliding_stage": ([ix("L0.attn"), ix("L0.o_proj"), ix("L1.attn"), ix("L1.o_proj")], 1, 2),
        "three_stage": ([ix("L0.attn"), ix("L1.attn"), ix("L1.o_proj")], 1, 2),
    }
    rows = [{"design": "temporal", "D": 1, "w": 0, "m": 1, "sms": [hw.num_sms], "cuts": [],
             "makespan_us": t_temp, "reduction_vs_temporal": 0.0}]
    for name, (starts, w, m) in designs.items():
        t0 = time.time()
        seg = chain_cut(g1.n, starts)
        D = len(starts) + 1 - w
        res = allocate_pairwise(prob, seg, D, w, m, exact=memo)
        rows.append({"design": name, "D": D, "w": w, "m": m, "sms": [int(x) for x in res.alloc],
                     "cuts": [g1.kernels[i].name for i in starts],
                     "makespan_us": res.makespan_us,
                     "reduction_vs_temporal": 1 - res.makespan_us / t_temp,
                     "exact_calls": res.exact_calls, "seconds": time.time() - t0})
        print(rows[-1])
    t0 = time.time()
    sr = algorithm1(prob, [2, 3, 4], [1, 2, 4, 8], exact=memo,
                    options=Algorithm1Options(include_temporal=False))
    b = sr.best()
    starts = [i for i in range(1, g1.n) if b.seg_of[i] != b.seg_of[i - 1]]
    rows.append({"design": "search", "D": b.D, "w": b.w, "m": b.m, "sms": [int(x) for x in b.alloc],
                 "cuts": [g1.kernels[i].name for i in starts], "makespan_us": b.makespan_us,
                 "reduction_vs_temporal": 1 - b.makespan_us / t_temp,
                 "exact_calls": sr.exact_calls, "seconds": time.time() - t0})
    print(f"\n{'design':15s}{'D':>3s}{'w':>3s}{'m':>3s}{'makespan µs':>13s}{'reduction':>11s}  SMs / cuts")
    for r in rows:
        print(f"{r['design']:15s}{r['D']:3d}{r['w']:3d}{r['m']:3d}{r['makespan_us']:13.1f}"
              f"{r['reduction_vs_temporal']:11.1%}  {r['sms']} / {','.join(r['cuts'])}")
    out = os.path.join(HERE, "results", "batch2048_designs.json")
    with open(out, "w") as fh:
        json.dump({"workload": {"model": arch.name, "hardware": hw.name, **dep.__dict__},
                   "scorer": "event simulator, ContentionModel(), L2 lru", "rows": rows}, fh,
                  indent=2)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
