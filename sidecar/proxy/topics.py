"""The topics clients of the proxy see: internal topics and the registry topic left
out of the responses that list topics, and the topic names behind the ids of Fetch v13+.

Hidden (unless `proxy.show_internal_topics`): the topics a broker flags internal
(`__consumer_offsets`, `__transaction_state`, `__share_group_state`), every name starting with
`__` (Kafka's own: `__remote_log_metadata`, ...) and the registry topic (`registry.topic`),
whose dictionaries hold samples of every namespace's data. The responses that list topics,
from Kafka's message definitions: Metadata (every version), DescribeTopicPartitions (the
AdminClient's `describeTopics` from Kafka 3.8) and DescribeLogDirs (each log dir's topics).
A hidden topic is left out of them as a broker leaves out a topic the client may not describe
(coordinators keep working, since FindCoordinator never needs the internal topics listed);
requests that name it are refused (`access`).

Fetch v13+ names topics by id: the ids are learned from the Metadata and
DescribeTopicPartitions responses that pass (a client looks a topic up before fetching it) and
from the proxy's own Metadata at start (`known_topics`), for the registry topic's refusal
(`fetch`), the requests naming protected topics (`access`) and the metrics' topic label.

Protected (`protected`, whatever `proxy.show_internal_topics` says): the same topics, kept out of
every request that could change them; their ids are remembered apart from the others, so no
number of other topics makes the proxy forget them.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterable
from typing import Any, Final

from sidecar.dictionaries.registry_state import INDEX_SUFFIX
from sidecar.proxy.versions import DESCRIBE_LOG_DIRS, DESCRIBE_TOPIC_PARTITIONS, METADATA

#: API keys of the responses that list topics, parsed to leave hidden topics out.
LISTING: Final = frozenset({METADATA, DESCRIBE_LOG_DIRS, DESCRIBE_TOPIC_PARTITIONS})
#: Names that start with this are Kafka's own topics.
INTERNAL_PREFIX: Final = "__"
#: Topic ids remembered, at most (the topics of a cluster; past it the map starts again).
MAX_TOPIC_IDS: Final = 100_000


class TopicView:
    """Which topics clients see, and the names of topic ids (see module)."""

    def __init__(self, registry_topic: str | None, *, show_internal: bool = False) -> None:
        self.registry_topic = registry_topic
        self.show_internal = show_internal
        self._names: dict[uuid.UUID, str] = {}
        self._protected_ids: dict[uuid.UUID, str] = {}

    def protected(self, name: str | None, internal: bool = False) -> bool:
        """Whether topic `name` (flagged `internal` by the broker) is an internal topic, the
        registry topic or its index: never changed through the proxy, and read only when shown."""
        registry = self.registry_topic
        return (
            internal
            or (name or "").startswith(INTERNAL_PREFIX)
            or (registry is not None and name in (registry, registry + INDEX_SUFFIX))
        )

    def protected_id(self, topic_id: uuid.UUID) -> bool:
        """Whether `topic_id` was named as a protected topic's."""
        return topic_id in self._protected_ids

    def known_id(self, topic_id: uuid.UUID) -> bool:
        """Whether a listing named `topic_id` (protected or not)."""
        return topic_id in self._protected_ids or topic_id in self._names

    def refused(self, name: str | None) -> bool:
        """Whether records of topic `name` are kept from clients: a protected topic's (in a
        Fetch response too, should a fetch session started elsewhere carry one)."""
        return not self.show_internal and name is not None and self.protected(name)

    def hidden(self, name: str | None, internal: bool = False) -> bool:
        """Whether topic `name` (flagged `internal` by the broker) is left out of listings."""
        return not self.show_internal and self.protected(name, internal)

    def name(self, topic_id: uuid.UUID | None) -> str | None:
        """The name of `topic_id` as a listing named it (None: never seen)."""
        if topic_id is None:
            return None
        return self._names.get(topic_id) or self._protected_ids.get(topic_id)

    def learn(self, topics: Iterable[Any]) -> None:
        """Remember the id -> name of listed topics (entries with `name` and `topic_id`)."""
        for topic in topics:
            topic_id = getattr(topic, "topic_id", None)
            if topic_id is None or topic_id.int == 0 or topic.name is None:
                continue
            name = str(topic.name)
            if self.protected(name, bool(getattr(topic, "is_internal", False))):
                self._protected_ids[topic_id] = name  # a cluster's few: never forgotten
                continue
            self._protected_ids.pop(topic_id, None)
            if len(self._names) >= MAX_TOPIC_IDS and topic_id not in self._names:
                self._names.clear()  # a cluster with more topics than this: bounded, relearned
            self._names[topic_id] = name

    def filter(self, api_key: int, body: Any) -> Any:
        """A listing response (`LISTING`) without its hidden topics; others as they are."""
        if api_key in (METADATA, DESCRIBE_TOPIC_PARTITIONS):
            self.learn(body.topics)
            return dataclasses.replace(body, topics=self._visible(body.topics))
        if api_key == DESCRIBE_LOG_DIRS:
            results = tuple(
                dataclasses.replace(result, topics=self._visible(result.topics))
                for result in body.results
            )
            return dataclasses.replace(body, results=results)
        return body

    def _visible(self, topics: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(
            topic
            for topic in topics
            if not self.hidden(topic.name, bool(getattr(topic, "is_internal", False)))
        )
