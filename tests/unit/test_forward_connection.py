"""The proxy in one process against a scripted upstream broker: frames forwarded
byte for byte, answers in order, acks=0 never awaited, addresses rewritten to listeners that
reach the broker, ApiVersions above the proxy's answered in v0, and its bounds (frame size, read
timeout, budget returned, refused APIs)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import functools
import socket
import struct
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from kio.index import load_response_schema
from kio.schema.errors import ErrorCode
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from sidecar.config import ProxySettings
from sidecar.proxy.addresses import Address
from sidecar.proxy.filters import proxy_filters
from sidecar.proxy.listeners import Listeners
from sidecar.proxy.metrics import ForwardMetrics
from sidecar.proxy.responses import encode_response, parse_response
from tests.kafka_frames import request_frame
from tests.unit.forward_messages import filled

#: Upstream's answer to a request frame (size prefix excluded); None: no answer.
Script = Callable[[bytes], bytes | None]


@dataclass
class Upstream:
    """A scripted broker: every request frame it got, answered by `script`."""

    script: Script
    frames: list[bytes] = field(default_factory=list)
    address: Address = field(default_factory=lambda: Address("127.0.0.1", 0))

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                frame = await reader.readexactly(size)
                self.frames.append(frame)
                answer = self.script(frame)
                if answer is not None:
                    writer.write(answer)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@asynccontextmanager
async def running(
    script: Script, produce: Any = None, **settings: Any
) -> AsyncIterator[tuple[Listeners, Upstream, CollectorRegistry]]:
    upstream = Upstream(script)
    server = await asyncio.start_server(upstream.serve, "127.0.0.1", 0)
    upstream.address = Address("127.0.0.1", server.sockets[0].getsockname()[1])
    values: dict[str, Any] = {
        "listen": "127.0.0.1:0",
        "broker_port_base": _free_port() - 1,
        "max_request_bytes": 64 * 1024,
        "max_buffered_bytes": 256 * 1024,
        **settings,
    }
    registry = CollectorRegistry()
    proxy, metrics = ProxySettings(**values), ForwardMetrics(registry)
    filters = functools.partial(proxy_filters, proxy, metrics, produce=produce)
    listeners = Listeners(proxy, [upstream.address], metrics, filters)
    await listeners.start()
    try:
        yield listeners, upstream, registry
    finally:
        await listeners.stop()
        server.close()


def _bootstrap(listeners: Listeners) -> tuple[str, int]:
    host, port = listeners._servers[None].sockets[0].getsockname()[:2]
    return str(host), int(port)


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 5))[0]
    return await asyncio.wait_for(reader.readexactly(size), 5)


async def _closed(reader: asyncio.StreamReader) -> bool:
    return await asyncio.wait_for(reader.read(1), 5) == b""


def _correlation(frame: bytes) -> int:
    return int(struct.unpack_from(">i", frame, 4)[0])


def _metadata_answer(version: int, upstream: Address) -> Script:
    def script(frame: bytes) -> bytes | None:
        cls = load_response_schema(3, version)
        broker = sys.modules[cls.__module__].MetadataResponseBroker
        body = filled(
            cls,
            brokers=(filled(broker, node_id=1, host=upstream.host, port=upstream.port, rack=None),),
        )
        return encode_response(_correlation(frame), body)

    return script


def _produce(acks: int, correlation_id: int) -> bytes:
    return request_frame(
        0,
        9,
        correlation_id,
        transactional_id=None,
        acks=acks,
        timeout=datetime.timedelta(seconds=5),
        topic_data=(),
    )


def _list_groups(correlation_id: int) -> bytes:
    return request_frame(16, 4, correlation_id, states_filter=())


def test_frames_are_forwarded_byte_for_byte_and_acks_0_gets_no_answer_awaited() -> None:
    answers = {16: b"opaque answer bytes " * 5000}  # streamed back unparsed, ~100 KB

    def script(frame: bytes) -> bytes | None:
        api_key, _ = struct.unpack_from(">hh", frame)
        if _correlation(frame) == 1:  # the acks=0 Produce: a broker is silent
            return None
        body = struct.pack(">i", _correlation(frame)) + answers.get(api_key, b"")
        return struct.pack(">i", len(body)) + body

    async def main() -> None:
        async with running(script) as (listeners, upstream, registry):
            reader, writer = await asyncio.open_connection(*_bootstrap(listeners))
            sent = [_produce(0, 1), _list_groups(2), _produce(1, 3), _list_groups(4)]
            for frame in sent:
                writer.write(frame)
            await writer.drain()
            got = [await _read_frame(reader) for _ in range(3)]
            assert [_correlation(b"\0\0\0\0" + g) for g in got] == [2, 3, 4]
            assert got[0][4:] == answers[16] and got[2][4:] == answers[16]
            assert upstream.frames == [f[4:] for f in sent], "forwarded as the client sent them"
            writer.close()
            assert listeners.budget.used == 0
            frames = {
                (api, direction): registry.get_sample_value(
                    "zdict_proxy_frames_total", {"api": api, "direction": direction}
                )
                for api in ("Produce", "ListGroups")
                for direction in ("request", "response")
            }
            assert frames == {
                ("Produce", "request"): 2,
                ("Produce", "response"): 1,  # acks=0 has none
                ("ListGroups", "request"): 2,
                ("ListGroups", "response"): 2,
            }
            sent_bytes = registry.get_sample_value(
                "zdict_proxy_frame_bytes_total", {"api": "ListGroups", "direction": "response"}
            )
            assert sent_bytes == 2 * (8 + len(answers[16]))

    asyncio.run(main())


def test_metadata_names_a_local_listener_that_reaches_the_broker() -> None:
    upstream_address: list[Address] = []

    def script(frame: bytes) -> bytes | None:
        return _metadata_answer(12, upstream_address[0])(frame)

    async def main() -> None:
        async with running(script) as (listeners, upstream, _registry):
            upstream_address.append(upstream.address)
            reader, writer = await asyncio.open_connection(*_bootstrap(listeners))
            writer.write(
                request_frame(
                    3,
                    12,
                    7,
                    topics=None,
                    allow_auto_topic_creation=False,
                    include_topic_authorized_operations=False,
                )
            )
            await writer.drain()
            _, body = parse_response(3, 12, await _read_frame(reader))
            (broker,) = body.brokers
            assert (broker.node_id, broker.host) == (1, "127.0.0.1")
            assert broker.port == listeners.ports.port(1)
            assert listeners.upstream == {1: upstream.address}
            # The broker's own listener forwards to it.
            reader2, writer2 = await asyncio.open_connection(broker.host, broker.port)
            writer2.write(_list_groups(8))
            await writer2.drain()
            frame = await _read_frame(reader2)
            assert _correlation(b"\0\0\0\0" + frame) == 8
            writer.close()
            writer2.close()

    asyncio.run(main())


def test_api_versions_above_the_proxys_is_asked_upstream_in_v0_and_answered_in_v0() -> None:
    def script(frame: bytes) -> bytes | None:
        assert frame[:4] == struct.pack(">hh", 18, 0), "asked in v0"
        cls: Any = load_response_schema(18, 0)
        entry = sys.modules[cls.__module__].ApiVersion
        body = cls(
            error_code=ErrorCode.unsupported_version,
            api_keys=(
                entry(api_key=18, min_version=0, max_version=5),
                entry(api_key=78, min_version=1, max_version=2),
            ),
        )
        return encode_response(_correlation(frame), body)

    async def main() -> None:
        async with running(script) as (listeners, _upstream, _registry):
            reader, writer = await asyncio.open_connection(*_bootstrap(listeners))
            frame = request_frame(18, 4, 3, client_software_name="x", client_software_version="1")
            writer.write(frame[:6] + struct.pack(">h", 9) + frame[8:])  # ApiVersions v9
            await writer.drain()
            correlation_id, body = parse_response(18, 0, await _read_frame(reader))
            assert correlation_id == 3
            assert body.error_code == ErrorCode.unsupported_version
            assert [(e.api_key, e.max_version) for e in body.api_keys] == [(18, 4)]
            writer.close()

    asyncio.run(main())


def test_a_frame_over_the_limit_closes_the_connection_and_nothing_is_forwarded() -> None:
    async def main() -> None:
        async with running(lambda _f: None) as (listeners, upstream, _registry):
            reader, writer = await asyncio.open_connection(*_bootstrap(listeners))
            writer.write(struct.pack(">i", 64 * 1024 + 1) + b"\0" * 100)
            await writer.drain()
            assert await _closed(reader)
            assert upstream.frames == []
            assert listeners.budget.used == 0

    asyncio.run(main())


def test_an_api_not_listed_closes_the_connection() -> None:
    async def main() -> None:
        async with running(lambda _f: None) as (listeners, upstream, _registry):
            for api_key, version in [(78, 1), (1, 16), (999, 0)]:
                reader, writer = await asyncio.open_connection(*_bootstrap(listeners))
                writer.write(struct.pack(">ihhih", 10, api_key, version, 1, -1))
                await writer.drain()
                assert await _closed(reader)
            assert upstream.frames == []

    asyncio.run(main())


def test_a_stalled_frame_times_out_and_its_budget_is_returned() -> None:
    async def main() -> None:
        async with running(lambda _f: None, read_timeout=0.3) as (listeners, _upstream, _registry):
            reader, writer = await asyncio.open_connection(*_bootstrap(listeners))
            writer.write(struct.pack(">i", 60_000) + b"\0" * 1000)  # a size prefix, then silence
            await writer.drain()
            await asyncio.sleep(0.1)
            assert listeners.budget.used == 60_000, "taken as the frame is read"
            assert await _closed(reader)
            assert listeners.budget.used == 0
            # A client that disconnects mid-frame returns it as well.
            reader, writer = await asyncio.open_connection(*_bootstrap(listeners))
            writer.write(struct.pack(">i", 60_000) + b"\0" * 1000)
            await writer.drain()
            await asyncio.sleep(0.1)
            writer.close()
            await asyncio.sleep(0.1)
            assert listeners.budget.used == 0

    asyncio.run(main())


def test_connections_past_the_cap_with_none_idle_are_closed_at_once() -> None:
    async def main() -> None:
        async with running(lambda _f: None, max_connections=1) as (listeners, upstream, _registry):
            _r1, w1 = await asyncio.open_connection(*_bootstrap(listeners))
            w1.write(_list_groups(1))  # never answered: under way, so it keeps its slot
            await w1.drain()
            while not upstream.frames:
                await asyncio.sleep(0.01)
            r2, w2 = await asyncio.open_connection(*_bootstrap(listeners))

            assert await _closed(r2)
            w1.close()
            w2.close()

    asyncio.run(main())


def _open_connections(registry: CollectorRegistry) -> float:
    value = registry.get_sample_value("zdict_proxy_connections", {"listener": "bootstrap"})
    assert value is not None
    return value


def test_a_client_gone_with_nothing_under_way_frees_its_slot_at_once() -> None:
    async def main() -> None:
        async with running(lambda f: _list_groups_answer(f)) as (listeners, _upstream, registry):
            reader, writer = await asyncio.open_connection(*_bootstrap(listeners))
            writer.write(_list_groups(1))
            await writer.drain()
            await _read_frame(reader)
            assert _open_connections(registry) == 1
            writer.close()
            await asyncio.sleep(0.2)  # not DRAIN_TIMEOUT (30 s)
            assert _open_connections(registry) == 0
            assert listeners.budget.used == 0

    asyncio.run(main())


def _list_groups_answer(frame: bytes) -> bytes:
    body = struct.pack(">i", _correlation(frame)) + b"groups"
    return struct.pack(">i", len(body)) + body


def test_the_answers_under_way_reach_a_client_that_closed_its_side() -> None:
    answered: list[bytes] = []

    def script(frame: bytes) -> bytes | None:
        answered.append(frame)
        return None if len(answered) < 3 else b"".join(_list_groups_answer(f) for f in answered)

    async def main() -> None:
        async with running(script) as (listeners, _upstream, registry):
            reader, writer = await asyncio.open_connection(*_bootstrap(listeners))
            for correlation_id in (1, 2, 3):
                writer.write(_list_groups(correlation_id))
            writer.write_eof()  # half-closed: the answers are still awaited
            got = [await _read_frame(reader) for _ in range(3)]
            assert [_correlation(b"\0\0\0\0" + g) for g in got] == [1, 2, 3]
            assert await _closed(reader)
            await asyncio.sleep(0.1)
            assert _open_connections(registry) == 0
            writer.close()

    asyncio.run(main())


def test_past_max_in_flight_the_client_is_not_read_until_an_answer_comes() -> None:
    held: list[bytes] = []

    def script(frame: bytes) -> bytes | None:
        held.append(frame)
        return None  # answered by the test

    async def main() -> None:
        async with running(script, max_in_flight=2) as (listeners, upstream, _registry):
            _reader, writer = await asyncio.open_connection(*_bootstrap(listeners))
            for correlation_id in range(1, 6):
                writer.write(_list_groups(correlation_id))
            await writer.drain()
            await asyncio.sleep(0.2)
            assert [_correlation(f) for f in upstream.frames] == [1, 2], "2 awaited, 3 held"
            assert listeners.budget.used > 0, "the frames held are counted"
            writer.close()

    asyncio.run(main())


def test_an_upstream_that_does_not_read_stops_the_client_and_its_bytes_are_counted() -> None:
    release = asyncio.Event()
    frames: list[int] = []

    async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await release.wait()
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                frames.append(len(await reader.readexactly(size)))
        writer.close()

    async def main() -> None:
        server = await asyncio.start_server(slow, "127.0.0.1", 0)
        address = Address("127.0.0.1", server.sockets[0].getsockname()[1])
        settings = ProxySettings(
            listen="127.0.0.1:0",
            broker_port_base=_free_port() - 1,
            max_request_bytes=64 * 1024,
            max_buffered_bytes=1024 * 1024,
        )
        metrics = ForwardMetrics(CollectorRegistry())
        filters = functools.partial(proxy_filters, settings, metrics)
        listeners = Listeners(settings, [address], metrics, filters)
        await listeners.start()
        try:
            _reader, writer = await asyncio.open_connection(*_bootstrap(listeners))
            # acks=0 Produce requests of ~60 KB: no answer awaited, so only the upstream's
            # write buffer pushes back. 64 MB offered.
            frame = _produce_padded(60_000)
            sent = 0
            with contextlib.suppress(TimeoutError):
                for _ in range(1000):
                    writer.write(frame)
                    await asyncio.wait_for(writer.drain(), 1)
                    sent += 1
            assert sent < 1000, "pushed back: the proxy stopped reading"
            assert 0 < listeners.budget.used <= settings.max_buffered_bytes + 512 * 1024
            release.set()
            while len(frames) < sent:
                await asyncio.wait_for(writer.drain(), 5)
                await asyncio.sleep(0.05)
            writer.close()
            await asyncio.sleep(0.2)
            assert listeners.budget.used == 0
        finally:
            await listeners.stop()
            server.close()

    asyncio.run(main())


def _produce_padded(size: int) -> bytes:
    """An acks=0 Produce v9 request frame padded to `size` bytes (the proxy without a Produce
    rewriter reads its header and acks only)."""
    frame = _produce(0, 1)
    body = frame[4:] + b"\0" * (size - len(frame))
    return struct.pack(">i", len(body)) + body


class _FaultyRewriter:
    """Stands for a ProduceRewriter with a bug: every rewrite raises."""

    def start(self, *_args: object) -> None:
        raise RuntimeError("a bug of the proxy's own")


def test_a_fault_of_the_proxys_own_ends_that_connection_logged_and_others_are_served() -> None:
    async def main() -> None:
        async with running(
            lambda f: encode_response(_correlation(f), filled(load_response_schema(16, 4))),
            produce=_FaultyRewriter(),
        ) as (listeners, upstream, _registry):
            with capture_logs() as logs:
                reader, writer = await asyncio.open_connection(*_bootstrap(listeners))
                writer.write(_produce(-1, 7))
                await writer.drain()
                assert await _closed(reader)
            (failed,) = [e for e in logs if e["event"] == "connection_failed"]
            assert failed["log_level"] == "error" and "a bug of the proxy's own" in failed["error"]
            assert upstream.frames == []
            assert listeners.budget.used == 0
            reader, writer = await asyncio.open_connection(*_bootstrap(listeners))
            writer.write(_list_groups(8))
            await writer.drain()
            assert struct.unpack_from(">i", await _read_frame(reader))[0] == 8  # answered
            writer.close()

    asyncio.run(main())
