"""Every op the graph builder emits is known to each table keyed by op name (a newcomer adding
an op must add it everywhere, and a missing entry would otherwise fail silently):

* ``model.kernelcost``: the uncalibrated model's per-op device-kernel counts (``modelled``: an
  op it does not list silently gets the plain roofline);
* ``space.mapcut.PLACE``: the place of a kernel kind in a layer (an unlisted kind ranks 99 and
  a cut is carried to the wrong kernel of another region kind);
* ``hw_runtime.gpu.kernels``: the GPU runtime's builder of each op (``kernel_builder``).

Checked on every preset model's whole step (each region kind, and the head for kernelcost),
plus Mistral-style all-sliding and DeepSeek-V3's dense layers."""

from __future__ import annotations

import pytest

from subgpu_jax.model.deployment import Deployment
from subgpu_jax.model.graph import build_forward
from subgpu_jax.model.kernelcost import modelled
from subgpu_jax.model.models import MODELS
from subgpu_jax.space.mapcut import PLACE


def _step(name):
    arch = MODELS[name]
    tp = 4 if arch.num_heads % 8 else 8        # qwen2.5-7b: 28 query heads
    ep = 8 if arch.is_moe else 1
    dep = Deployment(num_gpus=8, attn_tp=tp, attn_dp=8 // tp, moe_ep=ep, global_batch=64,
                     input_len=1024, kv_history=1024)
    return arch, build_forward(arch, dep, 1)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_op_is_in_every_table(name):
    from hw_runtime.gpu.kernels import kernel_builder

    arch, fw = _step(name)
    regions = [k for g, _ in fw.runs for k in g.kernels]
    assert regions
    for k in regions + list(fw.head):
        assert modelled(k), f"{name}: kernelcost does not model op {k.op!r} ({k.name})"
    for k in regions:
        kind = k.name.split(".", 1)[1]
        assert kind in PLACE, f"{name}: space.mapcut.PLACE lacks {kind!r} ({k.name})"
        assert kernel_builder(k, arch) is not None, k.name
