"""The memory a decoded Fetch response may take (issue 37, item 2): its output reserved from the
connection's room before it is decoded (twice the bound while decoding runs), the first batch
decoded past a full budget only within a small allowance and sent as stored beyond; and a
client that reads none of its answers closed after `proxy.write_timeout`."""

from __future__ import annotations

import asyncio
import functools
import socket
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import zstandard
from kio.index import load_response_schema
from kio.static.primitive import Records
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from sidecar.codec import Decoder
from sidecar.config import ProxySettings
from sidecar.proxy.addresses import Address
from sidecar.proxy.fetch import FIRST_ROOM, FetchDecoding
from sidecar.proxy.fetch_metrics import FetchMetrics
from sidecar.proxy.filters import proxy_filters
from sidecar.proxy.listeners import Listeners
from sidecar.proxy.metrics import ForwardMetrics
from sidecar.proxy.responses import encode_response, parse_response
from sidecar.proxy.topics import TopicView
from sidecar.proxy.versions import FETCH
from tests.kafka_frames import request_frame
from tests.record_batches import NewRecord, decode_batches, encode_batch
from tests.unit.forward_messages import filled

MIB = 1024 * 1024
LIMIT = 1 << 28


def _large_partition(count: int = 7, size: int = MIB) -> bytes:
    """`count` records of `size` zero bytes each, stored as `zd: 0` frames declaring it."""
    frame = zstandard.ZstdCompressor().compress(bytes(size))
    return encode_batch([NewRecord(frame, headers=[("zd", b"0")]) for _ in range(count)])


def _response(partitions: list[bytes]) -> bytes:
    """A Fetch v4 response frame (no size prefix): topic `t`, one partition per entry."""
    schema = load_response_schema(FETCH, 4)
    module = __import__(schema.__module__, fromlist=["PartitionData"])
    entries = tuple(
        filled(module.PartitionData, partition_index=i, records=Records(records))
        for i, records in enumerate(partitions)
    )
    topic = filled(module.FetchableTopicResponse, topic="t", partitions=entries)
    return encode_response(3, filled(schema, responses=(topic,)))[4:]


def fetch_decoding(max_unread_bytes: int = LIMIT) -> FetchDecoding:
    """A Fetch decoder without a registry, bounded by `max_unread_bytes` per connection."""
    return FetchDecoding(
        Decoder(max_output_size=2 * MIB),
        topics=TopicView("_zdict_dictionaries"),
        metrics=FetchMetrics(CollectorRegistry()),
        max_bytes=LIMIT,
        max_unread_bytes=max_unread_bytes,
        decode_budget=LIMIT,
    )


def _rewrite(
    frame: bytes, free: int, max_unread_bytes: int = LIMIT
) -> tuple[list[bytes], list[int]]:
    """Each partition's records as the client gets them, and the bytes held and given back."""
    fetch = fetch_decoding(max_unread_bytes)
    held: list[int] = []
    taken = [0]

    def room() -> int:
        return free - taken[0]

    def hold(size: int) -> None:
        held.append(size)
        taken[0] += size

    async def locate(nodes: Any) -> dict[int, Address | None]:
        return {}

    try:
        out = asyncio.run(
            fetch.rewrite(4, frame, client_id="app", free=room, hold=hold, locate=locate)
        )
    finally:
        fetch.close()
    body = parse_response(FETCH, 4, out[4:])[1]
    return [bytes(p.records) for p in body.responses[0].partitions], held


def test_a_response_is_decoded_within_the_room_reserved_before_decoding() -> None:
    stored = _large_partition()
    records, held = _rewrite(_response([stored, stored]), free=20 * MIB)

    decoded = decode_batches(records[0], LIMIT)[0].records
    assert [r.value for r in decoded] == [bytes(MIB)] * 7
    assert records[1] == b""  # 13 MiB left: too little to decode 7 MiB twice; fetched again
    assert held[:2] == [20 * MIB, len(records[0]) - 20 * MIB]
    assert sum(held) == len(records[0])
    running = 0
    for size in held:
        running += size
        assert running <= 20 * MIB, "twice the bound while decoding, within the room"


def test_the_output_is_held_twice_while_the_response_is_framed_then_once() -> None:
    stored = _large_partition()
    records, held = _rewrite(_response([stored]), free=20 * MIB)

    assert held[-2:] == [len(records[0]), -len(records[0])], "kio writes the records again"
    assert sum(held) == len(records[0]), "the frame alone is held until written"


def test_with_the_budget_held_by_others_a_large_first_batch_waits_for_the_next_fetch() -> None:
    stored = _large_partition()
    records, held = _rewrite(_response([stored]), free=0)

    assert records[0] == b""
    assert held == [2 * FIRST_ROOM, -2 * FIRST_ROOM]


def test_with_the_budget_held_by_others_a_small_first_batch_is_still_decoded() -> None:
    stored = _large_partition(count=3, size=1000)
    records, _ = _rewrite(_response([stored]), free=0)

    assert [r.value for r in decode_batches(records[0], LIMIT)[0].records] == [bytes(1000)] * 3


def test_a_first_batch_above_what_a_connection_could_ever_take_goes_as_stored() -> None:
    stored = _large_partition()
    records, held = _rewrite(_response([stored]), free=LIMIT, max_unread_bytes=4 * MIB)

    assert records[0] == stored
    assert sum(held) == len(stored)


# -- a client that does not read its answers -------------------------------------------------


@asynccontextmanager
async def _proxy(answer: bytes, **settings: Any) -> AsyncIterator[tuple[str, int]]:
    """A proxy in front of an upstream that answers every request with `answer` (a body after
    the correlation id); its bootstrap address."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                frame = await reader.readexactly(size)
                correlation = frame[4:8]
                writer.write(struct.pack(">i", 4 + len(answer)) + correlation + answer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        base = probe.getsockname()[1] - 1
    proxy = ProxySettings(listen="127.0.0.1:0", broker_port_base=base, **settings)
    metrics = ForwardMetrics(CollectorRegistry())
    filters = functools.partial(proxy_filters, proxy, metrics)
    listeners = Listeners(proxy, [Address("127.0.0.1", port)], metrics, filters)
    await listeners.start()
    try:
        host, bound = listeners._servers[None].sockets[0].getsockname()[:2]
        yield str(host), int(bound)
    finally:
        await listeners.stop()
        server.close()


def test_a_client_that_reads_none_of_its_answers_is_closed_after_the_write_timeout() -> None:
    async def scenario() -> tuple[list[Any], bool]:
        with capture_logs() as logs:
            async with _proxy(b"\x00" * MIB, write_timeout=0.5, read_timeout=0.5) as address:
                sock = socket.socket()
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                sock.connect(address)
                sock.setblocking(False)
                loop = asyncio.get_running_loop()
                for correlation_id in range(4):
                    await loop.sock_sendall(
                        sock, request_frame(16, 4, correlation_id, states_filter=())
                    )
                await asyncio.sleep(2.5)  # reads nothing meanwhile
                closed = False
                try:
                    while await asyncio.wait_for(loop.sock_recv(sock, 1 << 20), 5):
                        pass
                    closed = True
                except ConnectionError:
                    closed = True
                sock.close()
        return logs, closed

    logs, closed = asyncio.run(scenario())

    assert closed
    unread = [e for e in logs if e["event"] == "answers_unread"]
    assert len(unread) == 1 and "ZDICT_PROXY__WRITE_TIMEOUT" in unread[0]["error"]
