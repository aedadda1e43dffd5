"""hw_runtime.gpu.partition: pool planning (pure, always runs) and green contexts (GPU, skipped in CI).

The GPU tests need torch, cuda-bindings and an NVIDIA GPU with green contexts; without them they
are skipped with the reason. Nothing here imports torch at module level.
"""

from __future__ import annotations

import pytest

from hw_runtime.gpu.partition import (GreenContextError, GreenContextUnavailable, GreenPartition,
    SmInfo, green_contexts_available, plan_pools)

H200 = SmInfo(sm_count=132, quantum=8, min_partition=8)
B200 = SmInfo(sm_count=148, quantum=8, min_partition=8)
ODD = SmInfo(sm_count=80, quantum=2, min_partition=3)


# --------------------------------------------------------------------------- pure planning

def test_sminfo_derived():
    assert H200.aligned_budget == 128 and H200.max_pools == 16 and H200.min_pool == 8
    assert B200.aligned_budget == 144 and B200.max_pools == 18
    assert ODD.min_pool == 4 and ODD.aligned_budget == 80 and ODD.max_pools == 20


@pytest.mark.parametrize("req", [[64, 64], [32, 96], [8, 120], [128], [8] * 16, [16, 16, 96]])
def test_plan_exact(req):
    planned, notes = plan_pools(req, H200)
    assert planned == tuple(req) and notes == ()


@pytest.mark.parametrize("req, words", [
    ([66, 64], "not a multiple of the device's SM quantum 8"),
    ([100], "use 96 or 104"),
    ([4, 64], "below the device's minimum pool of 8"),
    ([64, 72], "more than the 128 SMs"),
    ([136], "more than the 128 SMs"),
    ([8] * 17, "17 pools requested, the device allows at most 16"),
    ([0, 64], "positive SM count"),
    ([-8], "positive SM count"),
    ([8.0], "integer SM count"),
    ([True], "integer SM count"),
    ([], "at least one pool"),
])
def test_plan_refuses_with_one_line(req, words):
    with pytest.raises(ValueError) as ei:
        plan_pools(req, H200)
    msg = str(ei.value)
    assert words in msg and "\n" not in msg


def test_plan_round_up_reports():
    planned, notes = plan_pools([66, 52], H200, round_up=True)
    assert planned == (72, 56)
    assert notes == ("pool 0: 66 SMs requested, rounded up to 72",
                     "pool 1: 52 SMs requested, rounded up to 56")
    planned, notes = plan_pools([3], ODD, round_up=True)
    assert planned == (4,) and len(notes) == 1
    with pytest.raises(ValueError, match="more than the 128"):
        plan_pools([66, 64], H200, round_up=True)  # 72 + 64 > 128


def test_plan_numpy_ints():
    np = pytest.importorskip("numpy")
    assert plan_pools(np.array([64, 64]), H200)[0] == (64, 64)


def test_bad_arguments_before_any_gpu_access():
    with pytest.raises(ValueError, match="streams_per_pool"):
        GreenPartition([64, 64], streams_per_pool=0, open=False)
    with pytest.raises(ValueError, match="method"):
        GreenPartition([64, 64], method="magic", open=False)
    p = GreenPartition([64, 64], open=False)
    assert not p.is_open and p.granted == () and "closed" in repr(p)
    p.close()  # closing an unopened partition is a no-op


def test_available_never_raises():
    ok, why = green_contexts_available()
    assert isinstance(ok, bool) and (ok or why)


# --------------------------------------------------------------------------- GPU

_OK, _WHY = green_contexts_available()
gpu = pytest.mark.skipif(not _OK, reason=f"no green contexts here: {_WHY}")


@pytest.mark.gpu
@gpu
def test_split_grants_exact_counts_and_streams_belong():
    import torch
    with GreenPartition([64, 64], streams_per_pool=2) as part:
        info = part.info
        assert part.granted == (64, 64)
        assert part.remainder_sms == info.sm_count - 128
        assert part.verify_streams() == [[True, True], [True, True]]
        s = part.stream(1, 1)
        assert isinstance(s, torch.cuda.ExternalStream)
        a = torch.randn(256, 256, device="cuda")
        with torch.cuda.stream(s):
            c = a @ a
        s.synchronize()
        torch.testing.assert_close(c, (a.double() @ a.double()).float(), rtol=1e-3, atol=1e-2)
        with pytest.raises(ValueError):
            part.stream(2)
        with pytest.raises(ValueError):
            part.stream(0, 2)
    assert not part.is_open
    with pytest.raises(GreenContextError):
        part.stream(0)
    part.close()  # idempotent


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("req", [[32, 96], [8, 120], [16, 16, 32]])
def test_unequal_pools(req):
    with GreenPartition(req, streams_per_pool=1) as part:
        assert part.granted == tuple(req)
        assert part.method_used.startswith(("split", "bycount"))
        assert part.remainder_sms == part.info.sm_count - sum(req)
        part.verify_streams()


@pytest.mark.gpu
@gpu
def test_bycount_fallback_unequal():
    with GreenPartition([16, 48], streams_per_pool=1, method="bycount") as part:
        assert part.method_used.startswith("bycount") and part.granted == (16, 48)
        part.verify_streams()
    with GreenPartition([8, 120], streams_per_pool=1, method="chain") as part:
        assert part.method_used.startswith("bycount-chain") and part.granted == (8, 120)
        part.verify_streams()


@pytest.mark.gpu
@gpu
def test_refusals_leave_nothing_allocated():
    for req in ([66, 64], [4], [8] * 17, [136]):
        with pytest.raises(ValueError):
            GreenPartition(req)
    with GreenPartition([66, 52], round_up=True) as part:
        assert part.granted == (72, 56)
        assert part.notes[:2] == ("pool 0: 66 SMs requested, rounded up to 72",
                                  "pool 1: 52 SMs requested, rounded up to 56")
    with GreenPartition([64, 64]) as part:
        assert part.granted == (64, 64)


@pytest.mark.gpu
@gpu
def test_teardown_on_error():
    part = None
    with pytest.raises(RuntimeError, match="boom"):
        with GreenPartition([32, 32]) as part:
            raise RuntimeError("boom")
    assert part is not None and not part.is_open


@pytest.mark.gpu
@gpu
def test_probe_is_sm_proportional():
    with GreenPartition([32, 96], streams_per_pool=1) as part:
        pr = part.probe(n=4096, iters=3, check=True)
    small = pr["pools"][0]
    assert small["granted"] == 32 and 0.7 < small["ratio"] < 1.5
    assert small["slowdown"] > 2.5  # a 32-SM pool cannot run a GEMM at whole-GPU speed
    # disjoint pools: running both at once barely slows either (overlap would ~double)
    assert all(c["ratio_to_isolated"] < 1.5 for c in pr["concurrent"])


@pytest.mark.gpu
@gpu
def test_cuda_graph_on_green_stream():
    import torch
    x = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    with GreenPartition([64, 64]) as part:
        s = part.stream(0)
        with torch.cuda.stream(s):
            torch.mm(x, x, out=y)
        s.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            torch.mm(x, x, out=y)
        y.zero_()
        with torch.cuda.stream(s):
            g.replay()
        s.synchronize()
        torch.testing.assert_close(y.float(), (x.float() @ x.float()), rtol=2e-2, atol=1.0)
        del g


def test_unavailable_is_a_green_context_error():
    assert issubclass(GreenContextUnavailable, GreenContextError)


# --------------------------------------------------------------------------- split strategies
# A fake driver with the behaviour seen on the H200 (driver 580): cuDevSmResourceSplitByCount
# rounds the group size up to 8 and makes at most 15 groups of 8 SMs.

class _Res:
    def __init__(self, sms):
        self.sms = frozenset(sms)
        self.sm = type("SM", (), {"smCount": len(self.sms)})()


class _FakeDriver:
    class CUresult:
        CUDA_SUCCESS = 0

    def __init__(self, max_groups_of_8=15, split_remainders=True):
        self.max8 = max_groups_of_8
        self.split_remainders = split_remainders
        self.calls = []

    def cuGetErrorName(self, err):
        return 0, b"CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION"

    def cuDevSmResourceSplitByCount(self, n, res, flags, min_count):
        self.calls.append((n, len(res.sms), min_count))
        if not self.split_remainders and len(res.sms) != 132:
            return 1, None, 0, None
        size = -(-min_count // 8) * 8
        sms = sorted(res.sms)
        most = len(sms) // size
        if size == 8:
            most = min(most, self.max8)
        k = min(n, most)
        groups = [_Res(sms[i * size:(i + 1) * size]) for i in range(k)]
        return 0, groups, k, _Res(sms[k * size:])


def _split(planned, method="bycount", max8=15, split_remainders=True):
    drv = _FakeDriver(max8, split_remainders)
    part = GreenPartition(planned, open=False, method=method)
    part.info = H200
    groups = part._split_bycount(drv, _Res(range(132)), tuple(planned), H200, dev=None)
    sets = [frozenset().union(*(g.sms for g in gs)) for gs in groups]
    return part, drv, sets


@pytest.mark.parametrize("planned, how", [([64, 64], "bycount-gcd64"),
                                          ([32, 96], "bycount-gcd32"),
                                          ([16, 16, 32], "bycount-gcd16"),
                                          ([8, 120], "bycount-chain-desc"),
                                          ([8] * 16, "bycount-chain-desc")])
def test_split_strategies_disjoint_and_exact(planned, how):
    part, drv, sets = _split(planned)
    assert part.method_used == how
    assert [len(s) for s in sets] == list(planned)
    assert sum(len(s) for s in sets) == len(frozenset().union(*sets))  # disjoint
    assert part.remainder_sms == 132 - sum(planned)


def test_split_chain_forced_and_impossible():
    part, drv, sets = _split([32, 96], method="chain")
    assert part.method_used == "bycount-chain-desc" and [len(s) for s in sets] == [32, 96]
    assert all(c[0] == 1 for c in drv.calls)  # one group per call
    with pytest.raises(GreenContextError, match="cannot split"):
        # too few equal groups, and remainders cannot be split (no device to make a context)
        _split([8, 8, 8], max8=2, split_remainders=False)
