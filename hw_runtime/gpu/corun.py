"""The co-run matrix: pairs of kernel classes on disjoint green-context pools (needs a GPU).

Kernel classes (``CLASSES``) and what stands for each one:

==============  ==============================================================================
attn            the full-attention decode FMHA of the workload (``category == "attn_full"``)
elementwise     the RMSNorm of the workload (memory-bound, one small kernel chain)
expert_gemm     the batched expert up-projection (``op == "expert_up"``)
dense_gemm      a compute-bound bf16 GEMM, M x K x N = 512 x 8192 x 7168 (the shape of
                Llama-3.1-70B's TP8 gate+up projection at 512 tokens; not a workload kernel)
gemv            the router GEMM of the workload (a thin GEMM: few rows, latency-bound)
copy            a 256 MiB device-to-device copy (bf16), the copy kernel the bandwidth curve uses
==============  ==============================================================================

Protocol (``corun_matrix``): for every split (a, b) of the GPU into two green-context pools and
every ordered pair (A, B) of classes, A runs on pool a as a CUDA graph of launches rotating over
region instances (cold L2), B runs on pool b as a graph replayed back to back so that it covers
A's whole run; A's time is read with CUDA events on its own stream. A alone on pool a is timed
the same way. The SM clock is sampled through NVML (``nvidia-ml-py``) while each co-run runs.

Units: µs, SMs, MHz.
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from typing import Any, Callable, Sequence

#: The kernel classes of the co-run matrix, in table order.
CLASSES: tuple[str, ...] = ("attn", "elementwise", "expert_gemm", "dense_gemm", "gemv", "copy")

#: Shape (M, K, N) of the synthetic compute-bound GEMM (Llama-3.1-70B gate+up at TP8, 512 tokens:
#: hidden 8192, 2 x 28672 / 8 = 7168 columns; public config of meta-llama/Llama-3.1-70B).
DENSE_GEMM_MKN: tuple[int, int, int] = (512, 8192, 7168)
#: Bytes of the synthetic copy (read 256 MiB + write 256 MiB).
COPY_BYTES: int = 256 * 2 ** 20


def synthetic_kernels():
    """The ``Kernel`` objects of the two synthetic classes, for the simulator.

    Returns:
        ``{"dense_gemm": Kernel, "copy": Kernel}``: the GEMM of ``DENSE_GEMM_MKN`` (2 M K N FLOPs,
        bf16 tensor work, weight K x N x 2 bytes, activation reads M x K x 2, writes M x N x 2,
        one CTA per 128 x 128 output tile) and the copy of ``COPY_BYTES`` (one CTA per 64 KiB).
    """
    from subgpu_jax.model.graph import Kernel

    M, K, N = DENSE_GEMM_MKN
    gemm = Kernel(name="dense_gemm", op="gemm", category="mlp", layer=0, flops=2.0 * M * K * N,
                  dtype="bf16", tensor=True, weight_objects=(("W", float(K * N * 2)),),
                  act_reads=(("x", float(M * K * 2)),), act_writes=(("y", float(M * N * 2)),),
                  ctas=math.ceil(M / 128) * math.ceil(N / 128))
    copy = Kernel(name="copy", op="copy", category="mlp", layer=0, flops=0.0, dtype="bf16",
                  tensor=False, act_reads=(("src", float(COPY_BYTES)),),
                  act_writes=(("dst", float(COPY_BYTES)),), ctas=COPY_BYTES // 2 ** 16)
    return {"dense_gemm": gemm, "copy": copy}


def workload_class_kernels(graph) -> dict[str, int]:
    """Kernel indices of the workload classes in a region graph.

    Args:
        graph: an ``OpGraph`` of a MoE model with full attention (GPT-OSS).

    Returns:
        ``{"attn", "elementwise", "expert_gemm", "gemv"} -> kernel index``.

    Raises:
        ValueError: the graph lacks one of them (names the class).
    """
    idx = family_class_kernels(graph)
    for c in ("expert_gemm", "gemv"):
        if c not in idx:
            raise ValueError(f"corun: the graph has no kernel of class {c!r}")
    return {c: idx[c] for c in ("attn", "elementwise", "expert_gemm", "gemv")}


def family_class_kernels(graph) -> dict[str, int]:
    """Kernel indices of the co-run classes any decode family's region graph has (the co-run
    matrices of several families, ``experiments/corun_families.py``): ``attn`` (the last
    full-attention kernel: GQA or MLA), ``elementwise`` (RMSNorm), ``dense_gemm`` (the dense
    MLP up-projection, where the region has one: dense models, DeepSeek-V3's shared experts)
    and, for MoE regions, ``expert_gemm`` (expert up-projection) and ``gemv`` (router).

    Raises:
        ValueError: the graph lacks full attention or RMSNorm (names the class).
    """
    want = {"attn": lambda k: k.category == "attn_full", "elementwise": lambda k: k.op == "rmsnorm",
            "dense_gemm": lambda k: k.op == "mlp_up", "expert_gemm": lambda k: k.op == "expert_up",
            "gemv": lambda k: k.op == "router"}
    out = {}
    for c, pred in want.items():
        idx = [i for i, k in enumerate(graph.kernels) if pred(k)]
        if not idx:
            if c in ("attn", "elementwise"):
                raise ValueError(f"corun: the graph has no kernel of class {c!r}")
            continue
        out[c] = idx[-1] if c == "attn" else idx[0]
    return out


class ClockSampler:
    """Samples the SM clock (MHz) through NVML in a background thread while active.

    Use as a context manager; ``samples`` holds the readings. Without NVML it records nothing
    (``available`` is False).
    """

    def __init__(self, device: int = 0, period_s: float = 0.0005) -> None:
        self.samples: list[float] = []
        self.period = period_s
        self._stop = threading.Event()
        self.available = False
        try:
            import pynvml
            pynvml.nvmlInit()
            self._nv = pynvml
            self._h = pynvml.nvmlDeviceGetHandleByIndex(device)
            self.available = True
        except Exception:  # noqa: BLE001 - NVML is optional; say so through `available`
            self._nv = None

    def _run(self) -> None:
        nv, h = self._nv, self._h
        while not self._stop.is_set():
            try:
                self.samples.append(float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)))
            except Exception:  # noqa: BLE001
                return
            time.sleep(self.period)

    def __enter__(self) -> "ClockSampler":
        if self.available:
            self._t = threading.Thread(target=self._run, daemon=True)
            self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.available:
            self._stop.set()
            self._t.join()

    def summary(self) -> dict:
        """``{"n", "mean_mhz", "min_mhz", "max_mhz"}`` (None values without samples)."""
        s = self.samples
        if not s:
            return {"n": 0, "mean_mhz": None, "min_mhz": None, "max_mhz": None}
        return {"n": len(s), "mean_mhz": statistics.fmean(s), "min_mhz": min(s),
                "max_mhz": max(s)}


def capture_graph(torch, stream, fn: Callable[[int], Any], launches: int):
    """CUDA graph of ``launches`` calls ``fn(r)`` captured on ``stream`` (after eager warm-up)."""
    with torch.cuda.stream(stream):
        for r in range(min(2, launches)):
            fn(r)
    stream.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=stream):
        for r in range(launches):
            fn(r)
    stream.synchronize()
    return g


#: Clock cycles of the spin kernel that holds a stream while the host enqueues the timed work
#: (about 1.5 ms at the H200's 1980 MHz SM clock, read through NVML during the co-runs).
SPIN_CYCLES: int = 3_000_000


def time_alone(torch, g, stream, reps: int) -> float:
    """Median replay time (µs) of graph ``g`` on ``stream`` (one warm replay first).

    Each timed replay is enqueued behind a spin kernel (``SPIN_CYCLES``) and the start event is
    recorded after the spin, so the host's graph-launch time is not part of the measurement
    (without it, launching a graph of ~200 small kernels adds hundreds of µs)."""
    ts = []
    with torch.cuda.stream(stream):
        g.replay()
        for _ in range(reps):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(SPIN_CYCLES)
            e0.record(stream)
            g.replay()
            e1.record(stream)
            e1.synchronize()
            ts.append(e0.elapsed_time(e1) * 1e3)
    return statistics.median(ts)


def time_corun(torch, ga, sa, gb, sb, rb: int, reps: int,
                 b_delay_cycles: int | None = None) -> tuple[float, float]:
    """Median time (µs) of A's graph on ``sa`` while ``rb`` replays of B run on ``sb`` from the
    same start; also the median per-replay time of B (µs) over the overlapped span. Both streams
    start from an event recorded after a spin kernel on ``sa`` (``SPIN_CYCLES``), so every graph
    is enqueued before the timed work begins (host launch time excluded). With
    ``b_delay_cycles``, A is enqueued first and B waits that many clock cycles after the start
    (so A's kernel is dispatched first; with ``rb = 1`` B's time is when B ends)."""
    ta, tb = [], []
    for _ in range(reps):
        e0 = torch.cuda.Event(enable_timing=True)
        ea = torch.cuda.Event(enable_timing=True)
        eb = torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(sa):
            torch.cuda._sleep(SPIN_CYCLES)
        e0.record(sa)
        sb.wait_event(e0)

        def run_b() -> None:
            with torch.cuda.stream(sb):
                if b_delay_cycles:
                    torch.cuda._sleep(b_delay_cycles)
                for _ in range(rb):
                    gb.replay()
        if b_delay_cycles is None:
            run_b()
        with torch.cuda.stream(sa):
            ga.replay()
        ea.record(sa)
        if b_delay_cycles is not None:
            run_b()
        eb.record(sb)
        eb.synchronize()
        ea.synchronize()
        ta.append(e0.elapsed_time(ea) * 1e3)
        tb.append(e0.elapsed_time(eb) * 1e3 / rb)
    return statistics.median(ta), statistics.median(tb)


def corun_matrix(wl, splits: Sequence[tuple[int, int]] = ((32, 96), (64, 64), (96, 32)),
                 classes: Sequence[str] = CLASSES, target_us: float = 1500.0, reps: int = 5,
                 microbatch: int = 0, log: Callable[[str], None] = print, gemm=None,
                 family: bool = False) -> dict:
    """Measure the co-run matrix on a GPT-OSS workload (see the module docstring).

    Args:
        wl: a CUDA ``TorchWorkload`` of a GPT-OSS graph (supplies attn, elementwise,
            expert_gemm, gemv); the synthetic classes are allocated here.
        splits: (a, b) pool sizes (SMs), multiples of the green-context quantum.
        classes: subset of ``CLASSES``.
        target_us: each class graph is made of enough launches to last about this long alone on
            the smaller pool it is timed on (at least 1 launch).
        reps: timed repetitions (median).
        microbatch: the workload microbatch whose buffers the workload kernels use.
        log: progress printer.
        gemm: a ``hw_runtime.gpu.blas.GemmPolicy`` (None: stock); GEMMs are captured planned
            for the pool they run on.
        family: any decode family (``family_class_kernels``): the classes the region has, its
            own dense GEMM where it has one, the synthetic ones otherwise; ``classes`` not
            available are dropped. False: a GPT-OSS region (``workload_class_kernels``).

    Returns:
        ``{"classes", "kernels": {class: {name, key}}, "launches": {class: n},
        "alone": [{class, sms, us}], "pairs": [{a, b, sms_a, sms_b, a_alone_us, b_alone_us,
        a_corun_us, b_corun_us_per_graph, b_replays, a_slowdown, clock}]}``; per-graph times.

    Raises:
        ValueError: unknown class, or a split the partition cannot grant.
    """
    from subgpu_jax.model.calibration import kernel_key
    from hw_runtime.gpu.partition import GreenPartition
    from hw_runtime.gpu.blas import GemmPolicy

    bad = [c for c in classes if c not in CLASSES]
    if bad:
        raise ValueError(f"corun: unknown class(es) {bad}; allowed: {', '.join(CLASSES)}")
    torch = wl.torch
    pol = gemm if gemm is not None else GemmPolicy(torch, "stock")
    g = wl.graph
    idx = family_class_kernels(g) if family else workload_class_kernels(g)
    if family:
        classes = [c for c in classes if c in idx or c in ("dense_gemm", "copy")]
    L = g.num_regions
    M, K, N = DENSE_GEMM_MKN
    Wg = torch.randn(K, N, dtype=torch.bfloat16, device=wl.device) * 0.02
    Xg = torch.randn(M, K, dtype=torch.bfloat16, device=wl.device)
    Yg = torch.empty(M, N, dtype=torch.bfloat16, device=wl.device)
    nc = COPY_BYTES // 2
    src = [torch.randn(nc, dtype=torch.bfloat16, device=wl.device) for _ in range(4)]
    dst = torch.empty(nc, dtype=torch.bfloat16, device=wl.device)

    def fn_of(c: str) -> Callable[..., Any]:
        """``f(r, sms=None, lane=0)``: launch r of class ``c`` issued on a pool of ``sms`` SMs
        (None: the whole GPU) from stream ``lane`` (read by the workload's kernels only)."""
        if c in idx:
            i = idx[c]
            return lambda r, sms=None, lane=0, i=i: wl.launch(i, microbatch, r % L, sms=sms,
                                                              lane=lane)
        if c == "dense_gemm":
            return lambda r, sms=None, lane=0: torch.mm(Xg, Wg, out=Yg)
        return lambda r, sms=None, lane=0: dst.copy_(src[r % len(src)])

    syn = synthetic_kernels()
    kinfo = {c: ({"name": g.kernels[idx[c]].name, "key": kernel_key(g.kernels[idx[c]])}
                 if c in idx else {"name": syn[c].name, "key": kernel_key(syn[c]),
                                   "synthetic": True}) for c in classes}
    out: dict = {"classes": list(classes), "kernels": kinfo, "launches": {}, "alone": [],
                 "pairs": [], "splits": [list(s) for s in splits], "target_us": target_us,
                 "protocol": "spin-gated start (host launch excluded)", "gemm": pol.policy}
    t0 = time.time()
    for a, b in splits:
        with GreenPartition([int(a), int(b)], streams_per_pool=1) as part:
            sa, sb = part.stream(0, 0), part.stream(1, 0)
            ga_, gb_, ta_, tb_ = {}, {}, {}, {}
            for c in classes:
                # launches sized on a one-launch probe on pool a
                pa, pb = int(part.granted[0]), int(part.granted[1])
                fc, kc = fn_of(c), kinfo[c]["key"]
                pol.prepare(kc, pa, lambda: fc(0), sa)     # (timed as issued on the whole GPU)
                # pool-sized kernels: pool a, lane 0
                g1 = capture_graph(torch, sa, lambda r: fc(r, pa, 0), 1)
                t1 = time_alone(torch, g1, sa, 3)
                del g1
                n = out["launches"].setdefault(c, max(1, min(64, int(round(target_us / t1)))))
                ga_[c] = capture_graph(torch, sa, lambda r: fc(r, pa, 0), n)
                pol.prepare(kc, pb, lambda: fc(0), sb)
                gb_[c] = capture_graph(torch, sb, lambda r: fc(r, pb, 1), n)   # pool b, lane 1
                pol.reset()
                ta_[c] = time_alone(torch, ga_[c], sa, reps)
                tb_[c] = time_alone(torch, gb_[c], sb, reps)
                out["alone"].append({"class": c, "sms": int(part.granted[0]), "us": ta_[c],
                                     "launches": n})
                out["alone"].append({"class": c, "sms": int(part.granted[1]), "us": tb_[c],
                                     "launches": n})
            for ca in classes:
                for cb in classes:
                    rb = max(2, int(math.ceil(ta_[ca] / tb_[cb])) + 2)
                    with ClockSampler() as clk:
                        a_co, b_co = time_corun(torch, ga_[ca], sa, gb_[cb], sb, rb, reps)
                    out["pairs"].append({"a": ca, "b": cb, "sms_a": int(part.granted[0]),
                                         "sms_b": int(part.granted[1]),
                                         "launches_a": out["launches"][ca],
                                         "launches_b": out["launches"][cb],
                                         "a_alone_us": ta_[ca], "b_alone_us": tb_[cb],
                                         "a_corun_us": a_co, "b_corun_us_per_graph": b_co,
                                         "b_replays": rb, "a_slowdown": a_co / ta_[ca] - 1.0,
                                         "clock": clk.summary()})
            del ga_, gb_
            torch.cuda.synchronize()
        log(f"  co-run split {a}/{b} done ({time.time() - t0:.0f} s)")
    with ClockSampler() as clk:
        time.sleep(0.05)
    out["idle_clock"] = clk.summary()
    return out


def event_latency(torch, n: int = 200, reps: int = 5) -> dict:
    """Cost of a cross-stream dependency inside a CUDA graph (µs per dependency).

    Two graphs of ``n`` tiny kernels (an in-place add on 1 KiB): one on a single stream, one
    alternating between two streams with an event record + wait before each kernel, so every
    kernel depends on the previous one through an event. The difference per kernel is the extra
    latency of an inter-stream dependency over stream order.

    Returns:
        ``{"n", "one_stream_us", "two_streams_us", "per_kernel_us", "per_dependency_us"}``.
    """
    x = torch.zeros(256, dtype=torch.float32, device="cuda")
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()

    def one(r=0):
        x.add_(1.0)

    g1 = capture_graph(torch, s1, one, n)
    g2 = torch.cuda.CUDAGraph()
    with torch.cuda.stream(s1):
        one()
    torch.cuda.synchronize()
    with torch.cuda.graph(g2, stream=s1):
        fork = torch.cuda.Event()
        fork.record(s1)
        s2.wait_event(fork)
        cur, oth = s1, s2
        for _ in range(n):
            with torch.cuda.stream(cur):
                x.add_(1.0)
            e = torch.cuda.Event()
            e.record(cur)
            oth.wait_event(e)
            cur, oth = oth, cur
        j = torch.cuda.Event()
        j.record(s2)
        s1.wait_event(j)
    torch.cuda.synchronize()
    t1 = time_alone(torch, g1, s1, reps)
    t2 = time_alone(torch, g2, s1, reps)
    del g1, g2
    return {"n": n, "one_stream_us": t1, "two_streams_us": t2, "per_kernel_us": t1 / n,
            "per_dependency_us": (t2 - t1) / n}


#: Ordered pairs (first launched, second launched) of ``lane_sharing``.
LANE_PAIRS: tuple[tuple[str, str], ...] = (
    ("attn", "dense_gemm"), ("dense_gemm", "attn"), ("attn", "expert_gemm"),
    ("expert_gemm", "attn"), ("dense_gemm", "dense_gemm"), ("attn", "attn"),
    ("attn", "elementwise"), ("elementwise", "attn"))

#: Clock cycles the second stream waits after the common start (about 2 µs at 1980 MHz), so
#: the first kernel is dispatched first.
SECOND_DELAY_CYCLES: int = 4_000


def lane_sharing(wl, sms: int = 64, pairs: Sequence[tuple[str, str]] = LANE_PAIRS,
                 reps: int = 5, microbatch: int = 0, log: Callable[[str], None] = print,
                 lane_priority: bool = False, family: bool = False) -> dict:
    """How two streams of ONE green-context pool share its SMs (needs a GPU).

    For each ordered pair (A, B): one launch of A on stream 0 and one launch of B on stream 1
    of a pool of ``sms`` SMs, B enqueued ``SECOND_DELAY_CYCLES`` after A from a common
    spin-gated start; the times at which A and B end (from the start) against their alone
    times. If the block scheduler serves the first-launched kernel first (FIFO), A ends near its
    alone time and B near alone(A) + alone(B); if the pool is shared equally, A ends later than
    alone(A) by about min(alone(A), alone(B)).

    Args:
        wl: a CUDA ``TorchWorkload`` of a GPT-OSS graph (attn, elementwise, expert_gemm); the
            synthetic dense GEMM is allocated here. sms: the pool. pairs: class pairs
            (``CLASSES``). reps: timed repetitions (median). microbatch: buffers used.
        lane_priority: the pool's streams get CUDA priorities (``GreenPartition``); A then
            goes on the LOW-priority stream and B, enqueued later, on the high-priority one, so
            the result says whether a later kernel of a higher-priority lane is served first.
        family: any decode family's region (``family_class_kernels``; its own dense GEMM where
            it has one); False: a GPT-OSS region (``workload_class_kernels``).

    Returns:
        ``{"sms", "pairs": [{a, b, a_alone_us, b_alone_us, a_end_us, b_end_us,
        a_end_over_alone, b_end_over_sum}], "protocol"}``.

    Raises:
        ValueError: unknown class.
    """
    from hw_runtime.gpu.partition import GreenPartition

    torch = wl.torch
    bad = {c for p in pairs for c in p} - set(CLASSES)
    if bad:
        raise ValueError(f"lane_sharing: unknown class(es) {sorted(bad)}; allowed: "
                         f"{', '.join(CLASSES)}")
    idx = family_class_kernels(wl.graph) if family else workload_class_kernels(wl.graph)
    missing = {c for p in pairs for c in p} - set(idx) - {"dense_gemm", "copy"}
    if missing:
        raise ValueError(f"lane_sharing: the region has no kernel of class(es) "
                         f"{sorted(missing)}")
    L = wl.graph.num_regions
    M, K, N = DENSE_GEMM_MKN
    Wg = torch.randn(K, N, dtype=torch.bfloat16, device=wl.device) * 0.02
    Xg = torch.randn(M, K, dtype=torch.bfloat16, device=wl.device)
    Yg = [torch.empty(M, N, dtype=torch.bfloat16, device=wl.device) for _ in range(2)]

    def fn_of(c: str, lane: int, sms: int) -> Callable[[int], Any]:
        """``f(r)``: launch r of class ``c`` on a pool of ``sms`` SMs from stream ``lane``."""
        if c == "dense_gemm" and c not in idx:
            return lambda r: torch.mm(Xg, Wg, out=Yg[lane])
        i = idx[c]
        return lambda r, i=i: wl.launch(i, microbatch, (r + lane) % L, sms=sms, lane=lane)

    out: dict = {"sms": int(sms), "pairs": [],
                 "protocol": "one launch each; B enqueued %d cycles after A from a common "
                             "spin-gated start; ends read with CUDA events" % SECOND_DELAY_CYCLES}
    out["lane_priority"] = bool(lane_priority)
    with GreenPartition([int(sms)], streams_per_pool=2, lane_priority=lane_priority) as part:
        s0, s1 = part.stream(0, 0), part.stream(0, 1)
        if lane_priority:          # A (first) on the low-priority lane, B on the high one
            s0, s1 = s1, s0
        out["sms"] = int(part.granted[0])
        for a, b in pairs:
            ga = capture_graph(torch, s0, fn_of(a, 0, out["sms"]), 1)
            gb = capture_graph(torch, s1, fn_of(b, 1, out["sms"]), 1)
            ta, tb = time_alone(torch, ga, s0, reps), time_alone(torch, gb, s1, reps)
            a_end, b_end = time_corun(torch, ga, s0, gb, s1, 1, reps,
                                       b_delay_cycles=SECOND_DELAY_CYCLES)
            out["pairs"].append({"a": a, "b": b, "a_alone_us": ta, "b_alone_us": tb,
                                 "a_end_us": a_end, "b_end_us": b_end,
                                 "a_end_over_alone": a_end / ta,
                                 "b_end_over_sum": b_end / (ta + tb)})
            log(f"  lanes {a:12s} then {b:12s}: A {ta:7.1f} -> ends {a_end:7.1f} µs, "
                f"B {tb:7.1f} -> ends {b_end:7.1f} µs")
            del ga, gb
    return out
