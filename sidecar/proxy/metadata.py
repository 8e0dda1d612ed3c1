"""What the proxy tells clients about the cluster: itself as the only broker, the leader of
every partition of the upstream topics, with their partition counts.

The partition counts come from the upstream cluster (a metadata request of the proxy's own
producer, on a worker thread), cached for `proxy.metadata_max_age` seconds; a topic not found
is looked up again at most every 0.2 s. While the upstream cluster does not answer, cached
counts are served; a topic never seen gets LEADER_NOT_AVAILABLE, which clients retry.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from kio.schema.errors import ErrorCode

from sidecar.config import ProxySettings
from sidecar.logs import get_logger
from sidecar.proxy.protocol import METADATA, NO_THROTTLE, build, nested, response_class

log = get_logger(__name__)

#: The broker id the proxy presents itself as.
NODE_ID: Final = 1
#: Seconds before a topic found missing upstream is looked up again (a client that created it
#: a moment ago retries its metadata request about this often).
MISSING_RETRY: Final = 0.2
#: Seconds one upstream metadata request may take.
UPSTREAM_TIMEOUT: Final = 5.0

#: Reads every topic's partition count upstream; raises when the cluster does not answer.
Lister = Callable[[float], dict[str, int]]


@dataclass(frozen=True, slots=True)
class Address:
    """Where clients reach the proxy (the address they connected to)."""

    host: str
    port: int


class UpstreamTopics:
    """The upstream topics' partition counts, cached (see module)."""

    def __init__(
        self,
        lister: Lister,
        settings: ProxySettings,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._lister = lister
        self._settings = settings
        self._clock = clock
        self._counts: dict[str, int] = {}
        self._fetched = -1e18
        self._reachable = False
        self._lock = asyncio.Lock()

    @property
    def reachable(self) -> bool:
        """Whether the last upstream metadata request was answered."""
        return self._reachable

    def names(self) -> list[str]:
        """Every upstream topic in the cache, sorted."""
        return sorted(self._counts)

    def partitions(self, topic: str) -> int | None:
        """The cached partition count of upstream topic `topic` (None: unknown)."""
        return self._counts.get(topic)

    async def refresh(self, topics: Sequence[str] | None) -> None:
        """Ask upstream again when the cache is older than its age, or misses one of `topics`
        (None: every topic) and was not refreshed within the last second."""
        now = self._clock()
        age = now - self._fetched
        missing = topics is not None and any(t not in self._counts for t in topics)
        if age < self._settings.metadata_max_age and not (missing and age >= MISSING_RETRY):
            return
        async with self._lock:  # one request at a time; those waiting use its answer
            if self._fetched > now:
                return
            loop = asyncio.get_running_loop()
            try:
                counts = await loop.run_in_executor(None, self._lister, UPSTREAM_TIMEOUT)
            except Exception as exc:  # the client reports the cluster as unreachable
                if self._reachable:
                    log.warning("upstream_metadata_failed", error=str(exc))
                self._reachable = False
                self._fetched = self._clock() - self._settings.metadata_max_age + MISSING_RETRY
                return
            self._counts = counts
            self._reachable = True
            self._fetched = self._clock()


def metadata_response(
    version: int,
    requested: Sequence[str] | None,
    topics: UpstreamTopics,
    upstream_for: Callable[[str], str],
    address: Address,
    cluster_id: str | None,
) -> Any:
    """The Metadata answer in `version`: this proxy as the one broker, leader of every
    partition of each requested topic (None: every upstream topic), its partition count that
    of the upstream topic its records go to."""
    cls = response_class(METADATA, version)
    broker_class = nested(cls, "MetadataResponseBroker")
    topic_class = nested(cls, "MetadataResponseTopic")
    partition_class = nested(cls, "MetadataResponsePartition")
    names = topics.names() if requested is None else list(requested)
    entries = []
    for name in names:
        count = topics.partitions(upstream_for(name) if requested is not None else name)
        if count is None:
            error = (
                ErrorCode.unknown_topic_or_partition
                if topics.reachable
                else ErrorCode.leader_not_available
            )
            partitions: tuple[Any, ...] = ()
        else:
            error = ErrorCode.none
            partitions = tuple(
                build(
                    partition_class,
                    error_code=ErrorCode.none,
                    partition_index=index,
                    leader_id=NODE_ID,
                    leader_epoch=0,
                    replica_nodes=(NODE_ID,),
                    isr_nodes=(NODE_ID,),
                    offline_replicas=(),
                )
                for index in range(count)
            )
        entries.append(
            build(
                topic_class,
                error_code=error,
                name=name,
                topic_id=None,
                is_internal=name.startswith("__"),
                partitions=partitions,
                topic_authorized_operations=-2147483648,
            )
        )
    return build(
        cls,
        throttle_time=NO_THROTTLE,
        brokers=(
            build(broker_class, node_id=NODE_ID, host=address.host, port=address.port, rack=None),
        ),
        cluster_id=cluster_id,
        controller_id=NODE_ID,
        topics=tuple(entries),
        cluster_authorized_operations=-2147483648,
    )
