"""Issue 41 item 8: the whole step in the trace and the Gantt chart: the head kernels (final
norm, LM head, sampling, embedding), which run once per step on the whole GPU after the layers,
are drawn after the main run (before, the DeepSeek-V3 trace ended at 46,221 µs of a 47,818 µs
step). A one-kind model's drawing is then the whole step: its end is the step's makespan. A
model with several region kinds (DeepSeek-V3: 3 dense layers, then 58 MoE layers) has every run
drawn in layer order before the head: until the audit of issue 41 its trace and figures still
left the dense layers out (45,988 of a 46,883 µs step on 8 H200).

Oracles: the step's own numbers (``--json``: config makespan, head_us) against the trace's
last event and the chart's x-axis and rows.
"""

from __future__ import annotations

import json

import pytest

from subgpu_jax.app.cli import main

SIM = ["simulate", "--model", "llama-3.1-8b", "--gpus", "1", "--batch", "64", "--kv-history",
       "1024", "--json"]


def test_trace_and_gantt_end_with_the_head(tmp_path, capsys, monkeypatch):
    from subgpu_jax.app import viz

    seen = {}
    real = viz.gantt_figure

    def spy(res, title=None, t_max_us=None, scope=None, head=None, runs=None):
        fig = real(res, title, t_max_us, scope, head, runs)
        ax = fig.axes[0]
        seen["xmax"] = ax.get_xlim()[1]
        seen["rows"] = [t.get_text() for t in ax.get_yticklabels()]
        return fig

    monkeypatch.setattr(viz, "gantt_figure", spy)
    tr = tmp_path / "t.json"
    rc = main(SIM + ["--trace", str(tr), "--gantt", str(tmp_path / "g.png")])
    out, err = capsys.readouterr()
    assert rc == 0, err
    res = json.loads(out)
    step, head_us = res["config"]["makespan_us"], res["config"]["step"]["head_us"]
    assert head_us > 0
    ev = [e for e in json.loads(tr.read_text())["traceEvents"] if e["ph"] == "X"]
    assert max(e["ts"] + e["dur"] for e in ev) == pytest.approx(step, rel=1e-9)
    assert [e["name"] for e in ev if e["cat"] == "head"] == ["final_norm", "lm_head", "sample",
                                                             "embed"]
    assert seen["xmax"] == pytest.approx(step, rel=1e-9)
    assert seen["rows"][-1] == "head\n148 SMs"
    assert res["trace_shows"].endswith(f"of the {step:,.0f} µs step, then the head "
                                       f"({head_us:,.0f} µs: final norm, LM head, sampling, "
                                       "embedding)")


def test_utilisation_figure_ends_with_the_head(tmp_path, capsys, monkeypatch):
    """``--utilization``: each panel's series runs to the run's makespan plus the head's (a
    one-kind model: the step's makespan from ``--json``), with the head's span marked."""
    from subgpu_jax.app import viz

    seen = {}
    real = viz.utilisation_figure

    def spy(temporal, config, labels=("temporal", "SubGPU"), scopes=None, heads=None,
            runs=None):
        fig = real(temporal, config, labels, scopes, heads, runs)
        seen["ends"] = [max(max(line.get_xdata()) for line in ax.get_lines())
                        for ax in fig.axes]
        seen["legend"] = [t.get_text() for t in fig.axes[1].get_legend().get_texts()]
        seen["titles"] = [ax.get_title() for ax in fig.axes]
        return fig

    monkeypatch.setattr(viz, "utilisation_figure", spy)
    rc = main(SIM + ["--utilization", str(tmp_path / "u.png")])
    out, err = capsys.readouterr()
    assert rc == 0, err
    res = json.loads(out)
    assert seen["ends"][1] == pytest.approx(res["config"]["makespan_us"], rel=1e-6)
    assert seen["ends"][0] == pytest.approx(res["temporal"]["makespan_us"], rel=1e-6)
    assert any(t.startswith("head (") for t in seen["legend"]), seen["legend"]
    assert all("then the head" in t for t in seen["titles"]), seen["titles"]


def test_two_kind_model_whole_step_in_trace_and_figures(tmp_path, capsys, monkeypatch):
    """DeepSeek-V3-like (2 dense layers, then 8 MoE): the trace holds every layer 0-9 and the
    head and ends at the step's makespan (``--json``); the dense run comes first and lasts the
    step's own time of that run; the Gantt chart's x-axis and both utilisation panels end at
    their step's makespan; the texts name every run and draw nothing less."""
    import pathlib

    from subgpu_jax.app import viz

    cfg = json.loads((pathlib.Path(__file__).resolve().parents[1] / "data" / "configs"
                      / "deepseek-v3.json").read_text())
    cfg.update(num_hidden_layers=10, first_k_dense_replace=2)
    p = tmp_path / "ds.json"
    p.write_text(json.dumps(cfg))
    seen = {}
    real_g, real_u = viz.gantt_figure, viz.utilisation_figure

    def spy_g(*args, **kw):
        fig = real_g(*args, **kw)
        seen["gantt_xmax"] = fig.axes[0].get_xlim()[1]
        return fig

    def spy_u(*args, **kw):
        fig = real_u(*args, **kw)
        seen["util_ends"] = [max(max(line.get_xdata()) for line in ax.get_lines())
                             for ax in fig.axes]
        return fig

    monkeypatch.setattr(viz, "gantt_figure", spy_g)
    monkeypatch.setattr(viz, "utilisation_figure", spy_u)
    tr = tmp_path / "t.json"
    rc = main(["simulate", "--model", str(p), "--hardware", "H200", "--gpus", "8", "--tp", "8",
               "--dp", "1", "--ep", "8", "--batch", "64", "--kv-history", "1024", "--sms",
               "64,64", "--json", "--trace", str(tr), "--gantt", str(tmp_path / "g.png"),
               "--utilization", str(tmp_path / "u.png")])
    out, err = capsys.readouterr()
    assert rc == 0, err
    res = json.loads(out)
    step = res["config"]["makespan_us"]
    runs = res["config"]["step"]["runs"]
    assert [len(r["layers"]) * r["instances"] for r in runs] == [2, 8]
    trace = json.loads(tr.read_text())
    ev = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert max(e["ts"] + e["dur"] for e in ev) == pytest.approx(step, rel=1e-9)
    assert trace["otherData"]["makespan_us"] == pytest.approx(step, rel=1e-9)
    layers = {e["args"]["layer"] for e in ev if e["cat"] != "head"}
    assert layers == set(range(10))
    dense_end = max(e["ts"] + e["dur"] for e in ev if e["cat"] != "head"
                    and e["args"]["layer"] < 2)
    assert dense_end == pytest.approx(runs[0]["makespan_us"], rel=1e-9)
    assert min(e["ts"] for e in ev if e["cat"] != "head" and e["args"]["layer"] >= 2) >= \
        dense_end * (1 - 1e-12)
    assert seen["gantt_xmax"] == pytest.approx(step, rel=1e-9)
    assert seen["util_ends"][1] == pytest.approx(step, rel=1e-6)
    assert seen["util_ends"][0] == pytest.approx(res["temporal"]["makespan_us"], rel=1e-6)
    for text in (res["trace_shows"], res["figures_show"], trace["otherData"]["shows"]):
        assert text.startswith("layers 0-1 (2 layers, ") and "then layers 2-9 (8 layers" in text
        assert "not drawn" not in text and text.endswith("sampling, embedding)")
