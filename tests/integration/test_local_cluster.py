"""``kafka-local --brokers 3``: a KRaft cluster whose clients follow new leaders when one stops.

The cluster is the test's own (``--home`` under tmp_path), apart from the session's single
broker. A topic of replication factor 3 takes ``acks=all`` records; the broker leading partition 0
is stopped (SIGTERM); the same producer and consumer go on with the two others (new partition
leaders, perhaps a new group coordinator and active controller); the broker starts again on its
data and ports and catches up (back in every ISR); a last round goes through all three. Every
wait is bounded (kafka-local: 120 s per start; the clients: 60 s per round). The figures are
printed (``-s``): on the shared 2-core machine the whole test took 30-55 s.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # public, but not in __all__
    AdminClient,
    NewTopic,
)

from .local_cluster import LocalCluster
from .waiting import wait_until

BROKERS = 3
PARTITIONS = 3
RECORDS_PER_ROUND = 300
#: How long a round's records may take to be delivered, and read back.
ROUND_TIMEOUT_S = 60.0


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    cluster = LocalCluster(tmp_path / "cluster")
    try:
        cluster.start(BROKERS)
        yield cluster
    finally:
        cluster.stop()


def _partitions(admin: AdminClient, topic: str) -> dict[int, tuple[int, list[int]]]:
    """Partition -> (leader, ISR) as the cluster's metadata has them."""
    metadata = admin.list_topics(topic=topic, timeout=10).topics[topic]
    return {p.id: (p.leader, sorted(p.isrs)) for p in metadata.partitions.values()}


def _produce(producer: Producer, topic: str, values: list[bytes]) -> None:
    """Produce `values` and wait until every one is acknowledged by all in-sync replicas."""
    errors: list[str] = []

    def delivered(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            errors.append(err.str())

    for i, value in enumerate(values):
        producer.produce(topic, value=value, key=str(i).encode(), on_delivery=delivered)
    left = producer.flush(ROUND_TIMEOUT_S)
    assert left == 0, f"{left} records undelivered after {ROUND_TIMEOUT_S:.0f} s"
    assert not errors, errors[:5]


def _consume(consumer: Consumer, expected: set[bytes]) -> None:
    """Read until every value of `expected` has come (and commit); fail after the round's time."""
    missing = set(expected)
    # Errors the client reports while it finds the new leaders (it retries on its own).
    errors: list[str] = []
    deadline = time.monotonic() + ROUND_TIMEOUT_S
    while missing and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        error = msg.error()
        if error is not None:
            assert not error.fatal(), error
            errors.append(error.str())
            continue
        value = msg.value()
        if value is not None:
            missing.discard(value)
    assert not missing, (
        f"{len(missing)} of {len(expected)} records not read back; errors: {errors[:5]}"
    )
    consumer.commit(asynchronous=False)


def test_clients_follow_new_leaders_while_a_broker_is_stopped(cluster: LocalCluster) -> None:
    figures: dict[str, float] = {"start": cluster.timings[0][1]}
    _through_a_broker_stop(cluster, figures)
    # After the clients are gone (with the helper's frame): they would log every refused
    # reconnect until collected.
    cluster.stop()
    figures["stop"] = cluster.timings[-1][1]
    print("\n" + ", ".join(f"{what}: {seconds:.1f} s" for what, seconds in figures.items()))


def _through_a_broker_stop(cluster: LocalCluster, figures: dict[str, float]) -> None:
    """Round trips through all three brokers, then two (the leader of partition 0 stopped),
    then three again (it started again and caught up); `figures` gets the seconds taken."""
    admin = cluster.admin()
    topic = f"zdict-it-cluster-{uuid.uuid4().hex}"
    created = admin.create_topics(
        [NewTopic(topic, num_partitions=PARTITIONS, replication_factor=BROKERS)],
        operation_timeout=30,
    )
    created[topic].result(timeout=35)
    wait_until(
        lambda: all(
            leader >= 0 and len(isr) == BROKERS
            for leader, isr in _partitions(admin, topic).values()
        ),
        30,
        f"every partition of {topic} led, with {BROKERS} replicas in sync",
    )
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
        }
    )
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": f"zdict-it-cluster-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])

    def round_trip(name: str) -> None:
        values = [f"{name}-{i}".encode() for i in range(RECORDS_PER_ROUND)]
        started = time.monotonic()
        _produce(producer, topic, values)
        _consume(consumer, set(values))
        figures[f"round {name}"] = time.monotonic() - started

    try:
        round_trip("all-three")

        victim = _partitions(admin, topic)[0][0]
        cluster.stop_broker(victim)
        figures[f"stop-broker {victim}"] = cluster.timings[-1][1]
        assert cluster.states() == {
            n: "stopped" if n == victim else "serving" for n in range(1, BROKERS + 1)
        }
        wait_until(
            lambda: all(
                leader not in (-1, victim) for leader, _ in _partitions(admin, topic).values()
            ),
            30,
            f"every partition led by a broker other than {victim}",
        )
        round_trip(f"without-{victim}")

        cluster.start_broker(victim)
        figures[f"start-broker {victim}"] = cluster.timings[-1][1]
        started = time.monotonic()
        wait_until(
            lambda: all(len(isr) == BROKERS for _, isr in _partitions(admin, topic).values()),
            60,
            f"broker {victim} back in every ISR of {topic}",
        )
        figures["back in every ISR"] = time.monotonic() - started
        round_trip("back-to-three")
    finally:
        consumer.close()
        producer.flush(10)
