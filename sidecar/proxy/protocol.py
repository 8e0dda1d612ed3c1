"""Kafka protocol framing and the APIs the proxy implements, on kio's generated messages.

A request on the wire is a 4-byte big-endian size, then the request header (api key, api
version, correlation id, client id; tagged fields from the flexible versions on) and the body.
kio (Python dataclasses generated from Kafka's own JSON message specs) reads and writes headers
and bodies of every version; this module picks the classes, bounds the sizes, and turns what
cannot be served into a `ProtocolError` (the connection is then closed, as a broker does).

The proxy advertises only what it implements (`SUPPORTED`): clients pick the highest version
both sides know. An ApiVersions request of a version above ours is answered with
UNSUPPORTED_VERSION in version 0, which every client reads, listing ours (KIP-511).
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import struct
import sys
from dataclasses import dataclass
from typing import Any, Final

from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError

from sidecar.errors import ProtocolError

PRODUCE: Final = 0
FETCH: Final = 1
METADATA: Final = 3
FIND_COORDINATOR: Final = 10
API_VERSIONS: Final = 18
INIT_PRODUCER_ID: Final = 22
#: API key -> the lowest and highest version the proxy implements. Produce from v3 (record
#: batches v2, the transactional id; Kafka 4 dropped the older ones) to v11 (v12 only tells a
#: client the broker verifies transactions itself, v13 names topics by id); Metadata from v1
#: (v0 means "all topics" by an empty list) to v12 (the highest kio and librdkafka share);
#: InitProducerId up to v5 (v6 is KIP-939's two-phase commit); FindCoordinator up to v3 (one
#: key a request), answered with an error: transactions and consumer groups are not proxied.
SUPPORTED: Final[dict[int, tuple[int, int]]] = {
    PRODUCE: (3, 11),
    METADATA: (1, 12),
    FIND_COORDINATOR: (0, 3),
    API_VERSIONS: (0, 4),
    INIT_PRODUCER_ID: (0, 5),
}
#: What ApiVersions lists: the above, and Fetch v4-v12, which the proxy does not serve.
#: librdkafka derives features from the versions a broker lists: record batches v2 need Fetch
#: v4 next to Produce v3, zstd needs Fetch v10 next to Produce v7, lz4 needs FindCoordinator.
#: A Fetch request (a consumer pointed at the proxy) closes its connection with a log line.
ADVERTISED: Final[dict[int, tuple[int, int]]] = {**SUPPORTED, FETCH: (4, 12)}
API_NAMES: Final = {
    PRODUCE: "Produce",
    FETCH: "Fetch",
    METADATA: "Metadata",
    FIND_COORDINATOR: "FindCoordinator",
    API_VERSIONS: "ApiVersions",
    INIT_PRODUCER_ID: "InitProducerId",
}
#: Bytes of the fixed part of every request header: api key, api version, correlation id.
_FIXED: Final = struct.Struct(">hhi")
_SIZE: Final = struct.Struct(">i")
NO_THROTTLE: Final = datetime.timedelta(0)


def api_name(api_key: int) -> str:
    """`Produce`, `Metadata`, ... for the APIs implemented; `api key N` for the others."""
    return API_NAMES.get(api_key, f"api key {api_key}")


@dataclass(frozen=True, slots=True)
class Request:
    """One request read off a connection: its header fields and its kio body."""

    api_key: int
    version: int
    correlation_id: int
    client_id: str | None
    body: Any
    #: Bytes of the whole frame (size prefix excluded).
    size: int


@dataclass(frozen=True, slots=True)
class UnsupportedApiVersions:
    """An ApiVersions request of a version above ours: answered in v0 with our versions."""

    correlation_id: int
    version: int


def frame_size(prefix: bytes, max_bytes: int) -> int:
    """The size a request's 4-byte prefix announces, checked against `max_bytes`.

    Raises:
        ProtocolError: the size is negative, too small for a header, or above `max_bytes` (a
            gigantic prefix would otherwise make the proxy wait for, or allocate, that much).
    """
    size: int = _SIZE.unpack(prefix)[0]
    if size < _FIXED.size:
        raise ProtocolError(f"a request frame of {size} bytes is too short for a request header")
    if size > max_bytes:
        raise ProtocolError(
            f"a request of {size} bytes is above the proxy's limit of {max_bytes} bytes "
            "(ZDICT_PROXY__MAX_REQUEST_BYTES; the client's max.request.size must stay below it)"
        )
    return size


def parse_request(frame: bytes) -> Request | UnsupportedApiVersions:
    """Read one request frame (without its size prefix).

    Raises:
        ProtocolError: an API or version the proxy does not implement, or bytes that do not
            parse as that request.
    """
    api_key, version, correlation_id = _FIXED.unpack_from(frame)
    versions = SUPPORTED.get(api_key)
    if versions is None:
        raise ProtocolError(
            f"{api_name(api_key)} (v{version}) is not served by the produce proxy; it serves "
            "producers only (Produce, Metadata, ApiVersions, InitProducerId): consumers, admin "
            "clients and transactional producers talk to the Kafka cluster directly"
        )
    low, high = versions
    if not low <= version <= high:
        if api_key == API_VERSIONS and version > high:
            return UnsupportedApiVersions(correlation_id, version)
        raise ProtocolError(
            f"{api_name(api_key)} v{version} is not implemented (v{low}-v{high} are); the "
            "client should have negotiated a version with ApiVersions first"
        )
    try:
        schema = load_request_schema(api_key, version)
        header, offset = entity_reader(schema.__header_schema__)(frame, 0)
        body, used = entity_reader(schema)(frame, offset)
    except (UnknownAPIKey, UnknownEntity) as exc:  # kio lacks a version it should have
        raise ProtocolError(f"{api_name(api_key)} v{version}: {exc}") from None
    except (SerialError, ValueError, KeyError, TypeError, OverflowError, IndexError) as exc:
        raise ProtocolError(
            f"{api_name(api_key)} v{version} request does not parse: {type(exc).__name__}: {exc}"
        ) from None
    if offset + used != len(frame):
        raise ProtocolError(
            f"{api_name(api_key)} v{version} request has {len(frame) - offset - used} bytes "
            "after its end"
        )
    return Request(api_key, version, correlation_id, header.client_id, body, len(frame))


def response_class(api_key: int, version: int) -> type[Any]:
    """kio's response payload class of an implemented API version."""
    return load_response_schema(api_key, version)


def build(cls: type[Any], **values: Any) -> Any:
    """An instance of kio class `cls` from `values`, leaving out those the version has no
    field for (one call site serves every version: newer fields are simply dropped)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})


def nested(cls: type[Any], name: str) -> type[Any]:
    """The class `name` of the same message version as `cls` (e.g. its topic entries)."""
    found: type[Any] = getattr(sys.modules[cls.__module__], name)
    return found


def encode_response(correlation_id: int, payload: Any) -> bytes:
    """A response frame: size prefix, the header the payload's version takes, the payload."""
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0")
    header_class = type(payload).__header_schema__
    entity_writer(header_class)(buffer, header_class(correlation_id=correlation_id))
    entity_writer(type(payload))(buffer, payload)
    data = buffer.getbuffer()
    _SIZE.pack_into(data, 0, len(data) - _SIZE.size)
    return bytes(data)


def api_versions_response(version: int, error: ErrorCode = ErrorCode.none) -> Any:
    """The ApiVersions answer listing `ADVERTISED`, in `version`."""
    cls = response_class(API_VERSIONS, version)
    entry = nested(cls, "ApiVersion")
    keys = tuple(
        entry(api_key=key, min_version=low, max_version=high)
        for key, (low, high) in sorted(ADVERTISED.items())
    )
    return build(
        cls,
        error_code=error,
        api_keys=keys,
        throttle_time=NO_THROTTLE,
        supported_features=(),
        finalized_features_epoch=-1,
        finalized_features=(),
        zk_migration_ready=False,
    )
