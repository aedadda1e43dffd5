"""hw_runtime.gpu.decode_attn: the split choice and the policy (pure, always run) and the Triton
split-KV decode attention against a float32 reference (needs CUDA and Triton; skipped in CI)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, strategies as st

from hw_runtime.gpu import decode_attn as da
from hw_runtime.gpu import fused


# --------------------------------------------------------------------------- pure

def test_num_kv_splits_by_hand():
    """ceil(waves x SMs / programs), at most one split per 64 positions and at most 64:
    1,024 x 1 programs on 132 SMs: ceil(264 / 1024) = 1; 8 x 8 on 64 SMs with 2,048 positions:
    ceil(128 / 64) = 2; 1 x 8 on 132 SMs: ceil(264 / 8) = 33 > 2,048 / 64 = 32, capped at 32; 1 x 1 with 100,000 positions: min(264, 1,563, 64) = 64; 4 programs, 100 positions:
    ceil(100 / 64) = 2."""
    assert da.num_kv_splits(1024, 1024, 132, block_n=64) == 1
    assert da.num_kv_splits(64, 2048, 64, block_n=64) == 2
    assert da.num_kv_splits(8, 2048, 132, block_n=64) == 32
    assert da.num_kv_splits(1, 100_000, 132, block_n=64) == 64
    assert da.num_kv_splits(4, 100, 132, block_n=64) == 2
    # the kernel's default block of 128 positions: 2,048 / 128 = 16 blocks cap the 33 wanted
    assert da.BLOCK_N == 128 and da.num_kv_splits(8, 2048, 132) == 16


@given(st.integers(1, 5000), st.integers(1, 40000), st.integers(1, 264))
def test_num_kv_splits_bounds(programs, kv_len, sms):
    """Always 1..64, never more splits than 64-position blocks, and more SMs never fewer
    splits (the pool size only ever adds parallelism)."""
    s = da.num_kv_splits(programs, kv_len, sms)
    assert 1 <= s <= min(da.MAX_SPLITS, math.ceil(kv_len / da.BLOCK_N))
    assert da.num_kv_splits(programs, kv_len, sms + 8) >= s


@pytest.mark.parametrize("kw,word", [({"programs": 0}, "programs"), ({"kv_len": -1}, "kv_len"),
                                     ({"sms": True}, "sms"), ({"waves": float("nan")}, "waves")])
def test_num_kv_splits_refuses_bad_input(kw, word):
    args = dict(programs=4, kv_len=100, sms=132)
    args.update(kw)
    with pytest.raises(ValueError, match=word):
        da.num_kv_splits(**args)


def test_resolve_policies():
    assert da.resolve("auto", True) == "sdpa"     # GQA: SDPA streams at the copy bandwidth
    assert da.resolve("auto", False, mla=True) == "sdpa"      # no GPU: never Triton
    if fused.triton_available():
        assert da.resolve("auto", True, mla=True) == ("triton" if da.AUTO_TRITON_MLA
                                                      else "sdpa")
    assert da.resolve("sdpa", False) == "sdpa"
    with pytest.raises(ValueError, match="needs Triton on a CUDA GPU"):
        da.resolve("triton", False)
    with pytest.raises(ValueError, match="--attention must be one of auto, sdpa, triton"):
        da.resolve("flash", True)
    if fused.triton_available():
        assert da.resolve("triton", True) == "triton"


def test_backend_registry_capabilities():
    """One class per ``--attention`` kernel, by name: the choices are ``"auto"`` and the
    registry's names in registration order; the capabilities by hand (SDPA and Triton run GQA
    and MLA, FlashInfer GQA only; Triton and FlashInfer size their grids by the pool, FlashInfer
    alone keeps per-stream state); ``auto_choice`` names registered backends."""
    B = da.ATTENTION_BACKENDS
    assert da.ATTENTION == ("auto", "sdpa", "triton", "flashinfer") == ("auto", *B)
    caps = {n: (b.supports_gqa, b.supports_mla, b.pool_sized, b.per_lane) for n, b in B.items()}
    assert caps == {"sdpa": (True, True, False, False), "triton": (True, True, True, False),
                    "flashinfer": (True, False, True, True)}
    assert all(b.name == n and issubclass(b, da.AttentionBackend) for n, b in B.items())
    assert {da.auto_choice(False), da.auto_choice(True)} <= set(B)
    assert da.attention_backend("flashinfer") is da.FlashInferAttention
    assert da.attention_backend("triton", mla=True) is da.TritonAttention
    with pytest.raises(ValueError, match=r"decode attention \(MLA\) must be one of sdpa, triton"):
        da.attention_backend("flashinfer", mla=True)
    with pytest.raises(ValueError, match=r"decode attention \(GQA/MHA\) must be one of"):
        da.attention_backend("mykernel")


def test_register_attention_backend_refusals():
    """A backend needs a new name other than ``auto`` and at least one kind of attention; the
    registry is unchanged by a refusal."""
    before = dict(da.ATTENTION_BACKENDS)
    for name, gqa in (("", True), ("auto", True), ("sdpa", True), ("mine", False)):
        cls = type("Mine", (da.AttentionBackend,), {"name": name, "supports_gqa": gqa})
        with pytest.raises(ValueError, match="register_attention_backend"):
            da.register_attention_backend(cls)
    assert da.ATTENTION_BACKENDS == before
    with pytest.raises(NotImplementedError):
        da.AttentionBackend.gqa(None)
    assert da.AttentionBackend.workload_consts(None, None, None) == {}


def test_attention_help_lists_every_backend():
    """``--attention``'s help names each backend with its own text, then ``auto``."""
    text = da.attention_help()
    assert text.startswith("sdpa (PyTorch's scaled_dot_product_attention), triton (split-KV")
    assert all(f"{n} ({b.help})" in text for n, b in da.ATTENTION_BACKENDS.items())
    assert text.endswith(f"or auto ({da.AUTO_HELP})")


def test_run_and_calibrate_offer_the_choice(runtime_options):
    """`subgpu run`, `calibrate` and `tune` take --attention with the policies, default auto."""
    for acts in runtime_options.values():
        assert tuple(acts["attention"].choices) == da.ATTENTION
        assert acts["attention"].default == "auto"


# --------------------------------------------------------------------------- GPU

def _cuda_triton():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or not fused.triton_available():
        pytest.skip("needs a CUDA GPU and Triton")
    return torch


@pytest.mark.gpu
@pytest.mark.parametrize("R,qh,kvh,L,hd", [(3, 8, 1, 100, 128), (5, 32, 8, 1000, 128),
                                           (2, 64, 8, 257, 64), (7, 4, 4, 64, 128),
                                           (1, 16, 2, 5000, 128), (2, 28, 4, 130, 128),
                                           (2, 32, 1, 700, 128), (3, 8, 2, 1, 64),
                                           (2, 8, 2, 40, 16), (2, 8, 2, 90, 32),
                                           (2, 4, 2, 200, 256)])
@pytest.mark.parametrize("splits", [None, 1, 3])
@pytest.mark.parametrize("sharp", [1.0, 4.0])
def test_gpu_decode_attention_matches_float32(R, qh, kvh, L, hd, splits, sharp,
                                              gqa_reference):
    """Against the float32 reference: max |error| <= 1e-2 x max |reference| (no floor; a
    numpy emulation of the kernel with its bf16 roundings stays under 3e-3 on these shapes,
    and dropping the last position, scoring masked positions as 0 or not rescaling the running
    sum each exceed it). Shapes cover a group of 7 (Qwen2.5-7B: 28 / 4), groups of 1 and 32,
    one position, head dims 16-256, splits forced below and above the block count; ``sharp``
    scales q so that the running maximum moves between blocks."""
    torch = _cuda_triton()
    g = torch.Generator(device="cuda").manual_seed(R * 1000 + L)
    q = (torch.randn((R, qh, hd), generator=g, device="cuda") * sharp).to(torch.bfloat16)
    k = torch.randn((R, kvh, L, hd), generator=g, device="cuda").to(torch.bfloat16)
    v = torch.randn((R, kvh, L, hd), generator=g, device="cuda").to(torch.bfloat16)
    out = torch.empty_like(q)
    used = da.decode_attention(q, k, v, out, sms=132, splits=splits)
    torch.cuda.synchronize()
    bn = da.BLOCK_N if hd <= 128 else 64      # the default block (decode_attention)
    want = splits or da.num_kv_splits(R * kvh, L, 132, block_n=bn)
    split_len = -(-(-(-L // want)) // bn) * bn
    assert used == -(-L // split_len) <= want
    ref = gqa_reference(torch, q, k, v)
    err = (out.float() - ref).abs().max().item()
    assert err <= 1e-2 * ref.abs().max().item(), err


@pytest.mark.gpu
def test_gpu_decode_attention_in_a_cuda_graph(graph_replay_is_eager):
    """Captured after one eager call (as the runtime does) and replayed on new inputs copied
    into the captured tensors: the replay equals an eager call on those inputs."""
    torch = _cuda_triton()
    graph_replay_is_eager(torch, lambda q, k, v, out: da.decode_attention(q, k, v, out, sms=64))


@pytest.mark.gpu
def test_gpu_decode_attention_refuses_bad_shapes():
    torch = _cuda_triton()
    q = torch.zeros((2, 6, 128), device="cuda", dtype=torch.bfloat16)
    k = torch.zeros((2, 4, 64, 128), device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="qh not a multiple of kvh"):
        da.decode_attention(q, k, k, torch.empty_like(q), sms=132)
    q2 = torch.zeros((2, 8, 96), device="cuda", dtype=torch.bfloat16)
    k2 = torch.zeros((2, 4, 64, 96), device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="power of two"):
        da.decode_attention(q2, k2, k2, torch.empty_like(q2), sms=132)
    q3 = torch.zeros((2, 8, 128), device="cuda", dtype=torch.bfloat16)
    k3 = torch.zeros((2, 4, 64, 128), device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="k, v share q's dtype or one fp8 dtype"):
        da.decode_attention(q3, k3.float(), k3, torch.empty_like(q3), sms=132)
    with pytest.raises(ValueError, match="k_scale must be a finite number > 0"):
        da.decode_attention(q3, k3, k3, torch.empty_like(q3), sms=132, k_scale=0.0)
    for bad in (0, 65, True):
        with pytest.raises(ValueError, match="splits must be an integer"):
            da.decode_attention(q3, k3, k3, torch.empty_like(q3), sms=132, splits=bad)


@pytest.mark.gpu
def test_gpu_region_triton_attention_vs_sdpa(dense_region_output):
    """A whole dense (Llama-like, GQA) region with the Triton decode attention against SDPA
    (300 tokens of history: several 64-position blocks): the same random weights (same seed),
    outputs within bfloat16 rounding."""
    _cuda_triton()
    outs = {mode: dense_region_output(kv=300, attention=mode) for mode in ("sdpa", "triton")}
    ref = outs["sdpa"]
    rel = ((outs["triton"] - ref).norm() / ref.norm()).item()
    assert rel < 2e-2, rel


@pytest.mark.gpu
@pytest.mark.parametrize("R,qh,kvh,L", [(3, 8, 1, 300), (4, 32, 8, 1000), (2, 28, 4, 70)])
@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2"])
def test_gpu_decode_attention_fp8_kv(R, qh, kvh, L, dtype, gqa_reference):
    """An fp8 KV cache with per-tensor scales against the float32 reference of the dequantised
    cache (``k_fp8 * k_scale``): the same 1e-2 bound as bf16 (the fp8 rounding is in the
    reference's input, not in the error)."""
    torch = _cuda_triton()
    g = torch.Generator(device="cuda").manual_seed(R + L)
    q = torch.randn((R, qh, 128), generator=g, device="cuda").to(torch.bfloat16)
    kf = torch.randn((R, kvh, L, 128), generator=g, device="cuda") * 3.0
    vf = torch.randn((R, kvh, L, 128), generator=g, device="cuda") * 0.5
    dt = getattr(torch, dtype)
    ks, vs = kf.abs().max().item() / 200.0, vf.abs().max().item() / 200.0
    k8, v8 = (kf / ks).to(dt), (vf / vs).to(dt)
    out = torch.empty_like(q)
    da.decode_attention(q, k8, v8, out, sms=132, k_scale=ks, v_scale=vs)
    torch.cuda.synchronize()
    ref = gqa_reference(torch, q, k8.float() * ks, v8.float() * vs)
    err = (out.float() - ref).abs().max().item()
    assert err <= 1e-2 * ref.abs().max().item(), err


@pytest.mark.gpu
@pytest.mark.parametrize("page,block_n", [(16, 64), (64, 64), (128, 128), (1, 16)])
def test_gpu_paged_decode_attention_matches_per_request_reference(page, block_n,
                                                                 gqa_reference):
    """A paged cache with shuffled pages and a different history per request (1 to 700
    positions) against the float32 reference of each request's own positions; pages smaller
    than, equal to and larger than the kernel's block."""
    torch = _cuda_triton()
    g = torch.Generator(device="cuda").manual_seed(page)
    R, qh, kvh, hd = 5, 16, 4, 128
    lens = [1, 64, 129, 700, 333]
    maxp = -(-max(lens) // page)
    P = R * maxp
    kp = torch.randn((P, kvh, page, hd), generator=g, device="cuda").to(torch.bfloat16)
    vp = torch.randn((P, kvh, page, hd), generator=g, device="cuda").to(torch.bfloat16)
    perm = torch.randperm(P, generator=torch.Generator().manual_seed(1)).to(torch.int32)
    bt = perm.view(R, maxp).cuda()
    q = torch.randn((R, qh, hd), generator=g, device="cuda").to(torch.bfloat16)
    out = torch.empty_like(q)
    da.paged_decode_attention(q, kp, vp, bt, torch.tensor(lens, dtype=torch.int32,
                                                          device="cuda"),
                              out, sms=132, max_len=max(lens), block_n=block_n)
    torch.cuda.synchronize()
    for r, n in enumerate(lens):
        pages = bt[r, :-(-n // page)].long()
        k = kp[pages].permute(1, 0, 2, 3).reshape(kvh, -1, hd)[:, :n][None]
        v = vp[pages].permute(1, 0, 2, 3).reshape(kvh, -1, hd)[:, :n][None]
        ref = gqa_reference(torch, q[r:r + 1], k, v)
        err = (out[r:r + 1].float() - ref).abs().max().item()
        assert err <= 1e-2 * ref.abs().max().item(), (r, err)


@pytest.mark.gpu
def test_gpu_paged_decode_attention_refuses_bad_tables():
    torch = _cuda_triton()
    q = torch.zeros((2, 8, 128), device="cuda", dtype=torch.bfloat16)
    kp = torch.zeros((4, 2, 16, 128), device="cuda", dtype=torch.bfloat16)
    bt = torch.zeros((2, 2), device="cuda", dtype=torch.int64)
    lens = torch.ones(2, device="cuda", dtype=torch.int32)
    with pytest.raises(ValueError, match="block_table must be int32"):
        da.paged_decode_attention(q, kp, kp, bt, lens, torch.empty_like(q), 132)
    with pytest.raises(ValueError, match="max_len must be an integer in 1..32"):
        da.paged_decode_attention(q, kp, kp, bt.to(torch.int32), lens, torch.empty_like(q), 132,
                                  max_len=33)


def _mla_reference(torch, q, cache, latent, scale):
    """float32 absorbed MLA: softmax(q . cache^T * scale) @ cache[..., :latent], per request."""
    s = torch.einsum("rhw,rlw->rhl", q.float(), cache.float()) * scale
    return torch.einsum("rhl,rlc->rhc", torch.softmax(s, dim=-1), cache[..., :latent].float())


@pytest.mark.gpu
@pytest.mark.parametrize("R,qh,L", [(3, 16, 100), (2, 16, 3000), (2, 128, 257), (4, 8, 1),
                                    (1, 40, 700)])
@pytest.mark.parametrize("splits", [None, 1, 5])
@pytest.mark.parametrize("block_n", [16, 32, 64])
def test_gpu_mla_decode_matches_float32(R, qh, L, splits, block_n):
    """DeepSeek-V3's widths (latent 512, rope 64, scale 1/sqrt(192)) against the float32
    reference: max |error| <= 1e-2 x max |reference| (the GQA kernel's bound: bf16 inputs,
    float32 softmax and accumulation, probabilities rounded to bf16 for the value product).
    Heads: 16 (TP8), 128 (TP1: eight head blocks), 8 and 40 (a partial head block); one
    position; splits forced below and above the block count."""
    torch = _cuda_triton()
    g = torch.Generator(device="cuda").manual_seed(R * 100 + L + qh)
    q = (torch.randn((R, qh, 576), generator=g, device="cuda") * 0.3).to(torch.bfloat16)
    cache = torch.randn((R, L, 576), generator=g, device="cuda").to(torch.bfloat16)
    out = torch.empty((R, qh, 512), device="cuda", dtype=torch.bfloat16)
    scale = 1.0 / math.sqrt(192)
    used = da.mla_decode_attention(q, cache, out, sms=132, scale=scale, latent=512,
                                   splits=splits, block_n=block_n)
    torch.cuda.synchronize()
    assert 1 <= used <= (splits or da.MLA_MAX_SPLITS)
    ref = _mla_reference(torch, q, cache, 512, scale)
    err = (out.float() - ref).abs().max().item()
    assert err <= 1e-2 * ref.abs().max().item(), err


@pytest.mark.gpu
def test_gpu_mla_decode_refuses_bad_shapes():
    torch = _cuda_triton()
    q = torch.zeros((2, 16, 576), device="cuda", dtype=torch.bfloat16)
    c = torch.zeros((2, 64, 576), device="cuda", dtype=torch.bfloat16)
    out = torch.empty((2, 16, 512), device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="powers of two"):
        da.mla_decode_attention(q, c, out, 132, 0.1, latent=500)
    with pytest.raises(ValueError, match="widths must match"):
        da.mla_decode_attention(q, c[..., :512], out, 132, 0.1, latent=512)
    with pytest.raises(ValueError, match="splits must be an integer"):
        da.mla_decode_attention(q, c, out, 132, 0.1, latent=512, splits=17)


@pytest.mark.gpu
def test_gpu_region_triton_mla_vs_sdpa(mla_region_output):
    """A DeepSeek-V3 MoE region with the Triton MLA decode against SDPA (same weights and
    seed): outputs within bfloat16 rounding."""
    _cuda_triton()
    outs = {mode: mla_region_output(attention=mode) for mode in ("sdpa", "triton")}
    ref = outs["sdpa"]
    rel = ((outs["triton"] - ref).norm() / ref.norm()).item()
    assert rel < 2e-2, rel
