"""One client connection piped to its own upstream connection: the network layer, which moves
bytes, keeps their order and the budget, and knows no API (what becomes of each request and
answer is its `chain.FilterChain`'s).

Both connections are asyncio protocols: bytes are handled as they arrive, with no task and no
timer per request. From the client, complete frames (at most `proxy.max_request_bytes`; every
byte read is counted in the shared budget until forwarded, a frame in progress holding its next
chunk ahead) are given to the chain at once, and its action done (`filter.Action`): forwarded
upstream (the frame or one in its place), the answer it awaits noted; answered by the proxy
(`correlation`) in request order, right after the answer awaited before it; refused (nothing more
is read, the connection ends once the answers due before it are written, as a broker ends it);
or rewritten a slice at a time, the client not read meanwhile. From upstream, answers come in
request order: each is matched to the oldest request noted (correlation ids checked), and
streamed back byte for byte, or read whole and written as the chain makes it (a decoded answer's
output taken from the budget as it grows). An answer made later (a listener to start, records to
decode) stops reading upstream until it is written. At most `proxy.max_in_flight` requests await
their answer; beyond, the client is not read.

Reading stops on a side while the budget is used up (until bytes are given back), while the
other side's connection does not take what is written to it (its write buffer is full; the
bytes in it stay counted in the budget), and for the client while `max_in_flight` answers are
awaited. `sweep`, called about once a second, ends a connection whose frame in progress has
not arrived within `proxy.read_timeout` seconds, whose client has taken none of its answers for
`proxy.write_timeout` seconds (its bytes held in the budget meanwhile), that sent nothing for
`IDLE_TIMEOUT`, or that sent no byte at all within `proxy.first_request_timeout`. `idle_since`
tells the listeners whether closing a connection loses nothing (to admit another at the cap).

When the client closes its side between two requests, the answers under way are still written
(at most `DRAIN_TIMEOUT` seconds); with none under way, both connections end at once. Anything
else that ends one side ends both, with one log line.
"""

from __future__ import annotations

import asyncio
import functools
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Concatenate, Final, ParamSpec, cast

from sidecar.errors import ProtocolError
from sidecar.logs import get_logger
from sidecar.proxy.budget import Budget
from sidecar.proxy.chain import FilterChain
from sidecar.proxy.correlation import Correlation
from sidecar.proxy.filter import Answer, Close, Forward, Later, Steps
from sidecar.proxy.frames import PREFIX_BYTES, frame_size
from sidecar.proxy.metrics import REQUEST, ForwardMetrics
from sidecar.proxy.sides import (
    BUDGET,
    CHUNK_BYTES,
    EOF,
    NOT_BLOCKING,
    Accepted,
    ClientSide,
    Side,
    UpstreamSide,
)

log = get_logger(__name__)


#: Seconds a connection may stay without a request: a broker's `connections.max.idle.ms`.
IDLE_TIMEOUT: Final = 600.0
#: Seconds the answers under way may take to reach a client that closed its side.
DRAIN_TIMEOUT: Final = 30.0
_API_KEY: Final = struct.Struct(">h")
_INT32: Final = struct.Struct(">i")
#: Why a side is not read (`Side.stops`; `EOF`, `BUDGET` are the sides', `REWRITING` the
#: answers').
_IN_FLIGHT: Final = "in_flight"
_PEER_FULL: Final = "peer_full"
_UNREAD: Final = "answers_unread"
_LATER: Final = "rewriting_request"
_REFUSED: Final = "refused"

Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


@dataclass(frozen=True, slots=True)
class Limits:
    """The bounds of one connection (see module)."""

    max_frame_bytes: int
    max_in_flight: int
    read_timeout: float
    #: `proxy.write_timeout`: seconds a client may leave its answers unread.
    write_timeout: float
    #: `proxy.max_unread_bytes`: bytes of answers one connection may hold for its client.
    max_unread_bytes: int
    #: Seconds a connection may stay open without sending a byte.
    first_request_timeout: float = 10.0


_P = ParamSpec("_P")


def _guarded(
    method: Callable[Concatenate[Connection, _P], None],
) -> Callable[Concatenate[Connection, _P], None]:
    """An entry from the event loop into a connection (bytes read, a resumption, the budget's
    call back): a fault of the proxy's own in it ends that connection (`Connection.failed`),
    not the listener or the loop, and is logged as ours."""

    @functools.wraps(method)
    def guarded(self: Connection, /, *args: _P.args, **kwargs: _P.kwargs) -> None:
        try:
            method(self, *args, **kwargs)
        except Exception as exc:  # a bug: this connection ends, the others are served
            self.failed(exc)

    return guarded


class Connection:
    """One client connection and its upstream connection (see module)."""

    def __init__(
        self,
        accepted: Accepted,
        upstream: Streams,
        *,
        limits: Limits,
        budget: Budget,
        metrics: ForwardMetrics,
        chain: FilterChain,
    ) -> None:
        """Take over the client's connection (`accepted`) and `upstream` (opened, nothing read
        since the proxy's own exchange). `chain`: what becomes of each request and answer."""
        client = accepted.transport
        assert client is not None
        self.limits = limits
        self.budget = budget
        self.metrics = metrics
        self.chain = chain
        peername = client.get_extra_info("peername")
        self.peer = str(peername)
        #: The client's address, without its port: its share of the Fetch decoder.
        self.client_host = str(peername[0]) if isinstance(peername, tuple) else self.peer
        # Clients are told to come back to the host they reached the proxy at.
        self.host = str(client.get_extra_info("sockname")[0])
        self._loop = asyncio.get_running_loop()
        self._done: asyncio.Future[str | None] = self._loop.create_future()
        self.answers = Correlation(
            self, chain, budget=budget, metrics=metrics, max_unread_bytes=limits.max_unread_bytes
        )
        #: Loop time the client closed its side while answers were under way (None: it did not).
        self._draining: float | None = None
        #: Loop time the client stopped taking its answers (None: it takes them).
        self._unread_since: float | None = None
        #: The reason `serve` returns once the drain ends (None: the client closed its side).
        self._drain_reason: str | None = None
        #: The request being rewritten a slice at a time: its rewriting and frame (size prefix
        #: included, held in the budget meanwhile); the client is not read.
        self._later: tuple[Steps, bytes] | None = None
        self._last_read = self._opened = self._loop.time()
        #: The client has sent nothing yet.
        self._silent = True
        self._upstream_writer = upstream[1]  # kept alive with its transport
        upstream_transport = cast(asyncio.Transport, upstream[1].transport)
        self.client = ClientSide(self, client)
        self.upstream = UpstreamSide(self, upstream_transport)
        client.set_protocol(self.client)
        upstream_transport.set_protocol(self.upstream)
        if upstream[0].at_eof() or upstream_transport.is_closing():
            self.upstream_lost()
            return
        if accepted.data:
            self.requests(bytes(accepted.data))
        if accepted.eof:
            self.client.eof_received()
        elif not self.client.stops:
            client.resume_reading()

    @property
    def client_id(self) -> str | None:
        """The client id of the client's latest request."""
        return self.chain.client_id

    async def serve(self) -> str | None:
        """Forward until either side ends; the reason the proxy closed it (None: the client
        or upstream closed it in order)."""
        try:
            return await asyncio.shield(self._done)
        finally:
            self.close(None)  # cancelled: the proxy is stopping

    def sweep(self, now: float) -> None:
        """End the connection if a frame in progress is late, it stayed idle, or its drain took
        too long (see module); `now`: the loop's time."""
        if self._done.done():
            return
        client = self.client
        if self._draining is not None:
            if now - self._draining > DRAIN_TIMEOUT:
                self.close(self._drain_reason)
        elif (
            self._unread_since is not None and now - self._unread_since > self.limits.write_timeout
        ):
            log.warning(
                "answers_unread",
                peer=self.peer,
                client_id=self.client_id,
                error=f"the client read none of its answers for {self.limits.write_timeout:g} s "
                "(ZDICT_PROXY__WRITE_TIMEOUT)",
            )
            self.close("write_timeout")
        elif client.data and not client.stops - NOT_BLOCKING:
            if now - client.started > self.limits.read_timeout:
                log.warning(
                    "request_timed_out",
                    peer=self.peer,
                    client_id=self.client_id,
                    error=f"a request frame did not arrive within {self.limits.read_timeout:g} s "
                    "(ZDICT_PROXY__READ_TIMEOUT)",
                )
                self.close("timeout")
        elif (not client.data and now - self._last_read > IDLE_TIMEOUT) or (
            self._silent and now - self._opened > self.limits.first_request_timeout
        ):
            self.close("idle")

    def idle_since(self) -> float | None:
        """Loop time of the client's last bytes when nothing is under way on the connection
        (no request awaiting its answer, no frame in progress, no answer being written), so
        closing it loses nothing; None: something is, or it ended. A client that never sent a
        byte is idle since it connected."""
        if (
            self._done.done()
            or self.answers.pending
            or self.client.data
            or self.answers.streaming is not None
            or self.answers.rewriting is not None
            or self._later is not None
        ):
            return None
        return self._last_read

    def sent_a_byte(self) -> bool:
        """Whether the client ever sent anything."""
        return not self._silent

    def close(self, reason: str | None) -> None:
        """End both connections, give the budget back; `serve` returns `reason`."""
        if self._done.done():
            return
        self._done.set_result(reason)
        self.answers.close()
        for side in (self.client, self.upstream):
            self.budget.cancel(self._retry)
            self.budget.give(side.held + side.writing)
            side.held = side.writing = 0
            side.data.clear()
            side.transport.close()  # what was written still goes out
        if self._later is not None:
            self.budget.give(len(self._later[1]))
            self._later = None

    # -- client -> upstream --------------------------------------------------------------------

    @_guarded
    def requests(self, data: bytes) -> None:
        """Handle the complete frames of what the client sent."""
        client = self.client
        now = self._last_read = self._loop.time()
        self._silent = False
        if not client.data:
            client.started = now
            buffer: bytes | bytearray = data
        else:
            client.data += data
            buffer = client.data
        end = self._forward(buffer)
        if self._done.done():
            return
        if buffer is data:
            if end < len(data):
                client.data += data[end:]
        elif end:
            del client.data[:end]
            client.started = now
        self._account(client)

    def _forward(self, buffer: bytes | bytearray) -> int:
        """Handle the complete frames of `buffer` while the client may be served; the offset
        after the last one handled."""
        client = self.client
        pos = 0
        try:
            while not client.stops - NOT_BLOCKING and not self._done.done():
                if len(buffer) - pos < PREFIX_BYTES:
                    break
                size = frame_size(
                    bytes(buffer[pos : pos + PREFIX_BYTES]), self.limits.max_frame_bytes
                )
                end = pos + PREFIX_BYTES + size
                if len(buffer) < end:
                    break
                whole = buffer if pos == 0 and end == len(buffer) else buffer[pos:end]
                self._request(bytes(whole))
                pos = end
        except ProtocolError as exc:
            self._refuse_request(str(exc))
        return pos

    def _refuse_request(self, error: str) -> None:
        """A request the proxy does not forward (`error` says why): the connection ends once
        the answers due before it are written."""
        log.warning("request_refused", peer=self.peer, client_id=self.client_id, error=error)
        self._end_after_answers("refused")

    def _end_after_answers(self, reason: str) -> None:
        """Read nothing more from the client, and close with `reason` once the answers due
        are written (as a broker, which answers a connection's requests one at a time, has
        written them)."""
        self.client.stop(_REFUSED)
        if self.answers.pending:
            self._draining = self._loop.time()
            self._drain_reason = reason
        else:
            self.close(reason)

    def _request(self, whole: bytes) -> None:
        """Handle one request frame, `whole` with its size prefix.

        Raises:
            ProtocolError: the request does not parse.
        """
        action = self.chain.request(whole[PREFIX_BYTES:], self)
        if isinstance(action, Later):
            # Rewritten on in slices (`_request_on`); its bytes stay held meanwhile.
            self._later = (action.steps, whole)
            self.budget.force(len(whole))
            self.client.stop(_LATER)
            self._loop.call_soon(self._request_on)
            return
        self._act(action, whole)

    def _act(self, action: Forward | Answer | Close, whole: bytes) -> None:
        """Do what the chain decided of request `whole` (see module)."""
        if isinstance(action, Close):
            self._refuse_request(action.error)
            return
        api_key: int = _API_KEY.unpack_from(whole, PREFIX_BYTES)[0]
        if isinstance(action, Answer):
            self.answers.answer(action.frame, api_key)
            if action.close is not None:
                self._end_after_answers(action.close)
        else:
            expected = action.expected
            if expected is not None:
                pending = self.answers.pending
                pending.append(expected)
                if len(pending) >= self.limits.max_in_flight:
                    self.client.stop(_IN_FLIGHT)
            self.upstream.transport.write(whole if action.frame is None else action.frame)
        self.metrics.frame(api_key, REQUEST, len(whole))

    @_guarded
    def _request_on(self) -> None:
        """Rewrite the next slice of the request under way; once done, act on it and go on
        with the client's frames. Other connections are served between two slices."""
        later = self._later
        if later is None or self._done.done():
            return
        steps, whole = later
        try:
            action = steps.run()
        except ProtocolError as exc:
            self._later = None
            self.budget.give(len(whole))
            self._refuse_request(str(exc))
            return
        if action is None:
            self._loop.call_soon(self._request_on)
            return
        self._later = None
        self.budget.give(len(whole))
        self._act(action, whole)
        self.client.go(_LATER)
        self._resume_requests()

    def client_eof(self) -> None:
        """The client closed its side: once the frames it sent are handled, drain the answers
        under way, or end now if there are none."""
        if self._done.done() or self.client.stops - NOT_BLOCKING:
            return  # frames still to handle: `_resume_requests` comes back here
        if self.client.data or not self.answers.pending:
            # A frame cut short is not forwarded; nothing under way: nothing to wait for.
            self.close(None)
        elif self._draining is None:
            self._draining = self._loop.time()

    # -- upstream -> client --------------------------------------------------------------------

    @_guarded
    def responses(self, data: bytes) -> None:
        """Write back the answers in what upstream sent."""
        upstream = self.upstream
        if not upstream.data:
            buffer: bytes | bytearray = data
        else:
            upstream.data += data
            buffer = upstream.data
        try:
            end = self.answers.handle(buffer)
        except ProtocolError as exc:
            self.refuse_upstream(exc)
            return
        if self._done.done():
            return
        if buffer is data:
            if end < len(data):
                upstream.data += data[end:]
        elif end:
            del upstream.data[:end]
        self._account(upstream)

    def failed(self, exc: Exception) -> None:
        """A fault of the proxy's own (a bug, not what a side sent) while serving: logged with
        its traceback, and the connection ends; the others are served on."""
        log.error(
            "connection_failed",
            peer=self.peer,
            client_id=self.client_id,
            error=repr(exc),
            exc_info=exc,
        )
        self.close(None)

    def refuse_upstream(self, exc: ProtocolError) -> None:
        """Upstream sent what the proxy cannot pass on: the connection ends, as a broker
        speaking out of protocol ends it for its client."""
        log.warning(
            "upstream_response_refused", peer=self.peer, client_id=self.client_id, error=str(exc)
        )
        self.close("upstream_closed")

    def ended(self) -> bool:
        """Whether the connection ended."""
        return self._done.done()

    def answered(self) -> None:
        """An awaited answer was written: the client may be read again, and a drain ends once
        none is left."""
        if _IN_FLIGHT in self.client.stops:
            self.client.go(_IN_FLIGHT)
            self._loop.call_soon(self._resume_requests)
        if not self.answers.pending and self._draining is not None:
            self.close(self._drain_reason)

    def room(self) -> int:
        return self.answers.room()

    def hold(self, size: int) -> None:
        self.answers.hold(size)

    def upstream_lost(self) -> None:
        if not self._done.done():
            log.info("upstream_closed", peer=self.peer, client_id=self.client_id)
            self.close("upstream_closed")

    # -- both ------------------------------------------------------------------------------------

    def _account(self, side: Side) -> None:
        """Hold in the budget what `side` has read and not handled (`_hold_read`)."""
        if not self._done.done():
            whole = side is self.client or self.answers.whole_next()
            _hold_read(side, self.budget, whole, self._retry)

    @_guarded
    def _retry(self) -> None:
        """Bytes were given back: account again for the sides the budget stopped."""
        for side in (self.client, self.upstream):
            if BUDGET in side.stops:
                self._account(side)

    def side_full(self, side: Side) -> None:
        """`side` takes no more for now: what its buffer holds is counted, the other side is
        not read."""
        extra = side.transport.get_write_buffer_size()
        self.budget.force(extra)
        side.writing += extra
        if side is self.client:
            self._unread_since = self._loop.time()
            self.upstream.stop(_PEER_FULL)
            self.client.stop(_UNREAD)  # a client that does not read its answers is not read
        else:
            self.client.stop(_PEER_FULL)

    def side_free(self, side: Side) -> None:
        """`side` takes bytes again."""
        self.budget.give(side.writing)
        side.writing = 0
        if side is self.client:
            self._unread_since = None
            self.upstream.go(_PEER_FULL)
            self.client.go(_UNREAD)
            self._loop.call_soon(self.resume_responses)
            self._loop.call_soon(self._resume_requests)
        else:
            self.client.go(_PEER_FULL)
            self._loop.call_soon(self._resume_requests)

    @_guarded
    def _resume_requests(self) -> None:
        """Go on with the client's frames read while it was not served."""
        client = self.client
        if self._done.done() or client.stops - NOT_BLOCKING:
            return
        client.started = self._loop.time()
        if client.data:
            end = self._forward(client.data)
            if self._done.done():
                return
            del client.data[:end]
            self._account(client)
        if EOF in client.stops:
            self.client_eof()

    @_guarded
    def resume_responses(self) -> None:
        """Go on with the answers upstream sent while they were not written."""
        if self._done.done() or self.upstream.stops - NOT_BLOCKING or not self.upstream.data:
            return
        self.responses(b"")


def _hold_read(side: Side, budget: Budget, whole: bool, retry: Callable[[], None]) -> None:
    """Hold in `budget` the bytes `side` has read and not handled, and (`whole`: a frame read
    whole) the next chunk of the frame in progress; stop reading `side` while the budget has no
    room for them, `retry` called once it has."""
    data = side.data
    needed = len(data)
    if needed >= PREFIX_BYTES and whole:
        size: int = _INT32.unpack_from(data)[0]
        arrived = needed - PREFIX_BYTES
        if arrived < size:
            needed = max(needed, min(size, (arrived // CHUNK_BYTES + 1) * CHUNK_BYTES))
    more = needed - side.held
    if more <= 0:
        budget.give(-more)
        side.held = needed
        side.go(BUDGET)
    elif budget.take(more):
        side.held = needed
        side.go(BUDGET)
    else:
        # Bytes already read are held whatever the budget says; no more are read.
        budget.force(max(len(data) - side.held, 0))
        side.held = max(side.held, len(data))
        side.stop(BUDGET)
        budget.wait(retry)
