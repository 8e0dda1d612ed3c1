"""Fuzzing `zdict-sidecar proxy` as a real process in front of the session broker,
with a fixed seed and a fixed number of iterations (capped at `TIME_CAP_S` on a slow machine),
so that `make test` runs the same inputs every time within a bounded time.

Frame level: valid Produce, Metadata and Fetch requests mutated (bytes flipped, int32 fields
set to hostile values, truncated, bytes inserted or repeated, the size prefix kept right or
made wrong), each sent on a fresh connection. Batch level: a valid record batch (plain or
zstd) mutated inside (its header fields after the CRC, the records), the CRC-32C computed
again so that the proxy's own reading is what is tested, sent in a well-formed Produce.

Afterwards the proxy is alive and serves another client, and nothing corrupt is readable
upstream: every record of the topic, read directly, carries a `zd` frame that decodes or is a
raw record; a consumer through the proxy reads them all."""

from __future__ import annotations

import json
import random
import struct
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import zstandard
from confluent_kafka import Consumer, Message, TopicPartition
from confluent_kafka.admin import AdminClient

from sidecar.codec import Decoder
from sidecar.dictionaries.store import DictionaryStore

from .forward_proxies import start_forward_proxy
from .launch import StartSidecar, environment_for, start_sidecars
from .process import Sidecar
from .raw_kafka import (
    FETCH,
    ZSTD,
    Batch,
    RawClient,
    fix_crc,
    framed,
    header,
    metadata,
    produce,
    produce_errors,
    record,
)
from .topics import create_topic
from .upstream_records import headers_of, read_all

PREFIX = "zdict-it-fuzz"
SEED = 26
FRAME_ITERATIONS = 1200
BATCH_ITERATIONS = 1500
#: Seconds the two loops may take together; a slower machine runs fewer of the iterations.
TIME_CAP_S = 30.0
#: Seconds a mutated frame's answer (or the connection's end) is waited for.
ANSWER_WAIT_S = 0.2
NOW_MS = int(time.time() * 1000)
#: Values an int32 field is set to: counts and lengths that ask for the most.
HOSTILE_INT32 = (0, 1, -1, -2, 0x7FFFFFFF, -0x80000000, 0x0FFFFFFF, -0x10000000, 0xFFFF, 255)


class Fuzzed:
    def __init__(self, address: str, process: Sidecar, store: Path, topic: str) -> None:
        self.address = address
        self.process = process
        self.store = store
        self.topic = topic

    def served(self) -> bool:
        with RawClient(self.address) as client:
            client.send(metadata([self.topic], correlation_id=9))
            return client.receive() is not None


@pytest.fixture(scope="module")
def fuzzed(
    kafka_bootstrap: str, kafka_admin: AdminClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Fuzzed]:
    work = tmp_path_factory.mktemp("forward-fuzz")
    topic = create_topic(kafka_admin, 2, None, PREFIX)
    env = environment_for(kafka_bootstrap, f"_zdict_dictionaries-{uuid.uuid4().hex}")
    starter = start_sidecars(env, work)
    start: StartSidecar = next(starter)
    store = work / "dictionaries"
    address, process = start_forward_proxy(
        start,
        "forward-fuzz",
        [f"{PREFIX}-*"],
        env={
            "ZDICT_REGISTRY__ENABLED": "false",
            "ZDICT_DICTIONARIES": str(store),
            # A client gone with a request under way keeps its slot while upstream may still
            # answer (a mutated Fetch can ask the broker to wait for 2^31 ms): up to 30 s.
            "ZDICT_PROXY__MAX_CONNECTIONS": "2000",
        },
    )
    yield Fuzzed(address, process, store, topic)
    process.terminate()
    assert process.wait() == 0, process.tail()
    next(starter, None)


def event(i: int) -> bytes:
    """An event long enough that zstd without a dictionary shrinks it: framed, `zd` added."""
    return json.dumps(
        {
            "event": "product_viewed",
            "seq": i,
            "user": f"user-{i % 97:04d}",
            "page": "https://shop.example.com/products/stainless-steel-water-bottle" * 4,
        }
    ).encode()


def plain_records(first: int) -> bytes:
    return b"".join(
        record(
            i,
            event(first + i),
            key=f"k{i}".encode(),
            headers=[(b"trace", f"t{i}".encode())],
            timestamp_delta=i,
        )
        for i in range(5)
    )


def seed_batch(first: int, compressed: bool) -> Batch:
    records = plain_records(first)
    if compressed:
        return Batch(zstandard.ZstdCompressor().compress(records), 5, NOW_MS, ZSTD)
    return Batch(records, 5, NOW_MS)


def fetch_request(topic: str, correlation_id: int) -> bytes:
    """A Fetch v4 request frame: both partitions of `topic` from offset 0, no waiting."""
    name = topic.encode()
    partitions = b"".join(struct.pack(">iqi", p, 0, 1 << 20) for p in range(2))
    body = struct.pack(">iiiib", -1, 0, 0, 1 << 20, 0) + struct.pack(">i", 1)
    body += struct.pack(">h", len(name)) + name + struct.pack(">i", 2) + partitions
    return framed(header(FETCH, 4, correlation_id) + body)


def mutate(data: bytes, rng: random.Random, start: int = 0) -> bytes:
    """`data` with one to three mutations at or after byte `start`."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        if len(out) <= start:
            break
        at = rng.randrange(start, len(out))
        kind = rng.randrange(6)
        if kind == 0:
            out[at] ^= 1 << rng.randrange(8)
        elif kind == 1:
            out[at] = rng.randrange(256)
        elif kind == 2 and at + 4 <= len(out):
            out[at : at + 4] = struct.pack(">i", rng.choice(HOSTILE_INT32))
        elif kind == 3:
            del out[at:]
        elif kind == 4:
            out[at:at] = rng.randbytes(rng.randint(1, 16))
        else:
            out[at:at] = out[at : at + rng.randint(1, 64)]
    return bytes(out)


def frame_seeds(topic: str) -> list[bytes]:
    """Valid request frames, size prefix included."""
    return [
        produce([(topic, [(0, seed_batch(0, False).encode())])], acks=1),
        produce([(topic, [(1, seed_batch(0, True).encode())])], acks=-1),
        metadata([topic]),
        metadata(None),
        fetch_request(topic, 3),
    ]


def exchange(address: str, data: bytes) -> None:
    """Send `data` on a fresh connection; wait at most `ANSWER_WAIT_S` s for an answer or the
    connection's end."""
    with RawClient(address, timeout=ANSWER_WAIT_S) as client:
        try:
            client.send(data)
            client.receive()
        except (ConnectionError, TimeoutError):
            pass  # closed while the frame was sent, or no answer (acks=0, a long poll)


def run(iterations: int, deadline: float, step: Callable[[int], None]) -> int:
    """`step(i)` for each i until `iterations` or `deadline`; iterations run."""
    for i in range(iterations):
        if time.monotonic() > deadline:
            return i
        step(i)
    return iterations


def test_mutated_frames_and_batches_leave_the_proxy_serving_and_nothing_corrupt_upstream(
    fuzzed: Fuzzed, kafka_bootstrap: str
) -> None:
    rng = random.Random(SEED)
    seeds = frame_seeds(fuzzed.topic)
    deadline = time.monotonic() + TIME_CAP_S

    def frame_step(i: int) -> None:
        seed = seeds[i % len(seeds)]
        body = mutate(seed[4:], rng)
        prefix = len(body) if rng.random() < 0.9 else rng.choice(HOSTILE_INT32)
        exchange(fuzzed.address, struct.pack(">i", prefix) + body)
        if i % 200 == 199:
            assert fuzzed.served(), f"served after {i + 1} mutated frames"

    frames = run(FRAME_ITERATIONS, deadline - TIME_CAP_S / 2, frame_step)

    outcomes: dict[int, int] = {}
    client = RawClient(fuzzed.address)

    def batch_step(i: int) -> None:
        nonlocal client
        partition = i % 2
        if i % 10 == 0:  # an unmutated batch now and then: records that must arrive intact
            encoded = seed_batch(i, bool(partition)).encode()
        elif rng.random() < 0.5:
            # The batch's fields after the CRC, or its (compressed) records.
            encoded = fix_crc(mutate(seed_batch(i, bool(partition)).encode(), rng, start=21))
        else:
            # The records mutated before compression: what the proxy reads once inflated.
            records = mutate(plain_records(i), rng)
            if partition:
                records = zstandard.ZstdCompressor().compress(records)
            encoded = Batch(records, 5, NOW_MS, ZSTD if partition else 0).encode()
        request = produce([(fuzzed.topic, [(partition, encoded)])], correlation_id=i, acks=1)
        client.send(request)
        answer = client.receive(timeout=30)
        if answer is None:  # the connection closed: a new one, as a client reconnects
            client.close()
            client = RawClient(fuzzed.address)
            outcomes[-1] = outcomes.get(-1, 0) + 1
            return
        for code in produce_errors(answer).values():
            outcomes[code] = outcomes.get(code, 0) + 1

    try:
        batches = run(BATCH_ITERATIONS, deadline, batch_step)
    finally:
        client.close()
    print(f"fuzz: {frames} frames, {batches} batches mutated; Produce outcomes {outcomes}")
    assert frames >= 200 and batches >= 300, "enough iterations ran within the time cap"
    assert fuzzed.process.running(), fuzzed.process.tail()
    assert fuzzed.served()
    assert outcomes.get(0, 0) >= batches // 10, "the unmutated batches were written"
    assert len(outcomes) > 2, "mutations were refused in more than one way"

    written = sum(
        Consumer(
            {"bootstrap.servers": kafka_bootstrap, "group.id": "unused"}
        ).get_watermark_offsets(TopicPartition(fuzzed.topic, p), timeout=10)[1]
        for p in range(2)
    )
    stored = read_all(kafka_bootstrap, fuzzed.topic, written)
    decoder = Decoder.from_store(DictionaryStore(fuzzed.store))
    framed_records = 0
    for message in stored:
        headers = headers_of(message)
        if any(key == "zd" for key, _ in headers):
            decoder.decode(message.value(), headers)  # raises on a corrupt frame
            framed_records += 1
    assert framed_records > 0
    decoded = through_proxy(fuzzed, len(stored))
    assert len(decoded) == len(stored)
    assert not [m for m in decoded if any(k == "zd" for k, _ in headers_of(m))], "all decoded"


def through_proxy(fuzzed: Fuzzed, expected: int) -> list[Message]:
    """The topic's records read by a consumer through the proxy (decoded on Fetch)."""
    consumer = Consumer(
        {
            "bootstrap.servers": fuzzed.address,
            "group.id": f"{PREFIX}-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(fuzzed.topic, p, 0) for p in range(2)])
    found: list[Message] = []
    deadline = time.monotonic() + 60
    try:
        while len(found) < expected and time.monotonic() < deadline:
            for message in consumer.consume(1000, 0.5):
                assert message.error() is None, message.error()
                found.append(message)
    finally:
        consumer.close()
    return found
