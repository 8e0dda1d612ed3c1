"""One client connection piped to its own upstream connection.

Both connections are asyncio protocols: bytes are handled as they arrive, with no task and no
timer per request. From the client, complete frames (at most `proxy.max_request_bytes`; every
byte read is counted in the shared budget until forwarded, a frame in progress holding its next
chunk ahead) are handled at once: their header read, an API or version the proxy does not serve
refused (the connection is closed, as a broker does), the answer to expect noted and the frame
written upstream unchanged, but for a Produce, which the `ProduceRewriter` rewrites or refuses,
and a request `answers.refusal` refuses (an admin API, a protected topic: `access`): a refused
one is answered by the proxy (`_answer`), in request order, right after the answer awaited
before it. From upstream, answers come in request order: each is matched to the oldest
request noted (correlation ids checked), and streamed back byte for byte or read whole and
written as `answers.Answers` makes it: broker addresses rewritten, ApiVersions filtered, Fetch
records decoded (a decoded answer's output taken from the budget as it grows). A rewrite that
waits (a listener to start, records to decode) stops reading upstream until its answer is
written. A Produce with acks=0 gets no answer from the broker, so none is noted nor awaited. At
most `proxy.max_in_flight` requests await their answer; beyond, the client is not read.

Reading stops on a side while the budget is used up (until bytes are given back), while the
other side's connection does not take what is written to it (its write buffer is full; the
bytes in it stay counted in the budget), and for the client while `max_in_flight` answers are
awaited. `sweep`, called about once a second, ends a connection whose frame in progress has
not arrived within `proxy.read_timeout` seconds, whose client has taken none of its answers for
`proxy.write_timeout` seconds (its bytes held in the budget meanwhile), that sent nothing for
`IDLE_TIMEOUT`, or that sent no byte at all within `proxy.first_request_timeout`. `idle_since`
tells the listeners whether closing a connection loses nothing (to admit another at the cap).

A client's own SaslHandshake or SaslAuthenticate is not forwarded (upstream's connection is
authenticated as the proxy): once the answers under way are written, it is refused here
(`client_sasl`) and the connection closed.

When the client closes its side between two requests, the answers under way are still written
(at most `DRAIN_TIMEOUT` seconds); with none under way, both connections end at once. Anything
else that ends one side ends both, with one log line.
"""

from __future__ import annotations

import asyncio
import functools
import struct
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Concatenate, Final, ParamSpec, Protocol, cast

from sidecar.errors import ProtocolError
from sidecar.logs import get_logger
from sidecar.proxy.answers import Answers
from sidecar.proxy.budget import Budget
from sidecar.proxy.client_sasl import (
    ADVICE,
    CLIENT_SASL_APIS,
    REFUSAL_LOG,
    read_header,
    requested_mechanism,
)
from sidecar.proxy.client_sasl import answer as sasl_refusal
from sidecar.proxy.frames import (
    PREFIX_BYTES,
    RequestHeader,
    api_versions_v0,
    frame_size,
    produce_acks,
    read_request_header,
)
from sidecar.proxy.metrics import REQUEST, RESPONSE, ForwardMetrics
from sidecar.proxy.produce import Outcome
from sidecar.proxy.sides import CHUNK_BYTES, EOF, Accepted, ClientSide, Side, UpstreamSide
from sidecar.proxy.versions import (
    API_VERSIONS,
    PRODUCE,
    accepts,
    api_name,
    request_header_version,
    served_versions,
)

log = get_logger(__name__)


class ProduceSteps(Protocol):
    """One Produce request being rewritten (`sidecar.proxy.produce.Rewriting`)."""

    def run(self, seconds: float) -> Outcome | None:
        """Rewrite on for about `seconds`; the outcome once done (None: more to do)."""
        ...


class RewritesProduce(Protocol):
    """What a connection asks of its Produce rewriter (`sidecar.proxy.produce.ProduceRewriter`)."""

    def start(self, frame: bytes, header: RequestHeader, flexible: bool) -> ProduceSteps:
        """The rewriting of the Produce request `frame`: the frame to forward, or the answer
        in its place, a slice at a time."""
        ...


#: Seconds a connection may stay without a request: a broker's `connections.max.idle.ms`.
IDLE_TIMEOUT: Final = 600.0
#: Seconds the answers under way may take to reach a client that closed its side.
DRAIN_TIMEOUT: Final = 30.0
_HEAD: Final = struct.Struct(">hh")
_INT32: Final = struct.Struct(">i")
#: Why a side is not read (`Side.stops`; `EOF` is the sides').
_BUDGET: Final = "budget"
_IN_FLIGHT: Final = "in_flight"
_PEER_FULL: Final = "peer_full"
_SASL: Final = "client_sasl"
_REWRITING: Final = "rewriting"
_UNREAD: Final = "answers_unread"
_PRODUCING: Final = "producing"
_REFUSED: Final = "refused"
#: Stops that leave the frames already read to be handled.
_NOT_BLOCKING: Final = frozenset({_BUDGET, EOF})

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
    #: Seconds a Produce request's rewriting holds the event loop at a time.
    produce_slice: float = 0.02


@dataclass(frozen=True, slots=True, init=False)
class Expected:
    """A request forwarded whose answer is awaited."""

    api_key: int
    version: int
    correlation_id: int
    #: An ApiVersions above the proxy's versions, forwarded as v0: answered UNSUPPORTED_VERSION.
    unsupported: bool
    #: Answers the proxy gives itself to the requests that came after this one (refused at
    #: the door), written right after this one's answer.
    then: list[bytes]

    # init=False: made per request, so its __init__ is written here and compiled (see
    # deploy/build_backend.py); the one dataclasses generates would run interpreted.
    def __init__(
        self, api_key: int, version: int, correlation_id: int, *, unsupported: bool = False
    ) -> None:
        object.__setattr__(self, "api_key", api_key)
        object.__setattr__(self, "version", version)
        object.__setattr__(self, "correlation_id", correlation_id)
        object.__setattr__(self, "unsupported", unsupported)
        object.__setattr__(self, "then", [])


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
        answers: Answers,
        produce: RewritesProduce | None = None,
    ) -> None:
        """Take over the client's connection (`accepted`) and `upstream` (opened, nothing read
        since the proxy's own exchange). `answers`: what the client is sent for each answer;
        `produce`: rewrites Produce requests (None: they are forwarded as they came)."""
        client = accepted.transport
        assert client is not None
        self.limits = limits
        self.budget = budget
        self.metrics = metrics
        self.answers = answers
        self.produce = produce
        peername = client.get_extra_info("peername")
        self.peer = str(peername)
        #: The client's address, without its port: its share of the Fetch decoder.
        self.client_host = str(peername[0]) if isinstance(peername, tuple) else self.peer
        # Clients are told to come back to the host they reached the proxy at.
        self.host = str(client.get_extra_info("sockname")[0])
        self.client_id: str | None = None
        self._loop = asyncio.get_running_loop()
        self._done: asyncio.Future[str | None] = self._loop.create_future()
        #: Answers awaited, oldest first.
        self._pending: deque[Expected] = deque()
        #: The response being streamed to the client and its bytes still to come.
        self._streaming: Expected | None = None
        self._stream_left = 0
        self._stream_size = 0
        #: Bytes of the budget held for the parsed response being rewritten and written.
        self._answer_held = 0
        self._rewriting: asyncio.Task[None] | None = None
        self._sasl: tuple[bytes, RequestHeader] | None = None
        #: Loop time the client closed its side while answers were under way (None: it did not).
        self._draining: float | None = None
        #: Loop time the client stopped taking its answers (None: it takes them).
        self._unread_since: float | None = None
        #: The reason `serve` returns once the drain ends (None: the client closed its side).
        self._drain_reason: str | None = None
        #: The Produce request being rewritten a slice at a time: its rewriting, header and
        #: frame (size prefix included, held in the budget meanwhile); the client is not read.
        self._producing: tuple[ProduceSteps, RequestHeader, bytes] | None = None
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
        elif client.data and not client.stops - _NOT_BLOCKING:
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
            or self._pending
            or self.client.data
            or self._streaming is not None
            or self._rewriting is not None
            or self._sasl is not None
            or self._producing is not None
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
        if self._rewriting is not None:
            self._rewriting.cancel()
        for side in (self.client, self.upstream):
            self.budget.cancel(self._retry)
            self.budget.give(side.held + side.writing)
            side.held = side.writing = 0
            side.data.clear()
            side.transport.close()  # what was written still goes out
        self.budget.give(self._answer_held)
        self._answer_held = 0
        if self._producing is not None:
            self.budget.give(len(self._producing[2]))
            self._producing = None

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
            while not client.stops - _NOT_BLOCKING and not self._done.done():
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
            self._refuse_request(exc)
        return pos

    def _refuse_request(self, exc: ProtocolError) -> None:
        """A request the proxy does not forward: nothing more is read from the client, and the
        connection is closed once the answers due before it are written (as a broker, which
        answers a connection's requests one at a time, has written them)."""
        log.warning("request_refused", peer=self.peer, client_id=self.client_id, error=str(exc))
        self.client.stop(_REFUSED)
        if self._pending:
            self._draining = self._loop.time()
            self._drain_reason = "refused"
        else:
            self.close("refused")

    def _request(self, whole: bytes) -> None:
        """Handle one request frame, `whole` with its size prefix."""
        frame = whole[PREFIX_BYTES:]
        api_key = _HEAD.unpack_from(frame)[0]
        if api_key in CLIENT_SASL_APIS:
            self._sasl = (frame, read_header(frame))
            self.client.stop(_SASL)
            self._refuse_sasl()
            return
        expected, replaced, answer = self._admit(frame)
        if self._producing is not None:
            # Rewritten on in slices (`_produce_on`); its bytes stay held meanwhile.
            self._producing = (self._producing[0], self._producing[1], whole)
            self.budget.force(len(whole))
            self.client.stop(_PRODUCING)
            self._loop.call_soon(self._produce_on)
            return
        self._send(api_key, whole, expected, replaced, answer)

    def _send(
        self,
        api_key: int,
        whole: bytes,
        expected: Expected | None,
        replaced: bytes | None,
        answer: bytes | None,
    ) -> None:
        """Forward request `whole` (or `replaced` in its place) awaiting `expected`, or give
        the client the proxy's own `answer` to it."""
        if answer is not None:
            self._answer(answer, api_key)
        else:
            if expected is not None:
                self._pending.append(expected)
                if len(self._pending) >= self.limits.max_in_flight:
                    self.client.stop(_IN_FLIGHT)
            self.upstream.transport.write(whole if replaced is None else replaced)
        self.metrics.frame(api_key, REQUEST, len(whole))

    @_guarded
    def _produce_on(self) -> None:
        """Rewrite the next slice of the Produce request under way; once done, send it and go
        on with the client's frames. Other connections are served between two slices."""
        producing = self._producing
        if producing is None or self._done.done():
            return
        rewriting, header, whole = producing
        try:
            outcome = rewriting.run(self.limits.produce_slice)
        except ProtocolError as exc:
            self._producing = None
            self.budget.give(len(whole))
            self._refuse_request(exc)
            return
        if outcome is None:
            self._loop.call_soon(self._produce_on)
            return
        self._producing = None
        self.budget.give(len(whole))
        self._send(PRODUCE, whole, *_produced(outcome, header))
        self.client.go(_PRODUCING)
        self._resume_requests()

    def _refuse_sasl(self) -> None:
        """Answer a client's own SASL request locally (`client_sasl`) once the answers under
        way are written (responses go in request order), then end the connection."""
        if self._sasl is None or self._pending or self._done.done():
            return
        frame, header = self._sasl
        self.client.transport.write(sasl_refusal(header))
        held = REFUSAL_LOG.admit()
        if held is not None:
            log.warning(
                "client_sasl_refused",
                peer=self.peer,
                client_id=header.client_id,
                api=api_name(header.api_key),
                mechanism=requested_mechanism(frame, header),
                repeated=held or None,
                error=ADVICE,
            )
        self.close(_SASL)

    def _admit(self, frame: bytes) -> tuple[Expected | None, bytes | None, bytes | None]:
        """What answer `frame` expects (None: none), the frame to send upstream in its place
        (None: `frame` itself), and the answer the proxy gives itself (None: upstream answers;
        else nothing is forwarded). A Produce whose rewriting goes on past its first slice
        sets `_producing` instead: the three are known once it is done.

        Raises:
            ProtocolError: an API or version the proxy does not forward.
        """
        api_key, version = _HEAD.unpack_from(frame)
        highest = served_versions(API_VERSIONS)
        if api_key == API_VERSIONS and highest is not None and version > highest[1]:
            header = read_request_header(frame, 1)
            self.client_id = header.client_id
            expected = Expected(API_VERSIONS, 0, header.correlation_id, unsupported=True)
            return expected, api_versions_v0(frame, header), None
        if not accepts(api_key, version):
            served = served_versions(api_key)
            what = "not served" if served is None else f"served in v{served[0]}-v{served[1]}"
            raise ProtocolError(
                f"{api_name(api_key)} (api key {api_key}) v{version} is not forwarded: {what} "
                "(the proxy forwards what its ApiVersions answer lists)"
            )
        header_version = request_header_version(api_key, version)
        header = read_request_header(frame, header_version)
        self.client_id = header.client_id
        refusal = self.answers.refusal(frame, header)
        if refusal is not None:
            return None, None, refusal
        if api_key == PRODUCE and self.produce is not None:
            rewriting = self.produce.start(frame, header, header_version >= 2)
            outcome = rewriting.run(self.limits.produce_slice)
            if outcome is None:
                self._producing = (rewriting, header, b"")  # `_request` holds the frame
                return None, None, None
            return _produced(outcome, header)
        if api_key == PRODUCE and produce_acks(frame, header, header_version >= 2) == 0:
            return None, None, None  # a broker does not answer acks=0
        return Expected(api_key, version, header.correlation_id), None, None

    def _answer(self, answer: bytes, api_key: int) -> None:
        """Give the client `answer` (a frame of `api_key`) in request order: now if no answer
        is awaited, else right after the latest awaited one."""
        if self._pending:
            self._pending[-1].then.append(answer)
        else:
            self.client.transport.write(answer)
        self.metrics.frame(api_key, RESPONSE, len(answer))

    def client_eof(self) -> None:
        """The client closed its side: once the frames it sent are handled, drain the answers
        under way, or end now if there are none."""
        if self._done.done() or self.client.stops - _NOT_BLOCKING:
            return  # frames still to handle: `_resume_requests` comes back here
        if self.client.data or not self._pending:
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
            end = self._answers(buffer)
        except ProtocolError as exc:
            self._refuse_upstream(exc)
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

    def _refuse_upstream(self, exc: ProtocolError) -> None:
        """Upstream sent what the proxy cannot pass on: the connection ends, as a broker
        speaking out of protocol ends it for its client."""
        log.warning(
            "upstream_response_refused", peer=self.peer, client_id=self.client_id, error=str(exc)
        )
        self.close("upstream_closed")

    def _answers(self, buffer: bytes | bytearray) -> int:
        """Write back the answers of `buffer` while the client takes them; the offset after the
        last byte handled.

        Raises:
            ProtocolError: an answer to no request, or one that does not match its request.
        """
        pos = 0
        pending = self._pending
        while not self.upstream.stops - _NOT_BLOCKING and not self._done.done():
            available = len(buffer) - pos
            if self._streaming is not None:
                if not available:
                    break
                pos = self._stream(buffer, pos, min(available, self._stream_left))
                continue
            if available < PREFIX_BYTES:
                break
            size: int = _INT32.unpack_from(buffer, pos)[0]
            if not pending:
                raise ProtocolError("upstream sent a response to no request")
            if size < PREFIX_BYTES:
                raise ProtocolError(f"upstream sent a response frame of {size} bytes")
            expected = pending[0]
            if not self._whole_next():
                if available < 2 * PREFIX_BYTES:
                    break
                _check_correlation(expected, buffer[pos + PREFIX_BYTES : pos + 2 * PREFIX_BYTES])
                self._streaming, self._stream_left = expected, PREFIX_BYTES + size
                self._stream_size = PREFIX_BYTES + size
                continue
            self.answers.check_size(expected.api_key, size, self.limits.max_frame_bytes)
            end = pos + PREFIX_BYTES + size
            if len(buffer) < end:
                break
            # One copy of the answer, not two (a bytearray's slice, then its bytes).
            self._rewrite(expected, bytes(memoryview(buffer)[pos + PREFIX_BYTES : end]))
            pos = end
        return pos

    def _stream(self, buffer: bytes | bytearray, pos: int, step: int) -> int:
        """Write `step` bytes of the answer being streamed from `pos` of `buffer`; the offset
        after them."""
        whole = pos == 0 and step == len(buffer) and isinstance(buffer, bytes)
        self.client.transport.write(buffer if whole else buffer[pos : pos + step])
        self._stream_left -= step
        if not self._stream_left and self._streaming is not None:
            expected, self._streaming = self._streaming, None
            self._answered(expected, self._stream_size)
        return pos + step

    def _rewrite(self, expected: Expected, frame: bytes) -> None:
        """Rewrite and write the answer `frame` (size prefix excluded) read whole, now or in a
        task (see module).

        Raises:
            ProtocolError: its correlation id is not `expected`'s.
        """
        _check_correlation(expected, frame)
        # The frame's bytes stay held until its answer is written.
        size = PREFIX_BYTES + len(frame)
        moved = min(self.upstream.held, size)
        self.upstream.held -= moved
        self.budget.force(size - moved)
        self._answer_held += size
        api_key, version = expected.api_key, expected.version
        data = self.answers.now(api_key, version, frame, unsupported=expected.unsupported)
        if data is not None:
            self._write_answer(expected, data)
            return
        rewriting = self.answers.later(
            api_key,
            version,
            frame,
            host=self.host,
            client_id=self.client_id,
            free=self._room,
            hold=self._hold,
            client=self.client_host,
        )
        self._rewrite_later(rewriting, expected)

    def _answered(self, expected: Expected, sent: int) -> None:
        """`expected` was answered with `sent` bytes: the local answers queued behind it follow,
        and the client may be read again."""
        self._pending.popleft()
        self.metrics.frame(expected.api_key, RESPONSE, sent)
        for answer in expected.then:
            self.client.transport.write(answer)
        if _IN_FLIGHT in self.client.stops:
            self.client.go(_IN_FLIGHT)
            self._loop.call_soon(self._resume_requests)
        if self._pending:
            return
        if self._sasl is not None:
            self._refuse_sasl()
        elif self._draining is not None:
            self.close(self._drain_reason)

    def _write_answer(self, expected: Expected, data: bytes) -> None:
        """Write the rewritten answer to `expected` and give its bytes back."""
        self.client.transport.write(data)
        self.budget.give(self._answer_held)
        self._answer_held = 0
        self._answered(expected, len(data))

    def _rewrite_later(self, rewriting: Awaitable[bytes], expected: Expected) -> None:
        """Rewrite an answer in a task, upstream not read meanwhile; then go on."""
        self.upstream.stop(_REWRITING)
        self._rewriting = self._loop.create_task(self._finish(rewriting, expected))

    async def _finish(self, rewriting: Awaitable[bytes], expected: Expected) -> None:
        try:
            data = await rewriting
        except ProtocolError as exc:
            self._refuse_upstream(exc)
            return
        except Exception as exc:  # a rewrite that fails ends its connection, not the proxy
            self.failed(exc)
            return
        if self._done.done():
            return
        self._rewriting = None
        self._write_answer(expected, data)
        self.upstream.go(_REWRITING)
        self._resume_responses()

    def _room(self) -> int:
        """Bytes a response being built may still take: what the budget has free, within what
        this connection may hold for its client (`Limits.max_unread_bytes`)."""
        mine = self.limits.max_unread_bytes - self._answer_held - self.client.writing
        return min(self.budget.limit - self.budget.used, mine)

    def _hold(self, size: int) -> None:
        """Take `size` bytes of a response being built from the budget, without waiting (the
        response was sized to what was free; given back once written); a negative `size` gives
        bytes back."""
        self._answer_held += size
        if size < 0:
            self.budget.give(-size)
        else:
            self.budget.force(size)

    def upstream_lost(self) -> None:
        if not self._done.done():
            log.info("upstream_closed", peer=self.peer, client_id=self.client_id)
            self.close("upstream_closed")

    # -- both ------------------------------------------------------------------------------------

    def _account(self, side: Side) -> None:
        """Hold in the budget the bytes `side` has read and not handled, and the next chunk of
        a frame in progress; stop reading `side` while the budget has no room for them."""
        if self._done.done():
            return
        data = side.data
        needed = len(data)
        if needed >= PREFIX_BYTES and (side is self.client or self._whole_next()):
            size: int = _INT32.unpack_from(data)[0]
            arrived = needed - PREFIX_BYTES
            if arrived < size:
                needed = max(needed, min(size, (arrived // CHUNK_BYTES + 1) * CHUNK_BYTES))
        more = needed - side.held
        if more <= 0:
            self.budget.give(-more)
            side.held = needed
            side.go(_BUDGET)
        elif self.budget.take(more):
            side.held = needed
            side.go(_BUDGET)
        else:
            # Bytes already read are held whatever the budget says; no more are read.
            self.budget.force(max(len(data) - side.held, 0))
            side.held = max(side.held, len(data))
            side.stop(_BUDGET)
            self.budget.wait(self._retry)

    def _whole_next(self) -> bool:
        """Whether the next answer from upstream is read whole before it is written."""
        if self._streaming is not None or not self._pending:
            return False
        expected = self._pending[0]
        return self.answers.read_whole(expected.api_key, expected.version)

    @_guarded
    def _retry(self) -> None:
        """Bytes were given back: account again for the sides the budget stopped."""
        for side in (self.client, self.upstream):
            if _BUDGET in side.stops:
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
            self._loop.call_soon(self._resume_responses)
            self._loop.call_soon(self._resume_requests)
        else:
            self.client.go(_PEER_FULL)
            self._loop.call_soon(self._resume_requests)

    @_guarded
    def _resume_requests(self) -> None:
        """Go on with the client's frames read while it was not served."""
        client = self.client
        if self._done.done() or client.stops - _NOT_BLOCKING:
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
    def _resume_responses(self) -> None:
        """Go on with the answers upstream sent while they were not written."""
        if self._done.done() or self.upstream.stops - _NOT_BLOCKING or not self.upstream.data:
            return
        self.responses(b"")


def _produced(
    outcome: Outcome, header: RequestHeader
) -> tuple[Expected | None, bytes | None, bytes | None]:
    """What a rewritten Produce request `outcome` asks of the connection, as `_admit` says."""
    if outcome.answer is not None:
        return None, None, outcome.answer
    if outcome.acks == 0:
        return None, outcome.frame, None  # a broker does not answer acks=0
    return Expected(PRODUCE, header.version, header.correlation_id), outcome.frame, None


def _check_correlation(expected: Expected, frame: bytes | bytearray) -> None:
    if len(frame) < PREFIX_BYTES:
        raise ProtocolError("upstream sent a response frame without a correlation id")
    correlation_id: int = _INT32.unpack_from(frame)[0]
    if correlation_id != expected.correlation_id:
        raise ProtocolError(
            f"upstream answered correlation id {correlation_id} where "
            f"{expected.correlation_id} ({api_name(expected.api_key)}) was next"
        )
