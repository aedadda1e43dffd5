"""The smallest stage the search gives a pool: ``Hardware.min_stage_sms`` (issue 39).

On one H100 no cuBLAS or cuBLASLt launch of Llama-3.1-8B's GEMMs succeeded on an 8-SM green
context and every one on 16-32 SMs did (``experiments/results/hw_verdicts/analytic-v3-tail-plan/
diagnosis/small_pool_gemm_h100.json``), so the H100 and H200 presets carry 16; the oracle of
the space is a brute-force enumeration of every D-tuple of multiples of 8.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
import json
import os

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from subgpu_jax.model.hardware import get_hardware
from subgpu_jax.space.config import AllocSpace, check_allocation, enumerate_allocations

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROBE = os.path.join(ROOT, "experiments", "results", "hw_verdicts", "analytic-v3-tail-plan",
                     "diagnosis", "small_pool_gemm_h100.json")


def test_the_presets_minimum_is_the_smallest_pool_every_gemm_launched_on():
    """The committed probe: every launch on 8 SMs failed, every launch on 16-32 SMs ran all
    12 GEMM shapes; the Hopper presets' stage minimum is the smallest pool that ran them all."""
    d = json.load(open(PROBE))
    failed = {(f["pool"], f["launch"]) for f in d["failures"]}
    ran: dict = {}
    for r in d["rows"]:
        ran.setdefault((r["pool"], r["launch"]), set()).add((r["gemm"], r["m"]))
    shapes = len(d["shapes"]) * len(d["tokens"])
    assert {p for p, _ in failed} == {8} and len(failed) == 6
    ok_pools = sorted({p for (p, _), s in ran.items() if p and len(s) == shapes})
    assert ok_pools == [16, 24, 32]
    for name in ("H100", "H200"):
        hw = get_hardware(name)
        assert hw.min_pool_sms == 8 and hw.min_stage_sms == 16 == ok_pools[0]
        assert hw.stage_min_sms == 16
    b200 = get_hardware("B200")   # never measured: the green context's minimum
    assert b200.min_stage_sms == 0 and b200.stage_min_sms == b200.min_pool_sms


@settings(max_examples=20, deadline=None)
@given(D=st.integers(1, 4), name=st.sampled_from(["H100", "H200"]))
def test_the_search_space_is_the_brute_force_set_with_pools_of_at_least_16(D, name):
    hw = get_hardware(name)
    sp = AllocSpace.from_hw(hw, D)
    want = sorted(t for t in itertools.product(range(8, 129, 8), repeat=D)
                  if sum(t) == hw.sm_budget and min(t) >= 16)
    got = sorted(tuple(int(x) for x in row) for row in enumerate_allocations(
        sp.budget, sp.D, sp.quantum, sp.minimum))
    assert got == want and sp.size == len(want)
    every = np.array(list(itertools.product(range(8, 129, 8), repeat=D)))
    every = every[every.sum(1) == hw.sm_budget]
    assert np.array_equal(sp.contains(every), every.min(1) >= 16)


def test_a_simulated_configuration_may_still_hold_an_8_sm_pool():
    """The green context's own minimum still decides what the simulator accepts (a committed
    plan with an 8-SM stage is re-predicted as it was); only the search and `subgpu run`
    apply the runtime's minimum."""
    check_allocation([8, 120], get_hardware("H200"), 2)
    with pytest.raises(ValueError, match="below the minimum 8"):
        check_allocation([0, 128], get_hardware("H200"), 2)


def test_run_refuses_a_stage_below_the_runtime_minimum_in_one_line():
    from hw_runtime.commands.request import check_stage_pools
    hw = get_hardware("H100")
    check_stage_pools([16, 112], hw)
    with pytest.raises(ValueError) as e:
        check_stage_pools([8, 120], hw)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("--sms: stage 0 has 8 SMs")
    assert "at least 16" in msg
    check_stage_pools([8, 120], get_hardware("B200"))


@pytest.mark.parametrize("bad", [-8, 4, 136, True, 8.0])
def test_hardware_rejects_a_bad_stage_minimum(bad):
    with pytest.raises(ValueError, match="min_stage_sms"):
        dataclasses.replace(get_hardware("H200"), min_stage_sms=bad)


def test_simulate_takes_an_8_sm_stage_and_says_run_refuses_it(capsys):
    from subgpu_jax.app.cli import main
    args = ["simulate", "--model", "llama-3.1-8b", "--hardware", "H200", "--gpus", "1",
            "--batch", "64", "--kv-history", "1024", "--input-len", "1024", "--cuts",
            "L0.attn", "--no-reuse", "--microbatch", "32", "--sms"]
    assert main([*args, "8,120"]) == 0
    out = capsys.readouterr().out
    assert "note: stage 0 has 8 SMs; `subgpu run` refuses stages below 16 SMs on the H200" in out
    assert main([*args, "16,112"]) == 0
    assert "note: stage" not in capsys.readouterr().out


W8 = ["--model", "llama-3.1-8b", "--gpus", "1", "--kv-history", "1024", "--input-len", "1024"]


def test_search_refuses_more_stages_than_the_minimum_allows_before_writing(tmp_path, capsys):
    """9 stages of >= 16 SMs need 144 > 128 SMs: one line naming --stages and the limit (8),
    exit 2, nothing written (a half-made store would block the corrected run)."""
    from subgpu_jax.app.cli import main
    out = tmp_path / "s"
    rc = main(["search", "--hardware", "H200", *W8, "--batches", "64", "--stages", "2,9",
               "--microbatches", "2", "--no-progress", "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err == ["error: --stages: at most 8 on the H200 (16 SMs per stage of its "
                               "128), got 9"]
    assert not out.exists() or not any(out.iterdir())


def test_simulate_nine_stages_takes_8_sm_pools_with_the_note(capsys):
    """D = 9 cannot give every stage 16 SMs: the even split falls back to the green context's
    8 (``Hardware.even_split_min_sms``), as does a given split, each with the note."""
    from subgpu_jax.app.cli import main
    hw = get_hardware("H200")
    assert hw.even_split_min_sms(8) == 16 and hw.even_split_min_sms(9) == 8
    base = ["simulate", "--hardware", "H200", *W8, "--batch", "64", "--microbatch", "32",
            "--cuts", "1,2,3,4,5,6,7,8", "--no-reuse", "--simulator", "static"]
    for extra in (["--sms", "even"], ["--sms", "8,8,8,8,8,8,8,8,64"]):
        assert main([*base, *extra]) == 0, capsys.readouterr().err
        assert re.search(r"note: stage \d has 8 SMs; `subgpu run` refuses", capsys.readouterr().out)
    assert main(base) == 2   # the quick search of the split has no space: one line
    assert capsys.readouterr().err.strip() == (
        "error: cuts: 9 stages of at least 16 SMs (the runtime's minimum on the H200) need "
        "144 > 128 SMs; give fewer --cuts, or --sms (or --sms even) to simulate smaller stages")


def test_coarse_hardware_has_one_space_for_any_quantum():
    """A hypothetical quantum (the exhaustive experiments) sets the stage minimum too."""
    from subgpu_jax.model.synthetic import coarse_hardware
    for q in (8, 12, 24, 32):
        hw = coarse_hardware("H200", quantum=q, minimum=q, budget=120 if q in (12, 24) else 128)
        assert hw.stage_min_sms == hw.min_pool_sms == q


def test_run_top_refuses_an_old_record_below_the_minimum_before_any_gpu_work():
    from hw_runtime.commands.records import top_records
    recs = [{"global_batch": 64, "mode": "temporal", "makespan_us": 10.0, "hardware": "H200"},
            {"global_batch": 64, "mode": "subgpu", "makespan_us": 9.0, "sms": "8|120",
             "hardware": "H200"},
            {"global_batch": 64, "mode": "subgpu", "makespan_us": 9.5, "sms": "16|112",
             "hardware": "H200"}]
    assert len(top_records(recs, 1, "H200", "DIR", green=False)[64]) == 2
    assert len(top_records(recs[::2], 1, "H200", "DIR")[64]) == 2
    with pytest.raises(ValueError) as e:
        top_records(recs, 2, "H200", "DIR")
    assert str(e.value).startswith("--from-search DIR: the G=64 record with SMs 8|120: stage 0 "
                                   "has 8 SMs; on the H200 the runtime needs at least 16")


def test_run_names_the_runtime_minimum_first_and_multistream_needs_no_pool(capsys):
    """``subgpu run --sms 0,128`` names the runtime's 16, not the green context's 8; under
    ``--mode multistream`` (plain streams, no pool) an 8-SM split passes the check and the run
    stops later, at the GPU check of this CPU machine."""
    from subgpu_jax.app.cli import main
    run = ["run", "--hardware", "H200", *W8, "--batch", "64", "--cuts", "L0.attn",
           "--no-reuse", "--microbatch", "32"]
    assert main([*run, "--sms", "0,128"]) == 2
    assert "--sms: stage 0 has 0 SMs; on the H200 the runtime needs at least 16" in \
        capsys.readouterr().err
    main([*run, "--sms", "8,120", "--mode", "multistream"])
    assert "needs at least 16" not in capsys.readouterr().err


@pytest.mark.parametrize("extra,line", [
    ([], ">= 16 per stage"), (["--quantum", "8"], "quanta of 8, >= 16 per stage"),
    (["--quantum", "4"], "quanta of 4, >= 16 per stage"),
    (["--quantum", "32"], "quanta of 32, >= 32 per stage"),
    (["--min-pool", "8"], "quanta of 8, >= 8 per stage")])
def test_space_keeps_the_stage_minimum_unless_min_pool_is_given(extra, line, capsys):
    from subgpu_jax.app.cli import main
    assert main(["space", "--chain", "40", "--hardware", "H200", *extra]) == 0
    assert line in capsys.readouterr().out.splitlines()[0]


def test_space_names_a_quantum_that_does_not_divide_the_budget(capsys):
    from subgpu_jax.app.cli import main
    assert main(["space", "--chain", "40", "--hardware", "H200", "--quantum", "3"]) == 2
    assert capsys.readouterr().err.strip() == ("error: quantum: 3 SMs does not divide the SM "
                                               "budget 128 (--sms); give a --quantum that "
                                               "divides it")


def test_the_16_sm_pool_of_every_probed_split_ran_every_gemm():
    """The minimum's safety check (``partitions16`` phase on one H100): the 16-SM pool of six
    splits, three made by the driver's chained split like the failing 8-SM ones, ran all 12
    GEMM shapes under stock cuBLAS, cuBLASLt and cuBLASLt planned for 16 SMs."""
    d = json.load(open(PROBE.replace("small_pool_gemm_h100", "small_pool_gemm_partitions16_h100")))
    assert len(d["runs"]) == 18
    assert all(r["rc"] == 0 and r["ok"] == 12 and min(r["sizes"]) == 16 for r in d["runs"])
    assert sum(r["split"]["method"].startswith("bycount-chain") for r in d["runs"]) == 9
    p8 = json.load(open(PROBE.replace("small_pool_gemm_h100", "small_pool_gemm_partitions_h100")))
    failed = {r["partition"] for r in p8["runs"] if r["rc"] != 0}
    assert failed == {"8+120", "120+8", "8+56+64"}


def test_simulate_json_lists_the_stages_run_refuses(capsys):
    from subgpu_jax.app.cli import main
    args = ["simulate", "--model", "llama-3.1-8b", "--hardware", "H200", *W8, "--batch", "64",
            "--cuts", "L0.attn", "--no-reuse", "--microbatch", "32", "--json",
            "--simulator", "static", "--sms"]
    for sms, refused in (("8,120", [0]), ("120,8", [1]), ("16,112", [])):
        assert main([*args, sms]) == 0
        ch = json.loads(capsys.readouterr().out)["sms_choice"]
        assert ch["runtime_min_stage_sms"] == 16 and ch["stages_run_refuses"] == refused
