"""Fixtures for integration tests against a real Kafka broker.

The broker is started outside pytest by ``deploy/kafka/kafka-local``: ``make test`` runs
``deploy/kafka/kafka-local exec -- .venv/bin/pytest ...``, which exports KAFKA_BOOTSTRAP_SERVERS.
Without a reachable broker the integration tests FAIL; they are never skipped. No mocks.
"""

from __future__ import annotations

import os
import re
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # public, but not in __all__
    AdminClient,
    NewTopic,
)

BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP_SERVERS"
HOW_TO_RUN = (
    "run the integration tests via `make test` or "
    "`deploy/kafka/kafka-local exec -- .venv/bin/pytest tests/integration`"
)
BROKER_TIMEOUT_S = 15.0
TOPIC_TIMEOUT_S = 30.0

_HERE = Path(__file__).resolve().parent

MakeTopic = Callable[..., str]
"""``make_topic(partitions=1, config=None, name_prefix="zdict-it") -> str``"""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test collected under tests/integration with ``pytest.mark.integration``.

    The hook sees all collected items of the session, so it filters by path.
    """
    for item in items:
        if Path(item.path).resolve().is_relative_to(_HERE):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    """Bootstrap address of the real test broker, from $KAFKA_BOOTSTRAP_SERVERS.

    Fails (never skips) when the variable is unset or the broker does not answer within ~15 s.
    """
    bootstrap = os.environ.get(BOOTSTRAP_ENV, "").strip()
    if not bootstrap:
        pytest.fail(f"{BOOTSTRAP_ENV} is not set: {HOW_TO_RUN}", pytrace=False)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        metadata = admin.list_topics(timeout=BROKER_TIMEOUT_S)
    except KafkaException as exc:
        pytest.fail(
            f"no Kafka broker answers at {BOOTSTRAP_ENV}={bootstrap} within "
            f"{BROKER_TIMEOUT_S:.0f}s ({exc.args[0]}): {HOW_TO_RUN}",
            pytrace=False,
        )
    if not metadata.brokers:
        pytest.fail(f"Kafka at {bootstrap} reports no brokers: {HOW_TO_RUN}", pytrace=False)
    return bootstrap


@pytest.fixture(scope="session")
def kafka_admin(kafka_bootstrap: str) -> AdminClient:
    """A session-wide AdminClient connected to the test broker."""
    return AdminClient({"bootstrap.servers": kafka_bootstrap})


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


@pytest.fixture(scope="session")
def make_topic(kafka_admin: AdminClient) -> Iterator[MakeTopic]:
    """Factory creating uniquely named topics on the real broker (deleted at session end).

    ``make_topic(partitions=1, config=None, name_prefix="zdict-it")`` creates
    ``<prefix>-<uuid4 hex>`` with replication factor 1 and the given topic ``config``, waits for
    the CreateTopics result and for every partition to have a leader, and returns the name.
    Session-scoped, so fixtures of any scope can use it.
    """
    created: list[str] = []

    def factory(
        partitions: int = 1,
        config: Mapping[str, str] | None = None,
        name_prefix: str = "zdict-it",
    ) -> str:
        prefix = re.sub(r"[^A-Za-z0-9._-]", "-", name_prefix)[:200]
        name = f"{prefix}-{uuid.uuid4().hex}"
        new_topic = NewTopic(
            name, num_partitions=partitions, replication_factor=1, config=dict(config or {})
        )
        futures = kafka_admin.create_topics(
            [new_topic], operation_timeout=TOPIC_TIMEOUT_S, request_timeout=TOPIC_TIMEOUT_S
        )
        futures[name].result(timeout=TOPIC_TIMEOUT_S + 5)  # raises KafkaException on failure
        created.append(name)
        _wait_topic_ready(kafka_admin, name, partitions)
        return name

    yield factory

    if not created:
        return
    try:  # best effort: the broker's data dir is throwaway anyway
        futures = kafka_admin.delete_topics(created, operation_timeout=TOPIC_TIMEOUT_S)
        for name, fut in futures.items():
            try:
                fut.result(timeout=TOPIC_TIMEOUT_S)
            except Exception as exc:
                warnings.warn(f"could not delete test topic {name}: {exc}", stacklevel=1)
    except Exception as exc:
        warnings.warn(f"could not delete test topics {created}: {exc}", stacklevel=1)
