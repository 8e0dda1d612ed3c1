"""The output crossover: the batch fill (records per producer batch) from which raw values with
the producer's batch compression store fewer bytes than per-record frames with the same batch
compression. Measured at training per batch codec, with the dictionary as stored, on the newest
held-out values, which its refit leaves out (`crossover_split`): values the stored dictionary has
not seen, as the stream's future will be. Measured on values it was trained on, frames look
better than they will be (a crossover of 46 where later values cross at 10). Stored with the
dictionary (`DictionaryMeta.raw_crossover`) and read by every output path (`codec.output_mode`).

Pure: values and their encoded records in, fills out. Kafka's batches are computed exactly by
`record_batch.stored_bytes` (batch header, record framing, one compressed block per batch).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from sidecar.record_batch import Compress, crossover, producer_codecs
from sidecar.wire.record_batch import BATCH_HEADER_BYTES, Record, records_section

#: Records per batch measured: one record (a low-latency producer) to a saturated producer's
#: batches. Raw values that never win up to the largest are taken to never win.
CROSSOVER_FILLS: Final = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
#: At most this many of the newest held-out values are measured (8 batches at 512 a batch):
#: enough for the figure, and the measurement compresses them twice per fill and codec.
CROSSOVER_VALUES: Final = 4096
#: ... and at most this share of the held-out values: the refit sees the rest.
CROSSOVER_SHARE: Final = 0.5


def crossover_split(heldout: Sequence[bytes]) -> tuple[list[bytes], list[bytes]]:
    """The held-out values split for the crossover: (the older ones, which the refit may see;
    the newest, at most `CROSSOVER_SHARE` of them and `CROSSOVER_VALUES`, which it must not).
    At least one value is measured."""
    count = max(1, min(CROSSOVER_VALUES, int(len(heldout) * CROSSOVER_SHARE)))
    cut = max(0, len(heldout) - count)
    return list(heldout[:cut]), list(heldout[cut:])


def raw_crossovers(
    values: Sequence[bytes],
    frames: Sequence[Record],
    codecs: Mapping[str, Compress] | None = None,
    fills: Sequence[int] = CROSSOVER_FILLS,
    raw_codecs: Mapping[str, Compress] | None = None,
) -> dict[str, float | None]:
    """Per batch codec, the fill from which `values` stored raw take no more bytes than
    `frames` (the same values as the encoder wrote them: value and headers), both compressed
    per batch with that codec (the raw values with `raw_codecs`' where it has one: another
    level); None when frames store fewer bytes at every fill measured.

    Only fills up to the number of values are measured (a larger batch would hold them all):
    at least fill 1. Default codecs: librdkafka's zstd and lz4 (`record_batch.producer_codecs`).

    Raises:
        ValueError: `values` and `frames` differ in length, or are empty.
    """
    if not values or len(values) != len(frames):
        raise ValueError("values and frames must be non-empty and of one length")
    raw: list[Record] = [(v, ()) for v in values]
    measured = [f for f in fills if f <= len(values)] or [1]
    chosen = codecs if codecs is not None else producer_codecs()
    ours: dict[str, list[int]] = {name: [] for name in chosen}
    theirs: dict[str, list[int]] = {name: [] for name in chosen}
    for fill in measured:
        # Each batch's records built once, then compressed with every codec.
        framed, plain = _sections(frames, fill), _sections(raw, fill)
        for name, compress in chosen.items():
            ours[name].append(_stored(framed, compress))
            theirs[name].append(_stored(plain, (raw_codecs or {}).get(name, compress)))
    found: dict[str, float | None] = {}
    for name in chosen:
        at = crossover(measured, ours[name], theirs[name])
        found[name] = None if at is None else round(at, 2)
    return found


def _sections(records: Sequence[Record], fill: int) -> list[bytes]:
    """The records sections of consecutive batches of `fill` records (the last may hold fewer)."""
    return [records_section(records[i : i + fill]) for i in range(0, len(records), fill)]


def _stored(sections: Sequence[bytes], compress: Compress) -> int:
    """Bytes of those batches, each compressed on its own, as `record_batch.batch_bytes` counts
    them (a batch that would not shrink goes uncompressed)."""
    return sum(BATCH_HEADER_BYTES + min(len(s), len(compress(s))) for s in sections)
