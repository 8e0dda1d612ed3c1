"""Questions about topics and consumer groups, asked of the broker while a relay runs."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from .broker import BROKER_TIMEOUT_S, TOPIC_TIMEOUT_S


class KafkaProbe:
    """Cheap questions about topics and groups, for polling while a relay runs."""

    def __init__(self, bootstrap: str, admin: AdminClient) -> None:
        self.admin = admin
        self._consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": f"zdict-it-probe-{uuid.uuid4().hex}"}
        )

    def partitions(self, topic: str) -> list[int]:
        metadata = self.admin.list_topics(topic=topic, timeout=BROKER_TIMEOUT_S).topics[topic]
        return sorted(metadata.partitions)

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        """(low, high) of one partition; retried while a new topic's leader settles."""
        deadline = time.monotonic() + TOPIC_TIMEOUT_S
        while True:
            try:
                low, high = self._consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=BROKER_TIMEOUT_S, cached=False
                )
                return int(low), int(high)
            except KafkaException as exc:
                if not exc.args[0].retriable() and exc.args[0].code() not in (
                    KafkaError.NOT_LEADER_FOR_PARTITION,
                    KafkaError.LEADER_NOT_AVAILABLE,
                    KafkaError.UNKNOWN_TOPIC_OR_PART,
                ):
                    raise
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def end_offsets(self, topic: str) -> dict[int, int]:
        """High watermark per partition."""
        return {p: self.watermarks(topic, p)[1] for p in self.partitions(topic)}

    def count(self, topic: str) -> int:
        """Records in `topic` (sum of high - low watermarks); 0 while it does not exist."""
        if topic not in self.admin.list_topics(timeout=BROKER_TIMEOUT_S).topics:
            return 0
        watermarks = [self.watermarks(topic, p) for p in self.partitions(topic)]
        return sum(high - low for low, high in watermarks)

    def committed(self, group: str, topic: str) -> dict[int, int]:
        """The group's committed offset per partition of `topic` (-1001: none)."""
        request = ConsumerGroupTopicPartitions(
            group, [TopicPartition(topic, p) for p in self.partitions(topic)]
        )
        deadline = time.monotonic() + TOPIC_TIMEOUT_S
        while True:
            try:
                futures = self.admin.list_consumer_group_offsets([request])
                result = futures[group].result(timeout=BROKER_TIMEOUT_S)
                return {tp.partition: tp.offset for tp in result.topic_partitions}
            except KafkaException as exc:  # e.g. the coordinator is still loading
                if not exc.args[0].retriable() or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def caught_up(self, group: str, topic: str) -> bool:
        """The group committed every partition of `topic` up to its end."""
        return self.committed(group, topic) == self.end_offsets(topic)

    def close(self) -> None:
        self._consumer.close()
