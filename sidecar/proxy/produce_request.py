"""A bounded reader and writer of Produce request frames (v3-v12, flexible from v9).

Hand-written rather than kio's: kio allocates for a declared array count before it checks the
count against the frame (a 32-byte frame declaring 0xF0000000 topics asked for 32 GB). Here
every count is checked against the bytes left before anything is read for it (each entry takes
at least a known number of bytes), every length against the frame's end.

Layout after the request header: transactional id (v3+: nullable string, compact in the
flexible versions), acks int16, timeout int32, topics (array: name string, partitions (array:
index int32, records nullable bytes, tagged fields when flexible), tagged fields when flexible),
tagged fields when flexible. Writing a request again copies every byte of the frame but the
records fields given anew (and their lengths), so acks, timeout, transactional id, order and
tagged fields stay as the client sent them.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from sidecar.errors import ProtocolError
from sidecar.proxy.frames import RequestHeader, skip_tagged_fields
from sidecar.wire.varint import read_uvarint, uvarint

#: The Produce versions read: from v3 (record batches v2) to v12; v13 names topics by id.
FIRST_VERSION: Final = 3
LAST_VERSION: Final = 12
_INT16: Final = struct.Struct(">h")
_INT32: Final = struct.Struct(">i")
#: The fewest bytes of one topic entry (name length, partition count[, tagged fields]) and of
#: one partition entry (index, records length[, tagged fields]), classic and flexible.
_MIN_TOPIC_BYTES: Final = {False: 2 + 4, True: 1 + 1 + 1}
_MIN_PARTITION_BYTES: Final = {False: 4 + 4, True: 4 + 1 + 1}


# init=False: these are made per request, so their __init__ is written here and compiled (see
# deploy/build_backend.py); the one dataclasses generates would run interpreted.


@dataclass(slots=True, init=False)
class PartitionData:
    """One partition of a Produce request: its index and records (None: null)."""

    index: int
    records: bytes | None
    #: Where its records field (length included) starts and ends in the frame.
    start: int
    end: int

    def __init__(self, index: int, records: bytes | None, start: int, end: int) -> None:
        self.index = index
        self.records = records
        self.start = start
        self.end = end


@dataclass(slots=True, init=False)
class TopicData:
    """One topic of a Produce request and its partitions, in request order."""

    name: str
    partitions: list[PartitionData]

    def __init__(self, name: str, partitions: list[PartitionData]) -> None:
        self.name = name
        self.partitions = partitions


@dataclass(slots=True, init=False)
class ProduceRequest:
    """A Produce request frame, read (see module)."""

    header: RequestHeader
    flexible: bool
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topics: list[TopicData]

    def __init__(
        self,
        header: RequestHeader,
        flexible: bool,
        transactional_id: str | None,
        acks: int,
        timeout_ms: int,
        topics: list[TopicData],
    ) -> None:
        self.header = header
        self.flexible = flexible
        self.transactional_id = transactional_id
        self.acks = acks
        self.timeout_ms = timeout_ms
        self.topics = topics


def parse_produce(frame: bytes, header: RequestHeader, flexible: bool) -> ProduceRequest:
    """The Produce request `frame` (size prefix excluded) whose `header` was read.

    Raises:
        ProtocolError: a version not read, or a count or length past the frame's end.
    """
    if not FIRST_VERSION <= header.version <= LAST_VERSION:
        raise ProtocolError(
            f"Produce v{header.version} is not read by the proxy (v{FIRST_VERSION}-v{LAST_VERSION})"
        )
    reader = _Reader(frame, header.size, flexible)
    transactional_id = reader.string("transactional id", nullable=True)
    acks = reader.int16()
    timeout_ms = reader.int32()
    topics = []
    for _ in range(reader.count("topics", _MIN_TOPIC_BYTES[flexible])):
        name = reader.string("topic name", nullable=False)
        assert name is not None
        partitions = []
        for _ in range(reader.count("partitions", _MIN_PARTITION_BYTES[flexible])):
            index = reader.int32()
            start = reader.pos
            records = reader.bytes_field()
            partitions.append(PartitionData(index, records, start, reader.pos))
            reader.tagged()
        reader.tagged()
        topics.append(TopicData(name, partitions))
    reader.tagged()
    if reader.pos != len(frame):
        raise ProtocolError(f"a Produce request has {len(frame) - reader.pos} bytes after its end")
    return ProduceRequest(header, flexible, transactional_id, acks, timeout_ms, topics)


def encode_produce(
    frame: bytes, request: ProduceRequest, records: Mapping[tuple[int, int], bytes]
) -> bytes:
    """The request frame, size prefix included, with the records of partition (topic number,
    partition number) replaced by `records[...]`; every other byte as in `frame`."""
    parts: list[bytes] = [b""]
    copied = 0
    for t, topic in enumerate(request.topics):
        for p, partition in enumerate(topic.partitions):
            new = records.get((t, p))
            if new is None:
                continue
            parts.append(frame[copied : partition.start])
            if request.flexible:
                parts.append(uvarint(len(new) + 1))
            else:
                parts.append(_INT32.pack(len(new)))
            parts.append(new)
            copied = partition.end
    parts.append(frame[copied:])
    size = sum(map(len, parts))
    parts[0] = _INT32.pack(size)
    return b"".join(parts)


class _Reader:
    """Fields read in order from `frame`, every one checked against its end."""

    __slots__ = ("flexible", "frame", "pos")

    def __init__(self, frame: bytes, pos: int, flexible: bool) -> None:
        self.frame = frame
        self.pos = pos
        self.flexible = flexible

    def _need(self, size: int, what: str) -> None:
        if size < 0 or self.pos + size > len(self.frame):
            raise ProtocolError(
                f"a Produce request's {what} of {size} bytes at byte {self.pos} runs past the "
                f"end of the {len(self.frame)}-byte frame"
            )

    def int16(self) -> int:
        self._need(_INT16.size, "int16")
        value: int = _INT16.unpack_from(self.frame, self.pos)[0]
        self.pos += _INT16.size
        return value

    def int32(self) -> int:
        self._need(_INT32.size, "int32")
        value: int = _INT32.unpack_from(self.frame, self.pos)[0]
        self.pos += _INT32.size
        return value

    def _length(self) -> int:
        """A length or count: compact (stored + 1, 0 for null: -1) or classic."""
        if self.flexible:
            pos = self.pos
            if pos < len(self.frame) and self.frame[pos] < 0x80:  # one byte: most lengths
                self.pos = pos + 1
                return self.frame[pos] - 1
            stored, self.pos = read_uvarint(self.frame, pos, len(self.frame))
            return stored - 1
        return self.int32()

    def count(self, what: str, min_entry_bytes: int) -> int:
        """An array's count, checked against the bytes left before any entry is read."""
        count = self._length()
        left = len(self.frame) - self.pos
        if count < 0 or count * min_entry_bytes > left:
            raise ProtocolError(
                f"a Produce request declares {count} {what} in the {left} bytes left of its frame"
            )
        return count

    def string(self, what: str, *, nullable: bool) -> str | None:
        length = self._length() if self.flexible else self.int16()
        if length < 0:
            if not nullable:
                raise ProtocolError(f"a Produce request's {what} is null")
            return None
        self._need(length, what)
        raw = self.frame[self.pos : self.pos + length]
        self.pos += length
        try:
            return raw.decode()
        except UnicodeDecodeError:
            raise ProtocolError(f"a Produce request's {what} is not UTF-8") from None

    def bytes_field(self) -> bytes | None:
        length = self._length()
        if length < 0:
            return None
        self._need(length, "records")
        data = self.frame[self.pos : self.pos + length]
        self.pos += length
        return data

    def tagged(self) -> None:
        if self.flexible:
            pos = self.pos
            if pos < len(self.frame) and self.frame[pos] == 0:  # none: the usual case
                self.pos = pos + 1
            else:
                self.pos = skip_tagged_fields(self.frame, pos)
