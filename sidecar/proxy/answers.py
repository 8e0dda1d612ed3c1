"""What a client is sent for each answer upstream gives (`Answers`), one for every connection of
the proxy: a `connection.Connection` moves the bytes and keeps the order, this decides what
they are.

Read whole and rewritten: the answers that name brokers (their addresses replaced by the proxy's
listeners, `addresses`; the topics hidden from clients left out of the listings, `topics`),
ApiVersions (limited to what the proxy serves, `versions.filter_api_versions`), the answers that
can name protected topics (left out, `hiding`) and, when the proxy decodes them, Fetch answers
(`fetch.FetchDecoding`). A Produce answer is read whole too, and passed as it came unless a
leader moved (`addresses.names_no_broker`). Every other answer is streamed back byte for byte.

An answer that needs no listener located is made at once (`now`); the others wait for a
listener to start or for records to be decoded (`later`). A request the proxy does not forward
(`access.RequestAccess`) is answered by the proxy itself (`refusal`).
"""

from __future__ import annotations

import struct
from collections.abc import Awaitable, Callable, Mapping
from typing import Final

from kio.schema.errors import ErrorCode

from sidecar.errors import ProtocolError
from sidecar.proxy.access import RequestAccess
from sidecar.proxy.addresses import (
    Address,
    encode_response,
    is_parsed,
    names_no_broker,
    parse_response,
    rewrite,
    upstream_nodes,
)
from sidecar.proxy.fetch import FetchDecoding
from sidecar.proxy.frames import PREFIX_BYTES, RequestHeader
from sidecar.proxy.hiding import ResponseHiding, hides
from sidecar.proxy.metrics import ForwardMetrics
from sidecar.proxy.topics import LISTING, TopicView
from sidecar.proxy.versions import API_VERSIONS, FETCH, api_name, filter_api_versions

#: Upstream nodes a response names -> their local addresses (None: no listener), for a client
#: that reached the proxy at the given host.
Locate = Callable[[Mapping[int, Address], str], Awaitable[dict[int, Address | None]]]
_INT32: Final = struct.Struct(">i")
_ERROR_CODE: Final = struct.Struct(">h")


class Answers:
    """The frames clients are sent for upstream's answers (see module)."""

    def __init__(
        self,
        metrics: ForwardMetrics,
        locate: Locate,
        *,
        fetch: FetchDecoding | None = None,
        topics: TopicView | None = None,
        access: RequestAccess | None = None,
    ) -> None:
        """`locate`: the local listener of each upstream node an answer names; `fetch`: decodes
        Fetch answers (None: they are streamed as they came); `topics`: filters listings (None:
        as they came); `access`: refuses requests (None: every request served is forwarded)."""
        self.metrics = metrics
        self.locate = locate
        self.fetch = fetch
        self.topics = topics
        self.access = access
        self._refused_apis = frozenset() if access is None else access.refused_apis
        self._hiding = None
        if topics is not None and not topics.show_internal:
            self._hiding = ResponseHiding(topics)

    def refusal(self, frame: bytes, header: RequestHeader) -> bytes | None:
        """The proxy's own answer to the request `frame` (size prefix excluded; its header
        `header`) when it is not forwarded; None: forward it.

        Raises:
            ProtocolError: the request does not parse.
        """
        return None if self.access is None else self.access.refusal(frame, header)

    def read_whole(self, api_key: int, version: int) -> bool:
        """Whether an answer of `api_key` in `version` is read whole (and may be rewritten)
        rather than streamed."""
        return (
            (api_key == FETCH and self.fetch is not None)
            or is_parsed(api_key, version)
            or (self._hiding is not None and hides(api_key, version))
        )

    def check_size(self, api_key: int, size: int, max_frame_bytes: int) -> None:
        """Refuse an answer of `size` bytes read whole above its bound.

        Raises:
            ProtocolError: `size` is above `proxy.max_fetch_bytes` (a Fetch decoded) or
                `max_frame_bytes` (`proxy.max_request_bytes`, the others).
        """
        if api_key == FETCH and self.fetch is not None:
            if size > self.fetch.max_bytes:
                raise ProtocolError(
                    f"upstream's Fetch response of {size} bytes is above "
                    f"ZDICT_PROXY__MAX_FETCH_BYTES ({self.fetch.max_bytes}): the client's "
                    "fetch.max.bytes must stay below it"
                )
        elif size > max_frame_bytes:
            raise ProtocolError(
                f"upstream's {api_name(api_key)} response of {size} bytes is "
                f"above ZDICT_PROXY__MAX_REQUEST_BYTES ({max_frame_bytes})"
            )

    def now(self, api_key: int, version: int, frame: bytes, *, unsupported: bool) -> bytes | None:
        """The frame (size prefix included) to send for upstream's answer `frame` (size prefix
        excluded) to a request of `api_key` in `version`, if it needs no listener located and
        no record decoded (None: `later` makes it). `unsupported`: an ApiVersions above the
        proxy's versions, forwarded as v0."""
        if api_key == FETCH and self.fetch is not None:
            return None
        if names_no_broker(api_key, version, frame):
            return _INT32.pack(len(frame)) + frame
        if self._hiding is not None and hides(api_key, version):
            return self._hidden(api_key, version, frame, self._hiding)
        if api_key != API_VERSIONS:
            return None
        self.metrics.rewritten(api_key)
        # Above upstream's versions, upstream answers in v0 (KIP-511); so does the proxy.
        refused = _ERROR_CODE.unpack_from(frame, PREFIX_BYTES)[0] == ErrorCode.unsupported_version
        unsupported = unsupported or refused
        correlation_id, body = parse_response(api_key, 0 if unsupported else version, frame)
        return encode_response(
            correlation_id, filter_api_versions(body, unsupported, self._refused_apis)
        )

    def _hidden(self, api_key: int, version: int, frame: bytes, hiding: ResponseHiding) -> bytes:
        """The frame to send for upstream's answer `frame`, which may name protected topics."""
        correlation_id, body = parse_response(api_key, version, frame)
        hidden = hiding.hide(api_key, body)
        if hidden is None:
            return _INT32.pack(len(frame)) + frame
        self.metrics.rewritten(api_key)
        return encode_response(correlation_id, hidden)

    def later(
        self,
        api_key: int,
        version: int,
        frame: bytes,
        *,
        host: str,
        client_id: str | None,
        free: Callable[[], int],
        hold: Callable[[int], None],
        client: str = "",
    ) -> Awaitable[bytes]:
        """The frame to send for an answer `now` did not make, for a client at address
        `client` that reached the proxy at `host`. A Fetch answer decoded takes its output from
        the connection's budget as it grows: `free()` is what the budget has left, `hold(n)`
        takes `n` bytes of it."""
        if api_key == FETCH and self.fetch is not None:
            self.metrics.rewritten(FETCH)
            return self.fetch.rewrite(
                version,
                frame,
                client_id=client_id,
                free=free,
                hold=hold,
                locate=lambda nodes: self.locate(nodes, host),
                client=client,
            )
        return self._rewritten(api_key, version, frame, host)

    async def _rewritten(self, api_key: int, version: int, frame: bytes, host: str) -> bytes:
        """The frame to send for upstream's answer `frame`, which names brokers."""
        self.metrics.rewritten(api_key)
        correlation_id, body = parse_response(api_key, version, frame)
        if self.topics is not None and api_key in LISTING:
            body = self.topics.filter(api_key, body)
        local = await self.locate(upstream_nodes(api_key, body), host)
        return encode_response(correlation_id, rewrite(api_key, body, local))
