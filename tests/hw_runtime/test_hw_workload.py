"""hw_runtime.gpu.workload: shapes and memory (pure, always runs); kernels on CPU (needs torch) and on
a GPU (needs CUDA; skipped in CI)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from hw_runtime.gpu.workload import estimate_bytes, hopper_arch, workload_shapes
from subgpu_jax.model.graph import REFERENCE_DEPLOYMENT, Deployment, OpGraph, build_graph
from subgpu_jax.model.models import MODELS, ModelArch

REF_ARCH = hopper_arch(MODELS["gpt-oss-120b"])

TINY = ModelArch(name="tiny-oss", family="gpt_oss", num_layers=4, hidden=256, num_heads=8,
                 num_kv_heads=2, head_dim=32, vocab=1000, num_experts=8, top_k=2,
                 moe_intermediate=128, layer_types=("sliding", "full") * 2, sliding_window=16,
                 attn_bias=True, mlp_bias=True, attention_sinks=True)
TINY_DEP = Deployment(num_gpus=2, attn_tp=2, attn_dp=1, moe_ep=2, global_batch=8, input_len=64,
                      kv_history=64)


def _torch():
    try:
        import torch
        return torch
    except Exception as e:  # noqa: BLE001 - any failure to import means "no torch here"
        pytest.skip(f"torch not importable: {e}")


# --------------------------------------------------------------------------- pure

def test_hopper_arch():
    assert MODELS["gpt-oss-120b"].expert_dtype == "mxfp4"
    assert REF_ARCH.expert_dtype == "bf16" and hopper_arch(REF_ARCH) is REF_ARCH


@pytest.mark.parametrize("m", [1, 2])
def test_reference_shapes(m):
    g = build_graph(REF_ARCH, REFERENCE_DEPLOYMENT, m)
    s = workload_shapes(g)
    assert (s.R, s.Rm, s.H, s.qh, s.kvh, s.hd, s.nq) == (512, 512 // m, 2880, 8, 1, 64, 640)
    assert s.layer_kinds == ("sliding", "full") and s.kv_len == (128, 32768)
    assert s.kv_pos == (127, 32767)
    assert (s.El, s.k, s.F, s.Tr, s.A, s.n_hit, s.cap) == (4, 4, 2880, 64 // m, 256 // m, 4,
                                                            64 // m)


def test_reference_memory_matches_graph():
    g = build_graph(REF_ARCH, REFERENCE_DEPLOYMENT, 1)
    per = estimate_bytes(g, kv_cache="per_instance")
    sh = estimate_bytes(g, kv_cache="shared")
    # KV of one copy = what the two attention kernels read (4.29 GB full + the window)
    kv_graph = sum(k.kv_bytes for k in g.kernels if k.op == "attn")
    assert per["kv_per_copy"] == pytest.approx(kv_graph, rel=1e-9)
    assert 4.29e9 < per["kv_per_copy"] < 4.32e9
    # weights of one instance = the graph's weight objects (all 4 local experts are hit)
    w_graph = sum(k.weight_bytes for k in g.kernels)
    assert per["weights_per_instance"] == pytest.approx(w_graph, rel=0.01)
    assert per["instances"] == 18 and per["kv_copies"] == 18 and sh["kv_copies"] == 1
    assert 80e9 < per["total"] < 100e9 < 141e9  # the reference fits on one H200, per instance
    assert sh["total"] < 20e9
    assert estimate_bytes(g, instances=1, kv_cache="shared")["weights"] == pytest.approx(
        per["weights_per_instance"])


def test_refusals():
    with pytest.raises(ValueError, match="hopper_arch"):
        workload_shapes(build_graph(MODELS["gpt-oss-120b"], REFERENCE_DEPLOYMENT, 1))
    ks = build_graph(REF_ARCH, REFERENCE_DEPLOYMENT, 1).kernels
    with pytest.raises(ValueError, match="build_graph"):
        workload_shapes(OpGraph.chain(ks[:3]))
    with pytest.raises(TypeError):
        workload_shapes("graph")
    g = build_graph(REF_ARCH, REFERENCE_DEPLOYMENT, 1)
    with pytest.raises(ValueError, match="instances"):
        estimate_bytes(g, instances=19)
    with pytest.raises(ValueError, match="kv_cache"):
        estimate_bytes(g, kv_cache="auto")
    fp8 = dataclasses.replace(REF_ARCH, kv_dtype="fp8")
    with pytest.raises(ValueError, match="bf16"):
        workload_shapes(build_graph(fp8, REFERENCE_DEPLOYMENT, 1))


def test_dense_and_qwen_shapes():
    g = build_graph(MODELS["llama-3.1-70b"], Deployment(num_gpus=8, attn_tp=8, attn_dp=1,
                                                        moe_ep=1, global_batch=64), 2)
    s = workload_shapes(g)
    assert not s.moe and s.I == 28672 // 8 and s.kvh == 1 and s.qh == 8 and s.Rm == 32
    g = build_graph(MODELS["qwen3-30b-a3b"], Deployment(num_gpus=4, attn_tp=4, attn_dp=1,
                                                        moe_ep=4, global_batch=64), 1)
    s = workload_shapes(g)
    assert s.moe and s.hd == 128 and s.El == 32 and s.k == 8


# --------------------------------------------------------------------------- torch on CPU

def _ref_attention(torch, q, k, v):
    """float64 decode attention with GQA: q [B, hq, 1, d], k/v [B, hkv, L, d]."""
    rep = q.shape[1] // k.shape[1]
    k = k.double().repeat_interleave(rep, dim=1)
    v = v.double().repeat_interleave(rep, dim=1)
    s = (q.double() @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    return torch.softmax(s, -1) @ v


def _check_region(torch, wl, mu=0, l=0):
    from hw_runtime.gpu.workload import TorchWorkload  # noqa: F401 - import check
    g = wl.graph
    s = wl.shapes
    a = wl.acts[mu]
    for i, k in enumerate(g.kernels):
        wl.launch(i, mu, l)
        if k.op == "attn":
            j = k.layer
            sl = slice(mu * s.Rm, (mu + 1) * s.Rm)
            kv = wl.kv[l % len(wl.kv)]
            q = a[f"L{j}.q"].view(s.Rm, s.qh, 1, s.hd)
            ref = _ref_attention(torch, q, kv[f"L{j}.k_cache"][sl], kv[f"L{j}.v_cache"][sl])
            w = wl.weights[l % len(wl.weights)]
            if f"L{j}.sink_scale" in w:
                ref = ref * w[f"L{j}.sink_scale"].double()
            out = a[f"L{j}.attn_out"].view(s.Rm, s.qh, 1, s.hd).double()
            err = (out - ref).norm() / ref.norm()
            assert err < 2e-2, (k.name, float(err))
        if k.op == "rope_kv":
            j = k.layer
            kv = wl.kv[l % len(wl.kv)]
            sl = slice(mu * s.Rm, (mu + 1) * s.Rm)
            qkv = a[f"L{j}.qkv"].view(s.Rm, s.qh + 2 * s.kvh, s.hd)
            v_new = qkv[:, s.qh + s.kvh:]
            assert torch.equal(kv[f"L{j}.v_cache"][sl, :, s.kv_pos[j], :], v_new)
            # RoPE keeps the norm of every (head, pair of dims)
            q = qkv[:, :s.qh].float()
            if wl.arch.qk_norm:  # Qwen3 normalises q per head before RoPE (unit weights here)
                q = torch.nn.functional.rms_norm(q, (s.hd,), eps=1e-5)
            qr = a[f"L{j}.q"].float()
            torch.testing.assert_close(qr.norm(dim=-1), q.norm(dim=-1), rtol=2e-2, atol=2e-2)
    out = wl.output(mu)
    assert torch.isfinite(out).all()


def test_cpu_tiny_model_all_kernels():
    torch = _torch()
    from hw_runtime.gpu.workload import TorchWorkload
    for m in (1, 2):
        g = build_graph(TINY, TINY_DEP, m)
        wl = TorchWorkload(g, device="cpu")
        assert wl.kv_cache == "per_instance" and len(wl.weights) == g.num_regions
        for l in range(g.num_regions):
            for mu in range(m):
                _check_region(torch, wl, mu, l)
        assert wl.acts[0][f"resid.{wl.shapes.P}"] is wl.acts[0]["resid.0"]


def test_cpu_launch_errors_and_info():
    _torch()
    from hw_runtime.gpu.workload import TorchWorkload
    g = build_graph(TINY, TINY_DEP, 2)
    wl = TorchWorkload(g, device="cpu", instances=1, kv_cache="shared")
    with pytest.raises(ValueError, match="microbatch"):
        wl.launch(0, 2, 0)
    with pytest.raises(ValueError, match="region_instance"):
        wl.launch(0, 0, g.num_regions)
    with pytest.raises(ValueError, match="kernel"):
        wl.launch("L9.attn", 0, 0)
    wl.launch("L1.attn", 1, 1)
    info = wl.kernel_info(g.index("L0.allreduce"))
    assert info["comm_target_us"] == pytest.approx(3.0 + info["comm_bytes"] / 450e9 * 1e6)
    assert wl.summary()["kv_cache"] == "shared"
    with pytest.raises(ValueError, match="kv_cache"):
        TorchWorkload(g, device="cpu", kv_cache="nope")


@pytest.mark.parametrize("name, dep", [
    ("llama-3.1-8b", Deployment(num_gpus=2, attn_tp=2, attn_dp=1, moe_ep=1, global_batch=4,
                                kv_history=32)),
    ("llama-3.1-8b", Deployment(num_gpus=1, attn_tp=1, attn_dp=1, moe_ep=1, global_batch=2,
                                kv_history=32)),
    ("qwen3-30b-a3b", Deployment(num_gpus=4, attn_tp=4, attn_dp=1, moe_ep=4, global_batch=4,
                                 kv_history=32)),
])
def test_cpu_other_models(name, dep):
    torch = _torch()
    from hw_runtime.gpu.workload import TorchWorkload
    g = build_graph(MODELS[name], dep, 2 if dep.global_batch >= 4 else 1)
    wl = TorchWorkload(g, device="cpu", instances=1, kv_cache="shared")
    _check_region(torch, wl, 0, 0)


# --------------------------------------------------------------------------- GPU

def _cuda():
    torch = _torch()
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    return torch


@pytest.mark.gpu
def test_gpu_tiny_model_and_graph_capture():
    torch = _cuda()
    from hw_runtime.gpu.workload import TorchWorkload
    g = build_graph(TINY, TINY_DEP, 2)
    wl = TorchWorkload(g, device="cuda")
    for mu in range(2):
        _check_region(torch, wl, mu, 0)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        wl.launch_region(0, 1)
    s.synchronize()
    cg = torch.cuda.CUDAGraph()
    with torch.cuda.graph(cg, stream=s):
        wl.launch_region(0, 1)
    with torch.cuda.stream(s):
        cg.replay()
    s.synchronize()
    assert torch.isfinite(wl.output(0)).all()


@pytest.mark.gpu
def test_gpu_virtual_comm_floor():
    torch = _cuda()
    from hw_runtime.gpu.workload import TorchWorkload
    from hw_runtime.gpu.kerneltime import time_kernels
    g = build_graph(TINY, TINY_DEP, 1)
    wl = TorchWorkload(g, device="cuda")
    comm = [i for i, k in enumerate(g.kernels) if k.is_comm]
    assert comm
    rows = time_kernels(wl, kernels=comm, reps=10, warmup=2)
    for r in rows:
        assert r["us"] >= 0.95 * r["comm_target_us"], r


@pytest.mark.gpu
def test_gpu_refuses_oversized_workload():
    torch = _cuda()
    from hw_runtime.gpu.workload import TorchWorkload, WorkloadMemoryError
    big = Deployment(kv_history=1 << 21)  # 2M tokens: 275 GB of KV per layer copy
    g = build_graph(REF_ARCH, big, 1)
    before = torch.cuda.memory_allocated()
    with pytest.raises(WorkloadMemoryError, match="GB free"):
        TorchWorkload(g, device="cuda", kv_cache="shared")
    assert torch.cuda.memory_allocated() == before


@pytest.mark.gpu
def test_gpu_reference_attention_shape_correct():
    """The full-attention kernel at the reference per-GPU shape, one instance, against float64
    on a few requests."""
    torch = _cuda()
    from hw_runtime.gpu.workload import TorchWorkload
    dep = dataclasses.replace(REFERENCE_DEPLOYMENT, input_len=4096, kv_history=4096)
    g = build_graph(REF_ARCH, dep, 2)
    wl = TorchWorkload(g, device="cuda", instances=1, kv_cache="shared")
    i = g.index("L1.attn")
    wl.launch(g.index("L1.rope_kv"), 1, 0)
    wl.launch(i, 1, 0)
    s = wl.shapes
    a, kv = wl.acts[1], wl.kv[0]
    sl = slice(s.Rm, s.Rm + 4)
    q = a["L1.q"].view(s.Rm, s.qh, 1, s.hd)[:4]
    ref = _ref_attention(torch, q, kv["L1.k_cache"][sl], kv["L1.v_cache"][sl])
    ref = ref * wl.weights[0]["L1.sink_scale"].double()
    out = a["L1.attn_out"].view(s.Rm, s.qh, 1, s.hd)[:4].double()
    assert float((out - ref).norm() / ref.norm()) < 2e-2


def test_link_kwargs_are_the_presets_and_the_h200_defaults():
    """The emulated collective's constants come from the GPU preset the simulator charges with:
    on the H200 they are TorchWorkload's defaults (3 µs, 450 GB/s NVLink 4 per direction,
    4,245 GB/s copy: subgpu_jax.model.hardware.H200); a B200 gets 900 GB/s (NVLink 5)."""
    import inspect

    from hw_runtime.gpu.kernels import link_kwargs
    from subgpu_jax.model.hardware import get_hardware

    h200 = link_kwargs(get_hardware("H200"))
    pytest.importorskip("torch")
    from hw_runtime.gpu.workload import TorchWorkload
    sig = inspect.signature(TorchWorkload.__init__).parameters
    assert h200 == {k: sig[k].default for k in ("comm_floor_us", "link_Bps", "copy_Bps")}
    assert link_kwargs(get_hardware("B200"))["link_Bps"] == 900e9


def test_arch_label_names_bf16_experts_for_moe_only():
    from hw_runtime.gpu.workload import arch_label
    assert arch_label(MODELS["mixtral-8x7b"]) == "mixtral-8x7b (bf16 experts)"
    assert arch_label(MODELS["llama-3.1-8b"]) == "llama-3.1-8b"
