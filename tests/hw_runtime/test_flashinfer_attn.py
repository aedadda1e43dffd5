"""hw_runtime.gpu.flashinfer_attn: the page and split arithmetic and the policy (pure, always
run), the in-place paged view (needs torch), and FlashInfer's decode over the runtime's caches
against a float32 reference (needs a CUDA GPU and flashinfer-python; skipped in CI)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

from hw_runtime.gpu import decode_attn as da
from hw_runtime.gpu import flashinfer_attn as fi


# --------------------------------------------------------------------------- pure

def test_page_size_by_hand():
    """gcd(L, 128): 1,024 -> 128, 300 -> 4, 1,000 -> 8, an odd length -> 1."""
    assert [fi.page_size(L) for L in (1024, 16384, 300, 1000, 4097, 128, 64)] == \
        [128, 128, 4, 8, 1, 128, 64]
    for bad in (0, -3, True, 2.0):
        with pytest.raises(ValueError, match="kv_len"):
            fi.page_size(bad)


def test_split_pages_by_hand():
    """32 requests x 8 KV heads at 16,384 positions on 132 SMs: 256 programs want ceil(264 /
    256) = 2 splits, so 128 pages of 128 / 2 = 64 pages a split; on a 16-SM pool one split
    (all 128 pages). 2,048 x 1 at 1,024 positions: no split, all 8 pages. 2 x 1 at 1,024 on
    132 SMs: the 8 blocks of 128 positions cap the 132 splits wanted: 1 page a split."""
    assert fi.split_pages(32, 8, 16384, 132) == 64
    assert fi.split_pages(32, 8, 16384, 16) == 128
    assert fi.split_pages(2048, 1, 1024, 132) == 8
    assert fi.split_pages(2, 1, 1024, 132) == 1
    for kw in ({"requests": 0}, {"kv_heads": -1}, {"sms": True}):
        args = dict(requests=4, kv_heads=1, kv_len=256, sms=132)
        args.update(kw)
        with pytest.raises(ValueError, match=next(iter(kw))):
            fi.split_pages(**args)


@given(st.integers(1, 4096), st.integers(1, 16), st.sampled_from([1, 64, 300, 1024, 16384]),
       st.integers(1, 264))
def test_split_pages_matches_the_triton_split(R, kvh, L, sms):
    """The pages of a split times the splits cover the pages, and the number of splits is the
    Triton kernel's ``num_kv_splits`` (at most: whole pages can merge a split away)."""
    per = L // fi.page_size(L)
    sp = fi.split_pages(R, kvh, L, sms)
    splits = math.ceil(per / sp)
    assert 1 <= sp <= per and splits * sp >= per
    assert splits <= da.num_kv_splits(R * kvh, L, sms)


@given(st.integers(1, 6), st.integers(1, 4), st.sampled_from([4, 8, 16, 24]),
       st.sampled_from([2, 4, 8]))
def test_page_indices_address_the_cache(R, kvh, L, hd):
    """An independent oracle in numpy: the view's strides (``paged_view``) applied to each
    index of ``page_indices`` land on ``cache[b, :, j*page:(j+1)*page, :]``, and the last
    element of the view stays inside the cache."""
    page = fi.page_size(L)
    per = L // page
    cache = np.arange(R * kvh * L * hd).reshape(R, kvh, L, hd)
    n_pages = (R - 1) * kvh * per + per
    it = cache.itemsize
    view = np.lib.stride_tricks.as_strided(
        cache, (n_pages, kvh, page, hd), (page * hd * it, L * hd * it, hd * it, it))
    assert view[-1].max() <= cache.max()
    idx = fi.page_indices(R, kvh, L, page)
    assert len(idx) == R * per
    for b in range(R):
        for j in range(per):
            np.testing.assert_array_equal(view[idx[b * per + j]],
                                          cache[b, :, j * page:(j + 1) * page, :])


def test_resolve_flashinfer(monkeypatch):
    """``--attention flashinfer`` is refused in one line for MLA, without CUDA and without the
    package; taken as is where both exist; never what ``auto`` picks without CUDA."""
    assert "flashinfer" in da.ATTENTION
    with pytest.raises(ValueError, match="--attention flashinfer serves GQA/MHA"):
        da.resolve("flashinfer", True, mla=True)
    with pytest.raises(ValueError, match="--attention flashinfer needs a CUDA GPU"):
        da.resolve("flashinfer", False)
    monkeypatch.setattr(fi, "available", lambda: False)
    with pytest.raises(ValueError, match="needs the flashinfer-python package"):
        da.resolve("flashinfer", True)
    with pytest.raises(ValueError, match="needs the flashinfer-python package"):
        fi.FlashInferDecode(None, 2, 8, 1, 128, 256, None, None)
    monkeypatch.setattr(fi, "available", lambda: True)     # installed, but does not import
    monkeypatch.setitem(__import__("sys").modules, "flashinfer", None)
    with pytest.raises(ValueError, match="installed but does not import"):
        da.resolve("flashinfer", True)
    monkeypatch.setattr(fi, "check_importable", lambda: None)
    assert da.resolve("flashinfer", True) == "flashinfer"
    assert da.resolve("auto", False) == "sdpa"
    with pytest.raises(ValueError, match="is_cuda must be True or False"):
        da.resolve("flashinfer", "no")


def test_page_indices_refuse_bad_input():
    """Non-positive sizes and a length that is not whole pages are refused, naming the
    argument (never an empty or duplicated index list)."""
    for args, word in (((0, 1, 128, 128), "requests"), ((2, 0, 128, 128), "kv_heads"),
                       ((2, 1, 1000, 128), "multiple of page"), ((2, 1, 128, 0), "page"),
                       ((2, 1, 128, True), "page")):
        with pytest.raises(ValueError, match=word):
            fi.page_indices(*args)
    with pytest.raises(ValueError, match="split_pages: kv_len"):
        fi.split_pages(2, 1, 0, 132)


def test_executor_issues_each_launch_with_its_pool_and_lane():
    """Both pool-sized attentions and FlashInfer's per-lane state are declared; the executor's
    stream backend issues every launch with the SMs of its stream's pool (None: a stream
    outside a partition, the whole GPU) and the stream's index as its lane, for a region kernel
    (its kernel callable's ``sms``, ``lane``) and a head kernel (``TorchHead.launch``'s
    ``lane``). Fakes stand in for torch, the streams and the workload (pure Python)."""
    import contextlib
    from types import SimpleNamespace as NS

    from hw_runtime.gpu.executor import _TorchBackend
    from hw_runtime.plan import HEAD_RUN, PlanTask

    B = da.ATTENTION_BACKENDS
    assert {n for n, b in B.items() if b.pool_sized} == {"triton", "flashinfer"}
    assert tuple(n for n, b in B.items() if b.per_lane) == ("flashinfer",)
    calls = []

    def kernel_fn(i):
        return lambda mu, l, sms=None, lane=0: calls.append(("region", i, mu, l, sms, lane))

    wl = NS(kernel_fn=kernel_fn, graph=NS(kernels=["k0", "k1"]))
    head = NS(kernels=[NS(name="sample")],
              launch=lambda name, lane=0: calls.append(("head", name, lane)))
    torch = NS(cuda=NS(stream=lambda s: contextlib.nullcontext()))
    streams = [NS(cuda_stream=101), NS(cuda_stream=202), NS(cuda_stream=303)]
    be = _TorchBackend(torch, streams, [wl], pool_of={101: 64, 202: 48}, offsets=(2,),
                       head=head)

    def task(run, mu=1, region=0):
        return PlanTask(index=0, region=region, microbatch=mu, segment=0, stage=0, kernels=(1,),
                        data_preds=(), stage_pred=-1, waits=(), record=False, run=run)
    be.launch(1, task(0, mu=1, region=3), 1)
    be.launch(0, task(0, mu=0, region=0), 0)
    be.launch(2, task(0), 1)
    be.launch(1, task(HEAD_RUN), 0)
    be.close()
    assert calls == [("region", 1, 1, 5, 48, 1), ("region", 0, 0, 2, 64, 0),
                     ("region", 1, 1, 2, None, 2), ("head", "sample", 1)]


# --------------------------------------------------------------------------- torch

def test_paged_view_is_the_cache_in_place():
    """With torch (CPU): every indexed page of the view is the cache's slice, the view shares
    the cache's memory, and layouts the view cannot express are refused."""
    torch = pytest.importorskip("torch")
    R, kvh, L, hd = 3, 2, 48, 8
    cache = torch.arange(R * kvh * L * hd, dtype=torch.float32).reshape(R, kvh, L, hd)
    page = fi.page_size(L)
    view = fi.paged_view(torch, cache, page)
    assert view.data_ptr() == cache.data_ptr()
    per = L // page
    for n, i in enumerate(fi.page_indices(R, kvh, L, page)):
        b, j = divmod(n, per)
        assert torch.equal(view[i], cache[b, :, j * page:(j + 1) * page, :])
    with pytest.raises(ValueError, match="last three dims contiguous"):
        fi.paged_view(torch, cache.transpose(1, 2), page)
    with pytest.raises(ValueError, match="requests must be contiguous"):
        fi.paged_view(torch, cache[::2], page)
    with pytest.raises(ValueError, match="page"):
        fi.paged_view(torch, cache, 0)
    for args in ((3, 2, 48, 16), (1, 1, 7, 1), (5, 3, 256, 128)):
        assert fi.page_index_tensor(torch, *args).tolist() == fi.page_indices(*args)
        assert fi.page_index_tensor(torch, *args).dtype == torch.int32


def test_launch_passes_the_pool_and_lane_to_the_attention():
    """``TorchWorkload.launch(..., sms, lane)`` hands the pool's SMs (None: the whole GPU,
    ``device_sms``) and the issuing lane to the decode attention's ``attend`` (a recording
    backend stands in for a pool-sized, per-lane one); the workload keeps no pool or lane
    between launches; bad values are refused in one line. And a workload whose attention is
    not one the builders run is refused when its kernels are built."""
    pytest.importorskip("torch")
    from subgpu_jax.model.graph import Deployment, build_graph
    from subgpu_jax.model.models import ModelArch
    from hw_runtime.gpu.kernels import KernelContext, kernel_builder
    from hw_runtime.gpu.workload import TorchWorkload

    arch = ModelArch(name="tiny", family="llama", num_layers=2, hidden=128, num_heads=4,
                     num_kv_heads=2, head_dim=32, vocab=100, intermediate=256)
    dep = Deployment(num_gpus=1, attn_tp=1, attn_dp=1, moe_ep=1, global_batch=4,
                     input_len=16, kv_history=16)
    wl = TorchWorkload(build_graph(arch, dep, 1), device="cpu")
    assert not hasattr(wl, "pool_sms") and not hasattr(wl, "lane")
    assert not hasattr(wl, "issuing") and wl.device_sms == 1
    i = next(i for i, k in enumerate(wl.graph.kernels) if k.op == "attn")
    seen = []

    class Recording(da.AttentionBackend):
        name, supports_gqa, pool_sized, per_lane = "recording", True, True, True

        @classmethod
        def gqa(cls, c):
            return lambda q, k, v, out, sink, sms, lane: seen.append((sms, lane))

    import unittest.mock as um
    with um.patch.dict(da.ATTENTION_BACKENDS, {"recording": Recording}):
        wl.attention = "recording"
        fn = kernel_builder(wl.graph.kernels[i], wl.arch)(KernelContext(wl, i, wl.graph.kernels[i]))
        fn(0, 0, 32, 1)
        fn(0, 0)
        wl.attention = "sdpa"
    assert seen == [(32, 1), (1, 0)]
    for kw, word in (({"sms": 0}, "sms"), ({"lane": -1}, "lane"), ({"lane": True}, "lane")):
        with pytest.raises(ValueError, match=word):
            wl.launch(i, 0, 0, **kw)
        with pytest.raises(ValueError, match=word):
            wl.launch_region(0, 0, **kw)
    wl.launch(i, 0, 0, sms=32, lane=1)        # SDPA ignores both
    wl.attention = "mykernel"
    with pytest.raises(ValueError, match="decode attention"):
        kernel_builder(wl.graph.kernels[i], wl.arch)(KernelContext(wl, i, wl.graph.kernels[i]))


# --------------------------------------------------------------------------- GPU

def _cuda_flashinfer():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or not fi.available():
        pytest.skip("needs a CUDA GPU and flashinfer-python")
    return torch


@pytest.mark.gpu
@pytest.mark.parametrize("R,qh,kvh,L,hd", [(3, 8, 1, 1024, 128), (5, 32, 8, 1000, 128),
                                           (2, 64, 8, 257, 64), (7, 4, 4, 64, 128),
                                           (1, 16, 2, 5000, 128), (4, 8, 1, 300, 64)])
@pytest.mark.parametrize("sms", [16, 132])
@pytest.mark.parametrize("pool_split", [True, False])
def test_gpu_flashinfer_matches_float32(R, qh, kvh, L, hd, sms, pool_split, gqa_reference):
    """Against the float32 reference, on caches sliced out of a larger batch (as the runtime's
    microbatches are): max |error| <= 1e-2 x max |reference|, the bound of the Triton kernel's
    test. Shapes: groups of 1, 4 and 8, odd lengths (pages of 1), head dims 64 and 128, pools
    of 16 and 132 SMs, and FlashInfer's own split."""
    torch = _cuda_flashinfer()
    g = torch.Generator(device="cuda").manual_seed(R * 1000 + L)
    q = torch.randn((R, qh, hd), generator=g, device="cuda").to(torch.bfloat16)
    big_k = torch.randn((R + 2, kvh, L, hd), generator=g, device="cuda").to(torch.bfloat16)
    big_v = torch.randn((R + 2, kvh, L, hd), generator=g, device="cuda").to(torch.bfloat16)
    k, v = big_k[1:R + 1], big_v[1:R + 1]
    out = torch.empty_like(q)
    dec = fi.FlashInferDecode(torch, R, qh, kvh, hd, L, torch.bfloat16, q.device,
                              pool_split=pool_split)
    dec(q, k, v, out, sms)
    torch.cuda.synchronize()
    ref = gqa_reference(torch, q, k, v)
    err = (out.float() - ref).abs().max().item()
    assert err <= 1e-2 * ref.abs().max().item(), err


@pytest.mark.gpu
def test_gpu_flashinfer_in_a_cuda_graph(graph_replay_is_eager):
    """Planned by one eager call, captured on a side stream, replayed on new inputs copied
    into the captured tensors: the replay equals an eager call on those inputs."""
    torch = _cuda_flashinfer()
    dec = fi.FlashInferDecode(torch, 4, 8, 2, 128, 384, torch.bfloat16, torch.device("cuda"))
    graph_replay_is_eager(torch, lambda q, k, v, out: dec(q, k, v, out, 64), L=384)


@pytest.mark.gpu
def test_gpu_region_flashinfer_vs_sdpa(region_run):
    """A whole dense GQA region (head dim 64, 300 tokens of history: pages of 4) with
    FlashInfer's decode against SDPA on the same weights and caches: within bf16 rounding."""
    _cuda_flashinfer()
    from subgpu_jax.model.models import ModelArch
    arch = ModelArch(name="tiny-llama64", family="llama", num_layers=2, hidden=512,
                     num_heads=8, num_kv_heads=2, head_dim=64, vocab=500, intermediate=512)
    outs = {m: region_run(arch, kv=300, attention=m)[0] for m in ("sdpa", "flashinfer")}
    ref = outs["sdpa"]
    rel = ((outs["flashinfer"] - ref).norm() / ref.norm()).item()
    assert rel < 2e-2, rel


@pytest.mark.gpu
def test_gpu_flashinfer_lanes_do_not_share_partials(gqa_reference):
    """Two streams call one decoder at the same time on different inputs, with the KV split
    (2 requests x 1 KV head, 8,192 positions: 64 splits on 132 SMs) writing partials to the
    workspace: each lane has its own, so both outputs match the float32 reference."""
    torch = _cuda_flashinfer()
    g = torch.Generator(device="cuda").manual_seed(11)
    R, qh, kvh, L, hd = 2, 8, 1, 8192, 128
    dec = fi.FlashInferDecode(torch, R, qh, kvh, hd, L, torch.bfloat16, torch.device("cuda"))
    ins = [[torch.randn(s, generator=g, device="cuda").to(torch.bfloat16)
            for s in ((R, qh, hd), (R, kvh, L, hd), (R, kvh, L, hd))] for _ in range(2)]
    outs = [torch.empty((R, qh, hd), device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    for lane in (0, 1):                                   # plan each lane's wrapper eagerly
        with torch.cuda.stream(streams[lane]):
            dec(*ins[lane], outs[lane], 132, lane=lane)
    torch.cuda.synchronize()
    for _ in range(20):
        for lane in (0, 1):
            with torch.cuda.stream(streams[lane]):
                dec(*ins[lane], outs[lane], 132, lane=lane)
    torch.cuda.synchronize()
    for lane in (0, 1):
        ref = gqa_reference(torch, *ins[lane])
        err = (outs[lane].float() - ref).abs().max().item()
        assert err <= 1e-2 * ref.abs().max().item(), (lane, err)
    with pytest.raises(ValueError, match="as planned"):
        dec(ins[0][0], ins[0][1][:, :, :128], ins[0][2][:, :, :128], outs[0], 132)
