"""Issue 41 item 6: a finished sweep in a folder made read-only with ``chmod a-w`` is summarised
(docs/usage.md, docs/reliability.md); a partial one is refused before any grid point.

Before issue 41 the command line refused every existing folder without write access
(``checks.out_dir``), so the store's own read-only handling was reached only by the tests' fault
hook. Here the folder is really read-only: root writes through ``chmod`` (the permission bits do
not bind it), so as root the sweep runs as the unprivileged user ``nobody`` (``setpriv``), in a
world-writable scratch folder under /tmp; as any other user it runs as that user.

Oracles: exit codes, the printed lines, and the folder's files byte for byte afterwards.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TINY = ["search", "--model", "gpt-oss-20b", "--gpus", "8", "--tp", "8", "--dp", "1",
        "--exact", "static", "--batches", "64", "--stages", "2", "--microbatches", "2",
        "--no-progress"]


def _as_user() -> list[str]:
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: no user the permission bits bind")
    return ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"]


def _search(folder: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = _as_user() + [sys.executable, "-c", "import sys; from subgpu_jax.app.entry import "
                        "main; sys.exit(main())", *TINY, "--out", str(folder / "sweep"), *extra]
    env = dict(os.environ, MPLCONFIGDIR=str(folder / "mpl"))
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)


@pytest.fixture
def scratch():
    d = Path(tempfile.mkdtemp(prefix="subgpu-ro-", dir="/tmp"))
    d.chmod(0o777)  # the unprivileged user creates the sweep folder here
    yield d
    for p in d.rglob("*"):
        if p.is_dir():
            p.chmod(0o755)
    shutil.rmtree(d)


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


def test_finished_sweep_in_a_chmod_read_only_folder_is_summarised(scratch):
    r = _search(scratch)
    assert r.returncode == 0, r.stderr
    sweep = scratch / "sweep"
    before = _files(sweep)
    assert {"records.jsonl", "manifest.json", "summary.json"} <= set(before)
    sweep.chmod(stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH
                | stat.S_IXOTH)  # chmod a-w
    r = _search(scratch)
    assert r.returncode == 0, r.stderr
    assert (f"results folder {sweep} is read-only (no new file can be created there): its "
            "finished sweep is summarised, no file is rewritten") in r.stdout
    assert "evaluated 0 grid points, skipped 2 already done, 0 remaining" in r.stdout
    assert "best SubGPU configuration: G=64 D=2" in r.stdout
    assert _files(sweep) == before


def test_partial_sweep_in_a_read_only_folder_is_refused_before_any_point(scratch):
    r = _search(scratch, "--budget", "1")
    assert r.returncode == 0, r.stderr
    sweep = scratch / "sweep"
    before = _files(sweep)
    sweep.chmod(0o555)
    r = _search(scratch)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1] == (
        f"error: results folder {sweep} is read-only (no new file can be created there) and 1 "
        "of 2 grid points are not done; make it writable or choose another --out")
    assert _files(sweep) == before
