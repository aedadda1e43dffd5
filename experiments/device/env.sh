# The device environment, sourced by experiments/device/run.sh on the GPU machine (no network,
# no install): declares the `subgpu.commands` entry point of hw_runtime in a dist-info folder on
# the path (importlib.metadata finds it there), so `python3 -m subgpu_jax.app.cli run ...` has
# `run`, `calibrate` and `tune`, and puts the checkout on PYTHONPATH.
mkdir -p /tmp/ep/subgpu_device-0.dist-info
printf 'Metadata-Version: 2.1\nName: subgpu-device\nVersion: 0\n' > /tmp/ep/subgpu_device-0.dist-info/METADATA
printf '[subgpu.commands]\nhw = hw_runtime.commands:add_commands\ntune = hw_runtime.tune.cli:add_tune_command\n' > /tmp/ep/subgpu_device-0.dist-info/entry_points.txt
export PYTHONPATH=.:/tmp/ep PYTHONUNBUFFERED=1
# JAX (the scorers) on the CPU in every study, as `subgpu` runs it (subgpu_jax/app/platform.py):
# a CUDA JAX in a process that measures would take 75% of the GPU's memory.
export JAX_PLATFORMS=${JAX_PLATFORMS:-cpu}
# Pure-Python needs the device image lacks (cachetools, see pyproject.toml) travel as wheels in
# .whl/ (ignored by git; name it in the call's `carry`); installed into /tmp/site when present.
if ls .whl/*.whl >/dev/null 2>&1; then
  PIP_ROOT_USER_ACTION=ignore python3 -m pip install -q --disable-pip-version-check --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
# Compiled wheels too large to travel as wheels (numba + llvmlite for Python 3.12: the wheels are
# 64 MB, the tree that travels at most 64 MiB) travel as one xz archive of their installed files,
# .whl/*.tar.xz, unpacked into /tmp/site once per machine.
for t in .whl/*.tar.xz; do
  [ -f "$t" ] || continue
  [ -f "/tmp/site/.$(basename "$t").done" ] || { mkdir -p /tmp/site && tar xJf "$t" -C /tmp/site \
    && touch "/tmp/site/.$(basename "$t").done"; }
  case ":$PYTHONPATH:" in *:/tmp/site:*) ;; *) export PYTHONPATH=$PYTHONPATH:/tmp/site;; esac
done
# FlashInfer's JIT (``--attention flashinfer``, shipped as a wheel in .whl/) builds its kernels
# under this folder; kept while the machine stays warm, so a second call reuses them.
export FLASHINFER_WORKSPACE_BASE=${FLASHINFER_WORKSPACE_BASE:-/tmp/flashinfer}
