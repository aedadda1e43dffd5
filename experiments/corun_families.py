"""Co-run matrices of several model families, and the co-run mechanism fitted leaving one family
out (issue 22, item 2).

The uncalibrated model's one co-run parameter, the loaded-latency dilation alpha
(``ContentionModel.latency_load_gain``, docs/verdicts.md), was fitted on one co-run matrix: GPT-OSS
120B's kernels plus a synthetic GEMM and copy (``results/hw_fidelity/fused/corun_matrix.json``).
This measures the same matrix (``hw_runtime.gpu.corun.corun_matrix``: each class of kernels alone
on one green-context pool and beside each class on the other pool, splits 32/96, 64/64, 96/32,
spin-gated start) on the kernels of other families: dense Llama and Qwen3, Mixtral and
Qwen3-MoE, DeepSeek-V3 (MLA attention), each at the microbatch size the verdict protocol's
searches use (m = 2), with the runtime's defaults (tuned GEMMs, fused elementwise kernels).

Phases:

``--phase device`` (GPU, one call): ``$OUT/corun_<workload>.json`` per workload (written as
    each finishes; a workload that fails is recorded in ``$OUT/errors.json``).
``--phase lanes`` (GPU): how two streams of ONE pool of ``--lane-sms`` SMs share it when both
    run large GEMMs (``hw_runtime.gpu.corun.lane_sharing``: A, then B a few µs later, from a
    common start; their end times against their alone times) -> ``$OUT/lanes_<workload>.json``,
    the family's GEMM (expert up-projection, or the dense MLP's) against itself, attention and
    RMSNorm. The event simulator's FIFO rule (``simstate.share_pool_fifo``) gives A its alone
    time and B the sum of both; the measurement says whether two GEMMs on one pool share it that
    way (the multistream residual of docs/verdicts.md).
``--phase analyze`` (CPU): per family the uncalibrated model's predicted / measured slowdown of
    every pair (``sim.fit.predict_pairs``) at each alpha of a grid; then leave-one-family-out:
    alpha fitted (grid, mean |log ratio|) on the pairs of all other families, scored on the left-out
    family, against alpha = 0 and the committed 1.5 -> ``results/corun_families_h200.json``.
    Nothing in the model is changed here.

Units: µs, SMs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
import traceback

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

from subgpu_jax.sim.contention import UNCALIBRATED_LATENCY_LOAD_GAIN  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
DATA = os.path.join(RESULTS, "corun_families")
GPT_OSS = os.path.join(RESULTS, "hw_fidelity", "fused", "corun_matrix.json")
GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
COMMITTED_ALPHA = UNCALIBRATED_LATENCY_LOAD_GAIN   # the model's alpha (sim.contention)

#: name -> (model, deployment fields, family). Microbatch count 2 (the searches' smallest).
WORKLOADS: dict[str, tuple[str, dict, str]] = {
    "llama8b_1gpu_g256_kv2k": ("llama-3.1-8b", dict(num_gpus=1, attn_tp=1, attn_dp=1, moe_ep=1,
                                                    global_batch=256, kv_history=2048,
                                                    input_len=2048), "llama"),
    "qwen3_8b_1gpu_g128_kv4k": ("qwen3-8b", dict(num_gpus=1, attn_tp=1, attn_dp=1, moe_ep=1,
                                                 global_batch=128, kv_history=4096,
                                                 input_len=4096), "qwen3"),
    "mixtral_tp8_g1024_kv4k": ("mixtral-8x7b", dict(num_gpus=8, attn_tp=8, attn_dp=1, moe_ep=8,
                                                    global_batch=1024, kv_history=4096,
                                                    input_len=4096), "mixtral"),
    "qwen3moe_tp8_g1024_kv2k": ("qwen3-30b-a3b", dict(num_gpus=8, attn_tp=8, attn_dp=1,
                                                      moe_ep=8, global_batch=1024,
                                                      kv_history=2048, input_len=2048),
                                "qwen3_moe"),
    "deepseekv3_tp8_g512_kv2k": ("deepseek-v3", dict(num_gpus=8, attn_tp=8, attn_dp=1,
                                                     moe_ep=8, global_batch=512,
                                                     kv_history=2048, input_len=2048),
                                 "deepseek_v3"),
}
#: Region instances with their own weights on the GPU (DeepSeek-V3's 256 experts do not fit
#: for every layer; the measurement rotates over these, each far larger than the L2).
INSTANCES = 4


def sim_workload(name: str):
    """The simulator's ``Workload`` of ``name`` (H200, bf16 experts)."""
    from subgpu_jax.model.graph import Deployment
    from subgpu_jax.model.hardware import get_hardware
    from subgpu_jax.model.models import MODELS
    from subgpu_jax.model.workload import Workload
    from hw_runtime.gpu.workload import hopper_arch

    model, fields, _ = WORKLOADS[name]
    return Workload.from_model(hopper_arch(MODELS[model]), Deployment(**fields),
                               get_hardware("H200"))


def family_torch_workload(name: str, microbatches: int):
    """The CUDA ``TorchWorkload`` both device phases measure: ``name``'s region graph at
    ``microbatches`` microbatches, ``INSTANCES`` region instances, a shared KV cache, the
    runtime's fused elementwise kernels (needs a GPU)."""
    from hw_runtime.gpu.policies import KernelSettings
    from hw_runtime.gpu.workload import TorchWorkload

    return TorchWorkload(sim_workload(name).graph(microbatches), device="cuda",
                         instances=INSTANCES, kv_cache="shared",
                         kernels=KernelSettings(elementwise="auto"))


def device_phase(args) -> int:
    import torch
    from hw_runtime.gpu.blas import GemmPolicy
    from hw_runtime.gpu.corun import corun_matrix

    os.makedirs(args.out, exist_ok=True)
    errors, t0 = {}, time.time()
    for name in args.workloads:
        if time.time() - t0 > args.time_limit:
            errors[name] = "time limit reached before it started"
            continue
        try:
            tw = family_torch_workload(name, 2)
            cm = corun_matrix(tw, log=print, gemm=GemmPolicy(torch, "tuned"), family=True)
            cm.update(workload=name, model=WORKLOADS[name][0], family=WORKLOADS[name][2],
                      microbatches=2, instances=INSTANCES)
            with open(os.path.join(args.out, f"corun_{name}.json"), "w") as fh:
                json.dump(cm, fh, indent=1)
            print(f"{name}: {len(cm['pairs'])} pairs ({time.time() - t0:.0f} s)", flush=True)
            del tw
            torch.cuda.empty_cache()
        except Exception as e:  # noqa: BLE001 - recorded, the next workload still runs
            traceback.print_exc()
            errors[name] = f"{e.__class__.__name__}: {e}"
        with open(os.path.join(args.out, "errors.json"), "w") as fh:
            json.dump(errors, fh, indent=1)
    return 0


def lanes_phase(args) -> int:
    """The ``lanes`` phase (module docstring): every workload x ``--lane-sms`` pool x
    ``--microbatches`` count; one file per (workload, microbatches) with a ``pools`` list."""
    import torch
    from hw_runtime.gpu.corun import family_class_kernels, lane_sharing

    os.makedirs(args.out, exist_ok=True)
    gpu = torch.cuda.get_device_name()
    t0 = time.time()
    for name in args.workloads:
        for mb in args.microbatches:
            if time.time() - t0 > args.time_limit:
                print(f"{name} m={mb}: time limit reached before it started", flush=True)
                continue
            try:
                tw = family_torch_workload(name, mb)
                idx = family_class_kernels(tw.graph)
                g = "expert_gemm" if "expert_gemm" in idx else "dense_gemm"
                pairs = [(g, g), (g, "attn"), ("attn", g), (g, "elementwise"),
                         ("elementwise", g), ("attn", "attn")]
                if g == "expert_gemm" and "dense_gemm" in idx:     # DeepSeek's shared experts
                    pairs += [("expert_gemm", "dense_gemm"), ("dense_gemm", "expert_gemm")]
                pools = []
                for sms in args.lane_sms:
                    res = lane_sharing(tw, sms, pairs, log=print, family=True, microbatch=0)
                    pools.append(res)
                tag = "" if (mb == 2 and args.lane_sms == [128]) else f"_m{mb}"
                out = {"workload": name, "family": WORKLOADS[name][2], "microbatches": mb,
                       "gpu": gpu, "pools": pools, **pools[0]}
                with open(os.path.join(args.out, f"lanes_{name}{tag}.json"), "w") as fh:
                    json.dump(out, fh, indent=1)
                print(f"{name} m={mb}: {len(pools)} pools ({time.time() - t0:.0f} s)", flush=True)
                del tw
                torch.cuda.empty_cache()
            except Exception as e:  # noqa: BLE001 - recorded, the next workload still runs
                traceback.print_exc()
                print(f"{name} m={mb}: {e.__class__.__name__}: {e}", flush=True)
    return 0


def _family_rows(matrix: dict, graph, hw) -> dict[float, list[dict]]:
    """alpha -> predicted vs measured rows of every pair of ``matrix`` on ``graph``'s kernels."""
    from hw_runtime.gpu.corun import synthetic_kernels
    from subgpu_jax.sim.contention import ContentionModel
    from subgpu_jax.sim.fit import pair_kernels, predict_pairs

    ks = pair_kernels(matrix, graph, synthetic_kernels())
    return {a: predict_pairs(matrix, ks, hw, ContentionModel(latency_load_gain=a))
            for a in GRID}


def _score(rows: list[dict]) -> float:
    return sum(abs(math.log(r["pred_slowdown"] / r["meas_slowdown"])) for r in rows) / len(rows)


def _load_matrix(p: str) -> dict:
    """A device-phase ``corun_<workload>.json``.

    Raises:
        ValueError: unreadable, or without a family, microbatch count or pairs (names it).
    """
    try:
        with open(p) as fh:
            m = json.load(fh)
        fam, mb, pairs = m["family"], m.get("microbatches", 2), m["pairs"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"--data: {p}: not a co-run matrix of --phase device "
                         f"({e.__class__.__name__}: {e})") from None
    if fam == "gpt_oss" or fam not in {f for _, _, f in WORKLOADS.values()}:
        raise ValueError(f"--data: {p}: family {fam!r} is not one of this study's")
    if isinstance(mb, bool) or not isinstance(mb, int) or mb < 1:
        raise ValueError(f"--data: {p}: microbatches must be an integer >= 1, got {mb!r}")
    if not isinstance(pairs, list) or not pairs:
        raise ValueError(f"--data: {p}: no co-run pairs")
    return m


def analyze(args) -> int:
    """The analyze phase; exit 2 with one line on unusable input."""
    try:
        return _analyze(args)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def _analyze(args) -> int:
    from subgpu_jax.model.hardware import get_hardware

    if not os.path.isdir(args.data):
        raise ValueError(f"--data: {args.data} is not a folder")
    d = os.path.dirname(os.path.abspath(args.digest))
    if not os.path.isdir(d):
        raise ValueError(f"--digest: folder {d} does not exist")
    fams: dict[str, dict[float, list[dict]]] = {}
    with open(GPT_OSS) as fh:
        ref = json.load(fh)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from hw_fidelity_h200 import sim_workload as fidelity_workload
    w = fidelity_workload(ref.get("workload", "gptoss120b_ref_g2048"))
    fams["gpt_oss"] = _family_rows(ref, w.graph(2), w.hw)
    sources = {"gpt_oss": os.path.relpath(GPT_OSS, RESULTS)}
    for name in args.workloads:
        p = os.path.join(args.data, f"corun_{name}.json")
        if not os.path.exists(p):
            continue
        m = _load_matrix(p)
        wl = sim_workload(name)
        fams[m["family"]] = _family_rows(m, wl.graph(int(m.get("microbatches", 2))),
                                         get_hardware("H200"))
        sources[m["family"]] = os.path.relpath(p, RESULTS)
    if len(fams) < 2:
        raise ValueError(f"--data: no co-run matrix of --workloads under {args.data} (the "
                         "analysis needs one besides GPT-OSS's)")
    per_family = {}
    for f, by in fams.items():
        per_family[f] = {
            "pairs": len(by[0.0]),
            "score_by_alpha": {str(a): _score(r) for a, r in by.items()},
            "median_ratio_by_class": {
                c: statistics.median(r["pred_slowdown"] / r["meas_slowdown"]
                                     for r in by[COMMITTED_ALPHA] if r["a"] == c)
                for c in sorted({r["a"] for r in by[COMMITTED_ALPHA]})}}
    lofo = {}
    for f in fams:
        rest = {a: [r for g, by in fams.items() if g != f for r in by[a]] for a in GRID}
        a_fit = min(GRID, key=lambda a: _score(rest[a]))
        lofo[f] = {"alpha_fitted_without": a_fit,
                   "score_left_out_at_fitted": _score(fams[f][a_fit]),
                   "score_left_out_at_0": _score(fams[f][0.0]),
                   "score_left_out_at_committed": _score(fams[f][COMMITTED_ALPHA]),
                   "best_alpha_for_left_out": min(GRID, key=lambda a: _score(fams[f][a]))}
    allrows = {a: [r for by in fams.values() for r in by[a]] for a in GRID}
    res = {"protocol": __doc__.split("\n\n")[0], "grid": list(GRID),
           "committed_alpha": COMMITTED_ALPHA, "sources": sources,
           "score": "mean |log(predicted / measured slowdown)| over the pairs",
           "alpha_fitted_all_families": min(GRID, key=lambda a: _score(allrows[a])),
           "per_family": per_family, "leave_one_family_out": lofo}
    with open(args.digest, "w") as fh:
        json.dump(res, fh, indent=1)
    print(f"{'family':12s} {'pairs':>5s} {'alpha 0':>8s} {'1.5':>7s} {'LOFO a':>7s} "
          f"{'LOFO':>7s} {'best a':>7s}")
    for f, v in lofo.items():
        print(f"{f:12s} {per_family[f]['pairs']:5d} {v['score_left_out_at_0']:8.3f} "
              f"{v['score_left_out_at_committed']:7.3f} {v['alpha_fitted_without']:7.1f} "
              f"{v['score_left_out_at_fitted']:7.3f} {v['best_alpha_for_left_out']:7.1f}")
    print(f"wrote {args.digest}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--phase", choices=("device", "lanes", "analyze"), required=True)
    ap.add_argument("--lane-sms", type=int, nargs="+", default=[128],
                    help="lanes: the one pool's SMs (green-context pool sizes). Default: 128")
    ap.add_argument("--microbatches", type=int, nargs="+", default=[2],
                    help="lanes: microbatch counts of the region graph (the searches use 2-8). "
                         "Default: 2")
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    ap.add_argument("--out", default=os.environ.get("OUT"),
                    help="device: the folder for corun_<workload>.json (default $OUT)")
    ap.add_argument("--data", default=DATA, help="analyze: folder of the corun_<workload>.json")
    ap.add_argument("--digest", default=os.path.join(RESULTS, "corun_families_h200.json"))
    ap.add_argument("--time-limit", type=float, default=420.0)
    args = ap.parse_args(argv)
    if args.phase in ("device", "lanes"):
        try:
            if not args.out:
                raise ValueError("--out (or $OUT): the folder for corun_<workload>.json")
            from hw_runtime.commands.common import gpu_check
            gpu_check()
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        return device_phase(args) if args.phase == "device" else lanes_phase(args)
    return analyze(args)


if __name__ == "__main__":
    sys.exit(main())
