"""Records through the proxy, for its integration tests: the events produced, and what
arrives upstream, read back and decoded."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, cast

from confluent_kafka import Consumer, Message, TopicPartition

from sidecar.codec import Decoder


def event(i: int, source: str) -> bytes:
    """A JSON event like the ones the sidecar is made for (compressible on its own)."""
    return json.dumps(
        {
            "event": "product_viewed",
            "source": source,
            "seq": i,
            "user": f"user-{i % 97:04d}",
            "product": {"id": f"sku-{i % 31:05d}", "name": "Stainless steel water bottle"},
            "page": "https://shop.example.com/products/stainless-steel-water-bottle",
        }
    ).encode()


def read_all(bootstrap: str, topic: str, expected: int, timeout: float = 60.0) -> list[Message]:
    """Every record of `topic`, once `expected` of them are there (fails after `timeout`)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"zdict-it-proxy-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    metadata = consumer.list_topics(topic, timeout=10).topics[topic]
    consumer.assign([TopicPartition(topic, p, 0) for p in metadata.partitions])
    found: list[Message] = []
    deadline = time.monotonic() + timeout
    try:
        while len(found) < expected and time.monotonic() < deadline:
            found += [msg for msg in consumer.consume(1000, 0.5) if msg.error() is None]
        # Anything beyond `expected` (a duplicate) would arrive within this second.
        found += [msg for msg in consumer.consume(1000, 1.0) if msg.error() is None]
    finally:
        consumer.close()
    assert len(found) >= expected, f"{len(found)} of {expected} records arrived in {topic}"
    return found


def headers_of(msg: Message) -> list[tuple[str, bytes | None]]:
    """A consumed record's headers (confluent-kafka gives a list of (str, bytes) pairs)."""
    return cast(list[tuple[str, bytes | None]], msg.headers() or [])


def decoded(decoder: Decoder, messages: list[Message]) -> list[dict[str, Any]]:
    """The records as the client produced them: value decoded, our header removed."""
    out = []
    for msg in messages:
        headers = headers_of(msg)
        out.append(
            {
                "partition": msg.partition(),
                "offset": msg.offset(),
                "key": msg.key(),
                "value": decoder.decode(msg.value(), headers),
                "headers": [(k, v) for k, v in headers if k != "zd"],
                "timestamp": msg.timestamp()[1],
                "compressed": any(k == "zd" for k, _ in headers),
            }
        )
    return out
