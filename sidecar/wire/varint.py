"""Kafka's varints: the protocol's unsigned varints (compact lengths, counts and tagged fields of
flexible versions; also LEB128, as the codec's compact header writes a dictionary id) and the
record format's zig-zag varints (and varlongs), read and written.

Pure and standalone (the codec imports it): the standard library and `sidecar.errors` only. The
readers take the common one-byte case first: they run per record in the proxy.
"""

from __future__ import annotations

from typing import Final

from sidecar.errors import MalformedBatch, ProtocolError

#: An unsigned varint of the protocol holds 32 bits at most: 5 bytes of 7 bits.
MAX_UVARINT_BYTES: Final = 5
#: A zig-zag varlong holds 64 bits: 10 bytes of 7 bits.
MAX_VARINT_BYTES: Final = 10


def uvarint(n: int) -> bytes:
    """The unsigned varint of `n` >= 0: 7 bits a byte, low bits first, bit 7 set on all but the
    last byte."""
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def read_uvarint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """(value, position after it) of the unsigned varint at `pos`, which must end before `end`.

    Raises:
        ProtocolError: it runs to `end`, or past 5 bytes.
    """
    if pos < end:
        byte = data[pos]
        if byte < 0x80:
            return byte, pos + 1
        value, shift = byte & 0x7F, 7
        stop = min(pos + MAX_UVARINT_BYTES, end)
        at = pos + 1
        while at < stop:
            byte = data[at]
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value, at + 1
            shift += 7
            at += 1
        if stop - pos == MAX_UVARINT_BYTES:
            raise ProtocolError(f"an unsigned varint at byte {pos} is longer than 5 bytes")
    raise ProtocolError(f"an unsigned varint at byte {pos} runs past the end of its frame")


def varint(n: int) -> bytes:
    """The zig-zag varint (also varlong) of a signed integer: the unsigned varint of its
    zig-zag form (0, -1, 1, -2, ... as 0, 1, 2, 3, ...)."""
    return uvarint((n << 1) ^ (n >> 63))


def varint_size(n: int) -> int:
    """Bytes of the zig-zag varint of `n` (`len(varint(n))`, without building it)."""
    zigzag = (n << 1) ^ (n >> 63)
    size = 1
    while zigzag >= 0x80:
        zigzag >>= 7
        size += 1
    return size


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """(value, position after it) of the zig-zag varint at `pos`.

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
            if shift >= 7 * MAX_VARINT_BYTES:
                raise MalformedBatch("a varint is longer than 10 bytes")
    except IndexError:
        raise MalformedBatch("a record ends inside a varint (truncated)") from None
