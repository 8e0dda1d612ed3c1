"""`ZdictSerializer` and `ZdictDeserializer`: compression in confluent-kafka's serialization API.

They compose with the application's own value (de)serializer (JSON, Avro, Protobuf: that one
runs first when producing, last when consuming) and carry the dictionary id in the record's
`zd` header through the `SerializationContext`, as Confluent's Schema Registry serdes carry a
schema id in headers. With `SerializingProducer` the context's headers are the caller's own
`headers` argument, by reference: the serializer appends to that list (or sets the key of that
dict), so the caller must pass one (`headers=[]`); `ZdictSerializingProducer` does it for them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

from confluent_kafka.serialization import (
    Deserializer,
    MessageField,
    SerializationContext,
    SerializationError,
    Serializer,
)

from sidecar.codec import Decoder, Encoder, Outcome
from sidecar.serde.following import FollowingEncoder
from sidecar.serde.metrics import ProducerMetrics, ProducerTopicMetrics

#: What the application hands in: confluent-kafka accepts str, bytes and None as values.
Value = bytes | str | bytearray | memoryview | None
#: How a topic's namespace is found: its name (None), one namespace, or a function of the topic.
NamespaceRule = str | Callable[[str], str] | None

_COMPRESSED: Final = Outcome.COMPRESSED
_RAW: Final = Outcome.RAW
_perf_counter: Final = time.perf_counter


def as_bytes(value: Value) -> bytes | None:
    """A value as bytes, the way confluent-kafka's producer takes it (str as UTF-8).

    Raises:
        TypeError: anything else; a serializer for it belongs in front of zdict.
    """
    if value is None or type(value) is bytes:
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise TypeError(
        f"zdict compresses bytes, got {type(value).__name__}: serialize it first (pass the "
        "application's serializer as `inner`, or as value.serializer to a zdict producer)"
    )


class ValueEncoding:
    """The one step both the serializer and the producers take: a value for a topic, encoded
    with its namespace's encoder now, counted in the producer's metrics.

    `encode` returns the value to send and the header to add to its record (None when the value
    goes as it was). Each producing thread counts in tallies of its own (no lock per record).
    """

    __slots__ = (
        "_by_topic",
        "_current",
        "_encoder_for",
        "_fixed",
        "_local",
        "_metrics",
        "_rule",
        "header_key",
    )

    def __init__(
        self,
        encoders: FollowingEncoder | Encoder,
        namespace: NamespaceRule = None,
        metrics: ProducerMetrics | None = None,
    ) -> None:
        if isinstance(encoders, Encoder):
            fixed = encoders
            self._encoder_for: Callable[[str], Encoder] = lambda _namespace: fixed
            self._current: Callable[[str], Encoder | None] = self._encoder_for
            self.header_key = fixed.header_key
        else:
            self._encoder_for = encoders.encoder
            # The live mapping's own get (no Python call per record); `encoder()` on a miss.
            self._current = encoders.encoders.get
            self.header_key = encoders.header_key
        self._fixed = namespace if isinstance(namespace, str) else None
        self._rule = namespace if callable(namespace) else None
        self._by_topic = self._fixed is None and self._rule is None
        self._metrics = metrics
        self._local = threading.local()

    def namespace(self, topic: str) -> str:
        """The namespace whose dictionary compresses `topic`'s records."""
        if self._fixed is not None:
            return self._fixed
        return topic if self._rule is None else self._rule(topic)

    def encoder(self, topic: str) -> Encoder:
        """The encoder that compresses `topic`'s records now."""
        namespace = self.namespace(topic)
        return self._current(namespace) or self._encoder_for(namespace)

    def crossover(self, topic: str, codec: str) -> float | None:
        """The output crossover of the dictionary that compresses `topic` now, for batch codec
        `codec` (None: no dictionary, or unknown)."""
        dictionary = self.encoder(topic).dictionary
        return None if dictionary is None else dictionary.meta.output_crossover(codec)

    def encode(
        self, topic: str, value: bytes | None, ours: Sequence[tuple[str, bytes | None]] | None
    ) -> tuple[bytes | None, tuple[str, bytes] | None]:
        """Encode `value`: (the value to send, the header to add or None). `ours` are the
        record's headers under our key, if it has any (a record compressed already is passed
        through, a spoofed header refused).

        Raises:
            CorruptFrame: the record carries our header but its value is no frame of it.
        """
        # Once per record: the common case (the topic is the namespace) without a call.
        namespace = topic if self._by_topic else self.namespace(topic)
        encoder = self._current(namespace) or self._encoder_for(namespace)
        metrics = self._metrics
        started = _perf_counter() if metrics is not None else 0.0  # timed for the metrics only
        if value is None or ours:  # a tombstone, or a header of ours already: every rule
            encoded = encoder.encode_record(value, ours)
            out, outcome, size, cost = encoded[0], encoded[2], encoded[3], encoded[4]
        else:  # the common case, in one call
            out, outcome = encoder.encode_value(value)
            size = len(value)
            cost = len(out) + encoder.header_bytes if outcome == _COMPRESSED else size
        if metrics is not None:
            ended = _perf_counter()
            try:
                tally = self._local.tallies[topic]
            except (AttributeError, KeyError):
                tally = self._tally(topic)
            tally.outcomes[outcome] += 1
            tally.input_bytes += size
            tally.output_bytes += cost
            tally.encode_seconds += ended - started
            tally.dictionary = encoder.dictionary
            tally.at = ended
        return out, (encoder.header if outcome == _COMPRESSED else None)

    def count_raw(self, topic: str, value: bytes | None) -> None:
        """One record of `topic` written raw (its partition's output mode): outcome `raw`, its
        value's size in and out (`codec.raw_values`), no encode time. Nothing without
        metrics."""
        if self._metrics is None:
            return
        try:
            tally = self._local.tallies[topic]
        except (AttributeError, KeyError):
            tally = self._tally(topic)
        size = len(value) if value is not None else 0
        tally.outcomes[_RAW] += 1
        tally.input_bytes += size
        tally.output_bytes += size

    def _tally(self, topic: str) -> ProducerTopicMetrics:
        """The calling thread's tally of `topic`, made on its first record there."""
        assert self._metrics is not None
        tallies: dict[str, ProducerTopicMetrics] | None = getattr(self._local, "tallies", None)
        if tallies is None:
            tallies = self._local.tallies = {}
        tally = tallies[topic] = self._metrics.tally(topic)
        return tally


def our_headers(headers: Any, key: str) -> list[tuple[str, bytes | None]] | None:
    """The headers of a record under our key, as the codec reads them (None: it has none).

    `headers` is what confluent-kafka takes: a list of (key, value) pairs or a dict, values
    str, bytes or None.
    """
    if not headers:
        return None
    if isinstance(headers, dict):
        return as_pairs({key: headers[key]}) if key in headers else None
    return as_pairs([(k, v) for k, v in headers if k == key])


def as_pairs(headers: Any) -> list[tuple[str, bytes | None]] | None:
    """Headers as the codec reads them: (key, bytes or None) pairs, str values as UTF-8."""
    if not headers:
        return None
    items = headers.items() if isinstance(headers, dict) else headers
    return [(k, v.encode() if isinstance(v, str) else v) for k, v in items]


class ZdictSerializer(Serializer):
    """A value serializer that compresses with the active dictionary of the topic's namespace.

    Use it as `value.serializer` of a `SerializingProducer` (pass `headers=[]` to `produce`: the
    dictionary id goes in a header), or call it with a `SerializationContext` of your own::

        encoders = FollowingEncoder.connect("kafka:9092")
        producer = SerializingProducer({
            "bootstrap.servers": "kafka:9092",
            "value.serializer": ZdictSerializer(encoders, inner=JSONSerializer(schema, client)),
        })
        producer.produce("orders", key=order_id, value=order, headers=[])

    `inner` (the application's serializer) runs first; tombstones (None) stay None.
    """

    def __init__(
        self,
        encoders: FollowingEncoder | Encoder,
        inner: Callable[[Any, SerializationContext | None], Any] | None = None,
        *,
        namespace: NamespaceRule = None,
        metrics: ProducerMetrics | None = None,
    ) -> None:
        """Args:
        encoders: a `FollowingEncoder` (the registry's active dictionaries), or one fixed
            `Encoder` (e.g. `Encoder.from_store`).
        inner: the application's value serializer, run before compression.
        namespace: the namespace whose dictionary compresses a topic's records: the topic's
            name (default), one name, or a function of the topic.
        metrics: the producer's metrics (on the application's `CollectorRegistry`).
        """
        self._encoding = ValueEncoding(encoders, namespace, metrics)
        self._inner = inner

    def __call__(self, obj: Any, ctx: SerializationContext | None = None) -> bytes | None:
        """The record value to produce; our header is added to `ctx.headers` when compressed.

        Raises:
            SerializationError: no context, a key (only values are compressed), or headers
                that cannot take ours (None, a tuple).
            CorruptFrame: the record carries our header but its value is no frame of it.
        """
        if ctx is None:
            raise SerializationError(
                "ZdictSerializer needs the SerializationContext (topic, headers) that "
                "SerializingProducer passes; it writes the dictionary id into the headers"
            )
        if ctx.field != MessageField.VALUE:
            raise SerializationError(
                "ZdictSerializer compresses record values: use it as value.serializer, not "
                f"for the {ctx.field}"
            )
        headers = ctx.headers
        if headers is None or not isinstance(headers, list | dict):
            shown = "none" if headers is None else f"a {type(headers).__name__}"
            raise SerializationError(
                f"ZdictSerializer writes the dictionary id into a record header, and produce() "
                f"got {shown}: SerializingProducer can only add to the list (or dict) the "
                "caller passes. Pass headers=[] (or your own list) to produce(), or use "
                "sidecar.serde.ZdictSerializingProducer, which does"
            )
        value = self._inner(obj, ctx) if self._inner is not None else obj
        key = self._encoding.header_key
        out, header = self._encoding.encode(ctx.topic, as_bytes(value), our_headers(headers, key))
        if header is not None:
            if isinstance(headers, dict):
                headers[key] = header[1]
            else:
                headers.append(header)
        return out

    def set_cluster_id_resolver(self, resolver: Callable[[], Any]) -> None:
        """Hand the cluster id resolver on to `inner` (Schema Registry serializers use it)."""
        hand_on = getattr(self._inner, "set_cluster_id_resolver", None)
        if hand_on is not None:
            hand_on(resolver)


class ZdictDeserializer(Deserializer):
    """A value deserializer that decodes what `ZdictSerializer` (or the relay) compressed.

    Use it as `value.deserializer` of a `DeserializingConsumer`; the decoder finds dictionaries
    in the registry, reading it again before it fails on an id it does not know yet::

        decoder = Decoder(RegistryResolver.connect("kafka:9092"))
        consumer = DeserializingConsumer({
            "bootstrap.servers": "kafka:9092", "group.id": "billing",
            "value.deserializer": ZdictDeserializer(decoder, inner=JSONDeserializer(schema)),
        })

    Records without our header are passed through unchanged; `inner` (the application's
    deserializer) runs last.
    """

    def __init__(
        self,
        decoder: Decoder,
        inner: Callable[[bytes | None, SerializationContext | None], Any] | None = None,
    ) -> None:
        self.decoder = decoder
        self._inner = inner

    def __call__(self, value: bytes | None, ctx: SerializationContext | None = None) -> Any:
        """The decoded value (then `inner`'s object).

        Raises:
            SerializationError: no context, or a key.
            UnknownDictionary, CorruptFrame, OutputTooLarge: the value does not decode.
        """
        if ctx is None:
            raise SerializationError(
                "ZdictDeserializer needs the SerializationContext (topic, headers) that "
                "DeserializingConsumer passes; the dictionary id is in the headers"
            )
        if ctx.field != MessageField.VALUE:
            raise SerializationError(
                "ZdictDeserializer decodes record values: use it as value.deserializer, not "
                f"for the {ctx.field}"
            )
        decoded = self.decoder.decode(value, as_pairs(ctx.headers))
        return self._inner(decoded, ctx) if self._inner is not None else decoded

    def set_cluster_id_resolver(self, resolver: Callable[[], Any]) -> None:
        """Hand the cluster id resolver on to `inner` (Schema Registry deserializers use it)."""
        hand_on = getattr(self._inner, "set_cluster_id_resolver", None)
        if hand_on is not None:
            hand_on(resolver)
