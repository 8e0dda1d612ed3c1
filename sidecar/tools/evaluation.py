""" "What would I save on my data": the offline report of `zdict-sidecar evaluate`.

Pure: values in, numbers out. Chooses a dictionary on the first part of a stream as `train`
does (its newest slice held out, then refit) and measures it on the rest, which the choice never
saw, next to what a user would pick instead: per record without a dictionary, producer batch
compression at 1 to 512 records per batch (as Kafka stores batches, exactly: `record_batch`),
and the whole-stream oracle; then whether compressing pays on a given link (the transport
break-even). At each fill, what the sidecar stores with the producer's zstd at the batch level
training chose (frames below the dictionary's crossover, raw values from it, as its output mode
writes them) against what the producer's zstd alone stores at its default level: the one
definition of saving.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Final

import zstandard

from sidecar.codec import Decoder, Encoder, StaticResolver, Transformed, WireFormat
from sidecar.record_batch import (
    PRODUCER_ZSTD_LEVEL,
    crossover,
    producer_codecs,
    producer_zstd,
    stored_bytes,
)
from sidecar.runtime import tune_gc
from sidecar.training.choice import TrainingReport, candidate_dictionary, measure, train
from sidecar.training.params import TrainingParams
from sidecar.training.split import TrainingSet
from sidecar.wire.record_batch import Record

#: Records per producer batch compared (1: a low-latency producer; 512: a saturated one).
FILLS: Final = (1, 2, 4, 8, 16, 32, 64, 128, 512)
#: The stored-bytes columns: raw values with the producer's codec (zstd at its default level,
#: then at the batch level training chose), the encoder's frames without and with producer zstd
#: (at the batch level), and the sidecar as its output mode writes with producer zstd.
RAW_ZSTD: Final = "raw zstd"
RAW_ZSTD_LEVEL: Final = "raw zstd, batch level"
FRAMES: Final = "per record"
FRAMES_ZSTD: Final = "per record + zstd"
SIDECAR_ZSTD: Final = "sidecar + zstd"


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


@dataclass(frozen=True, slots=True)
class StoredRow:
    """Bytes per record as Kafka stores them (batch header and record framing counted) at one
    fill, per variant: `raw <codec>` is the input produced with producer compression (`raw
    zstd` at its default level, `raw zstd, batch level` at the one training chose); `per
    record` the encoder's records (compact frames) without, then with, producer zstd at the
    batch level; `sidecar + zstd` what the sidecar stores with producer zstd at the batch level
    (frames below the crossover, raw values from it)."""

    fill: int
    bytes_per_record: dict[str, float]

    @property
    def versus_producer(self) -> float:
        """The sidecar's stored bytes over producer zstd's alone, at its default level, at this
        fill (below 1: saved)."""
        return self.bytes_per_record[SIDECAR_ZSTD] / self.bytes_per_record[RAW_ZSTD]


@dataclass(frozen=True, slots=True)
class Transport:
    """Whether compressing pays on a link: V, r and the break-even bandwidth B*.

    Sending a value raw takes size/B; compressing it first takes size/V + size/(r·B). That is
    faster below B* = V·(r−1)/r.
    """

    encode_mb_per_s: float  # V: input MB encoded per second on one core
    ratio: float  # r: input bytes / output bytes (header counted)

    @property
    def break_even_mb_per_s(self) -> float:
        """B*: below this link bandwidth, compress-then-send beats sending raw."""
        return self.encode_mb_per_s * (self.ratio - 1) / self.ratio if self.ratio > 1 else 0.0

    @property
    def cpu_seconds_per_gb_saved(self) -> float | None:
        """CPU seconds spent for each GB (10^9 bytes) not stored or sent; None: nothing saved."""
        saved_per_input_byte = 1 - 1 / self.ratio if self.ratio > 1 else 0.0
        if not saved_per_input_byte or not self.encode_mb_per_s:
            return None
        return 1e9 / (self.encode_mb_per_s * 1e6 * saved_per_input_byte)


@dataclass(slots=True)
class Evaluation:
    """The whole offline report."""

    training: TrainingReport
    #: Values the alternatives are measured on (the stream after what the choice saw).
    measured: int = 0
    #: The zstd level of the sidecar's producer batches: the one training chose.
    batch_level: int = PRODUCER_ZSTD_LEVEL
    rows: list[Row] = field(default_factory=list)
    stored: list[StoredRow] = field(default_factory=list)
    #: Fill from which each alternative stores no more than the encoder's records (None: never
    #: within FILLS): `raw zstd` against frames with producer zstd is the output mode's
    #: crossover on these later values, next to the dictionary's (`training.raw_crossover`).
    crossovers: dict[str, float | None] = field(default_factory=dict)
    transport: Transport | None = None
    encode_ns: tuple[float, float, float] = (0.0, 0.0, 0.0)  # median, min, max per message
    decode_ns: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def to_dict(self) -> dict[str, Any]:
        transport = None
        if self.transport is not None:
            transport = asdict(self.transport) | {
                "break_even_mb_per_s": self.transport.break_even_mb_per_s,
                "cpu_seconds_per_gb_saved": self.transport.cpu_seconds_per_gb_saved,
            }
        return {
            "training": self.training.to_dict(),
            "measured": self.measured,
            "batch_level": self.batch_level,
            "alternatives": [
                {
                    "method": r.method,
                    "raw_bytes": r.raw_bytes,
                    "output_bytes": r.output_bytes,
                    "ratio": round(r.ratio, 4),
                    "note": r.note,
                }
                for r in self.rows
            ],
            "stored_bytes_per_record": [
                asdict(s) | {"sidecar_versus_producer_zstd": round(s.versus_producer, 4)}
                for s in self.stored
            ],
            "crossovers": self.crossovers,
            "transport": transport,
            "encode_ns_per_message": dict(
                zip(("median", "min", "max"), self.encode_ns, strict=True)
            ),
            "decode_ns_per_message": dict(
                zip(("median", "min", "max"), self.decode_ns, strict=True)
            ),
        }


def _timed(fn: Callable[[], object], runs: int, count: int) -> tuple[float, float, float]:
    """CPU ns per item of `fn()`: one warm-up discarded, then `runs` runs; (median, min, max)."""
    timings = []
    with tune_gc():  # as the relay runs
        for run in range(runs + 1):
            start = time.thread_time_ns()
            fn()
            if run:
                timings.append((time.thread_time_ns() - start) / max(1, count))
    return statistics.median(timings), min(timings), max(timings)


def _records(encoded: Sequence[Transformed]) -> list[Record]:
    return [(e.value, e.headers) for e in encoded]


def stored_rows(
    heldout: Sequence[bytes],
    encoded: Sequence[Transformed],
    crossover_at: float | None,
    fills: Sequence[int] = FILLS,
    level: int = PRODUCER_ZSTD_LEVEL,
) -> tuple[list[StoredRow], dict[str, float | None]]:
    """Bytes per record stored at each fill, the sidecar's with producer zstd at batch level
    `level` by the dictionary's zstd crossover `crossover_at` (None: frames at every fill), and
    the crossovers on these values: raw values with each producer codec against the encoder's
    records without a batch codec, and raw zstd against them with zstd, both at `level` (the
    output mode's)."""
    codecs = producer_codecs()
    at_level = producer_zstd(level)
    raw: list[Record] = [(v, ()) for v in heldout]
    ours = _records(encoded)
    n = max(1, len(heldout))
    rows: list[StoredRow] = []
    for fill in fills:
        per: dict[str, float] = {"raw none": stored_bytes(raw, fill) / n}
        for name, compress in codecs.items():
            per[f"raw {name}"] = stored_bytes(raw, fill, compress) / n
        per[RAW_ZSTD_LEVEL] = stored_bytes(raw, fill, at_level) / n
        per[FRAMES] = stored_bytes(ours, fill) / n
        per[FRAMES_ZSTD] = stored_bytes(ours, fill, at_level) / n
        goes_raw = crossover_at is not None and fill >= crossover_at
        per[SIDECAR_ZSTD] = per[RAW_ZSTD_LEVEL] if goes_raw else per[FRAMES_ZSTD]
        rows.append(StoredRow(fill, per))
    crossings: dict[str, float | None] = {}
    for name in [f"raw {c}" for c in codecs]:
        crossings[f"{name} / {FRAMES}"] = _crossing(rows, FRAMES, name)
    crossings[f"{RAW_ZSTD_LEVEL} / {FRAMES_ZSTD}"] = _crossing(rows, FRAMES_ZSTD, RAW_ZSTD_LEVEL)
    return rows, crossings


def _crossing(rows: Sequence[StoredRow], ours: str, theirs: str) -> float | None:
    return crossover(
        [r.fill for r in rows],
        [r.bytes_per_record[ours] for r in rows],
        [r.bytes_per_record[theirs] for r in rows],
    )


def evaluate(
    chosen_on: TrainingSet,
    heldout: list[bytes],
    params: TrainingParams,
    namespace: str = "evaluate",
) -> Evaluation:
    """Choose as `train` does on `chosen_on`, then compare every alternative on `heldout`: the
    values that follow them in the stream, which neither the choice nor the refit saw."""
    report = train(chosen_on, params, namespace=namespace)
    evaluation = Evaluation(training=report, measured=len(heldout))
    raw = sum(map(len, heldout))
    if report.chosen is None or report.dictionary is None or report.nodict is None:
        return evaluation
    chosen = report.chosen
    dictionary = candidate_dictionary(report.dictionary, chosen.level, namespace)

    def encoder(wire: WireFormat) -> Encoder:
        return Encoder(
            dictionary,
            level=chosen.level,
            min_size=report.break_even_size,
            frame=params.frame,
            wire=wire,
            header_key=params.header_key,
        )

    records: list[tuple[bytes | None, None]] = [(v, None) for v in heldout]
    by_wire = {wire: encoder(wire).encode_batch(records) for wire in ("compact", "standard")}
    size = f"dictionary {chosen.dict_bytes // 1024} KiB, level {chosen.level}"
    for wire, encoded in by_wire.items():
        evaluation.rows.append(
            Row(
                f"per record, {wire} frames, {size}",
                sum(e.output_bytes for e in encoded),
                raw,
                "value + header; values that would grow pass through",
            )
        )
    # On the same later values as every other row (the training's is on its held-out part).
    nodict = measure("no dictionary", None, 3, heldout, params)
    evaluation.rows.append(
        Row("per record, no dictionary (level 3)", nodict.output_bytes, raw, "same rules")
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
    chosen_wire: WireFormat = params.wire
    # Measured at training at the batch level it chose, as the producer will compress.
    crossover_at = (report.raw_crossover or {}).get("zstd")
    if report.batch_level is not None:
        evaluation.batch_level = report.batch_level.level
    evaluation.stored, evaluation.crossovers = stored_rows(
        heldout, by_wire[chosen_wire], crossover_at, level=evaluation.batch_level
    )

    timed = encoder(chosen_wire)
    evaluation.encode_ns = _timed(
        lambda: timed.encode_batch(records), params.timing_runs, len(records)
    )
    mean_bytes = raw / max(1, len(heldout))
    ns_per_record = evaluation.encode_ns[1]  # the fastest run: the machine's own speed
    out = sum(e.output_bytes for e in by_wire[chosen_wire])
    evaluation.transport = Transport(
        encode_mb_per_s=mean_bytes / ns_per_record * 1e3 if ns_per_record else 0.0,
        ratio=raw / out if out else 1.0,
    )
    decoder = Decoder(StaticResolver([dictionary]), header_key=params.header_key)
    pairs = [(e.value, e.headers) for e in by_wire[chosen_wire]]
    evaluation.decode_ns = _timed(
        lambda: [decoder.decode(v, h) for v, h in pairs], params.timing_runs, len(pairs)
    )
    return evaluation
