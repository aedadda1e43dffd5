"""Disjoint SM pools on one NVIDIA GPU with CUDA Green Contexts (docs/method.md §6).

``GreenPartition([64, 64], streams_per_pool=2)`` splits the device's SMs ONCE into disjoint pools
through the driver API (``cuda.bindings.driver``), creates one green context per pool and
``streams_per_pool`` non-blocking streams in each, and wraps every stream as a
``torch.cuda.ExternalStream`` so that PyTorch work launched under ``with torch.cuda.stream(s)``
runs only on that pool's SMs::

    with GreenPartition([64, 64]) as part:
        with torch.cuda.stream(part.stream(0)):
            ...                                  # runs on pool 0's 64 SMs
        part.probe()                             # bf16 GEMM on each pool: SM-proportional?

How the split is made (one driver call, never independent creations, which may overlap):

* ``method="split"`` (CUDA 13.1+ drivers): ``cuDevSmResourceSplit`` with one
  ``CU_DEV_SM_RESOURCE_GROUP_PARAMS`` per pool (``smCount`` = the pool size,
  ``coscheduledSmCount`` = the device's ``smCoscheduledAlignment``): pools of different sizes
  from one call; the SMs left over form the unstructured remainder, which gets no context.
* ``method="bycount"`` (CUDA 12.4+): ``cuDevSmResourceSplitByCount`` only makes equal groups, so
  ONE call splits ``sum(pools)/g`` groups of ``g = gcd(pools)`` SMs and each pool's descriptor is
  generated from its share of them (``cuDevResourceGenerateDesc`` accepts several SM resources
  from the same split call); if the driver cannot make that many groups, the pools are split off
  one at a time, each from the previous call's remainder (``"chain"``; disjoint by construction).
* ``method="auto"``: ``split`` when the driver has it, else ``bycount``.

Seen on the H200 of this project (driver 580.159, CUDA 13.0, cuda-bindings 13.3.1):
``cuDevSmResourceSplit`` is NOT in that driver ("Function not found"), so ``auto`` uses
``bycount``; ``cuDevSmResourceSplitByCount`` makes at most 15 groups of 8 SMs in one call (not
16) but 2 of 64 or 4 of 32, and rounds a single request up to the quantum (66 -> 72,
100 -> 104). Splitting a remainder directly is refused, so the chain goes through a green context
made from the remainder ("bycount-chain-desc-viactx"): that is how [8, 120] and 16 pools of 8 SMs
were granted exactly. Every pool's GEMM probe ran at 0.86-1.0x the SM-proportional speed and
running all pools at once slowed each by only 2-11% (disjoint); see docs/results.md
"Runtime probes on the H200".

Constraints are read from the device's SM resource, never hard-coded: the pool quantum is
``smCoscheduledAlignment`` and the minimum pool ``minSmPartitionSize`` (both 8 on compute
capability 9.0, so an H200's 132 SMs give at most 16 aligned groups, 128 SMs). A request that the
driver cannot grant exactly is refused with a one-line ``ValueError`` unless ``round_up=True``,
which rounds each pool up to the quantum/minimum and reports it in ``notes``. After creation the
granted SM count of every pool is read back (``cuGreenCtxGetDevResource``) and must equal the plan,
and every stream is checked to belong to its pool's green context (``cuStreamGetGreenCtx``): a
stream from the wrong context silently runs on the whole GPU. ``probe()`` times a compute-bound
bf16 GEMM on each pool against the whole GPU to catch a silent fall-back to the whole GPU (this
catches pools up to ~80% of the device; a 120-of-132 pool cannot be told from the whole GPU by
timing).

Errors: ``ValueError`` for a request that cannot be granted (names the pool and the rule);
``GreenContextUnavailable`` when torch, cuda-bindings, a GPU or green-context support is missing;
``GreenContextError`` for a driver failure or a failed verification. Whatever was created is
destroyed before an error leaves the constructor/``open``; ``close`` (also via ``__exit__``, also
on error) destroys streams and contexts.

Importing this module needs neither torch nor cuda-bindings (CI has no GPU).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Sequence

from hw_runtime.gpu.greenctx import (GreenContextError, GreenContextUnavailable, SmInfo,
                                     check_call, device_sm_info, green_contexts_available,
                                     import_driver, import_torch, plan_pools)

__all__ = [
    "GreenContextError", "GreenContextUnavailable", "SmInfo", "Pool", "GreenPartition",
    "plan_pools", "device_sm_info", "green_contexts_available",
]


# --------------------------------------------------------------------------- the partition

@dataclass
class Pool:
    """One SM pool: its green context and streams.

    Attributes:
        index: position in the request.
        requested: SMs asked for.
        granted: SMs the green context holds (read back from the driver).
        green_ctx: the ``CUgreenCtx`` handle.
        cu_streams: the driver ``CUstream`` handles.
        streams: the same streams as ``torch.cuda.ExternalStream``.
    """

    index: int
    requested: int
    granted: int = 0
    green_ctx: Any = None
    cu_streams: list = field(default_factory=list)
    streams: list = field(default_factory=list)


class GreenPartition:
    """Disjoint SM pools, one green context and ``streams_per_pool`` streams each.

    Args:
        sms: SMs of each pool, e.g. ``[64, 64]``; multiples of the device quantum, each at least
            the minimum, summing to at most the aligned budget (128 on an H200).
        streams_per_pool: non-blocking streams per green context (>= 1, default 2).
        device: CUDA ordinal.
        round_up: round pools up to the quantum/minimum instead of refusing (see ``notes``).
        method: ``"auto"`` (``split`` if the driver has it, else ``bycount``), ``"split"``
            (cuDevSmResourceSplit, CUDA 13.1+ drivers), ``"bycount"`` (cuDevSmResourceSplitByCount:
            equal groups of gcd(pools) from one call, else the chain) or ``"chain"`` (each pool
            split off the previous remainder); ``method_used`` says which one worked.
        verify: check every stream's green context right after creation.
        open: create everything in the constructor (default); else call ``open()`` or use
            ``with``.
        lane_priority: give stream j of every pool the j-th highest CUDA stream priority
            (``cuCtxGetStreamPriorityRange``), so the block scheduler serves lane 0 first when
            lanes of a pool compete; default False (all streams priority 0).

    Raises:
        ValueError: a request that cannot be granted (from ``plan_pools``) or bad arguments.
        GreenContextUnavailable: no torch / cuda-bindings / GPU / green-context support.
        GreenContextError: a driver failure or failed verification; nothing stays allocated.
    """

    METHODS = ("auto", "split", "bycount", "chain")

    def __init__(self, sms: Sequence[int], streams_per_pool: int = 2, device: int = 0,
                 round_up: bool = False, method: str = "auto", verify: bool = True,
                 open: bool = True, lane_priority: bool = False) -> None:
        if isinstance(streams_per_pool, bool) or not isinstance(streams_per_pool, int) \
                or streams_per_pool < 1:
            raise ValueError(f"GreenPartition: streams_per_pool must be a positive integer, "
                             f"got {streams_per_pool!r}")
        if method not in self.METHODS:
            raise ValueError(f"GreenPartition: method must be one of {', '.join(self.METHODS)}, "
                             f"got {method!r}")
        self.requested = tuple(sms) if not isinstance(sms, (str, bytes)) else sms
        self.streams_per_pool = streams_per_pool
        self.lane_priority = bool(lane_priority)
        self.device = int(device)
        self.round_up = bool(round_up)
        self.method = method
        self.method_used: str | None = None
        self.verify_on_open = verify
        self.pools: list[Pool] = []
        self.notes: tuple[str, ...] = ()
        self.info: SmInfo | None = None
        self.remainder_sms: int = 0
        self._drv = None
        self._torch = None
        self._open = False
        self._aux_ctx: list = []
        if open:
            self.open()

    # ---------------------------------------------------------------- lifecycle
    def open(self) -> "GreenPartition":
        """Split the SMs and create contexts and streams (idempotent).

        Raises:
            see the class docstring; on any error everything created so far is destroyed.
        """
        if self._open:
            return self
        torch = import_torch()
        drv = import_driver()
        info = device_sm_info(self.device)
        planned, notes = plan_pools(self.requested, info, self.round_up)
        self._torch, self._drv, self.info, self.notes = torch, drv, info, notes
        # The primary context must be current and initialised before green contexts are made
        # (cuGreenCtxCreate retains it); torch's first CUDA call does that.
        torch.cuda.set_device(self.device)
        torch.cuda.synchronize(self.device)
        self.pools = [Pool(index=i, requested=int(r)) for i, r in enumerate(self.requested)]
        try:
            dev = check_call(drv, drv.cuDeviceGet(self.device), "cuDeviceGet")
            whole = check_call(drv, drv.cuDeviceGetDevResource(
                dev, drv.CUdevResourceType.CU_DEV_RESOURCE_TYPE_SM), "cuDeviceGetDevResource")
            groups_per_pool = self._split(drv, whole, planned, info, dev)
            for pool, res, want in zip(self.pools, groups_per_pool, planned):
                desc = check_call(drv, drv.cuDevResourceGenerateDesc(list(res), len(res)),
                              f"cuDevResourceGenerateDesc(pool {pool.index})")
                pool.green_ctx = check_call(drv, drv.cuGreenCtxCreate(
                    desc, dev, int(drv.CUgreenCtxCreate_flags.CU_GREEN_CTX_DEFAULT_STREAM)),
                    f"cuGreenCtxCreate(pool {pool.index})")
                got = check_call(drv, drv.cuGreenCtxGetDevResource(
                    pool.green_ctx, drv.CUdevResourceType.CU_DEV_RESOURCE_TYPE_SM),
                    f"cuGreenCtxGetDevResource(pool {pool.index})")
                pool.granted = int(got.sm.smCount)
                if pool.granted != want:
                    raise GreenContextError(
                        f"GreenPartition: pool {pool.index} was granted {pool.granted} SMs, "
                        f"{want} were asked for (method {self.method_used})")
                prio = [0] * self.streams_per_pool
                if self.lane_priority:   # lower numbers are higher priorities in CUDA
                    least, greatest = check_call(drv, drv.cuCtxGetStreamPriorityRange(),
                                             "cuCtxGetStreamPriorityRange")
                    prio = [min(int(greatest) + j, int(least)) for j in range(len(prio))]
                for j in range(self.streams_per_pool):
                    s = check_call(drv, drv.cuGreenCtxStreamCreate(
                        pool.green_ctx, int(drv.CUstream_flags.CU_STREAM_NON_BLOCKING), prio[j]),
                        f"cuGreenCtxStreamCreate(pool {pool.index})")
                    pool.cu_streams.append(s)
                    pool.streams.append(torch.cuda.ExternalStream(int(s), device=self.device))
            self._open = True
            if self.verify_on_open:
                self.verify_streams()
        except BaseException:
            self._open = True
            try:
                self.close()
            except Exception:  # pragma: no cover - the original error matters more
                pass
            raise
        return self

    def _split(self, drv, whole, planned: tuple[int, ...], info: SmInfo, dev=None
               ) -> list[list]:
        """One split call; returns the list of SM resources making each pool."""
        method = self.method
        if method in ("auto", "split"):
            has = hasattr(drv, "cuDevSmResourceSplit") and hasattr(
                drv, "CU_DEV_SM_RESOURCE_GROUP_PARAMS")
            if has:
                try:
                    return self._split_structured(drv, whole, planned, info)
                except GreenContextError as e:
                    if method == "split":
                        raise
                    self.notes = self.notes + (f"cuDevSmResourceSplit refused ({e}); "
                                               "fell back to cuDevSmResourceSplitByCount",)
                except RuntimeError as e:  # binding present, driver symbol missing
                    if method == "split":
                        raise GreenContextUnavailable(
                            f"GreenPartition: cuDevSmResourceSplit is not in this driver "
                            f"({e})") from None
                    self.notes = self.notes + (f"cuDevSmResourceSplit unavailable ({e}); "
                                               "fell back to cuDevSmResourceSplitByCount",)
            elif method == "split":
                raise GreenContextUnavailable("GreenPartition: cuDevSmResourceSplit is not in "
                                              "these cuda-bindings (CUDA 13.1+ needed)")
        return self._split_bycount(drv, whole, planned, info, dev)

    def _split_structured(self, drv, whole, planned, info) -> list[list]:
        params = []
        for p in planned:
            g = drv.CU_DEV_SM_RESOURCE_GROUP_PARAMS()
            g.smCount = int(p)
            g.coscheduledSmCount = int(info.unit)
            g.preferredCoscheduledSmCount = 0
            g.flags = 0
            params.append(g)
        out = check_call(drv, drv.cuDevSmResourceSplit(len(planned), whole, 0, params),
                     f"cuDevSmResourceSplit({list(planned)})")
        result, remainder = out[0], out[1]
        if len(result) != len(planned):
            raise GreenContextError(f"GreenPartition: cuDevSmResourceSplit returned "
                                    f"{len(result)} groups, {len(planned)} were asked for")
        self.method_used = "split"
        self.remainder_sms = int(remainder.sm.smCount) if remainder is not None else 0
        return [[r] for r in result]

    def _split_bycount(self, drv, whole, planned, info, dev=None) -> list[list]:
        """cuDevSmResourceSplitByCount, which only makes equal groups. Strategies, in order:

        1. ``gcd``: ONE call splitting ``sum/g`` groups of g = gcd(pools) SMs, each pool's
           descriptor made from its share of those groups (all from one split: disjoint);
        2. ``chain``: the pools split off one at a time, each from the previous call's remainder
           (largest first, then smallest first): disjoint by construction, since a remainder
           never holds SMs of the groups split from it. If the driver refuses to split a
           remainder, it is first made into a (temporary) green context whose SM resource is
           split instead (the documented way to split a split result again).

        Seen on an H200 with driver 580 (CUDA 13.0): 16 groups of 8 SMs are refused (15 is the
        most), so ``[8, 120]`` needs the chain (through a context, since splitting a remainder
        directly is refused), while ``[64, 64]`` and ``[32, 96]`` take one call.
        """
        tried = []
        g = 0
        for p in planned:
            g = math.gcd(g, int(p))
        if self.method != "chain":
            n = sum(planned) // g
            try:
                result, count, remainder = check_call(
                    drv, drv.cuDevSmResourceSplitByCount(n, whole, 0, g),
                    f"cuDevSmResourceSplitByCount({n} x {g})")
                sizes = [int(r.sm.smCount) for r in result[:int(count)]]
                if int(count) >= n and all(sz == g for sz in sizes[:n]):
                    out, k = [], 0
                    for p in planned:
                        out.append(list(result[k:k + p // g]))
                        k += p // g
                    self.method_used = f"bycount-gcd{g}"
                    self.remainder_sms = info.sm_count - sum(planned)
                    return out
                tried.append(f"{n} groups of {g}: driver gave {int(count)} of {sorted(set(sizes))}")
            except GreenContextError as e:
                tried.append(f"{n} groups of {g}: {e}")
        idx = list(range(len(planned)))
        for name, order in (("desc", sorted(idx, key=lambda i: -planned[i])),
                            ("asc", sorted(idx, key=lambda i: planned[i]))):
            cur, got, via_ctx, aux = whole, {}, False, []
            try:
                for step, i in enumerate(order):
                    p = int(planned[i])
                    try:
                        r = check_call(drv, drv.cuDevSmResourceSplitByCount(1, cur, 0, p),
                                   f"cuDevSmResourceSplitByCount(1 x {p})")
                    except GreenContextError:
                        if step == 0 or dev is None:
                            raise
                        # split the remainder through a green context made from it
                        desc = check_call(drv, drv.cuDevResourceGenerateDesc([cur], 1),
                                      "cuDevResourceGenerateDesc(remainder)")
                        gc = check_call(drv, drv.cuGreenCtxCreate(desc, dev, int(
                            drv.CUgreenCtxCreate_flags.CU_GREEN_CTX_DEFAULT_STREAM)),
                            "cuGreenCtxCreate(remainder)")
                        aux.append(gc)
                        self._aux_ctx.append(gc)
                        cur = check_call(drv, drv.cuGreenCtxGetDevResource(
                            gc, drv.CUdevResourceType.CU_DEV_RESOURCE_TYPE_SM),
                            "cuGreenCtxGetDevResource(remainder)")
                        via_ctx = True
                        r = check_call(drv, drv.cuDevSmResourceSplitByCount(1, cur, 0, p),
                                   f"cuDevSmResourceSplitByCount(1 x {p}) of a remainder")
                    result, count, remainder = r
                    sz = int(result[0].sm.smCount) if int(count) >= 1 else 0
                    if sz != p:
                        raise GreenContextError(f"pool {i}: {p} SMs asked, {sz} given")
                    got[i] = [result[0]]
                    cur = remainder
                self.method_used = f"bycount-chain-{name}" + ("-viactx" if via_ctx else "")
                self.remainder_sms = info.sm_count - sum(planned)
                return [got[i] for i in idx]
            except GreenContextError as e:
                tried.append(f"chain {name}: {e}")
                for gc in aux:  # temporary contexts of a failed attempt
                    try:
                        drv.cuGreenCtxDestroy(gc)
                    except Exception:  # pragma: no cover
                        pass
                    self._aux_ctx.remove(gc)
        raise GreenContextError("GreenPartition: the driver cannot split " +
                                f"{list(planned)} exactly ({'; '.join(tried)})")

    def close(self) -> None:
        """Synchronise and destroy every stream and green context (idempotent).

        Raises:
            GreenContextError: a destroy call failed (after attempting all of them).
        """
        if not self._open:
            return
        drv, torch = self._drv, self._torch
        errors = []
        try:
            torch.cuda.synchronize(self.device)
        except Exception as e:  # pragma: no cover
            errors.append(f"synchronize: {e}")
        for pool in self.pools:
            for s in pool.cu_streams:
                try:
                    check_call(drv, drv.cuStreamSynchronize(s), "cuStreamSynchronize")
                    check_call(drv, drv.cuStreamDestroy(s), "cuStreamDestroy")
                except Exception as e:
                    errors.append(str(e))
            pool.cu_streams, pool.streams = [], []
            if pool.green_ctx is not None:
                try:
                    check_call(drv, drv.cuGreenCtxDestroy(pool.green_ctx), "cuGreenCtxDestroy")
                except Exception as e:
                    errors.append(str(e))
                pool.green_ctx = None
        for gc in self._aux_ctx:  # contexts made only to split a remainder
            try:
                check_call(drv, drv.cuGreenCtxDestroy(gc), "cuGreenCtxDestroy(remainder)")
            except Exception as e:
                errors.append(str(e))
        self._aux_ctx = []
        self._open = False
        if errors:
            raise GreenContextError("GreenPartition.close: " + "; ".join(errors))

    def __enter__(self) -> "GreenPartition":
        return self.open()

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            self.close()
        except GreenContextError:
            if exc_type is None:
                raise

    def __del__(self) -> None:  # pragma: no cover - last resort
        try:
            self.close()
        except Exception:
            pass

    # ---------------------------------------------------------------- access
    @property
    def is_open(self) -> bool:
        """True between ``open`` and ``close``."""
        return self._open

    @property
    def granted(self) -> tuple[int, ...]:
        """SMs each pool holds (read back from the driver)."""
        return tuple(p.granted for p in self.pools)

    def _need_open(self) -> None:
        if not self._open:
            raise GreenContextError("GreenPartition: the partition is closed")

    def stream(self, pool: int, i: int = 0):
        """Stream ``i`` of pool ``pool`` as a ``torch.cuda.ExternalStream``.

        Raises:
            ValueError: index out of range. GreenContextError: partition closed.
        """
        self._need_open()
        if not 0 <= pool < len(self.pools):
            raise ValueError(f"GreenPartition: pool must be in 0..{len(self.pools) - 1}, "
                             f"got {pool}")
        if not 0 <= i < self.streams_per_pool:
            raise ValueError(f"GreenPartition: stream index must be in "
                             f"0..{self.streams_per_pool - 1}, got {i}")
        return self.pools[pool].streams[i]

    def streams(self, pool: int) -> list:
        """All streams of pool ``pool``."""
        self._need_open()
        return list(self.pools[pool].streams)

    def verify_streams(self) -> list[list[bool]]:
        """Check that every stream belongs to its pool's green context (cuStreamGetGreenCtx).

        Returns:
            ``ok[pool][stream]`` (all True when it returns).

        Raises:
            GreenContextError: a stream reports another (or no) green context.
        """
        self._need_open()
        drv = self._drv
        out = []
        for pool in self.pools:
            row = []
            for j, s in enumerate(pool.cu_streams):
                g = check_call(drv, drv.cuStreamGetGreenCtx(s), "cuStreamGetGreenCtx")
                ok = int(g) == int(pool.green_ctx) and int(g) != 0
                if not ok:
                    raise GreenContextError(
                        f"GreenPartition: stream {j} of pool {pool.index} belongs to green "
                        f"context {int(g):#x}, not its pool's {int(pool.green_ctx):#x}")
                row.append(ok)
            out.append(row)
        return out

    def probe(self, n: int = 8192, iters: int = 5, warmup: int = 1, check: bool = True,
              min_ratio: float = 0.7, all_streams: bool = False, concurrent: bool = True
              ) -> dict:
        """Time a compute-bound bf16 GEMM (n x n x n) on each pool and on the whole GPU.

        A pool of p SMs out of N should be about N/p times slower than the whole GPU; ``ratio`` =
        measured slowdown / (N/p) is ~0.9-1.1 when the pool is honoured and ~p/N when its kernels
        silently ran on the whole GPU.

        Args:
            n: matrix size (8192: 1.1 TFLOP, ~1.4 ms on a whole H200).
            iters: timed launches per pool (median taken).
            warmup: untimed launches first.
            check: raise when a pool's ratio is below ``min_ratio`` (only for pools of at most
                80% of the SMs, where a fall-back is distinguishable by timing).
            min_ratio: threshold of that check.
            all_streams: probe every stream of every pool, not just stream 0.
            concurrent: also run the GEMM on all pools at once (``concurrent``: per-pool ms
                and ratio to the isolated time; ~1 for disjoint pools).

        Returns:
            ``{"full_ms", "flop", "pools": [{"pool", "stream", "granted", "ms", "tflops",
            "slowdown", "expected_slowdown", "ratio", "ok"}], "concurrent": [{"pool", "ms",
            "isolated_ms", "ratio_to_isolated"}] or None}``.

        Raises:
            GreenContextError: the partition is closed, or (``check``) a pool ran too fast.
        """
        self._need_open()
        torch = self._torch
        N = self.info.sm_count
        a = torch.randn(n, n, device=f"cuda:{self.device}", dtype=torch.bfloat16)
        b = torch.randn(n, n, device=f"cuda:{self.device}", dtype=torch.bfloat16)
        c = torch.empty(n, n, device=f"cuda:{self.device}", dtype=torch.bfloat16)
        flop = 2.0 * n ** 3

        def timed(stream) -> float:
            ts = []
            with torch.cuda.stream(stream):
                for _ in range(warmup):
                    torch.mm(a, b, out=c)
                for _ in range(iters):
                    e0 = torch.cuda.Event(enable_timing=True)
                    e1 = torch.cuda.Event(enable_timing=True)
                    e0.record(stream)
                    torch.mm(a, b, out=c)
                    e1.record(stream)
                    e1.synchronize()
                    ts.append(e0.elapsed_time(e1))
            return statistics.median(ts)

        full_stream = torch.cuda.Stream(device=self.device)
        full = timed(full_stream)
        rows = []
        for pool in self.pools:
            for j in range(len(pool.streams) if all_streams else 1):
                ms = timed(pool.streams[j])
                slow = ms / full
                exp = N / pool.granted
                ratio = slow / exp
                distinguishable = pool.granted <= 0.8 * N
                ok = (ratio >= min_ratio) or not distinguishable
                rows.append(dict(pool=pool.index, stream=j, granted=pool.granted, ms=ms,
                                 tflops=flop / ms / 1e9, slowdown=slow, expected_slowdown=exp,
                                 ratio=ratio, ok=bool(ok), distinguishable=bool(distinguishable)))
                if check and not ok:
                    raise GreenContextError(
                        f"GreenPartition: pool {pool.index} ({pool.granted} SMs) ran the probe "
                        f"GEMM in {ms:.3f} ms, {slow:.2f}x the whole GPU's {full:.3f} ms; "
                        f"{exp:.2f}x was expected: its kernels are not confined to the pool")
        conc = self._probe_concurrent(a, b, n, iters, warmup) if concurrent else None
        if conc is not None:
            iso = {r["pool"]: r["ms"] for r in rows if r["stream"] == 0}
            for c_ in conc:
                c_["isolated_ms"] = iso[c_["pool"]]
                c_["ratio_to_isolated"] = c_["ms"] / iso[c_["pool"]]
        del a, b, c
        return {"full_ms": full, "flop": flop, "n": n, "sm_count": N, "pools": rows,
                "concurrent": conc}

    def _probe_concurrent(self, a, b, n, iters, warmup) -> list[dict]:
        """The same GEMM on every pool at once. Disjoint pools each keep close to their isolated
        time (ratio_to_isolated ~1-1.2; HBM and L2 are shared); pools sharing SMs would slow
        each other down to about the sum of their times."""
        torch = self._torch
        outs = [torch.empty(n, n, device=a.device, dtype=a.dtype) for _ in self.pools]
        ss = [p.streams[0] for p in self.pools]
        for s, c in zip(ss, outs):
            with torch.cuda.stream(s):
                for _ in range(warmup):
                    torch.mm(a, b, out=c)
        torch.cuda.synchronize(self.device)
        go = torch.cuda.Event()
        go.record(torch.cuda.current_stream(self.device))
        evs = []
        for s, c in zip(ss, outs):
            s.wait_event(go)
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            with torch.cuda.stream(s):
                e0.record(s)
                for _ in range(iters):
                    torch.mm(a, b, out=c)
                e1.record(s)
            evs.append((e0, e1))
        torch.cuda.synchronize(self.device)
        return [dict(pool=p.index, granted=p.granted, ms=e0.elapsed_time(e1) / iters)
                for p, (e0, e1) in zip(self.pools, evs)]

    def summary(self) -> dict:
        """JSON-able description: requested/granted SMs, method, remainder, notes, device."""
        i = self.info
        return {
            "requested": list(self.requested), "granted": list(self.granted),
            "method": self.method_used, "remainder_sms": self.remainder_sms,
            "notes": list(self.notes), "streams_per_pool": self.streams_per_pool,
            "device": None if i is None else {
                "name": i.name, "sm_count": i.sm_count, "quantum": i.quantum,
                "min_partition": i.min_partition, "aligned_budget": i.aligned_budget,
                "max_pools": i.max_pools, "compute_capability": list(i.compute_capability),
                "driver_version": i.driver_version},
        }

    def __repr__(self) -> str:
        state = "open" if self._open else "closed"
        return (f"GreenPartition(requested={list(self.requested)}, granted={list(self.granted)}, "
                f"method={self.method_used}, {state})")
