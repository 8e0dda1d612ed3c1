"""Kafka's varints (`sidecar.wire.varint`): the protocol's unsigned ones and the record format's
zig-zag ones, written and read back, and what a reader refuses."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sidecar.errors import MalformedBatch, ProtocolError
from sidecar.wire.varint import (
    read_uvarint,
    read_varint,
    uvarint,
    varint,
    varint_size,
)


@pytest.mark.parametrize(
    ("n", "encoded"),
    [
        (0, b"\x00"),
        (-1, b"\x01"),
        (1, b"\x02"),
        (63, b"\x7e"),
        (64, b"\x80\x01"),
        (300, b"\xd8\x04"),
    ],
)
def test_varints_are_zigzag_encoded(n: int, encoded: bytes) -> None:
    assert varint(n) == encoded


@pytest.mark.parametrize(("n", "encoded"), [(0, b"\x00"), (127, b"\x7f"), (150, b"\x96\x01")])
def test_unsigned_varints_are_7_bits_a_byte_low_bits_first(n: int, encoded: bytes) -> None:
    assert uvarint(n) == encoded
    assert read_uvarint(b"\xff" + encoded + b"\xff", 1, len(encoded) + 2) == (n, len(encoded) + 1)


@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_an_unsigned_varint_reads_back(n: int) -> None:
    encoded = uvarint(n)
    assert read_uvarint(encoded, 0, len(encoded)) == (n, len(encoded))


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_a_zigzag_varlong_reads_back_and_its_size_is_its_length(n: int) -> None:
    encoded = varint(n)
    assert read_varint(encoded + b"\x00", 0) == (n, len(encoded))
    assert varint_size(n) == len(encoded)


@pytest.mark.parametrize(
    ("data", "end", "message"),
    [
        (b"", 0, "runs past the end"),
        (b"\x96\x01", 1, "runs past the end"),  # the frame ends before the varint's last byte
        (b"\x80\x80\x80\x80\x80\x01", 6, "longer than 5 bytes"),
    ],
)
def test_an_unsigned_varint_past_its_end_or_5_bytes_is_refused(
    data: bytes, end: int, message: str
) -> None:
    with pytest.raises(ProtocolError, match=message):
        read_uvarint(data, 0, end)


@pytest.mark.parametrize(
    ("data", "message"), [(b"\x80", "truncated"), (b"\x80" * 10 + b"\x01", "longer than 10")]
)
def test_a_zigzag_varint_cut_short_or_past_10_bytes_is_refused(data: bytes, message: str) -> None:
    with pytest.raises(MalformedBatch, match=message):
        read_varint(data, 0)
