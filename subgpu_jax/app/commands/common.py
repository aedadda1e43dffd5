"""What the ``simulate`` and ``search`` commands share: the topology and traffic options and the
checked workload of a parsed ``subgpu simulate``."""

from __future__ import annotations

import argparse

from subgpu_jax.model.graph import Deployment
from subgpu_jax.app.options import (TOPOLOGY_DEFAULTS, kv_lengths_from, resolve_arch_ep,
                                    serving_options)

__all__ = ["TOPOLOGIES", "add_topology_args", "topology_options", "workload_of"]


#: NVLink domain presets (GPUs per domain; 0 = all GPUs in one domain): DGX/HGX 8-GPU nodes,
#: GB200 NVL72 racks.
TOPOLOGIES = {"one-domain": 0, "hgx8": 8, "nvl72": 72}


def add_topology_args(p: argparse.ArgumentParser) -> None:
    """Add the topology (``--topology``, ``--nvlink-domain``, ``--scaleout-gbps``) and traffic
    (``--routing``, ``--routing-imbalance``, ``--kv-lengths``) options to ``p``."""
    g = p.add_argument_group("topology (default: all GPUs in one NVLink domain)")
    g.add_argument("--topology", default=TOPOLOGY_DEFAULTS["topology"], choices=tuple(TOPOLOGIES),
                   help="NVLink domain preset: one-domain (default), hgx8 (DGX/HGX 8-GPU nodes), "
                        "nvl72 (GB200 NVL72 racks); collectives spanning domains are charged at "
                        "--scaleout-gbps")
    g.add_argument("--nvlink-domain", type=int, default=TOPOLOGY_DEFAULTS["nvlink_domain"],
                   help="GPUs per NVLink domain (overrides --topology; 0 = one domain)")
    g.add_argument("--scaleout-gbps", type=float, default=TOPOLOGY_DEFAULTS["scaleout_gbps"],
                   help="scale-out bandwidth per GPU and direction between domains, GB/s, "
                        "0.01..100000. Default: 50 (one 400 Gb/s NIC per GPU)")
    r = p.add_argument_group("traffic (default: uniform routing, every request at --kv-history)")
    r.add_argument("--routing", default=TOPOLOGY_DEFAULTS["routing"],
                   choices=("uniform", "multinomial"),
                   help="expert load of the busiest EP rank: uniform (the mean G*k/n, default) "
                        "or multinomial (expected maximum under random routing of a microbatch)")
    r.add_argument("--routing-imbalance", type=float,
                   default=TOPOLOGY_DEFAULTS["routing_imbalance"],
                   help="extra factor >= 1 on the busiest EP rank's load (busiest / mean)")
    r.add_argument("--kv-lengths", default=TOPOLOGY_DEFAULTS["kv_lengths"], metavar="FILE|DIST",
                   help="per-request KV lengths (tokens): a file of integers (whitespace, comma "
                        "or JSON list), or uniform:LO:HI or lognormal:MEDIAN:SIGMA (SIGMA <= 4) "
                        "sampled for the G requests (seed 0), all in 1..16777216 tokens; "
                        "attention is charged for the busiest DP rank")


def topology_options(a) -> dict:
    """The ``Deployment`` fields that the options of :func:`add_topology_args` set (all but
    ``--kv-lengths``): the NVLink domain (``--nvlink-domain``, else ``--topology``'s), the
    scale-out bandwidth and the routing."""
    dom = a.nvlink_domain if a.nvlink_domain is not None else TOPOLOGIES[a.topology]
    return dict(nvlink_domain=dom, scaleout_GBps=a.scaleout_gbps, routing=a.routing,
                routing_imbalance=a.routing_imbalance)


def workload_of(a):
    """The checked ``Workload`` of parsed workload options (``app.fit.checked_workload``: a
    deployment that does not fit the GPU's memory is refused naming the flags that make it fit),
    with the topology and traffic options where the command has them."""
    from subgpu_jax.app.fit import checked_workload, given_tp_ep
    from subgpu_jax.model.hardware import get_hardware

    arch, ep = resolve_arch_ep(a)
    topo = {}
    if hasattr(a, "topology"):
        topo = topology_options(a)
        if a.kv_lengths:
            topo["kv_lengths"] = kv_lengths_from(a.kv_lengths, a.batch)
    dep = Deployment(num_gpus=a.gpus, attn_tp=a.tp, attn_dp=a.dp, moe_ep=ep,
                     global_batch=a.batch, **serving_options(a), **topo)
    return checked_workload(arch, dep, get_hardware(a.hardware), *given_tp_ep(a))
