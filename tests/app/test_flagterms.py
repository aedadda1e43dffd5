"""The model layer's field names told as CLI flags (subgpu_jax.app.flagterms), and the
newcomer's deployment mistakes that needed it (issue 27, a helper's first try)."""

from __future__ import annotations

import pytest

from subgpu_jax.app.cli import main
from subgpu_jax.app.flagterms import DEPLOYMENT_FLAGS, in_flag_terms


def _cli(args, capsys):
    rc = main(args)
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


@pytest.mark.parametrize("message, command, told", [
    ("deployment.global_batch=64 must be divisible by attn_dp=3 (no request may be dropped)",
     "simulate", "--batch 64 must be divisible by --dp 3 (no request may be dropped)"),
    ("deployment.global_batch=64 must be divisible by attn_dp=3 (no request may be dropped)",
     "search", "--batches 64 must be divisible by --dp 3 (no request may be dropped)"),
    ("deployment.moe_ep=3 must divide num_gpus=8", "run", "--ep 3 must divide --gpus 8"),
    ("deployment.kv_history=10 must be >= input_len=20: the prompt", "simulate",
     "--kv-history 10 must be >= --input-len 20: the prompt"),
    ("sms: stage 0 has 3 SMs", "simulate", "sms: stage 0 has 3 SMs"),          # untouched
    ("deployment.global_batches=1", "search", "deployment.global_batches=1"),  # whole words
    # what the user typed is never rewritten: only Deployment's own messages are
    ("config.json /tmp/global_batch.json: field 'x'", "simulate",
     "config.json /tmp/global_batch.json: field 'x'"),
    ("cuts: got 'kv_history'", "simulate", "cuts: got 'kv_history'"),
])
def test_in_flag_terms(message, command, told):
    assert in_flag_terms(message, command) == told


def test_every_field_names_a_flag_of_the_cli(capsys):
    """Each flag the table names is accepted by `subgpu simulate` (argparse knows it)."""
    from subgpu_jax.app.cli import build_parser
    known = set()
    for act in build_parser()._subparsers._group_actions[0].choices["simulate"]._actions:
        known.update(act.option_strings)
    assert set(DEPLOYMENT_FLAGS.values()) <= known


def test_gpus_that_leave_requests_over_cli(capsys):
    """`--gpus 3` with a batch of 64: DP 3 does not divide it; the line names the flags the
    user typed (issue 40: not a `--dp 3` they never gave)."""
    rc, _, err = _cli(["simulate", "--gpus", "3", "--batch", "64", "--sms", "even"], capsys)
    assert rc == 2
    assert err.strip() == ("error: --batch 64 must be divisible by the DP 3 that --gpus 3 gives "
                           "(no request may be dropped)")


def test_gpus_hint_says_what_changes_per_gpu(capsys):
    """A one-GPU dense deployment that does not fit: the --gpus line says what each GPU then
    holds (TP shards the KV cache, the requests per GPU stay), not "256 instead of 256"."""
    rc, _, err = _cli(["search", "--model", "llama-3.1-8b", "--hardware", "H200", "--gpus", "1",
                       "--kv-history", "32768", "--batches", "256", "--no-progress",
                       "--out", "/nonexistent-dir/x"], capsys)
    assert rc == 2
    lines = err.strip().splitlines()
    assert "lower --batches or the KV length" in lines[0]
    g = [ln for ln in lines if ln.strip().startswith("--gpus")]
    assert len(g) == 1 and "GB per GPU instead of" in g[0] and "instead of 256)" not in g[0]
    b = [ln for ln in lines if ln.strip().startswith("--batches")]
    assert b and "with 1 GPU," in b[0]
