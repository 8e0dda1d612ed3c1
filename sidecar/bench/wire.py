"""`bench wire`: what each wire-format choice costs per record, and how safe the compact one is.

Three measurements on the same messages (one per corpus or event kind):

1. **Header options**: bytes a record pays for our header as Kafka stores it (the key and value
   with their varint lengths), by key width and by how the id is written: ASCII decimal (the
   standard form), 4-byte binary, or the compact tag (fingerprint byte + varint).
2. **Frame options**: bytes of the value, per message, held-out: standard frame, without its
   dictionary id, also without the magic (the compact frame), also without the content size.
3. **Wrong dictionary**: compact frames carry neither magic nor dictionary id, so a decoder given
   another dictionary has only zstd's own checks and our fingerprint. Each value compressed with
   dictionary A is decoded with dictionaries B of the same namespace (trained on other windows,
   other sizes); outcomes counted: zstd refused it, zstd produced garbage that the fingerprint
   caught, or garbage that got through (both 7-bit fingerprints equal by chance).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import zstandard

from sidecar.codec import header_cost, tag_value
from sidecar.dictionaries.model import MIN_DICT_ID, sha256_hex

#: Ids whose header cost is shown: the first dictionary, the 128th, the 16,384th.
SAMPLE_IDS: Final = (MIN_DICT_ID, MIN_DICT_ID + 127, MIN_DICT_ID + 16_383)
DICT_SIZE: Final = 16 * 1024
LEVEL: Final = 3


@dataclass(frozen=True, slots=True)
class HeaderOption:
    """One way of writing our header, and what it costs a record (bytes) per sample id."""

    name: str
    key: str
    costs: tuple[int, ...]
    note: str


def header_options() -> list[HeaderOption]:
    """Every header form measured, with its cost for each of `SAMPLE_IDS`."""

    def costs(key: str, value_of: Any) -> tuple[int, ...]:
        return tuple(header_cost(key, value_of(i)) for i in SAMPLE_IDS)

    return [
        HeaderOption(
            "ASCII decimal id (standard)",
            "zd",
            costs("zd", lambda i: str(i).encode()),
            "release 1; readable in kcat",
        ),
        HeaderOption(
            "4-byte binary id",
            "zd",
            costs("zd", lambda i: i.to_bytes(4, "big")),
            "no room for a version or a check",
        ),
        HeaderOption(
            "compact tag (fingerprint + varint)",
            "zd",
            costs("zd", lambda i: tag_value(i, "compact")),
            "chosen: versioned by bit 7, 7-bit dictionary check",
        ),
        HeaderOption(
            "compact tag, 1-byte key",
            "z",
            costs("z", lambda i: tag_value(i, "compact")),
            "1 B more saved; a 1-letter key collides more easily",
        ),
    ]


@dataclass(frozen=True, slots=True)
class FrameRow:
    """Mean bytes of one frame form over the held-out messages."""

    name: str
    bytes_per_message: float
    note: str


def frame_rows(train: Sequence[bytes], heldout: Sequence[bytes]) -> list[FrameRow]:
    """Mean frame bytes per held-out message for each frame form (dictionary trained on `train`)."""
    zdict = zstandard.train_dictionary(DICT_SIZE, list(train))

    def mean(params: zstandard.ZstdCompressionParameters) -> float:
        cctx = zstandard.ZstdCompressor(dict_data=zdict, compression_params=params)
        return sum(len(cctx.compress(v)) for v in heldout) / max(1, len(heldout))

    def level(**kw: Any) -> zstandard.ZstdCompressionParameters:
        return zstandard.ZstdCompressionParameters.from_level(LEVEL, **kw)

    magicless = zstandard.FORMAT_ZSTD1_MAGICLESS
    # A trained dictionary's id is random (4 bytes); ours are 32768 + n (2 bytes): count 2.
    id_bytes = 2
    standard = mean(level(write_dict_id=0)) + id_bytes
    return [
        FrameRow("standard: magic, dictionary id, content size", standard, "release 1"),
        FrameRow("- dictionary id", standard - id_bytes, "the header names it"),
        FrameRow(
            "- magic too (compact)",
            mean(level(write_dict_id=0, format=magicless)),
            "chosen: prepend 28 b5 2f fd for zstd -d",
        ),
        FrameRow(
            "- content size too",
            mean(level(write_dict_id=0, write_content_size=0, format=magicless)),
            "decoder cannot bound output before decoding",
        ),
    ]


@dataclass(slots=True)
class WrongDictionary:
    """Outcomes of decoding compact frames with another dictionary of the same namespace."""

    pairs: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)

    def to_dict(self) -> dict[str, Any]:
        return {"pairs": self.pairs, "outcomes": dict(self.outcomes)}


def _fingerprint(data: bytes) -> int:
    return int(sha256_hex(data)[:2], 16) & 0x7F


def wrong_dictionary(messages: Sequence[bytes], pairs: int) -> WrongDictionary:
    """Decode compact frames of dictionary A with dictionaries B (other windows and sizes)."""
    third = len(messages) // 3
    a = zstandard.train_dictionary(DICT_SIZE, list(messages[:third]))
    others = [
        zstandard.train_dictionary(DICT_SIZE, list(messages[third : 2 * third])),
        zstandard.train_dictionary(4 * DICT_SIZE, list(messages[:third])),
        zstandard.train_dictionary(DICT_SIZE // 4, list(messages[third:])),
    ]
    params = zstandard.ZstdCompressionParameters.from_level(
        LEVEL, format=zstandard.FORMAT_ZSTD1_MAGICLESS, write_dict_id=0
    )
    cctx = zstandard.ZstdCompressor(dict_data=a, compression_params=params)
    ours = _fingerprint(a.as_bytes())
    result = WrongDictionary()
    values = messages[2 * third :]
    frames = [cctx.compress(v) for v in values]
    for wrong in others:
        dctx = zstandard.ZstdDecompressor(dict_data=wrong, format=zstandard.FORMAT_ZSTD1_MAGICLESS)
        caught = _fingerprint(wrong.as_bytes()) != ours
        for value, frame in zip(values, frames, strict=True):
            if result.pairs >= pairs:
                return result
            result.pairs += 1
            try:
                out = dctx.decompress(frame)
            except zstandard.ZstdError:
                result.outcomes["refused by zstd"] += 1
                continue
            if out == value:
                result.outcomes["decoded right anyway"] += 1
            elif caught:
                result.outcomes["garbage, caught by the fingerprint"] += 1
            else:
                result.outcomes["garbage, not caught"] += 1
    return result
