"""Kafka's record-batch format (v2, KIP-98) as bytes: what a producer sends and a broker stores.

Pure: no Kafka client, no I/O. `bench codec` uses it to measure producer batch compression
offline exactly as Kafka frames it (each record's length, attributes, timestamp and offset
deltas, key, value and headers, then the batch's 61-byte header, uncompressed, in front of the
records, which are compressed as one block); `bench storage` checks the same sizes on a real
broker and reads its segment files back with `read_batches`. The forwarding proxy's tests
write batches with `encode_batch` and read the proxy's output back with `decode_batches` (CRC
checked, gzip, lz4 and zstd decompressed within a bound; snappy refused).

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

import io
import math
import struct
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import lz4.frame
import zstandard
from crc32c import crc32c

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


def producer_codecs() -> dict[str, Compress]:
    """Batch codecs as librdkafka applies them: zstd at its default level; lz4 frames."""
    return {
        "zstd": zstandard.ZstdCompressor(level=PRODUCER_ZSTD_LEVEL).compress,
        "lz4": lz4.frame.compress,
    }


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


# -- decoding the batches of a Produce request ----------------------------------------------------

#: Attribute bits of a v2 batch besides the codec (Kafka's `DefaultRecordBatch`).
TIMESTAMP_TYPE_BIT: Final = 0x08  # 0: CreateTime, 1: LogAppendTime
TRANSACTIONAL_BIT: Final = 0x10
CONTROL_BIT: Final = 0x20
#: Where the CRC-32C of a batch starts (its attributes) and what it covers: the rest.
_CRC_START: Final = 21
NO_SEQUENCE: Final = -1


@dataclass(frozen=True, slots=True)
class DecodedRecord:
    """One record of a batch, its timestamp resolved (milliseconds since the epoch)."""

    offset_delta: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    #: Header keys as sent (UTF-8 in every Kafka client), values as bytes or None.
    headers: tuple[tuple[bytes, bytes | None], ...]


@dataclass(frozen=True, slots=True)
class DecodedBatch:
    """One v2 record batch of a Produce request, its records decompressed and parsed."""

    codec: str
    log_append_time: bool
    transactional: bool
    control: bool
    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_offset_delta: int
    records: list[DecodedRecord]

    @property
    def last_sequence(self) -> int:
        """The sequence number of the batch's last record (idempotent producers)."""
        return self.base_sequence + self.last_offset_delta


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


def _read_sized(data: bytes, pos: int, what: str) -> tuple[bytes | None, int]:
    length, pos = read_varint(data, pos)
    if length < 0:
        if length != -1:
            raise MalformedBatch(f"a record's {what} has length {length}")
        return None, pos
    end = pos + length
    if end > len(data):
        raise MalformedBatch(f"a record's {what} runs past the end of its batch (truncated)")
    return data[pos:end], end


def _decompress(codec: int, data: bytes, limit: int) -> bytes:
    """The records section of a compressed batch, refused past `limit` bytes (a bomb)."""
    if codec == 2:
        raise MalformedBatch(
            "snappy-compressed batch: the proxy does not decode snappy (no snappy library in "
            "the image); set the producer's compression.type to zstd, lz4, gzip or none",
            "codec",
        )
    if codec not in (1, 3, 4):
        raise MalformedBatch(f"unknown compression codec {codec} in the batch attributes", "codec")
    try:
        if codec == 1:
            out = zlib.decompressobj(wbits=47).decompress(data, limit + 1)
        elif codec == 3:
            out = lz4.frame.LZ4FrameDecompressor().decompress(data, max_length=limit + 1)
        else:
            reader = zstandard.ZstdDecompressor().stream_reader(
                io.BytesIO(data), read_across_frames=True
            )
            out = reader.read(limit + 1)
    except (zlib.error, zstandard.ZstdError, RuntimeError, ValueError) as exc:
        raise MalformedBatch(
            f"{CODECS[codec]} data of the batch does not decompress: {exc}"
        ) from None
    if len(out) > limit:
        raise MalformedBatch(
            f"the batch decompresses to more than {limit} bytes (the proxy's "
            "ZDICT_PROXY__MAX_REQUEST_BYTES)"
        )
    return out


def _records(section: bytes, count: int, base_timestamp: int) -> list[DecodedRecord]:
    records: list[DecodedRecord] = []
    pos, end = 0, len(section)
    for _ in range(count):
        length, pos = read_varint(section, pos)
        stop = pos + length
        if length < 1 or stop > end:
            raise MalformedBatch("a record's length runs past the end of its batch (truncated)")
        pos += 1  # attributes: unused in v2
        timestamp_delta, pos = read_varint(section, pos)
        offset_delta, pos = read_varint(section, pos)
        key, pos = _read_sized(section, pos, "key")
        value, pos = _read_sized(section, pos, "value")
        header_count, pos = read_varint(section, pos)
        if header_count < 0 or header_count > length:
            raise MalformedBatch(f"a record says it has {header_count} headers")
        headers: list[tuple[bytes, bytes | None]] = []
        for _ in range(header_count):
            name, pos = _read_sized(section, pos, "header key")
            if name is None:
                raise MalformedBatch("a record header has a null key")
            header, pos = _read_sized(section, pos, "header value")
            headers.append((name, header))
        if pos != stop:
            raise MalformedBatch("a record's fields do not add up to its length")
        records.append(
            DecodedRecord(
                offset_delta, base_timestamp + timestamp_delta, key, value, tuple(headers)
            )
        )
    if pos != end:
        raise MalformedBatch("bytes left over after the batch's last record")
    return records


def decode_batches(data: bytes, max_bytes: int) -> list[DecodedBatch]:
    """The record batches of one partition's `records` in a Produce request, in order.

    Every batch must be whole, of magic 2, with a matching CRC-32C; a compressed one may not
    decompress to more than `max_bytes`.

    Raises:
        MalformedBatch: naming what is wrong (truncated, magic, CRC, codec, counts, size).
    """
    batches: list[DecodedBatch] = []
    pos = 0
    while pos < len(data):
        if pos + BATCH_HEADER_BYTES > len(data):
            raise MalformedBatch(
                f"{len(data) - pos} bytes left, fewer than a batch header (truncated)"
            )
        (
            _base,
            length,
            _epoch,
            magic,
            crc,
            attributes,
            last_offset_delta,
            base_timestamp,
            _max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        ) = _HEADER.unpack_from(data, pos)
        end = pos + LOG_OVERHEAD + length
        if length < BATCH_HEADER_BYTES - LOG_OVERHEAD or end > len(data):
            raise MalformedBatch(f"a batch of {length} bytes does not fit the request (truncated)")
        if magic != 2:
            raise MalformedBatch(
                f"record batch of magic {magic}; only v2 (Kafka 0.11 and later clients) is read"
            )
        if crc32c(data[pos + _CRC_START : end]) != crc:
            raise MalformedBatch("record batch CRC-32C mismatch (corrupted in transit)", "corrupt")
        if count < 0 or count > length:
            raise MalformedBatch(f"a batch says it holds {count} records")
        section = data[pos + BATCH_HEADER_BYTES : end]
        codec = attributes & 0x07
        if codec:
            section = _decompress(codec, section, max_bytes)
        batches.append(
            DecodedBatch(
                codec=CODECS.get(codec, "unknown"),
                log_append_time=bool(attributes & TIMESTAMP_TYPE_BIT),
                transactional=bool(attributes & TRANSACTIONAL_BIT),
                control=bool(attributes & CONTROL_BIT),
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                base_sequence=base_sequence,
                last_offset_delta=last_offset_delta,
                records=_records(section, count, base_timestamp),
            )
        )
        pos = end
    return batches


@dataclass(frozen=True, slots=True)
class NewRecord:
    """A record to write into a batch (`encode_batch`): timestamp in milliseconds."""

    value: bytes | None
    key: bytes | None = None
    headers: Sequence[tuple[str, bytes | None]] = ()
    timestamp: int = 0


def encode_batch(
    records: Sequence[NewRecord],
    *,
    codec: str = "none",
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = NO_SEQUENCE,
    attributes: int = 0,
) -> bytes:
    """One v2 record batch as a producer sends it: header, CRC-32C, records (compressed with
    `codec`: none, gzip, lz4 or zstd); offsets 0..n-1. `attributes` adds bits (tests)."""
    if not records:
        raise ValueError("a batch holds at least one record")
    base_timestamp = records[0].timestamp
    section = b"".join(
        record_bytes(
            r.value,
            r.headers,
            offset_delta=i,
            timestamp_delta=r.timestamp - base_timestamp,
            key=r.key,
        )
        for i, r in enumerate(records)
    )
    codes = {name: code for code, name in CODECS.items()}
    if codec == "gzip":
        section = _gzip(section)
    elif codec == "lz4":
        section = lz4.frame.compress(section)
    elif codec == "zstd":
        section = zstandard.ZstdCompressor(level=PRODUCER_ZSTD_LEVEL).compress(section)
    elif codec != "none":
        raise ValueError(f"codec must be none, gzip, lz4 or zstd, not {codec!r}")
    attrs = attributes | codes[codec]
    after_crc = (
        struct.pack(
            ">hiqqqhii",
            attrs,
            len(records) - 1,
            base_timestamp,
            max(r.timestamp for r in records),
            producer_id,
            producer_epoch,
            base_sequence,
            len(records),
        )
        + section
    )
    length = 4 + 1 + 4 + len(after_crc)  # partitionLeaderEpoch, magic, crc, then the rest
    return struct.pack(">qiiBI", 0, length, -1, 2, crc32c(after_crc)) + after_crc


def _gzip(data: bytes) -> bytes:
    compressor = zlib.compressobj(wbits=31)
    return compressor.compress(data) + compressor.flush()
