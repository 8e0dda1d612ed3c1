"""Whole v2 record batches written and read back, for the proxy's tests (unit and integration):
`encode_batch` writes one as a producer sends it (`NewRecord`s, codec none, gzip, lz4 or zstd,
offsets 0..n-1, producer fields and attribute bits as given), `decode_batches` reads the batches
of one partition's records field (CRC-32C checked, gzip, lz4 and zstd decompressed within a
bound, snappy refused) into `DecodedBatch`es of `DecodedRecord`s: the reference reader the tests
check the proxy's rewritten and decoded batches with.

Kept beside the tests rather than in `sidecar.wire.record_batch` (the layout, and what the
product reads and writes): the product writes and reads batches by hand (`sidecar.proxy.batches`,
`sidecar.proxy.fetched`) and uses none of this.
"""

from __future__ import annotations

import io
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import lz4.frame
import zstandard
from crc32c import crc32c

from sidecar.errors import MalformedBatch
from sidecar.record_batch import PRODUCER_ZSTD_LEVEL
from sidecar.wire.record_batch import (
    BATCH_HEADER_BYTES,
    CODECS,
    CONTROL_BIT,
    LOG_OVERHEAD,
    record_bytes,
)
from sidecar.wire.varint import read_varint

_HEADER: Final = struct.Struct(">qiiBIhiqqqhii")
#: Attribute bits of a v2 batch besides the codec and CONTROL_BIT (Kafka's `DefaultRecordBatch`).
TIMESTAMP_TYPE_BIT: Final = 0x08  # 0: CreateTime, 1: LogAppendTime
TRANSACTIONAL_BIT: Final = 0x10
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
            "snappy-compressed batch: this reader does not decode snappy (the proxy's "
            "compression.py does); write the batch with compression.type zstd, lz4, gzip or none",
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
            f"the batch decompresses to more than {limit} bytes (the reader's bound)"
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
