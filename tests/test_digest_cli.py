"""``experiments/digest_cli.check_out``: an ``--out`` is refused before any work when it names a
folder (a trailing separator included) or a place where no file can be created; a good one
leaves no file behind (the probe is removed)."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="module")
def dc(experiment_script):
    return experiment_script("digest_cli")


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
