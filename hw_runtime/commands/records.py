"""Reading a search folder for ``subgpu run --from-search``: its records, the best K per batch,
and one record as the options of a run (the record codec of ``Deployment.from_record`` and
``app.options.record_config_options``)."""

from __future__ import annotations

import os

__all__ = ["search_records", "top_records", "record_options"]


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


def top_records(records: list[dict], k: int, hardware: str) -> dict[int, list[dict]]:
    """Per global batch: the temporal record, then the ``k`` SubGPU records with the shortest
    predicted makespan.

    Raises:
        ValueError: ``k`` < 1, or records made for another GPU (one line saying how to make a
            search for this one).
    """
    if k < 1:
        raise ValueError(f"--top must be >= 1, got {k}")
    from subgpu_jax.model.hardware import get_hardware

    name = get_hardware(hardware).name.upper()   # a NAME:VERSION spec: the preset's name
    other = sorted({str(r.get("hardware")) for r in records
                    if str(r.get("hardware")).upper() != name})
    if other:
        raise ValueError(f"--from-search: the search was made for {', '.join(other)}, this run "
                         f"is on {hardware}; make one for this GPU with `subgpu search "
                         f"--hardware {hardware} --expert-dtype bf16 ...`")
    by: dict[int, list[dict]] = {}
    for r in records:
        by.setdefault(int(r["global_batch"]), []).append(r)
    out = {}
    for G, rs in sorted(by.items()):
        tmp = [r for r in rs if r["mode"] == "temporal"]
        sub = sorted((r for r in rs if r["mode"] != "temporal"), key=lambda r: r["makespan_us"])
        out[G] = tmp[:1] + sub[:k]
    return out


def record_options(a, r: dict):
    """The ``subgpu run`` options of one search record ``r`` (a ``records.csv`` row): ``a``'s
    options with the record's deployment (GPUs, TP/DP/EP, batch, KV history, input length,
    decoded by ``Deployment.from_record``) in place, and the record itself as ``record``: a
    SubGPU record's configuration is decoded once, by ``Config.from_record`` in
    ``run.prepare_run`` (the configuration options ``cuts``, ``sms``, ``microbatch``, ``reuse``
    are None then; ``streams_per_stage`` is the record's, which the executor reads). A temporal
    record runs the temporal baseline (``record`` None, its microbatch and policy kept).

    Returns:
        an ``argparse.Namespace`` for ``prepare_run``.

    Raises:
        KeyError: a record without the deployment fields. ValueError: fields that are not
            integers, or an infeasible deployment.
    """
    import argparse as _ap

    from subgpu_jax.model.deployment import Deployment

    sub = _ap.Namespace(**vars(a))
    sub.from_search, sub.top = None, None
    d = Deployment.from_record(r, options=False)  # the record codec (RECORD_FIELDS)
    sub.gpus, sub.tp, sub.dp, sub.ep = d.num_gpus, d.attn_tp, d.attn_dp, d.moe_ep
    sub.batch, sub.kv_history = d.global_batch, d.kv_history
    if r.get("input_len") not in (None, ""):
        sub.input_len = int(r["input_len"])
    sub.policy = r.get("policy") or a.policy
    if r["mode"] == "temporal":
        sub.record, sub.microbatch = None, int(r["microbatch"])
        sub.cuts, sub.sms, sub.reuse, sub.streams_per_stage = None, None, None, 1
    else:
        sub.record = dict(r)
        sub.cuts = sub.sms = sub.microbatch = sub.reuse = None
        sub.streams_per_stage = int(r.get("streams_per_stage") or 1)
    return sub
