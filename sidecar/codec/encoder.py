"""The encoder: compresses record values with one dictionary (or none), applying the skip rules.

The relay is a loop around `Encoder.encode_batch`; the in-process producers call
`Encoder.encode_value` once per record.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import chain, compress, repeat
from operator import add, ge, itemgetter
from typing import Any, Final, Protocol, cast

import zstandard

from sidecar.codec.precompressed import MAGIC_FIRST_BYTES, any_compressed, looks_compressed
from sidecar.codec.results import CodecStats, Outcome, Transformed
from sidecar.codec.wire import (
    DEFAULT_HEADER_KEY,
    DEFAULT_WIRE_FORMAT,
    NO_DICTIONARY,
    Header,
    Headers,
    WireFormat,
    check_encoded,
    fingerprint,
    header_cost,
    tag_value,
    zstd_dictionary,
)
from sidecar.dictionaries.model import Dictionary, validate_dict_id

#: Below this size, compressing without a dictionary loses far more often than it wins (measured
#: on event data: all 32-63 B and 55% of 64-127 B messages grow), so it is not even tried.
NO_DICTIONARY_MIN_SIZE: Final = 128
#: Level used without a dictionary, and for a dictionary whose metadata names none.
DEFAULT_LEVEL: Final = 3
#: Records in a batch from which `encode_batch` compresses their values in one C call
#: (python-zstandard's `multi_compress_to_buffer`): the call costs ~12 µs of its own (a fresh
#: compression context) and saves a Python call per value. Measured on 113-byte events, µs per
#: record: 1.45 one by one vs 1.86 batched at 20 records, 1.48 vs 1.43 at 100, 1.73 vs 1.49 at
#: 1,000.
BATCH_API_MIN: Final = 100

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


# NamedTuple's generated __new__ is Python code (~300 ns); tuple.__new__ on the class builds the
# same object in a quarter of the time.
_new_encoded: Final = tuple.__new__
#: `Transformed` from a 5-tuple, callable from `map` (no Python frame per record).
_encoded_from: Final = partial(tuple.__new__, Transformed)
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


class ActiveDictionaries(Protocol):
    """Where `Encoder.from_store` finds a namespace's active dictionary: a `DictionaryStore`.

    Typed by the one method used, so that the codec does not import the store's file I/O.
    """

    def active(self, namespace: str) -> Dictionary | None:
        """The active dictionary of `namespace`; None when none is active."""
        ...


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
        store: ActiveDictionaries,
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
        if value[0] in MAGIC_FIRST_BYTES and looks_compressed(value):
            return value, _PRECOMPRESSED
        compressor: zstandard.ZstdCompressor | None = getattr(self._local, "compressor", None)
        frame = (compressor or self._compressor()).compress(value)
        if len(frame) + self.header_bytes < size:
            return frame, _COMPRESSED
        return value, _NO_GAIN

    def encode_record(
        self, value: bytes | None, headers: Sequence[tuple[str, bytes | None]] | None = None
    ) -> Transformed:
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
            return _new_encoded(Transformed, (out, hdrs, outcome, size, cost))
        stats.output_bytes += size
        if outcome == _PRECOMPRESSED:
            stats.excluded_bytes += size
        return _new_encoded(Transformed, (value, list(headers or ()), outcome, size, size))

    def encode(
        self, value: bytes | None, headers: Sequence[tuple[str, bytes | None]] | None = None
    ) -> tuple[bytes | None, Headers]:
        """Encode one value: `(value', headers')`, ready to produce."""
        encoded = self.encode_record(value, headers)
        return encoded.value, encoded.headers

    # C901: one function on purpose: the relay's hot path, whose branches pick a C-level route
    # for the whole batch before any per-record step (bench codec measures each route).
    def encode_batch(  # noqa: C901
        self, records: Iterable[tuple[bytes | None, Sequence[tuple[str, bytes | None]] | None]]
    ) -> list[Transformed]:
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
            if min(sizes) >= max(self.min_size, 1) and not any_compressed(values):
                return self._encode_plain(values, sizes, headed)
        key, min_size, magic_first = self.header_key, self.min_size, MAGIC_FIRST_BYTES
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
                append(_new_encoded(Transformed, (None, list(headers or ()), _TOMBSTONE, 0, 0)))
                continue
            size = len(value)
            in_bytes += size
            if headers and any(k == key for k, _ in headers):
                check_encoded(value, headers, key)  # a spoofed header would make it undecodable
                ours += 1
                excluded += size
                out_bytes += size
                append(_new_encoded(Transformed, (value, list(headers), _OURS, size, size)))
            elif size < min_size:
                below += 1
                out_bytes += size
                append(_new_encoded(Transformed, (value, list(headers or ()), _BELOW, size, size)))
            elif value and value[0] in magic_first and looks_compressed(value):
                precompressed += 1
                excluded += size
                out_bytes += size
                append(
                    _new_encoded(
                        Transformed, (value, list(headers or ()), _PRECOMPRESSED, size, size)
                    )
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
                    append(_new_encoded(Transformed, (frame, hdrs, _COMPRESSED, size, cost)))
                else:
                    no_gain += 1
                    out_bytes += size
                    append(
                        _new_encoded(
                            Transformed, (value, list(headers or ()), _NO_GAIN, size, size)
                        )
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
                        Transformed, (segment.tobytes(), hdrs, _COMPRESSED, size, cost)
                    )
                else:
                    no_gain += 1
                    out_bytes += size
                    results[i] = _new_encoded(
                        Transformed, (raw, list(headers or ()), _NO_GAIN, size, size)
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
    ) -> list[Transformed]:
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
        headers: Iterator[Headers] = map(list, headed or repeat((), n))
        return list(
            map(_encoded_from, zip(values, headers, repeat(_BELOW, n), sizes, sizes, strict=True))
        )

    def _encode_plain(
        self, values: list[bytes], sizes: list[int], headed: list[Sequence[Header]] | None
    ) -> list[Transformed]:
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
            results[i] = _new_encoded(Transformed, (values[i], kept, _NO_GAIN, size, size))
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
