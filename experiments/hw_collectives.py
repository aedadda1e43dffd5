"""Does the gain survive real collectives? (issue 25): the same configurations measured with real
NCCL collectives on several GPUs (``subgpu run --collectives nccl`` under ``torchrun``), with
the one-GPU emulations of the same deployment (``sleep``, ``proxy``) and predicted by the
simulator.

    python experiments/hw_collectives.py --phase plan
    python experiments/hw_collectives.py --phase device --out DIR [--workloads W ...]   (GPUs)
    python experiments/hw_collectives.py --phase analyze --data DIR [--gpus N]

* **plan** (CPU): ``results/hw_collectives/configs.json``: per study workload (``WORKLOADS``:
  Llama-3.1-70B TP8 at G = 2,048 and 1,024, Llama-3.1-8B TP2 at a large and a small batch,
  Mixtral-8x7B TP8 EP8) the temporal baseline and fixed configurations (the wins study's
  layer split, the protocol's attention-alone split, each also as its multistream twin), each
  with the simulator's whole-step prediction under every ``--collectives`` mode.
* **device** (a machine with at least the workload's GPU count): per workload and
  configuration, ``subgpu run ... --json`` once per one-GPU mode (one process) and once under
  ``torchrun --nproc-per-node N ... --collectives nccl`` (rank 0's JSON: the slowest rank's
  step); ``measured_<workload>.json`` after every row, so a cut call keeps what finished. A
  workload needing more GPUs than the machine has is skipped and said so.
* **analyze** (CPU): ``results/hw_collectives_h200x<N>.json``: per workload and configuration
  the measured speedup under ``nccl``, ``sleep`` and ``proxy``, whether the gain holds
  (speedup > 1 under ``nccl``), and how far the one-GPU emulations and the simulator were from
  the real runs (ratio of speedups, and of temporal steps).

Bad input: one line naming the flag, exit 2. Only the device phase needs GPUs.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.abspath(os.path.join(HERE, "..")))
sys.path.insert(0, HERE)

from hw_verdicts_h200 import workload_flags  # noqa: E402  (the protocol's flag layout)

DATA = os.path.join(HERE, "results", "hw_collectives")
#: One-GPU modes measured beside ``nccl`` (the emulations the issue compares).
EMULATIONS = ("sleep", "proxy")


#: name -> (model, ``subgpu run`` workload flags): the deployments issue 25 names.
WORKLOADS: dict[str, tuple[str, list[str]]] = {
    "llama70b_tp8_g2048_kv1k": ("llama-3.1-70b", workload_flags(8, 8, 1, None, 2048, 1024)),
    "llama70b_tp8_g1024_kv2k": ("llama-3.1-70b", workload_flags(8, 8, 1, None, 1024, 2048)),
    "llama8b_tp2_g512_kv2k": ("llama-3.1-8b", workload_flags(2, 2, 1, None, 512, 2048)),
    "llama8b_tp2_g64_kv2k": ("llama-3.1-8b", workload_flags(2, 2, 1, None, 64, 2048)),
    "mixtral_tp8_ep8_g1024_kv4k": ("mixtral-8x7b", workload_flags(8, 8, 1, 8, 1024, 4096)),
}


def gpus_of(name: str) -> int:
    """GPUs (processes) the workload's deployment needs."""
    f = WORKLOADS[name][1]
    return int(f[f.index("--gpus") + 1])


def run_request(name: str, extra: list[str], collectives: str = "sleep"):
    """The ``subgpu run`` request (``hw_runtime.commands.request.RunRequest``) of a study
    workload's options plus ``extra``."""
    from hw_runtime.commands.request import RunRequest
    from subgpu_jax.app.cli import build_parser

    model, flags = WORKLOADS[name]
    return RunRequest.from_args(build_parser().parse_args(
        ["run", "--hardware", "H200", "--model", model, *flags, "--collectives", collectives,
         *extra]))


def plan_configs(name: str) -> list[dict]:
    """The temporal baseline and the fixed configurations of a workload (module docstring):
    ``{"name", "kind", "mode", "flags"}`` with the ``subgpu run`` flags of each."""
    from hw_runtime.commands.run import prepare_run

    wl = prepare_run(run_request(name, [])).wl
    g = wl.graph(1)
    R = wl.graph(1).deployment.requests_per_gpu
    ks = g.kernels
    attn = [k.name for k in ks if k.category.startswith("attn")][-1]
    after = ks[g.index(attn) + 1].name
    oproj = next((k.name for k in ks if k.op == "o_proj"), ks[g.n // 2].name)
    out = [{"name": "temporal", "kind": "temporal", "mode": "green", "flags": []}]
    fixed = [("layer_split_32_96_m4_k2", [oproj], [32, 96], 4, False, 2),
             ("attn_alone_64_64_m2_k1", [attn, after], [64, 64], 2, True, 1)]
    for nm, cuts, sms, m, reuse, k in fixed:
        if R % m:
            continue
        flags = ["--cuts", ",".join(cuts), "--sms", ",".join(map(str, sms)),
                 "--microbatch", str(R // m), "--streams-per-stage", str(k),
                 "--reuse" if reuse else "--no-reuse"]
        out.append({"name": nm, "kind": "fixed", "mode": "green", "flags": flags})
        out.append({"name": nm + "_multistream", "kind": "fixed", "mode": "multistream",
                    "flags": flags + ["--mode", "multistream"]})
    return out


def predict(name: str, d: dict) -> dict[str, float]:
    """The simulator's whole-step makespan (µs) of a planned configuration under every
    ``--collectives`` mode (``nccl`` is charged as ``proxy``: docs/collectives.md)."""
    from hw_runtime.commands.run import prepare_run, repredict
    from subgpu_jax.model.collective import COLLECTIVES

    out = {}
    for c in COLLECTIVES:
        p = prepare_run(run_request(name, d["flags"], c))
        out[c] = repredict(p.wl, p.cfg, p.dep, p.model, p.hw_sim, p.m, p.cache,
                           "temporal" if d["kind"] == "temporal" else d["mode"])
    return out


def plan_phase(args) -> int:
    plan = {}
    for name in args.workloads:
        cfgs = plan_configs(name)
        for d in cfgs:
            d["predicted_us"] = predict(name, d)
        plan[name] = {"model": WORKLOADS[name][0], "gpus": gpus_of(name), "configs": cfgs}
        print(f"{name}: {len(cfgs)} configurations", flush=True)
    os.makedirs(os.path.dirname(args.configs), exist_ok=True)
    with open(args.configs, "w") as fh:
        json.dump(plan, fh, indent=1)
    print(f"wrote {args.configs}")
    return 0


def run_command(name: str, d: dict, collectives: str, replays: int) -> list[str]:
    """The command line of one measurement: ``subgpu run ... --json``, under ``torchrun`` with
    one process per GPU for ``nccl``."""
    model, flags = WORKLOADS[name]
    base = ["-m", "subgpu_jax.app.cli", "run", "--hardware", "H200", "--model", model, *flags,
            *d["flags"], "--collectives", collectives, "--replays", str(replays), "--json",
            "--no-check"]
    if collectives == "nccl":
        return [sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nproc-per-node", str(gpus_of(name)), *base]
    return [sys.executable, *base]


def parse_run_json(stdout: str) -> dict:
    """The JSON object ``subgpu run --json`` printed (rank 0's under torchrun; other lines,
    e.g. torchrun's, are skipped).

    Raises:
        ValueError: no JSON object in the output.
    """
    start = stdout.find("{\n")
    while start >= 0:
        try:
            return json.JSONDecoder().raw_decode(stdout[start:])[0]
        except json.JSONDecodeError:
            start = stdout.find("{\n", start + 1)
    raise ValueError("no JSON object in the output of subgpu run --json")


def device_phase(args) -> int:
    import torch

    have = torch.cuda.device_count()
    with open(args.configs) as fh:
        plan = json.load(fh)
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    for name in args.workloads:
        need = plan[name]["gpus"]
        if need > have:
            print(f"{name}: needs {need} GPUs, this machine has {have}: skipped", flush=True)
            continue
        res = {"workload": name, "gpus": need, "gpu": torch.cuda.get_device_name(),
               "date": time.strftime("%Y-%m-%d"), "rows": []}
        path = os.path.join(args.out, f"measured_{name}.json")
        for d in plan[name]["configs"]:
            if d["kind"] == "temporal":
                continue                 # every run reports its own temporal baseline
            for coll in ("nccl", *EMULATIONS):
                rec = {"name": d["name"], "mode": d["mode"], "collectives": coll}
                if time.time() - t0 > args.time_limit:
                    rec["error"] = "time limit reached: not measured"
                    res["rows"].append(rec)
                    continue
                cmd = run_command(name, d, coll, args.replays)
                rec["command"] = " ".join(shlex.quote(c) for c in cmd[1:])
                try:
                    p = subprocess.run(cmd, capture_output=True, text=True,
                                       timeout=max(30.0, args.time_limit - (time.time() - t0)))
                    if p.returncode:
                        raise RuntimeError((p.stderr.strip().splitlines() or ["?"])[-1][:300])
                    r = parse_run_json(p.stdout)
                    rec.update(temporal_us=r["temporal"]["measured_us"],
                               run_us=r["run"]["measured_us"],
                               speedup=r["speedup_measured"],
                               collectives_run=r.get("collectives_run"))
                except Exception as e:  # noqa: BLE001  (a row's failure never stops the study)
                    rec["error"] = f"{e.__class__.__name__}: {e}"[:400]
                res["rows"].append(rec)
                print(f"{name:28s} {d['name']:34s} {coll:5s} "
                      f"{rec.get('speedup', float('nan')):.3f}x ({time.time() - t0:.0f} s)",
                      flush=True)
                with open(path, "w") as fh:
                    json.dump(res, fh)
    return 0


def analyze(plan: dict, measured: dict[str, dict], gpus: int) -> dict:
    """The study's digest (module docstring) from the plan and the measured files.

    Per workload and configuration: ``measured`` speedups by collectives mode; ``gain_holds``
    (nccl speedup > 1); ``emulation_over_real`` (each one-GPU mode's speedup / nccl's);
    ``predicted`` speedups by mode (from the plan) and ``predicted_over_real`` (the simulator's
    nccl prediction / the nccl measurement); ``temporal_emulation_over_real`` (one-GPU temporal
    step / the real one).
    """
    out = {"gpus": gpus, "protocol": __doc__.split("\n\n")[0], "workloads": {}}
    for name, meas in measured.items():
        p = plan[name]
        pt = next(d for d in p["configs"] if d["kind"] == "temporal")["predicted_us"]
        rows = {}
        for d in p["configs"]:
            if d["kind"] == "temporal":
                continue
            got = {r["collectives"]: r for r in meas["rows"]
                   if r["name"] == d["name"] and "speedup" in r}
            if "nccl" not in got:
                rows[d["name"]] = {"error": "not measured with nccl"}
                continue
            real = got["nccl"]
            pred = {c: pt[c] / d["predicted_us"][c] for c in d["predicted_us"]}
            rows[d["name"]] = {
                "mode": d["mode"],
                "measured": {c: r["speedup"] for c, r in got.items()},
                "gain_holds": real["speedup"] > 1.0,
                "emulation_over_real": {c: got[c]["speedup"] / real["speedup"]
                                        for c in EMULATIONS if c in got},
                "temporal_emulation_over_real": {c: got[c]["temporal_us"] / real["temporal_us"]
                                                 for c in EMULATIONS if c in got},
                "predicted": pred,
                "predicted_over_real": pred["nccl"] / real["speedup"],
                "collectives_run": real.get("collectives_run")}
        out["workloads"][name] = {"gpus": p["gpus"], "rows": rows}
    return out


def analyze_phase(args) -> int:
    with open(args.configs) as fh:
        plan = json.load(fh)
    measured = {}
    for name in args.workloads:
        f = os.path.join(args.data, f"measured_{name}.json")
        if os.path.exists(f):
            with open(f) as fh:
                measured[name] = json.load(fh)
    if not measured:
        print(f"error: --data: no measured_<workload>.json in {args.data!r}", file=sys.stderr)
        return 2
    res = analyze(plan, measured, args.gpus)
    out = args.digest or os.path.join(HERE, "results", f"hw_collectives_h200x{args.gpus}.json")
    with open(out, "w") as fh:
        json.dump(res, fh, indent=1)
    print(f"wrote {out}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--phase", choices=("plan", "device", "analyze"), required=True)
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    ap.add_argument("--configs", default=os.path.join(DATA, "configs.json"))
    ap.add_argument("--out", default=os.environ.get("OUT"),
                    help="device: folder for measured_<workload>.json (default $OUT)")
    ap.add_argument("--data", default=DATA, help="analyze: folder of the measured files")
    ap.add_argument("--gpus", type=int, default=8, help="analyze: the machine's GPU count "
                    "(names the digest hw_collectives_h200x<N>.json)")
    ap.add_argument("--digest", default=None, help="analyze: the digest to write")
    ap.add_argument("--replays", type=int, default=20, help="device: replays per round")
    ap.add_argument("--time-limit", type=float, default=540.0)
    a = ap.parse_args(argv)
    if a.replays < 1:
        ap.error(f"--replays must be >= 1, got {a.replays}")
    if not (0 < a.time_limit < float("inf")):
        ap.error(f"--time-limit must be a finite number of seconds > 0, got {a.time_limit}")
    if a.gpus < 2:
        ap.error(f"--gpus must be >= 2 (real collectives need several GPUs), got {a.gpus}")
    if a.phase == "plan":
        return plan_phase(a)
    if not os.path.exists(a.configs):
        ap.error(f"--configs: {a.configs!r} does not exist (run --phase plan first)")
    if a.phase == "analyze":
        return analyze_phase(a)
    if not a.out:
        ap.error("--out (or $OUT): the folder the device phase writes to is required")
    try:
        import torch
        ok = torch.cuda.device_count() >= 2
    except Exception:  # noqa: BLE001
        ok = False
    if not ok:
        print("error: the device phase needs a machine with 2 or more GPUs (torch sees fewer)",
              file=sys.stderr)
        return 2
    return device_phase(a)


if __name__ == "__main__":
    sys.exit(main())
