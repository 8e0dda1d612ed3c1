"""The one thing the proxy reads of a ProduceResponse: whether it names brokers.

A ProduceResponse from v10 on may carry `NodeEndpoints` (the new leaders' addresses, KIP-951),
a top-level tagged field that brokers send only when a leader moved. Every Produce answer is
read whole to find out; one without it is passed as it came, without being parsed and written
again (most of what that cost per request): the frame is walked by hand up to its top-level
tagged fields, every count and length checked against the frame.
"""

from __future__ import annotations

from typing import Final

from kio.index import load_response_schema

from sidecar.errors import ProtocolError
from sidecar.proxy.bounded import check, top_level_tags
from sidecar.proxy.versions import PRODUCE
from sidecar.wire.varint import read_uvarint

#: The first ProduceResponse version that may name brokers.
NAMES_BROKERS_FROM: Final = 10
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
    if NAMES_BROKERS_FROM <= version <= _PRODUCE_WALKED_TO:
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
        topics, pos = read_uvarint(frame, pos, end)
        _entries(topics - 1, _FEWEST_TOPIC, pos, end)
        for _ in range(topics - 1):
            if version >= PRODUCE_TOPIC_IDS_FROM:
                pos += _UUID_BYTES
            else:
                pos = _skip_compact(frame, pos, end)
            partitions, pos = read_uvarint(frame, pos, end)
            _entries(partitions - 1, _FEWEST_PARTITION, pos, end)
            for _ in range(partitions - 1):
                pos += _PARTITION_FIXED_BYTES  # index, error code, offsets, append time
                errors, pos = read_uvarint(frame, pos, end)
                _entries(errors - 1, _FEWEST_RECORD_ERROR, pos, end)
                for _ in range(errors - 1):
                    pos = _skip_tags(frame, _skip_compact(frame, pos + 4, end), end)
                pos = _skip_tags(frame, _skip_compact(frame, pos, end), end)
            pos = _skip_tags(frame, pos, end)
        count, _ = read_uvarint(frame, pos + 4, end)  # after the throttle time
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
    length, pos = read_uvarint(frame, pos, end)
    stop = pos + max(length - 1, 0)
    if stop > end:
        raise ProtocolError("a ProduceResponse string runs past the end of its frame")
    return stop


def _skip_tags(frame: bytes, pos: int, end: int) -> int:
    """The position after the tagged fields at `pos` (each: tag, size, that many bytes)."""
    count, pos = read_uvarint(frame, pos, end)
    for _ in range(count):
        _tag, pos = read_uvarint(frame, pos, end)
        size, pos = read_uvarint(frame, pos, end)
        pos += size
    if pos > end:
        raise ProtocolError("a ProduceResponse tagged field runs past the end of its frame")
    return pos
