"""`zdict-sidecar proxy` (issue 26) with real clients against the session broker:
every request forwarded, broker addresses rewritten to the proxy's loopback listeners, values
compressed on Produce and decoded on Fetch. confluent-kafka Producer and a Consumer in a group
(FindCoordinator, JoinGroup, commits), transactions committed and aborted under read_committed,
kcat -P and -C -G, and Kafka's Java console consumer with --group, all producing and reading
through the proxy: what they read is byte-exact what was written (keys, headers, timestamps,
order), while the topic read directly from the broker holds `zd` frames."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from sidecar.codec import Decoder
from sidecar.dictionaries.registry import RegistryResolver

from .forward_proxies import allowed, start_proxy, stop_proxy
from .kafka_tools import console_consumer
from .launch import SidecarEnv, StartSidecar, environment_for, start_sidecars
from .process import Sidecar
from .topics import create_topic
from .upstream_records import event, headers_of

#: Seconds a consumer through the proxy may take to read what it expects, and a producer to
#: deliver what it produced.
READ_TIMEOUT = 60.0


def produce_all(producer: Producer, records: list[dict[str, Any]]) -> list[str]:
    """Produce every record and flush; the delivery errors."""
    errors: list[str] = []
    for record in records:
        producer.produce(
            on_delivery=lambda err, _msg: errors.append(str(err)) if err else None, **record
        )
        producer.poll(0)
    assert producer.flush(READ_TIMEOUT) == 0, "records left undelivered"
    return errors


@pytest.fixture(scope="module")
def registry_topic() -> str:
    return f"_zdict_dictionaries-{uuid.uuid4().hex}"


@pytest.fixture(scope="module")
def forward_env(kafka_bootstrap: str, registry_topic: str) -> SidecarEnv:
    return environment_for(kafka_bootstrap, registry_topic)


@pytest.fixture(scope="module")
def forward(
    forward_env: SidecarEnv, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Sidecar]]:
    """One proxy for the module: (its bootstrap address, the process)."""
    starter = start_sidecars(forward_env, tmp_path_factory.mktemp("forward"))
    start: StartSidecar = next(starter)
    address, process = start_proxy(start, "forward", env=allowed("zdict-it-forward*"))
    yield address, process
    stop_proxy(process)
    next(starter, None)


def consume(config: dict[str, Any], topics: list[str], expected: int) -> list[Message]:
    """`expected` records read by a consumer (subscribed in its group), committed."""
    consumer = Consumer({"auto.offset.reset": "earliest", "enable.auto.commit": False, **config})
    consumer.subscribe(topics)
    found: list[Message] = []
    deadline = time.monotonic() + READ_TIMEOUT
    try:
        while len(found) < expected and time.monotonic() < deadline:
            found += [m for m in consumer.consume(500, 0.5) if m.error() is None]
        found += [m for m in consumer.consume(500, 1.0) if m.error() is None]
        if found:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return found


def as_sent(messages: list[Message]) -> list[tuple[Any, ...]]:
    return [
        (m.partition(), m.key(), m.value(), headers_of(m), m.timestamp()[1])
        for m in sorted(messages, key=lambda m: (m.partition(), m.offset()))
    ]


def test_clients_see_only_the_proxys_loopback_addresses(
    forward: tuple[str, Sidecar], kafka_admin: AdminClient
) -> None:
    address, _ = forward
    admin = AdminClient({"bootstrap.servers": address})
    metadata = admin.list_topics(timeout=10)
    brokers = {(b.id, str(b.host)) for b in metadata.brokers.values()}
    assert brokers == {(1, "127.0.0.1")}
    (broker,) = metadata.brokers.values()
    assert broker.port != int(address.rsplit(":", 1)[1])
    cluster = admin.describe_cluster(request_timeout=10).result()
    assert [(n.id, n.host, n.port) for n in cluster.nodes] == [(1, "127.0.0.1", broker.port)]
    assert cluster.cluster_id == kafka_admin.describe_cluster().result().cluster_id


def test_a_producer_and_a_consumer_group_byte_exact(
    forward: tuple[str, Sidecar],
    kafka_admin: AdminClient,
    kafka_bootstrap: str,
    registry_topic: str,
) -> None:
    address, _ = forward
    topic = create_topic(kafka_admin, 3, None, "zdict-it-forward")
    sent = [
        {
            "topic": topic,
            "key": f"key-{i % 7}".encode(),
            "value": event(i, "forward"),
            "headers": [("trace", f"t{i}".encode()), ("empty", None)],
            "timestamp": 1_700_000_000_000 + i,
            "partition": i % 3,
        }
        for i in range(600)
    ]
    producer = Producer(
        {"bootstrap.servers": address, "enable.idempotence": True, "compression.type": "lz4"}
    )
    assert produce_all(producer, sent) == []
    group = f"zdict-it-forward-{uuid.uuid4().hex}"
    got = consume({"bootstrap.servers": address, "group.id": group}, [topic], len(sent))
    expected = sorted(
        (s["partition"], s["key"], s["value"], s["headers"], s["timestamp"]) for s in sent
    )
    assert sorted(as_sent(got)) == expected
    assert as_sent(got) == [
        (s["partition"], s["key"], s["value"], s["headers"], s["timestamp"])
        for s in sorted(sent, key=lambda s: (s["partition"], sent.index(s)))
    ], "in order per partition"
    committed = Consumer({"bootstrap.servers": address, "group.id": group}).committed(
        [TopicPartition(topic, p) for p in range(3)], timeout=10
    )
    assert [tp.offset for tp in committed] == [200, 200, 200], "commits went through the proxy"

    stored = consume(
        {"bootstrap.servers": kafka_bootstrap, "group.id": f"{group}-direct"}, [topic], len(sent)
    )
    assert [(m.partition(), m.offset()) for m in sorted(stored, key=_position)] == [
        (m.partition(), m.offset()) for m in sorted(got, key=_position)
    ]
    assert all([name for name, _ in headers_of(m)] == ["trace", "empty", "zd"] for m in stored), (
        "on the broker: the zd header after the client's"
    )
    resolver = RegistryResolver.connect(kafka_bootstrap, topic=registry_topic, follow_interval=None)
    with Decoder(resolver) as decoder:
        frames = [decoder.decode(m.value(), headers_of(m)) for m in sorted(stored, key=_position)]
    assert frames == [m.value() for m in sorted(got, key=_position)], "zd frames of the values"
    assert all(m.value() != s for m, s in zip(sorted(stored, key=_position), frames, strict=True))


def _position(m: Message) -> tuple[int, int]:
    return m.partition() or 0, m.offset() or 0


def test_transactions_commit_and_abort_and_read_committed_sees_the_committed(
    forward: tuple[str, Sidecar], kafka_admin: AdminClient
) -> None:
    address, _ = forward
    topic = create_topic(kafka_admin, 2, None, "zdict-it-forward-tx")
    producer = Producer(
        {"bootstrap.servers": address, "transactional.id": f"tx-{uuid.uuid4().hex}"}
    )
    producer.init_transactions(30)
    committed: list[bytes] = []
    for round_, commit in enumerate([True, False, True]):
        producer.begin_transaction()
        values = [event(i, f"tx-{round_}") for i in range(100)]
        for value in values:
            producer.produce(topic, value=value, key=b"k", partition=0)
        if commit:
            producer.commit_transaction(30)
            committed += values
        else:
            producer.flush(30)
            producer.abort_transaction(30)
    got = consume(
        {
            "bootstrap.servers": address,
            "group.id": f"zdict-it-forward-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
        },
        [topic],
        len(committed),
    )
    assert [m.value() for m in sorted(got, key=lambda m: m.offset() or 0)] == committed


def test_kcat_produces_and_consumes_in_a_group(
    forward: tuple[str, Sidecar], kafka_admin: AdminClient
) -> None:
    address, _ = forward
    topic = create_topic(kafka_admin, 1, None, "zdict-it-forward-kcat")
    lines = [f"k{i}|{event(i, 'kcat').decode()}" for i in range(200)]
    produced = subprocess.run(
        ["kcat", "-P", "-b", address, "-t", topic, "-K", "|", "-H", "via=kcat"],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert produced.returncode == 0, produced.stderr
    consumed = subprocess.run(
        [
            "kcat",
            "-C",
            "-b",
            address,
            "-G",
            f"zdict-it-forward-{uuid.uuid4().hex}",
            topic,
            "-X",
            "auto.offset.reset=earliest",
            "-c",
            str(len(lines)),
            "-f",
            "%k|%s|%h\\n",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.splitlines() == [f"{line}|via=kcat" for line in lines]


def test_the_java_console_consumer_reads_in_a_group(
    forward: tuple[str, Sidecar], kafka_admin: AdminClient
) -> None:
    address, _ = forward
    topic = create_topic(kafka_admin, 2, None, "zdict-it-forward-java")
    sent: list[dict[str, Any]] = [
        {
            "topic": topic,
            "key": f"key-{i}".encode(),
            "value": event(i, "java"),
            "headers": [("h", f"v{i}".encode())],
            "timestamp": 1_700_000_000_000 + i,
            "partition": 0,
        }
        for i in range(100)
    ]
    assert produce_all(Producer({"bootstrap.servers": address}), sent) == []
    lines = console_consumer(
        address, topic, len(sent), f"zdict-it-forward-{uuid.uuid4().hex}", partition=True
    )
    assert lines == [
        f"CreateTime:{s['timestamp']}\tPartition:0\th:v{i}\tkey-{i}\t{s['value'].decode()}"
        for i, s in enumerate(sent)
    ]
