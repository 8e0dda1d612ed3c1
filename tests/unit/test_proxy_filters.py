"""The filter chain (`sidecar.proxy.chain`): each filter meets the API versions it is keyed to,
in order, the first to decide ends the chain, and a response read whole goes through the
response filters of its API version, now or once one has waited; the proxy's own filters in
their order (`sidecar.proxy.filters`)."""

from __future__ import annotations

import asyncio
import dataclasses
import struct
from collections.abc import Awaitable, Mapping
from typing import Any

import pytest
from kio.index import load_request_schema, load_response_schema
from prometheus_client import CollectorRegistry

from sidecar.config import ProxySettings
from sidecar.errors import ProtocolError
from sidecar.proxy.addresses import Address
from sidecar.proxy.chain import FilterChain, Filters
from sidecar.proxy.filter import (
    Answer,
    Close,
    Context,
    Expected,
    Forward,
    Keys,
    Request,
    Response,
)
from sidecar.proxy.filters import proxy_filters
from sidecar.proxy.filters.api_versions import ServedVersions
from sidecar.proxy.filters.produce import ProduceFilter
from sidecar.proxy.metrics import ForwardMetrics
from sidecar.proxy.produce_request import FIRST_VERSION, LAST_VERSION
from sidecar.proxy.responses import encode_response
from sidecar.proxy.topics import TopicView
from sidecar.proxy.versions import METADATA, PRODUCE, kio_versions
from tests.kafka_frames import read_response, request_frame
from tests.unit.forward_messages import filled


class _Context:
    """A connection as the filters see it."""

    peer = "('127.0.0.1', 50000)"
    host = "127.0.0.1"
    client_host = "127.0.0.1"
    client_id: str | None = None

    def room(self) -> int:
        return 1 << 20

    def hold(self, size: int) -> None:
        pass


CONTEXT: Context = _Context()


class _Recording:
    """A filter keyed to `keys` that notes what it meets and answers `decision`."""

    def __init__(self, keys: Keys | None, decision: Answer | Close | None = None) -> None:
        self.request_keys = keys
        self.decision = decision
        self.met: list[tuple[int, int]] = []

    def on_request(self, request: Request, context: Context) -> Answer | Close | None:
        self.met.append((request.api_key, request.version))
        return self.decision


class _Renaming:
    """A response filter that renames Metadata's cluster, now or after a wait."""

    def __init__(self, name: str, *, waits: bool = False) -> None:
        self.name = name
        self.waits = waits
        self.response_keys: Keys = {METADATA: (10, 12)}

    def on_response(self, response: Response, context: Context) -> Awaitable[None] | None:
        body = response.body()
        renamed = dataclasses.replace(body, cluster_id=f"{body.cluster_id}>{self.name}")
        if not self.waits:
            response.replace(renamed)
            return None
        return self._later(response, renamed)

    async def _later(self, response: Response, renamed: Any) -> None:
        await asyncio.sleep(0)
        response.replace(renamed)

    def check_size(self, api_key: int, size: int) -> bool:
        return False


def _filters(requests: list[Any], responses: list[Any] | None = None) -> Filters:
    metrics = ForwardMetrics(CollectorRegistry())
    return Filters(requests, responses or [], metrics=metrics, max_frame_bytes=1 << 20)


def _request(api_key: int, version: int, **values: Any) -> bytes:
    """A request frame (size prefix excluded) of correlation id 7, every field filled."""
    body = filled(load_request_schema(api_key, version), **values)
    fields = {f.name: getattr(body, f.name) for f in dataclasses.fields(body)}
    return request_frame(api_key, version, 7, **fields)[4:]


def _metadata(version: int) -> bytes:
    return _request(METADATA, version, topics=None)


def test_a_filter_meets_only_the_versions_it_is_keyed_to() -> None:
    keyed = _Recording({METADATA: (10, 12)})
    every = _Recording(None)
    chain = _filters([keyed, every]).chain()
    for version in (9, 10, 12):
        action = chain.request(_metadata(version), CONTEXT)
        assert isinstance(action, Forward) and action.frame is None
        assert action.expected == Expected(METADATA, version, 7)
    assert keyed.met == [(METADATA, 10), (METADATA, 12)]
    assert every.met == [(METADATA, 9), (METADATA, 10), (METADATA, 12)]
    assert chain.client_id == "test-client"


def test_the_first_filter_that_decides_ends_the_chain() -> None:
    answer = Answer(b"\0\0\0\4\0\0\0\7")
    first = _Recording({METADATA: (0, 12)}, answer)
    second = _Recording(None, Close("never met"))
    assert _filters([first, second]).chain().request(_metadata(12), CONTEXT) is answer
    assert second.met == []


def test_a_response_goes_through_its_filters_in_order_now_or_after_a_wait() -> None:
    body = filled(load_response_schema(METADATA, 12), cluster_id="c")
    frame = encode_response(7, body)[4:]
    expected = Expected(METADATA, 12, 7)
    now = _filters([], [_Renaming("a"), _Renaming("b")]).chain()
    assert now.read_whole(METADATA, 12) and not now.read_whole(METADATA, 9)
    written = now.response(expected, frame, CONTEXT)
    assert isinstance(written, bytes)
    assert _cluster_id(written) == "c>a>b"
    later = _filters([], [_Renaming("a", waits=True), _Renaming("b")]).chain()
    waiting = later.response(expected, frame, CONTEXT)
    assert not isinstance(waiting, bytes)
    assert _cluster_id(asyncio.run(_awaited(waiting))) == "c>a>b"


async def _awaited(waiting: Awaitable[bytes]) -> bytes:
    return await waiting


def _cluster_id(written: bytes) -> str:
    return str(read_response(METADATA, 12, written[4:])[1].cluster_id)


def test_a_response_above_the_connections_bound_is_refused() -> None:
    chain = _filters([], [_Renaming("a")]).chain()
    chain.check_size(Expected(METADATA, 12, 7), 1 << 20)
    with pytest.raises(ProtocolError, match="ZDICT_PROXY__MAX_REQUEST_BYTES"):
        chain.check_size(Expected(METADATA, 12, 7), (1 << 20) + 1)


def _locate(nodes: Mapping[int, Address], host: str) -> Awaitable[dict[int, Address | None]]:
    raise AssertionError("no broker named")


def _proxy_chain() -> FilterChain:
    settings = ProxySettings(listen="127.0.0.1:0")
    metrics = ForwardMetrics(CollectorRegistry())
    return proxy_filters(settings, metrics, _locate, topics=TopicView(None)).chain()


def test_the_proxy_refuses_a_version_no_filter_of_its_api_reads() -> None:
    chain = _proxy_chain()
    high = kio_versions(PRODUCE)
    assert high is not None and high[1] > LAST_VERSION, "kio knows Produce above the filter"
    action = chain.request(_request(PRODUCE, LAST_VERSION + 1), CONTEXT)
    assert isinstance(action, Close)
    assert f"served in v{FIRST_VERSION}-v{LAST_VERSION}" in action.error


@pytest.mark.parametrize("version", [-1, -32768, 32767])
def test_a_request_of_a_version_out_of_every_range_is_refused(version: int) -> None:
    frame = struct.pack(">hhih", METADATA, version, 7, -1)  # no client id
    action = _proxy_chain().request(frame, CONTEXT)
    assert isinstance(action, Close) and f"v{version} is not forwarded" in action.error


def test_the_produce_filter_alone_sets_the_produce_versions_served() -> None:
    served = ServedVersions(ProduceFilter(None, 0.02).request_keys)
    assert served.served(PRODUCE) == (FIRST_VERSION, LAST_VERSION)
    assert served.served(METADATA) == kio_versions(METADATA)
