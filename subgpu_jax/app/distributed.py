"""Grid points distributed across processes/hosts with ``jax.distributed``.

Engine choice: ``jax.distributed`` (already a dependency; Ray is not installed and would add a
large one). Process 0 hosts the coordination service at ``coordinator_address`` (host:port);
every process scores the grid points ``i`` with ``i % num_processes == process_id`` (each with
its local devices, e.g. ``massive.MassiveEvaluator(devices=...)``), publishes its records as
JSON in the coordination service's key-value store, and reads everybody's: all processes end
with the same records in grid order, identical to a single-process run. The main job uses it
through ``run_sweep_distributed`` (``subgpu search --cluster HOST:PORT --num-processes N
--process-id I``): process 0 owns the results folder, every process scores its share of the
grid points on its local devices.

Fail fast: before ``jax.distributed.initialize`` a non-coordinator process checks that the
coordinator's TCP port answers within ``timeout_s`` and raises ``ConnectionError`` naming the
address otherwise (no hang); ``initialization_timeout`` is set to the same bound.

CLI (used by the tests): ``python -m subgpu_jax.app.distributed --address 127.0.0.1:PORT
--num-processes 2 --process-id I --out FILE`` runs a small exhaustive grid (synthetic 8-kernel
chain, m in {1, 2}, D in {2, 3}) and writes the merged records.
"""

from __future__ import annotations

import argparse
import json
import socket
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

__all__ = ["check_reachable", "init_cluster", "distribute_grid", "tiny_grid", "score_tiny",
           "Cluster", "broadcast_json", "run_sweep_distributed"]


def check_reachable(address: str, timeout_s: float = 10.0) -> None:
    """Raise ``ConnectionError`` naming ``address`` if no TCP connection to it succeeds within
    ``timeout_s`` seconds (retrying every 0.2 s while the coordinator starts).

    Raises:
        ValueError: ``address`` is not ``host:port``.
        ConnectionError: unreachable within the timeout.
    """
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"cluster address must be host:port, got {address!r}")
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, int(port)),
                                          timeout=max(0.1, min(1.0, deadline - time.monotonic()))):
                return
        except OSError as e:
            last = e
            time.sleep(0.2)
    raise ConnectionError(f"cluster coordinator {address} unreachable after {timeout_s:.0f} s "
                          f"({last})")


def init_cluster(address: str, num_processes: int, process_id: int,
                 timeout_s: float = 10.0) -> None:
    """``jax.distributed.initialize`` with a fail-fast reachability check.

    Args:
        address: coordinator ``host:port`` (process 0 binds it).
        num_processes: >= 1; process_id: 0..num_processes-1.
        timeout_s: seconds to wait for the coordinator (and the initialization timeout).

    Raises:
        ValueError: bad ids; ConnectionError: coordinator unreachable (names the address).
    """
    import jax

    if num_processes < 1 or not 0 <= process_id < num_processes:
        raise ValueError(f"process_id={process_id} must be in 0..{num_processes - 1}")
    if process_id != 0:
        check_reachable(address, timeout_s)
    try:
        jax.distributed.initialize(coordinator_address=address, num_processes=num_processes,
                                   process_id=process_id,
                                   initialization_timeout=max(1, int(timeout_s)))
    except Exception as e:  # noqa: BLE001 - re-raise with the address
        raise ConnectionError(f"cluster coordinator {address}: initialization failed: {e}") from e


def _client():
    from jax._src import distributed as jd

    return jd.global_state.client


def distribute_grid(points: Sequence[Any], score: Callable[[Any], list[dict]],
                    num_processes: int = 1, process_id: int = 0,
                    timeout_s: float = 600.0, tag: str = "records",
                    devices: Sequence[Any] | None = None) -> list[dict]:
    """Score this process's share of ``points`` and gather every process's records.

    Point i belongs to process ``i % num_processes``; inside a process its points go
    round-robin to the local devices (``jax.default_device``: point i runs on local device
    ``(i // num_processes) % len(devices)``), so every jitted scorer call of that point
    places its arrays there.

    Args:
        points: grid points (same list, same order, on every process).
        score: point -> list of JSON-serialisable records.
        num_processes, process_id: the cluster (1, 0: no exchange).
        timeout_s: wait for the other processes' records.
        tag: key prefix of this exchange in the coordination service (unique per exchange).
        devices: local devices (default ``jax.local_devices()``).

    Returns:
        All records, in grid order (point index, then the order ``score`` returned).
    """
    import jax

    devs = list(jax.local_devices() if devices is None else devices)
    mine: dict[int, list[dict]] = {}
    for i, p in enumerate(points):
        if i % num_processes == process_id:
            with jax.default_device(devs[(i // num_processes) % len(devs)]):
                mine[i] = score(p)
    if num_processes == 1:
        return [r for i in sorted(mine) for r in mine[i]]
    allrec: dict[int, list[dict]] = {}
    for got in _exchange(mine, num_processes, process_id, timeout_s, tag):
        allrec.update({int(k): v for k, v in got.items()})
    return [r for i in sorted(allrec) for r in allrec[i]]


def _exchange(value: Any, num_processes: int, process_id: int, timeout_s: float,
              tag: str) -> list[Any]:
    """All processes' ``value`` (JSON), in process order, through the key-value store; returns
    after every process has read them (the coordinator must outlive the readers)."""
    client = _client()
    ms = int(timeout_s * 1000)
    client.key_value_set(f"subgpu/{tag}/{process_id}", json.dumps(value))
    out = [json.loads(client.blocking_key_value_get(f"subgpu/{tag}/{pid}", ms))
           for pid in range(num_processes)]
    client.key_value_set(f"subgpu/{tag}-read/{process_id}", "1")
    for pid in range(num_processes):
        client.blocking_key_value_get(f"subgpu/{tag}-read/{pid}", ms)
    return out


def broadcast_json(value: Any, num_processes: int, process_id: int, tag: str,
                   timeout_s: float = 600.0) -> Any:
    """Process 0's ``value`` (JSON-serialisable) on every process of the cluster."""
    if num_processes == 1:
        return value
    return _exchange(value if process_id == 0 else None, num_processes, process_id,
                     timeout_s, tag)[0]


@dataclass(frozen=True)
class Cluster:
    """A ``jax.distributed`` cluster of ``num_processes`` processes, this one ``process_id``;
    ``address`` is the coordinator's host:port (``init_cluster`` connects); ``timeout_s``
    bounds every wait (seconds)."""

    address: str
    num_processes: int
    process_id: int
    timeout_s: float = 600.0

    def __post_init__(self) -> None:
        host, sep, port = str(self.address).rpartition(":")
        if not (sep and host and port.isdigit() and 1 <= int(port) <= 65535):
            raise ValueError(f"cluster: --cluster must be HOST:PORT (a host name or address and "
                             f"a port in 1..65535), got {self.address!r}")
        if isinstance(self.num_processes, bool) or int(self.num_processes) < 1:
            raise ValueError(f"num_processes must be >= 1, got {self.num_processes!r}")
        if not 0 <= int(self.process_id) < int(self.num_processes):
            raise ValueError(f"process_id={self.process_id} must be in "
                             f"0..{int(self.num_processes) - 1}")
        if not self.timeout_s > 0:
            raise ValueError(f"timeout must be > 0 s, got {self.timeout_s!r}")

    @property
    def is_main(self) -> bool:
        """Process 0 writes the results folder."""
        return self.process_id == 0


def run_sweep_distributed(points: Sequence[Any], score: Callable[[Any], list[dict]], store,
                          cluster: Cluster, budget: int | None = None) -> dict:
    """``app.sweep.run_sweep`` over a cluster: the grid points not yet done (process 0's
    ``store``, broadcast) are spread over the processes and their local devices
    (``distribute_grid``); process 0 appends every point's records to its store in grid order.

    Args:
        points: the grid (same on every process); score: point -> records.
        store: the ``SweepStore`` on process 0, None on the others.
        cluster: the cluster; budget: at most this many points in this call (>= 1).

    Returns:
        ``{"evaluated", "skipped", "remaining", "seconds"}`` as ``run_sweep`` (the same on every
        process).

    Raises:
        ValueError: a budget < 1, or no store on process 0.
    """
    if budget is not None and budget < 1:
        raise ValueError(f"budget must be >= 1 grid points, got {budget}")
    if cluster.is_main and store is None:
        raise ValueError("run_sweep_distributed: process 0 needs the SweepStore")
    t0 = time.time()
    P, pid = int(cluster.num_processes), int(cluster.process_id)
    done = set(broadcast_json(sorted(store.done) if cluster.is_main else None, P, pid,
                              "sweep-done", cluster.timeout_s))
    todo = [p for p in points if p.key not in done]
    skipped = len(points) - len(todo)
    if budget is not None:
        todo = todo[:budget]

    def tagged(p):
        return [{"_key": p.key, "records": score(p)}]

    got = distribute_grid(todo, tagged, P, pid, cluster.timeout_s, tag="sweep-records")
    if cluster.is_main:
        for item in got:
            store.add(item["_key"], item["records"])
    finished = done | {item["_key"] for item in got}
    return {"evaluated": len(got), "skipped": skipped,
            "remaining": len([p for p in points if p.key not in finished]),
            "seconds": time.time() - t0}


def tiny_grid() -> list[tuple[int, int]]:
    """(m, D) grid points of the CLI's small instance."""
    return [(m, D) for m in (1, 2) for D in (2, 3)]


def score_tiny(point: tuple[int, int]) -> list[dict]:
    """Exhaustive optimum of one grid point of a synthetic 8-kernel chain (static model)."""
    import numpy as np

    from subgpu_jax.score.massive import exhaustive_chain
    from subgpu_jax.model.synthetic import coarse_hardware, synthetic_workload
    from subgpu_jax.model.graph import StaticDurationModel

    m, D = point
    hw = coarse_hardware("H200", quantum=16, minimum=16, budget=128)
    wl = synthetic_workload(3, n=8, chain=True, num_regions=3, batch=4)
    g = wl.graph(m)
    table = StaticDurationModel(hw).table(g)
    res = exhaustive_chain(np.asarray(table), g.num_regions, m, D, hw.sm_budget, hw.sm_quantum,
                           hw.min_pool_sms, topk=2)
    b = res["best"]
    return [{"m": m, "D": D, "makespan_us": b["makespan_us"], "w": b["w"],
             "seg_of": list(b["seg_of"]), "alloc": list(b["alloc"]),
             "evaluated": res["evaluated"]}]


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="distributed exhaustive grid (small instance)")
    ap.add_argument("--address", default=None, help="coordinator host:port (none: 1 process)")
    ap.add_argument("--num-processes", type=int, default=1)
    ap.add_argument("--process-id", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    if a.address and a.num_processes > 1:
        init_cluster(a.address, a.num_processes, a.process_id, a.timeout)
    recs = distribute_grid(tiny_grid(), score_tiny, a.num_processes if a.address else 1,
                           a.process_id if a.address else 0)
    from subgpu_jax.app.store import atomic_write

    atomic_write(a.out, json.dumps(recs), "--out")


if __name__ == "__main__":
    main()
