"""Issue 41 item 1 and 3: outputs replace only regular files.

Every output is written to ``path.tmp`` and renamed over ``path`` (``store.atomic_write``); a
rename replaces whatever directory entry stands at ``path``, so before issue 41 a device node, a
FIFO or a symbolic link there became a regular file (``--trace /dev/full`` replaced the machine's
``/dev/full``). The nodes here are made in the test's scratch folder (``mknod`` of the null
device 1:3 needs root; the test is skipped without it), never the machine's own.

Oracles: the one-line message (exit 2, names the flag and what stands there) and the node
still being the same kind of file (``os.lstat``) with the same inode afterwards.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from subgpu_jax.app.cli import main
from subgpu_jax.app.store import SweepStore, atomic_write
from subgpu_jax.app.viz import check_image_path

ROOT = Path(__file__).resolve().parents[2]
SIM = ["simulate", "--model", "llama-3.1-8b", "--gpus", "1", "--batch", "64",
       "--kv-history", "1024"]


def _nodes(folder: Path, suffix: str = ".json") -> dict[str, Path]:
    """A FIFO, a symbolic link to a regular file, a folder and (as root) a null device node,
    each named ``kind + suffix`` in ``folder``."""
    out = {}
    real = folder / ("real" + suffix)
    real.write_text("{}")
    out["fifo"] = folder / ("fifo" + suffix)
    os.mkfifo(out["fifo"])
    out["link"] = folder / ("link" + suffix)
    out["link"].symlink_to(real.name)
    out["dir"] = folder / ("dir" + suffix)
    out["dir"].mkdir()
    if os.geteuid() == 0:
        out["device"] = folder / ("device" + suffix)
        os.mknod(out["device"], 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    return out


def _kind(p: Path) -> tuple[int, int]:
    st = os.lstat(p)
    return stat.S_IFMT(st.st_mode), st.st_ino


WHAT = {"fifo": "is a FIFO", "link": "is a symbolic link (to 'real", "dir": "is a directory",
        "device": "is a device node"}


def test_atomic_write_refuses_every_special_file_and_leaves_it(tmp_path):
    """The one helper all outputs use: ValueError naming the given name, the node unchanged, no
    ``.tmp`` left; a regular file is replaced as before."""
    nodes = _nodes(tmp_path)
    for kind, p in nodes.items():
        before = _kind(p)
        with pytest.raises(ValueError) as e:
            atomic_write(str(p), "x", "--trace")
        assert str(e.value).startswith(f"--trace: {str(p)!r} {WHAT[kind]}")
        assert _kind(p) == before and not os.path.lexists(str(p) + ".tmp")
    assert (tmp_path / "real.json").read_text() == "{}"  # the link's target untouched
    atomic_write(str(tmp_path / "real.json"), "[1]")
    assert (tmp_path / "real.json").read_text() == "[1]"


def test_special_tmp_is_refused_and_regular_leftover_replaced(tmp_path):
    """``path.tmp`` is never opened through a link or a FIFO (opening a FIFO for writing
    blocks until a reader comes); a regular leftover is removed and written anew."""
    target = tmp_path / "out.json"
    os.mkfifo(str(target) + ".tmp")
    with pytest.raises(ValueError, match=r"out\.json\.tmp' is a FIFO"):
        atomic_write(str(target), "x")
    os.unlink(str(target) + ".tmp")
    (tmp_path / "victim").write_text("keep")
    os.symlink("victim", str(target) + ".tmp")
    with pytest.raises(ValueError, match="is a symbolic link"):
        atomic_write(str(target), "x")
    assert (tmp_path / "victim").read_text() == "keep"
    os.unlink(str(target) + ".tmp")
    Path(str(target) + ".tmp").write_text("half a write")
    atomic_write(str(target), "whole")
    assert target.read_text() == "whole" and not os.path.lexists(str(target) + ".tmp")


@pytest.mark.parametrize("flag", ["--trace", "--gantt", "--utilization"])
def test_simulate_refuses_special_outputs_before_simulating(flag, tmp_path, capsys):
    """``subgpu simulate --trace/--gantt/--utilization NODE``: exit 2, one line naming the flag,
    the node unchanged (before issue 41 the trace replaced it with a 132 KB file)."""
    nodes = _nodes(tmp_path, ".json" if flag == "--trace" else ".png")
    for kind, p in nodes.items():
        before = _kind(p)
        rc = main(SIM + [flag, str(p)])
        out, err = capsys.readouterr()
        assert rc == 2
        assert len(err.splitlines()) == 1 and out == ""
        assert err.startswith(f"error: {flag}: {str(p)!r} {WHAT[kind]}")
        assert _kind(p) == before


def test_figure_path_check_refuses_a_fifo(tmp_path):
    os.mkfifo(tmp_path / "g.png")
    with pytest.raises(ValueError, match=r"^--gantt: .*g\.png' is a FIFO"):
        check_image_path(tmp_path / "g.png", "--gantt")


def test_search_folder_with_a_special_file_is_refused(tmp_path):
    """A FIFO as ``manifest.json`` would hang the store's read of it; a link as
    ``summary.json`` would be replaced: both refused at open, naming ``--out``."""
    d = tmp_path / "sweep"
    d.mkdir()
    os.mkfifo(d / "manifest.json")
    with pytest.raises(ValueError, match=r"^--out: .*manifest\.json' is a FIFO"):
        SweepStore(str(d), {"a": 1})
    os.unlink(d / "manifest.json")
    (d / "elsewhere.json").write_text("{}")
    os.symlink("elsewhere.json", d / "summary.json")
    with pytest.raises(ValueError, match=r"^--out: .*summary\.json' is a symbolic link"):
        SweepStore(str(d), {"a": 1})
    assert os.path.islink(d / "summary.json")


@pytest.mark.parametrize("make", ["dir", "fifo"])
def test_calibrate_out_checked_before_any_gpu_work(make, tmp_path):
    """Item 3: ``subgpu calibrate --out EXISTING_FOLDER`` used to pass the parent-folder check,
    run the whole calibration and fail at ``open(..., "w")``. Now the path is checked first: on
    this GPU-less machine the answer names ``--out``, not the missing GPU (which is checked
    later), exit 2, in a fresh process."""
    p = tmp_path / "cal.json"
    p.mkdir() if make == "dir" else os.mkfifo(p)
    r = subprocess.run([sys.executable, "-c", "import sys; from subgpu_jax.app.entry import "
                        "main; sys.exit(main())", "calibrate", "--model", "llama-3.1-8b",
                        "--gpus", "1", "--out", str(p)],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 2, r.stderr
    what = ("is a directory, give a file path" if make == "dir" else
            "is a FIFO; outputs are written only as regular files, give a file path")
    assert r.stderr.strip().splitlines() == [f"error: --out: {str(p)!r} {what}"]


def test_write_probe_never_opened_through_a_link_or_a_fifo(tmp_path):
    """The store learns whether the folder accepts new files by creating and removing
    ``.write-probe``; it was opened with ``O_CREAT | O_TRUNC``, so a symbolic link there had its
    target truncated (a sweep then ran on, exit 0) and a FIFO blocked the open for ever. Both
    are refused at open, naming ``--out``, the target untouched; a regular leftover of a
    killed run is replaced and removed."""
    from subgpu_jax.app.store import PROBE_NAME

    d = tmp_path / "sweep"
    d.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    os.symlink(victim, d / PROBE_NAME)
    with pytest.raises(ValueError, match=r"^--out: .*\.write-probe' is a symbolic link"):
        SweepStore(str(d), {"a": 1})
    assert victim.read_text() == "keep" and os.path.islink(d / PROBE_NAME)
    os.unlink(d / PROBE_NAME)
    os.mkfifo(d / PROBE_NAME)
    with pytest.raises(ValueError, match=r"^--out: .*\.write-probe' is a FIFO"):
        SweepStore(str(d), {"a": 1})
    os.unlink(d / PROBE_NAME)
    (d / PROBE_NAME).write_text("left by a killed run")
    store = SweepStore(str(d), {"a": 1})
    assert not store.read_only and not os.path.lexists(d / PROBE_NAME)
    store.close()


def test_run_trace_side_file_checked_before_any_gpu_work(tmp_path):
    """``subgpu run --trace PATH`` writes ``PATH.activities.json`` when the profiled replay
    cannot be mapped to the plan; a folder or FIFO there used to fail only after the GPU work.
    Both paths are checked first: on this GPU-less machine the answer names ``--trace``, not
    the missing GPU, exit 2, one line, in a fresh process (``--hardware`` given: without it the
    default is read from the GPU, and the missing GPU is the answer)."""
    trace = tmp_path / "t.json"
    os.mkfifo(str(trace) + ".activities.json")
    r = subprocess.run([sys.executable, "-c", "import sys; from subgpu_jax.app.entry import "
                        "main; sys.exit(main())", "run", "--model", "llama-3.1-8b", "--gpus",
                        "1", "--tp", "1", "--dp", "1", "--batch", "64", "--kv-history", "1024",
                        "--hardware", "H200", "--trace", str(trace)],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --trace: ") and "FIFO" in lines[0]
