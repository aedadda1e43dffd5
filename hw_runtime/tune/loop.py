"""The loop of ``subgpu tune``: the simulator proposes, the GPU decides.

For rounds r = 1, 2, ...:

1. **search** (``subgpu_jax.app.searchrun.run_search``, folder ``DIR/round<r>/search``) with the
   round's model: the starting calibration (``--calibration``) or the uncalibrated model in
   round 1, the refit of everything traced so far afterwards;
2. **measure** on the GPU, per batch: the temporal baseline, the round's first candidate on plain
   streams (multistream) and the top K SubGPU candidates on green contexts (candidates already
   measured are not measured again);
3. **trace** one replay of the temporal baseline and of each green candidate (per-kernel
   durations for the refit);
4. **compare**: the round's model predicts every measured candidate as it ran; the round's
   error of a candidate is predicted speedup / measured speedup - 1 (speedups over the temporal
   baseline of the same batch and the same model);
5. stop when every measured candidate agrees within ``tolerance``, the budget of every batch is
   spent, the search proposes no new candidate, or after ``max_rounds``; else **refit**
   (``refit.refit_calibration``, written to ``DIR/calibration_round<r>.json``) and go on.

Then the best measured pipelined run of each batch (green or multistream) is **refined on the
GPU** (``refine.refine_on_gpu``: a green run's SM split and microbatch count, a multistream
run's microbatch count) and the winner of each batch is the fastest measured run of that
batch, the temporal baseline itself when nothing measured faster.

Budget: ``TuneSpec.budget_s`` GPU seconds per batch (measurements and traces; the searches run
on the CPU and are accounted apart). A measurement is not started when the batch's spent time
plus the median cost of its earlier ones would pass the budget.

Resume: the state (``state.TuneState``) is saved after every measurement, trace and round; the
loop is deterministic given its measurements, so a killed tune re-run with the same options
replays the rounds from its state and measures only what is missing.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from typing import Callable

from hw_runtime.tune.executor import TuneExecutor
from hw_runtime.tune.refit import refit_calibration, summarize_trace
from subgpu_jax.app.fingerprint import file_digest
from subgpu_jax.search.strategies import ALLOC_STRATEGIES, CUT_STRATEGY_REGISTRY, strategy_meta
from hw_runtime.tune.refine import refine_on_gpu
from hw_runtime.tune.spec import Candidate, Predictor, TuneSpec
from hw_runtime.tune.state import TuneState

__all__ = ["Tuner", "BudgetSpent", "speedup_errors"]


class BudgetSpent(Exception):
    """The batch's GPU-time budget does not cover another measurement."""


def speedup_errors(pred: dict[str, float | None], meas: dict[str, float],
                   cands: dict[str, Candidate]) -> dict[str, float]:
    """Relative error of each predicted speedup: (pred T_temporal / pred T) / (meas T_temporal /
    meas T) - 1, for every non-temporal candidate with a prediction and a measured temporal
    baseline of its batch.

    Args:
        pred, meas: candidate key -> makespan (µs). cands: key -> Candidate.
    """
    out = {}
    for key, c in cands.items():
        if c.mode == "temporal" or pred.get(key) is None or key not in meas:
            continue
        tk = Candidate.temporal(c.G).key
        if pred.get(tk) is None or tk not in meas:
            continue
        out[key] = (pred[tk] / pred[key]) / (meas[tk] / meas[key]) - 1.0
    return out


class Tuner:
    """One tune (module docstring).

    Args:
        spec: the options. executor: a ``TuneExecutor`` (the GPU, or a fake machine in tests).
        folder: the output folder (created; its state resumed).
        log: receives one line per step.
        elementwise: the runtime's resolved elementwise kernels (recorded in the refit).

    Raises:
        ValueError: bad options, a folder holding another tune, a starting calibration for
            another workload (one line).
    """

    def __init__(self, spec: TuneSpec, executor: TuneExecutor, folder: str,
                 log: Callable[[str], None] | None = None, elementwise: str | None = None
                 ) -> None:
        from subgpu_jax.model.calibration import load_calibration

        self.spec, self.ex, self.folder = spec, executor, folder
        self.log = log or (lambda line: None)
        self.elementwise = elementwise
        cal0 = None
        if spec.calibration:
            cal0 = load_calibration(spec.calibration, spec.arch, spec.deployment(spec.batches[0]),
                                    spec.hw)
        self.base = Predictor(spec, cal0)
        for G in spec.batches:        # memory-checked workloads, one line if one does not fit
            self.base.workload(G)
        self.state = TuneState(folder, spec.meta())
        self.cands: dict[str, Candidate] = {}
        for k, v in self.state.measurements.items():
            self.cands[k] = self.base.candidate(v["candidate"])
        self.spent_out: set[int] = set()
        self.measured_now = 0

    # ------------------------------------------------------------------ GPU, with the budget
    def _batch_gpu_s(self, G: int, kind: str) -> list[float]:
        src = self.state.measurements if kind == "m" else self.state.traces
        return [v["gpu_s"] for v in src.values() if int(v["candidate"]["G"]) == G]

    def spent(self, G: int) -> float:
        """GPU seconds spent on batch ``G`` (measurements and traces)."""
        return float(sum(self._batch_gpu_s(G, "m")) + sum(self._batch_gpu_s(G, "t")))

    def _afford(self, G: int, kind: str) -> None:
        prev = self._batch_gpu_s(G, kind)
        est = statistics.median(prev) if prev else 0.0
        if G in self.spent_out or self.spent(G) + est > self.spec.budget_s:
            if G not in self.spent_out:
                self.log(f"G={G}: GPU budget spent ({self.spent(G):.0f} of "
                         f"{self.spec.budget_s:.0f} s); no more measurements of this batch")
            self.spent_out.add(G)
            raise BudgetSpent

    def measure(self, c: Candidate, phase: str, rnd: int) -> float:
        """Measured makespan (µs) of ``c``: from the state, or measured now (and saved).

        Raises:
            BudgetSpent: the batch's budget does not cover it.
            ValueError: a configuration the GPU cannot run.
        """
        self.cands[c.key] = c
        got = self.state.measurements.get(c.key)
        if got is not None:
            return float(got["measured_us"])
        self._afford(c.G, "m")
        cfg, m = self.base.config(c)
        t = self.ex.measure(c, cfg, m)
        self.measured_now += 1
        self.state.measurements[c.key] = {
            "candidate": c.as_dict(), "measured_us": float(t.makespan_us),
            "spread": float(t.spread), "round_medians_us": list(t.round_medians_us),
            "gpu_s": float(t.gpu_s), "phase": phase, "round": rnd,
            "order": len(self.state.measurements), "note": t.note}
        self.state.charge(phase, t.gpu_s)
        self.state.save()
        self.log(f"G={c.G:5d} {c.describe():70s} measured {t.makespan_us:10.1f} µs "
                 f"(spread {t.spread:.1%}, {t.gpu_s:.1f} GPU s)")
        return float(t.makespan_us)

    def trace(self, c: Candidate) -> None:
        """Trace one replay of ``c`` for the refit (once; saved).

        Raises:
            BudgetSpent: the batch's budget does not cover it.
        """
        if c.key in self.state.traces or c.mode == "multistream":
            return
        self._afford(c.G, "t")
        cfg, m = self.base.config(c)
        ivs, gpu_s, err = self.ex.trace(c, cfg, m)
        rows = []
        if ivs is not None:
            g = self.base.workload(c.G).graph(m)
            rows = summarize_trace(ivs, g, cfg, self.spec.hw.num_sms)
        else:
            self.log(f"G={c.G:5d} trace of {c.describe()} not mapped ({err}); left out of "
                     "the refit")
        self.state.traces[c.key] = {"candidate": c.as_dict(), "rows": rows,
                                    "gpu_s": float(gpu_s), "error": err}
        self.state.charge("traces", gpu_s)
        self.state.save()

    # ------------------------------------------------------------------ the model
    def search(self, rnd: int, cal, cal_path: str | None) -> dict[int, list[Candidate]]:
        """Round ``rnd``'s search with calibration ``cal``; the top K green candidates of every
        batch, best predicted first."""
        from hw_runtime.commands.records import search_records, top_records
        from subgpu_jax.app.searchjob import SearchOptions
        from subgpu_jax.app.searchrun import run_search
        from subgpu_jax.app.sweep import build_grid
        from subgpu_jax.score.timer import timer_for

        s = self.spec
        from subgpu_jax.model.setup import GpuSetup

        setup = cal.bind(s.hw) if cal is not None else GpuSetup.uncalibrated(s.hw)
        hw = setup.hw
        cache = s.cache_policy(cal is not None)
        pts = build_grid(s.arch, s.num_gpus, s.batches, s.stages, s.microbatches, s.policies,
                         kv_history=s.kv_history, input_len=s.input_len,
                         parallelisms=[(s.attn_tp, s.attn_dp, s.moe_ep)], hw=s.hw,
                         streams=list(s.streams))
        folder = os.path.join(self.folder, f"round{rnd}", "search")
        meta = {"model": s.arch.name, "arch": repr(s.arch), "hardware": hw.name,
                "gpus": s.num_gpus, "parallelisms": [[s.attn_tp, s.attn_dp, s.moe_ep]],
                "batches": list(s.batches), "stages": list(s.stages),
                "microbatches": list(s.microbatches), "policies": list(s.policies),
                "streams_per_stage": list(s.streams), "kv_history": s.kv_history,
                "exact": s.exact.name, "cache": cache, "l_sim": s.l_sim,
                # the calibration by content (a re-calibrated file is another sweep; the
                # same file reached by another path is the same), its path kept beside it
                "calibration": file_digest(cal_path) if cal_path else None,
                "about": {"calibration": cal_path},
                "cheap": s.cheap, "cut_strategy": s.cut_strategy,
                "alloc_strategy": s.alloc_strategy}
        cut, alloc = s.strategies()   # names alone at the defaults, as before the options
        meta["cut_strategy"] = strategy_meta(cut, CUT_STRATEGY_REGISTRY)
        meta["alloc_strategy"] = strategy_meta(alloc, ALLOC_STRATEGIES)
        t0 = time.perf_counter()
        # the exact scorer made again by its name for this round's calibration (timer_for)
        opts = SearchOptions(timer=timer_for(setup, s.exact.name, cache), cache=cache,
                             L_sim=s.l_sim,
                             progress=False,
                             cut_strategy=cut, cheap=s.cheap, alloc_strategy=alloc)
        run_search(s.arch, setup, pts, folder, meta, opts, log=self.log)
        self.state.search_s += time.perf_counter() - t0
        groups = top_records(search_records(folder), s.top, hw.name, folder)
        return {G: [Candidate.from_record(r, self.base.workload(G).graph(1)) for r in recs
                    if r["mode"] != "temporal"]
                for G, recs in groups.items()}

    def predictions(self, pred: Predictor) -> dict[str, float | None]:
        """``pred``'s makespan (µs) of every measured candidate (and its temporal baseline)."""
        out = {}
        for key in self.state.measurements:
            c = self.cands[key]
            out[key] = pred.predict(c)
            tk = Candidate.temporal(c.G)
            self.cands.setdefault(tk.key, tk)
            out[tk.key] = pred.predict(tk)
        return out

    def refit(self, name: str) -> tuple[Predictor, str, dict]:
        """Refit from every trace so far; write ``DIR/<name>.json``; the refitted model."""
        from subgpu_jax.model.calibration import Calibration

        traced = [(self.base.candidate(v["candidate"]), v["rows"])
                  for v in self.state.traces.values() if v["rows"]]
        ms = set(self.spec.microbatches)
        ms |= {2 * m for m in ms} | {m // 2 for m in ms if m >= 2}
        for v in self.state.measurements.values():
            c = v["candidate"]
            if c["microbatch"]:
                ms.add(self.base.spec.deployment(c["G"]).requests_per_gpu // c["microbatch"])
        d, info = refit_calibration(self.base, traced, self.spec.batches, sorted(ms),
                                    self.elementwise)
        path = os.path.join(self.folder, f"{name}.json")
        from subgpu_jax.app.store import atomic_write
        atomic_write(path, json.dumps(d, indent=1))
        return Predictor(self.spec, Calibration.from_dict(d)), path, info

    # ------------------------------------------------------------------ one round
    def _measure_round(self, rnd: int, props: dict[int, list[Candidate]]) -> list[str]:
        """Measure and trace round ``rnd``'s candidates; the keys proposed."""
        keys = []
        for G in self.spec.batches:
            cands = props.get(G, [])
            keys += [c.key for c in cands]
            try:
                t = Candidate.temporal(G)
                self.measure(t, "baseline", rnd)
                if cands:
                    self.measure(cands[0].replace(mode="multistream"), "multistream", rnd)
                for c in cands:
                    self.measure(c, f"round{rnd}", rnd)
                self.trace(t)
                for c in cands:
                    self.trace(c)
            except BudgetSpent:
                continue
            finally:
                self.ex.release()
        return keys

    def run(self) -> dict:
        """The whole tune; returns the report (``report.build_report``) and writes the files
        (``report.write_report``)."""
        from hw_runtime.tune.report import build_report, write_report

        s = self.spec
        if self.state.resumed:
            self.log(f"resuming the tune in {self.folder}: {len(self.state.measurements)} "
                     f"measurements and {len(self.state.traces)} traces kept "
                     f"({self.state.gpu_total_s:.0f} GPU s)")
        pred, cal_path = self.base, s.calibration
        rounds, stop = [], None
        for rnd in range(1, s.max_rounds + 1):
            props = self.search(rnd, pred.calibration, cal_path)
            before = set(self.state.measurements)
            keys = self._measure_round(rnd, props)
            new = [k for k in keys if k not in before]
            p = self.predictions(pred)
            meas = {k: v["measured_us"] for k, v in self.state.measurements.items()}
            errs = speedup_errors(p, meas, self.cands)
            temporal_err = {k: p[k] / meas[k] - 1.0 for k in meas
                            if self.cands[k].mode == "temporal" and p.get(k)}
            absr = [abs(e) for e in errs.values()]
            rd = {"round": rnd, "calibration": cal_path,
                  "search": os.path.join(self.folder, f"round{rnd}", "search"),
                  "proposed": keys, "new": new, "predicted_us": p, "speedup_errors": errs,
                  "temporal_errors": temporal_err,
                  "median_abs_error": statistics.median(absr) if absr else None,
                  "max_abs_error": max(absr) if absr else None}
            rounds.append(rd)
            self.state.rounds = rounds[:]
            self.state.save()
            self.log(f"round {rnd}: {len(keys)} candidates proposed, {len(new)} new; "
                     f"speedup error median {_pct(rd['median_abs_error'])}, max "
                     f"{_pct(rd['max_abs_error'])} (tolerance {s.tolerance:.0%})")
            if absr and max(absr) <= s.tolerance:
                stop = "agree"
            elif all(G in self.spent_out for G in s.batches):
                stop = "budget"
            elif rnd > 1 and not new:
                stop = "converged"
            elif rnd == s.max_rounds:
                stop = "max_rounds"
            if stop:
                break
            pred, cal_path, _ = self.refit(f"calibration_round{rnd}")
        final, final_path, info = (self.refit("calibration_tuned") if self.state.traces
                                   else (pred, None, {}))
        refined = {}
        if s.refine:
            refined = self._refine()
        rep = build_report(self, rounds, stop, final, final_path, info, refined)
        write_report(self, rep)
        return rep

    def _refine(self) -> dict:
        """Refine the best measured pipelined run of every batch on the GPU: green (its SM split,
        then its microbatch count) or multistream (its microbatch count), whichever measured
        faster (on the H200's Llama-3.1-70B tunes multistream won)."""
        out = {}
        meas = self.state.measurements
        for G in self.spec.batches:
            piped = [k for k, v in meas.items() if self.cands[k].G == G
                     and self.cands[k].mode in ("green", "multistream")]
            if not piped:
                continue
            best = self.cands[min(piped, key=lambda k: meas[k]["measured_us"])]

            def measure(c: Candidate) -> float:
                try:
                    self.base.config(c)
                except ValueError:
                    return math.inf
                try:
                    return self.measure(c, "refine", 0)
                except BudgetSpent:
                    return math.inf
            try:
                out[G] = refine_on_gpu(best, measure, self.spec.hw,
                                       self.spec.deployment(G).requests_per_gpu,
                                       self.spec.refine_passes)
            finally:
                self.ex.release()
            self.log(f"G={G:5d} refined on the GPU: {best.describe()} -> "
                     f"{out[G]['best'].describe()} ({out[G]['start_us']:.1f} -> "
                     f"{out[G]['best_us']:.1f} µs, {out[G]['measured']} candidates)")
        return out


def _pct(x) -> str:
    return "-" if x is None else f"{x:.1%}"
