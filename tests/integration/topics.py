"""Topics of the tests' own on the test broker: created with a unique name, ready to use."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Mapping

from confluent_kafka.admin import (  # type: ignore[attr-defined]  # public, but not in __all__
    AdminClient,
    NewTopic,
)

from .broker import BROKER_TIMEOUT_S, TOPIC_TIMEOUT_S

MakeTopic = Callable[..., str]
"""``make_topic(partitions=1, config=None, name_prefix="zdict-it") -> str``"""


def _wait_topic_ready(admin: AdminClient, name: str, partitions: int) -> None:
    """Wait until the broker's metadata shows ``name`` with all ``partitions`` led."""
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
                return
            state = f"error={topic.error}, partitions={len(topic.partitions)}"
        time.sleep(0.1)
    raise AssertionError(f"topic {name} not ready after {TOPIC_TIMEOUT_S:.0f}s: {state}")


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
