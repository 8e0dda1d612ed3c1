"""`zdict-sidecar proxy` decoding Fetch responses (issue 26) on a real broker.

Records are written compressed by the in-process serializer (`sidecar.serde.ZdictProducer`,
following a registry with a trained and published dictionary), and read back through the proxy
by a confluent-kafka consumer in a group, by kcat -C -G and by Kafka's Java console consumer:
values, keys, headers (no `zd`), timestamps and order are byte-exact what the application
produced, while reading the broker directly shows the `zd` frames. A transaction committed and
one aborted are read under read_committed through the proxy; a client listed in
`ZDICT_PROXY__RAW_FETCH_CLIENT_IDS` gets the records as stored; Metadata through the proxy
lists neither the internal topics nor the registry topic.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any, cast

import pytest
from confluent_kafka import Consumer, Message, Producer
from confluent_kafka.admin import AdminClient

from sidecar.bench.events import generate
from sidecar.codec import Encoder
from sidecar.dictionaries.model import Dictionary
from sidecar.dictionaries.registry_state import INDEX_SUFFIX
from sidecar.serde import ZdictProducer

from .forward_proxies import start_proxy, stop_proxy
from .kafka_tools import console_consumer
from .launch import SidecarEnv, StartSidecar, environment_for, start_sidecars
from .process import Sidecar
from .topics import create_topic
from .training import publish_dictionary
from .upstream_records import headers_of

#: Seconds a reader through the proxy may take to read what it expects.
READ_TIMEOUT = 60.0
RAW_CLIENT = "decodes-itself"
#: (partition, key, value, headers, timestamp) of a record as the application sees it.
Seen = tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]], int]


@pytest.fixture(scope="module")
def registry_topic() -> str:
    return f"_zdict_dictionaries-{uuid.uuid4().hex}"


@pytest.fixture(scope="module")
def events() -> list[bytes]:
    return list(generate("product_viewed", 3000, seed=11))


@pytest.fixture(scope="module")
def dictionary(kafka_bootstrap: str, registry_topic: str, events: list[bytes]) -> Dictionary:
    """A dictionary of namespace `fetched` trained on 2,000 events, published and active."""
    return publish_dictionary(kafka_bootstrap, registry_topic, "fetched", events[:2000])


@pytest.fixture(scope="module")
def forward(
    kafka_bootstrap: str,
    registry_topic: str,
    dictionary: Dictionary,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[str, Sidecar]]:
    """One proxy for the module: (its bootstrap address, the process)."""
    env: SidecarEnv = environment_for(kafka_bootstrap, registry_topic)
    starter = start_sidecars(env, tmp_path_factory.mktemp("forward-fetch"))
    start: StartSidecar = next(starter)
    address, process = start_proxy(
        start,
        "forward-fetch",
        env={"ZDICT_PROXY__RAW_FETCH_CLIENT_IDS": json.dumps([RAW_CLIENT])},
    )
    yield address, process
    stop_proxy(process)
    next(starter, None)


def _write(
    bootstrap: str,
    registry_topic: str,
    topic: str,
    events: list[bytes],
    compression: str,
    partitions: int = 2,
) -> list[Seen]:
    """Records produced compressed by the serde producer; what the application produced."""
    producer = ZdictProducer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "compression.type": compression},
        namespace="fetched",
        registry_topic=registry_topic,
    )
    sent: list[Seen] = []
    for i, value in enumerate(events):
        headers: list[tuple[str, bytes | None]] = [("trace", b"t-%d" % i), ("app", b"fetch")]
        timestamp = 1_700_000_000_000 + i
        producer.produce(
            topic,
            value,
            b"key-%d" % (i % 11),
            i % partitions,
            headers=list(headers),
            timestamp=timestamp,
        )
        sent.append((i % partitions, b"key-%d" % (i % 11), value, headers, timestamp))
    assert producer.flush(60) == 0
    producer.close()
    return sorted(sent, key=lambda s: (s[0], sent.index(s)))


def _seen(messages: list[Message]) -> list[Seen]:
    return [
        (
            m.partition() or 0,
            m.key(),
            m.value(),
            headers_of(m),
            m.timestamp()[1],
        )
        for m in sorted(messages, key=lambda m: (m.partition(), m.offset()))
    ]


def _consume(config: dict[str, Any], topic: str, expected: int) -> list[Message]:
    consumer = Consumer(
        {
            "group.id": f"zdict-it-fetch-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **config,
        }
    )
    consumer.subscribe([topic])
    found: list[Message] = []
    deadline = time.monotonic() + READ_TIMEOUT
    try:
        while len(found) < expected and time.monotonic() < deadline:
            found += [m for m in consumer.consume(500, 0.5) if m.error() is None]
        found += [m for m in consumer.consume(500, 1.0) if m.error() is None]
    finally:
        consumer.close()
    return found


@pytest.mark.parametrize("compression", ["none", "lz4"])
def test_a_consumer_group_reads_what_the_application_produced(
    forward: tuple[str, Sidecar],
    kafka_admin: AdminClient,
    kafka_bootstrap: str,
    registry_topic: str,
    dictionary: Dictionary,
    events: list[bytes],
    compression: str,
) -> None:
    address, _ = forward
    topic = create_topic(kafka_admin, 2, None, "zdict-it-fetch")
    sent = _write(kafka_bootstrap, registry_topic, topic, events[2000:2600], compression)

    stored = _consume({"bootstrap.servers": kafka_bootstrap}, topic, len(sent))
    assert all(dict(m.headers() or []).get("zd") for m in stored), "compressed on the broker"
    assert sum(len(m.value() or b"") for m in stored) < sum(len(s[2] or b"") for s in sent) / 2

    got = _consume({"bootstrap.servers": address}, topic, len(sent))
    assert _seen(got) == sent, "values, keys, headers without zd, timestamps, order"

    raw = _consume({"bootstrap.servers": address, "client.id": RAW_CLIENT}, topic, len(sent))
    assert _seen(raw) == _seen(stored), "a raw-fetch client gets the records as stored"


def test_read_committed_sees_the_committed_transaction_decoded(
    forward: tuple[str, Sidecar],
    kafka_admin: AdminClient,
    kafka_bootstrap: str,
    dictionary: Dictionary,
    events: list[bytes],
) -> None:
    address, _ = forward
    topic = create_topic(kafka_admin, 1, None, "zdict-it-fetch-tx")
    encoder = Encoder(dictionary)
    producer = Producer(
        {"bootstrap.servers": kafka_bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex}"}
    )
    producer.init_transactions(30)
    committed: list[bytes] = []
    for round_, commit in enumerate([True, False, True]):
        values = events[2600 + 100 * round_ : 2700 + 100 * round_]
        producer.begin_transaction()
        for out in encoder.encode_batch((v, None) for v in values):
            headers = cast(list[tuple[str, str | bytes | None]], out.headers)
            producer.produce(topic, value=out.value, headers=headers, partition=0)
        if commit:
            producer.commit_transaction(30)
            committed += values
        else:
            producer.flush(30)
            producer.abort_transaction(30)

    got = _consume(
        {"bootstrap.servers": address, "isolation.level": "read_committed"}, topic, len(committed)
    )

    assert [m.value() for m in sorted(got, key=lambda m: m.offset() or 0)] == committed
    assert all(not m.headers() for m in got), "zd removed"


def test_kcat_and_the_java_console_consumer_read_decoded_values(
    forward: tuple[str, Sidecar],
    kafka_admin: AdminClient,
    kafka_bootstrap: str,
    registry_topic: str,
    events: list[bytes],
) -> None:
    """Batches written in zstd, lz4 and snappy come back in their codec: lz4 with independent
    blocks and snappy in xerial framing, the only forms Kafka's Java reader takes."""
    address, _ = forward
    topic = create_topic(kafka_admin, 1, None, "zdict-it-fetch-cli")
    sent = [
        record
        for i, codec in enumerate(["zstd", "lz4", "snappy"])
        for record in _write(
            kafka_bootstrap,
            registry_topic,
            topic,
            events[100 * i : 100 * (i + 1)],
            codec,
            partitions=1,
        )
    ]
    lines = [
        f"{key.decode()}|{value.decode()}|trace={(headers[0][1] or b'').decode()},app=fetch"
        for _, key, value, headers, _ in sent
        if key is not None and value is not None
    ]
    kcat = subprocess.run(
        [
            "kcat",
            "-C",
            "-b",
            address,
            "-G",
            f"zdict-it-fetch-{uuid.uuid4().hex}",
            topic,
            "-X",
            "auto.offset.reset=earliest",
            "-c",
            str(len(sent)),
            "-f",
            "%k|%s|%h\\n",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert kcat.returncode == 0, kcat.stderr
    assert kcat.stdout.splitlines() == lines

    java = console_consumer(address, topic, len(sent), f"zdict-it-fetch-{uuid.uuid4().hex}")
    assert java == [
        f"CreateTime:{timestamp}\ttrace:{(headers[0][1] or b'').decode()},app:fetch\t"
        f"{(key or b'').decode()}\t{(value or b'').decode()}"
        for _, key, value, headers, timestamp in sent
    ]


def test_metadata_lists_neither_internal_topics_nor_the_registry(
    forward: tuple[str, Sidecar], kafka_admin: AdminClient, registry_topic: str
) -> None:
    address, _ = forward
    upstream = set(kafka_admin.list_topics(timeout=10).topics)
    registry = {registry_topic, registry_topic + INDEX_SUFFIX}
    assert {"__consumer_offsets"} | registry <= upstream

    listed = set(AdminClient({"bootstrap.servers": address}).list_topics(timeout=10).topics)

    assert listed == {t for t in upstream if not t.startswith("__") and t not in registry}
