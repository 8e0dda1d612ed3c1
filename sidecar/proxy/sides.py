"""The asyncio protocols of one proxied connection: the client's just accepted (`Accepted`,
until its upstream connection is open), then each side's (`ClientSide`, `UpstreamSide`), which
hold the bytes read and not yet handled and why the side is not read, and hand what they read,
their end and their write backpressure to the connection that pipes the two (`Piped`:
`sidecar.proxy.connection.Connection`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final, Protocol, cast

#: Bytes a frame in progress takes from the budget at a time, ahead of their arrival; what a
#: client just accepted may send before it is not read.
CHUNK_BYTES: Final = 64 * 1024
#: Why a side is not read: it closed its side (never resumed).
EOF: Final = "eof"
#: Why a side is not read: the budget has no room for what it sent (resumed once it has).
BUDGET: Final = "budget"
#: Stops that leave the frames already read to be handled.
NOT_BLOCKING: Final = frozenset({BUDGET, EOF})


class Piped(Protocol):
    """What the sides tell the connection that pipes them (`connection.Connection`)."""

    def requests(self, data: bytes) -> None: ...
    def responses(self, data: bytes) -> None: ...
    def client_eof(self) -> None: ...
    def close(self, reason: str | None) -> None: ...
    def upstream_lost(self) -> None: ...
    def side_full(self, side: Side) -> None: ...
    def side_free(self, side: Side) -> None: ...


class Accepted(asyncio.Protocol):
    """A client connection just accepted, whose upstream connection is not open yet (it opens
    once the client has sent something: `spoke`): what it sends is kept (at most
    `CHUNK_BYTES`, then it is not read) until the connection takes it over."""

    def __init__(self, accepted: Callable[[Accepted], None]) -> None:
        self._accepted = accepted
        self.transport: asyncio.Transport | None = None
        self.data = bytearray()
        #: The client closed its side.
        self.eof = False
        #: The client went away before it was taken over.
        self.lost = False
        #: Set once the client sent bytes, closed its side or went away (or the proxy gave up
        #: waiting for it).
        self.spoke = asyncio.Event()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport, whichever loop made it (uvloop's are not asyncio.Transport's).
        self.transport = cast(asyncio.Transport, transport)
        self._accepted(self)

    def data_received(self, data: bytes) -> None:
        self.data += data
        self.spoke.set()
        if len(self.data) >= CHUNK_BYTES and self.transport is not None:
            self.transport.pause_reading()

    def eof_received(self) -> bool:
        self.eof = True
        self.spoke.set()
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.spoke.set()


class Side(asyncio.Protocol):
    """One of the two connections: the bytes read from it and not yet handled, counted in the
    budget, and why it is not read."""

    def __init__(self, connection: Piped, transport: asyncio.Transport) -> None:
        self.connection = connection
        self.transport = transport
        self.data = bytearray()
        #: Bytes of the budget held for `data` and for the chunk a frame in progress awaits.
        self.held = 0
        #: Bytes of the budget held for what was written to this side while it took no more.
        self.writing = 0
        #: Why this side is not read (empty: it is).
        self.stops: set[str] = set()
        #: Loop time the first byte of the frame in progress arrived.
        self.started = 0.0

    def stop(self, why: str) -> None:
        if not self.stops and not self.transport.is_closing():
            self.transport.pause_reading()
        self.stops.add(why)

    def go(self, why: str) -> None:
        if why in self.stops:
            self.stops.discard(why)
            if not self.stops and not self.transport.is_closing():
                self.transport.resume_reading()

    def pause_writing(self) -> None:
        self.connection.side_full(self)

    def resume_writing(self) -> None:
        self.connection.side_free(self)


class ClientSide(Side):
    """The client's connection: what it sends is requests."""

    def data_received(self, data: bytes) -> None:
        self.connection.requests(data)

    def eof_received(self) -> bool:
        self.stops.add(EOF)  # nothing more to read: never resumed
        self.connection.client_eof()
        return True  # the answers under way are still written

    def connection_lost(self, exc: Exception | None) -> None:
        self.connection.close(None)


class UpstreamSide(Side):
    """The upstream broker's connection: what it sends is answers."""

    def data_received(self, data: bytes) -> None:
        self.connection.responses(data)

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.connection.upstream_lost()
