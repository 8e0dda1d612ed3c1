"""Broker addresses in responses: the local port of each upstream broker, and the rewriting of
the responses that name brokers (Metadata, FindCoordinator, DescribeCluster, and Produce from
v10 on and Fetch from v16 on, whose `NodeEndpoints` name new leaders), parsed and written again
with kio.

The port map: upstream node id N is served at local port `proxy.broker_port_base` + N. A fixed
map, not ports handed out as brokers are first seen: a client keeps the addresses of its last
metadata across a proxy restart (and a pod declares its ports), so node N must be at the same
port in the next process. Node ids of a cluster are small (KRaft's default ids are 1, 2, 3...);
one whose port would be above 65535 is left out of the responses, as a broker without a
listener is (clients retry, and the proxy logs it).

Only host and port change: everything else of a response, its node ids, racks, errors and
tagged fields kio knows, is written back as it came.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from kio.index import load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader
from kio.serial.errors import SerialError

from sidecar.errors import ProtocolError
from sidecar.proxy.bounded import check, top_level_tags
from sidecar.proxy.responses import encode_response
from sidecar.proxy.topics import LISTING
from sidecar.proxy.versions import (
    API_VERSIONS,
    DESCRIBE_CLUSTER,
    FETCH,
    FIND_COORDINATOR,
    METADATA,
    PRODUCE,
    api_name,
)

__all__ = [
    "REWRITTEN_FROM",
    "Address",
    "PortMap",
    "encode_response",
    "is_parsed",
    "names_no_broker",
    "parse_response",
    "rewrite",
    "upstream_nodes",
]

#: API key -> the first version whose response names brokers.
REWRITTEN_FROM: Final[dict[int, int]] = {
    METADATA: 0,
    FIND_COORDINATOR: 0,
    DESCRIBE_CLUSTER: 0,
    PRODUCE: 10,
    FETCH: 16,
}
#: DescribeCluster's endpoint type naming brokers (2 names controllers, not served).
_BROKERS_ENDPOINT_TYPE: Final = 1
_HIGHEST_PORT: Final = 65535
#: ProduceResponse v13 names topics by id (16 bytes) rather than by name; versions above the
#: last walked by hand are walked by their schema.
PRODUCE_TOPIC_IDS_FROM: Final = 13
_PRODUCE_WALKED_TO: Final = 13
_UUID_BYTES: Final = 16
#: Partition index int32, error code int16, base offset, log append time, log start offset.
_PARTITION_FIXED_BYTES: Final = 4 + 2 + 8 + 8 + 8
#: The fewest bytes an entry takes: a topic (empty name, no partitions, no tags), a partition
#: (its fixed fields, no record errors, null message, no tags), a record error.
_FEWEST_TOPIC: Final = 3
_FEWEST_PARTITION: Final = _PARTITION_FIXED_BYTES + 3
_FEWEST_RECORD_ERROR: Final = 4 + 1 + 1


@dataclass(frozen=True, slots=True)
class Address:
    """A host and port (upstream, or where clients reach the proxy)."""

    host: str
    port: int


@dataclass(frozen=True, slots=True)
class PortMap:
    """Upstream node id -> the local port that serves it (see module)."""

    base: int

    def port(self, node_id: int) -> int | None:
        """The local port of `node_id`; None when it falls outside 1-65535."""
        port = self.base + node_id
        return port if 0 < port <= _HIGHEST_PORT else None


def is_parsed(api_key: int, version: int) -> bool:
    """Whether a response of `api_key` in `version` is parsed (to rewrite or filter it)."""
    if api_key == API_VERSIONS or api_key in LISTING:
        return True
    first = REWRITTEN_FROM.get(api_key)
    return first is not None and version >= first


def names_no_broker(api_key: int, version: int, frame: bytes) -> bool:
    """Whether a Produce response frame (size prefix excluded) carries no `NodeEndpoints`, its
    only address, a top-level tagged field that brokers send only when a leader moved: such a
    response is passed as it came, without being parsed and encoded again (most of what it
    cost per request). False for the other APIs.

    Raises:
        ProtocolError: the bytes run past the frame.
    """
    if api_key != PRODUCE:
        return False
    if REWRITTEN_FROM[PRODUCE] <= version <= _PRODUCE_WALKED_TO:
        return _produce_top_level_tags(version, frame) == 0
    schema = load_response_schema(api_key, version)
    return top_level_tags(schema, frame, check(schema.__header_schema__, frame)) == 0


def _produce_top_level_tags(version: int, frame: bytes) -> int:
    """`top_level_tags` of a flexible ProduceResponse (v10 up), walked by hand: every Produce
    answer takes it, and the generic schema walk runs several times as much Python.
    tests/unit/test_forward_addresses.py holds it equal to the schema walk for every version.
    """
    end = len(frame)
    try:
        pos = _skip_tags(frame, 4, end)  # correlation id, the header's tagged fields
        topics, pos = _uvarint(frame, pos, end)
        _entries(topics - 1, _FEWEST_TOPIC, pos, end)
        for _ in range(topics - 1):
            if version >= PRODUCE_TOPIC_IDS_FROM:
                pos += _UUID_BYTES
            else:
                pos = _skip_compact(frame, pos, end)
            partitions, pos = _uvarint(frame, pos, end)
            _entries(partitions - 1, _FEWEST_PARTITION, pos, end)
            for _ in range(partitions - 1):
                pos += _PARTITION_FIXED_BYTES  # index, error code, offsets, append time
                errors, pos = _uvarint(frame, pos, end)
                _entries(errors - 1, _FEWEST_RECORD_ERROR, pos, end)
                for _ in range(errors - 1):
                    pos = _skip_tags(frame, _skip_compact(frame, pos + 4, end), end)
                pos = _skip_tags(frame, _skip_compact(frame, pos, end), end)
            pos = _skip_tags(frame, pos, end)
        count, _ = _uvarint(frame, pos + 4, end)  # after the throttle time
    except IndexError:
        raise ProtocolError(
            "a ProduceResponse runs past the end of its frame (truncated)"
        ) from None
    return count


def _entries(count: int, fewest: int, pos: int, end: int) -> None:
    if count > 0 and count * fewest > end - pos:
        raise ProtocolError(f"a ProduceResponse array declares {count} entries past its end")


def _skip_compact(frame: bytes, pos: int, end: int) -> int:
    """The position after the compact (nullable) string or bytes at `pos`."""
    length, pos = _uvarint(frame, pos, end)
    stop = pos + max(length - 1, 0)
    if stop > end:
        raise ProtocolError("a ProduceResponse string runs past the end of its frame")
    return stop


def _skip_tags(frame: bytes, pos: int, end: int) -> int:
    """The position after the tagged fields at `pos` (each: tag, size, that many bytes)."""
    count, pos = _uvarint(frame, pos, end)
    for _ in range(count):
        _tag, pos = _uvarint(frame, pos, end)
        size, pos = _uvarint(frame, pos, end)
        pos += size
    if pos > end:
        raise ProtocolError("a ProduceResponse tagged field runs past the end of its frame")
    return pos


def _uvarint(frame: bytes, pos: int, end: int) -> tuple[int, int]:
    byte = frame[pos]
    if byte < 0x80:
        return byte, pos + 1
    value, shift = byte & 0x7F, 7
    for at in range(pos + 1, min(pos + 5, end)):
        byte = frame[at]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at + 1
        shift += 7
    raise ProtocolError("an unsigned varint is truncated or longer than 5 bytes")


def parse_response(api_key: int, version: int, frame: bytes) -> tuple[int, Any]:
    """(correlation id, kio payload) of a response frame without its size prefix.

    Raises:
        ProtocolError: the bytes do not parse as that response.
    """
    try:
        schema = load_response_schema(api_key, version)
        # kio allocates for declared counts before checking them: bounds first.
        check(schema, frame, check(schema.__header_schema__, frame))
        header, offset = entity_reader(schema.__header_schema__)(frame, 0)
        body, used = entity_reader(schema)(frame, offset)
    except (SerialError, ValueError, KeyError, TypeError, OverflowError, IndexError) as exc:
        raise ProtocolError(
            f"{api_name(api_key)} v{version} response does not parse: {type(exc).__name__}: {exc}"
        ) from None
    if offset + used != len(frame):
        raise ProtocolError(
            f"{api_name(api_key)} v{version} response has {len(frame) - offset - used} bytes "
            "after its end"
        )
    return int(header.correlation_id), body


def upstream_nodes(api_key: int, body: Any) -> dict[int, Address]:
    """Node id -> upstream address of every broker a parsed response names."""
    return {node_id: Address(host, port) for node_id, host, port in _named(api_key, body)}


def rewrite(api_key: int, body: Any, local: Mapping[int, Address | None]) -> Any:
    """`body` with the address of each broker it names replaced by `local[node id]`; a broker
    without a local address is left out (a coordinator becomes COORDINATOR_NOT_AVAILABLE,
    which clients retry)."""
    if api_key in (METADATA, DESCRIBE_CLUSTER):
        if not _names_brokers(body):
            return dataclasses.replace(body, brokers=())
        return dataclasses.replace(body, brokers=_moved(body.brokers, local))
    if api_key in (PRODUCE, FETCH):
        return dataclasses.replace(body, node_endpoints=_moved(body.node_endpoints, local))
    if api_key == FIND_COORDINATOR:
        if hasattr(body, "coordinators"):
            return dataclasses.replace(
                body, coordinators=tuple(_coordinator(c, local) for c in body.coordinators)
            )
        return _coordinator(body, local)
    return body


def _names_brokers(body: Any) -> bool:
    return getattr(body, "endpoint_type", _BROKERS_ENDPOINT_TYPE) == _BROKERS_ENDPOINT_TYPE


def _named(api_key: int, body: Any) -> list[tuple[int, str, int]]:
    if api_key in (METADATA, DESCRIBE_CLUSTER):
        entries = body.brokers if _names_brokers(body) else ()
    elif api_key in (PRODUCE, FETCH):
        entries = body.node_endpoints
    elif api_key == FIND_COORDINATOR:
        entries = getattr(body, "coordinators", (body,))
        entries = tuple(e for e in entries if _is_found(e))
    else:
        entries = ()
    return [(_node_id(e), str(e.host), int(e.port)) for e in entries]


def _is_found(coordinator: Any) -> bool:
    return bool(coordinator.error_code == ErrorCode.none and coordinator.node_id >= 0)


def _moved(entries: tuple[Any, ...], local: Mapping[int, Address | None]) -> tuple[Any, ...]:
    moved = []
    for entry in entries:
        address = local.get(_node_id(entry))
        if address is not None:
            moved.append(dataclasses.replace(entry, host=address.host, port=address.port))
    return tuple(moved)


def _node_id(entry: Any) -> int:
    """The node id of a broker entry (DescribeCluster names it `broker_id`)."""
    node_id = getattr(entry, "node_id", None)
    return int(entry.broker_id if node_id is None else node_id)


def _coordinator(entry: Any, local: Mapping[int, Address | None]) -> Any:
    if not _is_found(entry):
        return entry
    address = local.get(int(entry.node_id))
    if address is None:
        return dataclasses.replace(
            entry,
            error_code=ErrorCode.coordinator_not_available,
            node_id=-1,
            host="",
            port=-1,
        )
    return dataclasses.replace(entry, host=address.host, port=address.port)
