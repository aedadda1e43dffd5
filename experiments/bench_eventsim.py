"""Benchmark of the exact event simulator (docs/method.md, "the exact scorer").

One full 36-layer gpt-oss-120b forward pass (reference deployment ``REFERENCE_DEPLOYMENT`` on
B200) at m = 8 microbatches with 3 stages: wall and CPU time, kernel events per second, contention
on (LRU cache, with and without the utilisation series) and off (isolated static durations), the
temporal baseline, and the same pipeline with 2 streams per stage. Target: <= 100 ms median per
simulation of the first case on a 2-core CI machine.

Every case is also timed on the baseline simulator *in the same run*: a child
process imports the package as it was at ``--baseline`` (default ``BASELINE_REV``, the commit
before the simulator's named-state rewrite; extracted with ``git archive``), and the two
versions take turns, one simulation each, so that the load of a shared machine hits both alike.
The table reports the median ratios baseline / current of wall and CPU time (``process_time``:
on a shared machine whose load average exceeds its cores, wall time mostly measures the others'
load, CPU time the simulator) and checks that both give the same makespan (the rewrite must not
change behaviour).

The baseline is off by default now (``--baseline none``): ``BASELINE_REV`` predates the
analytic-v2 duration model, so its child builds the cases with other kernel durations (first
case: makespan 22,046 µs there, 34,981 µs now) and its times no longer compare like with like.
The comparison made when the rewrite landed (same durations, same makespans, 1.41x less CPU
time) is in the git history of experiments/results/bench_eventsim.json; pass ``--baseline REV``
for a revision with the current duration model.

Usage: python experiments/bench_eventsim.py [--repeats N] [--baseline REV|none] [--out PATH]
Writes experiments/results/bench_eventsim.json and prints a table. Bad arguments (--repeats < 1;
an --out that is empty, a folder or in a missing folder; an empty --baseline or one starting
with '-') and a baseline that cannot run (``--baseline REV: ...``) end the call with one line
``error: ...`` and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
#: The last commit with the parallel-list event simulator (behaviour reference).
BASELINE_REV = "ef33c42"

#: name -> spec (the 3-stage cut starts at kernels 9 and 15: L0 attention + routing | L0 experts +
#: L1 qkv | the rest; allocation 48/52/48 SMs of the B200).
CASES: dict[str, dict] = {
    "subgpu D=3 m=8, contention+LRU": dict(m=8, contention=True, cache="lru", record=True),
    "subgpu D=3 m=8, contention+LRU, no util series": dict(m=8, contention=True, cache="lru",
                                                           record=False),
    "subgpu D=3 m=8, contention off, cache off": dict(m=8, contention=False, cache="none",
                                                      record=False),
    "temporal m=1, contention+LRU": dict(m=1, contention=True, cache="lru", record=True),
    "subgpu D=3 m=8, 2 streams/stage, contention+LRU": dict(m=8, contention=True, cache="lru",
                                                            record=True, streams=2),
}


def build_case(spec: dict):
    """``(graph, config, hw, model, cache, record)`` of one case (imports at call time, so the
    baseline child builds it with the baseline package)."""
    from subgpu_jax.model.graph import REFERENCE_DEPLOYMENT, build_graph
    from subgpu_jax.model.hardware import get_hardware
    from subgpu_jax.model.models import get_model
    from subgpu_jax.sim.contention import ContentionModel
    from subgpu_jax.space.config import Config, cut_from_starts, temporal_config

    hw = get_hardware("B200")
    R = REFERENCE_DEPLOYMENT.requests_per_gpu
    g = build_graph(get_model("gpt-oss-120b"), REFERENCE_DEPLOYMENT, spec["m"])
    if spec["m"] == 1:
        cfg = temporal_config(g.n, hw, R)
    else:
        cfg = Config(D=3, w=0, seg_of=cut_from_starts(g.n, g.edges, [9, 15]),
                     alloc=(48, 52, 48), microbatch=R // spec["m"],
                     streams_per_stage=spec.get("streams", 1))
    model = ContentionModel() if spec["contention"] else ContentionModel.off()
    return g, cfg, hw, model, spec["cache"], spec["record"]


def time_once(case) -> tuple[float, float, object]:
    """One simulation: (wall s, CPU s, SimResult)."""
    from subgpu_jax.sim.eventsim import simulate

    g, cfg, hw, model, cache, record = case
    t0, c0 = time.perf_counter(), time.process_time()
    res = simulate(g, cfg, hw, model, cache, record=record)
    return time.perf_counter() - t0, time.process_time() - c0, res


_WORKER = """
import json, sys
sys.path.insert(0, {exp!r})
import subgpu_jax
import bench_eventsim as b
cases = {{}}
print(json.dumps({{"package": subgpu_jax.__file__}}), flush=True)
for line in sys.stdin:
    name = json.loads(line)
    if name not in cases:
        cases[name] = b.build_case(b.CASES[name])
        b.time_once(cases[name])  # warm-up
    w, c, r = b.time_once(cases[name])
    print(json.dumps({{"wall": w, "cpu": c, "makespan": float(r.makespan)}}), flush=True)
"""


class Baseline:
    """The baseline simulator in a child process (package extracted from git at ``rev``).

    Raises:
        RuntimeError: ``"--baseline REV: ..."`` (one line): git cannot extract ``rev``, the
        child does not import the baseline, or it fails (its last line of stderr, e.g. a module
        the baseline's package lacks) or answers with something that is not JSON.
    """

    def __init__(self, rev: str) -> None:
        self.rev = rev
        self.dir = tempfile.TemporaryDirectory(prefix="bench_eventsim_base_")
        try:
            tar = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "subgpu_jax"],
                                 check=True, capture_output=True).stdout
        except (OSError, subprocess.CalledProcessError) as e:
            self.dir.cleanup()
            err = getattr(e, "stderr", None)
            why = err.decode(errors="replace").strip().splitlines()[-1:] if err else []
            raise RuntimeError(f"--baseline {rev}: git archive failed "
                               f"({why[0] if why else e})") from None
        tarfile.open(fileobj=BytesIO(tar)).extractall(self.dir.name)
        env = dict(os.environ, PYTHONPATH=self.dir.name)
        self.err = tempfile.TemporaryFile(mode="w+")  # the child's stderr: its failure's cause
        self.p = subprocess.Popen([sys.executable, "-c", _WORKER.format(exp=str(HERE))],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                  env=env, cwd=self.dir.name, stderr=self.err)
        pkg = self._reply()["package"]
        if not pkg.startswith(self.dir.name):
            self.close()
            raise RuntimeError(f"--baseline {rev}: the child imported {pkg}, not the baseline")

    def _reply(self) -> dict:
        """The child's next line as JSON; RuntimeError (the child stopped) when it is not."""
        line = self.p.stdout.readline()
        try:
            return json.loads(line)
        except ValueError:
            pass
        self._wait(10)
        self.err.seek(0)
        last = [x.strip() for x in self.err.read().splitlines() if x.strip()][-1:]
        why = last[0] if last else (f"it printed {line.strip()[:200]!r}" if line.strip()
                                     else f"exit status {self.p.returncode}")
        self.close()
        raise RuntimeError(f"--baseline {self.rev}: the baseline child failed: {why}")

    def time(self, name: str) -> dict:
        """Time one simulation of case ``name`` in the child: {"wall", "cpu", "makespan"}."""
        try:
            self.p.stdin.write(json.dumps(name) + "\n")
            self.p.stdin.flush()
        except OSError:  # the child is gone: its stderr says why
            pass
        return self._reply()

    def close(self) -> None:
        """Stop the child and remove the extracted package (again: nothing)."""
        if self.p.poll() is None:
            try:
                self.p.stdin.close()
            except OSError:
                pass
            self._wait(60)
        self.err.close()
        self.dir.cleanup()

    def _wait(self, seconds: float) -> None:
        """Wait for the child to end, at most ``seconds``, then kill it."""
        try:
            self.p.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


def bench(repeats: int = 9, baseline: str | None = BASELINE_REV) -> dict:
    """Time every case (and its baseline, interleaved); returns a JSON-ready dict."""
    base = Baseline(baseline) if baseline else None
    rows = []
    try:
        for name, spec in CASES.items():
            case = build_case(spec)
            time_once(case)  # warm-up
            on_base = base is not None
            walls, cpus, bw, bc, bm = [], [], [], [], set()
            for _ in range(repeats):
                w, c, res = time_once(case)
                walls.append(w)
                cpus.append(c)
                if on_base:
                    b = base.time(name)
                    bw.append(b["wall"])
                    bc.append(b["cpu"])
                    bm.add(b["makespan"])
            med = statistics.median(walls)
            row = {"case": name, "streams_per_stage": spec.get("streams", 1),
                   "kernel_instances": int(res.kernel_start.size), "events": int(res.events),
                   "steps": int(res.steps), "wall_ms_min": 1e3 * min(walls),
                   "wall_ms_median": 1e3 * med, "cpu_ms_min": 1e3 * min(cpus),
                   "cpu_ms_median": 1e3 * statistics.median(cpus),
                   "events_per_s": res.events / med, "kernels_per_s": res.kernel_start.size / med,
                   "makespan_us": float(res.makespan), "l2_hit_rate": float(res.l2_hit_rate),
                   "mean_hbm_util": float(res.mean_hbm_util),
                   "mean_sm_util": float(res.mean_sm_util)}
            if on_base:
                row.update({"baseline_wall_ms_median": 1e3 * statistics.median(bw),
                            "baseline_cpu_ms_median": 1e3 * statistics.median(bc),
                            "speedup_wall_median": statistics.median(bw) / med,
                            "speedup_cpu_median": statistics.median(bc)
                            / statistics.median(cpus),
                            "baseline_makespan_us": sorted(bm),
                            "same_makespan": bm == {float(res.makespan)}})
            rows.append(row)
    finally:
        if base is not None:
            base.close()
    return {"hardware": "B200", "model": "gpt-oss-120b", "deployment": "REFERENCE_DEPLOYMENT",
            "config": {"D": 3, "w": 0, "alloc": [48, 52, 48], "microbatches": 8,
                       "cut_starts": [9, 15]},
            "target_ms": 100.0, "repeats": repeats, "baseline_rev": baseline,
            "cpu_count": os.cpu_count(), "python": platform.python_version(),
            "load_avg": list(os.getloadavg()), "rows": rows}


def main(argv=None) -> int:
    """Command line entry point (see the module docstring). Bad arguments, or a baseline that
    cannot run, end the call with one line ``error: ...`` on stderr and exit code 2 (the
    --out and --baseline checks come before any simulation)."""
    from subgpu_jax.model.checks import out_file

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--baseline", default="none",
                    help="git revision of the baseline simulator (e.g. " + BASELINE_REV + ", "
                         "which predates the current duration model), or 'none' (default)")
    ap.add_argument("--out", default=str(HERE / "results" / "bench_eventsim.json"))
    a = ap.parse_args(argv)

    from subgpu_jax.app.options import usage_error as fail

    if a.repeats < 1:
        return fail(f"--repeats must be >= 1, got {a.repeats}")
    try:
        out = out_file(a.out, "--out")
    except ValueError as e:
        return fail(str(e))
    if not a.baseline.strip():
        return fail("--baseline must be a git revision or 'none', got an empty string")
    if a.baseline.startswith("-"):
        return fail(f"--baseline must be a git revision or 'none', got {a.baseline!r} (a "
                    "revision never starts with '-')")
    try:
        r = bench(a.repeats, None if a.baseline == "none" else a.baseline)
    except RuntimeError as e:
        return fail(str(e))
    print(f"{'case':50s} {'kernels':>7s} {'med ms':>7s} {'cpu ms':>7s} {'base ms':>8s} "
          f"{'base cpu':>8s} {'ratio':>6s} {'cpu ratio':>9s} {'same T':>6s} {'makespan µs':>12s}")
    for x in r["rows"]:
        b = (f"{x['baseline_wall_ms_median']:8.1f} {x['baseline_cpu_ms_median']:8.1f} "
             f"{x['speedup_wall_median']:6.2f} {x['speedup_cpu_median']:9.2f} "
             f"{str(x['same_makespan']):>6s}") if "speedup_wall_median" in x else \
            f"{'-':>8s} {'-':>8s} {'-':>6s} {'-':>9s} {'-':>6s}"
        print(f"{x['case']:50s} {x['kernel_instances']:7d} {x['wall_ms_median']:7.1f} "
              f"{x['cpu_ms_median']:7.1f} {b} {x['makespan_us']:12.1f}")
    out.write_text(json.dumps(r, indent=2))
    print(f"wrote {out} (load average {r['load_avg'][0]:.2f} on {r['cpu_count']} CPUs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
