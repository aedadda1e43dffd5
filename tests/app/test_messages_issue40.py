"""Issue 40's messages and names: each mistake a newcomer made gets one line that says what to
type instead (exit 2, no traceback), and a model read from a config.json is named and labelled
by the file itself (``_name_or_path`` / ``name_or_path`` / folder, ``--name``; its
``model_type``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from subgpu_jax.app.cli import main

ROOT = Path(__file__).resolve().parents[2]
MISTRAL = {"model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336,
           "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
           "vocab_size": 32000, "sliding_window": 4096, "tie_word_embeddings": False}
SIM = ["--hardware", "H200", "--gpus", "1", "--batch", "64", "--kv-history", "4096", "--sms",
       "even"]


def _cli(args, capsys):
    try:
        rc = main(args)
    except SystemExit as e:  # argparse's usage errors exit from the parser
        rc = e.code
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def _one_line_error(rc, err):
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


# ------------------------------------------------------------------------------ messages
def test_config_that_is_not_json_says_so(capsys):
    """`--config README.md` names the file as not JSON; it does not list the presets."""
    line = _one_line_error(*_cli(["simulate", "--config", "README.md"], capsys)[::2])
    assert "README.md" in line and "not JSON" in line and "gpt-oss-120b" not in line, line


def test_simulate_batches_points_to_batch(capsys):
    line = _one_line_error(*_cli(["simulate", "--batches", "64"], capsys)[::2])
    assert "simulate takes --batch" in line, line


def test_misspelt_list_flag_points_to_the_list_not_a_hidden_refusal(capsys):
    """``search --batchs``: search refuses ``--batch`` by a hidden option, so the hint must name
    the list it takes (``--batches``), not the hidden one; a far typo gets the closest visible
    option or no hint."""
    line = _one_line_error(*_cli(["search", "--batchs", "512"], capsys)[::2])
    assert "search takes --batches (a comma-separated list), not --batchs" in line, line
    line = _one_line_error(*_cli(["search", "--microbatchs", "2"], capsys)[::2])
    assert "--microbatches" in line, line


def test_misspelt_flag_hint_says_what_the_option_takes(capsys):
    """The hint reads what an option takes from its help, not from the spelling: ``--hardwre``
    and ``--gpu`` are one value (a list was refused), a switch takes nothing."""
    for typo, want in (("--hardwre", "search takes --hardware (one value), not --hardwre"),
                       ("--gpu", "search takes --gpus (one value), not --gpu"),
                       ("--batchs", "search takes --batches (a comma-separated list)")):
        line = _one_line_error(*_cli(["search", typo, "8"], capsys)[::2])
        assert want in line, line
    line = _one_line_error(*_cli(["search", "--no-progres"], capsys)[::2])
    assert "search takes --no-progress, not --no-progres" in line, line


def test_bad_cut_name_and_missing_config_name_their_flag(capsys):
    line = _one_line_error(*_cli(["simulate", "--cuts", "L0.foo"], capsys)[::2])
    assert line.startswith("error: --cuts: kernel name must be one of") and "L0.foo" in line
    line = _one_line_error(*_cli(["simulate", "--config", "nope/config.json"], capsys)[::2])
    assert line == "error: --model/--config: config.json nope/config.json: file does not exist"


def test_grid_memory_skip_names_batches(capsys):
    """A search grid's memory skip advises the option search has (``--batches``)."""
    from subgpu_jax.app.sweep import build_grid
    from subgpu_jax.model.hardware import get_hardware
    from subgpu_jax.model.models import get_model

    skipped: list = []
    build_grid(get_model("llama-3.1-8b"), 1, [64, 128], [2], [2], ["wavefront"], kv_history=4096,
               input_len=4096, hw=get_hardware("H100"), skipped=skipped)
    assert skipped and "lower --batches or" in skipped[0] and "--batch " not in skipped[0]


def test_gpus_alone_is_told_in_the_flags_typed(capsys):
    """`--gpus 3` (DP 3 derived) never complains about a `--dp 3` the user did not type."""
    line = _one_line_error(*_cli(["simulate", "--gpus", "3"], capsys)[::2])
    assert "--dp" not in line and "the DP 3 that --gpus 3 gives" in line, line
    # a --dp the user typed is still called --dp
    line = _one_line_error(*_cli(["simulate", "--model", "llama-3.1-8b", "--gpus", "6", "--tp",
                                  "2", "--dp", "3", "--batch", "7"], capsys)[::2])
    assert "--dp 3" in line, line


def test_list_with_a_space_says_lists_take_none(capsys):
    line = _one_line_error(*_cli(["search", "--batches", "64,", "256"], capsys)[::2])
    assert "no spaces" in line and "--batches 64,256" in line, line


@pytest.mark.parametrize("argv", [
    ["run", "--model", "llama-3.1-8b", "--gpus", "1", "--batch", "64", "--kv-history", "1024"],
    ["tune", "--model", "llama-3.1-8b", "--gpus", "1", "--batches", "64", "--kv-history",
     "1024"],
])
def test_gpu_command_without_a_gpu_leads_with_the_reason(argv, tmp_path, monkeypatch, capsys):
    """torch installed, no GPU visible: the line starts with that reason, no install advice."""
    import hw_runtime.gpu.partition as partition

    monkeypatch.setattr(partition, "green_contexts_available",
                        lambda device=0: (False, "GreenPartition: no CUDA GPU is visible to torch"))
    extra = ["--out", str(tmp_path / "t")] if argv[0] == "tune" else []
    line = _one_line_error(*_cli([*argv, *extra], capsys)[::2])
    assert line.startswith("error: no CUDA GPU is visible to torch"), line
    assert "pip install" not in line, line


# --------------------------------------------------------------------------------- names
def _config(folder: Path, **fields) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / "config.json"
    p.write_text(json.dumps({**MISTRAL, **fields}))
    return p


@pytest.mark.parametrize("fields, name", [
    ({"_name_or_path": "mistralai/Mistral-7B-v0.1"}, "mistralai/Mistral-7B-v0.1"),
    ({"name_or_path": "my-org/my-mistral"}, "my-org/my-mistral"),
    ({}, "Mistral-7B-v0.1"),  # no name field: the folder
])
def test_config_is_named_by_its_fields_else_its_folder(fields, name, tmp_path, capsys):
    p = _config(tmp_path / "Mistral-7B-v0.1", **fields)
    rc, out, err = _cli(["simulate", "--config", str(p), *SIM], capsys)
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0].startswith(f"workload  {name} on 1x H200"), lines[0]
    # the family printed is the config's model_type, not the builder it maps to (llama)
    assert any(ln.strip().startswith("mistral: 7.") for ln in lines[:4]), lines[:4]
    assert not any(ln.strip().startswith("llama:") for ln in lines[:4])


def test_name_flag_overrides_and_is_refused_for_a_preset(tmp_path, capsys):
    p = _config(tmp_path / "m", _name_or_path="mistralai/Mistral-7B-v0.1")
    rc, out, err = _cli(["simulate", "--config", str(p), "--name", "mine", *SIM], capsys)
    assert rc == 0 and out.startswith("workload  mine on"), err
    line = _one_line_error(*_cli(["simulate", "--model", "qwen3-8b", "--name", "x"],
                                 capsys)[::2])
    assert "--name" in line or "name:" in line, line


def test_name_is_carried_into_the_printed_commands(tmp_path):
    """A search of a named model prints `simulate` and `run` commands that name it the same."""
    from subgpu_jax.app.cli import build_parser
    from subgpu_jax.app.searchtext import search_grid_args, search_reproduce_command

    p = _config(tmp_path / "m")
    a = build_parser().parse_args(["search", "--config", str(p), "--name", "mine", "--gpus", "1",
                                   "--tp", "1", "--dp", "1", "--ep", "1"])
    best = {"num_gpus": 1, "attn_tp": 1, "attn_dp": 1, "moe_ep": 1, "global_batch": 64,
            "kv_history": 4096, "cuts": "L0.attn", "sms": "64|64", "microbatch": 32,
            "microbatches": 2, "reuse": 0, "w": 0, "D": 2, "policy": "wavefront"}
    cmd = search_reproduce_command(a, best)
    assert cmd[cmd.index("--name") + 1] == "mine"
    grid = search_grid_args(a)
    assert grid[grid.index("--name") + 1] == "mine"
