"""Your own model on the first try: its parameter counts, said plainly, and when a deployment
does not fit in the GPU's memory, which flag would make it fit.

``checked_workload`` is ``Workload.checked`` for the commands: on a deployment whose weights and
KV cache exceed the GPU's HBM its error names the sizes, then the model's parameters (total,
active, and what "active" counts), then one line per flag that alone would make it fit: the
smallest ``--gpus`` (TP and DP as ``--gpus`` alone would choose them, or the given ``--tp``), the
largest ``--batch`` (``--batches`` for a search) and the largest ``--kv-history``. Whether a
deployment fits is ``Deployment.validate`` + ``model.memory.check_memory`` (``fits``), so the
advice follows the memory accounting (its budget, KV datatype and generation length included).
"""

from __future__ import annotations

import dataclasses

from subgpu_jax.model.deployment import Deployment
from subgpu_jax.model.hardware import Hardware
from subgpu_jax.model.memory import check_memory, memory_use
from subgpu_jax.model.models import ModelArch

__all__ = ["params_line", "fits", "fit_options", "not_fit_message", "checked_workload",
           "check_grid_fits", "MAX_GPUS", "BATCH_STEP"]

#: The largest GPU count ``fit_options`` tries for ``--gpus``.
MAX_GPUS = 4096

#: A suggested global batch is a multiple of DP x BATCH_STEP, so that the per-GPU batch R splits
#: into the microbatch counts users try first (2 and 4, ``subgpu search``'s default).
BATCH_STEP = 4


def params_line(arch: ModelArch) -> str:
    """The model's parameter counts in words, e.g. ``"30.53 B parameters, 3.04 B active per
    token (3.35 B counting the input embedding)"``, with what "active" counts.

    Active parameters are the weights one token's forward pass multiplies with: attention, the
    dense MLP or the top-k routed and shared experts, the router, the norms and the LM head. The
    input embedding is a lookup of one row per token, so it is not counted (the convention of
    the GPT-OSS and DeepSeek-V3 model cards); publishers that count it (Qwen3-30B-A3B's 3.3 B,
    Mixtral's 12.9 B) quote the figure in parentheses. With tied embeddings the one matrix is
    the LM head and counted once.
    """
    pc = arch.param_counts()
    tot, act, emb = pc["total"] / 1e9, pc["active"] / 1e9, pc["embedding"] / 1e9
    if arch.tie_embeddings:
        what = "the tied input embedding / LM head counted once"
    else:
        what = (f"{act + emb:.2f} B counting the input embedding, a {emb:.2f} B lookup table "
                "that active counts leave out")
    return f"{tot:.2f} B parameters, {act:.2f} B active per token ({what})"


def fits(arch: ModelArch, dep: Deployment, hw: Hardware) -> bool:
    """True when ``dep`` is a valid deployment of ``arch`` whose weights and KV cache fit in
    ``hw``'s memory budget (``Deployment.validate`` and ``model.memory.check_memory`` raise
    nothing)."""
    try:
        dep.validate(arch)
        check_memory(arch, dep, hw)
    except ValueError:
        return False
    return True


def _default_ep(arch: ModelArch, n: int) -> int:
    """``--ep``'s default for ``n`` GPUs (``args.resolve_arch_ep``)."""
    if not arch.is_moe:
        return 1
    return max(x for x in range(1, n + 1) if n % x == 0 and arch.num_experts % x == 0)


def _deployment_for_gpus(arch: ModelArch, dep: Deployment, n: int, tp: int | None,
                         ep: int | None) -> Deployment | None:
    """``dep`` on ``n`` GPUs with TP and DP as ``--gpus n`` would set them (the given ``tp``
    kept), EP given or defaulted; None when no such split divides the batch."""
    if tp is None:
        from subgpu_jax.app.sweep import outer_parallelisms

        try:
            t, d, _ = outer_parallelisms(arch, n)[-1]
        except ValueError:
            return None
    else:
        if n % tp:
            return None
        t, d = tp, n // tp
    e = ep if ep is not None and n % ep == 0 else _default_ep(arch, n)
    try:
        return dataclasses.replace(dep, num_gpus=n, attn_tp=t, attn_dp=d, moe_ep=e)
    except ValueError:  # the batch is not divisible by DP
        return None


def fit_options(arch: ModelArch, dep: Deployment, hw: Hardware, tp: int | None = None,
                ep: int | None = None) -> dict:
    """The single changes that make ``dep`` fit (each alone, the rest as given).

    Args:
        arch, dep, hw: the model, the deployment that does not fit, the GPU.
        tp: the ``--tp`` the user gave (kept when trying more GPUs), or None (TP follows
            ``--gpus``). ep: the ``--ep`` given, or None (its default for each GPU count).

    Returns:
        ``{"gpus": (n, tp, dp) or None, "batch": the largest global batch below the given one
        that fits, a multiple of DP x ``BATCH_STEP`` (so m = 2 and 4 divide R), or None,
        "kv_history": the largest KV history that fits,
        or None}``.
    """
    out: dict = {"gpus": None, "batch": None, "kv_history": None}
    for n in range(dep.num_gpus + 1, MAX_GPUS + 1):
        d2 = _deployment_for_gpus(arch, dep, n, tp, ep)
        if d2 is not None and fits(arch, d2, hw):
            out["gpus"] = (n, d2.attn_tp, d2.attn_dp)
            break

    def ok(make, x: int) -> bool:
        try:
            return fits(arch, make(x), hw)
        except ValueError:  # not a valid deployment at all
            return False

    def largest(lo: int, hi: int, make) -> int | None:
        """The largest x in [lo, hi] with make(x) fitting (memory grows with x)."""
        if hi < lo or not ok(make, lo):
            return None
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if ok(make, mid) else (lo, mid - 1)
        return lo

    q = dep.attn_dp * BATCH_STEP  # a batch DP divides, with R divisible by 2 and 4
    k = largest(1, (dep.global_batch - 1) // q,
                lambda x: dataclasses.replace(dep, global_batch=x * q))
    out["batch"] = k * q if k else None
    # the prompt is part of the KV history: a shorter history means a prompt no longer than it
    out["kv_history"] = largest(1, dep.kv_history - 1, lambda x: dataclasses.replace(
        dep, kv_history=x, input_len=min(dep.input_len, x)))
    return out


def not_fit_message(arch: ModelArch, dep: Deployment, hw: Hardware, error: str,
                    tp: int | None = None, ep: int | None = None,
                    batch_flag: str = "--batch", kv_flag: bool = True) -> str:
    """The error of a deployment that does not fit: ``error`` (the sizes), the model's
    parameters, then one line per flag that alone would make it fit (``fit_options``, and
    ``--kv-dtype fp8`` where the command has it and an FP8 KV cache fits).

    Args:
        batch_flag: the batch option of the command (``--batch``, or ``--batches`` for search).
        kv_flag: the command takes ``--kv-dtype`` (``simulate``, ``search``; not the runtime's
            commands, which keep the KV cache in bf16).
    """
    opt = fit_options(arch, dep, hw, tp, ep)
    error = error.replace("lower --batch ", f"lower {batch_flag} ")  # the command's own flag
    if not kv_flag:
        error = error.replace(", or use --kv-dtype fp8", "")
    lines = [error, "  any one of these flags alone makes it fit:"]
    if kv_flag and arch.kv_dtype != "fp8":
        fp8 = dataclasses.replace(arch, kv_dtype="fp8")
        if fits(fp8, dep, hw):
            lines.append(f"    --kv-dtype fp8   (the KV cache in FP8: "
                         f"{memory_use(fp8, dep, hw).total / 1e9:.1f} GB per GPU instead of "
                         f"{memory_use(arch, dep, hw).total / 1e9:.1f} GB)")
    if opt["gpus"]:
        n, t, d = opt["gpus"]
        d2 = _deployment_for_gpus(arch, dep, n, tp, ep)
        now, then = memory_use(arch, dep, hw), memory_use(arch, d2, hw)
        lines.append(f"    --gpus {n}   (TP{t} x DP{d}, {dep.global_batch // d} requests per TP "
                     f"group: {then.total / 1e9:.1f} GB per GPU instead of "
                     f"{now.total / 1e9:.1f} GB)")
    if opt["batch"]:
        lines.append(f"    {batch_flag} {opt['batch']}   (the largest global batch that fits "
                     f"with {dep.num_gpus} GPU{'s' if dep.num_gpus != 1 else ''}, a multiple of DP{dep.attn_dp} x {BATCH_STEP}; "
                     f"now {dep.global_batch})")
    if opt["kv_history"]:
        lines.append(f"    --kv-history {opt['kv_history']}   (the largest KV history that fits; "
                     f"now {dep.kv_history} tokens)")
    if len(lines) == 2:
        lines.append(f"    none alone: the weights need more than one {hw.name} at up to "
                     f"{MAX_GPUS} GPUs; try a GPU with more memory (--hardware)")
    lines.insert(1, f"  {arch.name}: {params_line(arch)}")  # the model first, then the flags
    return "\n".join(lines)


def checked_workload(arch: ModelArch, dep: Deployment, hw: Hardware, tp: int | None = None,
                     ep: int | None = None, kv_flag: bool = True):
    """``Workload.checked(arch, dep, hw)``, its memory error told as ``not_fit_message``
    (``kv_flag``: the command takes ``--kv-dtype``).

    Raises:
        ValueError: an invalid deployment (one line), or one that does not fit (the sizes, the
            model's parameters and one line per flag that would make it fit).
    """
    from subgpu_jax.model.workload import Workload

    dep.validate(arch)
    try:
        check_memory(arch, dep, hw)
    except ValueError as e:
        raise ValueError(not_fit_message(arch, dep, hw, str(e), tp, ep,
                                         kv_flag=kv_flag)) from None
    return Workload.from_model(arch, dep, hw)


def check_grid_fits(arch: ModelArch, hw: Hardware, deps: list[Deployment], tp: int | None,
                    ep: int | None) -> None:
    """Refuse a search grid in which no deployment fits (``deps``: one per global batch of the
    grid, at one parallelism), with ``not_fit_message`` for the smallest batch.

    Raises:
        ValueError: none of ``deps`` fits in the GPU's memory.
    """
    valid = []
    for dep in deps:
        dep.validate(arch)
        valid.append(dep)
        try:
            check_memory(arch, dep, hw)
            return
        except ValueError:
            pass
    if valid:
        dep = min(valid, key=lambda x: x.global_batch)
        try:
            check_memory(arch, dep, hw)
        except ValueError as e:
            raise ValueError(not_fit_message(arch, dep, hw, str(e), tp, ep,
                                             batch_flag="--batches")) from None
