"""The GPU commands (``subgpu calibrate``, ``subgpu run``, ``subgpu run --from-search``) on the
CPU, with fakes standing in for torch, green contexts and the executor, for a dense (Llama), an
MoE (Mixtral) and an MLA model (DeepSeek-V3 with fewer layers): the command-line paths a newcomer
takes on a GPU, down to the files they write.

``subgpu calibrate`` of a dense model used to end in an ``IndexError`` in ``corun_pairs``, which
looked for an ``expert_up`` kernel; ``subgpu run --json --trace`` wrote ``NaN`` into its JSON.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import hw_runtime.commands.calibrate as hwcal
import hw_runtime.commands.device as device
import hw_runtime.commands.run as hwrun
import hw_runtime.commands.top as hwtop
import hw_runtime.gpu.blas as blas
import hw_runtime.gpu.calibrate as calmod
import hw_runtime.gpu.corun as corun
import hw_runtime.gpu.executor as executor
import hw_runtime.gpu.partition as partition
import hw_runtime.gpu.workload as hwwl
from hw_runtime.gpu.executor import Measurement
from hw_runtime.plan import HEAD_RUN, FakeStreamBackend, build_step_plan, issue_plan
from subgpu_jax.app.cli import main
from subgpu_jax.space.mapcut import map_cut
from subgpu_jax.model.calibration import load_calibration
from subgpu_jax.model.graph import Deployment, StaticDurationModel, build_forward, build_graph
from subgpu_jax.model.hardware import get_hardware
from subgpu_jax.model.models import resolve_model
from subgpu_jax.space.config import temporal_of

H200 = get_hardware("H200")
CONFIGS = Path(__file__).resolve().parents[1] / "data" / "configs"


@pytest.fixture(scope="module")
def mla_config(tmp_path_factory) -> str:
    """DeepSeek-V3 with 6 layers (1 dense, 5 MoE): MLA, shared experts, two region kinds."""
    cfg = json.loads((CONFIGS / "deepseek-v3.json").read_text())
    cfg.update(num_hidden_layers=6, first_k_dense_replace=1)
    p = tmp_path_factory.mktemp("mla") / "config.json"
    p.write_text(json.dumps(cfg))
    return str(p)


#: (label, model, deployment options) of the three families.
FAMILIES = {
    "dense": ("llama-3.1-8b", ["--gpus", "8", "--tp", "8", "--dp", "1"]),
    "moe": ("mixtral-8x7b", ["--gpus", "8", "--tp", "8", "--dp", "1", "--ep", "8"]),
    "mla": (None, ["--gpus", "8", "--tp", "8", "--dp", "1", "--ep", "8"]),
}


def _model(kind, mla_config):
    return FAMILIES[kind][0] or mla_config


# ------------------------------------------------------------------ co-run kernels per family
@pytest.mark.parametrize("kind, up", [("dense", "mlp_up"), ("moe", "expert_up"),
                                      ("mla", "expert_up")])
def test_corun_kernels_exist_for_every_family(kind, up, mla_config):
    arch = resolve_model(_model(kind, mla_config))
    dep = Deployment(num_gpus=8, attn_tp=8, attn_dp=1, moe_ep=8 if arch.is_moe else 1,
                     global_batch=64, kv_history=1024)
    g = build_graph(arch, dep, 2)
    ia, iu, label = calmod.corun_kernels(g)
    assert g.kernels[ia].op == "attn" and label == up and g.kernels[iu].op == up
    assert g.kernels[ia].category in ("attn_full", "attn_sliding")


def test_corun_kernels_sliding_only_model():
    """Mixtral with a sliding window on every layer has no full-attention kernel: the co-runs
    use the sliding one instead of failing."""
    cfg = json.loads((CONFIGS / "mixtral-8x7b.json").read_text())
    cfg["sliding_window"] = 4096
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(cfg, fh)
    arch = resolve_model(fh.name)
    g = build_graph(arch, Deployment(num_gpus=8, attn_tp=8, attn_dp=1, moe_ep=8,
                                     global_batch=64, kv_history=8192), 1)
    ia, _, _ = calmod.corun_kernels(g)
    assert g.kernels[ia].category == "attn_sliding"


# ---------------------------------------------------------------- fakes of the GPU side
class _FakeTensor:
    def normal_(self):
        return self


class FakeTorch:
    """The few torch calls ``calibrate`` makes outside the faked helpers."""

    __version__ = "fake"
    bfloat16 = "bf16"

    class cuda:  # noqa: N801 - torch's name
        Stream = object

        @staticmethod
        def synchronize():
            pass

        @staticmethod
        def empty_cache():
            pass

    @staticmethod
    def randn(*a, **k):
        return _FakeTensor()

    empty = randn

    @staticmethod
    def mm(a, b, out=None):
        return out


class FakeTorchWorkload:
    """``TorchWorkload`` stand-in: the graph, its shapes, the resolved kernels (PyTorch chains,
    SDPA, no expert GEMMs) and a launch that does nothing; every launch's (pool SMs, lane)
    arguments are collected in ``issued``."""

    issued: set = set()

    def __init__(self, graph, device="cuda", **kw):
        self.graph, self.elementwise = graph, "torch"
        self.attention, self.moe_gemm = "sdpa", None
        self.deployment = graph.deployment
        self.memory, self.kv_cache = {"total": 1e9}, "bf16"
        self.shapes = SimpleNamespace(m=graph.microbatches)
        self.launches = []

    def launch(self, i, mb, region, sms=None, lane=0):
        self.launches.append((i, mb, region))
        FakeTorchWorkload.issued.add((sms, lane))


class FakePartition:
    def __init__(self, pools, streams_per_pool=1, **kw):
        self.granted = list(pools)

    def stream(self, i, j):
        return (i, j)

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.fixture
def fake_gpu(monkeypatch):
    """Torch, green contexts, kernel timing and co-runs replaced by fakes: a kernel "takes"
    its static-model time on the pool, so the calibration written is a valid one."""
    sd = StaticDurationModel(H200)
    FakeTorchWorkload.issued.clear()   # each test asserts on its own launches only
    for mod in (hwcal, hwrun, hwtop):
        monkeypatch.setattr(mod, "gpu_check", lambda: None)
    monkeypatch.setattr(device, "device_name", lambda: "NVIDIA H200")
    monkeypatch.setattr(executor, "cuda_torch", lambda: FakeTorch())
    monkeypatch.setattr(executor, "derive_workload", lambda base, g: FakeTorchWorkload(g))
    monkeypatch.setattr(hwwl, "TorchWorkload", FakeTorchWorkload)
    monkeypatch.setattr(blas, "GemmPolicy", lambda torch, gemm: gemm)
    monkeypatch.setattr(partition, "GreenPartition", FakePartition)
    monkeypatch.setattr(partition, "device_sm_info", lambda d: SimpleNamespace(
        sm_count=132, name="fake H200", driver_version=0))

    def time_kernels(wl, kernels, reps, warmup, stream, gemm, sms):
        return [{"name": wl.graph.kernels[i].name, "us_min": 1.0, "us_max": 1.0,
                 "us": float(np.ravel(sd.kernel_time_us(wl.graph.kernels[i], sms))[0]),
                 "graph_nodes_per_launch": 1} for i in kernels]

    from hw_runtime.gpu import kerneltime
    monkeypatch.setattr(kerneltime, "time_kernels", time_kernels)
    monkeypatch.setattr(calmod, "copy_bandwidth", lambda torch, stream: 3.0e12)
    launched = []

    def capture(torch, stream, fn, n):
        fn(0)
        launched.append(stream)
        return ("graph", stream, n)

    monkeypatch.setattr(corun, "capture_graph", capture)
    monkeypatch.setattr(corun, "time_alone", lambda torch, g, s, reps: 100.0 * g[2])
    monkeypatch.setattr(corun, "time_corun", lambda torch, ga, sa, gb, sb, rb, reps:
                        (130.0 * ga[2], 90.0))
    return launched


@pytest.mark.parametrize("kind", ["dense", "moe", "mla"])
def test_calibrate_every_family_on_fakes(kind, fake_gpu, mla_config, tmp_path, capsys):
    """``subgpu calibrate`` (co-runs included) of a dense, an MoE and an MLA model writes a
    calibration that ``--calibration`` accepts for the same workload: every kernel of every
    region kind timed, three co-run pairs named after kernels the model has."""
    model, dep = _model(kind, mla_config), FAMILIES[kind][1]
    out = tmp_path / "cal.json"
    args = ["--model", model, "--hardware", "H200", *dep, "--batch", "64", "--kv-history",
            "1024", "--input-len", "1024"]
    rc = main(["calibrate", *args, "--batches", "64", "--microbatches", "1,2",
               "--pools", "32,64,96", "--out", str(out)])
    o = capsys.readouterr()
    assert rc == 0, o.err
    data = json.loads(out.read_text())
    up = "mlp_up" if kind == "dense" else "expert_up"
    assert [c["pair"] for c in data["coruns"]] == [f"attn_full|{up}", "attn_full|gemm8192",
                                                   "attn_full|attn_full"]
    assert all(c["a_slowdown"] == pytest.approx(0.3) for c in data["coruns"])
    # the co-runs issue A on pool 0 / lane 0 and B on pool 1 / lane 1 (64 / 64 SMs)
    assert {(64, 0), (64, 1)} <= FakeTorchWorkload.issued
    arch = hwwl.hopper_arch(resolve_model(model))  # what Hopper runs: bf16 experts
    d = Deployment(num_gpus=8, attn_tp=8, attn_dp=1, moe_ep=8 if arch.is_moe else 1,
                   global_batch=64, input_len=1024, kv_history=1024)
    cal = load_calibration(str(out), arch, d, H200)
    for m in (1, 2):
        for g, _ in build_forward(arch, d, m).runs:
            cal.check_graph(g)  # every kernel of every region kind was measured
    assert data["weights_dtype"] == "bf16"
    # no --expert-dtype needed: the file says every group was measured in bf16
    rc = main(["simulate", *args, "--calibration", str(out), "--simulator", "static",
               "--sms", "even", "--json"])
    o = capsys.readouterr()
    assert rc == 0, o.err
    res = json.loads(o.out)
    assert res["prediction"]["calibrated"]
    assert str(out) in res["prediction"]["made_by"]


def _copy_curve_fakes(monkeypatch, measured: dict) -> None:
    """Each copy on a pool of p SMs (132: the whole GPU) returns the next of ``measured[p]``
    (GB/s): the pools are told apart through the partition's stream."""

    class PoolPartition(FakePartition):
        def stream(self, i, j):
            return ("pool", self.granted[i])

    left = {p: list(v) for p, v in measured.items()}
    monkeypatch.setattr(partition, "GreenPartition", PoolPartition)
    monkeypatch.setattr(calmod, "copy_bandwidth", lambda torch, stream: left[
        stream[1] if isinstance(stream, tuple) else 132].pop(0) * 1e9)


def test_calibrate_writes_a_copy_curve_the_loader_takes(fake_gpu, tmp_path, capsys,
                                                        monkeypatch):
    """Audit of issue 41 item 4: ``subgpu calibrate`` stored the curve in the order the pools
    were given (``--pools 64,32``: SMs 64, 32, 132, which the loader refuses: they must
    increase) and as first measured, whatever its fall (here the whole GPU 3.3% below the
    64-SM pool; the loader takes at most ``BW_NOISE``, 1%). Now the pools are sorted and a
    pool that falls beyond the noise is measured again: the file loads."""
    _copy_curve_fakes(monkeypatch, {32: [2000.0], 64: [3000.0], 132: [2900.0, 3010.0]})
    out = tmp_path / "cal.json"
    rc = main(["calibrate", "--model", "llama-3.1-8b", "--hardware", "H200", "--gpus", "1",
               "--batch", "64", "--kv-history", "1024", "--microbatches", "1", "--pools",
               "64,32", "--no-coruns", "--out", str(out)])
    o = capsys.readouterr()
    assert rc == 0, o.err
    assert "copy on 132 SMs 2,900.0 GB/s, more than 1% below 3,000.0" in o.out
    data = json.loads(out.read_text())
    assert data["bw_curve"] == {"sms": [32, 64, 132], "copy_GBps": [2000.0, 3000.0, 3010.0]}
    cal = load_calibration(str(out))
    assert cal.bw_sms == (32.0, 64.0, 132.0)


def test_calibrate_writes_nothing_the_loader_refuses(fake_gpu, tmp_path, capsys, monkeypatch):
    """A fall that stays beyond the noise after the pool was measured again (3 times): one
    line naming --out and the loader's reason, exit 2, no file (before, the file was written
    and only ``--calibration`` refused it)."""
    _copy_curve_fakes(monkeypatch, {64: [3000.0], 132: [2900.0, 2905.0, 2910.0]})
    out = tmp_path / "cal.json"
    rc = main(["calibrate", "--model", "llama-3.1-8b", "--hardware", "H200", "--gpus", "1",
               "--batch", "64", "--kv-history", "1024", "--microbatches", "1", "--pools",
               "64", "--no-coruns", "--out", str(out)])
    o = capsys.readouterr()
    assert rc == 2
    assert o.err.splitlines() == [
        f"error: --out: {out} not written, --calibration would refuse it: bw_curve.copy_GBps "
        "falls from 3,000.0 GB/s at 64 SMs to 2,910.0 GB/s at 132 SMs; a larger pool may lose "
        "at most 1% (measurement noise), re-measure the curve; run subgpu calibrate again"]
    assert not out.exists() and not (tmp_path / "cal.json.tmp").exists()


# ----------------------------------------------------------- run and run --from-search
class StepFakeExecutor:
    """``Executor`` stand-in: the whole step (every region kind, the head) issued on
    ``FakeStreamBackend`` with static durations; the workload comes from ``prepare_run``."""

    current: dict = {}
    #: the kernels the workload resolved (``run_report`` reads them)
    elementwise, attention, moe_gemm = "torch", "sdpa", None

    def __init__(self, hwl, gemm="tuned"):
        self.wl, self.dep = self.current["wl"], self.current["dep"]
        self.sd = StaticDurationModel(H200)

    def temporal_config(self):
        return temporal_of(self.wl)

    def measure(self, c, mode, rounds=1, replays=2, warmup=0, streams_per_stage=None):
        fp = build_forward(self.wl.arch, self.dep, self.wl.batch // c.microbatch)
        plan = build_step_plan(fp, c, self.wl.batch)
        cs = [c if g is fp.main else map_cut(c, fp.main, g) for g in plan.graphs]

        def dur(t, k):
            kern = fp.head[k] if t.run == HEAD_RUN else plan.graphs[t.run].kernels[k]
            p = H200.num_sms if t.run == HEAD_RUN else cs[t.run].alloc[t.stage]
            return float(np.ravel(self.sd.kernel_time_us(kern, p))[0])

        fb = FakeStreamBackend(plan.num_streams, dur)
        issue_plan(plan, fb)
        return Measurement(mode=mode, makespan_us=fb.makespan, round_medians_us=[fb.makespan],
                           spread=0.0, replays=replays, rounds=rounds, warmup=warmup,
                           capture_s=0.0, graph_nodes=None, plan=plan.summary())

    def check_output(self, cfg, mode, streams_per_stage=None, **kw):
        return {"bitwise_equal": True, "rel_l2": 0.0}


@pytest.fixture
def fake_executor(monkeypatch):
    real = hwrun.prepare_run

    def prepare(req):
        out = real(req)
        StepFakeExecutor.current.update(wl=out.wl, dep=out.dep)
        return out

    for mod in (hwrun, hwtop):
        monkeypatch.setattr(mod, "prepare_run", prepare)
        monkeypatch.setattr(mod, "gpu_check", lambda: None)
    monkeypatch.setattr(device, "device_name", lambda: "NVIDIA H200")
    monkeypatch.setattr(executor, "Executor", StepFakeExecutor)
    monkeypatch.setattr(hwwl, "TorchWorkload", FakeTorchWorkload)


@pytest.mark.parametrize("kind", ["dense", "moe", "mla"])
def test_run_and_run_from_search_every_family(kind, fake_executor, mla_config, tmp_path,
                                              capsys):
    """``subgpu run`` (JSON strict: no NaN), then a search and ``subgpu run --from-search`` and
    ``--top 1``, for a dense, an MoE and an MLA model, each through the command line."""
    model, dep = _model(kind, mla_config), FAMILIES[kind][1]
    wl_args = ["--model", model, "--hardware", "H200", *dep, "--kv-history", "1024",
               "--input-len", "1024"]
    rc = main(["run", *wl_args, "--batch", "64", "--json", "--rounds", "1", "--replays", "2"])
    o = capsys.readouterr()
    assert rc == 0, o.err
    res = json.loads(o.out, parse_constant=lambda c: pytest.fail(f"{c} in the JSON"))
    assert res["speedup_measured"] > 0 and "emulated" in res["collectives"]
    assert res["prediction"]["calibrated"] is False
    rc = main(["run", *wl_args, "--batch", "64", "--json", "--rounds", "1", "--replays", "2",
               "--collectives", "none", "--no-check"])
    o = capsys.readouterr()
    assert rc == 0, o.err
    assert "copies only" in json.loads(o.out)["collectives"]
    folder = tmp_path / "search"
    rc = main(["search", *wl_args, "--batches", "64", "--stages", "2", "--microbatches", "2",
               "--exact", "static", "--no-progress", "--out", str(folder)])
    assert rc == 0, capsys.readouterr().err
    capsys.readouterr()
    rc = main(["run", "--from-search", str(folder), "--model", model, "--rounds", "1",
               "--replays", "2", "--no-check"])
    o = capsys.readouterr()
    assert rc == 0, o.err
    assert "speedup   measured" in o.out and "emulated" in o.out
    rc = main(["run", "--from-search", str(folder), "--model", model, "--top", "1",
               "--rounds", "1", "--replays", "2"])
    assert rc == 0, capsys.readouterr().err
    rows = json.loads((folder / "measured_frontier.json").read_text())["rows"]
    assert [r["mode"] for r in rows] == ["temporal", "subgpu"]
    assert all(math.isfinite(r["measured_us"]) for r in rows)


def test_run_top_repredicts_with_the_resolved_cache_policy(fake_executor, tmp_path, capsys):
    """``run --from-search DIR --top K`` with ``--collectives none`` (or ``proxy``, or
    ``--mode multistream``) predicts each record again; it passed the ``--cache`` option as
    given (None without ``--cache``) instead of the policy ``prepare_run`` resolved, and ended
    in "cache policy must be one of lru, fifo, none, got None"."""
    folder = tmp_path / "search"
    wl_args = ["--model", "llama-3.1-8b", "--hardware", "H200", "--gpus", "1",
               "--kv-history", "1024"]
    rc = main(["search", *wl_args, "--batches", "64", "--stages", "2", "--microbatches", "2",
               "--exact", "static", "--no-progress", "--out", str(folder)])
    assert rc == 0, capsys.readouterr().err
    capsys.readouterr()
    rc = main(["run", "--from-search", str(folder), "--model", "llama-3.1-8b", "--top", "1",
               "--rounds", "1", "--replays", "2", "--collectives", "none"])
    assert rc == 0, capsys.readouterr().err
    rows = json.loads((folder / "measured_frontier.json").read_text())["rows"]
    assert [r["collectives"] for r in rows] == ["none", "none"]
    assert all(math.isfinite(r["predicted_us"]) for r in rows)


def test_run_top_checks_its_outputs_before_any_gpu_work(tmp_path, capsys, monkeypatch):
    """Audit of issue 41 (item 3's pattern): ``run --from-search DIR --top K`` wrote
    ``measured_frontier.json`` only after measuring every record, so a FIFO (or link, folder,
    device node) there was found after the GPU work. It is refused first: one line naming
    ``--out-dir``, and the GPU is never reached (its check raises here; the one query before,
    the GPU's name for the ``--hardware`` default, is a fake H200's)."""
    folder = tmp_path / "search"
    rc = main(["search", "--model", "llama-3.1-8b", "--hardware", "H200", "--gpus", "1",
               "--kv-history", "1024", "--batches", "64", "--stages", "2", "--microbatches",
               "2", "--exact", "static", "--no-progress", "--out", str(folder)])
    assert rc == 0, capsys.readouterr().err
    capsys.readouterr()
    os.mkfifo(folder / "measured_frontier.json")

    def no_gpu():
        raise AssertionError("GPU work started before the outputs were checked")

    monkeypatch.setattr(hwtop, "gpu_check", no_gpu)
    monkeypatch.setattr(device, "device_name", lambda: "NVIDIA H200")
    rc = main(["run", "--from-search", str(folder), "--model", "llama-3.1-8b", "--top", "1"])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.splitlines() == [f"error: --out-dir: '{folder}/measured_frontier.json' is a "
                                "FIFO; outputs are written only as regular files, give a file "
                                "path"]


def test_json_safe_writes_null_never_nan():
    from hw_runtime.commands import json_safe

    res = {"isolated_measured_us": [float("nan"), 1.0], "x": {"y": float("inf")}, "n": 2}
    text = json.dumps(json_safe(res), allow_nan=False)
    assert json.loads(text) == {"isolated_measured_us": [None, 1.0], "x": {"y": None}, "n": 2}


def test_run_and_tune_share_one_measurer(fake_executor, capsys):
    """``subgpu run`` measures through a ``Measurer`` (``run_one`` takes any; by default
    ``GpuMeasurer``), and the tune's ``GpuTuneExecutor`` is one: on the fake GPU both report
    the same prepared run identically, the executor is kept while the batch stays and built
    again for another, and a measurer given to ``run_one`` is the one that measures."""
    from hw_runtime.commands.measure import Measurer
    from hw_runtime.commands.request import RunRequest, Timing, WorkloadOptions
    from hw_runtime.tune.executor import GpuTuneExecutor
    from hw_runtime.tune.spec import TuneSpec

    req = RunRequest(workload=WorkloadOptions(model="llama-3.1-8b", hardware="H200", gpus=1,
                                              tp=1, dp=1, batch=64, input_len=1024,
                                              kv_history=1024),
                     timing=Timing(rounds=1, replays=2, warmup=0), json=True)
    prep = hwrun.prepare_run(req)
    spec = TuneSpec(arch=prep.wl.arch, hardware="H200", num_gpus=1, attn_tp=1, attn_dp=1,
                    moe_ep=1, kv_history=1024, input_len=1024, batches=(64,))
    run_gpu, tune_gpu = hwrun.GpuMeasurer(), GpuTuneExecutor(spec)
    assert isinstance(run_gpu, Measurer) and isinstance(tune_gpu, Measurer)
    assert run_gpu.report(prep).as_dict() == tune_gpu.report(prep).as_dict()
    ks = req.kernels
    ex = run_gpu.executor(64, prep.wl, ks, "sleep")
    assert run_gpu.executor(64, None, ks, "sleep") is ex          # same batch: kept
    assert run_gpu.executor(128, prep.wl, ks, "sleep") is not ex  # another: built again

    class Recording:
        """A ``Measurer`` that records what it measured (the fake GPU's report)."""

        def __init__(self):
            self.preps = []

        def report(self, prep, make_trace=False):
            self.preps.append(prep)
            return hwrun.GpuMeasurer().report(prep, make_trace)

        def release(self):
            pass

    rec = Recording()
    assert hwrun.run_one(req, rec) == 0
    assert [p.cfg for p in rec.preps] == [prep.cfg]
    assert json.loads(capsys.readouterr().out)["run"] == run_gpu.report(prep).run.as_dict()


def test_hardware_default_is_the_gpu_it_runs_on(fake_executor, tmp_path, capsys, monkeypatch):
    """On an H100 (its name substituted), ``run --from-search DIR`` of an ``--hardware H100``
    search runs without ``--hardware`` (it was refused: "the search was made for H100, this
    run is on H200"); ``--hardware H200`` there predicts with the H200 preset after one note
    line; and a search for another GPU than the detected one is refused naming
    ``--hardware``."""
    monkeypatch.setattr(device, "device_name", lambda: "NVIDIA H100 80GB HBM3")
    wl_args = ["--model", "llama-3.1-8b", "--gpus", "1", "--kv-history", "1024"]
    folder = tmp_path / "search"
    rc = main(["search", *wl_args, "--hardware", "H100", "--batches", "64", "--stages", "2",
               "--microbatches", "2", "--exact", "static", "--no-progress", "--out",
               str(folder)])
    assert rc == 0, capsys.readouterr().err
    capsys.readouterr()
    one = ["--rounds", "1", "--replays", "2", "--no-check"]
    rc = main(["run", "--from-search", str(folder), "--model", "llama-3.1-8b", "--json", *one])
    o = capsys.readouterr()
    assert rc == 0 and o.err == "", o.err
    assert json.loads(o.out)["workload"]["hardware"] == "H100"
    rc = main(["run", *wl_args, "--batch", "64", "--hardware", "H200", "--json", *one])
    o = capsys.readouterr()
    assert rc == 0 and o.err.splitlines() == [
        "note: this GPU is an NVIDIA H100 80GB HBM3 (H100 preset); predictions use the H200 "
        "preset (--hardware)"]
    assert json.loads(o.out)["workload"]["hardware"] == "H200"
    monkeypatch.setattr(device, "device_name", lambda: "NVIDIA H200")
    for top in ([], ["--top", "1"]):
        rc = main(["run", "--from-search", str(folder), "--model", "llama-3.1-8b", *one, *top])
        err = capsys.readouterr().err.splitlines()
        assert rc == 2 and len(err) == 1 and "holds a search for the H100 and this run is " \
            "for the H200 (--hardware, default: the GPU this runs on)" in err[0]
