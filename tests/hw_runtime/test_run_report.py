"""``subgpu run``'s report on the CPU with a fake executor: the JSON path without
``--from-search`` (it used to end in ``TypeError: 'NoneType' object is not iterable``), the measured
timeline mapped onto the plan, the Perfetto trace with a measured and a simulated process, per-stage
busy/idle time and the error breakdown, which must add up exactly."""

from __future__ import annotations

import json
import os

import pytest

from hw_runtime.commands.request import ConfigOptions, RunRequest, Timing, WorkloadOptions
from hw_runtime.commands.run import prepare_run, run_report
from hw_runtime.gpu.executor import Measurement
from hw_runtime.plan import FakeStreamBackend, build_launch_plan, issue_plan
from hw_runtime.timeline import MappingError, map_activities, stage_busy
from subgpu_jax.model.graph import StaticDurationModel
from subgpu_jax.model.hardware import get_hardware

H200 = get_hardware("H200")


class FakeExecutor:
    """Executor stand-in: static kernel durations on each stage's pool, streams and events
    modelled by ``FakeStreamBackend``; ``COUNTS`` device activities per op launch."""

    COUNTS = 2
    #: the kernels the workload resolved (``run_report`` reads them)
    elementwise, attention, moe_gemm = "torch", "sdpa", None

    def __init__(self, wl, slow: float = 1.0) -> None:
        self.wl, self.slow = wl, slow
        self.sd = StaticDurationModel(H200)

    def temporal_config(self):
        from subgpu_jax.space.config import temporal_of
        return temporal_of(self.wl)

    def _run(self, cfg, streams_per_stage=None):
        m = self.wl.batch // cfg.microbatch
        g = self.wl.graph(m)
        plan = build_launch_plan(g, cfg, self.wl.batch, streams_per_stage)
        fb = FakeStreamBackend(plan.num_streams, lambda t, k: self.slow * float(
            self.sd.kernel_time_us(g.kernels[k], cfg.alloc[t.stage])))
        issue_plan(plan, fb)
        return plan, fb

    def measure(self, cfg, mode, rounds=3, replays=100, warmup=3, streams_per_stage=None):
        plan, fb = self._run(cfg, streams_per_stage)
        T = fb.makespan
        return Measurement(mode=mode, makespan_us=T, round_medians_us=[T] * rounds, spread=0.0,
                           replays=replays, rounds=rounds, warmup=warmup, capture_s=0.0,
                           graph_nodes=None, plan=plan.summary())

    def check_output(self, cfg, mode, streams_per_stage=None, **kw):
        return {"bitwise_equal": True, "rel_l2": 0.0}

    def activity_counts(self, m, cfg=None, mode="green"):
        return [self.COUNTS] * self.wl.graph(m).n

    def profile(self, cfg, mode="green", streams_per_stage=None):
        plan, fb = self._run(cfg, streams_per_stage)
        acts = []
        for task, k, st, en in fb.kernel_times:
            t = plan.tasks[task]
            half = (en - st) / self.COUNTS
            for j in range(self.COUNTS):
                acts.append({"stream": 7 + 3 * t.lane, "start_us": st + j * half,
                             "dur_us": half, "name": f"k{k}.{j}"})
        return {"activities": acts, "plan_object": plan}


def _args(tmp_path, trace="t.json", check=True, **kw):
    """The request of a 2-stage gpt-oss-120b run (TP8 x DP4, G=512, 32k tokens): one timing
    round of 2 replays (``check``: the output check), a trace file in ``tmp_path`` (None:
    none); ``kw``: ``mode`` and ``collectives``, and ``ConfigOptions`` fields in place of the
    2-stage split's."""
    run = {k: kw.pop(k) for k in ("mode", "collectives") if k in kw}
    opts = dict(cuts="L1.attn, L1.o_proj", sms="64,64", microbatch=64, reuse=True)
    opts.update(kw)
    return RunRequest(
        workload=WorkloadOptions(model="gpt-oss-120b", hardware="H200", gpus=32, tp=8, dp=4,
                                 batch=512, input_len=32768, kv_history=32768),
        config=ConfigOptions(**opts), timing=Timing(rounds=1, replays=2, warmup=0, check=check),
        json=True, trace=None if trace is None else str(tmp_path / trace), **run)


def test_json_without_from_search_names_the_cuts(tmp_path):
    """The report of an explicit ``--cuts/--sms`` run (no ``--from-search``) is JSON-serialisable
    and names the cuts by kernel (the fix of the ``starts is None`` crash)."""
    prep = prepare_run(_args(tmp_path, trace=None))
    res = run_report(prep, FakeExecutor(prep.wl))
    json.loads(res.to_json())
    assert res.config.cuts == ["L1.attn", "L1.o_proj"]
    assert res.config.sms == [64, 64] and res.config.microbatches == 2
    assert res.speedup_measured == pytest.approx(res.temporal.measured_us / res.run.measured_us)
    assert prep.cache == "lru"  # no calibration: the L2 model stays on


def test_trace_has_measured_and_simulated_processes(tmp_path):
    """``--trace``: one process per timeline, one track per stage, every launch of the plan
    mapped once; busy + idle = span per stage; the error split adds up exactly."""
    a = _args(tmp_path)
    prep = prepare_run(a)
    wl, m = prep.wl, prep.m
    res = run_report(prep, FakeExecutor(wl), make_trace=True)
    tl = res.timeline
    ev = json.load(open(a.trace))["traceEvents"]
    names = {e["args"]["name"] for e in ev if e.get("name") == "process_name"}
    assert names == {"measured (GPU, one graph replay)", "simulated (event simulator)"}
    g = wl.graph(m)
    launches = g.num_regions * m * g.n
    for pid in (1, 2):
        xs = [e for e in ev if e["ph"] == "X" and e["pid"] == pid]
        assert len(xs) == launches
        assert {e["tid"] for e in xs} == {0, 1}
    for s in tl["stages_measured"]:
        assert s["busy_us"] + s["idle_us"] == pytest.approx(s["span_us"])
        assert 0 < s["busy_us"] <= s["span_us"]
    assert tl["error_breakdown"] is None  # no calibration: isolated measured times unknown
    assert set(tl["category_measured_us"]) <= set(tl["category_simulated_us"]) | {"comm"}


def test_unmapped_trace_keeps_the_measurement(tmp_path, capsys):
    """A profiled replay that does not map onto the plan (the profiler dropped an activity, as
    seen once on the H200) leaves the measurement and the prediction in the report: the timeline
    holds the error, the profiled span and the path of the raw activities, and a warning says so."""
    class Dropping(FakeExecutor):
        def profile(self, cfg, mode="green", streams_per_stage=None):
            out = super().profile(cfg, mode, streams_per_stage)
            out["activities"] = out["activities"][:-3]     # the last 3 activities lost
            return out
    prep = prepare_run(_args(tmp_path))
    wl, cfg = prep.wl, prep.cfg
    ok = run_report(prep, FakeExecutor(wl), make_trace=True)
    bad = run_report(prep, Dropping(wl), make_trace=True)
    assert bad.run == ok.run and bad.temporal == ok.temporal
    tl = bad.timeline
    assert "trace mapping" in tl["error"] and os.path.exists(tl["activities_file"])
    assert tl["activities"] == len(FakeExecutor(wl).profile(cfg)["activities"]) - 3
    assert 0 < tl["profiled_makespan_us"] <= ok.timeline["profiled_makespan_us"]
    assert "the timeline fields are left out" in capsys.readouterr().err
    json.loads(bad.to_json())


def test_error_breakdown_adds_up():
    """P - M = isolated + co-run + gaps on the measured bottleneck stage (hand example: stage 1
    busy 80 of M = 100 measured, 70 of P = 90 simulated; isolated sums 60 measured, 65 model:
    isolated +5, co-run (70-65)-(80-60) = -15, gaps (90-70)-(100-80) = 0, total -10)."""
    from hw_runtime.timeline import error_breakdown

    b = error_breakdown({"makespan_us": 100.0, "busy_us": [50.0, 80.0]},
                        {"makespan_us": 90.0, "busy_us": [40.0, 70.0]}, [30.0, 60.0],
                        [35.0, 65.0])
    assert b["stage"] == 1
    assert (b["isolated_us"], b["corun_us"], b["gaps_us"]) == (5.0, -15.0, 0.0)
    assert b["isolated_us"] + b["corun_us"] + b["gaps_us"] == b["total_us"] == -10.0


def test_mapping_refuses_wrong_counts(tmp_path):
    """Activity counts that do not match a stream's activities give a one-line MappingError."""
    prep = prepare_run(_args(tmp_path))
    wl, cfg, m = prep.wl, prep.cfg, prep.m
    ex = FakeExecutor(wl)
    prof = ex.profile(cfg)
    with pytest.raises(MappingError, match="lane"):
        map_activities(prof["plan_object"], prof["activities"], [3] * wl.graph(m).n)


def test_streams_per_stage_lanes(tmp_path):
    """With 2 streams per stage the plan has 2*D lanes, tasks alternate between a stage's two
    lanes, and the profiled timeline still maps one interval per launch."""
    prep = prepare_run(_args(tmp_path))
    wl, cfg, m = prep.wl, prep.cfg, prep.m
    plan = build_launch_plan(wl.graph(m), cfg, wl.batch, 2)
    assert plan.num_streams == 4
    per_stage = {}
    for t in plan.tasks:
        per_stage.setdefault(t.stage, []).append(t.lane)
    for d, lanes in per_stage.items():
        assert lanes[:4] == [2 * d, 2 * d + 1, 2 * d, 2 * d + 1]
    ex = FakeExecutor(wl)
    prof = ex.profile(cfg, streams_per_stage=2)
    iv = map_activities(prof["plan_object"], prof["activities"], ex.activity_counts(m), 2)
    assert len(iv) == sum(len(t.kernels) for t in plan.tasks)
    assert all(s["busy_us"] > 0 for s in stage_busy(iv, cfg.D))
    with pytest.raises(ValueError, match="streams_per_stage"):
        build_launch_plan(wl.graph(m), cfg, wl.batch, 0)


def test_run_refuses_without_gpu(tmp_path, capsys, monkeypatch):
    """``subgpu run`` on a machine without a GPU: one line, exit code 2, saying what to install
    and which GPU is needed. On a GPU machine the missing GPU is simulated (green contexts
    reported unavailable), so the test holds everywhere."""
    import hw_runtime.gpu.partition as partition
    from subgpu_jax.app.cli import main

    ok, _ = partition.green_contexts_available(0)
    if ok:
        monkeypatch.setattr(partition, "green_contexts_available",
                            lambda d=0: (False, "torch is not importable (simulated)"))

    rc = main(["run", "--json", "--cuts", "L1.attn,L1.o_proj", "--reuse", "--sms", "64,64",
               "--batch", "512"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert any(w in err[0] for w in ("GPU", "green", "torch", "cuda"))
    assert "NVIDIA GPU with green contexts" in err[0]
    try:        # the install hint where torch is missing (with a CPU build of torch: no GPU)
        import torch  # noqa: F401
    except ImportError:
        assert 'pip install -e ".[gpu]"' in err[0]


def test_top_records_per_batch_and_refusal(tmp_path):
    """``--from-search DIR --top K``: per batch the temporal record then the K shortest
    predicted SubGPU records; a search made for another GPU is refused with the command that
    makes one for this GPU; records come from the search's verified records.csv."""
    from hw_runtime.commands.records import search_records, top_records

    recs = [{"mode": "temporal", "global_batch": 512, "makespan_us": 100.0, "hardware": "H200"}]
    recs += [{"mode": "subgpu", "global_batch": 512, "makespan_us": t, "hardware": "H200"}
             for t in (90.0, 80.0, 95.0)]
    recs += [{"mode": "subgpu", "global_batch": 2048, "makespan_us": 300.0, "hardware": "H200"}]
    import csv
    with open(tmp_path / "records.csv", "w", newline="") as fh:
        wr = csv.DictWriter(fh, fieldnames=list(recs[0]))
        wr.writeheader()
        wr.writerows(recs)
    got = top_records(search_records(str(tmp_path)), 2, "H200", str(tmp_path))
    assert [r["makespan_us"] for r in got[512]] == [100.0, 80.0, 90.0]
    assert [r["makespan_us"] for r in got[2048]] == [300.0]
    with pytest.raises(ValueError, match="search for the B200.*--hardware H200"):
        top_records([dict(recs[0], hardware="B200")], 1, "H200", "DIR")
    with pytest.raises(ValueError, match="--top"):
        top_records(recs, 0, "H200", "DIR")
    with pytest.raises(ValueError, match="no evaluated record"):
        (tmp_path / "records.csv").write_text("mode,global_batch,makespan_us,hardware\n")
        search_records(str(tmp_path))


def test_measured_frontier_plot(tmp_path):
    """The frontier figure is written (temporal and SubGPU, predicted and measured)."""
    from hw_runtime.commands.top import plot_measured_frontier

    rows = []
    for mode, t in (("temporal", 100.0), ("subgpu", 90.0)):
        for G in (512, 2048):
            rows.append({"mode": mode, "predicted_per_gpu_tok_s": G / t,
                         "predicted_per_user_tok_s": 1e4 / t / G ** 0.5,
                         "measured_per_gpu_tok_s": G / (t * 1.1),
                         "measured_per_user_tok_s": 1e4 / (t * 1.1) / G ** 0.5})
    out = tmp_path / "f.png"
    plot_measured_frontier(rows, str(out))
    assert out.stat().st_size > 1000


def test_task_block_mapping_when_lanes_are_split(tmp_path):
    """The CUDA graph executor may replay one lane on many hardware streams (seen on the H200
    with 2 streams per stage): with activity names, every task is still mapped once, to the
    right op intervals."""
    prep = prepare_run(_args(tmp_path))
    wl, cfg, m = prep.wl, prep.cfg, prep.m
    ex = FakeExecutor(wl)
    prof = ex.profile(cfg, streams_per_stage=2)
    plan = prof["plan_object"]
    names = [[f"k{op}.{j}" for j in range(ex.COUNTS)] for op in range(wl.graph(m).n)]
    acts = [dict(x) for x in prof["activities"]]  # names kept; one hardware stream per task:
    _, fb = ex._run(cfg, 2)
    i = 0
    for task, k, st, en in fb.kernel_times:
        for j in range(ex.COUNTS):
            acts[i]["stream"] = 1000 + task
            i += 1
    with pytest.raises(MappingError):
        map_activities(plan, acts, [len(n) for n in names], 2)
    iv = map_activities(plan, acts, names, 2)
    assert len(iv) == sum(len(t.kernels) for t in plan.tasks)
    assert sorted((r["task"], r["op"]) for r in iv) == sorted(
        (t.index, op) for t in plan.tasks for op in t.kernels)
    for r in iv:
        assert r["activities"] == names[r["op"]]


def test_record_request_carries_the_records_streams_and_input_length():
    """``--from-search --top`` measures each record as searched: its streams per stage and input
    length (it used to run every record with one stream per stage); a SubGPU record's
    configuration travels as the record (decoded once by ``Config.from_record`` in
    ``prepare_run``), not as option strings."""
    from hw_runtime.commands.records import record_request

    a = RunRequest(workload=WorkloadOptions(model="gpt-oss-120b", hardware="H200", gpus=32,
                                            tp=8, dp=4, batch=512, input_len=32768,
                                            kv_history=32768),
                   from_search="x", top=2)
    r = {"num_gpus": "8", "attn_tp": "8", "attn_dp": "1", "moe_ep": "1", "global_batch": "2048",
         "kv_history": "1024", "input_len": "1024", "cuts": "L0.mlp_up", "sms": "40|88",
         "microbatch": "512", "w": "0", "policy": "wavefront", "streams_per_stage": "2",
         "mode": "subgpu"}
    sub = record_request(a, r)
    c, w = sub.config, sub.workload
    assert (c.streams_per_stage, w.input_len, c.record) == (2, 1024, r)
    assert (c.cuts, c.sms, c.microbatch, c.reuse) == (None, None, None, None)
    assert (w.gpus, w.tp, w.dp, w.ep, w.batch) == (8, 8, 1, 1, 2048)
    assert sub.from_search is None and sub.top is None and a.config.streams_per_stage == 1
    t = record_request(a, dict(r, mode="temporal", cuts="", sms="132")).config
    assert (t.streams_per_stage, t.cuts, t.sms, t.record, t.microbatch) == (1, None, None,
                                                                            None, 512)


def test_task_blocks_tolerate_a_truncated_stream_tail(tmp_path):
    """Rule 2 maps a replay whose streams lost their last activities (as the profiler does on
    long replays): the final task of such a stream is mapped from the prefix it has, and every
    other launch is mapped exactly as without the loss; more than ``MAX_TRUNCATED`` missing is
    refused."""
    from hw_runtime.timeline import MAX_TRUNCATED
    prep = prepare_run(_args(tmp_path, streams_per_stage=2))
    wl, cfg, m = prep.wl, prep.cfg, prep.m
    ex = FakeExecutor(wl)
    prof = ex.profile(cfg, streams_per_stage=2)
    plan = prof["plan_object"]
    names = [[f"k{op}.{j}" for j in range(ex.COUNTS)] for op in range(wl.graph(m).n)]
    acts = [dict(x) for x in prof["activities"]]
    full = map_activities(plan, acts, names, 2)
    last = max(acts, key=lambda x: x["start_us"])
    st = last["stream"]
    mine = sorted((x for x in acts if x["stream"] == st), key=lambda x: x["start_us"])
    drop = {id(x) for x in mine[-3:]}
    cut = [x for x in acts if id(x) not in drop]
    iv = map_activities(plan, cut, names, 2)
    key = lambda r: (r["task"], r["op"])  # noqa: E731
    assert {key(r) for r in iv} <= {key(r) for r in full}
    assert len(full) - len(iv) <= 2          # at most the launches whose activities all went
    same = {key(r): r for r in full}
    changed = [r for r in iv if r["end_us"] != same[key(r)]["end_us"]]
    assert len(changed) <= 1                 # only the launch that lost its tail ends earlier
    many = [x for x in acts if x["stream"] != st or x["start_us"] < mine[0]["start_us"]]
    if len(mine) > MAX_TRUNCATED:
        with pytest.raises(MappingError):
            map_activities(plan, many, names, 2)


def test_calibration_mismatch_is_reported(capsys):
    """A calibration measured with other GEMMs or elementwise kernels than the run's is named in
    the report and warned about; one without the fields counts as stock GEMMs and PyTorch
    chains (what every calibration before them used)."""
    import types
    from hw_runtime.commands.run import calibration_mismatch
    assert calibration_mismatch(None, "tuned", "triton") == []
    old = types.SimpleNamespace(meta={})
    assert calibration_mismatch(old, "stock", "torch") == []
    got = calibration_mismatch(old, "tuned", "triton")
    assert got == ["calibration measured with gemm=stock, this run uses tuned",
                   "calibration measured with elementwise=torch, this run uses triton"]
    assert capsys.readouterr().err.count("warning:") == 2
    new = types.SimpleNamespace(meta={"gemm": "tuned", "elementwise": "triton"})
    assert calibration_mismatch(new, "tuned", "triton") == []
    # a calibration without the field was measured with the sleep stand-in
    assert calibration_mismatch(new, "tuned", "triton", "sdpa", "proxy") == [
        "calibration measured with collectives=sleep, this run uses proxy"]
    prox = types.SimpleNamespace(meta={"gemm": "tuned", "elementwise": "triton",
                                       "collectives": "proxy"})
    assert calibration_mismatch(prox, "tuned", "triton", "sdpa", "proxy") == []
    # expert GEMMs: compared for MoE runs only, read per batch where auto chose per batch
    from hw_runtime.gpu.calibrate import moe_gemm_meta
    assert moe_gemm_meta({"512": "triton", "1024": "triton"}) == "triton"
    assert moe_gemm_meta({"512": None}) is None
    per = moe_gemm_meta({"512": "triton", "1024": "bmm"})
    assert per == {"512": "triton", "1024": "bmm"}
    moe = types.SimpleNamespace(meta={"gemm": "tuned", "elementwise": "triton", "moe_gemm": per})
    assert calibration_mismatch(moe, "tuned", "triton", "sdpa", "sleep", "bmm", 1024) == []
    assert calibration_mismatch(moe, "tuned", "triton", "sdpa", "sleep", "triton", 1024) == [
        "calibration measured with moe_gemm=bmm, this run uses triton"]
    assert calibration_mismatch(moe, "tuned", "triton", "sdpa", "sleep", None, 1024) == []
    # a calibration from before the field: bmm experts
    assert calibration_mismatch(new, "tuned", "triton", "sdpa", "sleep", "triton", 512) == [
        "calibration measured with moe_gemm=bmm, this run uses triton"]


def test_collectives_none_predicts_without_link_time_and_is_recorded(tmp_path):
    """``--collectives none``: the prediction drops the link time (a TP8/EP32 step predicts
    faster than with ``sleep``) and the run JSON says which was used; a bad name is one line
    naming the flag."""
    from hw_runtime.gpu.kernels import spin_of

    res = {}
    for c in ("sleep", "none"):
        prep = prepare_run(_args(tmp_path, collectives=c, trace=None, check=False))
        assert prep.model.link_time is (c == "sleep")
        res[c] = run_report(prep, FakeExecutor(prep.wl))
        assert res[c].config.collectives == c
    assert res["none"].temporal.predicted_us < res["sleep"].temporal.predicted_us
    assert res["none"].run.predicted_us < res["sleep"].run.predicted_us
    assert spin_of("sleep") is True and spin_of("none") is False
    with pytest.raises(ValueError, match="--collectives must be one of sleep, proxy, none"):
        spin_of("mpi")


def test_multistream_run_is_predicted_as_multistream(tmp_path):
    """``--mode multistream``: the prediction is the simulator's multistream mode, not the
    green-context split (the two differ on this configuration). ``repredict`` with one timer
    made once (``PreparedRun.timer``, its modes by ``in_mode``) gives the numbers it gives
    with a timer of its own; a timer of another model is refused."""
    from hw_runtime.commands.run import repredict

    prep = prepare_run(_args(tmp_path, trace=None, check=False, mode="multistream"))
    r = run_report(prep, FakeExecutor(prep.wl))
    args = (prep.wl, prep.cfg, prep.dep, prep.model, prep.hw_sim, prep.m, prep.cache)
    timer = prep.timer()
    ms = repredict(*args, "multistream", timer=timer)
    gr = repredict(*args, "green", timer=timer)
    assert r.run.predicted_us == pytest.approx(ms)
    assert ms != pytest.approx(gr)
    assert repredict(*args, "temporal", timer=timer) == pytest.approx(r.temporal.predicted_us)
    for mode, us in (("multistream", ms), ("green", gr)):
        assert repredict(*args, mode) == us   # bit for bit: the timer changes no number
    other = prepare_run(_args(tmp_path, trace=None, check=False, mode="multistream"))
    with pytest.raises(ValueError, match="repredict: timer must be the event timer"):
        repredict(*args, "green", timer=other.timer())


def test_a_record_runs_the_configuration_its_options_name(tmp_path):
    """A search record given to ``prepare_run`` (``record_request``: decoded by
    ``Config.from_record``) yields the Config, deployment and prediction inputs that the same
    configuration given as ``--cuts/--sms/--microbatch/--reuse`` options does; a record naming
    a kernel the model lacks is one ``--from-search`` line. Oracle: the options path."""
    from hw_runtime.commands.records import record_request

    a = _args(tmp_path, trace=None, streams_per_stage=2, policy="layer_major",
              cuts="L1.attn,L1.o_proj", sms="32,64,32", microbatch=128, reuse=False)
    p = prepare_run(a)
    rec = {**p.dep.to_record(), "mode": "subgpu", "hardware": "H200",
           **p.cfg.to_record(p.wl.graph(1), p.m)}
    p2 = prepare_run(record_request(_args(tmp_path, trace=None), rec))
    assert (p2.cfg, p2.dep, p2.m, p2.hw_sim) == (p.cfg, p.dep, p.m, p.hw_sim)
    assert p2.cfg.streams_per_stage == 2 and p2.cfg.policy == "layer_major" and p2.cfg.w == 0
    with pytest.raises(ValueError, match="--from-search: the record's configuration"):
        prepare_run(record_request(_args(tmp_path, trace=None), dict(rec, cuts="L1.nope")))
