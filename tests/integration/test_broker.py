"""Real round trips through the local test broker: checks the fixtures and the broker setup."""

from __future__ import annotations

import os
import random
import time
import uuid
from collections import defaultdict

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # public, but not in __all__
    AdminClient,
    ConfigResource,
)

from .topics import MakeTopic

N_RECORDS = 1_000
N_PARTITIONS = 3
CONSUME_TIMEOUT_S = 60.0


def _consume_all(bootstrap: str, topic: str, expected: int) -> list[Message]:
    """Consume ``expected`` records of ``topic`` from the beginning with a fresh consumer group."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"it-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    received: list[Message] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        while len(received) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=500, timeout=1.0):
                if msg.error() is not None:
                    raise KafkaException(msg.error())
                received.append(msg)
    finally:
        consumer.close()
    return received


def test_keyed_records_round_trip_byte_exact_in_per_partition_order(
    kafka_bootstrap: str, make_topic: MakeTopic
) -> None:
    topic = make_topic(partitions=N_PARTITIONS, name_prefix="broker-roundtrip")
    rng = random.Random(20251202)
    # Keys repeat (so the same key must always land in the same partition); values are random
    # binary of varied size, including empty and NUL-heavy payloads, prefixed by a sequence no.
    records: list[tuple[bytes, bytes]] = []
    for i in range(N_RECORDS):
        key = f"key-{rng.randrange(40):02d}".encode()
        size = rng.choice([0, 1, 7, 100, 1000, rng.randrange(20_000)])
        payload = b"\0" * size if i % 97 == 0 else os.urandom(size)
        records.append((key, b"%06d|" % i + payload))

    delivered: dict[int, tuple[int, int]] = {}  # seq -> (partition, offset)
    errors: list[str] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            errors.append(str(err))
            return
        value, partition, offset = msg.value(), msg.partition(), msg.offset()
        assert value is not None and partition is not None and offset is not None
        delivered[int(value[:6])] = (partition, offset)

    producer = Producer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
        }
    )
    for key, value in records:
        while True:
            try:
                producer.produce(topic, key=key, value=value, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(30) == 0, "records still undelivered after 30 s"
    assert errors == []
    assert sorted(delivered) == list(range(N_RECORDS))

    received = _consume_all(kafka_bootstrap, topic, N_RECORDS)

    assert len(received) == N_RECORDS
    by_partition: dict[int, list[int]] = defaultdict(list)
    partition_of_key: dict[bytes, int] = {}
    for msg in received:
        got_key, got_value, partition = msg.key(), msg.value(), msg.partition()
        assert got_key is not None and got_value is not None and partition is not None
        seq = int(got_value[:6])
        assert (got_key, got_value) == records[seq], f"record {seq} changed in transit"
        assert (partition, msg.offset()) == delivered[seq]
        assert partition_of_key.setdefault(got_key, partition) == partition, got_key
        by_partition[partition].append(seq)

    assert sorted(seq for seqs in by_partition.values() for seq in seqs) == list(range(N_RECORDS))
    assert set(by_partition) == set(range(N_PARTITIONS)), "keys should spread over all partitions"
    for partition, seqs in by_partition.items():
        assert seqs == sorted(seqs), f"partition {partition} reordered records"


def test_make_topic_applies_topic_config(kafka_admin: AdminClient, make_topic: MakeTopic) -> None:
    topic = make_topic(config={"cleanup.policy": "compact", "max.message.bytes": "2097152"})

    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = kafka_admin.describe_configs([resource])[resource].result(timeout=15)

    assert configs["cleanup.policy"].value == "compact"
    assert configs["max.message.bytes"].value == "2097152"


def test_missing_topic_is_reported_not_auto_created(
    kafka_bootstrap: str, kafka_admin: AdminClient
) -> None:
    missing = f"zdict-it-missing-{uuid.uuid4().hex}"
    # The client even asks for auto-creation; the broker (auto.create.topics.enable=false) refuses.
    producer = Producer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "allow.auto.create.topics": True,
            "message.timeout.ms": 2000,
        }
    )
    topic_metadata = producer.list_topics(topic=missing, timeout=15).topics[missing]

    errors: list[KafkaError | None] = []
    producer.produce(missing, value=b"x", on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(15)

    assert topic_metadata.error is not None
    assert topic_metadata.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert len(errors) == 1 and errors[0] is not None, "produce to a missing topic must fail"
    assert errors[0].code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._MSG_TIMED_OUT)
    assert missing not in kafka_admin.list_topics(timeout=15).topics


@pytest.mark.parametrize("partitions", [1, 5])
def test_make_topic_creates_requested_partitions(
    kafka_admin: AdminClient, make_topic: MakeTopic, partitions: int
) -> None:
    topic = make_topic(partitions=partitions)

    metadata = kafka_admin.list_topics(topic=topic, timeout=15).topics[topic]

    assert len(metadata.partitions) == partitions
