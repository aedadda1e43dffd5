"""Reading a search folder for ``subgpu run --from-search``: its records, the best K per batch,
and one record as the request of a run (``record_request``: the record codec of
``Deployment.from_record`` and ``Config.from_record``)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace

from hw_runtime.commands.common import a_or_an
from hw_runtime.commands.request import ConfigOptions, RunRequest, check_stage_pools
from subgpu_jax.space.config import Config

__all__ = ["search_records", "other_gpu_search", "top_records", "record_request"]


def search_records(folder: str) -> list[dict]:
    """The evaluated records of a ``subgpu search`` folder, read from ``records.csv``: the
    search job writes it from the records its store verified (checksums, duplicates and torn
    lines already handled there), so they are not parsed again from ``records.jsonl``.

    Returns:
        one dict per record, numbers as int or float.

    Raises:
        ValueError: no readable records.csv, or no record in it (one line).
    """
    import csv

    def num(v: str):
        for conv in (int, float):
            try:
                return conv(v)
            except ValueError:
                pass
        return v

    path = os.path.join(folder, "records.csv")
    try:
        with open(path, newline="") as fh:
            out = [{k: num(v) for k, v in r.items()} for r in csv.DictReader(fh)]
    except OSError as e:
        raise ValueError(f"--from-search: cannot read {path}: {e.strerror or e}") from None
    out = [r for r in out if "makespan_us" in r and "mode" in r]
    if not out:
        raise ValueError(f"--from-search: {path} holds no evaluated record")
    return out


def other_gpu_search(folder: str, searched: list[str], hardware: str) -> str:
    """The one line that refuses ``--from-search DIR`` when the search was made for other GPUs
    than the run's (``run.check_search_matches`` for the best record, ``top_records`` for
    ``--top``): it names both, ``--hardware`` and its default, and how to make a search for this
    GPU.

    Args:
        folder: the search folder. searched: the GPU presets its records were made for.
        hardware: the run's ``--hardware`` spec (``NAME[:VERSION]``; the preset's name is said).
    """
    from subgpu_jax.model.hardware import get_hardware

    preset = get_hardware(hardware)
    hw = preset.name
    bf16 = " --expert-dtype bf16" if preset.runtime else ""   # the runtime's GPUs: Hopper, bf16
    there = " or ".join(f"{a_or_an(g)} GPU (--hardware {g})" for g in searched)
    return (f"--from-search: {folder} holds a search for the {' and '.join(searched)} and this "
            f"run is for the {hw} (--hardware, default: the GPU this runs on); make a search "
            f"for the {hw} with `subgpu search --hardware {hw}{bf16} --out DIR` and run "
            f"`subgpu run --from-search DIR`, or run this one on {there}")


def top_records(records: list[dict], k: int, hardware: str, folder: str, green: bool = True
                ) -> dict[int, list[dict]]:
    """Per global batch: the temporal record, then the ``k`` SubGPU records with the shortest
    predicted makespan.

    Args:
        records: the search's records (``search_records``). k: records per batch (>= 1).
        hardware: the run's ``--hardware`` spec. folder: the search folder (named in errors).
        green: the records will run on green contexts (``--mode green``): a record with a
            stage below the runtime's minimum (``request.check_stage_pools``; a search made
            before that minimum) is refused here, before any GPU work.

    Raises:
        ValueError: ``k`` < 1, records made for another GPU (``other_gpu_search``'s line), or
            a selected record with a stage the runtime refuses (one line naming
            ``--from-search``).
    """
    if k < 1:
        raise ValueError(f"--top must be >= 1, got {k}")
    from subgpu_jax.model.hardware import get_hardware

    name = get_hardware(hardware).name.upper()   # a NAME:VERSION spec: the preset's name
    other = sorted({str(r.get("hardware")) for r in records
                    if str(r.get("hardware")).upper() != name})
    if other:
        raise ValueError(other_gpu_search(folder, other, hardware))
    by: dict[int, list[dict]] = {}
    for r in records:
        by.setdefault(int(r["global_batch"]), []).append(r)
    out = {}
    hw = get_hardware(hardware)
    for G, rs in sorted(by.items()):
        tmp = [r for r in rs if r["mode"] == "temporal"]
        sub = sorted((r for r in rs if r["mode"] != "temporal"), key=lambda r: r["makespan_us"])
        out[G] = tmp[:1] + sub[:k]
        for r in out[G]:   # before any GPU work: a record the runtime refuses (older searches)
            if green and r["mode"] == "subgpu" and r.get("sms"):
                check_stage_pools(Config.record_alloc(r), hw,
                                  f"--from-search {folder}: the G={G} record with SMs {r['sms']}")
    return out


def record_request(req: RunRequest, r: Mapping) -> RunRequest:
    """The request that runs one search record ``r`` (a ``records.csv`` row or a summary's
    best record): ``req`` with the record's deployment (GPUs, TP/DP/EP, batch, KV history,
    input length, decoded by ``Deployment.from_record``) and dispatch policy in place, and no
    ``from_search``/``top``. A SubGPU record becomes the configuration itself
    (``ConfigOptions.record``, decoded once, by ``Config.from_record`` in ``run.prepare_run``;
    the configuration options are None, the streams per stage are the record's); a temporal
    record runs the temporal baseline (its microbatch, one stream per stage).

    Raises:
        KeyError: a record without the deployment fields. ValueError: fields that are not
            integers, or an infeasible deployment.
    """
    from subgpu_jax.model.deployment import Deployment

    d = Deployment.from_record(r, options=False)  # the record codec (RECORD_FIELDS)
    given_len = r.get("input_len") not in (None, "")
    workload = replace(req.workload, gpus=d.num_gpus, tp=d.attn_tp, dp=d.attn_dp, ep=d.moe_ep,
                       batch=d.global_batch, kv_history=d.kv_history,
                       input_len=int(r["input_len"]) if given_len else req.workload.input_len)
    policy = r.get("policy") or req.config.policy
    if r["mode"] == "temporal":
        config = ConfigOptions(microbatch=int(r["microbatch"]), policy=policy)
    else:
        config = ConfigOptions(policy=policy, record=dict(r), streams_per_stage=int(
            r.get("streams_per_stage") or ConfigOptions.streams_per_stage))
    return replace(req, workload=workload, config=config, from_search=None, top=None)
