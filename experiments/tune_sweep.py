"""Brute-force measured sweep, the comparison target of ``subgpu tune`` (issue 24): every cut
layout among the uncalibrated search's 10 best records of a batch, every SM split of it in steps
of 8 SMs (the H200's quantum), microbatch counts 2 and 4, on green contexts, plus the temporal
baseline. Measures through ``hw_runtime.tune.executor.GpuTuneExecutor`` with the tune's timing
protocol and GEMM/elementwise choices, and keeps its measurements in a tune state file
(``hw_runtime.tune.state.TuneState``, atomic after every measurement), so a call cut short by
``--time-limit`` or a kill is continued by the next call with the same options.

    python experiments/tune_sweep.py --workload llama8b_1gpu_g256_kv2k --search DIR \
        --out DIR [--time-limit S] [--max-d 2]

``--search``: the tune's ``round1/search`` folder (the uncalibrated search). Writes
``DIR/sweep.json``: every measurement, the best, whether the sweep is complete. A candidate
whose measurement fails is recorded with ``measured_us`` None and the error's first line; after
a CUDA error the call exits 3 (the context may be unusable) and the next call goes on. Needs an NVIDIA
GPU with green contexts (``bash experiments/device/run.sh tune_sweep``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

#: name -> ``subgpu tune`` workload flags (as workload_flags in experiments/device/run.sh).
WORKLOADS = {
    "llama70b_tp8_g2048_kv1k": dict(model="llama-3.1-70b", gpus=8, tp=8, dp=1, G=2048, kv=1024),
    "llama70b_tp8_g1536_kv1k": dict(model="llama-3.1-70b", gpus=8, tp=8, dp=1, G=1536, kv=1024),
    "llama8b_1gpu_g256_kv2k": dict(model="llama-3.1-8b", gpus=1, tp=1, dp=1, G=256, kv=2048),
    "qwen3_8b_1gpu_g32_kv16k": dict(model="qwen3-8b", gpus=1, tp=1, dp=1, G=32, kv=16384),
}


def sweep_candidates(records: list[dict], G: int, R: int, hw, max_d: int, region,
                     top: int = 10):
    """The sweep's candidates of batch ``G``: the distinct (D, w, cut, policy, k) layouts of the
    ``top`` best predicted SubGPU records, each with every split of ``AllocSpace.from_hw`` (steps
    of the quantum) and microbatch counts 2 and 4 (those dividing ``R``); temporal first.
    ``region``: the region graph of batch ``G`` at one microbatch (the records' cuts name its
    kernels)."""
    from hw_runtime.tune.spec import Candidate
    from subgpu_jax.space.config import AllocSpace, enumerate_allocations

    sub = sorted((r for r in records if r["mode"] != "temporal" and int(r["global_batch"]) == G),
                 key=lambda r: r["makespan_us"])[:top]
    layouts = {}
    for r in sub:
        c = Candidate.from_record(r, region)
        cfg = c.config
        lay = (cfg.D, cfg.w, cfg.seg_of, cfg.policy, cfg.streams_per_stage)
        if lay not in layouts and cfg.D <= max_d:
            layouts[lay] = c
    out = [Candidate.temporal(G)]
    for c in layouts.values():
        sp = AllocSpace.from_hw(hw, c.config.D)
        for m in (2, 4):
            if R % m:
                continue
            for a in enumerate_allocations(sp.budget, c.config.D, sp.quantum, sp.minimum):
                out.append(c.replace(alloc=a, microbatch=R // m))
    return out


def main() -> int:
    from hw_runtime.commands.common import gpu_check
    from hw_runtime.commands.records import search_records
    from hw_runtime.gpu.workload import hopper_arch
    from hw_runtime.tune.executor import GpuTuneExecutor
    from hw_runtime.tune.spec import Predictor, TuneSpec
    from hw_runtime.tune.state import TuneState
    from subgpu_jax.model.models import resolve_model

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", required=True, choices=list(WORKLOADS))
    ap.add_argument("--search", required=True, help="the tune's round1/search folder")
    ap.add_argument("--out", required=True)
    ap.add_argument("--time-limit", type=float, default=500.0, help="seconds for this call")
    ap.add_argument("--max-d", type=int, default=2, help="largest stage count swept")
    a = ap.parse_args()
    w = WORKLOADS[a.workload]
    spec = TuneSpec(arch=hopper_arch(resolve_model(w["model"])), hardware="H200",
                    num_gpus=w["gpus"], attn_tp=w["tp"], attn_dp=w["dp"], moe_ep=1,
                    kv_history=w["kv"], input_len=w["kv"], batches=(w["G"],),
                    model_arg=w["model"])
    pred = Predictor(spec)
    R = spec.deployment(w["G"]).requests_per_gpu
    cands = sweep_candidates(search_records(a.search), w["G"], R, spec.hw, a.max_d,
                             pred.workload(w["G"]).graph(1))
    gpu_check()
    os.makedirs(a.out, exist_ok=True)
    st = TuneState(a.out, {**spec.meta(), "sweep": a.workload})
    ex = GpuTuneExecutor(spec)
    t0 = time.perf_counter()
    for c in cands:
        if c.key in st.measurements:
            continue
        if time.perf_counter() - t0 > a.time_limit:
            break
        cfg, m = pred.config(c)
        try:
            t = ex.measure(c, cfg, m)
        except (RuntimeError, ValueError) as e:   # a CUDA/cuBLAS or green-context failure
            line = (str(e).strip().splitlines() or [type(e).__name__])[0]
            st.measurements[c.key] = {"candidate": c.as_dict(), "measured_us": None,
                                      "failed": line, "phase": "sweep", "round": 0,
                                      "order": len(st.measurements)}
            st.save()
            print(f"{len(st.measurements)}/{len(cands)} {c.describe()} FAILED: {line}",
                  flush=True)
            if isinstance(e, RuntimeError):       # the CUDA context may be unusable: stop;
                return 3                          # the next call resumes after this one
            continue
        st.measurements[c.key] = {"candidate": c.as_dict(), "measured_us": t.makespan_us,
                                  "spread": t.spread, "round_medians_us": t.round_medians_us,
                                  "gpu_s": t.gpu_s, "phase": "sweep", "round": 0,
                                  "order": len(st.measurements), "note": t.note}
        st.charge("sweep", t.gpu_s)
        st.save()
        print(f"{len(st.measurements)}/{len(cands)} {c.describe()} {t.makespan_us:.1f} µs",
              flush=True)
    ms = st.measurements
    tk = cands[0].key
    ok = [v for v in ms.values() if v.get("measured_us") is not None]
    best = min(ok, key=lambda v: v["measured_us"]) if ok else None
    out = {"workload": a.workload, "candidates": len(cands), "measured": len(ms),
           "failed": len(ms) - len(ok),
           "complete": all(c.key in ms for c in cands), "gpu_s": st.gpu_total_s,
           "temporal_us": ms[tk]["measured_us"] if tk in ms else None,
           "best": best, "best_speedup": (ms[tk]["measured_us"] / best["measured_us"])
           if best and tk in ms and ms[tk]["measured_us"] is not None else None, "measurements": list(ms.values())}
    with open(os.path.join(a.out, "sweep.json"), "w") as fh:
        json.dump(out, fh, indent=1)
    print(f"sweep {a.workload}: {len(ms)} of {len(cands)} measured, complete={out['complete']}, "
          f"best speedup {out['best_speedup']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
