"""FlashInfer's batch decode attention over the runtime's KV caches (issue 23, item 2).

The runtime's GQA caches are ``(R, kvh, L, hd)`` per layer, every one of the ``L`` positions
attended to. FlashInfer's ``BatchDecodeWithPagedKVCacheWrapper`` reads paged caches with
arbitrary strides (``paged_kv_t``'s strided constructor, ``include/flashinfer/page.cuh``), so the
caches are read in place as pages of ``page`` positions in the ``HND`` layout: page ``(b, j)``
of request ``b`` is ``k[b, :, j*page:(j+1)*page, :]``, addressed as page number ``b * kvh *
(L/page) + j`` of a view whose page stride is ``page * hd`` and whose head stride is ``L * hd``
(``paged_view``; pages of other heads overlap in the address space but no index names them).
Nothing is copied and the cache layout of the other policies is unchanged.

The tensor-core decode (FlashInfer's FA2 prefill kernels with one query row per request, the
path serving engines take for grouped heads) is used because only it accepts a fixed KV split:
the split is set from the pool's SMs with the same rule as the Triton kernel
(``kv_split.num_kv_splits`` over ``R x kvh`` programs), so a kernel on a 32-SM green
context does not size its grid for all 132 SMs of the H200. ``plan`` runs once per (batch, pool
size) on the first eager call (the executor's warm-up pass, outside graph capture) and never
again, so its index buffers keep their addresses and later calls replay in CUDA graphs.

Measured on the H200 with FlashInfer 0.7.2 (docs/results.md, "Kernel choices"): within 1-3% of SDPA's cuDNN
kernel on the whole GPU, 1.12-1.23x slower alone on 32-96 SMs, and its ``"fa3"`` kernels 4-11x
slower at one query row; ``--attention auto`` therefore never picks it.

Memory: each wrapper holds a ``WORKSPACE_BYTES`` float workspace (and FlashInfer's own index
buffers), one per (KV length, pool size, lane) of each workload; ``estimate_bytes`` does not
count them (a pipelined run makes a few; a calibration over many pools and microbatch counts
tens, under 3 GiB).

Needs the ``flashinfer-python`` package (and its JIT: the CUDA toolkit's ``nvcc``) only when a
kernel runs; ``available`` and the page arithmetic are pure Python (tested on the CPU).
"""

from __future__ import annotations

import importlib.util
import math

from subgpu_jax.model.checks import choice, pos_int

from hw_runtime.gpu.kv_split import num_kv_splits

__all__ = ["available", "page_size", "paged_view", "page_indices", "split_pages",
           "FlashInferDecode", "WORKSPACE_BYTES", "MAX_PAGE", "MISSING", "BACKENDS", "HEAD_DIMS",
           "check_importable", "page_index_tensor"]

#: FlashInfer's float workspace per wrapper, bytes: the split partials (``R x qh x S x hd``
#: float32) and the merge's log-sum-exps; 64 MiB holds 2,048 requests x 8 heads x 8 splits x
#: 128 dims x 4 bytes (32 MiB) with room (FlashInfer's docs recommend 128 MiB for serving,
#: sized for prefill too).
WORKSPACE_BYTES = 64 << 20
#: FlashInfer's tensor-core decode kernel families this module plans (``FlashInferDecode``).
BACKENDS = ("fa2", "fa3")
#: The one line a run without the package gets.
MISSING = ("--attention flashinfer needs the flashinfer-python package (pip install "
           "flashinfer-python); use sdpa, triton or auto")
#: Head dims the runtime hands FlashInfer (the ones its decode kernels are generated for in
#: serving engines; 64 and 128 run in this repository's GPU tests).
HEAD_DIMS = (64, 128, 256)
#: The largest page: FlashInfer's FA2 tiles read 64-128 positions per step, so pages of 128
#: keep one index lookup per tile.
MAX_PAGE = 128


def available() -> bool:
    """``flashinfer`` is installed (found on the path; nothing is imported here, so a package
    whose own dependencies are missing still counts: ``check_importable`` imports it)."""
    return importlib.util.find_spec("flashinfer") is not None


def check_importable() -> None:
    """Import ``flashinfer`` once (1-2 s on first use).

    Raises:
        ValueError: ``MISSING``, with the import's own error where it is installed but fails
            (a missing dependency, say).
    """
    if not available():
        raise ValueError(MISSING)
    try:
        import flashinfer  # noqa: F401
    except Exception as e:  # noqa: BLE001  (any import failure is the same refusal)
        raise ValueError(f"{MISSING} (it is installed but does not import: "
                         f"{type(e).__name__}: {e})") from None


def page_size(kv_len: int) -> int:
    """The page the caches are read as: the largest power of two <= ``MAX_PAGE`` dividing
    ``kv_len`` (every page full, so the last page's length is ``page``).

    Raises:
        ValueError: ``kv_len`` not a positive int.

    Example: 1,024 -> 128; 1,000 -> 8; 4,097 -> 1.
    """
    pos_int(kv_len, "flashinfer page_size: kv_len")
    return math.gcd(kv_len, MAX_PAGE)


def split_pages(requests: int, kv_heads: int, kv_len: int, sms: int) -> int:
    """FlashInfer's ``fixed_split_size`` (pages per split) for a pool of ``sms`` SMs: the KV
    splits of ``kv_split.num_kv_splits(requests * kv_heads, kv_len, sms)`` rounded to whole
    pages.

    Raises:
        ValueError: a non-positive argument.

    Example: 32 requests x 8 KV heads, 16,384 positions, 132 SMs: 256 programs need 2 splits
    (``ceil(264 / 256)``), so 64 of the 128 pages of 128 positions each.
    """
    for name, v in (("requests", requests), ("kv_heads", kv_heads), ("kv_len", kv_len),
                    ("sms", sms)):
        pos_int(v, f"flashinfer split_pages: {name}")
    page = page_size(kv_len)
    pages = kv_len // page
    splits = num_kv_splits(requests * kv_heads, kv_len, sms)
    return math.ceil(pages / splits)


def paged_view(torch, cache, page: int):
    """``cache`` ``(R, kvh, L, hd)`` (last dim contiguous, ``L`` a multiple of ``page``) as an
    ``HND`` page tensor ``(n_pages, kvh, page, hd)`` over the same memory (no copy): page
    ``b * kvh * (L // page) + j`` is positions ``j*page ...`` of request ``b`` (module
    docstring). Only the page numbers ``page_indices`` returns are valid pages.

    Raises:
        ValueError: a page that is not a positive int, or a layout this view cannot express.
    """
    pos_int(page, "flashinfer paged_view: page")
    R, kvh, L, hd = cache.shape
    sb, sh, sl, sd = cache.stride()
    if sd != 1 or sl != hd or sh != L * hd or L % page:
        raise ValueError("flashinfer paged_view: the cache must be (R, kvh, L, hd) with the "
                         f"last three dims contiguous and L a multiple of {page}; got shape "
                         f"{tuple(cache.shape)}, strides {cache.stride()}")
    per = L // page
    if R > 1 and sb != kvh * L * hd:
        raise ValueError("flashinfer paged_view: requests must be contiguous in the cache, got "
                         f"stride {sb} for {kvh * L * hd}")
    n_pages = (R - 1) * kvh * per + per
    return torch.as_strided(cache, (n_pages, kvh, page, hd), (page * hd, L * hd, hd, 1))


def _check_pages(name: str, requests, kv_heads, kv_len, page) -> int:
    for nm, v in (("requests", requests), ("kv_heads", kv_heads), ("kv_len", kv_len),
                  ("page", page)):
        pos_int(v, f"flashinfer {name}: {nm}")
    if kv_len % page:
        raise ValueError(f"flashinfer {name}: kv_len {kv_len} must be a multiple of page {page}")
    return kv_len // page


def page_indices(requests: int, kv_heads: int, kv_len: int, page: int) -> list[int]:
    """The page numbers of ``paged_view`` request by request: ``b * kv_heads * P + j`` for
    ``j < P = kv_len // page`` (length ``requests * P``; pure Python, the oracle of
    ``page_index_tensor``).

    Raises:
        ValueError: a non-positive argument, or ``kv_len`` not a multiple of ``page``.
    """
    per = _check_pages("page_indices", requests, kv_heads, kv_len, page)
    return [b * kv_heads * per + j for b in range(requests) for j in range(per)]


def page_index_tensor(torch, requests: int, kv_heads: int, kv_len: int, page: int):
    """``page_indices`` as an int32 CPU tensor, built without a Python loop (2,048 requests of
    32,769 one-position pages are 67 M indices).

    Raises:
        ValueError: as ``page_indices``.
    """
    per = _check_pages("page_index_tensor", requests, kv_heads, kv_len, page)
    b = torch.arange(requests, dtype=torch.int64).unsqueeze(1) * (kv_heads * per)
    return (b + torch.arange(per, dtype=torch.int64).unsqueeze(0)).reshape(-1).to(torch.int32)


class FlashInferDecode:
    """One ``BatchDecodeWithPagedKVCacheWrapper`` per (requests, pool size), planned on first
    use (module docstring).

    Args:
        torch: the torch module. requests, qo_heads, kv_heads, head_dim, kv_len: the shapes
            (query ``(R, qh, hd)``, caches ``(R, kvh, L, hd)``). dtype: the caches' and the
            query's dtype (bf16/fp16). device: the CUDA device. pool_split: the KV split from
            the pool's SMs (``split_pages``; the runtime's choice); False leaves it to
            FlashInfer's planner, which sizes it for the whole GPU (kept to measure the
            difference, ``experiments/kernel_choice_h200.py``). backend: FlashInfer's kernel
            family, one of ``BACKENDS`` (``"fa2"``, the default; ``"fa3"``: its Hopper kernels).

    Raises:
        ValueError: ``flashinfer`` not installed, or bad shapes.
    """

    def __init__(self, torch, requests: int, qo_heads: int, kv_heads: int, head_dim: int,
                 kv_len: int, dtype, device, pool_split: bool = True,
                 backend: str = "fa2") -> None:
        check_importable()
        for name, v in (("requests", requests), ("qo_heads", qo_heads),
                        ("kv_heads", kv_heads), ("head_dim", head_dim), ("kv_len", kv_len)):
            pos_int(v, f"FlashInferDecode: {name}")
        if qo_heads % kv_heads:
            raise ValueError(f"FlashInferDecode: qo_heads {qo_heads} must be a multiple of "
                             f"kv_heads {kv_heads}")
        choice(head_dim, "FlashInferDecode: head_dim", HEAD_DIMS)
        self.torch, self.R, self.qh, self.kvh = torch, requests, qo_heads, kv_heads
        self.hd, self.L, self.dtype, self.device = head_dim, kv_len, dtype, device
        self.page = page_size(kv_len)
        self.pool_split = bool(pool_split)
        self.backend = choice(backend, "FlashInferDecode: backend", BACKENDS)
        self._wrappers: dict[tuple[int, int], object] = {}

    def _wrapper(self, sms: int, lane: int):
        w = self._wrappers.get((sms, lane))
        if w is not None:
            return w
        import flashinfer

        t = self.torch
        per = self.L // self.page
        n = self.R * per
        ws = t.zeros(WORKSPACE_BYTES, dtype=t.uint8, device=self.device)
        # use_cuda_graph=False: FlashInfer's graph mode pads the batch for ITS split choice and
        # refuses a fixed split that makes more (request, split) rows (measured on the H200:
        # "new batch size should not exceed padded batch size"); a wrapper here is planned
        # once and never re-planned, so its buffers keep their addresses and run() replays in
        # a CUDA graph (tests/hw_runtime/test_flashinfer_attn.py)
        w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
            ws, "HND", use_cuda_graph=False, use_tensor_cores=True, backend=self.backend)
        w.plan(t.arange(0, n + 1, per, dtype=t.int32),
               page_index_tensor(t, self.R, self.kvh, self.L, self.page),
               t.full((self.R,), self.page, dtype=t.int32),
               self.qh, self.kvh, self.hd, self.page, q_data_type=self.dtype,
               kv_data_type=self.dtype, sm_scale=1.0 / math.sqrt(self.hd),
               fixed_split_size=(split_pages(self.R, self.kvh, self.L, sms) if self.pool_split
                                 else None))
        self._wrappers[(sms, lane)] = w
        return w

    def __call__(self, q, k, v, out, sms: int, lane: int = 0) -> None:
        """``out`` ``(R, qh, hd)`` <- attention of ``q`` ``(R, qh, hd)`` over ``k``, ``v``
        ``(R, kvh, L, hd)`` (scale ``1/sqrt(hd)``) on a pool of ``sms`` SMs, issued from stream
        ``lane`` (each (pool size, lane) has its own wrapper and workspace: calls that may run
        at the same time never share the split partials).

        Raises:
            ValueError: tensors whose shape, dtype or device differ from the plan, or a bad
                ``sms``/``lane``.
        """
        pos_int(sms, "FlashInferDecode: sms")
        if isinstance(lane, bool) or not isinstance(lane, int) or lane < 0:
            raise ValueError(f"FlashInferDecode: lane must be an int >= 0, got {lane!r}")
        want = {"q": (self.R, self.qh, self.hd), "k": (self.R, self.kvh, self.L, self.hd),
                "v": (self.R, self.kvh, self.L, self.hd), "out": (self.R, self.qh, self.hd)}
        d = self.torch.device(self.device)
        for nm, x in (("q", q), ("k", k), ("v", v), ("out", out)):
            same_dev = x.device.type == d.type and (d.index is None or x.device.index == d.index)
            if tuple(x.shape) != want[nm] or x.dtype != self.dtype or not same_dev:
                raise ValueError(f"FlashInferDecode: {nm} must be {want[nm]} {self.dtype} on "
                                 f"{self.device} as planned, got {tuple(x.shape)} {x.dtype} on "
                                 f"{x.device}")
        w = self._wrapper(int(sms), lane)
        w.run(q, (paged_view(self.torch, k, self.page), paged_view(self.torch, v, self.page)),
              out=out)
