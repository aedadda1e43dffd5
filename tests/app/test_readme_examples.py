"""The README's examples run as written (issue 40): every ``subgpu`` command of its code blocks
parses; the CPU example of "Your own model" (copy a config.json, ``subgpu simulate``) runs in a
fresh folder and prints the parameter line the README quotes. GPU commands (``calibrate``,
``run``, ``tune``) and searches are only parsed: the first needs a GPU, the second a minute."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from subgpu_jax.app.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def _blocks(lang: str) -> list[list[str]]:
    """The README's ``lang`` code blocks after the set-up block, each as its command lines
    (continuation lines joined, comments dropped)."""
    out = []
    for body in re.findall(rf"```{lang}\n(.*?)```", README, re.S):
        text = body.replace("\\\n", " ")
        out.append([ln.split("  #")[0].strip() for ln in text.splitlines() if ln.strip()])
    return out


BASH = _blocks("bash")[1:]  # the set-up block is tests/app/test_front_door.py's
COMMANDS = [ln for block in BASH for ln in block if ln.startswith("subgpu ")]


def test_the_readme_has_examples():
    assert len(COMMANDS) >= 5 and any(c.startswith("subgpu simulate") for c in COMMANDS)


@pytest.mark.parametrize("line", COMMANDS)
def test_every_readme_command_parses(line):
    args = shlex.split(line)[1:]
    a = build_parser().parse_args(args)  # SystemExit (exit 2) on anything argparse refuses
    assert a.cmd == args[0]


def test_own_model_example_runs_as_written(tmp_path, monkeypatch, capsys):
    """The block of "Your own model", in a fresh folder holding the clone's tests/data: the
    shell lines run, then ``subgpu simulate`` prints the README's parameter line."""
    block = next(b for b in BASH if any("subgpu simulate" in ln for ln in b))
    (tmp_path / "tests").symlink_to(ROOT / "tests")
    monkeypatch.chdir(tmp_path)
    for line in block:
        if line.startswith("subgpu simulate"):
            rc = main(shlex.split(line)[1:])
            cap = capsys.readouterr()
            assert rc == 0, cap.err
            quoted = next(b for b in _blocks("text") if "B parameters" in b[0])[0]
            assert quoted in cap.out, cap.out[:600]
            first = cap.out.splitlines()[0]
            assert first.startswith("workload  qwen2.5-7b on 8x H200"), first  # its folder's name
        elif not line.startswith("subgpu "):  # mkdir, cp: the shell lines before it
            subprocess.run(line, shell=True, check=True, cwd=tmp_path)


def test_usage_is_the_reference_without_history():
    """docs/usage.md is the reference (issue 40): no commit hashes, no timing history (that is
    docs/results.md's "How long the main job takes"), no crash-test tables (reliability.md)."""
    text = (ROOT / "docs" / "usage.md").read_text()
    hashes = [h for h in re.findall(r"\b[0-9a-f]{7,40}\b", text)
              if re.search(r"[a-f]", h) and re.search(r"[0-9]", h)]
    assert not hashes, hashes
    for history in ("at commit", "readme_main_command_time", "records lost", "load average"):
        assert history not in text, history
