"""Which input offsets are safe to commit: those below the first record not yet acknowledged."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence

from confluent_kafka import TopicPartition


class OffsetTracker:
    """Per input partition: offsets in flight and the highest offset safe to commit.

    Pure bookkeeping, no Kafka: `sent` in consume order, `acked` in any order; `committable`
    is one past the last offset below which everything was acknowledged.
    """

    def __init__(self) -> None:
        self._pending: dict[tuple[str, int], deque[int]] = {}
        self._acked: dict[tuple[str, int], set[int]] = {}
        self._safe: dict[tuple[str, int], int] = {}
        self._committed: dict[tuple[str, int], int] = {}
        # Callbacks run inside poll/flush on the relay thread; the lock keeps the tracker safe
        # should a caller ever flush from another thread.
        self._lock = threading.Lock()

    def sent(self, topic: str, partition: int, offset: int) -> None:
        key = (topic, partition)
        self._pending.setdefault(key, deque()).append(offset)

    def acked(self, topic: str, partition: int, offset: int) -> None:
        key = (topic, partition)
        with self._lock:
            pending = self._pending.get(key)
            if not pending:
                return  # the partition was revoked and forgotten meanwhile
            acked = self._acked.get(key)
            if not acked and pending[0] == offset:
                # The common case: an idempotent producer acknowledges a partition's records in
                # the order they were sent, so the oldest pending offset is the one acknowledged.
                pending.popleft()
                self._safe[key] = offset + 1
                return
            if acked is None:
                acked = self._acked[key] = set()
            acked.add(offset)
            safe = None
            while pending and pending[0] in acked:
                done = pending.popleft()
                acked.discard(done)
                safe = done + 1
            if safe is not None:
                self._safe[key] = safe

    def in_flight(self) -> int:
        return sum(len(p) for p in self._pending.values())

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
        key = (topic, partition)
        with self._lock:
            for table in (self._pending, self._acked, self._safe, self._committed):
                table.pop(key, None)
