"""Pool-aware GEMMs on the H200: does planning each GEMM for its pool's SMs collect the gain?

cuBLAS sizes a GEMM's tile grid for the whole GPU, so on a partial green-context pool a
compute-bound GEMM runs extra waves (``hw_runtime.gpu.blas``). This experiment measures, on the
H200, with the ``stock`` and the ``tuned`` GEMM policy (``subgpu run --gemm``):

1. the isolated time of every GEMM kernel of each workload (``WORKLOADS``) on pools of
   ``POOLS`` SMs and on the whole GPU, at m = 1 and 2 microbatches (``time_kernels``, the
   calibration's protocol);
2. end to end (``Executor.measure``): the temporal baseline under each policy, and a grid of
   pipelined configurations (``CONFIGS``) under each policy, each against the temporal baseline
   of the same policy.

``--phase device`` (GPU) writes ``gemm_policy.json`` to ``--out``; ``--phase analyze`` (CPU)
prints the tables from ``experiments/results/hw_wins/gemm_policy.json``.

Units: µs, SMs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

import hw_fidelity_h200 as F  # noqa: E402

RESULT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "hw_wins",
                      "gemm_policy.json")
WORKLOADS = ("llama70b_tp8_g512", "llama70b_tp8_g256", "gptoss120b_ref_g2048")
#: GEMM policies measured (the heuristic ``pool`` policy was measured in a first run:
#: ``experiments/results/hw_wins/gemm_policy_heuristic.json``) and those run end to end in full.
POLICIES = ("stock", "tuned")
POOLS = (32, 48, 64, 80, 96)
GEMM_OPS = ("qkv", "o_proj", "mlp_up", "mlp_down", "router", "expert_up", "expert_down")
#: (name, design, alloc, m, k): design "macro" = full attention alone on stage 1 (w = 1),
#: "layer_split" = the region cut in half (w = 0).
#: On the Macro cut stage 1 runs everything but full attention and stage 2 full attention.
CONFIGS = (("macro_96_32_m2_k2", "macro", [96, 32], 2, 2),
           ("macro_80_48_m2_k2", "macro", [80, 48], 2, 2),
           ("macro_64_64_m2_k2", "macro", [64, 64], 2, 2),
           ("macro_96_32_m2_k1", "macro", [96, 32], 2, 1),
           ("macro_96_32_m4_k2", "macro", [96, 32], 4, 2),
           ("layer_split_64_64_m2_k1", "layer_split", [64, 64], 2, 1))
#: configurations also run under the stock policy (the rest only under ``tuned``)
STOCK_TOO = ("temporal", "macro_96_32_m2_k2", "macro_80_48_m2_k2", "macro_64_64_m2_k2")


def plan_entries(name: str) -> list[dict]:
    """The pipelined configurations of ``CONFIGS`` for one workload (plan entries)."""
    from subgpu_jax.space.config import workload_config

    wl = F.sim_workload(name)
    g = wl.graph(1)
    fa = [k.name for k in g.kernels if k.category == "attn_full"][-1]
    macro = [fa, g.kernels[g.index(fa) + 1].name]
    out = []
    for nm, design, alloc, m, k in CONFIGS:
        if wl.batch % m:
            continue
        starts, w = (macro, 1) if design == "macro" else ([g.kernels[g.n // 2].name], 0)
        cfg = workload_config(wl, starts, alloc, wl.batch // m, bool(w))
        out.append({"name": nm, "mode": "green", "D": cfg.D, "w": cfg.w, "starts": starts,
                    "alloc": list(cfg.alloc), "microbatch": cfg.microbatch,
                    "streams_per_stage": k, "policy": cfg.policy})
    return out


def device_phase(args) -> int:
    """Kernel tables and end-to-end runs under both GEMM policies -> ``args.out``."""
    import torch
    from hw_runtime.gpu.blas import GemmPolicy
    from hw_runtime.gpu.executor import Executor, derive_workload
    from hw_runtime.gpu.partition import GreenPartition
    from hw_runtime.gpu.kerneltime import time_kernels

    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "gemm_policy.json")
    res: dict = {"pools": list(POOLS), "workloads": {}, "device": torch.cuda.get_device_name(),
                 "torch": torch.__version__}
    try:
        import triton  # noqa: F401
        res["triton"] = triton.__version__
    except Exception as e:  # noqa: BLE001
        res["triton"] = f"unavailable: {e}"
    t0 = time.time()

    def save():
        with open(path, "w") as fh:
            json.dump(res, fh, indent=1)

    nsm = torch.cuda.get_device_properties(0).multi_processor_count
    for name in WORKLOADS:
        wl = F.sim_workload(name)
        out = res["workloads"][name] = {"kernels": [], "runs": []}
        try:
            base = F._torch_workload(wl, 1)
            wls = {1: base}
            if wl.batch % 2 == 0:
                wls[2] = derive_workload(base, wl.graph(2))
            # 1. GEMM kernel tables under both policies
            for policy in POLICIES:
                pol = GemmPolicy(torch, policy)
                for p in list(POOLS) + [nsm]:
                    part = None if p == nsm else GreenPartition([p], streams_per_pool=1)
                    stream = torch.cuda.Stream() if part is None else part.stream(0, 0)
                    try:
                        for m, w in wls.items():
                            ids = [i for i, k in enumerate(w.graph.kernels)
                                   if k.op in GEMM_OPS and k.layer == w.graph.kernels[0].layer]
                            for r in time_kernels(w, kernels=ids, reps=5, warmup=2,
                                                  stream=stream, gemm=pol,
                                                  sms=None if part is None else p):
                                out["kernels"].append({"policy": policy, "sms": p, "m": m,
                                                       "name": r["name"], "op": r["op"],
                                                       "us": r["us"], "TFLOPs": r["TFLOPs"]})
                    finally:
                        if part is not None:
                            torch.cuda.synchronize()
                            part.close()
                pol.reset()
                out.setdefault("tuning", {})[policy] = [
                    {"key": k, "sms": p, "target": None if c is None else nsm - c,
                     "us": pol.timings[(k, p)]} for (k, p), c in pol.choices.items()]
                print(f"[{time.time() - t0:5.0f} s] {name} {policy} kernel tables", flush=True)
                save()
            # 2. end to end, each policy against its own temporal baseline
            entries = [{"name": "temporal", "mode": "temporal", "D": 1}] + plan_entries(name)
            for policy in POLICIES:
                ex = Executor(base, gemm=policy)
                for d in entries:
                    if policy == "stock" and d["name"] not in STOCK_TOO:
                        continue
                    rec = {**d, "gemm": policy}
                    try:
                        cfg = F.cfg_from_json(wl, d)
                        mm = ex.measure(cfg, "temporal" if cfg.D == 1 else "green", step=False,
                                        rounds=args.rounds, replays=args.replays,
                                        streams_per_stage=int(d.get("streams_per_stage", 1)))
                        rec["measured_us"] = mm.makespan_us
                        rec["spread"] = mm.spread
                    except Exception as e:  # noqa: BLE001
                        traceback.print_exc()
                        rec["error"] = f"{e.__class__.__name__}: {e}"
                    out["runs"].append(rec)
                    print(f"[{time.time() - t0:5.0f} s] {name} {policy:5s} {d['name']:26s} "
                          f"{rec.get('measured_us', float('nan')):10.1f} µs", flush=True)
                    save()
                ex.gemm.reset()
                del ex
            del wls, base
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            out["error"] = f"{e.__class__.__name__}: {e}"
        F._free()
        save()
        if time.time() - t0 > args.time_limit:
            res["stopped"] = "time limit"
            break
    save()
    return 0


def analyze_phase(args) -> int:
    """Print the kernel and end-to-end tables of ``--result``."""
    with open(args.result) as fh:
        res = json.load(fh)
    for name, out in res["workloads"].items():
        print(f"\n{name}: GEMM kernels, µs (stock / pool)")
        tab: dict = {}
        for r in out["kernels"]:
            tab.setdefault((r["name"], r["m"]), {}).setdefault(r["sms"], {})[r["policy"]] = r["us"]
        pols = sorted({r["policy"] for r in out["kernels"]}, key=("stock", "pool", "tuned").index)
        print(f"  policies: {' / '.join(pols)}")
        for (nm, m), row in sorted(tab.items()):
            cells = " ".join(f"{p:>3}:" + "/".join(f"{v.get(q, float('nan')):6.1f}" for q in pols)
                             for p, v in sorted(row.items()))
            print(f"  {nm:16s} m={m} {cells}")
        temporal = {r["gemm"]: r.get("measured_us") for r in out["runs"] if r["name"] == "temporal"}
        print(f"{name}: end to end (speedup vs the same policy's temporal)")
        for r in out["runs"]:
            t = temporal.get(r["gemm"])
            us = r.get("measured_us")
            sp = t / us if (t and us) else float("nan")
            print(f"  {r['gemm']:5s} {r['name']:26s} {us or float('nan'):10.1f} µs  {sp:.3f}x")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--phase", choices=("device", "analyze"), required=True)
    ap.add_argument("--out", default=os.path.dirname(RESULT))
    ap.add_argument("--result", default=RESULT)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--replays", type=int, default=10)
    ap.add_argument("--time-limit", type=float, default=400.0)
    a = ap.parse_args()
    return device_phase(a) if a.phase == "device" else analyze_phase(a)


if __name__ == "__main__":
    raise SystemExit(main())
