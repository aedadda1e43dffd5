"""Two large kernels on the two lanes (streams) of ONE SM pool: the event simulator's sharing
rules against the lane microbenchmarks of 5 families on the H200 and the H100, and one fitted
law, ``pool_sharing="tail"`` (issue 39, item 3). CPU only.

Data (microbenchmarks, not validation rows): ``hw_runtime.gpu.corun.lane_sharing`` through
``corun_families.py --phase lanes``. Kernel A is launched on stream 0 of one green-context pool,
kernel B on stream 1 after a spin of 4,000 cycles (about 2 µs) from a common spin-gated start;
the file gives A's and B's alone times on that pool and their end times from the start.

* H200 (2026-12-02): ``results/corun_families/lanes_<workload>.json``, Llama-3.1-8B, Mixtral,
  Qwen3-30B-A3B; pool 128 SMs, 2 microbatches; expert GEMMs were cuBLAS ``bmm`` then.
* H100 (2026-12-06): ``results/corun_families/h100/lanes_<workload>_m<M>.json``, the same plus
  Qwen3-8B and DeepSeek-V3; pools 128, 64, 32 SMs; 2 and 4 microbatches; expert GEMMs are the
  grouped Triton kernel (one launch) by then.

Classes (``hw_runtime.gpu.corun.family_class_kernels``): ``attn`` (the region's full-attention
op), ``elementwise`` (RMSNorm), ``dense_gemm`` (``mlp_up``; DeepSeek-V3's shared experts),
``expert_gemm`` (``expert_up``). Each class is ONE simulator ``Kernel`` (one graph op) of
``corun_families.WORKLOADS[name]`` built on the GPU's preset (``get_hardware("H200"|"H100")``,
``hopper_arch``, ``graph(microbatches)``); the runtime launches several device kernels for most
of them (``mlp_up``: GEMM + fused SiLU x mul; attention: SDPA + output copy, or DeepSeek's Triton
MLA split + merge; ``expert_up``: one grouped Triton launch on the H100 data, ``bmm`` + fused
SwiGLU on the H200 data; RMSNorm: one Triton kernel).

Protocol: A on lane 0 and B on lane 1 of one pool (``EventSimulator(..., pool_of_stage)``,
cache off: the benchmark rotates region instances far larger than the L2). The simulator has no
job offset, so B's job waits for a delay job of ``--delay-us`` µs (a FLOP-only kernel solved for
that time) on a third lane with its own 1-SM pool, which moves no bytes. Predicted ratios use
the SIMULATOR's own alone times (A's end / sim alone(A), B's end / (sim alone(A) + sim
alone(B))), never the measured µs: the laws are judged on sharing, not on lone-kernel error.
Error of a ratio: ln(predicted / measured); a law's score is the mean |ln| over the A and B
ratios of its pairs.

Laws: ``fifo`` (``simstate.share_pool_fifo``, the default when this was fitted) and ``fair``
(``share_pool``); ``tail`` (``simstate.share_pool_tail``): launch order, but an op whose op
kind issues more than one device kernel (``kernelcost.device_kernels`` on the preset's kernel
profile) and is launched first shares the pool with the later kernels in proportion to their
remaining alone times (``Lane.remaining_us``), the later ones weighted theta
(``ContentionModel.tail_weight``; 0 = fifo), dispatched by ``EventSimulator``.

Fit: theta on ``--grid`` by the score. Leave one family out, GPUs pooled: theta fitted on the
other four families' pairs of both GPUs, scored on the left-out family's pairs (also per GPU:
fitted and scored on one GPU's pairs only). A sensitivity run counts device kernels as the
runtime launched them (``expert_up`` one kernel on the H100 data) instead of the model's table.

Output: ``--digest`` (default ``results/corun_lanes_fit.json``) and a table on stdout.
Units: µs, SMs; errors are natural logs of ratios.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from subgpu_jax.model.checks import finite, out_file  # noqa: E402
from subgpu_jax.model.graph import Deployment, Kernel  # noqa: E402
from subgpu_jax.model.hardware import get_hardware  # noqa: E402
from subgpu_jax.model.kernelcost import device_kernels  # noqa: E402
from subgpu_jax.model.models import MODELS  # noqa: E402
from subgpu_jax.model.workload import Workload  # noqa: E402
from subgpu_jax.sim.contention import ContentionModel  # noqa: E402
from subgpu_jax.sim.eventsim import EventSimulator, simulate_streams  # noqa: E402
from corun_families import WORKLOADS  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
DATA = os.path.join(RESULTS, "corun_families")
DIGEST = os.path.join(RESULTS, "corun_lanes_fit.json")
GRID = tuple(round(0.1 * i, 1) for i in range(16))       # theta 0.0 .. 1.5
GPUS = ("H200", "H100")
CLASSES = ("attn", "elementwise", "dense_gemm", "expert_gemm")
#: Device kernels the runtime launched per op where the model's table (``kernelcost``) differs,
#: by GPU of the data: the grouped Triton expert GEMM (one launch) was the default by the H100
#: run, the H200 run used ``bmm`` + the fused SwiGLU (two).
RUNTIME_KERNELS = {("H100", "expert_up"): 1, ("H200", "expert_up"): 2}


def lane_simulator(*args, kernels_of=None, **kw) -> EventSimulator:
    """An ``EventSimulator`` (same arguments) whose ``tails`` (ops with trailing device kernels,
    for ``pool_sharing="tail"``) come from ``kernels_of(kernel)`` -> device kernels its op issues
    (None: the simulator's own, ``kernelcost.device_kernels`` on ``hw``'s profile)."""
    sim = EventSimulator(*args, **kw)
    if kernels_of is not None:
        sim.tails = [kernels_of(k) > 1 for k in sim.kernels]
    return sim


# ------------------------------------------------------------------------------------- data
def _gpu_of(doc: dict, default: str | None, path: str) -> str:
    name = doc.get("gpu")
    if name is None:
        if default is None:
            raise ValueError(f"--data: {path}: no 'gpu' field")
        return default
    for g in GPUS:
        if g in str(name):
            return g
    raise ValueError(f"--data: {path}: gpu {name!r} is neither an H200 nor an H100")


def load_pairs(folder: str) -> list[dict]:
    """Every measured pair under ``folder`` (``lanes_*.json``: the H200 run unless the file names
    its GPU; ``h100/lanes_*.json``), one dict per pair: gpu, family, workload, microbatches, sms,
    a, b, a_alone_us, b_alone_us, a_end_us, b_end_us, a_end_over_alone, b_end_over_sum.

    Raises:
        ValueError: no such folder, no files, or a file that is not a lane-sharing result
            (names the file and what is wrong).
    """
    if not os.path.isdir(folder):
        raise ValueError(f"--data: {folder} is not a folder")
    files = [(p, "H200") for p in sorted(glob.glob(os.path.join(folder, "lanes_*.json")))]
    files += [(p, None) for p in sorted(glob.glob(os.path.join(folder, "h100", "lanes_*.json")))]
    if not files:
        raise ValueError(f"--data: no lanes_*.json under {folder}")
    out = []
    for path, default in files:
        rel = os.path.relpath(path, RESULTS)
        try:
            with open(path) as fh:
                doc = json.load(fh)
            wl, fam, mb = doc["workload"], doc["family"], int(doc["microbatches"])
            pools = doc.get("pools") or [doc]
            gpu = _gpu_of(doc, default, rel)
            if wl not in WORKLOADS or WORKLOADS[wl][2] != fam:
                raise ValueError(f"workload {wl!r} of family {fam!r} is not one of "
                                 "corun_families.WORKLOADS")
            for pool in pools:
                for q in pool["pairs"]:
                    if q["a"] not in CLASSES or q["b"] not in CLASSES:
                        raise ValueError(f"class pair {q['a']!r}, {q['b']!r}")
                    row = dict(gpu=gpu, family=fam, workload=wl, microbatches=mb,
                               sms=int(pool["sms"]), a=q["a"], b=q["b"], source=rel)
                    for k in ("a_alone_us", "b_alone_us", "a_end_us", "b_end_us",
                              "a_end_over_alone", "b_end_over_sum"):
                        row[k] = finite(q[k], f"{rel}: {k}", lo=0.0, lo_open=True)
                    out.append(row)
        except (OSError, KeyError, TypeError, ValueError) as e:
            raise ValueError(f"--data: {rel}: not a lane-sharing result "
                             f"({e.__class__.__name__}: {e})") from None
    return out


# ------------------------------------------------------------------------------- simulation
class PairSimulator:
    """Predicts the two ratios of a measured pair under one ``ContentionModel``.

    Args:
        delay_us: B's start after A's (µs, > 0). kernel_counts: ``"model"`` (the preset's
            kernel profile) or ``"runtime"`` (``RUNTIME_KERNELS`` where they differ).
    """

    def __init__(self, delay_us: float, kernel_counts: str = "model") -> None:
        self.delay_us, self.counts = float(delay_us), kernel_counts
        self._kernels: dict = {}
        self._alone: dict = {}
        self._delay: dict = {}

    def kernels(self, gpu: str, workload: str, mb: int) -> dict[str, Kernel]:
        """Class -> the simulator's ``Kernel`` of that class (one graph op each)."""
        from hw_runtime.gpu.corun import family_class_kernels
        from hw_runtime.gpu.workload import hopper_arch

        key = (gpu, workload, mb)
        if key not in self._kernels:
            model, fields, _ = WORKLOADS[workload]
            wl = Workload.from_model(hopper_arch(MODELS[model]), Deployment(**fields),
                                     get_hardware(gpu))
            g = wl.graph(mb)
            self._kernels[key] = {c: g.kernels[i] for c, i in family_class_kernels(g).items()}
        return self._kernels[key]

    def delay_kernel(self, gpu: str) -> Kernel:
        """A FLOP-only kernel that lasts ``delay_us`` alone on 1 SM (launch included)."""
        if gpu not in self._delay:
            hw, m = get_hardware(gpu), ContentionModel()

            def k(f: float) -> Kernel:
                return Kernel(name="delay", op="delay", category="norm_qkv", layer=0, flops=f,
                              dtype="bf16", tensor=False, ctas=1)
            t0 = simulate_streams([(1, [k(0.0)])], hw, m, "none").makespan
            t1 = simulate_streams([(1, [k(1e6)])], hw, m, "none").makespan
            if not t0 < self.delay_us:
                raise ValueError(f"--delay-us must exceed the launch overhead {t0:g} µs of "
                                 f"{gpu}, got {self.delay_us:g}")
            self._delay[gpu] = k((self.delay_us - t0) / (t1 - t0) * 1e6)
        return self._delay[gpu]

    def alone(self, k: Kernel, sms: int, gpu: str) -> float:
        key = (gpu, k, sms)
        if key not in self._alone:
            self._alone[key] = float(simulate_streams([(sms, [k])], get_hardware(gpu),
                                                      ContentionModel(), "none").makespan)
        return self._alone[key]

    def ratios(self, row: dict, model: ContentionModel) -> tuple[float, float]:
        """(A end / sim alone(A), B end / (sim alone(A) + sim alone(B))) of ``row``."""
        gpu, sms = row["gpu"], row["sms"]
        ks = self.kernels(gpu, row["workload"], row["microbatches"])
        a, b, d = ks[row["a"]], ks[row["b"]], self.delay_kernel(gpu)
        hw = get_hardware(gpu)
        jobs = [(0, (), 0, 0, (0,)), (2, (), 0, 0, (2,)), (1, (1,), 0, 0, (1,))]
        if self.counts == "runtime":
            def kernels_of(k: Kernel) -> int:
                return RUNTIME_KERNELS.get((gpu, k.op), device_kernels(k, hw.kernel_profile))
        else:
            kernels_of = None
        r = lane_simulator([a, b, d], [sms, sms, 1], jobs, hw, model, "none", record=False,
                           pool_of_stage=[0, 0, 1], kernels_of=kernels_of).run()
        if abs(float(r.task_end[1]) - self.delay_us) > 1e-6 * self.delay_us:
            raise RuntimeError(f"delay job ended at {r.task_end[1]} µs, not {self.delay_us}")
        ta, tb = self.alone(a, sms, gpu), self.alone(b, sms, gpu)
        return float(r.task_end[0]) / ta, float(r.task_end[2]) / (ta + tb)


def predict(rows: list[dict], sim: PairSimulator, model: ContentionModel) -> list[dict]:
    """Per row: predicted ratios and ln(pred / meas) of A's and B's (keys pa, pb, ea, eb)."""
    out = []
    for r in rows:
        pa, pb = sim.ratios(r, model)
        out.append({"pa": pa, "pb": pb, "ea": math.log(pa / r["a_end_over_alone"]),
                    "eb": math.log(pb / r["b_end_over_sum"])})
    return out


# ------------------------------------------------------------------------------------ scores
def score(preds: list[dict]) -> float:
    """Mean |ln(pred / meas)| over the A and B ratios."""
    return statistics.fmean([abs(p["ea"]) for p in preds] + [abs(p["eb"]) for p in preds])


def stats(preds: list[dict]) -> dict:
    """n, score, and per ratio (A, B): median and max |ln|, median signed pred / meas."""
    out = {"n": len(preds), "score": round(score(preds), 4)}
    for k in ("a", "b"):
        e = [p["e" + k] for p in preds]
        out[k] = {"median_abs_ln": round(statistics.median(abs(x) for x in e), 4),
                  "max_abs_ln": round(max(abs(x) for x in e), 4),
                  "median_pred_over_meas": round(math.exp(statistics.median(e)), 4)}
    return out


def _pick(preds: list[dict], idx: list[int]) -> list[dict]:
    return [preds[i] for i in idx]


def _fit(by_theta: dict[float, list[dict]], idx: list[int]) -> float:
    """theta of the grid with the lowest score on rows ``idx`` (ties: the smallest)."""
    return min(by_theta, key=lambda t: (round(score(_pick(by_theta[t], idx)), 12), t))


def analyse(rows: list[dict], grid: tuple[float, ...], delay_us: float,
            counts: str = "model") -> dict:
    """Predictions of every rule and theta, the LOFO fits and the grouped errors (digest)."""
    sim = PairSimulator(delay_us, counts)
    base = {"fifo": predict(rows, sim, ContentionModel()),
            "fair": predict(rows, sim, ContentionModel(pool_sharing="fair"))}
    by_theta = {t: predict(rows, sim, ContentionModel(pool_sharing="tail", tail_weight=t))
                for t in grid}
    if 0.0 in by_theta:     # theta = 0 is fifo exactly (share_pool_tail's limit)
        dev = max(abs(p["pa"] - q["pa"]) + abs(p["pb"] - q["pb"])
                  for p, q in zip(by_theta[0.0], base["fifo"]))
        if dev > 1e-9:
            raise RuntimeError(f"tail at theta 0 differs from fifo by {dev:g}")
    fams = sorted({r["family"] for r in rows})
    every = list(range(len(rows)))
    theta_all = _fit(by_theta, every)
    lofo, lofo_pred = {}, [None] * len(rows)
    for f in fams:
        inside = [i for i, r in enumerate(rows) if r["family"] == f]
        rest = [i for i in every if rows[i]["family"] != f]
        t = _fit(by_theta, rest)
        for i in inside:
            lofo_pred[i] = by_theta[t][i]
        lofo[f] = {"theta_fitted_without": t, "pairs": len(inside),
                   "score_fifo": round(score(_pick(base["fifo"], inside)), 4),
                   "score_fair": round(score(_pick(base["fair"], inside)), 4),
                   "score_tail_lofo": round(score(_pick(by_theta[t], inside)), 4),
                   "theta_best_for_family": _fit(by_theta, inside)}
    per_gpu = {}
    for g in GPUS:
        gi = [i for i in every if rows[i]["gpu"] == g]
        gf = sorted({rows[i]["family"] for i in gi})
        if len(gf) < 2:
            continue
        per_gpu[g] = {}
        for f in gf:
            inside = [i for i in gi if rows[i]["family"] == f]
            t = _fit(by_theta, [i for i in gi if rows[i]["family"] != f])
            per_gpu[g][f] = {"theta_fitted_without": t, "pairs": len(inside),
                             "score_fifo": round(score(_pick(base["fifo"], inside)), 4),
                             "score_fair": round(score(_pick(base["fair"], inside)), 4),
                             "score_tail_lofo": round(score(_pick(by_theta[t], inside)), 4)}
    laws = {"fifo": base["fifo"], "fair": base["fair"], "tail_lofo": lofo_pred}

    def grouped(key) -> dict:
        groups: dict = {}
        for i, r in enumerate(rows):
            groups.setdefault(key(r), []).append(i)
        return {" / ".join(map(str, k)): {law: stats(_pick(p, idx)) for law, p in laws.items()}
                for k, idx in sorted(groups.items())}
    pairs = []
    for i, r in enumerate(rows):
        pairs.append({**{k: r[k] for k in ("gpu", "family", "workload", "microbatches", "sms",
                                           "a", "b", "a_end_over_alone", "b_end_over_sum")},
                      **{f"{law}_{k}": round(p[i]["p" + k], 4) for law, p in laws.items()
                         for k in ("a", "b")},
                      "theta_lofo": lofo[r["family"]]["theta_fitted_without"]})
    return {"kernel_counts": counts, "theta_all_families": theta_all,
            "score_all_families": {"fifo": round(score(base["fifo"]), 4),
                                   "fair": round(score(base["fair"]), 4),
                                   "tail_at_theta_all": round(score(by_theta[theta_all]), 4),
                                   "tail_lofo": round(score(lofo_pred), 4)},
            "score_by_theta": {str(t): round(score(p), 4) for t, p in by_theta.items()},
            "leave_one_family_out": lofo, "leave_one_family_out_per_gpu": per_gpu,
            "by_family_gpu_pool": grouped(lambda r: (r["family"], r["gpu"], r["sms"])),
            "by_pair_class": grouped(lambda r: (r["a"], r["b"])),
            "by_gpu": grouped(lambda r: (r["gpu"],)),
            "pairs": pairs}


# ------------------------------------------------------------------------------------ report
def print_table(res: dict) -> None:
    lofo = res["leave_one_family_out"]
    print(f"mean |ln(pred/meas)| of A's and B's ratios, leave one family out (GPUs pooled; "
          f"device kernels: {res['kernel_counts']})")
    print(f"{'left out':12s} {'pairs':>5s} {'fifo':>7s} {'fair':>7s} {'tail':>7s} "
          f"{'theta':>6s} {'best':>6s}")
    for f, v in lofo.items():
        print(f"{f:12s} {v['pairs']:5d} {v['score_fifo']:7.3f} {v['score_fair']:7.3f} "
              f"{v['score_tail_lofo']:7.3f} {v['theta_fitted_without']:6.1f} "
              f"{v['theta_best_for_family']:6.1f}")
    s = res["score_all_families"]
    print(f"{'all':12s} {len(res['pairs']):5d} {s['fifo']:7.3f} {s['fair']:7.3f} "
          f"{s['tail_lofo']:7.3f}   all-family theta {res['theta_all_families']:.1f} "
          f"-> {s['tail_at_theta_all']:.3f}")
    print("\nby family / GPU / pool (tail at the family's LOFO theta): score and max |ln| of A")
    print(f"{'family / GPU / SMs':26s} {'n':>3s}  {'fifo':>12s}  {'fair':>12s}  {'tail':>12s}")
    for k, v in res["by_family_gpu_pool"].items():
        cells = [f"{v[law]['score']:.3f} {v[law]['a']['max_abs_ln']:5.2f}"
                 for law in ("fifo", "fair", "tail_lofo")]
        print(f"{k:26s} {v['fifo']['n']:3d}  " + "  ".join(f"{c:>12s}" for c in cells))
    print("\nby pair class (A then B): median |ln| A, B and median pred/meas of A")
    print(f"{'A then B':26s} {'n':>3s}  {'fifo':>17s}  {'fair':>17s}  {'tail (LOFO)':>17s}")
    for k, v in res["by_pair_class"].items():
        cells = [f"{v[law]['a']['median_abs_ln']:.2f} {v[law]['b']['median_abs_ln']:.2f} "
                 f"x{v[law]['a']['median_pred_over_meas']:.2f}"
                 for law in ("fifo", "fair", "tail_lofo")]
        print(f"{k:26s} {v['fifo']['n']:3d}  " + "  ".join(f"{c:>17s}" for c in cells))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=DATA,
                    help="folder of lanes_*.json (H200) and h100/lanes_*.json")
    ap.add_argument("--digest", default=DIGEST, help="output JSON (default %(default)s)")
    ap.add_argument("--grid", type=float, nargs="+", default=list(GRID),
                    help="theta values (>= 0) of the fit. Default 0.0 .. 1.5 step 0.1")
    ap.add_argument("--delay-us", type=float, default=2.0,
                    help="B's launch after A's (µs; the benchmark's 4,000-cycle spin at "
                         "~2 GHz). Default 2.0")
    args = ap.parse_args(argv)
    try:
        digest = out_file(args.digest, "--digest")
        grid = tuple(sorted({finite(t, "--grid value", lo=0.0) for t in args.grid}))
        delay = finite(args.delay_us, "--delay-us", lo=0.0, lo_open=True)
        rows = load_pairs(args.data)
        t0 = time.time()
        res = analyse(rows, grid, delay)
        sens = analyse(rows, grid, delay, counts="runtime")
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    sources = sorted({r["source"] for r in rows})
    doc = {"protocol": __doc__.split("\n\n")[0].replace("\n", " "),
           "sources": sources, "grid": list(grid), "delay_us": delay,
           "score": "mean over pairs of |ln(pred/meas)| of A end / A alone and of "
                    "B end / (A alone + B alone); predictions normalised by the simulator's "
                    "own alone times",
           "law": "tail: simstate.share_pool_tail, theta = ContentionModel.tail_weight",
           "model": res, "sensitivity_runtime_kernel_counts": {
               k: sens[k] for k in ("kernel_counts", "theta_all_families",
                                    "score_all_families", "score_by_theta",
                                    "leave_one_family_out", "leave_one_family_out_per_gpu",
                                    "by_family_gpu_pool", "by_pair_class")}}
    with open(digest, "w") as fh:
        json.dump(doc, fh, indent=1)
    print_table(res)
    print()
    print_table(sens)
    print(f"\n{len(rows)} pairs, {time.time() - t0:.0f} s; wrote {digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
