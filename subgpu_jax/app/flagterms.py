"""Errors of the model layer told in the command line's terms: ``Deployment`` and its checks
name their fields (``deployment.global_batch``, ``attn_dp=3``); a CLI user typed flags
(``--batch``, ``--dp``). ``in_flag_terms`` rewrites the one into the other for the CLI's
one-line errors; the library's own errors stay as they are for library users."""

from __future__ import annotations

import re

__all__ = ["DEPLOYMENT_FLAGS", "in_flag_terms", "derived_terms", "unrecognized_hint"]

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


def derived_terms(a) -> dict[str, str]:
    """The attention TP and DP the user did not type, as what they typed: ``{"attn_dp": "the DP
    {} that --gpus 3 gives"}`` for ``--gpus 3`` (``args.resolve_parallelism`` derived
    ``--dp``; ``{}`` takes the value); ``{}`` when both were given or nothing was derived."""
    given = getattr(a, "parallelism_given", None)
    gpus, tp, dp = (getattr(a, f, None) for f in ("gpus", "tp", "dp"))
    if given is None or gpus is None or tp is None or dp is None:
        return {}
    typed = " ".join([f"--gpus {gpus}", *(f"--{f} {getattr(a, f)}" for f in given)])
    return {field: f"the {label} {{}} that {typed} gives"
            for f, field, label in (("tp", "attn_tp", "TP"), ("dp", "attn_dp", "DP"))
            if f not in given}


def in_flag_terms(message: str, command: str = "", derived: dict[str, str] | None = None
                  ) -> str:
    """``message`` with each ``Deployment`` field written as its flag (``field=v`` becomes
    ``--flag v``); ``deployment: `` at the start is dropped. Only a message of ``Deployment``
    itself (starting with ``deployment``) is rewritten: any other may hold what the user typed
    (a file named ``global_batch.json``), which must come back unchanged. ``command``: the
    sub-command (``search`` names the batch ``--batches``). ``derived``: ``derived_terms``,
    the fields the user never typed (``attn_dp=3`` after ``--gpus 3``) told as what they typed.

    >>> in_flag_terms("deployment.global_batch=64 must be divisible by attn_dp=3 (x)")
    '--batch 64 must be divisible by --dp 3 (x)'
    >>> in_flag_terms("deployment: attn_tp*attn_dp = 6 must equal num_gpus = 8")
    '--tp*--dp = 6 must equal --gpus = 8'
    """
    if not message.startswith(("deployment.", "deployment:")):
        return message
    for field, words in (derived or {}).items():  # never "--dp 3" to a user who typed --gpus 3
        message = re.sub(rf"(?:\bdeployment\.)?\b{field}=(\d+)",
                         lambda m, w=words: w.format(m.group(1)), message)
    flags = dict(DEPLOYMENT_FLAGS)
    if command == "search":
        flags["global_batch"] = "--batches"

    def sub(m: re.Match) -> str:
        flag = flags[m.group(1)]
        return f"{flag} " if m.group(2) else flag

    out = _PATTERN.sub(sub, message)
    return out[len("deployment: "):] if out.startswith("deployment: ") else out


def unrecognized_hint(parser, argv: list[str], message: str) -> str:
    """What to type instead, for argparse's ``unrecognized arguments: ...`` (``""`` for any
    other message): the singular or plural twin of an option this command has (``simulate
    --batches`` -> ``--batch``), the commands that have an option this one lacks, and, for a
    value left over after a list with a space after its comma (``--batches 64, 256``), that
    lists take no spaces.

    Args:
        parser: the top-level ``subgpu`` parser (its sub-commands' options are read).
        argv: the arguments as given. message: argparse's error message.
    """
    import argparse

    if not message.startswith("unrecognized arguments:"):
        return ""
    extra = message.split(":", 1)[1].split()
    subs = [x for x in parser._actions if isinstance(x, argparse._SubParsersAction)]
    choices = subs[0].choices if subs else {}
    cmd = next((x for x in argv if x in choices), None)

    def options(p, visible: bool = False) -> set[str]:
        return {o for act in p._actions for o in act.option_strings
                if not (visible and act.help == argparse.SUPPRESS)}

    own = options(choices[cmd]) if cmd else set()
    shown = options(choices[cmd], visible=True) if cmd else set()   # not the hidden refusals
    hints = []
    for tok in extra:
        opt = tok.split("=", 1)[0]
        if cmd and opt.startswith("--") and opt not in own:
            import difflib

            twins = [t for t in (opt[:-2], opt[:-1], opt + "s", opt + "es")
                     if t in shown and len(t) > 2 and t != opt]
            twins = twins or difflib.get_close_matches(opt, sorted(shown), n=1, cutoff=0.85)
            if twins:
                # what the option takes, from its own help (``--gpus`` is one value, ``--batches``
                # a list): never guessed from the spelling
                act = next(a for a in choices[cmd]._actions if twins[0] in a.option_strings)
                takes = ("" if act.nargs == 0 else " (a comma-separated list)"
                         if "comma-separated" in (act.help or "") else " (one value)")
                hints.append(f"{cmd} takes {twins[0]}{takes}, not {opt}")
                continue
            others = [c for c, p in choices.items() if c != cmd and opt in options(p)]
            if others:
                hints.append(f"{opt} is an option of {', '.join(others)}, not of {cmd}")
        elif not tok.startswith("-") and tok in argv:
            i = argv.index(tok)
            if i >= 2 and (argv[i - 1].endswith(",") or tok.startswith(",")):
                j, e = i, i  # the list the spaces cut: argv[j..e], after its option
                while j > 0 and not argv[j - 1].startswith("-") and (
                        argv[j - 1].endswith(",") or argv[j].startswith(",")):
                    j -= 1
                while e + 1 < len(argv) and not argv[e + 1].startswith("-") and (
                        argv[e].endswith(",") or argv[e + 1].startswith(",")):
                    e += 1
                flag = argv[j - 1] if j >= 1 and argv[j - 1].startswith("-") else "a list option"
                hints.append(f"lists take no spaces after their commas: {flag} "
                             f"{''.join(argv[j:e + 1])} (or quote the list: {flag} "
                             f"\"{' '.join(argv[j:e + 1])}\")")
    return "; ".join(dict.fromkeys(hints))
