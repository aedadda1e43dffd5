"""Device probe: green-context partitions and the reference workload.

Run on the H200 device machine from the repository root::

    PYTHONPATH=. python3 experiments/hw_probe_h200.py --out $OUT/hw_probe_h200.json

(a) partitions [64, 64], [32, 96], [8, 120]: granted SMs, stream ownership, GEMM probe slowdown
    (and [32, 96] again with the cuDevSmResourceSplitByCount fall-back);
(b) requests that must fail cleanly (non-multiple, below minimum, over the device, too many
    pools) and round_up=True;
(c) the gpt-oss-120b reference workload (REFERENCE_DEPLOYMENT, bf16 experts), microbatches 1 and
    2: every kernel timed alone on the whole GPU (CUDA-graph replays over the 18 region
    instances, median of 25), achieved bandwidth vs the 4245 GB/s copy peak and TFLOP/s, with the
    static model's prediction for the same kernel on the H200;
(d) one CUDA graph (a whole region instance) captured on a green-context stream and replayed,
    plus a mini spatial run: decode attention on pool 0 and the expert MLPs on pool 1.

The JSON is rewritten after every section, so a run cut short still returns what it measured.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import traceback

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

COPY_PEAK_GBPS = 4245.0  # tests/data/h200_copy_bandwidth_vs_pool.csv, whole GPU


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."),
                                                  "hw_probe_h200.json"))
    ap.add_argument("--reps", type=int, default=25)
    ap.add_argument("--quick", action="store_true", help="small probe sizes (smoke run)")
    args = ap.parse_args()
    res: dict = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "errors": {}}
    t0 = time.time()

    def save() -> None:
        res["elapsed_s"] = time.time() - t0
        with open(args.out, "w") as fh:
            json.dump(res, fh, indent=1, default=str)

    def section(name):
        def deco(fn):
            try:
                print(f"== {name}", flush=True)
                fn()
            except Exception as e:  # record and go on
                res["errors"][name] = f"{e.__class__.__name__}: {e}"
                traceback.print_exc()
            print(f"   ({time.time() - t0:.1f} s)", flush=True)
            save()
        return deco

    import torch
    from hw_runtime.gpu.partition import GreenPartition, device_sm_info, plan_pools
    from hw_runtime.gpu.workload import TorchWorkload, hopper_arch
    from hw_runtime.gpu.kerneltime import time_kernels
    from subgpu_jax.model.graph import REFERENCE_DEPLOYMENT, StaticDurationModel, build_graph
    from subgpu_jax.model.hardware import get_hardware
    from subgpu_jax.model.models import get_model

    @section("env")
    def _env():
        import cuda.bindings
        info = device_sm_info(0)
        res["env"] = {
            "python": platform.python_version(), "torch": torch.__version__,
            "cuda_bindings": getattr(cuda.bindings, "__version__", "?"),
            "torch_cuda": torch.version.cuda, "device": torch.cuda.get_device_name(0),
            "sm_info": {"sm_count": info.sm_count, "quantum": info.quantum,
                        "min_partition": info.min_partition,
                        "aligned_budget": info.aligned_budget, "max_pools": info.max_pools,
                        "cc": list(info.compute_capability), "driver": info.driver_version},
            "mem_free_total": list(torch.cuda.mem_get_info(0)),
        }
        print(res["env"], flush=True)

    # ------------------------------------------------------------------ (a)
    @section("a_partitions")
    def _a():
        out = []
        n = 4096 if args.quick else 8192
        for sms, method in (([64, 64], "auto"), ([32, 96], "auto"), ([8, 120], "auto"),
                            ([32, 96], "chain"), ([16, 16, 32, 64], "auto"), ([8] * 16, "auto")):
            row = {"requested": sms, "method_requested": method}
            try:
                with GreenPartition(sms, streams_per_pool=2, method=method) as part:
                    row.update(part.summary())
                    row["streams_ok"] = part.verify_streams()
                    row["probe"] = part.probe(n=n, iters=5, check=False,
                                              all_streams=len(sms) <= 4)
            except Exception as e:
                row["error"] = f"{e.__class__.__name__}: {e}"
                traceback.print_exc()
            out.append(row)
            pr = row.get("probe", {})
            print(sms, method, "granted", row.get("granted"), "method", row.get("method"),
                  "remainder", row.get("remainder_sms"), "full_ms",
                  round(pr.get("full_ms", float("nan")), 3),
                  [(r["pool"], r["stream"], round(r["ms"], 3), round(r["ratio"], 3))
                   for r in pr.get("pools", [])],
                  "concurrent/isolated", [round(c["ratio_to_isolated"], 2)
                                          for c in (pr.get("concurrent") or [])], flush=True)
        res["a_partitions"] = out

    # ------------------------------------------------------------------ (b)
    @section("b_errors")
    def _b():
        out = []
        for sms, kw in (([66, 64], {}), ([100], {}), ([4, 64], {}), ([64, 72], {}),
                        ([136], {}), ([8] * 17, {}), ([0, 64], {}), ([66, 52], {"round_up": True}), ([66, 60], {"round_up": True}),
                        ([4, 100], {"round_up": True})):
            row = {"requested": sms if len(sms) < 10 else f"{len(sms)} x {sms[0]}", **kw}
            try:
                with GreenPartition(sms, **kw) as part:
                    row["granted"] = list(part.granted)
                    row["notes"] = list(part.notes)
                    row["streams_ok"] = part.verify_streams()
            except Exception as e:
                row["error"] = f"{e.__class__.__name__}: {e}"
            out.append(row)
            print(row, flush=True)
        # context manager tears down on error
        part = None
        try:
            with GreenPartition([64, 64]) as part:
                raise RuntimeError("boom")
        except RuntimeError:
            pass
        out.append({"teardown_on_error_closed": part is not None and not part.is_open})
        # still usable afterwards: nothing leaked
        with GreenPartition([64, 64]) as part:
            out.append({"recreate_after_errors": list(part.granted)})
        res["b_errors"] = out

    # ------------------------------------------------------------------ (b') raw driver
    @section("b_raw_driver")
    def _braw():
        """What the split calls themselves grant (no green context is created here)."""
        from cuda.bindings import driver as drv
        drv.cuInit(0)
        _, dev = drv.cuDeviceGet(0)
        _, whole = drv.cuDeviceGetDevResource(dev, drv.CUdevResourceType.CU_DEV_RESOURCE_TYPE_SM)
        out = []
        backfill = int(drv.CUdevSmResourceGroup_flags.CU_DEV_SM_RESOURCE_GROUP_BACKFILL)
        for sizes, cos, flags in (([64, 64], 8, 0), ([32, 96], 8, 0), ([66, 64], 8, 0),
                                  ([66, 62], 2, 0), ([64, 68], 8, backfill),
                                  ([62, 70], 2, 0), ([64, 64], 0, 0)):
            params = []
            for s_ in sizes:
                g = drv.CU_DEV_SM_RESOURCE_GROUP_PARAMS()
                g.smCount, g.coscheduledSmCount, g.flags = s_, cos, flags
                params.append(g)
            row = {"call": "cuDevSmResourceSplit", "sizes": sizes, "coscheduled": cos,
                   "flags": flags}
            try:
                r = drv.cuDevSmResourceSplit(len(sizes), whole, 0, params)
                row["err"] = str(r[0])
                if r[0] == drv.CUresult.CUDA_SUCCESS:
                    row["granted"] = [int(x.sm.smCount) for x in r[1]]
                    row["remainder"] = int(r[2].sm.smCount)
            except Exception as e:
                row["err"] = f"{e.__class__.__name__}: {e}"
            out.append(row)
        for n, mn in ((1, 66), (1, 100), (2, 64), (16, 8), (0, 8)):
            row = {"call": "cuDevSmResourceSplitByCount", "nbGroups": n, "minCount": mn}
            try:
                r = drv.cuDevSmResourceSplitByCount(n, whole, 0, mn)
                row["err"] = str(r[0])
                if r[0] == drv.CUresult.CUDA_SUCCESS:
                    row["granted"] = [int(x.sm.smCount) for x in r[1]]
                    row["groups"] = int(r[2])
                    row["remainder"] = int(r[3].sm.smCount)
            except Exception as e:
                row["err"] = f"{e.__class__.__name__}: {e}"
            out.append(row)
        for row in out:
            print(row, flush=True)
        res["b_raw_driver"] = out

    # ------------------------------------------------------------------ (c)
    arch = hopper_arch(get_model("gpt-oss-120b"))
    hw = get_hardware("H200")
    model = StaticDurationModel(hw)
    keep: dict = {}

    def kernel_table(m: int):
        g = build_graph(arch, REFERENCE_DEPLOYMENT, m)
        t1 = time.time()
        wl = TorchWorkload(g, device="cuda")
        build_s = time.time() - t1
        rows = time_kernels(wl, reps=args.reps, warmup=3)
        for r, k in zip(rows, g.kernels):
            r["pred_us"] = float(model.kernel_time_us(k, hw.num_sms))
            r["copy_peak_frac"] = r["GBps"] / COPY_PEAK_GBPS
        attn = [r for r in rows if r["op"] == "attn" and r["category"] == "attn_full"][0]
        out = {"summary": wl.summary(), "build_s": build_s, "kernels": rows,
               "sum_us": sum(r["us"] for r in rows),
               "sum_pred_us": sum(r["pred_us"] for r in rows),
               "full_attn_kv_GBps": attn["kv_GBps"],
               "full_attn_kv_frac_of_copy_peak": attn["kv_GBps"] / COPY_PEAK_GBPS,
               "full_attn_ok_70pct": attn["kv_GBps"] >= 0.7 * COPY_PEAK_GBPS}
        print(f"m={m}: built in {build_s:.1f} s, {wl.memory['total'] / 1e9:.1f} GB "
              f"(kv {wl.kv_cache}), spin {wl._cycles_per_us:.0f} cycles/us", flush=True)
        print(f"{'kernel':16s} {'us':>9s} {'pred':>9s} {'GB/s':>7s} {'%copy':>6s} "
              f"{'TFLOP/s':>8s} {'nodes':>5s}", flush=True)
        for r in rows:
            print(f"{r['name']:16s} {r['us']:9.2f} {r['pred_us']:9.2f} {r['GBps']:7.0f} "
                  f"{100 * r['copy_peak_frac']:6.1f} {r['TFLOPs']:8.2f} "
                  f"{r['graph_nodes_per_launch'] or 0:5.1f}", flush=True)
        return wl, out

    @section("c_workload_m1")
    def _c1():
        wl, out = kernel_table(1)
        res["c_workload_m1"] = out
        del wl
        import gc
        gc.collect()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()

    @section("c_workload_m2")
    def _c2():
        wl, out = kernel_table(2)
        res["c_workload_m2"] = out
        keep["wl"] = wl

    # ------------------------------------------------------------------ (d)
    @section("d_green_graph")
    def _d():
        wl = keep.get("wl")
        if wl is None:
            g = build_graph(arch, REFERENCE_DEPLOYMENT, 2)
            wl = TorchWorkload(g, device="cuda", kv_cache="shared")
            keep["wl"] = wl

        def med_replay(graph, stream, reps=10):
            ts = []
            with torch.cuda.stream(stream):
                graph.replay()
                for _ in range(reps):
                    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(
                        enable_timing=True)
                    e0.record(stream)
                    graph.replay()
                    e1.record(stream)
                    e1.synchronize()
                    ts.append(e0.elapsed_time(e1))
            return statistics.median(ts)

        out = {}
        full = torch.cuda.Stream()
        with torch.cuda.stream(full):
            wl.launch_region(0, 0)
        full.synchronize()
        gfull = torch.cuda.CUDAGraph()
        with torch.cuda.graph(gfull, stream=full):
            wl.launch_region(0, 0)
        out["region_full_gpu_ms"] = med_replay(gfull, full)
        with GreenPartition([64, 64], streams_per_pool=2) as part:
            out["partition"] = part.summary()
            s0, s1 = part.stream(0, 0), part.stream(1, 0)
            gg = torch.cuda.CUDAGraph()
            with torch.cuda.graph(gg, stream=s0):
                wl.launch_region(0, 0)
            out["region_pool0_64sm_ms"] = med_replay(gg, s0)
            out["captured_on_green_stream"] = True
            # mini spatial: full-attention FMHA on pool 0, expert MLPs on pool 1, 4 instances
            ia = wl.graph.index("L1.attn")
            moe = [wl.graph.index(n) for n in ("L0.expert_up", "L0.expert_down",
                                               "L1.expert_up", "L1.expert_down")]
            ga, gb = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
            with torch.cuda.graph(ga, stream=s0):
                for l in range(4):
                    wl.launch(ia, 1, l)
            with torch.cuda.graph(gb, stream=s1):
                for l in range(4):
                    for i in moe:
                        wl.launch(i, 0, l)
            out["attn_alone_pool0_ms"] = med_replay(ga, s0)
            out["moe_alone_pool1_ms"] = med_replay(gb, s1)
            # Does a graph captured on a green stream keep its pool when replayed elsewhere?
            out["attn_graph_from_pool0_replayed_on_full_stream_ms"] = med_replay(ga, full)
            # temporal baseline: the same work captured on a whole-GPU stream, run back to back
            gaf, gbf = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
            with torch.cuda.graph(gaf, stream=full):
                for l in range(4):
                    wl.launch(ia, 1, l)
            with torch.cuda.graph(gbf, stream=full):
                for l in range(4):
                    for i in moe:
                        wl.launch(i, 0, l)
            out["attn_alone_full_ms"] = med_replay(gaf, full)
            out["moe_alone_full_ms"] = med_replay(gbf, full)
            ts = []
            for _ in range(10):
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(
                    enable_timing=True)
                e0.record(full)
                with torch.cuda.stream(full):
                    gaf.replay()
                    gbf.replay()
                e1.record(full)
                e1.synchronize()
                ts.append(e0.elapsed_time(e1))
            out["temporal_full_ms"] = statistics.median(ts)
            ts = []
            for _ in range(10):
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(
                    enable_timing=True)
                ev_b = torch.cuda.Event()
                e0.record(s0)
                s1.wait_event(e0)
                with torch.cuda.stream(s0):
                    ga.replay()
                with torch.cuda.stream(s1):
                    gb.replay()
                ev_b.record(s1)
                s0.wait_event(ev_b)
                e1.record(s0)
                e1.synchronize()
                ts.append(e0.elapsed_time(e1))
            out["spatial_concurrent_ms"] = statistics.median(ts)
            out["spatial_gain_pct"] = 100.0 * (1 - out["spatial_concurrent_ms"] /
                                               out["temporal_full_ms"])
            del gaf, gbf
            del gg, ga, gb
        res["d_green_graph"] = out
        print(out, flush=True)

    res["finished"] = True
    save()
    print(f"done in {time.time() - t0:.1f} s; errors: {res['errors']}", flush=True)
    return 0 if not res["errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
