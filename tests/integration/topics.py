"""Topics of the tests' own on the test broker: created with a unique name, ready to use."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Mapping

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # public, but not in __all__
    AdminClient,
    NewTopic,
    OffsetSpec,
)

from .broker import BROKER_TIMEOUT_S, TOPIC_TIMEOUT_S

MakeTopic = Callable[..., str]
"""``make_topic(partitions=1, config=None, name_prefix="zdict-it") -> str``"""


def _wait_topic_ready(admin: AdminClient, name: str, partitions: int) -> None:
    """Wait until the broker's metadata shows ``name`` with all ``partitions`` led, and each
    leader answers for its partition: metadata can name a leader a moment before that broker
    serves the partition, and a raw Produce sent then gets NOT_LEADER_OR_FOLLOWER."""
    deadline = time.monotonic() + TOPIC_TIMEOUT_S
    state = "not in metadata"
    while time.monotonic() < deadline:
        topic = admin.list_topics(topic=name, timeout=BROKER_TIMEOUT_S).topics.get(name)
        if topic is not None:
            if (
                topic.error is None
                and len(topic.partitions) == partitions
                and all(p.error is None and p.leader >= 0 for p in topic.partitions.values())
            ):
                answering = _leaders_answering(admin, name, partitions)
                if answering is None:
                    return
                state = answering
            else:
                state = f"error={topic.error}, partitions={len(topic.partitions)}"
        time.sleep(0.1)
    raise AssertionError(f"topic {name} not ready after {TOPIC_TIMEOUT_S:.0f}s: {state}")


def _leaders_answering(admin: AdminClient, name: str, partitions: int) -> str | None:
    """None if every partition's leader answers a ListOffsets for it, else why not."""
    latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]  # confluent-kafka has no annotations
    asked = {TopicPartition(name, p): latest for p in range(partitions)}
    try:
        for future in admin.list_offsets(asked, request_timeout=BROKER_TIMEOUT_S).values():
            future.result(timeout=BROKER_TIMEOUT_S)
    except KafkaException as exc:
        return f"leaders not answering yet: {exc}"
    return None


def create_topic(
    admin: AdminClient,
    partitions: int = 1,
    config: Mapping[str, str] | None = None,
    name_prefix: str = "zdict-it",
) -> str:
    """Create ``<prefix>-<uuid4 hex>`` (replication factor 1) and wait until every partition
    has a leader; its name."""
    prefix = re.sub(r"[^A-Za-z0-9._-]", "-", name_prefix)[:200]
    name = f"{prefix}-{uuid.uuid4().hex}"
    new_topic = NewTopic(
        name, num_partitions=partitions, replication_factor=1, config=dict(config or {})
    )
    futures = admin.create_topics(
        [new_topic], operation_timeout=TOPIC_TIMEOUT_S, request_timeout=TOPIC_TIMEOUT_S
    )
    futures[name].result(timeout=TOPIC_TIMEOUT_S + 5)  # raises KafkaException on failure
    _wait_topic_ready(admin, name, partitions)
    return name
