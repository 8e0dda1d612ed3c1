"""Kafka's record-batch format (v2, KIP-98): the header's layout, records written as Kafka lays
them out, and the batches of a log segment's bytes read.

Pure: no Kafka client, no I/O. The proxy reads and writes batches by hand on its per-record path
(`sidecar.proxy.batches`, `sidecar.proxy.fetched`) with the offsets and structs here; the size
models (`sidecar.record_batch`, `sidecar.stored_estimate`) write records with `record_bytes`.

Layout (Kafka's `DefaultRecordBatch` and `DefaultRecord`):

* batch header, 61 bytes: baseOffset int64, batchLength int32, partitionLeaderEpoch int32,
  magic int8 (= 2), crc uint32, attributes int16 (bits 0-2: compression codec, bit 5: control),
  lastOffsetDelta int32, baseTimestamp int64, maxTimestamp int64, producerId int64,
  producerEpoch int16, baseSequence int32, records count int32; the CRC-32C covers everything
  from the attributes to the batch's end;
* then the records (compressed together when the codec is not none), each: length varint,
  attributes int8, timestampDelta varlong, offsetDelta varint, key length varint (-1: null) and
  key, value length varint (-1: null) and value, header count varint, and per header its key
  length varint, key, value length varint (-1: null), value. Varints are zig-zag encoded
  (`sidecar.wire.varint`).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from sidecar.wire.varint import varint

#: The whole header, its 13 fields in order (indices below).
HEADER: Final = struct.Struct(">qiiBIhiqqqhii")
#: Bytes of a v2 record batch's header (everything before its records).
BATCH_HEADER_BYTES: Final = 61
#: Bytes from a batch's start to the end of its batchLength field (what batchLength excludes).
LOG_OVERHEAD: Final = 12
#: The header's first fields, up to the CRC: baseOffset, batchLength, partitionLeaderEpoch,
#: magic, crc.
BEFORE_CRC: Final = struct.Struct(">qiiBI")
#: The header's fields the CRC-32C covers: attributes, lastOffsetDelta, baseTimestamp,
#: maxTimestamp, producerId, producerEpoch, baseSequence, records count.
AFTER_CRC: Final = struct.Struct(">hiqqqhii")
#: The header up to the attributes: baseOffset, batchLength, partitionLeaderEpoch, magic, crc,
#: attributes.
TO_ATTRIBUTES: Final = struct.Struct(">qiiBIh")
#: Byte offsets in a batch: the batchLength field, the CRC-32C field, the attributes (where the
#: bytes it covers start), the records count.
LENGTH_AT: Final = 8
CRC_AT: Final = 17
ATTRIBUTES_AT: Final = 21
COUNT_AT: Final = 57
#: Indices of `HEADER`'s fields.
BASE_OFFSET: Final = 0
LENGTH: Final = 1
MAGIC: Final = 3
CRC: Final = 4
ATTRIBUTES: Final = 5
LAST_OFFSET_DELTA: Final = 6
BASE_TIMESTAMP: Final = 7
RECORDS: Final = 12
#: The only magic read and written.
MAGIC_V2: Final = 2
#: The compression codec in bits 0-2 of a batch's attributes.
CODEC_MASK: Final = 0x07
CODECS: Final = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
#: The attribute bit of a control batch (transaction markers).
CONTROL_BIT: Final = 0x20

Header = tuple[str, bytes | None]
Record = tuple[bytes | None, Sequence[Header]]
"""(value, headers) of one record; keys are null, as the relay's benchmarks produce them."""


def _sized(data: bytes | None) -> bytes:
    return varint(-1) if data is None else varint(len(data)) + data


def record_bytes(
    value: bytes | None,
    headers: Sequence[Header] = (),
    *,
    offset_delta: int = 0,
    timestamp_delta: int = 0,
    key: bytes | None = None,
) -> bytes:
    """One record as it appears inside a batch (its length prefix included)."""
    body = bytearray(b"\x00")  # attributes: unused by v2 records
    body += varint(timestamp_delta)
    body += varint(offset_delta)
    body += _sized(key)
    body += _sized(value)
    body += varint(len(headers))
    for name, header in headers:
        body += _sized(name.encode())
        body += _sized(header)
    return varint(len(body)) + bytes(body)


def records_section(records: Sequence[Record]) -> bytes:
    """The records of one batch, offset deltas 0..n-1, one timestamp (delta 0), null keys."""
    return b"".join(
        record_bytes(value, headers, offset_delta=i) for i, (value, headers) in enumerate(records)
    )


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """One record batch read from a log segment: where, how large, how many records, codec."""

    base_offset: int
    size: int  # bytes in the segment, header included
    records: int
    codec: str


def read_batches(data: bytes) -> Iterator[BatchInfo]:
    """The record batches of a log segment's bytes (a `.log` file), in order.

    Stops at a truncated batch at the end (a segment being written). Raises `ValueError` for
    a batch of another format (magic other than 2): message sets of Kafka < 0.11 are not read.
    """
    pos = 0
    while pos + BATCH_HEADER_BYTES <= len(data):
        fields = HEADER.unpack_from(data, pos)
        size = LOG_OVERHEAD + fields[LENGTH]
        if pos + size > len(data):
            return
        magic = fields[MAGIC]
        if magic != MAGIC_V2:
            raise ValueError(f"record batch at byte {pos} has magic {magic}; only v2 is read")
        codec = CODECS.get(fields[ATTRIBUTES] & CODEC_MASK, "unknown")
        yield BatchInfo(fields[BASE_OFFSET], size, fields[RECORDS], codec)
        pos += size
