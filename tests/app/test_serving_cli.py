"""The serving accounting from the command line (docs/accounting.md, issue 28): per-group
quantisation, the busiest rank, the MoE gather and dispatch, the memory budget, a whole generation
and the FP8 KV cache through ``subgpu simulate`` and ``subgpu search``; bad input is one line and
exit code 2. Right values are worked out by hand in the docstrings (or in
tests/model/test_accounting.py, whose numbers these repeat)."""

import csv
import json
import pathlib

import pytest

from subgpu_jax.app.cli import main

CONFIGS = pathlib.Path(__file__).resolve().parents[1] / "data" / "configs"
#: DeepSeek-V3 from its vendored config.json on 8 H200, attention DP8, EP8, G = 512, prompt 4,096.
DS = ["--model", str(CONFIGS / "deepseek-v3.json"), "--hardware", "H200", "--gpus", "8",
      "--tp", "1", "--dp", "8", "--ep", "8", "--batch", "512", "--input-len", "4096"]
#: Llama-3.1-8B on one H200, G = 64 (fast with the static evaluator).
LLAMA = ["--model", "llama-3.1-8b", "--hardware", "H200", "--gpus", "1", "--tp", "1",
         "--dp", "1", "--batch", "64"]
FAST = ["--simulator", "static", "--sms", "even", "--json"]


def run_cli(args, capsys):
    try:
        rc = main(args)
    except SystemExit as e:  # argparse's own errors (one line too)
        rc = e.code
    out = capsys.readouterr()
    return rc, out.out, out.err


def _sim(args, capsys):
    rc, out, err = run_cli(["simulate", *args, *FAST], capsys)
    assert rc == 0, err
    return json.loads(out)


def test_deepseek_quantisation_memory_and_dispatch(capsys):
    """Items 1, 4, 5: DeepSeek-V3 DP8 at G = 512 (R = 64), KV 4,096: weights 100,815,011,840 B
    (every linear layer FP8), KV 18,421,383,168 B, activations 34,013,696 B: 119.27 GB of a
    0.9 x 150.1 = 135.1 GB budget (150.1e9 B: what an H200 reports). Per-expert dispatch sends k(e-1)/e = 8*7/8 = 7 copies per token;
    per-rank, with its group-limited routing (4 of 8 groups, one group per EP rank):
    7*(1 - (1/2 + 1/2 prod_{i<8} (96-i)/(128-i))) = 3.1754 (routing.remote_ranks_per_token)."""
    r = _sim(DS, capsys)
    m = r["memory"]
    assert m["weights_GB"] == pytest.approx(100.81501184)
    assert m["kv_GB"] == pytest.approx(18.421383168) and m["budget_GB"] == pytest.approx(135.09)
    assert m["total_GB"] == pytest.approx(119.270408704)
    assert r["dtypes"]["attn"] == ["fp8", "fp8"] and r["dtypes"]["other"] == ["bf16", "bf16"]
    assert r["moe"]["dispatch"] == "per-expert" and r["moe"]["remote_copies_per_token"] == 7.0
    assert r["workload"]["dispatch"] == "per-expert"
    r2 = _sim(DS + ["--dispatch", "per-rank"], capsys)
    assert r2["moe"]["remote_copies_per_token"] == pytest.approx(3.1754, abs=1e-4)
    assert r2["config"]["makespan_us"] < r["config"]["makespan_us"]  # fewer bytes to send


def test_text_output_names_the_budget_and_the_dispatch(capsys):
    rc, out, _ = run_cli(["simulate", *DS, "--simulator", "static", "--sms", "even",
                          "--dispatch", "per-rank"], capsys)
    assert rc == 0
    assert "of a 135.1 GB budget (--gpu-memory-utilization 0.9 x 150.1 GB)" in out
    assert "MoE dispatch per-rank (one copy per destination rank, deduplicated" in out
    # DeepSeek-V3 has every group (dense first layers, shared and routed experts)
    assert "quantised (weights/GEMM): attn fp8, dense_mlp fp8, shared_experts fp8, experts fp8" \
        in out


def test_quantised_line_names_only_the_groups_the_model_has(capsys):
    """GPT-OSS 120B has routed experts only (no dense MLP, no shared experts; its public
    config.json): the line names its MXFP4 experts and nothing it lacks, while ``--json`` keeps
    every group's dtypes."""
    rc, out, _ = run_cli(["simulate", "--simulator", "static", "--sms", "even"], capsys)
    assert rc == 0
    line = next(x for x in out.splitlines() if "quantised (weights/GEMM)" in x)
    assert line.strip() == "quantised (weights/GEMM): experts mxfp4/bf16"


def test_budget_refuses_and_names_the_flag(capsys):
    """Item 5: the same deployment needs 119.3 GB; at --gpu-memory-utilization 0.79 the budget
    is 0.79 x 150.1 = 118.6 GB: refused in one line naming the option and the sizes."""
    rc, _, err = run_cli(["simulate", *DS, "--gpu-memory-utilization", "0.79", *FAST], capsys)
    # one error line; then the model's parameters and the flags that make it fit (issue 27)
    assert rc == 2 and all(x.startswith("  ") for x in err.strip().splitlines()[1:])
    err = err.splitlines()[0]
    assert "119.3 GB" in err and "budget is 118.6 GB" in err
    assert "--gpu-memory-utilization 0.79 of a H200's 150.1 GB" in err


def test_fp8_kv_from_the_command_line(capsys):
    """Item 7: at KV 8,192 the bf16 cache (36.8 GB) does not fit beside 100.8 GB of weights in
    the 135.1 GB budget; --kv-dtype fp8 halves it to 18.4 GB and the batch fits."""
    args = [a if a != "4096" else "8192" for a in DS]
    rc, _, err = run_cli(["simulate", *args, *FAST], capsys)
    assert rc == 2 and "does not fit" in err and "--kv-dtype fp8" in err
    r = _sim(args + ["--kv-dtype", "fp8"], capsys)
    assert r["memory"]["kv_GB"] == pytest.approx(36.842766336 / 2) and r["kv_dtype"] == "fp8"


def test_input_len_alone_sets_the_kv_history(capsys):
    """Item 6 fault: --input-len 1024 alone was timed at a 32,768-token KV history."""
    r = _sim(LLAMA + ["--input-len", "1024"], capsys)
    assert (r["workload"]["input_len"], r["workload"]["kv_history"]) == (1024, 1024)
    r = _sim(LLAMA + ["--kv-history", "2048"], capsys)
    assert (r["workload"]["input_len"], r["workload"]["kv_history"]) == (2048, 2048)


def test_whole_generation(capsys):
    """Item 6: prompt 2,000, 1,000 output tokens: steps 0, 500 (round(999/2)), 999 at KV 2,000,
    2,500, 2,999 with weights w_0 = 1/3 - w_end, 2/3, w_end = (499.5 - 2/3*500)/999 =
    0.166333; the reported makespan is their weighted mean (the time per output token), the
    per-user throughput 1e6 / it, per GPU 64 times that."""
    r = _sim(LLAMA + ["--input-len", "2000", "--output-len", "1000"], capsys)
    g = r["generation"]
    assert (g["input_len"], g["output_len"]) == (2000, 1000)
    for name in ("temporal", "config"):
        st = g[name]["steps"]
        assert [s["kv_history"] for s in st] == [2000, 2500, 2999]
        assert st[2]["weight"] == pytest.approx(0.166333, abs=1e-6)
        mean = sum(s["weight"] * s["makespan_us"] for s in st)
        assert r[name]["makespan_us"] == pytest.approx(mean, rel=1e-12)
        assert r[name]["per_user_tok_s"] == pytest.approx(1e6 / mean, rel=1e-12)
        assert r[name]["per_gpu_tok_s"] == pytest.approx(64e6 / mean, rel=1e-12)
        assert st[0]["makespan_us"] < st[1]["makespan_us"] < st[2]["makespan_us"]
    assert r["memory"]["kv_tokens"] == 3000  # the fit at the last token


@pytest.mark.parametrize("args, msg", [
    (["--input-len", "2000", "--kv-history", "1000"],
     "kv-history: 1000 tokens is shorter than --input-len 2000"),
    (["--output-len", "8", "--kv-history", "100"], "leave out --kv-history"),
    (["--output-len", "0"], "output-len must be a positive number of tokens"),
    (["--gpu-memory-utilization", "1.5"], "gpu-memory-utilization must be a fraction in (0, 1]"),
    (["--dispatch", "per-rank"], "dispatch: llama-3.1-8b is a dense model"),
    (["--kv-dtype", "fp4"], "argument --kv-dtype: invalid choice"),
])
def test_bad_serving_options_one_line(capsys, args, msg):
    rc, _, err = run_cli(["simulate", *LLAMA, *args, *FAST], capsys)
    assert rc == 2 and msg in err and err.count("\n") == 1 and "Traceback" not in err


def test_search_frontier_over_the_generation(tmp_path, capsys):
    """Item 6 in the search: with --output-len every record's makespan is the weighted mean of
    its three steps (start, middle, end of the generation), its throughputs follow from it, and
    the frontiers are drawn from those means."""
    out = tmp_path / "s"
    rc, _, err = run_cli(["search", "--model", "gpt-oss-20b", "--gpus", "8", "--tp", "8",
                          "--dp", "1", "--exact", "static", "--batches", "64", "--stages", "2",
                          "--microbatches", "2", "--no-progress", "--input-len", "1024",
                          "--output-len", "512", "--kv-dtype", "fp8", "--out", str(out)], capsys)
    assert rc == 0, err
    with open(out / "records.csv") as fh:
        recs = list(csv.DictReader(fh))
    assert recs
    for r in recs:
        assert (int(r["input_len"]), int(r["output_len"]), r["kv_dtype"]) == (1024, 512, "fp8")
        assert r["step_kv_histories"] == "1024|1280|1535"
        steps = [float(x) for x in r["step_makespans_us"].split("|")]
        w_end = (255.5 - 2 / 3 * 256) / 511
        mean = (1 / 3 - w_end) * steps[0] + 2 / 3 * steps[1] + w_end * steps[2]
        assert float(r["makespan_us"]) == pytest.approx(mean, rel=1e-3)  # steps printed at 0.1 µs
        assert float(r["per_user_tok_s"]) == pytest.approx(1e6 / float(r["makespan_us"]))
    summ = json.loads((out / "summary.json").read_text())
    means = {round(float(r["makespan_us"]), 6) for r in recs}
    for p in summ["frontier_temporal"] + summ["frontier_subgpu"]:
        assert round(p["makespan_us"], 6) in means


def test_layers_a_checkpoint_keeps_unquantised(tmp_path, capsys):
    """Item 1, per layer: Llama-3.1-8B's config with ``quant_method: fp8`` and
    ``modules_to_not_convert`` naming layers 0 and 31's MLPs, one H200, TP1: weights
    9,432,989,696 B (tests/model/test_layer_quant.py derives it); the JSON lists the layers
    that keep the dense MLP in bf16 and the text output names them."""
    cfg = json.loads((CONFIGS / "llama-3.1-8b.json").read_text())
    cfg["quantization_config"] = {"quant_method": "fp8", "modules_to_not_convert": [
        "model.layers.0.mlp", "model.layers.31.mlp"]}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    args = ["--model", str(p)] + LLAMA[2:] + ["--input-len", "2000"]
    r = _sim(args, capsys)
    assert r["memory"]["weights_GB"] == pytest.approx(9.432989696)
    assert r["unquantised_layers"] == {"dense_mlp": [0, 31]}
    assert r["dtypes"]["dense_mlp"] == ["fp8", "fp8"]
    rc, out, _ = run_cli(["simulate", *args, "--simulator", "static", "--sms", "even"], capsys)
    assert rc == 0 and "kept bf16 by the checkpoint: dense_mlp in layers 0, 31" in out
