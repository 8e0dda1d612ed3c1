""" "What would I save on my data": the offline report of `zdict-sidecar evaluate`.

Pure: values in, numbers out. Trains on the first part of a stream and measures on the rest, next
to what a user would pick instead — per-message zstd without a dictionary, batch compression the
way a producer batches records, and the whole-stream oracle — plus the frame-option costs.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import zstandard

from sidecar.codec import Decoder, Encoder, FrameOptions, StaticResolver
from sidecar.dictionaries.model import Dictionary
from sidecar.dictionaries.training import (
    TrainingParams,
    TrainingReport,
    TrainingSet,
    candidate_dictionary,
    train,
)
from sidecar.runtime import tune_gc

BATCH_SIZES: Final = (1, 8, 64, 512)


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the report: an alternative and its bytes on the same held-out values."""

    method: str
    output_bytes: int
    raw_bytes: int
    note: str = ""

    @property
    def ratio(self) -> float:
        return self.raw_bytes / self.output_bytes if self.output_bytes else 1.0


@dataclass(slots=True)
class Evaluation:
    """The whole offline report."""

    training: TrainingReport
    rows: list[Row] = field(default_factory=list)
    frame_rows: list[Row] = field(default_factory=list)
    encode_ns: tuple[float, float, float] = (0.0, 0.0, 0.0)  # median, min, max per message
    decode_ns: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def to_dict(self) -> dict[str, Any]:
        def rows(items: list[Row]) -> list[dict[str, Any]]:
            return [
                {
                    "method": r.method,
                    "raw_bytes": r.raw_bytes,
                    "output_bytes": r.output_bytes,
                    "ratio": round(r.ratio, 4),
                    "note": r.note,
                }
                for r in items
            ]

        return {
            "training": self.training.to_dict(),
            "alternatives": rows(self.rows),
            "frame_options": rows(self.frame_rows),
            "encode_ns_per_message": dict(
                zip(("median", "min", "max"), self.encode_ns, strict=True)
            ),
            "decode_ns_per_message": dict(
                zip(("median", "min", "max"), self.decode_ns, strict=True)
            ),
        }


def batch_bytes(values: Sequence[bytes], batch: int, level: int = 3) -> int:
    """Bytes when every `batch` consecutive values are compressed together (one zstd frame each).

    This is what producer-side `compression.type=zstd` does to a record batch's values, without
    Kafka's per-record framing (which `bench storage` measures on a real broker).
    """
    compressor = zstandard.ZstdCompressor(level=level)
    total = 0
    for start in range(0, len(values), batch):
        chunk = values[start : start + batch]
        total += len(compressor.compress(b"".join(chunk)))
    return total


def _frame_variants() -> list[tuple[str, FrameOptions, str]]:
    return [
        ("default: content size + dict id, no checksum", FrameOptions(), "chosen"),
        ("+ checksum", FrameOptions(checksum=True), "Kafka batches carry a CRC already"),
        ("- dict id", FrameOptions(dict_id=False), "loses header/dictionary mismatch detection"),
        ("- content size", FrameOptions(content_size=False), "decoder cannot size output first"),
    ]


def _magicless_bytes(dictionary: Dictionary, level: int, values: Sequence[bytes]) -> int:
    params = zstandard.ZstdCompressionParameters.from_level(
        level, format=zstandard.FORMAT_ZSTD1_MAGICLESS, write_checksum=0, write_dict_id=1
    )
    compressor = zstandard.ZstdCompressor(
        compression_params=params,
        dict_data=zstandard.ZstdCompressionDict(
            dictionary.data, dict_type=zstandard.DICT_TYPE_FULLDICT
        ),
    )
    return sum(len(compressor.compress(v)) for v in values)


def _timed(fn: Any, runs: int, count: int) -> tuple[float, float, float]:
    """ns per item of `fn()`: one warm-up discarded, then `runs` runs; (median, min, max)."""
    timings = []
    with tune_gc():  # as the relay runs
        for run in range(runs + 1):
            start = time.perf_counter_ns()
            fn()
            if run:
                timings.append((time.perf_counter_ns() - start) / max(1, count))
    return statistics.median(timings), min(timings), max(timings)


def evaluate(
    samples: TrainingSet, params: TrainingParams, namespace: str = "evaluate"
) -> Evaluation:
    """Train on `samples.train`, then compare every alternative on `samples.heldout`."""
    report = train(samples, params, namespace=namespace)
    evaluation = Evaluation(training=report)
    heldout = samples.heldout
    raw = samples.heldout_bytes
    if report.chosen is None or report.dictionary is None or report.nodict is None:
        return evaluation
    chosen = report.chosen
    dictionary = candidate_dictionary(report.dictionary, chosen.level, namespace)
    evaluation.rows.append(
        Row(
            f"per message, dictionary {chosen.dict_bytes // 1024} KiB, level {chosen.level}",
            chosen.output_bytes,
            raw,
            "header bytes counted; values that would grow pass through",
        )
    )
    evaluation.rows.append(
        Row("per message, no dictionary (level 3)", report.nodict.output_bytes, raw, "same rules")
    )
    for batch in BATCH_SIZES:
        evaluation.rows.append(
            Row(
                f"batches of {batch}, zstd level 3, no dictionary",
                batch_bytes(heldout, batch),
                raw,
                "like producer compression.type=zstd; record framing not counted",
            )
        )
    stream = b"".join(heldout)
    for level in (3, 19):
        evaluation.rows.append(
            Row(
                f"whole stream, one frame, level {level}",
                len(zstandard.ZstdCompressor(level=level).compress(stream)),
                raw,
                "oracle: no per-record access",
            )
        )

    for label, options, note in _frame_variants():
        encoder = Encoder(dictionary, level=chosen.level, frame=options)
        frames = sum(len(encoder.compress(v)) for v in heldout)
        evaluation.frame_rows.append(Row(label, frames, raw, note))
    evaluation.frame_rows.append(
        Row(
            "magicless frame (-4 B)",
            _magicless_bytes(dictionary, chosen.level, heldout),
            raw,
            "not decodable by the zstd CLI or a decoder not told so",
        )
    )

    encoder = Encoder(dictionary, level=chosen.level, frame=params.frame)
    records = [(v, None) for v in heldout]
    encoded = encoder.encode_batch(records)
    evaluation.encode_ns = _timed(
        lambda: encoder.encode_batch(records), params.timing_runs, len(records)
    )
    decoder = Decoder(StaticResolver([dictionary]))
    pairs = [(e.value, e.headers) for e in encoded]
    evaluation.decode_ns = _timed(
        lambda: [decoder.decode(v, h) for v, h in pairs], params.timing_runs, len(pairs)
    )
    return evaluation
