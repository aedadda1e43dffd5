"""The timer registry and the batched contention timer (issue 42), and the lone-pool memo.

Oracles: the event simulator (the reference), the static max-plus evaluator (which the
contention timer must equal exactly with contention off), per-row calls of the same timer (a
batch must give the same numbers), and a memo-free recomputation (the memo changes no number).
"""

from __future__ import annotations

import numpy as np
import pytest

from subgpu_jax.model.graph import Deployment, build_graph
from subgpu_jax.model.hardware import get_hardware
from subgpu_jax.model.models import get_model
from subgpu_jax.model.setup import GpuSetup
from subgpu_jax.score import poolwork
from subgpu_jax.model.kernel import work_signature
from subgpu_jax.score.timer import (DEFAULT_TIMER, TIMERS, BatchedEventTimer, ContentionTimer,
                                    EventTimer,
                                    ScreenedTimer, StaticTimer, timer_for)
from subgpu_jax.score.vcontention import kernel_profiles
from subgpu_jax.sim.contention import ContentionModel
from subgpu_jax.space.config import Config

H200 = get_hardware("H200")
DEP = Deployment(num_gpus=8, attn_tp=8, attn_dp=1, moe_ep=8, global_batch=256)


@pytest.fixture(scope="module")
def g2(gptoss20b_m2):
    return gptoss20b_m2


def test_registry_and_capabilities():
    """Every registered timer says what it models; the CLI's default is the reference (its
    batches in its compiled engine; event-full the Python simulator alone)."""
    s = GpuSetup.uncalibrated(H200)
    assert set(TIMERS) == {"event", "event-full", "static", "vcontention", "screened",
                           "event-batched"}
    assert DEFAULT_TIMER == "event"
    caps = {n: (t.contention, t.reference, t.batched, type(t.screen).__name__)
            for n, t in ((n, timer_for(s, n)) for n in TIMERS)}
    # batched: the event simulator times makespan batches in its compiled engine (one call)
    assert caps == {"event": (True, True, True, "NoneType"),
                    "event-full": (True, True, False, "NoneType"),
                    "static": (False, False, True, "NoneType"),
                    "vcontention": (True, False, True, "NoneType"),
                    "screened": (True, True, True, "ContentionTimer"),
                    "event-batched": (True, False, True, "NoneType")}
    scr = timer_for(s, "screened")
    assert scr.confirm_top == ScreenedTimer.CONFIRM_TOP == 4 and scr.forward
    assert (scr.screen.model, scr.screen.cache) == (scr.model, scr.cache)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="confirm_top must be an integer >= 1"):
            ScreenedTimer(H200, confirm_top=bad)
    assert timer_for(s, "event").forward and not timer_for(s, "event-full").forward
    assert not timer_for(s, "event", contention=False).contention
    for n in TIMERS:
        assert timer_for(s, n).name == n and timer_for(s, n).describe()
    for n in ("vcontention", "screened", "event-batched"):
        with pytest.raises(ValueError, match="needs the event simulator"):
            timer_for(s, n, mode="multistream")
        with pytest.raises(ValueError, match="without contention"):
            timer_for(s, n, contention=False)
    with pytest.raises(ValueError, match="simulator must be one of event, event-full, static, "
                                         "vcontention, screened, event-batched"):
        timer_for(s, "fast")


def test_batched_rows_equal_single_calls(g2, chain_config):
    """``time_allocs`` of a batch equals ``time`` of each row, for every timer."""
    cfg = chain_config(g2, [6, 15], 0, (40, 56, 32))
    allocs = np.array([[40, 56, 32], [8, 8, 112], [64, 32, 32]])
    for t in (EventTimer(H200), StaticTimer(H200), ContentionTimer(H200),
              BatchedEventTimer(H200, engine="numpy", min_batch=2)):
        batch = t.time_allocs(g2, cfg, allocs)
        one = [t.time(g2, Config(**{**cfg.__dict__, "alloc": tuple(map(int, a))})).makespan_us
               for a in allocs]
        np.testing.assert_allclose(batch, one, rtol=1e-6)


def test_contention_off_is_the_static_evaluator(g2, chain_config):
    """With ``ContentionModel.off()`` the contention timer's tables hold the static durations
    and skip the iteration: its makespans equal the static timer's (``vcontention`` module
    docstring), to float32."""
    cfg = chain_config(g2, [3, 10, 21], 1, (16, 72, 40))
    allocs = np.array([[16, 72, 40], [40, 40, 48]])
    vc = ContentionTimer(H200, ContentionModel.off()).time_allocs(g2, cfg, allocs)
    st = StaticTimer(H200).time_allocs(g2, cfg, allocs)
    np.testing.assert_allclose(vc, st, rtol=1e-5)


def test_temporal_and_head_go_to_the_event_simulator(g2):
    """D = 1 (one kernel at a time on the whole GPU) and the head kernels: the event
    simulator's numbers exactly."""
    from subgpu_jax.space.config import temporal_config

    g1 = build_graph(get_model("gpt-oss-20b"), DEP, 1)
    cfg = temporal_config(g1.n, H200, DEP.requests_per_gpu)
    vc, ev = ContentionTimer(H200), EventTimer(H200)
    assert vc.time(g1, cfg).makespan_us == ev.time(g1, cfg).makespan_us
    head = list(g1.kernels[:3])
    assert vc.head_us(head) == ev.head_us(head)


@pytest.mark.parametrize("starts,w,alloc", [([6, 15], 0, (40, 56, 32)),
                                           ([4, 9, 15], 0, (24, 24, 32, 48))])
def test_agrees_with_event_simulator_on_gpt_oss(g2, starts, w, alloc, chain_config):
    """On GPT-OSS 20B (the family of the committed agreement study) the contention timer is
    within ``ContentionTimer.TOLERANCE`` of the event simulator; elsewhere it is not (the
    search reports the difference: bench_sweeps, docs/method.md §3)."""
    cfg = chain_config(g2, starts, w, alloc)
    ev = EventTimer(H200).time(g2, cfg).makespan_us
    assert ContentionTimer(H200).time(g2, cfg).makespan_us == pytest.approx(
        ev, rel=ContentionTimer.TOLERANCE)


def test_estimators_are_shared_by_structure(g2, chain_config):
    """One structure's tables are built once: the second call returns the same object."""
    t = ContentionTimer(H200)
    cfg = chain_config(g2, [6, 15], 0, (40, 56, 32))
    e1 = t.structures.get(g2, cfg.seg_of, cfg.D, cfg.w, cfg.policy)
    assert t.structures.get(g2, cfg.seg_of, cfg.D, cfg.w, cfg.policy) is e1
    assert t.structures.get(g2, cfg.seg_of, cfg.D, cfg.w, "layer_major") is not e1


def test_lone_pool_memo_changes_no_number(g2, monkeypatch):
    """The tables with the memo equal those recomputed without it, bit for bit; kernels of
    different layers with equal shapes share one memo entry (``work_signature``)."""
    poolwork.LONE_POOLS.clear()
    with_memo = kernel_profiles(g2, H200)
    sigs = {work_signature(k) for k in g2.kernels}
    assert len(sigs) < g2.n   # GPT-OSS 20B's region repeats kernels across its layers

    class Keep(dict):   # keeps nothing: the path before the memo
        def __setitem__(self, k, v):
            pass

    monkeypatch.setattr(poolwork, "LONE_POOLS", Keep())
    without = kernel_profiles(g2, H200)
    for k in with_memo:
        np.testing.assert_array_equal(with_memo[k], without[k])


def test_compile_cache_folder(tmp_path, monkeypatch):
    """``SUBGPU_JAX_CACHE`` names the folder; empty disables it; the default is under the
    user's cache folder."""
    from subgpu_jax.app import platform as pf

    monkeypatch.setenv("SUBGPU_JAX_CACHE", "")
    assert pf.compile_cache_dir() is None and pf.enable_compile_cache() is None
    monkeypatch.delenv("SUBGPU_JAX_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert pf.compile_cache_dir() == str(tmp_path / "subgpu" / "jax")
    import jax

    old = jax.config.jax_compilation_cache_dir
    try:
        assert pf.enable_compile_cache(str(tmp_path / "c")) == str(tmp_path / "c")
        assert jax.config.jax_compilation_cache_dir == str(tmp_path / "c")
        assert (tmp_path / "c").is_dir()
    finally:
        jax.config.update("jax_compilation_cache_dir", old)


def test_search_with_the_batched_timer_is_checked_by_the_event_simulator(tmp_path, capsys):
    """``subgpu search --exact vcontention``: records say ``exact: vcontention``; summary.json's
    ``reference_check`` holds, for the best record of each batch, the event simulator's region
    makespan of that record's configuration (oracle: ``EventTimer`` on the record's
    ``Config``), and the disagreement is printed."""
    import json

    from subgpu_jax.app.cli import main
    from subgpu_jax.model.workload import Workload

    out = tmp_path / "s"
    rc = main(["search", "--model", "gpt-oss-20b", "--gpus", "8", "--tp", "8", "--dp", "1",
               "--exact", "vcontention", "--batches", "64", "--stages", "2",
               "--microbatches", "2", "--no-progress", "--out", str(out)])
    text = capsys.readouterr().out
    assert rc == 0 and "checked by the event simulator" in text
    summ = json.loads((out / "summary.json").read_text())
    recs = [r for r in (json.loads(x) for x in (out / "records.jsonl").read_text().splitlines())
            if "grid_key" in r and "mode" in r]   # the records, not the block markers
    assert {r["exact"] for r in recs} == {"vcontention"}
    chk = summ["reference_check"]
    assert summ["scorers"]["exact"] == "vcontention" and len(chk["rows"]) == 2
    sub = max((r for r in recs if r["mode"] == "subgpu"), key=lambda r: r["speedup_vs_temporal"])
    row = next(x for x in chk["rows"] if x["mode"] == "subgpu")
    dep = Deployment.from_record(sub)
    wl = Workload.from_model(get_model("gpt-oss-20b"), dep)
    cfg = Config.from_record(sub, wl.graph(1))
    want = EventTimer(get_hardware("B200")).time(wl.graph(sub["microbatches"]),
                                                 cfg).makespan_us   # search's default GPU
    assert row["reference_region_us"] == pytest.approx(want, rel=1e-9)
    assert row["error"] == pytest.approx(sub["region_makespan_us"] / want - 1, rel=1e-9)
    assert chk["max_abs_error"] == max(abs(x["error"]) for x in chk["rows"])


def test_screened_search_records_the_event_simulators_numbers(tmp_path, capsys):
    """``subgpu search --exact screened``: every record's region makespan is the event
    simulator's of the record's configuration (oracle: ``EventTimer`` on its ``Config``, to
    1e-9: the periodic fast-forward), its ``screen_region_us`` is the batched scorer's
    (oracle: ``ContentionTimer``), the event simulator's per-category times are recorded, and
    no reference check is needed (the records are the reference's)."""
    import json

    from subgpu_jax.app.cli import main
    from subgpu_jax.model.workload import Workload

    out = tmp_path / "s"
    rc = main(["search", "--model", "gpt-oss-20b", "--gpus", "8", "--tp", "8", "--dp", "1",
               "--exact", "screened", "--batches", "64", "--stages", "2",
               "--microbatches", "2", "--no-progress", "--out", str(out)])
    assert rc == 0
    summ = json.loads((out / "summary.json").read_text())
    recs = [r for r in (json.loads(x) for x in (out / "records.jsonl").read_text().splitlines())
            if "grid_key" in r and "mode" in r]
    assert {r["exact"] for r in recs} == {"screened"} and "reference_check" not in summ
    sub = next(r for r in recs if r["mode"] == "subgpu")
    wl = Workload.from_model(get_model("gpt-oss-20b"), Deployment.from_record(sub))
    cfg = Config.from_record(sub, wl.graph(1))
    g = wl.graph(sub["microbatches"])
    b200 = get_hardware("B200")   # the search's default GPU
    assert sub["region_makespan_us"] == pytest.approx(
        EventTimer(b200).time(g, cfg).makespan_us, rel=1e-9)
    assert sub["screen_region_us"] == pytest.approx(
        ContentionTimer(b200).time(g, cfg).makespan_us, rel=1e-6)
    assert sub["confirm_calls"] >= 1 and sub["cat_mlp_us"] > 0 and 0 <= sub["l2_hit_rate"] <= 1
    # the screen's disagreement on the chosen configurations, summarised and printed
    chk = summ["screen_check"]
    subs = [r for r in recs if r["mode"] == "subgpu"]
    errs = sorted(abs(r["screen_region_us"] / r["region_makespan_us"] - 1) for r in subs)
    assert chk["points"] == len(subs) and chk["max_abs_error"] == pytest.approx(errs[-1])
    assert chk["confirm_calls"] == sum(r["confirm_calls"] for r in subs)
    assert "differ from the event simulator's (the records') by a median" in \
        capsys.readouterr().out


def test_kernel_profile_memo_changes_no_number(g2, monkeypatch):
    """``kernel_profiles`` with its per-kernel memo equals a memo-free recomputation bit for bit,
    at zero and at non-zero hit fractions, and a second call is served from the memo."""
    from subgpu_jax.model.lru import ByteLRU
    from subgpu_jax.score import vctables as vc

    rng = np.random.default_rng(0)
    hits = rng.uniform(0, 1, g2.n)
    monkeypatch.setattr(vc, "PROFILE_MEMO", ByteLRU(256 * 2**20))
    first = kernel_profiles(g2, H200, hits=hits)
    again = kernel_profiles(g2, H200, hits=hits)
    assert vc.PROFILE_MEMO.hits >= g2.n
    monkeypatch.setattr(vc, "PROFILE_MEMO", ByteLRU(0))   # stores nothing: no memo
    fresh = kernel_profiles(g2, H200, hits=hits)
    for k in first:
        np.testing.assert_array_equal(first[k], fresh[k])
        np.testing.assert_array_equal(again[k], fresh[k])
