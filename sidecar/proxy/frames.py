"""Reading what the proxy needs of a request frame, and nothing more.

A request frame (its 4-byte size prefix excluded) starts with the request header: api key
(int16), api version (int16), correlation id (int32); from header v1 on the client id (a
nullable string with an int16 length, never compact); from header v2 (the flexible versions of
an API) tagged fields: an unsigned varint count, then per field an unsigned varint tag, an
unsigned varint size and that many bytes. Every length is checked against the frame before it
is used, so no declared count makes anything allocate: the body is forwarded unparsed.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from sidecar.errors import ProtocolError
from sidecar.proxy.versions import API_VERSIONS
from sidecar.wire.varint import read_uvarint

_FIXED: Final = struct.Struct(">hhi")
_INT16: Final = struct.Struct(">h")
_INT32: Final = struct.Struct(">i")
#: Bytes of the size prefix every frame starts with.
PREFIX_BYTES: Final = 4


@dataclass(frozen=True, slots=True, init=False)
class RequestHeader:
    """The header of one request frame."""

    api_key: int
    version: int
    correlation_id: int
    client_id: str | None
    #: Bytes of the header: the body starts here.
    size: int

    # init=False: made per request, so its __init__ is written here and compiled (see
    # deploy/build_backend.py); the one dataclasses generates would run interpreted.
    def __init__(
        self, api_key: int, version: int, correlation_id: int, client_id: str | None, size: int
    ) -> None:
        object.__setattr__(self, "api_key", api_key)
        object.__setattr__(self, "version", version)
        object.__setattr__(self, "correlation_id", correlation_id)
        object.__setattr__(self, "client_id", client_id)
        object.__setattr__(self, "size", size)


def frame_size(prefix: bytes, max_bytes: int) -> int:
    """The size a frame's 4-byte prefix announces, checked against `max_bytes`.

    Raises:
        ProtocolError: negative, too short for a request header, or above `max_bytes`.
    """
    size: int = _INT32.unpack(prefix)[0]
    if size < _FIXED.size:
        raise ProtocolError(f"a request frame of {size} bytes is too short for a request header")
    if size > max_bytes:
        raise ProtocolError(
            f"a request of {size} bytes is above the proxy's limit of {max_bytes} bytes "
            "(ZDICT_PROXY__MAX_REQUEST_BYTES; the client's max.request.size must stay below it)"
        )
    return size


def read_request_header(frame: bytes, header_version: int) -> RequestHeader:
    """The header of `frame` (without its size prefix), read as `header_version` (0, 1 or 2).

    Raises:
        ProtocolError: the frame ends inside its header.
    """
    if len(frame) < _FIXED.size:
        raise ProtocolError(f"a request frame of {len(frame)} bytes ends inside its header")
    api_key, version, correlation_id = _FIXED.unpack_from(frame)
    offset = _FIXED.size
    client_id: str | None = None
    if header_version >= 1:
        client_id, offset = _nullable_string(frame, offset)
    if header_version >= 2:
        offset = skip_tagged_fields(frame, offset)
    return RequestHeader(api_key, version, correlation_id, client_id, offset)


def produce_acks(frame: bytes, header: RequestHeader, flexible: bool) -> int:
    """The `acks` of a Produce request (v3 on: after the transactional id, which is a compact
    nullable string in the flexible versions).

    Raises:
        ProtocolError: the frame ends before its acks.
    """
    offset = header.size
    if header.version >= 3:
        if flexible:
            length, offset = read_uvarint(frame, offset, len(frame))
            offset += max(length - 1, 0)  # compact: length + 1, 0 for null
        else:
            _check(frame, offset, _INT16.size)
            offset += _INT16.size + max(_INT16.unpack_from(frame, offset)[0], 0)
    _check(frame, offset, _INT16.size)
    acks: int = _INT16.unpack_from(frame, offset)[0]
    return acks


def api_versions_v0(frame: bytes, header: RequestHeader) -> bytes:
    """An ApiVersions v0 request frame (size prefix included) with the correlation id and the
    client id of `frame`, whose `header` was read as v1 (the client id is written alike in v1
    and v2): what the proxy asks upstream for a client whose ApiVersions version is above the
    proxy's."""
    client_id = frame[_FIXED.size : header.size]
    return (
        _INT32.pack(_FIXED.size + len(client_id))
        + _FIXED.pack(API_VERSIONS, 0, header.correlation_id)
        + client_id
    )


def skip_tagged_fields(frame: bytes, offset: int) -> int:
    """The offset after the tagged fields starting at `offset`.

    Raises:
        ProtocolError: a field runs past the end of the frame.
    """
    count, offset = read_uvarint(frame, offset, len(frame))
    for _ in range(count):  # each field takes at least 2 bytes: a count past the frame fails
        _tag, offset = read_uvarint(frame, offset, len(frame))
        size, offset = read_uvarint(frame, offset, len(frame))
        _check(frame, offset, size)
        offset += size
    return offset


def _nullable_string(frame: bytes, offset: int) -> tuple[str | None, int]:
    _check(frame, offset, _INT16.size)
    length: int = _INT16.unpack_from(frame, offset)[0]
    offset += _INT16.size
    if length < 0:
        return None, offset
    _check(frame, offset, length)
    text = bytes(frame[offset : offset + length]).decode("utf-8", errors="replace")
    return text, offset + length


def _check(frame: bytes, offset: int, size: int) -> None:
    if offset + size > len(frame):
        raise ProtocolError(
            f"a request header field of {size} bytes at byte {offset} runs past the end of the "
            f"{len(frame)}-byte frame"
        )
