"""`bench proxy`'s Java part: its arms (direct, proxy, each variant) take turns in every place
across rounds, so that no arm always runs on a cold or a warmed machine."""

from __future__ import annotations

from sidecar.bench.proxy import rotated

ARMS = ["java, direct", "java, proxy", "variant ZDICT_PURE_PYTHON=1"]


def test_each_arm_runs_once_in_every_place_over_as_many_rounds_as_arms() -> None:
    orders = [rotated(ARMS, turn) for turn in range(len(ARMS))]
    assert orders[0] == ARMS
    for place in range(len(ARMS)):
        assert sorted(order[place] for order in orders) == sorted(ARMS)


def test_the_variant_does_not_always_run_last() -> None:
    assert {rotated(ARMS, turn)[-1] for turn in range(4)} == set(ARMS)


def test_the_order_turns_back_after_as_many_rounds_as_arms() -> None:
    assert rotated(ARMS, len(ARMS)) == ARMS
    assert rotated([], 3) == []
