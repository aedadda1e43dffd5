"""Do GEMMs launch, and how fast, on small green-context pools? (issue 39, the 8-SM row)

The worst held-out row of the H200 verdict run (docs/verdicts.md, "The default model's own
plan on the H200") put Llama-3.1-8B's QKV GEMM on an 8-SM stage: predicted 0.912x, measured
0.448x. On one H100 the same configuration (G = 448, m = 4) stopped with
``CUBLAS_STATUS_EXECUTION_FAILED`` from cuBLASLt (PyTorch then retried with cuBLAS, which failed
too). This microbenchmark (not a validation row) measures, on pools of ``POOLS`` SMs made by
``hw_runtime.gpu.partition.GreenPartition``, for each GEMM of Llama-3.1-8B (``SHAPES``: the
QKV, O, gate+up and down projections; N x K from the public config) at M = ``TOKENS`` tokens:

* whether the launch succeeds and its time (µs, CUDA events, median of ``REPS`` launches after a
  warm-up) under each launch: ``stock`` (PyTorch's default BLAS, no SM target), ``lt`` (cuBLASLt
  without a target) and ``lt@T`` (cuBLASLt planned for T SMs through PyTorch's SM carve-out,
  ``hw_runtime.gpu.blas``) for T in the pool, 16, 32 and the whole device less 8;
* the same GEMM on the whole GPU (no green context), the reference a pool's time is read against.

A launch failure can leave the CUDA context unusable, so every (pool, launch) pair runs in a
fresh child process; a child that dies records the GEMM it died in and the next pair goes on.

``--phase device`` writes ``small_pool_gemm.json`` under ``--out``. Units: µs, SMs, tokens.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

#: Llama-3.1-8B's GEMMs, (name, N, K): hidden 4096, 32 query + 8 KV heads of 128 (QKV N = 6144),
#: intermediate 14336 (gate+up fused N = 28672); meta-llama/Llama-3.1-8B config.json.
SHAPES = (("qkv", 6144, 4096), ("o_proj", 4096, 4096), ("mlp_up", 28672, 4096),
          ("mlp_down", 4096, 14336))
TOKENS = (64, 112, 128)
POOLS = (8, 16, 24, 32)
REPS = 20


def _launches(pool: int, num_sms: int) -> list[str]:
    targets = sorted({pool, 16, 32, num_sms - 8} - {0})
    return ["stock", "lt"] + [f"lt@{t}" for t in targets if t < num_sms]


def child(pool: int, launch: str, partition: list[int] | None = None) -> None:
    """One (pool, launch): prints one JSON line per GEMM as it finishes (pool 0: whole GPU).
    ``partition``: the green-context split to make (default ``[pool, 128 - pool]``); the GEMMs
    run on its first pool of ``pool`` SMs."""
    import torch
    from hw_runtime.gpu.partition import GreenPartition
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    if launch != "stock":
        torch.backends.cuda.preferred_blas_library("cublaslt")
    if launch.startswith("lt@"):
        torch._C._set_sm_carveout_experimental(num_sms - int(launch[3:]))
    part = None
    if pool:
        sizes = partition or [pool, 128 - pool]
        part = GreenPartition(sizes, streams_per_pool=1)
        stream = part.stream(sizes.index(pool))
        print(json.dumps({"status": "partition", "sizes": sizes, "granted": list(part.granted),
                          "method": part.method_used}), flush=True)
    else:
        stream = torch.cuda.Stream()
    for name, n, k in SHAPES:
        w = torch.randn(k, n, device="cuda", dtype=torch.bfloat16) * 0.02
        for m in TOKENS:
            a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            row = {"pool": pool, "launch": launch, "gemm": name, "m": m, "n": n, "k": k}
            print(json.dumps({**row, "status": "start"}), flush=True)
            with torch.cuda.stream(stream):
                out = a @ w
                torch.cuda.synchronize()
                ts = []
                for _ in range(REPS):
                    e0 = torch.cuda.Event(enable_timing=True)
                    e1 = torch.cuda.Event(enable_timing=True)
                    e0.record(stream)
                    torch.matmul(a, w, out=out)
                    e1.record(stream)
                    e1.synchronize()
                    ts.append(e0.elapsed_time(e1) * 1e3)
            print(json.dumps({**row, "status": "ok", "us": statistics.median(ts),
                              "min_us": min(ts)}), flush=True)
    if part is not None:
        part.close()


#: (name, partition): an 8-SM pool in other splits than [8, 120], where every launch failed on
#: the H100 while ``subgpu calibrate`` (a partition of one pool, [8]) timed GEMMs on 8 SMs.
PARTITIONS = (("8", [8]), ("8+120", [8, 120]), ("120+8", [120, 8]), ("8+8+112", [8, 8, 112]),
              ("8+56+64", [8, 56, 64]), ("16", [16]))


def partitions(out: str, time_limit: float, splits=PARTITIONS,
               name: str = "small_pool_gemm_partitions.json") -> None:
    """Phase ``partitions``: stock and cuBLASLt launches on the first smallest pool of each
    split of ``splits`` (default ``PARTITIONS``) -> ``name`` under ``out``."""
    import torch
    res = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "shapes": SHAPES, "tokens": TOKENS, "reps": REPS, "runs": []}
    t0 = time.time()
    for label, sizes in splits:
        for launch in ("stock", "lt", f"lt@{min(sizes)}"):
            if time.time() - t0 > time_limit:
                res["runs"].append({"partition": label, "launch": launch, "error": "time limit"})
                continue
            p = subprocess.run([sys.executable, __file__, "--phase", "child", "--pool",
                                str(min(sizes)), "--launch", launch, "--partition",
                                ",".join(map(str, sizes))], capture_output=True, text=True,
                               timeout=300)
            rows, info, last = [], None, None
            for line in p.stdout.splitlines():
                if line.startswith("{"):
                    r = json.loads(line)
                    if r["status"] == "ok":
                        rows.append(r)
                    elif r["status"] == "partition":
                        info = r
                    else:
                        last = r
            root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..")) + os.sep
            err = [x.replace(root, "") for x in p.stderr.splitlines()
                   if "Error" in x or "CUBLAS" in x][-1:] if p.returncode else []
            res["runs"].append({"partition": label, "sizes": sizes, "launch": launch,
                                "rc": p.returncode, "split": info, "ok": len(rows),
                                "died_in": last if p.returncode else None, "error": err,
                                "rows": rows})
            print(f"partition {label:8s} {launch:6s} rc={p.returncode} ok={len(rows)} "
                  f"{(info or {}).get('method')}", flush=True)
            with open(os.path.join(out, name), "w") as f:
                json.dump(res, f, indent=1)


#: 16-SM pools (the stage minimum, ``Hardware.min_stage_sms``) in chained splits like those
#: whose 8-SM pool failed: is the minimum safe?
PARTITIONS_16 = (("16+112", [16, 112]), ("112+16", [112, 16]), ("16+56+56", [16, 56, 56]),
                 ("16+16+96", [16, 16, 96]), ("56+16+56", [56, 16, 56]),
                 ("16+40+72", [16, 40, 72]))


def device(out: str, time_limit: float) -> None:
    import torch
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    res = {"device": torch.cuda.get_device_name(0), "num_sms": num_sms,
           "torch": torch.__version__, "shapes": SHAPES, "tokens": TOKENS, "reps": REPS,
           "rows": [], "failures": []}
    t0 = time.time()
    plan = [(0, "stock"), (0, "lt")] + [(p, ln) for p in POOLS for ln in _launches(p, num_sms)]
    for pool, launch in plan:
        if time.time() - t0 > time_limit:
            res["failures"].append({"pool": pool, "launch": launch, "error": "time limit"})
            continue
        p = subprocess.run([sys.executable, __file__, "--phase", "child", "--pool", str(pool),
                            "--launch", launch], capture_output=True, text=True, timeout=300)
        last = None
        for line in p.stdout.splitlines():
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            if r["status"] == "ok":
                res["rows"].append(r)
                last = None
            else:
                last = r
        if p.returncode != 0:
            root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..")) + os.sep
            err = [x.replace(root, "") for x in p.stderr.splitlines()
                   if "Error" in x or "CUBLAS" in x][-2:]
            res["failures"].append({"pool": pool, "launch": launch, "rc": p.returncode,
                                    "died_in": last, "error": err})
        print(f"pool {pool:3d} {launch:8s} rc={p.returncode} rows={len(res['rows'])}",
              flush=True)
        with open(os.path.join(out, "small_pool_gemm.json"), "w") as f:
            json.dump(res, f, indent=1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--phase", choices=("device", "partitions", "partitions16", "child"),
                    required=True)
    ap.add_argument("--partition", default=None, help="child: the split, e.g. 8,120")
    ap.add_argument("--out", default=".")
    ap.add_argument("--pool", type=int, default=0)
    ap.add_argument("--launch", default="stock")
    ap.add_argument("--time-limit", type=float, default=300.0)
    a = ap.parse_args()
    if a.phase == "child":
        child(a.pool, a.launch, [int(x) for x in a.partition.split(",")] if a.partition
              else None)
    elif a.phase == "partitions":
        os.makedirs(a.out, exist_ok=True)
        partitions(a.out, a.time_limit)
    elif a.phase == "partitions16":
        os.makedirs(a.out, exist_ok=True)
        partitions(a.out, a.time_limit, PARTITIONS_16, "small_pool_gemm_partitions16.json")
    else:
        os.makedirs(a.out, exist_ok=True)
        device(a.out, a.time_limit)


if __name__ == "__main__":
    main()
