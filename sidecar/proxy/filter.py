"""What a filter of the proxy sees and returns: the wire layer between the connection, which
moves bytes and knows no API, and the filters, each keyed by the API keys and version ranges it
handles (`chain.FilterChain` runs them).

A request filter is given a `Request` (its frame, API key and version, its header read once
asked for) and returns what becomes of it: `Forward` (the frame, or one in its place, with the
answer it awaits: `Expected`, None for none), `Answer` (the proxy's own answer, in request
order; with `close`, the connection ends once it is written), `Close` (the request is refused:
nothing more is read, the connection ends once the answers due before it are written) or
`Later` (a rewriting that goes on a slice at a time, the client not read meanwhile), or None
to leave it to the next filter. A response filter is given a `Response` read whole (its frame,
its kio body parsed once asked for) and changes it in place, now or in an awaitable (a listener
to start, records to decode); the chain writes the result.
"""

from __future__ import annotations

import struct
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from sidecar.errors import ProtocolError
from sidecar.proxy.frames import PREFIX_BYTES, RequestHeader, read_request_header
from sidecar.proxy.responses import encode_response, parse_response
from sidecar.proxy.versions import api_name, request_header_version

#: API key -> the lowest and highest version a filter handles.
Keys = Mapping[int, tuple[int, int]]
#: The highest version a filter keyed "from version N on" names (any version kio knows).
ANY_VERSION: Final = 0x7FFF
_INT32: Final = struct.Struct(">i")


@dataclass(frozen=True, slots=True, init=False)
class Expected:
    """A request forwarded whose answer is awaited."""

    api_key: int
    #: The version its answer is read in.
    version: int
    correlation_id: int
    #: A request filter's mark for the response filters (ApiVersions: the client asked above
    #: the proxy's versions, and the request went upstream as v0).
    marked: bool
    #: Answers the proxy gives itself to the requests that came after this one (refused at
    #: the door), written right after this one's answer.
    then: list[bytes]

    # init=False: made per request, so its __init__ is written here and compiled (see
    # deploy/build_backend.py); the one dataclasses generates would run interpreted.
    def __init__(
        self, api_key: int, version: int, correlation_id: int, *, marked: bool = False
    ) -> None:
        object.__setattr__(self, "api_key", api_key)
        object.__setattr__(self, "version", version)
        object.__setattr__(self, "correlation_id", correlation_id)
        object.__setattr__(self, "marked", marked)
        object.__setattr__(self, "then", [])


def check_correlation(expected: Expected, frame: bytes | bytearray) -> None:
    """Check that the response `frame` (size prefix excluded; at least its correlation id)
    answers `expected`.

    Raises:
        ProtocolError: it does not.
    """
    if len(frame) < PREFIX_BYTES:
        raise ProtocolError("upstream sent a response frame without a correlation id")
    correlation_id: int = _INT32.unpack_from(frame)[0]
    if correlation_id != expected.correlation_id:
        raise ProtocolError(
            f"upstream answered correlation id {correlation_id} where "
            f"{expected.correlation_id} ({api_name(expected.api_key)}) was next"
        )


class Request:
    """One request frame (size prefix excluded) going through the filters."""

    __slots__ = ("_header", "api_key", "frame", "version")

    def __init__(self, frame: bytes, api_key: int, version: int) -> None:
        self.frame = frame
        self.api_key = api_key
        self.version = version
        self._header: RequestHeader | None = None

    @property
    def header(self) -> RequestHeader:
        """Its header, read in the header version of a served API version.

        Raises:
            ProtocolError: the frame ends inside its header.
        """
        if self._header is None:
            header_version = request_header_version(self.api_key, self.version)
            self._header = read_request_header(self.frame, header_version)
        return self._header

    def read_header_as(self, header_version: int) -> RequestHeader:
        """Its header read in `header_version` (an API's own reading of it).

        Raises:
            ProtocolError: the frame ends inside its header.
        """
        self._header = read_request_header(self.frame, header_version)
        return self._header

    @property
    def header_read(self) -> RequestHeader | None:
        """Its header if a filter read it (None: none did)."""
        return self._header

    def expected(self) -> Expected:
        """The answer it awaits when forwarded as it came."""
        return Expected(self.api_key, self.version, self.header.correlation_id)


class Response:
    """One response frame read whole (size prefix excluded) going through the filters."""

    __slots__ = (
        "_body",
        "_correlation_id",
        "api_key",
        "changed",
        "frame",
        "marked",
        "output",
        "version",
    )

    def __init__(self, expected: Expected, frame: bytes) -> None:
        self.api_key = expected.api_key
        self.version = expected.version
        self.marked = expected.marked
        self.frame = frame
        self._body: Any = None
        self._correlation_id = 0
        #: A filter changed the body: it is written again.
        self.changed = False
        #: The frame to send (size prefix included), when a filter made it whole: the filters
        #: after it are not run.
        self.output: bytes | None = None

    def body(self, version: int | None = None) -> Any:
        """Its kio body, parsed once (in `version`, else the request's).

        Raises:
            ProtocolError: the frame does not parse as that response.
        """
        if self._body is None:
            read = self.version if version is None else version
            self._correlation_id, self._body = parse_response(self.api_key, read, self.frame)
        return self._body

    def replace(self, body: Any) -> None:
        """Send `body` in place of what upstream sent."""
        self._body = body
        self.changed = True

    def encoded(self) -> bytes:
        """The frame to send (size prefix included)."""
        if self.output is not None:
            return self.output
        if self.changed:
            return encode_response(self._correlation_id, self._body)
        return len(self.frame).to_bytes(PREFIX_BYTES, "big") + self.frame


class Forward:
    """Send `frame` upstream (None: the request as it came), awaiting `expected` (None: no
    answer comes, a Produce with acks=0)."""

    __slots__ = ("expected", "frame")

    def __init__(self, expected: Expected | None, frame: bytes | None = None) -> None:
        self.expected = expected
        #: Size prefix included.
        self.frame = frame


class Answer:
    """Give the client `frame` (size prefix included) in request order, nothing forwarded;
    with `close`, end the connection with that reason once it is written."""

    __slots__ = ("close", "frame")

    def __init__(self, frame: bytes, close: str | None = None) -> None:
        self.frame = frame
        self.close = close


class Close:
    """Refuse the request: nothing more is read from the client, and the connection ends
    once the answers due before it are written (as a broker, which answers a connection's
    requests one at a time, has written them). `error` says why (the log line's)."""

    __slots__ = ("error",)

    def __init__(self, error: str) -> None:
        self.error = error


class Steps(Protocol):
    """A request's rewriting, run a slice at a time."""

    def run(self) -> Forward | Answer | None:
        """Rewrite on for a slice; what becomes of the request once done (None: more to do).

        Raises:
            ProtocolError: the request is refused (as `Close`).
        """
        ...


class Later:
    """The request is rewritten a slice at a time (`steps`), other connections served
    between two; the client is not read meanwhile."""

    __slots__ = ("steps",)

    def __init__(self, steps: Steps) -> None:
        self.steps = steps


#: What a request filter returns.
Action = Forward | Answer | Close | Later


class Context(Protocol):
    """What a filter knows of its connection."""

    #: The client's address (log lines name it).
    peer: str
    #: The host the client reached the proxy at (clients are told to come back to it).
    host: str
    #: The client's address without its port.
    client_host: str

    @property
    def client_id(self) -> str | None:
        """The client id of the latest request."""
        ...

    def room(self) -> int:
        """Bytes a response being built may still take from the connection's budget."""
        ...

    def hold(self, size: int) -> None:
        """Take `size` bytes of a response being built from the budget (a negative `size`
        gives bytes back); the rest is given back once the response is written."""
        ...


class RequestFilter(Protocol):
    """A filter of requests: `keys` says which it is given (None: every request)."""

    @property
    def request_keys(self) -> Keys | None: ...

    def on_request(self, request: Request, context: Context) -> Action | None:
        """What becomes of `request` (None: the next filter decides; the last forwards it).

        Raises:
            ProtocolError: the request does not parse (the connection is closed).
        """
        ...


class ResponseFilter(Protocol):
    """A filter of responses: the responses of `response_keys` are read whole and given to it."""

    @property
    def response_keys(self) -> Keys: ...

    def on_response(self, response: Response, context: Context) -> Awaitable[None] | None:
        """Change `response` in place, now (None) or in the awaitable returned.

        Raises:
            ProtocolError: the response does not parse (the connection is closed).
        """
        ...

    def check_size(self, api_key: int, size: int) -> bool:
        """Whether it bounds the size of the responses of `api_key` it reads whole (else the
        connection's bound does).

        Raises:
            ProtocolError: `size` is above its bound.
        """
        ...
