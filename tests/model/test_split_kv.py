"""Issue 41 item 8: decode attention is split as the runtime's split-KV kernels split it.

The model gave decode attention batch x KV heads x ceil(KV / 1024) CTAs, so at batch 1 a
Llama-3.1-8B attention (8 KV heads) had 8 CTAs at KV 900 and could use only 8 of the H100's 132
SMs; at KV 1,025 it had 16 and got faster as its history grew. The runtime's kernels
(``model.kvsplit.num_kv_splits``, used by ``hw_runtime.gpu.decode_attn`` and
``flashinfer_attn``) cut each (request, KV head)'s history in up to 64 splits of >= 128
positions until the grid fills two waves of the pool.

Oracles: hand-computed CTA counts; the runtime's rule at the H100's 132 SMs giving the same
usable SMs; attention time nondecreasing in KV; committed calibrations (attention keyed by the
old CTA count) still time their attention kernels.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from hw_runtime.gpu.kv_split import num_kv_splits as runtime_rule
from subgpu_jax.model.calibration import Calibration, kernel_key, stored_key
from subgpu_jax.model.deployment import Deployment
from subgpu_jax.model.graph import StaticDurationModel, build_graph
from subgpu_jax.model.hardware import get_hardware
from subgpu_jax.model.kvsplit import SPLIT_SMS, num_kv_splits
from subgpu_jax.model.models import get_model

ROOT = Path(__file__).resolve().parents[2]
H100 = get_hardware("H100")


def _attn(kv: int, G: int = 1, model: str = "llama-3.1-8b"):
    g = build_graph(get_model(model), Deployment(num_gpus=1, attn_tp=1, attn_dp=1, moe_ep=1,
                                                 global_batch=G, kv_history=kv, input_len=kv))
    return next(k for k in g.kernels if k.op == "attn")


def test_batch_one_ctas_by_hand():
    """Batch 1, 8 KV heads: 8 programs. KV 900: splits = min(ceil(2 x 148 / 8) = 37,
    ceil(900 / 128) = 8, 64) = 8, so 64 CTAs (was 8 x ceil(900 / 1024) = 8). KV 1,025:
    min(37, 9, 64) = 9, 72 CTAs (was 16). KV 32,768: min(37, 256, 64) = 37, 296 CTAs."""
    assert SPLIT_SMS == 148
    assert (_attn(900).ctas, _attn(1025).ctas, _attn(32768).ctas) == (64, 72, 296)


def test_usable_sms_equal_the_runtimes_on_every_pool():
    """The runtime splits for the pool it runs on (num_kv_splits(programs, kv, pool)); the
    model splits once for 148 SMs. A kernel uses min(pool, CTAs) SMs: equal for every H100 /
    H200 pool (8..132 in steps of 8) and B200 pool (2..148), batch 1..64, KV 64..32,768."""
    for programs in (1, 8, 64, 512):
        for kv in (64, 900, 1025, 4096, 32768):
            model_ctas = programs * num_kv_splits(programs, kv, SPLIT_SMS)
            for pool in list(range(8, 133, 8)) + list(range(2, 149, 2)):
                rt = programs * runtime_rule(programs, kv, pool)
                assert min(pool, model_ctas) == min(pool, rt), (programs, kv, pool)


def test_attention_time_grows_with_the_history_at_batch_one():
    """On the whole H100, batch 1: KV 1,025 takes longer than KV 900 (before, the jump from 8
    to 16 CTAs made it faster). Within 900..1,100 the time falls at most 0.5% where a program
    gains a split (every 128 positions, as in the runtime: 64 -> 72 CTAs at 1,025)."""
    sd = StaticDurationModel(H100)
    ts = [float(sd.kernel_time_us(_attn(kv), H100.num_sms)) for kv in range(900, 1101, 25)]
    assert ts[5] > ts[0]  # 1,025 vs 900
    assert all(b >= a * 0.995 for a, b in zip(ts, ts[1:])), ts


def test_large_batches_need_no_split():
    """G = 256, 8 KV heads: 2,048 programs fill 2 x 148 slots already: 1 split, 2,048 CTAs."""
    assert _attn(2048, G=256).ctas == 2048


def test_calibrations_keyed_by_the_old_cta_count_still_match():
    """The committed Llama-3.1-8B calibration (1 GPU, G = 256, KV 2,048, H200) stores its
    attention under ``attn|...|4096`` (2,048 programs x ceil(2048 / 1024) = 2 splits); the key
    reads back as ``attn|...|split`` and times the model's attention kernel (now 2,048 CTAs)."""
    f = ROOT / "experiments/results/tune/llama8b_1gpu_g256_kv2k/calibration_tuned.json"
    cal = Calibration.load(str(f))
    k = _attn(2048, G=256)
    assert kernel_key(k).endswith("|split") and cal.has(k)
    assert stored_key("attn|attn_full|1|2|0|4096") == "attn|attn_full|1|2|0|split"
    assert stored_key("qkv|norm_qkv|1|2|0|384") == "qkv|norm_qkv|1|2|0|384"
    assert cal.kernel_time_us(k, 132) == pytest.approx(
        next(t for key, (s, t) in cal.tables.items() if key == kernel_key(k))[-1])
    assert math.isfinite(cal.kernel_time_us(k, 64))
