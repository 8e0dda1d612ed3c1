"""What records cost as a broker stores them: the bytes of batches of them, each compressed as
a producer compresses it, for the size models of training and the benchmarks.

Pure but for `segment_batches`, which reads a partition's log segments for `bench storage` (and
its integration test) to check these sizes against a real broker. The format itself (the
header's layout, records as bytes, a segment's batches) is `sidecar.wire.record_batch`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

import lz4.frame
import zstandard

from sidecar.wire.record_batch import (
    BATCH_HEADER_BYTES,
    BatchInfo,
    Record,
    read_batches,
    records_section,
)

Compress = Callable[[bytes], bytes]


def batch_bytes(records: Sequence[Record], compress: Compress | None = None) -> int:
    """Bytes of one record batch holding `records`: header plus (compressed) records.

    As librdkafka sends it: a batch that compression would not shrink goes uncompressed
    (rdkafka_msgset_writer.c drops the compressed copy), which matters for batches of one or two
    small records.
    """
    section = records_section(records)
    if compress is None:
        return BATCH_HEADER_BYTES + len(section)
    return BATCH_HEADER_BYTES + min(len(section), len(compress(section)))


def stored_bytes(records: Sequence[Record], fill: int, compress: Compress | None = None) -> int:
    """Bytes of `records` stored in consecutive batches of `fill` records (the last may hold
    fewer), each compressed on its own as a producer does."""
    if fill < 1:
        raise ValueError(f"fill must be at least 1, got {fill}")
    return sum(batch_bytes(records[i : i + fill], compress) for i in range(0, len(records), fill))


def segment_batches(partition_dir: Path) -> list[BatchInfo]:
    """Every record batch in the `.log` segments of one partition directory, oldest first."""
    out: list[BatchInfo] = []
    for segment in sorted(partition_dir.glob("*.log")):
        out.extend(read_batches(segment.read_bytes()))
    return out


#: librdkafka's default `compression.level` (-1) means each codec's default: 3 for zstd.
PRODUCER_ZSTD_LEVEL: Final = 3


def producer_codecs(zstd_level: int = PRODUCER_ZSTD_LEVEL) -> dict[str, Compress]:
    """Batch codecs as librdkafka applies them: zstd at `zstd_level` (default: its default
    level); lz4 frames."""
    return {"zstd": producer_zstd(zstd_level), "lz4": lz4.frame.compress}


def producer_zstd(level: int = PRODUCER_ZSTD_LEVEL) -> Compress:
    """librdkafka's zstd at `compression.level` `level`, byte for byte: a stream whose size is
    not pledged (no content size in the frame header, parameters not fitted to the size), as
    the broker's log segments show it. The one-shot `compress` writes frames about 2 bytes a
    batch larger (1,908 B over 1,024 batches of 4 events). Not thread-safe: one per thread."""
    compressor = zstandard.ZstdCompressor(level=level)

    def compress(data: bytes) -> bytes:
        stream = compressor.compressobj()
        return stream.compress(data) + stream.flush()

    return compress


def crossover(fills: Sequence[int], ours: Sequence[float], theirs: Sequence[float]) -> float | None:
    """The batch fill at which `theirs` (bytes per message) falls to `ours`.

    Linear in log2(fill) between the two measured fills around the crossing; `fills[0]` if
    `theirs` is already no larger there; None if it never gets there within `fills`.
    """
    if not fills or not len(fills) == len(ours) == len(theirs):
        raise ValueError("fills, ours and theirs must be non-empty and of one length")
    gaps = [t - o for o, t in zip(ours, theirs, strict=True)]
    if gaps[0] <= 0:
        return float(fills[0])
    for i in range(1, len(fills)):
        if gaps[i] <= 0:
            lo, hi = math.log2(fills[i - 1]), math.log2(fills[i])
            share = gaps[i - 1] / (gaps[i - 1] - gaps[i])
            return float(2 ** (lo + share * (hi - lo)))
    return None
