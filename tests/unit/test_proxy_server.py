"""The proxy end to end in one process, its upstream producer replaced by a recording fake
(the real broker and real clients are in tests/integration/test_proxy*.py)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import functools
import inspect
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import KafkaError
from kio.schema.errors import ErrorCode
from prometheus_client import CollectorRegistry

from sidecar.codec import Decoder, Encoder, StaticResolver
from sidecar.config import ProxySettings
from sidecar.metrics import Metrics
from sidecar.namespaces import Namespace
from sidecar.proxy.forward.routes import Route
from sidecar.proxy.metadata import UpstreamTopics
from sidecar.proxy.produce import ProduceHandler
from sidecar.proxy.protocol import INIT_PRODUCER_ID, METADATA, PRODUCE
from sidecar.proxy.sequences import ProducerIds, Sequences
from sidecar.proxy.server import Dispatcher, ProxyServer
from sidecar.record_batch import NewRecord, encode_batch
from sidecar.training.sampling import Reservoir
from tests.unit.proxy_wire import nested, read_response, request_frame

VALUE = b'{"event": "viewed", "product": "a fairly long product name", "price": 12.5}' * 3


@dataclass
class FakeMessage:
    _offset: int

    def offset(self) -> int:
        return self._offset


@dataclass
class FakeProducer:
    """Records what is produced; acknowledges at once, or fails with `fail`, or holds."""

    records: list[tuple[Any, ...]] = field(default_factory=list)
    fail: KafkaError | None = None
    hold: bool = False
    held: list[Callable[[], None]] = field(default_factory=list)
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)

    def produce(self, topic: str, value: Any, key: Any, partition: int, callback: Any,
                _alias: Any, timestamp: int, headers: Any) -> None:  # fmt: skip
        self.records.append((topic, partition, key, value, headers, timestamp))
        offset = self.offsets.get((topic, partition), 0)
        self.offsets[(topic, partition)] = offset + 1
        error = self.fail

        def deliver() -> None:
            callback(error, None if error else FakeMessage(offset))

        if self.hold:
            self.held.append(deliver)
        else:
            deliver()


class FakeRoutes:
    def __init__(self, settings: ProxySettings, metrics: Metrics) -> None:
        self.settings = settings
        self.metrics = metrics
        self.routes: dict[str, Route] = {}

    def upstream_for(self, topic: str) -> str:
        return self.settings.upstream_for(topic)

    def route(self, topic: str) -> Route:
        if topic not in self.routes:
            reservoir = Reservoir(topic, max_bytes=1 << 20, min_messages=100)
            namespace = Namespace(topic, Encoder(), reservoir, self.metrics.namespace(topic))
            self.routes[topic] = Route(namespace, self.upstream_for(topic))
        return self.routes[topic]


@dataclass
class Proxy:
    host: str
    port: int
    producer: FakeProducer
    upstream: dict[str, int]
    routes: FakeRoutes

    async def connect(self) -> Client:
        reader, writer = await asyncio.open_connection(self.host, self.port)
        return Client(reader, writer)


@dataclass
class Client:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    correlation: int = 0

    async def send(self, api_key: int, version: int, **body: Any) -> int:
        self.correlation += 1
        self.writer.write(request_frame(api_key, version, self.correlation, **body))
        await self.writer.drain()
        return self.correlation

    async def receive(self, api_key: int, version: int) -> tuple[int, Any]:
        (size,) = struct.unpack(">i", await asyncio.wait_for(self.reader.readexactly(4), 5))
        return read_response(api_key, version, await self.reader.readexactly(size))

    async def call(self, api_key: int, version: int, **body: Any) -> Any:
        sent = await self.send(api_key, version, **body)
        correlation, answer = await self.receive(api_key, version)
        assert correlation == sent
        return answer

    async def closed(self) -> bool:
        try:
            return await asyncio.wait_for(self.reader.read(1), 5) == b""
        except ConnectionError:
            return True


def produce_body(topic: str, partition: int, records: bytes, acks: int = -1, version: int = 9,
                 transactional_id: str | None = None) -> dict[str, Any]:  # fmt: skip
    pd = nested(PRODUCE, version, "PartitionProduceData")(index=partition, records=records)
    td = nested(PRODUCE, version, "TopicProduceData")(name=topic, partition_data=(pd,))
    return {
        "transactional_id": transactional_id,
        "acks": acks,
        "timeout": datetime.timedelta(seconds=2),
        "topic_data": (td,),
    }


@contextlib.asynccontextmanager
async def running_proxy() -> AsyncIterator[Proxy]:
    settings = ProxySettings(listen="127.0.0.1:0", max_request_bytes=1 << 20)
    metrics = Metrics(CollectorRegistry())
    producer = FakeProducer()
    upstream = {"orders": 3}
    topics = UpstreamTopics(lambda timeout: dict(upstream), settings)
    routes = FakeRoutes(settings, metrics)
    handler = ProduceHandler(
        producer=producer,  # type: ignore[arg-type]
        routes=routes,
        topics=topics,
        metrics=metrics,
        sequences=Sequences(),
        max_batch_bytes=settings.max_request_bytes,
        max_record_bytes=1_000_000,
    )
    dispatcher = Dispatcher(
        produce=handler,
        topics=topics,
        producer_ids=ProducerIds(),
        upstream_for=settings.upstream_for,
        cluster_id=lambda: "test-cluster",
    )
    server = ProxyServer(settings, dispatcher)
    host, port = await server.start()
    try:
        yield Proxy(host, port, producer, upstream, routes)
    finally:
        await server.stop()


def proxied(test: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    """Run the async `test(proxy, ...)` on a fresh event loop against a fresh proxy (pytest
    sees the test's other parameters only: parametrize works as usual)."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        async def main() -> None:
            async with running_proxy() as proxy:
                await test(proxy, *args, **kwargs)

        asyncio.run(main())

    signature = inspect.signature(test)
    run.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=list(signature.parameters.values())[1:]
    )
    return run


@proxied
async def test_metadata_presents_the_proxy_as_leader_of_every_upstream_partition(
    proxy: Proxy,
) -> None:
    client = await proxy.connect()
    topic = nested(METADATA, 12, "MetadataRequestTopic")
    answer = await client.call(
        METADATA,
        12,
        topics=(topic(name="orders", topic_id=None), topic(name="missing", topic_id=None)),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    assert [(b.node_id, b.host, b.port) for b in answer.brokers] == [(1, proxy.host, proxy.port)]
    orders, missing = answer.topics
    assert [(p.partition_index, p.leader_id) for p in orders.partitions] == [(0, 1), (1, 1), (2, 1)]
    assert missing.error_code == ErrorCode.unknown_topic_or_partition


@proxied
async def test_produce_forwards_each_record_encoded_and_answers_with_the_offset(
    proxy: Proxy,
) -> None:
    client = await proxy.connect()
    records = [
        NewRecord(VALUE, b"k1", [("trace", b"1")], 1_700_000_000_000),
        NewRecord(VALUE, None, [], 1_700_000_000_005),
        NewRecord(None, b"gone", [], 1_700_000_000_006),
    ]
    answer = await client.call(
        PRODUCE, 9, **produce_body("orders", 2, encode_batch(records, codec="gzip"))
    )
    (partition,) = answer.responses[0].partition_responses
    assert (partition.index, partition.error_code, partition.base_offset) == (2, 0, 0)
    decoder = Decoder(StaticResolver())
    got = [
        (topic, part, key, decoder.decode(value, headers) if value else value, ts)
        for topic, part, key, value, headers, ts in proxy.producer.records
    ]
    assert got == [
        ("orders", 2, b"k1", VALUE, 1_700_000_000_000),
        ("orders", 2, None, VALUE, 1_700_000_000_005),
        ("orders", 2, b"gone", None, 1_700_000_000_006),
    ]
    assert proxy.producer.records[0][4][0] == ("trace", b"1")  # the client's headers come first
    # The training sample holds the raw values, at the offsets upstream gave them.
    sample = proxy.routes.routes["orders"].namespace.reservoir
    assert sample is not None
    assert sample.snapshot() == [(2, 0, VALUE), (2, 1, VALUE)]  # the tombstone is not sampled


@proxied
async def test_acks_0_gets_no_answer_and_the_records_still_go(proxy: Proxy) -> None:
    client = await proxy.connect()
    await client.send(
        PRODUCE, 9, **produce_body("orders", 0, encode_batch([NewRecord(b"x")]), acks=0)
    )
    answer = await client.call(INIT_PRODUCER_ID, 4, transactional_id=None,
                               transaction_timeout=datetime.timedelta(seconds=60),
                               producer_id=-1, producer_epoch=-1)  # fmt: skip
    assert answer.error_code == ErrorCode.none  # the next answer is the next request's
    assert len(proxy.producer.records) == 1


@proxied
async def test_an_idempotent_batch_sent_twice_is_written_once(proxy: Proxy) -> None:
    client = await proxy.connect()
    pid = (await client.call(INIT_PRODUCER_ID, 4, transactional_id=None,
                             transaction_timeout=datetime.timedelta(seconds=60),
                             producer_id=-1, producer_epoch=-1)).producer_id  # fmt: skip
    batch = encode_batch([NewRecord(b"a"), NewRecord(b"b")], producer_id=pid, producer_epoch=0,
                         base_sequence=0)  # fmt: skip
    first = await client.call(PRODUCE, 9, **produce_body("orders", 1, batch))
    second = await client.call(PRODUCE, 9, **produce_body("orders", 1, batch))
    assert [
        r.partition_responses[0].base_offset for r in (*first.responses, *second.responses)
    ] == [0, 0]
    assert len(proxy.producer.records) == 2
    gap = encode_batch([NewRecord(b"c")], producer_id=pid, producer_epoch=0, base_sequence=5)
    answer = await client.call(PRODUCE, 9, **produce_body("orders", 1, gap))
    partition = answer.responses[0].partition_responses[0]
    assert partition.error_code == ErrorCode.out_of_order_sequence_number
    assert partition.error_message == "expected sequence number 2"


@proxied
async def test_an_upstream_failure_is_answered_with_a_retriable_code_and_nothing_acknowledged(
    proxy: Proxy,
) -> None:
    proxy.producer.fail = KafkaError(KafkaError._MSG_TIMED_OUT)
    client = await proxy.connect()
    answer = await client.call(
        PRODUCE, 9, **produce_body("orders", 0, encode_batch([NewRecord(b"x")]))
    )
    partition = answer.responses[0].partition_responses[0]
    assert partition.error_code == ErrorCode.request_timed_out
    assert ErrorCode(partition.error_code).retriable
    assert partition.base_offset == -1


@proxied
async def test_a_request_upstream_does_not_acknowledge_in_time_is_answered_timed_out(
    proxy: Proxy,
) -> None:
    proxy.producer.hold = True
    client = await proxy.connect()
    body = produce_body("orders", 0, encode_batch([NewRecord(b"x")]))
    body["timeout"] = datetime.timedelta(milliseconds=300)
    answer = await client.call(PRODUCE, 9, **body)
    assert answer.responses[0].partition_responses[0].error_code == ErrorCode.request_timed_out


@proxied
async def test_answers_come_back_in_request_order(proxy: Proxy) -> None:
    proxy.producer.hold = True
    client = await proxy.connect()
    first = await client.send(
        PRODUCE, 9, **produce_body("orders", 0, encode_batch([NewRecord(b"x")]))
    )
    await asyncio.sleep(0.05)
    second = await client.send(INIT_PRODUCER_ID, 4, transactional_id=None,
                               transaction_timeout=datetime.timedelta(seconds=60),
                               producer_id=-1, producer_epoch=-1)  # fmt: skip
    await asyncio.sleep(0.1)
    for deliver in proxy.producer.held:
        deliver()
    assert (await client.receive(PRODUCE, 9))[0] == first
    assert (await client.receive(INIT_PRODUCER_ID, 4))[0] == second


@pytest.mark.parametrize(
    ("mangle", "code"),
    [
        (lambda b: b[:-1] + bytes([b[-1] ^ 1]), ErrorCode.corrupt_message),
        (lambda b: b[:-3], ErrorCode.invalid_record),
    ],
    ids=["bad-crc", "truncated-batch"],
)
@proxied
async def test_a_bad_batch_is_refused_with_its_code_and_nothing_is_written(
    proxy: Proxy, mangle: Callable[[bytes], bytes], code: ErrorCode
) -> None:
    client = await proxy.connect()
    bad = mangle(encode_batch([NewRecord(VALUE)]))
    answer = await client.call(PRODUCE, 9, **produce_body("orders", 0, bad))
    assert answer.responses[0].partition_responses[0].error_code == code
    assert proxy.producer.records == []


@proxied
async def test_unknown_partitions_and_transactions_are_refused(proxy: Proxy) -> None:
    client = await proxy.connect()
    batch = encode_batch([NewRecord(b"x")])
    answer = await client.call(PRODUCE, 9, **produce_body("orders", 7, batch))
    assert (
        answer.responses[0].partition_responses[0].error_code
        == ErrorCode.unknown_topic_or_partition
    )
    answer = await client.call(PRODUCE, 9, **produce_body("made-up", 0, batch))
    missing = answer.responses[0].partition_responses[0]
    assert missing.error_code == ErrorCode.unknown_topic_or_partition
    assert "made-up" not in proxy.routes.routes, "no namespace for a topic that does not exist"
    answer = await client.call(
        PRODUCE, 9, **produce_body("orders", 0, batch, transactional_id="tx")
    )
    refused = answer.responses[0].partition_responses[0]
    assert refused.error_code == ErrorCode.invalid_request
    assert "transactions" in (refused.error_message or "")
    assert proxy.producer.records == []


@pytest.mark.parametrize(
    "garbage",
    [
        struct.pack(">i", 2**31 - 1),  # a gigantic size prefix
        struct.pack(">i", 12) + struct.pack(">hhi", 1, 12, 1) + b"\0\0\0\0",  # Fetch
        struct.pack(">i", 12) + b"\xff" * 12,  # an unknown api key
    ],
    ids=["gigantic-size", "fetch", "unknown-api"],
)
@proxied
async def test_a_malformed_request_closes_its_connection_and_others_are_served(
    proxy: Proxy, garbage: bytes
) -> None:
    bad, good = await proxy.connect(), await proxy.connect()
    bad.writer.write(garbage)
    await bad.writer.drain()
    assert await bad.closed()
    answer = await good.call(
        PRODUCE, 9, **produce_body("orders", 0, encode_batch([NewRecord(b"x")]))
    )
    assert answer.responses[0].partition_responses[0].error_code == ErrorCode.none
