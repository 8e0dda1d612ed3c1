"""At-least-once bookkeeping: nothing is committable past a record not acknowledged, whether its
acknowledgement is a report of its own or the report of a later record of its unit."""

from __future__ import annotations

from sidecar.relay.offsets import OffsetTracker, Unit


def committable(tracker: OffsetTracker) -> dict[tuple[str, int], int]:
    return {(tp.topic, tp.partition): tp.offset for tp in tracker.to_commit()}


def batch(t: OffsetTracker, first: int, last: int, topic: str = "in", partition: int = 0) -> Unit:
    """As the relay produces one consumed batch of a partition: one unit, one report."""
    unit = t.open(topic, partition, first, 0.0, 0)
    unit.count += last - first + 1
    unit.last = last
    t.reported(topic, partition, unit)
    return unit


def test_one_report_stands_for_the_batch_of_its_partition() -> None:
    t = OffsetTracker()
    first, second = batch(t, 0, 99), batch(t, 100, 149)
    assert t.in_flight() == 150 and t.awaiting() == 2
    t.acked("in", 0, first)
    assert committable(t) == {("in", 0): 100}
    t.acked("in", 0, second)
    assert committable(t) == {("in", 0): 150}
    assert t.in_flight() == 0 and t.awaiting() == 0


def test_a_unit_not_acknowledged_holds_back_every_later_one() -> None:
    t = OffsetTracker()
    units = [batch(t, 10 * i, 10 * i + 9, partition=1) for i in range(4)]
    t.acked("in", 1, units[2])
    t.acked("in", 1, units[3])
    assert committable(t) == {}
    t.acked("in", 1, units[1])
    assert committable(t) == {}
    t.acked("in", 1, units[0])
    assert committable(t) == {("in", 1): 40}


def test_a_dead_letter_inside_a_batch_is_waited_for_on_its_own() -> None:
    # Offsets 10-14: 12 goes to the dead-letter topic (its own report), the others to the
    # output, whose report (on 14) does not stand for 12.
    t = OffsetTracker()
    group = t.open("in", 0, 10, 0.0, 0)
    dead = t.single("in", 0, 12, 0.0, 0)
    group.count, group.last = 4, 14
    t.reported("in", 0, group)
    t.acked("in", 0, group)
    assert committable(t) == {("in", 0): 12}
    t.acked("in", 0, dead)
    assert committable(t) == {("in", 0): 15}


def test_a_dead_letter_acknowledged_first_commits_nothing_past_the_batch_start() -> None:
    t = OffsetTracker()
    group = t.open("in", 0, 10, 0.0, 0)
    dead = t.single("in", 0, 12, 0.0, 0)
    group.count, group.last = 4, 14
    t.reported("in", 0, group)
    t.acked("in", 0, dead)
    assert committable(t) == {}
    t.acked("in", 0, group)
    assert committable(t) == {("in", 0): 15}


def test_a_unit_whose_report_was_not_produced_waits_for_the_next_report() -> None:
    t = OffsetTracker()
    unit = batch(t, 0, 9)
    unit.count -= 1  # its last record went to the dead-letter topic instead
    t.unreported("in", 0, unit)
    assert t.awaiting() == 0 and t.in_flight() == 9
    # The next batch of the partition joins the open unit: its report stands for both.
    assert t.open("in", 0, 10, 1.0, 0) is unit
    unit.count += 5
    unit.last = 14
    t.reported("in", 0, unit)
    t.acked("in", 0, unit)
    assert committable(t) == {("in", 0): 15}


def test_a_unit_left_without_records_is_done_at_once() -> None:
    t = OffsetTracker()
    done = batch(t, 0, 4)
    t.acked("in", 0, done)
    empty = batch(t, 5, 5)
    empty.count = 0  # its only record was set aside
    t.unreported("in", 0, empty)
    assert committable(t) == {("in", 0): 6}
    assert t.awaiting() == 0 and t.in_flight() == 0


def test_partitions_are_tracked_independently() -> None:
    t = OffsetTracker()
    a0 = batch(t, 0, 0, "a", 0)
    a1 = batch(t, 0, 0, "a", 1)
    b0 = batch(t, 5, 5, "b", 0)
    t.acked("a", 1, a1)
    t.acked("b", 0, b0)
    assert committable(t) == {("a", 1): 1, ("b", 0): 6}
    assert a0.done is False


def test_committed_offsets_are_not_offered_again_until_they_move() -> None:
    t = OffsetTracker()
    t.acked("in", 0, batch(t, 0, 0))
    t.committed(t.to_commit())
    assert t.to_commit() == []
    t.acked("in", 0, batch(t, 1, 1))
    assert committable(t) == {("in", 0): 2}


def test_reports_for_a_forgotten_partition_are_ignored() -> None:
    t = OffsetTracker()
    unit = batch(t, 0, 9)
    t.forget("in", 0)
    assert t.awaiting() == 0 and t.in_flight() == 0
    t.acked("in", 0, unit)
    assert t.to_commit() == [] and t.awaiting() == 0
    # Assigned again: a fresh start, the old unit plays no part.
    again = batch(t, 5, 9)
    t.acked("in", 0, again)
    assert committable(t) == {("in", 0): 10}
