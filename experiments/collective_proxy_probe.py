"""How long the collective proxy (``hw_runtime.gpu.collectives.proxy_``, ``--collectives
proxy``) lasts against the link time it is paced to, on this GPU: every (CTA count of
``model.collective``, payload, target) of a grid, 10 launches captured in one CUDA graph (no
host launch time; ``corun.time_alone``), the median of 5 replays -> ``--out`` JSON (``experiments/results/collective_proxy_h200.json``). The target is
what the proxy aims at; a proxy longer than target + 5 µs means its bytes, not the link, set its
time at that CTA count. Needs a CUDA GPU with Triton.

Usage: python experiments/collective_proxy_probe.py --out FILE.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

from subgpu_jax.model.collective import A2A_CTAS, CUSTOM_AR_CTAS, NCCL_NVLS_CTAS  # noqa: E402

PAYLOAD_MIB = (1, 8, 28)
TARGET_US = (5.0, 20.0, 70.0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="the JSON file to write")
    a = ap.parse_args(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from digest_cli import check_out
    try:
        check_out(a.out)          # before the sweep, so a bad --out loses nothing
        from hw_runtime.commands.common import gpu_check
        gpu_check()
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    import torch
    from hw_runtime.gpu.collectives import proxy_
    from hw_runtime.gpu.corun import capture_graph, time_alone
    st = torch.cuda.Stream()

    rows = []
    for ctas in (NCCL_NVLS_CTAS, A2A_CTAS, CUSTOM_AR_CTAS):
        for mib in PAYLOAD_MIB:
            buf = torch.randn(mib * 2**19, device="cuda").to(torch.bfloat16)
            for target in TARGET_US:
                g = capture_graph(torch, st, lambda r: proxy_(buf, ctas, target), 10)
                t = time_alone(torch, g, st, 5) / 10.0
                rows.append({"ctas": ctas, "payload_MiB": mib, "target_us": target,
                             "measured_us": t, "hbm_GBps": 2 * mib * 2**20 / (t * 1e-6) / 1e9})
                print(f"ctas {ctas:3d} payload {mib:3d} MiB target {target:5.1f} µs: "
                      f"{t:7.1f} µs ({rows[-1]['hbm_GBps']:.0f} GB/s)", flush=True)
    with open(a.out, "w") as fh:
        json.dump({"gpu": torch.cuda.get_device_name(), "protocol": __doc__.split("\n\n")[0],
                   "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
