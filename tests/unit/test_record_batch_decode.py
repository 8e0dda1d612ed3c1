"""Record batches decoded by `tests.record_batches.decode_batches`, the reference reader the
proxy's tests check its rewritten and decoded batches with."""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.errors import MalformedBatch
from sidecar.wire.record_batch import read_batches
from tests.hypothesis_profiles import examples
from tests.record_batches import TRANSACTIONAL_BIT, NewRecord, decode_batches, encode_batch

LIMIT = 1 << 20

records_strategy = st.lists(
    st.builds(
        NewRecord,
        value=st.none() | st.binary(max_size=300),
        key=st.none() | st.binary(max_size=20),
        headers=st.lists(
            st.tuples(st.text(min_size=1, max_size=8), st.none() | st.binary(max_size=8)),
            max_size=3,
        ),
        timestamp=st.integers(min_value=1_600_000_000_000, max_value=1_900_000_000_000),
    ),
    min_size=1,
    max_size=20,
)


@pytest.mark.parametrize("codec", ["none", "gzip", "lz4", "zstd"])
@settings(max_examples=examples(30), deadline=None)
@given(records=records_strategy)
def test_every_field_of_every_record_comes_back_in_every_codec(
    codec: str, records: list[NewRecord]
) -> None:
    data = encode_batch(records, codec=codec, producer_id=9, producer_epoch=2, base_sequence=40)
    (batch,) = decode_batches(data, LIMIT)
    assert batch.codec == codec
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (9, 2, 40)
    assert batch.last_sequence == 40 + len(records) - 1
    got = [
        (r.value, r.key, [(k.decode(), v) for k, v in r.headers], r.timestamp, r.offset_delta)
        for r in batch.records
    ]
    want = [(r.value, r.key, list(r.headers), r.timestamp, i) for i, r in enumerate(records)]
    assert got == want


def test_several_batches_in_one_partition_are_read_in_order() -> None:
    first = encode_batch([NewRecord(b"a", timestamp=1)])
    second = encode_batch([NewRecord(b"b", timestamp=2), NewRecord(b"c", timestamp=3)])
    batches = decode_batches(first + second, LIMIT)
    assert [[r.value for r in b.records] for b in batches] == [[b"a"], [b"b", b"c"]]
    # The same bytes are what read_batches (segment files) sees: one format, two readers.
    assert [b.records for b in read_batches(first + second)] == [1, 2]


def test_the_transactional_bit_is_reported() -> None:
    data = encode_batch([NewRecord(b"a")], attributes=TRANSACTIONAL_BIT)
    assert decode_batches(data, LIMIT)[0].transactional


def _flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :]


GOOD = encode_batch([NewRecord(b"value" * 20, b"key", [("h", b"1")], 1000)])


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (GOOD[:-1], "truncated"),
        (GOOD[:30], "truncated"),
        (_flip(GOOD, len(GOOD) - 3), "CRC"),
        (GOOD[:16] + b"\x01" + GOOD[17:], "magic 1"),
        (GOOD[:8] + struct.pack(">i", 2**31 - 1) + GOOD[12:], "truncated"),
        (GOOD + b"\x00" * 10, "truncated"),
    ],
    ids=["one-byte-short", "header-only", "bad-crc", "old-magic", "huge-length", "trailing"],
)
def test_malformed_batches_are_refused_naming_the_fault(data: bytes, message: str) -> None:
    with pytest.raises(MalformedBatch, match=message):
        decode_batches(data, LIMIT)


def test_a_record_count_beyond_the_records_is_refused() -> None:
    # Rewrite the count (last header field) and the CRC over it: a consistent batch that lies.
    header = bytearray(GOOD)
    struct.pack_into(">i", header, 57, 2)
    struct.pack_into(">I", header, 17, crc32c(bytes(header[21:])))
    with pytest.raises(MalformedBatch, match=r"truncated|varint"):
        decode_batches(bytes(header), LIMIT)


def test_a_decompression_bomb_is_refused_at_the_limit() -> None:
    bomb = encode_batch([NewRecord(b"\0" * 2_000_000)], codec="zstd")
    assert len(bomb) < 10_000
    with pytest.raises(MalformedBatch, match="more than 1048576 bytes"):
        decode_batches(bomb, LIMIT)


def test_snappy_is_refused_with_what_to_do() -> None:
    data = bytearray(encode_batch([NewRecord(b"a")]))
    struct.pack_into(">h", data, 21, 2)  # codec snappy
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    with pytest.raises(MalformedBatch, match=r"snappy.*compression\.type"):
        decode_batches(bytes(data), LIMIT)


def test_garbage_in_a_compressed_batch_is_refused() -> None:
    data = bytearray(encode_batch([NewRecord(b"abc" * 50)]))
    struct.pack_into(">h", data, 21, 4)  # says zstd, holds plain records
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    with pytest.raises(MalformedBatch, match="zstd data of the batch does not decompress"):
        decode_batches(bytes(data), LIMIT)


@settings(max_examples=examples(300), deadline=None)
@given(data=st.binary(max_size=200))
def test_random_bytes_never_raise_anything_but_malformed_batch(data: bytes) -> None:
    try:
        batches = decode_batches(data, LIMIT)
    except MalformedBatch as exc:
        assert str(exc)
    else:
        assert data == b"" and batches == []
