"""At-least-once bookkeeping: nothing is committable past an unacknowledged record."""

from __future__ import annotations

from sidecar.relay.offsets import OffsetTracker


def committable(tracker: OffsetTracker) -> dict[tuple[str, int], int]:
    return {(tp.topic, tp.partition): tp.offset for tp in tracker.to_commit()}


def test_in_order_acks_make_the_next_offset_committable() -> None:
    t = OffsetTracker()
    for offset in range(5):
        t.sent("in", 0, offset)
    for offset in range(3):
        t.acked("in", 0, offset)
    assert committable(t) == {("in", 0): 3}
    assert t.in_flight() == 2


def test_an_unacknowledged_record_holds_back_every_later_ack() -> None:
    t = OffsetTracker()
    for offset in (10, 11, 12, 13):
        t.sent("in", 1, offset)
    t.acked("in", 1, 12)
    t.acked("in", 1, 13)
    assert committable(t) == {}
    t.acked("in", 1, 11)
    assert committable(t) == {}
    t.acked("in", 1, 10)
    assert committable(t) == {("in", 1): 14}


def test_partitions_are_tracked_independently() -> None:
    t = OffsetTracker()
    t.sent("a", 0, 0)
    t.sent("a", 1, 0)
    t.sent("b", 0, 5)
    t.acked("a", 1, 0)
    t.acked("b", 0, 5)
    assert committable(t) == {("a", 1): 1, ("b", 0): 6}


def test_committed_offsets_are_not_offered_again_until_they_move() -> None:
    t = OffsetTracker()
    t.sent("in", 0, 0)
    t.acked("in", 0, 0)
    t.committed(t.to_commit())
    assert t.to_commit() == []
    t.sent("in", 0, 1)
    t.acked("in", 0, 1)
    assert committable(t) == {("in", 0): 2}


def test_acks_for_a_forgotten_partition_are_ignored() -> None:
    t = OffsetTracker()
    t.sent("in", 0, 0)
    t.forget("in", 0)
    t.acked("in", 0, 0)
    assert t.to_commit() == [] and t.in_flight() == 0
