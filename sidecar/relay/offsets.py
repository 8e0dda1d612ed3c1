"""Which input offsets are safe to commit: those below the first record not yet acknowledged.

Records are acknowledged in *units*: the records of one input partition whose delivery one
report stands for. The relay's output records of a consumed batch go, per input partition, to
one output partition through an idempotent producer with `enable.gapless.guarantee`: librdkafka
keeps them in order there and cannot fail one of them alone (a gap is a fatal error), except by
`message.timeout.ms`, which the relay checks on the report itself. So the report of the last
record stands for all the records before it, and a consumed batch costs one report per input
partition instead of one per record. A record that goes elsewhere (a dead letter, a record
partitioned by key) is a unit of its own.

A unit is *open* while records join it without a report, *reported* once the record carrying
its report is produced, *done* once that report arrived. Units are kept per partition in the
order of their first offset; the committable offset is the first offset of the oldest unit not
done (everything below it is done), or one past the last record when every unit is done.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from confluent_kafka import TopicPartition


@dataclass(slots=True, eq=False)
class Unit:
    """Records of one input partition acknowledged by one delivery report."""

    #: The lowest and highest input offsets among its records.
    first: int
    last: int
    #: Records it stands for.
    count: int
    #: Clock time (seconds) before its first record was produced: the report must come before
    #: that record could time out in the producer.
    started: float
    #: Its first record's timestamp (Unix milliseconds; 0: none), for the relay latency.
    timestamp: int
    reported: bool = False
    done: bool = False


class OffsetTracker:
    """Per input partition: units in flight and the highest offset safe to commit.

    Pure bookkeeping, no Kafka. The relay thread opens and reports units; `acked` may come in
    any order (it runs inside poll/flush, where librdkafka serves the reports).
    """

    def __init__(self) -> None:
        self._pending: dict[tuple[str, int], deque[Unit]] = {}
        #: Per partition, the unit records join until its report is produced.
        self._open: dict[tuple[str, int], Unit] = {}
        #: Per partition, one past the highest offset of the units done and let go.
        self._high: dict[tuple[str, int], int] = {}
        self._safe: dict[tuple[str, int], int] = {}
        self._committed: dict[tuple[str, int], int] = {}
        self._awaiting = 0
        # Reports are served inside poll/flush on the relay thread; a transactional call run
        # on a watchdog thread may flush too, so the tracker takes a lock.
        self._lock = threading.Lock()

    def open(self, topic: str, partition: int, offset: int, started: float, timestamp: int) -> Unit:
        """The partition's open unit, or a new one starting at `offset`; the caller adds its
        records (`count`, `last`)."""
        key = (topic, partition)
        with self._lock:
            unit = self._open.get(key)
            if unit is None:
                unit = Unit(offset, offset, 0, started, timestamp)
                self._pending.setdefault(key, deque()).append(unit)
                self._open[key] = unit
            return unit

    def reported(self, topic: str, partition: int, unit: Unit) -> None:
        """The record carrying `unit`'s report is produced: no record joins it any more."""
        key = (topic, partition)
        with self._lock:
            if self._open.get(key) is unit:
                del self._open[key]
            if not unit.reported:
                unit.reported = True
                self._awaiting += 1

    def unreported(self, topic: str, partition: int, unit: Unit) -> None:
        """The record that was to carry `unit`'s report was not produced (set aside, refused).

        The unit's records are out without a report: it stays open, and the next report of
        the partition's output stands for them too (until then nothing past them is
        committed). A unit left with no record is done at once.
        """
        key = (topic, partition)
        with self._lock:
            if unit.reported and not unit.done:
                unit.reported = False
                self._awaiting -= 1
            if unit.done:
                return
            if unit.count == 0:
                unit.done = True
                self._settle(key)
            elif key in self._pending and key not in self._open:
                self._open[key] = unit

    def single(
        self, topic: str, partition: int, offset: int, started: float, timestamp: int
    ) -> Unit:
        """A unit of one record with a report of its own (a dead letter, a keyed record)."""
        unit = Unit(offset, offset, 1, started, timestamp, reported=True)
        with self._lock:
            self._pending.setdefault((topic, partition), deque()).append(unit)
            self._awaiting += 1
        return unit

    def acked(self, topic: str, partition: int, unit: Unit) -> None:
        """`unit`'s report arrived without an error: its records are in the output topic."""
        with self._lock:
            if unit.done:
                return  # its partition was revoked and forgotten meanwhile
            unit.done = True
            if unit.reported:
                self._awaiting -= 1
            self._settle((topic, partition))

    def _settle(self, key: tuple[str, int]) -> None:
        """Let go of the partition's done units up to the first one not done (lock held)."""
        pending = self._pending.get(key)
        if not pending or not pending[0].done:
            return
        high = self._high.get(key, 0)
        while pending and pending[0].done:
            high = max(high, pending.popleft().last + 1)
        self._high[key] = high
        # Every offset below the oldest unit not done belongs to a unit done: units are kept in
        # the order of their first offset.
        self._safe[key] = pending[0].first if pending else high

    def awaiting(self) -> int:
        """Reports the producer still owes (units reported, not done)."""
        return self._awaiting

    def in_flight(self) -> int:
        """Records produced whose acknowledgement is still due (open or reported units)."""
        with self._lock:
            return sum(u.count for p in self._pending.values() for u in p if not u.done)

    def to_commit(self) -> list[TopicPartition]:
        """Partitions whose safe offset moved since the last commit, as commit offsets."""
        with self._lock:
            return [
                TopicPartition(t, p, safe)
                for (t, p), safe in self._safe.items()
                if self._committed.get((t, p)) != safe
            ]

    def committed(self, offsets: Sequence[TopicPartition]) -> None:
        with self._lock:
            for tp in offsets:
                self._committed[(tp.topic, tp.partition)] = tp.offset

    def forget(self, topic: str, partition: int) -> None:
        """Drop a partition (revoked, lost, rewound); reports still due for it are ignored."""
        key = (topic, partition)
        with self._lock:
            for unit in self._pending.pop(key, ()):
                if unit.reported and not unit.done:
                    self._awaiting -= 1
                unit.done = True
            for table in (self._open, self._high, self._safe, self._committed):
                table.pop(key, None)
