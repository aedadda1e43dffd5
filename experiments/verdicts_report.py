"""The analyze phase of ``hw_verdicts_h200.py``: predicted vs measured speedups, verdicts with
leave-one-workload-out bands, the recommendation check, the decomposition; writes
``experiments/results/hw_verdicts_h200.json`` and ``.png``.

No band is ever made from the workload it judges: the band applied to workload w comes from the
held-out rows of the other workloads (``verdict.fit_bands(rows, exclude=w)``); the bands the
product prints (the digest's ``bands``) come from all held-out rows.
"""

from __future__ import annotations

import copy
import json
import math
import os
import statistics
import sys

from subgpu_jax.app.store import atomic_write
from subgpu_jax.app.viz import save_figure
from subgpu_jax.app.verdict import (COLLECTIVES, NEUTRAL, band_for, bands_to_json, classify,
                                    decide, fit_bands)

GPU = "H200"


def _load_measured(folder: str, name: str) -> dict | None:
    """``measured_<name>.json`` of the device phase, or None when absent.

    Raises:
        ValueError: unreadable, or a row without a name and collectives, or a measured makespan
            that is not a positive finite number (one line naming the file).
    """
    p = os.path.join(folder, f"measured_{name}.json")
    if not os.path.exists(p):
        return None
    try:
        with open(p) as fh:
            d = json.load(fh)
        rows = d["rows"]
        if not isinstance(rows, list):
            raise TypeError("rows must be a list")
        for i, r in enumerate(rows):
            if not isinstance(r.get("name"), str) or r.get("collectives") not in COLLECTIVES:
                raise ValueError(f"rows[{i}] needs a name and collectives "
                                 f"{'|'.join(COLLECTIVES)}")
            if "measured_us" in r:
                v = r["measured_us"]
                if isinstance(v, bool) or not isinstance(v, (int, float)) \
                        or not math.isfinite(v) or v <= 0:
                    raise ValueError(f"rows[{i}].measured_us must be a positive finite "
                                     f"makespan (µs), got {v!r}")
        return d
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"--data: {p}: unusable measurement file ({e})") from None


FIT_STATUSES = ("fit", "held_out", "held_out_family")


def check_plan(plan: dict) -> None:
    """Refuse a plan whose entries the analysis would misread: a fit status outside
    ``FIT_STATUSES``, a configuration mode outside the simulator's, or a predicted makespan that
    is not a positive finite number of µs.

    Raises:
        ValueError: one line naming ``--configs``, the workload and the field.
    """
    from subgpu_jax.app.verdict import MODES

    for w, p in plan.items():
        if p.get("fit_status") not in FIT_STATUSES:
            raise ValueError(f"--configs: {w}: fit_status must be one of "
                             f"{', '.join(FIT_STATUSES)}, got {p.get('fit_status')!r}")
        for d in p["configs"]:
            if d["kind"] != "temporal" and d["mode"] not in MODES:
                raise ValueError(f"--configs: {w}/{d['name']}: mode must be one of "
                                 f"{', '.join(MODES)}, got {d['mode']!r}")
            for c, v in d["predicted_us"].items():
                if isinstance(v, bool) or not isinstance(v, (int, float)) \
                        or not math.isfinite(v) or v <= 0:
                    raise ValueError(f"--configs: {w}/{d['name']}: predicted_us[{c!r}] must "
                                     f"be a positive finite makespan (µs), got {v!r}")


def _gpu_of(p: dict) -> str:
    """The GPU preset a plan entry was predicted for (``hardware``: NAME or NAME:VERSION;
    plans before the H100's carry none and are the H200's)."""
    return str(p.get("hardware") or GPU).split(":")[0]


def transferred(rows: list[dict], bands: dict, src_gpu: str) -> dict:
    """The cross-GPU test of the verdict: ``rows`` of one GPU judged with ``bands`` fitted on
    another (``src_gpu``'s committed digest), as subgpu would judge them had it trusted that
    GPU's bands unchanged. Also the widening this needs: the largest factor by which a held-out
    ratio (measured / predicted speedup) falls outside the source band of its regime (1 when
    every ratio is inside): the source of ``app.verdict.CROSS_GPU_WIDENING``.

    Returns:
        ``{"bands_from", "judged", "wrong", "win", "loss", "uncertain", "unbanded",
        "wrong_rows", "widening", "widening_row"}``."""
    from subgpu_jax.app.verdict import classify

    out = {"bands_from": src_gpu, "judged": 0, "wrong": 0, "win": 0, "loss": 0,
           "uncertain": 0, "unbanded": 0, "wrong_rows": [], "widening": 1.0,
           "widening_row": None}
    for r in rows:
        if not r["held_out"]:
            continue
        b = band_for(bands, src_gpu, False, r["moe"], r["mode"], r["collectives"])
        if b is None:
            out["unbanded"] += 1
            continue
        c = classify(r["predicted_speedup"], b)
        m = r["measured_speedup"]
        out[c] = out.get(c, 0) + 1
        ratio = m / r["predicted_speedup"]
        f = max(ratio / b.hi, b.lo / ratio, 1.0)
        if f > out["widening"]:
            out["widening"] = f
            out["widening_row"] = {"workload": r["workload"], "config": r["config"],
                                   "collectives": r["collectives"], "ratio": ratio,
                                   "band_regime": b.regime, "band": [b.lo, b.hi]}
        if NEUTRAL[0] <= m <= NEUTRAL[1]:
            continue
        out["judged"] += 1
        if (c == "win" and m < NEUTRAL[0]) or (c == "loss" and m > NEUTRAL[1]):
            out["wrong"] += 1
            out["wrong_rows"].append({k: r[k] for k in ("workload", "config", "mode",
                                                        "collectives", "predicted_speedup",
                                                        "measured_speedup")})
    return out


def speedup_rows(plan: dict, folder: str) -> tuple[list[dict], dict]:
    """One row per (workload, collectives, pipelined configuration) with both speedups, and
    per workload the temporal errors."""
    rows, temporal = [], {}
    for name, p in plan.items():
        meas = _load_measured(folder, name)
        if meas is None:
            continue
        by = {(r["collectives"], r["name"]): r for r in meas["rows"] if "measured_us" in r}
        cfgs = {d["name"]: d for d in p["configs"]}
        for coll in COLLECTIVES:
            t = by.get((coll, "temporal"))
            if t is None or coll not in cfgs["temporal"]["predicted_us"]:
                continue
            pt = cfgs["temporal"]["predicted_us"][coll]
            temporal.setdefault(name, {})[coll] = {
                "predicted_us": pt, "measured_us": t["measured_us"],
                "error": pt / t["measured_us"] - 1.0}
            for nm, d in cfgs.items():
                m = by.get((coll, nm))
                if nm == "temporal" or m is None or coll not in d["predicted_us"]:
                    continue
                rows.append({"workload": name, "config": nm, "kind": d["kind"],
                             "gpu": _gpu_of(p), "calibrated": False, "moe": bool(p["moe"]),
                             "mode": d["mode"], "collectives": coll, "alloc": d.get("sms"),
                             "held_out": p["fit_status"] != "fit",
                             "fit_status": p["fit_status"], "fresh": bool(p.get("fresh")),
                             "predicted_us": d["predicted_us"][coll],
                             "measured_us": m["measured_us"], "spread": m.get("spread"),
                             "predicted_speedup": pt / d["predicted_us"][coll],
                             "measured_speedup": t["measured_us"] / m["measured_us"]})
    return rows, temporal


def split_outside_space(rows: list[dict], stage_min_sms: int) -> tuple[list[dict], list[dict]]:
    """``(inside, outside)``: green-context rows with a stage of fewer than ``stage_min_sms``
    SMs (``Hardware.stage_min_sms``: the search no longer proposes them and ``subgpu run``
    refuses them, since no GEMM launched on the 8-SM pool of an [8, 120] split of an H100) are
    outside the product's space. The digest still judges them and fits them into its bands (they measured
    the model on configurations it chose); ``outside_space.if_excluded`` reports the held-out
    summary without them. Multistream rows run on the whole GPU and are always inside."""
    inside, outside = [], []
    for r in rows:
        a = r.get("alloc")
        small = r["mode"] == "green" and a and min(a) < stage_min_sms
        (outside if small else inside).append(r)
    return inside, outside


def _judge(rows: list[dict]) -> None:
    """Add the leave-one-workload-out band, class and right/wrong to every row."""
    for w in sorted({r["workload"] for r in rows}):
        bands = fit_bands(rows, exclude=w)
        for r in (x for x in rows if x["workload"] == w):
            b = band_for(bands, r["gpu"], False, r["moe"], r["mode"], r["collectives"])
            r["band"] = list(b.apply(r["predicted_speedup"])) if b else None
            r["band_regime"] = b.regime if b else None
            c = classify(r["predicted_speedup"], b)
            r["verdict"] = c
            m = r["measured_speedup"]
            r["sign_predicted"] = "win" if r["predicted_speedup"] > 1 else "loss"
            r["verdict_wrong"] = bool((c == "win" and m < NEUTRAL[0])
                                      or (c == "loss" and m > NEUTRAL[1]))
            r["point_verdict_wrong"] = bool((r["predicted_speedup"] > 1 and m < NEUTRAL[0])
                                            or (r["predicted_speedup"] < 1 and m > NEUTRAL[1]))


def recommendations(rows: list[dict]) -> list[dict]:
    """What the main job would recommend per workload and collectives (the search's first
    choice on green contexts, or its multi-stream run, or temporal), and whether it lost."""
    out = []
    for (w, coll) in sorted({(r["workload"], r["collectives"]) for r in rows}):
        rs = {r["config"]: r for r in rows if r["workload"] == w and r["collectives"] == coll}
        top, ms = rs.get("search_top1"), rs.get("search_top1_multistream")
        if top is None:
            continue
        bands = fit_bands(rows, exclude=w)
        pred = {"subgpu": top["predicted_speedup"]}
        bd = {"subgpu": band_for(bands, top["gpu"], False, top["moe"], "green", coll)}
        if ms is not None:
            pred["multistream"] = ms["predicted_speedup"]
            bd["multistream"] = band_for(bands, top["gpu"], False, top["moe"], "multistream",
                                         coll)
        v = decide(pred, bd)
        meas = {"temporal": 1.0, "subgpu": top["measured_speedup"]}
        if ms is not None:
            meas["multistream"] = ms["measured_speedup"]
        if v.recommend == "measure":
            # the user measures the candidates against temporal (subgpu tune) and keeps the
            # fastest: nothing is recommended against anything, so nothing can lose
            rec = max(meas, key=meas.get)
            got, best_alt = meas[rec], max(meas.values())
        else:
            rec = v.recommend
            got = meas[rec]
            best_alt = max(v for k, v in meas.items() if k != rec)
        out.append({"workload": w, "collectives": coll, "held_out": top["held_out"],
                    "fresh": bool(top.get("fresh")),
                    "recommend": v.recommend, "reason": v.reason, "measured": meas,
                    "measured_choice": rec,
                    "point_choice": "subgpu" if pred["subgpu"] > 1 else "temporal",
                    "lost": bool(got < best_alt * NEUTRAL[0]),
                    "loss_vs_best_alternative": got / best_alt,
                    "point_choice_measured": meas["subgpu"] if pred["subgpu"] > 1 else 1.0})
    return out


def _stats(xs: list[float]) -> dict:
    if not xs:
        return {"n": 0}
    return {"n": len(xs), "median": statistics.median(xs), "max": max(xs), "min": min(xs)}


def summarize(rows, temporal, recs, plan) -> dict:
    ho = [r for r in rows if r["held_out"]]
    err = [abs(r["predicted_speedup"] / r["measured_speedup"] - 1) for r in ho]
    outside = [r for r in rows if not NEUTRAL[0] <= r["measured_speedup"] <= NEUTRAL[1]]
    t_err = {w: {c: v["error"] for c, v in d.items()} for w, d in temporal.items()}
    ho_names = [w for w, p in plan.items() if p["fit_status"] != "fit"]
    return {
        "held_out_workloads": ho_names,
        "fit_workloads": [w for w, p in plan.items() if p["fit_status"] == "fit"],
        "temporal_error": t_err,
        "temporal_within_5pct_held_out": all(abs(e) <= 0.05 for w in ho_names
                                             for e in t_err.get(w, {}).values()),
        "speedup_ratio_error_held_out": _stats(err),
        "speedup_overstated_held_out": sum(r["predicted_speedup"] > r["measured_speedup"]
                                           for r in ho),
        "rows_held_out": len(ho),
        "verdicts": {c: sum(r["verdict"] == c for r in rows)
                     for c in ("win", "loss", "uncertain", "unvalidated")},
        "verdict_wrong": sum(r["verdict_wrong"] for r in outside),
        "verdict_judged": len(outside),
        "verdict_wrong_held_out": sum(r["verdict_wrong"] for r in outside if r["held_out"]),
        "verdict_judged_held_out": sum(bool(r["held_out"]) for r in outside),
        "recommendations_held_out": sum(bool(r["held_out"]) for r in recs),
        "recommendations_lost_held_out": sum(r["lost"] for r in recs if r["held_out"]),
        "recommendations_by_kind_held_out": {
            k: sum(r["recommend"] == k for r in recs if r["held_out"])
            for k in ("subgpu", "multistream", "temporal", "measure")},
        "point_verdict_wrong": sum(r["point_verdict_wrong"] for r in outside),
        "recommendations_lost": sum(r["lost"] for r in recs),
        "recommendations": len(recs),
        "recommendations_by_kind": {k: sum(r["recommend"] == k for r in recs)
                                    for k in ("subgpu", "multistream", "temporal", "measure")},
        "measure_where_temporal_was_best": sum(r["recommend"] == "measure"
                                               and r["measured_choice"] == "temporal"
                                               for r in recs),
        "point_choice_lost": sum(r["point_choice_measured"] < max(r["measured"].values())
                                 * NEUTRAL[0] for r in recs),
        "targets": _targets(err, outside, recs, ho_names, t_err),
        # the workloads first measured after the decision rule was chosen: its test
        "fresh_workloads": [w for w, p in plan.items() if p.get("fresh")],
        "fresh": {"verdict_wrong": sum(r["verdict_wrong"] for r in outside
                                       if r.get("fresh")),
                  "verdict_judged": sum(bool(r.get("fresh")) for r in outside),
                  "recommendations": sum(bool(r.get("fresh")) for r in recs),
                  "recommendations_lost": sum(r["lost"] for r in recs if r.get("fresh")),
                  "recommendations_by_kind": {
                      k: sum(r["recommend"] == k for r in recs if r.get("fresh"))
                      for k in ("subgpu", "multistream", "temporal", "measure")}},
    }


def _targets(err, outside, recs, ho_names, t_err) -> dict:
    """Each target "met", "missed", or "no data" when nothing held out was measured for it."""
    t_ho = [e for w in ho_names for e in t_err.get(w, {}).values()]
    judged = [r for r in outside if r["held_out"] and r["verdict"] != "unvalidated"]
    recs_v = [r for r in recs if r["held_out"]]

    def state(ok: bool, have: bool) -> str:
        return "no data" if not have else ("met" if ok else "missed")
    return {
        "temporal_within_5pct": state(all(abs(e) <= 0.05 for e in t_ho), bool(t_ho)),
        "speedup_error_median_5pct_max_10pct": state(
            bool(err) and statistics.median(err) <= 0.05 and max(err) <= 0.10, bool(err)),
        "verdict_right_outside_neutral": state(not any(r["verdict_wrong"] for r in judged),
                                               bool(judged)),
        "no_losing_recommendation": state(not any(r["lost"] for r in recs_v), bool(recs_v))}


def decomposition(rows: list[dict]) -> list[dict]:
    """Measured and predicted: sleep vs proxy vs none (communication hiding), green vs
    multistream of the search's first choice (the partition itself)."""
    out = []
    for w in sorted({r["workload"] for r in rows}):
        rs = {(r["config"], r["collectives"]): r for r in rows if r["workload"] == w}
        top = rs.get(("search_top1", "sleep"))
        if top is None:
            continue
        d = {"workload": w}
        for src in ("measured", "predicted"):
            k = f"{src}_speedup"
            d[src] = {}
            for cfg, mode in (("search_top1", "green"), ("search_top1_multistream",
                                                         "multistream")):
                for c in COLLECTIVES:
                    if (cfg, c) in rs:
                        d[src][f"{mode}_{c}"] = rs[(cfg, c)][k]
        out.append(d)
    return out


def figure(rows: list[dict], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colls = [c for c in COLLECTIVES if any(r["collectives"] == c for r in rows)]
    fig, axs = plt.subplots(1, len(colls), figsize=(6 * len(colls), 5.2), sharey=True,
                            squeeze=False)
    axs = axs[0]
    for ax, coll in zip(axs, colls):
        for ho, mk, lab in ((False, "s", "fit workloads"), (True, "o", "held-out workloads")):
            rs = [r for r in rows if r["collectives"] == coll and r["held_out"] == ho]
            if not rs:
                continue
            x = [r["predicted_speedup"] for r in rs]
            y = [r["measured_speedup"] for r in rs]
            ax.scatter(x, y, marker=mk, label=lab, alpha=0.75)
            for r in rs:
                if r["band"]:
                    ax.plot(r["band"], [r["measured_speedup"]] * 2, lw=0.6, color="gray",
                            alpha=0.5)
        lo = min([0.6] + [r["measured_speedup"] for r in rows])
        hi = max([1.5] + [r["predicted_speedup"] for r in rows])
        ax.plot([lo, hi], [lo, hi], "k--", lw=0.8, label="measured = predicted")
        ax.axhline(1.0, color="r", lw=0.6)
        ax.axvline(1.0, color="r", lw=0.6)
        ax.set_xlabel("predicted speedup over temporal (uncalibrated event simulator)")
        ax.set_title(f"H200, collectives {coll} (gray: leave-one-workload-out band)")
        ax.legend(fontsize=8)
    axs[0].set_ylabel("measured speedup over temporal (whole-step CUDA-graph replays)")
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)


def analyze(args, workloads) -> int:
    """The analyze phase (see the module docstring); exit 2 with one line on unusable input."""
    d = os.path.dirname(os.path.abspath(args.digest))
    if not os.path.isdir(d):
        print(f"error: --digest: folder {d} does not exist", file=sys.stderr)
        return 2
    try:
        with open(args.configs) as fh:
            plan = json.load(fh)
        if not isinstance(plan, dict) or not plan:
            raise ValueError("not a plan object, or an empty one")
        plan = {w: p for w, p in plan.items() if w in workloads}
        check_plan(plan)
        rows, temporal = speedup_rows(plan, args.data)
    except ValueError as e:   # speedup_rows names the flag (--data, --configs)
        print(f"error: {e}" if str(e).startswith("--") else
              f"error: --configs: {args.configs}: {e}", file=sys.stderr)
        return 2
    except (KeyError, TypeError, AttributeError) as e:
        print(f"error: --configs: {args.configs}: not a plan of --phase plan "
              f"({e.__class__.__name__}: {e})", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"error: --configs: {args.configs}: {e.strerror or e}", file=sys.stderr)
        return 2
    if not rows:
        print(f"error: --data: no measured rows under {args.data} (the device phase writes "
              f"measured_<workload>.json there)", file=sys.stderr)
        return 2
    ids = {p.get("duration_model") for w, p in plan.items()
           if w in {r["workload"] for r in rows}}
    if len(ids) != 1 or None in ids:
        print(f"error: --configs: the planned predictions must come from one model version "
              f"(duration_model), got {sorted(map(str, ids))}: re-run --phase plan",
              file=sys.stderr)
        return 2
    from subgpu_jax.model.hardware import get_hardware
    from subgpu_jax.sim.contention import ContentionModel, uncalibrated_model_id
    sharing = getattr(args, "pool_sharing", None)   # a model variant (hw_verdicts_h200.py)
    want = uncalibrated_model_id(get_hardware(getattr(args, "hardware", "H200")),
                                 None if sharing is None else
                                 ContentionModel(pool_sharing=sharing))
    if ids != {want}:
        print(f"error: --hardware: {getattr(args, 'hardware', 'H200')} is {want}, but the plan "
              f"was predicted by {next(iter(ids))}: pass the plan's --hardware, or --phase "
              "repredict it", file=sys.stderr)
        return 2
    hw_rows = get_hardware(getattr(args, "hardware", "H200"))
    inside, outside = split_outside_space(copy.deepcopy(rows), hw_rows.stage_min_sms)
    if_excluded = None
    if outside:   # a sensitivity figure only: the digest judges and fits every measured row
        _judge(inside)
        plan_in = {w: p for w, p in plan.items() if w in {r["workload"] for r in inside}}
        s_in = summarize(inside, temporal, recommendations(inside), plan_in)
        judged = [r for r in inside if r["held_out"] and r["verdict"] != "unvalidated"
                  and not NEUTRAL[0] <= r["measured_speedup"] <= NEUTRAL[1]]
        if_excluded = {"speedup_ratio_error_held_out": s_in["speedup_ratio_error_held_out"],
                       "verdict_wrong_held_out": s_in["verdict_wrong_held_out"],
                       "verdict_judged_held_out": s_in["verdict_judged_held_out"],
                       "uncertain_held_out": sum(r["verdict"] == "uncertain" for r in judged),
                       "recommendations_lost_held_out": s_in["recommendations_lost_held_out"]}
        print(f"{len(outside)} rows have a green stage below {hw_rows.stage_min_sms} SMs "
              f"(outside today's space); without them: {json.dumps(if_excluded)}")
    _judge(rows)
    recs = recommendations(rows)
    summ = summarize(rows, temporal, recs, {w: p for w, p in plan.items()
                                            if w in {r["workload"] for r in rows}})
    res = {"gpu": rows[0]["gpu"], "model": "uncalibrated event simulator (contention, L2 lru)",
           "duration_model": next(iter(ids)),
           # True when this model's own searches chose the configurations (the user path);
           # False for a plan predicted again after a model change (--phase repredict)
           "chosen_by_same_model": all(p.get("chosen_by", p.get("duration_model"))
                                       == p.get("duration_model") for p in plan.values()),
           "models": {w: p["model"] for w, p in plan.items()},
           # the newest measurement date (verdict_digest prefers the newest digest)
           "made": max((str((_load_measured(args.data, w) or {}).get("date", ""))
                        for w in {r["workload"] for r in rows}), default=""),
           # digest folders this one replaces (a re-measurement of their plan the same day)
           "supersedes": list(getattr(args, "supersedes", None) or []),
           "protocol": "experiments/hw_verdicts_h200.py", "neutral": list(NEUTRAL),
           "summary": summ, "temporal": temporal, "recommendations": recs,
           "decomposition": decomposition(rows), "rows": rows,
           "outside_space": {
               "stage_min_sms": hw_rows.stage_min_sms,
               "rows": [{k: r[k] for k in ("workload", "config", "collectives", "alloc",
                                           "predicted_speedup", "measured_speedup")}
                        for r in outside],
               "why": "green-context rows with a stage below the runtime's minimum "
                      "(Hardware.min_stage_sms): the search no longer proposes them and subgpu "
                      "run refuses them. They stay judged and in the bands above; "
                      "if_excluded is the held-out summary without them (a sensitivity "
                      "figure, not what the product prints)",
               "if_excluded": if_excluded},
           "bands": bands_to_json(fit_bands(rows))}
    if res["gpu"] != GPU:   # the cross-GPU test: the H200's committed bands on these rows
        from subgpu_jax.app.verdict import load_bands

        res["cross_gpu"] = transferred(rows, load_bands(
            GPU, model_id=uncalibrated_model_id(get_hardware(GPU))), GPU)
        c = res["cross_gpu"]
        print(f"cross-GPU test ({GPU} bands on {res['gpu']} rows): {c['wrong']} wrong of "
              f"{c['judged']} judged; widening needed {c['widening']:.3f}")
    out = args.digest
    atomic_write(out, json.dumps(res, indent=1))
    figure(rows, out.replace(".json", ".png"))
    print_table(res)
    print(f"wrote {out} and {out.replace('.json', '.png')}")
    return 0


def print_table(res: dict) -> None:
    s = res["summary"]
    print(f"{'workload':26s} {'coll':5s} {'config':26s} {'pred':>6s} {'meas':>6s} {'band':>11s} "
          f"verdict")
    for r in res["rows"]:
        b = f"{r['band'][0]:.2f}-{r['band'][1]:.2f}" if r["band"] else "-"
        print(f"{r['workload']:26s} {r['collectives']:5s} {r['config']:26s} "
              f"{r['predicted_speedup']:6.3f} {r['measured_speedup']:6.3f} {b:>11s} "
              f"{r['verdict']}{' WRONG' if r['verdict_wrong'] else ''}")
    for w, d in res["temporal"].items():
        print(f"temporal {w:26s} " + ", ".join(f"{c}: {v['error']:+.1%}" for c, v in d.items()))
    for r in res["recommendations"]:
        print(f"recommend {r['workload']:26s} {r['collectives']:5s} {r['recommend']:11s} "
              f"{'LOST' if r['lost'] else 'ok'}: {r['reason']}")
    print(json.dumps({k: s[k] for k in ("speedup_ratio_error_held_out", "verdicts",
                                        "verdict_wrong", "verdict_judged",
                                        "point_verdict_wrong", "recommendations_lost",
                                        "point_choice_lost", "targets")}, indent=1))


def markdown_table(res: dict) -> str:
    """The digest ``res`` as docs/verdicts.md's table: per workload (in the digest's row order)
    its fit status, temporal error per collectives setting, the search's first choice
    (predicted / measured, sleep), the median (max) of |predicted / measured speedup - 1| over
    its rows, its wrong verdicts of all its rows, and per collectives setting what the main
    job says with what was measured (the best alternative, or the best measured where it says
    "measure"), "**lost**" where it lost; then the held-out summary line."""
    rows, recs = res["rows"], res["recommendations"]
    if not rows:
        raise ValueError("the digest has no rows")
    for r in rows:
        for k in ("predicted_speedup", "measured_speedup"):
            if not (isinstance(r[k], (int, float)) and math.isfinite(r[k]) and r[k] > 0):
                raise ValueError(f"row {r['workload']}/{r['config']}: {k} must be a finite "
                                 f"number > 0, got {r[k]!r}")
    order = list(dict.fromkeys(r["workload"] for r in rows))
    out = ["| workload | fit status | temporal error | first choice, predicted / measured (sleep) "
           "| speedup error, median (max) | verdicts wrong | main job says (measured) |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
    for w in order:
        rs = [r for r in rows if r["workload"] == w]
        t = res["temporal"].get(w, {})
        terr = ", ".join(f"{c} {t[c]['error']:+.1%}" for c in COLLECTIVES if c in t)
        top = next((r for r in rs if r["config"] == "search_top1" and r["collectives"] == "sleep"),
                   None)
        first = (f"{top['predicted_speedup']:.2f}x / {top['measured_speedup']:.2f}x"
                 if top else "-")
        err = [abs(r["predicted_speedup"] / r["measured_speedup"] - 1) for r in rs]
        says = []
        for c in COLLECTIVES:
            r = next((x for x in recs if x["workload"] == w and x["collectives"] == c), None)
            if r is None:
                continue
            m = r["measured"]
            if r["recommend"] == "measure":
                best = max(m, key=m.get)
                what = f"measure (best measured: {best} {m[best]:.2f}x)"
            elif r["recommend"] == "temporal":
                alt = max((k for k in m if k != "temporal"), key=m.get)
                what = f"temporal ({alt} {m[alt]:.2f}x)"
            else:
                what = f"**{r['recommend']}** ({m[r['recommend']]:.2f}x)"
            says.append(f"{c}: {what}{' **lost**' if r['lost'] else ''}")
        out.append(f"| {w} | {rs[0]['fit_status'].replace('_', ' ')} | {terr} | {first} | "
                   f"{statistics.median(err):.1%} ({max(err):.0%}) | "
                   f"{sum(r['verdict_wrong'] for r in rs)} of {len(rs)} | {'; '.join(says)} |")
    s = res["summary"]
    e, v = s["speedup_ratio_error_held_out"], s["verdicts"]
    kinds = ", ".join(f"{k} {n}" for k, n in s.get("recommendations_by_kind", {}).items() if n)
    judged = (f"verdicts wrong {s['verdict_wrong']} of {s['verdict_judged']} judged (win "
              f"{v['win']}, loss {v['loss']}, uncertain {v['uncertain']})")
    says = f"the main job says {kinds} on {s['recommendations']}"
    targets = ", ".join(f"{k} {st}" for k, st in s["targets"].items())
    head = (f"Held out: speedup error median {e['median']:.1%}, max {e['max']:.1%} "
            f"({s['rows_held_out']} rows); ")
    out.append("")
    if "verdict_wrong_held_out" not in s:   # a digest from before the held-out counts
        out.append(f"{head}{judged}; {says} workload x collectives pairs, lost "
                   f"{s['recommendations_lost']}; targets: {targets}.")
        return "\n".join(out)
    kinds_ho = ", ".join(f"{k} {n}" for k, n in s["recommendations_by_kind_held_out"].items()
                         if n)
    out.append(f"{head}verdicts wrong {s['verdict_wrong_held_out']} of "
               f"{s['verdict_judged_held_out']} judged; the main job says {kinds_ho} on "
               f"{s['recommendations_held_out']} workload x collectives pairs, lost "
               f"{s['recommendations_lost_held_out']}. All workloads (fit ones too): {judged}; "
               f"{says} pairs, lost {s['recommendations_lost']}. Targets: {targets}.")
    return "\n".join(out)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "--markdown":
        print("usage: python experiments/verdicts_report.py --markdown DIGEST.json", file=sys.stderr)
        sys.exit(2)
    try:
        print(markdown_table(json.load(open(sys.argv[2], encoding="utf-8"))))
    except (OSError, ValueError) as e:
        print(f"error: DIGEST {sys.argv[2]!r}: {e}", file=sys.stderr)
        sys.exit(2)
    except (KeyError, TypeError, AttributeError, ZeroDivisionError) as e:
        print(f"error: DIGEST {sys.argv[2]!r}: not a verdict digest of analyze "
              f"({type(e).__name__}: {e})", file=sys.stderr)
        sys.exit(2)
