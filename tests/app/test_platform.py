"""subgpu_jax.app.platform: the command line runs JAX on the CPU unless JAX_PLATFORMS is set
(a CUDA JAX beside the measured PyTorch workload would take 75% of the GPU's memory). Each case
runs in a fresh interpreter, because JAX reads its platform once."""

from __future__ import annotations

import os
import subprocess
import sys


PROBE = ("import os, sys; from subgpu_jax.app.cli import main; "
         "rc = main(['space', '--model', 'llama-3.1-8b', '--gpus', '1', '--batch', '32', "
         "'--kv-history', '1024', '--stages', '2']); "
         "import jax; print('ENV', os.environ.get('JAX_PLATFORMS'), "
         "'BACKEND', jax.default_backend(), 'RC', rc)")


def _probe(env_value, pythonpath):
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    env["PYTHONPATH"] = pythonpath
    if env_value is not None:
        env["JAX_PLATFORMS"] = env_value
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                         timeout=300)
    line = [x for x in out.stdout.splitlines() if x.startswith("ENV ")]
    assert line, out.stderr[-2000:]
    return line[-1].split()


def test_unset_platform_becomes_cpu(child_pythonpath):
    words = _probe(None, child_pythonpath)
    assert words[1] == "cpu" and words[3] == "cpu" and words[5] == "0"


def test_users_platform_is_kept(child_pythonpath):
    # a list JAX accepts, kept verbatim (a CPU-only machine skips cuda)
    words = _probe("cpu,cuda", child_pythonpath)
    assert words[1] == "cpu,cuda"


def test_pin_updates_an_imported_jax(monkeypatch):
    """In a session that already imported JAX (a notebook) without choosing its platforms, the
    option is updated too."""
    import jax

    from subgpu_jax.app.platform import pin_jax_to_cpu

    monkeypatch.delenv("JAX_PLATFORMS", raising=False)
    old = jax.config.jax_platforms
    try:
        jax.config.update("jax_platforms", None)
        assert pin_jax_to_cpu() == "cpu"
        assert os.environ["JAX_PLATFORMS"] == "cpu" and jax.config.jax_platforms == "cpu"
    finally:
        jax.config.update("jax_platforms", old)


def test_empty_platform_is_jaxs_automatic_choice_and_kept(child_pythonpath):
    """JAX_PLATFORMS='' (JAX's "choose automatically") is the user's choice: kept empty (the
    probe prints nothing after ENV), the command exits 0."""
    words = _probe("", child_pythonpath)
    assert words[:2] == ["ENV", "BACKEND"] and words[-2:] == ["RC", "0"]


def test_unusable_platform_is_one_line_exit_2(child_pythonpath):
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    env["PYTHONPATH"] = child_pythonpath
    env["JAX_PLATFORMS"] = "bogus"
    out = subprocess.run([sys.executable, "-m", "subgpu_jax.app.cli", "space", "--model",
                          "llama-3.1-8b", "--gpus", "1", "--batch", "32"], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stderr[-2000:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: JAX_PLATFORMS='bogus'")
    assert "unset JAX_PLATFORMS" in lines[0]


def test_a_library_sessions_platform_choice_is_kept(monkeypatch):
    import jax

    from subgpu_jax.app.platform import pin_jax_to_cpu

    monkeypatch.delenv("JAX_PLATFORMS", raising=False)
    old = jax.config.jax_platforms
    try:
        jax.config.update("jax_platforms", "cpu,tpu")
        assert pin_jax_to_cpu() == "cpu,tpu" and "JAX_PLATFORMS" not in os.environ
    finally:
        jax.config.update("jax_platforms", old)
