"""The outer grid of docs/method.md §4 and a resumable sweep over it.

Grid points x = (outer parallelism q, global batch G, microbatches m, stage count D, policy).
The temporal baseline is evaluated at every (q, G). Every finished grid point is appended to the
results folder's store (:mod:`subgpu_jax.app.store`: locked, checksummed, fsync-ed), so an
interrupted sweep (Ctrl-C, kill -9, a full disk) continues without recomputing finished points and
without losing or duplicating records; damaged records are detected, counted, reported and
recomputed (docs/usage.md "Reliability").
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from subgpu_jax.space.config import DEFAULT_POLICY
from subgpu_jax.app.store import SweepStore, grid_fingerprint
from subgpu_jax.model.graph import Deployment
from subgpu_jax.model.memory import check_memory
from subgpu_jax.model.models import ModelArch

__all__ = ["GridPoint", "outer_parallelisms", "build_grid", "SweepStore", "grid_fingerprint",
           "grid_key", "record_matches_key"]


def grid_key(num_gpus: int, attn_tp: int, attn_dp: int, moe_ep: int, global_batch: int, D: int,
             microbatches: int, policy: str, streams: int = 1) -> str:
    """The stable identifier of a grid point in the store (``GridPoint.key``), e.g.
    ``n32-tp8-dp4-ep32-G1024-D2-m2-wavefront`` (``-k2`` appended for 2 streams per stage)."""
    return (f"n{num_gpus}-tp{attn_tp}-dp{attn_dp}-ep{moe_ep}-G{global_batch}-D{D}"
            f"-m{microbatches}-{policy}" + (f"-k{streams}" if streams != 1 else ""))


def record_matches_key(key: str, rec: dict) -> str | None:
    """The store's record check for search records: None when ``rec`` (a ``PointScorer``
    record: num_gpus, attn_tp, attn_dp, moe_ep, global_batch, D, microbatches, policy,
    streams_per_stage) describes grid point ``key``, else the reason (a record filed under
    another grid point)."""
    try:
        own = grid_key(*(rec[f] for f in ("num_gpus", "attn_tp", "attn_dp", "moe_ep",
                                           "global_batch", "D", "microbatches", "policy")),
                       streams=rec.get("streams_per_stage", 1))
    except KeyError as e:
        return f"record lacks field {e.args[0]!r}"
    return None if own == key else f"record describes {own}, filed under {key}"


@dataclass(frozen=True)
class GridPoint:
    """One point of the outer grid.

    Attributes:
        deploy: the deployment (outer parallelism q and global batch G).
        D: stages (1 = the temporal baseline).
        microbatches: m (1 for temporal).
        policy: dispatch policy.
        streams: k streams per stage (docs/method.md, "Streams per stage").
    """

    deploy: Deployment
    D: int
    microbatches: int
    policy: str = DEFAULT_POLICY
    streams: int = 1

    @property
    def key(self) -> str:
        """Stable identifier used by the store (:func:`grid_key`)."""
        d = self.deploy
        return grid_key(d.num_gpus, d.attn_tp, d.attn_dp, d.moe_ep, d.global_batch, self.D,
                        self.microbatches, self.policy, self.streams)


def outer_parallelisms(arch: ModelArch, num_gpus: int, max_tp: int = 8) -> list[tuple[int, int, int]]:
    """All (attention TP t, attention DP d, MoE EP e) for ``num_gpus`` GPUs.

    t divides the query heads, t*d = num_gpus, t <= ``max_tp`` (one NVLink domain of 8 GPUs for
    tensor parallelism, an assumption); for MoE models e = num_gpus when it divides the experts
    (else the largest divisor of both), for dense models e = 1.

    Raises:
        ValueError: no parallelism fits (names num_gpus and the model).
    """
    out = []
    for t in range(1, min(num_gpus, max_tp) + 1):
        if num_gpus % t or arch.num_heads % t:
            continue
        if not arch.is_moe and arch.intermediate % t:
            continue
        d = num_gpus // t
        # the largest divisor of both (gcd), not a loop up to the GPU count
        e = math.gcd(num_gpus, arch.num_experts) if arch.is_moe else 1
        out.append((t, d, e))
    if not out:
        raise ValueError(f"gpus={num_gpus}: no attention TP x DP split fits {arch.name} "
                         f"({arch.num_heads} heads)")
    return out


def build_grid(arch: ModelArch, num_gpus: int, batches: Sequence[int], stages: Sequence[int],
               microbatches: Sequence[int], policies: Sequence[str] = (DEFAULT_POLICY,),
               kv_history: int | None = None, input_len: int | None = None,
               parallelisms: Sequence[tuple[int, int, int]] | None = None,
               hw=None, skipped: list | None = None,
               deploy_options: dict | None = None,
               streams: Sequence[int] = (1,)) -> list[GridPoint]:
    """Enumerate the feasible grid points (temporal first at each (q, G)).

    ``deploy_options``: further ``Deployment`` fields of every point (topology, routing).

    A combination is skipped when G is not divisible by d, when m does not divide R = G/d, or
    (with ``hw``) when weights + KV cache + activations exceed the GPU's memory budget
    (``model.memory.check_memory``, ``gpu_memory_utilization`` of its HBM); each skip is described in ``skipped`` if a list is given.
    Every pipelined point is repeated for each k of ``streams`` (streams per stage).
    When nothing is left, the error names the constraint that emptied the grid.

    Raises:
        ValueError: empty or infeasible grid, naming the constraint.
    """
    from subgpu_jax.space.config import DISPATCH_POLICIES

    for p in policies:
        if p not in DISPATCH_POLICIES:
            raise ValueError(f"policy must be one of {', '.join(DISPATCH_POLICIES)}, got {p!r}")
    if not batches:
        raise ValueError("batches: empty list")
    if not stages or any(D < 2 for D in stages):
        raise ValueError(f"stages must be a non-empty list of integers >= 2, got {list(stages)}")
    if not streams or any(isinstance(k, bool) or not isinstance(k, int) or k < 1
                          for k in streams):
        raise ValueError(f"streams-per-stage must be a non-empty list of integers >= 1, got "
                         f"{list(streams)}")
    if not microbatches or any(m < 1 for m in microbatches):
        raise ValueError(f"microbatches must be a non-empty list of integers >= 1, got "
                         f"{list(microbatches)}")
    pars = list(parallelisms) if parallelisms else outer_parallelisms(arch, num_gpus)
    pts: list[GridPoint] = []
    reasons = {"batch % dp": 0, "R % m": 0, "memory": 0}
    notes = skipped if skipped is not None else []
    for (t, d, e) in pars:
        for G in batches:
            if G % d:
                reasons["batch % dp"] += 1
                notes.append(f"TP{t}xDP{d} G={G}: G not divisible by DP {d}")
                continue
            dep = Deployment(num_gpus=num_gpus, attn_tp=t, attn_dp=d, moe_ep=e, global_batch=G,
                             input_len=input_len, kv_history=kv_history,
                             **(deploy_options or {}))
            dep.validate(arch)
            if hw is not None:
                try:
                    check_memory(arch, dep, hw, batch_flag="--batches")
                except ValueError as err:
                    reasons["memory"] += 1
                    notes.append(f"TP{t}xDP{d} G={G}: {err}")
                    continue
            pts.append(GridPoint(dep, 1, 1, "wavefront"))
            R = G // d
            for m in microbatches:
                if R % m:
                    reasons["R % m"] += 1
                    notes.append(f"TP{t}xDP{d} G={G} m={m}: m does not divide R = {R}")
                    continue
                for D in stages:
                    for pol in policies:
                        for k in streams:
                            pts.append(GridPoint(dep, D, m, pol, k))
    if not any(p.D > 1 for p in pts):
        if not pts and reasons["memory"]:
            why = "no deployment fits in the GPU's memory budget (" + notes[-1] + ")"
        elif not pts:
            why = "no batch is divisible by the attention DP degree"
        else:
            why = "no microbatch count (--microbatches) divides the per-GPU batch R = G / attention DP"
        raise ValueError(f"grid is empty: {why} (batches={list(batches)}, "
                         f"microbatches={list(microbatches)})")
    return pts


def pending_points(points: Sequence, store: SweepStore, budget: int | None
                   ) -> tuple[list, int, set]:
    """The grid points a sweep still has to score: ``(todo, skipped, again)``.

    Args:
        points: the grid points (each with a ``key``). store: the sweep's store (``done``,
            ``report.again``). budget: at most this many points (None: all).

    Returns:
        the points not in the store, in order, cut to ``budget``; how many were already done;
        the keys the store marked to score again.

    Raises:
        ValueError: a budget < 1.
    """
    if budget is not None and budget < 1:
        raise ValueError(f"budget must be >= 1 grid points, got {budget}")
    todo = [p for p in points if p.key not in store.done]
    skipped = len(points) - len(todo)
    if budget is not None:
        todo = todo[:budget]
    return todo, skipped, set(store.report.again)


def run_sweep(points: Sequence[GridPoint], score: Callable[[GridPoint], list[dict]],
              store: SweepStore, budget: int | None = None, progress: bool = True,
              on_record: Callable[[dict], None] | None = None,
              on_new_deployment: Callable[[Deployment], None] | None = None,
              in_flight: int = 1, coalescer=None) -> dict:
    """Evaluate every grid point not yet in ``store`` (at most ``budget`` of them).

    Ctrl-C inside :func:`subgpu_jax.app.interrupt.sigint_as_flag` is honoured between grid
    points (:func:`~subgpu_jax.app.interrupt.check` raises ``Interrupted``); the points finished
    before it are in the store.

    With ``in_flight`` > 1, up to that many points are scored at once, one thread each, every
    thread a participant of ``coalescer`` (a ``score.coalesce.CoalescingTimer``: their exact
    steps are timed together in one batched call); each point is stored as it finishes, and a
    deployment's caches are freed (``on_new_deployment``) once all its points are stored and
    the sweep has moved past it. Ctrl-C (checked twice a second) and a failing point cancel the
    coalescer, so the other threads end at once; the finished points are in the store.

    Args:
        points: the grid (the points of one deployment contiguous, as ``build_grid`` makes it).
        score: evaluates one point, returns its records (dicts).
        store: the record store (its finished points are skipped). budget: max points this call.
        progress: show a tqdm bar with the best speedup so far.
        on_record: called with every new record.
        on_new_deployment: called with the previous deployment when the next point to evaluate
            belongs to another one (the search job frees that deployment's caches there).

    Returns:
        ``{"evaluated": n, "again": n evaluated again after their records were dropped,
        "skipped": n, "remaining": n, "seconds": s}``.

    Raises:
        ValueError: a budget < 1.
        Interrupted: Ctrl-C (see above).
    """
    from tqdm import tqdm

    from subgpu_jax.app.interrupt import check

    todo, skipped, again = pending_points(points, store, budget)
    t0 = time.time()
    best = max((r.get("speedup_vs_temporal") or 0.0 for r in store.records), default=0.0)
    if in_flight > 1:
        if coalescer is None:
            raise ValueError("in_flight > 1 needs a coalescer (score.coalesce.CoalescingTimer)")
        n, n_again = _run_in_flight(todo, score, store, in_flight, coalescer, again, best,
                                    progress, on_record, on_new_deployment)
        remaining = len([p for p in points if p.key not in store.done])
        return {"evaluated": n, "again": n_again, "skipped": skipped, "remaining": remaining,
                "seconds": time.time() - t0}
    bar = tqdm(todo, disable=not progress, unit="pt", desc="grid points")
    n = n_again = 0
    prev = None
    for p in bar:
        check()
        if on_new_deployment is not None and prev is not None and p.deploy != prev:
            on_new_deployment(prev)
        prev = p.deploy
        recs = score(p)
        store.add(p.key, recs)
        n += 1
        n_again += p.key in again
        for r in recs:
            best = max(best, r.get("speedup_vs_temporal") or 0.0)
            if on_record:
                on_record(r)
        bar.set_postfix_str(f"best speedup {best:.3f}x")
    bar.close()
    remaining = len([p for p in points if p.key not in store.done])
    return {"evaluated": n, "again": n_again, "skipped": skipped, "remaining": remaining,
            "seconds": time.time() - t0}


def _run_in_flight(todo: Sequence[GridPoint], score, store: SweepStore, in_flight: int,
                   coalescer, again: set, best: float, progress: bool, on_record,
                   on_new_deployment) -> tuple[int, int]:
    """``run_sweep``'s threaded loop (its docstring): ``(evaluated, evaluated again)``."""
    from collections import Counter
    from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

    from tqdm import tqdm

    from subgpu_jax.app.interrupt import check

    def one(p: GridPoint) -> list[dict]:
        with coalescer.participant(enrolled=True):
            return score(p)

    left = Counter(p.deploy for p in todo)      # points of each deployment not yet stored
    queue = iter(todo)
    running: dict = {}
    started: list = []          # deployments in the order their first point started
    bar = tqdm(total=len(todo), disable=not progress, unit="pt",
               desc=f"grid points ({in_flight} in flight)")
    n = n_again = 0
    ex = ThreadPoolExecutor(max_workers=in_flight, thread_name_prefix="grid-point")
    try:
        def fill() -> None:
            new = []
            while len(running) + len(new) < in_flight:
                p = next(queue, None)
                if p is None:
                    break
                if p.deploy not in started:
                    started.append(p.deploy)
                new.append(p)
            for _ in new:       # all counted before any of their threads starts
                coalescer.enroll()
            for p in new:
                running[ex.submit(one, p)] = p

        fill()
        while running:
            done, _ = wait(running, timeout=0.5, return_when=FIRST_COMPLETED)
            failed = None
            for f in done:      # every finished point is stored before anything is raised
                p = running.pop(f)
                if f.exception() is not None:
                    failed = failed or f.exception()
                    continue
                recs = f.result()
                store.add(p.key, recs)
                n += 1
                n_again += p.key in again
                left[p.deploy] -= 1
                for r in recs:
                    best = max(best, r.get("speedup_vs_temporal") or 0.0)
                    if on_record:
                        on_record(r)
                bar.update(1)
                bar.set_postfix_str(f"best speedup {best:.3f}x")
            if failed is not None:
                raise failed
            check()
            # free the deployments that are finished and that the sweep has moved past
            while on_new_deployment is not None and len(started) > 1 and not left[started[0]]:
                on_new_deployment(started.pop(0))
            fill()
    except BaseException:
        coalescer.cancel()      # the threads in flight end at once
        raise
    finally:
        ex.shutdown(wait=True, cancel_futures=True)
        bar.close()
    return n, n_again


__all__.append("run_sweep")
