"""The checked workload of parsed workload options (``workload_of``), for the command bodies
(``simulate``; the options themselves are declared and read in ``app/args.py``)."""

from __future__ import annotations

from subgpu_jax.model.graph import Deployment
from subgpu_jax.app.options import kv_lengths_from
from subgpu_jax.app.args import (given_tp_ep, resolve_arch_ep, serving_options,
                                 topology_options)

__all__ = ["workload_of"]


def workload_of(a):
    """The checked ``Workload`` of parsed workload options (``app.fit.checked_workload``: a
    deployment that does not fit the GPU's memory is refused naming the flags that make it fit),
    with the topology and traffic options where the command has them."""
    from subgpu_jax.app.fit import checked_workload
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
