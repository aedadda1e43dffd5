"""Verdict logic (``subgpu_jax.app.verdict``): bands from held-out rows, classification, the
decision rule, the committed file's round trip. Values worked by hand in each docstring."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from subgpu_jax.app.verdict import (NEUTRAL, Band, band_for, bands_to_json, classify, decide, fit_bands,
                                    format_band, load_bands, regime_key)


def _row(w, p, m, held_out=True, moe=False, mode="green", coll="sleep"):
    return {"workload": w, "gpu": "H200", "calibrated": False, "moe": moe, "mode": mode,
            "collectives": coll, "predicted_speedup": p, "measured_speedup": m,
            "held_out": held_out}


ROWS = [_row("a", 1.20, 0.96), _row("a", 1.00, 0.90), _row("b", 1.10, 1.045),
        _row("c", 1.30, 1.30, held_out=False), _row("d", 1.25, 1.00, moe=True)]


def test_fit_bands_by_hand():
    """Dense held-out ratios: a 0.96/1.20 = 0.80, 0.90/1.00 = 0.90, b 1.045/1.10 = 0.95 -> lo
    0.80, hi 0.95, median 0.90; c is a fit workload and is ignored; d (MoE) 1.00/1.25 = 0.80
    alone in its regime; the pooled band holds all four held-out rows: lo 0.80, hi 0.95,
    median (0.80 + 0.90) / 2 = 0.85 over (0.80, 0.80, 0.90, 0.95)."""
    b = fit_bands(ROWS)
    dense = b[regime_key("H200", False, False, "green", "sleep")]
    assert (dense.lo, dense.hi, dense.median, dense.n) == pytest.approx((0.80, 0.95, 0.90, 3))
    assert dense.workloads == ("a", "b")
    pooled = b[regime_key("H200", False, None, "green", "sleep")]
    assert (pooled.lo, pooled.hi, pooled.median, pooled.n) == pytest.approx((0.8, 0.95, 0.85, 4))
    moe = b[regime_key("H200", False, True, "green", "sleep")]
    assert moe.workloads == ("d",)


def test_band_for_falls_back_to_pooled_then_none():
    b = fit_bands(ROWS)
    # MoE has one workload (< MIN_WORKLOADS = 2): the pooled band
    assert band_for(b, "H200", False, True, "green", "sleep").regime.endswith("any/green/sleep")
    assert band_for(b, "H200", False, False, "green", "sleep").regime.endswith("dense/green/sleep")
    assert band_for(b, "H200", False, False, "green", "none") is None
    assert band_for(b, "B200", False, False, "green", "sleep") is None
    # leaving workload a out leaves b alone among dense (1 workload): pooled b + d (2 workloads)
    lo = fit_bands(ROWS, exclude="a")
    got = band_for(lo, "H200", False, False, "green", "sleep")
    assert got.workloads == ("b", "d")


def test_fit_bands_rejects_bad_speedups():
    with pytest.raises(ValueError, match="x: speedups must be finite and > 0"):
        fit_bands([_row("x", 1.0, 0.0)])


def test_classify_boundaries():
    """Band 0.8-0.95: S = 1.30 -> 1.04-1.235 win; S = 1.0 -> 0.80-0.95 loss; S = 1.1 ->
    0.88-1.045 uncertain; no band -> unvalidated."""
    b = Band(lo=0.8, hi=0.95, median=0.9, n=3, workloads=("a", "b"), regime="r")
    assert classify(1.30, b) == "win"
    assert classify(1.00, b) == "loss"
    assert classify(1.10, b) == "uncertain"
    assert classify(1.10, None) == "unvalidated"


@settings(max_examples=60, deadline=None)
@given(lo=st.floats(0.3, 1.0), width=st.floats(0.0, 0.6), s1=st.floats(0.3, 2.5),
       s2=st.floats(0.3, 2.5))
def test_classify_is_monotone_in_the_prediction(lo, width, s1, s2):
    b = Band(lo=lo, hi=lo + width, median=lo, n=2, workloads=("a", "b"), regime="r")
    order = {"loss": 0, "uncertain": 1, "win": 2}
    a, c = sorted((s1, s2))
    assert order[classify(a, b)] <= order[classify(c, b)]


def test_decide_recommends_highest_low_end_above_one():
    """SubGPU 1.30 x 0.80 = 1.04; multistream 1.20 x 0.90 = 1.08: multistream wins; the
    partition contributes 1.30 / 1.20 = 1.083 of the predicted gain; with a link-free
    prediction of 1.05 the communication part is 1.30 / 1.05."""
    bs = Band(0.80, 0.95, 0.9, 3, ("a", "b"), "s")
    bm = Band(0.90, 1.00, 0.95, 3, ("a", "b"), "m")
    v = decide({"subgpu": 1.30, "multistream": 1.20}, {"subgpu": bs, "multistream": bm},
               link_free=1.05)
    assert v.recommend == "multistream"
    assert v.bands["multistream"] == pytest.approx((1.08, 1.20))
    assert v.decomposition["partition"] == pytest.approx(1.30 / 1.20)
    assert v.decomposition["communication"] == pytest.approx(1.30 / 1.05)
    assert "validated band 1.08-1.20x is above 1" in v.reason


def test_decide_temporal_when_no_gain_is_predicted():
    """Predicted 1.01x (inside the neutral zone), band x [0.80, 0.95] = 0.81-0.96: temporal,
    and the reason quotes the low end."""
    b = Band(0.80, 0.95, 0.9, 3, ("a", "b"), "s")
    v = decide({"subgpu": 1.01}, {"subgpu": b}, ceiling=1.4)
    assert v.recommend == "temporal"
    assert "not expected to pay" in v.reason and "0.81x" in v.reason and "1.40x" in v.reason


def test_decide_measure_when_a_predicted_gain_is_not_validated():
    """Multistream predicted 1.13x with band [0.88, 1.00] -> 0.99-1.13x: a predicted gain above
    1.02 whose low end does not clear 1, so "measure", naming it. SubGPU predicted 0.95x with
    a band reaching 1.10x (x [0.80, 1.16]) is a predicted loss: alone it gives temporal, as
    does a multistream prediction of 1.02 (not above the neutral zone)."""
    bm = Band(0.88, 1.00, 0.95, 3, ("a", "b"), "m")
    bs = Band(0.80, 1.16, 0.9, 3, ("a", "b"), "s")
    v = decide({"subgpu": 0.95, "multistream": 1.13}, {"subgpu": bs, "multistream": bm})
    assert v.recommend == "measure"
    assert "uncertain: multistream is predicted to gain (1.130x)" in v.reason
    assert "band 0.99-1.13x does not clear 1" in v.reason and "subgpu tune" in v.reason
    assert decide({"subgpu": 0.95}, {"subgpu": bs}).recommend == "temporal"
    # a predicted gain of a mode without a band is not validated either: measure, naming it
    v3 = decide({"subgpu": 1.5, "multistream": 0.9}, {"subgpu": None, "multistream": bm})
    assert v3.recommend == "measure" and "subgpu is predicted to gain (1.500x)" in v3.reason
    assert "no error band on this GPU" in v3.reason
    with pytest.raises(ValueError, match="bands keys must be among"):
        decide({"subgpu": 1.1}, {"subgpu": bs, "multi_stream": bm})
    assert decide({"subgpu": 0.95, "multistream": 1.02},
                  {"subgpu": bs, "multistream": bm}).recommend == "temporal"


def test_decide_without_validation_says_measure():
    v = decide({"subgpu": 1.5}, {"subgpu": None})
    assert v.recommend == "measure" and v.bands["subgpu"] is None
    assert "no error band yet" in v.reason


@pytest.mark.parametrize("pred,kw,msg", [
    ({}, {}, "needs a 'subgpu'"),
    ({"subgpu": 0.0}, {}, "must be a finite number > 0"),
    ({"subgpu": float("nan")}, {}, "must be a finite number > 0"),
    ({"subgpu": True}, {}, "must be a finite number > 0"),
    ({"subgpu": 1.2, "foo": 2.0}, {}, "keys must be among"),
    ({"subgpu": 1.2}, {"link_free": float("inf")}, "link_free must be a finite number"),
    ({"subgpu": 1.2}, {"link_free": 0.0}, "link_free must be a finite number"),
    ({"subgpu": 1.2}, {"ceiling": float("nan")}, "ceiling must be a finite number")])
def test_decide_rejects_bad_input(pred, kw, msg):
    with pytest.raises(ValueError, match=msg):
        decide(pred, {}, **kw)


def test_decide_takes_numpy_scalars_and_rejects_bad_bands():
    import numpy as np
    v = decide({"subgpu": np.float32(1.2)}, {"subgpu": None})
    assert v.recommend == "measure"
    with pytest.raises(ValueError, match="bands must map modes"):
        decide({"subgpu": 1.2}, None)
    with pytest.raises(ValueError, match=r"bands\['subgpu'\] must be a Band"):
        decide({"subgpu": 1.2}, {"subgpu": (0.8, 0.9)})


@pytest.mark.parametrize("kw,msg", [
    (dict(lo=2.0, hi=0.5, median=1.0), "lo <= median <= hi"),
    (dict(lo=float("nan"), hi=1.0, median=1.0), "band.lo must be"),
    (dict(lo=0.8, hi=1.0, median=0.9, n=0), "n must be an integer >= 1"),
    (dict(lo=0.8, hi=1.0, median=0.9, workloads=()), "workloads must be a non-empty tuple")])
def test_band_is_validated(kw, msg):
    base = dict(lo=0.8, hi=1.0, median=0.9, n=2, workloads=("a", "b"), regime="r")
    with pytest.raises(ValueError, match=msg):
        Band(**{**base, **kw})


def test_classify_rejects_non_positive_speedups():
    b = Band(0.8, 0.95, 0.9, 3, ("a", "b"), "r")
    for bad in (float("nan"), float("inf"), -1.0, "1.1"):
        with pytest.raises(ValueError, match="speedup must be a finite number > 0"):
            classify(bad, b)


@pytest.mark.parametrize("field,value,msg", [
    ("calibrated", "false", "calibrated must be a bool"),
    ("held_out", "False", "held_out must be a bool"),
    ("mode", "purple", "mode must be one of"),
    ("collectives", "xyz", "mode must be one of"),
    ("measured_speedup", None, "speedups must be finite and > 0")])
def test_fit_bands_rejects_malformed_rows(field, value, msg):
    with pytest.raises(ValueError, match=msg):
        fit_bands([{**_row("a", 1.1, 1.0), field: value}])
    with pytest.raises(ValueError, match="lacks workload"):
        fit_bands([{k: v for k, v in _row("a", 1.1, 1.0).items() if k != "workload"}])


def test_bands_round_trip_and_bad_file(tmp_path):
    from subgpu_jax.sim.contention import uncalibrated_model_id
    b = fit_bands(ROWS)
    assert any(k.split("/")[1] == "uncalibrated" for k in b)
    f = tmp_path / "hw_verdicts_h200.json"
    # measured for another model version (or no version recorded): its uncalibrated bands do
    # not apply to this model's predictions
    v3 = "analytic-v3 (co-run memory-latency gain 1.5)"
    assert uncalibrated_model_id() != v3
    for other in ({}, {"duration_model": v3}):
        f.write_text(json.dumps({"bands": bands_to_json(b), **other}))
        assert all(k.split("/")[1] != "uncalibrated" for k in load_bands("H200", tmp_path))
    assert set(load_bands("H200", tmp_path, model_id=v3)) == set(b)   # the version it names
    # one folder per model version: the digest made for the version asked for is found
    sub = tmp_path / "hw_verdicts" / "analytic-v3"
    sub.mkdir(parents=True)
    (sub / "hw_verdicts_h200.json").write_text(f.read_text())
    f.unlink()
    assert set(load_bands("H200", tmp_path, model_id=v3)) == set(b)
    assert all(k.split("/")[1] != "uncalibrated" for k in load_bands("H200", tmp_path))
    f.write_text(json.dumps({"bands": bands_to_json(b), "duration_model": uncalibrated_model_id()}))
    got = load_bands("H200", tmp_path)
    assert set(got) == set(b)
    for k in b:
        assert (got[k].lo, got[k].hi, got[k].n) == (b[k].lo, b[k].hi, b[k].n)
        assert got[k].source == "hw_verdicts_h200.json"
    assert load_bands("B200", tmp_path) == {}
    good = bands_to_json(b)
    k0 = next(iter(good))
    for bad in ("{not json", json.dumps({"bands": None}), json.dumps({"bands": []}),
                json.dumps({"bands": {"x": good[k0]}}),
                json.dumps({"bands": {k0: {**good[k0], "workloads": "ab"}}}),
                json.dumps({"bands": {k0: {**good[k0], "n": 2.7}}}),
                json.dumps({"bands": {k0: {**good[k0], "lo": 2.0}}})):
        (tmp_path / "hw_verdicts_h100.json").write_text(bad)
        with pytest.raises(ValueError, match="hw_verdicts_h100.json: unreadable verdict bands"):
            load_bands("H100", tmp_path)


def test_format_band_text():
    """The prediction first, then what such predictions measured (the prediction times the
    regime's ratios: 1.15 x 0.80 = 0.92, 1.15 x 0.95 = 1.0925), in one sentence."""
    b = Band(0.80, 0.95, 0.9, 3, ("a", "b"), "H200/uncalibrated/dense/green/sleep")
    assert format_band(1.15, b, "H200").startswith(
        "predicted 1.150x; on held-out workloads such predictions measured 0.92-1.09x on the "
        "H200")
    assert "no error band" in format_band(1.15, None, "B200")
    assert ("(3 configurations, 2 workloads of its regime: uncalibrated "
            "model, dense models, green contexts, collectives emulated as a wait "
            "(--collectives sleep))") in format_band(1.15, b, "H200")


def _band(lo, hi, gpu, ws=("a", "b")):
    return Band(lo, hi, (lo + hi) / 2, 4, ws, f"{gpu}/uncalibrated/any/green/sleep")


def test_transfer_band_is_the_union_widened():
    """Hand derivation: H200 ratios 0.80-1.10, H100 0.90-1.20 -> union 0.80-1.20, widened by
    W = 1.126: 0.80 / 1.126 = 0.7105, 1.20 x 1.126 = 1.3512. Never a win; a loss only when the
    widened high end stays below 1."""
    from subgpu_jax.app.verdict import CROSS_GPU_WIDENING, transfer_band

    val = {"H200": {"H200/uncalibrated/any/green/sleep": _band(0.80, 1.10, "H200")},
           "H100": {"H100/uncalibrated/any/green/sleep": _band(0.90, 1.20, "H100", ("c", "d"))}}
    b = transfer_band(val, False, True, "green", "sleep")
    assert CROSS_GPU_WIDENING == 1.126
    assert b.transferred and b.lo == pytest.approx(0.80 / 1.126) and b.hi == pytest.approx(
        1.20 * 1.126)
    assert b.workloads == ("H100:c", "H100:d", "H200:a", "H200:b") and b.n == 8
    assert b.gpus == ("H100", "H200")             # the band names its sources
    assert "the validated GPUs (H100 and H200)" in format_band(0.9, b, "B200")
    assert transfer_band(val, False, True, "multistream", "sleep") is None
    assert classify(2.0, b) == "uncertain"           # low end 1.42 > 1: still not a win
    assert classify(0.70, b) == "loss"               # high end 0.70 x 1.3512 = 0.946 < 1
    assert classify(0.75, b) == "uncertain"          # 0.75 x 1.3512 = 1.013
    v = decide({"subgpu": 0.70}, {"subgpu": b})
    assert v.recommend == "temporal" and "predicted to lose here" in v.reason
    v = decide({"subgpu": 1.5}, {"subgpu": b})
    assert v.recommend == "measure" and "never validated" in v.reason
    with pytest.raises(ValueError, match="widening must be >= 1"):
        transfer_band(val, False, True, "green", "sleep", widening=0.9)
    # the text undoes the band's own widening: 1.5 -> measured 0.80-1.20 x 1.0, 0.53-1.80 widened
    b15 = transfer_band(val, False, True, "green", "sleep", widening=1.5)
    assert b15.widening == 1.5
    assert "measured 0.80-1.20x, 0.53-1.80x with the 1.500x margin" in format_band(1.0, b15, "B200")


def test_a_band_names_its_gpus():
    """A GPU's own bands (fitted or loaded) name that GPU; a band made by hand names none, and
    the transferred text refuses it instead of parsing its regime; bad names are refused."""
    from subgpu_jax.app.verdict import fit_bands, load_bands, validated_gpus

    assert all(b.gpus == ("H200",) for b in load_bands("H200").values())
    row = {"gpu": "H100", "calibrated": False, "moe": True, "mode": "green",
           "collectives": "sleep", "held_out": True, "workload": "w",
           "predicted_speedup": 1.0, "measured_speedup": 0.9}
    assert {b.gpus for b in fit_bands([row]).values()} == {("H100",)}
    assert validated_gpus(Band(0.8, 0.9, 0.85, 1, ("a",), "r", gpus=("H200",))) == \
        "the validated GPU (H200)"
    with pytest.raises(ValueError, match="does not name the GPUs"):
        validated_gpus(_band(0.8, 0.9, "H200"))
    for bad in (["H200"], ("",), (3,)):
        with pytest.raises(ValueError, match="gpus must be a tuple of GPU names"):
            Band(0.8, 0.9, 0.85, 1, ("a",), "r", gpus=bad)


def test_cross_gpu_widening_is_the_committed_measurement():
    """``CROSS_GPU_WIDENING`` is the H100 digest's measured cross-GPU widening (rounded up to
    three decimals), and the H100 digest's verdicts were judged on H100 regimes."""
    import math
    from pathlib import Path

    from subgpu_jax.app.verdict import CROSS_GPU_WIDENING

    f = (Path(__file__).resolve().parents[2] / "experiments" / "results" / "hw_verdicts"
         / "analytic-v3" / "hw_verdicts_h100.json")
    d = json.loads(f.read_text())
    assert d["gpu"] == "H100" and d["cross_gpu"]["bands_from"] == "H200"
    assert CROSS_GPU_WIDENING == math.ceil(d["cross_gpu"]["widening"] * 1000) / 1000
    assert {r["band_regime"].split("/")[0] for r in d["rows"] if r["band_regime"]} == {"H100"}


def test_unvalidated_gpu_gets_a_transferred_verdict():
    """A GPU without a digest (the B200) is judged with the validated GPUs' bands widened: a
    deep predicted loss says "temporal", never "measure"."""
    from subgpu_jax.app.modes import ModePrediction, verdict_for

    mp = ModePrediction(temporal_us=100.0, subgpu_us=200.0, multistream_us=210.0,
                        temporal_nolink_us=100.0, subgpu_nolink_us=200.0,
                        multistream_nolink_us=210.0)
    v = verdict_for(mp, "B200", False, True)
    assert v["recommend"] == "temporal" and "predicted to lose here" in v["reason"]
    assert "never validated" in v["band_text"]


@given(st.floats(0.5, 2.0), st.floats(0.5, 2.0), st.floats(0.5, 1.0), st.floats(0.0, 0.6),
       st.floats(0.5, 1.0), st.floats(0.0, 0.6), st.booleans())
def test_decide_rule_holds(ps, pm, ls, ws, lm, wm, ms_band):
    """The rule of the module docstring, on random predictions and bands: a mode is recommended
    only when its band's low end clears 1 and no other band's low end is higher; temporal only
    when no mode is predicted above NEUTRAL[1]; otherwise "measure"."""
    bs = Band(ls, ls + ws, ls + ws / 2, 3, ("a", "b"), "s")
    bm = Band(lm, lm + wm, lm + wm / 2, 3, ("a", "b"), "m") if ms_band else None
    v = decide({"subgpu": ps, "multistream": pm}, {"subgpu": bs, "multistream": bm})
    lows = {k: b[0] for k, b in v.bands.items() if b is not None}
    if v.recommend in ("subgpu", "multistream"):
        assert lows[v.recommend] > 1.0 and lows[v.recommend] == max(lows.values())
    elif v.recommend == "temporal":
        assert max(lows.values()) <= 1.0 and max(ps, pm) <= NEUTRAL[1]
    else:
        assert v.recommend == "measure"
        assert max(lows.values()) <= 1.0 and max(ps, pm) > NEUTRAL[1]


def test_verdict_digest_skips_superseded_folders(tmp_path):
    """Two digests of one model made the same day: the one another names in ``supersedes`` is
    never chosen (without the field the first path wins the tie); a broken digest is refused."""
    import json

    from subgpu_jax.app.verdict import verdict_digest

    def put(folder, **extra):
        f = tmp_path / "hw_verdicts" / folder / "hw_verdicts_h200.json"
        f.parent.mkdir(parents=True)
        f.write_text(json.dumps({"duration_model": "m1", "made": "2026-12-02", **extra}))
        return f

    a = put("a-first")
    assert verdict_digest("H200", "m1", tmp_path) == a
    b = put("b-remeasured", supersedes=["a-first"])
    assert verdict_digest("H200", "m1", tmp_path) == b
    assert verdict_digest("H200", "other", tmp_path) == tmp_path / "hw_verdicts_h200.json"
    (tmp_path / "hw_verdicts" / "c-broken").mkdir()
    (tmp_path / "hw_verdicts" / "c-broken" / "hw_verdicts_h200.json").write_text("{")
    with pytest.raises(ValueError, match="unreadable verdict bands"):
        verdict_digest("H200", "m1", tmp_path)


@pytest.mark.parametrize("bad", [5, "a-first", ["a/"], [None], ["missing"], ["b-new"]])
def test_verdict_digest_refuses_bad_supersedes(tmp_path, bad):
    """``supersedes`` must be a list of other existing digest folders (an int, a bare string, a
    path form, a null, a missing folder, the digest's own folder): one error naming the file."""
    import json

    from subgpu_jax.app.verdict import verdict_digest

    for folder, extra in (("a-first", {}), ("b-new", {"supersedes": bad})):
        f = tmp_path / "hw_verdicts" / folder / "hw_verdicts_h200.json"
        f.parent.mkdir(parents=True)
        f.write_text(json.dumps({"duration_model": "m1", "made": "2026-12-02", **extra}))
    with pytest.raises(ValueError, match="b-new.*supersedes must be a list"):
        verdict_digest("H200", "m1", tmp_path)


def test_verdict_digest_refuses_a_supersedes_cycle(tmp_path):
    import json

    from subgpu_jax.app.verdict import verdict_digest

    for folder, other in (("a", "b"), ("b", "a")):
        f = tmp_path / "hw_verdicts" / folder / "hw_verdicts_h200.json"
        f.parent.mkdir(parents=True)
        f.write_text(json.dumps({"duration_model": "m1", "made": "2026-12-02",
                                 "supersedes": [other]}))
    with pytest.raises(ValueError, match="supersede each other"):
        verdict_digest("H200", "m1", tmp_path)
