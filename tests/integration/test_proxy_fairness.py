"""Fair connections and a fair event loop (issue 37, items 6 and 7), against `zdict-sidecar
proxy` as a real process in front of the session broker, with its default connection settings
(64 connections, no per-address share): hostile clients on raw sockets (`raw_kafka`), and a
well-behaved confluent-kafka producer and consumer whose request latency is measured against a
baseline run without the attack.

- 64 idle sockets held at the cap, reopened as soon as the proxy closes one: the producer and
  the consumer still get connections, deliver and read every record with a p99 latency within
  `SLOWER_BY_S` of their baseline, and the proxy writes a bounded number of warnings.
- 16 pipelined Produce requests of 100,000 tiny records over 4 connections: another client's
  Metadata is answered within `SLOWER_BY_S` of its baseline all along.
- An acks=0 Produce refused behind 24 pipelined requests: their 24 answers arrive before the
  connection is closed."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode

from .forward_proxies import start_forward_proxy
from .process import Sidecar
from .proxy_fixtures import registry_env, sidecars
from .raw_kafka import RawClient, batch, metadata, produce, produce_errors
from .topics import create_topic

PREFIX = "zdict-it-fair"
#: How much slower than its baseline a well-behaved client may be during an attack (p99).
SLOWER_BY_S = 1.0
#: The proxy's default ZDICT_PROXY__MAX_CONNECTIONS.
CAP = 64
RECORDS = 1000


@dataclass
class Fair:
    """The module's proxy."""

    address: str
    process: Sidecar


@pytest.fixture(scope="module")
def fair(
    kafka_bootstrap: str, kafka_admin: AdminClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Fair]:
    env = registry_env(kafka_bootstrap, kafka_admin)
    with sidecars(env, tmp_path_factory.mktemp("proxy-fairness")) as start:
        address, process = start_forward_proxy(start, "proxy-fairness", [f"{PREFIX}-*"])
        yield Fair(address, process)
        process.terminate()
        assert process.wait() == 0, process.tail()


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


@dataclass
class Run:
    """What a producer and a consumer through the proxy saw."""

    produce_p99: float
    consume_p99: float
    delivered: int
    consumed: int
    errors: list[str]


def clients_run(address: str, topic: str) -> Run:
    """`RECORDS` records produced at ~500/s and consumed at once, both through the proxy:
    each record's delivery latency and its latency from produce() to the consumer."""
    sent: dict[int, float] = {}
    delivery: list[float] = []
    arrival: list[float] = []
    errors: list[str] = []
    producer = Producer(
        {"bootstrap.servers": address, "linger.ms": 2, "acks": "all", "message.timeout.ms": 15_000}
    )
    consumer = Consumer(
        {
            "bootstrap.servers": address,
            "group.id": f"{PREFIX}-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    done = threading.Event()

    def consume() -> None:
        deadline = time.monotonic() + 60
        while len(arrival) < RECORDS and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error() is not None:
                errors.append(str(message.error()))
                continue
            arrival.append(time.monotonic() - sent[int(message.key() or b"-1")])
        done.set()

    def report(err: KafkaError | None, message: Message) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            delivery.append(time.monotonic() - sent[int(message.key() or b"-1")])

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    for i in range(RECORDS):
        sent[i] = time.monotonic()
        producer.produce(topic, value=b"event %06d " % i * 8, key=b"%d" % i, on_delivery=report)
        producer.poll(0)
        time.sleep(0.002)
    producer.flush(30)
    done.wait(90)
    consumer.close()
    return Run(
        p99(delivery) if delivery else float("inf"),
        p99(arrival) if arrival else float("inf"),
        len(delivery),
        len(arrival),
        errors,
    )


class IdleSockets:
    """`count` TCP connections to `address` that never send a byte, each opened again as soon
    as the proxy closes it (a client holding slots on purpose)."""

    def __init__(self, address: str, count: int) -> None:
        host, port = address.rsplit(":", 1)
        self.target = (host, int(port))
        self.count = count
        self.reopened = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._hold, daemon=True)

    def __enter__(self) -> IdleSockets:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _open(self) -> socket.socket:
        sock = socket.create_connection(self.target, timeout=5)
        sock.setblocking(False)
        return sock

    def _hold(self) -> None:
        held = [self._open() for _ in range(self.count)]
        while not self._stop.is_set():
            for i, sock in enumerate(held):
                try:
                    closed = sock.recv(1) == b""
                except BlockingIOError:
                    closed = False
                except OSError:
                    closed = True
                if closed:
                    sock.close()
                    with contextlib.suppress(OSError):
                        held[i] = self._open()
                        self.reopened += 1
            self._stop.wait(0.02)
        for sock in held:
            sock.close()


def test_idle_sockets_at_the_cap_leave_a_producer_and_a_consumer_working(
    fair: Fair, kafka_admin: AdminClient
) -> None:
    baseline = clients_run(fair.address, create_topic(kafka_admin, 1, None, PREFIX))
    assert (baseline.delivered, baseline.consumed, baseline.errors) == (RECORDS, RECORDS, [])
    warned_before = len(_warnings(fair.process))
    started = time.monotonic()
    with IdleSockets(fair.address, CAP) as idle:
        time.sleep(0.5)  # every slot held before the clients come
        attacked = clients_run(fair.address, create_topic(kafka_admin, 1, None, PREFIX))
    seconds = time.monotonic() - started
    print(
        f"\nbaseline p99: produce {baseline.produce_p99:.3f} s, consume "
        f"{baseline.consume_p99:.3f} s; with {CAP} idle sockets held ({idle.reopened} reopened "
        f"in {seconds:.1f} s): produce {attacked.produce_p99:.3f} s, consume "
        f"{attacked.consume_p99:.3f} s"
    )
    assert (attacked.delivered, attacked.consumed, attacked.errors) == (RECORDS, RECORDS, [])
    assert attacked.produce_p99 <= baseline.produce_p99 + SLOWER_BY_S
    assert attacked.consume_p99 <= baseline.consume_p99 + SLOWER_BY_S
    # One line per kind per 10 s at most (the throttle's interval), with counts held back.
    warned = len(_warnings(fair.process)) - warned_before
    assert warned <= 2 * (seconds // 10 + 1), f"{warned} lines in {seconds:.0f} s"


def _warnings(process: Sidecar) -> list[dict[str, object]]:
    return [
        e
        for e in process.log_lines()
        if e.get("event") in ("connection_refused", "connection_evicted")
    ]


def _flood_request(topic: str, correlation_id: int) -> bytes:
    """A Produce request of 100,000 tiny records in one batch (a broker takes one batch per
    partition)."""
    values: list[bytes | None] = [b"%07d" % i for i in range(100_000)]
    records = batch(values, int(time.time() * 1000))
    return produce([(topic, [(0, records)])], correlation_id=correlation_id, acks=1)


def _metadata_latencies(address: str, stop: threading.Event, out: list[float]) -> None:
    with RawClient(address, timeout=60) as client:
        correlation_id = 0
        while not stop.is_set():
            correlation_id += 1
            started = time.monotonic()
            client.send(metadata([], correlation_id=correlation_id))
            assert client.receive() is not None
            out.append(time.monotonic() - started)
            stop.wait(0.05)


def test_a_pipelined_produce_flood_leaves_the_loop_to_another_clients_metadata(
    fair: Fair, kafka_admin: AdminClient
) -> None:
    topic = create_topic(kafka_admin, 1, None, PREFIX)
    baseline: list[float] = []
    stop = threading.Event()
    probe = threading.Thread(target=_metadata_latencies, args=(fair.address, stop, baseline))
    probe.start()
    time.sleep(1.0)
    stop.set()
    probe.join(10)
    requests = [_flood_request(topic, c) for c in range(4)]
    flooders = [RawClient(fair.address, timeout=120) for _ in range(4)]
    during: list[float] = []
    stop = threading.Event()
    probe = threading.Thread(target=_metadata_latencies, args=(fair.address, stop, during))
    probe.start()
    answers: list[dict[tuple[str, int], int]] = []
    try:
        senders = [threading.Thread(target=f.send, args=(b"".join(requests),)) for f in flooders]
        for sender in senders:
            sender.start()
        for flooder in flooders:
            for _ in requests:
                answer = flooder.receive()
                assert answer is not None, "every Produce request answered"
                answers.append(produce_errors(answer))
        for sender in senders:
            sender.join(30)
    finally:
        stop.set()
        probe.join(30)
        for flooder in flooders:
            flooder.close()
    print(
        f"\nMetadata while idle: max {max(baseline):.3f} s over {len(baseline)}; during 16 "
        f"Produce requests of 100,000 records: max {max(during):.3f} s, p99 {p99(during):.3f} s "
        f"over {len(during)}"
    )
    assert answers == [{(topic, 0): ErrorCode.none}] * 16, "every record written"
    assert len(during) >= 5
    assert max(during) <= max(baseline) + SLOWER_BY_S


def test_a_refused_acks_0_produce_closes_the_connection_after_the_answers_due(
    fair: Fair, kafka_admin: AdminClient
) -> None:
    topic = create_topic(kafka_admin, 1, None, PREFIX)
    now = int(time.time() * 1000)
    earlier = b"".join(
        produce([(topic, [(0, batch([b"value %d" % c], now))])], correlation_id=c, acks=1)
        for c in range(1, 25)
    )
    refused = produce([("not-allowed", [(0, batch([b"x"], now))])], correlation_id=25, acks=0)
    with RawClient(fair.address) as client:
        client.send(earlier + refused)
        answers = []
        while (answer := client.receive()) is not None:
            answers.append(answer)
    assert len(answers) == 24, "every answer due before the refused request"
    assert [produce_errors(a) for a in answers] == [{(topic, 0): ErrorCode.none}] * 24
