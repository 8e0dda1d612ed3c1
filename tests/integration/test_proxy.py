"""`zdict-sidecar proxy` with real clients against a real broker: kcat, confluent-kafka (plain
and idempotent) and Kafka's own Java console producer produce through the proxy; every record
must arrive upstream once, in order per partition, byte-exact after decoding, with its key,
headers, timestamp and partition; acks 0, 1 and all; batches the client compressed; records
larger than a batch; many partitions; two clients at once; malformed requests; the dictionary
lifecycle. Upstream going away and coming back: test_proxy_faults.py."""

from __future__ import annotations

import datetime
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Message, Producer

from sidecar.codec import Decoder
from sidecar.dictionaries.registry import RegistryResolver
from sidecar.record_batch import NewRecord, encode_batch
from tests.unit.proxy_wire import nested, read_response, request_frame

from .launch import SidecarEnv, StartSidecar, environment_for, start_sidecars
from .process import Sidecar, free_port
from .proxy_records import decoded, event, headers_of, read_all
from .topics import create_topic

KAFKA_LOCAL = Path(__file__).resolve().parents[2] / "deploy" / "kafka" / "kafka-local"
#: Seconds a client may take to deliver what it produced through the proxy.
DELIVERY_TIMEOUT = 60.0


@pytest.fixture(scope="module")
def proxy_env(kafka_bootstrap: str) -> SidecarEnv:
    return environment_for(kafka_bootstrap, f"_zdict_dictionaries-{uuid.uuid4().hex}")


@pytest.fixture(scope="module")
def proxy(
    proxy_env: SidecarEnv, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Sidecar]]:
    """One proxy for the module: (its address, the process)."""
    starter = start_sidecars(proxy_env, tmp_path_factory.mktemp("proxy"))
    start: StartSidecar = next(starter)
    address = f"127.0.0.1:{free_port()}"
    process = start("proxy", "--listen", address, "--metrics-port", "0", name="proxy")
    process.wait_for_event("proxy_listening", timeout=60)
    yield address, process
    process.terminate()
    assert process.wait() == 0, process.tail()
    next(starter, None)


@pytest.fixture(scope="module")
def decoder(kafka_bootstrap: str, proxy_env: SidecarEnv) -> Iterator[Decoder]:
    registry = proxy_env()["ZDICT_REGISTRY__TOPIC"]
    with Decoder(RegistryResolver.connect(kafka_bootstrap, topic=registry)) as dec:
        yield dec


def produce_all(producer: Producer, records: list[dict[str, Any]]) -> list[KafkaError]:
    """Produce every record, flush; the delivery errors."""
    errors: list[KafkaError] = []

    def report(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            errors.append(err)

    for record in records:
        while True:
            try:
                producer.produce(on_delivery=report, **record)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(DELIVERY_TIMEOUT) == 0, "records left undelivered"
    return errors


@pytest.mark.parametrize(
    ("acks", "idempotent", "compression"),
    [
        ("0", False, "none"),
        ("1", False, "none"),
        ("all", False, "none"),
        ("1", False, "gzip"),
        ("all", True, "none"),
        ("all", True, "zstd"),
        ("all", True, "lz4"),
        ("all", True, "gzip"),
    ],
    ids=lambda v: v if isinstance(v, str) else ("idempotent" if v else "plain"),
)
def test_confluent_kafka_records_arrive_once_in_order_byte_exact(
    proxy: tuple[str, Sidecar],
    kafka_bootstrap: str,
    kafka_admin: Any,
    decoder: Decoder,
    acks: str,
    idempotent: bool,
    compression: str,
) -> None:
    topic = create_topic(kafka_admin, 8, None, "zdict-it-proxy")
    producer = Producer(
        {
            "bootstrap.servers": proxy[0],
            "acks": acks,
            "enable.idempotence": idempotent,
            "compression.type": compression,
            "linger.ms": 5,
        }
    )
    sent = [
        {
            "topic": topic,
            "key": f"key-{i % 13}".encode(),
            "value": event(i, "confluent-kafka"),
            "headers": [("trace", f"t{i}".encode()), ("empty", None)],
            "timestamp": 1_700_000_000_000 + i,
            "partition": i % 8,
        }
        for i in range(2000)
    ]
    assert produce_all(producer, sent) == []
    got = decoded(decoder, read_all(kafka_bootstrap, topic, len(sent)))
    assert len(got) == len(sent), "every record once"
    by_partition: dict[int, list[dict[str, Any]]] = {}
    for record in sorted(got, key=lambda r: (r["partition"], r["offset"])):
        by_partition.setdefault(record["partition"], []).append(record)
    for partition, records in by_partition.items():
        expected = [r for r in sent if r["partition"] == partition]
        assert [(r["key"], r["value"], r["headers"], r["timestamp"]) for r in records] == [
            (s["key"], s["value"], s["headers"], s["timestamp"]) for s in expected
        ]
    assert sum(r["compressed"] for r in got) > len(got) / 2, "most values compressed"


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_kcat_records_arrive_with_keys_headers_and_partitions(
    proxy: tuple[str, Sidecar], kafka_bootstrap: str, kafka_admin: Any, decoder: Decoder, acks: str
) -> None:
    topic = create_topic(kafka_admin, 3, None, "zdict-it-proxy")
    lines = [f"k{i}|{event(i, 'kcat').decode()}" for i in range(300)]
    result = subprocess.run(
        [
            "kcat",
            "-P",
            "-b",
            proxy[0],
            "-t",
            topic,
            "-p",
            "2",
            "-K",
            "|",
            "-H",
            "via=kcat",
            "-X",
            f"acks={acks}",
            "-X",
            "linger.ms=5",
        ],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "failed" not in result.stderr.lower(), result.stderr
    got = decoded(decoder, read_all(kafka_bootstrap, topic, len(lines)))
    assert [(r["partition"], r["key"], r["value"], r["headers"]) for r in got] == [
        (2, f"k{i}".encode(), event(i, "kcat"), [("via", b"kcat")]) for i in range(300)
    ]


@pytest.mark.parametrize("compression", ["none", "lz4", "zstd"])
def test_the_java_console_producer_idempotent_by_default(
    proxy: tuple[str, Sidecar],
    kafka_bootstrap: str,
    kafka_admin: Any,
    decoder: Decoder,
    compression: str,
) -> None:
    topic = create_topic(kafka_admin, 4, None, "zdict-it-proxy")
    lines = [f"h:java,n:{i}\tkey-{i % 4}\t{event(i, 'java').decode()}" for i in range(500)]
    started = int(time.time() * 1000)
    result = subprocess.run(
        [
            sys.executable,
            str(KAFKA_LOCAL),
            "tools",
            "console-producer",
            "--bootstrap-server",
            proxy[0],
            "--topic",
            topic,
            "--reader-property",
            "parse.key=true",
            "--reader-property",
            "parse.headers=true",
            "--command-property",
            f"compression.type={compression}",
            "--command-property",
            "acks=all",
            "--command-property",
            "linger.ms=5",
        ],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    got = decoded(decoder, read_all(kafka_bootstrap, topic, len(lines)))
    assert len(got) == len(lines)
    by_key: dict[bytes, list[dict[str, Any]]] = {}
    for record in sorted(got, key=lambda r: (r["partition"], r["offset"])):
        by_key.setdefault(record["key"], []).append(record)
    for k in range(4):
        records = by_key[f"key-{k}".encode()]
        assert [r["value"] for r in records] == [event(i, "java") for i in range(k, 500, 4)]
        assert [r["headers"] for r in records] == [
            [("h", b"java"), ("n", str(i).encode())] for i in range(k, 500, 4)
        ]
    assert all(r["timestamp"] >= started for r in got)
    assert proxy[1].events("request_refused") == [], "the Java client's requests were served"


def test_records_larger_than_a_batch_and_two_clients_at_once(
    proxy: tuple[str, Sidecar], kafka_bootstrap: str, kafka_admin: Any, decoder: Decoder
) -> None:
    topic = create_topic(kafka_admin, 2, None, "zdict-it-proxy")
    large = [event(i, "large") * 2000 for i in range(5)]  # ~400 KB each, batch.size 16 KB
    sent: dict[str, list[bytes]] = {"a": [], "b": []}

    def client(name: str) -> None:
        producer = Producer(
            {"bootstrap.servers": proxy[0], "enable.idempotence": True, "batch.size": 16384}
        )
        values = [event(i, name) for i in range(1500)] + (large if name == "a" else [])
        sent[name] = values
        errors = produce_all(
            producer, [{"topic": topic, "key": name.encode(), "value": v} for v in values]
        )
        assert errors == []

    threads = [threading.Thread(target=client, args=(name,)) for name in sent]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    total = sum(len(v) for v in sent.values())
    got = decoded(decoder, read_all(kafka_bootstrap, topic, total))
    assert len(got) == total
    for name, values in sent.items():
        mine = sorted(
            (r for r in got if r["key"] == name.encode()),
            key=lambda r: (r["partition"], r["offset"]),
        )
        assert [r["value"] for r in mine] == values


def raw_request(address: str, data: bytes) -> bytes:
    """Send `data`, close the sending side; every byte the proxy sends back until it closes."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        chunks: list[bytes] = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_malformed_requests_close_their_connection_and_the_proxy_serves_on(
    proxy: tuple[str, Sidecar], kafka_bootstrap: str, kafka_admin: Any, decoder: Decoder
) -> None:
    address, process = proxy
    topic = create_topic(kafka_admin, 1, None, "zdict-it-proxy")
    producer = Producer({"bootstrap.servers": address})
    assert produce_all(producer, [{"topic": topic, "value": event(0, "before")}]) == []
    before = rss_kib(process.pid)
    # A gigantic size prefix, a frame cut short, an unknown API key, a Fetch: each connection
    # is closed without an answer, nothing is allocated for the announced size.
    assert raw_request(address, struct.pack(">i", 2**31 - 1) + b"\0" * 100) == b""
    assert raw_request(address, struct.pack(">i", 1000) + b"\0\x12\0\0") == b""
    assert raw_request(address, struct.pack(">ihhi", 10, 999, 0, 1) + b"\0\0") == b""
    assert raw_request(address, struct.pack(">ihhi", 10, 1, 12, 1) + b"\0\0") == b""
    assert rss_kib(process.pid) - before < 50_000, "memory stays bounded"
    # A batch with a bad CRC is answered CORRUPT_MESSAGE; nothing of it is written.
    batch = bytearray(encode_batch([NewRecord(event(0, "bad"), timestamp=1)]))
    batch[-1] ^= 0xFF
    partition = nested(0, 9, "PartitionProduceData")(index=0, records=bytes(batch))
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout": datetime.timedelta(seconds=5),
        "topic_data": (nested(0, 9, "TopicProduceData")(name=topic, partition_data=(partition,)),),
    }
    answer = raw_request_one(address, request_frame(0, 9, 1, **body))
    _, response = read_response(0, 9, answer)
    assert response.responses[0].partition_responses[0].error_code == 2  # CORRUPT_MESSAGE
    refused = [e for e in process.log_lines() if e.get("event") == "request_refused"]
    assert any("above the proxy's limit" in e["error"] for e in refused)
    assert any("api key 999" in e["error"] for e in refused)
    # ... and a real client is served all along.
    assert produce_all(producer, [{"topic": topic, "value": event(1, "after")}]) == []
    records = decoded(decoder, read_all(kafka_bootstrap, topic, 2))
    assert [r["value"] for r in records] == [event(0, "before"), event(1, "after")]


def raw_request_one(address: str, frame: bytes) -> bytes:
    """Send one request frame; the response frame without its size prefix."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(frame)
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
            chunk = sock.recv(65536)
            assert chunk, "connection closed before the answer"
            data += chunk
        return data[4:]


def test_a_dictionary_is_trained_published_and_used(
    proxy: tuple[str, Sidecar], kafka_bootstrap: str, kafka_admin: Any, decoder: Decoder
) -> None:
    address, process = proxy
    topic = create_topic(kafka_admin, 1, None, "zdict-it-proxy")
    producer = Producer({"bootstrap.servers": address, "linger.ms": 5})
    first = [{"topic": topic, "value": event(i, "lifecycle")} for i in range(6000)]
    assert produce_all(producer, first) == []
    loaded = process.wait_for_event(
        "dictionary_loaded", timeout=120, where=lambda e: e.get("namespace") == topic
    )
    later = [{"topic": topic, "value": event(i, "lifecycle")} for i in range(6000, 6100)]
    assert produce_all(producer, later) == []
    got = decoded(decoder, read_all(kafka_bootstrap, topic, len(first) + len(later)))
    assert [r["value"] for r in got] == [r["value"] for r in first + later]
    tail = read_all(kafka_bootstrap, topic, len(first) + len(later))[-len(later) :]
    ids = {decoder.dictionary_id(headers_of(m)) for m in tail}
    assert ids == {loaded["dict_id"]}, "records after the activation use the new dictionary"


def test_the_upstream_topic_can_be_a_mapped_one(
    proxy_env: SidecarEnv,
    tmp_path: Path,
    kafka_bootstrap: str,
    kafka_admin: Any,
    decoder: Decoder,
) -> None:
    topic = create_topic(kafka_admin, 2, None, "zdict-it-proxy")
    create_topic(kafka_admin, 2, None, "unused")  # the mapped topic is made below by name
    kafka_admin.create_topics(
        [__import__("confluent_kafka.admin").admin.NewTopic(f"{topic}.zd", 2)]
    )
    starter = start_sidecars(proxy_env, tmp_path)
    start = next(starter)
    address = f"127.0.0.1:{free_port()}"
    process = start(
        "proxy",
        "--listen",
        address,
        "--upstream-topic",
        "{topic}.zd",
        "--no-training",
        "--metrics-port",
        "0",
        name="mapped",
    )
    process.wait_for_event("proxy_listening", timeout=60)
    producer = Producer({"bootstrap.servers": address})
    sent: list[dict[str, Any]] = [
        {"topic": topic, "value": event(i, "mapped"), "partition": i % 2} for i in range(50)
    ]
    assert produce_all(producer, sent) == []
    got = decoded(decoder, read_all(kafka_bootstrap, f"{topic}.zd", 50))
    assert sorted(r["value"] for r in got) == sorted(s["value"] for s in sent)
    assert len(read_all(kafka_bootstrap, topic, 0, timeout=2)) == 0, "nothing in the topic itself"
    process.terminate()
    assert process.wait() == 0
    next(starter, None)
