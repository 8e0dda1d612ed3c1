"""Issue 37, item 8: a consumer without zstd reads what its producers write through
`zdict-sidecar proxy` when `ZDICT_PROXY__OUTPUT_COMPRESSION=producer`.

The consumer and one producer are kafka-python as Debian ships it (`python3-kafka`, run by the
system's Python, without the optional `zstandard` package: gzip only), not our code; the other
producer is confluent-kafka writing uncompressed batches. The proxy encodes their values with a
dictionary published in the registry (the broker holds `zd` frames, read directly), keeps each
batch's codec, and the kafka-python consumer gets every value back byte-exact, without a `zd`
header. With the default (`zstd`) the same consumer stops at the first batch: "Libraries for
zstd compression codec not found".
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from sidecar.bench.events import generate

from .forward_proxies import allowed, start_proxy, stop_proxy
from .launch import SidecarEnv, StartSidecar, environment_for, start_sidecars
from .topics import create_topic
from .training import publish_dictionary
from .upstream_records import headers_of

#: The system's Python, where Debian's kafka-python is installed (`make tools`).
SYSTEM_PYTHON = "/usr/bin/python3"
RECORDS = 300

PRODUCE = """
import sys
from kafka import KafkaProducer
address, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
producer = KafkaProducer(bootstrap_servers=address, compression_type="gzip", linger_ms=20)
for i in range(count):
    producer.send(topic, sys.stdin.buffer.readline().rstrip(b"\\n"), key=b"kp-%d" % i)
producer.flush(30)
"""

CONSUME = """
import json, sys
from kafka import KafkaConsumer, codec
assert not codec.has_zstd(), "this consumer must be one without zstd"
address, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
consumer = KafkaConsumer(
    topic, bootstrap_servers=address, auto_offset_reset="earliest", consumer_timeout_ms=20000
)
seen = 0
for message in consumer:
    headers = [k for k, _ in message.headers]
    print(json.dumps({"value": message.value.decode(), "headers": headers}), flush=True)
    seen += 1
    if seen == count:
        break
"""


@pytest.fixture(scope="module")
def env(kafka_bootstrap: str) -> SidecarEnv:
    return environment_for(kafka_bootstrap, f"_zdict_dictionaries-{uuid.uuid4().hex}")


@pytest.fixture(scope="module")
def events() -> list[bytes]:
    return list(generate("product_viewed", 2000 + 2 * RECORDS, seed=37))


@pytest.fixture(scope="module")
def topic(
    env: SidecarEnv, kafka_bootstrap: str, kafka_admin: AdminClient, events: list[bytes]
) -> str:
    """A topic whose namespace has a dictionary published and active in the registry."""
    registry_topic = env()["ZDICT_REGISTRY__TOPIC"]
    futures = kafka_admin.create_topics([NewTopic(registry_topic, 1, 1)], operation_timeout=30)
    futures[registry_topic].result(timeout=35)
    name = create_topic(kafka_admin, name_prefix="zdict-it-codecs")
    publish_dictionary(kafka_bootstrap, registry_topic, name, events[:2000])
    return name


@pytest.fixture(scope="module")
def proxy(env: SidecarEnv, topic: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    starter = start_sidecars(env, tmp_path_factory.mktemp("fetch-codecs"))
    start: StartSidecar = next(starter)
    address, process = start_proxy(
        start,
        "fetch-codecs",
        "--no-training",
        env={**allowed(topic), "ZDICT_PROXY__OUTPUT_COMPRESSION": "producer"},
    )
    yield address
    stop_proxy(process)
    next(starter, None)


def _system_python(script: str, *args: str, stdin: bytes = b"") -> str:
    done = subprocess.run(
        [SYSTEM_PYTHON, "-c", script, *args],
        input=stdin,
        capture_output=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    return done.stdout.decode()


def test_a_consumer_without_zstd_reads_what_its_producers_write_through_the_proxy(
    proxy: str, topic: str, kafka_bootstrap: str, events: list[bytes]
) -> None:
    by_kafka_python = events[2000 : 2000 + RECORDS]
    by_librdkafka = events[2000 + RECORDS :]
    _system_python(PRODUCE, proxy, topic, str(RECORDS), stdin=b"\n".join(by_kafka_python) + b"\n")
    producer = Producer({"bootstrap.servers": proxy, "compression.type": "none"})
    for value in by_librdkafka:
        producer.produce(topic, value)
    assert producer.flush(30) == 0

    stored = Consumer(
        {"bootstrap.servers": kafka_bootstrap, "group.id": uuid.uuid4().hex}
        | {"auto.offset.reset": "earliest", "enable.auto.commit": False}
    )
    stored.subscribe([topic])
    encoded = 0
    for _ in range(2 * RECORDS):
        message = stored.poll(10)
        assert message is not None and message.error() is None
        encoded += any(key == "zd" for key, _ in headers_of(message))
    stored.close()

    lines = _system_python(CONSUME, proxy, topic, str(2 * RECORDS)).splitlines()
    read = [json.loads(line) for line in lines]

    print(f"\n{encoded} of {2 * RECORDS} stored as zd frames; kafka-python read {len(read)}")
    assert encoded > 0, "the proxy encoded values: there was something to decode"
    assert sorted(r["value"].encode() for r in read) == sorted(by_kafka_python + by_librdkafka)
    assert all("zd" not in r["headers"] for r in read)
