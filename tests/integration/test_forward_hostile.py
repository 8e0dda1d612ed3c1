"""The 13 hostile clients of issue 26, and a 14th (offset deltas out of order), each against
`zdict-sidecar proxy` as a real process in front of the session broker, with a raw-socket client
sending hand-built frames (and confluent-kafka where a real client shows it best). Each test
asserts the Kafka error or the closed connection expected, that nothing refused reached the topic
(read directly), that the proxy survives (alive, another client served right after) and, where
the case is about memory, that the proxy's resident memory stays within its bounds (VmRSS / VmHWM
from /proc).

The proxy runs with small bounds (`forward_proxies`): 4 MiB a request and a batch decompressed,
16 MiB buffered and decompressed per request, 256 KiB a value, a 2 s read timeout."""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import zstandard
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from kio.schema.errors import ErrorCode

from sidecar.codec.wire import tag_value

from .forward_proxies import (
    MAX_DECOMPRESSED_REQUEST_BYTES,
    MAX_REQUEST_BYTES,
    MAX_VALUE_BYTES,
    MIB,
    READ_TIMEOUT_S,
    PausableRelay,
    start_forward_proxy,
)
from .launch import SidecarEnv, StartSidecar, environment_for, start_sidecars
from .probe import KafkaProbe
from .process import Sidecar
from .raw_kafka import (
    FETCH,
    INIT_PRODUCER_ID,
    ZSTD,
    Batch,
    RawClient,
    batch,
    fix_crc,
    framed,
    header,
    listed_topics,
    metadata,
    produce,
    produce_errors,
    record,
    rss_bytes,
)
from .topics import create_topic
from .waiting import wait_until

PREFIX = "zdict-it-hostile"
NOW_MS = int(time.time() * 1000)
#: Seconds within which a client served right after an attack must get its answer.
SERVED_WITHIN_S = 1.0


class Hostile:
    """The module's proxy: its address, process and the registry topic it protects."""

    def __init__(self, address: str, process: Sidecar, registry: str) -> None:
        self.address = address
        self.process = process
        self.registry = registry

    def served(self) -> float:
        """Seconds a fresh client waited for a Metadata answer (the proxy alive and serving)."""
        assert self.process.running(), self.process.tail()
        started = time.monotonic()
        with RawClient(self.address) as client:
            client.send(metadata([], correlation_id=7))
            answer = client.receive()
        assert answer is not None, "another client is served"
        return time.monotonic() - started

    def rss(self) -> int:
        return rss_bytes(self.process.pid)

    def peak(self) -> int:
        """The process's peak resident memory so far (VmHWM)."""
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        line = next(x for x in status.splitlines() if x.startswith("VmHWM:"))
        return int(line.split()[1]) * 1024


@pytest.fixture(scope="module")
def env(kafka_bootstrap: str) -> SidecarEnv:
    return environment_for(kafka_bootstrap, f"_zdict_dictionaries-{uuid.uuid4().hex}")


@pytest.fixture(scope="module")
def hostile(
    env: SidecarEnv, kafka_admin: AdminClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Hostile]:
    registry = env()["ZDICT_REGISTRY__TOPIC"]
    futures = kafka_admin.create_topics([NewTopic(registry, 1, 1)], operation_timeout=30)
    futures[registry].result(timeout=35)
    starter = start_sidecars(env, tmp_path_factory.mktemp("forward-hostile"))
    start: StartSidecar = next(starter)
    # Internal topics and the registry even match the allow-list: they are never writable.
    address, process = start_forward_proxy(
        start, "forward-hostile", [f"{PREFIX}-*", "__*", registry]
    )
    yield Hostile(address, process, registry)
    process.terminate()
    assert process.wait() == 0, process.tail()
    next(starter, None)


def values(count: int, size: int) -> list[bytes | None]:
    return [(f"value {i:06d} " * (size // 13 + 1)).encode()[:size] for i in range(count)]


def one_batch(topic: str, *, partition: int = 0, correlation_id: int = 1, **ids: int) -> bytes:
    """A Produce request of one valid batch of three records to `topic`; `ids`: its producer
    id, epoch and base sequence."""
    records = Batch(
        b"".join(record(i, v) for i, v in enumerate(values(3, 100))), 3, NOW_MS, **ids
    ).encode()
    return produce([(topic, [(partition, records)])], correlation_id=correlation_id)


def answer_of(hostile: Hostile, frame: bytes) -> dict[tuple[str, int], int]:
    with RawClient(hostile.address) as client:
        client.send(frame)
        answer = client.receive()
    assert answer is not None, "the proxy answered the Produce request"
    return produce_errors(answer)


# -- (1) huge declared counts ------------------------------------------------------------------


def test_1_huge_declared_counts_close_the_connection_without_allocating(
    hostile: Hostile,
) -> None:
    rss, peak = hostile.rss(), hostile.peak()
    produce_32 = framed(header(0, 7, 1, "") + b"\xff\xff\x00\x01\x00\x00\x75\x30\xf0\x00\x00\x00")
    produce_32 += b"\x00" * (32 - len(produce_32))
    assert len(produce_32) == 32
    # A Fetch request whose body is a Fetch response declaring 2^31 - 1 topics, and a
    # Metadata request declaring 2^31 - 16 topic names: forwarded with their header read only.
    fetch_shaped = framed(header(FETCH, 4, 2) + b"\x00\x00\x00\x00\x7f\xff\xff\xff" + b"\x00" * 8)
    metadata_huge = framed(header(3, 4, 3) + b"\x7f\xff\xff\xf0\x00\x05topic\x00")
    for frame in (produce_32, fetch_shaped, metadata_huge):
        with RawClient(hostile.address) as client:
            client.send(frame)
            assert client.closed_by_peer(10), "the connection is closed"
        assert hostile.served() < SERVED_WITHIN_S
    assert hostile.peak() <= max(peak, rss + 64 * MIB)
    wait_until(
        lambda: any(
            "declares -268435456 topics" in e["error"]
            for e in hostile.process.events("request_refused")
        ),
        timeout=5,
        what="the 32-byte Produce refused by the bounded reader",
    )


# -- (2) registry and internal topics ----------------------------------------------------------


def test_2_registry_and_internal_topics_are_neither_writable_nor_listed(
    hostile: Hostile, kafka_bootstrap: str, kafka_admin: AdminClient, kafka_probe: KafkaProbe
) -> None:
    topic = create_topic(kafka_admin, 1, None, PREFIX)
    # A committed offset makes sure __consumer_offsets exists upstream.
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"{PREFIX}-group"})
    consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    consumer.close()
    junk = batch([b"junk"], NOW_MS)
    tombstone = Batch(record(0, None, key=b"1"), 1, NOW_MS).encode()
    for name in (hostile.registry, "__consumer_offsets", "__transaction_state"):
        for records in (junk, tombstone):
            errors = answer_of(hostile, produce([(name, [(0, records)])]))
            assert errors == {(name, 0): ErrorCode.topic_authorization_failed}
    assert kafka_probe.count(hostile.registry) == 0, "nothing reached the registry"
    with RawClient(kafka_bootstrap) as direct:
        direct.send(metadata(None))
        upstream = direct.receive()
    assert upstream is not None
    assert {hostile.registry, "__consumer_offsets", topic} <= listed_topics(upstream)
    with RawClient(hostile.address) as client:
        client.send(metadata(None))
        through = client.receive()
    assert through is not None
    listed = listed_topics(through)
    assert topic in listed
    assert hostile.registry not in listed
    assert not [name for name in listed if name.startswith("__")]


# -- (3) decompression bombs -------------------------------------------------------------------

#: One batch: 15 values of 250,000 zero bytes (3.6 MB, under the 4 MiB a batch may inflate to),
#: zstd-compressed to a few hundred bytes.
BOMB_VALUES = 15
BOMB_VALUE = b"\x00" * 250_000


def bomb(partition_batches: int) -> bytes:
    records = b"".join(record(i, BOMB_VALUE) for i in range(BOMB_VALUES))
    compressed = zstandard.ZstdCompressor().compress(records)
    one = Batch(compressed, BOMB_VALUES, NOW_MS, ZSTD).encode()
    return one * partition_batches


def test_3_bombs_over_many_small_batches_are_refused_within_the_request_bound(
    hostile: Hostile, kafka_admin: AdminClient, kafka_probe: KafkaProbe
) -> None:
    topic = create_topic(kafka_admin, 1, None, PREFIX)
    rss, peak = hostile.rss(), hostile.peak()
    request = produce([(topic, [(0, bomb(128))])])
    assert len(request) < 128 * 1024, "a small request"
    started = time.monotonic()
    assert answer_of(hostile, request) == {(topic, 0): ErrorCode.record_list_too_large}
    assert time.monotonic() - started < 5
    assert kafka_probe.count(topic) == 0
    # 128 batches would inflate to 458 MB; the request's bound is 16 MiB.
    assert hostile.peak() <= max(peak, rss + 8 * MAX_DECOMPRESSED_REQUEST_BYTES)
    assert hostile.served() < SERVED_WITHIN_S


def test_3_bombs_over_several_requests_and_connections_stay_within_the_bounds(
    hostile: Hostile, kafka_admin: AdminClient
) -> None:
    topic = create_topic(kafka_admin, 4, None, PREFIX)
    rss, peak = hostile.rss(), hostile.peak()
    # Each request inflates to 4 x 3.6 MB, under its 16 MiB: accepted and rewritten (one batch
    # a partition, as brokers take Produce v3+).
    request = produce([(topic, [(p, bomb(1)) for p in range(4)])])

    def pipeline(errors: list[int]) -> None:
        with RawClient(hostile.address, timeout=60) as client:
            for _i in range(4):
                client.send(request)
            for _i in range(4):
                answer = client.receive()
                assert answer is not None
                errors += produce_errors(answer).values()

    errors: list[int] = []
    threads = [threading.Thread(target=pipeline, args=(errors,)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == [ErrorCode.none] * 64, "16 requests of 14.4 MB inflated each were written"
    # Together 230 MB inflated; one request at a time per connection, so at most 4 at once.
    assert hostile.peak() <= max(peak, rss + 8 * MAX_DECOMPRESSED_REQUEST_BYTES)
    assert hostile.served() < SERVED_WITHIN_S


# -- (4) size prefixes only --------------------------------------------------------------------


def test_4_sockets_sending_only_a_size_prefix_time_out_and_others_are_served(
    hostile: Hostile,
) -> None:
    timed_out = len(hostile.process.events("request_timed_out"))
    idle = [RawClient(hostile.address) for _ in range(16)]
    try:
        for client in idle:
            client.send(MAX_REQUEST_BYTES.to_bytes(4, "big"))
        assert hostile.served() < SERVED_WITHIN_S, "served while 16 sockets hold a prefix"
        started = time.monotonic()
        assert all(client.closed_by_peer(READ_TIMEOUT_S + 5) for client in idle)
        assert time.monotonic() - started < READ_TIMEOUT_S + 5
    finally:
        for client in idle:
            client.close()
    wait_until(
        lambda: len(hostile.process.events("request_timed_out")) - timed_out == 16,
        timeout=5,
        what="16 request_timed_out log lines",
    )
    assert hostile.served() < SERVED_WITHIN_S


# -- (5) pipelined large requests, then a disconnect -------------------------------------------


def large_produce(topic: str, correlation_id: int) -> bytes:
    """A Produce request of about 3.6 MB: 15 values of 240,000 bytes."""
    return produce(
        [(topic, [(0, batch(values(15, 240_000), NOW_MS))])], correlation_id=correlation_id
    )


def test_5_pipelined_large_requests_then_a_disconnect_give_the_budget_back(
    hostile: Hostile, kafka_admin: AdminClient, kafka_probe: KafkaProbe
) -> None:
    topic = create_topic(kafka_admin, 1, None, PREFIX)
    refused = large_produce("not-allowed", 1)  # answered by the proxy: cheap, read whole
    assert len(refused) < MAX_REQUEST_BYTES
    # Each round holds two answers under way and half of a third request when it drops:
    # 10 rounds leave 10 x 1.8 MB of partial frames, more than the 16 MiB budget, if leaked.
    for _ in range(10):
        with RawClient(hostile.address) as client:
            client.send(refused + refused + refused[: len(refused) // 2])
    started = time.monotonic()
    with RawClient(hostile.address, timeout=30) as client:
        for i in range(4):  # 4 x 3.6 MB at once: most of the budget
            client.send(large_produce(topic, i))
        answers = [client.receive() for _ in range(4)]
    assert all(a is not None and set(produce_errors(a).values()) == {0} for a in answers)
    assert time.monotonic() - started < 15
    assert kafka_probe.count(topic) == 4 * 15


# -- (6) client-sent `zd` headers ---------------------------------------------------------------


@pytest.mark.parametrize(
    "zd_header",
    [
        pytest.param((b"zd", b"\x80\x01\xff garbage"), id="corrupt"),
        pytest.param((b"zd", tag_value(99_999, "compact", 5)), id="unknown-id"),
        pytest.param((b"zd", tag_value(32_768, "compact", 0x7F)), id="wrong-fingerprint"),
        pytest.param((b"zd", b"32768"), id="standard-unknown"),
        pytest.param((b"zd\x00x", b"\x80\x01"), id="key-zd-nul"),
    ],
)
def test_6_client_sent_zd_headers_are_refused(
    zd_header: tuple[bytes, bytes],
    hostile: Hostile,
    kafka_admin: AdminClient,
    kafka_probe: KafkaProbe,
) -> None:
    topic = create_topic(kafka_admin, 1, None, PREFIX)
    request = produce([(topic, [(0, batch([b"\x28\xb5\x2f\xfd"], NOW_MS, headers=[zd_header]))])])
    assert answer_of(hostile, request) == {(topic, 0): ErrorCode.invalid_record}
    assert kafka_probe.count(topic) == 0
    assert hostile.served() < SERVED_WITHIN_S


# -- (7) a timestamp past 2^63 - 1 --------------------------------------------------------------


def test_7_a_timestamp_past_int64_is_refused_and_nothing_of_the_request_written(
    hostile: Hostile, kafka_admin: AdminClient, kafka_probe: KafkaProbe
) -> None:
    topic = create_topic(kafka_admin, 2, None, PREFIX)
    good = batch(values(5, 100), NOW_MS)
    late = Batch(record(0, b"late", timestamp_delta=1), 1, 2**63 - 1).encode()
    request = produce([(topic, [(0, good), (1, good + late)])])
    assert answer_of(hostile, request) == {
        (topic, 0): ErrorCode.request_timed_out,
        (topic, 1): ErrorCode.invalid_timestamp,
    }
    assert kafka_probe.count(topic) == 0
    assert hostile.served() < SERVED_WITHIN_S


# -- (8) one partition refused -----------------------------------------------------------------


def test_8_one_partition_refused_refuses_the_whole_request_and_a_retry_writes_the_rest(
    hostile: Hostile, kafka_admin: AdminClient, kafka_probe: KafkaProbe
) -> None:
    topic = create_topic(kafka_admin, 3, None, PREFIX)
    good = batch(values(5, 100), NOW_MS)
    bad = bytearray(good)
    bad[-1] ^= 0xFF  # the CRC no longer matches
    request = produce([(topic, [(0, good), (1, good), (2, bytes(bad))])])
    assert answer_of(hostile, request) == {
        (topic, 0): ErrorCode.request_timed_out,
        (topic, 1): ErrorCode.request_timed_out,
        (topic, 2): ErrorCode.corrupt_message,
    }
    assert kafka_probe.count(topic) == 0
    retry = produce([(topic, [(0, good), (1, good)])])
    assert answer_of(hostile, retry) == {(topic, 0): 0, (topic, 1): 0}
    assert kafka_probe.count(topic) == 10


# -- (9) millions of empty records ------------------------------------------------------------


def test_9_millions_of_empty_records_are_refused_at_once_and_others_served(
    hostile: Hostile, kafka_admin: AdminClient, kafka_probe: KafkaProbe
) -> None:
    topic = create_topic(kafka_admin, 1, None, PREFIX)
    count = 2_290_000
    section = zstandard.ZstdCompressor().compress(record(0, b"") * count)
    request = produce([(topic, [(0, Batch(section, count, NOW_MS, ZSTD).encode())])])
    waited: list[float] = []
    with RawClient(hostile.address) as client:
        started = time.monotonic()
        client.send(request)
        other = threading.Thread(target=lambda: waited.append(hostile.served()))
        other.start()
        answer = client.receive()
        refused_after = time.monotonic() - started
        other.join(10)
    assert answer is not None
    assert produce_errors(answer) == {(topic, 0): ErrorCode.record_list_too_large}
    assert refused_after < SERVED_WITHIN_S
    assert waited and waited[0] < SERVED_WITHIN_S, "another client answered meanwhile"
    assert kafka_probe.count(topic) == 0


# -- (10) acks=0 while upstream is stopped -----------------------------------------------------


def test_10_acks_0_while_upstream_is_stopped_keeps_memory_bounded(
    env: SidecarEnv,
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    topic = create_topic(kafka_admin, 1, None, PREFIX)
    relay = PausableRelay(kafka_bootstrap)
    starter = start_sidecars(env, tmp_path_factory.mktemp("forward-acks0"))
    start: StartSidecar = next(starter)
    try:
        address, process = start_forward_proxy(
            start,
            "forward-acks0",
            [f"{PREFIX}-*"],
            env={"ZDICT_REGISTRY__ENABLED": "false"},
            bootstrap=relay.address,
        )
        # Values that do not compress: the requests go upstream as large as they came.
        noise = random.Random(10)
        request = produce(
            [(topic, [(0, batch([noise.randbytes(240_000) for _ in range(3)], NOW_MS))])],
            acks=0,
            correlation_id=1,
        )
        with RawClient(address) as warm:  # a first request through, the codec loaded
            warm.send(request)
            warm.send(metadata([], correlation_id=2))
            assert warm.receive() is not None
        rss = rss_bytes(process.pid)
        relay.pause()
        sent = 0
        with RawClient(address, timeout=3) as client:
            try:
                for _ in range(300):  # 216 MB offered (under a broker's 1 MB a request)
                    client.send(request)
                    sent += len(request)
            except TimeoutError:
                pass  # pushed back: the proxy stopped reading
            grown = rss_bytes(process.pid) - rss
            relay.resume()
        # What socket buffers hold, and a request or two in the proxy; never the 216 MB.
        assert sent < 64 * MIB, f"{sent / MIB:.0f} MiB taken while upstream was stopped"
        assert grown < 32 * MIB, f"RSS grew {grown / MIB:.0f} MiB"
        assert process.running()
        with RawClient(address) as other:
            other.send(metadata([], correlation_id=3))
            assert other.receive() is not None, "another client is served"
        print(f"acks=0, upstream stopped: {sent / MIB:.1f} MiB taken, RSS +{grown / MIB:.1f} MiB")
        process.terminate()
        assert process.wait() == 0, process.tail()
    finally:
        relay.close()
        next(starter, None)


# -- (11) made-up producer ids, InitProducerId --------------------------------------------------


def init_producer_id() -> bytes:
    """InitProducerId v1, no transactional id: the broker hands out a producer id."""
    return framed(header(INIT_PRODUCER_ID, 1, 5) + b"\xff\xff" + (60_000).to_bytes(4, "big"))


def test_11_the_broker_owns_idempotence_and_the_proxy_holds_no_producer_state(
    hostile: Hostile, kafka_bootstrap: str, kafka_admin: AdminClient, kafka_probe: KafkaProbe
) -> None:
    topic = create_topic(kafka_admin, 1, None, PREFIX)
    ids: list[bytes] = []

    def handed_out() -> bool:
        with RawClient(hostile.address) as client:
            client.send(init_producer_id())
            answer = client.receive()
        assert answer is not None
        error = int.from_bytes(answer[8:10], "big")
        if error == ErrorCode.none:
            ids.append(answer[10:18])
        else:  # the transaction coordinator still loading: clients retry
            assert error == ErrorCode.coordinator_load_in_progress, error
        return len(ids) == 2

    wait_until(handed_out, timeout=30, interval=0.5, what="two producer ids from the broker")
    assert ids[0] != ids[1], "each InitProducerId gets the broker's own new producer id"

    def made_up(producer_id: int, correlation_id: int) -> bytes:
        return one_batch(
            topic,
            correlation_id=correlation_id,
            producer_id=producer_id,
            producer_epoch=0,
            base_sequence=5,
        )

    with RawClient(kafka_bootstrap) as direct:
        direct.send(made_up(10**12, 1))
        expected = direct.receive()
    assert expected is not None
    assert answer_of(hostile, made_up(10**12 + 1, 1)) == produce_errors(expected), (
        "the proxy answers what the broker answers"
    )
    # The same batch again: the broker deduplicates it (nothing of it twice).
    before = kafka_probe.count(topic)
    assert answer_of(hostile, made_up(10**12 + 1, 2)) == produce_errors(expected)
    assert kafka_probe.count(topic) == before

    def flood(first: int, count: int) -> None:
        with RawClient(hostile.address, timeout=60) as client:
            for i in range(count):
                client.send(made_up(first + i, i))
                if i >= 16:
                    assert client.receive() is not None
            for _ in range(min(count, 16)):
                assert client.receive() is not None

    flood(2 * 10**12, 500)  # warm: allocator pools and the topic's namespace in place
    rss = hostile.rss()
    flood(3 * 10**12, 4000)
    grown = hostile.rss() - rss
    print(f"4,000 made-up producer ids: RSS +{grown / 1024:.0f} KiB")
    # The removed produce proxy held ~1.1 KiB per producer id: 4.4 MiB for these.
    assert grown < 2 * MIB, f"RSS grew {grown / 1024:.0f} KiB over 4,000 producer ids"


# -- (12) values above the decoders' limit ------------------------------------------------------


def test_12_a_value_above_the_decoders_limit_is_refused_at_the_door(
    hostile: Hostile, kafka_admin: AdminClient, kafka_probe: KafkaProbe
) -> None:
    topic = create_topic(kafka_admin, 1, None, PREFIX)
    errors: list[str] = []
    producer = Producer({"bootstrap.servers": hostile.address, "message.max.bytes": 2 * MIB})
    for value in (b"x" * (MAX_VALUE_BYTES + 1), b"y" * MAX_VALUE_BYTES):
        producer.produce(
            topic, value, on_delivery=lambda err, _m: errors.append(err.name() if err else "ok")
        )
        assert producer.flush(30) == 0
    assert errors == ["MSG_SIZE_TOO_LARGE", "ok"]
    refusals = hostile.process.events("produce_refused")
    assert "value_too_large" in [e["kind"] for e in refusals], "the proxy refused it, not upstream"
    assert kafka_probe.count(topic) == 1, "only the value at the limit was written"


# -- (13) topic names chosen by the client -----------------------------------------------------


def test_13_a_thousand_refused_topics_do_not_flood_the_log(hostile: Hostile) -> None:
    lines_before = len(hostile.process.log_text().splitlines())
    bytes_before = len(hostile.process.log_text())
    with RawClient(hostile.address, timeout=30) as client:
        for i in range(1000):
            name = f"flood-{i:04d}-{uuid.uuid4().hex}" + "x" * 150
            client.send(one_batch(name, correlation_id=2 * i))
            client.send(metadata([name], correlation_id=2 * i + 1))
            answer = client.receive()
            assert answer is not None
            assert set(produce_errors(answer).values()) == {ErrorCode.topic_authorization_failed}
            assert client.receive() is not None
    lines = hostile.process.log_text().splitlines()[lines_before:]
    assert len(lines) <= 3, lines
    assert len(hostile.process.log_text()) - bytes_before < 4096
    assert hostile.served() < SERVED_WITHIN_S


# -- (14) offset deltas that are not 0..n-1 ----------------------------------------------------


def test_14_offset_deltas_out_of_order_are_refused_though_the_broker_takes_them(
    hostile: Hostile, kafka_bootstrap: str, kafka_admin: AdminClient, kafka_probe: KafkaProbe
) -> None:
    topic = create_topic(kafka_admin, 1, None, PREFIX)
    unordered = Batch(b"".join(record(d, b"v" * 50) for d in (1, 0, 2)), 3, NOW_MS).encode()
    short_last = bytearray(batch(values(3, 50), NOW_MS))
    short_last[23:27] = (1).to_bytes(4, "big")  # last offset delta 1 for 3 records
    for bad in (unordered, fix_crc(bytes(short_last))):
        assert answer_of(hostile, produce([(topic, [(0, bad)])])) == {
            (topic, 0): ErrorCode.invalid_record
        }
    assert kafka_probe.count(topic) == 0
    assert hostile.served() < SERVED_WITHIN_S
    # Why the proxy checks: the broker itself writes the unordered batch (offsets out of order).
    with RawClient(kafka_bootstrap.split(",")[0]) as broker:
        broker.send(produce([(topic, [(0, unordered)])]))
        answer = broker.receive()
    assert answer is not None and produce_errors(answer) == {(topic, 0): 0}
