"""The temporal step against its limits, kernel class by kernel class (issue 23, item 1): per
workload and op kind of a profiled temporal replay on the H200, the measured time, the bytes
and FLOPs the model's graph assigns to those launches, and the fractions of two measured
references they reach.

    python experiments/kernel_efficiency.py --from DIR [--from DIR2 ...] [--attention sdpa] \
        [--out experiments/results/kernel_efficiency_h200.json]

A workload found in several ``--from`` folders is read from the last of them (a newer run of
the same workload). Each ``DIR`` holds ``trace_<workload>_<attention>.json`` (or ``trace_<workload>.json``) written by
``experiments/temporal_traces_h200.py --phase device`` (``experiments/device/run.sh attention``
writes both attention kernels). The workloads are those of ``experiments/hw_verdicts_h200.py``.

References (both committed, both measured on the H200 on the whole GPU, as the temporal step
runs):

* copy bandwidth: ``tests/data/h200_copy_bandwidth_vs_pool.csv`` at the pool's SM count (read +
  write bytes of a 1 GiB device-to-device copy per second; 4,245 GB/s on 132 SMs);
* GEMM rate: the H200 preset's ``tensor_flops["bf16"] * gemm_efficiency`` (an 8192^3 bf16
  ``torch.mm``: 1.0995e12 FLOP in 1.3715 ms = 801.7 TFLOP/s; ``subgpu_jax.model.hardware.H200``).

Per op kind: ``us`` (summed launch spans of the replay), ``bytes`` (HBM bytes: weights,
activations, KV; graph kernels of that kind, scaled to the replay's launches), ``flops``,
``GBps`` and ``TFLOPs`` achieved, ``frac_copy_bw`` and ``frac_gemm_rate``, the dominant device
kernel, and the issue's target where one applies:

* ``attn`` (decode attention) at G >= 256: ``frac_copy_bw`` >= 0.85;
* ``expert_up``/``expert_down`` (expert GEMMs): ``frac_copy_bw`` >= 0.75;
* dense GEMMs (``qkv``, ``o_proj``, ``mlp_up``, ``mlp_down``, ``lm_head``) at M >= 1,024 tokens
  per launch: ``frac_gemm_rate`` >= 0.70.

A class below its target gets ``reason``: what the measurement shows (its dominant kernel, the
roofline bound of its bytes and FLOPs against the two references, how far it is from it).
Collectives run as ``--collectives sleep`` (a spin to the modelled link time); their spin
kernels are excluded from ``us_device_work`` and they get no target. Bad input: one line
naming the flag or file, exit 2. CPU only.
"""

from __future__ import annotations

import argparse
import collections
import csv
import glob
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, ".."))
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

from subgpu_jax.app.store import atomic_write  # noqa: E402  (fsync-ed write and rename)

COPY_CSV = os.path.join(ROOT, "tests", "data", "h200_copy_bandwidth_vs_pool.csv")
#: Dense GEMM op kinds (tensor-core GEMMs over the weights).
DENSE_GEMMS = ("qkv", "o_proj", "mlp_up", "mlp_down", "lm_head", "mla_down", "mla_q_up",
               "mla_v_up")
EXPERT_GEMMS = ("expert_up", "expert_down")
#: The issue's targets: op kinds -> (reference, minimum fraction, condition on M or G).
TARGETS = {"attn": ("frac_copy_bw", 0.85), "expert": ("frac_copy_bw", 0.75),
           "dense": ("frac_gemm_rate", 0.70)}
#: Device kernels of an emulated collective's wait (``--collectives sleep``).
SPIN = re.compile(r"spin_kernel")


def copy_bandwidth(sms: int, path: str = COPY_CSV) -> float:
    """Measured copy bandwidth (bytes/s, read + write) on a pool of ``sms`` SMs, from the
    committed CSV (``pool_sms,copy_GBps``); ValueError when ``sms`` is not a row of it."""
    with open(path, encoding="utf-8") as fh:
        rows = {int(r["pool_sms"]): float(r["copy_GBps"])
                for r in csv.DictReader(line for line in fh if not line.startswith("#"))}
    if sms not in rows:
        raise ValueError(f"{path}: no copy bandwidth measured on {sms} SMs "
                         f"(rows: {', '.join(map(str, sorted(rows)))})")
    return rows[sms] * 1e9


def op_kind(k) -> str:
    """As ``experiments/temporal_traces_h200.py``: ``op/category`` for all-reduces, else op."""
    return f"{k.op}/{k.category}" if k.op == "allreduce" else k.op


def graph_work(kernels) -> dict[str, dict]:
    """Per op kind of ``kernels`` (``subgpu_jax.model.kernel.Kernel``): ``{"n", "bytes",
    "flops"}`` summed over its kernels (one microbatch of one region instance)."""
    out: dict[str, dict] = collections.defaultdict(
        lambda: {"n": 0, "bytes": 0.0, "flops": 0.0, "ctas": 0})
    for k in kernels:
        w = out[op_kind(k)]
        w["n"] += 1
        w["bytes"] += float(k.hbm_bytes)
        w["flops"] += float(k.flops)
        w["ctas"] = max(w["ctas"], int(k.ctas))
    return dict(out)


def target_of(op: str, tokens: int, G: int) -> tuple[str, float] | None:
    """(reference, minimum fraction) of the issue's target for op kind ``op`` at ``tokens`` per
    launch (M) and global batch ``G``, or None where the issue sets none."""
    if op == "attn":
        return TARGETS["attn"] if G >= 256 else None
    if op in EXPERT_GEMMS:
        return TARGETS["expert"]
    if op in DENSE_GEMMS:
        return TARGETS["dense"] if tokens >= 1024 else None
    return None


def classify(op: str, d: dict, work: dict, copy_Bps: float, gemm_flops: float, tokens: int,
             G: int, num_sms: int = 132) -> dict:
    """One row: the trace's op ``d`` (``us``, ``launches``, ``top``) against the graph's
    ``work`` of that kind (per region instance: ``n`` kernels, ``bytes``, ``flops``, ``ctas``),
    with the fractions of both references and the target; ``num_sms``: SMs it ran on.

    Hand check (docstring of the test): 2.15e9 bytes in 486 µs = 4.42e12 B/s = 1.04 of 4245 GB/s.
    """
    us = float(d["us"])
    spin = sum(t for n, t in d.get("top", []) if SPIN.search(n))
    scale = d["launches"] / max(work["n"], 1)
    nbytes, flops = work["bytes"] * scale, work["flops"] * scale
    dev = max(us - spin, 1e-9)
    top = [n for n, _ in d.get("top", []) if not SPIN.search(n)]
    row = {"us": us, "us_device_work": dev if spin else us, "launches": d["launches"],
           "us_per_launch": dev / max(d["launches"], 1), "ctas_model": work.get("ctas"),
           "bytes": nbytes, "flops": flops, "GBps": nbytes / dev * 1e6 / 1e9,
           "TFLOPs": flops / dev * 1e6 / 1e12,
           "frac_copy_bw": nbytes / dev * 1e6 / copy_Bps,
           "frac_gemm_rate": flops / dev * 1e6 / gemm_flops,
           "kernel": top[0] if top else None, "emulated_collective": bool(spin)}
    bound_us = max(nbytes / copy_Bps, flops / gemm_flops) * 1e6
    row["roofline_us"] = bound_us
    row["bound"] = "memory" if nbytes / copy_Bps >= flops / gemm_flops else "compute"
    t = None if spin else target_of(op.split("/")[0], tokens, G)
    row["target"] = None if t is None else {"reference": t[0], "min": t[1]}
    row["meets_target"] = None if t is None else bool(row[t[0]] >= t[1])
    if row["meets_target"] is False:
        row["reason"] = (f"{row[t[0]]:.0%} of the {t[0].split('_', 1)[1].replace('_', ' ')} "
                         f"(target {t[1]:.0%}); dominant kernel {row['kernel']}; "
                         f"{row['bound']}-bound by its bytes and FLOPs, at "
                         f"{bound_us / dev:.0%} of that roofline; "
                         f"{row['us_per_launch']:.1f} µs per launch")
        c = work.get("ctas") or 0
        if op in DENSE_GEMMS + EXPERT_GEMMS and 0 < c <= num_sms // 2:
            row["reason"] += (f"; about {c} CTAs per launch by the model's tile estimate "
                              f"(subgpu_jax.model.kernel.gemm_ctas) on {num_sms} SMs: "
                              f"at most half of them busy")
    return row


def workload_rows(name: str, trace: dict, hardware: str = "H200") -> dict:
    """The efficiency rows of one workload's temporal trace (module docstring)."""
    import hw_verdicts_h200 as V
    from hw_runtime.commands.run import prepare_run

    wl = prepare_run(V.run_args(name, [], hardware))[0]
    hw = wl.hw
    g = wl.graph(1)
    dep = g.deployment
    kernels = list(g.kernels)
    work = graph_work(kernels)
    copy_Bps = copy_bandwidth(hw.num_sms)
    gemm = hw.tensor_flops["bf16"] * hw.gemm_efficiency
    tokens, G = int(dep.requests_per_gpu), int(dep.global_batch)
    ops = {}
    for op, d in sorted(trace["ops"].items(), key=lambda x: -float(x[1]["us"])):
        if op not in work:
            continue
        ops[op] = classify(op, d, work[op], copy_Bps, gemm, tokens, G, hw.num_sms)
    return {"model": V.WORKLOADS[name][0], "fit_status": V.WORKLOADS[name][2],
            "tokens_per_gpu": tokens, "global_batch": G, "attention": trace.get("attention"),
            "measured_step_us": trace["measured_step_us"], "span_us": trace["span_us"],
            "references": {"copy_GBps": copy_Bps / 1e9, "gemm_TFLOPs": gemm / 1e12,
                           "pool_sms": hw.num_sms},
            "below_target": [o for o, r in ops.items() if r["meets_target"] is False],
            "ops": ops}


def collect(srcs: list[str], attention: str, out: str) -> dict:
    """Every ``trace_<workload>[_<attention>].json`` under the folders ``srcs`` (a workload in
    several: the last) -> the digest written to ``out`` (module docstring). ValueError (one
    line naming the flag or file) on bad input."""
    import hw_verdicts_h200 as V

    found = {}
    for src in srcs:
        if not os.path.isdir(src):
            raise ValueError(f"--from: {src!r} is not a folder")
        hits = 0
        for path in sorted(glob.glob(os.path.join(src, "trace_*.json"))):
            base = os.path.basename(path)[len("trace_"):-len(".json")]
            for name in V.WORKLOADS:
                if base in (name, f"{name}_{attention}"):
                    found[name] = path
                    hits += 1
        if not hits:
            raise ValueError(f"--from: no trace_<workload>[_{attention}].json of the "
                             f"protocol's workloads in {src!r}")
    res = {"protocol": __doc__.split("\n\n")[0],
           "source": "experiments/device/run.sh attention; temporal_traces_h200.py --phase device",
           "attention": attention, "workloads": {}}
    for name, path in found.items():
        try:
            with open(path, encoding="utf-8") as fh:
                t = json.load(fh)
            if "error" in t:
                res["workloads"][name] = {"error": t["error"]}
                continue
            res["workloads"][name] = workload_rows(name, t)
            res["workloads"][name]["trace"] = os.path.relpath(path, ROOT)
        except (OSError, json.JSONDecodeError, KeyError, TypeError) as e:
            raise ValueError(f"--from: {path!r}: not a temporal trace ({type(e).__name__}: "
                             f"{e})") from None
    atomic_write(out, json.dumps(res, indent=1))
    return res


def print_table(res: dict) -> None:
    print(f"{'workload':26s} {'op':22s} {'us':>8s} {'GB/s':>6s} {'copy':>5s} {'TF/s':>6s} "
          f"{'gemm':>5s} target")
    for name, w in res["workloads"].items():
        if "error" in w:
            print(f"{name:26s} error: {w['error']}")
            continue
        for op, r in w["ops"].items():
            tg = "" if r["target"] is None else (
                f"{r['target']['reference']} >= {r['target']['min']:.2f}: "
                f"{'met' if r['meets_target'] else 'MISSED'}")
            print(f"{name:26s} {op:22s} {r['us']:8.0f} {r['GBps']:6.0f} {r['frac_copy_bw']:5.2f} "
                  f"{r['TFLOPs']:6.0f} {r['frac_gemm_rate']:5.2f} {tg}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--from", dest="src", required=True, action="append",
                    help="folder with the temporal traces (trace_<workload>_<attention>.json); "
                         "repeatable, a workload in several folders is read from the last")
    ap.add_argument("--attention", default="sdpa", choices=("sdpa", "triton"),
                    help="which attention kernel's traces to read (default: sdpa, the default)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "kernel_efficiency_h200.json"))
    a = ap.parse_args(argv)
    if os.path.isdir(a.out) or not os.path.isdir(os.path.dirname(os.path.abspath(a.out))):
        print(f"error: --out: {a.out!r} must be a file in an existing folder", file=sys.stderr)
        return 2
    try:
        res = collect(a.src, a.attention, a.out)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print_table(res)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
