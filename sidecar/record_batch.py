"""Kafka's record-batch format (v2, KIP-98) as bytes: what a producer sends and a broker stores.

Pure: no Kafka client, no I/O. `bench codec` uses it to measure producer batch compression
offline exactly as Kafka frames it (each record's length, attributes, timestamp and offset
deltas, key, value and headers, then the batch's 61-byte header, uncompressed, in front of the
records, which are compressed as one block); `bench storage` checks the same sizes on a real
broker and reads its segment files back with `read_batches`. The proxy reads and writes
batches by hand (`sidecar.proxy.batches`, `sidecar.proxy.fetched`) with the layout's constants
and the varints here; its tests write whole batches and read them back with
`tests/record_batches.py`.

Layout (Kafka's `DefaultRecordBatch` and `DefaultRecord`):

* batch header, 61 bytes: baseOffset int64, batchLength int32, partitionLeaderEpoch int32,
  magic int8 (= 2), crc uint32, attributes int16 (bits 0-2: compression codec), lastOffsetDelta
  int32, baseTimestamp int64, maxTimestamp int64, producerId int64, producerEpoch int16,
  baseSequence int32, records count int32;
* then the records (compressed together when the codec is not none), each: length varint,
  attributes int8, timestampDelta varlong, offsetDelta varint, key length varint (-1: null) and
  key, value length varint (-1: null) and value, header count varint, and per header its key
  length varint, key, value length varint (-1: null), value. Varints are zig-zag encoded.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import lz4.frame
import zstandard

from sidecar.errors import MalformedBatch

#: Bytes of a v2 record batch's header (everything before its records).
BATCH_HEADER_BYTES: Final = 61
#: Bytes from a batch's start to the end of its batchLength field (what batchLength excludes).
LOG_OVERHEAD: Final = 12
#: The compression codec in bits 0-2 of a batch's attributes.
CODECS: Final = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}

Header = tuple[str, bytes | None]
Record = tuple[bytes | None, Sequence[Header]]
"""(value, headers) of one record; keys are null, as the relay's benchmarks produce them."""


def varint(n: int) -> bytes:
    """Kafka's zig-zag varint (also its varlong) of a signed integer."""
    zigzag = (n << 1) ^ (n >> 63)
    out = bytearray()
    while zigzag >= 0x80:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


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


Compress = Callable[[bytes], bytes]


def batch_bytes(records: Sequence[Record], compress: Compress | None = None) -> int:
    """Bytes of one record batch holding `records`: header plus (compressed) records.

    As librdkafka sends it: a batch that compression would not shrink goes uncompressed
    (rdkafka_msgset_writer.c drops the compressed copy), which matters for batches of one or two
    small records.
    """
    section = records_section(records)
    if compress is None:
        return BATCH_HEADER_BYTES + len(section)
    return BATCH_HEADER_BYTES + min(len(section), len(compress(section)))


def stored_bytes(records: Sequence[Record], fill: int, compress: Compress | None = None) -> int:
    """Bytes of `records` stored in consecutive batches of `fill` records (the last may hold
    fewer), each compressed on its own as a producer does."""
    if fill < 1:
        raise ValueError(f"fill must be at least 1, got {fill}")
    return sum(batch_bytes(records[i : i + fill], compress) for i in range(0, len(records), fill))


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """One record batch read from a log segment: where, how large, how many records, codec."""

    base_offset: int
    size: int  # bytes in the segment, header included
    records: int
    codec: str


_HEADER: Final = struct.Struct(">qiiBIhiqqqhii")


def read_batches(data: bytes) -> Iterator[BatchInfo]:
    """The record batches of a log segment's bytes (a `.log` file), in order.

    Stops at a truncated batch at the end (a segment being written). Raises `ValueError` for
    a batch of another format (magic other than 2): message sets of Kafka < 0.11 are not read.
    """
    pos = 0
    while pos + BATCH_HEADER_BYTES <= len(data):
        (base, length, _epoch, magic, _crc, attributes, *_rest, count) = _HEADER.unpack_from(
            data, pos
        )
        size = LOG_OVERHEAD + length
        if pos + size > len(data):
            return
        if magic != 2:
            raise ValueError(f"record batch at byte {pos} has magic {magic}; only v2 is read")
        yield BatchInfo(base, size, count, CODECS.get(attributes & 0x07, "unknown"))
        pos += size


def segment_batches(partition_dir: Path) -> list[BatchInfo]:
    """Every record batch in the `.log` segments of one partition directory, oldest first."""
    out: list[BatchInfo] = []
    for segment in sorted(partition_dir.glob("*.log")):
        out.extend(read_batches(segment.read_bytes()))
    return out


#: librdkafka's default `compression.level` (-1) means each codec's default: 3 for zstd.
PRODUCER_ZSTD_LEVEL: Final = 3


def producer_codecs(zstd_level: int = PRODUCER_ZSTD_LEVEL) -> dict[str, Compress]:
    """Batch codecs as librdkafka applies them: zstd at `zstd_level` (default: its default
    level); lz4 frames."""
    return {"zstd": producer_zstd(zstd_level), "lz4": lz4.frame.compress}


def producer_zstd(level: int = PRODUCER_ZSTD_LEVEL) -> Compress:
    """librdkafka's zstd at `compression.level` `level`, byte for byte: a stream whose size is
    not pledged (no content size in the frame header, parameters not fitted to the size), as
    the broker's log segments show it. The one-shot `compress` writes frames about 2 bytes a
    batch larger (1,908 B over 1,024 batches of 4 events). Not thread-safe: one per thread."""
    compressor = zstandard.ZstdCompressor(level=level)

    def compress(data: bytes) -> bytes:
        stream = compressor.compressobj()
        return stream.compress(data) + stream.flush()

    return compress


def crossover(fills: Sequence[int], ours: Sequence[float], theirs: Sequence[float]) -> float | None:
    """The batch fill at which `theirs` (bytes per message) falls to `ours`.

    Linear in log2(fill) between the two measured fills around the crossing; `fills[0]` if
    `theirs` is already no larger there; None if it never gets there within `fills`.
    """
    if not fills or not len(fills) == len(ours) == len(theirs):
        raise ValueError("fills, ours and theirs must be non-empty and of one length")
    gaps = [t - o for o, t in zip(ours, theirs, strict=True)]
    if gaps[0] <= 0:
        return float(fills[0])
    for i in range(1, len(fills)):
        if gaps[i] <= 0:
            lo, hi = math.log2(fills[i - 1]), math.log2(fills[i])
            share = gaps[i - 1] / (gaps[i - 1] - gaps[i])
            return float(2 ** (lo + share * (hi - lo)))
    return None


# -- read and written by the proxy by hand (`sidecar.proxy`) ---------------------------------------

#: The attribute bit of a control batch (transaction markers), which the proxy passes untouched.
CONTROL_BIT: Final = 0x20


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """Kafka's zig-zag varint at `pos`: (value, position after it).

    Raises:
        MalformedBatch: `data` ends inside it, or it runs past 10 bytes.
    """
    try:
        byte = data[pos]
        if byte < 0x80:  # most lengths and deltas of small records: one byte
            return (byte >> 1) ^ -(byte & 1), pos + 1
        result, shift = byte & 0x7F, 7
        while True:
            pos += 1
            byte = data[pos]
            result |= (byte & 0x7F) << shift
            if byte < 0x80:
                return (result >> 1) ^ -(result & 1), pos + 1
            shift += 7
            if shift > 63:
                raise MalformedBatch("a varint is longer than 10 bytes")
    except IndexError:
        raise MalformedBatch("a record ends inside a varint (truncated)") from None


def uvarint(n: int) -> bytes:
    """The protocol's unsigned varint of `n` >= 0 (compact lengths and counts of flexible
    versions)."""
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)
