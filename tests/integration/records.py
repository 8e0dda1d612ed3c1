"""Kafka records as plain data, and the signatures of the fixtures that produce and consume
them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from confluent_kafka import Message

Headers = tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True, slots=True)
class Record:
    """One Kafka record as plain, comparable data: what was produced, or what was consumed."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp: int  # milliseconds (CreateTime)

    @classmethod
    def from_message(cls, msg: Message) -> Record:
        topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
        assert topic is not None and partition is not None and offset is not None
        return cls(
            topic=topic,
            partition=partition,
            offset=offset,
            key=msg.key(),
            value=msg.value(),
            headers=tuple(cast(Headers, msg.headers() or ())),
            timestamp=msg.timestamp()[1],
        )


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A record to produce; `timestamp` None lets the producer stamp it."""

    key: bytes | None
    value: bytes | None
    headers: Headers = ()
    timestamp: int | None = None


ProduceRecords = Callable[..., list[Record]]
"""``produce_records(topic, records: Iterable[Outgoing], rate=None, bootstrap=None,
flush_timeout=60.0) -> list[Record]``"""
ProduceEvents = Callable[..., list[Record]]
"""``produce_events(topic, n, *, seed=1, kind="product_viewed", keys=200, rate=None,
drift_at=None, bootstrap=None, flush_timeout=60.0)``"""
ConsumeAll = Callable[..., list[Record]]
"""``consume_all(topic, expected, timeout=60.0) -> list[Record]``"""
