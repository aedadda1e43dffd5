"""Where the uncalibrated model's temporal error sits, kernel class by kernel class (issue 22):
a profiled temporal step of every workload of the verdict protocol
(``experiments/hw_verdicts_h200.py``: 10 workloads on the H200; its 11 ``H100_WORKLOADS`` on an
H100) on the GPU the device lends, against the model's isolated time of the same ops. On an
H100 the traces go with ``--hardware H100`` (``temporal_traces/h100/`` ->
``temporal_traces_h100_<version>.json``).

Phases:

``--phase device`` (GPU, one call, ~3 min): per workload, the runtime's defaults (tuned GEMMs,
    fused elementwise kernels, ``--collectives sleep``), the temporal plan (D = 1, one whole-GPU
    stream) captured as a CUDA graph and one replay profiled (torch.profiler,
    ``Executor.profile``); the activities mapped onto the region's op launches
    (``hw_runtime.timeline.map_activities``) -> ``$OUT/trace_<workload>.json``: per op kind
    (``op`` or ``op/category``) the summed launch spans (µs), launches and device kernels, the
    five longest device-kernel names with their summed time, and the replay's span and summed
    kernel time (the difference is the gaps between kernels).
``--phase analyze`` (CPU): the same ops' isolated times under the uncalibrated model
    (``StaticDurationModel`` on the whole GPU, the H200 preset), per op kind measured vs
    modelled, and the span the model misses -> ``experiments/results/temporal_traces_h200_<version>.json``
    (``--hardware H200`` or ``H200:analytic-v3``) and a table. Nothing here is fitted: the traces
    are read only to explain residuals.

    python experiments/temporal_traces_h200.py --phase device --out $OUT
    python experiments/temporal_traces_h200.py --phase analyze [--hardware H200:analytic-v3]

Units: µs.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.abspath(os.path.join(HERE, "..")))
sys.path.insert(0, HERE)

import hw_verdicts_h200 as V  # noqa: E402  (the workloads and the GPU machine of the protocol)
from hw_runtime.gpu.decode_attn import ATTENTION  # noqa: E402  (the --attention registry)

RESULTS = os.path.join(HERE, "results")


def op_kind(k) -> str:
    """``op/category`` for collectives (their cost differs by what they fuse), else ``op``."""
    return f"{k.op}/{k.category}" if k.op == "allreduce" else k.op


def trace_workload(name: str, machine) -> dict:
    """One profiled temporal replay of ``name`` mapped onto its ops (module docstring)."""
    from hw_runtime.commands.run import prepare_run
    from hw_runtime.timeline import map_activities

    wl = prepare_run(V.run_request(name, [], gpu_preset(machine.name()))).wl
    ex = machine.open(wl, "sleep")
    cfg = ex.temporal_config()
    meas = ex.measure(cfg, "temporal", 2, 20, 2)
    prof = ex.profile(cfg, "temporal")
    counts = ex.activity_counts(1, cfg, "temporal")
    iv = map_activities(prof["plan_object"], prof["activities"], counts, 1)
    g = wl.graph(1)
    acts = prof["activities"]
    per = collections.defaultdict(lambda: {"us": 0.0, "launches": 0, "kernels": 0,
                                           "names": collections.Counter()})
    for r in iv:
        k = g.kernels[r["op"]]
        d = per[op_kind(k)]
        d["us"] += r["end_us"] - r["start_us"]
        d["launches"] += 1
    # device-kernel names per op kind: activities in launch order, cut by the mapped intervals
    for r in iv:
        k = g.kernels[r["op"]]
        for a in acts:
            if a["start_us"] >= r["start_us"] - 1e-3 and a["start_us"] + a["dur_us"] <= r["end_us"] + 1e-3:
                d = per[op_kind(k)]
                d["kernels"] += 1
                d["names"][a["name"][:90]] += a["dur_us"]
    span = max(a["start_us"] + a["dur_us"] for a in acts) - min(a["start_us"] for a in acts)
    out = {"workload": name, "gpu": machine.name(), "measured_step_us": meas.makespan_us,
           # the kernels the runtime resolved the policies to
           "attention": getattr(ex, "attention", "sdpa"),
           "moe_gemm": getattr(ex, "moe_gemm", "bmm") if wl.arch.is_moe else None,
           "span_us": span, "kernel_sum_us": sum(a["dur_us"] for a in acts),
           "activities": len(acts), "launches": len(iv),
           "ops": {o: {"us": d["us"], "launches": d["launches"], "kernels": d["kernels"],
                       "top": d["names"].most_common(5)} for o, d in sorted(per.items())}}
    del ex
    machine.release()
    return out


def gpu_preset(name: str) -> str:
    """The protocol GPU (``V.PROTOCOL_GPUS``) that ``name`` names: ``H100`` when it contains
    "H100" (a torch device name such as "NVIDIA H100 80GB HBM3", or a ``--hardware`` preset
    name), else ``H200``."""
    return "H100" if "H100" in name else "H200"


def trace_file(name: str, attention: str = "auto", moe_gemm: str = "auto") -> str:
    """``trace_<workload>.json``, suffixed ``_<attention>`` for an explicit ``--attention`` and
    ``_moe-<moe_gemm>`` for an explicit ``--moe-gemm`` (so one folder can hold the same
    workload under several kernels)."""
    return (f"trace_{name}" + ("" if attention == "auto" else f"_{attention}")
            + ("" if moe_gemm == "auto" else f"_moe-{moe_gemm}") + ".json")


def device_phase(args) -> int:
    machine = V.GpuMachine(attention=args.attention, moe_gemm=args.moe_gemm)
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    for name in args.workloads or V.workloads_of(gpu_preset(machine.name())):
        if time.time() - t0 > args.time_limit:
            print(f"{name}: time limit reached, not traced", flush=True)
            continue
        try:
            res = trace_workload(name, machine)
        except Exception as e:  # noqa: BLE001  (one workload's failure never stops the study)
            traceback.print_exc()
            res = {"workload": name, "error": f"{e.__class__.__name__}: {e}"}
        res.setdefault("attention", args.attention)
        with open(os.path.join(args.out, trace_file(name, args.attention, args.moe_gemm)),
                  "w") as fh:
            json.dump(res, fh)
        print(f"{name:26s} span {res.get('span_us', float('nan')):9.0f} µs, "
              f"{res.get('launches', 0)} launches ({time.time() - t0:.0f} s)", flush=True)
    return 0


def read_trace(path: str) -> dict:
    """A device phase's ``trace_<workload>.json``: ``{"error": ...}`` or a trace with a span
    and kernel sum > 0 µs and, per op kind, ``us`` >= 0 and ``launches`` >= 1.

    Raises:
        ValueError: unreadable, not JSON, or not of that shape (one line naming the file)."""
    import math

    def pos(v, zero_ok=False) -> bool:
        return (not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)
                and (v >= 0 if zero_ok else v > 0))

    try:
        with open(path) as fh:
            t = json.load(fh)
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not readable JSON ({e.__class__.__name__})") from None
    if not isinstance(t, dict):
        raise ValueError(f"{path}: must hold a JSON object, got {type(t).__name__}")
    if "error" in t:
        return t
    ops = t.get("ops")
    if not (pos(t.get("span_us")) and pos(t.get("kernel_sum_us")) and isinstance(ops, dict)
            and ops and all(isinstance(d, dict) and pos(d.get("us"), True)
                            and isinstance(d.get("launches"), int)
                            and not isinstance(d.get("launches"), bool) and d["launches"] >= 1
                            and isinstance(d.get("kernels", 0), int)
                            and isinstance(d.get("top", []), list) for d in ops.values())
            and sum(d["us"] for d in ops.values()) > 0):
        raise ValueError(f"{path}: not a trace (span_us and kernel_sum_us > 0 µs, ops: per op "
                         f"kind us >= 0 and launches >= 1, some us > 0)")
    return t


def analyze_phase(args) -> int:
    """Per workload and op kind: measured span in the temporal replay vs the model's isolated
    time on the whole GPU (the same launches)."""
    from hw_runtime.commands.run import prepare_run
    from subgpu_jax.model.graph import StaticDurationModel
    from subgpu_jax.model.hardware import get_hardware
    from subgpu_jax.model.kernelcost import analytic_model_of

    try:
        version = analytic_model_of(get_hardware(args.hardware))
    except ValueError as e:
        print(f"error: --hardware: {e}", file=sys.stderr)
        return 2
    rows, out = [], {"model": version, "protocol": __doc__.split("\n\n")[0],
                     "workloads": {}}
    gpu = gpu_preset(args.hardware.split(":")[0])
    data = args.data or os.path.join(RESULTS, "temporal_traces", *(["h100"] if gpu == "H100" else []))
    for name in args.workloads or V.workloads_of(gpu):
        path = os.path.join(data, f"trace_{name}.json")
        if not os.path.exists(path):
            continue
        try:
            t = read_trace(path)
        except ValueError as e:
            print(f"error: --data: {e}", file=sys.stderr)
            return 2
        if "error" in t:
            out["workloads"][name] = {"error": t["error"]}
            continue
        wl = prepare_run(V.run_request(name, [], args.hardware)).wl
        sd = StaticDurationModel(wl.hw)
        g = wl.graph(1)
        model, n_graph = collections.defaultdict(float), collections.Counter()
        for k in g.kernels:
            model[op_kind(k)] += float(sd.kernel_time_us(k, wl.hw.num_sms))
            n_graph[op_kind(k)] += 1
        ops = {}
        for o, d in t["ops"].items():   # the graph is one region: scale to the step's launches
            model[o] = model.get(o, 0.0) * d["launches"] / max(n_graph[o], 1)
            ops[o] = {"measured_us": d["us"], "model_us": model.get(o, 0.0),
                      "ratio": model.get(o, 0.0) / d["us"] if d["us"] > 0 else None,
                      "kernels_per_launch": d["kernels"] / max(d["launches"], 1),
                      "top": d["top"][:3]}
        meas_ops = sum(d["us"] for d in t["ops"].values())
        mod_ops = sum(model.values())
        out["workloads"][name] = {
            "fit_status": V.ALL_WORKLOADS[name][2], "span_us": t["span_us"],
            "kernel_sum_us": t["kernel_sum_us"], "ops_measured_us": meas_ops,
            "ops_model_us": mod_ops, "model_over_measured": mod_ops / meas_ops,
            "gap_share": 1 - t["kernel_sum_us"] / t["span_us"], "ops": ops}
        print(f"\n{name} ({V.ALL_WORKLOADS[name][2]}): region span {t['span_us']:.0f} µs, ops "
              f"measured {meas_ops:.0f}, model {mod_ops:.0f} ({mod_ops / meas_ops - 1:+.1%}); "
              f"gaps {1 - t['kernel_sum_us'] / t['span_us']:.1%} of the span")
        for o, d in sorted(ops.items(), key=lambda x: -x[1]["measured_us"]):
            rows.append((name, o, d))
            print(f"  {o:24s} meas {d['measured_us']:9.1f} model {d['model_us']:9.1f} "
                  f"{(d['ratio'] or 0) - 1:+7.1%}  {d['kernels_per_launch']:.1f} kernels/launch  "
                  f"{d['top'][0][0][:50] if d['top'] else ''}")
    if not out["workloads"]:
        print(f"error: --data: no trace_<workload>.json under {data} (the device phase "
              "writes them)", file=sys.stderr)
        return 2
    path = args.digest or os.path.join(RESULTS, f"temporal_traces_{gpu.lower()}_{version}.json")
    with open(path, "w") as fh:
        json.dump(out, fh, indent=1)
    print(f"wrote {path}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--phase", choices=("device", "analyze"), required=True)
    ap.add_argument("--workloads", nargs="+", default=None, choices=list(V.ALL_WORKLOADS),
                    help="default: the protocol's workloads of the GPU (device phase: the "
                         "machine's; analyze: --hardware's)")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/temporal_traces"))
    ap.add_argument("--data", default=None,
                    help="folder of the device phase's trace_<workload>.json files (default "
                         "experiments/results/temporal_traces/, and its h100/ for --hardware H100)")
    ap.add_argument("--time-limit", type=float, default=420.0)
    ap.add_argument("--attention", default="auto", choices=ATTENTION,
                    help="device phase: the runtime's decode attention (subgpu run "
                         "--attention); an explicit choice suffixes the trace files with it")
    ap.add_argument("--moe-gemm", default="auto", choices=("auto", "triton", "bmm"),
                    help="device phase: the runtime's expert GEMMs (subgpu run --moe-gemm); an "
                         "explicit choice suffixes the trace files with _moe-<choice>")
    ap.add_argument("--digest", default=None,
                    help="analyze: the JSON to write (default: "
                         "experiments/results/temporal_traces_h200_<version>.json)")
    ap.add_argument("--hardware", default="H200",
                    help="the model to compare with (analyze): H200 (the default model, "
                         "analytic-v3), H200:analytic-v2 or H100 (the H100's traces, "
                         "temporal_traces_h100_<version>.json)")
    args = ap.parse_args(argv)
    if not (args.time_limit > 0 and args.time_limit < float("inf")):
        ap.error(f"--time-limit must be a finite number of seconds > 0, got {args.time_limit}")
    if args.phase == "analyze":
        if args.attention != "auto" or args.moe_gemm != "auto":
            ap.error("--attention and --moe-gemm choose the device phase's kernels; the analyze "
                     "phase reads the default trace_<workload>.json files")
        name, _, version = args.hardware.partition(":")
        if name.upper() not in V.PROTOCOL_GPUS:
            ap.error(f"--hardware must be one of {', '.join(V.PROTOCOL_GPUS)} (NAME or "
                     f"NAME:VERSION), the GPUs the traces are taken on; got {args.hardware!r}")
        args.hardware = name.upper() + (":" + version if version else "")
        gpu = args.hardware.split(":")[0]
        stray = [w for w in args.workloads or [] if w not in V.workloads_of(gpu)]
        if stray:
            ap.error(f"--workloads: {', '.join(stray)} not of the {gpu} protocol "
                     f"({', '.join(V.workloads_of(gpu))})")
        if args.data is not None and not os.path.isdir(args.data):
            ap.error(f"--data must be an existing folder of trace_<workload>.json files, got "
                     f"{args.data!r}")
        if args.digest is not None:
            from subgpu_jax.model.checks import out_file

            try:
                out_file(args.digest, "--digest")
            except ValueError as e:
                ap.error(str(e))
        return analyze_phase(args)
    from hw_runtime.commands.common import gpu_check
    try:
        gpu_check()
    except Exception as e:  # noqa: BLE001  (no torch, no GPU, no green contexts: one line)
        print(f"error: the device phase needs a GPU with green contexts: {e}".splitlines()[0],
              file=sys.stderr)
        return 2
    return device_phase(args)


if __name__ == "__main__":
    sys.exit(main())
