"""The wire format: one zstd frame per record value, the dictionary id in a record header.

Everything a reader or writer in another language needs, and nothing else: the header, its two
forms, the frames. Described for readers in sidecar/README.md ("Wire format").

A compressed record carries header `zd` (configurable); a record without it was not compressed by
us. Its value says how the record value was framed, and decoders read both forms, so every record
ever written stays decodable:

* **compact** (the default): the header value is one byte with bit 7 set and a 7-bit fingerprint
  of the dictionary, then the dictionary id minus 32767 as an unsigned LEB128 varint (0: no
  dictionary); 2 bytes for the first 127 dictionaries. The record value is a zstd frame (RFC 8878)
  without the 4-byte magic number and without the frame's dictionary id: prepend `28 b5 2f fd` and
  any zstd decoder reads it with the dictionary file.
* **standard**: the header value is the ASCII decimal dictionary id (`0`: none); the record value
  is one standard zstd frame with the content size and the dictionary id.

Neither writes zstd's checksum: Kafka's record batches carry a CRC already. Everything else about
the record (key, timestamp, other headers) is left as it was. Dictionary ids are in zstd's private
range, `MIN_DICT_ID`..`MAX_DICT_ID` (32768..2**31-1); a dictionary is a full zstd dictionary.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Literal, NamedTuple

import zstandard

from sidecar.dictionaries.model import MAX_DICT_ID, MIN_DICT_ID, Dictionary
from sidecar.errors import CorruptFrame, ProtocolError
from sidecar.wire.varint import read_uvarint, uvarint, varint_size

#: Header key of compressed records. Short on purpose: headers are stored uncompressed with every
#: record, and each byte of key costs ~1% on a 100-byte event.
DEFAULT_HEADER_KEY: Final = "zd"
#: Header value for frames compressed without a dictionary.
NO_DICTIONARY: Final = 0
#: zstd's frame magic number, which compact frames leave out.
ZSTD_MAGIC: Final = b"\x28\xb5\x2f\xfd"

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

Header = tuple[str, bytes | None]
Headers = list[Header]


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


def tag_value(dict_id: int, wire: WireFormat, mark: int = 0) -> bytes:
    """The header value naming `dict_id` (0: no dictionary) in wire format `wire`; `mark` is
    the dictionary's fingerprint (compact only)."""
    if wire == "standard":
        return str(dict_id).encode("ascii")
    return bytes([COMPACT_FLAG | mark]) + uvarint(dict_id - ID_BASE if dict_id else 0)


def parse_tag(raw: bytes | None, key: str = DEFAULT_HEADER_KEY) -> Tag:
    """Read one header value of ours, in either wire format.

    Raises:
        CorruptFrame: the value is neither an ASCII decimal id nor a compact tag.
    """
    if raw and raw[0] & COMPACT_FLAG:
        try:
            n, end = read_uvarint(raw, 1, len(raw))
        except ProtocolError:
            n, end = 0, -1
        dict_id = n + ID_BASE if n else 0
        if end == len(raw) and dict_id <= MAX_DICT_ID:  # no byte after the varint's last
            return Tag(dict_id, True, raw[0] & 0x7F)
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


def our_header(headers: Sequence[tuple[str, bytes | None]] | None, key: str) -> list[bytes | None]:
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
    found = our_header(headers, key)
    return parse_tag(found[0], key) if found else None


def header_dict_id(headers: Sequence[tuple[str, bytes | None]] | None, key: str) -> int | None:
    """The dictionary id our header names; None when the record has no header of ours.

    Raises:
        CorruptFrame: the header appears more than once, or does not parse.
    """
    tag = header_tag(headers, key)
    return None if tag is None else tag.dict_id


def header_cost(key: str, value: bytes) -> int:
    """Bytes one record header adds to a Kafka v2 record: key and value with their lengths."""
    key_bytes = len(key.encode())
    return varint_size(key_bytes) + key_bytes + varint_size(len(value)) + len(value)


def frame_parameters(value: bytes, tag: Tag) -> zstandard.FrameParameters:
    """The frame header of `value` as `tag` says it is framed; raises `zstandard.ZstdError`."""
    if tag.compact:
        return zstandard.get_frame_parameters(value, format=zstandard.FORMAT_ZSTD1_MAGICLESS)
    if not value.startswith(ZSTD_MAGIC):
        raise zstandard.ZstdError("no zstd magic number")
    return zstandard.get_frame_parameters(value)


def standard_frame(value: bytes, tag: Tag) -> bytes:
    """`value` as a standard zstd frame, which any zstd decoder reads with the dictionary file:
    a compact frame gets its magic number back (the documented transform); a standard one is
    returned as it is."""
    return ZSTD_MAGIC + value if tag.compact else value


def check_encoded(value: bytes, headers: Sequence[tuple[str, bytes | None]], key: str) -> None:
    """Refuse a record that carries our header but could not have been written by an encoder:
    passed through as `already_encoded`, it would not decode downstream.

    Raises:
        CorruptFrame: the header is malformed, or the value is not one zstd frame of that id.
    """
    tag = header_tag(headers, key)
    assert tag is not None  # the caller saw our header
    try:
        frame_id = frame_parameters(value, tag).dict_id
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
