"""The H200 green-context probe (docs/method.md §6): its two kernels (a bf16 GEMM and a 2 GiB
device copy), the measured times embedded from tests/data/h200_green_context_probe.csv, and the
contention model's prediction of them through the event simulator."""

from __future__ import annotations

from subgpu_jax.model.graph import Kernel
from subgpu_jax.model.hardware import Hardware
from subgpu_jax.sim.contention import ContentionModel


__all__ = ["H200_PROBE_MS", "H200_CORUN_MS", "probe_kernels", "predict_probe"]

#: tests/data/h200_green_context_probe.csv, embedded: granted SMs -> (mm_ms, copy_ms).
H200_PROBE_MS: dict[int, tuple[float, float]] = {
    16: (9.972, 3.594), 32: (5.044, 1.933), 64: (2.573, 1.183), 72: (2.287, 1.142),
    104: (1.664, 1.065), 128: (1.480, 1.015), 132: (1.3715, 1.0105),
}
#: Co-run probe (tests/data/CALIBRATION.md): GEMM on 64 SMs beside a copy on the other 68 SMs,
#: 3.22 ms per pair of launches vs 2.57 ms for the GEMM alone.
H200_CORUN_MS: tuple[float, float] = (3.22, 2.57)


def probe_kernels() -> tuple[Kernel, Kernel]:
    """The two kernels of the H200 green-context probe as ``graph.Kernel`` objects.

    Returns:
        ``(gemm, copy)``: torch.mm of two 8192x8192 bf16 matrices (2*8192^3 = 1.0995e12 FLOP,
        reads A and B, writes C, 128 MiB each; 4096 CTAs of 128x128 tiles), and a
        device-to-device copy of 2 GiB bf16 (reads 2 GiB, writes 2 GiB; one CTA per 64 KiB).
    """
    n = 8192
    mat = float(n * n * 2)
    gemm = Kernel(name="mm", op="gemm", category="mlp", layer=0, flops=2.0 * n ** 3,
                  dtype="bf16", tensor=True, act_reads=(("A", mat), ("B", mat)),
                  act_writes=(("C", mat),), ctas=(n // 128) ** 2)
    gib2 = float(2 * 2 ** 30)
    copy = Kernel(name="copy", op="copy", category="mlp", layer=0, flops=0.0, dtype="bf16",
                  tensor=False, act_reads=(("src", gib2),), act_writes=(("dst", gib2),),
                  ctas=int(gib2 // 2 ** 16))
    return gemm, copy


def predict_probe(hw: Hardware, model: ContentionModel | None = None,
                  cache: str = "lru") -> dict:
    """Model predictions of the H200 probe (``H200_PROBE_MS``, ``H200_CORUN_MS``).

    Each kernel is simulated alone on each pool (``eventsim.simulate_streams``); the co-run puts
    the GEMM on 64 SMs and back-to-back copies on the other 68 so that the copy stream stays busy
    for the whole GEMM (steady state), and also a single GEMM + single copy pair.

    Returns:
        ``{"pools": {sms: {"mm_ms", "copy_ms", "mm_meas_ms", "copy_meas_ms", "mm_err",
        "copy_err"}}, "corun": {"gemm_alone_ms", "gemm_corun_ms", "slowdown",
        "gemm_pair_ms", "slowdown_pair", "measured_slowdown"}}``; errors are relative
        (pred/meas - 1).
    """
    from subgpu_jax.sim.eventsim import simulate_streams

    model = ContentionModel() if model is None else model
    gemm, copy = probe_kernels()
    out: dict = {"pools": {}, "corun": {}}
    for p, (mm, cp) in H200_PROBE_MS.items():
        tm = simulate_streams([(p, [gemm])], hw, model, cache, record=False).makespan / 1e3
        tc = simulate_streams([(p, [copy])], hw, model, cache, record=False).makespan / 1e3
        out["pools"][p] = {"mm_ms": tm, "copy_ms": tc, "mm_meas_ms": mm, "copy_meas_ms": cp,
                           "mm_err": tm / mm - 1.0, "copy_err": tc / cp - 1.0}
    alone = simulate_streams([(64, [gemm])], hw, model, cache, record=False).makespan / 1e3
    r = simulate_streams([(64, [gemm]), (68, [copy] * 6)], hw, model, cache, record=False)
    co = float(r.task_end[0]) / 1e3
    r1 = simulate_streams([(64, [gemm]), (68, [copy])], hw, model, cache, record=False)
    pair = float(r1.makespan) / 1e3
    meas = H200_CORUN_MS[0] / H200_CORUN_MS[1] - 1.0
    out["corun"] = {"gemm_alone_ms": alone, "gemm_corun_ms": co, "slowdown": co / alone - 1.0,
                    "gemm_pair_ms": pair, "slowdown_pair": pair / alone - 1.0,
                    "measured_slowdown": meas}
    return out

