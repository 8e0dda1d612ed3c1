"""The record batches of one Produce partition rewritten in place: values encoded, the rest kept.

Pure: no Kafka client, no I/O. Per v2 batch (layout in `sidecar.wire.record_batch`): the header is
read and checked (whole, magic 2, CRC-32C), a control batch passes untouched, a compressed one is
decompressed within bounds (`compression`: gzip, lz4, zstd, snappy raw or xerial), every record is
read with each length checked against the bytes left; written again with its values encoded
(attributes, timestamp delta, offset delta, key and the client's headers byte for byte, ours
added), or as it came (which: `batch_choice`). The batch header keeps every field and attribute
bit but the codec, which becomes the output codec (`producer`: the batch's own, so that consumers
read what their producers write); the CRC-32C is computed again.

Refused (`ProduceRefused`, with the Kafka error the client gets): a batch that is truncated, of
another magic, declares more records than its bytes can hold, or whose offset deltas are not
0..n-1 in order with a last offset delta of n-1 (INVALID_RECORD); a CRC mismatch
or data that does not decompress (CORRUPT_MESSAGE); an unknown codec
(UNSUPPORTED_COMPRESSION_TYPE); a batch decompressing past its bound (MESSAGE_TOO_LARGE) or a
request past its bounds of records or decompressed bytes (RECORD_LIST_TOO_LARGE); a record
carrying our header, a header key that is not UTF-8 (INVALID_RECORD); a value above what the
decoders accept (MESSAGE_TOO_LARGE); a timestamp below -1 or past 2^63 - 1 ms
(INVALID_TIMESTAMP).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Final, TypeVar

from crc32c import crc32c

from sidecar.batch_compression import CODEC_IDS, Compression
from sidecar.codec import Transformed
from sidecar.errors import CodecError, MalformedBatch, ProduceRefused
from sidecar.record_batch import PRODUCER_ZSTD_LEVEL
from sidecar.wire.record_batch import (
    AFTER_CRC,
    ATTRIBUTES_AT,
    BATCH_HEADER_BYTES,
    BEFORE_CRC,
    CODEC_MASK,
    CONTROL_BIT,
    HEADER,
    LOG_OVERHEAD,
    MAGIC_V2,
)
from sidecar.wire.varint import read_varint, varint

#: Kafka error codes the refusals carry.
CORRUPT_MESSAGE: Final = 2
MESSAGE_TOO_LARGE: Final = 10
RECORD_LIST_TOO_LARGE: Final = 18
INVALID_TIMESTAMP: Final = 32
UNSUPPORTED_COMPRESSION_TYPE: Final = 76
INVALID_RECORD: Final = 87
#: `proxy.output_compression` that keeps each batch's own codec.
PRODUCER: Final = "producer"
#: The smallest record: length, attributes, timestamp delta, offset delta, key length, value
#: length, header count, one byte each. A batch declaring more records than its bytes hold
#: this many is refused before any record is read.
MIN_RECORD_BYTES: Final = 7
#: Highest timestamp a record may carry (milliseconds; a Java long). -1 means none.
MAX_TIMESTAMP: Final = 2**63 - 1
NO_TIMESTAMP: Final = -1
#: Records read, or written, in one step (`BatchRewriter.read_steps`, `framed_steps`): the
#: proxy's event loop serves other connections between two steps.
STEP_RECORDS: Final = 4096
#: Records sections shorter than this are written uncompressed: their values are frames
#: already, or short, and a compressor's frame header and setup cost more than it could save.
MIN_COMPRESSED: Final = 256
#: Lengths below this have their varint looked up rather than computed.
_SMALL: Final = 16384
_SMALL_VARINTS: Final = tuple(varint(n) for n in range(_SMALL))

#: One record as read: (attributes, timestamp delta, offset delta and key as they came), value,
#: header count, headers, the headers as they came.
_Record = tuple[bytes, bytes | None, int, Sequence[tuple[bytes, bytes | None]], bytes]
#: The namespace's encoder over (value, headers) pairs (`Namespace.encode`).
Inputs = list[tuple[bytes | None, list[tuple[str, bytes | None]] | None]]
Encode = Callable[[Inputs], list[Transformed]]
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class BatchLimits:
    """How batches are checked and written."""

    #: Bytes one batch may decompress to.
    max_batch_bytes: int
    #: Bytes one value may have: what the decoders accept (codec.max_output_size).
    max_value_bytes: int
    #: Our header's key: a client may not send it.
    header_key: str
    #: none, gzip, snappy, lz4 or zstd: how rewritten batches are compressed.
    output_codec: str


class Allowance:
    """What is left of one request's bounds: records, and bytes decompressed."""

    __slots__ = ("bytes_left", "records_left")

    def __init__(self, max_records: int, max_decompressed_bytes: int) -> None:
        self.records_left = max_records
        self.bytes_left = max_decompressed_bytes

    def take_records(self, count: int) -> None:
        """Count `count` more records against the request.

        Raises:
            ProduceRefused: past the request's bound (RECORD_LIST_TOO_LARGE).
        """
        if count > self.records_left:
            raise ProduceRefused(
                RECORD_LIST_TOO_LARGE,
                "too_many_records",
                "the request holds more records than the proxy takes in one request "
                "(ZDICT_PROXY__MAX_RECORDS_PER_REQUEST): lower the producer's batch.size or "
                "max.request.size",
            )
        self.records_left -= count


@dataclass(slots=True, init=False)
class ReadBatch:
    """One batch as read: its bytes, header fields, how many records it holds, its records as
    read (none for a control batch, or one read for its values only: see `BatchRewriter.read`)
    and its records section uncompressed (what an unchanged batch is written again from)."""

    raw: bytes
    fields: tuple[int, ...]
    count: int
    records: list[_Record]
    control: bool
    plain: bytes

    # init=False: made per request, so its __init__ is written here and compiled (see
    # deploy/build_backend.py); the one dataclasses generates would run interpreted.
    def __init__(
        self,
        raw: bytes,
        fields: tuple[int, ...],
        count: int,
        records: list[_Record],
        control: bool,
        plain: bytes = b"",
    ) -> None:
        self.raw = raw
        self.fields = fields
        self.count = count
        self.records = records
        self.control = control
        self.plain = plain


@dataclass(slots=True, init=False)
class ReadPartition:
    """The batches of one partition's records field, and the codec's input of every record of
    its data batches, in order."""

    batches: list[ReadBatch]
    inputs: Inputs
    #: Bytes of the values of `inputs` (a null value: none).
    value_bytes: int
    #: Its batches written with frames of ours (`batch_choice.write_steps`; the rest went as
    #: their values came): what the proxy's output mode metric counts.
    framed: int

    # init=False: made per request, so its __init__ is written here and compiled (see
    # deploy/build_backend.py); the one dataclasses generates would run interpreted.
    def __init__(self, batches: list[ReadBatch], inputs: Inputs, value_bytes: int = 0) -> None:
        self.batches = batches
        self.inputs = inputs
        self.value_bytes = value_bytes
        self.framed = 0


class BatchRewriter:
    """Rewrites the batches of Produce partitions (see module); holds the codecs' compressors
    (one rewriter per thread).

    In two steps so that the records of every partition of a topic in a request are encoded
    in one call (the namespace's per-call cost, metrics and all, is paid once per request,
    and batches of a few records reach the codec's batch API together): `read` checks and
    reads, `batch_choice.write` writes again with the values encoded."""

    def __init__(self, limits: BatchLimits) -> None:
        if limits.output_codec not in CODEC_IDS and limits.output_codec != PRODUCER:
            raise ValueError(f"output codec must be {PRODUCER} or one of {sorted(CODEC_IDS)}")
        self.limits = limits
        self._header_key = limits.header_key.encode()
        #: The output codec's id; -1: each batch's own.
        self._codec_id = CODEC_IDS.get(limits.output_codec, -1)
        self._compression = Compression()

    def read(
        self, data: bytes, allowance: Allowance, values_from: float | None = None
    ) -> ReadPartition:
        """The batches of the records field `data`, checked and read; those holding at least
        `values_from` records (`batch_choice`: their values go raw) for their values only, their
        records not kept for writing (such a batch is written only as it came).

        Raises:
            ProduceRefused: a batch or record refused (see module).
        """
        return drained(self.read_steps(data, allowance, values_from))

    def read_steps(
        self, data: bytes, allowance: Allowance, values_from: float | None = None
    ) -> Generator[None, None, ReadPartition]:
        """`read` in steps of at most `STEP_RECORDS` records, None after each but the last.

        Raises:
            ProduceRefused: as `read`.
        """
        batches: list[ReadBatch] = []
        inputs: Inputs = []
        value_bytes = 0
        pos, size = 0, len(data)
        while pos < size:
            if pos + BATCH_HEADER_BYTES > size:
                raise _invalid(f"{size - pos} bytes left, fewer than a batch header (truncated)")
            fields = HEADER.unpack_from(data, pos)
            length, magic, crc, attributes, count = (
                fields[1],
                fields[3],
                fields[4],
                fields[5],
                fields[12],
            )
            end = pos + LOG_OVERHEAD + length
            if length < BATCH_HEADER_BYTES - LOG_OVERHEAD or end > size:
                raise _invalid(f"a batch of {length} bytes does not fit the request (truncated)")
            if magic != MAGIC_V2:
                raise _invalid(f"record batch of magic {magic}: only v2 (Kafka 0.11+) is taken")
            raw = data[pos:end]
            if crc32c(raw[ATTRIBUTES_AT:]) != crc:
                raise ProduceRefused(
                    CORRUPT_MESSAGE,
                    "corrupt",
                    "record batch CRC-32C mismatch (corrupted in transit)",
                )
            if count < 0:
                raise _invalid(f"a batch says it holds {count} records")
            pos = end
            if attributes & CONTROL_BIT:
                batches.append(ReadBatch(raw, fields, count, [], True))
                continue
            allowance.take_records(count)
            codec = attributes & CODEC_MASK
            section = raw[BATCH_HEADER_BYTES:]
            if codec:
                section = self._decompress(codec, section, allowance)
            if count > len(section) // MIN_RECORD_BYTES:
                raise _invalid(f"a batch says it holds {count} records in {len(section)} bytes")
            if fields[6] != count - 1:  # a broker would place the batch's offsets by it
                raise _invalid(
                    f"a batch of {count} records has last offset delta {fields[6]}, not {count - 1}"
                )
            records: list[_Record] = []
            kept = None if values_from is not None and count >= values_from else records
            value_bytes += yield from self._records_steps(section, count, fields[7], inputs, kept)
            batches.append(ReadBatch(raw, fields, count, records, False, section))
        return ReadPartition(batches, inputs, value_bytes)

    def _records_steps(
        self,
        section: bytes,
        count: int,
        base_timestamp: int,
        inputs: Inputs,
        records: list[_Record] | None,
    ) -> Generator[None, None, int]:
        """The `count` records of one batch's uncompressed `section` read (`_read_records`)
        `STEP_RECORDS` at a time; the bytes of their values."""
        value_bytes = first = offset = 0
        while True:
            upto = min(count, first + STEP_RECORDS)
            try:
                read_bytes, offset = _read_records(
                    section,
                    count,
                    base_timestamp,
                    self._header_key,
                    self.limits.max_value_bytes,
                    inputs,
                    records,
                    (first, upto, offset),
                )
            except MalformedBatch as exc:  # a varint cut short or too long
                raise _invalid(str(exc)) from None
            value_bytes += read_bytes
            first = upto
            if first >= count:
                return value_bytes
            yield None

    def write_as_read(self, partition: ReadPartition, level: int = PRODUCER_ZSTD_LEVEL) -> bytes:
        """The records field of `partition` with every value as it came (`as_read`)."""
        return b"".join(self.as_read(batch, level) for batch in partition.batches)

    def framed_steps(
        self, batch: ReadBatch, encoded: Sequence[Transformed], level: int
    ) -> Generator[None, None, bytes]:
        """`batch` written again with its values `encoded` (as many as its records, in order),
        compressed with the output codec (zstd at `level`), in steps of at most `STEP_RECORDS`
        records, None after each but the last."""
        if batch.count <= STEP_RECORDS:
            return self._write_batch(batch.fields, _write_records(batch.records, encoded), level)
        plain: list[bytes] = []
        for first in range(0, batch.count, STEP_RECORDS):
            upto = first + STEP_RECORDS
            plain.append(_write_records(batch.records[first:upto], encoded[first:upto]))
            yield None
        return self._write_batch(batch.fields, b"".join(plain), level)

    def same_codec(self, batch: ReadBatch) -> bool:
        """Whether `batch` came in the codec it is written with: as it came is its bytes."""
        return batch.fields[5] & CODEC_MASK == self._output(batch.fields)

    def as_read(self, batch: ReadBatch, level: int) -> bytes:
        """`batch` with its values as they came: as read (the client's level kept) when in the
        output codec, else its records compressed with it (zstd at `level`)."""
        if batch.control or self.same_codec(batch):
            return batch.raw
        return self._write_batch(batch.fields, batch.plain, level)

    def _decompress(self, codec: int, section: bytes, allowance: Allowance) -> bytes:
        batch_limit = self.limits.max_batch_bytes
        limit = min(batch_limit, allowance.bytes_left)
        try:
            plain = self._compression.decompress(codec, section, limit)
        except MalformedBatch as exc:
            if exc.reason == "codec":
                raise ProduceRefused(UNSUPPORTED_COMPRESSION_TYPE, "codec", str(exc)) from None
            raise ProduceRefused(CORRUPT_MESSAGE, "corrupt", str(exc)) from None
        if plain is None:
            if limit == batch_limit:
                raise ProduceRefused(
                    MESSAGE_TOO_LARGE,
                    "too_large",
                    f"a batch decompresses to more than {batch_limit} bytes "
                    "(ZDICT_PROXY__MAX_REQUEST_BYTES)",
                )
            raise ProduceRefused(
                RECORD_LIST_TOO_LARGE,
                "too_large",
                "the request's batches decompress to more than the proxy takes in one request "
                "(ZDICT_PROXY__MAX_DECOMPRESSED_REQUEST_BYTES)",
            )
        allowance.bytes_left -= len(plain)
        return plain

    def _output(self, fields: tuple[int, ...]) -> int:
        """The codec a batch of header `fields` is written with."""
        return fields[5] & CODEC_MASK if self._codec_id < 0 else self._codec_id

    def _write_batch(self, fields: tuple[int, ...], plain: bytes, level: int) -> bytes:
        codec = self._output(fields)
        body = (
            self._compression.compress(codec, plain, level)
            if codec and len(plain) >= MIN_COMPRESSED
            else plain
        )
        if len(body) >= len(plain):  # as librdkafka: a batch compression does not shrink goes plain
            codec, body = 0, plain
        # `fields` as `HEADER` read them: base offset, length, leader epoch, magic, CRC,
        # attributes, then the fields after the attributes as `AFTER_CRC` writes them.
        after_crc = AFTER_CRC.pack((fields[5] & ~CODEC_MASK) | codec, *fields[6:]) + body
        length = BATCH_HEADER_BYTES - LOG_OVERHEAD + len(body)
        return (
            BEFORE_CRC.pack(fields[0], length, fields[2], MAGIC_V2, crc32c(after_crc)) + after_crc
        )


def encode_checked(encode: Encode, inputs: Inputs) -> list[Transformed]:
    """`encode(inputs)`, a record the codec refuses refused as INVALID_RECORD.

    Raises:
        ProduceRefused: a record cannot be encoded.
    """
    try:
        return encode(inputs)
    except CodecError as exc:
        raise _invalid(f"a record cannot be encoded: {exc}") from None


def drained(steps: Generator[None, None, _T]) -> _T:
    """What the generator `steps` returns, run to its end."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            result: _T = done.value
            return result


def _invalid(reason: str) -> ProduceRefused:
    return ProduceRefused(INVALID_RECORD, "invalid_record", reason)


def _sized(data: bytes, pos: int, end: int, what: str) -> tuple[bytes | None, int]:
    length, pos = read_varint(data, pos)
    if length < 0:
        if length != -1:
            raise _invalid(f"a record's {what} has length {length}")
        return None, pos
    stop = pos + length
    if stop > end:
        raise _invalid(f"a record's {what} runs past the end of the record (truncated)")
    return data[pos:stop], stop


def _read_records(  # noqa: C901 - one loop per record, kept flat for speed
    section: bytes,
    count: int,
    base_timestamp: int,
    ours: bytes,
    max_value: int,
    inputs: Inputs,
    records: list[_Record] | None,
    span: tuple[int, int, int] | None = None,
) -> tuple[int, int]:
    """The bytes of the values of the `count` records of an uncompressed records `section`,
    each checked, and the position after the last one read; the codec's input of each (value,
    headers named) appended to `inputs`, and each record as read to `records` (None: not kept,
    the batch goes raw). `span`: (first, end, position of the first) to read records first to
    end - 1 only (the batch read in steps); None: all of them.

    The varints that fit one byte (small deltas, no key, no headers) or, for the record's and
    the value's length, two bytes (up to 8191) are read inline: this loop runs once per record
    on the proxy's Produce path, and a call per field was most of its cost.
    """
    add = inputs.append
    first, end, pos = (0, count, 0) if span is None else span
    size = len(section)
    value_bytes = 0
    try:
        for index in range(first, end):
            byte = section[pos]
            if byte < 0x80:
                length, pos = (byte >> 1) ^ -(byte & 1), pos + 1
            elif section[pos + 1] < 0x80:  # two bytes: records of 64-8191 bytes
                zigzag = (byte & 0x7F) | (section[pos + 1] << 7)
                length, pos = (zigzag >> 1) ^ -(zigzag & 1), pos + 2
            else:
                length, pos = read_varint(section, pos)
            stop = pos + length
            if length < MIN_RECORD_BYTES - 1 or stop > size:
                raise _invalid("a record's length runs past the end of its batch (truncated)")
            start = pos
            byte = section[pos + 1]  # after the attributes byte
            delta, pos = (
                ((byte >> 1) ^ -(byte & 1), pos + 2)
                if byte < 0x80
                else read_varint(section, pos + 1)
            )
            timestamp = base_timestamp + delta
            if timestamp < NO_TIMESTAMP or timestamp > MAX_TIMESTAMP:
                raise ProduceRefused(
                    INVALID_TIMESTAMP,
                    "timestamp",
                    f"a record's timestamp {timestamp} is outside -1..2^63-1 ms",
                )
            byte = section[pos]
            offset_delta, pos = (
                ((byte >> 1) ^ -(byte & 1), pos + 1) if byte < 0x80 else read_varint(section, pos)
            )
            if offset_delta != index:  # a broker stores an uncompressed batch's deltas as they are
                raise _invalid(
                    f"record {index} of a batch has offset delta {offset_delta}, not {index} "
                    "(a batch's offset deltas run 0..n-1 in order)"
                )
            byte = section[pos]
            key_length, pos = (
                ((byte >> 1) ^ -(byte & 1), pos + 1) if byte < 0x80 else read_varint(section, pos)
            )
            if key_length > 0:
                pos += key_length
            elif key_length < -1:
                raise _invalid(f"a record's key has length {key_length}")
            if pos > stop:
                raise _invalid("a record's key runs past the end of the record (truncated)")
            head = section[start:pos] if records is not None else b""
            byte = section[pos]
            if byte < 0x80:
                value_length, pos = (byte >> 1) ^ -(byte & 1), pos + 1
            elif section[pos + 1] < 0x80:  # two bytes: values of 64-8191 bytes
                zigzag = (byte & 0x7F) | (section[pos + 1] << 7)
                value_length, pos = (zigzag >> 1) ^ -(zigzag & 1), pos + 2
            else:
                value_length, pos = read_varint(section, pos)
            if value_length >= 0:
                value: bytes | None = section[pos : pos + value_length]
                pos += value_length
                if pos > stop:
                    raise _invalid("a record's value runs past the end of the record (truncated)")
            elif value_length == -1:
                value = None
            else:
                raise _invalid(f"a record's value has length {value_length}")
            if value_length > max_value:
                raise ProduceRefused(
                    MESSAGE_TOO_LARGE,
                    "value_too_large",
                    f"a value of {value_length} bytes is above the {max_value} bytes the "
                    "decoders accept (ZDICT_CODEC__MAX_OUTPUT_SIZE)",
                )
            if value_length > 0:
                value_bytes += value_length
            byte = section[pos]
            if byte == 0 and pos + 1 == stop:  # no headers
                if records is not None:
                    records.append((head, value, 0, (), b""))
                add((value, None))
                pos = stop
                continue
            header_count, pos = read_varint(section, pos)
            if header_count < 0 or header_count > length:
                raise _invalid(f"a record says it has {header_count} headers")
            first_header = pos
            headers, pos = _read_headers(section, pos, stop, header_count, ours)
            if pos != stop:
                raise _invalid("a record's fields do not add up to its length")
            if records is not None:
                records.append((head, value, header_count, headers, section[first_header:stop]))
            try:
                add((value, [(k.decode(), v) for k, v in headers] if headers else None))
            except UnicodeDecodeError:
                raise _invalid("a record header key is not UTF-8") from None
    except IndexError:
        raise _invalid("a record ends inside a varint (truncated)") from None
    if end == count and pos != size:
        raise _invalid("bytes left over after the batch's last record")
    return value_bytes, pos


def _read_headers(
    section: bytes, pos: int, stop: int, count: int, ours: bytes
) -> tuple[list[tuple[bytes, bytes | None]], int]:
    """(the `count` headers of a record ending at `stop`, the position after them)."""
    headers: list[tuple[bytes, bytes | None]] = []
    for _ in range(count):
        name, pos = _sized(section, pos, stop, "header key")
        if name is None:
            raise _invalid("a record header has a null key")
        # C clients (librdkafka) read a key up to its first NUL byte: `zd\x00x` is `zd` there.
        if name.split(b"\x00", 1)[0] == ours:
            raise _invalid(
                f"a record carries the header {ours.decode()!r} (or a key that C clients read "
                "as it, up to a NUL byte), which only the proxy writes: remove it"
            )
        header, pos = _sized(section, pos, stop, "header value")
        headers.append((name, header))
    return headers, pos


def _write_records(records: Sequence[_Record], encoded: Sequence[Transformed]) -> bytes:
    out = bytearray()
    last_header: tuple[str, bytes | None] | None = None
    last_bytes = b""
    small = _SMALL_VARINTS
    for (head, _value, count, _headers, headers_raw), enc in zip(records, encoded, strict=True):
        value = enc.value
        body = bytearray(head)
        if value is None:
            body += b"\x01"
        else:
            size = len(value)
            body += small[size] if size < _SMALL else varint(size)
            body += value
        headers = enc.headers  # None: a record written raw that came without headers
        added = headers[count:] if headers and len(headers) > count else ()
        body += varint(count + len(added))
        body += headers_raw
        for pair in added:
            if pair is not last_header:
                name_bytes = pair[0].encode()
                tag = pair[1]
                last_bytes = (
                    varint(len(name_bytes))
                    + name_bytes
                    + (b"\x01" if tag is None else varint(len(tag)) + tag)
                )
                last_header = pair
            body += last_bytes
        size = len(body)
        out += small[size] if size < _SMALL else varint(size)
        out += body
    return bytes(out)
