# Study `tests` (issue 27): the whole test suite on the GPU machine; installs nothing (the device
# image's Python has jax, torch and cuda-bindings; env.sh declares the entry point, so the CLI
# tests see `run` and `calibrate` as an installed subgpu does). The GPU tests (tests/hw_runtime,
# marked `gpu`) run here instead of skipping. Two passes within one 10-minute call:
# tests/hw_runtime one at a time (none shares the GPU), then the rest spread over 12 of the
# host's cores when pytest-xdist is there (its wheel travels in .whl/), verbose so that the log
# names every failure even when the pass is cut by its time limit. JAX runs on the CPU (env.sh),
# as `subgpu` runs it. Writes the pytest logs and JUnit XML under $OUT.
need_out
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader || true
python3 -c "import torch, jax; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), '| jax', jax.__version__, jax.devices())"
PAR=$(python3 -c "import xdist" 2>/dev/null && echo "-n 12" || echo "")
export XLA_PYTHON_CLIENT_PREALLOCATE=false
timeout 270 python3 -m pytest tests/hw_runtime -q -rs --junitxml="$OUT/device_tests_hw.xml" \
    2>&1 | tee "$OUT/device_tests_hw.log" | tail -30
rc1=${PIPESTATUS[0]}
timeout 300 python3 -m pytest tests -v -rfEs --ignore=tests/hw_runtime $PAR \
    --junitxml="$OUT/device_tests_rest.xml" 2>&1 | tee "$OUT/device_tests_rest.log" \
    | grep -v -E " (PASSED|SKIPPED|XFAIL)" | tail -40
rc2=${PIPESTATUS[0]}
echo "tests/hw_runtime: exit $rc1; the rest: exit $rc2"
[ "$rc1" = 0 ] && [ "$rc2" = 0 ]
