"""Kafka's v2 record-batch format as bytes (`sidecar.wire.record_batch`), and the size arithmetic
built on it (`sidecar.record_batch`)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
import zstandard

from sidecar.record_batch import batch_bytes, crossover, segment_batches, stored_bytes
from sidecar.wire.record_batch import (
    BATCH_HEADER_BYTES,
    BatchInfo,
    read_batches,
    record_bytes,
    records_section,
)


def test_a_record_without_key_or_headers_costs_its_value_plus_nine_bytes_of_framing() -> None:
    # length, attributes, timestamp delta, offset delta, key length (-1), value length, headers
    assert record_bytes(b"abc") == b"\x12\x00\x00\x00\x01\x06abc\x00"


def test_a_header_is_framed_with_its_key_and_value_lengths() -> None:
    record = record_bytes(b"v", [("zd", b"32768")], offset_delta=3)
    assert record == b"\x20\x00\x00\x06\x01\x02v\x02\x04zd\x0a32768"
    assert record_bytes(None) == b"\x0c\x00\x00\x00\x01\x01\x00"  # a tombstone: value length -1


def test_batches_add_one_header_each_and_compress_their_records_together() -> None:
    records = [(b'{"event":"viewed","n":%d}' % i, ()) for i in range(10)]
    section = records_section(records[:4])
    assert batch_bytes(records[:4]) == BATCH_HEADER_BYTES + len(section)
    assert stored_bytes(records, 4) == sum(
        batch_bytes(records[i : i + 4]) for i in (0, 4, 8)
    )  # 4 + 4 + 2
    compress = zstandard.ZstdCompressor(level=3).compress
    assert batch_bytes(records[:4], compress) == BATCH_HEADER_BYTES + len(compress(section))
    # single-record batches: every record at offset delta 0
    assert stored_bytes(records, 1) == sum(
        BATCH_HEADER_BYTES + len(record_bytes(v)) for v, _ in records
    )
    with pytest.raises(ValueError, match="fill"):
        stored_bytes(records, 0)


def _batch(base: int, count: int, codec: int, body: bytes) -> bytes:
    length = BATCH_HEADER_BYTES - 12 + len(body)
    header = struct.pack(
        ">qiiBIhiqqqhii", base, length, 0, 2, 0, codec, count - 1, 0, 0, 7, 0, 0, count
    )
    return header + body


def test_segment_batches_are_read_with_their_sizes_record_counts_and_codecs(
    tmp_path: Path,
) -> None:
    first = _batch(0, 3, 0, records_section([(b"a", ()), (b"b", ()), (b"c", ())]))
    second = _batch(3, 2, 4, b"\x28\xb5\x2f\xfd" + b"x" * 20)
    data = first + second + second[:30]  # a batch still being written at the end
    assert list(read_batches(data)) == [
        BatchInfo(0, len(first), 3, "none"),
        BatchInfo(3, len(second), 2, "zstd"),
    ]
    partition = tmp_path / "t-0"
    partition.mkdir()
    (partition / "00000000000000000000.log").write_bytes(first)
    (partition / "00000000000000000003.log").write_bytes(second)
    (partition / "00000000000000000000.index").write_bytes(b"\x00" * 8)
    assert [b.records for b in segment_batches(partition)] == [3, 2]


def test_a_message_set_of_an_older_format_is_refused() -> None:
    old = bytearray(_batch(0, 1, 0, b"x"))
    old[16] = 1  # magic
    with pytest.raises(ValueError, match="magic 1"):
        list(read_batches(bytes(old)))


def test_crossover_interpolates_in_log_fill_between_the_measured_fills() -> None:
    fills = [1, 2, 4, 8]
    ours = [80.0, 80.0, 80.0, 80.0]
    assert crossover(fills, ours, [180.0, 120.0, 80.0, 60.0]) == 4.0
    # 100 B above at 4, 20 B below at 8: the crossing is 5/6 of the way in log2
    assert crossover(fills, ours, [300.0, 200.0, 180.0, 60.0]) == pytest.approx(2 ** (2 + 5 / 6))
    assert crossover(fills, ours, [70.0, 60.0, 50.0, 40.0]) == 1.0
    assert crossover(fills, ours, [300.0, 200.0, 100.0, 90.0]) is None
    with pytest.raises(ValueError, match="must be non-empty"):
        crossover([], [], [])
