"""The outer grid of docs/method.md §4 and a resumable sweep over it.

Grid points x = (outer parallelism q, global batch G, microbatches m, stage count D, policy).
The temporal baseline is evaluated at every (q, G). Every finished grid point appends its records
to ``records.jsonl`` in the results folder (one JSON object per line, flushed and fsync-ed), so an
interrupted sweep (Ctrl-C or kill -9) resumes without recomputing finished points and without
losing or duplicating records; a torn last line is detected, dropped and reported.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from subgpu_jax.model.graph import Deployment
from subgpu_jax.model.models import ModelArch

__all__ = ["GridPoint", "outer_parallelisms", "build_grid", "SweepStore", "grid_fingerprint"]


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
    policy: str = "wavefront"
    streams: int = 1

    @property
    def key(self) -> str:
        """Stable identifier used for resume."""
        d = self.deploy
        return (f"n{d.num_gpus}-tp{d.attn_tp}-dp{d.attn_dp}-ep{d.moe_ep}-G{d.global_batch}"
                f"-D{self.D}-m{self.microbatches}-{self.policy}"
                + (f"-k{self.streams}" if self.streams != 1 else ""))


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
        if arch.is_moe:
            e = max(x for x in range(1, num_gpus + 1)
                    if num_gpus % x == 0 and arch.num_experts % x == 0)
        else:
            e = 1
        out.append((t, d, e))
    if not out:
        raise ValueError(f"gpus={num_gpus}: no attention TP x DP split fits {arch.name} "
                         f"({arch.num_heads} heads)")
    return out


def build_grid(arch: ModelArch, num_gpus: int, batches: Sequence[int], stages: Sequence[int],
               microbatches: Sequence[int], policies: Sequence[str] = ("wavefront",),
               kv_history: int = 32768, input_len: int = 32768,
               parallelisms: Sequence[tuple[int, int, int]] | None = None,
               hw=None, skipped: list | None = None,
               deploy_options: dict | None = None,
               streams: Sequence[int] = (1,)) -> list[GridPoint]:
    """Enumerate the feasible grid points (temporal first at each (q, G)).

    ``deploy_options``: further ``Deployment`` fields of every point (topology, routing).

    A combination is skipped when G is not divisible by d, when m does not divide R = G/d, or
    (with ``hw``) when weights + KV cache do not fit in the GPU's HBM
    (``Deployment.check_memory``); each skip is described in ``skipped`` if a list is given.
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
                    dep.check_memory(arch, hw)
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
            why = "no deployment fits in the GPU's HBM (" + notes[-1] + ")"
        elif not pts:
            why = "no batch is divisible by the attention DP degree"
        else:
            why = "no microbatch count divides the per-GPU batch R = G/d"
        raise ValueError(f"grid is empty: {why} (batches={list(batches)}, "
                         f"microbatches={list(microbatches)})")
    return pts


def grid_fingerprint(meta: dict) -> str:
    """SHA-256 (16 hex) of the sweep's defining parameters (model, hardware, grid, ...)."""
    return hashlib.sha256(json.dumps(meta, sort_keys=True).encode()).hexdigest()[:16]


class SweepStore:
    """Append-only, crash-safe record store of one sweep in ``folder``.

    Files: ``manifest.json`` (the sweep's parameters and fingerprint, written atomically) and
    ``records.jsonl`` (one line per record; each finished grid point's records are written with a
    trailing ``{"_done": key}`` marker line in one write, then flushed and fsync-ed).

    Args:
        folder: results folder (created).
        meta: the sweep's defining parameters.
        resume: continue a sweep already in ``folder``.

    Raises:
        ValueError: ``folder`` holds another sweep (different fingerprint) or records without
            ``resume``; the manifest is unreadable.
    """

    def __init__(self, folder: str, meta: dict, resume: bool) -> None:
        self.folder = folder
        self.meta = dict(meta)
        self.fp = grid_fingerprint(self.meta)
        self.path = os.path.join(folder, "records.jsonl")
        self.dropped: list[str] = []
        os.makedirs(folder, exist_ok=True)
        man = os.path.join(folder, "manifest.json")
        if os.path.exists(man):
            try:
                with open(man) as fh:
                    old = json.load(fh)
            except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
                raise ValueError(f"results folder {folder}: manifest.json unreadable ({e})") from None
            if not isinstance(old, dict):
                raise ValueError(f"results folder {folder}: manifest.json must hold a JSON object")
            if old.get("fingerprint") != self.fp:
                om = old.get("meta", {})
                diff = sorted(k for k in set(om) | set(self.meta) if om.get(k) != self.meta.get(k))
                raise ValueError(f"results folder {folder} holds another sweep (model "
                                 f"{om.get('model')!r}; differs in {', '.join(diff) or 'options'}); "
                                 "use another --out")
            if not resume and os.path.exists(self.path) and os.path.getsize(self.path) > 0:
                raise ValueError(f"results folder {folder} already holds records of this sweep; "
                                 "pass --resume to continue it or choose another --out")
        elif resume and os.path.exists(self.path):
            raise ValueError(f"results folder {folder}: records without manifest.json; cannot "
                             "resume")
        tmp = man + ".tmp"
        with open(tmp, "w") as fh:
            json.dump({"fingerprint": self.fp, "meta": self.meta}, fh, indent=2)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, man)
        self.records, self.done = self._load() if resume else ([], set())
        if not resume and os.path.exists(self.path):
            os.remove(self.path)

    def _load(self) -> tuple[list[dict], set[str]]:
        recs: list[dict] = []
        done: set[str] = set()
        pending: list[dict] = []
        if not os.path.exists(self.path):
            return recs, done
        good_bytes = 0
        if not os.path.isfile(self.path):
            raise ValueError(f"results folder {self.folder}: records.jsonl is not a file")
        with open(self.path, "rb") as fh:
            data = fh.read()
        pos = 0
        for raw in data.split(b"\n"):
            end = pos + len(raw) + 1
            line = raw.strip()
            pos = end
            if not line:
                continue
            try:
                obj = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                obj = None
            if not isinstance(obj, dict):
                self.dropped.append(line[:80].decode("utf-8", "replace"))
                pending.append(None)  # poisons this grid point: it is recomputed
                continue
            if "_done" in obj:
                ok = bool(pending) and all(r is not None and self._valid(r) for r in pending)
                if ok:
                    recs.extend(pending)
                    done.add(obj["_done"])
                else:
                    self.dropped.append(f"grid point {obj['_done']}: "
                                        f"{'no record' if not pending else 'invalid record'}"
                                        " (recomputed)")
                pending = []
                good_bytes = min(end, len(data))
            else:
                pending.append(obj)
        if pending:  # None entries (unparsable lines) were reported when they were read
            self.dropped.extend(f"unfinished record of {r.get('grid_key')}"
                                for r in pending if r is not None)
        if self.dropped or good_bytes != len(data):
            # rewrite atomically with only the valid, finished grid points
            tmp = self.path + ".tmp"
            with open(tmp, "w") as fh:
                by_key: dict = {}
                for r in recs:
                    by_key.setdefault(r["grid_key"], []).append(r)
                for key, rs in by_key.items():
                    fh.write("".join(json.dumps(r, sort_keys=True) + "\n" for r in rs))
                    fh.write(json.dumps({"_done": key}) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        return recs, done

    @staticmethod
    def _valid(r: dict) -> bool:
        """A stored record is usable: it names its grid point and, when it carries throughput
        fields, they are finite positive numbers."""
        import math

        if not isinstance(r.get("grid_key"), str):
            return False
        for k in ("makespan_us", "per_user_tok_s", "per_gpu_tok_s"):
            if k in r:
                v = r[k]
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                        or v <= 0:
                    return False
        return True

    def add(self, key: str, records: Iterable[dict]) -> None:
        """Append one finished grid point's records (atomic at the grid-point level)."""
        recs = [dict(r, grid_key=key) for r in records]
        blob = "".join(json.dumps(r, sort_keys=True) + "\n" for r in recs)
        blob += json.dumps({"_done": key}) + "\n"
        with open(self.path, "a") as fh:
            fh.write(blob)
            fh.flush()
            os.fsync(fh.fileno())
        self.records.extend(recs)
        self.done.add(key)


def run_sweep(points: Sequence[GridPoint], score: Callable[[GridPoint], list[dict]],
              store: SweepStore, budget: int | None = None, progress: bool = True,
              on_record: Callable[[dict], None] | None = None) -> dict:
    """Evaluate every grid point not yet in ``store`` (at most ``budget`` of them).

    Args:
        points: the grid. score: evaluates one point, returns its records (dicts).
        store: the record store (skips its finished points). budget: max points this call.
        progress: show a tqdm bar with the best speedup so far.

    Returns:
        ``{"evaluated": n, "skipped": n, "remaining": n, "seconds": s}``.

    Raises:
        ValueError: a budget < 1.
    """
    from tqdm import tqdm

    if budget is not None and budget < 1:
        raise ValueError(f"budget must be >= 1 grid points, got {budget}")
    todo = [p for p in points if p.key not in store.done]
    skipped = len(points) - len(todo)
    if budget is not None:
        todo = todo[:budget]
    t0 = time.time()
    best = max((r.get("speedup_vs_temporal") or 0.0 for r in store.records), default=0.0)
    bar = tqdm(todo, disable=not progress, unit="pt", desc="grid points")
    n = 0
    for p in bar:
        recs = score(p)
        store.add(p.key, recs)
        n += 1
        for r in recs:
            best = max(best, r.get("speedup_vs_temporal") or 0.0)
            if on_record:
                on_record(r)
        bar.set_postfix_str(f"best speedup {best:.3f}x")
    remaining = len([p for p in points if p.key not in store.done])
    return {"evaluated": n, "skipped": skipped, "remaining": remaining,
            "seconds": time.time() - t0}


__all__.append("run_sweep")
