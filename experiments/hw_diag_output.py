"""Diagnose pipelined-vs-sequential output differences of ``hw_runtime.gpu.executor`` (H200).

For the TINY GPT-OSS-like model of ``tests/test_hw_executor.py`` and the three configurations
of ``test_gpu_capture_and_pipelined_output_equals_sequential`` this runs, from the SAME restored
inputs, many variants of one forward pass and compares the full workload state (every activation
buffer of every microbatch and the KV caches) with an eager single-stream reference:

* numerical hypothesis: the sequential plan on a plain stream, on each green pool's stream,
  task-by-task on the stage streams fully synchronised, and as a single-stream CUDA graph;
* race hypothesis: eager pipelined launches (repeated, and with delays injected on one stage),
  the pipelined CUDA graph replayed several times, the pipelined graph with every task chained
  to the previous one (no overlap), and graphs of every prefix of the plan (localises the first
  task whose buffers differ);
* green-context synchronisation: does ``torch.cuda.synchronize`` wait for green-stream work?
* ``Executor.check_output`` as it is.

``--part launch_blocking`` (run under ``CUDA_LAUNCH_BLOCKING=1``) repeats the eager variants;
``--part orig`` runs the former ``Executor.check_output`` step by step with full-state snapshots
(first thing in a fresh process); ``--part fixed`` runs the current ``check_output`` twice per
configuration. Results: experiments/results/hw_diag_output.json and the digest
hw_diag_output_summary.json (docs/results.md "Runtime probes on the H200"; the other runs' files
and logs are in git history at 31b8bfb).
Writes ``--out`` JSON; prints a short table last.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
import traceback
from subgpu_jax.space.config import workload_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="hw_diag_output.json")
    ap.add_argument("--part", default="main", choices=["main", "launch_blocking", "fixed", "orig"])
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    import torch
    from test_hw_executor import TINY_WL
    from hw_runtime.gpu.executor import Executor
    from hw_runtime.plan import issue_plan
    from hw_runtime.gpu.workload import TorchWorkload as HwWorkload

    t0 = time.time()
    res: dict = {"part": a.part, "env_launch_blocking": os.environ.get("CUDA_LAUNCH_BLOCKING"),
                 "torch": torch.__version__, "device": torch.cuda.get_device_name(0),
                 "configs": {}, "errors": {}}

    def save():
        with open(a.out, "w") as fh:
            json.dump(res, fh, indent=1, default=str)

    ex = Executor(HwWorkload(TINY_WL.graph(1), device="cuda"))
    cyc_us = ex.base._cycles_per_us
    res["cycles_per_us"] = cyc_us

    if a.part in ("fixed", "orig"):
        cfgs = _configs(TINY_WL)
        for name, cfg, mode in cfgs:
            rec = res["configs"][name] = {"mode": mode}
            try:
                if a.part == "orig":
                    rec.update(orig_check_instrumented(torch, ex, cfg, mode))
                else:
                    rec["check_output"] = ex.check_output(cfg, mode)
                    rec["check_output_again"] = ex.check_output(cfg, mode)
            except Exception as e:  # noqa: BLE001
                rec["error"] = f"{e.__class__.__name__}: {e}"
                traceback.print_exc()
            save()
            print(name, json.dumps(rec, default=str)[:1500], flush=True)
        res["seconds"] = time.time() - t0
        save()
        return 0

    # ------------------------------------------------------------- green sync probe
    if a.part == "main":
        try:
            from hw_runtime.gpu.partition import GreenPartition
            with GreenPartition([64, 64], streams_per_pool=1) as part:
                s = part.stream(1, 0)
                x = torch.zeros(1 << 20, device="cuda")
                torch.cuda.synchronize()
                with torch.cuda.stream(s):
                    torch.cuda._sleep(int(100_000 * cyc_us))  # ~100 ms
                    x.fill_(1.0)
                ts = time.perf_counter()
                torch.cuda.synchronize()
                dt = time.perf_counter() - ts
                q = s.query()
                v = float(x[-1].item())
                res["green_sync_probe"] = {"device_sync_s": dt, "stream_done_after_sync": q,
                                           "value_after_sync": v}
        except Exception as e:  # noqa: BLE001
            res["errors"]["green_sync_probe"] = f"{e.__class__.__name__}: {e}"

    cfgs = _configs(TINY_WL)
    for name, cfg, mode in cfgs:
        rec: dict = {"mode": mode, "config": str(cfg)}
        res["configs"][name] = rec
        try:
            run_config(torch, ex, cfg, mode, rec, a, issue_plan)
        except Exception as e:  # noqa: BLE001
            rec["error"] = f"{e.__class__.__name__}: {e}"
            traceback.print_exc()
        save()
        print(f"{name} done ({time.time() - t0:.1f} s)", flush=True)
    res["seconds"] = time.time() - t0
    save()
    # ---- table
    print(f"\n{'variant':34s} " + " ".join(f"{n:>22s}" for n, _, _ in cfgs))
    keys = []
    for n, _, _ in cfgs:
        for k in res["configs"][n].get("variants", {}):
            if k not in keys:
                keys.append(k)
    for k in keys:
        row = []
        for n, _, _ in cfgs:
            v = res["configs"][n].get("variants", {}).get(k)
            row.append("-" if v is None else str(v["all_equal"]) if "all_equal" in v else
                       ("EQ" if v.get("bitwise_equal") else f"{v.get('rel_l2', float('nan')):.2e}")
                       + f" f{v.get('topk_flips', 0)}")
        print(f"{k:34s} " + " ".join(f"{r:>22s}" for r in row))
    for n, _, _ in cfgs:
        r = res["configs"][n]
        print(n, "check_output:", r.get("check_output"), "| first bad prefix:",
              r.get("first_bad_prefix"), "| error:", r.get("error"))
    print("green_sync_probe:", res.get("green_sync_probe"), res["errors"])
    return 0


def _configs(TINY_WL):
    return [("A_green", workload_config(TINY_WL, TINY_WL.macro_starts(), [64, 64], 4, True), "green"),
            ("B_green", workload_config(TINY_WL, ["L0.attn", "L1.router"], [32, 32, 64], 2, False),
             "green"),
            ("A_multistream", workload_config(TINY_WL, TINY_WL.macro_starts(), [64, 64], 4, True),
             "multistream")]


def _state(torch, wl, m):
    torch.cuda.synchronize()
    P = wl.shapes.P
    out = {}
    for mu in range(m):
        for k, v in wl.acts[mu].items():
            if k != f"resid.{P}":
                out[f"mu{mu}.{k}"] = v.clone()
    for i, kv in enumerate(wl.kv):
        for k, v in kv.items():
            out[f"kv{i}.{k}"] = v.clone()
    torch.cuda.synchronize()
    return out


def _cmp(torch, s, r, m):
    outs = [f"mu{mu}.resid.0" for mu in range(m)]
    num = math.sqrt(sum(float(((s[k].float() - r[k].float()) ** 2).sum()) for k in outs))
    den = math.sqrt(sum(float((r[k].float() ** 2).sum()) for k in outs))
    bad = [k for k in r if not torch.equal(s[k], r[k])]
    return {"out_equal": all(torch.equal(s[k], r[k]) for k in outs),
            "rel_l2": num / den if den else 0.0, "buffers_differing": len(bad),
            "differing": bad[:40],
            "topk_flips": sum(int((s[k] != r[k]).sum()) for k in r if k.endswith("topk_i"))}


def orig_check_instrumented(torch, ex, cfg, mode):
    """The former ``Executor.check_output`` step by step, with full-state snapshots."""
    t = torch
    plan = ex.plan(cfg)
    wl = ex.workload_for(plan.microbatches)
    m = plan.microbatches
    inputs = [wl.output(mu).clone() for mu in range(m)]
    out: dict = {}

    def restore():
        for mu in range(m):
            wl.output(mu).copy_(inputs[mu])
        t.cuda.synchronize()

    ref_stream = t.cuda.Stream()
    restore()
    ex.issue(plan, [ref_stream], single_stream=True)
    t.cuda.synchronize()
    ref = _state(t, wl, m)
    streams, part = ex.stage_streams(cfg, mode)
    try:
        g, nodes, _ = ex.capture(plan, streams)
        warm = _state(t, wl, m)
        restore()
        rs = _state(t, wl, m)
        out["restored_ok"] = all(torch.equal(rs[f"mu{mu}.resid.0"], inputs[mu])
                                 for mu in range(m))
        with t.cuda.stream(streams[0]):
            g.replay()
        t.cuda.synchronize()
        o1 = _state(t, wl, m)
        restore()
        with t.cuda.stream(streams[0]):
            g.replay()
        t.cuda.synchronize()
        o2 = _state(t, wl, m)
        del g
    finally:
        if part is not None:
            t.cuda.synchronize()
            part.close()
    out["replay1_vs_ref"] = _cmp(t, o1, ref, m)
    out["replay2_vs_ref"] = _cmp(t, o2, ref, m)
    # second reference on a new plain stream
    restore()
    s2 = t.cuda.Stream()
    ex.issue(plan, [s2], single_stream=True)
    t.cuda.synchronize()
    out["ref2_vs_ref"] = _cmp(t, _state(t, wl, m), ref, m)
    # what the warm-up pass should have produced: one sequential pass from the ref's output
    for mu in range(m):
        wl.output(mu).copy_(ref[f"mu{mu}.resid.0"])
    t.cuda.synchronize()
    ex.issue(plan, [s2], single_stream=True)
    t.cuda.synchronize()
    out["warmup_vs_expected"] = _cmp(t, warm, _state(t, wl, m), m)
    restore()
    out["nodes"] = nodes
    return out


class _Done(Exception):
    """Ends a shortened variant list early (``--part launch_blocking``)."""


def run_config(torch, ex, cfg, mode, rec, a, issue_plan):
    plan = ex.plan(cfg)
    wl = ex.workload_for(plan.microbatches)
    m = plan.microbatches
    P = wl.shapes.P
    inputs = [wl.output(mu).clone() for mu in range(m)]
    rec["plan"] = plan.summary()

    def restore():
        torch.cuda.synchronize()
        for mu in range(m):
            wl.output(mu).copy_(inputs[mu])
        torch.cuda.synchronize()

    def sync_all(streams):
        for s in streams:
            s.synchronize()
        torch.cuda.synchronize()

    def snap(streams=()):
        sync_all(streams)
        out = {}
        for mu in range(m):
            for k, v in wl.acts[mu].items():
                if k == f"resid.{P}":
                    continue
                out[f"mu{mu}.{k}"] = v.clone()
        for i, kv in enumerate(wl.kv):
            for k, v in kv.items():
                out[f"kv{i}.{k}"] = v.clone()
        torch.cuda.synchronize()
        return out

    def compare(s, r):
        outs = [f"mu{mu}.resid.0" for mu in range(m)]
        num = math.sqrt(sum(float(((s[k].float() - r[k].float()) ** 2).sum()) for k in outs))
        den = math.sqrt(sum(float((r[k].float() ** 2).sum()) for k in outs))
        mx = max(float((s[k].float() - r[k].float()).abs().max()) for k in outs)
        eq = all(bool(torch.equal(s[k], r[k])) for k in outs)
        bad = [k for k in r if not torch.equal(s[k], r[k])]
        flips = sum(int((s[k] != r[k]).sum()) for k in r if k.endswith("topk_i"))
        rows_flipped = 0
        for k in r:
            if k.endswith("topk_i"):
                a_, b_ = s[k].sort(-1).values, r[k].sort(-1).values
                rows_flipped += int((a_ != b_).any(-1).sum())
        fin = all(bool(torch.isfinite(s[k].float()).all()) for k in outs)
        return {"bitwise_equal": eq, "rel_l2": num / den if den else 0.0, "max_abs_diff": mx,
                "finite": fin, "buffers_differing": len(bad), "first_differing": bad[:8],
                "topk_flips": flips, "topk_rows_with_other_experts": rows_flipped}

    wl_fns = [wl.kernel_fn(i) for i in range(wl.n)]

    def issue_custom(streams, single=None, serial=False, sync_each=False, delay_stage=None,
                     tasks=None):
        """Issue tasks: single=stream index (everything there), serial (chain every task to the
        previous one with an event), sync_each (eager: synchronise all after each task),
        delay_stage (sleep ~30 us before each task of that stage)."""
        ev = {}
        prev = None
        for t in (plan.tasks if tasks is None else tasks):
            si = single if single is not None else t.stage
            s = streams[si]
            if single is None:
                for j in t.waits:
                    s.wait_event(ev[j])
                if serial and prev is not None:
                    s.wait_event(prev)
            with torch.cuda.stream(s):
                if delay_stage is not None and t.stage == delay_stage:
                    torch.cuda._sleep(int(30 * ex.base._cycles_per_us))
                for k in t.kernels:
                    wl_fns[k](t.microbatch, t.region)
                e = torch.cuda.Event()
                e.record(s)
                ev[t.index] = e
                prev = e
            if sync_each:
                sync_all(streams)

    def capture_custom(streams, fn):
        s0 = streams[0]
        g = torch.cuda.CUDAGraph(keep_graph=True)
        with torch.cuda.graph(g, stream=s0):
            fork = torch.cuda.Event()
            fork.record(s0)
            for s in streams[1:]:
                s.wait_event(fork)
            fn()
            for s in streams[1:]:
                j = torch.cuda.Event()
                j.record(s)
                s0.wait_event(j)
        from hw_runtime.gpu.kerneltime import graph_nodes
        nodes = graph_nodes(g)
        g.instantiate()
        torch.cuda.synchronize()
        return g, nodes

    def replay(g, streams):
        with torch.cuda.stream(streams[0]):
            g.replay()
        sync_all(streams)

    V = rec["variants"] = {}
    plain = torch.cuda.Stream()
    # reference: exactly what check_output does
    restore()
    ex.issue(plan, [plain], single_stream=True)
    ref = snap([plain])
    restore()
    ex.issue(plan, [plain], single_stream=True)
    V["seq_plain_again"] = compare(snap([plain]), ref)

    streams, part = ex.stage_streams(cfg, mode)
    rec["nodes"] = {}
    try:
        # ---- numerical: sequential on each pool's stream
        for d, s in enumerate(streams):
            restore()
            issue_custom(streams, single=d)
            V[f"seq_on_stage{d}_stream"] = compare(snap(streams), ref)
        # sequential, each task on its stage stream, fully synchronised after each task
        restore()
        issue_custom(streams, sync_each=True)
        V["stage_streams_sync_each_task"] = compare(snap(streams), ref)
        if a.part == "launch_blocking":
            for r in range(2):
                restore()
                ex.issue(plan, streams)
                V[f"pipelined_eager_{r}"] = compare(snap(streams), ref)
            raise _Done
        # ---- race: eager pipelined, repeated and with delays
        eager = []
        for r in range(3):
            restore()
            ex.issue(plan, streams)
            sn = snap(streams)
            eager.append(sn)
            V[f"pipelined_eager_{r}"] = compare(sn, ref)
        for d in range(len(streams)):
            restore()
            issue_custom(streams, delay_stage=d)
            V[f"pipelined_eager_delay_stage{d}"] = compare(snap(streams), ref)
        # ---- graphs
        restore()
        g, nodes = capture_custom([plain], lambda: issue_custom([plain], single=0))
        rec["nodes"]["seq_plain"] = nodes
        restore()
        replay(g, [plain])
        V["graph_seq_plain"] = compare(snap([plain]), ref)
        del g
        restore()
        g, nodes = capture_custom([streams[0]], lambda: issue_custom(streams, single=0))
        rec["nodes"]["seq_stage0"] = nodes
        restore()
        replay(g, [streams[0]])
        V["graph_seq_stage0_stream"] = compare(snap(streams), ref)
        del g
        # the executor's capture (warm run inside) and replays
        restore()
        g, nodes, _ = ex.capture(plan, streams)
        V["executor_capture_warm_run"] = compare(snap(streams), ref)
        rec["nodes"]["pipelined"] = nodes
        reps = []
        for r in range(a.repeats):
            restore()
            replay(g, streams)
            sn = snap(streams)
            reps.append(sn)
            V[f"graph_pipelined_{r}"] = compare(sn, ref)
        V["graph_repeat_vs_first"] = {"all_equal": all(
            all(torch.equal(x[k], reps[0][k]) for k in x) for x in reps[1:])}
        # the check_output sequence: no explicit stream syncs, default-stream restore/clone
        restore()
        with torch.cuda.stream(streams[0]):
            g.replay()
        torch.cuda.synchronize()
        outs = [wl.output(mu).clone() for mu in range(m)]
        torch.cuda.synchronize()
        full = snap(streams)
        for mu in range(m):
            full[f"mu{mu}.resid.0"] = outs[mu]
        V["graph_pipelined_checkoutput_style"] = compare(full, ref)
        del g
        # pipelined graph, every task chained to the previous one (no overlap)
        restore()
        g, nodes = capture_custom(streams, lambda: issue_custom(streams, serial=True))
        rec["nodes"]["serial"] = nodes
        restore()
        replay(g, streams)
        V["graph_pipelined_serialized"] = compare(snap(streams), ref)
        del g
        for d in range(len(streams)):
            restore()
            g, _ = capture_custom(streams, lambda d=d: issue_custom(streams, delay_stage=d))
            restore()
            replay(g, streams)
            V[f"graph_pipelined_delay_stage{d}"] = compare(snap(streams), ref)
            del g
        # ---- prefixes: first task count whose graph state differs from the eager sequential
        first_bad = None
        pref = []
        for n in range(1, plan.T + 1):
            tasks = plan.tasks[:n]
            restore()
            issue_custom([plain], single=0, tasks=tasks)
            r_n = snap([plain])
            restore()
            g, _ = capture_custom(streams, lambda tasks=tasks: issue_custom(streams, tasks=tasks))
            restore()
            replay(g, streams)
            s_n = snap(streams)
            del g
            c = compare(s_n, r_n)
            bad = [k for k in r_n if not torch.equal(s_n[k], r_n[k])]
            t = plan.tasks[n - 1]
            pref.append({"n": n, "task": [t.region, t.microbatch, t.segment, t.stage],
                         "kernels": [wl.graph.kernels[k].name for k in t.kernels],
                         "bad": bad[:12], "rel_l2_out": c["rel_l2"]})
            if bad and first_bad is None:
                first_bad = pref[-1]
        rec["prefixes"] = pref
        rec["first_bad_prefix"] = first_bad
    except _Done:
        pass
    finally:
        if part is not None:
            torch.cuda.synchronize()
            part.close()
    restore()
    rec["check_output"] = ex.check_output(cfg, mode)
    rec["check_output_again"] = ex.check_output(cfg, mode)


if __name__ == "__main__":
    sys.exit(main())
