"""Read a training sample from a Kafka topic: the most recent records of every partition.

Used by `zdict-sidecar train --topic T --sample N`, and by `run`'s trainer for a first dictionary
from a topic's backlog. Reads by assignment (no consumer group, no commits), so it never disturbs
the relay's group.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from confluent_kafka import KafkaException, TopicPartition

from sidecar.config import Settings
from sidecar.errors import InputError, KafkaUnavailable
from sidecar.kafka import make_admin, make_reader, partition_counts
from sidecar.sampling import Entry, keyed


@dataclass(frozen=True, slots=True)
class TopicSample:
    """The sampled records of `topic`, and where they came from."""

    topic: str
    entries: list[Entry]
    window: str

    @property
    def records(self) -> list[tuple[bytes, bytes]]:
        """Values with their `topic/partition/offset` keys (the hash-split key)."""
        return keyed(self.topic, self.entries)


def read_sample(settings: Settings, topic: str, count: int, timeout: float = 60.0) -> TopicSample:
    """The last ~`count` records of `topic`, spread evenly over its partitions.

    Raises:
        InputError: the topic does not exist or holds no records.
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
        assignment: list[TopicPartition] = []
        ends: dict[int, int] = {}
        for p in range(partitions[topic]):
            try:
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(topic, p), timeout=min(timeout, 30.0)
                )
            except KafkaException as exc:
                raise KafkaUnavailable(f"cannot read offsets of {topic}[{p}]: {exc}") from None
            if high > low:
                start = max(low, high - per_partition)
                assignment.append(TopicPartition(topic, p, start))
                ends[p] = high
        if not assignment:
            raise InputError(f"topic {topic} holds no records to train on")
        consumer.assign(assignment)
        entries: list[Entry] = []
        done: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(done) < len(ends) and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 1.0):
                if msg.error() is not None:
                    continue
                part, offset = msg.partition(), msg.offset()
                assert part is not None and offset is not None
                if offset >= ends[part]:
                    continue  # arrived after we looked: not part of the sample
                value = msg.value()
                if value is not None:
                    entries.append((part, offset, value))
                if offset + 1 >= ends[part]:
                    done.add(part)
        window = f"topic {topic}, last {per_partition} records of {len(ends)} partition(s)"
        return TopicSample(topic=topic, entries=entries, window=window)
    finally:
        consumer.close()
