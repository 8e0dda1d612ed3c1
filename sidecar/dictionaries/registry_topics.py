"""The registry topic and its index topic on the cluster: checked, and created when missing and
allowed (`ZDICT_REGISTRY__CREATE`), compacted, one partition each."""

from __future__ import annotations

from typing import Final

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]  # public, not in __all__

from sidecar.config import Settings
from sidecar.dictionaries.registry_state import INDEX_SUFFIX
from sidecar.errors import KafkaUnavailable, RegistryError, RegistryUnavailable
from sidecar.kafka import is_topic_already_exists, make_admin, partition_counts
from sidecar.logs import get_logger

log = get_logger(__name__)

#: Topic settings for a registry we create. Dictionaries of up to 1 MiB plus metadata must fit.
TOPIC_CONFIG: Final = {"cleanup.policy": "compact", "max.message.bytes": str(2 * 1024 * 1024)}


def ensure_topics(settings: Settings) -> None:
    """Check the registry topic (one partition), creating it compacted when missing and
    allowed; then the index topic beside it, created when allowed (without it everything works:
    readers read the whole registry at start).

    Raises:
        RegistryError: the topic is missing (and may not be created), cannot be created, or
            has more than one partition.
        RegistryUnavailable: no broker answered within `registry.timeout`.
    """
    topic, timeout = settings.registry.topic, settings.registry.timeout
    admin = make_admin(settings)
    bootstrap = settings.kafka.client_config()["bootstrap.servers"]
    try:
        counts = partition_counts(admin, [topic], timeout, bootstrap, "ZDICT_REGISTRY__TIMEOUT")
    except KafkaUnavailable as exc:
        raise RegistryUnavailable(str(exc)) from None
    if topic in counts:
        if counts[topic] != 1:
            raise RegistryError(
                f"registry topic {topic} has {counts[topic]} partitions; it needs exactly one "
                "(the order of its records decides which claim of an id wins)"
            )
    elif not settings.registry.create:
        raise RegistryError(
            f"registry topic {topic} does not exist; create it with 1 partition and "
            "cleanup.policy=compact, or set ZDICT_REGISTRY__CREATE=true"
        )
    else:
        error = _create(settings, admin, topic)
        if error is not None:
            raise RegistryError(
                f"cannot create registry topic {topic}: {error.str()}; create it with "
                "1 partition and cleanup.policy=compact (or fix ZDICT_REGISTRY__TOPIC)"
            )
        log.info("registry_topic_created", topic=topic, config=TOPIC_CONFIG)
    if settings.registry.create:
        error = _create(settings, admin, topic + INDEX_SUFFIX)
        if error is not None:
            log.warning("registry_index_not_created", topic=topic + INDEX_SUFFIX, error=error.str())


def _create(settings: Settings, admin: AdminClient, topic: str) -> KafkaError | None:
    """Create `topic` as a registry topic; the broker's refusal, unless it exists."""
    timeout = settings.registry.timeout
    new = NewTopic(
        topic,
        num_partitions=1,
        replication_factor=settings.registry.replication_factor,
        config=dict(TOPIC_CONFIG),
    )
    future = admin.create_topics([new], operation_timeout=timeout)[topic]
    try:
        future.result(timeout=timeout + 5)
    except KafkaException as exc:
        error: KafkaError = exc.args[0]
        return None if is_topic_already_exists(error) else error
    return None
