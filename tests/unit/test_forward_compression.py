"""The proxy's batch codecs: every codec round-trips, what each writes is what Kafka's
readers take (lz4 independent blocks, snappy xerial), decompression stops at its bound whatever
the input declares, and an unknown codec or corrupt data is a `MalformedBatch` with its reason."""

from __future__ import annotations

import struct

import cramjam
import lz4.frame
import pytest
import zstandard

from sidecar.batch_compression import (
    CODEC_IDS,
    XERIAL_HEADER,
    XERIAL_MAGIC,
    Compression,
)
from sidecar.errors import MalformedBatch
from sidecar.wire.record_batch import CODECS

#: lz4 frame header: the FLG byte's block-independence bit.
LZ4_BLOCK_INDEPENDENCE = 0x20


@pytest.fixture
def data(events: list[bytes]) -> bytes:
    return b"".join(events[:2000])


@pytest.mark.parametrize("codec", sorted(CODEC_IDS))
def test_every_codec_round_trips(codec: str, data: bytes) -> None:
    compression = Compression()
    compressed = compression.compress(CODEC_IDS[codec], data)

    assert compression.decompress(CODEC_IDS[codec], compressed, len(data)) == data
    assert compression.decompress(CODEC_IDS[codec], compressed, len(data) - 1) is None
    if codec != "none":
        assert len(compressed) < len(data) // 2


def test_codec_names_are_kafkas() -> None:
    assert CODEC_IDS == {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
    assert {v: k for k, v in CODEC_IDS.items()} == CODECS


def test_lz4_is_written_with_independent_blocks(data: bytes) -> None:
    compressed = Compression().compress(CODEC_IDS["lz4"], data)
    flg = compressed[4]  # after the 4-byte magic number
    assert flg & LZ4_BLOCK_INDEPENDENCE, "Kafka's Java reader refuses linked blocks"


def test_snappy_is_written_in_xerial_framing_and_read_in_both(data: bytes) -> None:
    compression = Compression()
    xerial = compression.compress(CODEC_IDS["snappy"], data)
    raw = bytes(cramjam.snappy.compress_raw(data))

    assert xerial.startswith(XERIAL_HEADER)
    (first_block,) = struct.unpack_from(">i", xerial, len(XERIAL_HEADER))
    assert first_block < 32 * 1024, "32 KiB blocks, as snappy-java writes"
    assert compression.decompress(CODEC_IDS["snappy"], raw, len(data)) == data
    assert compression.decompress(CODEC_IDS["snappy"], xerial, len(data)) == data


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_a_bomb_stops_at_its_bound(codec: str) -> None:
    compression = Compression()
    bomb = compression.compress(CODEC_IDS[codec], b"\0" * (64 << 20))
    assert len(bomb) < 4 << 20

    assert compression.decompress(CODEC_IDS[codec], bomb, 1 << 20) is None


def test_a_raw_snappy_block_declaring_more_than_the_bound_is_not_decompressed() -> None:
    # A raw block is its uncompressed length (a varint), then its elements: one that declares
    # 2^31 bytes and holds none is refused on its declared length alone.
    declared = bytes(cramjam.snappy.compress_raw(b"x" * 100))
    lying = b"\x80\x80\x80\x80\x08" + declared[1:]

    assert Compression().decompress(CODEC_IDS["snappy"], lying, 1 << 20) is None


def test_an_unknown_codec_is_refused_as_such() -> None:
    with pytest.raises(MalformedBatch, match="unknown compression codec 5") as raised:
        Compression().decompress(5, b"data", 100)
    assert raised.value.reason == "codec"
    with pytest.raises(ValueError, match="unknown compression codec 6"):
        Compression().compress(6, b"data")


@pytest.mark.parametrize(
    ("codec", "garbage"),
    [
        ("gzip", b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\xff\xff\xff\xff"),
        ("snappy", b"\x0agarbage"),
        ("snappy", XERIAL_MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x01\x00\x00\x10\x00abc"),
        ("lz4", lz4.frame.compress(b"x" * 1000)[:-9] + b"garbage!!"),
        ("zstd", b"\x28\xb5\x2f\xfdgarbage"),
    ],
)
def test_data_that_does_not_decompress_is_refused_naming_its_codec(
    codec: str, garbage: bytes
) -> None:
    with pytest.raises(MalformedBatch, match=f"{codec} data of a batch does not decompress") as e:
        Compression().decompress(CODEC_IDS[codec], garbage, 1 << 20)
    assert e.value.reason == "format"


@pytest.mark.parametrize("declared", [True, False], ids=["size declared", "size not declared"])
def test_zstd_frames_in_a_row_decompress_whole_whether_or_not_they_declare_their_size(
    declared: bool, data: bytes
) -> None:
    compressor = zstandard.ZstdCompressor(write_content_size=declared)
    half = len(data) // 2
    one = compressor.compress(data)
    two = compressor.compress(data[:half]) + compressor.compress(data[half:])
    compression = Compression()
    for frames in (one, two):
        assert compression.decompress(CODEC_IDS["zstd"], frames, len(data)) == data
        assert compression.decompress(CODEC_IDS["zstd"], frames, len(data) - 1) is None


def test_a_zstd_frame_declaring_more_than_the_bound_is_not_decompressed() -> None:
    frame = zstandard.ZstdCompressor().compress(b"\0" * (8 << 20))
    assert zstandard.frame_content_size(frame) == 8 << 20
    assert Compression().decompress(CODEC_IDS["zstd"], frame, 1 << 20) is None
