"""``experiments/digest_cli.check_out``: an ``--out`` is refused before any work when it names a
folder (a trailing separator included) or a place where no file can be created; a good one
leaves no file behind (the probe is removed)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def dc():
    spec = importlib.util.spec_from_file_location("digest_cli",
                                                  ROOT / "experiments" / "digest_cli.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_good_out_leaves_nothing(dc, tmp_path):
    dc.check_out(str(tmp_path / "d.json"))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("tail", ["nope/", "sub/"])
def test_trailing_separator_is_a_folder(dc, tmp_path, tail):
    (tmp_path / "sub").mkdir()
    with pytest.raises(ValueError, match=r"^--out: .* not a folder$"):
        dc.check_out(str(tmp_path) + os.sep + tail)


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc")
def test_folder_where_nothing_can_be_created(dc):
    with pytest.raises(ValueError, match=r"^--out: no file can be written in '/proc'"):
        dc.check_out("/proc/digest.json")
