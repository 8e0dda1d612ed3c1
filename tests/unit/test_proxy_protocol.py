"""The proxy's Kafka framing and API versions (`sidecar.proxy.protocol`)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from sidecar.errors import ProtocolError
from sidecar.proxy.protocol import (
    ADVERTISED,
    API_VERSIONS,
    FETCH,
    METADATA,
    PRODUCE,
    SUPPORTED,
    Request,
    UnsupportedApiVersions,
    api_versions_response,
    encode_response,
    frame_size,
    parse_request,
)
from tests.hypothesis_profiles import examples
from tests.unit.proxy_wire import read_response, request_frame

LIMIT = 1 << 20


@pytest.mark.parametrize("version", range(5))
def test_api_versions_of_every_version_lists_what_is_advertised(version: int) -> None:
    body = {"client_software_name": "t", "client_software_version": "1"} if version >= 3 else {}
    frame = request_frame(API_VERSIONS, version, 7, **body)
    request = parse_request(frame[4:])
    assert isinstance(request, Request)
    assert (request.api_key, request.version, request.correlation_id) == (API_VERSIONS, version, 7)
    assert request.client_id == "test-client"
    response = encode_response(7, api_versions_response(version))
    correlation, answer = read_response(API_VERSIONS, version, response[4:])
    assert correlation == 7
    assert answer.error_code == ErrorCode.none
    listed = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
    assert listed == ADVERTISED
    # librdkafka needs Fetch v4 and v10 listed for record batches v2 and zstd; it is not served.
    assert listed[FETCH] == (4, 12) and FETCH not in SUPPORTED


def test_an_api_versions_request_newer_than_ours_is_answered_in_v0_with_our_versions() -> None:
    frame = struct.pack(">hhi", API_VERSIONS, 9, 3) + b"\x00\x01x\x00"
    request = parse_request(frame)
    assert request == UnsupportedApiVersions(3, 9)
    response = encode_response(3, api_versions_response(0, ErrorCode.unsupported_version))
    _, answer = read_response(API_VERSIONS, 0, response[4:])
    assert answer.error_code == ErrorCode.unsupported_version
    assert {k.api_key for k in answer.api_keys} == set(ADVERTISED)


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        (struct.pack(">hhi", FETCH, 12, 1) + b"\x00\x00", "Fetch.*consumers"),
        (struct.pack(">hhi", 9, 8, 1) + b"\x00\x00", r"api key 9 .*not served"),
        (struct.pack(">hhi", PRODUCE, 2, 1) + b"\x00\x00", r"Produce v2 is not implemented"),
        (struct.pack(">hhi", METADATA, 13, 1) + b"\x00\x00", r"Metadata v13 is not implemented"),
        (struct.pack(">hhi", METADATA, 9, 1) + b"\x00\x01x\x00\xff\xff", "does not parse"),
    ],
    ids=["fetch", "unknown-api", "old-produce", "new-metadata", "garbage"],
)
def test_requests_the_proxy_does_not_serve_are_refused_naming_them(
    frame: bytes, message: str
) -> None:
    with pytest.raises(ProtocolError, match=message):
        parse_request(frame)


def test_bytes_after_a_request_are_refused() -> None:
    frame = request_frame(API_VERSIONS, 0, 1)[4:] + b"\x00"
    with pytest.raises(ProtocolError, match="1 bytes after its end"):
        parse_request(frame)


@pytest.mark.parametrize(
    ("size", "message"),
    [
        (-1, "too short"),
        (3, "too short"),
        (LIMIT + 1, "above the proxy's limit"),
        (2**31 - 1, "limit"),
    ],
)
def test_frame_sizes_are_bounded_before_anything_is_read(size: int, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        frame_size(struct.pack(">i", size), LIMIT)


def test_a_frame_within_the_limit_is_read() -> None:
    assert frame_size(struct.pack(">i", LIMIT), LIMIT) == LIMIT


@settings(max_examples=examples(500), deadline=None)
@given(
    api=st.sampled_from(sorted(SUPPORTED)),
    version=st.integers(0, 13),
    body=st.binary(max_size=80),
)
def test_random_request_bodies_raise_protocol_error_or_parse(
    api: int, version: int, body: bytes
) -> None:
    frame = struct.pack(">hhi", api, version, 1) + b"\x00\x01x" + body
    try:
        parsed = parse_request(frame)
    except ProtocolError as exc:
        assert str(exc)
    else:
        assert isinstance(parsed, Request | UnsupportedApiVersions)
