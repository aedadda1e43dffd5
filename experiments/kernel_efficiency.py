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

from digest_cli import check_out, run_digest  # noqa: E402  (the shared --out/error frame)
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
    dev = us - spin
    top = [n for n, _ in d.get("top", []) if not SPIN.search(n)]
    rate = (lambda x: x / dev * 1e6) if dev > 0 else (lambda x: None)  # noqa: E731 (per s)
    frac = (lambda x, ref: x / dev * 1e6 / ref) if dev > 0 else (lambda x, ref: None)  # noqa
    row = {"us": us, "us_device_work": dev, "launches": d["launches"],
           "us_per_launch": dev / max(d["launches"], 1), "ctas_model": work.get("ctas"),
           "bytes": nbytes, "flops": flops,
           "GBps": None if dev <= 0 else rate(nbytes) / 1e9,
           "TFLOPs": None if dev <= 0 else rate(flops) / 1e12,
           "frac_copy_bw": frac(nbytes, copy_Bps), "frac_gemm_rate": frac(flops, gemm_flops),
           "kernel": top[0] if top else None, "emulated_collective": bool(spin)}
    bound_us = max(nbytes / copy_Bps, flops / gemm_flops) * 1e6
    row["roofline_us"] = bound_us
    row["bound"] = "memory" if nbytes / copy_Bps >= flops / gemm_flops else "compute"
    t = None if spin or dev <= 0 else target_of(op.split("/")[0], tokens, G)
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

    wl = prepare_run(V.run_request(name, [], hardware)).wl
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
            "moe_gemm": trace.get("moe_gemm"),
            "measured_step_us": trace["measured_step_us"], "span_us": trace["span_us"],
            "references": {"copy_GBps": copy_Bps / 1e9, "gemm_TFLOPs": gemm / 1e12,
                           "pool_sms": hw.num_sms},
            "below_target": [o for o, r in ops.items() if r["meets_target"] is False],
            "ops": ops}


def _number(v, what: str, positive: bool = False) -> float:
    """``v`` as a finite number (>= 0, or > 0 when ``positive``); ValueError naming ``what``."""
    import math

    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
            or v < 0 or (positive and v == 0):
        raise ValueError(f"{what} must be a finite number {'> 0' if positive else '>= 0'}, "
                         f"got {v!r}")
    return float(v)


def check_trace(t, attention: str) -> None:
    """Refuse a trace that is not what ``temporal_traces_h200.py --phase device`` writes for
    ``attention`` (ValueError naming the field): ``measured_step_us`` and ``span_us`` finite
    and > 0; ``ops`` a non-empty object of ``{"us": >= 0, "launches": integer >= 1, "top":
    [[kernel name, µs >= 0], ...]}`` whose kernels' µs sum to at most ``us``; ``attention``,
    when given, the one asked for."""
    if not isinstance(t, dict):
        raise ValueError("the trace must be a JSON object")
    if "error" in t:
        return
    for f in ("measured_step_us", "span_us"):
        _number(t.get(f), f, positive=True)
    if t.get("attention", attention) != attention:
        raise ValueError(f"attention is {t.get('attention')!r}, not the --attention {attention!r}")
    ops = t.get("ops")
    if not isinstance(ops, dict) or not ops:
        raise ValueError(f"ops must be a non-empty object of op kinds, got {type(ops).__name__}")
    for op, d in ops.items():
        if not isinstance(d, dict):
            raise ValueError(f"ops.{op} must be an object")
        us = _number(d.get("us"), f"ops.{op}.us")
        n = d.get("launches")
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"ops.{op}.launches must be an integer >= 1, got {n!r}")
        top = d.get("top", [])
        if not isinstance(top, list) or not all(
                isinstance(x, list) and len(x) == 2 and isinstance(x[0], str) for x in top):
            raise ValueError(f"ops.{op}.top must be a list of [kernel name, µs] pairs")
        tot = sum(_number(x[1], f"ops.{op}.top µs") for x in top)
        if tot > us * (1 + 1e-6) + 1e-6:
            raise ValueError(f"ops.{op}.top: its kernels' {tot:g} µs exceed the op's {us:g} µs")


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
                t = json.load(fh, parse_constant=lambda c: float("nan"))
            check_trace(t, attention)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, ValueError) as e:
            raise ValueError(f"--from: {path!r}: not a temporal trace of --attention "
                             f"{attention} ({str(e).splitlines()[0]})") from None
        if "error" in t:
            res["workloads"][name] = {"error": t["error"]}
            continue
        res["workloads"][name] = workload_rows(name, t)
        if not res["workloads"][name]["ops"]:
            raise ValueError(f"--from: {path!r}: none of its op kinds is an op of the "
                             f"{name} graph ({', '.join(sorted(t['ops']))})")
        res["workloads"][name]["trace"] = os.path.relpath(path, ROOT)
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
            if r["GBps"] is None:   # all of it an emulated collective's wait
                print(f"{name:26s} {op:22s} {r['us']:8.0f}  (no device work besides the wait)")
                continue
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
    def work() -> dict:
        check_out(a.out)
        return collect(a.src, a.attention, a.out)
    rc, res = run_digest(work, a.out)
    if rc:
        return rc
    print_table(res)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
