"""experiments/hw_collectives.py (issue 25): the study's plan, command lines and digest on the
CPU, with hand-made measurements; the device phase refuses a machine without several GPUs."""

from __future__ import annotations

import json
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "experiments"))

import hw_collectives as HC  # noqa: E402


def test_workloads_cover_the_issue():
    """Llama-3.1-70B TP8 at G 2,048 and 1,024 (8 GPUs), a TP2 dense model at a large and a
    small batch (2 GPUs), an MoE model with EP (Mixtral EP8)."""
    assert HC.gpus_of("llama70b_tp8_g2048_kv1k") == HC.gpus_of("llama70b_tp8_g1024_kv2k") == 8
    assert HC.gpus_of("llama8b_tp2_g512_kv2k") == HC.gpus_of("llama8b_tp2_g64_kv2k") == 2
    assert "--ep" in HC.WORKLOADS["mixtral_tp8_ep8_g1024_kv4k"][1]


def test_plan_configs_and_commands():
    """The temporal baseline plus each fixed configuration and its multistream twin; the nccl
    command runs under torchrun with one process per GPU, the emulations in one process."""
    cfgs = HC.plan_configs("llama8b_tp2_g512_kv2k")
    names = [d["name"] for d in cfgs]
    assert names[0] == "temporal" and "layer_split_32_96_m4_k2_multistream" in names
    ls = next(d for d in cfgs if d["name"] == "layer_split_32_96_m4_k2")
    assert ls["flags"][ls["flags"].index("--microbatch") + 1] == "128"   # 512 / 4
    cmd = HC.run_command("llama8b_tp2_g512_kv2k", ls, "nccl", 5)
    assert cmd[1:6] == ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    assert cmd[cmd.index("--collectives") + 1] == "nccl" and "--json" in cmd
    one = HC.run_command("llama8b_tp2_g512_kv2k", ls, "proxy", 5)
    assert "torch.distributed.run" not in one and one[one.index("--replays") + 1] == "5"


def test_parse_run_json_skips_launcher_lines():
    out = "W1202 torchrun warning {not json}\n" + json.dumps({"speedup_measured": 1.1},
                                                             indent=2) + "\n"
    assert HC.parse_run_json(out) == {"speedup_measured": 1.1}
    with pytest.raises(ValueError, match="no JSON object"):
        HC.parse_run_json("nothing here\n")


def test_analyze_by_hand():
    """One configuration, temporal predicted 100 µs and the configuration 80 µs under nccl:
    predicted 1.25x; measured nccl 0.95x (gain lost), sleep 1.10x, proxy 1.00x: emulation over
    real 1.10 / 0.95 and 1.00 / 0.95; the simulator 1.25 / 0.95; temporal steps 90 (sleep) and
    100 (nccl) µs -> 0.9."""
    plan = {"w": {"gpus": 2, "configs": [
        {"name": "temporal", "kind": "temporal", "mode": "green",
         "predicted_us": {"sleep": 100.0, "proxy": 100.0, "none": 90.0, "nccl": 100.0}},
        {"name": "c", "kind": "fixed", "mode": "green",
         "predicted_us": {"sleep": 80.0, "proxy": 85.0, "none": 90.0, "nccl": 80.0}}]}}
    meas = {"w": {"rows": [
        {"name": "c", "collectives": "nccl", "speedup": 0.95, "temporal_us": 100.0},
        {"name": "c", "collectives": "sleep", "speedup": 1.10, "temporal_us": 90.0},
        {"name": "c", "collectives": "proxy", "speedup": 1.00, "temporal_us": 100.0}]}}
    r = HC.analyze(plan, meas, 2)["workloads"]["w"]["rows"]["c"]
    assert r["gain_holds"] is False
    assert r["emulation_over_real"] == pytest.approx({"sleep": 1.10 / 0.95, "proxy": 1 / 0.95})
    assert r["predicted_over_real"] == pytest.approx(1.25 / 0.95)
    assert r["temporal_emulation_over_real"]["sleep"] == pytest.approx(0.9)
    meas["w"]["rows"] = meas["w"]["rows"][1:]
    assert HC.analyze(plan, meas, 2)["workloads"]["w"]["rows"]["c"] == {
        "error": "not measured with nccl"}


def test_bad_input_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        HC.main(["--phase", "analyze", "--gpus", "1"])
    assert e.value.code == 2 and "--gpus must be >= 2" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        HC.main(["--phase", "device", "--configs", str(tmp_path / "none.json")])
    assert "--configs" in capsys.readouterr().err
    cfg = tmp_path / "c.json"
    cfg.write_text("{}")
    rc = HC.main(["--phase", "device", "--configs", str(cfg), "--out", str(tmp_path / "o")])
    assert rc == 2 and "2 or more GPUs" in capsys.readouterr().err
    assert HC.main(["--phase", "analyze", "--configs", str(cfg), "--data", str(tmp_path)]) == 2
