"""Which GPU preset a runtime command predicts with: by default the GPU it runs on.

``subgpu run`` and ``subgpu calibrate`` resolve ``--hardware`` once, at their command-line edge
and before any GPU work (``resolve_hardware``): left out, it is the preset of the local GPU's
name (``device_name``, ``preset_of_device``); given, it stands, with one note on stderr when the
local GPU is another one. Tests substitute ``device_name`` (a fake GPU's name).

Importable without torch or a GPU.
"""

from __future__ import annotations

import re
import sys

from hw_runtime.commands.common import a_or_an, gpu_check
from subgpu_jax.model.hardware import HARDWARE, get_hardware

__all__ = ["DEFAULT_HELP", "device_name", "note_preset", "preset_of_device", "resolve_hardware"]

#: What ``--hardware``'s help says of its default in the runtime commands.
DEFAULT_HELP = "the GPU this runs on (H100, H200 or B200 preset)"


def device_name() -> str:
    """The name CUDA gives this process's GPU (device 0, ``torch.cuda.get_device_name``), e.g.
    ``"NVIDIA H100 80GB HBM3"``. Starts CUDA in this process: under ``--collectives nccl`` call
    it after the rank's GPU was made device 0.

    Raises:
        ValueError: no GPU with green contexts here (``common.gpu_check``'s one line).
    """
    gpu_check()
    import torch

    return str(torch.cuda.get_device_name(0))


def preset_of_device(name: str) -> str | None:
    """The preset of ``subgpu_jax.model.hardware.HARDWARE`` that a CUDA device name is: the
    preset's name as a whole word of it, case-insensitive (``"NVIDIA H100 80GB HBM3"`` ->
    ``"H100"``, ``"NVIDIA H200"`` -> ``"H200"``, ``"NVIDIA B200"`` -> ``"B200"``).

    Returns:
        the preset's name, or None for any other GPU (``"NVIDIA H20"``, ``"NVIDIA GH200
        480GB"``, ``"NVIDIA H800"``) and for a PCIe card (``"NVIDIA H100 PCIe"``: fewer SMs
        and other memory than the presets, which describe the SXM GPUs).
    """
    if re.search(r"\bpcie\b", name, re.IGNORECASE):
        return None
    for preset in HARDWARE:
        if re.search(rf"(?<![a-z0-9]){re.escape(preset)}(?![a-z0-9])", name, re.IGNORECASE):
            return preset
    return None


def resolve_hardware(given: str | None) -> str:
    """The ``--hardware`` spec a runtime command predicts with.

    Args:
        given: ``--hardware`` as typed (``NAME[:VERSION]``), or None when left out.

    Returns:
        ``given`` when set (the command says so once its checks pass, ``note_preset``; no GPU
        here: the command's own GPU check refuses later, after its CPU checks); else the
        preset of this GPU (``preset_of_device``).

    Raises:
        ValueError: ``given`` is None and there is no GPU here (``common.gpu_check``'s line),
            or this GPU is none of the presets (one line asking for ``--hardware``).
    """
    if given is None:
        name = device_name()
        preset = preset_of_device(name)
        if preset is None:
            raise ValueError(f"--hardware: this GPU ({name}) is none of the presets "
                             f"({', '.join(HARDWARE)}); pass --hardware NAME to predict it "
                             "as one of them")
        return preset
    get_hardware(given)   # a bad spec: one line naming the presets
    return given


def note_preset(spec: str) -> None:
    """One ``note:`` line on stderr when this machine's GPU is not the preset ``spec``
    (``--hardware NAME[:VERSION]``) the command predicts with. Call it after the command's
    checks and its ``common.gpu_check`` (bad input stays one line: the error alone)."""
    want = get_hardware(spec).name
    name = device_name()
    preset = preset_of_device(name)
    if preset != want:
        print(f"note: this GPU is {a_or_an(name)}{f' ({preset} preset)' if preset else ''}; "
              f"predictions use the {want} preset (--hardware)", file=sys.stderr)
