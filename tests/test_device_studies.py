"""The device entry point (experiments/device/run.sh): its study table (experiments/device/STUDIES)
and experiments/README.md's table of studies agree, every study's script exists and is valid
bash, and run.sh refuses an unknown study or missing arguments with exit 2 (CPU only: nothing
here starts a study)."""
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEVICE = ROOT / "experiments" / "device"


def _table() -> dict:
    """name -> (script, arguments) from experiments/device/STUDIES."""
    out = {}
    for line in (DEVICE / "STUDIES").read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, script, *args = line.split()
        assert name not in out, f"study {name} twice in STUDIES"
        out[name] = (script, " ".join(args))
    return out


def _readme_rows() -> dict:
    """name -> row cells of the table under '## Device studies' in experiments/README.md."""
    text = (ROOT / "experiments" / "README.md").read_text()
    section = text.split("## Device studies", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        m = re.match(r"\|\s*`([a-z_]+)`\s*\|(.*)\|\s*$", line)
        if m:
            rows[m.group(1)] = [c.strip() for c in m.group(2).split("|")]
    return rows


def test_study_table_and_readme_agree():
    table, rows = _table(), _readme_rows()
    assert table, "no study in experiments/device/STUDIES"
    assert sorted(table) == sorted(rows), (
        f"only in STUDIES: {sorted(set(table) - set(rows))}; "
        f"only in experiments/README.md: {sorted(set(rows) - set(table))}")
    for name, (_, args) in table.items():
        assert rows[name][0].strip("`") == args, f"{name}: arguments differ"


def test_each_study_script_exists_and_parses():
    for name, (script, _) in _table().items():
        path = DEVICE / script
        assert path.is_file(), f"study {name}: {script} missing"
        assert subprocess.run(["bash", "-n", str(path)]).returncode == 0, script
    for path in [DEVICE / "run.sh", DEVICE / "env.sh"]:
        assert subprocess.run(["bash", "-n", str(path)]).returncode == 0, path


def test_every_study_script_is_in_the_table():
    listed = {s for s, _ in _table().values()}
    on_disk = {f"studies/{p.name}" for p in (DEVICE / "studies").glob("*.sh")}
    assert on_disk == listed, f"scripts not in STUDIES: {sorted(on_disk - listed)}"


def test_docs_pages_of_the_readme_table_exist():
    for name, cells in _readme_rows().items():
        for link in re.findall(r"\]\(([^)#]+)", cells[-1]):
            assert (ROOT / "experiments" / link).resolve().is_file(), f"{name}: {link}"


def test_no_one_off_device_scripts_left():
    assert not list((ROOT / "experiments").glob("device_*.sh"))


@pytest.mark.parametrize("args, first", [
    ([], "usage: run.sh STUDY"), (["nope"], "run.sh: unknown study 'nope'"),
    (["tune"], "usage: run.sh tune WORKLOAD [BUDGET_S]"),
    (["wins"], "usage: run.sh wins CONFIGS [--collectives MODE] [--attention A] [WORKLOAD ...]")])
def test_run_sh_refuses_without_a_study_or_its_arguments(args, first, tmp_path):
    r = subprocess.run(["bash", str(DEVICE / "run.sh"), *args], cwd=ROOT, capture_output=True,
                       text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "OUT": str(tmp_path / "o")})
    assert r.returncode == 2 and r.stderr.splitlines()[0].startswith(first), r.stderr
    assert not (tmp_path / "o").exists()


def test_run_sh_list():
    r = subprocess.run(["bash", str(DEVICE / "run.sh"), "list"], cwd=ROOT, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0
    assert sorted(line.split()[0] for line in r.stderr.splitlines()[1:]) == sorted(_table())


def _workload_flags() -> dict:
    """workload -> its `subgpu search/tune` flags, from run.sh's workload_flags case."""
    text = (DEVICE / "run.sh").read_text()
    return {m.group(1): m.group(2).split()
            for m in re.finditer(r'^\s+([a-z0-9_]+)\)\s+F="([^"]+)";;', text, re.M)}


def _study_search_flags(script: str) -> list[str]:
    """The flags a study script passes to `subgpu search` after $F, up to --out."""
    text = (DEVICE / "studies" / script).read_text().replace("\\\n", " ")
    m = re.search(r"subgpu_jax\.app\.cli search \$F (.*?) --out ", text)
    assert m, f"{script}: no `subgpu_jax.app.cli search $F ... --out` line"
    return m.group(1).split()


def test_the_tune_sweep_studys_search_accepts_every_workload(tmp_path, monkeypatch):
    """The search command of the tune_sweep study, with the flags of every workload run.sh
    names, passes every check of `subgpu search` up to the search itself (stubbed). An earlier
    version passed --expert-dtype, which dense models refuse, and failed on the device."""
    from subgpu_jax.app import cli, searchrun

    flags = _workload_flags()
    assert len(flags) == 4
    extra = _study_search_flags("tune_sweep.sh")
    seen = []

    def stub(arch, setup, pts, out, meta, opts, **kw):
        seen.append(arch.name)
        raise SystemExit(0)
    monkeypatch.setattr(searchrun, "run_search", stub)
    for w, f in flags.items():
        with pytest.raises(SystemExit) as e:
            cli.main(["search", *f, *extra, "--out", str(tmp_path / w)])
        assert e.value.code == 0, w
    assert len(seen) == 4
