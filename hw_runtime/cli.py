"""``subgpu run`` and ``subgpu calibrate``: sub-commands registered by ``subgpu_jax.cli``.

Importable without torch, cuda-bindings or a GPU; the commands themselves refuse with a one-line
error (exit code 2) on a machine without a GPU or without green-context support.
"""

from __future__ import annotations

import argparse

__all__ = ["add_commands"]


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register the GPU sub-commands on the ``subgpu`` parser's sub-parsers (none yet)."""
    return None
