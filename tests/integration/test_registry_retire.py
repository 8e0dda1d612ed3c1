"""`dicts retire` (a dry run) against a real broker: a dictionary that is neither active nor in
the rollback stack is kept while a partition of its namespace's topic still holds records from
before the namespace's activation, and listed for retirement once they are gone. The records
are removed with DeleteRecords, which advances the partition's oldest offset as time-based
retention does (the broker's retention check runs every 5 minutes: too slow for a test).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from sidecar.bench.events import generate
from sidecar.codec import Encoder
from sidecar.config import KafkaSettings, RegistrySettings, Settings
from sidecar.dictionaries.registry import Registry
from sidecar.kafka import plain_consumer, plain_producer

from .launch import RunCli
from .registry_dictionaries import dictionaries
from .topics import MakeTopic


def test_a_dictionary_out_of_use_is_listed_for_retirement_once_its_records_are_gone(
    cli: RunCli,
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    registry_topic: str,
    make_topic: MakeTopic,
    tmp_path: Path,
) -> None:
    topic = make_topic(partitions=1)
    settings = Settings(
        kafka=KafkaSettings.model_validate({"bootstrap.servers": kafka_bootstrap}),
        registry=RegistrySettings(topic=registry_topic),
    )
    old, current = dictionaries(2, namespace=topic)
    events = list(generate("order", 20, seed=3))
    producer = plain_producer(kafka_bootstrap)
    writer = Registry.open(settings, "test")
    try:
        writer.publish_dictionary(old)  # never active: only records name it
        for event in events[:10]:
            value, headers = Encoder(old, min_size=1).encode(event)
            producer.produce(topic, value=value, headers=list(headers))
        assert producer.flush(30) == 0
        time.sleep(0.01)  # the activation's time is after every record above
        writer.publish_dictionary(current)
        writer.publish_activation(topic, current.id, "promote")
    finally:
        writer.close()
    time.sleep(0.01)
    for event in events[10:]:
        value, headers = Encoder(current, min_size=1).encode(event)
        producer.produce(topic, value=value, headers=list(headers))
    assert producer.flush(30) == 0

    def verdicts() -> dict[int, dict[str, object]]:
        done = cli(
            "dicts",
            "retire",
            "--topic",
            topic,
            "--older-than-days",
            "0",
            "--margin-hours",
            "0",
            "--json",
        )
        assert done.returncode == 0, done.stderr.decode()
        return {row["dict_id"]: row for row in json.loads(done.stdout)}

    before = verdicts()
    assert before[old.id]["retire"] is False and "still holds records" in str(before[old.id]["why"])
    assert before[current.id] == {
        "dict_id": current.id,
        "namespace": topic,
        "retire": False,
        "why": "active",
    }

    # The records written with the old dictionary go, as retention would take them.
    tp = TopicPartition(topic, 0, 10)
    kafka_admin.delete_records([tp])[tp].result(timeout=30)
    after = verdicts()
    assert after[old.id]["retire"] is True, after
    assert after[current.id]["retire"] is False
    shown = cli(
        "dicts", "retire", "--topic", topic, "--older-than-days", "0", "--margin-hours", "0"
    )
    assert "dry run: 1 of 2 dictionaries" in shown.stdout.decode(), shown.stdout.decode()
    print(shown.stdout.decode())

    # What is still present names the active dictionary only.
    consumer = plain_consumer(kafka_bootstrap, "retire-check")
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        consumer.close()
    assert (low, high) == (10, 20)
