"""Read a training sample from a Kafka topic: the most recent records of every partition.

Used by `zdict-sidecar train --topic T --sample N`, and by `run`'s trainer for a first dictionary
from a topic's backlog. Reads by assignment (no consumer group, no commits), so it never disturbs
the relay's group.

A topic that producers compress in-process (`sidecar.serde`) holds no raw record: its records
are decoded first (decode, then train), with a `Decoder` over the registry. Without a decoder,
records carrying our header are left out (training on frames would learn nothing useful).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import cast

from confluent_kafka import Consumer, KafkaException, TopicPartition

from sidecar.codec import Decoder
from sidecar.config import Settings
from sidecar.errors import CodecError, InputError, KafkaUnavailable
from sidecar.kafka import make_admin, make_reader, partition_counts
from sidecar.training.sampling import Entry


@dataclass(frozen=True, slots=True)
class TopicSample:
    """The sampled records of `topic`, and where they came from.

    `decoded`: entries that were compressed on the topic and decoded for the sample;
    `left_out`: compressed records not in it (no decoder, or they did not decode).
    """

    topic: str
    entries: list[Entry]
    window: str
    decoded: int = 0
    left_out: int = 0


def read_sample(
    settings: Settings,
    topic: str,
    count: int,
    timeout: float = 60.0,
    decoder: Decoder | None = None,
) -> TopicSample:
    """The last ~`count` records of `topic`, spread evenly over its partitions; compressed
    ones decoded with `decoder` (without one, left out).

    Raises:
        InputError: the topic does not exist or holds no records to train on.
        KafkaUnavailable: no broker answered.
    """
    if count < 1:
        raise InputError("--sample must be at least 1")
    bootstrap = settings.kafka.client_config()["bootstrap.servers"]
    partitions = partition_counts(make_admin(settings), [topic], min(timeout, 30.0), bootstrap)
    if topic not in partitions:
        raise InputError(f"topic {topic} does not exist (bootstrap.servers={bootstrap})")
    consumer = make_reader(settings, "sample")
    try:
        per_partition = max(1, count // partitions[topic])
        assignment, ends = _tails(consumer, topic, partitions[topic], per_partition, timeout)
        if not assignment:
            raise InputError(f"topic {topic} holds no records to train on")
        consumer.assign(assignment)
        tally = _Tally(settings.codec.header_key, decoder)
        _read(consumer, ends, tally, time.monotonic() + timeout)
    finally:
        consumer.close()
    window = f"topic {topic}, last {per_partition} records of {len(ends)} partition(s)"
    if tally.decoded:
        window += f", {tally.decoded} decoded"
    if tally.left_out:
        why = "no decoder" if tally.first_error is None else "undecodable"
        window += f", {tally.left_out} compressed left out ({why})"
    if not tally.entries and tally.left_out:
        why = tally.first_error or "no decoder was given: their dictionaries are in the registry"
        raise InputError(
            f"topic {topic}: its last {tally.left_out} records are compressed and none could be "
            f"decoded to train on ({why})"
        )
    return TopicSample(
        topic=topic,
        entries=tally.entries,
        window=window,
        decoded=tally.decoded,
        left_out=tally.left_out,
    )


def _tails(
    consumer: Consumer, topic: str, partitions: int, per_partition: int, timeout: float
) -> tuple[list[TopicPartition], dict[int, int]]:
    """Where the last `per_partition` records of each partition of `topic` start, and each
    partition's end offset (partitions that hold records only)."""
    assignment: list[TopicPartition] = []
    ends: dict[int, int] = {}
    for p in range(partitions):
        try:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, p), timeout=min(timeout, 30.0)
            )
        except KafkaException as exc:
            raise KafkaUnavailable(f"cannot read offsets of {topic}[{p}]: {exc}") from None
        if high > low:
            assignment.append(TopicPartition(topic, p, max(low, high - per_partition)))
            ends[p] = high
    return assignment, ends


@dataclass(slots=True)
class _Tally:
    """The sample as it is read: its entries, and the compressed records decoded or left out."""

    header_key: str
    decoder: Decoder | None
    entries: list[Entry] = field(default_factory=list)
    decoded: int = 0
    left_out: int = 0
    first_error: str | None = None

    def plain(
        self, value: bytes | None, headers: list[tuple[str, bytes | None]] | None
    ) -> bytes | None:
        """The record's value as the producer wrote it; None when it cannot be had."""
        key = self.header_key
        if value is None or not headers or not any(k == key for k, _ in headers):
            return value
        if self.decoder is None:
            self.left_out += 1
            return None
        try:
            value = self.decoder.decode(value, headers)
        except CodecError as exc:
            self.left_out += 1
            self.first_error = self.first_error or str(exc)
            return None
        self.decoded += 1
        return value


def _read(consumer: Consumer, ends: dict[int, int], tally: _Tally, deadline: float) -> None:
    """Read each assigned partition up to its end offset (or until `deadline`) into `tally`."""
    done: set[int] = set()
    while len(done) < len(ends) and time.monotonic() < deadline:
        for msg in consumer.consume(1000, 1.0):
            if msg.error() is not None:
                continue
            part, offset = msg.partition(), msg.offset()
            assert part is not None and offset is not None
            if offset >= ends[part]:
                continue  # arrived after we looked: not part of the sample
            if offset + 1 >= ends[part]:
                done.add(part)
            # A consumed record's headers: (str, bytes) pairs, or None.
            headers = cast(list[tuple[str, bytes | None]] | None, msg.headers())
            value = tally.plain(msg.value(), headers)
            if value is not None:
                tally.entries.append((part, offset, value))
