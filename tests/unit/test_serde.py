"""The serde without a broker: `ZdictSerializer` / `ZdictDeserializer` in confluent-kafka's own
serialization API, the producers and the consumer around stand-ins for the Kafka client (what
they hand to it is what is checked; tests/integration/test_serde.py runs them on a broker), and
the producer's metrics.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, cast

import pytest
from confluent_kafka import KafkaError, Message, SerializingProducer
from confluent_kafka.error import (
    KeySerializationError,
    ValueSerializationError,
)
from confluent_kafka.serialization import (
    MessageField,
    SerializationContext,
    SerializationError,
    StringDeserializer,
    StringSerializer,
)
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from sidecar.bench.events import generate
from sidecar.codec import (
    NO_DICTIONARY,
    Decoder,
    Encoder,
    Outcome,
    StaticResolver,
    header_dict_id,
)
from sidecar.dictionaries.model import Dictionary, TrainingSample, build_dictionary
from sidecar.errors import CorruptFrame
from sidecar.kafka import is_deserialization_error
from sidecar.record_batch import producer_zstd, stored_bytes
from sidecar.serde import (
    ZdictConsumer,
    ZdictDeserializer,
    ZdictProducer,
    ZdictSerializer,
    ZdictSerializingProducer,
)
from sidecar.serde import consumer as consumer_module
from sidecar.serde import producer as producer_module
from sidecar.serde.conf import registry_properties, take_serdes
from sidecar.serde.metrics import ProducerMetrics

TOPIC = "orders"


@pytest.fixture(scope="module")
def orders(trained_bytes: bytes) -> Dictionary:
    return build_dictionary(
        TOPIC,
        trained_bytes,
        dict_id=32768,
        version=1,
        level=3,
        heldout_ratio=2.0,
        nodict_ratio=1.0,
        break_even_size=0,
        training=TrainingSample(count=1, bytes=1, heldout_count=1, heldout_bytes=1),
    )


@pytest.fixture
def encoder(orders: Dictionary) -> Encoder:
    return Encoder(orders)


@pytest.fixture
def decoder(orders: Dictionary) -> Decoder:
    return Decoder(StaticResolver([orders]))


def value_ctx(headers: Any) -> SerializationContext:
    return SerializationContext(TOPIC, MessageField.VALUE, headers)


# -- the serializer and deserializer -------------------------------------------------------------


def test_the_serializer_compresses_and_adds_its_header_to_the_callers_headers(
    encoder: Encoder, decoder: Decoder, events: list[bytes]
) -> None:
    serializer = ZdictSerializer(encoder)
    headers: list[tuple[str, bytes | None]] = [("app", b"1")]
    value = serializer(events[0], value_ctx(headers))
    assert headers == [("app", b"1"), encoder.header]  # the caller's own list, appended to
    assert value is not None and len(value) < len(events[0])
    assert decoder.decode(value, headers) == events[0]
    mapping: dict[str, str | bytes | None] = {"app": "1"}
    value = serializer(events[1], value_ctx(mapping))
    assert mapping == {"app": "1", "zd": encoder.header[1]}
    assert ZdictDeserializer(decoder)(value, value_ctx(mapping)) == events[1]


def test_the_application_serializer_runs_first_and_its_deserializer_last(
    encoder: Encoder, decoder: Decoder
) -> None:
    """As with a Schema Registry serializer that puts its schema id in a header."""

    def schema_serializer(obj: Any, ctx: SerializationContext | None) -> bytes:
        assert ctx is not None and isinstance(ctx.headers, list)
        ctx.headers.append(("__value_schema_id", b"\x01\x02"))
        return json.dumps(obj).encode()

    def schema_deserializer(data: bytes | None, ctx: SerializationContext | None) -> Any:
        assert ctx is not None and ("__value_schema_id", b"\x01\x02") in (ctx.headers or [])
        return json.loads(data or b"null")

    order = {"order_id": "A-1", "items": [{"sku": "X", "qty": 2}] * 10, "currency": "EUR"}
    headers: list[tuple[str, bytes | None]] = []
    value = ZdictSerializer(encoder, inner=schema_serializer)(order, value_ctx(headers))
    assert [k for k, _ in headers] == ["__value_schema_id", "zd"]
    back = ZdictDeserializer(decoder, inner=schema_deserializer)(value, value_ctx(headers))
    assert back == order
    text = ZdictSerializer(encoder, inner=StringSerializer())("é" * 200, value_ctx(headers := []))
    assert ZdictDeserializer(decoder, StringDeserializer())(text, value_ctx(headers)) == "é" * 200


def test_without_headers_to_add_to_the_serializer_says_what_to_pass(encoder: Encoder) -> None:
    serializer = ZdictSerializer(encoder)
    with pytest.raises(SerializationError, match=r"headers=\[\].*ZdictSerializingProducer"):
        serializer(b"x" * 500, value_ctx(None))
    with pytest.raises(SerializationError, match="a tuple"):
        serializer(b"x" * 500, value_ctx((("app", b"1"),)))
    with pytest.raises(SerializationError, match=r"value\.serializer, not for the key"):
        serializer(b"x" * 500, SerializationContext(TOPIC, MessageField.KEY, []))
    with pytest.raises(SerializationError, match="SerializationContext"):
        serializer(b"x" * 500, None)
    with pytest.raises(TypeError, match="zdict compresses bytes, got int"):
        serializer(12, value_ctx([]))


def test_tombstones_and_records_compressed_already_pass_and_a_spoofed_header_is_refused(
    encoder: Encoder, events: list[bytes]
) -> None:
    serializer = ZdictSerializer(encoder)
    headers: list[tuple[str, bytes | None]] = []
    assert serializer(None, value_ctx(headers)) is None and headers == []
    value, ours = encoder.encode(events[0])
    again = list(ours)
    assert serializer(value, value_ctx(again)) == value
    assert again == ours  # never compressed twice, never a second header
    with pytest.raises(CorruptFrame, match="not a zstd frame"):
        serializer(events[0], value_ctx([encoder.header]))


def test_confluents_serializing_producer_carries_the_header_in_the_callers_list(
    encoder: Encoder,
    events: list[bytes],
) -> None:
    producer = SerializingProducer(
        {
            "bootstrap.servers": "127.0.0.1:9",  # never reached: produce() only queues
            "value.serializer": ZdictSerializer(encoder),
            "log_level": 0,
        }
    )
    try:
        headers: list[tuple[str, str | bytes | None]] = [("app", b"1")]
        producer.produce(TOPIC, key=b"k", value=events[0], headers=headers)
        assert headers == [("app", b"1"), encoder.header]
        with pytest.raises(ValueSerializationError, match=r"headers=\[\]"):
            producer.produce(TOPIC, key=b"k", value=events[0])
    finally:
        producer.purge()
        producer.close()


def test_the_real_client_takes_the_producers_call_and_reports_what_it_sent(
    encoder: Encoder, decoder: Decoder, events: list[bytes]
) -> None:
    """confluent_kafka.Producer itself (never reaching a broker): the positional call the
    producer makes lands in the right parameters; the purged records' reports show it."""
    reports: list[tuple[bytes | None, bytes | None, int]] = []
    producer = ZdictProducer(
        {"bootstrap.servers": "127.0.0.1:9", "log_level": 0, "message.timeout.ms": 60_000},
        encoder=encoder,
    )
    for i, value in enumerate(events[:3]):
        producer.produce(
            TOPIC,
            value,
            b"k%d" % i,
            callback=lambda err, msg: reports.append((msg.value(), msg.key(), msg.partition())),
            partition=i,
            headers=[("app", b"1")] if i else None,
        )
    producer.purge()
    producer.poll(1.0)  # the purged records' delivery reports
    producer.close()
    assert [(key, partition) for _, key, partition in reports] == [
        (b"k0", 0),
        (b"k1", 1),
        (b"k2", 2),
    ]
    assert [decoder.decode(value, [encoder.header]) for value, _, _ in reports] == events[:3]


def test_the_serdes_hand_the_cluster_id_resolver_on_to_the_application_serdes(
    encoder: Encoder, decoder: Decoder
) -> None:
    seen: list[Any] = []

    class Inner:
        def __call__(self, obj: Any, ctx: Any) -> Any:
            return obj

        def set_cluster_id_resolver(self, resolver: Any) -> None:
            seen.append(resolver)

    def resolver() -> str:
        return "cluster"

    ZdictSerializer(encoder, Inner()).set_cluster_id_resolver(resolver)
    ZdictDeserializer(decoder, Inner()).set_cluster_id_resolver(resolver)
    ZdictSerializer(encoder).set_cluster_id_resolver(resolver)  # no inner: nothing to do
    assert seen == [resolver, resolver]


# -- the producers, around a stand-in for the client ---------------------------------------------


class RecordingProducer:
    """Stands in for confluent_kafka.Producer: records what `produce` is handed."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.produced: list[dict[str, Any]] = []
        self.closed = False

    def produce(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        partition: int = -1,
        callback: Any = None,
        on_delivery: Any = None,
        timestamp: int = 0,
        headers: Any = None,
    ) -> None:
        self.produced.append(
            {
                "topic": topic,
                "value": value,
                "key": key,
                "partition": partition,
                "on_delivery": callback or on_delivery,
                "timestamp": timestamp,
                "headers": headers,
            }
        )

    def flush(self, timeout: float = -1) -> int:
        return 0

    def poll(self, timeout: float = -1) -> int:
        return 0

    def close(self) -> bool:
        self.closed = True
        return True

    def __len__(self) -> int:
        return len(self.produced)

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> str:
        return "metadata"


@pytest.fixture
def clients(monkeypatch: pytest.MonkeyPatch) -> list[RecordingProducer]:
    """Every client the producers build, as stand-ins."""
    made: list[RecordingProducer] = []

    def build(config: dict[str, Any]) -> RecordingProducer:
        made.append(RecordingProducer(config))
        return made[-1]

    monkeypatch.setattr(producer_module, "application_producer", build)
    return made


def test_the_producer_adds_its_header_and_leaves_the_callers_headers_alone(
    clients: list[RecordingProducer], encoder: Encoder, decoder: Decoder, events: list[bytes]
) -> None:
    producer = ZdictProducer({"bootstrap.servers": "kafka:9092"}, encoder=encoder)
    callback = print
    producer.produce(TOPIC, events[0], b"key", 2, callback)  # Producer's positional order
    mine: list[tuple[str, bytes]] = [("app", b"1")]
    producer.produce(TOPIC, value=events[1], headers=mine, timestamp=1234)
    producer.produce(TOPIC, value=events[2], headers={"app": b"2"})
    producer.produce(TOPIC, value=events[3].decode())  # str, as Producer takes it
    assert mine == [("app", b"1")]
    first, second, third, fourth = clients[0].produced
    assert (first["key"], first["partition"], first["on_delivery"]) == (b"key", 2, callback)
    assert first["headers"] == [encoder.header]
    assert second["headers"] == [("app", b"1"), encoder.header] and second["timestamp"] == 1234
    assert third["headers"] == {"app": b"2", "zd": encoder.header[1]}
    third["headers"] = list(third["headers"].items())
    sent = [(r["value"], r["headers"]) for r in (first, second, third, fourth)]
    assert [decoder.decode(v, h) for v, h in sent] == events[:4]
    # The application's configuration, plus the statistics the output mode reads.
    config = dict(clients[0].config)
    assert callable(config.pop("stats_cb"))
    assert config == {"bootstrap.servers": "kafka:9092", "statistics.interval.ms": "5000"}


def test_the_producer_compresses_at_its_dictionarys_batch_level_and_exports_it(
    clients: list[RecordingProducer], orders: Dictionary, events: list[bytes]
) -> None:
    chosen = orders.meta.model_copy(update={"batch_level": 9})
    encoder = Encoder(Dictionary(chosen, orders.data))
    registry = CollectorRegistry()
    metrics = ProducerMetrics(registry)
    zstd = {"bootstrap.servers": "kafka:9092", "compression.type": "zstd"}
    ZdictProducer(zstd, encoder=encoder, metrics=metrics).produce(TOPIC, events[0])
    assert clients[0].config["compression.level"] == "9"
    level = registry.get_sample_value("zdict_batch_compression_level", {"topic": TOPIC})
    assert level == 9
    # A level of the application's wins, and is the one shown.
    theirs = CollectorRegistry()
    mine = ProducerMetrics(theirs)
    ZdictProducer({**zstd, "compression.level": "5"}, encoder=encoder, metrics=mine)
    mine.tally("clicks")
    assert clients[1].config["compression.level"] == "5"
    assert theirs.get_sample_value("zdict_batch_compression_level", {"topic": "clicks"}) == 5


def test_the_serializing_producer_takes_key_then_value_and_runs_the_serializers(
    clients: list[RecordingProducer], encoder: Encoder, decoder: Decoder
) -> None:
    producer = ZdictSerializingProducer(
        {
            "bootstrap.servers": "kafka:9092",
            "key.serializer": StringSerializer(),
            "value.serializer": StringSerializer(),
        },
        encoder=encoder,
    )
    producer.produce(TOPIC, "order-1", "v" * 300)  # SerializingProducer's positional order
    (sent,) = clients[0].produced
    assert sent["key"] == b"order-1"
    assert decoder.decode(sent["value"], sent["headers"]) == b"v" * 300
    assert "value.serializer" not in clients[0].config  # not handed to librdkafka


def test_the_producers_errors_are_confluents(
    clients: list[RecordingProducer], encoder: Encoder, events: list[bytes]
) -> None:
    def broken(obj: Any, ctx: Any) -> bytes:
        raise ValueError("no schema for it")

    producer = ZdictSerializingProducer({"key.serializer": broken}, encoder=encoder)
    with pytest.raises(KeySerializationError, match="no schema"):
        producer.produce(TOPIC, key="k", value=b"v")
    producer = ZdictSerializingProducer({"value.serializer": broken}, encoder=encoder)
    with pytest.raises(ValueSerializationError, match="no schema"):
        producer.produce(TOPIC, key="k", value=b"v")
    plain = ZdictProducer({}, encoder=encoder)
    with pytest.raises(ValueSerializationError, match="not a zstd frame"):
        plain.produce(TOPIC, events[0], headers=[encoder.header])  # a spoofed header
    with pytest.raises(TypeError, match="got dict"):
        plain.produce(TOPIC, {"not": "bytes"})
    with pytest.raises(TypeError, match="topic must be a str"):
        plain.produce(b"orders", b"v")  # type: ignore[arg-type]
    with pytest.raises(NotImplementedError, match="call produce"):
        plain.produce_batch(TOPIC, [{"value": b"v"}])
    with pytest.raises(ValueError, match=r"value\.serializer\.builder"):
        ZdictProducer({"value.serializer.builder": object()}, encoder=encoder)
    with pytest.raises(ValueError, match="must be callable"):
        ZdictProducer({"value.serializer": "json"}, encoder=encoder)
    assert not any(client.produced for client in clients)


def test_the_rest_is_the_wrapped_producers_and_close_ends_it(
    clients: list[RecordingProducer], encoder: Encoder
) -> None:
    with ZdictProducer({}, encoder=encoder) as producer:
        producer.produce(TOPIC, b"v")
        assert len(producer) == 1 and producer.flush(1.0) == 0 and producer.poll(0) == 0
        assert producer.list_topics() == "metadata"  # delegated
        assert bool(producer)
        with pytest.raises(AttributeError):
            producer._hidden  # noqa: B018 - private names are never delegated
    assert clients[0].closed
    with pytest.raises(RuntimeError, match="closed"):
        producer.produce(TOPIC, b"v")
    assert producer.close() is True  # idempotent


def test_a_namespace_rule_picks_the_dictionary_of_another_namespace(
    clients: list[RecordingProducer], orders: Dictionary, events: list[bytes]
) -> None:
    seen: list[str] = []

    class Encoders:
        header_key = "zd"
        encoders: Mapping[str, Encoder] = MappingProxyType({})  # every record asks encoder()

        def encoder(self, namespace: str) -> Encoder:
            seen.append(namespace)
            return Encoder(orders if namespace == TOPIC else None)

    producer = ZdictProducer({}, encoder=Encoders(), namespace=lambda t: t.split(".")[0])  # type: ignore[arg-type]
    producer.produce("orders.eu", events[0])
    producer.produce("orders.us", events[1])
    assert seen == [TOPIC, TOPIC]
    assert {header_dict_id(r["headers"], "zd") for r in clients[0].produced} == {orders.id}


# -- the consumer, around a stand-in ---------------------------------------------------------------


class QueuedConsumer:
    """Stands in for confluent_kafka.Consumer: hands out the messages it was given."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.queue: list[Message] = []
        self.closed = False

    def poll(self, timeout: float = -1) -> Message | None:
        return self.queue.pop(0) if self.queue else None

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        out, self.queue = self.queue[:num_messages], self.queue[num_messages:]
        return out

    def subscribe(self, topics: list[str]) -> None:
        self.config["subscribed"] = topics

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def consumers(monkeypatch: pytest.MonkeyPatch) -> list[QueuedConsumer]:
    made: list[QueuedConsumer] = []

    def build(config: dict[str, Any]) -> QueuedConsumer:
        made.append(QueuedConsumer(config))
        return made[-1]

    monkeypatch.setattr(consumer_module, "application_consumer", build)
    return made


def consumed(offset: int, value: bytes | None, headers: Any, key: bytes = b"k") -> Message:
    return Message(topic=TOPIC, partition=0, offset=offset, key=key, value=value, headers=headers)


def test_the_consumer_hands_out_values_as_produced_and_headers_without_ours(
    consumers: list[QueuedConsumer], encoder: Encoder, decoder: Decoder, events: list[bytes]
) -> None:
    consumer = ZdictConsumer({"group.id": "g"}, decoder=decoder)
    a, a_headers = encoder.encode(events[0], [("app", b"1")])
    b, b_headers = encoder.encode(events[1])
    corrupt_headers = [encoder.header]
    consumers[0].queue = [
        consumed(0, a, a_headers),
        consumed(1, b, b_headers),
        consumed(2, b"not a frame", corrupt_headers),
        consumed(3, b"raw", None),  # not ours: as it is
        Message(error=KafkaError(KafkaError._PARTITION_EOF)),  # events pass untouched
    ]
    first = consumer.poll(0)
    assert first is not None
    assert (first.value(), first.headers()) == (events[0], [("app", b"1")])
    second, bad, raw, eof = consumer.consume(10, 0)
    assert (second.value(), second.headers(), second.key()) == (events[1], None, b"k")
    error = bad.error()
    assert error is not None and is_deserialization_error(error)
    assert "CorruptFrame" in error.str() and bad.value() == b"not a frame"
    assert (raw.value(), raw.headers(), raw.error()) == (b"raw", None, None)
    eof_error = eof.error()
    assert eof_error is not None and not is_deserialization_error(eof_error)
    consumer.subscribe([TOPIC])  # delegated
    assert consumers[0].config["subscribed"] == [TOPIC]
    consumer.close()
    assert consumers[0].closed


def test_the_consumer_runs_the_application_deserializers_after_decoding(
    consumers: list[QueuedConsumer], encoder: Encoder, decoder: Decoder
) -> None:
    consumer = ZdictConsumer(
        {
            "group.id": "g",
            "key.deserializer": StringDeserializer(),
            "value.deserializer": lambda data, ctx: json.loads(data),
        },
        decoder=decoder,
    )
    order = {"order_id": "A-1", "lines": ["x" * 20] * 8}
    value, headers = encoder.encode(json.dumps(order).encode())
    consumers[0].queue = [consumed(0, value, headers), consumed(1, b"{not json", None)]
    good, bad = consumer.consume(2, 0)
    # What the application's deserializers made (Message's stub says bytes).
    assert cast(Any, (good.key(), good.value())) == ("k", order)
    error = bad.error()
    assert error is not None and "value does not deserialize" in error.str()
    assert "key.deserializer" not in consumers[0].config


# -- configuration and metrics ---------------------------------------------------------------------


def test_the_registry_reader_gets_the_connection_properties_only() -> None:
    conf = {
        "bootstrap.servers": "kafka:9092",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "app",
        "sasl.password": "secret",
        "ssl.ca.location": "/ca.pem",
        "enable.ssl.certificate.verification": True,
        "socket.timeout.ms": 30000,
        "linger.ms": 5,
        "acks": "all",
        "error_cb": print,
        "value.serializer": print,
    }
    assert registry_properties(conf) == {
        "bootstrap.servers": "kafka:9092",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "app",
        "sasl.password": "secret",
        "ssl.ca.location": "/ca.pem",
        "enable.ssl.certificate.verification": "true",
        "socket.timeout.ms": "30000",
    }
    conf = {"key.deserializer": print, "group.id": "g"}
    assert take_serdes(conf, "key.deserializer", "value.deserializer") == (print, None)
    assert conf == {"group.id": "g"}


def scrape(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for sample in family.samples
    }


def test_the_producer_metrics_count_records_bytes_time_and_the_dictionary(
    clients: list[RecordingProducer], encoder: Encoder, events: list[bytes]
) -> None:
    registry = CollectorRegistry()
    metrics = ProducerMetrics(registry)
    producer = ZdictProducer({}, encoder=encoder, metrics=metrics)
    values = [*events[:100], None, b"\x1f\x8b gzip already"]
    for value in values:
        producer.produce(TOPIC, value)
    got = scrape(registry)
    topic = (("topic", TOPIC),)
    outcomes = {
        outcome: got[("zdict_producer_records_total", (("outcome", outcome), *topic))]
        for outcome in Outcome.ALL
    }
    assert outcomes[Outcome.TOMBSTONE] == 1 and outcomes[Outcome.PRECOMPRESSED] == 1
    assert sum(outcomes.values()) == len(values)
    raw = sum(len(v) for v in values if v is not None)
    assert got[("zdict_producer_input_bytes_total", topic)] == raw
    sent = sum(
        len(r["value"]) + (len(r["headers"][0][0]) + len(r["headers"][0][1]) + 2)
        if r["headers"]
        else len(r["value"] or b"")
        for r in clients[0].produced
    )
    assert got[("zdict_producer_output_bytes_total", topic)] == sent < raw
    assert got[("zdict_producer_encode_duration_seconds_count", topic)] == len(values)
    assert 0 < got[("zdict_producer_encode_duration_seconds_sum", topic)] < 1.0
    info = (("dict_id", str(encoder.dict_id)), ("topic", TOPIC), ("version", "1"))
    assert got[("zdict_producer_dictionary_info", info)] == 1
    metrics.registry_read(True)
    metrics.registry_read(False)
    got = scrape(registry)
    assert got[("zdict_producer_registry_reads_total", (("result", "ok"),))] == 1
    assert got[("zdict_producer_registry_reads_total", (("result", "failed"),))] == 1
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        ProducerMetrics(registry)


def test_the_dictionary_metric_says_none_and_counts_stay_exact_across_threads() -> None:
    registry = CollectorRegistry()
    metrics = ProducerMetrics(registry)
    serializer = ZdictSerializer(Encoder(None), metrics=metrics)
    values = list(generate("order", 500, seed=2))

    def produce() -> None:
        for value in values:
            serializer(value, value_ctx([]))

    threads = [threading.Thread(target=produce) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    got = scrape(registry)
    topic = (("topic", TOPIC),)
    assert got[("zdict_producer_encode_duration_seconds_count", topic)] == 4 * len(values)
    assert got[("zdict_producer_input_bytes_total", topic)] == 4 * sum(map(len, values))
    none = (("dict_id", str(NO_DICTIONARY)), ("topic", TOPIC), ("version", "0"))
    assert got[("zdict_producer_dictionary_info", none)] == 1
    # The threads have ended: their counts are folded in once, and stay.
    assert scrape(registry) == got
    more = threading.Thread(target=produce)
    more.start()
    more.join()
    got = scrape(registry)
    assert got[("zdict_producer_encode_duration_seconds_count", topic)] == 5 * len(values)
    assert got[("zdict_producer_input_bytes_total", topic)] == 5 * sum(map(len, values))


def test_the_dictionary_metric_names_the_last_record_s_whichever_thread_produced_it(
    encoder: Encoder, orders: Dictionary, events: list[bytes]
) -> None:
    registry = CollectorRegistry()
    metrics = ProducerMetrics(registry)
    plain = ZdictSerializer(Encoder(None), metrics=metrics)
    trained = ZdictSerializer(encoder, metrics=metrics)
    none = (("dict_id", str(NO_DICTIONARY)), ("topic", TOPIC), ("version", "0"))
    ours = (("dict_id", str(orders.id)), ("topic", TOPIC), ("version", str(orders.meta.version)))

    def dictionaries() -> set[tuple[tuple[str, str], ...]]:
        return {k[1] for k in scrape(registry) if k[0] == "zdict_producer_dictionary_info"}

    first = threading.Thread(target=lambda: plain(events[0], value_ctx([])))
    first.start()
    first.join()
    assert dictionaries() == {none}
    trained(events[1], value_ctx([]))  # later, on another thread
    assert dictionaries() == {ours}
    helper = threading.Thread(target=lambda: plain(events[2], value_ctx([])))
    helper.start()
    helper.join()
    assert dictionaries() == {none}


# -- the output mode -----------------------------------------------------------------------------


def _window(topic: str, batches: int, records: int, sent: dict[int, int]) -> str:
    """One window of librdkafka producer statistics: the topic's batches, records sent so far."""
    partitions = {str(p): {"partition": p, "txmsgs": n} for p, n in sent.items()}
    return json.dumps(
        {
            "type": "producer",
            "topics": {
                topic: {"batchcnt": {"cnt": batches, "sum": records}, "partitions": partitions}
            },
        }
    )


def test_the_producer_writes_raw_values_where_its_batches_fill_past_the_crossover(
    clients: list[RecordingProducer], orders: Dictionary, decoder: Decoder, events: list[bytes]
) -> None:
    crossing = Dictionary(
        orders.meta.model_copy(update={"raw_crossover": {"zstd": 8.0}}), orders.data
    )
    seen: list[str] = []
    registry = CollectorRegistry()
    producer = ZdictProducer(
        {"compression.type": "zstd", "stats_cb": seen.append},
        encoder=Encoder(crossing),
        metrics=ProducerMetrics(registry),
    )
    stats_cb = clients[0].config["stats_cb"]
    report = _window(TOPIC, 13, 1003, {0: 1000, 1: 3})
    stats_cb(report)
    assert seen == [report]  # the application's own stats_cb still gets every report
    producer.produce(TOPIC, events[0], partition=0)  # batches of ~100 records: raw
    producer.produce(TOPIC, events[1], partition=1)  # single records: frames
    producer.produce(TOPIC, events[2])  # the partitioner's choice: the topic's mean fill, raw
    producer.produce(TOPIC, events[3], partition=0, headers=[("app", b"1")])
    raw, framed, any_partition, with_headers = clients[0].produced
    assert (raw["value"], raw["headers"]) == (events[0], None)
    assert framed["headers"] == [("zd", Encoder(crossing).header[1])]
    assert decoder.decode(framed["value"], framed["headers"]) == events[1]
    assert (any_partition["value"], any_partition["headers"]) == (events[2], None)
    assert (with_headers["value"], with_headers["headers"]) == (events[3], [("app", b"1")])
    mode = registry.get_sample_value
    assert (
        mode("zdict_producer_output_mode", {"topic": TOPIC, "partition": "0", "mode": "raw"}) == 1
    )
    assert (
        mode("zdict_producer_output_mode", {"topic": TOPIC, "partition": "1", "mode": "raw"}) == 0
    )
    assert (
        mode("zdict_producer_output_mode", {"topic": TOPIC, "partition": "-1", "mode": "raw"}) == 1
    )
    # The raw records are counted, at their size in and out; only the frame was encoded.
    got = scrape(registry)
    topic = (("topic", TOPIC),)
    assert got[("zdict_producer_records_total", (("outcome", "raw"), *topic))] == 3
    assert got[("zdict_producer_records_total", (("outcome", "compressed"), *topic))] == 1
    raw_bytes = len(events[0]) + len(events[2]) + len(events[3])
    assert got[("zdict_producer_input_bytes_total", topic)] == raw_bytes + len(events[1])
    frame_cost = len(framed["value"]) + Encoder(crossing).header_bytes
    assert got[("zdict_producer_output_bytes_total", topic)] == raw_bytes + frame_cost
    assert got[("zdict_producer_encode_duration_seconds_count", topic)] == 1


def test_the_producer_frames_every_value_with_output_mode_frames_or_another_batch_codec(
    clients: list[RecordingProducer], orders: Dictionary, events: list[bytes]
) -> None:
    crossing = Dictionary(
        orders.meta.model_copy(update={"raw_crossover": {"zstd": 8.0}}), orders.data
    )
    off = ZdictProducer(
        {"compression.type": "zstd"}, encoder=Encoder(crossing), output_mode="frames"
    )
    assert "stats_cb" not in clients[0].config
    lz4 = ZdictProducer({"compression.type": "lz4"}, encoder=Encoder(crossing))
    clients[1].config["stats_cb"](_window(TOPIC, 2, 1000, {0: 1000}))
    off.produce(TOPIC, events[0], partition=0)
    lz4.produce(TOPIC, events[0], partition=0)
    assert clients[0].produced[0]["headers"] is not None  # frames
    assert clients[1].produced[0]["headers"] is not None  # no crossover measured for lz4


@pytest.mark.parametrize(("own", "expected"), [(None, 3), ("5", 5)])
def test_the_saving_is_counted_against_the_applications_own_codec_and_level(
    clients: list[RecordingProducer],
    orders: Dictionary,
    events: list[bytes],
    own: str | None,
    expected: int,
) -> None:
    """Not against the batch level zdict chose (9 here): without zdict the producer would have
    compressed at the application's level, or at its default (3)."""
    chosen = Dictionary(orders.meta.model_copy(update={"batch_level": 9}), orders.data)
    registry = CollectorRegistry()
    config = {"compression.type": "zstd"} | ({"compression.level": own} if own else {})
    producer = ZdictProducer(
        config, encoder=Encoder(chosen), metrics=ProducerMetrics(registry), output_mode="frames"
    )
    assert clients[0].config["compression.level"] == (own or "9")
    values = events[:512]
    for value in values:
        producer.produce(TOPIC, value, partition=0)
    clients[0].config["stats_cb"](
        json.dumps(
            {
                "type": "producer",
                "topics": {TOPIC: {"batchsize": {"cnt": 1, "sum": 1000}, "batchcnt": {"sum": 512}}},
            }
        )
    )
    without = registry.get_sample_value(
        "zdict_stored_without_sidecar_bytes_total", {"topic": TOPIC, "path": "producer"}
    )
    assert without == stored_bytes([(v, ()) for v in values], 512, producer_zstd(expected))
    assert without != stored_bytes([(v, ()) for v in values], 512, producer_zstd(9))
