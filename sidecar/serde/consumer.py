"""`ZdictConsumer`: a drop-in for `confluent_kafka.Consumer` that hands out decoded records.

Every message from `poll()` and `consume()` carries the value as it was produced and the
headers without ours (`zd`); records that were not compressed pass as they are. The decoder
finds dictionaries in the registry topic, reached with the connection properties of the
consumer's configuration, and reads the registry again before it gives up on an id it does not
know yet. `key.deserializer` / `value.deserializer` in the configuration (the application's
own, as `DeserializingConsumer` takes them) run after decoding.

A record that does not decode (an id no registry holds, a corrupt frame, a value past
`max_output_size`) or that the application's deserializer refuses is not raised: like any
other per-message error, its message comes back with `error()` set (codes
`_VALUE_DESERIALIZATION` / `_KEY_DESERIALIZATION`, the cause in the error's text) and its value
as consumed, so `consume()` never loses the records around it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, cast

from confluent_kafka import Consumer, Message
from confluent_kafka.serialization import MessageField, SerializationContext

from sidecar.codec import DEFAULT_HEADER_KEY, DEFAULT_MAX_OUTPUT_SIZE, Decoder
from sidecar.dictionaries.registry import DEFAULT_TOPIC, RegistryResolver
from sidecar.kafka import application_consumer, deserialization_error
from sidecar.serde.conf import registry_properties, take_serdes
from sidecar.serde.following import registry_client


class ZdictConsumer:
    """A `confluent_kafka.Consumer` whose messages are decoded (see the module)::

        consumer = ZdictConsumer({"bootstrap.servers": "kafka:9092", "group.id": "billing"})
        consumer.subscribe(["orders"])
        msg = consumer.poll(1.0)   # msg.value(): as produced; msg.headers(): without zd

    Every other method (subscribe, commit, seek...) is the wrapped consumer's.
    """

    def __init__(
        self,
        conf: Mapping[str, Any],
        *,
        decoder: Decoder | None = None,
        registry_topic: str = DEFAULT_TOPIC,
        max_output_size: int = DEFAULT_MAX_OUTPUT_SIZE,
        header_key: str = DEFAULT_HEADER_KEY,
    ) -> None:
        """Args:
        conf: the consumer's configuration, as confluent-kafka takes it (optionally with
            `key.deserializer` / `value.deserializer`).
        decoder: what decodes; default one over `registry_topic` on the consumer's cluster
            (its index read on the first compressed record, then each dictionary's own
            record when a record first names it), which this consumer closes.
        max_output_size, header_key: for the default decoder (bytes a decoded value may
            have; the header that carries the dictionary id).
        """
        config = dict(conf)
        self._key_deserializer, self._value_deserializer = take_serdes(
            config, "key.deserializer", "value.deserializer"
        )
        self._consumer: Consumer = application_consumer(config)
        self._owned: Decoder | None = None
        if decoder is None:
            registry = registry_client(
                registry_properties(config), topic=registry_topic, role="consumer"
            )
            decoder = self._owned = Decoder(
                RegistryResolver(registry, follow_interval=None),
                max_output_size=max_output_size,
                header_key=header_key,
            )
        self.decoder = decoder
        self._header_key = decoder.header_key

    def poll(self, timeout: float = -1) -> Message | None:
        """`Consumer.poll`, the message decoded (or marked with the error that stopped it)."""
        msg = self._consumer.poll(timeout)
        if msg is not None and msg.error() is None:
            self._decode(msg)
        return msg

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        """`Consumer.consume`, every message decoded (or marked with its error)."""
        messages = self._consumer.consume(num_messages, timeout)
        for msg in messages:
            if msg.error() is None:
                self._decode(msg)
        return messages

    def _decode(self, msg: Message) -> None:
        # A consumed message's headers are a list of (str, bytes) pairs, or None.
        headers = cast(list[tuple[str, bytes | None]] | None, msg.headers())
        key = self._header_key
        if headers and any(k == key for k, _ in headers):
            try:
                value = self.decoder.decode(msg.value(), headers)
            except Exception as exc:  # any cause: the application decides, message in hand
                msg.set_error(deserialization_error("value", exc))
                return
            msg.set_value(value)
            rest = [(k, v) for k, v in headers if k != key]
            # None, as a record without headers is consumed (the stub leaves None out).
            msg.set_headers(rest or None)  # type: ignore[arg-type]
        if self._key_deserializer is None and self._value_deserializer is None:
            return
        topic = msg.topic()
        assert topic is not None  # only error events lack one
        ctx = SerializationContext(topic, MessageField.KEY, msg.headers())
        field = "key"
        try:
            if self._key_deserializer is not None:
                msg.set_key(self._key_deserializer(msg.key(), ctx))
            field, ctx.field = "value", MessageField.VALUE
            if self._value_deserializer is not None:
                msg.set_value(self._value_deserializer(msg.value(), ctx))
        except Exception as exc:  # the application's deserializer: as above
            msg.set_error(deserialization_error(field, exc))

    def close(self) -> None:
        """Close the consumer (it leaves its group), then the decoder this consumer made."""
        try:
            self._consumer.close()
        finally:
            if self._owned is not None:
                self._owned.close()
                self._owned = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getattr__(self, name: str) -> Any:
        # Everything else is the wrapped consumer's: subscribe, assign, commit, seek...
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._consumer, name)
