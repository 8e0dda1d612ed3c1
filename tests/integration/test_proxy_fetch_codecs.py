"""Issue 37, item 8: a consumer without zstd reads what its producers write through
`zdict-sidecar proxy` when `ZDICT_PROXY__OUTPUT_COMPRESSION=producer`, and, with the defaults,
when it fetches below v10 (KIP-110), as kafka-python does (v4).

The consumer and one producer are kafka-python as Debian ships it (`python3-kafka`, run by the
system's Python, without the optional `zstandard` package: gzip only), not our code; the other
producer is confluent-kafka writing uncompressed batches. The proxy encodes their values with a
dictionary published in the registry (the broker holds `zd` frames, read directly), keeps each
batch's codec, and the kafka-python consumer gets every value back byte-exact, without a `zd`
header. With the default (`zstd`) the same consumer reads every record too, a batch written with
zstd directly to the broker included: batches reach a Fetch below v10 uncompressed (it stopped
at the first batch before: "Libraries for zstd compression codec not found").
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from sidecar.bench.events import generate

from .forward_proxies import allowed, start_proxy, stop_proxy
from .launch import SidecarEnv
from .log_dirs import log_dirs
from .proxy_fixtures import registry_env, sidecars
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
def env(kafka_bootstrap: str, kafka_admin: AdminClient) -> SidecarEnv:
    return registry_env(kafka_bootstrap, kafka_admin)


@pytest.fixture(scope="module")
def events() -> list[bytes]:
    return list(generate("product_viewed", 2000 + 2 * RECORDS, seed=37))


def _topic_with_dictionary(
    env: SidecarEnv, kafka_bootstrap: str, kafka_admin: AdminClient, events: list[bytes]
) -> str:
    """A topic whose namespace has a dictionary published and active in the registry."""
    name = create_topic(kafka_admin, name_prefix="zdict-it-codecs")
    publish_dictionary(kafka_bootstrap, env()["ZDICT_REGISTRY__TOPIC"], name, events[:2000])
    return name


@dataclass
class Topics:
    #: Written through the proxy keeping producers' codecs, and through one with the defaults.
    producer: str
    default: str


@pytest.fixture(scope="module")
def topics(
    env: SidecarEnv, kafka_bootstrap: str, kafka_admin: AdminClient, events: list[bytes]
) -> Topics:
    return Topics(
        _topic_with_dictionary(env, kafka_bootstrap, kafka_admin, events),
        _topic_with_dictionary(env, kafka_bootstrap, kafka_admin, events),
    )


@dataclass
class Proxies:
    #: `ZDICT_PROXY__OUTPUT_COMPRESSION=producer`, and the defaults (zstd).
    producer: str
    default: str


@pytest.fixture(scope="module")
def proxies(
    env: SidecarEnv, topics: Topics, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Proxies]:
    with sidecars(env, tmp_path_factory.mktemp("fetch-codecs")) as start:
        producer, first = start_proxy(
            start,
            "fetch-codecs",
            "--no-training",
            env={**allowed(topics.producer), "ZDICT_PROXY__OUTPUT_COMPRESSION": "producer"},
        )
        default, second = start_proxy(
            start, "fetch-codecs-default", "--no-training", env=allowed(topics.default)
        )
        yield Proxies(producer, default)
        stop_proxy(first)
        stop_proxy(second)


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


def _produce_through(proxy: str, topic: str, events: list[bytes]) -> list[bytes]:
    """kafka-python (gzip) and confluent-kafka (uncompressed) produce to `topic` through
    `proxy`, RECORDS each; the values written."""
    by_kafka_python = events[2000 : 2000 + RECORDS]
    by_librdkafka = events[2000 + RECORDS :]
    _system_python(PRODUCE, proxy, topic, str(RECORDS), stdin=b"\n".join(by_kafka_python) + b"\n")
    producer = Producer({"bootstrap.servers": proxy, "compression.type": "none"})
    for value in by_librdkafka:
        producer.produce(topic, value)
    assert producer.flush(30) == 0
    return by_kafka_python + by_librdkafka


def _stored_as_frames(kafka_bootstrap: str, topic: str, count: int) -> int:
    """How many of the first `count` records of `topic`, read directly, are zd frames."""
    stored = Consumer(
        {"bootstrap.servers": kafka_bootstrap, "group.id": uuid.uuid4().hex}
        | {"auto.offset.reset": "earliest", "enable.auto.commit": False}
    )
    stored.subscribe([topic])
    encoded = 0
    for _ in range(count):
        message = stored.poll(10)
        assert message is not None and message.error() is None
        encoded += any(key == "zd" for key, _ in headers_of(message))
    stored.close()
    return encoded


def _read_without_zstd(proxy: str, topic: str, count: int) -> list[dict[str, Any]]:
    """What kafka-python without zstd (Fetch v4) reads of `topic` through `proxy`."""
    lines = _system_python(CONSUME, proxy, topic, str(count)).splitlines()
    return [json.loads(line) for line in lines]


def _stored_bytes(kafka_admin: AdminClient, topic: str) -> int:
    """Bytes of `topic`'s log segments on the broker."""
    return sum(
        segment.stat().st_size
        for directory in log_dirs(kafka_admin)
        for segment in directory.glob(f"{topic}-*/*.log")
    )


def test_a_consumer_without_zstd_reads_what_its_producers_write_through_the_proxy(
    proxies: Proxies, topics: Topics, kafka_bootstrap: str, events: list[bytes]
) -> None:
    written = _produce_through(proxies.producer, topics.producer, events)
    encoded = _stored_as_frames(kafka_bootstrap, topics.producer, len(written))
    read = _read_without_zstd(proxies.producer, topics.producer, len(written))

    print(f"\n{encoded} of {len(written)} stored as zd frames; kafka-python read {len(read)}")
    assert encoded > 0, "the proxy encoded values: there was something to decode"
    assert sorted(r["value"].encode() for r in read) == sorted(written)
    assert all("zd" not in r["headers"] for r in read)


def test_with_the_defaults_a_fetch_below_v10_gets_no_zstd_batch(
    proxies: Proxies,
    topics: Topics,
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    events: list[bytes],
) -> None:
    """kafka-python fetches with v4, which cannot carry zstd (KIP-110): the batches the proxy
    stored with zstd, and one a producer wrote with zstd directly, reach it in another codec."""
    written = _produce_through(proxies.default, topics.default, events)
    # The same records as the other test's, stored with the producers' codecs there.
    zstd, producer = (_stored_bytes(kafka_admin, t) for t in (topics.default, topics.producer))
    direct = Producer({"bootstrap.servers": kafka_bootstrap, "compression.type": "zstd"})
    extra = events[:RECORDS]
    for value in extra:
        direct.produce(topics.default, value)
    assert direct.flush(30) == 0
    encoded = _stored_as_frames(kafka_bootstrap, topics.default, len(written))
    read = _read_without_zstd(proxies.default, topics.default, len(written) + len(extra))

    print(
        f"\n{encoded} of {len(written)} stored as zd frames; kafka-python read {len(read)}; "
        f"the same records stored with zstd: {zstd} bytes, with the producers' codecs: "
        f"{producer} bytes"
    )
    assert encoded > 0
    assert sorted(r["value"].encode() for r in read) == sorted(written + extra)
    assert all("zd" not in r["headers"] for r in read)
