"""Fair connection slots (`slots`, `listeners`): idle connections give way to new ones at the
cap, a client address holds at most its share, connections with work under way keep theirs, a
connection that never sends a byte is closed, and refusals are logged once an interval with a
count. Against a scripted upstream broker, in one process; clocks are the tests' own."""

from __future__ import annotations

import asyncio
import socket

from structlog.testing import capture_logs

from sidecar.proxy.addresses import Address
from sidecar.proxy.listeners import Listeners
from sidecar.proxy.slots import Slots
from sidecar.proxy.throttle import Throttle
from tests.unit.test_forward_connection import (
    _bootstrap,
    _closed,
    _correlation,
    _list_groups,
    _list_groups_answer,
    _read_frame,
    running,
)


class _Fake:
    """A connection whose idleness the test sets."""

    def __init__(self, since: float | None, *, sent: bool = True) -> None:
        self.since = since
        self.sent = sent

    def idle_since(self) -> float | None:
        return self.since

    def sent_a_byte(self) -> bool:
        return self.sent


def _slots(per_client: int, held: dict[str, _Fake], hosts: dict[str, str]) -> Slots[str, _Fake]:
    slots: Slots[str, _Fake] = Slots(max_connections=4, per_client=per_client)
    for key, connection in held.items():
        slots.hold(key, hosts[key])
        slots.serve(key, connection)
    return slots


def test_the_longest_idle_connection_of_the_greediest_address_gives_way_at_the_cap() -> None:
    held = {"a1": _Fake(5.0), "a2": _Fake(None), "a3": _Fake(9.0), "b1": _Fake(1.0)}
    hosts = {"a1": "a", "a2": "a", "a3": "a", "b1": "b"}
    slots = _slots(0, held, hosts)
    assert slots.room("c", 100.0) == (True, "a1"), "a holds 3 slots: its longest idle goes first"
    held["a1"].since = held["a3"].since = None  # a's connections all busy now
    assert slots.room("c", 100.0) == (True, "b1")
    held["b1"].since = None
    assert slots.room("c", 100.0) == (False, None), "nothing idle: refused"
    assert slots.release("a2") is held["a2"]
    assert slots.release("a2") is None, "released twice: nothing more"
    assert slots.room("c", 100.0) == (True, None)
    assert slots.held_by("a") == 2 and len(slots) == 3


def test_a_connection_that_never_sent_a_byte_gives_way_before_a_longer_idle_one() -> None:
    held = {"a1": _Fake(5.0), "a2": _Fake(50.0, sent=False), "a3": _Fake(99.5, sent=False)}
    slots = _slots(0, held, {"a1": "a", "a2": "a", "a3": "a"})
    slots.max_connections = 3
    assert slots.room("a", 100.0) == (True, "a2"), "silent, and idle for at least a second"
    held["a2"].since = None
    assert slots.room("a", 100.0) == (True, "a1"), "a3 is silent but idle for less than 1 s"


def test_a_client_address_past_its_share_loses_its_own_idle_connection_or_is_refused() -> None:
    held = {"a1": _Fake(3.0), "a2": _Fake(None), "b1": _Fake(0.0)}
    slots = _slots(2, held, {"a1": "a", "a2": "a", "b1": "b"})
    assert slots.room("a", 100.0) == (True, "a1"), "b's idle connection is not a's to take"
    assert slots.room("a", 3.5) == (False, None), "idle for less than a second: it stays"
    held["a1"].since = None
    assert slots.room("a", 100.0) == (False, None)
    assert slots.room("b", 100.0) == (True, None), "another address is admitted"


def test_at_the_cap_an_idle_connection_is_closed_to_admit_a_new_client() -> None:
    async def main() -> None:
        async with running(_list_groups_answer, max_connections=2) as (listeners, _up, registry):
            listeners.slots.min_idle = 0.0
            idle_reader, idle_writer = await asyncio.open_connection(*_bootstrap(listeners))
            busy_reader, busy_writer = await asyncio.open_connection(*_bootstrap(listeners))
            busy_writer.write(_list_groups(1))
            await busy_writer.drain()
            await _read_frame(busy_reader)  # served: idle now, but more recently than the other
            new_reader, new_writer = await asyncio.open_connection(*_bootstrap(listeners))
            new_writer.write(_list_groups(2))
            await new_writer.drain()
            assert await _read_frame(new_reader), "the new client is served"
            assert await _closed(idle_reader), "the longest idle connection gave way"
            busy_writer.write(_list_groups(3))
            await busy_writer.drain()
            assert await _read_frame(busy_reader), "the other one is still served"
            evicted = registry.get_sample_value(
                "zdict_proxy_closed_connections_total", {"reason": "evicted"}
            )
            assert evicted == 1
            for writer in (idle_writer, busy_writer, new_writer):
                writer.close()

    asyncio.run(main())


def test_a_connection_that_never_sends_a_byte_is_closed_after_the_first_request_timeout() -> None:
    async def main() -> None:
        async with running(_list_groups_answer, first_request_timeout=5.0) as (listeners, _, _r):
            silent_reader, silent_writer = await asyncio.open_connection(*_bootstrap(listeners))
            talker_reader, talker_writer = await asyncio.open_connection(*_bootstrap(listeners))
            talker_writer.write(_list_groups(1))
            await talker_writer.drain()
            await _read_frame(talker_reader)
            later = asyncio.get_running_loop().time() + 6.0
            for connection in listeners.slots.connections():
                connection.sweep(later)  # the sweep as it runs 6 s on
            assert await _closed(silent_reader)
            talker_writer.write(_list_groups(2))
            await talker_writer.drain()
            assert await _read_frame(talker_reader), "a client that sent a request stays"
            silent_writer.close()
            talker_writer.close()

    asyncio.run(main())


def _busy_slots(listeners: Listeners) -> bool:
    return all(c.idle_since() is None for c in listeners.slots.connections())


def test_refused_connections_are_logged_once_an_interval_with_how_many_were_held_back() -> None:
    now = [0.0]

    async def main() -> None:
        async with running(lambda _f: None, max_connections=1) as (listeners, upstream, registry):
            listeners.refusals = Throttle(10.0, clock=lambda: now[0])
            _r1, w1 = await asyncio.open_connection(*_bootstrap(listeners))
            w1.write(_list_groups(1))  # never answered: its slot stays taken
            await w1.drain()
            while not upstream.frames:
                await asyncio.sleep(0.01)
            assert _busy_slots(listeners)
            with capture_logs() as logs:
                for burst in range(2):
                    for _ in range(20):
                        reader, writer = await asyncio.open_connection(*_bootstrap(listeners))
                        assert await _closed(reader)
                        writer.close()
                    now[0] += 10.0 if burst == 0 else 0.0
            refused = [e for e in logs if e["event"] == "connection_refused"]
            assert [e["held_back"] for e in refused] == [0, 19]
            assert "ZDICT_PROXY__MAX_CONNECTIONS" in refused[0]["reason"]
            total = registry.get_sample_value("zdict_proxy_refused_connections_total")
            assert total == 40, "every refusal counted"
            w1.close()

    asyncio.run(main())


async def _connect_from(
    host: str, listeners: Listeners
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to the bootstrap listener from source address `host` (loopback /8)."""
    sock = socket.socket()
    sock.bind((host, 0))
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, _bootstrap(listeners))
    reader, writer = await asyncio.open_connection(sock=sock)
    return reader, writer


def test_one_client_address_cannot_take_every_slot() -> None:
    async def main() -> None:
        async with running(lambda _f: None, max_connections=10, max_connections_per_client=2) as (
            listeners,
            upstream,
            _registry,
        ):
            writers = []
            for i in range(2):
                _reader, writer = await asyncio.open_connection(*_bootstrap(listeners))
                writer.write(_list_groups(i))
                writers.append(writer)
            while len(upstream.frames) < 2:
                await asyncio.sleep(0.01)
            third, third_writer = await asyncio.open_connection(*_bootstrap(listeners))
            assert await _closed(third), "127.0.0.1 holds its share, none idle"
            other, other_writer = await _connect_from("127.0.0.2", listeners)
            other_writer.write(_list_groups(3))
            await other_writer.drain()
            while len(upstream.frames) < 3:
                await asyncio.sleep(0.01)
            assert listeners.slots.held_by("127.0.0.2") == 1, "another address is admitted"
            assert not other.at_eof()
            for writer in (*writers, third_writer, other_writer):
                writer.close()

    asyncio.run(main())


async def _refused(address: tuple[str, int]) -> bool:
    """Whether a connection to `address` is refused."""
    try:
        _reader, writer = await asyncio.open_connection(*address)
    except ConnectionRefusedError:
        return True
    writer.close()
    return False


def _down() -> Address:
    """An address nothing listens on: an upstream that is down."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return Address("127.0.0.1", probe.getsockname()[1])


def test_a_client_that_finds_upstream_down_waits_for_it_while_new_connections_are_refused() -> None:
    async def main() -> None:
        async with running(_list_groups_answer) as (listeners, upstream, _registry):
            listeners.recheck_interval = 0.05
            down = _down()
            listeners.bootstrap = (down,)
            address = _bootstrap(listeners)
            with capture_logs() as logs:
                reader, writer = await asyncio.open_connection(*address)
                writer.write(_list_groups(1))
                await writer.drain()
                while not await _refused(address):  # refused once the listener stopped
                    await asyncio.sleep(0.01)
                back = await asyncio.start_server(upstream.serve, down.host, down.port)
                answer = await _read_frame(reader)
                assert _correlation(b"\0\0\0\0" + answer) == 1, "the client kept is served"
                writer.close()
                while await _refused(address):  # listening again once upstream is back
                    await asyncio.sleep(0.05)
                reader, writer = await asyncio.open_connection(*address)
                writer.write(_list_groups(2))
                await writer.drain()
                assert _correlation(b"\0\0\0\0" + await _read_frame(reader)) == 2
                writer.close()
                back.close()
            events = [e["event"] for e in logs if e["event"].startswith(("listener_", "upstream_"))]
            assert events == [
                "upstream_unreachable",
                "listener_paused",
                "upstream_reached",
                "listener_resumed",
            ]

    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_client_whose_upstream_stays_down_is_closed_after_the_upstream_wait() -> None:
    async def main() -> None:
        async with running(_list_groups_answer) as (listeners, _upstream, registry):
            listeners.recheck_interval = 0.05
            listeners.upstream_wait = 0.5
            listeners.bootstrap = (_down(),)
            with capture_logs() as logs:
                reader, writer = await asyncio.open_connection(*_bootstrap(listeners))
                writer.write(_list_groups(1))
                await writer.drain()
                assert await _closed(reader), "closed once the wait ended"
                writer.close()
            ended = [e for e in logs if e["event"] == "upstream_wait_ended"]
            assert len(ended) == 1 and "within 0.5 s" in ended[0]["error"]
            closed = registry.get_sample_value(
                "zdict_proxy_closed_connections_total", {"reason": "upstream_unreachable"}
            )
            assert closed == 1

    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_client_that_sends_nothing_opens_no_upstream_connection() -> None:
    async def main() -> None:
        opened: list[int] = []
        async with running(_list_groups_answer) as (listeners, upstream, _registry):

            async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
                opened.append(1)
                await upstream.serve(reader, writer)

            broker = await asyncio.start_server(serve, "127.0.0.1", 0)
            listeners.bootstrap = (Address("127.0.0.1", broker.sockets[0].getsockname()[1]),)
            silent = [await asyncio.open_connection(*_bootstrap(listeners)) for _ in range(3)]
            await asyncio.sleep(0.2)
            assert not opened, "no broker connection for clients that said nothing"
            reader, writer = silent[0]
            writer.write(_list_groups(1))
            await writer.drain()
            assert _correlation(b"\0\0\0\0" + await _read_frame(reader)) == 1
            assert len(opened) == 1, "opened by the first request"
            for _reader, writer in silent:
                writer.close()
            broker.close()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_listener_stops_as_soon_as_its_upstream_closes_connections_and_refuses_new_ones() -> None:
    """A broker stopping closes its port and every connection: the proxy checks upstream as
    its connections close, so the clients' next connections are refused, none accepted and
    closed (issue 37: the first one after the broker stopped was)."""

    async def main() -> None:
        async with running(_list_groups_answer) as (listeners, upstream, _registry):
            writers: list[asyncio.StreamWriter] = []

            async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
                writers.append(writer)
                await upstream.serve(reader, writer)

            broker = await asyncio.start_server(serve, "127.0.0.1", 0)
            listeners.bootstrap = (Address("127.0.0.1", broker.sockets[0].getsockname()[1]),)
            address = _bootstrap(listeners)
            with capture_logs() as logs:
                reader, writer = await asyncio.open_connection(*address)
                writer.write(_list_groups(1))
                await writer.drain()
                assert _correlation(b"\0\0\0\0" + await _read_frame(reader)) == 1
                broker.close()  # the port first, then the connections, as a broker stops
                for upstream_writer in writers:
                    upstream_writer.close()
                assert await _closed(reader)
                writer.close()
                while not any(e["event"] == "listener_paused" for e in logs):
                    await asyncio.sleep(0.01)
                assert await _refused(address), "no connection accepted to find upstream down"

    asyncio.run(asyncio.wait_for(main(), 30))
