"""The proxy's request framing: headers of every version read without parsing the
body, Produce's acks, the ApiVersions v0 stand-in, sizes checked before anything is read."""

from __future__ import annotations

import datetime
import io
import struct
from typing import Any

import pytest
from kio.index import load_request_schema
from kio.serial import entity_writer
from kio.static.primitive import i16, i32

from sidecar.errors import ProtocolError
from sidecar.proxy.frames import (
    api_versions_v0,
    frame_size,
    produce_acks,
    read_request_header,
)
from sidecar.proxy.versions import request_header_version
from tests.kafka_frames import request_frame


def test_header_v0_is_the_fixed_part_only() -> None:
    # Only ControlledShutdown v0 used it (kio has no class for it any more).
    frame = struct.pack(">hhi", 7, 0, 42) + b"body"
    header = read_request_header(frame, 0)
    assert (header.api_key, header.version, header.correlation_id) == (7, 0, 42)
    assert header.client_id is None
    assert header.size == 8


@pytest.mark.parametrize(("api_key", "version"), [(3, 8), (3, 9), (18, 2), (18, 3), (0, 8), (0, 9)])
def test_headers_v1_and_v2_end_where_kio_writes_the_body(api_key: int, version: int) -> None:
    bodies: dict[int, dict[str, Any]] = {
        3: {
            "topics": (),
            "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        },
        18: {"client_software_name": "x", "client_software_version": "1"},
        0: {
            "transactional_id": None,
            "acks": 1,
            "timeout": datetime.timedelta(0),
            "topic_data": (),
        },
    }
    body = bodies[api_key]
    schema = load_request_schema(api_key, version)
    names = {f for f in schema.__dataclass_fields__}
    frame = request_frame(api_key, version, 99, **{k: v for k, v in body.items() if k in names})
    header_version = request_header_version(api_key, version)
    assert header_version == (2 if ".v2." in schema.__header_schema__.__module__ else 1)
    header = read_request_header(frame[4:], header_version)
    assert (header.api_key, header.version, header.correlation_id) == (api_key, version, 99)
    assert header.client_id == "test-client"
    head = io.BytesIO()
    entity_writer(schema.__header_schema__)(
        head,
        schema.__header_schema__(
            request_api_key=i16(api_key),
            request_api_version=i16(version),
            correlation_id=i32(99),
            client_id="test-client",
        ),
    )
    assert header.size == len(head.getvalue())


def test_header_v2_tagged_fields_are_skipped_and_a_null_client_id_read() -> None:
    fixed = struct.pack(">hhi", 3, 12, 5) + struct.pack(">h", -1)
    tags = bytes([2, 0, 3]) + b"abc" + bytes([7, 1]) + b"z"
    header = read_request_header(fixed + tags + b"BODY", 2)
    assert header.client_id is None
    assert header.size == len(fixed) + len(tags)


@pytest.mark.parametrize(
    "frame",
    [
        struct.pack(">hhi", 3, 12, 5)[:6],  # inside the fixed part
        struct.pack(">hhi", 3, 12, 5) + struct.pack(">h", 50) + b"short",  # client id
        struct.pack(">hhih", 3, 12, 5, -1) + bytes([1, 0, 0x7F]) + b"x",  # tag past the end
        struct.pack(">hhih", 3, 12, 5, -1) + bytes([0xFF] * 6),  # a varint of 6 bytes
        struct.pack(">hhih", 3, 12, 5, -1) + bytes([0xF0, 0xFF, 0xFF, 0x0F]),  # 2^31 tags
    ],
    ids=["fixed", "client-id", "tag-size", "long-varint", "huge-count"],
)
def test_a_header_running_past_its_frame_is_refused(frame: bytes) -> None:
    with pytest.raises(ProtocolError):
        read_request_header(frame, 2)


@pytest.mark.parametrize("version", [3, 7, 8, 9, 11, 13])
@pytest.mark.parametrize("acks", [0, 1, -1])
@pytest.mark.parametrize("transactional_id", [None, "", "tx-é"])
def test_produce_acks_are_read_after_the_transactional_id(
    version: int, acks: int, transactional_id: str | None
) -> None:
    frame = request_frame(
        0,
        version,
        1,
        transactional_id=transactional_id,
        acks=acks,
        timeout=datetime.timedelta(seconds=1),
        topic_data=(),
    )[4:]
    header_version = request_header_version(0, version)
    header = read_request_header(frame, header_version)
    assert produce_acks(frame, header, header_version == 2) == acks


def test_produce_acks_past_the_frame_is_refused() -> None:
    frame = struct.pack(">hhih", 0, 8, 1, -1) + struct.pack(">h", 10) + b"ab"
    with pytest.raises(ProtocolError):
        produce_acks(frame, read_request_header(frame, 1), flexible=False)


def test_the_api_versions_v0_stand_in_keeps_correlation_and_client_ids() -> None:
    frame = request_frame(18, 3, 77, client_software_name="x", client_software_version="1")[4:]
    header = read_request_header(frame, 1)
    v0 = api_versions_v0(frame, header)
    assert v0 == request_frame(18, 0, 77)


@pytest.mark.parametrize(
    ("size", "refused"), [(-1, True), (7, True), (8, False), (1000, False), (1001, True)]
)
def test_frame_sizes_are_checked_before_anything_is_read(size: int, refused: bool) -> None:
    if refused:
        with pytest.raises(ProtocolError):
            frame_size(struct.pack(">i", size), 1000)
    else:
        assert frame_size(struct.pack(">i", size), 1000) == size
