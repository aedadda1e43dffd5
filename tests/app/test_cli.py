"""The ``subgpu`` command: outputs, and bad input -> one line, exit code 2, no traceback."""

import json
import subprocess
import sys

import pytest

from subgpu_jax.app.cli import main

SMALL = ["--model", "gpt-oss-20b", "--hardware", "H200", "--gpus", "8", "--tp", "8", "--dp", "1",
         "--ep", "8", "--batch", "256", "--kv-history", "4096"]


def run_cli(args, capsys):
    rc = main(args)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_space_counts_published(capsys):
    rc, out, _ = run_cli(["space", "--chain", "20", "--stages", "5", "--json"], capsys)
    assert rc == 0
    row = json.loads(out)["rows"][0]
    assert row["cut_binding_choices"] == 15504
    assert row["cuts_w0"] == 3876 and row["cuts_w1"] == 11628
    assert row["allocations"] == 1088430


def test_simulate_static_reference_json(capsys):
    rc, out, _ = run_cli(["simulate", "--simulator", "static", "--json"], capsys)
    assert rc == 0
    r = json.loads(out)
    assert r["workload"]["model"] == "gpt-oss-120b" and r["workload"]["num_gpus"] == 32
    t, c = r["temporal"], r["config"]
    assert t["per_gpu_tok_s"] == pytest.approx(64 * 1e6 / t["makespan_us"])
    assert t["per_user_tok_s"] == pytest.approx(1e6 / t["makespan_us"])
    assert c["D"] == 2 and c["w"] == 1 and c["microbatches"] == 2
    assert c["segments"][1] == ["L1.attn"]
    assert r["speedup"] == pytest.approx(t["makespan_us"] / c["makespan_us"])


def test_simulate_event_outputs(tmp_path, capsys):
    tr, gn, ut = tmp_path / "t.json", tmp_path / "g.png", tmp_path / "u.png"
    rc, out, _ = run_cli(["simulate", *SMALL, "--sms", "48,80", "--json", "--trace", str(tr),
                          "--gantt", str(gn), "--utilization", str(ut)], capsys)
    assert rc == 0
    r = json.loads(out)
    for name in ("temporal", "config"):
        assert 0.0 <= r[name]["l2_hit_rate"] <= 1.0
        assert 0.0 < r[name]["mean_hbm_util"] <= 1.0
        assert set(r[name]["category_time_us"]) >= {"attn_full", "mlp"}
    ev = [e for e in json.loads(tr.read_text())["traceEvents"] if e["ph"] == "X"]
    assert ev and {"layer", "microbatch", "segment", "stage", "category"} <= set(ev[0]["args"])
    assert {e["tid"] for e in ev if e["cat"] != "head"} == {0, 1}  # the stages; then the head
    assert {e["tid"] for e in ev if e["cat"] == "head"} == {2}
    assert gn.stat().st_size > 1000 and ut.stat().st_size > 1000


@pytest.mark.parametrize("args, field", [
    (["simulate", "--sms", "3,145"], "quantum"),
    (["simulate", "--sms", "74,70"], "budget"),
    (["simulate", "--model", "nope"], "model"),
    (["simulate", "--hardware", "A100"], "hardware"),
    (["simulate", "--microbatch", "300"], "microbatch"),
    (["simulate", "--tp", "128", "--dp", "1", "--gpus", "128"], "--tp 128 must divide"),
    (["simulate", "--ep", "3"], "--ep 3 must divide"),
    (["simulate", "--batch", "2047"], "--batch 2047 must be divisible by the DP 4"),
    (["simulate", "--cuts", "L1.attn,L1.attn"], "cuts"),
    (["simulate", "--cuts", "0,5"], "cuts"),
    (["simulate", "--sms", "74,x"], "sms"),
    (["simulate", "--cuts", "L9.attn"], "kernel name"),
    (["simulate", "--policy", "random"], "policy"),
    (["simulate", "--cache", "mru"], "policy"),
    (["simulate", "--trace", "/nonexistent-dir/x.json"], "trace"),
    (["simulate", "--simulator", "static", "--gantt", "x.png"], "gantt"),
    (["simulate", "--model", "llama-3.1-70b", "--hardware", "H200", "--gpus", "8", "--tp", "8",
      "--dp", "1", "--batch", "256"], "does not fit"),
    (["simulate", "--model", "/"], "config.json"),
    (["search", "--batch", "512"], "batches"),
    (["search", "--microbatches", "3", "--batches", "512", "--out", "/nonexistent-dir/x/y"],
     "grid is empty"),
    (["space", "--stages", "0"], "stages"),
    (["space", "--chain", "20", "--quantum", "3"], "quantum"),
])
def test_bad_input_exit_2_one_line(args, field, capsys):
    rc, out, err = run_cli(args, capsys)
    assert rc == 2
    lines = err.strip().splitlines()
    assert lines[0].startswith("error:") and field in lines[0], err
    if field == "does not fit":  # one error line, then the model and the flags that would fit
        assert len(lines) >= 3 and all(x.startswith("  ") for x in lines[1:]), err
    else:
        assert len(lines) == 1, err


def test_console_script_no_traceback():
    p = subprocess.run([sys.executable, "-m", "subgpu_jax.app.cli", "simulate", "--sms", "1,147"],
                       capture_output=True, text=True)
    assert p.returncode == 2
    assert "Traceback" not in p.stderr and p.stderr.startswith("error:")


def test_config_json_model(tmp_path, capsys):
    cfg = {"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 1024,
           "num_attention_heads": 16, "num_key_value_heads": 4, "vocab_size": 32000,
           "intermediate_size": 4096}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    rc, out, _ = run_cli(["simulate", "--model", str(p), "--hardware", "H200", "--gpus", "8",
                          "--tp", "8", "--dp", "1", "--ep", "1", "--batch", "64", "--json",
                          "--simulator", "static", "--sms", "64,64"], capsys)
    assert rc == 0
    assert json.loads(out)["config"]["segments"][1] == ["L0.attn"]
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    rc, _, err = run_cli(["simulate", "--model", str(bad)], capsys)
    assert rc == 2 and "malformed" in err


def test_dense_model_defaults_to_ep1_and_model_folder(tmp_path, capsys):
    cfg = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 512,
           "num_attention_heads": 8, "vocab_size": 1000, "intermediate_size": 1024}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    rc, out, err = run_cli(["simulate", "--model", str(tmp_path), "--hardware", "H200", "--gpus",
                            "1", "--tp", "1", "--dp", "1", "--batch", "16", "--json",
                            "--simulator", "static"], capsys)
    assert rc == 0, err
    r = json.loads(out)
    assert r["workload"]["moe_ep"] == 1


def test_memory_infeasible_points_are_skipped():
    from subgpu_jax import get_hardware, get_model
    from subgpu_jax.app.sweep import build_grid

    notes = []
    pts = build_grid(get_model("llama-3.1-70b"), 8, [32, 256], [2], [1],
                     parallelisms=[(8, 1, 1)], hw=get_hardware("H200"), skipped=notes)
    assert {p.deploy.global_batch for p in pts} == {32}
    assert any("does not fit" in n and "G=256" in n for n in notes)


def test_reversed_cuts_are_refused_with_the_order(capsys):
    """Cuts out of region order would pair the SMs with other stages than the user meant: a
    one-line error with the ordered --cuts, exit code 2 (they used to be sorted silently)."""
    rc, _, err = run_cli(["simulate", "--simulator", "static", "--cuts", "L1.o_proj,L1.attn",
                          "--reuse", "--sms", "64,84"], capsys)
    assert rc == 2 and err.count("\n") == 1
    assert "cuts must be given in region order" in err and "--cuts L1.attn,L1.o_proj" in err
    rc, _, err = run_cli(["simulate", "--simulator", "static", "--cuts", "L1.attn,L1.o_proj",
                          "--reuse", "--sms", "64,84", "--json"], capsys)
    assert rc == 0, err


def test_simulate_prints_three_modes_and_an_honest_verdict(capsys):
    """``simulate`` adds the multistream mode, the link-free control and the verdict: the JSON's
    speedups follow from its makespans (partition = SubGPU / multistream speedup), the SubGPU
    makespans are the ones reported above, and on a GPU without held-out verdict data there is
    no band and the recommendation is "measure"."""
    rc, out, _ = run_cli(["simulate", *SMALL, "--sms", "48,80", "--json"], capsys)
    assert rc == 0
    r = json.loads(out)
    v = r["modes"]
    assert v["subgpu_us"] == pytest.approx(r["config"]["makespan_us"])
    assert v["temporal_us"] == pytest.approx(r["temporal"]["makespan_us"])
    assert v["multistream"] == pytest.approx(v["temporal_us"] / v["multistream_us"])
    assert v["partition"] == pytest.approx(v["subgpu"] / v["multistream"])
    assert v["subgpu_nolink"] == pytest.approx(v["temporal_nolink_us"] / v["subgpu_nolink_us"])
    assert v["temporal_nolink_us"] < v["temporal_us"]     # TP8/EP8: collectives exist
    from subgpu_jax.app.verdict import load_bands
    rc, out, _ = run_cli(["simulate", *SMALL, "--sms", "48,80"], capsys)
    assert "modes     the same schedule on plain streams" in out
    if not load_bands("H200"):   # until the verdict protocol's digest is committed
        assert v["bands"] == {"subgpu": None, "multistream": None}
        assert v["recommend"] == "measure"
        assert "no error band: the held-out verdict protocol has not run for this kind of " \
               "prediction on the H200" in out
    else:
        assert v["recommend"] in ("subgpu", "multistream", "temporal")
