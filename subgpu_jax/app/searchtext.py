"""The text a search job prints: configuration-level speedups first, the frontiers, the
matched gains where both frontiers have points nearby, the validation status of the predictions,
then the files written and the next commands (``subgpu simulate`` reproducing the best
configuration, ``subgpu run --from-search``). Used by ``subgpu search`` (``app/commands/search.py``).
"""

from __future__ import annotations

import os
import shlex
import textwrap

from subgpu_jax.app.options import record_config_options, resolve_cache
from subgpu_jax.app.args import serving_args, topology_args
from subgpu_jax.app.provenance import prediction_note
from subgpu_jax.app.searchout import OUTPUT_FILES
from subgpu_jax.model.deployment import DEFAULT_CONTEXT
from subgpu_jax.model.models import DEFAULT_MODEL
from subgpu_jax.score.timer import DEFAULT_TIMER, TIMERS
from subgpu_jax.space.config import DEFAULT_POLICY
from subgpu_jax.search.strategies import DEFAULT_ALLOC_STRATEGY, DEFAULT_CUT_STRATEGY

__all__ = ["print_search_summary", "print_next_steps", "amplified_gain_note",
           "search_reproduce_command",
           "search_grid_args", "path_arg"]


def _csv(s: str) -> str:
    """A comma-separated option value without spaces or empty items (``"512, 1024"`` ->
    ``"512,1024"``)."""
    return ",".join(x.strip() for x in str(s).split(",") if x.strip())


#: A matched per-user gain this many times the best configuration's gain (speedup - 1) is told
#: apart: it comes from a flat temporal frontier (a larger batch buys little per-GPU
#: throughput), not from a faster step (found by a new user: +96.5% beside 1.09x speedups).
AMPLIFIED = 3.0


def amplified_gain_note(rows: list[dict], best_speedup: float) -> str | None:
    """The note under the per-user gains at matched per-GPU throughput when one of ``rows``
    (``report.matched_tables`` rows shown) exceeds ``AMPLIFIED`` times the best configuration's
    gain (``best_speedup`` - 1) and compares points at different batches: the frontier, not the
    step, makes it. None otherwise.

    Returns:
        two or three lines of at most 100 characters, indented by two spaces."""
    amplified = [r for r in rows if "nearest_temporal" in r
                 and r["nearest_temporal"]["global_batch"] != r["nearest_subgpu"]["global_batch"]
                 and r["gain"] > AMPLIFIED * (best_speedup - 1.0)]
    if not amplified:
        return None
    r = max(amplified, key=lambda x: x["gain"])
    return textwrap.fill(
        f"(a gain of {r['gain']:+.0%} beside configuration speedups of at most "
        f"{best_speedup:.3f}x: temporal reaches this per-GPU throughput only at G="
        f"{r['nearest_temporal']['global_batch']}, SubGPU already at G="
        f"{r['nearest_subgpu']['global_batch']}, where each request runs faster; the temporal "
        "frontier is flat there. Compare the same batch in the table above)",
        100, initial_indent="  ", subsequent_indent="  ")


def _fmt_gain(r: dict, key: str, unit: str, fmt: str) -> str:
    """One matched-gain row: the gain, and which frontier points it rests on."""
    nt, ns = r["nearest_temporal"], r["nearest_subgpu"]
    return (f"  at {r[key]:{fmt}} {unit}: {r['gain']:+.1%}   temporal G={nt['global_batch']} "
            f"({nt['rel_distance']:.1%} away), SubGPU G={ns['global_batch']} "
            f"({ns['rel_distance']:.1%} away)")


def _print_best_configurations(rows: list[dict], b: dict | None, timer) -> None:
    """The best SubGPU configuration per (parallelism, batch) against the temporal baseline at
    the same batch (``rows``), then the best (or least slow) one overall (``b``), naming a
    scorer that is not the reference."""
    if rows:
        print("\nbest SubGPU configuration per batch, against the temporal baseline at the same "
              "batch (predicted)")
        print(f"{'G':>6s}{'TPxDP':>7s}{'temporal µs':>13s}{'SubGPU µs':>11s}{'speedup':>9s}"
              f"{'D':>3s}{'w':>3s}{'m':>3s}  SMs / cuts")
        for r in rows:
            print(f"{r['global_batch']:6d}{str(r['attn_tp']) + 'x' + str(r['attn_dp']):>7s}"
                  f"{r['temporal_makespan_us']:13.1f}{r['makespan_us']:11.1f}"
                  f"{r['speedup_vs_temporal']:8.3f}x{r['D']:3d}{r['w']:3d}{r['microbatches']:3d}"
                  f"  {r['sms']} / {r['cuts']}")
    if b:
        word = "best" if b["speedup_vs_temporal"] > 1 else "least slow (none beats temporal)"
        whose = ("" if timer is None or timer.reference else
                 f" (by the {timer.name} scorer; the event simulator's check"
                 + (" and verdicts follow)" if timer.contention else " follows)"))
        print(f"{word} SubGPU configuration: G={b['global_batch']} D={b['D']} w={b['w']} "
              f"m={b['microbatches']} SMs={b['sms']} cuts={b['cuts']}: {b['makespan_us']:.1f} µs, "
              f"{b['speedup_vs_temporal']:.3f}x the temporal baseline{whose}")


def _print_frontiers(summ: dict) -> None:
    """The temporal and the SubGPU Pareto frontiers of ``summ``, one table each."""
    for name in ("frontier_temporal", "frontier_subgpu"):
        fr = summ[name]
        print(f"\n{name.replace('_', ' ')} ({len(fr)} point{'s' if len(fr) != 1 else ''})")
        print(f"{'tok/s/GPU':>11s}{'tok/s/user':>12s}{'T (µs)':>10s}{'G':>6s}{'TPxDP':>7s}"
              f"{'D':>3s}{'w':>3s}{'m':>3s}  SMs / cuts")
        for r in fr:
            print(f"{r['per_gpu_tok_s']:11.1f}{r['per_user_tok_s']:12.2f}{r['makespan_us']:10.1f}"
                  f"{r['global_batch']:6d}{str(r['attn_tp']) + 'x' + str(r['attn_dp']):>7s}"
                  f"{r['D']:3d}{r['w']:3d}{r['microbatches']:3d}  {r['sms']} / {r['cuts']}")


def _print_matched_gains(m: dict, best_speedup: float) -> None:
    """The matched-gain tables (``summ["matched"]``): the rows whose frontier points lie near
    the matched point, how many are not shown and why, and the note on an amplified per-user
    gain (``amplified_gain_note``, against ``best_speedup``)."""
    tol = m.get("tolerance", 0.05)
    print(f"\nmatched gains (frontier against frontier, each interpolated linearly between its "
          f"points, which lie at\ndifferent batches: shown only where both frontiers have a point "
          f"within {tol:.0%} of the matched point in both\nthroughputs)")
    for key, table, unit, fmt, what in (
            ("per_gpu_tok_s", "per_user_gain_at_matched_per_gpu", "tok/s/GPU", "10.1f",
             "per-user gain at matched per-GPU throughput"),
            ("per_user_tok_s", "per_gpu_gain_at_matched_per_user", "tok/s/user", "10.2f",
             "per-GPU gain at matched per-user throughput")):
        rs = m[table]
        near = [r for r in rs if r.get("nearby", True)]
        print(what)
        for r in near:
            print(_fmt_gain(r, key, unit, fmt) if "nearest_temporal" in r
                  else f"  at {r[key]:{fmt}} {unit}: {r['gain']:+.1%}")
        far = [r for r in rs if not r.get("nearby", True)]
        if far:
            gap = min(max(r["nearest_temporal"]["rel_distance"],
                          r["nearest_subgpu"]["rel_distance"]) for r in far)
            print(f"  ({len(far)} {'more ' if near else ''}not shown: a frontier's nearest point "
                  f"is {gap:.0%} or more away; add batches (--batches) to fill the gaps)")
        if not rs:
            print("  (the frontiers do not overlap: no matched comparison)")
        note = amplified_gain_note(near, best_speedup) if key == "per_gpu_tok_s" else None
        if note:
            print(note)


def _print_reference_check(chk: dict | None) -> None:
    """The event simulator's check of a non-reference scorer's best records
    (``summ["reference_check"]``), when it has rows and an error; nothing otherwise."""
    if chk and chk.get("rows") and chk.get("max_abs_error") is not None:
        n = chk.get("checked", len(chk["rows"]))
        tol = chk.get("tolerance")
        over = (f"; above the {tol * 100:g}% it is held to, so the speedups above are the "
                f"{chk['timer']}'s and may not be the event simulator's (the verdicts below "
                "are; --exact event searches with it)"
                if tol is not None and chk["max_abs_error"] > tol else "")
        print(f"\nchecked by the event simulator (the reference): the {chk['timer']}'s region "
              f"makespans of the best SubGPU record at {n} (batch, TPxDP) point"
              f"{'' if n == 1 else 's'} differ from it by a median "
              f"{chk['median_abs_error']:.2%}, at most {chk['max_abs_error']:.2%}{over} "
              "(summary.json: reference_check)")


def _print_engine_check(eng: dict | None) -> None:
    """The compiled engine's check against the event simulator (``summ["engine_check"]``),
    with a warning when it exceeds its tolerance; nothing without rows."""
    if eng and eng.get("rows"):
        n = eng["checked"]
        print(f"\nthe event simulator's exact steps ran in its compiled engine; timed again there, "
              f"the best SubGPU record at {n} (batch, TPxDP) point{'' if n == 1 else 's'} "
              f"differ{'s' if n == 1 else ''} from the records' (the simulator with its periodic "
              f"fast-forward; the engine equals its full simulation bit for bit) by at most "
              f"{eng['max_abs_error']:.1e} (summary.json: engine_check)")
        tol = eng.get("tolerance")
        if tol is not None and eng["max_abs_error"] > tol:
            print(f"warning: the compiled engine and the event simulator differ by more than "
                  f"{tol:.0e}, which they never should: a bug; --exact event-full searches "
                  "with the Python simulator alone")


def _print_screen_check(scr: dict | None) -> None:
    """The screened scorer's check against the event simulator (``summ["screen_check"]``);
    nothing without one."""
    if scr:
        print(f"\nscreened: the batched screen's region makespans of the {scr['points']} chosen "
              f"SubGPU configurations differ from the event simulator's (the records') by a "
              f"median {scr['median_abs_error']:.2%}, at most {scr['max_abs_error']:.2%}; "
              f"{scr['confirm_calls']:,} event simulations beside {scr['screen_calls']:,} "
              f"screened configurations; the screen's own best kept at "
              f"{scr['screen_best_kept']} of {scr['points']} points (summary.json: screen_check)")


def print_search_summary(summ: dict, hardware: str, timer=None) -> None:
    """A search summary as text, configuration-level speedups first: the best SubGPU
    configuration per (parallelism, batch) against the temporal baseline at the same batch, the
    frontiers, the matched gains where both frontiers have points nearby
    (``report.matched_tables``), and which model made the predictions with the measured error
    figures that apply to them (``summ["prediction"]``, ``provenance.prediction_note``).

    Args:
        summ: the summary of ``searchout.write_outputs`` (``best_by_batch``,
            ``best_speedup_record``, frontiers, ``matched``).
        hardware: the GPU preset searched (used when ``summ`` has no ``prediction``).
        timer: the search's exact scorer (``score.timer.Timer``), or None; a scorer that is
            not the reference is named on the best configuration's line.
    """
    rows = summ.get("best_by_batch") or []
    _print_best_configurations(rows, summ["best_speedup_record"], timer)
    _print_frontiers(summ)
    m = summ["matched"]
    best_speedup = max((float(r["speedup_vs_temporal"]) for r in rows), default=1.0)
    _print_matched_gains(m, best_speedup)
    _print_reference_check(summ.get("reference_check"))
    _print_engine_check(summ.get("engine_check"))
    _print_screen_check(summ.get("screen_check"))
    if timer is not None and not timer.contention:
        print("\nno verdict per batch: the three modes (multistream, SubGPU without link time) "
              "need a contention model (--exact event or vcontention)")
    elif not summ.get("verdicts"):
        print("\nno verdict per batch: no SubGPU record to judge (none met the filters)")
    print_verdicts(summ.get("verdicts"), hardware)
    note = summ.get("prediction") or prediction_note(hardware, None, None, timer)
    print(f"\nEvery number above is a model prediction. {note['text']}")


def path_arg(value: str | None) -> str | None:
    """A file or folder option for a printed command: absolute when it names an existing path
    (a ``config.json``, a calibration, a results folder), so the command works from any
    directory; a preset name (``gpt-oss-120b``) is kept as it is."""
    if value is None or not os.path.exists(value):
        return value
    return os.path.abspath(value)


def print_verdicts(verdicts, hardware: str) -> None:
    """The three modes of each batch's best configuration and the verdict
    (``app.modes.batch_verdicts``): predicted speedups of SubGPU (green contexts), the same
    schedule on plain streams (multistream) and SubGPU without the collectives' link time, the
    validated band of each where the GPU has held-out validation, and what to run."""
    if not verdicts:
        return
    transferred = any(v.get("bands_transferred") for v in verdicts)
    where = (f"of the GPUs validated so far, widened for the {hardware}, which was never "
             "validated"
             if transferred else f"of the {hardware}")
    print(f"\nverdict per batch: the best configuration in three modes (predicted speedup over "
          f"temporal; band: that speedup times the range of measured/predicted speedups on "
          f"held-out workloads {where})")
    if any(v.get("rescored_by") for v in verdicts):
        print(f"  every mode re-simulated by the {verdicts[0]['rescored_by']}, whose predictions "
              "the bands were measured on (the SubGPU speedup may differ from the table above)")
    print(f"{'G':>6s}{'TPxDP':>7s}{'SubGPU':>9s}{'band':>12s}{'multistream':>13s}{'band':>12s}"
          f"{'no link':>9s}{'partition':>11s}  recommend")

    def band(b):
        return f"{b[0]:.2f}-{b[1]:.2f}" if b else "none"
    for v in verdicts:
        print(f"{v['global_batch']:6d}{str(v['attn_tp']) + 'x' + str(v['attn_dp']):>7s}"
              f"{v['subgpu']:8.3f}x{band(v['bands'].get('subgpu')):>12s}"
              f"{v['multistream']:12.3f}x{band(v['bands'].get('multistream')):>12s}"
              f"{v['subgpu_nolink']:8.3f}x{v['partition']:10.3f}x  {v['recommend']}")
    print("  no link: SubGPU with the collectives' link time set to zero (what overlapping "
          "compute and memory work alone gives); partition: SubGPU over multistream")
    for v in verdicts:
        print(f"  {v.get('label', 'G=' + str(v['global_batch']))}: {v['reason']}")


def name_args(a) -> list[str]:
    """``["--name", NAME]`` when the user named the model (``--name``), else ``[]``."""
    return ["--name", a.name] if getattr(a, "name", None) else []


def search_reproduce_command(a, best: dict) -> list[str]:
    """The ``subgpu simulate`` arguments that reproduce a search record (its deployment, cut,
    SM split, microbatch and policy, with the search's scorer, cache and calibration).

    Args:
        a: the parsed ``subgpu search`` options. best: a search record.

    Returns:
        The command as a list of arguments, ``["subgpu", "simulate", ...]``.
    """
    cmd = ["subgpu", "simulate", "--model", path_arg(a.model), *name_args(a), "--hardware",
           a.hardware,
           "--gpus", str(best["num_gpus"]), "--tp", str(best["attn_tp"]),
           "--dp", str(best["attn_dp"]), "--ep", str(best["moe_ep"]),
           "--batch", str(best["global_batch"])]
    if not best.get("output_len"):  # a whole generation starts at --input-len
        cmd += ["--kv-history", str(best["kv_history"])]
    if a.expert_dtype:
        cmd += ["--expert-dtype", a.expert_dtype]
    if a.input_len not in (None, DEFAULT_CONTEXT) or best.get("output_len"):
        cmd += ["--input-len", str(best.get("input_len") or a.input_len)]
    cmd += serving_args(a) + topology_args(a, path_arg)
    o = record_config_options(best)
    cmd += ["--cuts", o["cuts"] or "", "--reuse" if o["reuse"] else "--no-reuse",
            "--sms", o["sms"], "--microbatch", str(o["microbatch"])]
    if o["policy"] != DEFAULT_POLICY:
        cmd += ["--policy", o["policy"]]
    if o["streams_per_stage"] != 1:
        cmd += ["--streams-per-stage", str(o["streams_per_stage"])]
    if a.exact != DEFAULT_TIMER:   # simulate with the search's own timer
        cmd += ["--simulator", a.exact]
    if a.cache is not None and a.cache != resolve_cache(None, a.calibration):
        cmd += ["--cache", a.cache]  # only when it differs from simulate's own default
    if a.calibration:
        cmd += ["--calibration", path_arg(a.calibration)]
    return cmd


def print_next_steps(a, summ: dict, hardware: str, arch=None) -> None:
    """The files a search wrote and the commands that continue from it: ``subgpu simulate``
    reproducing the best configuration, and ``subgpu run --from-search`` on a matching GPU
    (and, where the searched model's experts are in another dtype than bf16, a search with bf16
    experts: the runtime runs them in bf16 only, ``hw_runtime/gpu/shapes.py``).

    Args:
        a: the parsed ``subgpu search`` options (``out``, ``model``, grid options).
        summ: the search summary (``best_speedup_record``). hardware: the GPU searched.
        arch: the searched ``ModelArch`` (its experts' dtype), or None (taken as runnable).
    """
    files = [f for f in OUTPUT_FILES if os.path.isfile(os.path.join(a.out, f))]
    print(f"\nwrote {a.out}/: {', '.join(files)}")
    b = summ["best_speedup_record"]
    if not b:
        return
    out = path_arg(a.out)
    print("next steps (paths absolute: run them from any folder):")
    see = ("add --gantt/--trace/--utilization FILE to see it" if TIMERS[a.exact].reference else
           f"to see it, drop --simulator {a.exact} and add --gantt/--trace/--utilization FILE: "
           "the event simulator draws")
    print(f"  reproduce the best configuration (--microbatch is a size: {b['microbatch']} "
          f"requests per microbatch, m = {b['microbatches']}; {see}):")
    print("    " + shlex.join(search_reproduce_command(a, b)))
    model = [] if a.model == DEFAULT_MODEL else ["--model", path_arg(a.model), *name_args(a)]
    # every command keeps the model version of the search's --hardware (NAME:VERSION)
    from subgpu_jax.model.hardware import get_hardware
    from subgpu_jax.model.kernelcost import ANALYTIC_MODEL, analytic_model_of

    version = analytic_model_of(get_hardware(a.hardware))
    suffix = "" if version == ANALYTIC_MODEL else f":{version}"
    quantised = arch is not None and arch.is_moe and arch.expert_dtype != "bf16"
    if get_hardware(a.hardware).runtime:    # the runtime measures on H200s and H100s
        run = ["subgpu", "run", "--from-search", out, "--hardware", hardware + suffix, *model]
        print(f"  run it on a local {hardware} GPU (needs pip install -e \".[gpu]\"; add --top 3 "
              "to measure the 3 best of every batch):")
        print("    " + shlex.join(run))
        if quantised:   # the runtime's experts are bf16 (hw_runtime/gpu/shapes.py)
            print(f"  the runtime runs the experts in bf16 (this search predicted "
                  f"{arch.expert_dtype} experts; `subgpu run` predicts its configuration again "
                  "with bf16 ones); for the configurations that are best with bf16 experts, "
                  "search with them first:")
            print("    " + shlex.join(["subgpu", "search", "--hardware", hardware + suffix,
                                       "--expert-dtype", "bf16", *search_grid_args(a),
                                       "--out", out.rstrip("/") + "-bf16"]))
    else:
        from subgpu_jax.model.hardware import HARDWARE

        ran = [n for n, h in HARDWARE.items() if h.runtime]     # the GPUs `subgpu run` measures
        gpu = next((n for n in ran if HARDWARE[n].measured), ran[0])   # the first validated
        h_out = out.rstrip("/") + "-" + gpu.lower()
        print(f"  measure it: `subgpu run` runs on {' and '.join(ran)} GPUs only (its green "
              f"contexts were never probed on a {hardware}); on an {gpu} (it predicts for the "
              "GPU it runs on), make a search for it first (Hopper runs the experts in bf16), "
              "then run its 3 best of every batch:")
        print("    " + shlex.join(["subgpu", "search", "--hardware", gpu + suffix,
                                   "--expert-dtype", "bf16", *search_grid_args(a), "--out",
                                   h_out]))
        print("    " + shlex.join(["subgpu", "run", "--from-search", h_out, "--top", "3", *model,
                                   *(["--hardware", gpu + suffix] if suffix else [])]))


def search_grid_args(a) -> list[str]:
    """The workload and grid options of a parsed ``subgpu search`` (except ``--hardware``,
    ``--expert-dtype``, ``--calibration`` and ``--out``), for a command that repeats the
    search on another GPU; options at their defaults are left out."""
    args = [] if a.model == DEFAULT_MODEL else ["--model", path_arg(a.model), *name_args(a)]
    args += ["--gpus", str(a.gpus)]
    args += ["--all-parallelisms"] if a.all_parallelisms else ["--tp", str(a.tp), "--dp",
                                                                 str(a.dp)]
    args += ["--ep", str(a.ep)]
    for opt in ("kv_history", "input_len"):
        if getattr(a, opt) not in (None, DEFAULT_CONTEXT) and not (
                opt == "kv_history" and getattr(a, "output_len", None)):
            args += ["--" + opt.replace("_", "-"), str(getattr(a, opt))]
    args += serving_args(a)
    args += ["--batches", _csv(a.batches), "--stages", _csv(a.stages),
             "--microbatches", _csv(a.microbatches)]
    if _csv(getattr(a, "streams_per_stage", "1")) != "1":
        args += ["--streams-per-stage", _csv(a.streams_per_stage)]
    for opt, default in (("policies", "wavefront"), ("cut_strategy", DEFAULT_CUT_STRATEGY),
                         ("cut_options", None), ("alloc_strategy", DEFAULT_ALLOC_STRATEGY),
                         ("alloc_options", None), ("exact", DEFAULT_TIMER), ("cache", None),
                         ("l_sim", 2)):
        if getattr(a, opt) != default:
            args += ["--" + opt.replace("_", "-"), str(getattr(a, opt))]
    return args
