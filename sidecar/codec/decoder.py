"""The decoder: the original value of any record an encoder wrote, in either wire format.

Safe on untrusted input (see `Decoder`); dictionaries are found by id through a
`DictionaryResolver`: the local store, the registry, a fixed set.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import Final, Protocol

import zstandard

from sidecar.codec.results import Outcome, Transformed
from sidecar.codec.wire import (
    DEFAULT_HEADER_KEY,
    NO_DICTIONARY,
    Tag,
    fingerprint,
    frame_parameters,
    header_cost,
    header_dict_id,
    our_header,
    parse_tag,
    zstd_dictionary,
)
from sidecar.dictionaries.model import Dictionary
from sidecar.errors import CorruptFrame, DecodeLimitReached, OutputTooLarge, UnknownDictionary

#: Largest value a Decoder produces unless told otherwise (bytes).
DEFAULT_MAX_OUTPUT_SIZE: Final = 8 * 1024 * 1024
# Transformed's own __new__ is Python code (see the encoder); tuple.__new__ builds the same object.
_new_encoded: Final = tuple.__new__


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

#: Dictionaries a decoder keeps loaded (and decompressors per thread): a stream names a handful
#: at a time, but a consumer reading a long retention meets every dictionary of its history,
#: each ~100-200 KiB loaded. Past this many the least recently used is dropped (and loaded
#: again from the resolver if a record names it once more).
_KEPT_DICTIONARIES: Final = 64


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
        store: DictionaryResolver,
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
            known = self._local.routes  # _decompressor may have started this thread's anew
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
            if len(cache) >= _KEPT_DICTIONARIES:
                # Dropped with the routes that hold them, or those would keep them alive.
                cache.clear()
                self._local.routes = {}
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
            entry = self._dicts.pop(dict_id, None)
            if entry is None:
                dictionary = self.resolver.get(dict_id)
                entry = (dictionary, zstd_dictionary(dictionary))
                if len(self._dicts) >= _KEPT_DICTIONARIES:
                    del self._dicts[next(iter(self._dicts))]  # the least recently used
            self._dicts[dict_id] = entry  # last in order: the most recently used
            return entry

    def _where(self, dict_id: int) -> str:
        if dict_id == NO_DICTIONARY:
            return "no dictionary"
        entry = self._dicts.get(dict_id)
        namespace = entry[0].namespace if entry else "?"
        return f"dictionary {dict_id} (namespace {namespace})"

    def decode(
        self,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
        *,
        limit: int | None = None,
    ) -> bytes | None:
        """The original value of a record; records without our header are returned unchanged.
        `limit` bounds this value's output below `max_output_size` (a caller's budget): a frame
        that declares more is refused before anything is decompressed, one that does not
        declare its size is stopped once it has produced `limit` + 1 bytes.

        Raises:
            UnknownDictionary: the header names an id the resolver does not have.
            CorruptFrame: the header is malformed, or the value is not one valid frame for it.
            OutputTooLarge: the frame would decode past `max_output_size`.
            DecodeLimitReached: it would decode past `limit`, within `max_output_size`.
        """
        found = our_header(headers, self.header_key)
        if not found or value is None:
            return value  # a tombstone stays a tombstone, whatever its headers
        tag, dctx = self._route(found[0])
        dict_id = tag.dict_id
        try:
            params = frame_parameters(value, tag)
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
        bound = self.max_output_size if limit is None else min(limit, self.max_output_size)
        size = params.content_size
        unknown_size = size == zstandard.CONTENTSIZE_UNKNOWN
        if size > bound and not unknown_size:
            raise self._too_large(
                bound, f"frame for {self._where(dict_id)} declares {size} bytes of content"
            )
        if params.window_size > self._max_window:
            raise OutputTooLarge(
                f"frame for {self._where(dict_id)} needs a {params.window_size}-byte window; the "
                f"limit is {self._max_window} bytes (raise max_output_size if such values are "
                "legitimate)"
            )
        if unknown_size:
            self._bounded_probe(dctx, value, dict_id, bound)
        return self._decompress_single_frame(dctx, value, dict_id)

    def _too_large(self, bound: int, what: str) -> OutputTooLarge:
        """The error for a frame whose output passes `bound`: the decoder's limit, or a lower
        one the call was given."""
        if bound < self.max_output_size:
            return DecodeLimitReached(f"{what}; this call's bound is {bound} bytes")
        return OutputTooLarge(
            f"{what}; the limit is {self.max_output_size} bytes (max_output_size)"
        )

    def decode_batch(
        self, records: Iterable[tuple[bytes | None, Sequence[tuple[str, bytes | None]] | None]]
    ) -> list[Transformed]:
        """Decode many records, in order: the decode relay's path (the mirror of `encode_batch`).

        Headers out = headers in without ours. `input_bytes` counts the value and our header,
        `output_bytes` the decoded value. Raises like `decode` at the first bad record.
        """
        key = self.header_key
        results: list[Transformed] = []
        append = results.append
        for value, headers in records:
            hdrs = list(headers) if headers else []
            if value is None or not any(k == key for k, _ in hdrs):
                size = 0 if value is None else len(value)
                outcome = Outcome.TOMBSTONE if value is None else Outcome.NOT_ENCODED
                append(_new_encoded(Transformed, (value, hdrs, outcome, size, size)))
                continue
            decoded = self.decode(value, hdrs)
            assert decoded is not None
            rest = [(k, v) for k, v in hdrs if k != key]
            ours = next(v for k, v in hdrs if k == key) or b""
            size = len(value) + header_cost(key, ours)
            append(_new_encoded(Transformed, (decoded, rest, Outcome.DECODED, size, len(decoded))))
        return results

    def _bounded_probe(
        self, dctx: zstandard.ZstdDecompressor, value: bytes, dict_id: int, bound: int
    ) -> None:
        """Decompress a frame of undeclared size in bounded steps; raise past `bound`."""
        try:
            with dctx.stream_reader(value, read_across_frames=False) as reader:
                produced = 0
                while chunk := reader.read(min(1 << 17, bound + 1 - produced)):
                    produced += len(chunk)
                    if produced > bound:
                        raise self._too_large(
                            bound,
                            f"frame for {self._where(dict_id)} (no declared size) decodes past "
                            f"{bound} bytes",
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
