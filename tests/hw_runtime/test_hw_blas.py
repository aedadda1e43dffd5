"""The GEMM launch policies (``hw_runtime.gpu.blas``) on the CPU, with a fake torch whose
"GPU" charges each launch a time that depends on the SM target in force."""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from hw_runtime.gpu.blas import (GEMM_POLICIES, TUNE_MARGIN, GemmPolicy, check_gemm_policy,
                                 tuning_targets)


class _Clock:
    now_us = 0.0


class _Event:
    def __init__(self, enable_timing=False):
        self.t = None

    def record(self, stream=None):
        self.t = _Clock.now_us

    def synchronize(self):
        pass

    def elapsed_time(self, other):          # milliseconds, like torch.cuda.Event
        return (other.t - self.t) / 1e3


class _Props:
    multi_processor_count = 132


class FakeTorch:
    """Just what ``GemmPolicy`` touches: the SM carve-out, cuBLASLt selection, events."""

    def __init__(self):
        self.carveout = None
        self.lib = "cublas"
        self.capturing = False
        self.sticky = False          # a failed launch poisons the device (synchronize raises)
        fake = self

        class _C:
            @staticmethod
            def _set_sm_carveout_experimental(c):
                fake.carveout = c

            @staticmethod
            def _get_sm_carveout_experimental():
                return fake.carveout

        class cuda:
            Event = _Event

            @staticmethod
            def is_available():
                return True

            @staticmethod
            def get_device_properties(d):
                return _Props()

            @staticmethod
            def synchronize():
                if fake.sticky:
                    raise RuntimeError("CUDA error: an illegal memory access was encountered")

            @staticmethod
            def is_current_stream_capturing():
                return fake.capturing

            @staticmethod
            @contextmanager
            def stream(s):
                yield

        class backends:
            class cuda:
                @staticmethod
                def preferred_blas_library(name=None):
                    if name is not None:
                        fake.lib = name
                    return fake.lib

        self._C, self.cuda, self.backends = _C, cuda, backends


def _kernel(torch, cost_of_target):
    """A launch that costs ``cost_of_target[target]`` µs (target None = no carve-out)."""
    def fn():
        c = torch.carveout
        _Clock.now_us += cost_of_target[None if c is None else 132 - c]
    return fn


def test_policy_names_and_errors():
    assert GEMM_POLICIES == ("stock", "pool", "tuned")
    assert check_gemm_policy("tuned") == "tuned"
    with pytest.raises(ValueError, match="gemm policy must be one of stock, pool, tuned"):
        check_gemm_policy("fast")
    with pytest.raises(ValueError, match="gemm policy"):
        GemmPolicy(FakeTorch(), "cublas")


def test_tuning_targets_by_hand():
    """96 SMs of 132: the pool 96, 3/4 of it 72, half 48, twice it capped at 131."""
    assert tuning_targets(96, 132) == [131, 96, 72, 48]
    assert tuning_targets(64, 132) == [128, 64, 48, 32]
    assert tuning_targets(16, 132) == [32, 16, 12, 8]
    with pytest.raises(ValueError, match="sms must be a positive integer"):
        tuning_targets(0, 132)


def test_stock_never_touches_the_carveout():
    t = FakeTorch()
    p = GemmPolicy(t, "stock")
    assert not p.active and t.lib == "cublas"
    p.prepare("k", 64, lambda: None, None)
    p.set_pool(32)
    assert t.carveout is None


def test_pool_sets_the_pool_as_target_and_resets():
    t = FakeTorch()
    p = GemmPolicy(t, "pool")
    assert p.active and t.lib == "cublaslt"
    p.prepare("k", 96, lambda: None, None)
    assert t.carveout == 132 - 96
    p.prepare("k", None, lambda: None, None)      # whole GPU: no target
    assert t.carveout is None
    p.set_pool(200)                                # a "pool" as large as the GPU: no target
    assert t.carveout is None
    p.set_pool(48)
    p.reset()
    assert t.carveout is None


def test_tuned_picks_the_fastest_target_once():
    """Costs: no target 100 µs, target 96 65 µs (the fastest), others slower: the choice is
    96, i.e. carve-out 36, and the kernel is timed once per (key, pool)."""
    t = FakeTorch()
    p = GemmPolicy(t, "tuned")
    cost = {None: 100.0, 131: 110.0, 96: 65.0, 72: 80.0, 48: 120.0}
    calls = []
    fn = _kernel(t, cost)

    def counted():
        calls.append(1)
        fn()
    p.prepare("mlp_up", 96, counted, None)
    assert t.carveout == 132 - 96
    assert p.choices[("mlp_up", 96)] == 36
    assert p.timings[("mlp_up", 96)]["96"] == pytest.approx(65.0)
    n = len(calls)
    p.prepare("mlp_up", 96, counted, None)          # cached: no new timing
    assert len(calls) == n and t.carveout == 36


def _failing(torch, cost_of_target, bad):
    """As ``_kernel``, but a launch under the SM target ``bad`` raises as cuBLAS does."""
    ok = _kernel(torch, cost_of_target)

    def fn():
        c = torch.carveout
        if c is not None and 132 - c == bad:
            raise RuntimeError("CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling "
                               "`cublasGemmEx(...)`")
        ok()
    return fn


def test_tuned_drops_a_target_whose_launch_fails():
    """8-SM pool: targets 16, 8, 6, 4 (tuning_targets); target 4 fails (as measured on the
    H200), target 6 is the fastest of the rest: chosen, and 4 is recorded as failed."""
    t = FakeTorch()
    p = GemmPolicy(t, "tuned")
    cost = {None: 100.0, 16: 90.0, 8: 80.0, 6: 70.0, 4: 10.0}
    p.prepare("qkv", 8, _failing(t, cost, bad=4), None)
    assert p.choices[("qkv", 8)] == 132 - 6 and t.carveout == 132 - 6
    assert p.timings[("qkv", 8)]["4"] == "failed"
    assert p.timings[("qkv", 8)]["6"] == pytest.approx(70.0)


def test_tuned_reraises_a_failure_that_leaves_the_device_unusable():
    t = FakeTorch()
    t.sticky = True
    p = GemmPolicy(t, "tuned")
    cost = {None: 100.0, 16: 90.0, 8: 80.0, 6: 70.0, 4: 10.0}
    with pytest.raises(RuntimeError, match="illegal memory access"):
        p.prepare("qkv", 8, _failing(t, cost, bad=4), None)


def test_tuned_reraises_when_the_untargeted_launch_fails():
    t = FakeTorch()
    p = GemmPolicy(t, "tuned")

    def boom():
        raise RuntimeError("CUDA error: CUBLAS_STATUS_EXECUTION_FAILED")
    with pytest.raises(RuntimeError, match="CUBLAS_STATUS_EXECUTION_FAILED"):
        p.prepare("qkv", 8, boom, None)


def test_tuned_keeps_no_target_within_the_margin():
    """A target only (TUNE_MARGIN / 2) faster than no target is noise: keep no target."""
    t = FakeTorch()
    p = GemmPolicy(t, "tuned")
    fast = 100.0 * (1.0 - TUNE_MARGIN / 2)
    cost = {None: 100.0, 128: 100.0, 64: fast, 48: 100.0, 32: 100.0}
    p.prepare("norm", 64, _kernel(t, cost), None)
    assert p.choices[("norm", 64)] is None and t.carveout is None


def test_tuned_inside_a_capture_falls_back_to_the_pool_target():
    t = FakeTorch()
    p = GemmPolicy(t, "tuned")
    t.capturing = True
    p.prepare("new", 64, lambda: pytest.fail("must not time inside a capture"), None)
    assert t.carveout == 132 - 64 and ("new", 64) not in p.choices


def test_tuning_targets_refuse_a_pool_as_large_as_the_gpu():
    for sms in (132, 133, 200):
        with pytest.raises(ValueError, match="sms must be smaller than the device's 132 SMs"):
            tuning_targets(sms, 132)


def test_stock_after_another_policy_restores_the_default_library(monkeypatch):
    """cuBLASLt, set by a ``pool``/``tuned`` policy, is process-wide: a ``stock`` policy made
    later in the same process puts PyTorch's default library back."""
    import hw_runtime.gpu.blas as blas
    monkeypatch.setattr(blas, "_DEFAULT_BLAS", None)
    t = FakeTorch()
    GemmPolicy(t, "tuned")
    assert t.lib == "cublaslt"
    GemmPolicy(t, "stock")
    assert t.lib == "cublas"
