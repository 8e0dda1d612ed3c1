"""`ZdictProducer` and `ZdictSerializingProducer`: producers that compress every record value
in the application's process, with the active dictionary of the topic's namespace.

Drop-ins: `ZdictProducer` for `confluent_kafka.Producer` (`produce(topic, value, key, ...)`),
`ZdictSerializingProducer` for `SerializingProducer` (`produce(topic, key, value, ...)`, with
`key.serializer` / `value.serializer` in the configuration). Both add the `zd` header
themselves, whether or not the caller passes headers (`SerializingProducer` cannot: it hands
the caller's headers to its serializers by reference), and never change the caller's list or
dict. Every other method (poll, flush, transactions...) is the wrapped producer's.

The registry is followed on a thread of the producer's own (`FollowingEncoder`), reached with
the connection properties of the producer's configuration (bootstrap.servers, security.*,
sasl.*, ssl.*): the constructor waits for the prepared namespaces' dictionaries (at most
`ready_timeout`), `produce()` never waits for a read of it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, Self

from confluent_kafka import Producer
from confluent_kafka.error import (
    KeySerializationError,
    ValueSerializationError,
)
from confluent_kafka.serialization import MessageField, SerializationContext

from sidecar.codec import Encoder
from sidecar.dictionaries.model import Dictionary
from sidecar.dictionaries.registry import DEFAULT_TOPIC
from sidecar.errors import CodecError
from sidecar.kafka import PRODUCER_STATISTICS_INTERVAL_MS, application_producer
from sidecar.kafka.batch_fill import (
    batch_codec,
    batch_level,
    batch_records,
    configured_level,
    with_batch_level,
)
from sidecar.live_crossover import MEASURE_INTERVAL, LiveCrossover
from sidecar.serde.conf import registry_properties, take_serdes
from sidecar.serde.following import (
    DEFAULT_READY_TIMEOUT,
    FollowingEncoder,
    registry_client,
)
from sidecar.serde.metrics import ProducerMetrics
from sidecar.serde.output_modes import ProducerOutputModes
from sidecar.serde.serializer import NamespaceRule, ValueEncoding, as_bytes, our_headers
from sidecar.serde.statistics import TopicsReader, stats_cb
from sidecar.serde.stored import ProducerStored

DeliveryCallback = Callable[[Any, Any], None]
#: `codec.output_mode` of the in-process producer.
OutputModeSetting = Literal["auto", "frames"]


def _with_header(headers: Any, header: tuple[str, bytes]) -> Any:
    """The caller's `headers` (a list, a dict or none) and ours, in a new list or dict."""
    if not headers:
        return [header]
    if isinstance(headers, dict):
        return {**headers, header[0]: header[1]}
    return [*headers, header]


def _dictionaries(
    encoder: FollowingEncoder | Encoder, namespaces: Iterable[str]
) -> list[Dictionary | None]:
    """The dictionaries `encoder` encodes `namespaces` with now (one encoder: its own)."""
    if isinstance(encoder, Encoder):
        return [encoder.dictionary]
    return [encoder.dictionary(namespace) for namespace in namespaces]


class _CompressingProducer:
    """What both producers share: the wrapped producer, the encoders, the one produce path."""

    def __init__(
        self,
        conf: Mapping[str, Any],
        *,
        encoder: FollowingEncoder | Encoder | None = None,
        namespace: NamespaceRule = None,
        namespaces: Iterable[str] = (),
        metrics: ProducerMetrics | None = None,
        registry_topic: str = DEFAULT_TOPIC,
        ready_timeout: float = DEFAULT_READY_TIMEOUT,
        output_mode: OutputModeSetting = "auto",
    ) -> None:
        """Args:
        conf: the producer's configuration, as confluent-kafka takes it (with
            `key.serializer` / `value.serializer` for the serializing producer).
        encoder: what compresses; default a `FollowingEncoder` of `registry_topic` on the
            producer's cluster, which this producer closes.
        namespace: the namespace whose dictionary compresses a topic's records: the topic's
            name (default), one name, or a function of the topic.
        namespaces: prepared at start, so their first records already use their dictionary
            (default: the topics a `str` namespace or the first records name).
        metrics: the producer's metrics, on the application's `CollectorRegistry`.
        registry_topic: the registry topic to follow (with the default `encoder`).
        ready_timeout: seconds the constructor waits at most for the first read of the
            registry (its index) and the prepared namespaces' dictionaries.
        output_mode: `auto`: a partition (or, for records left to the partitioner, a topic)
            whose batches hold more records than the dictionary's crossover for the producer's
            `compression.type` gets raw values, no header (`codec.output_mode`): read from
            librdkafka's statistics, so `statistics.interval.ms` is set to 5000 unless the
            configuration sets it (0: never raw), and a `stats_cb` of the application still
            gets every report; `frames`: every value compressed. With `metrics`, the same
            statistics feed what the records store (`serde.stored`).
        """
        config = dict(conf)
        self._key_serializer, self._value_serializer = take_serdes(
            config, "key.serializer", "value.serializer"
        )
        self._serializing = self._key_serializer is not None or self._value_serializer is not None
        self._modes: ProducerOutputModes | None = None
        self._stored: ProducerStored | None = None
        readers: list[TopicsReader] = []
        if metrics is not None or output_mode == "auto":
            # Against the producer as the application configured it: its codec and level.
            self._stored = ProducerStored(
                metrics.stored if metrics is not None else None,
                batch_codec(config),
                configured_level(config),
            )
        #: Per topic, the crossover its output mode reads (`live_crossover`).
        self._live: dict[str, LiveCrossover] = {}
        if output_mode == "auto":
            modes = self._modes = ProducerOutputModes(
                batch_codec(config), self._crossover, metrics, batch_records(config)
            )
            readers.append(modes.on_stats)
        if self._stored is not None:
            readers.append(self._stored.on_stats)
        if readers:
            config.setdefault("statistics.interval.ms", PRODUCER_STATISTICS_INTERVAL_MS)
            config["stats_cb"] = stats_cb(readers, config.get("stats_cb"))
        self._owned: FollowingEncoder | None = None
        prepared = [*namespaces, namespace] if isinstance(namespace, str) else list(namespaces)
        if encoder is None:
            encoder = self._owned = FollowingEncoder(
                registry_client(registry_properties(config), topic=registry_topic),
                namespaces=prepared,
                ready_timeout=ready_timeout,
                on_read=metrics.registry_read if metrics is not None else None,
            )
        # The batch level chosen at training, where the application leaves compression.level
        # unset: known once the first read of the registry is done, fixed with the producer.
        level = batch_level(d.meta.batch_level for d in _dictionaries(encoder, prepared) if d)
        try:
            config = with_batch_level(config, level)
            self._producer: Producer = application_producer(config)
        except BaseException:
            if self._owned is not None:
                self._owned.close()
            raise
        #: The zstd level the producer compresses its batches at (None: not zstd).
        self._level = configured_level(config)
        if metrics is not None:
            metrics.set_batch_level(self._level)
        self.encoder = encoder
        self._encoding = ValueEncoding(encoder, namespace, metrics)
        self._header_key = self._encoding.header_key
        self._closed = False

    def _crossover(self, topic: str, codec: str) -> float | None:
        """`topic`'s crossover for batch codec `codec`, measured on its sampled records."""
        live = self._live.get(topic)
        if live is None:
            stored = self._stored
            assert stored is not None  # sampled whenever the output mode is auto
            live = self._live[topic] = LiveCrossover(
                lambda: stored.sample(topic),
                lambda: self._encoding.encoder(topic),
                lambda codec: self._encoding.crossover(topic, codec),
                level=self._level,
                interval=MEASURE_INTERVAL,
            )
        return live(codec)

    def _produce(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int = -1,
        callback: DeliveryCallback | None = None,
        on_delivery: DeliveryCallback | None = None,
        timestamp: int = 0,
        headers: Any = None,
    ) -> None:
        """`Producer.produce`, the value compressed first (its `zd` header added).

        Raises:
            BufferError: the producer's queue is full (poll and try again).
            ValueSerializationError: the application's serializer failed, or the record
                carries a `zd` header its value does not match.
            KeySerializationError: the application's key serializer failed.
            TypeError: a value that is not bytes or str (and no serializer made it so).
            RuntimeError: the producer was closed.
        """
        if self._closed:
            raise RuntimeError("Producer has been closed")
        if not isinstance(topic, str):
            raise TypeError(f"topic must be a str, not {type(topic).__name__}")
        if self._serializing:
            ctx = SerializationContext(topic, MessageField.KEY, headers)
            if self._key_serializer is not None:
                try:
                    key = self._key_serializer(key, ctx)
                except Exception as exc:
                    raise KeySerializationError(exc) from exc
            if self._value_serializer is not None:
                ctx.field = MessageField.VALUE
                try:
                    value = self._value_serializer(value, ctx)
                except Exception as exc:
                    raise ValueSerializationError(exc) from exc
        value = value if type(value) is bytes else as_bytes(value)
        if self._stored is not None:
            self._stored.offer(topic, key, value, headers)
        report = on_delivery or callback
        modes = self._modes  # no call per record unless some partition goes raw
        if modes is not None and modes.raw and self._goes_raw(modes, topic, partition, headers):
            # Batches fill here: the value goes as it came, batch compression only.
            self._producer.produce(topic, value, key, partition, report, None, timestamp, headers)
            self._encoding.count_raw(topic, value)
            return
        try:
            value, header = self._encoding.encode(
                topic, value, our_headers(headers, self._header_key) if headers else None
            )
        except CodecError as exc:  # a header of ours on a value that is no frame of it
            raise ValueSerializationError(exc) from exc
        if header is not None:
            headers = _with_header(headers, header)
        # Positional, in Producer.produce's own order (topic, value, key, partition, callback,
        # on_delivery, timestamp, headers): keyword arguments cost the C call ~1 µs more.
        self._producer.produce(topic, value, key, partition, report, None, timestamp, headers)

    def _goes_raw(
        self, modes: ProducerOutputModes, topic: str, partition: int, headers: Any
    ) -> bool:
        """Whether a record to `topic`'s `partition` goes raw (its output mode), unless it
        carries a header of ours (then the codec's rules apply)."""
        if (topic, partition) not in modes.raw:
            return False
        return not (headers and our_headers(headers, self._header_key))

    def produce_batch(self, topic: str, messages: list[dict[str, Any]], **_: Any) -> int:
        """Refused: librdkafka's batch API carries no record headers, and the dictionary id
        travels in one. Call `produce()` for each record."""
        raise NotImplementedError(
            "produce_batch cannot carry record headers (librdkafka's batch API), and zdict "
            "writes the dictionary id into one: call produce() for each record"
        )

    def poll(self, timeout: float = -1) -> int:
        return self._producer.poll(timeout)

    def flush(self, timeout: float = -1) -> int:
        return self._producer.flush(timeout)

    def close(self) -> bool:
        """Flush and close the producer, then stop following the registry (if this producer
        started it). Later calls do nothing."""
        if self._closed:
            return True
        self._closed = True
        try:
            result = self._producer.close()
        finally:
            if self._owned is not None:
                self._owned.close()
        return result

    def __len__(self) -> int:
        return len(self._producer)

    def __bool__(self) -> bool:
        return True  # not "no messages queued", as len() would make it

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getattr__(self, name: str) -> Any:
        # Everything else is the wrapped producer's: purge, list_topics, transactions...
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._producer, name)


class ZdictProducer(_CompressingProducer):
    """A drop-in for `confluent_kafka.Producer` that compresses every record value with the
    active dictionary of the topic's namespace (see the module)::

        producer = ZdictProducer({"bootstrap.servers": "kafka:9092", "linger.ms": 5})
        producer.produce("orders", order_json, key=order_id)
        producer.flush()

    Values are bytes or str (UTF-8), as `Producer` takes them; a `value.serializer` in the
    configuration runs first. Delivery reports carry the compressed value.
    """

    # The shared implementation itself, not a wrapper around it: one Python call less per
    # record, on the path whose every step shows in the µs compression adds to produce().
    produce = _CompressingProducer._produce


class ZdictSerializingProducer(_CompressingProducer):
    """A drop-in for `confluent_kafka.SerializingProducer` that compresses every serialized
    value, adding the `zd` header whether or not `produce` gets headers::

        producer = ZdictSerializingProducer({
            "bootstrap.servers": "kafka:9092",
            "key.serializer": StringSerializer(),
            "value.serializer": JSONSerializer(schema, schema_registry),
        })
        producer.produce("orders", key=order_id, value=order)
    """

    def produce(
        self,
        topic: str,
        key: Any = None,
        value: Any = None,
        partition: int = -1,
        on_delivery: DeliveryCallback | None = None,
        timestamp: int = 0,
        headers: Any = None,
    ) -> None:
        """`SerializingProducer.produce`: key and value serialized, the value compressed.

        Raises as `ZdictProducer.produce`.
        """
        self._produce(topic, value, key, partition, None, on_delivery, timestamp, headers)
