"""Measure a calibration file on the local GPU (``subgpu calibrate``).

``calibrate(arch, deploy, batches, microbatches)`` times every distinct kernel of the workload, of
every region kind of the forward pass (``build_forward``: DeepSeek-V3's dense layers too; the head
kernels are not measured and keep the analytical model)
(``subgpu_jax.model.calibration.kernel_key``: L0/L1 copies of one op on one shape are measured once)
alone on green-context pools of ``pools`` SMs (default 8, 16, 32, 64, 96, 128) and on the whole
GPU (no green context), for every global batch and microbatch count asked for; measures the
copy-bandwidth curve on the same pools; and runs a few co-running pairs on two 64-SM pools
(memory-bound decode attention beside the up-projection, the experts' or the dense MLP's,
beside a compute-bound 8192^3 bf16 GEMM, and beside another attention; ``corun_kernels``),
which are stored for validation only.

Protocol of a kernel time: ``hw_runtime.gpu.workload.time_kernels``: the op launched once for each of
``rotate`` region instances (different weights/KV, so nothing stays in L2 between launches),
captured in a CUDA graph, median over ``reps`` replays of graph time / ``rotate`` (µs). A copy
time: 2 GiB moved (1 GiB read + 1 GiB written), median of ``reps`` launches.

The result is the JSON object ``subgpu_jax.model.calibration.Calibration.from_dict`` accepts, plus
``meta.raw`` (min/max per measurement, graph nodes per launch) for reports.

Errors: ``ExecutorUnavailable`` / ``GreenContextUnavailable`` without a GPU or green contexts;
``WorkloadMemoryError`` when the KV caches do not fit (raised before allocating, with the bytes
needed); ``ValueError`` for bad arguments.
"""

from __future__ import annotations

import dataclasses
import gc
import math
import platform
import statistics
import time
from typing import Callable, Sequence

from subgpu_jax.model.calibration import BW_NOISE, DEPLOY_FIELDS, FORMAT, kernel_key
from subgpu_jax.model.graph import Deployment, build_forward, build_graph

__all__ = ["DEFAULT_POOLS", "calibrate", "copy_bandwidth", "distinct_kernels", "corun_pairs",
           "corun_kernels"]

#: Pool sizes timed (SMs), multiples of the H200's 8-SM quantum; the whole GPU is added.
DEFAULT_POOLS: tuple[int, ...] = (8, 16, 32, 64, 96, 128)
#: Times a pool's copy bandwidth is measured again when it falls more than the loader's
#: ``BW_NOISE`` below a smaller pool's (the highest measurement is kept): a file whose curve
#: falls further is refused by ``Calibration.from_dict``.
COPY_RETRIES = 2


def distinct_kernels(graph) -> list[int]:
    """Indices of the first kernel of each distinct ``kernel_key`` in ``graph`` (launch order)."""
    seen, out = set(), []
    for i, k in enumerate(graph.kernels):
        key = kernel_key(k)
        if key not in seen:
            seen.add(key)
            out.append(i)
    return out


def copy_bandwidth(torch, stream, nbytes: int = 2 ** 30, reps: int = 10) -> float:
    """Copy bandwidth (read + write bytes / s) of a ``nbytes`` device-to-device copy on
    ``stream``: median of ``reps`` launches after 2 warm-ups, timed with CUDA events."""
    n = nbytes // 2
    src = torch.empty(n, dtype=torch.bfloat16, device="cuda").normal_()
    dst = torch.empty_like(src)
    ts = []
    with torch.cuda.stream(stream):
        for _ in range(2):
            dst.copy_(src)
        for _ in range(reps):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record(stream)
            dst.copy_(src)
            e1.record(stream)
            e1.synchronize()
            ts.append(e0.elapsed_time(e1) * 1e-3)
    del src, dst
    return 2.0 * n * 2 / statistics.median(ts)


def corun_kernels(graph) -> tuple[int, int, str]:
    """The kernels of ``graph`` the co-running pairs use, for any model family.

    Returns:
        ``(attention, up_projection, label)``: the index of the region's last decode-attention
        kernel (full attention; the sliding-window kind where every layer slides, as Mixtral;
        MLA's latent attention is category ``attn_full`` too), the index of its first
        up-projection (the routed experts' ``expert_up`` for MoE models, the dense MLP's
        ``mlp_up`` otherwise) and that kernel's label (``expert_up`` or ``mlp_up``).

    Raises:
        ValueError: the region has no attention or no up-projection kernel (one line).
    """
    ks = graph.kernels
    attn = ([i for i, k in enumerate(ks) if k.category == "attn_full"]
            or [i for i, k in enumerate(ks) if k.category == "attn_sliding"])
    if not attn:
        raise ValueError(f"calibrate: the region {graph.region_kinds} has no attention kernel "
                         "for the co-running pairs; use --no-coruns")
    for op in ("expert_up", "mlp_up"):
        up = [i for i, k in enumerate(ks) if k.op == op]
        if up:
            return attn[-1], up[0], op
    raise ValueError(f"calibrate: the region {graph.region_kinds} has no up-projection kernel "
                     "for the co-running pairs; use --no-coruns")


def corun_pairs(torch, wl, part, reps: int = 5) -> list[dict]:
    """Co-running pairs on a two-pool partition ``part`` (pool 0 runs A, pool 1 runs B).

    Timing: ``hw_runtime.gpu.corun``'s spin-gated protocol (host graph-launch time excluded).
    A = the decode-attention kernel of microbatch 0 over 4 region instances (``corun_kernels``:
    the full-attention FMHA, or the sliding one where every layer slides). B = (1) the
    up-projection (the experts' of an MoE model, the dense MLP's otherwise), (2) an 8192^3 bf16
    GEMM (compute-bound, not a workload kernel), (3) the same attention kernel of the last
    microbatch. B's graph is replayed back to back until A is done (enough replays to outlast A
    alone).

    Returns:
        one dict per pair: ``a``/``b`` (names, kernel keys, launches per graph), pools,
        ``a_alone_us``, ``b_alone_us`` (per graph), ``a_corun_us`` (start to A's end while B
        runs), ``b_replays``, ``b_corun_us`` (per B graph while overlapped),
        ``a_slowdown`` = a_corun / a_alone - 1.
    """
    from subgpu_jax.sim.probe import probe_kernels

    from hw_runtime.gpu.corun import capture_graph, time_alone, time_corun  # one protocol

    s0, s1 = part.stream(0, 0), part.stream(1, 0)
    g = wl.graph
    ia, iu, up = corun_kernels(g)
    attn = g.kernels[ia].category
    m = wl.shapes.m
    n = 8192
    A_ = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
    B_ = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
    C_ = torch.empty(n, n, dtype=torch.bfloat16, device="cuda")
    L = min(4, g.num_regions)
    pa, pb = int(part.granted[0]), int(part.granted[1])
    # A on pool 0, lane 0; B on pool 1, lane 1 (the pool-sized kernels size for their pool)
    ga = capture_graph(torch, s0, lambda r=0: wl.launch(ia, 0, r % L, sms=pa, lane=0), L)
    cands = [
        (up, lambda r=0: wl.launch(iu, m - 1, r % g.num_regions, sms=pb, lane=1),
         {"name": g.kernels[iu].name, "key": kernel_key(g.kernels[iu])}, 8),
        ("gemm8192", lambda r=0: torch.mm(A_, B_, out=C_),
         {"name": "mm8192_bf16", "key": kernel_key(probe_kernels()[0]), "analytical": True}, 1),
        (attn, lambda r=0: wl.launch(ia, m - 1, (r + L) % g.num_regions, sms=pb, lane=1),
         {"name": g.kernels[ia].name + f"(mb{m - 1})", "key": kernel_key(g.kernels[ia])}, 1),
    ]

    a_alone = time_alone(torch, ga, s0, reps) / 1e3   # ms
    out = []
    for label, fn, info, nb in cands:
        gb = capture_graph(torch, s1, fn, nb)
        b_alone = time_alone(torch, gb, s1, reps) / 1e3
        rb = max(2, int(math.ceil(a_alone / b_alone)) + 2)
        a_co, b_co = time_corun(torch, ga, s0, gb, s1, rb, reps)   # µs, spin-gated start
        out.append({"pair": f"{attn}|{label}", "a": {"name": g.kernels[ia].name,
                    "key": kernel_key(g.kernels[ia]), "launches": L},
                    "b": {**info, "launches": nb}, "pools": list(part.granted),
                    "global_batch": wl.deployment.global_batch, "microbatches": m,
                    "a_alone_us": a_alone * 1e3, "b_alone_us": b_alone * 1e3,
                    "a_corun_us": a_co, "b_replays": rb, "b_corun_us": b_co,
                    "a_slowdown": a_co / (a_alone * 1e3) - 1.0})
        del gb
    return out


def moe_gemm_meta(per_batch: dict[str, str | None]) -> str | dict | None:
    """``meta.moe_gemm`` of a calibration: the one expert-GEMM choice of all its batches (None
    for a dense model), or ``{batch: choice}`` where they differ (``--moe-gemm auto`` picks by
    the routed tokens per expert, so by the batch)."""
    vals = set(per_batch.values())
    return next(iter(vals)) if len(vals) <= 1 else dict(per_batch)


def calibrate(arch, deploy: Deployment, batches: Sequence[int] = (2048, 512),
              microbatches: Sequence[int] = (1, 2, 4), pools: Sequence[int] = DEFAULT_POOLS,
              reps: int = 7, warmup: int = 2, coruns: bool = True, hardware: str = "H200",
              log: Callable[[str], None] = print, copy_curve: bool = True,
              gemm: str = "stock", elementwise: str = "auto", attention: str = "auto",
              collectives: str = "sleep", moe_gemm: str = "auto") -> dict:
    """Measure the calibration of ``arch`` under ``deploy`` at several global batches.

    Args:
        arch: the model, with bf16 experts on Hopper (``hw_runtime.gpu.workload.hopper_arch``).
        deploy: the deployment (its ``global_batch`` is replaced by each of ``batches``).
        batches: global batches G to measure.
        microbatches: microbatch counts m (those not dividing R = G/d are skipped).
        pools: green-context pool sizes (SMs); the whole GPU is always measured too.
        reps, warmup: replays per kernel measurement (median) and warm-up replays.
        coruns: also measure the co-running pairs (at the first batch, largest m <= 2).
        hardware: preset name written into the file (must match the simulator's preset).
        log: progress printer.
        copy_curve: measure the copy-bandwidth curve on every pool (else ``bw_curve`` is None).
        gemm: GEMM launch policy (``hw_runtime.gpu.blas``): ``"pool"`` plans each GEMM for the
            pool it is timed on; recorded in ``meta.gemm`` (run with the same policy).
        elementwise: the elementwise kernels (``hw_runtime.gpu.fused``: auto, triton, torch);
            the resolved choice is recorded in ``meta.elementwise``.
        attention: the decode attention (``hw_runtime.gpu.decode_attn.ATTENTION``);
            the resolved choice is recorded in ``meta.attention``.
        moe_gemm: the expert GEMMs (``hw_runtime.gpu.moe_gemm``: auto, triton, bmm); the
            resolved choice is recorded in ``meta.moe_gemm`` (one value, or one per batch
            where ``auto`` chose differently: ``moe_gemm_meta``).
        collectives: how the collectives run while timed (``--collectives``: sleep, proxy,
            none); recorded in ``meta.collectives``.

    Returns:
        the calibration JSON object (``Calibration.from_dict`` accepts it).

    Raises:
        ExecutorUnavailable, GreenContextUnavailable: no GPU / green contexts.
        WorkloadMemoryError: the workload does not fit (before allocating).
        ValueError: bad pools/batches.
    """
    from hw_runtime.gpu.executor import cuda_torch, derive_workload
    from hw_runtime.gpu.partition import GreenPartition, device_sm_info
    from hw_runtime.gpu.kernels import collective_kwargs, link_kwargs
    from hw_runtime.gpu.policies import KernelSettings
    from hw_runtime.gpu.workload import TorchWorkload
    from hw_runtime.gpu.kerneltime import time_kernels
    from subgpu_jax.model.hardware import get_hardware
    from hw_runtime.gpu.blas import GemmPolicy

    from subgpu_jax.model.collective import one_gpu_mode
    one_gpu_mode(collectives)                   # one process: not --collectives nccl
    link = link_kwargs(get_hardware(hardware))  # the collectives' wait of that GPU's preset
    link.update(collective_kwargs(collectives))
    torch = cuda_torch()
    policy = GemmPolicy(torch, gemm)
    kernels = KernelSettings(gemm=gemm, elementwise=elementwise, attention=attention,
                             moe_gemm=moe_gemm)
    info = device_sm_info(0)
    if not batches or not microbatches or not pools:
        raise ValueError("calibrate: batches, microbatches and pools must be non-empty")
    pools = sorted({int(p) for p in pools})  # the curve's SM counts must increase strictly
    t0 = time.time()
    resolved_moe: dict[str, str | None] = {}   # per batch: auto depends on the rows per expert
    tables: dict[str, dict] = {}
    names: dict[str, str] = {}
    raw: list[dict] = []
    corun_res: list[dict] = []
    full = torch.cuda.Stream()
    for G in batches:
        dep = dataclasses.replace(deploy, global_batch=int(G))
        dep.validate(arch)
        R = dep.requests_per_gpu
        ms = [m for m in microbatches if R % m == 0]
        base = TorchWorkload(build_graph(arch, dep, 1), device="cuda", kernels=kernels, **link)
        resolved, resolved_attention = base.elementwise, base.attention
        resolved_moe[str(int(G))] = base.moe_gemm
        log(f"calibrate: G={G} R={R} workload {base.memory['total'] / 1e9:.1f} GB "
            f"({base.kv_cache} KV) m={ms} ({time.time() - t0:.0f} s)")
        wls = {}
        for m in ms:
            wls[m] = derive_workload(base, build_graph(arch, dep, m))
        others = []  # the model's other region kinds (DeepSeek-V3's dense layers), same protocol
        for rk in dict.fromkeys(g.region_kinds for g, _ in build_forward(arch, dep, 1).runs):
            if rk != base.graph.region_kinds:
                kb = TorchWorkload(build_graph(arch, dep, 1, region=rk), device="cuda",
                                   kernels=kernels, **link)
                others += [(m, derive_workload(kb, build_graph(arch, dep, m, region=rk)))
                           for m in ms]
        todo = []  # (wl, [kernel ids]) of keys not measured yet
        for m, wl in list(wls.items()) + others:
            ids = [i for i in distinct_kernels(wl.graph)
                   if kernel_key(wl.graph.kernels[i]) not in tables]
            for i in ids:
                key = kernel_key(wl.graph.kernels[i])
                tables[key] = {}
                names[key] = f"{wl.graph.kernels[i].name}@G{G}m{m}"
            todo.append((wl, ids, m))
        for p in list(pools) + [info.sm_count]:
            part = None
            try:
                if p == info.sm_count:
                    stream = full
                else:
                    part = GreenPartition([int(p)], streams_per_pool=1)
                    stream = part.stream(0, 0)
                for wl, ids, m in todo:
                    if not ids:
                        continue
                    # (time_kernels issues on the pool: the decode attention sizes for it)
                    res = time_kernels(wl, kernels=ids, reps=reps, warmup=warmup, stream=stream,
                                       gemm=policy, sms=int(p))
                    for r in res:
                        key = kernel_key(wl.graph.kernels[wl.graph.index(r["name"])])
                        tables[key][str(int(p))] = float(r["us"])
                        raw.append({"key": key, "name": r["name"], "G": G, "m": m, "sms": int(p),
                                    "us": r["us"], "us_min": r["us_min"], "us_max": r["us_max"],
                                    "nodes": r["graph_nodes_per_launch"]})
            finally:
                if part is not None:
                    torch.cuda.synchronize()
                    part.close()
            log(f"  pool {p:3d} SMs done ({time.time() - t0:.0f} s)")
        if coruns and not corun_res:
            mc = max([m for m in ms if m <= 2] or [ms[0]])
            with GreenPartition([64, 64], streams_per_pool=1) as part:
                corun_res = corun_pairs(torch, wls[mc], part)
            log(f"  co-runs done ({time.time() - t0:.0f} s)")
        del wls, todo, base, others
        gc.collect()
        torch.cuda.empty_cache()
    # copy-bandwidth curve, stored as measured; a pool more than BW_NOISE below a smaller
    # one (which the loader refuses) is measured again, the highest kept
    def copy_gbps(p: int) -> float:
        if p == info.sm_count:
            return copy_bandwidth(torch, full) / 1e9
        with GreenPartition([int(p)], streams_per_pool=1) as part:
            return copy_bandwidth(torch, part.stream(0, 0)) / 1e9

    bw_sms, bw = [], []
    for p in (list(pools) + [info.sm_count]) if copy_curve else []:
        g = copy_gbps(p)
        for _ in range(COPY_RETRIES):
            if not bw or g >= max(bw) * (1.0 - BW_NOISE):
                break
            log(f"calibrate: copy on {p} SMs {g:,.1f} GB/s, more than {BW_NOISE:.0%} below "
                f"{max(bw):,.1f} on fewer SMs: measured again")
            g = max(g, copy_gbps(p))
        bw.append(g)
        bw_sms.append(int(p))
    log(f"calibrate: copy curve {dict(zip(bw_sms, [round(x) for x in bw]))} "
        f"({time.time() - t0:.0f} s)")
    return {
        "format": FORMAT, "model": arch.name, "hardware": hardware, "num_sms": info.sm_count,
        "expert_dtype": arch.expert_dtype,
        # every group measured in bf16 (hopper_arch): a calibrated prediction builds it so too
        "weights_dtype": "bf16" if arch.all_bf16() is arch else None,
        "deployment": {f: int(getattr(deploy, f)) for f in DEPLOY_FIELDS},
        "global_batches": [int(g) for g in batches],
        "kernels": [{"key": k, "name": names[k], "times_us": v} for k, v in tables.items()],
        "bw_curve": {"sms": bw_sms, "copy_GBps": bw} if copy_curve else None,
        "coruns": corun_res,
        "meta": {"device": info.name, "driver": info.driver_version,
                 "torch": torch.__version__, "python": platform.python_version(),
                 "date": time.strftime("%Y-%m-%d %H:%M:%S"), "pools": list(pools),
                 "microbatches": list(microbatches), "reps": reps, "warmup": warmup,
                 "gemm": gemm, "elementwise": resolved, "attention": resolved_attention,
                 "moe_gemm": moe_gemm_meta(resolved_moe),
                 "collectives": collectives,
                 "protocol": "time_kernels: op launched once per region instance (18, cold L2) "
                             "in one CUDA graph; median of reps replays / instances",
                 "seconds": time.time() - t0, "raw": raw},
    }
