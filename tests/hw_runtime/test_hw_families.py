"""The runtime for every family on main: the whole-step launch plan (pure CPU, always runs) and
the torch kernels of multi-head latent attention, shared experts, grouped routing, mixed
dense/MoE regions and the head, on tiny configs run with ``TorchWorkload(device="cpu")``
(needs torch; skipped without it)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from hw_runtime.plan import HEAD_RUN, FakeStreamBackend, build_step_plan, issue_plan
from subgpu_jax.score.step import time_step
from subgpu_jax.score.timer import EventTimer, StaticTimer
from subgpu_jax.space.mapcut import map_cut
from subgpu_jax.model.graph import Deployment, StaticDurationModel, build_forward, build_graph
from subgpu_jax.model.hardware import get_hardware
from subgpu_jax.model.models import ModelArch
from subgpu_jax.space.config import Config, chain_cut, temporal_config

H200 = get_hardware("H200")
DEP = Deployment(num_gpus=2, attn_tp=2, attn_dp=1, moe_ep=2, global_batch=8, input_len=64,
                 kv_history=64)


def _dep(arch: ModelArch) -> Deployment:
    """TP2 on 2 GPUs, G = 8, KV 64; EP2 for MoE models, EP1 for dense ones."""
    return DEP if arch.is_moe else dataclasses.replace(DEP, moe_ep=1)


def _ds(layers: int = 10, q_lora: int = 64) -> ModelArch:
    """A tiny DeepSeek-V3: MLA (c = 64, rope 16, nope 32, v 32), 1 shared expert, first layer
    dense, 8 experts in 4 groups (top 2 groups), top-2; ``layers`` > 8 makes two runs."""
    return ModelArch(name="tiny-ds", family="deepseek_v3", num_layers=layers, hidden=128,
                     num_heads=4, num_kv_heads=4, head_dim=48, vocab=500, intermediate=256,
                     num_experts=8, top_k=2, moe_intermediate=64, num_shared_experts=1,
                     n_group=4, topk_group=2, mlp_types=("dense",) + ("moe",) * (layers - 1),
                     q_lora_rank=q_lora, kv_lora_rank=64, qk_rope_head_dim=16,
                     qk_nope_head_dim=32, v_head_dim=32)


#: Tiny members of each family (the fields their config.json turns on).
FAMILY = {
    "llama": ModelArch(name="tiny-llama", family="llama", num_layers=2, hidden=128, num_heads=4,
                       num_kv_heads=2, head_dim=32, vocab=300, intermediate=256),
    "gpt_oss": ModelArch(name="tiny-oss", family="gpt_oss", num_layers=4, hidden=128,
                         num_heads=4, num_kv_heads=2, head_dim=32, vocab=300, num_experts=8,
                         top_k=2, moe_intermediate=64, layer_types=("sliding", "full") * 2,
                         sliding_window=16, attn_bias=True, mlp_bias=True,
                         attention_sinks=True),
    "qwen2": ModelArch(name="tiny-qwen2", family="qwen2", num_layers=2, hidden=128, num_heads=4,
                       num_kv_heads=2, head_dim=32, vocab=300, intermediate=256, qkv_bias=True),
    "qwen3": ModelArch(name="tiny-qwen3", family="qwen3", num_layers=2, hidden=128, num_heads=4,
                       num_kv_heads=2, head_dim=64, vocab=300, intermediate=256, qk_norm=True),
    "mixtral": ModelArch(name="tiny-mixtral", family="mixtral", num_layers=2, hidden=128,
                         num_heads=4, num_kv_heads=2, head_dim=32, vocab=300, num_experts=4,
                         top_k=2, moe_intermediate=64, layer_types=("sliding",) * 2,
                         sliding_window=16),
    # decoder_sparse_step = 2: layers alternate dense, MoE -> one mixed 2-layer region
    "qwen3_moe": ModelArch(name="tiny-qwen3-moe", family="qwen3_moe", num_layers=4, hidden=128,
                           num_heads=4, num_kv_heads=2, head_dim=32, vocab=300,
                           intermediate=256, num_experts=8, top_k=2, moe_intermediate=64,
                           qk_norm=True, mlp_types=("dense", "moe") * 2),
    "deepseek_v3": _ds(),
}


def _two_stage(g, start: str, b: int = 4) -> Config:
    """A 2-stage (w = 0) configuration of region ``g`` cut before kernel ``start``."""
    i = g.index(start)
    return Config(D=2, w=0, seg_of=chain_cut(g.n, [i]), alloc=(64, 64), microbatch=b)


# --------------------------------------------------------------------------- pure: the plan

@pytest.mark.parametrize("name", ["deepseek_v3", "qwen3_moe"])
@pytest.mark.parametrize("two_stage", [False, True])
def test_step_plan_equals_simulated_step(name, two_stage):
    """Oracle: ``time_step(..., StaticTimer(hw))`` = sum over runs of the max-plus makespan of the
    run's task DAG + the head's isolated times. Replaying the ``StepPlan`` through
    ``FakeStreamBackend`` with the same static durations (region kernels on their stage's
    pool, head kernels on the whole GPU) must give the same number: the runs' plans are the
    simulator's DAGs, the runs drain one after the other and the head waits for all of them.
    The head is ONE task on the last stage's first stream after every other stream's last task,
    and the plan launches every region kernel of every run once per microbatch plus the 4 head
    kernels."""
    arch = FAMILY[name]
    m = 2 if two_stage else 1
    fp = build_forward(arch, _dep(arch), m)
    g = fp.main
    cfg = _two_stage(g, "L0.attn") if two_stage else temporal_config(g.n, H200, 8)
    plan = build_step_plan(fp, cfg, 8)
    sd = StaticDurationModel(H200)
    cfgs = [cfg if gr is fp.main else map_cut(cfg, fp.main, gr) for gr in plan.graphs]

    def dur(task, k):
        if task.run == HEAD_RUN:
            return float(np.ravel(sd.kernel_time_us(fp.head[k], H200.num_sms))[0])
        return float(np.ravel(sd.kernel_time_us(plan.graphs[task.run].kernels[k],
                                                cfgs[task.run].alloc[task.stage]))[0])

    fb = FakeStreamBackend(plan.num_streams, dur)
    issue_plan(plan, fb)
    want = time_step(fp, cfg, StaticTimer(H200)).makespan_us
    assert fb.makespan == pytest.approx(want, rel=1e-6)  # the evaluator sums in float32
    heads = plan.head_tasks()
    assert len(heads) == 1 and heads[0].stage == cfg.D - 1 and heads[0].index == plan.T - 1
    assert heads[0].kernels == (0, 1, 2, 3)
    assert fb.task_start[heads[0].index] == pytest.approx(
        max(e for i, e in fb.task_end.items() if i != heads[0].index))
    assert plan.kernel_launches() == sum(c * m * gr.n for gr, c in fp.runs) + 4
    if name == "deepseek_v3":  # 1 dense layer, then 9 MoE layers: every MoE task after the dense
        assert [p.num_regions for p in plan.runs] == [1, 9]
        end0 = max(fb.task_end[t.index] for t in plan.tasks if t.run == 0)
        assert min(fb.task_start[t.index] for t in plan.tasks if t.run == 1) >= end0 - 1e-9
    s = plan.summary()
    assert s["head"]["stage"] == cfg.D - 1 and s["kernel_launches"] == plan.kernel_launches()


def test_region_kinds_offsets_continue_instance_numbering():
    """``mlp_only_layers = [0, 9]`` on 10 layers: runs dense x1, MoE x8, dense x1; the second
    dense run continues the dense kind's instances (offset 1 of its 2 instances)."""
    arch = dataclasses.replace(_ds(), mlp_types=("dense",) + ("moe",) * 8 + ("dense",))
    fp = build_forward(arch, DEP, 1)
    plan = build_step_plan(fp, temporal_config(fp.main.n, H200, 8), 8)
    assert [p.num_regions for p in plan.runs] == [1, 8, 1]
    assert plan.offsets == (0, 0, 1)
    assert plan.graphs[0] is plan.graphs[2] and plan.graphs[0].num_regions == 2


# --------------------------------------------------------------------------- torch on CPU

def _step(arch, m: int = 1):
    """The step workloads of ``arch`` on CPU and a sequential run of the temporal step plan."""
    pytest.importorskip("torch")
    from hw_runtime.gpu.executor import derive_workload
    from hw_runtime.gpu.step import StepWorkloads
    from hw_runtime.gpu.workload import TorchWorkload

    fp = build_forward(arch, _dep(arch), m)
    base = TorchWorkload(fp.main, device="cpu")
    sw = StepWorkloads(base, None, derive_workload)
    wls, head = sw.get(m)
    return fp, wls, head


class _Cpu:
    """A CPU stand-in for streams: runs each kernel when issued (issue order is topological)."""

    def __init__(self, plan, wls, head):
        self.plan, self.wls, self.head = plan, wls, head

    def wait(self, s, t):
        pass

    def record(self, s, t):
        pass

    def launch(self, s, task, k):
        from hw_runtime.gpu.step import StepWorkloads
        StepWorkloads.launch(self.wls, self.plan.offsets, self.head, task, k)


def _weights_match_graph(wl, g, arch) -> None:
    """The workload's weights of one region instance are the graph's weight objects: the
    same bytes for every non-expert object (the fp32 routing-correction bias ``router.corr``
    of grouped routing, 4E bytes, is not a graph object), and for the experts the graph
    charges only the expected distinct experts hit, hit = (E/e)(1 - (1 - k/E)^(G e/(n m)))
    of the E/e allocated (docs/method.md §5), so graph bytes = allocated x hit / (E/e)."""
    from subgpu_jax.model.models import expected_distinct

    d = g.deployment
    objs = {nm: b for k in g.kernels for nm, b in k.weight_objects}
    alloc = {nm: float(x.numel() * x.element_size()) for nm, x in wl.weights[0].items()}
    El = arch.num_experts // d.moe_ep if arch.is_moe else 0
    hit = (expected_distinct(arch.num_experts, d.global_batch * d.moe_ep
                             / (d.num_gpus * g.microbatches), arch.top_k) * El
           / arch.num_experts) if El else 0.0
    # graph objects made of several tensors: MLA projections with their latent norms, q/k
    # norms; a projection's bias is part of its weight object
    parts = {"mla_q_up.w": ("q_a_norm.w", "kv_a_norm.w", "q_up.w", "uk.w"),
             "mla_v_up.w": ("uv.w",), "qk_norm.w": ("q_norm.w", "k_norm.w"),
             "sinks": ("sink_scale",)}
    named = set()
    for nm, b in objs.items():
        p, obj = nm.split(".", 1)
        ts = [p + "." + x for x in parts.get(obj, (obj, obj[:-2] + ".b"))]
        ts = [x for x in ts if x in alloc]
        named |= set(ts)
        got = sum(alloc[x] for x in ts)
        if obj.startswith("experts_"):
            assert b == pytest.approx(got * hit / El, rel=1e-9), nm
        elif obj == "sinks":  # fp32 sink logits; the workload's bf16 per-head output scale
            assert b == 2 * got, nm
        else:
            assert b == got, nm
    rest = set(alloc) - named
    assert all(x.endswith("router.corr") for x in rest), rest


@pytest.mark.parametrize("name", sorted(FAMILY))
def test_family_step_runs_on_cpu(name):
    """A whole step of each family (temporal plan through the executor's stream backend, then
    a 2-stage one at m = 2): logits
    [R, V/t] = [8, ceil(V/2)], sampled tokens in the shard 0..V/t-1, a finite residual that the
    step changed; each region kind's allocated weights equal the graph's weight objects
    (``_weights_match_graph``); the 2-stage
    plan gives bitwise the same outputs as the temporal one at the same microbatch count
    (same kernels in another issue order)."""
    torch = pytest.importorskip("torch")
    from hw_runtime.gpu.executor import _TorchBackend

    arch = FAMILY[name]
    for m in (1, 2):
        fp, wls, head = _step(arch, m)
        R, Vl = 8, math.ceil(arch.vocab / 2)
        for wl, (g, _c) in zip(wls, fp.runs):
            _weights_match_graph(wl, g, arch)
        outs = {}
        cfgs = [temporal_config(fp.main.n, H200, R // m)]
        if m == 2:
            cfgs.append(_two_stage(fp.main, "L0.attn", R // m))
        x0 = [wls[0].output(mu).clone() for mu in range(m)]
        for cfg in cfgs:
            for mu in range(m):
                wls[0].output(mu).copy_(x0[mu])
            plan = build_step_plan(fp, cfg, R)
            if cfg.D == 1:  # the executor's backend, one stream (torch.cuda.stream(None): no-op)
                be = _TorchBackend(torch, [None], wls, offsets=plan.offsets, head=head)
                issue_plan(plan, be, single_stream=True)
                be.close()
            else:
                issue_plan(plan, _Cpu(plan, wls, head))
            outs[cfg.D] = [wls[0].output(mu).clone() for mu in range(m)] + \
                [head.acts["tokens"].clone()]
        assert head.acts["logits"].shape == (R, Vl)
        tok = head.acts["tokens"]
        assert tok.shape == (R,) and 0 <= int(tok.min()) and int(tok.max()) < Vl
        for mu in range(m):
            y = wls[0].output(mu)
            assert torch.isfinite(y.float()).all() and not torch.equal(y, x0[mu])
        if m == 2:
            assert all(torch.equal(a, b) for a, b in zip(outs[1], outs[2]))


def test_mixtral_sliding_window_and_mixed_region_shapes():
    """Mixtral with sliding_window 16 < kv_history 64 keeps a 16-slot ring, the new
    token in slot (64 - 1) % 16 = 15; the qwen3_moe region (dense, MoE) allocates a dense MLP
    for layer 0 and experts for layer 1."""
    pytest.importorskip("torch")
    from hw_runtime.gpu.workload import TorchWorkload, workload_shapes

    s = workload_shapes(build_graph(FAMILY["mixtral"], _dep(FAMILY["mixtral"]), 1))
    assert s.kv_len == (16,) and s.kv_pos == (15,)  # one-layer region
    wl = TorchWorkload(build_graph(FAMILY["qwen3_moe"], DEP, 1), device="cpu")
    w = wl.weights[0]
    assert "L0.mlp_up.w" in w and "L0.router.w" not in w
    assert "L1.router.w" in w and "L1.mlp_up.w" not in w
    assert wl.shapes.mlp_kinds == ("dense", "moe") and wl.shapes.I == 128


def _rms(x, w):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5) * w


def _rope(x, cos, sin):
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


@pytest.mark.parametrize("q_lora", [0, 64])
def test_mla_absorbed_decode_equals_naive(q_lora):
    """Absorbed MLA decode (the workload's ``mla_down .. mla_v_up`` kernels, bf16) equals the
    naive computation in float64 on the same bf16 weights and cache: decompress every cached
    token's keys k_h = [W_UK[h] c_t, k_rope_t] and values v_h = W_UV[h]^T c_t per head, then
    softmax(q_h . k_h / sqrt(nope + r)) . v_h.

    Tolerance: the two differ only by rounding. The absorbed path rounds to bf16 (unit
    roundoff u = 2^-9 ~ 2e-3) about five times in series (latent, q, q_lat, attention output,
    v up-projection); each rounding adds a relative error <= u to O(1) values, and softmax
    passes a score error d to the weights as a relative error d (scores here are O(1), scale
    1/sqrt(48)), so the relative L2 error is below ~5u ~ 1e-2; 2e-2 leaves a factor 2 and
    still fails on any real mistake (a missing rope, wrong scale or transposed head weight
    gives errors of order 1). The appended cache slot is checked the same way (2 roundings,
    1e-2)."""
    torch = pytest.importorskip("torch")
    from hw_runtime.gpu.workload import TorchWorkload

    arch = _ds(layers=3, q_lora=q_lora)
    g = build_graph(arch, DEP, 1)
    wl = TorchWorkload(g, device="cpu", instances=1, kv_cache="shared")
    for nm in ("L0.rmsnorm", "L0.mla_down", "L0.mla_q_up", "L0.rope_kv", "L0.attn",
               "L0.mla_v_up"):
        wl.launch(nm)
    s, a, w = wl.shapes, wl.acts[0], wl.weights[0]

    def f64(x):
        return x.double().numpy()

    c, r, nope, v, qh, ql = s.c, s.r, s.nope, s.v, s.qh, s.ql
    cos, sin = f64(wl.consts.rope_cos_r), f64(wl.consts.rope_sin_r)
    xn = f64(a["L0.xn"])
    lat = xn @ f64(w["L0.mla_down.w"])
    cq = _rms(lat[:, :ql], f64(w["L0.q_a_norm.w"])) if ql else xn
    q = (cq @ f64(w["L0.q_up.w"])).reshape(s.Rm, qh, nope + r)
    q_nope, q_rope = q[..., :nope], _rope(q[..., nope:], cos, sin)
    ckv_new = _rms(lat[:, ql:ql + c], f64(w["L0.kv_a_norm.w"]))
    kr_new = _rope(lat[:, ql + c:], cos, sin)
    cache = f64(wl.kv[0]["L0.ckv_cache"][:, 0])          # [R, L, c + r] after the append
    new = np.concatenate([ckv_new, kr_new], -1)
    slot = cache[:, s.kv_pos[0]]
    assert np.linalg.norm(slot - new) / np.linalg.norm(new) < 1e-2
    cache[:, s.kv_pos[0]] = new
    ckv, kr = cache[..., :c], cache[..., c:]
    W_uk, W_uv = f64(w["L0.uk.w"]), f64(w["L0.uv.w"])   # [qh, nope, c], [qh, c, v]
    out = np.zeros((s.Rm, qh, v))
    for h in range(qh):
        k_h = np.concatenate([ckv @ W_uk[h].T, kr], -1)   # [R, L, nope + r]
        v_h = ckv @ W_uv[h]                               # [R, L, v]
        qq = np.concatenate([q_nope[:, h], q_rope[:, h]], -1)
        sc = np.einsum("re,rle->rl", qq, k_h) / math.sqrt(nope + r)
        p = np.exp(sc - sc.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        out[:, h] = np.einsum("rl,rlv->rv", p, v_h)
    got = f64(a["L0.attn_out"]).reshape(s.Rm, qh, v)
    assert np.linalg.norm(got - out) / np.linalg.norm(out) < 2e-2
    assert torch.isfinite(a["L0.attn_out"].float()).all()


def test_shared_expert_is_added_and_grouped_routing_by_brute_force():
    """DeepSeek-V3 MoE layer on CPU. Grouped routing, checked token by token against a brute
    force over the C(4, 2) = 6 eligible group pairs: the chosen pair maximises the sum of the
    groups' two best biased scores, the top-2 experts are the best biased scores inside it,
    weights are their sigmoid scores normalised to 1. Shared expert: ``shared_y`` =
    (silu(hn W_g) * hn W_u) W_d in float64 (bf16 tolerance 2e-2 as in the MLA test), and the
    combine writes h + shared_y + sum_k w_k y_k (its own buffers, float64, 2e-2), where
    ``shared_y`` is a sizeable part of the output (> 5% of its norm) so dropping it fails."""
    torch = pytest.importorskip("torch")
    from itertools import combinations

    from hw_runtime.gpu.workload import TorchWorkload

    arch = _ds()
    g = build_graph(arch, DEP, 1, region=(("full", "moe"),))
    wl = TorchWorkload(g, device="cpu", instances=1, kv_cache="shared")
    wl.launch_region(0, 0)
    s, a, w = wl.shapes, wl.acts[0], wl.weights[0]

    def f64(x):
        return x.double().numpy()

    sc = 1.0 / (1.0 + np.exp(-f64(a["L0.logits"])))
    sel = sc + f64(w["L0.router.corr"])
    per = s.E // arch.n_group
    for i in range(s.Tr):
        best = max(combinations(range(arch.n_group), arch.topk_group),
                   key=lambda gs: sum(np.sort(sel[i, gg * per:(gg + 1) * per])[-2:].sum()
                                      for gg in gs))
        cand = [e for gg in best for e in range(gg * per, (gg + 1) * per)]
        want = sorted(cand, key=lambda e: -sel[i, e])[:s.k]
        got = a["L0.topk_i"][i].tolist()
        assert sorted(got) == sorted(want)
        wt = sc[i, got] / sc[i, got].sum()
        np.testing.assert_allclose(f64(a["L0.topk_w"][i]), wt, rtol=1e-6)
    hn, Fs = f64(a["L0.hn"]), s.Fs
    gu = hn @ f64(w["L0.shared_up.w"])
    act = gu[:, :Fs] / (1.0 + np.exp(-gu[:, :Fs])) * gu[:, Fs:]
    ys = act @ f64(w["L0.shared_down.w"])
    got_ys = f64(a["L0.shared_y"])
    assert np.linalg.norm(got_ys - ys) / np.linalg.norm(ys) < 2e-2
    y = f64(a["L0.y_exp"]).reshape(-1, s.H)[wl.consts.comb_idx.numpy()].reshape(s.Rm, s.k,
                                                                                 s.H)
    wsel = f64(a["L0.topk_w"])[wl.consts.wsel_idx.numpy()]
    want = f64(a["L0.h"]) + got_ys + np.einsum("rk,rkh->rh", wsel, y)
    out = f64(a["resid.1"])
    assert np.linalg.norm(out - want) / np.linalg.norm(want) < 2e-2
    assert np.linalg.norm(got_ys) / np.linalg.norm(want) > 0.05
    assert torch.isfinite(a["resid.1"].float()).all()


def test_run_report_predicts_and_measures_whole_steps(tmp_path):
    """``subgpu run``'s report for DeepSeek-V3 cut to 10 layers (first dense): the predictions
    are whole steps (``time_step``: the dense run, the 9 MoE instances, the head), with the
    two runs listed; an executor stand-in that replays the ``StepPlan`` with static durations
    measures exactly ``time_step(..., StaticTimer(hw))`` (the oracle of
    ``test_step_plan_equals_simulated_step``), head included."""
    import json

    from hw_runtime.commands.request import RunRequest, Timing, WorkloadOptions
    from hw_runtime.commands.run import prepare_run, run_report
    from hw_runtime.gpu.executor import Measurement
    from subgpu_jax.space.config import temporal_of

    from pathlib import Path

    src = Path(__file__).resolve().parents[1] / "data" / "configs" / "deepseek-v3.json"
    cfg_json = json.loads(src.read_text())
    cfg_json.update(num_hidden_layers=10, first_k_dense_replace=1)
    path = tmp_path / "ds10.json"
    path.write_text(json.dumps(cfg_json))
    a = RunRequest(workload=WorkloadOptions(model=str(path), hardware="H200", gpus=8, tp=8,
                                            dp=1, ep=8, batch=64, input_len=4096,
                                            kv_history=4096),
                   timing=Timing(rounds=1, replays=2, warmup=0, check=False), json=True)
    prep = prepare_run(a)
    wl, dep, model, hw_sim = prep.wl, prep.dep, prep.model, prep.hw_sim
    sd = StaticDurationModel(H200)

    class StepFake:
        elementwise, attention, moe_gemm = "torch", "sdpa", None   # (read by run_report)

        def temporal_config(self):
            return temporal_of(wl)

        def measure(self, c, mode, rounds=1, replays=2, warmup=0, streams_per_stage=None):
            fp = build_forward(wl.arch, dep, wl.batch // c.microbatch)
            plan = build_step_plan(fp, c, wl.batch)
            cs = [c if g is fp.main else map_cut(c, fp.main, g) for g in plan.graphs]

            def dur(t, k):
                kern = fp.head[k] if t.run == HEAD_RUN else plan.graphs[t.run].kernels[k]
                p = H200.num_sms if t.run == HEAD_RUN else cs[t.run].alloc[t.stage]
                return float(np.ravel(sd.kernel_time_us(kern, p))[0])

            fb = FakeStreamBackend(plan.num_streams, dur)
            issue_plan(plan, fb)
            return Measurement(mode=mode, makespan_us=fb.makespan, round_medians_us=[1.0],
                               spread=0.0, replays=replays, rounds=rounds, warmup=warmup,
                               capture_s=0.0, graph_nodes=None, plan=plan.summary())

    res = run_report(prep, StepFake())
    fp1 = build_forward(wl.arch, dep, 1)
    want_t = time_step(fp1, temporal_of(wl), EventTimer(hw_sim, model, prep.cache),
                       record=False).makespan_us
    assert res.temporal.predicted_us == pytest.approx(want_t, rel=1e-9)
    assert [r["instances"] for r in res.step["runs"]] == [1, 9]
    assert res.step["head_us_predicted"] > 0
    assert res.temporal.measured_us == pytest.approx(
        time_step(fp1, temporal_of(wl), StaticTimer(H200)).makespan_us, rel=1e-6)
