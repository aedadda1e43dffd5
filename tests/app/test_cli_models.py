"""``subgpu simulate`` on the model families: parameter counts, the whole step, the topology, and
the refused inputs (one line, exit code 2)."""

import json
import pathlib

import pytest

from subgpu_jax.app.cli import main

CONFIGS = pathlib.Path(__file__).resolve().parents[1] / "data" / "configs"
QWEN3 = ["--model", str(CONFIGS / "qwen3-8b.json"), "--hardware", "H200", "--gpus", "8",
         "--tp", "8", "--dp", "1", "--batch", "64", "--kv-history", "2048"]


def run_cli(args, capsys):
    rc = main(args)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_simulate_json_has_parameter_counts_and_the_whole_step(capsys):
    """Qwen3-8B from its public config.json: total 36*(attn 4096*(4096+2*1024)+4096*4096+2*128
    + 3*4096*12288 + 2*4096) + 2*151936*4096 + 4096 = 8,190,735,360 parameters; active drops the
    input embedding (151936*4096): 7,568,405,504. The step = the 36-layer run + the head."""
    rc, out, _ = run_cli(["simulate", *QWEN3, "--simulator", "static", "--json"], capsys)
    assert rc == 0
    r = json.loads(out)
    w = r["workload"]
    assert w["parameters"] == {"total": 8_190_735_360, "active": 7_568_405_504}
    assert w["family"] == "qwen3" and w["regions"][0]["instances"] == 36
    assert w["topology"] == "one NVLink domain of 8 GPUs"
    for name in ("temporal", "config"):
        st = r[name]["step"]
        assert r[name]["makespan_us"] == pytest.approx(
            sum(x["makespan_us"] for x in st["runs"]) + st["head_us"], rel=1e-12)
        assert st["head_us"] > 0


def test_simulate_text_prints_parameters_and_regions(capsys):
    rc, out, _ = run_cli(["simulate", "--model", "deepseek-v3", "--hardware", "H200",
                          "--batch", "256", "--kv-history", "2048", "--simulator", "static"],
                         capsys)
    assert rc == 0
    assert ("671.03 B parameters, 36.63 B active per token (37.55 B counting the input "
            "embedding, a 0.93 B lookup table that active counts leave out), experts fp8") in out
    assert "3 x 1-layer region (11 kernels) + 58 x 1-layer region (16 kernels, main)" in out


def test_topology_hgx8_slows_the_cross_node_all_to_all(capsys):
    """gpt-oss-20b on 32 GPUs with EP32: on HGX nodes (domains of 8) the dispatch/combine
    all-to-alls cross nodes at 50 GB/s instead of NVLink, so the temporal step is slower."""
    base = ["simulate", "--model", "gpt-oss-20b", "--hardware", "H200", "--batch", "512",
            "--kv-history", "4096", "--simulator", "static", "--json"]
    rc, out, _ = run_cli(base, capsys)
    one = json.loads(out)
    rc2, out2, _ = run_cli(base + ["--topology", "hgx8"], capsys)
    hgx = json.loads(out2)
    assert rc == rc2 == 0
    assert hgx["workload"]["topology"].startswith("NVLink domains of 8 GPUs")
    assert hgx["temporal"]["makespan_us"] > one["temporal"]["makespan_us"]


@pytest.mark.parametrize("args, msg", [
    (["--model", "qwen2.5-7b", "--gpus", "7", "--tp", "7", "--dp", "1", "--batch", "7"],
     "4 KV heads: one must divide the other"),
    (["--nvlink-domain", "-1"], "--nvlink-domain must be an integer in 0.."),
])
def test_refused_inputs_one_line(capsys, args, msg):
    rc, _, err = run_cli(["simulate", "--simulator", "static", *args], capsys)
    assert rc == 2 and msg in err and err.count("\n") == 1


def test_gpt_oss_non_mxfp4_quant_refused(tmp_path, capsys):
    cfg = json.loads((CONFIGS / "gpt-oss-120b.json").read_text())
    cfg["quantization_config"] = {"quant_method": "bitsandbytes"}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    rc, _, err = run_cli(["simulate", "--model", str(p), "--simulator", "static"], capsys)
    assert rc == 2 and "quant_method" in err and "'bitsandbytes'" in err


def test_kv_lengths_file_and_distribution(tmp_path, capsys):
    """A file of lengths [100, 900] repeats over the G = 64 requests dealt round robin to the
    DP ranks (TP8 x DP1: one rank), so the rank's mean is 500 tokens per request."""
    p = tmp_path / "lens.txt"
    p.write_text("100, 900\n")
    rc, out, _ = run_cli(["simulate", *QWEN3, "--simulator", "static", "--json",
                          "--kv-lengths", str(p)], capsys)
    assert rc == 0
    assert json.loads(out)["workload"]["kv_lengths"]["busiest_rank_tokens"] == 500
    rc, _, err = run_cli(["simulate", *QWEN3, "--kv-lengths", "uniform:9:3"], capsys)
    assert rc == 2 and "uniform:LO:HI" in err


def test_mistral_every_layer_sliding_simulates_with_the_default_cuts(tmp_path, capsys):
    """A Mistral-7B-v0.1 config (every layer slides over 4,096 tokens) runs `simulate` with its
    default cuts (the Macro design isolates the last attention, here a sliding one), and the
    memory line says what the window keeps: KV per GPU = 32 layers x 8 requests x 4,096 tokens
    x 8 KV heads x 128 x 2 (K, V) x 2 B = 4.29 GB, not the 8.6 GB of an 8,192-token history."""
    cfg = {"model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336,
           "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
           "sliding_window": 4096, "tie_word_embeddings": False, "vocab_size": 32000}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    rc, out, err = run_cli(["simulate", "--model", str(p), "--hardware", "H200", "--gpus", "1",
                            "--batch", "8", "--kv-history", "8192", "--simulator", "static",
                            "--sms", "even"], capsys)
    assert rc == 0, err
    assert ("KV cache 4.3 GB (bf16, 8192 tokens x 8 requests; the 32 sliding-window layers "
            "keep the last 4096)") in out
    assert 32 * 8 * 4096 * 8 * 128 * 2 * 2 / 1e9 == pytest.approx(4.29, abs=0.005)
