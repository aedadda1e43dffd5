"""``subgpu search --min-tokens-per-user X``: frontiers and matched gains keep only the points
that meet the per-token latency bound; records.csv keeps them all."""

import json

from subgpu_jax.app.cli import main
from subgpu_jax.app.searchout import write_outputs


def _rec(mode, per_user, per_gpu, D=1, speedup=1.0):
    return {"mode": mode, "D": D, "per_user_tok_s": per_user, "per_gpu_tok_s": per_gpu,
            "makespan_us": 1e6 / per_user, "speedup_vs_temporal": speedup}


def test_filter_keeps_only_points_meeting_the_bound(tmp_path):
    """Temporal points (per-user, per-GPU) = (100, 500), (40, 900); SubGPU (110, 520),
    (45, 1000). With X = 50 tok/s/user only (100, 500) and (110, 520) remain: the frontiers
    hold one point each, and the best SubGPU record is the (110, 520) one, not (45, 1000)."""
    recs = [_rec("temporal", 100, 500), _rec("temporal", 40, 900),
            _rec("subgpu", 110, 520, 2, 1.1), _rec("subgpu", 45, 1000, 2, 1.2)]
    s = write_outputs(recs, str(tmp_path), "t", None, min_tokens_per_user=50)
    assert [r["per_user_tok_s"] for r in s["frontier_temporal"]] == [100]
    assert [r["per_user_tok_s"] for r in s["frontier_subgpu"]] == [110]
    assert s["best_speedup_record"]["per_user_tok_s"] == 110
    assert s["records"] == 4 and s["records_meeting_it"] == 2
    assert json.loads((tmp_path / "summary.json").read_text())["min_tokens_per_user"] == 50
    assert (tmp_path / "records.csv").read_text().count("\n") == 5
    s_all = write_outputs(recs, str(tmp_path), "t", None)
    assert len(s_all["frontier_temporal"]) == 2 and "min_tokens_per_user" not in s_all


def test_bad_bound_is_one_line(capsys):
    rc = main(["search", "--min-tokens-per-user", "-3", "--out", "/tmp/x-never"])
    err = capsys.readouterr().err
    assert rc == 2 and "min-tokens-per-user" in err and err.count("\n") == 1


def test_search_grid_carries_topology_and_routing():
    """build_grid's deploy_options reach every point's Deployment, so the search charges
    cross-node collectives and the busiest EP rank like simulate does."""
    from subgpu_jax.app.sweep import build_grid
    from subgpu_jax.model.models import get_model

    opts = dict(nvlink_domain=8, scaleout_GBps=25.0, routing="multinomial",
                routing_imbalance=1.2)
    pts = build_grid(get_model("gpt-oss-20b"), 16, [128], [2], [2],
                     parallelisms=[(8, 2, 16)], deploy_options=opts)
    assert pts and all(getattr(p.deploy, k) == v for p in pts for k, v in opts.items())
