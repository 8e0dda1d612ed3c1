"""A bounded reservoir of recent raw record values per namespace, tapped from the relay.

The relay hands every consumed batch to `Reservoir.offer`; the reservoir keeps one record in
`every` (every record while its namespace has no dictionary yet, and until it holds
`min_messages`), newest last, and drops the oldest once the kept values and their bookkeeping
exceed `max_bytes`. The trainer takes a `snapshot` and holds out its newest slice of every
partition (`training.split.split_newest`, by offset): what the candidates are measured on is
what a dictionary will face next.

Pure: no Kafka import (records only need `partition()`, `offset()` and `value()`, which a
confluent-kafka `Message` has), no I/O. Thread-safe: the relay offers while the trainer reads.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Final, Protocol

from sidecar.codec import looks_compressed

#: Bytes of Python objects one kept value costs besides its payload: the entry tuple (64), the
#: offset int (32), the bytes object header (33) and the deque slot (8), rounded up. Checked
#: against tracemalloc in tests/unit/test_sampling.py.
ENTRY_OVERHEAD: Final = 144


class SampledRecord(Protocol):
    """What the reservoir reads of a consumed record (a confluent-kafka `Message` fits)."""

    def partition(self) -> int | None: ...

    def offset(self) -> int | None: ...

    def value(self) -> bytes | None: ...


Entry = tuple[int, int, bytes]
"""(partition, offset, value) of one kept record."""


class Reservoir:
    """Recent raw values of one namespace (input topic), bounded in bytes."""

    def __init__(
        self,
        topic: str,
        *,
        max_bytes: int,
        every: int = 10,
        min_messages: int = 10_000,
        max_value_bytes: int = 65_536,
    ) -> None:
        """Args:
        topic: the input topic the records come from (part of the split key).
        max_bytes: bound on kept payload plus `ENTRY_OVERHEAD` per value (bytes).
        every: keep one record in this many, once `min_messages` are kept.
        min_messages: keep every record until this many are kept (a fast first sample).
        max_value_bytes: larger values are not kept (dictionaries are for small records, and
            one huge value would push out thousands of small ones).
        """
        if max_bytes < ENTRY_OVERHEAD + 1:
            raise ValueError(f"max_bytes must be more than {ENTRY_OVERHEAD}, got {max_bytes}")
        if every < 1:
            raise ValueError(f"every must be at least 1, got {every}")
        self.topic = topic
        self.max_bytes = max_bytes
        self.every = every
        self.min_messages = min_messages
        self.max_value_bytes = min(max_value_bytes, max_bytes - ENTRY_OVERHEAD)
        #: Keep every record: set while the namespace has no dictionary, so the first one is
        #: trained as soon as possible (the trainer sets and clears it).
        self.dense = True
        self._entries: deque[Entry] = deque()
        self._bytes = 0
        self._kept = 0
        self._offered = 0
        self._lock = threading.Lock()

    @property
    def size_bytes(self) -> int:
        """Bytes accounted for now (payload plus overhead); never above `max_bytes`."""
        return self._bytes

    @property
    def messages(self) -> int:
        """Values kept now."""
        return len(self._entries)

    @property
    def offered(self) -> int:
        """Records offered so far (kept or not)."""
        return self._offered

    @property
    def kept(self) -> int:
        """Values kept so far, including those dropped since (a position in the stream)."""
        return self._kept

    def offer(self, batch: Sequence[SampledRecord]) -> None:
        """Consider one consumed batch; keeps one record in `every` of it (all while `dense` or
        filling).

        The start of the stride moves with every batch, so no position in a batch is favoured.
        Tombstones, empty values, values above `max_value_bytes` and already compressed values
        are not kept.
        """
        if not batch:
            return
        step = 1 if self.dense or len(self._entries) < self.min_messages else self.every
        start = self._offered % step
        self._offered += len(batch)
        limit = self.max_value_bytes
        kept: list[Entry] = []
        for record in batch[start::step]:
            value = record.value()
            if not value or len(value) > limit or looks_compressed(value):
                continue
            partition, offset = record.partition(), record.offset()
            if partition is None or offset is None:
                continue
            kept.append((partition, offset, value))
        if kept:
            self._keep(kept)

    def _keep(self, kept: Iterable[Entry]) -> None:
        with self._lock:
            entries = self._entries
            total = self._bytes
            for entry in kept:
                entries.append(entry)
                total += len(entry[2]) + ENTRY_OVERHEAD
                self._kept += 1
            while total > self.max_bytes:
                total -= len(entries.popleft()[2]) + ENTRY_OVERHEAD
            self._bytes = total

    def snapshot(self, newest: int | None = None) -> list[Entry]:
        """A copy of the kept entries (the `newest` ones only, if given), oldest first.

        Cheap: the values are shared, not copied.
        """
        with self._lock:
            if newest is None or newest >= len(self._entries):
                return list(self._entries)
            return list(itertools.islice(self._entries, len(self._entries) - newest, None))

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0
