"""Kernel choices of the runtime measured on the GPU (issue 23, items 2-3): the grouped Triton
expert GEMMs against the ``bmm`` path on the expert shapes of the verdict protocol's MoE
workloads (bf16 and fp8 weights, a small tile sweep), the Triton MLA decode against SDPA on
DeepSeek-V3 TP8 shapes, and the Triton GQA split-KV decode's launch parameters and FlashInfer's
tensor-core decode (``hw_runtime.gpu.flashinfer_attn``, where flashinfer-python is installed:
carried to the device as a wheel in .whl/) against SDPA, on the whole GPU (``gqa``) and alone on
one green-context pool (``gqa_pool``).

    python experiments/kernel_choice_h200.py --out DIR [--parts moe mla gqa gqa_pool] [--sweep] \
        [--time-limit S]

Without ``--sweep`` each Triton kernel runs with the runtime's tiles only (``moe_config``, the
decode kernels' defaults); ``--sweep`` adds the tile/launch sweep the defaults were chosen
from (``experiments/results/kernel_choice/sweep_h200.json``). GPT-OSS's grouped kernel reads
the gate/up halves the runtime de-interleaves at load time (``moe_gemm.deinterleave_gate_up``);
the ``bmm`` path its interleaved checkpoint layout.

Writes ``DIR/kernel_choice.json`` after every row (a cut run keeps what finished). Every time
is the median replay of a CUDA graph of ``LAUNCHES`` launches (host launch time excluded,
``hw_runtime.gpu.corun.time_alone``) divided by the launches; inputs alternate between two
copies of the weights (expert GEMMs) so consecutive launches do not hit in L2. Fractions are
of the H200's measured copy bandwidth, 4,245 GB/s (``tests/data/h200_copy_bandwidth_vs_pool.csv``),
over the bytes each kernel must move (weights + activations in and out; for attention the KV
cache). Each Triton result is checked against the PyTorch path's output (``max_rel``).
Needs a CUDA GPU with Triton: without one, one line and exit 2.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

COPY_GBPS = 4245.0          # H200 copy bandwidth (read + write), tests/data/h200_copy_bandwidth_vs_pool.csv
LAUNCHES = 10
REPS = 7
MOE_WORKLOADS = ("qwen3moe_tp8_g1024_kv2k", "qwen3moe_tp8_g512_kv8k", "mixtral_tp8_g1024_kv4k",
                 "mixtral_tp8_g2048_kv1k", "gptoss20b_tp8_g1024_kv8k", "gptoss120b_ref_g2048")
#: DeepSeek-V3 at TP8: 128 / 8 = 16 local heads, latent 512, rope 64 (its public config.json).
MLA_SHAPES = ((64, 1024), (64, 4096), (256, 1024), (256, 4096))
#: (label, requests, q heads, KV heads, KV length) of three verdict workloads' attention.
GQA_SHAPES = (("llama70b_tp8_g2048_kv1k", 2048, 8, 1, 1024),
              ("llama8b_1gpu_g256_kv2k", 256, 32, 8, 2048),
              ("qwen3_8b_1gpu_g32_kv16k", 32, 32, 8, 16384))


def _timer(torch):
    from hw_runtime.gpu.corun import capture_graph, time_alone

    stream = torch.cuda.Stream()

    def t(fn) -> float:
        g = capture_graph(torch, stream, fn, LAUNCHES)
        us = time_alone(torch, g, stream, REPS) / LAUNCHES
        del g
        return us
    return t


def _rel(torch, a, b) -> float:
    a, b = a.float(), b.float()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def moe_rows(torch, timer, deadline, emit, sweep: bool) -> None:
    """Per MoE workload and microbatch count: the bmm path (gather, bmm, activation, bmm) and
    the grouped Triton kernels (the rule's tiles, a sweep, fp8 weights with the rule's)."""
    from hw_runtime.commands.run import prepare_run
    from hw_runtime.gpu import fused
    from hw_runtime.gpu import moe_gemm as mg
    from hw_runtime.gpu.workload import workload_shapes
    from hw_verdicts_h200 import run_request

    for name in MOE_WORKLOADS:
        wl = prepare_run(run_request(name, [])).wl
        for m in (1, 2):
            if time.time() > deadline:
                return
            s = workload_shapes(wl.graph(m))
            oss = wl.arch.family == "gpt_oss"
            E, H, F, cap, Tr = s.n_hit, s.H, s.F, s.cap, s.Tr
            dev = "cuda"
            x = torch.randn((Tr, H), device=dev).to(torch.bfloat16)
            wu = [(torch.randn((E, H, 2 * F), device=dev) / math.sqrt(H)).to(torch.bfloat16)
                  for _ in range(2)]
            wd = [(torch.randn((E, F, H), device=dev) / math.sqrt(F)).to(torch.bfloat16)
                  for _ in range(2)]
            bu = (torch.randn((E, 1, 2 * F), device=dev) * .02).to(torch.bfloat16) if oss else None
            bd = (torch.randn((E, 1, H), device=dev) * .02).to(torch.bfloat16) if oss else None
            rows = E * cap
            x_exp = torch.empty((E, cap, H), device=dev, dtype=torch.bfloat16)
            gu = torch.empty((E, cap, 2 * F), device=dev, dtype=torch.bfloat16)
            act_b = torch.empty((E, cap, F), device=dev, dtype=torch.bfloat16)
            y_b = torch.empty((E, cap, H), device=dev, dtype=torch.bfloat16)
            idx = (torch.arange(rows, device=dev) % Tr)

            def bmm_up(r):
                torch.index_select(x, 0, idx, out=x_exp.view(-1, H))
                if oss:
                    torch.baddbmm(bu, x_exp, wu[r % 2], out=gu)
                    fused.swiglu_oss_(act_b.view(rows, -1), gu.view(rows, -1), 1.702, 7.0)
                else:
                    torch.bmm(x_exp, wu[r % 2], out=gu)
                    fused.silu_mul_(act_b.view(rows, -1), gu.view(rows, -1), F)

            def bmm_down(r):
                if oss:
                    torch.baddbmm(bd, act_b, wd[r % 2], out=y_b)
                else:
                    torch.bmm(act_b, wd[r % 2], out=y_b)

            counts, src, slot = mg.static_routing(s.A, E, cap, Tr)
            rt = mg.routed_tokens(torch.tensor(src, device=dev), counts, cap)
            wu_t, bu_t = wu, bu
            if oss:   # the grouped kernel's halves layout, as the runtime loads it
                wu_t = []
                for w in wu:
                    dct = {"experts_up.w": w, "experts_up.b": bu}
                    mg.deinterleave_gate_up(dct)
                    wu_t.append(dct["experts_up.w"])
                bu_t = dct["experts_up.b"]
            act = torch.zeros((rows, F), device=dev, dtype=torch.bfloat16)
            y = torch.zeros((rows, H), device=dev, dtype=torch.bfloat16)
            w_bytes_up, w_bytes_dn = E * H * 2 * F * 2, E * F * H * 2
            io_up, io_dn = s.A * (H + F) * 2, s.A * (F + H) * 2
            base = {"workload": name, "microbatches": m, "experts_hit": E, "slots": cap,
                    "assignments": s.A, "tokens": Tr, "H": H, "F": F, "oss": oss,
                    "bytes_up": w_bytes_up + io_up, "bytes_down": w_bytes_dn + io_dn}
            t_up, t_dn = timer(bmm_up), timer(bmm_down)
            bmm_up(0)
            bmm_down(0)
            emit("moe", dict(base, kernel="bmm", up_us=t_up, down_us=t_dn,
                             frac_copy_up=base["bytes_up"] / (t_up * 1e-6) / 1e9 / COPY_GBPS,
                             frac_copy_down=base["bytes_down"] / (t_dn * 1e-6) / 1e9 / COPY_GBPS))
            ref_y = y_b.view(rows, H)[slot].float().clone()  # same tokens when A = E * cap
            rule = mg.moe_config(rt.rows)
            cands = [("rule", rule, rule)]
            for bn, (wp, st) in itertools.product((32, 64, 128), ((4, 3), (4, 4), (8, 3), (8, 4))):
                c = mg.MoeConfig(rt.bm, bn, 64, wp, st)
                if sweep and c != rule:
                    cands.append((f"bn{bn}_w{wp}_s{st}", c, c))
            for label, cu, cd in cands:
                if time.time() > deadline:
                    return
                try:
                    tu = timer(lambda r: mg.expert_up_act(x, rt, wu_t[r % 2], act, bias=bu_t,
                                                          oss=oss, config=cu))
                    td = timer(lambda r: mg.expert_down(act, rt, wd[r % 2], y, bias=bd,
                                                        config=cd))
                    mg.expert_up_act(x, rt, wu_t[0], act, bias=bu_t, oss=oss, config=cu)
                    mg.expert_down(act, rt, wd[0], y, bias=bd, config=cd)
                    chk = _rel(torch, y[slot], ref_y) if s.A == E * cap else None
                    emit("moe", dict(base, kernel="triton", tiles=label,
                                     up=cu.__dict__, down=cd.__dict__, up_us=tu, down_us=td,
                                     frac_copy_up=base["bytes_up"] / (tu * 1e-6) / 1e9 / COPY_GBPS,
                                     frac_copy_down=base["bytes_down"] / (td * 1e-6) / 1e9
                                     / COPY_GBPS, max_rel_vs_bmm=chk))
                except Exception as e:  # noqa: BLE001
                    emit("moe", dict(base, kernel="triton", tiles=label,
                                     error=f"{type(e).__name__}: {e}"[:300]))
            q8 = [mg.quantize_fp8(w) for w in wu_t]
            d8 = [mg.quantize_fp8(w) for w in wd]
            tu = timer(lambda r: mg.expert_up_act(x, rt, q8[r % 2][0], act, bias=bu_t,
                                                  scale=q8[r % 2][1], oss=oss))
            td = timer(lambda r: mg.expert_down(act, rt, d8[r % 2][0], y, bias=bd,
                                                scale=d8[r % 2][1]))
            bu8, bd8 = w_bytes_up // 2 + io_up, w_bytes_dn // 2 + io_dn
            emit("moe", dict(base, kernel="triton_fp8", tiles="rule", up_us=tu, down_us=td,
                             bytes_up=bu8, bytes_down=bd8,
                             frac_copy_up=bu8 / (tu * 1e-6) / 1e9 / COPY_GBPS,
                             frac_copy_down=bd8 / (td * 1e-6) / 1e9 / COPY_GBPS))
            # fp8 x fp8 MMAs with static activation scales (amax / 448 of these inputs)
            try:
                a_u = x.float().abs().max().item() / 448.0
                mg.expert_up_act(x, rt, q8[0][0], act, bias=bu_t, scale=q8[0][1], oss=oss,
                                 a_scale=a_u)
                torch.cuda.synchronize()
                a_d = max(act[slot].float().abs().max().item(), 1e-6) / 448.0
                tu = timer(lambda r: mg.expert_up_act(x, rt, q8[r % 2][0], act, bias=bu_t,
                                                      scale=q8[r % 2][1], oss=oss, a_scale=a_u))
                td = timer(lambda r: mg.expert_down(act, rt, d8[r % 2][0], y, bias=bd,
                                                    scale=d8[r % 2][1], a_scale=a_d))
                emit("moe", dict(base, kernel="triton_fp8_act", tiles="rule", up_us=tu,
                                 down_us=td, bytes_up=bu8, bytes_down=bd8,
                                 frac_copy_up=bu8 / (tu * 1e-6) / 1e9 / COPY_GBPS,
                                 frac_copy_down=bd8 / (td * 1e-6) / 1e9 / COPY_GBPS))
            except Exception as e:  # noqa: BLE001
                emit("moe", dict(base, kernel="triton_fp8_act", error=f"{type(e).__name__}: "
                                 f"{e}"[:300]))
            del wu, wd, wu_t, q8, d8, x_exp, gu, act_b, y_b
            torch.cuda.empty_cache()


def mla_rows(torch, timer, deadline, emit, sweep: bool) -> None:
    """DeepSeek-V3 TP8 latent attention: SDPA (the workload's call) against the Triton kernel
    over a small tile sweep."""
    from hw_runtime.gpu import decode_attn as da

    qh, C, RD = 16, 512, 64
    scale = 1.0 / math.sqrt(128 + 64)
    for R, L in MLA_SHAPES:
        if time.time() > deadline:
            return
        cache = torch.randn((R, 1, L, C + RD), device="cuda").to(torch.bfloat16)
        q = (torch.randn((R, 1, qh, C + RD), device="cuda") * .3).to(torch.bfloat16)
        out = torch.empty((R, qh, C), device="cuda", dtype=torch.bfloat16)
        ref = torch.nn.functional.scaled_dot_product_attention(q, cache, cache[..., :C],
                                                               scale=scale)
        byts = R * L * (C + RD) * 2
        ts = timer(lambda r: torch.nn.functional.scaled_dot_product_attention(
            q, cache, cache[..., :C], scale=scale))
        base = {"requests": R, "kv_len": L, "heads": qh, "bytes": byts}
        emit("mla", dict(base, kernel="sdpa", us=ts, frac_copy=byts / (ts * 1e-6) / 1e9 / COPY_GBPS))
        grid = itertools.product((16, 32, 64), (4, 8), (1, 2)) if sweep else [(64, 4, 2)]
        for bn, wp, st in grid:
            if time.time() > deadline:
                return
            try:
                f = (lambda r: da.mla_decode_attention(q.view(R, qh, C + RD), cache[:, 0], out,
                                                       132, scale, C, block_n=bn, warps=wp,
                                                       stages=st))
                t = timer(f)
                f(0)
                emit("mla", dict(base, kernel="triton", block_n=bn, warps=wp, stages=st, us=t,
                                 frac_copy=byts / (t * 1e-6) / 1e9 / COPY_GBPS,
                                 max_rel_vs_sdpa=_rel(torch, out, ref.view(R, qh, C))))
            except Exception as e:  # noqa: BLE001
                emit("mla", dict(base, kernel="triton", block_n=bn, warps=wp, stages=st,
                                 error=f"{type(e).__name__}: {e}"[:300]))
        del cache, q, out, ref
        torch.cuda.empty_cache()


def flashinfer_rows(torch, timer, emit, base, q, k, v, out, ref) -> None:
    """FlashInfer's tensor-core decode as the runtime calls it (``flashinfer_attn``), with the
    KV split from the pool's SMs (132 here) and with FlashInfer's own planner, and its FA3
    (Hopper) kernels with the pool's split; the first
    call's seconds include the JIT build. Skipped (one row) where the package is missing."""
    from hw_runtime.gpu import flashinfer_attn as fi

    R, qh, hd = q.shape
    kvh, L = k.shape[1], k.shape[2]
    if not fi.available():
        emit("gqa", dict(base, kernel="flashinfer", error=fi.MISSING))
        return
    byts = base["bytes"]
    for name, pool_split, be in (("flashinfer", True, "fa2"), ("flashinfer_own_split", False, "fa2"),
                                 ("flashinfer_fa3", True, "fa3")):
        try:
            t0 = time.time()
            dec = fi.FlashInferDecode(torch, R, qh, kvh, hd, L, torch.bfloat16, q.device,
                                      pool_split=pool_split, backend=be)
            dec(q, k, v, out, 132)
            torch.cuda.synchronize()
            first = time.time() - t0
            rel = _rel(torch, out, ref)
            t = timer(lambda r: dec(q, k, v, out, 132))
            emit("gqa", dict(base, kernel=name, page=dec.page,
                             split_pages=fi.split_pages(R, kvh, L, 132) if pool_split else None,
                             us=t, frac_copy=byts / (t * 1e-6) / 1e9 / COPY_GBPS,
                             first_call_s=first, max_rel_vs_sdpa=rel))
        except Exception as e:  # noqa: BLE001
            emit("gqa", dict(base, kernel=name, error=f"{type(e).__name__}: {e}"[:600]))


def gqa_rows(torch, timer, deadline, emit, sweep: bool) -> None:
    """GQA split-KV decode: SDPA against the Triton kernel's launch parameters."""
    from hw_runtime.gpu import decode_attn as da

    hd = 128
    for label, R, qh, kvh, L in GQA_SHAPES:
        if time.time() > deadline:
            return
        k = torch.randn((R, kvh, L, hd), device="cuda").to(torch.bfloat16)
        v = torch.randn((R, kvh, L, hd), device="cuda").to(torch.bfloat16)
        q = torch.randn((R, qh, 1, hd), device="cuda").to(torch.bfloat16)
        out = torch.empty((R, qh, hd), device="cuda", dtype=torch.bfloat16)
        ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        byts = 2 * R * kvh * L * hd * 2
        ts = timer(lambda r: torch.nn.functional.scaled_dot_product_attention(q, k, v,
                                                                              enable_gqa=True))
        base = {"workload": label, "requests": R, "q_heads": qh, "kv_heads": kvh, "kv_len": L,
                "bytes": byts}
        emit("gqa", dict(base, kernel="sdpa", us=ts,
                         frac_copy=byts / (ts * 1e-6) / 1e9 / COPY_GBPS))
        flashinfer_rows(torch, timer, emit, base, q.view(R, qh, hd), k, v, out,
                        ref.view(R, qh, hd))
        grid = itertools.product((64, 128), (4, 8), (2, 3), (2.0, 4.0, 8.0)) if sweep \
            else [(da.BLOCK_N, 4, 3, 2.0)]
        for bn, wp, st, wv in grid:
            if time.time() > deadline:
                return
            try:
                f = (lambda r: da.decode_attention(q.view(R, qh, hd), k, v, out, 132,
                                                   block_n=bn, waves=wv, warps=wp, stages=st))
                t = timer(f)
                f(0)
                emit("gqa", dict(base, kernel="triton", block_n=bn, warps=wp, stages=st,
                                 waves=wv, us=t, frac_copy=byts / (t * 1e-6) / 1e9 / COPY_GBPS,
                                 max_rel_vs_sdpa=_rel(torch, out, ref.view(R, qh, hd))))
            except Exception as e:  # noqa: BLE001
                emit("gqa", dict(base, kernel="triton", block_n=bn, warps=wp, stages=st,
                                 waves=wv, error=f"{type(e).__name__}: {e}"[:300]))
        # the runtime's launch on an fp8 (e4m3) cache and on a paged cache (16-slot pages, as
        # vLLM's default block, pages shuffled)
        k8, v8 = k.to(torch.float8_e4m3fn), v.to(torch.float8_e4m3fn)
        t8 = timer(lambda r: da.decode_attention(q.view(R, qh, hd), k8, v8, out, 132))
        emit("gqa", dict(base, kernel="triton_fp8_kv", bytes=byts // 2, us=t8,
                         frac_copy=byts / 2 / (t8 * 1e-6) / 1e9 / COPY_GBPS))
        del k8, v8
        page = 16
        P = R * (L // page)
        perm = torch.randperm(P, device="cuda").to(torch.int32).view(R, L // page)
        kp = k.view(R, kvh, L // page, page, hd).permute(0, 2, 1, 3, 4).reshape(P, kvh, page, hd)
        vp = v.view(R, kvh, L // page, page, hd).permute(0, 2, 1, 3, 4).reshape(P, kvh, page, hd)
        kp2, vp2 = torch.empty_like(kp), torch.empty_like(vp)
        kp2[perm.view(-1).long()] = kp
        vp2[perm.view(-1).long()] = vp
        del kp, vp
        lens = torch.full((R,), L, device="cuda", dtype=torch.int32)
        tp = timer(lambda r: da.paged_decode_attention(q.view(R, qh, hd), kp2, vp2, perm, lens,
                                                       out, 132, max_len=L))
        emit("gqa", dict(base, kernel="triton_paged16", us=tp,
                         frac_copy=byts / (tp * 1e-6) / 1e9 / COPY_GBPS,
                         max_rel_vs_sdpa=_rel(torch, out, ref.view(R, qh, hd))))
        del k, v, q, out, ref, kp2, vp2
        torch.cuda.empty_cache()


#: (label, requests, q heads, KV heads, KV length, pool SMs): decode attention alone on a green
#: context, as a pipelined stage runs it (Llama-3.1-70B TP8 G = 2,048 in 4 microbatches of 512,
#: the wins study's winner runs it on 32 SMs).
POOL_SHAPES = (("llama70b_tp8_g2048_mb512_kv1k", 512, 8, 1, 1024, 32),
               ("llama70b_tp8_g2048_mb512_kv1k", 512, 8, 1, 1024, 64),
               ("llama70b_tp8_g2048_mb512_kv1k", 512, 8, 1, 1024, 96),
               ("llama8b_1gpu_g256_mb64_kv2k", 64, 32, 8, 2048, 32))


def _flashinfer_launch(fi, torch, q, k, v, out, sms: int, backend: str):
    """``f(r)``: one FlashInfer decode of ``q`` over ``k``, ``v`` into ``out`` on ``sms`` SMs."""
    R, qh, hd = q.shape
    dec = fi.FlashInferDecode(torch, R, qh, k.shape[1], hd, k.shape[2], q.dtype, q.device,
                              backend=backend)
    return lambda r: dec(q, k, v, out, sms)


def gqa_pool_rows(torch, timer, deadline, emit, sweep: bool) -> None:
    """Decode attention alone on one green-context pool (``POOL_SHAPES``): SDPA, the Triton
    kernel and FlashInfer (FA2 and FA3), the last two with their KV split sized for the pool;
    fractions of the pool's measured copy bandwidth (``tests/data/h200_copy_bandwidth_vs_pool.csv``)."""
    import csv

    from hw_runtime.gpu import decode_attn as da
    from hw_runtime.gpu import flashinfer_attn as fi
    from hw_runtime.gpu.corun import capture_graph, time_alone
    from hw_runtime.gpu.partition import GreenPartition

    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "..", "tests", "data", "h200_copy_bandwidth_vs_pool.csv")) as fh:
        bw = {int(r["pool_sms"]): float(r["copy_GBps"])
              for r in csv.DictReader(line for line in fh if not line.startswith("#"))}
    hd = 128
    for label, R, qh, kvh, L, sms in POOL_SHAPES:
        if time.time() > deadline:
            return
        k = torch.randn((R, kvh, L, hd), device="cuda").to(torch.bfloat16)
        v = torch.randn((R, kvh, L, hd), device="cuda").to(torch.bfloat16)
        q = torch.randn((R, qh, hd), device="cuda").to(torch.bfloat16)
        out = torch.empty_like(q)
        byts = 2 * R * kvh * L * hd * 2
        base = {"workload": label, "requests": R, "q_heads": qh, "kv_heads": kvh, "kv_len": L,
                "pool_sms": sms, "bytes": byts, "pool_copy_GBps": bw.get(sms)}
        part = GreenPartition([sms], streams_per_pool=1)
        try:
            stream = part.stream(0, 0)
            q4 = q.view(R, qh, 1, hd)
            # each candidate: a maker of its launch ``f(r)`` (built in the try below, so a
            # FlashInfer backend that fails to plan costs one row)
            cands = {"sdpa": lambda: lambda r: torch.nn.functional.scaled_dot_product_attention(
                         q4, k, v, enable_gqa=True),
                     "triton": lambda: lambda r: da.decode_attention(q, k, v, out, sms)}
            for be in fi.BACKENDS if fi.available() else ():
                cands[f"flashinfer_{be}"] = functools.partial(_flashinfer_launch, fi, torch, q,
                                                              k, v, out, sms, be)
            for name, make in cands.items():
                try:
                    fn = make()
                    with torch.cuda.stream(stream):
                        fn(0)                          # plan / compile outside capture
                    torch.cuda.synchronize()
                    g = capture_graph(torch, stream, fn, LAUNCHES)
                    us = time_alone(torch, g, stream, REPS) / LAUNCHES
                    del g
                    gbps = byts / (us * 1e-6) / 1e9
                    emit("gqa_pool", dict(base, kernel=name, us=us, GBps=gbps,
                                          frac_pool_copy=gbps / bw[sms] if sms in bw else None))
                except Exception as e:  # noqa: BLE001
                    emit("gqa_pool", dict(base, kernel=name, error=f"{type(e).__name__}: {e}"[:400]))
        finally:
            torch.cuda.synchronize()
            part.close()
        del k, v, q, out
        torch.cuda.empty_cache()


PARTS = {"moe": moe_rows, "mla": mla_rows, "gqa": gqa_rows, "gqa_pool": gqa_pool_rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT"), help="folder (default $OUT)")
    ap.add_argument("--parts", nargs="+", default=list(PARTS), choices=list(PARTS))
    ap.add_argument("--time-limit", type=float, default=300.0, help="seconds (default 300)")
    ap.add_argument("--sweep", action="store_true",
                    help="also the tile/launch sweep the runtime's defaults were chosen from")
    a = ap.parse_args(argv)
    if not a.out:
        print("kernel_choice_h200: --out (or $OUT) is required", file=sys.stderr)
        return 2
    a.parts = list(dict.fromkeys(a.parts))   # each part once
    if os.path.exists(a.out) and not os.path.isdir(a.out):
        print(f"kernel_choice_h200: --out {a.out!r} exists and is not a folder", file=sys.stderr)
        return 2
    if not (a.time_limit > 0):
        print(f"kernel_choice_h200: --time-limit must be > 0, got {a.time_limit}", file=sys.stderr)
        return 2
    try:
        import torch
        from hw_runtime.gpu.fused import triton_available
        ok = torch.cuda.is_available() and triton_available()
    except Exception:  # noqa: BLE001
        ok = False
    if not ok:
        print("kernel_choice_h200: needs a CUDA GPU with torch and Triton", file=sys.stderr)
        return 2
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "kernel_choice.json")
    res = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
           "date": time.strftime("%Y-%m-%d"), "launches": LAUNCHES, "reps": REPS,
           "copy_GBps": COPY_GBPS, "sweep": a.sweep, "rows": {p: [] for p in a.parts}}
    t0 = time.time()

    def emit(part, row):
        res["rows"][part].append(row)
        print(part, json.dumps({k: (round(v, 3) if isinstance(v, float) else v)
                                for k, v in row.items() if k not in ("up", "down")}),
              f"({time.time() - t0:.0f} s)", flush=True)
        with open(path, "w") as fh:
            json.dump(res, fh)

    timer = _timer(torch)
    for p in a.parts:
        PARTS[p](torch, timer, t0 + a.time_limit, emit, a.sweep)
    res["elapsed_s"] = time.time() - t0
    with open(path, "w") as fh:
        json.dump(res, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
