"""Errors of the model layer told in the command line's terms: ``Deployment`` and its checks
name their fields (``deployment.global_batch``, ``attn_dp=3``); a CLI user typed flags
(``--batch``, ``--dp``). ``in_flag_terms`` rewrites the one into the other for the CLI's
one-line errors; the library's own errors stay as they are for library users."""

from __future__ import annotations

import re

__all__ = ["DEPLOYMENT_FLAGS", "in_flag_terms"]

#: ``Deployment`` field -> the flag that sets it (``subgpu simulate/search/run --help``);
#: ``global_batch`` is ``--batch``, or ``--batches`` for ``search``.
DEPLOYMENT_FLAGS: dict[str, str] = {
    "num_gpus": "--gpus", "attn_tp": "--tp", "attn_dp": "--dp", "moe_ep": "--ep",
    "global_batch": "--batch", "input_len": "--input-len", "kv_history": "--kv-history",
    "output_len": "--output-len", "kv_lengths": "--kv-lengths",
    "nvlink_domain": "--nvlink-domain", "scaleout_GBps": "--scaleout-gbps",
    "routing_imbalance": "--routing-imbalance",
    "gpu_memory_utilization": "--gpu-memory-utilization",
}
_FIELD = "|".join(sorted(DEPLOYMENT_FLAGS, key=len, reverse=True))
#: ``deployment.field=v`` / ``deployment.field`` / ``field=v`` (a whole word).
_PATTERN = re.compile(rf"(?:\bdeployment\.)?\b({_FIELD})\b(=)?")


def in_flag_terms(message: str, command: str = "") -> str:
    """``message`` with each ``Deployment`` field written as its flag (``field=v`` becomes
    ``--flag v``); ``deployment: `` at the start is dropped. Only a message of ``Deployment``
    itself (starting with ``deployment``) is rewritten: any other may hold what the user typed
    (a file named ``global_batch.json``), which must come back unchanged. ``command``: the
    sub-command (``search`` names the batch ``--batches``).

    >>> in_flag_terms("deployment.global_batch=64 must be divisible by attn_dp=3 (x)")
    '--batch 64 must be divisible by --dp 3 (x)'
    >>> in_flag_terms("deployment: attn_tp*attn_dp = 6 must equal num_gpus = 8")
    '--tp*--dp = 6 must equal --gpus = 8'
    """
    if not message.startswith(("deployment.", "deployment:")):
        return message
    flags = dict(DEPLOYMENT_FLAGS)
    if command == "search":
        flags["global_batch"] = "--batches"

    def sub(m: re.Match) -> str:
        flag = flags[m.group(1)]
        return f"{flag} " if m.group(2) else flag

    out = _PATTERN.sub(sub, message)
    return out[len("deployment: "):] if out.startswith("deployment: ") else out
