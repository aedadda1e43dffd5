"""hw_runtime.gpu.moe_gemm: the tile choice, the block table and the policy (pure, always run),
and the Triton grouped expert GEMMs against float32 references and against the ``bmm`` path
in whole MoE regions (needs CUDA and Triton; skipped in CI)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, strategies as st

from hw_runtime.gpu import fused
from hw_runtime.gpu import moe_gemm as mg


# --------------------------------------------------------------------------- pure

def test_moe_config_by_hand():
    """bm: the next power of two of the slots in 16..64; the rest fixed (bn 128, bk 64, 4 warps,
    4 stages: the measured best, ``moe_config``'s docstring)."""
    assert mg.moe_config(64) == mg.MoeConfig(64, 128, 64, 4, 4)
    assert mg.moe_config(20).bm == 32 and mg.moe_config(3).bm == 16
    assert mg.moe_config(300).bm == 64 and mg.moe_config(1).bm == 16


@given(st.integers(1, 4096))
def test_moe_config_invariants(rows):
    """bm a power of two in 16..64, at least the rows up to 64 and never twice what they need."""
    c = mg.moe_config(rows)
    assert c.bm in (16, 32, 64) and c.bm >= min(rows, 64)
    assert c.bm == 16 or c.bm // 2 < rows


@pytest.mark.parametrize("bad", [0, True, 1.5, -3])
def test_moe_config_refuses_bad_input(bad):
    with pytest.raises(ValueError, match="rows must be an integer"):
        mg.moe_config(bad)


def test_block_table_by_hand():
    """counts [3, 0, 5], seg 5, bm 4: expert 0 one block of 3 at row 0; expert 1 none; expert
    2 two blocks at rows 10 (4 valid) and 14 (1 valid)."""
    assert mg.block_table([3, 0, 5], 5, 4) == ([0, 2, 2], [0, 10, 14], [3, 4, 1])
    with pytest.raises(ValueError, match="counts must be integers in 0..seg=5"):
        mg.block_table([6], 5, 4)


@given(st.lists(st.integers(0, 300), min_size=1, max_size=40), st.sampled_from([16, 32, 64]))
def test_block_table_covers_every_slot_once(counts, bm):
    """Every routed slot (e, i < counts[e]) is in exactly one block, of its own expert, and no
    block holds an empty slot or more than bm rows (an independent set-based oracle)."""
    seg = max(counts + [1])
    be, br, bv = mg.block_table(counts, seg, bm)
    covered = [(e, r0 + i - e * seg) for e, r0, n in zip(be, br, bv) for i in range(n)]
    assert sorted(covered) == sorted((e, i) for e, c in enumerate(counts) for i in range(c))
    assert all(1 <= n <= bm for n in bv)
    assert len(be) == sum(math.ceil(c / bm) for c in counts)


@given(st.integers(1, 10_000), st.integers(1, 256))
def test_balanced_counts(a, e):
    c = mg.balanced_counts(a, e)
    assert len(c) == e and sum(c) == a and max(c) - min(c) <= 1 and c == sorted(c, reverse=True)


def test_static_routing_by_hand():
    """5 assignments over 2 experts (3 + 2) with 3 slot rows each and 4 tokens: the slots
    read tokens 0, 1, 2 | 3, 0 (cyclic), the assignments sit in rows 0, 1, 2, 3, 4."""
    assert mg.static_routing(5, 2, 3, 4) == ([3, 2], [0, 1, 2, 3, 0, 0], [0, 1, 2, 3, 4])
    with pytest.raises(ValueError, match="seg must be >= 3"):
        mg.static_routing(5, 2, 2, 4)


@given(st.integers(1, 3000), st.integers(1, 64), st.integers(1, 500))
def test_static_routing_invariants(a, e, tokens):
    """Every assignment has its own slot row, inside its expert's segment, and every slot row
    in use reads a valid token."""
    seg = -(-a // e)
    counts, src, slot = mg.static_routing(a, e, seg, tokens)
    assert len(slot) == a == len(set(slot)) and len(src) == e * seg
    assert all(0 <= src[r] < tokens for r in slot)
    used = sorted(slot)
    assert used == [i * seg + j for i, c in enumerate(counts) for j in range(c)]


def test_resolve_policies():
    assert mg.resolve("bmm", True) == "bmm"
    assert mg.resolve("auto", False) == "bmm"                # no GPU: never Triton
    with pytest.raises(ValueError, match="needs Triton on a CUDA GPU"):
        mg.resolve("triton", False)
    with pytest.raises(ValueError, match="--moe-gemm must be one of auto, triton, bmm"):
        mg.resolve("grouped", True)
    if fused.triton_available():
        assert mg.resolve("auto", True) == ("triton" if mg.AUTO_TRITON else "bmm")
        assert mg.resolve("auto", True, rows=mg.AUTO_MAX_ROWS) == mg.resolve("auto", True)
    # above the measured crossover auto keeps cuBLAS, wherever it runs
    assert mg.resolve("auto", True, rows=mg.AUTO_MAX_ROWS + 1) == "bmm"


def test_run_calibrate_and_tune_offer_the_choice(runtime_options):
    """`subgpu run`, `calibrate` and `tune` take --moe-gemm with the policies, default auto."""
    for acts in runtime_options.values():
        assert tuple(acts["moe_gemm"].choices) == mg.MOE_GEMM
        assert acts["moe_gemm"].default == "auto"


# --------------------------------------------------------------------------- GPU

def _cuda_triton():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or not fused.triton_available():
        pytest.skip("needs a CUDA GPU and Triton")
    return torch


def _routing(torch, counts, seg, T, g):
    src = torch.randint(0, T, (len(counts) * seg,), generator=g, device="cuda")
    return mg.routed_tokens(src, counts, seg), src


def _ref_up(torch, x, src, counts, seg, w, bias, oss, inter):
    """float32 gate/up + activation per routed slot (rows of empty slots are 0); gate/up
    columns interleaved (``inter``) or as halves."""
    E = len(counts)
    F = w.shape[-1] // 2
    out = torch.zeros((E * seg, F), device="cuda")
    for e, c in enumerate(counts):
        if not c:
            continue
        rows = x[src[e * seg:e * seg + c]].float()
        gu = rows @ w[e].float()
        if bias is not None:
            gu = gu + bias[e].float()
        gate, up = (gu[:, 0::2], gu[:, 1::2]) if inter else (gu[:, :F], gu[:, F:])
        if oss:
            g_, u = gate.clamp(max=7.0), up.clamp(-7.0, 7.0)
            out[e * seg:e * seg + c] = (u + 1.0) * g_ * torch.sigmoid(1.702 * g_)
        else:
            out[e * seg:e * seg + c] = torch.nn.functional.silu(gate) * up
    return out


def _q8(torch, x, a_scale):
    """``x`` as the kernel sees it with a static activation scale: quantised to e4m3 and back
    (unchanged without one)."""
    if a_scale is None:
        return x
    return (x.float() / a_scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn).float() * a_scale


def _valid(counts, seg):
    return [e * seg + i for e, c in enumerate(counts) for i in range(c)]


@pytest.mark.gpu
@pytest.mark.parametrize("counts,H,F", [([64] * 16, 256, 96), ([3, 0, 17, 1], 128, 64),
                                        ([130, 1, 64], 160, 80), ([1], 64, 32),
                                        ([40, 7, 0, 0, 33, 12, 5, 60], 512, 256)])
@pytest.mark.parametrize("oss,bias,inter", [(False, False, False), (True, True, True),
                                            (True, True, False)])
@pytest.mark.parametrize("fp8,afp8", [(False, False), (True, False), (True, True)])
def test_gpu_grouped_gemms_match_float32(counts, H, F, oss, bias, inter, fp8, afp8):
    """Gate/up + activation (SwiGLU; GPT-OSS's clamped SwiGLU with its interleaved columns and
    with the runtime's halves), then down, over uneven routed counts (empty experts, one slot,
    several blocks per expert, K and N not multiples of the tiles) against float32 references
    of the same weights (for fp8: of the dequantised weights ``w_fp8 * scale``): max |error|
    <= 2e-2 x max |reference| (bf16 inputs; the one bf16 rounding of the activation before the
    down projection is the largest term). With ``afp8`` (a static activation scale: fp8 x fp8
    MMAs) the references take the activations quantised the same way (``_q8``), so only the
    accumulation is compared. Empty slots are never written (a NaN sentinel stays)."""
    torch = _cuda_triton()
    g = torch.Generator(device="cuda").manual_seed(len(counts) * 7 + H)
    E, seg, T = len(counts), max(counts), 50
    x = torch.randn((T, H), generator=g, device="cuda").to(torch.bfloat16)
    wu = (torch.randn((E, H, 2 * F), generator=g, device="cuda") / math.sqrt(H)
          ).to(torch.bfloat16)
    wd = (torch.randn((E, F, H), generator=g, device="cuda") / math.sqrt(F)).to(torch.bfloat16)
    bu = (torch.randn((E, 1, 2 * F), generator=g, device="cuda") * 0.1).to(torch.bfloat16) \
        if bias else None
    bd = (torch.randn((E, 1, H), generator=g, device="cuda") * 0.1).to(torch.bfloat16) \
        if bias else None
    su = sd = None
    if fp8:
        wu, su = mg.quantize_fp8(wu)
        wd, sd = mg.quantize_fp8(wd)
    deq_u = wu.float() * su if fp8 else wu
    deq_d = wd.float() * sd if fp8 else wd
    rt, src = _routing(torch, counts, seg, T, g)
    act = torch.full((E * seg, F), float("nan"), device="cuda", dtype=torch.bfloat16)
    y = torch.full((E * seg, H), float("nan"), device="cuda", dtype=torch.bfloat16)
    asc_u = x.float().abs().max().item() / 400.0 if afp8 else None
    mg.expert_up_act(x, rt, wu, act, bias=bu, scale=su, oss=oss, interleaved=inter,
                     a_scale=asc_u)
    torch.cuda.synchronize()
    ok0 = _valid(counts, seg)
    asc_d = act[ok0].float().abs().max().item() / 400.0 if afp8 else None
    mg.expert_down(act, rt, wd, y, bias=bd, scale=sd, a_scale=asc_d)
    torch.cuda.synchronize()
    ok = _valid(counts, seg)
    ref_a = _ref_up(torch, _q8(torch, x, asc_u), src.long(), counts, seg, deq_u, bu, oss, inter)
    err = (act[ok].float() - ref_a[ok]).abs().max().item()
    assert err <= 2e-2 * ref_a[ok].abs().max().item(), ("up", err)
    ref_y = torch.zeros((E * seg, H), device="cuda")
    for e, c in enumerate(counts):
        if c:
            r = _q8(torch, act[e * seg:e * seg + c], asc_d).float() @ deq_d[e].float()
            ref_y[e * seg:e * seg + c] = r + (bd[e].float() if bias else 0.0)
    err = (y[ok].float() - ref_y[ok]).abs().max().item()
    assert err <= 2e-2 * ref_y[ok].abs().max().item(), ("down", err)
    empty = sorted(set(range(E * seg)) - set(ok))
    if empty:
        assert torch.isnan(act[empty].float()).all() and torch.isnan(y[empty].float()).all()


@pytest.mark.gpu
def test_gpu_quantize_fp8_round_trip():
    """``w_fp8 * scale`` within e4m3's relative step (2^-3 = 12.5% half-ulp bound 6.25%) of
    every element's column maximum-scaled value; the column maximum maps to 448."""
    torch = _cuda_triton()
    w = torch.randn((3, 64, 40), device="cuda").to(torch.bfloat16)
    q, s = mg.quantize_fp8(w)
    assert q.dtype == torch.float8_e4m3fn and tuple(s.shape) == (3, 1, 40)
    back = q.float() * s
    assert ((back - w.float()).abs() <= 0.0625 * w.float().abs() + s * 2 ** -9).all()
    assert torch.allclose(q.float().abs().amax(dim=1), torch.full((3, 40), 448.0,
                                                                  device="cuda"))


@pytest.mark.gpu
def test_gpu_grouped_gemm_in_a_cuda_graph():
    """Captured after one eager call and replayed on new inputs: equals an eager call."""
    torch = _cuda_triton()
    g = torch.Generator(device="cuda").manual_seed(3)
    counts, seg, T, H, F = [20, 5, 33], 33, 40, 128, 64
    x = torch.randn((T, H), generator=g, device="cuda").to(torch.bfloat16)
    w = torch.randn((3, H, 2 * F), generator=g, device="cuda").to(torch.bfloat16) / 11
    rt, _ = _routing(torch, counts, seg, T, g)
    act = torch.zeros((3 * seg, F), device="cuda", dtype=torch.bfloat16)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        mg.expert_up_act(x, rt, w, act)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=s):
        mg.expert_up_act(x, rt, w, act)
    x.copy_(torch.randn((T, H), generator=g, device="cuda").to(torch.bfloat16))
    graph.replay()
    torch.cuda.synchronize()
    eager = torch.zeros_like(act)
    mg.expert_up_act(x, rt, w, eager)
    torch.cuda.synchronize()
    assert torch.equal(act, eager)


@pytest.mark.gpu
def test_gpu_grouped_gemm_refuses_bad_input():
    torch = _cuda_triton()
    x = torch.zeros((8, 64), device="cuda", dtype=torch.bfloat16)
    rt = mg.routed_tokens(torch.zeros(8, device="cuda", dtype=torch.int64), [4, 4], 4)
    act = torch.zeros((8, 32), device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="w must be"):
        mg.expert_up_act(x, rt, torch.zeros((2, 32, 64), device="cuda",
                                            dtype=torch.bfloat16), act)
    w8 = torch.zeros((2, 64, 64), device="cuda").to(torch.float8_e4m3fn)
    with pytest.raises(ValueError, match="fp8 weights need a float32 scale"):
        mg.expert_up_act(x, rt, w8, act)
    w16 = torch.zeros((2, 64, 64), device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="a_scale needs fp8 weights"):
        mg.expert_up_act(x, rt, w16, act, a_scale=1.0)
    with pytest.raises(ValueError, match="src must have 2 x 4"):
        mg.routed_tokens(torch.zeros(5, device="cuda"), [4, 4], 4)


def _moe_archs():
    from subgpu_jax.model.models import ModelArch
    return {
        # 16 requests x top-2 = 32 assignments over 4 experts: 8 each, no padding, so the bmm
        # path's cyclic gather routes exactly the tokens the grouped path does
        "mixtral": ModelArch(name="tiny-mixtral", family="mixtral", num_layers=2, hidden=256,
                             num_heads=4, num_kv_heads=2, head_dim=32, vocab=300,
                             num_experts=4, top_k=2, moe_intermediate=128),
        "gpt_oss": ModelArch(name="tiny-oss", family="gpt_oss", num_layers=2, hidden=128,
                             num_heads=4, num_kv_heads=2, head_dim=32, vocab=300,
                             num_experts=4, top_k=2, moe_intermediate=64,
                             layer_types=("sliding", "full"), sliding_window=16,
                             attn_bias=True, mlp_bias=True, attention_sinks=True),
    }


@pytest.mark.gpu
@pytest.mark.parametrize("family", ["mixtral", "gpt_oss"])
def test_gpu_region_grouped_vs_bmm(family, region_run):
    """A whole MoE region with the grouped Triton experts against the bmm path (same weights,
    same routed tokens: A is a multiple of the experts hit): outputs within bf16 rounding."""
    _cuda_triton()
    outs, wls = {}, {}
    for mode in ("bmm", "triton"):
        outs[mode], wls[mode] = region_run(_moe_archs()[family], kv=64, moe_gemm=mode)
    s = wls["triton"].shapes
    assert s.A % s.n_hit == 0 and s.A == s.n_hit * s.cap
    ref = outs["bmm"]
    rel = ((outs["triton"] - ref).norm() / ref.norm()).item()
    assert rel < 2e-2, rel


def test_moe_gemm_on_a_dense_model_is_refused(capsys):
    """An explicit --moe-gemm on a dense model is one line naming the flag, exit 2, before any
    GPU is touched (auto is fine); tune's spec refuses it too."""
    import dataclasses

    from subgpu_jax.app.cli import main

    flags = ["--model", "llama-3.1-8b", "--gpus", "1", "--batch", "256", "--kv-history", "2048",
             "--hardware", "H200"]   # given: no GPU here to read the default from
    assert main(["run", *flags, "--moe-gemm", "triton"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "moe-gemm" in err[0] and "dense model" in err[0]
    from hw_runtime.tune.spec import TuneSpec
    from subgpu_jax.model.models import resolve_model
    spec = TuneSpec(arch=resolve_model("llama-3.1-8b"), hardware="H200", num_gpus=1, attn_tp=1,
                    attn_dp=1, moe_ep=1, kv_history=2048, input_len=2048, batches=(256,))
    with pytest.raises(ValueError, match="--moe-gemm: llama-3.1-8b is a dense model"):
        dataclasses.replace(spec, moe_gemm="bmm")
    with pytest.raises(ValueError, match="--moe-gemm must be one of auto, triton, bmm"):
        dataclasses.replace(spec, moe_gemm="TRITON")
    assert "moe_gemm" not in spec.meta()        # dense: the fingerprint never holds it
    moe = dataclasses.replace(spec, arch=resolve_model("qwen3-30b-a3b").all_bf16())
    assert moe.meta()["moe_gemm"] == "auto"     # MoE: always (bmm before the option existed)
