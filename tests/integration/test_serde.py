"""Compression in the producer's process (`sidecar.serde`) on a real broker.

* An application producing through confluent's `SerializingProducer` with `ZdictSerializer`,
  and through `ZdictProducer`, read back by `DeserializingConsumer` with `ZdictDeserializer`
  and by `ZdictConsumer`: values byte-exact, keys, partitions and the application's own headers
  kept.
* A dictionary published mid-stream (`zdict-sidecar train --topic T --publish`, which decodes
  the compressed topic to train on it, then the registry API) is used by the running producer
  within 5 s, without a restart; every record before and after decodes.
* A registry unreachable when the producer starts (its broker down), then back: the producer
  produces throughout, without a dictionary first, with it once it answers.
* A consumer that meets an id it does not know yet reads the registry again and decodes; an id
  no registry holds marks that one record, and the records after it still decode.
"""

from __future__ import annotations

import itertools
import json
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any, cast

import pytest
from confluent_kafka import (
    Consumer,
    DeserializingConsumer,
    Message,
    Producer,
    SerializingProducer,
)
from confluent_kafka.serialization import StringDeserializer, StringSerializer
from prometheus_client import CollectorRegistry

from sidecar.bench.events import generate
from sidecar.codec import NO_DICTIONARY, Decoder, header_tag, tag_value
from sidecar.config import KafkaSettings, RegistrySettings, Settings
from sidecar.dictionaries.model import Dictionary
from sidecar.dictionaries.registry import Registry, RegistryResolver
from sidecar.dictionaries.store import DictionaryStore
from sidecar.kafka import is_deserialization_error
from sidecar.serde import (
    ProducerMetrics,
    ZdictConsumer,
    ZdictDeserializer,
    ZdictProducer,
    ZdictSerializer,
)
from sidecar.serde.following import FollowingEncoder
from sidecar.training.choice import train
from sidecar.training.params import TrainingParams
from sidecar.training.promotion import promote
from sidecar.training.split import split_ordered

from .launch import RunCli
from .private_broker import PrivateBroker, StartPrivateBroker
from .topics import MakeTopic, create_topic
from .waiting import wait_until

#: What the issue asks: an activation in use within this many seconds.
SWITCH_SECONDS = 5.0
#: Training settings that keep a test's training run to seconds on two cores.
QUICK_TRAINING = {"ZDICT_TRAINING__DICT_SIZES": "[8192]", "ZDICT_TRAINING__LEVELS": "[3]"}

Headers = tuple[tuple[str, bytes | None], ...]


def publish(bootstrap: str, registry_topic: str, namespace: str, events: list[bytes]) -> Dictionary:
    """Train on `events` and publish the dictionary, then its activation, as a trainer does."""
    settings = Settings(
        kafka=KafkaSettings.model_validate({"bootstrap.servers": bootstrap}),
        registry=RegistrySettings(topic=registry_topic),
    )
    registry = Registry.open(settings, "test")
    try:
        champion = registry.state.active(namespace)
        report = train(
            split_ordered(events, 0.8),
            TrainingParams(dict_sizes=(8192,), levels=(3,)),
            namespace=namespace,
            champion=champion,
        )
        with tempfile.TemporaryDirectory() as store:
            return promote(
                DictionaryStore(store),
                registry,
                report,
                window="test",
                parent_id=champion.id if champion else None,
            )
    finally:
        registry.close()


def read_all(consumer: Any, topic: str, expected: int, timeout: float = 60.0) -> list[Message]:
    """Every message of `topic` from the start, through `consumer` (already configured)."""
    consumer.subscribe([topic])
    messages: list[Message] = []
    deadline = time.monotonic() + timeout
    while len(messages) < expected and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        error = None if msg is None else msg.error()
        # Records, and records a ZdictConsumer could not decode; not the client's events.
        if msg is not None and (error is None or is_deserialization_error(error)):
            messages.append(msg)
    consumer.close()
    assert len(messages) == expected, f"{len(messages)} of {expected} records read back"
    return messages


def consumer_conf(bootstrap: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": f"zdict-it-serde-{uuid.uuid4().hex}",
        "auto.offset.reset": "earliest",
    }


def raw_consumer(bootstrap: str) -> Consumer:
    """A plain consumer: records as the broker holds them."""
    return Consumer(consumer_conf(bootstrap))


def zd_of(headers: Any) -> int | None:
    """The dictionary id our header names (None: no header of ours)."""
    tag = header_tag(headers, "zd")
    return None if tag is None else tag.dict_id


@pytest.fixture
def events() -> list[bytes]:
    return list(generate("product_viewed", 12_000, seed=15))


# -- round trips ---------------------------------------------------------------------------------


def test_serializing_producer_and_deserializing_consumer_keep_every_byte(
    kafka_bootstrap: str, make_topic: MakeTopic, registry_topic: str, events: list[bytes]
) -> None:
    topic = make_topic(partitions=3)
    dictionary = publish(kafka_bootstrap, registry_topic, topic, events[:5000])
    orders = [json.loads(e) for e in events[5000:6500]]
    sent: dict[str, tuple[int, str, Headers]] = {}
    with FollowingEncoder.connect(
        kafka_bootstrap, topic=registry_topic, namespaces=[topic]
    ) as encoders:
        assert encoders.dictionary(topic) == dictionary
        producer = SerializingProducer(
            {
                "bootstrap.servers": kafka_bootstrap,
                "key.serializer": StringSerializer(),
                # The application's serializer first (JSON here), then zdict.
                "value.serializer": ZdictSerializer(
                    encoders, inner=lambda obj, ctx: json.dumps(obj).encode()
                ),
            }
        )
        for i, order in enumerate(orders):
            mine: Headers = (("trace", b"t-%d" % i), ("empty", None)) if i % 2 else ()
            producer.produce(
                topic, key=f"order-{i}", value=order, partition=i % 3, headers=list(mine)
            )
            sent[f"order-{i}"] = (i % 3, json.dumps(order), mine)
        assert producer.flush(60) == 0
    decoder = Decoder(RegistryResolver.connect(kafka_bootstrap, topic=registry_topic))
    consumer = DeserializingConsumer(
        consumer_conf(kafka_bootstrap)
        | {
            "key.deserializer": StringDeserializer(),
            "value.deserializer": ZdictDeserializer(decoder, inner=StringDeserializer()),
        }
    )
    with decoder:
        got = read_all(consumer, topic, len(sent))
    assert {zd_of(m.headers()) for m in got} == {dictionary.id}  # all compressed with it
    # What the application's deserializers made: str (Message's stub says bytes).
    received = {
        cast(str, m.key()): (
            m.partition(),
            cast(str, m.value()),
            tuple((k, v) for k, v in cast(Headers, m.headers()) if k != "zd"),
        )
        for m in got
    }
    assert received == sent  # values byte for byte (strict UTF-8), keys, partitions, headers


def test_zdict_producer_and_consumer_are_drop_ins_for_the_plain_clients(
    kafka_bootstrap: str, make_topic: MakeTopic, registry_topic: str, events: list[bytes]
) -> None:
    topic = make_topic(partitions=2)
    dictionary = publish(kafka_bootstrap, registry_topic, topic, events[:5000])
    collectors = CollectorRegistry()
    producer = ZdictProducer(
        {"bootstrap.servers": kafka_bootstrap, "linger.ms": 5},
        registry_topic=registry_topic,
        metrics=ProducerMetrics(collectors),
    )
    values = [*events[5000:7000], None, b"\x1f\x8b\x08" + bytes(range(256)), b"tiny"]
    sent: dict[bytes, tuple[int, bytes | None, Headers]] = {}
    for i, value in enumerate(values):
        mine: Headers = (("app", b"%d" % i),) if i % 3 == 0 else ()
        # Producer's own call, positional: topic, value, key, partition; headers or none.
        producer.produce(topic, value, b"k%d" % i, i % 2, headers=list(mine) or None)
        sent[b"k%d" % i] = (i % 2, value, mine)
    assert producer.flush(60) == 0
    producer.close()
    consumer = ZdictConsumer(consumer_conf(kafka_bootstrap), registry_topic=registry_topic)
    got = read_all(consumer, topic, len(sent))
    assert [m.error() for m in got if m.error() is not None] == []
    received = {m.key(): (m.partition(), m.value(), tuple(m.headers() or ())) for m in got}
    assert received == sent

    def sample(name: str, **labels: str) -> float | None:
        return collectors.get_sample_value(f"zdict_producer_{name}", {"topic": topic, **labels})

    assert sample("encode_duration_seconds_count") == len(values)
    info = {"dict_id": str(dictionary.id), "version": str(dictionary.meta.version)}
    assert sample("dictionary_info", **info) == 1
    assert (sample("records_total", outcome="compressed") or 0) >= 1900
    assert sample("records_total", outcome="tombstone") == 1
    assert sample("records_total", outcome="precompressed") == 1
    assert (sample("output_bytes_total") or 0) < (sample("input_bytes_total") or 0)


# -- the registry, followed ----------------------------------------------------------------------


class Stream:
    """A `ZdictProducer` producing `values` over and over on a thread of its own, ~`rate`
    records/s, until `finish`."""

    def __init__(self, producer: ZdictProducer, topic: str, values: list[bytes], rate: float):
        self.producer, self.topic, self.values, self.rate = producer, topic, values, rate
        self.sent: list[bytes] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        started = time.monotonic()
        for i, value in enumerate(itertools.cycle(self.values)):
            if self.stop.is_set():
                return
            self.producer.produce(self.topic, value, b"k%d" % (i % 100))
            self.sent.append(value)
            ahead = started + i / self.rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
            if i % 100 == 0:
                self.producer.poll(0)

    def finish(self) -> list[bytes]:
        self.stop.set()
        self.thread.join(30)
        assert self.producer.flush(60) == 0
        return self.sent


def test_a_dictionary_published_mid_stream_is_used_within_5_s_without_a_restart(
    kafka_bootstrap: str,
    make_topic: MakeTopic,
    registry_topic: str,
    cli: RunCli,
    events: list[bytes],
) -> None:
    topic = make_topic(partitions=2)
    producer = ZdictProducer({"bootstrap.servers": kafka_bootstrap}, registry_topic=registry_topic)
    encoders = producer.encoder
    assert isinstance(encoders, FollowingEncoder)
    stream = Stream(producer, topic, events, rate=500.0)
    try:
        wait_until(lambda: len(stream.sent) >= 3000, 60, "3,000 records without a dictionary")
        assert encoders.dictionary(topic) is None
        # The namespace's one trainer, as a CronJob runs it. It finds no raw record on the
        # topic: it decodes what the producer compressed (without a dictionary so far), then
        # trains on that.
        result = cli("train", "--topic", topic, "--publish", "--sample", "3000", env=QUICK_TRAINING)
        published_at = time.monotonic()
        assert result.returncode == 0, result.stderr.decode()[-2000:]
        assert b"decoded to train on" in result.stderr
        wait_until(lambda: encoders.dictionary(topic) is not None, SWITCH_SECONDS, "the switch")
        assert time.monotonic() - published_at < SWITCH_SECONDS
        first = encoders.dictionary(topic)
        assert first is not None and "decoded" in first.meta.training.window
        # A second one through the registry API (another kind of event: a schema change).
        # Counts from each switch on: training and publishing take seconds of the stream.
        switched = len(stream.sent)
        wait_until(lambda: len(stream.sent) >= switched + 1500, 60, "records with the first")
        second = publish(
            kafka_bootstrap, registry_topic, topic, list(generate("order", 4000, seed=3))
        )
        published_at = time.monotonic()
        wait_until(lambda: encoders.dictionary(topic) == second, SWITCH_SECONDS, "the second")
        assert time.monotonic() - published_at < SWITCH_SECONDS
        switched = len(stream.sent)
        wait_until(lambda: len(stream.sent) >= switched + 1500, 60, "records with the second")
    finally:
        sent = stream.finish()
        producer.close()
    consumer = ZdictConsumer(consumer_conf(kafka_bootstrap), registry_topic=registry_topic)
    got = read_all(consumer, topic, len(sent))
    assert [m.error() for m in got if m.error() is not None] == []
    assert sorted(m.value() or b"" for m in got) == sorted(sent)
    # As the broker holds them: per partition, records without a dictionary, then with the
    # first, then with the second; never back.
    phase = {None: 0, NO_DICTIONARY: 0, first.id: 1, second.id: 2}
    by_partition: dict[int, list[int]] = {}
    for msg in read_all(raw_consumer(kafka_bootstrap), topic, len(sent)):
        by_partition.setdefault(msg.partition() or 0, []).append(phase[zd_of(msg.headers())])
    for phases in by_partition.values():
        assert phases == sorted(phases) and set(phases) == {0, 1, 2}


def registry_reads(metrics: ProducerMetrics) -> dict[str, float]:
    """zdict_producer_registry_reads_total by result, as a scrape would read it."""
    return {
        sample.labels["result"]: sample.value
        for family in metrics.collect()
        if family.name == "zdict_producer_registry_reads"
        for sample in family.samples
        if sample.name.endswith("_total")
    }


@pytest.fixture
def broker(private_broker: StartPrivateBroker) -> Iterator[PrivateBroker]:
    started = private_broker("serde")
    yield started
    started.close()


def test_a_registry_unreachable_at_start_then_back_costs_no_record(
    broker: PrivateBroker, events: list[bytes]
) -> None:
    admin = broker.admin()
    topic = create_topic(admin, partitions=1, name_prefix="zdict-it-serde")
    registry_topic = f"_zdict_dictionaries-{uuid.uuid4().hex}"
    dictionary = publish(broker.bootstrap, registry_topic, topic, events[:5000])
    broker.stop()
    metrics = ProducerMetrics(CollectorRegistry())
    started = time.monotonic()
    producer = ZdictProducer(
        {"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 120_000},
        registry_topic=registry_topic,
        metrics=metrics,
    )
    assert time.monotonic() - started < 20.0  # ready_timeout (10 s) and no more
    encoders = producer.encoder
    assert isinstance(encoders, FollowingEncoder)
    before = events[5000:6000]
    for value in before:  # queued while the broker is away
        producer.produce(topic, value)
    assert encoders.dictionary(topic) is None
    wait_until(lambda: registry_reads(metrics)["failed"] >= 1, 60, "a failed registry read")
    broker.start()
    wait_until(lambda: encoders.dictionary(topic) == dictionary, 90, "the dictionary")
    after = events[6000:7000]
    for value in after:
        producer.produce(topic, value)
    assert producer.flush(120) == 0
    producer.close()
    assert registry_reads(metrics)["ok"] >= 1
    raw = read_all(raw_consumer(broker.bootstrap), topic, 2000)
    ids = [zd_of(m.headers()) for m in raw]
    assert set(ids[:1000]) <= {None, NO_DICTIONARY} and set(ids[1000:]) == {dictionary.id}
    got = read_all(
        ZdictConsumer(consumer_conf(broker.bootstrap), registry_topic=registry_topic), topic, 2000
    )
    assert [m.value() for m in got] == before + after


def test_a_consumer_reads_the_registry_again_for_an_id_it_does_not_know_yet(
    kafka_bootstrap: str, make_topic: MakeTopic, registry_topic: str, events: list[bytes]
) -> None:
    topic = make_topic(partitions=1)
    first = publish(kafka_bootstrap, registry_topic, topic, events[:5000])
    consumer = ZdictConsumer(consumer_conf(kafka_bootstrap), registry_topic=registry_topic)
    consumer.subscribe([topic])
    producer = ZdictProducer({"bootstrap.servers": kafka_bootstrap}, registry_topic=registry_topic)
    encoders = producer.encoder
    assert isinstance(encoders, FollowingEncoder)

    def produce(values: list[bytes]) -> None:
        for value in values:
            producer.produce(topic, value)
        assert producer.flush(60) == 0

    def poll(n: int) -> list[Message]:
        out: list[Message] = []
        deadline = time.monotonic() + 60
        while len(out) < n and time.monotonic() < deadline:
            out.extend(consumer.consume(n - len(out), 0.5))
        assert len(out) == n
        return out

    try:
        produce(events[5000:5100])
        assert [m.value() for m in poll(100)] == events[5000:5100]  # the registry, read once
        # A dictionary the consumer's registry reader has not seen: published now.
        second = publish(kafka_bootstrap, registry_topic, topic, list(generate("order", 4000)))
        wait_until(lambda: encoders.dictionary(topic) == second, 10, "the switch")
        orders = list(generate("order", 100, seed=8))
        produce(orders)
        # An id no registry holds (a record forged with our header), between good ones.
        forged = Producer({"bootstrap.servers": kafka_bootstrap})
        forged.produce(topic, b"\x00" * 40, headers=[("zd", tag_value(40000, "compact", 5))])
        assert forged.flush(30) == 0
        produce(orders[:10])
        got = poll(111)
    finally:
        producer.close()
        consumer.close()
    assert [m.value() for m in got[:100]] == orders
    assert {zd_of(m.headers()) for m in got[:100]} == {None}  # ours removed
    bad = got[100]
    error = bad.error()
    assert error is not None and is_deserialization_error(error)
    assert "unknown dictionary id 40000" in error.str() and registry_topic in error.str()
    assert [m.value() for m in got[101:]] == orders[:10]
    assert first.id != second.id
