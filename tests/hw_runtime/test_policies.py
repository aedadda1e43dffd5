"""hw_runtime.gpu.policies: the one registry of the kernel options feeds run, calibrate and tune,
checks values where no parser stands in the way, and names what old calibrations used."""

from __future__ import annotations

import pytest

from hw_runtime.gpu import policies as P
from hw_runtime.gpu.blas import GEMM_POLICIES
from hw_runtime.gpu.decode_attn import ATTENTION
from hw_runtime.gpu.fused import ELEMENTWISE
from hw_runtime.gpu.moe_gemm import MOE_GEMM


def test_registry_matches_the_kernel_modules():
    got = {p.dest: p.choices for p in P.KERNEL_POLICIES}
    assert got == {"gemm": GEMM_POLICIES, "elementwise": ELEMENTWISE, "attention": ATTENTION,
                   "moe_gemm": MOE_GEMM}
    assert all(p.default in p.choices and p.legacy in p.choices for p in P.KERNEL_POLICIES)
    assert P.LEGACY == {"gemm": "stock", "elementwise": "torch", "attention": "sdpa",
                        "moe_gemm": "bmm"}


def test_every_runtime_command_takes_every_policy(runtime_options):
    for cmd, acts in runtime_options.items():
        for p in P.KERNEL_POLICIES:
            a = acts[p.dest]
            assert tuple(a.choices) == p.choices and a.default == p.default, (cmd, p.dest)
            assert a.option_strings == [p.flag]
            assert f"Default: {p.default}" in a.help
    # the help quotes the measured choice (docs/results.md, "Kernel choices")
    assert "triton 1-12% slower" in runtime_options["run"]["attention"].help % {}
    assert "flashinfer 1-3%" in runtime_options["run"]["attention"].help % {}


def test_check_policies():
    P.check_policies({"gemm": "tuned", "moe_gemm": "bmm"})
    with pytest.raises(ValueError, match="--moe-gemm must be one of auto, triton, bmm, got 'x'"):
        P.check_policies({"moe_gemm": "x"})
