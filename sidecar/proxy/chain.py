"""The proxy's filters in order, and one connection's chain of them.

`Filters` is made once at start from the settings (`filters.proxy_filters`): the request
filters and the response filters in the order they run, each keyed by the API keys and version
ranges it handles (`filter.Keys`), and which filters each API key and version meets, worked
out once per key. `FilterChain` is one connection's: a request frame is given to the filters
of its API and version in turn until one decides (`filter.Action`); none deciding, it is
forwarded as it came, its answer awaited. A response of an API and version some response filter
handles is read whole, given to them in turn and written again; the others stream byte for
byte (the connection's part).
"""

from __future__ import annotations

import struct
from collections.abc import Awaitable, Sequence
from typing import Final

from sidecar.errors import ProtocolError
from sidecar.proxy.filter import (
    ANY_VERSION,
    Action,
    Context,
    Expected,
    Forward,
    Request,
    RequestFilter,
    Response,
    ResponseFilter,
)
from sidecar.proxy.metrics import ForwardMetrics
from sidecar.proxy.versions import api_name

_HEAD: Final = struct.Struct(">hh")
#: A request filter met by every version of an API: (filter, lowest, highest version).
_Met = tuple[RequestFilter, int, int]


class Filters:
    """The proxy's filters and which of them each API and version meets (see module)."""

    def __init__(
        self,
        requests: Sequence[RequestFilter],
        responses: Sequence[ResponseFilter],
        *,
        metrics: ForwardMetrics,
        max_frame_bytes: int,
    ) -> None:
        """`requests`, `responses`: the filters in the order they run; `max_frame_bytes`
        (`proxy.max_request_bytes`): the largest response read whole but where a response
        filter bounds it."""
        self.requests = tuple(requests)
        self.responses = tuple(responses)
        self.metrics = metrics
        self.max_frame_bytes = max_frame_bytes
        self._request_filters: dict[int, tuple[_Met, ...]] = {}
        self._response_filters: dict[tuple[int, int], tuple[ResponseFilter, ...]] = {}

    def chain(self) -> FilterChain:
        """A new connection's chain."""
        return FilterChain(self)

    def of_request(self, api_key: int) -> tuple[_Met, ...]:
        """The request filters an API meets, in order, with the versions each handles."""
        met = self._request_filters.get(api_key)
        if met is None:
            found: list[_Met] = []
            for each in self.requests:
                keys = each.request_keys
                if keys is None:  # every version an int16 can say, unserved ones included
                    found.append((each, -0x8000, ANY_VERSION))
                elif api_key in keys:
                    found.append((each, *keys[api_key]))
            met = self._request_filters[api_key] = tuple(found)
        return met

    def of_response(self, api_key: int, version: int) -> tuple[ResponseFilter, ...]:
        """The response filters an API version meets, in order (none: it is streamed)."""
        met = self._response_filters.get((api_key, version))
        if met is None:
            found = []
            for each in self.responses:
                versions = each.response_keys.get(api_key)
                if versions is not None and versions[0] <= version <= versions[1]:
                    found.append(each)
            met = self._response_filters[(api_key, version)] = tuple(found)
        return met


class FilterChain:
    """One connection's filters (see module)."""

    __slots__ = ("client_id", "filters")

    def __init__(self, filters: Filters) -> None:
        self.filters = filters
        #: The client id of the latest request whose header was read.
        self.client_id: str | None = None

    def request(self, frame: bytes, context: Context) -> Action:
        """What becomes of the request `frame` (size prefix excluded).

        Raises:
            ProtocolError: the request does not parse.
        """
        api_key, version = _HEAD.unpack_from(frame)
        request = Request(frame, api_key, version)
        for each, low, high in self.filters.of_request(api_key):
            if low <= version <= high:
                action = each.on_request(request, context)
                if action is not None:
                    self._read(request)
                    return action
        expected = request.expected()
        self.client_id = request.header.client_id
        return Forward(expected)

    def _read(self, request: Request) -> None:
        header = request.header_read
        if header is not None:
            self.client_id = header.client_id

    def read_whole(self, api_key: int, version: int) -> bool:
        """Whether the answer of `api_key` in `version` is read whole (some filter handles it)
        rather than streamed."""
        return bool(self.filters.of_response(api_key, version))

    def check_size(self, expected: Expected, size: int) -> None:
        """Refuse an answer of `size` bytes to be read whole above its bound.

        Raises:
            ProtocolError: above the bound of a filter of its API, or `max_frame_bytes`.
        """
        for each in self.filters.of_response(expected.api_key, expected.version):
            if each.check_size(expected.api_key, size):
                return
        if size > self.filters.max_frame_bytes:
            raise ProtocolError(
                f"upstream's {api_name(expected.api_key)} response of {size} bytes is "
                f"above ZDICT_PROXY__MAX_REQUEST_BYTES ({self.filters.max_frame_bytes})"
            )

    def response(
        self, expected: Expected, frame: bytes, context: Context
    ) -> bytes | Awaitable[bytes]:
        """The frame (size prefix included) to send for the answer `frame` (size prefix
        excluded) to `expected`, now or once its filters are done waiting.

        Raises:
            ProtocolError: the answer does not parse.
        """
        response = Response(expected, frame)
        met = self.filters.of_response(expected.api_key, expected.version)
        for at, each in enumerate(met):
            if response.output is not None:
                break
            waiting = each.on_response(response, context)
            if waiting is not None:
                return self._finish(waiting, met[at + 1 :], response, context)
        return self._written(response)

    async def _finish(
        self,
        waiting: Awaitable[None],
        rest: tuple[ResponseFilter, ...],
        response: Response,
        context: Context,
    ) -> bytes:
        await waiting
        for each in rest:
            if response.output is not None:
                break
            more = each.on_response(response, context)
            if more is not None:
                await more
        return self._written(response)

    def _written(self, response: Response) -> bytes:
        if response.changed or response.output is not None:
            self.filters.metrics.rewritten(response.api_key)
        return response.encoded()
