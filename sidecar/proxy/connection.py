"""One client connection piped to its own upstream connection.

Two tasks per connection. The request side reads one frame at a time (its first byte within
`IDLE_TIMEOUT` seconds, the rest within `proxy.read_timeout`; at most `proxy.max_request_bytes`,
taken from the shared budget a chunk at a time as it arrives), reads its header only, refuses
an API or version the proxy does not serve (the connection is closed, as a broker does), notes
what answer to expect and writes the frame upstream unchanged, but for a Produce, which the
`ProduceRewriter` rewrites or refuses: a refused one is answered by the proxy (`_answer`), in
request order, right after the answer awaited before it. The response side reads
upstream's answers, which Kafka sends in request order: each is matched to the oldest request
noted (correlation ids checked), streamed back byte for byte, or, for the responses that name
brokers and ApiVersions, read whole, rewritten and written again (the responses that list
topics without the hidden ones, `topics`); Fetch responses read whole, at most
`proxy.max_fetch_bytes`, and rewritten by `fetch.FetchDecoding` (records decoded, the output
taken from the budget as it grows). A Produce with acks=0 gets no answer from the broker, so
none is noted nor awaited. At most `proxy.max_in_flight` requests
await their answer; the request side waits beyond.

A client's own SaslHandshake or SaslAuthenticate is not forwarded (upstream's connection is
authenticated as the proxy): once the answers under way are written, it is refused here
(`client_sasl`) and the connection closed.

When the client closes its side, the answers under way are still written (at most
`DRAIN_TIMEOUT` seconds). Anything else that ends one side ends both, with one log line.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

from kio.schema.errors import ErrorCode

from sidecar.errors import ProtocolError
from sidecar.logs import get_logger
from sidecar.proxy.addresses import (
    Address,
    encode_response,
    is_parsed,
    names_no_broker,
    parse_response,
    rewrite,
    upstream_nodes,
)
from sidecar.proxy.budget import Budget
from sidecar.proxy.client_sasl import (
    ADVICE,
    CLIENT_SASL_APIS,
    REFUSAL_LOG,
    read_header,
    requested_mechanism,
)
from sidecar.proxy.client_sasl import answer as sasl_refusal
from sidecar.proxy.fetch import FetchDecoding
from sidecar.proxy.frames import (
    PREFIX_BYTES,
    api_versions_v0,
    frame_size,
    produce_acks,
    read_request_header,
)
from sidecar.proxy.metrics import REQUEST, RESPONSE, ForwardMetrics
from sidecar.proxy.produce import ProduceRewriter
from sidecar.proxy.topics import LISTING, TopicView
from sidecar.proxy.versions import (
    API_VERSIONS,
    FETCH,
    PRODUCE,
    accepts,
    api_name,
    filter_api_versions,
    request_header_version,
    served_versions,
)

log = get_logger(__name__)

#: Bytes read at a time, and taken from the budget at a time.
CHUNK_BYTES: Final = 64 * 1024
#: Seconds a connection may stay without a request: a broker's `connections.max.idle.ms`.
IDLE_TIMEOUT: Final = 600.0
#: Seconds the answers under way may take to reach a client that closed its side.
DRAIN_TIMEOUT: Final = 30.0
_HEAD: Final = struct.Struct(">hh")
_INT32: Final = struct.Struct(">i")
_ERROR_CODE: Final = struct.Struct(">h")
#: What the request side returns when the client sent nothing for `IDLE_TIMEOUT` seconds.
_IDLE: Final = "idle"
#: What the request side returns once it refused a client's own SASL request.
_CLIENT_SASL: Final = "client_sasl"

#: Upstream nodes a response names -> their local addresses (None: no listener), for a client
#: that reached the proxy at the given host.
Locate = Callable[[Mapping[int, Address], str], Awaitable[dict[int, Address | None]]]
Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


@dataclass(frozen=True, slots=True)
class Limits:
    """The bounds of one connection (see module)."""

    max_frame_bytes: int
    max_in_flight: int
    read_timeout: float


@dataclass(frozen=True, slots=True)
class Expected:
    """A request forwarded whose answer is awaited."""

    api_key: int
    version: int
    correlation_id: int
    #: An ApiVersions above the proxy's versions, forwarded as v0: answered UNSUPPORTED_VERSION.
    unsupported: bool = False
    #: Answers the proxy gives itself to the requests that came after this one (refused at
    #: the door), written right after this one's answer.
    then: list[bytes] = field(default_factory=list)


class Connection:
    """One client connection and its upstream connection (see module)."""

    def __init__(
        self,
        client: Streams,
        upstream: Streams,
        *,
        limits: Limits,
        budget: Budget,
        metrics: ForwardMetrics,
        locate: Locate,
        produce: ProduceRewriter | None = None,
        fetch: FetchDecoding | None = None,
        topics: TopicView | None = None,
    ) -> None:
        """`produce`: rewrites Produce requests (None: they are forwarded as they came)."""
        self.client_reader, self.client_writer = client
        self.upstream_reader, self.upstream_writer = upstream
        self.limits = limits
        self.budget = budget
        self.metrics = metrics
        self.locate = locate
        self.produce = produce
        self.fetch = fetch
        self.topics = topics
        self.peer = str(self.client_writer.get_extra_info("peername"))
        # Clients are told to come back to the host they reached the proxy at.
        self.host = str(self.client_writer.get_extra_info("sockname")[0])
        self.client_id: str | None = None
        self._expected: asyncio.Queue[Expected] = asyncio.Queue(limits.max_in_flight)
        self._held = {REQUEST: 0, RESPONSE: 0}
        #: Answers awaited and not yet written, and the latest of them (local answers queue
        #: behind it to keep request order).
        self._unanswered = 0
        self._last: Expected | None = None

    async def serve(self) -> str | None:
        """Forward until either side ends; the reason the proxy closed it (None: the client
        or upstream closed it in order)."""
        reading = asyncio.create_task(self._requests())
        answering = asyncio.create_task(self._responses())
        try:
            done, _ = await asyncio.wait({reading, answering}, return_when=asyncio.FIRST_COMPLETED)
            if (
                reading in done
                and not reading.cancelled()
                and reading.exception() is None
                and reading.result() is None
            ):
                draining = asyncio.create_task(self._expected.join())
                await asyncio.wait({draining, answering}, timeout=DRAIN_TIMEOUT)
                draining.cancel()
        finally:
            for task in (reading, answering):
                task.cancel()
            request_end, response_end = await asyncio.gather(
                reading, answering, return_exceptions=True
            )
            for side in (REQUEST, RESPONSE):
                await self.budget.give(self._held[side])
                self._held[side] = 0
            for writer in (self.client_writer, self.upstream_writer):
                writer.close()
                with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                    await writer.wait_closed()
        return self._report(request_end, response_end)

    def _report(
        self, request_end: BaseException | str | None, response_end: BaseException | None
    ) -> str | None:
        if isinstance(request_end, ProtocolError):
            log.warning(
                "request_refused", peer=self.peer, client_id=self.client_id, error=str(request_end)
            )
            return "refused"
        if request_end in (_IDLE, _CLIENT_SASL):
            return str(request_end)
        if isinstance(request_end, TimeoutError):
            log.warning(
                "request_timed_out",
                peer=self.peer,
                client_id=self.client_id,
                error=f"a request frame did not arrive within {self.limits.read_timeout:g} s "
                "(ZDICT_PROXY__READ_TIMEOUT)",
            )
            return "timeout"
        if isinstance(response_end, ProtocolError):
            log.warning(
                "upstream_response_refused",
                peer=self.peer,
                client_id=self.client_id,
                error=str(response_end),
            )
            return "upstream_closed"
        if isinstance(response_end, (ConnectionError, asyncio.IncompleteReadError)):
            log.info("upstream_closed", peer=self.peer, client_id=self.client_id)
            return "upstream_closed"
        return None

    # -- client -> upstream --------------------------------------------------------------------

    async def _requests(self) -> str | None:
        """Forward requests until the client closes its side (None) or stays idle (`_IDLE`)."""
        reader = self.client_reader
        while True:
            try:
                async with asyncio.timeout(IDLE_TIMEOUT):
                    first = await reader.readexactly(1)
            except TimeoutError:
                return _IDLE
            except asyncio.IncompleteReadError:
                return None  # the client closed its side between two requests
            async with asyncio.timeout(self.limits.read_timeout):
                prefix = first + await reader.readexactly(PREFIX_BYTES - 1)
                size = frame_size(prefix, self.limits.max_frame_bytes)
                frame = await self._read(reader, size, REQUEST)
            if _HEAD.unpack_from(frame)[0] in CLIENT_SASL_APIS:
                await self._refuse_sasl(frame)
                return _CLIENT_SASL
            expected, replaced, answer = self._admit(frame)
            if answer is not None:
                await self._answer(answer)
            else:
                if expected is not None:
                    await self._expected.put(expected)
                    self._unanswered += 1
                    self._last = expected
                if replaced is None:
                    self.upstream_writer.write(prefix)
                    self.upstream_writer.write(frame)
                else:
                    self.upstream_writer.write(replaced)
                await self.upstream_writer.drain()
            self.metrics.frame(_HEAD.unpack_from(frame)[0], REQUEST, PREFIX_BYTES + size)
            del frame, replaced
            await self._release(REQUEST)

    async def _refuse_sasl(self, frame: bytes) -> None:
        """Answer a client's own SASL request locally (`client_sasl`), after the answers under
        way: responses go in request order."""
        header = read_header(frame)
        await self._expected.join()
        self.client_writer.write(sasl_refusal(header))
        await self.client_writer.drain()
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

    def _admit(self, frame: bytes) -> tuple[Expected | None, bytes | None, bytes | None]:
        """What answer `frame` expects (None: none), the frame to send upstream in its place
        (None: `frame` itself), and the answer the proxy gives itself (None: upstream answers;
        else nothing is forwarded).

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
        replaced: bytes | None = None
        acks = -1
        if api_key == PRODUCE and self.produce is not None:
            outcome = self.produce.rewrite(frame, header, header_version >= 2)
            if outcome.answer is not None:
                return None, None, outcome.answer
            replaced, acks = outcome.frame, outcome.acks
        elif api_key == PRODUCE:
            acks = produce_acks(frame, header, header_version >= 2)
        if api_key == PRODUCE and acks == 0:
            return None, replaced, None  # a broker does not answer acks=0
        return Expected(api_key, version, header.correlation_id), replaced, None

    async def _answer(self, answer: bytes) -> None:
        """Give the client `answer` (a frame) in request order: now if no answer is awaited,
        else right after the latest awaited one."""
        if self._unanswered and self._last is not None:
            self._last.then.append(answer)
        else:
            self.client_writer.write(answer)
            await self.client_writer.drain()
        self.metrics.frame(PRODUCE, RESPONSE, len(answer))

    # -- upstream -> client --------------------------------------------------------------------

    async def _responses(self) -> None:
        reader, writer = self.upstream_reader, self.client_writer
        while True:
            prefix = await reader.readexactly(PREFIX_BYTES)
            size: int = _INT32.unpack(prefix)[0]
            if self._expected.empty():
                raise ProtocolError("upstream sent a response to no request")
            expected = self._expected.get_nowait()
            if size < PREFIX_BYTES:
                raise ProtocolError(f"upstream sent a response frame of {size} bytes")
            fetch = expected.api_key == FETCH and self.fetch is not None
            if fetch or is_parsed(expected.api_key, expected.version):
                if fetch and self.fetch is not None and size > self.fetch.max_bytes:
                    raise ProtocolError(
                        f"upstream's Fetch response of {size} bytes is above "
                        f"ZDICT_PROXY__MAX_FETCH_BYTES ({self.fetch.max_bytes}): the client's "
                        "fetch.max.bytes must stay below it"
                    )
                if not fetch and size > self.limits.max_frame_bytes:
                    raise ProtocolError(
                        f"upstream's {api_name(expected.api_key)} response of {size} bytes is "
                        f"above ZDICT_PROXY__MAX_REQUEST_BYTES ({self.limits.max_frame_bytes})"
                    )
                frame = await self._read(reader, size, RESPONSE)
                _check_correlation(expected, frame)
                if fetch:
                    data = await self._fetched(expected, frame)
                else:
                    data = await self._rewritten(expected, frame)
                del frame
                writer.write(data)
                await writer.drain()
                await self._release(RESPONSE)
                sent = len(data)
            else:
                sent = await self._stream(expected, prefix, size)
            self.metrics.frame(expected.api_key, RESPONSE, sent)
            self._answered(expected)
            self._expected.task_done()

    def _answered(self, expected: Expected) -> None:
        """`expected` was answered: the local answers queued behind it follow."""
        for answer in expected.then:
            self.client_writer.write(answer)
        self._unanswered -= 1

    async def _stream(self, expected: Expected, prefix: bytes, size: int) -> int:
        """Copy a response of `size` bytes to the client a chunk at a time; bytes sent."""
        reader, writer = self.upstream_reader, self.client_writer
        head = await reader.readexactly(PREFIX_BYTES)
        _check_correlation(expected, head)
        writer.write(prefix + head)
        remaining = size - PREFIX_BYTES
        while remaining:
            chunk = await reader.read(min(CHUNK_BYTES, remaining))
            if not chunk:
                raise asyncio.IncompleteReadError(b"", remaining)
            remaining -= len(chunk)
            writer.write(chunk)
            await writer.drain()
        await writer.drain()
        return PREFIX_BYTES + size

    async def _rewritten(self, expected: Expected, frame: bytes) -> bytes:
        """The response frame to send for upstream's `frame` (see module)."""
        api_key = expected.api_key
        if names_no_broker(api_key, expected.version, frame):
            return _INT32.pack(len(frame)) + frame
        self.metrics.rewritten(api_key)
        if api_key == API_VERSIONS:
            # Above upstream's versions, upstream answers in v0 (KIP-511); so does the proxy.
            refused = (
                _ERROR_CODE.unpack_from(frame, PREFIX_BYTES)[0] == ErrorCode.unsupported_version
            )
            unsupported = expected.unsupported or refused
            correlation_id, body = parse_response(
                api_key, 0 if unsupported else expected.version, frame
            )
            return encode_response(correlation_id, filter_api_versions(body, unsupported))
        correlation_id, body = parse_response(api_key, expected.version, frame)
        if self.topics is not None and api_key in LISTING:
            body = self.topics.filter(api_key, body)
        local = await self.locate(upstream_nodes(api_key, body), self.host)
        return encode_response(correlation_id, rewrite(api_key, body, local))

    async def _fetched(self, expected: Expected, frame: bytes) -> bytes:
        """The Fetch response frame to send for upstream's `frame` (see `fetch`)."""
        assert self.fetch is not None
        self.metrics.rewritten(FETCH)
        return await self.fetch.rewrite(
            expected.version,
            frame,
            client_id=self.client_id,
            free=lambda: self.budget.limit - self.budget.used,
            hold=self._hold,
            locate=lambda nodes: self.locate(nodes, self.host),
        )

    def _hold(self, size: int) -> None:
        """Take `size` bytes of a response being built from the budget, without waiting (the
        response was sized to what was free; given back once written)."""
        self.budget.force(size)
        self._held[RESPONSE] += size

    # -- both ------------------------------------------------------------------------------------

    async def _read(self, reader: asyncio.StreamReader, size: int, side: str) -> bytes:
        """`size` bytes, the budget taken a chunk at a time before the chunk is read."""
        chunks = []
        remaining = size
        while remaining:
            step = min(CHUNK_BYTES, remaining)
            await self.budget.take(step)
            self._held[side] += step
            chunks.append(await reader.readexactly(step))
            remaining -= step
        return b"".join(chunks)

    async def _release(self, side: str) -> None:
        held, self._held[side] = self._held[side], 0
        await self.budget.give(held)


def _check_correlation(expected: Expected, frame: bytes) -> None:
    if len(frame) < PREFIX_BYTES:
        raise ProtocolError("upstream sent a response frame without a correlation id")
    correlation_id: int = _INT32.unpack_from(frame)[0]
    if correlation_id != expected.correlation_id:
        raise ProtocolError(
            f"upstream answered correlation id {correlation_id} where "
            f"{expected.correlation_id} ({api_name(expected.api_key)}) was next"
        )
