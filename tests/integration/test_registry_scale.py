"""A registry reader reads and keeps what it uses, on a real broker: a reader started after many
dictionaries were published keeps none of their bytes, decodes a record of any of them by
reading that one record again (by its offset), and keeps a just-published one as it reads it. A
registry written before the index is read whole; the first new writer indexes it, and readers
then read the index and the records after it, agreeing with a reader that reads every record.
The in-process producer and consumer read through the index too: the producer's constructor
returns with its namespace's dictionary, the consumer fetches an old one on first sight.
"""

from __future__ import annotations

import uuid
from typing import cast

import structlog
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from sidecar.bench.events import generate
from sidecar.codec import Decoder, Encoder
from sidecar.config import KafkaSettings, RegistrySettings, Settings
from sidecar.dictionaries.model import Dictionary, utc_now
from sidecar.dictionaries.registry import Registry, RegistryResolver
from sidecar.dictionaries.registry_state import (
    Activation,
    Headers,
    RegistryState,
    activation_record,
    dictionary_record,
)
from sidecar.dictionaries.registry_topics import TOPIC_CONFIG
from sidecar.kafka import plain_consumer, plain_producer
from sidecar.serde import ZdictConsumer, ZdictProducer
from sidecar.serde.following import FollowingEncoder

from .registry_dictionaries import NAMESPACE, dictionaries
from .topics import MakeTopic


def test_a_reader_started_late_keeps_nothing_and_fetches_an_old_dictionary_on_first_use(
    kafka_bootstrap: str,
) -> None:
    topic, writer, published = _published(kafka_bootstrap, 6)
    try:
        raw = next(iter(generate("order", 1, seed=9)))
        value, headers = Encoder(published[0], min_size=1).encode(raw)

        resolver = RegistryResolver.connect(kafka_bootstrap, topic=topic, follow_interval=None)
        with Decoder(resolver) as decoder:
            state = resolver.registry.state
            assert len(state.dictionaries) == 6 and state.dictionaries.cached_bytes == 0
            with structlog.testing.capture_logs() as logs:
                assert decoder.decode(value, headers) == raw
            fetched = [line for line in logs if line["event"] == "dictionary_fetched"]
            assert [line["dict_id"] for line in fetched] == [published[0].id]
            assert state.dictionaries.cached_bytes == len(published[0].data)

            # Published after the reader's start: kept as it is read, no fetch.
            newer = writer.publish_dictionary(dictionaries(7)[-1], avoid=[d.id for d in published])
            resolver.registry.refresh()
            with structlog.testing.capture_logs() as logs:
                assert resolver.get(newer.id) == newer
            assert not [line for line in logs if line["event"] == "dictionary_fetched"]
    finally:
        writer.close()


def test_the_in_process_clients_read_the_index_and_wait_for_the_dictionaries_they_use(
    kafka_bootstrap: str, make_topic: MakeTopic
) -> None:
    topic, writer, published = _published(kafka_bootstrap, 6)
    writer.close()
    whole = sum(len(d.data) for d in published)
    data_topic = make_topic(partitions=1)
    raw = next(iter(generate("order", 1, seed=9)))
    producer = ZdictProducer(
        {"bootstrap.servers": kafka_bootstrap}, registry_topic=topic, namespace=NAMESPACE
    )
    try:
        encoders = producer.encoder
        assert isinstance(encoders, FollowingEncoder)
        # The constructor returned with the namespace's dictionary, read through the index.
        assert encoders.encoders[NAMESPACE].dictionary == published[-1]
        registry = cast(Registry, encoders.registry)
        assert registry.state.index_through > 0 and registry.bytes_read < whole / 2
        producer.produce(data_topic, raw)
        # A record of an old dictionary, not the active one: its record is fetched on first sight.
        old, headers = Encoder(published[0], min_size=1).encode(raw)
        producer.produce(data_topic, old, headers=list(headers))
        assert producer.flush(30) == 0
    finally:
        producer.close()
    consumer = ZdictConsumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": uuid.uuid4().hex,
            "auto.offset.reset": "earliest",
        },
        registry_topic=topic,
    )
    try:
        consumer.subscribe([data_topic])
        got: list[bytes | None] = []
        for _ in range(120):
            for msg in consumer.consume(2 - len(got), 0.5):
                assert msg.error() is None, msg.error()
                got.append(msg.value())
            if len(got) == 2:
                break
        assert got == [raw, raw]
        reader = cast(RegistryResolver, consumer.decoder.resolver).registry
        assert reader.loaded and reader.bytes_read < whole / 2
    finally:
        consumer.close()


def _published(bootstrap: str, count: int) -> tuple[str, Registry, list[Dictionary]]:
    """A registry topic of the test's own holding `count` dictionaries, the last one active,
    and its writer (to close)."""
    topic, settings = _registry(bootstrap)
    writer = Registry.open(settings, "test")
    published = [writer.publish_dictionary(d) for d in dictionaries(count)]
    writer.publish_activation(NAMESPACE, published[-1].id, "promote")
    return topic, writer, published


def _registry(bootstrap: str) -> tuple[str, Settings]:
    """A registry topic of the test's own, and the settings of its clients."""
    topic = f"_zdict_dictionaries-{uuid.uuid4().hex}"
    settings = Settings(
        kafka=KafkaSettings.model_validate({"bootstrap.servers": bootstrap}),
        registry=RegistrySettings(topic=topic),
    )
    return topic, settings


def _promotion(dict_id: int) -> Activation:
    return Activation(
        namespace=NAMESPACE, dict_id=dict_id, action="promote", by="test", at=utc_now()
    )


def _full_read(bootstrap: str, topic: str) -> RegistryState:
    """The registry as a reader of the version before the index reads it: every record of the
    registry topic, applied in order (those records' format is unchanged)."""
    state = RegistryState()
    consumer = plain_consumer(bootstrap, f"test-{uuid.uuid4().hex}")
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, 0)])
        while state.position < high:
            for msg in consumer.consume(100, 1.0):
                assert msg.error() is None
                headers = cast(Headers, msg.headers())
                state.apply(cast(int, msg.offset()), msg.key(), msg.value(), headers)
    finally:
        consumer.close()
    return state


def test_an_unindexed_registry_is_read_whole_then_indexed_by_the_first_new_writer(
    kafka_bootstrap: str, kafka_admin: AdminClient
) -> None:
    topic, settings = _registry(kafka_bootstrap)
    new = NewTopic(topic, num_partitions=1, config=dict(TOPIC_CONFIG))
    kafka_admin.create_topics([new])[topic].result(30)
    # A registry as the version before the index wrote it: its records only, no index topic.
    old = dictionaries(6)
    producer = plain_producer(kafka_bootstrap)
    records = [dictionary_record(d) for d in old] + [activation_record(_promotion(old[-1].id))]
    for key, value, headers in records:
        producer.produce(topic, key=key, value=value, headers=headers)
    assert producer.flush(30) == 0

    first = Registry.connect(kafka_bootstrap, topic=topic)
    try:
        assert first.state.index_through == 0 and not first.index.exists
        assert first.state.active(NAMESPACE) == old[-1]
        whole = first.bytes_read
    finally:
        first.close()

    writer = Registry.open(settings, "test")  # creates the index; its first publication fills it
    try:
        newer = writer.publish_dictionary(dictionaries(7)[-1])
        writer.publish_activation(NAMESPACE, newer.id, "promote")
    finally:
        writer.close()

    reader = Registry.connect(kafka_bootstrap, topic=topic)
    try:
        assert reader.state.index_through > len(old)
        assert (
            reader.bytes_read < whole / 4
        )  # the index and the newest records, not every dictionary
        everything = _full_read(kafka_bootstrap, topic)  # what a reader of the old version sees
        assert reader.state.activations == everything.activations
        assert reader.state.versions() == everything.versions()
        assert reader.state.next_id() == everything.next_id()
        assert reader.state.active(NAMESPACE) == newer
        assert reader.state.dictionaries[old[0].id] == old[0]  # read by its offset
    finally:
        reader.close()
