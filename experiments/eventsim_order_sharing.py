"""Do allocations of one structure share the event simulator's order of events? (issue 42: can a
batched exact timer replay one simulation's control flow for a whole batch of allocations?)

For every SubGPU record of a search of the built-in default workload (GPT-OSS 120B on 32 B200,
``subgpu search --out DIR``; its ``records.jsonl``), the record's configuration and each of its
one-quantum moves (what one pass of Algorithm 2's polish scores together) are simulated in full
(``eventsim.simulate(..., forward=False)``, the default contention model, L2 ``lru``; the search's
configurations, so not validated again) with the
order of every kernel instance's start and end taken from the result (``SimResult.kernel_start``
and ``kernel_end``, sorted by time). Per
record: the moves whose whole sequence equals the record's, and the median share of the
record's sequence a move follows before its first difference. A batched timer that replays one
control flow for many allocations pays only where these are high.

Usage: python experiments/eventsim_order_sharing.py --records DIR/records.jsonl [--out JSON]
Writes experiments/results/eventsim_order_sharing.json and prints one line per record.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402

from digest_cli import check_out, write_digest  # noqa: E402


def sequence(g, cfg, hw) -> tuple:
    """The order of every kernel instance's start and end in one full simulation of ``cfg`` on
    ``g`` (``SimResult.kernel_start`` / ``kernel_end``): ``("s" or "e", instance)`` sorted by
    time, ends before starts at one instant, then by instance."""
    from subgpu_jax.sim.contention import ContentionModel
    from subgpu_jax.sim.eventsim import simulate

    r = simulate(g, cfg, hw, ContentionModel(), "lru", record=False, validate=False,
                 forward=False)
    ev = [(float(t), 0, i) for i, t in enumerate(r.kernel_end)]
    ev += [(float(t), 1, i) for i, t in enumerate(r.kernel_start)]
    return tuple(("e" if k == 0 else "s", i) for _, k, i in sorted(ev))


def default_records(path: str) -> list[dict]:
    """The SubGPU records of ``path``, a ``records.jsonl`` of ``subgpu search`` on the default
    workload (GPT-OSS 120B on B200).

    Raises:
        ValueError: unreadable, not JSON lines, or not such records (one line naming
            ``--records``)."""
    try:
        with open(path) as fh:
            recs = [json.loads(ln) for ln in fh if ln.strip()]
    except (OSError, ValueError) as e:
        raise ValueError(f"--records: {path} is not a readable records.jsonl "
                         f"({e.__class__.__name__})") from None
    recs = [r for r in recs if isinstance(r, dict) and r.get("mode") == "subgpu"]
    if not recs or any(r.get("model") != "gpt-oss-120b" or r.get("hardware") != "B200"
                       for r in recs):
        raise ValueError("--records: needs the SubGPU records of a search of the default "
                         "workload (gpt-oss-120b on B200)")
    return recs


def checked_records(ap, a) -> list[tuple[dict, tuple]]:
    """``--out`` checked and ``--records`` read for an experiment on the default workload's
    records (``default_records``): ``[(record, record_setup(record)), ...]``, every record's
    configuration built once, before any work; a bad one ends the run with ``ap.error`` (one
    line naming ``--records``)."""
    try:
        check_out(a.out)
        recs = default_records(a.records)
        from subgpu_jax import get_hardware, get_model

        hw, arch = get_hardware("B200"), get_model("gpt-oss-120b")
        out = []
        for i, rec in enumerate(recs):
            try:
                out.append((rec, record_setup(rec, hw, arch)))
            except (KeyError, TypeError, ValueError) as e:
                raise ValueError(f"--records: SubGPU record {i + 1} of {a.records} is not a "
                                 f"search record of the default workload ({type(e).__name__}: "
                                 f"{e})") from None
        return out
    except ValueError as e:
        ap.error(str(e))


def record_setup(rec: dict, hw, arch) -> tuple:
    """``(cfg, graph, space)`` of a default-workload record: its ``Config``, the region graph
    of its microbatch count and the allocation space of its stage count."""
    from subgpu_jax.model.deployment import Deployment
    from subgpu_jax.model.workload import Workload
    from subgpu_jax.search.problem import Problem
    from subgpu_jax.space.config import Config

    wl = Workload.from_model(arch, Deployment.from_record(rec), hw)
    cfg = Config.from_record(rec, wl.graph(1))
    return cfg, wl.graph(int(rec["microbatches"])), Problem(wl, hw).space(cfg.D)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", required=True,
                    help="records.jsonl of `subgpu search` on the default workload")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "eventsim_order_sharing.json"))
    a = ap.parse_args(argv)
    recs = checked_records(ap, a)
    from subgpu_jax import get_hardware

    hw = get_hardware("B200")
    rows, t0 = [], time.time()
    for rec, (cfg, g, space) in recs:
        moves, _ = space.moves(np.asarray(cfg.alloc))
        base = sequence(g, cfg, hw)
        same, shared = 0, []
        for mv in moves:
            s = sequence(g, dataclasses.replace(cfg, alloc=tuple(int(x) for x in mv)), hw)
            same += s == base
            k = next((i for i, (x, y) in enumerate(zip(s, base)) if x != y), min(len(s), len(base)))
            shared.append(k / len(base))
        rows.append({"grid_key": rec["grid_key"], "D": cfg.D, "microbatches": g.microbatches,
                     "alloc": list(cfg.alloc), "events": len(base), "moves": len(moves),
                     "same_order": same, "median_shared_prefix": statistics.median(shared)})
        print(f"{rec['grid_key']:42s} {same} of {len(moves)} moves in the same order; median "
              f"shared prefix {rows[-1]['median_shared_prefix']:.1%} of {len(base)} events",
              flush=True)
    out = {"what": __doc__.split("\n\n")[0], "records": len(rows),
           "moves": sum(r["moves"] for r in rows),
           "same_order": sum(r["same_order"] for r in rows),
           "median_shared_prefix": statistics.median(r["median_shared_prefix"] for r in rows),
           "seconds": round(time.time() - t0, 1), "rows": rows}
    write_digest(a.out, out)
    print(f"{out['same_order']} of {out['moves']} moves share their record's order; median "
          f"shared prefix {out['median_shared_prefix']:.1%}; wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
