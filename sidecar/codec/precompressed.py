"""Values compressed already, told by their magic number: a second pass only burns CPU.

The encoder passes them through (`Outcome.PRECOMPRESSED`); the sampler and training leave them
out, since no dictionary learns anything from them.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import compress
from operator import itemgetter, methodcaller
from typing import Final

from sidecar.codec.wire import ZSTD_MAGIC

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

# First bytes of the magics above (and of zstd skippable frames): most values (JSON, text) are
# rejected by one set lookup, which matters on the per-message path.
MAGIC_FIRST_BYTES: Final = frozenset(m[0] for m in _COMPRESSED_MAGICS) | frozenset(
    range(0x50, 0x60)
)


# The same rules for a whole batch in C-level passes (`any_compressed`): the bytes that
# are no magic's first byte (deleted from a batch's first bytes, nothing may be left), and every
# prefix `looks_compressed` recognises, skippable zstd frames spelled out, for one `startswith`.
_NOT_MAGIC_FIRST: Final = bytes(b for b in range(256) if b not in MAGIC_FIRST_BYTES)
_COMPRESSED_PREFIXES: Final = _COMPRESSED_MAGICS + tuple(
    bytes([first]) + _SKIPPABLE_FRAME_MAGIC_HIGH for first in range(0x50, 0x60)
)
_first_byte: Final = itemgetter(0)
_starts_compressed: Final = methodcaller("startswith", _COMPRESSED_PREFIXES)


def looks_compressed(value: bytes) -> bool:
    """True when `value` starts with the magic number of a common compressed format."""
    if not value or value[0] not in MAGIC_FIRST_BYTES:
        return False
    if value.startswith(_COMPRESSED_MAGICS):
        return True
    skippable = len(value) >= 4 and value[1:4] == _SKIPPABLE_FRAME_MAGIC_HIGH
    return skippable and 0x50 <= value[0] <= 0x5F


def any_compressed(values: Sequence[bytes]) -> bool:
    """Whether any of `values` (none empty) is recognisably compressed (`looks_compressed`)."""
    # Text and JSON rarely start with a magic's first byte: the exact test only on those that
    # do. Some streams do often (log lines opening with "[" or "_", names with "P" to "Z"), so
    # the test is not run on every value once one suspect is seen.
    firsts = bytes(map(_first_byte, values))
    if not firsts.translate(None, _NOT_MAGIC_FIRST):
        return False
    suspects = compress(values, map(MAGIC_FIRST_BYTES.__contains__, firsts))
    return any(map(_starts_compressed, suspects))
