"""The wire format: one zstd frame per record value, the dictionary id in a record header.

Pure: no Kafka, no files, no threads of its own. Producers that compress in-process and consumers
import this module; the relay is a loop around `Encoder.encode_batch`, and the in-process
producers call `Encoder.encode_value` once per record.

Wire format (sidecar/README.md). A compressed record carries header `zd` (configurable); a
record without it was not compressed by us. Its value says how the record value was framed, and
decoders read both forms, so every record ever written stays decodable:

* **compact** (the default): the header value is one byte with bit 7 set and a 7-bit fingerprint
  of the dictionary, then the dictionary id minus 32767 as an unsigned LEB128 varint (0: no
  dictionary); 2 bytes for the first 127 dictionaries. The record value is a zstd frame (RFC 8878)
  without the 4-byte magic number and without the frame's dictionary id: prepend `28 b5 2f fd` and
  any zstd decoder reads it with the dictionary file.
* **standard**: the header value is the ASCII decimal dictionary id (`0`: none); the record value
  is one standard zstd frame with the content size and the dictionary id.

Neither writes zstd's checksum: Kafka's record batches carry a CRC already. Everything else about
the record (key, timestamp, other headers) is left as it was.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from itertools import chain, compress, repeat
from operator import add, ge, itemgetter, methodcaller
from typing import TYPE_CHECKING, Any, Final, Literal, NamedTuple, Protocol, cast

import zstandard

from sidecar.dictionaries.model import MAX_DICT_ID, MIN_DICT_ID, Dictionary, validate_dict_id
from sidecar.errors import CorruptFrame, OutputTooLarge, UnknownDictionary

if TYPE_CHECKING:
    from sidecar.dictionaries.store import DictionaryStore

#: Header key of compressed records. Short on purpose: headers are stored uncompressed with every
#: record, and each byte of key costs ~1% on a 100-byte event.
DEFAULT_HEADER_KEY: Final = "zd"
#: Header value for frames compressed without a dictionary.
NO_DICTIONARY: Final = 0
#: Below this size, compressing without a dictionary loses far more often than it wins (measured
#: on event data: all 32-63 B and 55% of 64-127 B messages grow), so it is not even tried.
NO_DICTIONARY_MIN_SIZE: Final = 128
#: Level used without a dictionary, and for a dictionary whose metadata names none.
DEFAULT_LEVEL: Final = 3
#: Largest value a Decoder produces unless told otherwise (bytes).
DEFAULT_MAX_OUTPUT_SIZE: Final = 8 * 1024 * 1024

ZSTD_MAGIC: Final = b"\x28\xb5\x2f\xfd"
#: Records in a batch from which `encode_batch` compresses their values in one C call
#: (python-zstandard's `multi_compress_to_buffer`): the call costs ~12 µs of its own (a fresh
#: compression context) and saves a Python call per value. Measured on 113-byte events, µs per
#: record: 1.45 one by one vs 1.86 batched at 20 records, 1.48 vs 1.43 at 100, 1.73 vs 1.49 at
#: 1,000.
BATCH_API_MIN: Final = 100

#: How records are framed: `compact` saves 6 bytes of frame and 3 of header per record on the
#: first 127 dictionaries (`zdict-sidecar bench codec` measures it); `standard` is what release 1
#: wrote, for consumers that cannot be upgraded yet.
WireFormat = Literal["compact", "standard"]
DEFAULT_WIRE_FORMAT: Final[WireFormat] = "compact"
#: Bit 7 of a compact header's first byte: never set in an ASCII digit, so the two forms cannot
#: be mistaken for each other.
COMPACT_FLAG: Final = 0x80
#: A compact header carries `dict_id - ID_BASE`, so the first dictionary (32768) is 1.
ID_BASE: Final = MIN_DICT_ID - 1

# Values that start like this are compressed already; a second pass only burns CPU.
_COMPRESSED_MAGICS: Final = (
    ZSTD_MAGIC,
    b"\x1f\x8b",  # gzip
    b"PK\x03\x04",  # zip
    b"\x89PNG",  # png
    b"\xff\xd8\xff",  # jpeg
    b"\x04\x22\x4d\x18",  # lz4 frame
    b"\xff\x06\x00\x00sNaPpY",  # snappy framed
    b"BZh",  # bzip2
    b"\xfd7zXZ\x00",  # xz
    b"GIF8",  # gif
)
_SKIPPABLE_FRAME_MAGIC_HIGH: Final = b"\x2a\x4d\x18"  # zstd skippable frames: 50..5F 2A 4D 18

Header = tuple[str, bytes | None]
Headers = list[Header]


class Outcome:
    """What the encoder did with one value; the metrics label `outcome`.

    Plain strings rather than an Enum: this is on the per-message path, and hashing an Enum
    member runs Python code while a str hash is cached.
    """

    COMPRESSED: Final = "compressed"
    TOMBSTONE: Final = "tombstone"
    ALREADY_ENCODED: Final = "already_encoded"
    BELOW_THRESHOLD: Final = "below_threshold"
    PRECOMPRESSED: Final = "precompressed"
    NO_GAIN: Final = "no_gain"
    ALL: Final = (COMPRESSED, TOMBSTONE, ALREADY_ENCODED, BELOW_THRESHOLD, PRECOMPRESSED, NO_GAIN)
    SKIPS: Final = (TOMBSTONE, ALREADY_ENCODED, BELOW_THRESHOLD, PRECOMPRESSED, NO_GAIN)
    # The decoding direction (`Decoder.decode_batch`, `run --mode decode`):
    DECODED: Final = "decoded"
    NOT_ENCODED: Final = "not_encoded"  # no header of ours: passed through as it was
    DECODE_ALL: Final = (DECODED, NOT_ENCODED, TOMBSTONE)


# The outcomes `encode_batch` names per record, as module globals: their loads are cached.
_COMPRESSED: Final = Outcome.COMPRESSED
_TOMBSTONE: Final = Outcome.TOMBSTONE
_OURS: Final = Outcome.ALREADY_ENCODED
_BELOW: Final = Outcome.BELOW_THRESHOLD
_PRECOMPRESSED: Final = Outcome.PRECOMPRESSED
_NO_GAIN: Final = Outcome.NO_GAIN


@dataclass(frozen=True, slots=True)
class FrameOptions:
    """Optional zstd frame fields (`bench codec` measures each). A compact frame never has the
    dictionary id: `dict_id` applies to standard frames."""

    checksum: bool = False
    dict_id: bool = True
    content_size: bool = True


def _varint_size(n: int) -> int:
    """Bytes of Kafka's zig-zag varint for non-negative `n` (record header length fields)."""
    zigzag = n << 1
    size = 1
    while zigzag >= 0x80:
        zigzag >>= 7
        size += 1
    return size


def header_cost(key: str, value: bytes) -> int:
    """Bytes one record header adds to a Kafka v2 record: key and value with their lengths."""
    key_bytes = len(key.encode())
    return _varint_size(key_bytes) + key_bytes + _varint_size(len(value)) + len(value)


# First bytes of the magics above (and of zstd skippable frames): most values (JSON, text) are
# rejected by one set lookup, which matters on the per-message path.
_MAGIC_FIRST_BYTES: Final = frozenset(m[0] for m in _COMPRESSED_MAGICS) | frozenset(
    range(0x50, 0x60)
)


# The same rules for a whole batch in C-level passes (`_any_compressed`): the bytes that
# are no magic's first byte (deleted from a batch's first bytes, nothing may be left), and every
# prefix `looks_compressed` recognises, skippable zstd frames spelled out, for one `startswith`.
_NOT_MAGIC_FIRST: Final = bytes(b for b in range(256) if b not in _MAGIC_FIRST_BYTES)
_COMPRESSED_PREFIXES: Final = _COMPRESSED_MAGICS + tuple(
    bytes([first]) + _SKIPPABLE_FRAME_MAGIC_HIGH for first in range(0x50, 0x60)
)
_first_byte: Final = itemgetter(0)
_starts_compressed: Final = methodcaller("startswith", _COMPRESSED_PREFIXES)


def looks_compressed(value: bytes) -> bool:
    """True when `value` starts with the magic number of a common compressed format."""
    if not value or value[0] not in _MAGIC_FIRST_BYTES:
        return False
    if value.startswith(_COMPRESSED_MAGICS):
        return True
    skippable = len(value) >= 4 and value[1:4] == _SKIPPABLE_FRAME_MAGIC_HIGH
    return skippable and 0x50 <= value[0] <= 0x5F


class Encoded(NamedTuple):
    """One encoded record value (a NamedTuple: built once per message, so it must be cheap).

    `output_bytes` is what the record costs after encoding: the value plus the header we added.
    """

    value: bytes | None
    headers: Headers
    outcome: str
    input_bytes: int
    output_bytes: int


# NamedTuple's generated __new__ is Python code (~300 ns); tuple.__new__ on the class builds the
# same object in a quarter of the time.
_new_encoded: Final = tuple.__new__
#: `Encoded` from a 5-tuple, callable from `map` (no Python frame per record).
_encoded_from: Final = partial(tuple.__new__, Encoded)
_segment_bytes: Final = zstandard.BufferSegment.tobytes
# A record's value and headers, callable from `map` (`zip(*records)` would first build an
# argument tuple as long as the batch).
_value_of: Final = itemgetter(0)
_headers_of: Final = itemgetter(1)
_first_item: Final = itemgetter(0)  # a header's key


def _plain_batch(
    records: Sequence[tuple[bytes | None, Sequence[Header] | None]], key: str
) -> tuple[list[bytes], list[Sequence[Header]] | None] | None:
    """The values of `records` and their headers (None when no record has any), if no record is
    a tombstone, either none or every one has headers, and none has our header `key`; else
    None. These batches' rules can be decided without a Python loop body per record."""
    headers = list(map(_headers_of, records))
    if not any(headers):
        headed = None
    elif all(headers) and key not in map(_first_item, chain.from_iterable(headers)):
        headed = cast(list[Sequence[Header]], headers)
    else:
        return None
    values = list(map(_value_of, records))
    return None if None in values else (cast(list[bytes], values), headed)


def _any_compressed(values: Sequence[bytes]) -> bool:
    """Whether any of `values` (none empty) is recognisably compressed (`looks_compressed`)."""
    # Text and JSON rarely start with a magic's first byte: the exact test only on those that
    # do. Some streams do often (log lines opening with "[" or "_", names with "P" to "Z"), so
    # the test is not run on every value once one suspect is seen.
    firsts = bytes(map(_first_byte, values))
    if not firsts.translate(None, _NOT_MAGIC_FIRST):
        return False
    suspects = compress(values, map(_MAGIC_FIRST_BYTES.__contains__, firsts))
    return any(map(_starts_compressed, suspects))


@dataclass(slots=True)
class CodecStats:
    """Counts of one encoder: messages by outcome, and bytes in and out (out includes headers).

    `excluded_bytes` are the input bytes of values no dictionary could shrink (already ours, or
    compressed by someone else): they pass through unchanged and are counted in both totals, so
    the ratio with them left out of both is comparable with a held-out ratio (training leaves
    such values out of the held-out set too; the trainer's live ratio leaves them out).
    `dictionary_id` is the dictionary of the encoder counting (0: none), so that a ratio is
    never judged against another dictionary's held-out ratio.
    """

    outcomes: Counter[str] = field(default_factory=Counter)
    input_bytes: int = 0
    output_bytes: int = 0
    excluded_bytes: int = 0
    dictionary_id: int = NO_DICTIONARY

    @property
    def messages(self) -> int:
        return sum(self.outcomes.values())

    @property
    def ratio(self) -> float:
        """Input bytes / output bytes; 1.0 before any byte was seen."""
        return self.input_bytes / self.output_bytes if self.output_bytes else 1.0


class Tag(NamedTuple):
    """What our header says about a record: its dictionary, and how its value is framed."""

    dict_id: int
    #: A compact frame (no magic number, no dictionary id); else a standard frame.
    compact: bool
    #: The compact header's 7-bit dictionary fingerprint (0 for standard headers).
    fingerprint: int


def fingerprint(dictionary: Dictionary | None) -> int:
    """The 7-bit fingerprint a compact header carries: the first byte of the dictionary's
    sha256, low 7 bits (0 without a dictionary). A decoder holding another dictionary under the
    same id (a registry of another cluster, a mislabelled record) notices 127 times in 128."""
    return 0 if dictionary is None else int(dictionary.meta.sha256[:2], 16) & 0x7F


def _uvarint(n: int) -> bytes:
    """Unsigned LEB128: 7 bits a byte, low bits first, bit 7 set on all but the last byte."""
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def tag_value(dict_id: int, wire: WireFormat, mark: int = 0) -> bytes:
    """The header value naming `dict_id` (0: no dictionary) in wire format `wire`; `mark` is
    the dictionary's fingerprint (compact only)."""
    if wire == "standard":
        return str(dict_id).encode("ascii")
    return bytes([COMPACT_FLAG | mark]) + _uvarint(dict_id - ID_BASE if dict_id else 0)


def parse_tag(raw: bytes | None, key: str = DEFAULT_HEADER_KEY) -> Tag:
    """Read one header value of ours, in either wire format.

    Raises:
        CorruptFrame: the value is neither an ASCII decimal id nor a compact tag.
    """
    if raw and raw[0] & COMPACT_FLAG:
        n = shift = 0
        for i, byte in enumerate(raw[1:6], 1):
            n |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                if i + 1 != len(raw):
                    break  # bytes after the varint's last byte
                dict_id = n + ID_BASE if n else 0
                if dict_id <= MAX_DICT_ID:
                    return Tag(dict_id, True, raw[0] & 0x7F)
                break
        raise CorruptFrame(
            f"header {key!r} is {raw[:12]!r}: a compact tag whose dictionary id does not parse "
            f"or is above {MAX_DICT_ID}"
        )
    if raw is None or not (raw.isdigit() and raw.isascii() and len(raw) <= 10):
        shown = repr(raw[:12]) if raw is not None else "None"
        raise CorruptFrame(
            f"header {key!r} is {shown}; expected a compact tag or the ASCII decimal id of a "
            "dictionary (0 for none)"
        )
    return Tag(int(raw), False, 0)


def _our_header(headers: Sequence[tuple[str, bytes | None]] | None, key: str) -> list[bytes | None]:
    """The values of our header: none when the record has no header of ours.

    Raises:
        CorruptFrame: the header appears more than once.
    """
    found = [v for k, v in headers or () if k == key]
    if len(found) > 1:
        raise CorruptFrame(f"record has {len(found)} {key!r} headers; exactly one is allowed")
    return found


def header_tag(headers: Sequence[tuple[str, bytes | None]] | None, key: str) -> Tag | None:
    """What our header says; None when the record has no header of ours.

    Raises:
        CorruptFrame: the header appears more than once, or does not parse.
    """
    found = _our_header(headers, key)
    return parse_tag(found[0], key) if found else None


def header_dict_id(headers: Sequence[tuple[str, bytes | None]] | None, key: str) -> int | None:
    """The dictionary id our header names; None when the record has no header of ours.

    Raises:
        CorruptFrame: the header appears more than once, or does not parse.
    """
    tag = header_tag(headers, key)
    return None if tag is None else tag.dict_id


def _frame_parameters(value: bytes, tag: Tag) -> zstandard.FrameParameters:
    """The frame header of `value` as `tag` says it is framed; raises `zstandard.ZstdError`."""
    if tag.compact:
        return zstandard.get_frame_parameters(value, format=zstandard.FORMAT_ZSTD1_MAGICLESS)
    if not value.startswith(ZSTD_MAGIC):
        raise zstandard.ZstdError("no zstd magic number")
    return zstandard.get_frame_parameters(value)


def check_encoded(value: bytes, headers: Sequence[tuple[str, bytes | None]], key: str) -> None:
    """Refuse a record that carries our header but could not have been written by an encoder:
    passed through as `already_encoded`, it would not decode downstream.

    Raises:
        CorruptFrame: the header is malformed, or the value is not one zstd frame of that id.
    """
    tag = header_tag(headers, key)
    assert tag is not None  # the caller saw our header
    try:
        frame_id = _frame_parameters(value, tag).dict_id
    except zstandard.ZstdError as exc:
        raise CorruptFrame(
            f"record carries header {key} naming dictionary {tag.dict_id} but its value is not "
            f"a zstd frame: {exc}"
        ) from None
    if frame_id and frame_id != tag.dict_id:
        raise CorruptFrame(
            f"record carries header {key} naming dictionary {tag.dict_id} but its frame names "
            f"dictionary {frame_id}"
        )


def zstd_dictionary(dictionary: Dictionary) -> zstandard.ZstdCompressionDict:
    """The zstandard object for `dictionary`, loaded as a full dictionary (never raw content)."""
    return zstandard.ZstdCompressionDict(dictionary.data, dict_type=zstandard.DICT_TYPE_FULLDICT)


class Encoder:
    """Compresses record values one by one with one dictionary (or none), applying the skip rules.

    An Encoder may be shared between threads: each thread gets its own zstd compressor, because
    python-zstandard's compressors are not thread-safe; the precomputed dictionary is shared.
    """

    def __init__(
        self,
        dictionary: Dictionary | None = None,
        *,
        level: int | None = None,
        min_size: int | None = None,
        header_key: str = DEFAULT_HEADER_KEY,
        frame: FrameOptions = FrameOptions(),
        wire: WireFormat = DEFAULT_WIRE_FORMAT,
    ) -> None:
        """Build an encoder.

        Args:
            dictionary: the active dictionary; None compresses without one (header value 0).
            level: zstd level; default the level chosen at training, else 3.
            min_size: values shorter than this (bytes) pass through; default the dictionary's
                measured break-even size, else 128 without a dictionary.
            header_key: the record header that carries the dictionary id.
            frame: optional frame fields.
            wire: compact (default) or standard frames and header values.
        """
        if not header_key:
            raise ValueError("header_key must not be empty")
        self.dictionary = dictionary
        self.header_key = header_key
        self.frame = frame
        self.wire: WireFormat = wire
        if dictionary is None:
            self.level = DEFAULT_LEVEL if level is None else level
            self.min_size = NO_DICTIONARY_MIN_SIZE if min_size is None else min_size
            self._zdict: zstandard.ZstdCompressionDict | None = None
            dict_id = NO_DICTIONARY
        else:
            # Frames carry the id in our header and their own: one outside the private range
            # (0 reads as "no dictionary") would make every record undecodable.
            validate_dict_id(dictionary.id)
            self.level = dictionary.meta.level if level is None else level
            self.min_size = dictionary.meta.break_even_size if min_size is None else min_size
            self._zdict = zstd_dictionary(dictionary)
            self._zdict.precompute_compress(level=self.level)
            dict_id = dictionary.id
        self.dict_id = dict_id
        #: The record header this encoder adds to what it compresses: (key, value).
        self.header: tuple[str, bytes] = (
            header_key,
            tag_value(dict_id, wire, fingerprint(dictionary)),
        )
        self.header_bytes = header_cost(*self.header)
        self.stats = CodecStats(dictionary_id=dict_id)
        self._local = threading.local()

    @classmethod
    def from_store(
        cls,
        store: DictionaryStore,
        namespace: str,
        *,
        level: int | None = None,
        min_size: int | None = None,
        header_key: str = DEFAULT_HEADER_KEY,
        frame: FrameOptions = FrameOptions(),
        wire: WireFormat = DEFAULT_WIRE_FORMAT,
    ) -> Encoder:
        """An encoder for the active dictionary of `namespace` (no dictionary if none is active)."""
        return cls(
            store.active(namespace),
            level=level,
            min_size=min_size,
            header_key=header_key,
            frame=frame,
            wire=wire,
        )

    def _compressor(self) -> zstandard.ZstdCompressor:
        compressor: zstandard.ZstdCompressor | None = getattr(self._local, "compressor", None)
        if compressor is None:
            if self.wire == "compact":
                params = zstandard.ZstdCompressionParameters.from_level(
                    self.level,
                    format=zstandard.FORMAT_ZSTD1_MAGICLESS,
                    write_checksum=int(self.frame.checksum),
                    write_content_size=int(self.frame.content_size),
                    write_dict_id=0,
                )
                compressor = zstandard.ZstdCompressor(
                    dict_data=self._zdict, compression_params=params
                )
            else:
                compressor = zstandard.ZstdCompressor(
                    level=self.level,
                    dict_data=self._zdict,
                    write_checksum=self.frame.checksum,
                    write_content_size=self.frame.content_size,
                    write_dict_id=self.frame.dict_id,
                )
            self._local.compressor = compressor
        return compressor

    def compress(self, value: bytes) -> bytes:
        """One zstd frame for `value`, skip rules not applied (for measurements and tools)."""
        frame: bytes = self._compressor().compress(value)
        return frame

    def encode_value(self, value: bytes) -> tuple[bytes, str]:
        """Encode the value of a record that has no header under our key: `(value', outcome)`.

        `value'` is the frame (send our `header` with it) when the outcome is
        `Outcome.COMPRESSED`, else `value` itself. Counts nothing: the in-process producers'
        one-record step, whose metrics tally it (`sidecar.serde`); `encode_record` counts in
        `stats`. The rules are `encode_batch`'s for such a record: shorter than `min_size`
        (or empty); recognisably compressed; would not shrink once our header is counted.
        """
        size = len(value)
        if size < self.min_size or not size:
            return value, _NO_GAIN if size >= self.min_size else _BELOW
        if value[0] in _MAGIC_FIRST_BYTES and looks_compressed(value):
            return value, _PRECOMPRESSED
        compressor: zstandard.ZstdCompressor | None = getattr(self._local, "compressor", None)
        frame = (compressor or self._compressor()).compress(value)
        if len(frame) + self.header_bytes < size:
            return frame, _COMPRESSED
        return value, _NO_GAIN

    def encode_record(
        self, value: bytes | None, headers: Sequence[tuple[str, bytes | None]] | None = None
    ) -> Encoded:
        """Encode one record value; headers out = headers in, plus ours if compressed.

        A record with no header under our key goes through `encode_value` (one call, no batch
        set-up); a tombstone or a record carrying our key, through `encode_batch`, where every
        rule lives.
        """
        if value is None or (headers and any(k == self.header_key for k, _ in headers)):
            return self.encode_batch(((value, headers),))[0]
        out, outcome = self.encode_value(value)
        size = len(value)
        stats = self.stats
        stats.outcomes[outcome] += 1
        stats.input_bytes += size
        if outcome == _COMPRESSED:
            cost = len(out) + self.header_bytes
            stats.output_bytes += cost
            hdrs = [*headers, self.header] if headers else [self.header]
            return _new_encoded(Encoded, (out, hdrs, outcome, size, cost))
        stats.output_bytes += size
        if outcome == _PRECOMPRESSED:
            stats.excluded_bytes += size
        return _new_encoded(Encoded, (value, list(headers or ()), outcome, size, size))

    def encode(
        self, value: bytes | None, headers: Sequence[tuple[str, bytes | None]] | None = None
    ) -> tuple[bytes | None, Headers]:
        """Encode one value: `(value', headers')`, ready to produce."""
        encoded = self.encode_record(value, headers)
        return encoded.value, encoded.headers

    def encode_batch(
        self, records: Iterable[tuple[bytes | None, Sequence[tuple[str, bytes | None]] | None]]
    ) -> list[Encoded]:
        """Encode many records, in order; the relay's path and the one place the rules live.

        Skip rules, in order: tombstone; our header already present; shorter than `min_size`;
        recognisably compressed; would not shrink once our header is counted.

        A batch of `BATCH_API_MIN` records or more has its values compressed in one C call
        (python-zstandard's `multi_compress_to_buffer`, whose frames are those of `compress`):
        the rules that need no compression are decided first, on lengths, headers and magic
        bytes, and the last one on the frames. A batch without tombstones, whose records all
        have headers or none has (`_plain_batch`: ours among none of them), and whose values
        all pass those rules (most batches of most streams) goes through `_encode_plain`, and
        one whose values are all under `min_size` (the pass-through baseline's) through
        `_pass_below`: neither runs the loop body below per record. Other batches go record by
        record; one under `BATCH_API_MIN` compresses value by value as it
        goes. At ~1 µs of zstd per 100-byte message, each Python call or attribute lookup per
        record shows in the throughput (`bench codec` compares it with the bare compress loop),
        so the loops keep everything in locals and tally outcomes in local ints, added to the
        stats once per batch. A spoofed header raises before anything is counted.
        """
        if not isinstance(records, list | tuple):
            records = list(records)
        if len(records) >= BATCH_API_MIN and (plain := _plain_batch(records, self.header_key)):
            values, headed = plain
            sizes = list(map(len, values))
            if max(sizes) < self.min_size:
                return self._pass_below(values, sizes, headed)
            if min(sizes) >= max(self.min_size, 1) and not _any_compressed(values):
                return self._encode_plain(values, sizes, headed)
        key, min_size, magic_first = self.header_key, self.min_size, _MAGIC_FIRST_BYTES
        our_header, header_bytes = self.header, self.header_bytes
        compressor = self._compressor()
        # With the batch API, the values to compress wait in `todo`, their places in `results`
        # (None until then) and their headers in `slots`.
        batch_api = len(records) >= BATCH_API_MIN
        compress = compressor.compress
        todo: list[bytes | bytearray | memoryview[int]] = []
        slots: list[tuple[int, Sequence[tuple[str, bytes | None]] | None]] = []
        results: list[Any] = []
        append = results.append
        tombstones = ours = below = precompressed = compressed = no_gain = 0
        in_bytes = out_bytes = excluded = 0
        for value, headers in records:
            if value is None:
                tombstones += 1
                append(_new_encoded(Encoded, (None, list(headers or ()), _TOMBSTONE, 0, 0)))
                continue
            size = len(value)
            in_bytes += size
            if headers and any(k == key for k, _ in headers):
                check_encoded(value, headers, key)  # a spoofed header would make it undecodable
                ours += 1
                excluded += size
                out_bytes += size
                append(_new_encoded(Encoded, (value, list(headers), _OURS, size, size)))
            elif size < min_size:
                below += 1
                out_bytes += size
                append(_new_encoded(Encoded, (value, list(headers or ()), _BELOW, size, size)))
            elif value and value[0] in magic_first and looks_compressed(value):
                precompressed += 1
                excluded += size
                out_bytes += size
                append(
                    _new_encoded(Encoded, (value, list(headers or ()), _PRECOMPRESSED, size, size))
                )
            elif batch_api and value:  # the batch API refuses empty values (which never shrink)
                slots.append((len(results), headers))
                todo.append(value)
                append(None)
            else:
                frame = compress(value)
                cost = len(frame) + header_bytes
                if cost < size:
                    compressed += 1
                    out_bytes += cost
                    hdrs = [*headers, our_header] if headers else [our_header]
                    append(_new_encoded(Encoded, (frame, hdrs, _COMPRESSED, size, cost)))
                else:
                    no_gain += 1
                    out_bytes += size
                    append(
                        _new_encoded(Encoded, (value, list(headers or ()), _NO_GAIN, size, size))
                    )
        if todo:
            # A BufferWithSegmentsCollection iterates (sequence protocol); its stubs omit it.
            frames = cast(
                Iterable[zstandard.BufferSegment], compressor.multi_compress_to_buffer(todo)
            )
            # The last rule as above, on the frames of the batch API.
            for (i, headers), raw, segment in zip(slots, todo, frames, strict=True):
                size = len(raw)
                cost = len(segment) + header_bytes
                if cost < size:
                    compressed += 1
                    out_bytes += cost
                    hdrs = [*headers, our_header] if headers else [our_header]
                    results[i] = _new_encoded(
                        Encoded, (segment.tobytes(), hdrs, _COMPRESSED, size, cost)
                    )
                else:
                    no_gain += 1
                    out_bytes += size
                    results[i] = _new_encoded(
                        Encoded, (raw, list(headers or ()), _NO_GAIN, size, size)
                    )
        outcomes = self.stats.outcomes
        if compressed:
            outcomes[_COMPRESSED] += compressed
        if below:
            outcomes[_BELOW] += below
        if no_gain:
            outcomes[_NO_GAIN] += no_gain
        if tombstones:
            outcomes[_TOMBSTONE] += tombstones
        if ours:
            outcomes[_OURS] += ours
        if precompressed:
            outcomes[_PRECOMPRESSED] += precompressed
        self.stats.input_bytes += in_bytes
        self.stats.output_bytes += out_bytes
        self.stats.excluded_bytes += excluded
        return results

    def _pass_below(
        self, values: list[bytes], sizes: list[int], headed: list[Sequence[Header]] | None
    ) -> list[Encoded]:
        """`encode_batch` of values that are all under `min_size` (`headed`: their headers, see
        `_plain_batch`): each passes through as it is, in C-level passes (the pass-through
        baseline's whole batch)."""
        n = len(values)
        total = sum(sizes)
        stats = self.stats
        stats.outcomes[_BELOW] += n
        stats.input_bytes += total
        stats.output_bytes += total
        # A list of its own per record, as the record-by-record path gives.
        headers: Iterator[Headers] = map(list, headed if headed else repeat((), n))
        return list(
            map(_encoded_from, zip(values, headers, repeat(_BELOW, n), sizes, sizes, strict=True))
        )

    def _encode_plain(
        self, values: list[bytes], sizes: list[int], headed: list[Sequence[Header]] | None
    ) -> list[Encoded]:
        """`encode_batch` of values all `min_size` bytes or more (`sizes`), none recognisably
        compressed (`headed`: their headers, see `_plain_batch`): compressed in one C call,
        each sent as its frame if that is smaller with our header counted, else as it was.

        The results are built in passes over the batch as if every frame were smaller (the
        common case with a trained dictionary); only the values that did not shrink, found in a
        C-level pass, are then replaced one by one. A relay at full speed runs no Python loop
        body per record here.
        """
        n = len(values)
        # A BufferWithSegmentsCollection iterates (sequence protocol); its stubs omit it. The
        # stubs ask for a list of any bytes-like type (lists are invariant): `values` is one.
        bytes_like = cast("list[bytes | bytearray | memoryview[int]]", values)
        segments = cast(
            Iterable[zstandard.BufferSegment],
            self._compressor().multi_compress_to_buffer(bytes_like),
        )
        frames = list(map(_segment_bytes, segments))
        costs = list(map(add, map(len, frames), repeat(self.header_bytes, n)))
        ours = self.header
        # A list of its own per record: the record's headers, then ours. (A comprehension: a
        # list built from chain objects in C-level passes took several times as long.)
        headers: Iterable[Headers] = (
            [[*h, ours] for h in headed] if headed else map(list, repeat((ours,), n))
        )
        results = list(
            map(
                _encoded_from,
                zip(frames, headers, repeat(_COMPRESSED, n), sizes, costs, strict=True),
            )
        )
        out_bytes = sum(costs)
        no_gain = 0
        for i in compress(range(n), map(ge, costs, sizes)):
            size = sizes[i]
            kept = list(headed[i]) if headed else []
            results[i] = _new_encoded(Encoded, (values[i], kept, _NO_GAIN, size, size))
            out_bytes += size - costs[i]
            no_gain += 1
        stats = self.stats
        stats.input_bytes += sum(sizes)
        stats.output_bytes += out_bytes
        if no_gain < n:
            stats.outcomes[_COMPRESSED] += n - no_gain
        if no_gain:
            stats.outcomes[_NO_GAIN] += no_gain
        return results


class DictionaryResolver(Protocol):
    """Where a Decoder finds dictionaries by id: the local store, the registry, a fixed set.

    A resolver that holds resources (the registry's, `RegistryResolver` in
    `sidecar.dictionaries.registry`) also has a `close()`, which `Decoder.close` calls. It is not
    part of the protocol: the store, a fixed set and most resolvers hold nothing to release.
    """

    def get(self, dict_id: int) -> Dictionary:
        """The dictionary with `dict_id`; raise `UnknownDictionary` if there is none."""
        ...

    def describe(self) -> str:
        """Where dictionaries were looked for, for error messages (e.g. "store ./dictionaries")."""
        ...


class StaticResolver:
    """A fixed set of dictionaries, for tests and for callers that load dictionaries themselves."""

    def __init__(self, dictionaries: Iterable[Dictionary] = ()) -> None:
        self._by_id = {d.id: d for d in dictionaries}

    def get(self, dict_id: int) -> Dictionary:
        try:
            return self._by_id[dict_id]
        except KeyError:
            raise UnknownDictionary(
                f"unknown dictionary id {dict_id}: not among the {len(self._by_id)} "
                "dictionaries given to the decoder"
            ) from None

    def describe(self) -> str:
        return f"{len(self._by_id)} given dictionaries"


def _power_of_two_at_least(n: int) -> int:
    return 1 << max(10, (n - 1).bit_length())


#: Header values a decoder keeps worked out, per thread (`Decoder._route`); past this many (a
#: stream of malformed or hostile headers) it starts again.
_KNOWN_ROUTES: Final = 1024


class Decoder:
    """Decodes record values produced by `Encoder` (or any zstd encoder using our header).

    Reads both wire formats. Safe on untrusted input: output is bounded by `max_output_size`
    before anything is allocated (python-zstandard would allocate whatever size a frame header
    declares), frames without a declared size are decompressed in bounded steps, the dictionary
    must be the header's (its fingerprint in a compact header, the frame's own id in a standard
    frame), and a value must be exactly one frame. Shareable between threads.
    """

    def __init__(
        self,
        resolver: DictionaryResolver | None = None,
        *,
        max_output_size: int = DEFAULT_MAX_OUTPUT_SIZE,
        header_key: str = DEFAULT_HEADER_KEY,
    ) -> None:
        """Build a decoder; `max_output_size` bounds every decoded value (bytes)."""
        if max_output_size < 1:
            raise ValueError("max_output_size must be at least 1 byte")
        self.resolver = resolver if resolver is not None else StaticResolver()
        self.max_output_size = max_output_size
        self.header_key = header_key
        # The window is the decoder's other memory cost; a frame never needs one larger than the
        # largest output we accept.
        self._max_window = min(_power_of_two_at_least(max_output_size), 1 << 31)
        self._dicts: dict[int, tuple[Dictionary, zstandard.ZstdCompressionDict]] = {}
        self._dicts_lock = threading.Lock()
        self._local = threading.local()

    @classmethod
    def from_store(
        cls,
        store: DictionaryStore,
        *,
        max_output_size: int = DEFAULT_MAX_OUTPUT_SIZE,
        header_key: str = DEFAULT_HEADER_KEY,
    ) -> Decoder:
        """A decoder that resolves ids in a local dictionary store (any namespace)."""
        return cls(store, max_output_size=max_output_size, header_key=header_key)

    def close(self) -> None:
        """Close the resolver if it has a `close()` (a registry's Kafka clients); idempotent."""
        close = getattr(self.resolver, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> Decoder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def dictionary_id(self, headers: Sequence[tuple[str, bytes | None]] | None) -> int | None:
        """The dictionary id our header names, None when the record is not ours to decode."""
        return header_dict_id(headers, self.header_key)

    def _route(self, raw: bytes | None) -> tuple[Tag, zstandard.ZstdDecompressor]:
        """The tag our header value `raw` names and this thread's decompressor for it, the
        fingerprint checked: worked out once per header value and thread, then looked up (a
        stream names a handful of dictionaries, and parsing and checking a tag took several
        times as long as decompressing a 100-byte value)."""
        known: dict[bytes | None, tuple[Tag, zstandard.ZstdDecompressor]] | None = getattr(
            self._local, "routes", None
        )
        if known is None:
            known = self._local.routes = {}
        route = known.get(raw)
        if route is None:
            tag = parse_tag(raw, self.header_key)
            dctx = self._decompressor(tag)
            if tag.compact:
                self._check_fingerprint(tag)
            if len(known) >= _KNOWN_ROUTES:
                known.clear()  # header values from a stream of garbage: bounded, not kept
            route = known[raw] = (tag, dctx)
        return route

    def _decompressor(self, tag: Tag) -> zstandard.ZstdDecompressor:
        cache: dict[tuple[int, bool], zstandard.ZstdDecompressor] | None = getattr(
            self._local, "dctx", None
        )
        if cache is None:
            cache = self._local.dctx = {}
        dctx = cache.get((tag.dict_id, tag.compact))
        if dctx is None:
            zdict = None if tag.dict_id == NO_DICTIONARY else self._load(tag.dict_id)[1]
            dctx = zstandard.ZstdDecompressor(
                dict_data=zdict,
                max_window_size=self._max_window,
                format=zstandard.FORMAT_ZSTD1_MAGICLESS if tag.compact else zstandard.FORMAT_ZSTD1,
            )
            cache[(tag.dict_id, tag.compact)] = dctx
        return dctx

    def _check_fingerprint(self, tag: Tag) -> None:
        """A compact tag's fingerprint must be the dictionary's: else it is another one."""
        dictionary = None if tag.dict_id == NO_DICTIONARY else self._load(tag.dict_id)[0]
        if fingerprint(dictionary) != tag.fingerprint:
            raise CorruptFrame(
                f"the record's header names {self._where(tag.dict_id)}, but its fingerprint "
                f"{tag.fingerprint} is that dictionary's {fingerprint(dictionary)}: it was "
                "compressed with another dictionary under that id (a registry of another "
                "cluster?) or mislabelled; decoding it would give garbage"
            )

    def _load(self, dict_id: int) -> tuple[Dictionary, zstandard.ZstdCompressionDict]:
        with self._dicts_lock:
            entry = self._dicts.get(dict_id)
            if entry is None:
                dictionary = self.resolver.get(dict_id)
                zdict = zstd_dictionary(dictionary)
                entry = self._dicts[dict_id] = (dictionary, zdict)
            return entry

    def _where(self, dict_id: int) -> str:
        if dict_id == NO_DICTIONARY:
            return "no dictionary"
        entry = self._dicts.get(dict_id)
        namespace = entry[0].namespace if entry else "?"
        return f"dictionary {dict_id} (namespace {namespace})"

    def decode(
        self, value: bytes | None, headers: Sequence[tuple[str, bytes | None]] | None = None
    ) -> bytes | None:
        """The original value of a record; records without our header are returned unchanged.

        Raises:
            UnknownDictionary: the header names an id the resolver does not have.
            CorruptFrame: the header is malformed, or the value is not one valid frame for it.
            OutputTooLarge: the frame would decode past `max_output_size`.
        """
        found = _our_header(headers, self.header_key)
        if not found or value is None:
            return value  # a tombstone stays a tombstone, whatever its headers
        tag, dctx = self._route(found[0])
        dict_id = tag.dict_id
        try:
            params = _frame_parameters(value, tag)
        except zstandard.ZstdError as exc:
            raise CorruptFrame(
                f"value for {self._where(dict_id)} has a bad frame header: {exc}"
            ) from None
        if params.dict_id and params.dict_id != dict_id:
            raise CorruptFrame(
                f"frame was compressed with dictionary {params.dict_id}, but the record header "
                f"names {self._where(dict_id)}: the record was mislabelled; decoding it would "
                "give garbage"
            )
        size = params.content_size
        unknown_size = size == zstandard.CONTENTSIZE_UNKNOWN
        if size > self.max_output_size and not unknown_size:
            raise OutputTooLarge(
                f"frame for {self._where(dict_id)} declares {size} bytes of content; the limit "
                f"is {self.max_output_size} bytes (max_output_size)"
            )
        if params.window_size > self._max_window:
            raise OutputTooLarge(
                f"frame for {self._where(dict_id)} needs a {params.window_size}-byte window; the "
                f"limit is {self._max_window} bytes (raise max_output_size if such values are "
                "legitimate)"
            )
        if unknown_size:
            self._bounded_probe(dctx, value, dict_id)
        return self._decompress_single_frame(dctx, value, dict_id)

    def decode_batch(
        self, records: Iterable[tuple[bytes | None, Sequence[tuple[str, bytes | None]] | None]]
    ) -> list[Encoded]:
        """Decode many records, in order: the decode relay's path (the mirror of `encode_batch`).

        Headers out = headers in without ours. `input_bytes` counts the value and our header,
        `output_bytes` the decoded value. Raises like `decode` at the first bad record.
        """
        key = self.header_key
        results: list[Encoded] = []
        append = results.append
        for value, headers in records:
            hdrs = list(headers) if headers else []
            if value is None or not any(k == key for k, _ in hdrs):
                size = 0 if value is None else len(value)
                outcome = Outcome.TOMBSTONE if value is None else Outcome.NOT_ENCODED
                append(_new_encoded(Encoded, (value, hdrs, outcome, size, size)))
                continue
            decoded = self.decode(value, hdrs)
            assert decoded is not None
            rest = [(k, v) for k, v in hdrs if k != key]
            ours = next(v for k, v in hdrs if k == key) or b""
            size = len(value) + header_cost(key, ours)
            append(_new_encoded(Encoded, (decoded, rest, Outcome.DECODED, size, len(decoded))))
        return results

    def _bounded_probe(self, dctx: zstandard.ZstdDecompressor, value: bytes, dict_id: int) -> None:
        """Decompress a frame of undeclared size in bounded steps; raise past the output limit."""
        try:
            with dctx.stream_reader(value, read_across_frames=False) as reader:
                produced = 0
                while chunk := reader.read(min(1 << 17, self.max_output_size + 1)):
                    produced += len(chunk)
                    if produced > self.max_output_size:
                        raise OutputTooLarge(
                            f"frame for {self._where(dict_id)} (no declared size) decodes past "
                            f"the limit of {self.max_output_size} bytes (max_output_size)"
                        )
        except zstandard.ZstdError as exc:
            raise CorruptFrame(
                f"value for {self._where(dict_id)} does not decompress: {exc}"
            ) from None

    def _decompress_single_frame(
        self, dctx: zstandard.ZstdDecompressor, value: bytes, dict_id: int
    ) -> bytes:
        try:
            dobj = dctx.decompressobj()
            out: bytes = dobj.decompress(value)
        except zstandard.ZstdError as exc:
            raise CorruptFrame(
                f"value for {self._where(dict_id)} does not decompress: {exc}"
            ) from None
        if not dobj.eof:
            raise CorruptFrame(f"value for {self._where(dict_id)} is a truncated zstd frame")
        if dobj.unused_data:
            raise CorruptFrame(
                f"value for {self._where(dict_id)} has {len(dobj.unused_data)} bytes after its "
                "zstd frame; a record value must be exactly one frame"
            )
        return out


def standard_frame(value: bytes, tag: Tag) -> bytes:
    """`value` as a standard zstd frame, which any zstd decoder reads with the dictionary file:
    a compact frame gets its magic number back (the documented transform); a standard one is
    returned as it is."""
    return ZSTD_MAGIC + value if tag.compact else value
