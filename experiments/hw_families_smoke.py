"""GPU smoke test of the runtime for the families with several region kinds (docs/method.md §6):
``subgpu run`` (temporal baseline + one green 2-stage configuration, output check) on

* ``deepseek_v3``: the public DeepSeek-V3 config.json cut to 10 layers, the first dense
  (``first_k_dense_replace`` 1): runs of 1 dense-MLP region then 9 MoE regions, multi-head latent
  attention with the compressed KV cache, 1 shared expert, grouped routing (bf16 experts);
  TP8 x DP1, EP8 on 8 GPUs, G = 256, KV history 4096;
* ``qwen3_moe`` with ``mlp_only_layers = [0]``: Qwen3-30B-A3B cut to 12 layers, runs of 1 dense
  region then 11 MoE regions; TP4, EP4 on 4 GPUs, G = 256, KV 4096;
* ``qwen3_moe`` with ``decoder_sparse_step = 2``: 8 layers alternating dense and MoE, one mixed
  2-layer region kind.

Every measured step is the whole decode step (all runs, then the head kernels on the last
stage), as ``subgpu simulate`` predicts it. The configs are written under ``$OUT/configs`` (from
``tests/data/configs``, only the layer fields changed). Device time: about 10-20 s per model.

Usage (GPU): ``PYTHONPATH=. python experiments/hw_families_smoke.py`` -> ``$OUT/hw_families_smoke.json``
(``--out DIR`` overrides ``$OUT``). ``--dry-run`` (CPU, no torch needed): only the CPU half of
``subgpu run`` (``hw_runtime.commands.run.prepare_run``) and the whole-step launch plans, to check the
options before spending device time.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import time

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

CONFIGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data",
                       "configs")

#: name -> (source config, changed fields, `subgpu run` workload options)
CASES = {
    "deepseek_v3_10L": ("deepseek-v3.json", {"num_hidden_layers": 10, "first_k_dense_replace": 1},
                        ["--gpus", "8", "--tp", "8", "--dp", "1", "--ep", "8", "--batch", "256",
                         "--kv-history", "4096", "--input-len", "4096"]),
    "qwen3_moe_12L_mlp_only_0": ("qwen3-30b-a3b.json",
                                 {"num_hidden_layers": 12, "mlp_only_layers": [0]},
                                 ["--gpus", "4", "--tp", "4", "--dp", "1", "--ep", "4",
                                  "--batch", "256", "--kv-history", "4096",
                                  "--input-len", "4096"]),
    "qwen3_moe_8L_sparse_step_2": ("qwen3-30b-a3b.json",
                                   {"num_hidden_layers": 8, "decoder_sparse_step": 2},
                                   ["--gpus", "4", "--tp", "4", "--dp", "1", "--ep", "4",
                                    "--batch", "256", "--kv-history", "4096",
                                    "--input-len", "4096"]),
}

#: timing options of every run (short: a smoke test, not a benchmark)
TIMING = ["--rounds", "1", "--replays", "20", "--warmup", "2"]


def write_config(name: str, out_dir: str) -> str:
    """Write case ``name``'s config.json under ``out_dir/configs``; returns its path."""
    src, changes, _ = CASES[name]
    with open(os.path.join(CONFIGS, src)) as fh:
        cfg = json.load(fh)
    cfg.update(changes)
    d = os.path.join(out_dir, "configs")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, name + ".json")
    with open(path, "w") as fh:
        json.dump(cfg, fh, indent=1)
    return path


def dry_run(name: str, path: str) -> dict:
    """The CPU half: ``prepare_run`` and the whole-step plans (temporal and the configuration)."""
    from hw_runtime.commands import RunRequest, add_commands
    from hw_runtime.commands.run import prepare_run
    from hw_runtime.plan import build_step_plan
    from subgpu_jax.model.graph import build_forward
    from subgpu_jax.space.config import temporal_of

    p = argparse.ArgumentParser()
    add_commands(p.add_subparsers())
    a = p.parse_args(["run", "--model", path, *CASES[name][2], *TIMING])
    p = prepare_run(RunRequest.from_args(a))
    wl, cfg, dep, m = p.wl, p.cfg, p.dep, p.m
    out = {}
    for label, c, mm in (("temporal", temporal_of(wl), 1), ("config", cfg, m)):
        out[label] = build_step_plan(build_forward(wl.arch, dep, mm), c, wl.batch).summary()
    return out


def gpu_run(name: str, path: str) -> dict:
    """``subgpu run --json`` of case ``name`` (green mode, the default Macro cut on an even
    2-stage split); the parsed JSON plus the wall time."""
    from subgpu_jax.app.cli import main

    buf = io.StringIO()
    t0 = time.time()
    with contextlib.redirect_stdout(buf):
        rc = main(["run", "--model", path, *CASES[name][2], *TIMING, "--json"])
    res = {"rc": rc, "wall_s": time.time() - t0}
    if rc == 0:
        res.update(json.loads(buf.getvalue()))
    else:
        res["stdout"] = buf.getvalue()[-2000:]
    return res


def main(argv=None) -> int:
    """Run every case (``--only`` one) and write ``hw_families_smoke.json``; prints a table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."), help="output folder ($OUT)")
    ap.add_argument("--only", choices=sorted(CASES), default=None)
    ap.add_argument("--dry-run", action="store_true", help="CPU only: options and plans")
    a = ap.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    results = {}
    for name in ([a.only] if a.only else list(CASES)):
        path = write_config(name, a.out)
        try:
            results[name] = dry_run(name, path) if a.dry_run else gpu_run(name, path)
        except Exception as e:  # noqa: BLE001 - a smoke test reports every case
            results[name] = {"error": f"{e.__class__.__name__}: {e}"}
        r = results[name]
        if "error" in r or a.dry_run:
            print(f"{name:28s} {r.get('error') or json.dumps(r['config']['runs'])}", flush=True)
        elif r["rc"] == 0:
            chk = r.get("output_check") or {}
            print(f"{name:28s} temporal {r['temporal']['measured_us']:9.1f} µs (pred "
                  f"{r['temporal']['predicted_us']:9.1f})  config {r['run']['measured_us']:9.1f}"
                  f" µs (pred {r['run']['predicted_us']:9.1f})  bitwise "
                  f"{chk.get('bitwise_equal')} tokens {chk.get('tokens_equal')}", flush=True)
        else:
            print(f"{name:28s} rc={r['rc']}: {r['stdout'][-300:]}", flush=True)
    fn = os.path.join(a.out, "hw_families_smoke.json")
    with open(fn, "w") as fh:
        json.dump(results, fh, indent=1)
    print(f"wrote {fn}")
    return 0 if all("error" not in r and r.get("rc", 0) == 0 for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
