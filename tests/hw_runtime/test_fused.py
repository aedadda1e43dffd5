"""hw_runtime.gpu.fused: the policy (pure, always runs) and the Triton kernels against the
PyTorch chains they replace (needs CUDA and Triton; skipped in CI)."""

from __future__ import annotations

import pytest

from hw_runtime.gpu import fused


# --------------------------------------------------------------------------- pure

def test_resolve_policies():
    assert fused.resolve("torch", True) == "torch"
    assert fused.resolve("torch", False) == "torch"
    assert fused.resolve("auto", False) == "torch"           # no CUDA: the PyTorch chains
    assert fused.resolve("auto", True) == ("triton" if fused.triton_available() else "torch")
    with pytest.raises(ValueError, match="needs Triton on a CUDA GPU"):
        fused.resolve("triton", False)
    with pytest.raises(ValueError, match="--elementwise must be one of auto, triton, torch"):
        fused.resolve("fast", True)


def test_cpu_workload_resolves_to_torch():
    torch = pytest.importorskip("torch")
    from hw_runtime.gpu.policies import KernelSettings
    from hw_runtime.gpu.workload import TorchWorkload
    from subgpu_jax.model.graph import Deployment, build_graph
    from subgpu_jax.model.models import ModelArch
    arch = ModelArch(name="tiny-llama", family="llama", num_layers=2, hidden=128, num_heads=4,
                     num_kv_heads=2, head_dim=32, vocab=500, intermediate=256)
    dep = Deployment(num_gpus=1, attn_tp=1, attn_dp=1, moe_ep=1, global_batch=4, input_len=16,
                     kv_history=16)
    wl = TorchWorkload(build_graph(arch, dep, 1), device="cpu")
    assert wl.elementwise == "torch" and torch is not None
    with pytest.raises(ValueError, match="--elementwise triton needs Triton"):
        TorchWorkload(build_graph(arch, dep, 1), device="cpu",
                      kernels=KernelSettings(elementwise="triton"))


# --------------------------------------------------------------------------- GPU

def _cuda_triton():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or not fused.triton_available():
        pytest.skip("needs a CUDA GPU and Triton")
    return torch


def _close(torch, got, ref, tol=2e-2):
    """bfloat16 results of a one-rounding kernel against a chain that rounds after every
    kernel: max |difference| within ``tol`` times max |ref| (bfloat16 has 8 mantissa bits,
    2^-8 = 3.9e-3 per rounding; the chains round up to three times)."""
    err = (got.float() - ref.float()).abs().max().item()
    assert err <= tol * max(ref.float().abs().max().item(), 1.0), err


@pytest.mark.gpu
@pytest.mark.parametrize("n", [256, 2880, 8192])
def test_gpu_rmsnorm_and_add(n):
    torch = _cuda_triton()
    g = torch.Generator(device="cuda").manual_seed(0)
    bf = torch.bfloat16
    a = torch.randn(37, n, device="cuda", generator=g).to(bf)
    b = torch.randn(37, n, device="cuda", generator=g).to(bf)
    w = (1 + 0.1 * torch.randn(n, device="cuda", generator=g)).to(bf)
    dst = torch.empty_like(a)
    fused.rmsnorm_(dst, a, w, 1e-5)
    _close(torch, dst, torch.nn.functional.rms_norm(a, (n,), w, 1e-5))
    h, hn = torch.empty_like(a), torch.empty_like(a)
    fused.add_rmsnorm_(h, hn, a, b, w, 1e-5)
    assert torch.equal(h, a + b)                    # one bfloat16 rounding, as torch.add
    _close(torch, hn, torch.nn.functional.rms_norm(a + b, (n,), w, 1e-5))


@pytest.mark.gpu
@pytest.mark.parametrize("qh,kvh,hd", [(8, 1, 128), (8, 1, 64), (6, 2, 32)])
def test_gpu_rope_kv_matches_the_chain(qh, kvh, hd):
    """The rotation by hand (half-split: [x1 c - x2 s, x2 c + x1 s]) in float32, for q into its
    buffer, k and v into a strided slot of [rows, kvh, L, hd] caches."""
    torch = _cuda_triton()
    g = torch.Generator(device="cuda").manual_seed(1)
    rows, L, pos, h2 = 19, 5, 3, hd // 2
    qkv = torch.randn(rows, (qh + 2 * kvh) * hd, device="cuda", generator=g).to(torch.bfloat16)
    ang = torch.rand(h2, device="cuda", generator=g) * 6.0
    cos, sin = ang.cos().to(torch.bfloat16), ang.sin().to(torch.bfloat16)
    q = torch.zeros(rows, qh, hd, device="cuda", dtype=torch.bfloat16)
    kc = torch.zeros(rows, kvh, L, hd, device="cuda", dtype=torch.bfloat16)
    vc = torch.zeros_like(kc)
    fused.rope_kv_(qkv, q, kc[:, :, pos, :], vc[:, :, pos, :], cos, sin, qh, kvh, hd)
    x = qkv.float().view(rows, qh + 2 * kvh, hd)
    c, s = cos.float(), sin.float()

    def rot(t):
        return torch.cat([t[..., :h2] * c - t[..., h2:] * s, t[..., h2:] * c + t[..., :h2] * s], -1)
    _close(torch, q, rot(x[:, :qh]), 1e-2)
    _close(torch, kc[:, :, pos], rot(x[:, qh:qh + kvh]), 1e-2)
    assert torch.equal(vc[:, :, pos], qkv.view(rows, qh + 2 * kvh, hd)[:, qh + kvh:])
    others = [i for i in range(L) if i != pos]
    assert not kc[:, :, others].any() and not vc[:, :, others].any()   # other slots untouched


@pytest.mark.gpu
@pytest.mark.parametrize("qh,kvh,hd", [(32, 8, 128), (4, 4, 64)])
def test_gpu_rope_kv_with_qk_norm_matches_the_chain(qh, kvh, hd):
    """Qwen3's path: per-head RMSNorm of q and k (``F.rms_norm(x, (hd,), w, eps)``, stored in
    bfloat16 as the chain does) before the rotation; v copied unnormalised."""
    torch = _cuda_triton()
    F = torch.nn.functional
    g = torch.Generator(device="cuda").manual_seed(3)
    rows, L, pos, h2, eps = 23, 4, 1, hd // 2, 1e-6
    bf = torch.bfloat16
    qkv = (3 * torch.randn(rows, (qh + 2 * kvh) * hd, device="cuda", generator=g)).to(bf)
    ang = torch.rand(h2, device="cuda", generator=g) * 6.0
    cos, sin = ang.cos().to(bf), ang.sin().to(bf)
    qn = (1 + 0.2 * torch.randn(hd, device="cuda", generator=g)).to(bf)
    kn = (1 + 0.2 * torch.randn(hd, device="cuda", generator=g)).to(bf)
    q = torch.zeros(rows, qh, hd, device="cuda", dtype=bf)
    kc = torch.zeros(rows, kvh, L, hd, device="cuda", dtype=bf)
    vc = torch.zeros_like(kc)
    fused.rope_kv_(qkv, q, kc[:, :, pos, :], vc[:, :, pos, :], cos, sin, qh, kvh, hd,
                   qn, kn, eps)
    x = qkv.view(rows, qh + 2 * kvh, hd)
    c, s = cos.float(), sin.float()

    def rot(t):
        t = t.float()
        return torch.cat([t[..., :h2] * c - t[..., h2:] * s, t[..., h2:] * c + t[..., :h2] * s], -1)
    _close(torch, q, rot(F.rms_norm(x[:, :qh], (hd,), qn, eps)), 1e-2)
    _close(torch, kc[:, :, pos], rot(F.rms_norm(x[:, qh:qh + kvh], (hd,), kn, eps)), 1e-2)
    assert torch.equal(vc[:, :, pos], x[:, qh + kvh:])
    with pytest.raises(ValueError, match="both or neither"):
        fused.rope_kv_(qkv, q, kc[:, :, pos, :], vc[:, :, pos, :], cos, sin, qh, kvh, hd, qn)


@pytest.mark.gpu
def test_gpu_silu_mul():
    torch = _cuda_triton()
    g = torch.Generator(device="cuda").manual_seed(2)
    inter = 3000
    gu = torch.randn(33, 2 * inter, device="cuda", generator=g).to(torch.bfloat16)
    out = torch.empty(33, inter, device="cuda", dtype=torch.bfloat16)
    fused.silu_mul_(out, gu, inter)
    ref = torch.nn.functional.silu(gu[:, :inter].float()) * gu[:, inter:].float()
    _close(torch, out, ref, 1e-2)


@pytest.mark.gpu
def test_gpu_dense_region_triton_vs_torch(dense_region_output):
    """A whole dense (Llama-like) region with the fused kernels against the PyTorch chains:
    the same random weights (same seed), outputs within bfloat16 rounding."""
    _cuda_triton()
    outs = {mode: dense_region_output(elementwise=mode) for mode in ("torch", "triton")}
    ref = outs["torch"]
    rel = ((outs["triton"] - ref).norm() / ref.norm()).item()
    assert rel < 2e-2, rel


@pytest.mark.gpu
def test_gpu_swiglu_oss():
    """GPT-OSS's clamped SwiGLU (gate/up interleaved) against the formula in float32, with
    values beyond the clamp limit on both sides."""
    torch = _cuda_triton()
    from hw_runtime.gpu.kernels import SWIGLU_ALPHA, SWIGLU_LIMIT
    g = torch.Generator(device="cuda").manual_seed(3)
    F = 1440
    gu = (4 * torch.randn(29, 2 * F, device="cuda", generator=g)).to(torch.bfloat16)
    out = torch.empty(29, F, device="cuda", dtype=torch.bfloat16)
    fused.swiglu_oss_(out, gu, SWIGLU_ALPHA, SWIGLU_LIMIT)
    x = gu.float()
    gate = x[:, ::2].clamp(max=SWIGLU_LIMIT)
    up = x[:, 1::2].clamp(-SWIGLU_LIMIT, SWIGLU_LIMIT)
    ref = (up + 1) * gate * torch.sigmoid(SWIGLU_ALPHA * gate)
    _close(torch, out, ref, 1e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("with_shared", [False, True])
def test_gpu_moe_combine(with_shared):
    """The fused MoE combine against the formula in float32: rows 37, k 3, H 2,500 (not a
    multiple of the block), expert outputs gathered by an arbitrary permutation, float32
    routing weights selected through wsel_idx, with and without shared experts."""
    torch = _cuda_triton()
    g = torch.Generator(device="cuda").manual_seed(4)
    rows, k, H, n, t_ = 37, 3, 2500, 50, 20
    y = torch.randn(n, H, device="cuda", generator=g).to(torch.bfloat16)
    h = torch.randn(rows, H, device="cuda", generator=g).to(torch.bfloat16)
    sh = torch.randn(rows, H, device="cuda", generator=g).to(torch.bfloat16) if with_shared \
        else None
    w = torch.softmax(torch.randn(t_, k, device="cuda", generator=g), -1)
    ci = torch.randint(0, n, (rows * k,), device="cuda", generator=g)
    wi = torch.randint(0, t_, (rows,), device="cuda", generator=g)
    out = torch.empty(rows, H, device="cuda", dtype=torch.bfloat16)
    fused.moe_combine_(out, h, y, ci, w, wi, sh)
    ref = h.float() + (sh.float() if with_shared else 0.0) + torch.einsum(
        "rk,rkh->rh", w[wi].to(torch.bfloat16).float(), y[ci].float().view(rows, k, H))
    _close(torch, out, ref, 1e-2)
    with pytest.raises(ValueError, match="moe_combine_"):
        fused.moe_combine_(out, h, y, ci[:-1], w, wi, sh)


@pytest.mark.gpu
@pytest.mark.parametrize("family", ["mixtral", "deepseek_v3"])
def test_gpu_moe_region_triton_vs_torch(family):
    """A whole small MoE region (Mixtral-like; DeepSeek-like with shared experts) with the
    fused kernels (the combine included) against the PyTorch chains: the same seed, outputs
    within bfloat16 rounding."""
    torch = _cuda_triton()
    from hw_runtime.gpu.policies import KernelSettings
    from hw_runtime.gpu.workload import TorchWorkload
    from subgpu_jax.model.graph import Deployment, build_graph
    from subgpu_jax.model.models import ModelArch

    arch = {"mixtral": ModelArch(name="tiny-mixtral", family="mixtral", num_layers=2,
                                 hidden=256, num_heads=4, num_kv_heads=2, head_dim=32,
                                 vocab=300, num_experts=4, top_k=2, moe_intermediate=128),
            "deepseek_v3": ModelArch(
                name="tiny-ds", family="deepseek_v3", num_layers=3, hidden=128, num_heads=4,
                num_kv_heads=4, head_dim=48, vocab=500, intermediate=256, num_experts=8,
                top_k=2, moe_intermediate=64, num_shared_experts=1, n_group=4, topk_group=2,
                mlp_types=("dense", "moe", "moe"), q_lora_rank=64, kv_lora_rank=64,
                qk_rope_head_dim=16, qk_nope_head_dim=32, v_head_dim=32)}[family]
    dep = Deployment(num_gpus=1, attn_tp=1, attn_dp=1, moe_ep=1, global_batch=16,
                     input_len=32, kv_history=32)
    outs = {}
    for mode in ("torch", "triton"):
        wl = TorchWorkload(build_graph(arch, dep, 1), device="cuda",
                           kernels=KernelSettings(elementwise=mode))
        wl.launch_region(0, 0)
        torch.cuda.synchronize()
        outs[mode] = wl.acts[0][f"resid.{wl.shapes.P}"].float().clone()
    ref = outs["torch"]
    rel = ((outs["triton"] - ref).norm() / ref.norm()).item()
    assert rel < 2e-2, rel
