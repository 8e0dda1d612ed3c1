"""The bounds check run before kio parses a response: a declared count larger than the frame
can hold is refused before anything is allocated (kio would abort the process), every response
the proxy parses passes it whole and is refused cut short."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from kio.index import load_response_schema

from sidecar.errors import ProtocolError
from sidecar.proxy.bounded import check
from sidecar.proxy.node_addresses import REWRITTEN_FROM
from sidecar.proxy.responses import encode_response, parse_response
from sidecar.proxy.topics import LISTING
from sidecar.proxy.versions import API_VERSIONS, FETCH, kio_versions
from tests.unit.forward_messages import filled

PARSED = sorted({*REWRITTEN_FROM, *LISTING, API_VERSIONS, FETCH})


def _every_parsed_version() -> list[tuple[int, int]]:
    found = []
    for api_key in PARSED:
        known = kio_versions(api_key)
        assert known is not None
        found += [(api_key, v) for v in range(known[0], known[1] + 1)]
    return found


@pytest.mark.parametrize(("api_key", "version"), _every_parsed_version())
def test_a_whole_response_passes_and_one_cut_short_is_refused(api_key: int, version: int) -> None:
    schema: Any = load_response_schema(api_key, version)
    frame = encode_response(3, filled(schema))[4:]
    header_end = check(schema.__header_schema__, frame)
    assert check(schema, frame, header_end) == len(frame)
    for cut in range(len(frame)):
        with pytest.raises(ProtocolError):
            parse_response(api_key, version, frame[:cut])


@pytest.mark.parametrize(
    ("version", "count"),
    [(12, b"\xff\xff\xff\xff\x0f"), (11, struct.pack(">i", 0x7FFFFFF0))],
)
def test_a_count_larger_than_the_frame_is_refused_before_kio_allocates(
    version: int, count: bytes
) -> None:
    """35 bytes that made kio ask for 32 GiB and abort the process."""
    header = struct.pack(">i", 5) + (b"\x00" if version >= 12 else b"")
    frame = header + struct.pack(">ihi", 0, 0, 0) + count + b"\x00" * 16
    with pytest.raises(ProtocolError, match=r"declares \d+ entries, more than the 16 bytes"):
        parse_response(FETCH, version, frame)
