"""Idempotent producers through the proxy: producer ids, epochs and sequence numbers.

An idempotent client (Java's default, librdkafka's `enable.idempotence`) numbers the records
of each partition; after a lost answer it sends the same batch again with the same numbers.
The proxy hands out producer ids (`ProducerIds`) and keeps, per producer id and partition, what
a broker keeps (`Sequences`): the next expected sequence number, the batches under way and the
last five acknowledged ones. A batch sent again while its first copy is under way waits for
that copy's outcome; one sent again after it was acknowledged gets the same answer; neither is
written twice. A batch that failed upstream leaves a gap the client's retry fills.

The guarantee holds within one proxy process: its state is in memory, so after a restart a
batch it had acknowledged but whose answer was lost could be written again (the client keeps
its producer id and numbers, the new process accepts them as they come).

Pure: no Kafka client, no I/O, no asyncio; the produce path keeps the futures.
"""

from __future__ import annotations

import enum
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Generic, TypeVar

#: Batches a broker remembers per producer and partition to answer retries (Kafka's own 5).
REMEMBERED: Final = 5
#: Seconds a producer's state is kept after its last batch (Kafka keeps it for a day; a
#: sidecar's clients reconnect within seconds, and the memory is bounded this way).
IDLE_EXPIRY: Final = 3600.0
#: Sequence numbers wrap to 0 after this (Kafka's int32).
MAX_SEQUENCE: Final = 2**31 - 1
MAX_EPOCH: Final = 2**15 - 1

T = TypeVar("T")


class Verdict(enum.Enum):
    """What to do with a batch of an idempotent producer."""

    NEW = "new"  # write it
    IN_FLIGHT = "in_flight"  # the same batch is under way: answer with its outcome
    DUPLICATE = "duplicate"  # acknowledged already: answer with the remembered offset
    OLD = "old"  # older than anything remembered: DUPLICATE_SEQUENCE_NUMBER
    OUT_OF_ORDER = "out_of_order"  # a gap or an overlap: OUT_OF_ORDER_SEQUENCE_NUMBER
    FENCED = "fenced"  # an epoch older than the producer's current one: INVALID_PRODUCER_EPOCH


def _next(sequence: int) -> int:
    return 0 if sequence >= MAX_SEQUENCE else sequence + 1


@dataclass(slots=True)
class _Stream(Generic[T]):
    """One producer id's state in one partition."""

    epoch: int
    #: The sequence number the next new batch must start at (None: any, a stream just seen).
    expected: int | None
    #: base sequence -> (last sequence, what waits for the outcome).
    in_flight: dict[int, tuple[int, T]] = field(default_factory=dict)
    #: base sequence -> (last sequence, base offset) of the last acknowledged batches.
    done: OrderedDict[int, tuple[int, int]] = field(default_factory=OrderedDict)
    #: Base sequences of batches that failed upstream: the client's retry is new again.
    gaps: set[int] = field(default_factory=set)
    used: float = 0.0


@dataclass(frozen=True, slots=True)
class Check(Generic[T]):
    """The verdict on one batch, with what it refers to."""

    verdict: Verdict
    #: IN_FLIGHT: the waiter of the batch under way.
    waiter: T | None = None
    #: DUPLICATE: the base offset the batch was written at.
    base_offset: int = -1
    #: OUT_OF_ORDER: the sequence number expected instead.
    expected: int | None = None


class Sequences(Generic[T]):
    """Per (producer id, topic, partition): the sequence numbers seen and under way."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._streams: dict[tuple[int, str, int], _Stream[T]] = {}
        self._clock = clock
        self._swept = clock()

    def __len__(self) -> int:
        return len(self._streams)

    def check(
        self, producer_id: int, epoch: int, topic: str, partition: int, base: int, last: int
    ) -> Check[T]:
        """Judge a batch of sequence numbers `base`..`last` (not yet registered)."""
        now = self._clock()
        self._sweep(now)
        stream = self._streams.get((producer_id, topic, partition))
        if stream is None or epoch > stream.epoch:
            return Check(Verdict.NEW)  # a producer (or epoch) not seen: its numbers start here
        stream.used = now
        if epoch < stream.epoch:
            return Check(Verdict.FENCED)
        flight = stream.in_flight.get(base)
        if flight is not None and flight[0] == last:
            return Check(Verdict.IN_FLIGHT, waiter=flight[1])
        remembered = stream.done.get(base)
        if remembered is not None and remembered[0] == last:
            return Check(Verdict.DUPLICATE, base_offset=remembered[1])
        if base in stream.gaps or stream.expected is None or base == stream.expected:
            return Check(Verdict.NEW)
        if stream.done and base < min(stream.done) and last < min(stream.done):
            return Check(Verdict.OLD)
        return Check(Verdict.OUT_OF_ORDER, expected=stream.expected)

    def started(
        self,
        producer_id: int,
        epoch: int,
        topic: str,
        partition: int,
        base: int,
        last: int,
        waiter: T,
    ) -> None:
        """A NEW batch is under way; `waiter` is handed to its copies sent meanwhile."""
        key = (producer_id, topic, partition)
        stream = self._streams.get(key)
        if stream is None or epoch > stream.epoch:
            stream = self._streams[key] = _Stream(epoch=epoch, expected=None)
        stream.used = self._clock()
        stream.gaps.discard(base)
        stream.in_flight[base] = (last, waiter)
        if stream.expected is None or base == stream.expected:
            stream.expected = _next(last)

    def finished(
        self,
        producer_id: int,
        epoch: int,
        topic: str,
        partition: int,
        base: int,
        base_offset: int | None,
    ) -> None:
        """The batch starting at `base` was written at `base_offset` (None: it failed)."""
        stream = self._streams.get((producer_id, topic, partition))
        if stream is None or stream.epoch != epoch:
            return  # the producer moved to a new epoch meanwhile: its old batches are moot
        flight = stream.in_flight.pop(base, None)
        if flight is None:
            return
        if base_offset is None:
            stream.gaps.add(base)
            return
        stream.done[base] = (flight[0], base_offset)
        while len(stream.done) > REMEMBERED:
            stream.done.popitem(last=False)

    def _sweep(self, now: float) -> None:
        if now - self._swept < IDLE_EXPIRY / 10:
            return
        self._swept = now
        for key in [k for k, s in self._streams.items() if now - s.used > IDLE_EXPIRY]:
            if not self._streams[key].in_flight:
                del self._streams[key]


class ProducerIds:
    """Producer ids for InitProducerId: unique within the process and, as they start from the
    clock in microseconds, across its restarts (a restarted proxy never hands out an id an
    earlier one gave to a client that is still running)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._next = int(clock() * 1_000_000)

    def new(self, producer_id: int = -1, epoch: int = -1) -> tuple[int, int]:
        """(producer id, epoch): a new id at epoch 0, or, for a client that names its current
        id and epoch (KIP-360, after a failed batch), the same id at the next epoch."""
        if producer_id >= 0 and 0 <= epoch < MAX_EPOCH:
            return producer_id, epoch + 1
        self._next += 1
        return self._next, 0
