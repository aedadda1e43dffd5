"""experiments/kernel_efficiency.py: the temporal step's kernel classes against the measured
copy bandwidth and GEMM rate (issue 23, item 1). The arithmetic is checked by hand; the digest
of two committed H200 traces (tests/data/traces/, copied from the `attention` device study)
is checked against the graph's bytes."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "tests" / "data" / "traces"


def _script():
    sys.path.insert(0, str(ROOT / "experiments"))
    spec = importlib.util.spec_from_file_location(
        "kernel_efficiency", ROOT / "experiments" / "kernel_efficiency.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


KE = _script()


def test_copy_bandwidth_reads_the_committed_probe():
    """tests/data/h200_copy_bandwidth_vs_pool.csv: 4,245 GB/s on the whole GPU, 645 on 8 SMs."""
    assert KE.copy_bandwidth(132) == pytest.approx(4245e9)
    assert KE.copy_bandwidth(8) == pytest.approx(645e9)
    with pytest.raises(ValueError, match="no copy bandwidth measured on 100 SMs"):
        KE.copy_bandwidth(100)


def test_targets_follow_the_issue():
    assert KE.target_of("attn", 256, 256) == ("frac_copy_bw", 0.85)
    assert KE.target_of("attn", 32, 32) is None               # G < 256: no target
    assert KE.target_of("expert_up", 8, 1024) == ("frac_copy_bw", 0.75)
    assert KE.target_of("mlp_up", 1024, 1024) == ("frac_gemm_rate", 0.70)
    assert KE.target_of("mlp_up", 256, 256) is None            # M < 1,024: no target
    assert KE.target_of("rmsnorm", 4096, 4096) is None


def test_classify_by_hand():
    """One region instance moves 2e9 B and does 1e12 FLOP; the trace has 2 launches in
    1,000 µs: 4e9 B / 1e-3 s = 4e12 B/s = 4e12 / 4.245e12 = 0.9423 of the copy bandwidth, and
    2e12 FLOP / 1e-3 s = 2e15 FLOP/s = 2.0 / 0.8017 of the GEMM rate (a hand value, not a
    real kernel). Roofline: max(4e9 / 4.245e12, 2e12 / 8.017e14) = 2.495 ms: compute-bound."""
    row = KE.classify("attn", {"us": 1000.0, "launches": 2, "top": [["k", 1000.0]]},
                      {"n": 1, "bytes": 2e9, "flops": 1e12, "ctas": 10}, 4.245e12, 8.017e14,
                      tokens=512, G=512)
    assert row["frac_copy_bw"] == pytest.approx(4e12 / 4.245e12)
    assert row["frac_gemm_rate"] == pytest.approx(2e15 / 8.017e14)
    assert row["bound"] == "compute" and row["roofline_us"] == pytest.approx(2e12 / 8.017e14 * 1e6)
    assert row["meets_target"] is True and row["kernel"] == "k" and "reason" not in row


def test_classify_excludes_an_emulated_collective_wait():
    """A spin of 400 of 1,000 µs: 600 µs of device work, and no target (a collective)."""
    row = KE.classify("combine", {"us": 1000.0, "launches": 1,
                                  "top": [["at::cuda::spin_kernel(long)", 400.0], ["c", 600.0]]},
                      {"n": 1, "bytes": 6e8, "flops": 0.0, "ctas": 1}, 4.245e12, 8.017e14,
                      tokens=64, G=1024)
    assert row["us_device_work"] == pytest.approx(600.0)
    assert row["GBps"] == pytest.approx(1000.0)                 # 6e8 B in 600 µs
    assert row["emulated_collective"] and row["target"] is None and row["kernel"] == "c"


def test_classify_names_the_reason_of_a_missed_target():
    """An expert GEMM at 50% of the copy bandwidth: missed, with the kernel and the bound."""
    row = KE.classify("expert_up", {"us": 100.0, "launches": 1, "top": [["nvjet_x", 100.0]]},
                      {"n": 1, "bytes": 0.5 * 4.245e12 * 1e-4, "flops": 1e9, "ctas": 40},
                      4.245e12, 8.017e14, tokens=64, G=1024)
    assert row["meets_target"] is False
    assert row["reason"].startswith("50% of the copy bw (target 75%); dominant kernel nvjet_x")
    assert "about 40 CTAs per launch" in row["reason"]


def test_digest_of_two_h200_traces(tmp_path):
    """The committed traces: Llama-3.1-8B's attention moves, per layer, the KV cache (G = 256 x
    2,048 tokens x 8 KV heads x 128 x 2 (K, V) x 2 B = 2,147,483,648 B) plus the queries read
    and the outputs written (2 x 256 x 32 heads x 128 x 2 B = 4,194,304 B), 32 times in
    15,562 µs: 4.42e12 B/s, 1.04 of the copy bandwidth (a read-only stream beats the copy's
    read+write figure): target met. Qwen3-30B-A3B TP8 names its missed classes."""
    src = tmp_path / "traces"
    shutil.copytree(TRACES, src)
    out = tmp_path / "ke.json"
    assert KE.main(["--from", str(src), "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    a = d["workloads"]["llama8b_1gpu_g256_kv2k"]["ops"]["attn"]
    assert a["bytes"] == 32 * (256 * 2048 * 8 * 128 * 2 * 2 + 2 * 256 * 32 * 128 * 2)
    assert a["frac_copy_bw"] == pytest.approx(a["bytes"] / (a["us"] * 1e-6) / 4245e9)
    assert 1.0 < a["frac_copy_bw"] < 1.1 and a["meets_target"] is True
    moe = d["workloads"]["qwen3moe_tp8_g1024_kv2k"]
    assert set(moe["below_target"]) >= {"qkv", "o_proj"}
    assert all(moe["ops"][o]["reason"] for o in moe["below_target"])
    assert moe["references"] == {"copy_GBps": 4245.0, "gemm_TFLOPs": pytest.approx(801.7),
                                 "pool_sms": 132}


def test_bad_input_is_one_line(tmp_path, capsys):
    assert KE.main(["--from", str(tmp_path / "nope"), "--out", str(tmp_path / "o.json")]) == 2
    assert capsys.readouterr().err.strip() == \
        f"error: --from: {str(tmp_path / 'nope')!r} is not a folder"
    assert KE.main(["--from", str(tmp_path), "--out", str(tmp_path / "o.json")]) == 2
    assert "no trace_<workload>[_sdpa].json" in capsys.readouterr().err
    assert KE.main(["--from", str(tmp_path), "--out", str(tmp_path)]) == 2
    assert "--out" in capsys.readouterr().err


@pytest.mark.parametrize("edit, field", [
    (lambda t: t.update(ops=[1]), "ops must be a non-empty object"),
    (lambda t: t.update(ops={}), "ops must be a non-empty object"),
    (lambda t: t["ops"]["attn"].update(us=-1.0), "ops.attn.us must be a finite number >= 0"),
    (lambda t: t["ops"]["attn"].update(us=float("nan")), "ops.attn.us must be a finite"),
    (lambda t: t["ops"]["attn"].update(us=True), "ops.attn.us must be a finite"),
    (lambda t: t["ops"]["attn"].update(us="15561"), "ops.attn.us must be a finite"),
    (lambda t: t["ops"]["attn"].update(launches=0), "ops.attn.launches must be an integer"),
    (lambda t: t["ops"]["attn"].update(top=[["a", "b", "c"]]), "ops.attn.top must be a list"),
    (lambda t: t["ops"]["attn"].update(top=[["spin_kernel", 1e9]]), "exceed the op's"),
    (lambda t: t.update(measured_step_us="x"), "measured_step_us must be a finite number > 0"),
    (lambda t: t.update(span_us=-5), "span_us must be a finite number > 0"),
    (lambda t: t.update(attention="triton"), "attention is 'triton', not the --attention"),
    (lambda t: t.update(ops={"bogus": {"us": 1.0, "launches": 1, "top": []}}),
     "none of its op kinds is an op of the llama8b_1gpu_g256_kv2k graph"),
])
def test_a_bad_trace_is_refused_in_one_line(tmp_path, capsys, edit, field):
    """Every field of a trace is checked before a number is made from it: never a negative
    bandwidth, a NaN in the JSON or a 1 µs read from `true`."""
    t = json.loads((TRACES / "trace_llama8b_1gpu_g256_kv2k_sdpa.json").read_text())
    edit(t)
    d = tmp_path / "t"
    d.mkdir()
    (d / "trace_llama8b_1gpu_g256_kv2k_sdpa.json").write_text(json.dumps(t))
    assert KE.main(["--from", str(d), "--out", str(tmp_path / "o.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and field in err and "trace_llama8b" in err, err
    assert not (tmp_path / "o.json").exists()


def test_empty_out_is_refused(tmp_path, capsys):
    assert KE.main(["--from", str(TRACES), "--out", ""]) == 2
    assert "--out" in capsys.readouterr().err
