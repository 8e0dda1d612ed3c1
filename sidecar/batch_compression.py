"""Kafka's record-batch compression codecs: a batch's records section decompressed within a
bound, and compressed as a producer of the codec writes it. The proxy rewrites batches with it;
the stored-bytes estimates of the relay and the in-process producer compress with it too.

Pure: bytes in, bytes out, no Kafka client and no I/O. Codecs by the value of bits 0-2 of a
batch's attributes (`sidecar.record_batch.CODECS`): none, gzip, snappy, lz4, zstd. Read: gzip,
snappy raw (what librdkafka writes) and xerial-framed (what Java producers write), lz4 frames,
zstd frames (several in a row too). Written: gzip, snappy in xerial framing (Java reads only
that, librdkafka both), lz4 frames of independent blocks (Kafka's Java reader refuses linked
blocks), zstd at the producers' level or the one given (the batch level chosen at training).

Bounds: decompression produces at most `limit` + 1 bytes whatever the input declares (gzip,
lz4 and zstd stop at that output size; a snappy block's declared length is read before the
block is decompressed), so a decompression bomb costs its bound, not its declared size.

The callers map the errors to their own (`batches`: a Produce refusal, `fetched`: a batch sent
as stored): `MalformedBatch` with reason `codec` for an unknown codec, `format` for data that
does not decompress.
"""

from __future__ import annotations

import struct
import zlib
from typing import Final

import cramjam
import lz4.frame
import zstandard

from sidecar.errors import MalformedBatch
from sidecar.record_batch import PRODUCER_ZSTD_LEVEL
from sidecar.wire.record_batch import CODECS

#: Codec ids (bits 0-2 of a batch's attributes) by name.
CODEC_IDS: Final = {name: code for code, name in CODECS.items()}
NONE: Final = 0
GZIP: Final = 1
SNAPPY: Final = 2
LZ4: Final = 3
ZSTD: Final = 4
#: snappy-java's stream framing (what Java producers write): magic, version, compatible version,
#: then blocks of a 4-byte length and a raw snappy block.
XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
XERIAL_HEADER: Final = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
#: Uncompressed bytes per xerial block written (snappy-java's default block size).
XERIAL_BLOCK_BYTES: Final = 32 * 1024
#: Bytes of zstd output read at a time from frames that do not declare their size.
ZSTD_READ_BYTES: Final = 256 * 1024
#: gzip framing only (zlib's window bits: 16 + 15).
_GZIP_WBITS: Final = 31
#: gzip or zlib framing, detected from the header (32 + 15).
_ANY_WBITS: Final = 47
_INT32: Final = struct.Struct(">i")
#: What the libraries raise on data that does not decompress.
_FAILURES: Final = (
    zlib.error,
    zstandard.ZstdError,
    cramjam.DecompressionError,
    RuntimeError,
    ValueError,
)


class Compression:
    """Compresses and decompresses records sections (see module); holds a zstd compressor and
    decompressor, reused across calls, so one instance serves one thread."""

    def __init__(self) -> None:
        #: zstd compressors by level, made on first use.
        self._zstd: dict[int, zstandard.ZstdCompressor] = {}
        self._unzstd = zstandard.ZstdDecompressor()

    def decompress(self, codec: int, data: bytes, limit: int) -> bytes | None:
        """`data` decompressed with `codec`; None when that is more than `limit` bytes (at
        most `limit` + 1 bytes are ever produced).

        Raises:
            MalformedBatch: an unknown codec (reason `codec`), or data that does not
                decompress (reason `format`).
        """
        if codec not in CODECS:
            raise MalformedBatch(
                f"unknown compression codec {codec} in a batch's attributes", "codec"
            )
        try:
            out = self._decompress(codec, data, limit)
        except _FAILURES as exc:
            raise MalformedBatch(
                f"{CODECS[codec]} data of a batch does not decompress: {exc}"
            ) from None
        return None if out is None or len(out) > limit else out

    def _decompress(self, codec: int, data: bytes, limit: int) -> bytes | None:
        if codec == ZSTD:
            return self._unzstd_bounded(data, limit)
        if codec == LZ4:
            lz4_out: bytes = lz4.frame.LZ4FrameDecompressor().decompress(data, max_length=limit + 1)
            return lz4_out
        if codec == GZIP:
            return zlib.decompressobj(wbits=_ANY_WBITS).decompress(data, limit + 1)
        if codec == SNAPPY:
            return _unsnappy(data, limit)
        return data

    def _unzstd_bounded(self, data: bytes, limit: int) -> bytes | None:
        """zstd frames decompressed, at most `limit` + 1 bytes (None: a first frame that
        declares more). One frame that declares its size (librdkafka writes it) is decompressed
        into exactly that many bytes; others are read a chunk at a time, so a small batch never
        costs a buffer of the whole bound."""
        declared = zstandard.frame_content_size(data)
        if declared > limit:
            return None
        if declared >= 0:
            try:
                out: bytes = self._unzstd.decompress(data, allow_extra_data=False)
            except zstandard.ZstdError:
                pass  # frames in a row (or a broken one): read as a stream below
            else:
                return out
        chunks: list[bytes] = []
        produced = 0
        with self._unzstd.stream_reader(data, read_across_frames=True) as reader:
            while produced <= limit:
                chunk: bytes = reader.read(min(ZSTD_READ_BYTES, limit + 1 - produced))
                if not chunk:
                    break
                chunks.append(chunk)
                produced += len(chunk)
        return b"".join(chunks)

    def compress(self, codec: int, data: bytes, level: int = PRODUCER_ZSTD_LEVEL) -> bytes:
        """`data` compressed with `codec` as a producer writes it (see module), zstd at
        `level`; `data` itself for none.

        Raises:
            ValueError: an unknown codec.
        """
        if codec == ZSTD:
            zstd = self._zstd.get(level)
            if zstd is None:
                zstd = self._zstd[level] = zstandard.ZstdCompressor(level=level)
            return zstd.compress(data)
        if codec == LZ4:
            lz4_out: bytes = lz4.frame.compress(data, block_linked=False)
            return lz4_out
        if codec == GZIP:
            compressor = zlib.compressobj(wbits=_GZIP_WBITS)
            return compressor.compress(data) + compressor.flush()
        if codec == SNAPPY:
            return _xerial(data)
        if codec == NONE:
            return data
        raise ValueError(f"unknown compression codec {codec}")


def _unsnappy(data: bytes, limit: int) -> bytes | None:
    """Raw snappy or xerial-framed; None past `limit`: each block's declared length is read
    before it is decompressed, so nothing past the bound is allocated."""
    if not data.startswith(XERIAL_MAGIC):
        return _snappy_block(data, limit)
    out: list[bytes] = []
    produced = 0
    pos = len(XERIAL_HEADER)
    while pos < len(data):
        if pos + _INT32.size > len(data):
            raise ValueError("a snappy block length is truncated")
        (length,) = _INT32.unpack_from(data, pos)
        pos += _INT32.size
        if length < 0 or pos + length > len(data):
            raise ValueError(f"a snappy block of {length} bytes runs past the batch")
        block = _snappy_block(data[pos : pos + length], limit - produced)
        if block is None:
            return None
        produced += len(block)
        out.append(block)
        pos += length
    return b"".join(out)


def _snappy_block(block: bytes, limit: int) -> bytes | None:
    if int(cramjam.snappy.decompress_raw_len(block)) > limit:
        return None
    return bytes(cramjam.snappy.decompress_raw(block))


def _xerial(data: bytes) -> bytes:
    blocks = [XERIAL_HEADER]
    for start in range(0, len(data), XERIAL_BLOCK_BYTES):
        block = bytes(cramjam.snappy.compress_raw(data[start : start + XERIAL_BLOCK_BYTES]))
        blocks.append(_INT32.pack(len(block)) + block)
    return b"".join(blocks)
