"""What ``subgpu tune`` returns and writes (``DIR/``):

* ``tune_report.json``: per batch the winner (the fastest measured run, the temporal baseline
  itself when nothing measured faster, so never slower than temporal), its measured speedup, the
  best measured of the first search's top 3, the command that runs the winner; the rounds with
  their prediction errors; the accounting (candidates measured, GPU seconds per phase and per
  batch, CPU seconds of the searches, why the loop stopped, first- vs last-round error); every
  measurement with its prediction by the refitted model;
* ``tune_measurements.csv``: one row per measurement;
* ``tune_frontier.png``: measured per-user vs per-GPU frontiers beside the predicted ones
  (``hw_runtime.commands.top.plot_measured_frontier``);
* ``calibration_tuned.json`` (written by the loop): the refitted calibration.

Units: µs, tokens/s, GPU seconds.
"""

from __future__ import annotations

import csv
import io
import json
import os
import statistics

from subgpu_jax.app.options import record_config_options

from subgpu_jax.app.store import atomic_write

from hw_runtime.tune.spec import Candidate, TuneSpec

__all__ = ["build_report", "write_report", "run_command", "REPORT_FILES"]

REPORT_FILES = ("tune_report.json", "tune_measurements.csv", "tune_frontier.png")


def run_command(spec: TuneSpec, c: Candidate, calibration: str | None) -> str | None:
    """The ``subgpu run`` command of a pipelined candidate (None for temporal)."""
    if c.mode == "temporal":
        return None
    o = record_config_options(c.record())
    parts = ["subgpu run", f"--model {spec.model_arg or spec.arch.name}",
             f"--hardware {spec.hardware}", f"--gpus {spec.num_gpus}", f"--tp {spec.attn_tp}",
             f"--dp {spec.attn_dp}", f"--ep {spec.moe_ep}", f"--batch {c.G}",
             f"--kv-history {spec.kv_history}", f"--input-len {spec.input_len}"]
    if o["cuts"]:
        parts.append(f"--cuts {o['cuts']}")
    parts += [f"--sms {o['sms']}", f"--microbatch {o['microbatch']}",
              "--reuse" if o["reuse"] else "--no-reuse", f"--policy {o['policy']}",
              f"--streams-per-stage {o['streams_per_stage']}", f"--mode {c.mode}",
              f"--collectives {spec.collectives}", f"--gemm {spec.gemm}",
              f"--elementwise {spec.elementwise}", f"--attention {spec.attention}",
              f"--moe-gemm {spec.moe_gemm}",
              f"--lane-priority {spec.lane_priority}",
              f"--rounds {spec.rounds}", f"--replays {spec.replays}"]
    if calibration:
        parts.append(f"--calibration {calibration}")
    return " ".join(parts)


def _rows(tuner, final) -> list[dict]:
    """One row per measurement, with the refitted model's prediction."""
    st = tuner.state
    meas = {k: v["measured_us"] for k, v in st.measurements.items()}
    rows = []
    for key, v in sorted(st.measurements.items(), key=lambda kv: kv[1]["order"]):
        c = tuner.cands[key]
        tk = Candidate.temporal(c.G).key
        tpg = tuner.spec.deployment(c.G).tokens_per_gpu
        p = final.predict(c)
        pt = final.predict(Candidate.temporal(c.G))
        T = v["measured_us"]
        d = c.as_dict()
        row = {"global_batch": c.G, "mode": c.mode, "D": d["D"], "w": d["w"], "cuts": d["cuts"],
               "sms": d["sms"], "microbatch": d["microbatch"], "streams_per_stage": d["k"],
               "policy": d["policy"], "phase": v["phase"], "round": v["round"],
               "measured_us": T, "spread": v["spread"], "gpu_s": v["gpu_s"],
               "measured_speedup": (meas[tk] / T) if tk in meas else None,
               "predicted_us": p, "predicted_speedup": (pt / p) if p and pt else None,
               "measured_per_user_tok_s": 1e6 / T, "measured_per_gpu_tok_s": tpg * 1e6 / T,
               "predicted_per_user_tok_s": 1e6 / p if p else None,
               "predicted_per_gpu_tok_s": tpg * 1e6 / p if p else None, "key": key,
               "note": v.get("note", "")}
        rows.append(row)
    return rows


def build_report(tuner, rounds: list[dict], stop: str | None, final, final_path: str | None,
                 refit_info: dict, refined: dict) -> dict:
    """The report (module docstring) of a finished loop.

    Args:
        tuner: the ``loop.Tuner``. rounds: its round dicts. stop: why the loop stopped
            (``agree``, ``budget``, ``converged``, ``max_rounds``). final: the refitted
            ``Predictor``; final_path: its calibration file. refit_info: ``refit_calibration``'s
            info. refined: batch -> ``refine_on_gpu`` result.
    """
    spec, st = tuner.spec, tuner.state
    rows = _rows(tuner, final)
    batches = {}
    for G in spec.batches:
        mine = [r for r in rows if r["global_batch"] == G]
        tmp = [r for r in mine if r["mode"] == "temporal"]
        b = {"gpu_s": tuner.spent(G), "budget_s": spec.budget_s,
             "budget_spent": G in tuner.spent_out, "measured": len(mine)}
        if not tmp:
            b["winner"] = None
            b["note"] = "the temporal baseline was not measured (budget)"
            batches[str(G)] = b
            continue
        T0 = tmp[0]["measured_us"]
        best = min(mine, key=lambda r: (r["measured_us"], r["mode"] != "temporal"))
        if best["measured_us"] >= T0:
            best = tmp[0]
        c = tuner.cands[best["key"]]
        first = rounds[0]["proposed"] if rounds else []
        top3 = [tuner.state.measurements[k]["measured_us"] for k in first
                if k in tuner.state.measurements and tuner.cands[k].G == G][:3]
        b.update({"temporal_us": T0, "winner": {**c.as_dict(), "measured_us": best["measured_us"],
                                                "spread": best["spread"],
                                                "predicted_us": best["predicted_us"]},
                  "measured_speedup": T0 / best["measured_us"],
                  "first_search_top3_best_speedup": (T0 / min(top3)) if top3 else None,
                  "command": run_command(spec, c, final_path)})
        if G in refined:
            r = refined[G]
            b["refine"] = {"start": r["start"].key, "start_us": r["start_us"],
                           "best": r["best"].key, "best_us": r["best_us"],
                           "measured": r["measured"], "moves": r["moves"]}
        batches[str(G)] = b
    errs = [rd for rd in rounds if rd.get("max_abs_error") is not None]

    def err(rd):
        if rd is None:
            return None
        return {"round": rd["round"], "median_abs_speedup_error": rd["median_abs_error"],
                "max_abs_speedup_error": rd["max_abs_error"],
                "candidates": len(rd["speedup_errors"]),
                "median_abs_temporal_error": (statistics.median(
                    abs(x) for x in rd["temporal_errors"].values())
                    if rd["temporal_errors"] else None)}
    phases = {k: round(v, 3) for k, v in sorted(st.gpu_s.items())}
    return {
        "format": "subgpu-tune-report/1", "options": st.meta, "batches": batches,
        "rounds": [{k: v for k, v in rd.items() if k != "predicted_us"} for rd in rounds],
        "stop": stop,
        "stop_reason": {"agree": f"predicted and measured speedups agree within "
                                 f"{spec.tolerance:.0%}",
                        "budget": "the GPU budget of every batch is spent",
                        "converged": "the search proposed no new candidate",
                        "max_rounds": f"{spec.max_rounds} rounds (--max-rounds)",
                        None: "no round ran"}[stop],
        "accounting": {"candidates_measured": sum(1 for r in rows if r["mode"] != "temporal"),
                       "measurements": len(rows), "traces": len(st.traces),
                       "measured_in_this_call": tuner.measured_now,
                       "gpu_s_by_phase": phases, "gpu_s_total": round(st.gpu_total_s, 3),
                       "search_cpu_s": round(st.search_s, 3)},
        "prediction_error": {"first_round": err(errs[0] if errs else None),
                             "last_round": err(errs[-1] if errs else None),
                             "refitted_model_median_abs_speedup_error": _refit_error(rows)},
        "calibration": final_path, "refit": {k: v for k, v in refit_info.items()
                                             if k != "ratios"},
        "measurements": rows}


def _refit_error(rows: list[dict]):
    e = [abs(r["predicted_speedup"] / r["measured_speedup"] - 1) for r in rows
         if r["mode"] != "temporal" and r["predicted_speedup"] and r["measured_speedup"]]
    return statistics.median(e) if e else None


def write_report(tuner, rep: dict) -> None:
    """Write ``REPORT_FILES`` into the tune's folder (atomically) and print the per-batch
    result through the tuner's log."""
    from hw_runtime.commands.top import plot_measured_frontier

    d = tuner.folder
    atomic_write(os.path.join(d, "tune_report.json"), json.dumps(rep, indent=1))
    rows = rep["measurements"]
    if rows:
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=list(rows[0]))
        w.writeheader()
        for r in rows:
            w.writerow(r)
        atomic_write(os.path.join(d, "tune_measurements.csv"), buf.getvalue())
    plot = [r for r in rows if r["predicted_us"] and r["mode"] != "multistream"]
    if plot:
        plot_measured_frontier(plot, os.path.join(d, "tune_frontier.png"))
    say = tuner.log
    say("")
    say("measured best per batch (never slower than temporal)")
    say(f"{'G':>6s} {'temporal µs':>12s} {'best µs':>10s} {'speedup':>8s}  configuration")
    for G, b in rep["batches"].items():
        if b.get("winner") is None:
            say(f"{G:>6s}  {b['note']}")
            continue
        c = tuner.base.candidate(b["winner"])
        say(f"{G:>6s} {b['temporal_us']:12.1f} {b['winner']['measured_us']:10.1f} "
            f"{b['measured_speedup']:7.3f}x  {c.describe()}")
    a = rep["accounting"]
    pe = rep["prediction_error"]

    def pct(x):
        return "-" if x is None else f"{x:.1%}"
    f0, f1 = pe["first_round"] or {}, pe["last_round"] or {}
    say(f"{a['candidates_measured']} candidates measured ({a['measurements']} measurements, "
        f"{a['traces']} traces), {a['gpu_s_total']:.0f} GPU s ("
        + ", ".join(f"{k} {v:.0f}" for k, v in a["gpu_s_by_phase"].items())
        + f"), searches {a['search_cpu_s']:.0f} CPU s; stopped: {rep['stop_reason']}")
    from subgpu_jax.sim.contention import uncalibrated_model_id
    first = (f"calibrated with {tuner.spec.calibration}" if tuner.spec.calibration else
             f"uncalibrated {uncalibrated_model_id(tuner.spec.hw)}")
    say(f"speedup prediction error: round {f0.get('round', '-')} ({first}) median "
        f"{pct(f0.get('median_abs_speedup_error'))}, round {f1.get('round', '-')} median "
        f"{pct(f1.get('median_abs_speedup_error'))}; refitted model "
        f"{pct(pe['refitted_model_median_abs_speedup_error'])}")
    say(f"wrote {d}/: " + ", ".join(f for f in REPORT_FILES if os.path.exists(os.path.join(d, f)))
        + (", calibration_tuned.json" if rep["calibration"] else ""))
    for G, b in rep["batches"].items():
        if b.get("command"):
            say(f"run the winner of G={G}:\n  {b['command']}")
