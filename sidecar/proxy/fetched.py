"""The records of one fetched partition, decoded for the client: what the proxy
sends in place of the record batches a broker returned.

Pure: bytes in, bytes out, no Kafka client and no I/O (the decoder's resolver may read the
registry, which is its business). Each v2 record batch (layout in `sidecar.wire.record_batch`) is:

* **rewritten** when a record in it carries the codec's header (`zd`): each such record's value
  is decoded, the header dropped; every other byte of every record (attributes, timestamp and
  offset deltas, key, the other headers, in order) is copied as it came. The batch header keeps
  base offset, partition leader epoch, last offset delta, both timestamps, producer id, epoch,
  base sequence, record count and every attribute bit but the codec's; the records are
  compressed again with the batch's own codec or the one asked for (`compression`: gzip,
  snappy raw or xerial read, snappy written xerial, lz4, zstd) and the CRC-32C recomputed, but
  never zstd for a Fetch below v10 (`rewrite`'s `zstd`): uncompressed there;
* **passed as stored**, byte for byte, otherwise (but a zstd batch to a Fetch below v10, its
  records written again uncompressed or in the codec asked for): no record carries the header
  (the test is a search for the header's bytes in the records, so most such batches are never
  parsed), a control batch, a magic other than 2, a CRC-32C that does not match (the client
  sees the corruption itself, as it would without the proxy), an unknown codec or data that
  does not decompress, and the truncated batch a broker may send at the end of a partition's
  data.

A record that cannot be decoded (its dictionary unknown after the registry was read to its end,
a corrupt frame, a value above `codec.max_output_size`) is **passed as stored, `zd` header and
all**, counted and named in `Rewritten.failure`: the consumer goes on and can tell such a record
by its header, where a partition error would stop it on that offset for good. A dictionary that
cannot be looked up because the registry does not answer is not such a failure: the partition
stops before that batch (`Rewritten.held_back`), even the response's first, so the client
fetches it again later.

A record carrying a header key that C clients read as ours (`zd`, a NUL byte and more:
librdkafka reads a key up to its first NUL), which Produce refuses, is passed as stored and
counted failed in the same way.

Bounds: a compressed batch is inflated to at most `limit` bytes, each value to at most the
decoder's `max_output_size`, and the partition's output stops at a batch boundary before it
would pass `limit` (`held_back`); the first batch of a response (`first`) that alone is above
the limit is passed as stored, so a consumer always progresses.

Work: what decoding costs is charged to the response's `DecodeWork` whether a record decodes or
not: the bytes batches inflate to, and per record with our header `RECORD_COST`, its stored
value, and what it decodes to, or, when it fails, `FAILURE_COST` and what it could have
inflated to. Each value is decoded within what is left (a frame declaring more is not
decompressed, one of undeclared size is stopped there). Once the work is spent the partition
stops at the batch (`held_back`), but for the response's first batch, whose other records
with our header are sent as stored (`Rewritten.over_budget`): a response costs its budget,
never more, and a consumer still progresses.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final, Literal

from crc32c import crc32c

from sidecar.batch_compression import CODEC_IDS, NONE, ZSTD, Compression
from sidecar.codec import Decoder
from sidecar.errors import (
    CodecError,
    CorruptFrame,
    DecodeLimitReached,
    FetchDictionaryUnavailable,
    FetchHeldBack,
    MalformedBatch,
    OutputTooLarge,
    ZdictError,
)
from sidecar.wire.record_batch import (
    ATTRIBUTES_AT,
    BATCH_HEADER_BYTES,
    CODEC_MASK,
    CODECS,
    CONTROL_BIT,
    COUNT_AT,
    CRC_AT,
    LENGTH_AT,
    LOG_OVERHEAD,
    MAGIC_V2,
    TO_ATTRIBUTES,
)
from sidecar.wire.varint import read_varint, varint

#: Codec of the batches rewritten: the fetched batch's own, or one for all.
FetchCompression = Literal["input", "none", "gzip", "snappy", "lz4", "zstd"]
_INT32: Final = struct.Struct(">i")
#: The varints of 0..16383 (one or two bytes), looked up rather than built: three are written
#: per record decoded.
_SMALL: Final = 1 << 14
_VARINTS: Final = tuple(varint(n) for n in range(_SMALL))
#: Decoded values below this size are joined into their record (a list of parts per record costs
#: more than their copy); larger ones are copied only into their batch.
_JOINED_BELOW: Final = 64 * 1024
#: Work charged per record with our header besides its bytes (its parse, the dictionary's
#: lookup), in bytes: about what zstd inflates in the time a record's handling takes.
RECORD_COST: Final = 512
#: Work charged per record that fails to decode (an exception, a lookup that found nothing),
#: besides what it inflated.
FAILURE_COST: Final = 64 * 1024


@dataclass(slots=True)
class DecodeWork:
    """The decoding work one Fetch response may still cost (see module), in bytes."""

    budget: int
    spent: int = 0

    def left(self) -> int:
        return self.budget - self.spent


@dataclass(slots=True)
class Rewritten:
    """One partition's records as sent to the client, and what happened to them."""

    data: bytes
    #: Records whose value was decoded.
    decoded: int = 0
    #: Records sent as stored that carry no header of ours (control records included).
    passed: int = 0
    #: Records with our header sent as stored: they could not be decoded.
    failed: int = 0
    #: Why the last of them failed (for the log), None if none did.
    failure: str | None = None
    #: Records with our header sent as stored because the response's work was spent.
    over_budget: int = 0
    #: The work was spent within the response's first batch.
    budget_spent: bool = False
    #: The partition stops before a batch the client will fetch again (no room, the work
    #: spent, or the registry did not answer): why, None if every batch was sent.
    held_back: str | None = None


class PartitionDecoder:
    """Rewrites the record batches of fetched partitions (see module); one per thread."""

    def __init__(self, decoder: Decoder, compression: FetchCompression = "input") -> None:
        self.decoder = decoder
        self.compression: FetchCompression = compression
        key = decoder.header_key.encode()
        #: How our header's key appears in a record: its length (a zig-zag varint), then it.
        self._marker = varint(len(key)) + key
        self._key = key
        #: C clients (librdkafka) read a header key up to its first NUL byte: `zd\x00...` is
        #: `zd` to them (Produce refuses such a key; a stored one is flagged here).
        self._shadow = key + b"\x00"
        self._compression = Compression()

    def rewrite(
        self, data: bytes, *, limit: int, first: bool, work: DecodeWork, zstd: bool = True
    ) -> Rewritten:
        """The partition's `data` (its `records` field) for the client; at most `limit` bytes
        out unless `first` and its first batch alone is larger (then sent as stored); its
        decoding charged to `work`. `zstd`: the client's Fetch version may carry zstd batches
        (v10 up, KIP-110); else each zstd batch goes out in another codec."""
        out: list[bytes] = []
        result = Rewritten(b"")
        size = pos = 0
        end_of_data = len(data)
        while pos < end_of_data:
            if end_of_data - pos < BATCH_HEADER_BYTES:
                out.append(data[pos:])  # a truncated batch at the end: the client drops it
                break
            _base, length, _epoch, magic, crc, attributes = TO_ATTRIBUTES.unpack_from(data, pos)
            end = pos + LOG_OVERHEAD + length
            if length < BATCH_HEADER_BYTES - LOG_OVERHEAD or end > end_of_data:
                out.append(data[pos:])
                break
            room = limit - size
            # The response's first batch goes out whatever its size: the consumer progresses.
            must = first and not out
            try:
                batch = self._batch(
                    data, pos, end, (magic, crc, attributes), room, result, work, must, zstd
                )
            except FetchHeldBack as held:
                if not must or isinstance(held, FetchDictionaryUnavailable):
                    result.held_back = str(held)
                    break
                batch = data[pos:end]
                self._failed(result, data, pos, f"sent as stored: {held}")
            if len(batch) > room and not must:
                result.held_back = f"the response reached its limit of {limit} bytes"
                break
            out.append(batch)
            size += len(batch)
            pos = end
        result.data = b"".join(out)
        return result

    def _failed(self, result: Rewritten, data: bytes, pos: int, why: str) -> None:
        result.failed += max(_INT32.unpack_from(data, pos + COUNT_AT)[0], 0)
        result.failure = why

    def _batch(
        self,
        data: bytes,
        pos: int,
        end: int,
        head: tuple[int, int, int],
        room: int,
        result: Rewritten,
        work: DecodeWork,
        must: bool,
        zstd: bool,
    ) -> bytes:
        """One whole batch as sent to the client (see module); `head`: its magic, CRC and
        attributes; `must`: the response's first batch; `zstd`: see `rewrite`.

        Raises:
            FetchHeldBack: the batch outgrows `room` or `work`, or a dictionary could not be
                looked up.
        """
        magic, crc, attributes = head
        count: int = _INT32.unpack_from(data, pos + COUNT_AT)[0]
        stored = data[pos:end]
        if magic != MAGIC_V2 or attributes & CONTROL_BIT:
            result.passed += max(count, 0) if magic == MAGIC_V2 else 0
            return stored
        if crc32c(stored[ATTRIBUTES_AT:]) != crc:
            self._failed(
                result, data, pos, "a batch's CRC-32C does not match (the client checks it)"
            )
            return stored
        codec = attributes & CODEC_MASK
        section = stored[BATCH_HEADER_BYTES:]
        if work.left() <= 0:
            if not must:
                raise FetchHeldBack(_spent(work))
            result.over_budget += max(count, 0)
            result.budget_spent = True
            return stored
        if codec:
            bound = min(room, work.left())
            try:
                inflated = self._compression.decompress(codec, section, bound)
            except MalformedBatch as exc:
                self._failed(result, data, pos, str(exc))
                return stored
            if inflated is None:
                work.spent += bound
                raise FetchHeldBack(f"a {CODECS[codec]} batch inflates past {bound} bytes")
            work.spent += len(inflated)
            section = inflated
        shadowed = self._shadow in section
        if self._marker not in section and not shadowed:
            result.passed += max(count, 0)
            if codec == ZSTD and not zstd:
                return self._packed(stored, attributes, self._out_codec(codec, zstd), section)
            return stored
        try:
            records, decoded, failed, skipped = self._records(
                section, count, room, result, work, must, shadowed
            )
        except MalformedBatch as exc:
            self._failed(result, data, pos, str(exc))
            return stored
        result.passed += count - decoded - failed - skipped
        result.failed += failed
        result.over_budget += skipped
        if not decoded and (zstd or codec != ZSTD):
            return stored
        result.decoded += decoded
        return self._packed(stored, attributes, self._out_codec(codec, zstd), records)

    def _out_codec(self, codec: int, zstd: bool) -> int:
        """The codec a rewritten batch stored in `codec` goes out in; `zstd`: the client's
        Fetch version may carry zstd batches."""
        out = codec if self.compression == "input" else CODEC_IDS[self.compression]
        return NONE if out == ZSTD and not zstd else out

    def _packed(self, stored: bytes, attributes: int, codec: int, records: bytes) -> bytes:
        """Batch `stored` with `records` (uncompressed) in its place, compressed with `codec`,
        its length, attributes and CRC-32C written again."""
        body = self._compression.compress(codec, records)
        head = struct.pack(">h", (attributes & ~CODEC_MASK) | codec)
        rest = stored[ATTRIBUTES_AT + 2 : BATCH_HEADER_BYTES]
        # Joined once: the batch's bytes are copied one time, not once per field added.
        return b"".join(
            (
                stored[:LENGTH_AT],
                _INT32.pack(len(head) + len(rest) + len(body) + ATTRIBUTES_AT - LOG_OVERHEAD),
                stored[LOG_OVERHEAD:CRC_AT],
                struct.pack(">I", crc32c(body, crc32c(rest, crc32c(head)))),
                head,
                rest,
                body,
            )
        )

    def _records(
        self,
        section: bytes,
        count: int,
        room: int,
        result: Rewritten,
        work: DecodeWork,
        must: bool,
        shadowed: bool,
    ) -> tuple[bytes, int, int, int]:
        """The records of a batch with values decoded: (bytes, decoded, failed, sent as
        stored past the work's budget); `shadowed`: the batch may hold a header key C clients
        read as ours (see `_shadow`), each record carrying one sent as stored and counted failed.

        Raises:
            MalformedBatch: the records do not parse.
            FetchHeldBack: the records outgrow `room`, or `work` unless `must`, or the registry
                could not be read.
        """
        try:
            return self._parse_records(section, count, room, result, work, must, shadowed)
        except IndexError:
            raise MalformedBatch("a record ends inside a varint") from None

    def _parse_records(  # noqa: C901 - one loop per record, kept flat for speed
        self,
        section: bytes,
        count: int,
        room: int,
        result: Rewritten,
        work: DecodeWork,
        must: bool,
        shadowed: bool,
    ) -> tuple[bytes, int, int, int]:
        # Varints of one byte (values -64..63: most lengths and deltas) are read inline: this
        # loop runs once per record, and a call per field doubled its cost.
        decode = self.decoder.decode
        key = self._key
        key_name = self.decoder.header_key
        out: list[bytes] = []
        append = out.append
        size = decoded = failed = skipped = 0
        max_output = self.decoder.max_output_size
        pos = 0
        end = len(section)
        for _ in range(count):
            start = pos
            byte = section[pos]
            if byte < 0x80:
                length, pos = (byte >> 1) ^ -(byte & 1), pos + 1
            else:
                length, pos = read_varint(section, pos)
            stop = pos + length
            if length < 1 or stop > end:
                raise MalformedBatch("a record runs past the end of its batch")
            body_start = pos
            pos += 1  # attributes
            while section[pos] & 0x80:  # timestamp delta
                pos += 1
            pos += 1
            while section[pos] & 0x80:  # offset delta
                pos += 1
            pos += 1
            byte = section[pos]
            if byte < 0x80:
                key_len, pos = (byte >> 1) ^ -(byte & 1), pos + 1
            else:
                key_len, pos = read_varint(section, pos)
            if key_len > 0:
                pos += key_len
            value_at = pos
            byte = section[pos]
            if byte < 0x80:
                value_len, pos = (byte >> 1) ^ -(byte & 1), pos + 1
            else:
                value_len, pos = read_varint(section, pos)
            value = None
            if value_len >= 0:
                value = section[pos : pos + value_len]
                pos += value_len
            byte = section[pos]
            if byte < 0x80:
                header_count, pos = (byte >> 1) ^ -(byte & 1), pos + 1
            else:
                header_count, pos = read_varint(section, pos)
            headers_at = pos
            ours: bytes | None = None
            ours_at = ours_end = -1
            mine = shadows = 0
            for _ in range(header_count):
                header_at = pos
                byte = section[pos]
                if byte < 0x80:
                    name_len, pos = (byte >> 1) ^ -(byte & 1), pos + 1
                else:
                    name_len, pos = read_varint(section, pos)
                name = section[pos : pos + name_len]
                pos += name_len
                byte = section[pos]
                if byte < 0x80:
                    header_len, pos = (byte >> 1) ^ -(byte & 1), pos + 1
                else:
                    header_len, pos = read_varint(section, pos)
                if name == key:
                    mine += 1
                    ours_at = header_at
                    ours = section[pos : pos + header_len] if header_len >= 0 else None
                elif shadowed and name.split(b"\x00", 1)[0] == key:
                    shadows += 1
                if header_len > 0:
                    pos += header_len
                if name == key:
                    ours_end = pos
            if pos != stop:
                raise MalformedBatch("a record's fields do not add up to its length")
            if shadows:
                failed += 1
                result.failure = (
                    f"a record carries a header key that C clients read as {key_name!r} (up "
                    "to a NUL byte), which Produce refuses: sent as stored"
                )
                append(section[start:stop])
                size += stop - start
                continue
            if not mine or value is None:
                append(section[start:stop])
                size += stop - start
                continue
            left = work.left() - RECORD_COST - len(value)
            work.spent += RECORD_COST + len(value)
            try:
                if left <= 0:
                    raise DecodeLimitReached(_spent(work))
                if mine > 1:
                    raise CorruptFrame(
                        f"record has {mine} {key_name!r} headers; exactly one is allowed"
                    )
                value = decode(value, [(key_name, ours)], limit=left)
            except DecodeLimitReached:
                work.spent = max(work.spent, work.budget)  # it inflated all that was left
                if not must:
                    raise FetchHeldBack(_spent(work)) from None
                skipped += 1
                result.budget_spent = True
                append(section[start:stop])
                size += stop - start
                continue
            except CodecError as exc:
                work.spent += FAILURE_COST
                if isinstance(exc, OutputTooLarge):
                    work.spent += min(left, max_output)
                failed += 1
                result.failure = str(exc)
                append(section[start:stop])
                size += stop - start
                continue
            except ZdictError as exc:  # the registry did not answer: try again later
                raise FetchDictionaryUnavailable(
                    f"the dictionary could not be looked up: {exc}"
                ) from None
            assert value is not None
            work.spent += len(value)
            parts = (
                section[body_start:value_at],
                _small(len(value)),
                value,
                _small(header_count - 1),
                section[headers_at:ours_at],
                section[ours_end:stop],
            )
            if len(value) < _JOINED_BELOW:
                record = b"".join(parts)
                length = len(record)
                prefix = _small(length)
                append(prefix)
                append(record)
            else:
                # A large value goes into `out` as it is: the batch's join is its one copy.
                length = sum(map(len, parts))
                prefix = _small(length)
                append(prefix)
                out += parts
            size += len(prefix) + length
            decoded += 1
            if size > room:
                raise FetchHeldBack(f"its records decode to more than {room} bytes")
            pos = stop
        if pos != end:
            raise MalformedBatch("bytes left over after the batch's last record")
        return b"".join(out), decoded, failed, skipped


def _spent(work: DecodeWork) -> str:
    return (
        f"the response's decoding work of {work.budget} bytes is spent "
        "(ZDICT_PROXY__FETCH_DECODE_BUDGET_BYTES)"
    )


def _small(n: int) -> bytes:
    return _VARINTS[n] if n < _SMALL else varint(n)
