"""The runtime's ``--hardware`` default (``hw_runtime.commands.device``): the preset of the GPU
the command runs on, read from its CUDA device name, on the CPU with the name substituted.
Oracles: the device names the GPUs report (``torch.cuda.get_device_name``) by hand, and the
one refusal line that ``run --from-search`` and ``run --from-search --top`` share."""

from __future__ import annotations

import pytest

import hw_runtime.commands.device as device
from hw_runtime.commands.device import DEFAULT_HELP, preset_of_device, resolve_hardware
from subgpu_jax.model.hardware import HARDWARE


@pytest.mark.parametrize("name, preset", [
    ("NVIDIA H100 80GB HBM3", "H100"),
    ("NVIDIA H100 NVL", "H100"),
    ("NVIDIA H200", "H200"),
    ("NVIDIA H200 NVL", "H200"),
    ("NVIDIA B200", "B200"),
    ("nvidia h100 80gb hbm3", "H100"),
    ("NVIDIA H100 PCIe", None),       # 114 SMs, HBM2e: not the SXM preset
    ("NVIDIA H20", None),             # another chip whose name is a prefix of H200
    ("NVIDIA GH200 480GB", None),     # Grace Hopper: not a whole word
    ("NVIDIA GB200", None),
    ("NVIDIA H800", None),
    ("NVIDIA A100-SXM4-80GB", None),
])
def test_device_names_map_to_presets(name, preset):
    assert preset_of_device(name) == preset


def test_help_names_every_preset():
    assert all(p in DEFAULT_HELP for p in HARDWARE)


def test_left_out_is_this_gpus_preset(monkeypatch, capsys):
    monkeypatch.setattr(device, "device_name", lambda: "NVIDIA H100 80GB HBM3")
    assert resolve_hardware(None) == "H100"
    assert resolve_hardware("H100") == "H100" and capsys.readouterr().err == ""


def test_another_preset_given_is_kept_and_noted_once_checks_pass(monkeypatch, capsys):
    """A given preset stands silently (bad input later stays one error line); the command
    notes the other GPU once its checks pass (``note_preset``), never for its own preset."""
    monkeypatch.setattr(device, "device_name", lambda: "NVIDIA H100 80GB HBM3")
    assert resolve_hardware("H200:analytic-v2") == "H200:analytic-v2"
    assert capsys.readouterr().err == ""
    device.note_preset("H200:analytic-v2")
    assert capsys.readouterr().err.splitlines() == [
        "note: this GPU is an NVIDIA H100 80GB HBM3 (H100 preset); predictions use the H200 "
        "preset (--hardware)"]
    device.note_preset("H100")
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(device, "device_name", lambda: "NVIDIA H20")
    device.note_preset("H200")
    assert capsys.readouterr().err.splitlines() == [
        "note: this GPU is an NVIDIA H20; predictions use the H200 preset (--hardware)"]


def test_no_gpu_here(monkeypatch, capsys):
    """Without a GPU a given ``--hardware`` stands silently (the command's own GPU check
    refuses after its CPU checks); left out, the GPU check's line is the answer."""
    def no_gpu():
        raise ValueError("this machine cannot run configurations on a GPU (simulated)")

    monkeypatch.setattr(device, "device_name", no_gpu)
    assert resolve_hardware("H200") == "H200" and capsys.readouterr().err == ""
    with pytest.raises(ValueError, match="cannot run configurations on a GPU"):
        resolve_hardware(None)


@pytest.mark.parametrize("cmd", [["run"], ["calibrate", "--out", "c.json"]])
def test_unknown_gpu_asks_for_hardware(cmd, monkeypatch, capsys, tmp_path):
    """A GPU of no preset and no ``--hardware``: one line naming the GPU and ``--hardware``,
    exit 2, before anything else is done."""
    from subgpu_jax.app.cli import main

    monkeypatch.setattr(device, "device_name", lambda: "NVIDIA H20")
    monkeypatch.chdir(tmp_path)
    rc = main([*cmd, "--model", "llama-3.1-8b", "--gpus", "1", "--batch", "64",
               "--kv-history", "1024"])
    err = capsys.readouterr().err.splitlines()
    assert rc == 2 and err == [
        "error: --hardware: this GPU (NVIDIA H20) is none of the presets (B200, H200, H100); "
        "pass --hardware NAME to predict it as one of them"]
    assert not (tmp_path / "c.json").exists()


def test_from_search_refusals_say_the_same(tmp_path):
    """``run --from-search`` (the best record) and ``run --from-search --top`` (the records)
    refuse a search for another GPU with the same line: both GPUs, ``--hardware`` and its
    default, the search to make (bf16 experts on Hopper) and the other way out."""
    from hw_runtime.commands.records import top_records
    from hw_runtime.commands.request import RunRequest, WorkloadOptions
    from hw_runtime.commands.run import check_search_matches

    req = RunRequest(workload=WorkloadOptions(model="llama-3.1-8b", hardware="H100", gpus=1,
                                              tp=1, dp=1, batch=64, input_len=1024,
                                              kv_history=1024), from_search=str(tmp_path))
    with pytest.raises(ValueError) as best:
        check_search_matches(req, {"hardware": "H200"})
    recs = [{"mode": "temporal", "global_batch": 64, "makespan_us": 1.0, "hardware": "H200"}]
    with pytest.raises(ValueError) as top:
        top_records(recs, 1, "H100", str(tmp_path))
    assert str(best.value) == str(top.value) == (
        f"--from-search: {tmp_path} holds a search for the H200 and this run is for the H100 "
        "(--hardware, default: the GPU this runs on); make a search for the H100 with "
        "`subgpu search --hardware H100 --expert-dtype bf16 --out DIR` and run `subgpu run "
        "--from-search DIR`, or run this one on an H200 GPU (--hardware H200)")
