"""``app.pool.Scheduler``: which grid point a free worker of ``subgpu search --workers`` scores
next (issue 42 item 2: points of one structure on the worker that compiled it).

Oracles: hand-traced schedules (the docstring's example and the plain order without groups),
and invariants over random groupings and random worker orders (hypothesis): every point is
handed out exactly once; a worker is handed a point of another worker's group only when no
point of its own groups and no point of a free group is left; ``searchrun.structure_key``
groups points that differ only in the batch."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from subgpu_jax.app.pool import Scheduler
from subgpu_jax.app.searchrun import structure_key
from subgpu_jax.app.sweep import GridPoint
from subgpu_jax.model.deployment import Deployment


def test_docstring_example():
    s = Scheduler(list("aabb"), group=lambda p: p)
    assert [s.next_for(0), s.next_for(1), s.next_for(0), s.next_for(1), s.next_for(0)] == \
        [0, 2, 1, 3, None]


def test_no_groups_is_the_given_order():
    s = Scheduler(list(range(5)))
    assert [s.next_for(w % 2) for w in range(6)] == [0, 1, 2, 3, 4, None]


def test_a_worker_keeps_its_group_then_takes_a_free_one_then_steals():
    # groups in start order: a a a b c; worker 0 holds a, worker 1 b then c, then steals a
    s = Scheduler(list("aaabc"), group=lambda p: p)
    assert s.next_for(0) == 0          # a
    assert s.next_for(1) == 3          # b: a is held by worker 0
    assert s.next_for(1) == 4          # c: b has no point left, c is free
    assert s.next_for(1) == 1          # only a's points are left: the first one
    assert s.next_for(0) == 2 and s.next_for(0) is None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=0, max_size=25),
       st.lists(st.integers(0, 3), min_size=40, max_size=40))
def test_every_point_once_and_steals_only_when_needed(groups, order):
    s = Scheduler(list(range(len(groups))), group=lambda i: groups[i])
    held: dict[int, set] = {}
    seen = []
    for w in order:
        left = list(s.left)
        i = s.next_for(w)
        if i is None:
            assert not left
            continue
        seen.append(i)
        mine = held.setdefault(w, set())
        others = set().union(*(h for v, h in held.items() if v != w))
        if groups[i] not in mine:
            # no point of its own groups was left
            assert not any(groups[j] in mine for j in left)
            if groups[i] in others:   # a steal: no free group was left, and it is the first
                assert all(groups[j] in others for j in left) and i == left[0]
            else:                     # the first point of a free group
                assert i == next(j for j in left if groups[j] not in others)
        else:
            assert i == next(j for j in left if groups[j] in mine)
        mine.add(groups[i])
    rest = []
    while (i := s.next_for(0)) is not None:
        rest.append(i)
    assert sorted(seen + rest) == list(range(len(groups)))


def test_structure_key_ignores_the_batch_and_the_deployment():
    """The compiled programs' shapes: stages, microbatches, policy and streams (the batch and
    the deployment's shape only change the kernel tables, which are arguments)."""
    def pt(G, D=2, m=2, tp=8, ep=8, policy="wavefront"):
        return GridPoint(Deployment(num_gpus=8, attn_tp=tp, attn_dp=8 // tp, moe_ep=ep,
                                    global_batch=G), D, m, policy=policy)
    assert structure_key(pt(512)) == structure_key(pt(2048))
    assert structure_key(pt(512)) == structure_key(pt(512, tp=4, ep=2))
    assert structure_key(pt(512)) != structure_key(pt(512, D=3))
    assert structure_key(pt(512)) != structure_key(pt(512, m=4))
    assert structure_key(pt(512)) != structure_key(pt(512, policy="layer_major"))