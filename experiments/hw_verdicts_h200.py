"""The verdict validation protocol (issue 22): does the uncalibrated search's verdict hold on the
H200, on workloads it was never fitted on?

Workloads (``WORKLOADS``): 15, from 6 families (Llama, Qwen2, Qwen3 dense, Mixtral, Qwen3-MoE,
GPT-OSS), one GPU and TP8, G = 32-2,048, KV history 1K-16K; ``FRESH`` are the 5 first measured
after the decision rule was chosen. Each carries its fit status:
``fit`` (its kernel tables or co-runs were used in a fit of the model: the hw_fidelity fit data,
docs/fidelity.md), ``held_out`` (never in any fit; its model family was) and ``held_out_family``
(never in any fit, nor any model of its family).

Phases (one script; the device phase is one call on one H200):

``--phase plan`` (CPU): for every workload, the user path: ``subgpu search --hardware H200
    --stages 2 --microbatches 2,4 --streams-per-stage 1,2`` (uncalibrated; searches under
    ``--searches``, outside the tree), its top 3 as ``subgpu run --from-search --top 3`` takes
    them, the multi-stream run of its first choice, and 4 fixed configurations (attention alone
    on stage 1 at 64/64 m=2 and 32/96 m=4 with 2 streams, a mid-layer split 48/80 m=2, the
    attention stage 96/32 m=2 with 2 streams); each predicted by the event simulator as ``subgpu
    run`` predicts it, under ``--collectives sleep``, ``proxy`` and ``none`` -> ``--configs``.
``--phase device`` (GPU): every configuration captured as a whole-step CUDA graph and timed
    (``Executor.measure``, tuned GEMMs, fused elementwise kernels: the runtime's defaults) under
    ``--collectives sleep`` and, where the workload has collectives, ``proxy`` and ``none`` ->
    ``$OUT/measured_<workload>.json`` (rewritten after every configuration, so a killed call
    keeps what it measured).
``--phase analyze`` (CPU): predicted vs measured speedups, verdicts (``subgpu_jax.app.verdict``
    with bands made leave-one-workload-out from the other held-out workloads, so no band is
    made from the runs it is judged on), the recommendation check, the decomposition ->
    ``experiments/results/hw_verdicts_h200.json`` and ``.png``.

Units: µs, SMs.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
import traceback

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

from subgpu_jax.model.collective import ONE_GPU_COLLECTIVES as COLLECTIVES  # noqa: E402
from subgpu_jax.sim.contention import POOL_SHARING  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
DATA = os.path.join(RESULTS, "hw_verdicts")

def workload_flags(gpus: int, tp: int, dp: int, ep: int | None, G: int, kv: int) -> list[str]:
    """The workload flags of ``subgpu search``/``run``: GPUs, TP x DP (EP for MoE models, with
    the experts in bf16 as Hopper runs them), global batch, KV history = prompt length."""
    f = ["--gpus", str(gpus), "--tp", str(tp), "--dp", str(dp)]
    if ep is not None:
        f += ["--ep", str(ep), "--expert-dtype", "bf16"]
    return f + ["--batch", str(G), "--kv-history", str(kv), "--input-len", str(kv)]


#: name -> (model, search/run workload flags, fit status). Memory: every workload's weights +
#: KV fit one H200 (the search's fit check).
WORKLOADS: dict[str, tuple[str, list[str], str]] = {
    "llama8b_1gpu_g256_kv2k": ("llama-3.1-8b", workload_flags(1, 1, 1, None, 256, 2048), "held_out"),
    "qwen25_7b_1gpu_g512_kv2k": ("qwen2.5-7b", workload_flags(1, 1, 1, None, 512, 2048),
                                 "held_out_family"),
    "qwen3_8b_1gpu_g32_kv16k": ("qwen3-8b", workload_flags(1, 1, 1, None, 32, 16384),
                                "held_out_family"),
    "llama70b_tp8_g1536_kv1k": ("llama-3.1-70b", workload_flags(8, 8, 1, None, 1536, 1024), "held_out"),
    "mixtral_tp8_g1024_kv4k": ("mixtral-8x7b", workload_flags(8, 8, 1, 8, 1024, 4096),
                               "held_out_family"),
    "qwen3moe_tp8_g1024_kv2k": ("qwen3-30b-a3b", workload_flags(8, 8, 1, 8, 1024, 2048),
                                "held_out_family"),
    "llama70b_tp8_g2048_kv1k": ("llama-3.1-70b", workload_flags(8, 8, 1, None, 2048, 1024), "fit"),
    "llama70b_tp8_g512_kv4k": ("llama-3.1-70b", workload_flags(8, 8, 1, None, 512, 4096), "fit"),
    "gptoss120b_ref_g2048": ("gpt-oss-120b", workload_flags(32, 8, 4, 32, 2048, 32768), "fit"),
    "gptoss20b_tp8_g1024_kv8k": ("gpt-oss-20b", workload_flags(8, 8, 1, 8, 1024, 8192), "fit"),
    # added 2026-12-02 (FRESH), after the decision rule's "measure" branch was chosen
    "llama8b_1gpu_g512_kv1k": ("llama-3.1-8b", workload_flags(1, 1, 1, None, 512, 1024), "held_out"),
    "qwen3_8b_1gpu_g128_kv4k": ("qwen3-8b", workload_flags(1, 1, 1, None, 128, 4096),
                                "held_out_family"),
    "qwen25_7b_1gpu_g128_kv8k": ("qwen2.5-7b", workload_flags(1, 1, 1, None, 128, 8192),
                                 "held_out_family"),
    "mixtral_tp8_g2048_kv1k": ("mixtral-8x7b", workload_flags(8, 8, 1, 8, 2048, 1024),
                               "held_out_family"),
    "qwen3moe_tp8_g512_kv8k": ("qwen3-30b-a3b", workload_flags(8, 8, 1, 8, 512, 8192),
                               "held_out_family"),
}

#: The H100 workloads (issue 39): the protocol's families on an 80 GB card. Most H200 workloads
#: need 85-104 GB per GPU, so batches and KV histories are scaled until weights + KV fit the
#: H100's budget (the search's fit check); the fit status is the H200's, since no H100
#: measurement was ever fitted. Two are the H200's own workloads (they fit unchanged).
H100_WORKLOADS: dict[str, tuple[str, list[str], str]] = {
    "llama8b_1gpu_g128_kv2k": ("llama-3.1-8b", workload_flags(1, 1, 1, None, 128, 2048), "held_out"),
    "llama8b_1gpu_g256_kv1k": ("llama-3.1-8b", workload_flags(1, 1, 1, None, 256, 1024), "held_out"),
    "qwen25_7b_1gpu_g256_kv2k": ("qwen2.5-7b", workload_flags(1, 1, 1, None, 256, 2048),
                                 "held_out_family"),
    "qwen3_8b_1gpu_g32_kv8k": ("qwen3-8b", workload_flags(1, 1, 1, None, 32, 8192),
                               "held_out_family"),
    "qwen3_8b_1gpu_g64_kv4k": ("qwen3-8b", workload_flags(1, 1, 1, None, 64, 4096),
                               "held_out_family"),
    "llama70b_tp8_g1024_kv1k": ("llama-3.1-70b", workload_flags(8, 8, 1, None, 1024, 1024),
                                "held_out"),
    "llama70b_tp8_g512_kv2k": ("llama-3.1-70b", workload_flags(8, 8, 1, None, 512, 2048),
                               "held_out"),
    "mixtral_tp8_g1024_kv2k": ("mixtral-8x7b", workload_flags(8, 8, 1, 8, 1024, 2048),
                               "held_out_family"),
    "mixtral_tp8_g2048_kv1k": WORKLOADS["mixtral_tp8_g2048_kv1k"],
    "qwen3moe_tp8_g1024_kv2k": WORKLOADS["qwen3moe_tp8_g1024_kv2k"],
    "gptoss20b_tp8_g1024_kv8k": WORKLOADS["gptoss20b_tp8_g1024_kv8k"],
}

#: Every workload by name (a name means the same flags on every GPU).
ALL_WORKLOADS = {**WORKLOADS, **H100_WORKLOADS}


def workloads_of(gpu: str) -> list[str]:
    """The protocol's workload names on ``gpu`` (a preset name, ``H200`` or ``H100``)."""
    return list(H100_WORKLOADS if gpu == "H100" else WORKLOADS)


#: The workloads first measured after the decision rule (``app.verdict.decide``, its "measure"
#: branch) was chosen on the others' measurements: the rule's test.
FRESH = frozenset({"llama8b_1gpu_g512_kv1k", "qwen3_8b_1gpu_g128_kv4k",
                   "qwen25_7b_1gpu_g128_kv8k", "mixtral_tp8_g2048_kv1k",
                   "qwen3moe_tp8_g512_kv8k"})

#: The search of the user path (issue 22): stage count, microbatch counts, streams per stage.
SEARCH_GRID = ["--stages", "2", "--microbatches", "2,4", "--streams-per-stage", "1,2"]
TOP = 3

#: The GPUs the protocol runs on (``--hardware`` preset names): the device lends single H200s and
#: H100s; both are GH100 parts with 132 SMs, so the fixed configurations are the same.
PROTOCOL_GPUS = ("H200", "H100")


def run_request(name: str, extra: list[str], hardware: str = "H200"):
    """The ``subgpu run`` request (``hw_runtime.commands.request.RunRequest``) of a workload's
    options plus ``extra`` (needs the ``run`` sub-command registered: ``pip install -e .`` or
    ``experiments/device/env.sh``); ``hardware``: the ``--hardware`` spec (``H200`` or
    ``H200:analytic-v3``)."""
    from hw_runtime.commands.request import RunRequest
    from subgpu_jax.app.cli import build_parser

    model, flags, _ = ALL_WORKLOADS[name]
    return RunRequest.from_args(build_parser().parse_args(
        ["run", "--hardware", hardware, "--model", model, *flags, *extra]))


#: Measured wins of the wins study (docs/results.md, ``results/hw_wins_h200.json``) planned as
#: extra fixed configurations of their workload, so that they are measured under every
#: ``--collectives`` setting: (name, cuts, SMs, microbatch count, reuse, streams).
WINS: dict[str, list[tuple[str, list[str], list[int], int, bool, int]]] = {
    "llama70b_tp8_g2048_kv1k": [("wins_layer_split_32_96_m4_k2", ["L0.o_proj"], [32, 96], 4,
                                 False, 2)]}


def _fixed(g) -> list[tuple[str, list[str], list[int], int, bool, int]]:
    """(name, cut kernel names, SMs, microbatch count, reuse, streams) of the fixed ones."""
    ks = g.kernels
    attn = [k.name for k in ks if k.category.startswith("attn")][-1]
    after = ks[g.index(attn) + 1].name
    mid = ks[g.n // 2].name
    return [("attn_alone_64_64_m2_k1", [attn, after], [64, 64], 2, True, 1),
            ("attn_alone_32_96_m4_k2", [attn, after], [32, 96], 4, True, 2),
            ("layer_split_48_80_m2_k1", [mid], [48, 80], 2, False, 1),
            ("attn_alone_96_32_m2_k2", [attn, after], [96, 32], 2, True, 2)]


def config_args(d: dict) -> list[str]:
    """The ``subgpu run`` options of a planned configuration ``d`` (a ``configs`` entry of the
    plan; none for the temporal baseline), as the device and repredict phases run it."""
    if d["kind"] == "temporal":
        return []
    return ["--cuts", ",".join(d["cuts"]), "--sms", ",".join(map(str, d["sms"])),
            "--microbatch", str(d["microbatch"]),
            "--streams-per-stage", str(d["streams_per_stage"]),
            "--reuse" if d["reuse"] else "--no-reuse", "--policy", d["policy"]]


def _predict(req, mode: str, pool_sharing: str | None = None) -> dict:
    """Predicted whole-step makespans (µs) of a ``run`` request under every ``--collectives``
    mode, as ``subgpu run`` predicts them (``hw_runtime.commands.run.repredict``);
    ``pool_sharing``: the contention model's lane-sharing rule instead of its default
    (``ContentionModel.pool_sharing``; None: the default)."""
    from dataclasses import replace

    from hw_runtime.commands.run import prepare_run, repredict

    out = {}
    for c in COLLECTIVES:
        p = prepare_run(replace(req, collectives=c))
        model = p.model if pool_sharing is None else replace(p.model, pool_sharing=pool_sharing)
        out[c] = repredict(p.wl, p.cfg, p.dep, model, p.hw_sim, p.m, p.cache, mode)
    return out


def _entry(name: str, kind: str, req, mode: str) -> dict:
    from subgpu_jax.app.options import record_config_options

    c = req.config
    if c.record is not None:  # a search record's configuration
        o = record_config_options(c.record)
        cuts_s, sms_s, mb, reuse = o["cuts"], o["sms"], o["microbatch"], o["reuse"]
    else:
        cuts_s, sms_s, mb, reuse = c.cuts, c.sms, c.microbatch, c.reuse
    cuts = cuts_s.split(",") if cuts_s else []
    return {"name": name, "kind": kind, "mode": mode, "cuts": cuts,
            "sms": [int(x) for x in sms_s.split(",")] if sms_s else None,
            "microbatch": mb, "reuse": reuse,
            "streams_per_stage": int(c.streams_per_stage), "policy": c.policy,
            "predicted_us": _predict(req, mode)}


def plan_workload(name: str, searches: str, hardware: str = "H200") -> dict:
    """The user path and the fixed configurations of one workload, predicted."""
    from hw_runtime.commands.records import record_request, search_records, top_records
    from hw_runtime.commands.run import prepare_run

    model, flags, status = ALL_WORKLOADS[name]
    folder = os.path.join(searches, name)
    sflags = ["--batches" if f == "--batch" else f for f in flags]  # the search's grid flag
    cmd = [sys.executable, "-m", "subgpu_jax.app.cli", "search", "--hardware", hardware,
           "--model", model, *sflags, *SEARCH_GRID, "--no-progress", "--out", folder]
    t0 = time.time()
    with open(os.path.join(searches, f"{name}.log"), "w") as log:
        rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT)
    if rc != 0:
        raise RuntimeError(f"{name}: search exited {rc} (see {searches}/{name}.log)")
    a = run_request(name, [], hardware)
    groups = top_records(search_records(folder), TOP, hardware)
    (G, recs), = groups.items()
    rows = []
    for i, r in enumerate(recs):
        sub = record_request(a, r)
        if r["mode"] == "temporal":
            rows.append(_entry("temporal", "temporal", sub, "temporal"))
            continue
        rows.append(_entry(f"search_top{i}", "search", sub, "green"))
        rows[-1]["search_predicted_us"] = float(r["makespan_us"])
        if i == 1:
            ms = record_request(a, r)
            rows.append(_entry("search_top1_multistream", "multistream", ms, "multistream"))
    wl = prepare_run(run_request(name, [], hardware)).wl
    g = wl.graph(1)
    for nm, cuts, sms, m, reuse, k in _fixed(g) + WINS.get(name, []):
        extra = ["--cuts", ",".join(cuts), "--sms", ",".join(map(str, sms)),
                 "--microbatch", str(wl.batch // m), "--streams-per-stage", str(k),
                 "--reuse" if reuse else "--no-reuse"]
        try:
            rows.append(_entry(nm, "fixed", run_request(name, extra, hardware), "green"))
        except ValueError as e:
            print(f"{name}: {nm} skipped ({e})", flush=True)
    has_comm = any(k.is_comm for k in g.kernels)
    from subgpu_jax.sim.contention import uncalibrated_model_id
    return {"workload": name, "model": model, "flags": flags, "fit_status": status,
            "fresh": name in FRESH,
            "duration_model": uncalibrated_model_id(wl.hw), "hardware": hardware,
            "family": wl.arch.family, "moe": bool(wl.arch.is_moe),
            "global_batch": int(G), "has_collectives": has_comm,
            "search_s": round(time.time() - t0, 1), "configs": rows}


def repredict_phase(args) -> int:
    """Every configuration of ``--configs`` predicted again with the model in force (the same
    rows, measured or not): ``--configs-out`` gets the plan with the new ``predicted_us`` and
    ``duration_model``, for ``--phase analyze --configs``. The search's own choices are not
    redone (that is ``--phase plan``): this checks a model change on the configurations already
    measured."""
    from hw_runtime.commands.run import prepare_run
    from subgpu_jax.sim.contention import ContentionModel, uncalibrated_model_id

    try:
        with open(args.configs) as fh:
            plan = json.load(fh)
        if not isinstance(plan, dict) or not plan or not all(
                isinstance(p, dict) and isinstance(p.get("configs"), list) for p in plan.values()):
            raise ValueError("not a plan of --phase plan (workload -> {configs: [...]})")
        if set(args.workloads) != set(workloads_of(args.gpu)) and set(args.workloads) != set(plan):
            raise ValueError("--workloads: repredict the whole plan (one model version per "
                             "plan)")
    except (OSError, ValueError) as e:
        print(f"error: --configs: {args.configs}: {e}", file=sys.stderr)
        return 2
    for name in [w for w in args.workloads if w in plan]:
        p = plan[name]
        for d in p["configs"]:
            d["predicted_us"] = _predict(run_request(name, config_args(d), args.hardware),
                                         d["mode"], args.pool_sharing)
        p.setdefault("chosen_by", p.get("duration_model"))   # the model whose search chose them
        model = ContentionModel() if args.pool_sharing is None else \
            ContentionModel(pool_sharing=args.pool_sharing)   # a variant names itself
        p["duration_model"] = uncalibrated_model_id(
            prepare_run(run_request(name, [], args.hardware)).wl.hw, model)
        p["hardware"] = args.hardware
        p["repredicted_from"] = os.path.relpath(os.path.abspath(args.configs), RESULTS)
        print(f"{name}: {len(p['configs'])} configurations predicted again", flush=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.configs_out)), exist_ok=True)
    with open(args.configs_out, "w") as fh:
        json.dump(plan, fh, indent=1)
    print(f"wrote {args.configs_out}")
    return 0


def plan_phase(args) -> int:
    """Plans every ``--workloads`` not yet in ``--configs`` (resumes); a workload whose search
    fails (nothing fits the GPU's HBM, say) is listed with the reason in ``not_planned.json``
    beside the plan instead."""
    os.makedirs(args.searches, exist_ok=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.configs)), exist_ok=True)
    plan = {}
    if os.path.exists(args.configs):
        with open(args.configs) as fh:
            plan = json.load(fh)
    skipped_path = os.path.join(os.path.dirname(os.path.abspath(args.configs)),
                                "not_planned.json")
    skipped: dict[str, str] = {}
    for name in args.workloads:
        if name in plan:
            print(f"{name}: planned already (delete it from {args.configs} to redo)")
            continue
        try:
            plan[name] = plan_workload(name, args.searches, args.hardware)
        except RuntimeError as e:  # the search found nothing (e.g. weights + KV exceed HBM)
            skipped[name] = str(e)
            print(f"{name}: not planned ({e})", flush=True)
            with open(skipped_path, "w") as fh:
                json.dump(skipped, fh, indent=1)
            continue
        with open(args.configs, "w") as fh:
            json.dump(plan, fh, indent=1)
        p = plan[name]
        tm = p["configs"][0]["predicted_us"]["sleep"]
        print(f"{name}: {len(p['configs'])} configurations, search {p['search_s']} s; "
              + ", ".join(f"{c['name']} {tm / c['predicted_us']['sleep']:.3f}x"
                          for c in p["configs"][1:]), flush=True)
    return 0


# ============================================================================== device (GPU)

class GpuMachine:
    """The device phase's GPU: a ``TorchWorkload`` and ``Executor`` per workload and
    ``--collectives`` setting, with the runtime's defaults (tuned GEMMs, fused elementwise
    kernels, lane priorities auto; the decode attention ``attention``, default the runtime's
    ``auto``). Tests pass a stand-in with the same three methods."""

    def __init__(self, attention: str = "auto", moe_gemm: str = "auto") -> None:
        import torch

        self.torch = torch
        self.attention = attention
        self.moe_gemm = moe_gemm

    def name(self) -> str:
        return self.torch.cuda.get_device_name()

    def open(self, wl, collectives: str):
        """An executor of ``wl`` (the simulator's workload) with the collectives as asked."""
        from hw_runtime.gpu.executor import Executor
        from hw_runtime.gpu.kernels import collective_kwargs, link_kwargs
        from hw_runtime.gpu.policies import KernelSettings
        from hw_runtime.gpu.workload import TorchWorkload

        ks = KernelSettings(elementwise="auto", attention=self.attention, moe_gemm=self.moe_gemm)
        hwl = TorchWorkload(wl.graph(1), device="cuda", kernels=ks,
                            **collective_kwargs(collectives),
                            **link_kwargs(wl.hw))
        ex = Executor(hwl, gemm="tuned")
        ex.lane_priority = "auto"
        return ex

    def release(self) -> None:
        gc.collect()
        self.torch.cuda.empty_cache()


def check_device_args(args) -> None:
    """Everything the device phase needs, checked before a GPU is touched: ``--out`` given,
    positive ``--rounds``/``--replays`` (``--warmup`` >= 0), a readable ``--configs`` plan that
    holds every ``--workloads``, and a GPU with green contexts.

    Raises:
        ValueError: one line naming the flag and what is allowed.
    """
    if not args.out:
        raise ValueError("--out (or $OUT): the folder the device phase writes "
                         "measured_<workload>.json to is required")
    for f, lo in (("rounds", 1), ("replays", 1), ("warmup", 0)):
        v = getattr(args, f)
        if v < lo:
            raise ValueError(f"--{f} must be >= {lo}, got {v}")
    try:
        with open(args.configs) as fh:
            plan = json.load(fh)
    except (OSError, ValueError) as e:
        raise ValueError(f"--configs: {args.configs}: unreadable plan ({e}); make it with "
                         "--phase plan") from None
    missing = [w for w in args.workloads if w not in plan]
    if missing:
        raise ValueError(f"--workloads: {', '.join(missing)} not in the plan {args.configs}; "
                         f"planned: {', '.join(plan)}")
    from hw_runtime.commands.common import gpu_check
    gpu_check()


def device_phase(args, machine=None) -> int:
    """Measure every planned configuration (see the module docstring); ``machine`` defaults to
    ``GpuMachine()``. Writes ``measured_<workload>.json`` under ``--out`` after every row."""
    from hw_runtime.commands.run import prepare_run

    machine = GpuMachine(moe_gemm=getattr(args, "moe_gemm", "auto")) if machine is None \
        else machine
    with open(args.configs) as fh:
        plan = json.load(fh)
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    for name in [w for w in args.workloads if w in plan]:
        p = plan[name]
        res = {"workload": name, "rows": [], "errors": {}, "gpu": machine.name(),
               "date": time.strftime("%Y-%m-%d")}
        path = os.path.join(args.out, f"measured_{name}.json")
        planned = next(d for d in p["configs"]       # the settings the plan predicted
                       if d["kind"] == "temporal")["predicted_us"]
        modes = tuple(c for c in COLLECTIVES if c in planned) if p["has_collectives"] \
            else ("sleep",)
        for coll in modes:
            if time.time() - t0 > args.time_limit:
                res["errors"]["time"] = f"time limit reached before collectives={coll}"
                break
            try:
                ex = machine.open(prepare_run(run_request(name, [], p.get("hardware", "H200"))).wl,
                                  coll)
            except Exception as e:  # noqa: BLE001
                res["errors"][coll] = f"{e.__class__.__name__}: {e}"
                break
            # the kernels the runtime resolved (decode attention, expert GEMMs)
            res.setdefault("kernels", {k: getattr(ex, k, None) for k in ("attention",
                                                                          "moe_gemm")})
            for d in p["configs"]:
                rec = {"name": d["name"], "collectives": coll}
                if time.time() - t0 > args.time_limit:
                    rec["error"] = "time limit reached: not measured"
                    res["rows"].append(rec)
                    continue
                try:
                    if d["kind"] == "temporal":
                        meas = ex.measure(ex.temporal_config(), "temporal", args.rounds,
                                          args.replays, args.warmup)
                    else:
                        cfg = prepare_run(run_request(name, config_args(d),
                                                         p.get("hardware", "H200"))).cfg
                        meas = ex.measure(cfg, d["mode"], args.rounds, args.replays,
                                          args.warmup)
                    rec.update(measured_us=meas.makespan_us, spread=meas.spread)
                    print(f"{name:26s} {coll:5s} {d['name']:26s} {meas.makespan_us:10.1f} µs "
                          f"spread {meas.spread:.2%} ({time.time() - t0:.0f} s)", flush=True)
                except Exception as e:  # noqa: BLE001
                    traceback.print_exc()
                    rec["error"] = f"{e.__class__.__name__}: {e}"
                res["rows"].append(rec)
                with open(path, "w") as fh:
                    json.dump(res, fh)
            del ex
            machine.release()
        with open(path, "w") as fh:
            json.dump(res, fh)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--phase", choices=("plan", "device", "analyze", "repredict"),
                    required=True)
    ap.add_argument("--moe-gemm", default="auto", choices=("auto", "triton", "bmm"),
                    help="device: the runtime's expert GEMMs (subgpu run --moe-gemm); recorded "
                         "per workload under 'kernels'")
    ap.add_argument("--configs-out", default=None,
                    help="repredict: where the plan predicted again goes")
    ap.add_argument("--pool-sharing", default=None, choices=POOL_SHARING,
                    help="repredict, analyze: the contention model's rule for lanes of one "
                         "pool (ContentionModel.pool_sharing) instead of its default; the "
                         "model name in the plan and digest says so")
    ap.add_argument("--workloads", nargs="+", default=None, choices=list(ALL_WORKLOADS),
                    help="default: the protocol's workloads on the --hardware GPU")
    ap.add_argument("--hardware", default="H200",
                    help="the --hardware spec the plan predicts with: H200 (the default "
                         "model, analytic-v3) or H200:analytic-v2; names the data folder "
                         "hw_verdicts/<version>/ of the defaults below")
    ap.add_argument("--configs", default=None, help="default: <data>/configs.json")
    ap.add_argument("--searches", default="/tmp/hw_verdicts_searches",
                    help="where the plan phase's searches go (outside the tree)")
    ap.add_argument("--out", default=os.environ.get("OUT"),
                    help="device: the folder for measured_<workload>.json (default $OUT; "
                         "required: never the committed results)")
    ap.add_argument("--data", default=None, help="folder of the device phase's JSON files "
                    "(default: hw_verdicts/<version>/)")
    ap.add_argument("--digest", default=None,
                    help="the analyze phase's digest (its bands are what subgpu reads); the "
                         "figure goes beside it. Default: <data>/hw_verdicts_h200.json on the "
                         "H200, else hw_verdicts_<gpu>.json in the folder above <data>")
    ap.add_argument("--supersedes", nargs="*", default=[], metavar="FOLDER",
                    help="analyze: hw_verdicts/<FOLDER> digests this one replaces (recorded; "
                         "subgpu then never quotes them)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--replays", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--time-limit", type=float, default=540.0)
    args = ap.parse_args(argv)
    from subgpu_jax.model.hardware import get_hardware
    from subgpu_jax.model.kernelcost import analytic_model_of
    try:
        hw = get_hardware(args.hardware)
        version = analytic_model_of(hw)
    except ValueError as e:
        ap.error(f"--hardware: {e}")
    if hw.name not in PROTOCOL_GPUS:
        ap.error(f"--hardware: the protocol runs on {' or '.join(PROTOCOL_GPUS)} (NAME or "
                 f"NAME:VERSION), got {args.hardware!r}")
    gpu = hw.name.lower()
    args.workloads = args.workloads or workloads_of(hw.name)
    args.gpu = hw.name
    # the H200's plan and measurements sit in hw_verdicts/<version>/ (as since issue 22); any
    # other GPU's in hw_verdicts/<version>/<gpu>/, its digest beside the H200's
    default_data = os.path.join(DATA, version) if hw.name == "H200" \
        else os.path.join(DATA, version, gpu)
    args.data = args.data or default_data
    args.configs = args.configs or os.path.join(args.data, "configs.json")
    if args.digest is None:   # beside the data (another GPU's: beside the H200's, one up)
        base = args.data if hw.name == "H200" else os.path.dirname(os.path.abspath(args.data))
        args.digest = os.path.join(base, f"hw_verdicts_{gpu}.json")
    if args.phase == "analyze" and not str(args.digest).endswith(".json"):
        ap.error(f"--digest must name a .json file, got {args.digest!r}")
    for s in args.supersedes:
        own = os.path.basename(os.path.dirname(os.path.abspath(args.digest)))
        if s == own or not os.path.isfile(os.path.join(DATA, s, "hw_verdicts_h200.json")):
            ap.error(f"--supersedes: {s!r} must name another digest folder of {DATA} (one "
                     f"holding hw_verdicts_h200.json)")
    if args.phase == "plan":
        return plan_phase(args)
    if args.phase == "repredict":
        if not args.configs_out:
            ap.error("--phase repredict needs --configs-out FILE.json")
        return repredict_phase(args)
    if args.phase == "device":
        try:
            check_device_args(args)
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        return device_phase(args)
    from verdicts_report import analyze
    return analyze(args, {w: ALL_WORKLOADS[w] for w in args.workloads})


if __name__ == "__main__":
    sys.exit(main())
