"""Issue 37, items 1 and 2: records *stored* on the broker that `zdict-sidecar proxy` decodes on
Fetch, used as an attack, while a well-behaved producer and consumer group (confluent-kafka)
work through the same proxy on a topic of their own.

Written straight to the broker (the proxy refuses such Produce requests), each topic holds what
an attacker with write access to it could store: `zd: 0` records whose ~300-byte frame inflates
to 8 MiB + 1 without declaring it (bombs), records naming dictionary ids no registry has (each a
different one), and frames declaring and holding 8 MiB each. Raw-socket clients (`raw_kafka`)
fetch them again and again, or fetch and never read their answers. During each attack the good
clients' latency p99 (the producer's delivery, the consumer's end to end) stays within 1 s of
their baseline and every record they produce is consumed, byte-exact; the proxy's resident
memory stays within `proxy.max_buffered_bytes` + 64 MiB throughout each attack of stored
records (its peak, the kernel's VmHWM in /proc, started over with the attack), and grows by at
most the budget while clients never read their answers; SIGTERM during an attack ends it within
5 s.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import zstandard
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from sidecar.codec.wire import tag_value

from .forward_proxies import MIB, allowed, start_proxy
from .launch import SidecarEnv
from .process import Sidecar
from .proxy_fixtures import registry_env, sidecars
from .raw_kafka import FETCH, RawClient, framed, header, rss_bytes
from .topics import create_topic

PREFIX = "zdict-it-fetch-bounds"
#: The proxy's budget in this module (`proxy.max_buffered_bytes`), and what RSS may add to it.
BUDGET = 64 * MIB
RSS_ALLOWANCE = 64 * MIB
#: The decoder's value limit (the default), and a bomb's output just past it.
MAX_VALUE = 8 * MIB
#: Seconds each attack runs while the good clients work.
ATTACK_S = 8.0
#: Good records produced per second during a phase.
GOOD_RATE = 100
#: Seconds the good consumer may take to read what was produced once a phase ends.
CATCH_UP_S = 30.0
#: What an attack may add to the good clients' latency p99.
SLOWER_BY_AT_MOST_S = 1.0


@dataclass
class Latencies:
    """The good clients' latencies of one phase (seconds), and the records not consumed."""

    produce: list[float] = field(default_factory=list)
    end_to_end: list[float] = field(default_factory=list)
    lost: int = 0

    def p99(self, values: list[float]) -> float:
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] if ordered else 0.0

    def summary(self) -> str:
        return (
            f"produce p99 {self.p99(self.produce) * 1000:.0f} ms, end-to-end p99 "
            f"{self.p99(self.end_to_end) * 1000:.0f} ms, {len(self.produce)} records, "
            f"{self.lost} lost"
        )


class GoodClients:
    """A producer and a consumer group through the proxy, on a topic of their own."""

    def __init__(self, address: str, topic: str) -> None:
        self.topic = topic
        self.producer = Producer({"bootstrap.servers": address, "linger.ms": 5})
        self.consumer = Consumer(
            {
                "bootstrap.servers": address,
                "group.id": f"{topic}-group",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        self.consumer.subscribe([topic])
        self._seen: dict[bytes, float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._consume, daemon=True)
        self._thread.start()
        self._phase = 0

    def _consume(self) -> None:
        while not self._stop.is_set():
            message = self.consumer.poll(0.1)
            if message is None or message.error() is not None:
                continue
            value = message.value()
            assert value is not None
            with self._lock:
                self._seen[value] = time.time()

    def run(self, seconds: float) -> Latencies:
        """Produce `GOOD_RATE` records a second for `seconds`; their latencies, once consumed."""
        self._phase += 1
        latencies = Latencies()
        sent: dict[bytes, float] = {}

        def delivered(started: float) -> Callable[[object, object], None]:
            def report(error: object, _message: object) -> None:
                assert error is None, error
                latencies.produce.append(time.monotonic() - started)

            return report

        end = time.monotonic() + seconds
        i = 0
        while time.monotonic() < end:
            value = b"good phase %d record %06d " % (self._phase, i) + b"x" * 200
            sent[value] = time.time()
            self.producer.produce(self.topic, value, on_delivery=delivered(time.monotonic()))
            self.producer.poll(0)
            i += 1
            time.sleep(1 / GOOD_RATE)
        self.producer.flush(CATCH_UP_S)
        deadline = time.monotonic() + CATCH_UP_S
        while time.monotonic() < deadline:
            with self._lock:
                if all(v in self._seen for v in sent):
                    break
            time.sleep(0.1)
        with self._lock:
            latencies.end_to_end = [self._seen[v] - t for v, t in sent.items() if v in self._seen]
            latencies.lost = sum(v not in self._seen for v in sent)
        return latencies

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.consumer.close()


@dataclass
class Module:
    """The module's proxy and clients."""

    address: str
    process: Sidecar
    good: GoodClients
    baseline: Latencies
    bombs: str
    unknown: str
    large: str


def _bomb() -> bytes:
    """~300 bytes inflating to `MAX_VALUE` + 1 zero bytes, the size undeclared."""
    params = zstandard.ZstdCompressionParameters.from_level(3, write_content_size=0)
    cobj = zstandard.ZstdCompressor(compression_params=params).compressobj()
    return cobj.compress(bytes(MAX_VALUE + 1)) + cobj.flush()


def _store(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    """(value, zd header) records written straight to the broker, uncompressed batches."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50})
    for value, tag in records:
        producer.produce(topic, value, headers=[("zd", tag)])
    assert producer.flush(60) == 0


@pytest.fixture(scope="module")
def env(kafka_bootstrap: str, kafka_admin: AdminClient) -> SidecarEnv:
    return registry_env(kafka_bootstrap, kafka_admin)


@pytest.fixture(scope="module")
def module(
    env: SidecarEnv,
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Module]:
    bombs, unknown, large, good = (
        create_topic(kafka_admin, name_prefix=f"{PREFIX}-{kind}")
        for kind in ("bombs", "ids", "big", "good")
    )
    bomb = _bomb()
    _store(kafka_bootstrap, bombs, [(bomb, b"0")] * 3000)
    _store(
        kafka_bootstrap,
        unknown,
        [(b"never decoded %d" % i, tag_value(50_000 + i, "standard")) for i in range(500)],
    )
    eight = zstandard.ZstdCompressor().compress(bytes(MAX_VALUE))
    _store(kafka_bootstrap, large, [(eight, b"0")] * 7)
    with sidecars(env, tmp_path_factory.mktemp("fetch-bounds")) as start:
        address, process = start_proxy(
            start,
            "fetch-bounds",
            "--no-training",
            env={**allowed(good), "ZDICT_PROXY__MAX_BUFFERED_BYTES": str(BUDGET)},
        )
        clients = GoodClients(address, good)
        clients.run(3.0)  # the group joined, the connections up
        baseline = clients.run(5.0)
        print(f"\nbaseline: {baseline.summary()}")
        try:
            yield Module(address, process, clients, baseline, bombs, unknown, large)
        finally:
            clients.close()
            process.kill()


def fetch_request(topic: str, correlation_id: int, max_bytes: int = 1 << 20) -> bytes:
    """A Fetch v4 request frame: partition 0 of `topic` from offset 0, no waiting."""
    name = topic.encode()
    body = struct.pack(">iiiib", -1, 0, 0, max_bytes, 0) + struct.pack(">i", 1)
    body += struct.pack(">h", len(name)) + name + struct.pack(">i", 1)
    body += struct.pack(">iqi", 0, 0, max_bytes)
    return framed(header(FETCH, 4, correlation_id) + body)


class Attackers:
    """`count` raw clients fetching `topic` again and again, each reading its answers."""

    def __init__(self, address: str, topic: str, count: int) -> None:
        self.address = address
        self.topic = topic
        self.answers = 0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._fetch, daemon=True) for _ in range(count)]
        for thread in self._threads:
            thread.start()

    def _fetch(self) -> None:
        correlation_id = 0
        while not self._stop.is_set():
            with contextlib.suppress(OSError), RawClient(self.address, timeout=5.0) as client:
                while not self._stop.is_set():
                    correlation_id += 1
                    client.send(fetch_request(self.topic, correlation_id))
                    if client.receive() is None:
                        break
                    self.answers += 1

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(10)


def _assert_unharmed(module: Module, latencies: Latencies) -> None:
    base = module.baseline
    assert latencies.lost == 0, latencies.summary()
    for kind in ("produce", "end_to_end"):
        p99 = latencies.p99(getattr(latencies, kind))
        assert p99 <= base.p99(getattr(base, kind)) + SLOWER_BY_AT_MOST_S, (
            f"{kind}: {latencies.summary()} against a baseline of {base.summary()}"
        )


@pytest.mark.parametrize(
    "stored", ["3,000 stored bombs", "500 records naming unknown dictionaries"]
)
def test_stored_records_fetched_again_and_again_leave_other_clients_unharmed(
    module: Module, stored: str
) -> None:
    topic = module.bombs if "bombs" in stored else module.unknown
    _reset_peak(module.process.pid)
    attackers = Attackers(module.address, topic, 8)
    try:
        latencies = module.good.run(ATTACK_S)
        peak = _peak(module.process.pid)
    finally:
        attackers.stop()
    print(
        f"\n8 clients fetching {stored}: {attackers.answers} answers; peak RSS "
        f"{peak / MIB:.0f} MiB (budget {BUDGET / MIB:.0f} MiB); {latencies.summary()}"
    )
    assert attackers.answers > 0
    assert peak <= BUDGET + RSS_ALLOWANCE
    _assert_unharmed(module, latencies)


def _reset_peak(pid: int) -> None:
    """Start `pid`'s peak resident memory (VmHWM) over from its RSS now."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def _peak(pid: int) -> int:
    """`pid`'s peak resident memory since `_reset_peak`, in bytes (the kernel's VmHWM: every
    moment of it, not samples)."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(x for x in status.splitlines() if x.startswith("VmHWM:")).split()[1]) * 1024


def test_clients_that_fetch_and_never_read_keep_memory_within_the_budget(module: Module) -> None:
    pid = module.process.pid
    _reset_peak(pid)
    before = rss_bytes(pid)
    sockets = []
    for n in range(16):
        sock = socket.create_connection(tuple(module.address.rsplit(":", 1)))  # type: ignore[arg-type]
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        for i in range(4):
            sock.sendall(fetch_request(module.large, 100 * n + i, max_bytes=4 << 20))
        sockets.append(sock)
    try:
        latencies = module.good.run(ATTACK_S)
        peak = _peak(pid)
    finally:
        for sock in sockets:
            sock.close()
    print(
        f"\n16 clients fetching 7 frames of 8 MiB, never reading: RSS {before / MIB:.0f} MiB "
        f"before, peak {peak / MIB:.0f} MiB (budget {BUDGET / MIB:.0f} MiB); "
        f"{latencies.summary()}"
    )
    # The answers held are what the budget counts (each decoded answer allocated once): the
    # process grows by at most the budget. The absolute bound (budget + 64 MiB) is out
    # of reach here, the idle process alone being ~95 MiB.
    assert peak - before <= BUDGET
    _assert_unharmed(module, latencies)


def test_sigterm_during_an_attack_ends_the_proxy_within_5_s(module: Module) -> None:
    attackers = [
        Attackers(module.address, module.bombs, 4),
        Attackers(module.address, module.unknown, 4),
    ]
    try:
        time.sleep(2.0)
        started = time.monotonic()
        module.process.terminate()
        code = module.process.wait(timeout=30)
        took = time.monotonic() - started
    finally:
        for attack in attackers:
            attack.stop()
    print(f"\nSIGTERM during the attack: exit {code} after {took:.2f} s")
    assert code == 0, module.process.tail()
    assert took <= 5.0
